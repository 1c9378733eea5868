//! The analysis pipeline on hand-made samples: exact rates, counter wrap and reset,
//! devices and IRQs that appear or vanish mid-run, offline CPUs, and missing files.

use napilab_core::{
    HostFacts, IrqInfo, IrqMatch, Observation, Origin, OriginKind, Settings, TopologyMap,
};
use napilab_probe::derive::{derive_interval, DeriveContext};
use napilab_probe::netlink::LinkStats;
use napilab_probe::observe::Analysis;
use napilab_probe::record::{RecordingHeader, RECORDING_SCHEMA};
use napilab_probe::sample::{Notices, RawSample};

fn header(topology: TopologyMap) -> RecordingHeader {
    RecordingHeader {
        schema: RECORDING_SCHEMA.into(),
        origin: Origin {
            kind: OriginKind::Live,
            hostname: None,
            kernel: None,
            started_unix_ms: 0,
            napilab_version: "test".into(),
        },
        host: HostFacts::tick_sampled_250hz(vec![0, 1]),
        online_cpus: vec![0, 1],
        settings: Settings::default(),
        topology,
        notices: Vec::new(),
    }
}

/// Counters of one sample on a 2-CPU host (cpu columns given by `cpus`).
struct Counters {
    cpus: Vec<u32>,
    irq38: Vec<u64>,
    net_rx: Vec<u64>,
    processed: Vec<u64>,
    idle: Vec<u64>,
    softirq_ticks: Vec<u64>,
    links: Vec<(&'static str, u32, u64)>,
}

fn sample(t_ms: u64, c: &Counters) -> RawSample {
    let header: String = c.cpus.iter().map(|n| format!("       CPU{n}")).collect();
    let cols = |v: &[u64]| v.iter().map(|x| format!(" {x:>10}")).collect::<String>();
    let interrupts = format!(
        "{header}\n 38:{}  PCI-MSIX-0000:00:03.0   1-edge      virtio2-input.0\nLOC:{}   Local timer interrupts\n",
        cols(&c.irq38),
        cols(&vec![5; c.cpus.len()])
    );
    let softirqs = format!(
        "          {header}\n      NET_TX:{}\n      NET_RX:{}\n",
        cols(&vec![0; c.cpus.len()]),
        cols(&c.net_rx)
    );
    let mut stat = String::from("cpu  0 0 0 0 0 0 0 0 0 0\n");
    for (i, cpu) in c.cpus.iter().enumerate() {
        stat.push_str(&format!(
            "cpu{cpu} 10 0 20 {} 0 0 {} 0 0 0\n",
            c.idle[i], c.softirq_ticks[i]
        ));
    }
    let softnet: String = c
        .cpus
        .iter()
        .enumerate()
        .map(|(i, cpu)| {
            format!(
                "{:08x} 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 {cpu:08x} 00000000 00000000\n",
                c.processed[i]
            )
        })
        .collect();
    RawSample {
        t_ns: t_ms * 1_000_000,
        unix_ms: t_ms,
        interrupts: Some(interrupts),
        softirqs: Some(softirqs),
        stat: Some(stat),
        softnet: Some(softnet),
        threads: Vec::new(),
        schedstats: Vec::new(),
        links: Some(
            c.links
                .iter()
                .map(|(name, ifindex, rx)| LinkStats {
                    ifindex: *ifindex,
                    name: (*name).into(),
                    rx_packets: *rx,
                    rx_bytes: rx * 100,
                    ..LinkStats::default()
                })
                .collect(),
        ),
        qdiscs: None,
        qstats: None,
    }
}

fn base() -> Counters {
    Counters {
        cpus: vec![0, 1],
        irq38: vec![0, 100],
        net_rx: vec![10, 200],
        processed: vec![50, 1_000],
        idle: vec![1_000, 1_000],
        softirq_ticks: vec![0, 0],
        links: vec![("eth0", 2, 1_000)],
    }
}

fn run(samples: &[RawSample], topology: TopologyMap) -> Observation {
    let mut analysis = Analysis::new(header(topology));
    for s in samples {
        analysis.push(s);
    }
    analysis.finish(OriginKind::Replay)
}

fn net_topology() -> TopologyMap {
    TopologyMap {
        devices: Vec::new(),
        irqs: vec![IrqInfo {
            number: 38,
            name: "virtio2-input.0".into(),
            device: "eth0".into(),
            queue: Some("rx-0".into()),
            affinity: vec![1],
            effective_affinity: vec![1],
            matched_by: IrqMatch::Name,
        }],
        netns: None,
    }
}

#[test]
fn rates_are_exact_per_second() {
    let a = base();
    let mut b = base();
    b.irq38 = vec![0, 600];
    b.net_rx = vec![10, 1_200];
    b.processed = vec![50, 33_000];
    b.idle = vec![1_050, 1_025];
    b.softirq_ticks = vec![0, 25];
    b.links = vec![("eth0", 2, 33_000)];
    let obs = run(&[sample(0, &a), sample(500, &b)], net_topology());
    let i = &obs.intervals[0];
    assert_eq!(i.duration_s, 0.5);
    let cpu1 = i.cpu(1).expect("cpu1");
    assert_eq!(cpu1.net_hardirqs.as_ref().map(|m| m.value), Some(1_000.0));
    assert_eq!(
        cpu1.net_rx_softirqs.as_ref().map(|m| m.value),
        Some(2_000.0)
    );
    assert_eq!(
        cpu1.softnet_processed.as_ref().map(|m| m.value),
        Some(64_000.0)
    );
    assert_eq!(
        cpu1.packets_per_net_rx_softirq.as_ref().map(|m| m.value),
        Some(32.0)
    );
    assert_eq!(
        cpu1.packets_per_net_hardirq.as_ref().map(|m| m.value),
        Some(64.0)
    );
    let time = cpu1.time.as_ref().expect("time shares");
    assert_eq!(time.softirq.value, 0.5);
    assert_eq!(time.softirq.source, napilab_core::Source::Tick);
    let eth0 = i.device("eth0").expect("eth0");
    assert_eq!(eth0.rx_packets.as_ref().map(|m| m.value), Some(64_000.0));
    assert_eq!(
        eth0.rx_bits.as_ref().map(|m| m.value),
        Some(64_000.0 * 800.0)
    );
    // IRQ 38 fired only on cpu1.
    let irq = i.irqs.iter().find(|x| x.number == 38).expect("irq 38");
    assert_eq!(irq.per_cpu.len(), 1);
    assert_eq!(irq.device.as_deref(), Some("eth0"));
}

#[test]
fn wrapped_32_bit_counters_give_the_true_delta() {
    let mut a = base();
    a.processed = vec![50, 0xffff_fff0];
    a.net_rx = vec![10, 0xffff_ffff];
    let mut b = base();
    b.processed = vec![50, 0x10];
    b.net_rx = vec![10, 1];
    let obs = run(&[sample(0, &a), sample(1_000, &b)], TopologyMap::default());
    let cpu1 = obs.intervals[0].cpu(1).expect("cpu1");
    assert_eq!(cpu1.softnet_processed.as_ref().map(|m| m.value), Some(32.0));
    assert_eq!(cpu1.net_rx_softirqs.as_ref().map(|m| m.value), Some(2.0));
}

#[test]
fn reset_64_bit_counter_is_left_out_not_wrapped() {
    let a = base();
    let mut b = base();
    b.links = vec![("eth0", 2, 10)];
    let obs = run(&[sample(0, &a), sample(1_000, &b)], TopologyMap::default());
    let eth0 = obs.intervals[0].device("eth0").expect("eth0");
    assert_eq!(eth0.rx_packets, None);
}

#[test]
fn devices_appearing_and_vanishing_mid_run() {
    let a = base();
    let mut b = base();
    b.links = vec![("eth0", 2, 2_000), ("veth9", 7, 5)];
    let mut c = base();
    c.links = vec![("veth9", 7, 105)];
    let obs = run(
        &[sample(0, &a), sample(1_000, &b), sample(2_000, &c)],
        TopologyMap::default(),
    );
    let first = &obs.intervals[0];
    assert_eq!(
        first.device("veth9").map(|d| d.rx_packets.clone()),
        Some(None)
    );
    let second = &obs.intervals[1];
    assert!(second.device("eth0").is_none());
    assert_eq!(
        second
            .device("veth9")
            .and_then(|d| d.rx_packets.as_ref())
            .map(|m| m.value),
        Some(100.0)
    );
}

#[test]
fn offline_cpu_columns_are_matched_by_cpu_id_not_position() {
    // cpu1 goes offline and cpu3 is online: the columns are CPU0 CPU3 in the second
    // sample. cpu0's figures must not pick up cpu3's column.
    let mut a = base();
    a.cpus = vec![0, 3];
    let mut b = base();
    b.cpus = vec![0, 3];
    b.net_rx = vec![110, 200];
    b.processed = vec![150, 1_000];
    let obs = run(&[sample(0, &a), sample(1_000, &b)], TopologyMap::default());
    let i = &obs.intervals[0];
    assert_eq!(
        i.cpu(0)
            .and_then(|c| c.net_rx_softirqs.as_ref())
            .map(|m| m.value),
        Some(100.0)
    );
    assert_eq!(
        i.cpu(3)
            .and_then(|c| c.softnet_processed.as_ref())
            .map(|m| m.value),
        Some(0.0)
    );
    assert!(i.cpu(1).is_none());
}

#[test]
fn missing_and_garbled_files_become_notices_not_panics() {
    let mut a = sample(0, &base());
    let mut b = sample(1_000, &base());
    a.softnet = None;
    b.softnet = None;
    b.interrupts = Some("garbage\n\u{0}\u{1}".into());
    let obs = run(&[a, b], TopologyMap::default());
    let cpu0 = obs.intervals[0].cpu(0).expect("cpu0 from /proc/stat");
    assert!(cpu0.softnet_processed.is_none());
    assert!(cpu0.hardirqs.is_none());
    assert!(cpu0.net_rx_softirqs.is_some());
    assert!(
        obs.notices.iter().any(|n| n.what == "/proc/interrupts"),
        "{:?}",
        obs.notices
    );
}

#[test]
fn non_increasing_timestamps_are_skipped() {
    let obs = run(
        &[
            sample(1_000, &base()),
            sample(1_000, &base()),
            sample(2_000, &base()),
        ],
        TopologyMap::default(),
    );
    assert_eq!(obs.intervals.len(), 1);
    assert_eq!(obs.intervals[0].duration_s, 1.0);
}

/// The analysis caches /proc/interrupts' layout and recycles parsed samples between
/// pushes; its intervals must be exactly those of parsing every sample afresh, also
/// while IRQ lines appear, are renamed, CPUs change and devices reorder.
#[test]
fn cached_parsing_gives_the_intervals_of_fresh_parsing() {
    let mut counters = Vec::new();
    for step in 0..8u64 {
        let mut c = base();
        c.irq38 = vec![step * 10, 100 + step * 30];
        c.net_rx = vec![10 + step, 200 + step * 7];
        c.processed = vec![50 + step * 3, 1_000 + step * 11];
        c.links = vec![("eth0", 2, 1_000 + step * 5), ("veth9", 7, 5 + step)];
        if step == 3 || step == 4 {
            c.links.reverse();
        }
        if step == 6 {
            c.cpus = vec![0, 3];
        }
        counters.push(c);
    }
    let mut samples: Vec<RawSample> = counters
        .iter()
        .enumerate()
        .map(|(i, c)| sample(i as u64 * 1_000, c))
        .collect();
    let add_irq = |s: &mut RawSample, line: &str| {
        if let Some(text) = s.interrupts.as_mut() {
            *text = text.replacen("LOC:", &format!("{line}\nLOC:"), 1);
        }
    };
    // An IRQ line appears, stays, is renamed, goes away; one sample cannot be parsed.
    add_irq(
        &mut samples[2],
        " 39:          1          2  PCI-MSIX-0000:00:03.0   2-edge      virtio2-output.0",
    );
    add_irq(
        &mut samples[3],
        " 39:          4          9  PCI-MSIX-0000:00:03.0   2-edge      virtio2-output.0",
    );
    add_irq(
        &mut samples[4],
        " 39:          8         19  PCI-MSIX-0000:00:03.0   2-edge      eth0-tx-0",
    );
    samples[5].interrupts = Some("garbage\n".into());
    let topology = net_topology();
    let cached = run(&samples, topology.clone());
    let header = header(topology);
    let ctx = DeriveContext {
        topology: &header.topology,
        accounting: header.host.accounting,
        user_hz: header.host.user_hz,
    };
    let mut notices = Notices::default();
    let fresh: Vec<_> = samples
        .windows(2)
        .enumerate()
        .map(|(index, pair)| {
            let (prev, cur) = (
                pair[0].parse(&header.online_cpus, &mut notices),
                pair[1].parse(&header.online_cpus, &mut notices),
            );
            let start_s = prev.t_ns as f64 / 1e9;
            derive_interval(&prev, &cur, &ctx, index, start_s)
        })
        .collect();
    assert_eq!(cached.intervals.len(), 7);
    assert_eq!(cached.intervals, fresh);
    // The appearing line is in the interval after it appeared, named as it was then.
    let irq39 = |i: usize| {
        cached.intervals[i]
            .irqs
            .iter()
            .find(|q| q.number == 39)
            .map(|q| q.name.clone())
    };
    assert_eq!(irq39(2).as_deref(), Some("virtio2-output.0"));
    assert_eq!(irq39(3).as_deref(), Some("eth0-tx-0"));
}
