//! `napilab map [--trace]`.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Result;
use napilab_core::trace::NapiPollTrace;
use napilab_core::trace::TraceInterval;
use napilab_core::{Napi, Notice, ObservedPolling, Poller, TopologyMap};
use napilab_probe::observe::describe_host;

use crate::render;

pub struct Options {
    pub json: bool,
    pub root: Option<PathBuf>,
    /// Watch the NAPI polls for this long and show who polled each instance.
    pub trace: Option<Duration>,
}

pub fn run(options: &Options) -> Result<()> {
    let root = options.root.clone().unwrap_or_else(|| PathBuf::from("/"));
    let mut header = describe_host(&root, options.root.is_none());
    if let Some(window) = options.trace {
        match watch_polls(&header.host.cpus, window) {
            Ok(trace) => attach_polling(&mut header.topology, &trace, &mut header.notices),
            Err(why) => header.notices.push(Notice {
                what: "who polls each NAPI instance (--trace)".into(),
                why: format!("{why}; the map shows the configured pollers only"),
            }),
        }
    }
    if options.json {
        let out = serde_json::json!({
            "schema": "napilab.map/1",
            "host": header.host,
            "settings": header.settings,
            "topology": header.topology,
            "notices": header.notices,
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        print!(
            "{}",
            render::map(&header.topology, &header.host, &header.settings)
        );
        print!("{}", render::notices(&header.notices));
    }
    Ok(())
}

/// Runs the always-on trace tier for `window` and returns what it saw.
fn watch_polls(cpus: &[u32], window: Duration) -> Result<TraceInterval, String> {
    let tracer = napilab_trace::AlwaysOn::start(&napilab_trace::TraceOptions::default())
        .map_err(|e| e.to_string())?;
    let first = tracer.snapshot(cpus);
    let started = Instant::now();
    std::thread::sleep(window);
    let last = tracer.snapshot(cpus);
    Ok(napilab_trace::trace_interval(
        &first,
        &last,
        started.elapsed().as_secs_f64(),
    ))
}

/// Where polls of a device's instances without a NAPI id go (TUN with `IFF_NAPI`,
/// TX-only NAPIs): the trace tier tells them apart only by device, so they are shown
/// together, in one entry (id 0, polled by NET_RX softirq) added to the device, beside
/// any id-less instances the map found from their kthreads. None when the device (name
/// and ifindex, in this namespace) is not in this namespace's map.
fn id_less_instances<'a>(
    topology: &'a mut TopologyMap,
    row: &NapiPollTrace,
) -> Option<&'a mut Napi> {
    if napilab_core::device_join::is_elsewhere(topology.netns, row.netns) {
        return None;
    }
    let device = topology
        .devices
        .iter_mut()
        .find(|d| d.ifindex == row.ifindex && d.name == row.device)?;
    let is_aggregate = |n: &Napi| n.id == 0 && matches!(n.poller, Poller::Softirq { .. });
    if !device.napis.iter().any(is_aggregate) {
        device.napis.push(Napi {
            id: 0,
            ifindex: device.ifindex,
            poller: Poller::Softirq {
                cpus: Vec::new(),
                how: format!(
                    "instances of {} without a NAPI id, seen by the trace tier by device name \
                     and shown together (it cannot tell them apart); polled on whichever \
                     CPU schedules them, or by their napi/{}-0 kthreads when threaded",
                    device.name, device.name
                ),
            },
            ..Napi::default()
        });
    }
    device.napis.iter_mut().find(|n| is_aggregate(n))
}

/// Adds the traced polls to the NAPI instances of the map. Instances seen by the trace
/// but absent from the map belong to other network namespaces (tracepoints are
/// host-wide); a notice counts them.
fn attach_polling(topology: &mut TopologyMap, trace: &TraceInterval, notices: &mut Vec<Notice>) {
    let mut elsewhere = std::collections::BTreeSet::new();
    for row in &trace.napi {
        let napi = if row.napi_id == 0 && row.ifindex != 0 {
            id_less_instances(topology, row)
        } else {
            topology
                .devices
                .iter_mut()
                .flat_map(|d| d.napis.iter_mut())
                .find(|n| n.id == row.napi_id)
        };
        let Some(napi) = napi else {
            elsewhere.insert((row.device.clone(), row.napi_id, row.netns));
            continue;
        };
        napi.observed_polling.push(ObservedPolling {
            context: row.context,
            cpu: row.cpu,
            application: row.application.clone(),
            polls_per_s: row.polls_per_s.clone(),
            packets_per_s: row.packets_per_s.clone(),
        });
    }
    for napi in topology.devices.iter_mut().flat_map(|d| d.napis.iter_mut()) {
        napi.observed_polling.sort_by(|a, b| {
            b.polls_per_s
                .value
                .total_cmp(&a.polls_per_s.value)
                .then(a.cpu.cmp(&b.cpu))
        });
    }
    if !elsewhere.is_empty() {
        let names: Vec<String> = elsewhere
            .iter()
            .map(|(dev, id, netns)| match netns {
                0 => format!("{dev}/{id}"),
                netns => format!("{dev}/{id} (netns {netns})"),
            })
            .collect();
        notices.push(Notice {
            what: "NAPI instances of other network namespaces".into(),
            why: format!(
                "the trace saw polls of {} instance(s) outside this namespace's map: {}",
                names.len(),
                names.join(", ")
            ),
        });
    }
    // A window with no polls at all says nothing about contexts: say so.
    if trace.napi.iter().all(|r| r.polls == 0) {
        notices.push(Notice {
            what: "who polls each NAPI instance (--trace)".into(),
            why: "no NAPI instance was polled during the window: run it while traffic flows, or longer (--for)".into(),
        });
    }
}
