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

/// Prints `value` as pretty JSON when `json` is set and says whether it did: a
/// command's printer returns early then and prints its text otherwise.
pub fn printed_as_json<T: serde::Serialize>(value: &T, json: bool) -> anyhow::Result<bool> {
    if json {
        println!("{}", serde_json::to_string_pretty(value)?);
    }
    Ok(json)
}

/// A table in the CLI's one style (UTF-8 borders only) with `header`.
pub fn table(header: impl Into<comfy_table::Row>) -> Table {
    let mut t = Table::new();
    t.load_style(UTF8_BORDERS_ONLY);
    t.set_header(header);
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
    // The identity first: numbers only compare with numbers from the same machine.
    let identity = match &host.identity {
        Some(id) => format!("host identity: {}\n", id.summary()),
        None => "host identity: unknown (recorded before napilab kept it)\n".into(),
    };
    identity
        + &format!(
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

/// One line per context and CPU that polled an instance, busiest first.
fn observed_polling(rows: &[napilab_core::ObservedPolling]) -> String {
    if rows.is_empty() {
        return "-".into();
    }
    rows.iter()
        .map(|r| {
            let who = match &r.application {
                Some(app) => format!("{} ({app})", r.context.as_str()),
                None => r.context.as_str().to_string(),
            };
            let per_poll = if r.polls_per_s.value > 0.0 {
                r.packets_per_s.value / r.polls_per_s.value
            } else {
                0.0
            };
            format!(
                "{who} cpu{}: {} polls/s, {per_poll:.1} pkt/poll",
                r.cpu,
                short(r.polls_per_s.value)
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

pub fn map(topology: &TopologyMap, host: &HostFacts, settings: &Settings) -> String {
    let mut out = host_line(host, settings);
    let mut devices = table([
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

    let mut napis = table([
        "device",
        "napi",
        "irq",
        "rx queues",
        "tx queues",
        "defer",
        "gro_flush ns",
        "irq_suspend ns",
        "polled by",
        "seen polling (--trace)",
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
                observed_polling(&n.observed_polling),
            ]);
        }
    }
    if napis.row_count() == 0 {
        out.push_str("\nNAPI instances: none reported (see notices)\n");
    } else {
        let _ = writeln!(out, "\nNAPI instances\n{napis}");
    }

    if !topology.irqs.is_empty() {
        let mut irqs = table([
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

    let mut queues = table([
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
    let mut t = table([
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
    let mut t = table([
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
            .map(napilab_core::Evidence::brief)
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
        out.push_str(&trace_tables(obs));
    }
    out.push_str(&findings(&obs.findings));
    out.push_str(&notices(&obs.notices));
    out
}

/// The tracing tier's tables (`observe --trace`): measured against reported CPU time,
/// NAPI polls by execution context, and NET_RX softirq runs. Empty without trace data.
fn trace_tables(obs: &Observation) -> String {
    use napilab_core::trace::ExecContext;
    use std::collections::BTreeMap;

    let traced: Vec<&Interval> = obs.intervals.iter().filter(|i| i.trace.is_some()).collect();
    if traced.is_empty() {
        return String::new();
    }
    let seconds: f64 = traced.iter().map(|i| i.duration_s).sum();
    let mut out = String::new();
    let mut cpu_t = table([
        "cpu",
        "softirq% trace",
        "sirq% tick",
        "hardirq% trace",
        "irq% tick",
        "net softirq% trace",
        "in ksoftirqd%",
        "sys% tick",
        "idle% tick",
        "napi-thread polls/s",
        "busy polls/s",
    ]);
    let owned: Vec<Interval> = traced.iter().map(|i| (*i).clone()).collect();
    for cpu in napilab_core::stats::cpus(obs) {
        let tr = |pick: fn(&napilab_core::trace::CpuTraceTime) -> &Metric,
                  fmt: fn(f64) -> String| {
            cell(
                &owned,
                |i| i.trace.as_ref().and_then(|t| t.cpu(cpu)).map(pick),
                fmt,
            )
        };
        let tick = |pick: fn(&napilab_core::CpuTimeShares) -> &Metric| {
            cell(
                &owned,
                |i| i.cpu(cpu).and_then(|c| c.time.as_ref()).map(pick),
                pct,
            )
        };
        cpu_t.add_row(vec![
            cpu.to_string(),
            tr(|c| &c.softirq, pct),
            tick(|s| &s.softirq),
            tr(|c| &c.hardirq, pct),
            tick(|s| &s.irq),
            tr(|c| &c.net_softirq, pct),
            tr(|c| &c.softirq_ksoftirqd, pct),
            tick(|s| &s.system),
            tick(|s| &s.idle),
            tr(|c| &c.napi_thread_polls, short),
            tr(|c| &c.busy_poll_polls, short),
        ]);
    }
    let _ = writeln!(
        out,
        "\nMeasured (trace: tracepoints) vs reported (tick: /proc/stat) CPU time, over {} traced interval(s)\n{cpu_t}",
        traced.len()
    );

    type NapiRow = (u64, u64, u64, Option<String>);
    let mut napi: BTreeMap<(u32, String, u32, ExecContext), NapiRow> = BTreeMap::new();
    let mut runs: BTreeMap<(u32, ExecContext), (u64, u64, u64, u64)> = BTreeMap::new();
    for i in &traced {
        let Some(t) = &i.trace else { continue };
        for n in &t.napi {
            // Host-wide: other namespaces' instances stay, labelled with theirs.
            let device = napilab_core::device_join::label(obs.topology.netns, &n.device, n.netns);
            let e = napi
                .entry((n.napi_id, device, n.cpu, n.context))
                .or_default();
            e.0 += n.polls;
            e.1 += n.packets;
            e.2 += n.full_budget_polls;
            if n.application.is_some() {
                e.3.clone_from(&n.application);
            }
        }
        for r in &t.net_rx_runs {
            let e = runs.entry((r.cpu, r.context)).or_default();
            e.0 += r.runs;
            e.1 += r.packets;
            e.2 += r.budget_limited;
            e.3 += r.time_limited;
        }
    }
    if !napi.is_empty() {
        let mut t = table([
            "napi",
            "device",
            "cpu",
            "context",
            "polls/s",
            "pkt/s",
            "pkt/poll",
            "full budget%",
        ]);
        for ((id, dev, cpu, ctx), (polls, pkts, full, app)) in &napi {
            let context = match app {
                Some(app) => format!("{} ({app})", ctx.as_str()),
                None => ctx.as_str().to_string(),
            };
            t.add_row(vec![
                match (*id, dev.is_empty()) {
                    (0, true) => "backlog".into(),
                    (0, false) => "(no id)".into(),
                    _ => id.to_string(),
                },
                if dev.is_empty() {
                    "-".into()
                } else {
                    dev.clone()
                },
                cpu.to_string(),
                context,
                short(*polls as f64 / seconds),
                short(*pkts as f64 / seconds),
                format!("{:.1}", *pkts as f64 / (*polls).max(1) as f64),
                pct(*full as f64 / (*polls).max(1) as f64),
            ]);
        }
        let _ = writeln!(out, "\nNAPI polls by execution context (trace)\n{t}");
    }
    if !runs.is_empty() {
        let mut t = table([
            "cpu",
            "context",
            "NET_RX runs/s",
            "pkt/run",
            "budget-limited/s",
            "time-limited/s",
        ]);
        for ((cpu, ctx), (n, pkts, budget, time)) in &runs {
            t.add_row(vec![
                cpu.to_string(),
                ctx.as_str().to_string(),
                short(*n as f64 / seconds),
                format!("{:.1}", *pkts as f64 / (*n).max(1) as f64),
                short(*budget as f64 / seconds),
                short(*time as f64 / seconds),
            ]);
        }
        let _ = writeln!(out, "\nNET_RX softirq runs (trace)\n{t}");
    }
    out.push_str(&stage_table(&traced, seconds));
    out.push_str(&context_table(&traced, seconds));
    out.push_str(&packet_tables(&traced, seconds));
    out
}

/// The per-packet tier (`--trace-packets`): stage-to-stage latency per device and
/// stage pair (histograms merged over the intervals), and drops by reason.
fn packet_tables(traced: &[&Interval], seconds: f64) -> String {
    use napilab_core::trace::{latency_quantile, merge_buckets, LatencyBucket};
    use std::collections::BTreeMap;
    // Network namespaces are part of the key: the same name can exist in several.
    type PairKey = (String, String, u32, String, String, u32);
    let mut pairs: BTreeMap<PairKey, (u64, f64, Vec<&[LatencyBucket]>)> = BTreeMap::new();
    type DropKey = (String, String, String, String);
    let mut drops: BTreeMap<DropKey, u64> = BTreeMap::new();
    for i in traced {
        let Some(t) = &i.trace else { continue };
        for p in &t.packet_stages {
            let e = pairs
                .entry((
                    p.from_device.clone(),
                    p.from.clone(),
                    p.from_netns,
                    p.device.clone(),
                    p.to.clone(),
                    p.netns,
                ))
                .or_default();
            e.0 += p.count;
            e.1 += p.mean_ns * p.count as f64;
            e.2.push(&p.histogram);
        }
        for d in &t.drops {
            *drops
                .entry((
                    d.reason.clone(),
                    d.device.clone(),
                    d.protocol.clone(),
                    d.last_stage.clone().unwrap_or_else(|| "-".into()),
                ))
                .or_default() += d.count;
        }
    }
    if seconds <= 0.0 || (pairs.is_empty() && drops.is_empty()) {
        return String::new();
    }
    let dev = |d: &str| {
        if d.is_empty() {
            "-".to_string()
        } else {
            d.to_string()
        }
    };
    let ns = |v: f64| {
        if v >= 1e6 {
            format!("{:.2} ms", v / 1e6)
        } else if v >= 1e3 {
            format!("{:.1} us", v / 1e3)
        } else {
            format!("{v:.0} ns")
        }
    };
    let mut out = String::new();
    if !pairs.is_empty() {
        let mut t = table(["from", "to", "pkt/s", "mean", "p50", "p99"]);
        let mut rows: Vec<_> = pairs.into_iter().collect();
        // Busiest transitions first.
        rows.sort_by(|a, b| b.1 .0.cmp(&a.1 .0).then(a.0.cmp(&b.0)));
        for ((from_dev, from, _, to_dev, to, _), (count, weighted, lists)) in rows {
            let merged = merge_buckets(lists);
            let q = |q: f64| latency_quantile(&merged, q).map_or_else(|| "-".into(), ns);
            t.add_row(vec![
                format!("{} {from}", dev(&from_dev)),
                format!("{} {to}", dev(&to_dev)),
                short(count as f64 / seconds),
                ns(weighted / count.max(1) as f64),
                q(0.5),
                q(0.99),
            ]);
        }
        let _ = writeln!(
            out,
            "\nPer-packet stage latency (trace: per-packet tracepoints, --trace-packets)\n{t}"
        );
    }
    if !drops.is_empty() {
        let mut t = table([
            "reason",
            "device",
            "protocol",
            "last stage",
            "drops/s",
            "drops",
        ]);
        let mut rows: Vec<_> = drops.into_iter().collect();
        rows.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        for ((reason, device, protocol, last), count) in rows {
            t.add_row(vec![
                reason,
                dev(&device),
                protocol,
                last,
                short(count as f64 / seconds),
                count.to_string(),
            ]);
        }
        let _ = writeln!(out, "\nDrops by reason (trace: skb:kfree_skb)\n{t}");
    }
    out
}

/// CPU time by execution context from the sampled stacks (`--stages`): where busy
/// polling and NAPI kthreads spend time that /proc/stat files under "system".
fn context_table(traced: &[&Interval], seconds: f64) -> String {
    use std::collections::BTreeMap;
    let mut share: BTreeMap<(u32, napilab_core::trace::ExecContext), f64> = BTreeMap::new();
    for i in traced {
        for c in i.trace.iter().flat_map(|t| &t.context_shares) {
            *share.entry((c.cpu, c.context)).or_default() += c.share.value * i.duration_s;
        }
    }
    if share.is_empty() || seconds <= 0.0 {
        return String::new();
    }
    let mut t = table(["cpu", "context", "CPU %"]);
    for ((cpu, context), weighted) in share {
        t.add_row(vec![
            cpu.to_string(),
            context.as_str().to_string(),
            pct(weighted / seconds),
        ]);
    }
    format!("\nTime by execution context (sample: stacks showing the context)\n{t}\n")
}

/// Stage profile (`--stages`): mean CPU share per stage and CPU, and cost per Mbit/s.
fn stage_table(traced: &[&Interval], seconds: f64) -> String {
    use std::collections::BTreeMap;
    let mut share: BTreeMap<(String, u32), f64> = BTreeMap::new();
    let mut per_mbps: BTreeMap<String, (f64, f64)> = BTreeMap::new();
    let mut cpus: Vec<u32> = Vec::new();
    for i in traced {
        let Some(t) = &i.trace else { continue };
        for s in &t.stages {
            *share.entry((s.stage.clone(), s.cpu)).or_default() += s.share.value * i.duration_s;
            cpus.push(s.cpu);
        }
        for c in &t.stage_costs {
            if let Some(m) = &c.per_mbps {
                let e = per_mbps.entry(c.stage.clone()).or_default();
                e.0 += m.value * i.duration_s;
                e.1 += i.duration_s;
            }
        }
    }
    if share.is_empty() || seconds <= 0.0 {
        return String::new();
    }
    cpus.sort_unstable();
    cpus.dedup();
    let mut header: Vec<String> = vec!["stage".into()];
    header.extend(cpus.iter().map(|c| format!("cpu{c}%")));
    header.push("CPUs".into());
    header.push("CPU per Mbit/s".into());
    let header_refs: Vec<&str> = header.iter().map(String::as_str).collect();
    let mut t = table(&header_refs);
    for stage in napilab_trace::stages::STAGES {
        let row: Vec<f64> = cpus
            .iter()
            .map(|c| share.get(&(stage.to_string(), *c)).copied().unwrap_or(0.0) / seconds)
            .collect();
        let total: f64 = row.iter().sum();
        if total <= 0.0 {
            continue;
        }
        let mut cells = vec![stage.to_string()];
        cells.extend(row.iter().map(|v| pct(*v)));
        cells.push(format!("{total:.3}"));
        cells.push(
            per_mbps
                .get(stage)
                .filter(|(_, w)| *w > 0.0)
                .map_or_else(|| "-".into(), |(v, w)| format!("{:.5}", v / w)),
        );
        t.add_row(cells);
    }
    format!("\nStage profile (sample: cpu-clock stacks mapped to stages by caller)\n{t}\n")
}
