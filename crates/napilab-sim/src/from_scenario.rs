//! Lab scenarios on the twin: maps a parsed lab [`Scenario`] (and each of its
//! configurations) onto [`SimConfig`] values, so `napilab sim run SCENARIO` predicts what
//! `napilab lab run SCENARIO` measures (docs/sim.md, "Lab scenarios and the veth-lab
//! profile").
//!
//! The lab's DUT is a veth router, not a NIC. What differs and how it is mapped:
//! - veth has no IRQ: the sender's `veth_xmit` schedules the peer's NAPI instance. The
//!   twin's RX "IRQ" stands for that notification; the veth-lab profile gives it the
//!   fitted costs and delay of the poller's wake-up. In softirq mode the poll runs in
//!   the NET_RX softirq of the sending CPU, so the queue's CPU is the generator's CPU;
//!   in threaded mode it is the NAPI kthread's CPU (`napi_cpus`).
//! - The RX ring is veth's fixed 256-entry `ptr_ring` per RX queue ([`VETH_RING`]); its
//!   overflow is the lab's `<gen> tx_dropped`. No coalescing (`rx-usecs`) exists.
//! - No TX completions: veth frees the skb when it hands it to the peer. The twin always
//!   has a completion path, so the mapping gives the egress a TX ring larger than every
//!   packet of a point and a completion timer past the end of the run: no
//!   TX-completion IRQ, poll or reclaim ever runs (an approximation; a real
//!   `completion = "none"` would be cleaner, see the report).
//! - The link has no rate (veth is as fast as the CPUs): 1 Tbit/s. Shaping qdiscs
//!   (`tbf`, `htb`) become the link rate with a FIFO of the qdisc's limit in front.
//! - The generator and the sink are threads on the same CPUs as the DUT. The twin has
//!   no thread for them; [`TwinConfiguration::engines_on_poller`] says which of them
//!   shares the CPU of the DUT's poller, and [`TwinConfiguration::profile_for`] adds
//!   their per-packet cost (from a lab profile's `[testbed]`) to that poller's work,
//!   since on a shared CPU every packet costs the poller's CPU the engines' work too.
//!
//! Settings the twin cannot represent are never dropped silently: each one becomes a
//! [`Notice`] on the plan or on its configuration.

use napilab_core::scenario::{
    ApDirection, Backend, DutSettings, NapiContext as LabNapi, Pattern as LabPattern, QdiscKind,
    Scenario, TopologyKind, TraceTier, TwinNapi,
};

use crate::config::{
    ClassConfig, EgressConfig, MeasurementConfig, NapiContext, Pattern, QdiscKind as TwinQdisc,
    RxQueueConfig, ThreadPolicy, TrafficConfig,
};
use crate::twin_plan::{notice, BUSY_POLL_KERNEL};
// One configuration's sweep and search run through the experiment layer's loop.
pub use crate::twin_plan::{
    passes, run_serial, EnginesOnPoller, Testbed, TwinConfiguration, TwinPlan, ETH_HEADER, LAB_HZ,
    LAB_KERNEL, MAX_BACKLOG, VETH_LINK_MBPS, VETH_RING, VETH_WEIGHT,
};
pub use crate::twin_testbed::run_configuration;
use crate::{ConfigError, SimConfig};
use napilab_core::Notice;

/// Maps `scenario` (already validated by `napilab_core::scenario::parse`). `file` names
/// it in errors. The twin host gets as many CPUs as the scenario names (at least 2, the
/// lab machine's count, so one-CPU and two-CPU configurations show the same CPUs).
pub fn plan(scenario: &Scenario, file: &str) -> Result<TwinPlan, ConfigError> {
    let s = scenario;
    if s.topology.kind == TopologyKind::Vpn {
        return Err(ConfigError::new(
            file,
            "topology.kind",
            "the twin does not map the lab's vpn scenario yet: its WireGuard pipeline has twin configurations of its own (docs/sim.md); run this scenario in the lab (napilab lab run)",
        ));
    }
    if s.topology.kind == TopologyKind::ManyNapi {
        return Err(ConfigError::new(
            file,
            "topology.kind",
            "the twin does not map the lab's many-napi scenario: its many NAPI instances are twin configurations of their own (docs/sim.md, the WireGuard configurations); run this scenario in the lab (napilab lab run)",
        ));
    }
    if s.topology.kind == TopologyKind::Server {
        return crate::from_server_scenario::plan(s, file);
    }
    let m = &s.measurement;
    let mut notices = Vec::new();
    let loads = s.loads();
    if s.traffic.backend == Backend::Paced {
        notices.push(notice(
            "traffic.backend = \"paced\"",
            "the twin's traffic is ideal: it always offers the requested load, while the lab's paced UDP generator can fall behind (in softirq mode the DUT's poll runs inside its sendmmsg calls, docs/lab.md); the twin does not predict generator-limited maxima",
        ));
    } else {
        notices.push(notice(
            "traffic.backend = \"line-rate\"",
            "the twin's traffic is ideal at any rate; the generator's own CPU use is taken from the profile's [testbed] like the paced generator's",
        ));
    }
    if m.search_backend.is_some_and(|b| b != s.traffic.backend) {
        notices.push(notice(
            "measurement.search_backend",
            "the twin's traffic is the same ideal source for the sweep and the search; the lab's switch of engine for the search has no counterpart",
        ));
    }
    if m.trace != TraceTier::Off {
        notices.push(notice(
            "measurement.trace",
            format!("{:?}: the twin does not simulate the trace tier's cost; its Observation always carries the model's own poll and softirq figures", m.trace).to_lowercase(),
        ));
    }
    if m.drain_ms != 200 {
        notices.push(notice(
            "measurement.drain_ms",
            "the twin counts a packet in the window it arrived in and runs 5 ms past the window for packets in flight; drain_ms has no effect",
        ));
    }
    let configs = s.configurations();
    let referenced = configs
        .iter()
        .flat_map(|c| {
            let r = &c.settings;
            r.napi_cpus
                .iter()
                .chain(&r.rps_cpus)
                .chain(&r.generator_cpus)
                .chain(&r.sink_cpus)
                .copied()
                .collect::<Vec<_>>()
        })
        .max()
        .unwrap_or(0);
    let cpus = (referenced + 1).max(2);
    let packets_per_point = {
        let top = loads
            .iter()
            .copied()
            .chain(m.search_max_pps.filter(|_| m.search))
            .fold(0.0, f64::max);
        // Every packet of a point stays "in flight" on the egress (no TX completion):
        // the ring must hold them all.
        (top * (m.warmup_s + m.duration_s + 0.1)).ceil() as u64 + 4096
    };
    let tx_ring = u32::try_from(packets_per_point).map_err(|_| {
        ConfigError::new(
            file,
            "measurement.duration_s",
            "too many packets per point for the twin's veth egress (more than 4 billion): shorten the window or lower the loads",
        )
    })?;
    let mut out = Vec::new();
    for c in &configs {
        out.push(map_configuration(
            s,
            c,
            cpus,
            tx_ring,
            loads
                .first()
                .copied()
                .unwrap_or(crate::twin_plan::UNSET_RATE_PPS),
            file,
        )?);
    }
    Ok(TwinPlan {
        name: s.name.clone(),
        loads,
        load_fractions: s.load_fractions(),
        seeds: (0..m.repeats.max(1))
            .map(|r| s.traffic.seed.wrapping_add(u64::from(r)))
            .collect(),
        loss_threshold: m.loss_threshold,
        search: m.search.then(|| m.clone()),
        configurations: out,
        notices,
        requests: None,
    })
}

fn map_configuration(
    s: &Scenario,
    c: &napilab_core::scenario::Configuration,
    cpus: u32,
    tx_ring: u32,
    rate: f64,
    file: &str,
) -> Result<TwinConfiguration, ConfigError> {
    let (name, r) = (c.name.as_str(), &c.settings);
    let mut notices = Vec::new();
    if let Some(why) = &c.twin_only {
        notices.push(notice("twin only", why.clone()));
    }
    let gen_cpu = |q: usize| generator_cpu(r, q);
    let napi = match (r.gro, c.twin.napi, r.napi) {
        (true, Some(TwinNapi::ThreadedBusyPoll), _) => NapiContext::ThreadedBusyPoll,
        (true, Some(TwinNapi::Threaded), _) | (true, None, LabNapi::Threaded) => {
            NapiContext::Threaded
        }
        _ => NapiContext::Softirq,
    };
    if let Some(t) = c.twin.napi.filter(|t| {
        !matches!(
            t,
            TwinNapi::ThreadedBusyPoll | TwinNapi::Threaded | TwinNapi::Softirq
        ) || !r.gro
    }) {
        notices.push(notice(
            format!("twin.napi = \"{}\"", t.as_str()),
            "not mapped onto the veth lab: the lab's veth polls with NAPI only with GRO on, and the twin maps a veth queue only to softirq, threaded or threaded busy polling",
        ));
    }
    let kernel = if napi == NapiContext::ThreadedBusyPoll {
        notices.push(notice(
            "threaded busy polling",
            format!("a Linux 6.19 feature: the twin runs this configuration as on {BUSY_POLL_KERNEL} (napi_cpus place the kthread as for threaded NAPI); the lab's {LAB_KERNEL} kernel has no threaded=busy-poll"),
        ));
        BUSY_POLL_KERNEL
    } else {
        LAB_KERNEL
    };
    if !r.gro {
        notices.push(notice(
            "gro = false",
            format!("without GRO veth hands frames to the sending CPU's backlog (netif_rx, netdev_max_backlog {MAX_BACKLOG}, process_backlog weight 64); the twin models that as an RX queue of {MAX_BACKLOG} entries polled in the generator CPU's NET_RX softirq"),
        ));
    }
    let (poller_cpus, queues) = veth_queues(s, r, napi, &mut notices);
    let egress = veth_egress(s, r, tx_ring, &mut notices);
    let traffic = veth_traffic(s, rate, &mut notices);
    let config = SimConfig {
        name: format!("{} {}", s.name, name),
        host: crate::twin_plan::lab_host(cpus, kernel),
        settings: crate::twin_plan::lab_net_settings(r),
        ingress: crate::twin_plan::veth_ingress(
            "dut-in",
            if r.gro { VETH_RING } else { MAX_BACKLOG },
            queues,
        ),
        egress,
        traffic,
        measurement: MeasurementConfig {
            duration_ms: s.measurement.duration_s * 1000.0,
            warmup_ms: s.measurement.warmup_s * 1000.0,
            interval_ms: None,
        },
        apps: Vec::new(),
        tunnel: None,
    };
    config.validate(&format!(
        "{file} configuration {name:?} (mapped for the twin)"
    ))?;
    // The engines: the generator of queue 0 and the sink, against queue 0's poller.
    let poller = poller_cpus[0];
    let engines_on_poller = EnginesOnPoller {
        generator: gen_cpu(0) == poller,
        sink: r.sink_cpus.first().copied().unwrap_or(0) == poller,
    };
    let mut settings = vec![(
        "topology".to_string(),
        match s.topology.kind {
            TopologyKind::Router => "router".to_string(),
            TopologyKind::Ap => format!("ap {:?}", s.topology.direction),
            other => other.as_str().to_string(),
        },
    )];
    settings.extend(r.pairs());
    settings.push((
        "twin poller".into(),
        format!(
            "{} on cpu {}{}",
            match napi {
                NapiContext::Threaded => "NAPI kthread",
                NapiContext::ThreadedBusyPoll => "busy-polling NAPI kthread",
                NapiContext::Workqueue => "workqueue worker",
                NapiContext::Softirq => "NET_RX softirq",
            },
            napilab_core::scenario::cpu_list(&poller_cpus),
            match (engines_on_poller.generator, engines_on_poller.sink) {
                (true, true) => ", shared with the generator and the sink",
                (true, false) => ", shared with the generator",
                (false, true) => ", shared with the sink",
                (false, false) => "",
            }
        ),
    ));
    Ok(TwinConfiguration {
        name: name.to_string(),
        settings,
        config,
        poller_cpus,
        napi,
        engines_on_poller,
        notices,
        veth: true,
    })
}

/// The generator's CPU for ingress queue `q` (its own, else the first).
fn generator_cpu(r: &DutSettings, q: usize) -> u32 {
    r.generator_cpus
        .get(q)
        .or(r.generator_cpus.first())
        .copied()
        .unwrap_or(0)
}

/// The veth ingress's RX queues and the CPU that polls each (the generator's in
/// softirq mode, the NAPI kthread's in threaded mode), with what the twin cannot
/// represent as notices.
fn veth_queues(
    s: &Scenario,
    r: &DutSettings,
    napi: NapiContext,
    notices: &mut Vec<Notice>,
) -> (Vec<u32>, Vec<RxQueueConfig>) {
    let nq = s.topology.ingress_queues.max(1) as usize;
    let gen_cpu = |q: usize| generator_cpu(r, q);
    let mut poller_cpus = Vec::with_capacity(nq);
    let mut queues = Vec::with_capacity(nq);
    for q in 0..nq {
        let cpu = match napi {
            NapiContext::Threaded | NapiContext::ThreadedBusyPoll if !r.napi_cpus.is_empty() => {
                r.napi_cpus[q % r.napi_cpus.len()]
            }
            NapiContext::Threaded | NapiContext::ThreadedBusyPoll => {
                if q == 0 {
                    notices.push(notice(
                        "napi_cpus",
                        "threaded NAPI without napi_cpus: the lab leaves the kthread unpinned, the twin pins it to the generator's CPU (the CPU that wakes it)",
                    ));
                }
                gen_cpu(q)
            }
            NapiContext::Softirq | NapiContext::Workqueue => gen_cpu(q),
        };
        poller_cpus.push(cpu);
        let fifo = r.napi_fifo.get(q).copied().filter(|p| *p > 0);
        if fifo.is_some() && napi == NapiContext::Softirq && q == 0 {
            notices.push(notice(
                "napi_fifo",
                "SCHED_FIFO priorities apply to NAPI kthreads only; with softirq NAPI they have no effect (as in the lab)",
            ));
        }
        queues.push(RxQueueConfig {
            cpu,
            napi,
            thread: ThreadPolicy {
                fifo_priority: if matches!(
                    napi,
                    NapiContext::Threaded | NapiContext::ThreadedBusyPoll
                ) {
                    fifo
                } else {
                    None
                },
            },
            // Deferral never acts in threaded busy polling (the kthread never
            // completes the instance): the twin refuses it there, so it is dropped.
            defer_hard_irqs: if napi == NapiContext::ThreadedBusyPoll {
                0
            } else {
                r.defer_hard_irqs
            },
            gro_flush_timeout_ns: if r.defer_hard_irqs > 0 && napi != NapiContext::ThreadedBusyPoll
            {
                r.gro_flush_timeout_ns
            } else {
                0
            },
            irq_suspend_timeout_ns: 0,
            rps_cpus: r.rps_cpus.clone(),
            rings: Vec::new(),
            ring_poll: Default::default(),
        });
    }
    if r.defer_hard_irqs == 0 && r.gro_flush_timeout_ns > 0 {
        notices.push(notice(
            "gro_flush_timeout_ns",
            "without defer_hard_irqs it only flushes GRO, which the twin does not model (UDP frames are not aggregated on veth anyway)",
        ));
    }
    if nq > 1 && r.napi_cpus.len() > 1 && r.napi_cpus.len() < nq {
        notices.push(notice(
            "napi_cpus",
            format!(
                "{} CPUs for {nq} queues: queue i uses napi_cpus[i mod {}], as the lab pins them",
                r.napi_cpus.len(),
                r.napi_cpus.len()
            ),
        ));
    }
    if napi == NapiContext::Softirq && !r.napi_cpus.is_empty() {
        notices.push(notice(
            "napi_cpus",
            "no effect with napi = \"softirq\": the veth poll runs in the softirq of the CPU that sent the frame (the generator's), as in the lab",
        ));
    }
    (poller_cpus, queues)
}

/// The veth egress: a TX ring that holds a whole point (no TX completions), and the
/// qdisc on the side that has one.
fn veth_egress(
    s: &Scenario,
    r: &DutSettings,
    tx_ring: u32,
    notices: &mut Vec<Notice>,
) -> EgressConfig {
    // Egress: which side has the qdisc.
    let egress_qdisc = match (s.topology.kind, s.topology.direction) {
        (TopologyKind::Router, _) | (TopologyKind::Ap, ApDirection::WirelessToWired) => {
            Some(&r.qdisc)
        }
        (TopologyKind::Server | TopologyKind::Vpn | TopologyKind::ManyNapi, _) => None,
        (TopologyKind::Ap, ApDirection::WiredToWireless) => {
            notices.push(notice(
                "topology ap, wired-to-wireless",
                "the egress is the wireless side (no qdisc, like mac80211); dut.qdisc sits on the wired side, the ingress here, and carries no traffic out",
            ));
            None
        }
    };
    let mut egress = crate::twin_plan::veth_egress("dut-out", tx_ring, TwinQdisc::None);
    let size_of_first = s.traffic.classes.first().map_or(64, |c| c.size);
    if let Some(q) = egress_qdisc {
        match q.kind {
            QdiscKind::None => {}
            QdiscKind::PfifoFast | QdiscKind::Pfifo => {
                // veth never stops its queue, so an unshaped FIFO never holds a packet:
                // the twin's FIFO is bypassed while the (large) TX ring has room.
                egress.qdisc = TwinQdisc::Fifo;
                egress.qdisc_limit = q.limit.unwrap_or(MAX_BACKLOG);
            }
            QdiscKind::Tbf | QdiscKind::Htb => {
                let rate = q.rate_mbit.unwrap_or(1000.0);
                egress.qdisc = TwinQdisc::Fifo;
                egress.link_mbps = rate;
                // A small ring in front of the "wire" so the queue builds in the qdisc;
                // this one needs TX completions to empty (see the notice).
                egress.tx_ring_size = 16;
                egress.tx_usecs = 0;
                egress.qdisc_limit = match q.kind {
                    QdiscKind::Tbf => {
                        let bytes = rate * 1e6 / 8.0 * q.latency_ms.unwrap_or(50.0) / 1000.0
                            + f64::from(q.burst_bytes.unwrap_or(16_000));
                        ((bytes / f64::from(size_of_first.max(1))).ceil() as u32).max(1)
                    }
                    _ => q.limit.unwrap_or(MAX_BACKLOG),
                };
                notices.push(notice(
                    format!("qdisc {}", q.describe()),
                    format!("the twin has no token bucket: the shaper becomes a {rate} Mbit/s link behind a FIFO of {} packets (the bucket's burst is not modelled), and the twin's 16-entry TX ring is reclaimed by TX-completion IRQs that veth does not have", egress.qdisc_limit),
                ));
            }
        }
    }
    egress
}

/// The traffic: the first class's pattern for all, IP sizes plus the Ethernet header.
fn veth_traffic(s: &Scenario, rate: f64, notices: &mut Vec<Notice>) -> TrafficConfig {
    let pattern = match s.traffic.classes.first().map(|c| c.pattern) {
        Some(LabPattern::Poisson) => Pattern::Poisson,
        _ => Pattern::Constant,
    };
    if s.traffic
        .classes
        .iter()
        .any(|c| c.pattern != s.traffic.classes[0].pattern)
    {
        notices.push(notice(
            "traffic.classes[].pattern",
            format!("the twin has one pattern for all classes: {} (the first class's) is used for every class", match pattern { Pattern::Poisson => "poisson", Pattern::Constant => "cbr" }),
        ));
    }
    let classes = s
        .traffic
        .classes
        .iter()
        .map(|c| ClassConfig {
            name: c.name.clone(),
            share: c.share,
            size_bytes: c.size + ETH_HEADER,
            queue: Some(c.queue),
            ring: None,
            app: None,
            closed_loop: None,
            client: None,
        })
        .collect();
    TrafficConfig {
        burst: 1,
        rate_pps: rate,
        pattern,
        classes,
    }
}

/// What a TOML file given to `napilab sim run` holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InputKind {
    /// A scenario (the lab's vocabulary; scenarios/, scenarios/studies/).
    Scenario,
    /// A twin configuration file of earlier releases (`[host]`, `[ingress]`, ...), read
    /// for one more release; crate::studies::LEGACY names the shipped ones'
    /// replacements.
    LegacyTwinConfig,
}

/// The rule (docs/sim.md "Scenarios and hardware profiles"): a file with `[host]` and
/// no `[topology]` is a legacy twin configuration; every other file is a scenario,
/// whose own parse errors say what is wrong with it (`[topology]` may be left out: it
/// defaults to the router).
pub fn input_kind(text: &str) -> Result<InputKind, String> {
    let table: toml::Table = toml::from_str(text).map_err(|e| {
        format!(
            "not TOML ({}): give a scenario (scenarios/, docs/lab.md)",
            e.message().trim()
        )
    })?;
    if table.contains_key("host") && !table.contains_key("topology") {
        Ok(InputKind::LegacyTwinConfig)
    } else {
        Ok(InputKind::Scenario)
    }
}
