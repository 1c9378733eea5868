//! Human-readable tables. Every figure column says its source where it is not a plain
//! kernel counter: `*` marks tick-sampled shares (see the tick_sampled_accounting
//! finding).

use std::fmt::Write;

use comfy_table::{presets::UTF8_BORDERS_ONLY, Table};
use napilab_core::stats::{mean_over, short};
use napilab_core::{
    CpuAccounting, CpuInterval, DeviceInterval, Finding, HostFacts, Interval, Metric, Notice,
    Observation, Poller, Settings, Severity, Source, TopologyMap,
};

fn table(header: &[&str]) -> Table {
    let mut t = Table::new();
    t.load_style(UTF8_BORDERS_ONLY);
    t.set_header(header.iter().copied());
    t
}

fn cpus(list: &[u32]) -> String {
    if list.is_empty() {
        return "-".into();
    }
    // Collapse runs into ranges: 0,1,2,5 -> 0-2,5.
    let mut out = Vec::new();
    let mut i = 0;
    while i < list.len() {
        let mut j = i;
        while j + 1 < list.len() && list[j + 1] == list[j] + 1 {
            j += 1;
        }
        out.push(if i == j {
            list[i].to_string()
        } else {
            format!("{}-{}", list[i], list[j])
        });
        i = j + 1;
    }
    out.join(",")
}

fn opt<T: ToString>(v: Option<T>) -> String {
    v.map(|v| v.to_string()).unwrap_or_else(|| "-".into())
}

fn accounting(a: CpuAccounting) -> &'static str {
    match a {
        CpuAccounting::TickSampled => "tick-sampled (no IRQ time accounting)",
        CpuAccounting::IrqTime => "IRQ time accounting (irq/softirq measured, rest tick-sampled)",
        CpuAccounting::Virtual => "virtual (all measured)",
        CpuAccounting::Unknown => "unknown (assume tick-sampled)",
    }
}

pub fn host_line(host: &HostFacts, settings: &Settings) -> String {
    format!(
        "host: {} CPUs, HZ={} ({}), CPU accounting: {}\nsysctl net.core: netdev_budget={} netdev_budget_usecs={} dev_weight={} busy_poll={} busy_read={}\n",
        host.cpus.len(),
        opt(host.hz.value),
        host.hz.how,
        accounting(host.accounting),
        opt(settings.netdev_budget),
        opt(settings.netdev_budget_usecs),
        opt(settings.dev_weight),
        opt(settings.busy_poll),
        opt(settings.busy_read),
    )
}

fn poller(p: &Poller) -> String {
    match p {
        Poller::Thread(t) => format!(
            "thread {} (pid {}) last on cpu{}, allowed {}, {} prio {} nice {}",
            t.name,
            t.pid,
            opt(t.last_cpu),
            cpus(&t.allowed_cpus),
            t.policy.as_deref().unwrap_or("?"),
            opt(t.rt_priority),
            opt(t.nice)
        ),
        Poller::Softirq { cpus: c, how } if c.is_empty() => format!("softirq: {how}"),
        Poller::Softirq { cpus: c, how } => format!("softirq on cpu {}: {how}", cpus(c)),
        Poller::Unknown => "unknown".into(),
    }
}

pub fn map(topology: &TopologyMap, host: &HostFacts, settings: &Settings) -> String {
    let mut out = host_line(host, settings);
    let mut devices = table(&[
        "device",
        "ifindex",
        "driver",
        "mtu",
        "state",
        "qdisc",
        "threaded",
        "gro_flush_timeout",
        "defer_hard_irqs",
        "rx/tx queues",
    ]);
    for d in &topology.devices {
        let qdisc = d
            .qdisc
            .as_ref()
            .map(|q| {
                if q.children.is_empty() {
                    q.kind.clone()
                } else {
                    format!("{} ({})", q.kind, q.children.join(","))
                }
            })
            .unwrap_or_else(|| "-".into());
        devices.add_row(vec![
            d.name.clone(),
            d.ifindex.to_string(),
            opt(d.driver.clone()),
            opt(d.mtu),
            opt(d.operstate.clone()),
            qdisc,
            opt(d.threaded),
            opt(d.gro_flush_timeout_ns),
            opt(d.napi_defer_hard_irqs),
            format!("{}/{}", d.rx_queues.len(), d.tx_queues.len()),
        ]);
    }
    let _ = writeln!(out, "\nDevices\n{devices}");

    let mut napis = table(&[
        "device",
        "napi",
        "irq",
        "rx queues",
        "tx queues",
        "defer",
        "gro_flush ns",
        "irq_suspend ns",
        "polled by",
    ]);
    for d in &topology.devices {
        for n in &d.napis {
            napis.add_row(vec![
                d.name.clone(),
                n.id.to_string(),
                opt(n.irq),
                cpus(&n.rx_queues),
                cpus(&n.tx_queues),
                opt(n.defer_hard_irqs),
                opt(n.gro_flush_timeout_ns),
                opt(n.irq_suspend_timeout_ns),
                poller(&n.poller),
            ]);
        }
    }
    if napis.row_count() == 0 {
        out.push_str("\nNAPI instances: none reported (see notices)\n");
    } else {
        let _ = writeln!(out, "\nNAPI instances\n{napis}");
    }

    if !topology.irqs.is_empty() {
        let mut irqs = table(&[
            "irq",
            "name",
            "device",
            "queue",
            "affinity",
            "effective",
            "matched by",
        ]);
        for i in &topology.irqs {
            irqs.add_row(vec![
                i.number.to_string(),
                i.name.clone(),
                i.device.clone(),
                opt(i.queue.clone()),
                cpus(&i.affinity),
                cpus(&i.effective_affinity),
                format!("{:?}", i.matched_by),
            ]);
        }
        let _ = writeln!(out, "\nNetwork IRQs\n{irqs}");
    }

    let mut queues = table(&[
        "device",
        "queue",
        "napi",
        "rps_cpus",
        "rps_flow_cnt",
        "xps_cpus",
    ]);
    for d in &topology.devices {
        for q in &d.rx_queues {
            queues.add_row(vec![
                d.name.clone(),
                format!("rx-{}", q.index),
                opt(q.napi_id),
                cpus(&q.rps_cpus),
                opt(q.rps_flow_cnt),
                String::new(),
            ]);
        }
        for q in &d.tx_queues {
            queues.add_row(vec![
                d.name.clone(),
                format!("tx-{}", q.index),
                opt(q.napi_id),
                String::new(),
                String::new(),
                cpus(&q.xps_cpus),
            ]);
        }
    }
    let _ = writeln!(out, "\nQueues\n{queues}");
    out
}

/// Mean of a per-interval metric, formatted; `*` marks tick-sampled values.
fn cell(
    intervals: &[Interval],
    pick: impl Fn(&Interval) -> Option<&Metric>,
    fmt: impl Fn(f64) -> String,
) -> String {
    match mean_over(intervals.iter().map(|i| (i, pick(i)))) {
        Some((m, _)) => {
            let mark = if m.source == Source::Tick { "*" } else { "" };
            format!("{}{mark}", fmt(m.value))
        }
        None => "-".into(),
    }
}

fn pct(v: f64) -> String {
    format!("{:.1}", v * 100.0)
}

fn cpu_table(obs: &Observation) -> Table {
    let mut t = table(&[
        "cpu",
        "irq/s",
        "net irq/s",
        "NET_RX/s",
        "NET_TX/s",
        "pkt/s",
        "pkt/softirq",
        "pkt/irq",
        "drop/s",
        "squeeze/s",
        "usr%",
        "sys%",
        "irq%",
        "sirq%",
        "idle%",
        "ksoftirqd%",
    ]);
    for cpu in napilab_core::stats::cpus(obs) {
        let c = |pick: fn(&CpuInterval) -> Option<&Metric>, fmt: fn(f64) -> String| {
            cell(&obs.intervals, |i| i.cpu(cpu).and_then(pick), fmt)
        };
        let share = |pick: fn(&napilab_core::CpuTimeShares) -> &Metric| {
            cell(
                &obs.intervals,
                |i| i.cpu(cpu).and_then(|c| c.time.as_ref()).map(pick),
                pct,
            )
        };
        t.add_row(vec![
            cpu.to_string(),
            c(|c| c.hardirqs.as_ref(), short),
            c(|c| c.net_hardirqs.as_ref(), short),
            c(|c| c.net_rx_softirqs.as_ref(), short),
            c(|c| c.net_tx_softirqs.as_ref(), short),
            c(|c| c.softnet_processed.as_ref(), short),
            c(
                |c| c.packets_per_net_rx_softirq.as_ref(),
                |v| format!("{v:.1}"),
            ),
            c(
                |c| c.packets_per_net_hardirq.as_ref(),
                |v| format!("{v:.1}"),
            ),
            c(|c| c.softnet_dropped.as_ref(), short),
            c(|c| c.time_squeeze.as_ref(), short),
            share(|s| &s.user),
            share(|s| &s.system),
            share(|s| &s.irq),
            share(|s| &s.softirq),
            share(|s| &s.idle),
            c(|c| c.ksoftirqd.as_ref(), pct),
        ]);
    }
    t
}

fn device_table(obs: &Observation) -> Table {
    let mut t = table(&[
        "device",
        "rx pkt/s",
        "tx pkt/s",
        "rx Mbit/s",
        "tx Mbit/s",
        "rx drop/s",
        "tx drop/s",
        "qdisc",
        "qdisc drop/s",
        "backlog",
    ]);
    // Devices seen in any interval, in order of first appearance: a device created
    // during the observation is not in the map taken at its start.
    let mut names: Vec<&str> = Vec::new();
    for d in obs.intervals.iter().flat_map(|i| &i.devices) {
        if !names.contains(&d.name.as_str()) {
            names.push(&d.name);
        }
    }
    for name in names {
        let c = |pick: fn(&DeviceInterval) -> Option<&Metric>, fmt: fn(f64) -> String| {
            cell(&obs.intervals, |i| i.device(name).and_then(pick), fmt)
        };
        let mbit = |v: f64| format!("{:.2}", v / 1e6);
        let last_qdisc = obs
            .intervals
            .last()
            .and_then(|i| i.device(name))
            .and_then(|x| x.qdisc.as_ref());
        t.add_row(vec![
            name.to_string(),
            c(|x| x.rx_packets.as_ref(), short),
            c(|x| x.tx_packets.as_ref(), short),
            c(|x| x.rx_bits.as_ref(), mbit),
            c(|x| x.tx_bits.as_ref(), mbit),
            c(|x| x.rx_dropped.as_ref(), short),
            c(|x| x.tx_dropped.as_ref(), short),
            opt(last_qdisc.map(|q| q.kind.clone())),
            c(|x| x.qdisc.as_ref().and_then(|q| q.drops.as_ref()), short),
            opt(last_qdisc.and_then(|q| q.backlog_packets)),
        ]);
    }
    t
}

pub fn findings(findings: &[Finding]) -> String {
    if findings.is_empty() {
        return "\nFindings: none\n".into();
    }
    let mut out = String::from("\nFindings\n");
    for f in findings {
        let level = match f.severity {
            Severity::Warning => "WARN",
            Severity::Info => "info",
        };
        let _ = writeln!(out, "[{level}] {} ({})", f.title, f.rule.name());
        let evidence: Vec<String> = f
            .evidence
            .iter()
            .map(|e| {
                format!(
                    "{}={} ({})",
                    e.name,
                    short(e.metric.value),
                    e.metric.source.as_str()
                )
            })
            .collect();
        let _ = writeln!(out, "    evidence: {}", evidence.join(", "));
        let _ = writeln!(out, "    rule: {}", f.threshold);
        let _ = writeln!(out, "    {}", f.explanation);
    }
    out
}

pub fn notices(notices: &[Notice]) -> String {
    let mut out = String::new();
    if !notices.is_empty() {
        out.push_str("\nNot measured\n");
        for n in notices {
            let _ = writeln!(out, "  - {}: {}", n.what, n.why);
        }
    }
    out
}

pub fn observation(obs: &Observation, show_map: bool) -> String {
    let mut out = String::new();
    if show_map {
        out.push_str(&map(&obs.topology, &obs.host, &obs.settings));
    } else {
        out.push_str(&host_line(&obs.host, &obs.settings));
    }
    let seconds: f64 = obs.intervals.iter().map(|i| i.duration_s).sum();
    let _ = writeln!(
        out,
        "\nObservation: {} interval(s), {seconds:.1} s ({:?}); per-second means, * = tick-sampled",
        obs.intervals.len(),
        obs.origin.kind
    );
    if obs.intervals.is_empty() {
        out.push_str("no complete interval: observe for at least one --interval\n");
    } else {
        let _ = writeln!(out, "\nPer CPU\n{}", cpu_table(obs));
        let _ = writeln!(out, "\nPer device\n{}", device_table(obs));
        let cpu_per_mbps = cell(
            &obs.intervals,
            |i| i.host.cpu_per_mbps.as_ref(),
            |v| format!("{v:.4}"),
        );
        let _ = writeln!(out, "\nHost: busy CPUs per received Mbit/s: {cpu_per_mbps}");
        let threads: Vec<String> = obs
            .intervals
            .last()
            .map(|i| {
                i.threads
                    .iter()
                    .filter_map(|t| {
                        let m = mean_over(obs.intervals.iter().map(|iv| {
                            (
                                iv,
                                iv.threads
                                    .iter()
                                    .find(|x| x.pid == t.pid)
                                    .and_then(|x| x.cpu.as_ref()),
                            )
                        }))?;
                        (m.0.value > 0.0).then(|| format!("{} {:.1}%", t.name, m.0.value * 100.0))
                    })
                    .collect()
            })
            .unwrap_or_default();
        if !threads.is_empty() {
            let _ = writeln!(out, "Packet threads (CPU share): {}", threads.join(", "));
        }
    }
    out.push_str(&findings(&obs.findings));
    out.push_str(&notices(&obs.notices));
    out
}
