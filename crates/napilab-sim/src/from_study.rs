//! Scenarios on a NIC machine: maps a lab [`Scenario`] and a hardware profile (one with
//! `[host]` and `[nic]`, [`crate::hardware`]) onto [`SimConfig`] values. The scenario
//! says what is set (NAPI context, IRQ affinity, qdisc, sysctls, the traffic and the
//! measurement); the profile says what the machine is (CPUs, HZ, kernel, the NICs'
//! rings, coalescing and line rate) and what work costs. The studies' scenarios
//! (scenarios/studies/) are written this way; docs/sim.md "Scenarios and hardware
//! profiles" gives the rules.
//!
//! Mapping rules (each one reproduces the twin configuration files these scenarios
//! replace, field for field; tests/study_migration.rs checks it):
//! - RX queues: one per `nic.ingress.irq_cpus` entry, or `topology.ingress_queues` if
//!   more; queue i's IRQ on `napi_cpus[i mod n]` when the configuration sets it (IRQ
//!   affinity), else on the profile's `irq_cpus[i mod n]`. With one ingress queue in
//!   the topology the classes are spread by RSS over all RX queues; with more, each
//!   class lands on its `queue`.
//! - `twin.ring_budgets`: the topology's ingress queues become rings of one NAPI
//!   instance (named after their classes), polled alternately with those budgets.
//! - Egress qdisc: `dut.qdisc` on the router's and the vpn's egress and on the AP's
//!   wired side (W2E); `pfifo_fast` and `pfifo` become the twin's FIFO.
//! - Frame sizes: the lab's IP packet size plus the Ethernet header; a tunnel's outer
//!   frame is its inner payload plus [`TUNNEL_OVERHEAD`].
//! - vpn: `napi` is the tunnel's NAPI context (the peers' instances), `napi_cpus` pins
//!   the peers' kthreads: the twin pins peer i to CPU i mod cpus, so it takes the list
//!   of every CPU in order.

use napilab_core::scenario::{
    ApDirection, Configuration, DutSettings, NapiContext as LabNapi, Pattern as LabPattern,
    QdiscKind, Scenario, TopologyKind, TwinNapi,
};
use napilab_core::Notice;

use crate::config::{
    ClassConfig, EgressConfig, HostConfig, IngressConfig, MeasurementConfig, NapiContext,
    NetSettings, Pattern, QdiscKind as TwinQdisc, RingConfig, RxQueueConfig, ThreadPolicy,
    TrafficConfig, TunnelConfig, TxCompletion,
};
use crate::hardware::{HostHardware, NicHardware};
use crate::twin_plan::{notice, EnginesOnPoller, TwinConfiguration, TwinPlan, ETH_HEADER};
use crate::{ConfigError, Profile, SimConfig};

/// Bytes an outer WireGuard frame adds to the inner UDP payload: Ethernet 14, outer
/// IPv4 20 and UDP 8, WireGuard's data header 16 and Poly1305 tag 16, inner IPv4 20
/// and UDP 8 (1,398 bytes of payload fill a 1,500-byte frame).
pub const TUNNEL_OVERHEAD: u32 = 14 + 20 + 8 + 16 + 16 + 20 + 8;
/// `net.core.netdev_max_backlog`'s default (no scenario setting changes it).
const MAX_BACKLOG: u32 = 1000;

/// Maps `scenario` onto the machine of `profile` (which must have `[host]` and `[nic]`).
/// `file` names the scenario in errors.
pub fn plan(scenario: &Scenario, profile: &Profile, file: &str) -> Result<TwinPlan, ConfigError> {
    let s = scenario;
    let Some((host, nic)) = profile.hardware() else {
        return Err(ConfigError::new(
            file,
            "(profile)",
            format!(
                "profile {} has no [host] and [nic]: it is a veth-lab profile, which the lab scenarios' mapping uses",
                profile.name
            ),
        ));
    };
    if matches!(
        s.topology.kind,
        TopologyKind::Server | TopologyKind::ManyNapi
    ) {
        return Err(ConfigError::new(
            file,
            "topology.kind",
            format!(
                "the twin maps the {} topology onto the veth lab only: run it with --profile veth-lab-server (server) or in the lab",
                s.topology.kind.as_str()
            ),
        ));
    }
    let m = &s.measurement;
    let loads = match &s.tunnel {
        Some(t) => t.loads_pps.clone(),
        None => s.loads(),
    };
    let rate = loads
        .first()
        .copied()
        .unwrap_or(crate::twin_plan::UNSET_RATE_PPS);
    let mut configurations = Vec::new();
    for c in s.configurations() {
        configurations.push(map_configuration(
            s,
            &c,
            (host, nic),
            rate,
            &profile.name,
            file,
        )?);
    }
    Ok(TwinPlan {
        name: s.name.clone(),
        loads,
        load_fractions: match &s.tunnel {
            Some(_) => Vec::new(),
            None => s.load_fractions(),
        },
        seeds: (0..m.repeats.max(1))
            .map(|r| s.traffic.seed.wrapping_add(u64::from(r)))
            .collect(),
        loss_threshold: m.loss_threshold,
        search: m.search.then(|| m.clone()),
        configurations,
        notices: std::iter::once(notice(
            format!("profile {}", profile.name),
            "a NIC machine ([host], [nic]): the DUT is that machine, its traffic comes from outside it; generator_cpus and sink_cpus (the lab's traffic engines) have no counterpart",
        ))
        .chain(scenario_notices(s))
        .collect(),
        requests: None,
    })
}

/// Milliseconds of a scenario's seconds, rounded to the nanosecond (0.1 s is 100 ms).
fn ms(s: f64) -> f64 {
    (s * 1e6).round() / 1e3
}

fn map_configuration(
    s: &Scenario,
    c: &Configuration,
    (host, nic): (&HostHardware, &NicHardware),
    rate: f64,
    profile: &str,
    file: &str,
) -> Result<TwinConfiguration, ConfigError> {
    let r = &c.settings;
    let at = format!("{file} configuration {:?}", c.name);
    let mut notices = Vec::new();
    if let Some(why) = &c.twin_only {
        notices.push(notice("twin only", why.clone()));
    }
    let napi = match (c.twin.napi, r.napi) {
        (Some(TwinNapi::Workqueue), _) => NapiContext::Workqueue,
        (Some(TwinNapi::ThreadedBusyPoll), _) => NapiContext::ThreadedBusyPoll,
        (Some(TwinNapi::Threaded), _) | (None, LabNapi::Threaded) => NapiContext::Threaded,
        (Some(TwinNapi::Softirq), _) | (None, LabNapi::Softirq) => NapiContext::Softirq,
    };
    let vpn = s.topology.kind == TopologyKind::Vpn;
    let tunnel = match &s.tunnel {
        Some(t) if vpn => Some(tunnel_config(t, r, napi, host, &at)?),
        _ => None,
    };
    // The NIC's own NAPI: the tunnel's context is the peers', the NIC polls in softirq.
    let nic_napi = if vpn { NapiContext::Softirq } else { napi };
    let (queues, class_lane) = ingress_queues(s, c, nic, nic_napi, &at)?;
    let poller_cpus: Vec<u32> = queues.iter().map(|q| q.cpu).collect();
    let config = SimConfig {
        name: format!("{} {}", s.name, c.name),
        host: HostConfig {
            cpus: host.cpus,
            hz: host.hz,
            kernel: host.kernel.clone(),
            tick: host.tick,
            sched_scaling: host.sched_scaling,
            scheduler: host.scheduler,
        },
        settings: NetSettings {
            netdev_budget: r.netdev_budget.unwrap_or(300),
            netdev_budget_usecs: r.netdev_budget_usecs,
            weight: nic.ingress.weight,
            max_backlog: MAX_BACKLOG,
            max_softirq_restart: crate::softirq::MAX_SOFTIRQ_RESTART,
            gro_normal_batch: crate::config::GRO_NORMAL_BATCH,
        },
        ingress: IngressConfig {
            name: nic.ingress.name.clone(),
            rx_ring_size: nic.ingress.rx_ring_size,
            rx_usecs: nic.ingress.rx_usecs,
            rx_frames: nic.ingress.rx_frames,
            moderation: nic.ingress.moderation,
            adaptive_rx: nic.ingress.adaptive_rx,
            irq_mode: nic.ingress.irq_mode,
            veth: false,
            queues,
        },
        egress: egress(s, c, nic, &at)?,
        traffic: traffic(s, rate, &class_lane),
        measurement: MeasurementConfig {
            duration_ms: ms(s.measurement.duration_s),
            warmup_ms: ms(s.measurement.warmup_s),
            interval_ms: None,
        },
        apps: Vec::new(),
        tunnel,
    };
    config.validate(&format!("{at} (mapped onto profile {profile})"))?;
    let mut settings = vec![
        ("topology".to_string(), topology_name(s)),
        ("machine".to_string(), format!("profile {profile}")),
    ];
    settings.extend(r.pairs());
    settings.extend(c.twin.pairs());
    Ok(TwinConfiguration {
        name: c.name.clone(),
        settings,
        config,
        poller_cpus,
        napi,
        engines_on_poller: EnginesOnPoller::default(),
        notices,
        veth: false,
    })
}

fn topology_name(s: &Scenario) -> String {
    match s.topology.kind {
        TopologyKind::Ap => format!("ap {:?}", s.topology.direction),
        other => other.as_str().to_string(),
    }
}

/// Where a class lands: RX queue (None: RSS over all) and ring.
type Lane = (Option<u32>, Option<String>);

/// The RX queues and, per traffic class, its lane.
fn ingress_queues(
    s: &Scenario,
    c: &Configuration,
    nic: &NicHardware,
    napi: NapiContext,
    at: &str,
) -> Result<(Vec<RxQueueConfig>, Vec<Lane>), ConfigError> {
    let r = &c.settings;
    let vpn = s.topology.kind == TopologyKind::Vpn;
    let nq = s.topology.ingress_queues.max(1) as usize;
    let irq = &nic.ingress.irq_cpus;
    // In the vpn topology napi_cpus places the tunnel's kthreads, not the NIC's IRQs.
    let affinity: &[u32] = if vpn { &[] } else { &r.napi_cpus };
    let cpu_of = |q: usize| match affinity {
        [] => irq[q % irq.len()],
        a => a[q % a.len()],
    };
    let queue = |q: usize, rings: Vec<RingConfig>| RxQueueConfig {
        cpu: cpu_of(q),
        napi,
        thread: ThreadPolicy {
            fifo_priority: r.napi_fifo.get(q).copied().filter(|p| {
                *p > 0 && matches!(napi, NapiContext::Threaded | NapiContext::ThreadedBusyPoll)
            }),
        },
        defer_hard_irqs: r.defer_hard_irqs,
        gro_flush_timeout_ns: r.gro_flush_timeout_ns,
        irq_suspend_timeout_ns: 0,
        rps_cpus: r.rps_cpus.clone(),
        rings,
        ring_poll: Default::default(),
    };
    let classes = &s.traffic.classes;
    if let Some(budgets) = &c.twin.ring_budgets {
        // One NAPI instance whose rings are the topology's queues.
        let name = |q: u32| {
            let names: Vec<&str> = classes
                .iter()
                .filter(|k| k.queue == q)
                .map(|k| k.name.as_str())
                .collect();
            if names.is_empty() {
                format!("ring{q}")
            } else {
                names.join("+")
            }
        };
        let rings = budgets
            .iter()
            .enumerate()
            .map(|(q, b)| RingConfig {
                name: name(q as u32),
                size: None,
                budget: Some(*b),
            })
            .collect();
        let lanes = classes
            .iter()
            .map(|k| (Some(0), Some(name(k.queue))))
            .collect();
        return Ok((vec![queue(0, rings)], lanes));
    }
    let count = if vpn { irq.len() } else { nq.max(irq.len()) };
    if count > 4096 {
        return Err(ConfigError::new(
            at,
            "topology.ingress_queues",
            "at most 4096 RX queues",
        ));
    }
    let queues = (0..count).map(|q| queue(q, Vec::new())).collect();
    let lanes = classes
        .iter()
        .map(|k| ((nq > 1).then_some(k.queue), None))
        .collect();
    Ok((queues, lanes))
}

fn tunnel_config(
    t: &napilab_core::scenario::TunnelWorkload,
    r: &DutSettings,
    napi: NapiContext,
    host: &HostHardware,
    at: &str,
) -> Result<TunnelConfig, ConfigError> {
    let pinned = napi == NapiContext::Threaded && !r.napi_cpus.is_empty();
    if pinned && !r.napi_cpus.iter().copied().eq(0..host.cpus) {
        return Err(ConfigError::new(
            at,
            "napi_cpus",
            format!(
                "the twin pins peer i's NAPI kthread to CPU i mod {n}: set napi_cpus to every CPU in order (0 to {}), or leave it out to let the scheduler place them",
                host.cpus - 1,
                n = host.cpus
            ),
        ));
    }
    Ok(TunnelConfig {
        peers: u32::try_from(t.peers).unwrap_or(u32::MAX),
        napi,
        pinned,
        peer_queue: 1024,
        decrypt_queue: 1024,
        decrypt_ring: Default::default(),
        worklist: Default::default(),
    })
}

fn egress(
    s: &Scenario,
    c: &Configuration,
    nic: &NicHardware,
    at: &str,
) -> Result<EgressConfig, ConfigError> {
    let e = &nic.egress;
    let through_qdisc = match s.topology.kind {
        TopologyKind::Ap => s.topology.direction == ApDirection::WirelessToWired,
        _ => true,
    };
    let q = &c.settings.qdisc;
    let (qdisc, qdisc_limit) = match (through_qdisc, q.kind) {
        (false, _) | (true, QdiscKind::None) => (TwinQdisc::None, MAX_BACKLOG),
        (true, QdiscKind::PfifoFast | QdiscKind::Pfifo) => {
            (TwinQdisc::Fifo, q.limit.unwrap_or(MAX_BACKLOG))
        }
        (true, QdiscKind::Htb | QdiscKind::Tbf) => {
            return Err(ConfigError::new(
                at,
                "qdisc",
                "a shaping qdisc on a NIC machine is not modelled (the twin has no token bucket): use pfifo_fast or pfifo",
            ))
        }
    };
    Ok(EgressConfig {
        name: e.name.clone(),
        qdisc,
        qdisc_limit,
        tx_ring_size: e.tx_ring_size,
        link_mbps: e.link_mbps,
        tx_usecs: e.tx_usecs,
        tx_frames: e.tx_frames,
        moderation: e.moderation,
        tx_work_limit: e.tx_work_limit,
        completion: c.twin.tx_irq_cpu.map_or(e.completion, TxCompletion::OnCpu),
        irq_mode: e.irq_mode,
    })
}

fn traffic(s: &Scenario, rate: f64, lanes: &[Lane]) -> TrafficConfig {
    let pattern_of = |p: LabPattern| match p {
        LabPattern::Poisson => Pattern::Poisson,
        LabPattern::Cbr => Pattern::Constant,
    };
    if let Some(t) = &s.tunnel {
        return TrafficConfig {
            burst: 1,
            rate_pps: rate,
            pattern: pattern_of(t.pattern),
            classes: vec![ClassConfig {
                name: "tunnel".into(),
                share: 1.0,
                size_bytes: u32::try_from(t.payload_bytes).unwrap_or(u32::MAX) + TUNNEL_OVERHEAD,
                queue: None,
                ring: None,
                app: None,
                closed_loop: None,
                client: None,
            }],
        };
    }
    let classes = &s.traffic.classes;
    TrafficConfig {
        burst: 1,
        rate_pps: rate,
        pattern: classes
            .first()
            .map_or(Pattern::Constant, |c| pattern_of(c.pattern)),
        classes: classes
            .iter()
            .zip(lanes)
            .map(|(c, (queue, ring))| ClassConfig {
                name: c.name.clone(),
                share: c.share,
                size_bytes: c.size + ETH_HEADER,
                queue: *queue,
                ring: ring.clone(),
                app: None,
                closed_loop: None,
                client: None,
            })
            .collect(),
    }
}

/// Notices of the mapping for a whole scenario (on top of each configuration's).
pub fn scenario_notices(s: &Scenario) -> Vec<Notice> {
    let mut out = Vec::new();
    if s.traffic
        .classes
        .iter()
        .any(|c| Some(c.pattern) != s.traffic.classes.first().map(|f| f.pattern))
    {
        out.push(notice(
            "traffic.classes[].pattern",
            "the twin has one pattern for all classes: the first class's is used for every class",
        ));
    }
    out
}
