//! `napilab map [--trace]`.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Result;
use napilab_core::trace::TraceInterval;
use napilab_core::{Notice, ObservedPolling, TopologyMap};
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

/// Adds the traced polls to the NAPI instances of the map. Instances seen by the trace
/// but absent from the map belong to other network namespaces (tracepoints are
/// host-wide); a notice counts them.
fn attach_polling(topology: &mut TopologyMap, trace: &TraceInterval, notices: &mut Vec<Notice>) {
    let mut elsewhere = std::collections::BTreeSet::new();
    for row in &trace.napi {
        let napi = topology
            .devices
            .iter_mut()
            .flat_map(|d| d.napis.iter_mut())
            .find(|n| n.id == row.napi_id);
        let Some(napi) = napi else {
            elsewhere.insert((row.device.clone(), row.napi_id));
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
            .map(|(dev, id)| format!("{dev}/{id}"))
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
