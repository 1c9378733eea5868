//! The metric families `napilab export` serves (docs/export.md), built from one sample
//! of the observe pipeline: the raw counters under node_exporter's names, so existing
//! dashboards keep working, and the `napilab_*` families nobody else has, each with the
//! `source` of its numbers (proc, tick, trace, map, finding). Pure: the caller reads the
//! kernel, this module only names and labels, so it is tested without root.

use std::collections::BTreeMap;

use napilab_core::trace::ExecContext;
use napilab_core::{Finding, Poller, Severity};
use napilab_probe::record::RecordingHeader;
use napilab_probe::sample::Sample;
use napilab_trace::snapshot::{Snapshot, NET_RX_SOFTIRQ, NET_TX_SOFTIRQ};

use crate::exposition::{Family, Kind};

/// Caps on the label sets that grow with the host: a container host can have thousands
/// of veth devices, and every NAPI instance multiplies into 5 contexts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// NAPI instances exported (the busiest by polls); the rest are counted as dropped.
    pub max_napi_instances: usize,
    /// Devices exported (by name order); the rest are counted as dropped.
    pub max_devices: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_napi_instances: 64,
            max_devices: 256,
        }
    }
}

/// What the caps left out of one sample.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Dropped {
    pub napi_instances: usize,
    pub devices: usize,
}

/// One sample's inputs.
pub struct PacketPath<'a> {
    pub header: &'a RecordingHeader,
    pub sample: &'a Sample,
    /// The BPF maps' cumulative counts (`--trace`), when the tier runs.
    pub trace: Option<&'a Snapshot>,
    /// Findings over the exporter's window.
    pub findings: &'a [Finding],
}

/// Packets-per-poll bucket bounds; the last bucket (+Inf) holds polls of 64 packets or
/// more, i.e. full-budget polls at the default weight (the BPF side clamps at 64).
pub const PACKETS_PER_POLL_BOUNDS: [f64; 8] = [0.0, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 63.0];

pub fn context_label(context: ExecContext) -> &'static str {
    match context {
        ExecContext::Hardirq => "hardirq",
        ExecContext::BhEnable => "bh_enable",
        ExecContext::Ksoftirqd => "ksoftirqd",
        ExecContext::NapiThread => "napi_thread",
        ExecContext::BusyPoll => "busy_poll",
    }
}

fn cpus_label(cpus: &[u32]) -> String {
    cpus.iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

fn opt<T: ToString>(v: Option<T>) -> String {
    v.map(|v| v.to_string()).unwrap_or_default()
}

/// Every packet-path family of one sample, and what the caps dropped.
pub fn packet_path_families(input: &PacketPath<'_>, limits: Limits) -> (Vec<Family>, Dropped) {
    let mut families = Vec::new();
    let mut dropped = Dropped::default();
    let user_hz = f64::from(input.header.host.user_hz.max(1));
    softnet_families(input.sample, &mut families);
    cpu_time_families(input.sample, user_hz, input.trace, &mut families);
    dropped.devices = device_families(input, limits, &mut families);
    dropped.napi_instances = napi_families(input, limits, &mut families);
    thread_families(input.sample, user_hz, &mut families);
    settings_families(input.header, &mut families);
    families.push(host_family(input.header));
    families.push(finding_family(input.findings));
    (families, dropped)
}

fn softnet_families(sample: &Sample, out: &mut Vec<Family>) {
    let mut processed = Family::new(
        "node_softnet_processed",
        "Packets processed by each CPU (/proc/net/softnet_stat; node_exporter's name).",
        Kind::Counter,
    );
    let mut dropped = Family::new(
        "node_softnet_dropped",
        "Packets dropped because the CPU's backlog was full (/proc/net/softnet_stat; node_exporter's name).",
        Kind::Counter,
    );
    let mut squeezed = Family::new(
        "node_softnet_times_squeezed",
        "NET_RX runs that stopped with work left, by budget or time (/proc/net/softnet_stat; node_exporter's name).",
        Kind::Counter,
    );
    for row in sample.softnet.iter().flatten() {
        let cpu = [("cpu", row.cpu.to_string())];
        processed.push(&cpu, row.processed as f64);
        dropped.push(&cpu, row.dropped as f64);
        squeezed.push(&cpu, row.time_squeeze as f64);
    }
    out.extend([processed, dropped, squeezed]);
}

fn cpu_time_families(
    sample: &Sample,
    user_hz: f64,
    trace: Option<&Snapshot>,
    out: &mut Vec<Family>,
) {
    let mut node_cpu = Family::new(
        "node_cpu_seconds",
        "Seconds the CPUs spent in each mode (/proc/stat, tick-sampled; node_exporter's name).",
        Kind::Counter,
    );
    let mut softirq = Family::new(
        "napilab_cpu_softirq_seconds",
        "Softirq seconds per CPU: source=tick is /proc/stat's tick-sampled share, source=trace is measured softirq_entry..exit time (docs/kernel.md: tick sampling misses short softirqs).",
        Kind::Counter,
    );
    let mut hardirq = Family::new(
        "napilab_cpu_hardirq_seconds",
        "Hard-IRQ seconds per CPU: source=tick from /proc/stat, source=trace measured irq_handler_entry..exit time of device IRQs.",
        Kind::Counter,
    );
    if let Some(stat) = &sample.stat {
        for (cpu, t) in &stat.cpus {
            let cpu = cpu.to_string();
            for (mode, ticks) in [
                ("user", t.user),
                ("nice", t.nice),
                ("system", t.system),
                ("idle", t.idle),
                ("iowait", t.iowait),
                ("irq", t.irq),
                ("softirq", t.softirq),
                ("steal", t.steal),
            ] {
                node_cpu.push(
                    &[("cpu", cpu.clone()), ("mode", mode.into())],
                    ticks as f64 / user_hz,
                );
            }
            let tick = [("cpu", cpu.clone()), ("source", "tick".into())];
            softirq.push(&tick, t.softirq as f64 / user_hz);
            hardirq.push(&tick, t.irq as f64 / user_hz);
        }
    }
    let mut net_softirq = Family::new(
        "napilab_cpu_net_softirq_seconds",
        "Measured NET_RX and NET_TX softirq seconds per CPU and execution context (source=trace).",
        Kind::Counter,
    );
    let mut net_rx_runs = Family::new(
        "napilab_net_rx_runs",
        "net_rx_action runs per CPU and context, by what ended them: budget (netdev_budget packets), time (netdev_budget_usecs) or done (source=trace).",
        Kind::Counter,
    );
    if let Some(snap) = trace {
        let mut softirq_ns: BTreeMap<u32, u64> = snap.cpus.iter().map(|c| (*c, 0)).collect();
        let mut net_ns: BTreeMap<(u32, &str, ExecContext), u64> = BTreeMap::new();
        for (&(cpu, vector, context), c) in &snap.softirq {
            *softirq_ns.entry(cpu).or_default() += c.total_ns;
            let name = match vector {
                NET_RX_SOFTIRQ => "NET_RX",
                NET_TX_SOFTIRQ => "NET_TX",
                _ => continue,
            };
            *net_ns.entry((cpu, name, context)).or_default() += c.total_ns;
        }
        for (cpu, ns) in softirq_ns {
            softirq.push(
                &[("cpu", cpu.to_string()), ("source", "trace".into())],
                ns as f64 / 1e9,
            );
        }
        for ((cpu, vector, context), ns) in net_ns {
            net_softirq.push(
                &[
                    ("cpu", cpu.to_string()),
                    ("vector", vector.into()),
                    ("context", context_label(context).into()),
                    ("source", "trace".into()),
                ],
                ns as f64 / 1e9,
            );
        }
        let mut irq_ns: BTreeMap<u32, u64> = snap.cpus.iter().map(|c| (*c, 0)).collect();
        for (&(_, cpu), c) in &snap.irq {
            *irq_ns.entry(cpu).or_default() += c.total_ns;
        }
        for (cpu, ns) in irq_ns {
            hardirq.push(
                &[("cpu", cpu.to_string()), ("source", "trace".into())],
                ns as f64 / 1e9,
            );
        }
        for (&(cpu, context), c) in &snap.net_rx {
            let done = c
                .runs
                .saturating_sub(c.budget_runs)
                .saturating_sub(c.time_runs);
            for (ended, runs) in [
                ("budget", c.budget_runs),
                ("time", c.time_runs),
                ("done", done),
            ] {
                net_rx_runs.push(
                    &[
                        ("cpu", cpu.to_string()),
                        ("context", context_label(context).into()),
                        ("ended", ended.into()),
                        ("source", "trace".into()),
                    ],
                    runs as f64,
                );
            }
        }
    }
    out.extend([node_cpu, softirq, hardirq, net_softirq, net_rx_runs]);
}

/// Device families; returns how many devices the cap left out.
fn device_families(input: &PacketPath<'_>, limits: Limits, out: &mut Vec<Family>) -> usize {
    let counters = [
        ("node_network_receive_packets", "Packets received"),
        ("node_network_transmit_packets", "Packets transmitted"),
        ("node_network_receive_bytes", "Bytes received"),
        ("node_network_transmit_bytes", "Bytes transmitted"),
        ("node_network_receive_drop", "Received packets dropped"),
        ("node_network_transmit_drop", "Transmitted packets dropped"),
        ("node_network_receive_errs", "Receive errors"),
        ("node_network_transmit_errs", "Transmit errors"),
    ];
    let mut families: Vec<Family> = counters
        .iter()
        .map(|(name, what)| {
            Family::new(
                name,
                &format!(
                    "{what} by the device (rtnetlink link statistics of napilab's network namespace; node_exporter's name)."
                ),
                Kind::Counter,
            )
        })
        .collect();
    let mut links: Vec<_> = input.sample.links.iter().flatten().collect();
    links.sort_by(|a, b| a.name.cmp(&b.name));
    let dropped = links.len().saturating_sub(limits.max_devices);
    links.truncate(limits.max_devices);
    for link in &links {
        let device = [("device", link.name.clone())];
        for (family, value) in families.iter_mut().zip([
            link.rx_packets,
            link.tx_packets,
            link.rx_bytes,
            link.tx_bytes,
            link.rx_dropped,
            link.tx_dropped,
            link.rx_errors,
            link.tx_errors,
        ]) {
            family.push(&device, value as f64);
        }
    }
    let mut info = Family::new(
        "napilab_device_info",
        "Per-device packet-path settings as labels, value 1 (source=map: sysfs and rtnetlink, refreshed every map refresh).",
        Kind::Gauge,
    );
    let mut devices: Vec<_> = input.header.topology.devices.iter().collect();
    devices.sort_by(|a, b| a.name.cmp(&b.name));
    for device in devices.into_iter().take(limits.max_devices) {
        info.push(
            &[
                ("device", device.name.clone()),
                ("driver", opt(device.driver.as_ref())),
                ("qdisc", opt(device.qdisc.as_ref().map(|q| &q.kind))),
                ("threaded", opt(device.threaded)),
                ("gro_flush_timeout_ns", opt(device.gro_flush_timeout_ns)),
                ("napi_defer_hard_irqs", opt(device.napi_defer_hard_irqs)),
                ("rx_queues", device.rx_queues.len().to_string()),
                ("source", "map".into()),
            ],
            1.0,
        );
    }
    families.push(info);
    out.extend(families);
    dropped
}

/// The labels that name a NAPI instance: id, device, RX queues and IRQ from the map.
struct NapiName {
    device: String,
    queue: String,
    irq: String,
}

fn napi_names(header: &RecordingHeader) -> BTreeMap<u32, NapiName> {
    let mut names = BTreeMap::new();
    for device in &header.topology.devices {
        for napi in &device.napis {
            names.insert(
                napi.id,
                NapiName {
                    device: device.name.clone(),
                    queue: cpus_label(&napi.rx_queues),
                    irq: opt(napi.irq),
                },
            );
        }
    }
    names
}

#[derive(Default)]
struct NapiTotals {
    polls: u64,
    packets: u64,
    full_budget: u64,
    work_hist: Vec<u64>,
    device: String,
}

/// `napilab_napi_info`: each NAPI instance of the map, at most
/// `limits.max_napi_instances`; returns the family and how many the cap left out.
fn napi_info_family(
    input: &PacketPath<'_>,
    names: &BTreeMap<u32, NapiName>,
    limits: Limits,
) -> (Family, usize) {
    let mut info = Family::new(
        "napilab_napi_info",
        "Per-NAPI-instance settings and poller as labels, value 1 (source=map: netdev netlink napi-get, sysfs, /proc/irq).",
        Kind::Gauge,
    );
    let mut info_count = 0;
    for device in &input.header.topology.devices {
        for napi in &device.napis {
            info_count += 1;
            if info_count > limits.max_napi_instances {
                continue;
            }
            let (poller, affinity) = match &napi.poller {
                Poller::Thread(t) => (t.name.clone(), cpus_label(&t.allowed_cpus)),
                Poller::Softirq { cpus, .. } => ("softirq".to_string(), cpus_label(cpus)),
                Poller::Unknown => ("unknown".to_string(), String::new()),
            };
            let irq_affinity = napi
                .irq
                .and_then(|n| input.header.topology.irqs.iter().find(|i| i.number == n))
                .map(|i| cpus_label(&i.affinity));
            let name = names.get(&napi.id);
            info.push(
                &[
                    ("napi_id", napi.id.to_string()),
                    ("device", device.name.clone()),
                    ("queue", name.map(|n| n.queue.clone()).unwrap_or_default()),
                    ("irq", opt(napi.irq)),
                    ("threaded", opt(napi.threaded.map(u8::from))),
                    ("defer_hard_irqs", opt(napi.defer_hard_irqs)),
                    ("gro_flush_timeout_ns", opt(napi.gro_flush_timeout_ns)),
                    ("irq_suspend_timeout_ns", opt(napi.irq_suspend_timeout_ns)),
                    ("poller", poller),
                    ("affinity", irq_affinity.unwrap_or(affinity)),
                    ("source", "map".into()),
                ],
                1.0,
            );
        }
    }
    (info, info_count.saturating_sub(limits.max_napi_instances))
}

/// Per-NAPI families; returns how many instances the cap left out.
fn napi_families(input: &PacketPath<'_>, limits: Limits, out: &mut Vec<Family>) -> usize {
    let names = napi_names(input.header);
    let (info, mut dropped) = napi_info_family(input, &names, limits);

    let mut polls = Family::new(
        "napilab_napi_polls",
        "NAPI polls per instance and execution context (napi:napi_poll, source=trace); netns=other marks instances of devices in other network namespaces.",
        Kind::Counter,
    );
    let mut packets = Family::new(
        "napilab_napi_packets",
        "Packets returned by NAPI polls (the poll's work) per instance and context (source=trace).",
        Kind::Counter,
    );
    let mut full = Family::new(
        "napilab_napi_full_budget_polls",
        "Polls that used their whole budget (work >= weight) per instance and context (source=trace).",
        Kind::Counter,
    );
    let mut per_poll = Family::new(
        "napilab_napi_packets_per_poll",
        "Packets per NAPI poll per instance, all contexts (source=trace); the +Inf bucket holds polls of 64 packets or more.",
        Kind::Histogram(PACKETS_PER_POLL_BOUNDS.to_vec()),
    );
    if let Some(snap) = input.trace {
        // (napi_id, unnamed_ifindex, whose namespace) -> context -> totals over CPUs.
        let mut instances: BTreeMap<(u32, u32, &str), BTreeMap<ExecContext, NapiTotals>> =
            BTreeMap::new();
        for (key, c) in &snap.napi {
            let whose = id_less_namespace(key, input.header.topology.netns);
            let t = instances
                .entry((key.napi_id, key.unnamed_ifindex, whose))
                .or_default()
                .entry(key.context)
                .or_default();
            t.polls += c.polls;
            t.packets += c.packets;
            t.full_budget += c.full_budget;
            if t.work_hist.len() < c.work_hist.len() {
                t.work_hist.resize(c.work_hist.len(), 0);
            }
            for (sum, v) in t.work_hist.iter_mut().zip(&c.work_hist) {
                *sum += v;
            }
            if t.device.is_empty() {
                t.device = c.device.clone();
            }
        }
        let mut ranked: Vec<_> = instances.into_iter().collect();
        ranked.sort_by_key(|(key, contexts)| {
            (
                std::cmp::Reverse(contexts.values().map(|t| t.polls).sum::<u64>()),
                *key,
            )
        });
        let over = ranked.len().saturating_sub(limits.max_napi_instances);
        dropped = dropped.max(over);
        ranked.truncate(limits.max_napi_instances);
        for ((napi_id, _, id_less_netns), contexts) in ranked {
            let name = names.get(&napi_id);
            let traced_device = contexts
                .values()
                .find(|t| !t.device.is_empty())
                .map(|t| t.device.clone());
            let device = name
                .map(|n| n.device.clone())
                .or(traced_device)
                .unwrap_or_else(|| {
                    if napi_id == 0 {
                        "backlog".into()
                    } else {
                        String::new()
                    }
                });
            // NAPI ids are global, the map only holds this namespace's instances: say
            // which series belong to devices of other namespaces (containers, labs).
            let netns = match (napi_id, name) {
                (0, _) => id_less_netns,
                (_, Some(_)) => "own",
                (_, None) => "other",
            };
            let base = [
                ("napi_id", napi_id.to_string()),
                ("netns", netns.to_string()),
                ("device", device),
                ("queue", name.map(|n| n.queue.clone()).unwrap_or_default()),
                ("irq", name.map(|n| n.irq.clone()).unwrap_or_default()),
            ];
            let mut hist = vec![0u64; PACKETS_PER_POLL_BOUNDS.len() + 1];
            let mut sum = 0u64;
            for (context, t) in &contexts {
                let mut labels = base.to_vec();
                labels.push(("context", context_label(*context).into()));
                labels.push(("source", "trace".into()));
                polls.push(&labels, t.polls as f64);
                packets.push(&labels, t.packets as f64);
                full.push(&labels, t.full_budget as f64);
                sum += t.packets;
                for (work, n) in t.work_hist.iter().enumerate() {
                    let bucket = PACKETS_PER_POLL_BOUNDS
                        .iter()
                        .position(|b| work as f64 <= *b)
                        .unwrap_or(PACKETS_PER_POLL_BOUNDS.len());
                    hist[bucket] += n;
                }
            }
            let mut labels = base.to_vec();
            labels.push(("source", "trace".into()));
            per_poll.push_histogram(&labels, hist, sum as f64);
        }
    }
    out.extend([info, polls, packets, full, per_poll]);
    dropped
}

/// The `netns` label of an instance without a NAPI id: `any` for the per-CPU backlog
/// (no device) or when a namespace is unknown, else whether the device the tier
/// recorded is in this namespace (`own`) or another (`other`).
fn id_less_namespace(key: &napilab_trace::snapshot::NapiKey, own: Option<u32>) -> &'static str {
    match own {
        _ if key.napi_id != 0 || key.unnamed_ifindex == 0 || key.unnamed_netns == 0 => "any",
        Some(own) if own == key.unnamed_netns => "own",
        Some(_) => "other",
        None => "any",
    }
}

fn thread_families(sample: &Sample, user_hz: f64, out: &mut Vec<Family>) {
    let mut cpu = Family::new(
        "napilab_thread_cpu_seconds",
        "CPU seconds of the packet threads (ksoftirqd/N, napi/<dev>-<id>), user + system (/proc/<pid>/stat, source=proc).",
        Kind::Counter,
    );
    for task in &sample.threads {
        let role = if task.comm.starts_with("ksoftirqd/") {
            "ksoftirqd"
        } else {
            "napi_thread"
        };
        cpu.push(
            &[
                ("thread", task.comm.clone()),
                ("role", role.into()),
                ("source", "proc".into()),
            ],
            (task.utime + task.stime) as f64 / user_hz,
        );
    }
    out.push(cpu);
}

fn settings_families(header: &RecordingHeader, out: &mut Vec<Family>) {
    let mut sysctl = Family::new(
        "napilab_net_core_setting",
        "The net.core packet-path sysctls (source=map: /proc/sys/net/core; absent outside the initial network namespace).",
        Kind::Gauge,
    );
    let s = &header.settings;
    for (name, value) in [
        ("netdev_budget", s.netdev_budget),
        ("netdev_budget_usecs", s.netdev_budget_usecs),
        ("dev_weight", s.dev_weight),
        ("busy_poll", s.busy_poll),
        ("busy_read", s.busy_read),
    ] {
        if let Some(v) = value {
            sysctl.push(&[("name", name.into()), ("source", "map".into())], v as f64);
        }
    }
    out.push(sysctl);
}

/// Which machine the numbers come from, so a dashboard can split a fleet by CPU,
/// kernel and hypervisor before comparing hosts (napilab compare does the same).
fn host_family(header: &RecordingHeader) -> Family {
    let mut info = Family::new(
        "napilab_host_info",
        "The host's identity as labels, value 1 (source=map: /proc/cpuinfo, /proc/sys/kernel/osrelease, /sys; refreshed every map refresh; `napilab host` shows every field).",
        Kind::Gauge,
    );
    if let Some(id) = &header.host.identity {
        info.push(
            &[
                ("vendor", opt(id.cpu.vendor.as_ref())),
                ("model", opt(id.cpu.model_name.as_ref())),
                ("kernel", opt(id.kernel.release.as_ref())),
                ("hypervisor", id.hypervisor_label()),
                ("microcode", opt(id.cpu.microcode.as_ref())),
                ("source", "map".into()),
            ],
            1.0,
        );
    }
    info
}

fn finding_family(findings: &[Finding]) -> Family {
    let mut family = Family::new(
        "napilab_finding",
        "Active findings (napilab's rules over the exporter's window), value 1 while the rule holds; the series disappears when it stops holding.",
        Kind::Gauge,
    );
    let mut seen = std::collections::BTreeSet::new();
    for f in findings {
        let key = (f.rule.name(), f.subject.to_string());
        if !seen.insert(key.clone()) {
            continue;
        }
        family.push(
            &[
                ("rule", key.0.into()),
                (
                    "severity",
                    match f.severity {
                        Severity::Info => "info".into(),
                        Severity::Warning => "warning".into(),
                    },
                ),
                ("subject", key.1),
                ("source", "finding".into()),
            ],
            1.0,
        );
    }
    family
}

/// The exporter's own cost and state.
#[derive(Clone, Debug, Default)]
pub struct SelfCost {
    pub cpu_seconds: f64,
    pub resident_bytes: Option<u64>,
    /// The allocator's live and resident bytes.
    pub heap: Option<crate::heap::HeapStats>,
    pub samples: u64,
    pub last_sample_seconds: f64,
    pub last_sample_unix_seconds: f64,
    /// Whether the BPF tier runs; false means the proc tier.
    pub trace_active: bool,
    /// `kernel.bpf_stats_enabled`, when readable.
    pub bpf_stats_enabled: Option<bool>,
    /// Per BPF program: (name, runs, run time ns).
    pub bpf_programs: Vec<(String, u64, u64)>,
    /// Cumulative series left out by the caps, per family.
    pub dropped: Dropped,
    /// The HTTP server's connections.
    pub http: crate::export_http::HttpCounts,
}

pub fn exporter_families(cost: &SelfCost) -> Vec<Family> {
    let flag = |on: bool| f64::from(u8::from(on));
    let cpu = Family::single(
        "napilab_exporter_cpu_seconds",
        "CPU seconds used by this exporter process, user + system (/proc/self/stat).",
        Kind::Counter,
        Some(cost.cpu_seconds),
    );
    let rss = Family::single(
        "napilab_exporter_resident_memory_bytes",
        "Resident memory of this exporter process (/proc/self/statm).",
        Kind::Gauge,
        cost.resident_bytes.map(|b| b as f64),
    );
    let heap_live = Family::single(
        "napilab_exporter_heap_allocated_bytes",
        "Bytes this exporter holds in live heap allocations (jemalloc stats.allocated): a leak grows this; RSS above it is allocator pages not yet returned and code.",
        Kind::Gauge,
        cost.heap.map(|h| h.allocated as f64),
    );
    let heap_resident = Family::single(
        "napilab_exporter_heap_resident_bytes",
        "Resident pages of this exporter's heap allocator, live, metadata and freed pages not yet returned (jemalloc stats.resident).",
        Kind::Gauge,
        cost.heap.map(|h| h.resident as f64),
    );
    let samples = Family::single(
        "napilab_exporter_samples",
        "Samples taken by the background sampler (scrapes never read the kernel).",
        Kind::Counter,
        Some(cost.samples as f64),
    );
    let duration = Family::single(
        "napilab_exporter_sample_duration_seconds",
        "Wall time the last sample took (kernel reads, analysis and rendering).",
        Kind::Gauge,
        Some(cost.last_sample_seconds),
    );
    let at = Family::single(
        "napilab_exporter_last_sample_timestamp_seconds",
        "Unix time of the last sample.",
        Kind::Gauge,
        Some(cost.last_sample_unix_seconds),
    );
    let tier = Family::single(
        "napilab_exporter_trace_active",
        "1 when the BPF tracing tier runs (source=trace metrics present), 0 on the /proc tier (no --trace, or BPF unavailable: see the exporter's log).",
        Kind::Gauge,
        Some(flag(cost.trace_active)),
    );
    let stats = Family::single(
        "napilab_exporter_bpf_stats_enabled",
        "kernel.bpf_stats_enabled: 1 when the kernel counts BPF program runs and run time (napilab export --bpf-stats turns it on while it runs).",
        Kind::Gauge,
        cost.bpf_stats_enabled.map(flag),
    );
    let mut runs = Family::new(
        "napilab_exporter_bpf_program_runs",
        "Runs of each of the exporter's BPF programs (kernel BPF statistics; counted only while they are enabled).",
        Kind::Counter,
    );
    let mut run_time = Family::new(
        "napilab_exporter_bpf_program_run_seconds",
        "Run time of each of the exporter's BPF programs (kernel BPF statistics; counted only while they are enabled).",
        Kind::Counter,
    );
    for (name, n, ns) in &cost.bpf_programs {
        let program = [("program", name.clone())];
        runs.push(&program, *n as f64);
        run_time.push(&program, *ns as f64 / 1e9);
    }
    let mut dropped = Family::new(
        "napilab_exporter_series_dropped",
        "Instances left out by the cardinality caps, summed over samples (max_napi_instances, max_devices).",
        Kind::Counter,
    );
    dropped.push(
        &[("family", "napi".into())],
        cost.dropped.napi_instances as f64,
    );
    dropped.push(&[("family", "device".into())], cost.dropped.devices as f64);
    let mut open = Family::new(
        "napilab_exporter_http_connections",
        "HTTP connections open now (at most max_connections).",
        Kind::Gauge,
    );
    open.push(&[], cost.http.open as f64);
    let mut accepted = Family::new(
        "napilab_exporter_http_connections_accepted",
        "HTTP connections accepted and served.",
        Kind::Counter,
    );
    accepted.push(&[], cost.http.accepted as f64);
    let mut closed = Family::new(
        "napilab_exporter_http_connections_closed",
        "HTTP connections the server closed on a limit: over_limit (max_connections were open: closed at once), header_timeout (no whole request head within header_timeout), header_too_large (a request head over 16 KiB: answered 431).",
        Kind::Counter,
    );
    for (reason, n) in [
        ("over_limit", cost.http.refused_over_limit),
        ("header_timeout", cost.http.header_timeouts),
        ("header_too_large", cost.http.header_too_large),
    ] {
        closed.push(&[("reason", reason.into())], n as f64);
    }
    vec![
        cpu,
        rss,
        heap_live,
        heap_resident,
        samples,
        duration,
        at,
        tier,
        stats,
        runs,
        run_time,
        dropped,
        open,
        accepted,
        closed,
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use napilab_trace::snapshot::{NapiCounts, NapiKey, WORK_SLOTS};
    use std::collections::BTreeSet;
    use std::path::Path;

    #[test]
    fn id_less_instances_are_labelled_by_the_namespace_the_tier_recorded() {
        let key = |napi_id, unnamed_ifindex, unnamed_netns| NapiKey {
            napi_id,
            unnamed_ifindex,
            unnamed_netns,
            cpu: 0,
            context: ExecContext::Hardirq,
        };
        let own = Some(4026531840);
        assert_eq!(id_less_namespace(&key(0, 5, 4026531840), own), "own");
        assert_eq!(id_less_namespace(&key(0, 5, 4026532500), own), "other");
        assert_eq!(id_less_namespace(&key(0, 0, 0), own), "any", "the backlog");
        assert_eq!(id_less_namespace(&key(0, 5, 4026532500), None), "any");
        assert_eq!(
            id_less_namespace(&key(0, 5, 0), own),
            "any",
            "no namespace recorded"
        );
    }

    /// The families of `sample` without the trace tier, no findings, default limits.
    fn untraced_families(header: &RecordingHeader, sample: &Sample) -> (Vec<Family>, Dropped) {
        packet_path_families(
            &PacketPath {
                header,
                sample,
                trace: None,
                findings: &[],
            },
            Limits::default(),
        )
    }

    fn fixture() -> (RecordingHeader, Sample) {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../napilab-probe/tests/fixtures/proc/offline-cpu");
        let header = napilab_probe::observe::describe_host(&root, false);
        let mut sampler = napilab_probe::sample::Sampler::new(&root, false);
        let mut notices = napilab_probe::sample::Notices::default();
        let sample = sampler.sample().parse(&header.online_cpus, &mut notices);
        (header, sample)
    }

    fn napi(napi_id: u32, cpu: u32, context: ExecContext, polls: u64) -> (NapiKey, NapiCounts) {
        let mut work_hist = vec![0; WORK_SLOTS];
        work_hist[1] = polls - 1;
        work_hist[64] = 1;
        (
            NapiKey {
                napi_id,
                unnamed_ifindex: 0,
                unnamed_netns: 0,
                cpu,
                context,
            },
            NapiCounts {
                polls,
                packets: polls - 1 + 64,
                full_budget: 1,
                ifindex: 9,
                netns: 0,
                work_hist,
                device: format!("dev{napi_id}"),
                comm: String::new(),
            },
        )
    }

    fn family<'a>(families: &'a [Family], name: &str) -> &'a Family {
        families
            .iter()
            .find(|f| f.name == name)
            .unwrap_or_else(|| panic!("no family {name}"))
    }

    #[test]
    fn raw_counters_keep_node_exporter_names_and_caps_count_what_they_drop() {
        let (header, sample) = fixture();
        let mut snap = Snapshot {
            cpus: vec![0, 1],
            ..Snapshot::default()
        };
        // Instance 7 is busiest, polled in two contexts on two CPUs; 8 and 9 are quieter.
        for (key, counts) in [
            napi(7, 0, ExecContext::Hardirq, 100),
            napi(7, 1, ExecContext::Hardirq, 50),
            napi(7, 1, ExecContext::Ksoftirqd, 10),
            napi(8, 0, ExecContext::NapiThread, 20),
            napi(9, 0, ExecContext::BusyPoll, 5),
        ] {
            snap.napi.insert(key, counts);
        }
        let limits = Limits {
            max_napi_instances: 2,
            max_devices: 1,
        };
        let (families, dropped) = packet_path_families(
            &PacketPath {
                header: &header,
                sample: &sample,
                trace: Some(&snap),
                findings: &[],
            },
            limits,
        );
        // softnet_stat of the fixture: processed 0x14b4 on the first row.
        let processed = family(&families, "node_softnet_processed");
        assert_eq!(processed.kind, Kind::Counter);
        assert_eq!(
            processed.samples.first().map(|(_, v)| v.clone()),
            Some(crate::exposition::Value::Number(f64::from(0x14b4)))
        );
        // The busiest two instances are kept; the third is counted as dropped.
        assert_eq!(dropped.napi_instances, 1);
        let polls = family(&families, "napilab_napi_polls");
        let ids: BTreeSet<&str> = polls
            .samples
            .iter()
            .filter_map(|(l, _)| {
                l.iter()
                    .find(|(k, _)| k == "napi_id")
                    .map(|(_, v)| v.as_str())
            })
            .collect();
        assert_eq!(ids, BTreeSet::from(["7", "8"]));
        // Instance 7, hardirq context: summed over CPUs; not in this (fixture) map.
        let hardirq = polls
            .samples
            .iter()
            .find(|(l, _)| {
                l.contains(&("napi_id".into(), "7".into()))
                    && l.contains(&("context".into(), "hardirq".into()))
            })
            .expect("napi 7 hardirq");
        assert_eq!(hardirq.1, crate::exposition::Value::Number(150.0));
        assert!(hardirq.0.contains(&("netns".into(), "other".into())));
        assert!(hardirq.0.contains(&("device".into(), "dev7".into())));
        // Packets per poll: one histogram per instance over contexts; 64 lands in +Inf.
        let hist = family(&families, "napilab_napi_packets_per_poll");
        let seven = hist
            .samples
            .iter()
            .find(|(l, _)| l.contains(&("napi_id".into(), "7".into())))
            .expect("histogram of 7");
        match &seven.1 {
            crate::exposition::Value::Histogram { buckets, .. } => {
                assert_eq!(buckets.iter().sum::<u64>(), 160);
                assert_eq!(buckets[1], 157);
                assert_eq!(buckets.last(), Some(&3));
            }
            other => panic!("not a histogram: {other:?}"),
        }
        // Both wire formats accept the whole set.
        let text = crate::exposition::prometheus_text(&families).expect("text");
        assert!(
            text.contains("node_softnet_times_squeezed_total{cpu=\"0\"}"),
            "{text}"
        );
        let om = crate::exposition::openmetrics(families).expect("openmetrics");
        assert!(om.contains("napilab_napi_full_budget_polls_total{"), "{om}");
    }

    #[test]
    fn host_info_carries_the_identity_as_labels() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../napilab-probe/tests/fixtures/host/amd-kvm");
        let header = napilab_probe::observe::describe_host(&root, false);
        let (_, sample) = fixture();
        let (families, _) = untraced_families(&header, &sample);
        let info = family(&families, "napilab_host_info");
        assert_eq!(info.kind, Kind::Gauge);
        assert_eq!(info.samples.len(), 1);
        let (labels, value) = &info.samples[0];
        assert_eq!(*value, crate::exposition::Value::Number(1.0));
        for (k, v) in [
            ("vendor", "AuthenticAMD"),
            ("model", "AMD EPYC"),
            ("kernel", "6.18.44-fc-v782"),
            ("hypervisor", "KVM"),
            ("microcode", "0x1000065"),
            ("source", "map"),
        ] {
            assert!(
                labels.contains(&(k.into(), v.into())),
                "{k}={v} not in {labels:?}"
            );
        }
        let text = crate::exposition::prometheus_text(&families).expect("text");
        assert!(
            text.contains("napilab_host_info{vendor=\"AuthenticAMD\""),
            "{text}"
        );
        // A header without identity (a replayed old recording): no sample, no error.
        let mut old = header.clone();
        old.host.identity = None;
        assert!(host_family(&old).samples.is_empty());
    }

    #[test]
    fn without_trace_the_trace_families_are_empty_and_tick_time_remains() {
        let (header, sample) = fixture();
        let (families, dropped) = untraced_families(&header, &sample);
        assert_eq!(dropped, Dropped::default());
        assert!(family(&families, "napilab_napi_polls").samples.is_empty());
        let softirq = family(&families, "napilab_cpu_softirq_seconds");
        assert!(!softirq.samples.is_empty());
        assert!(softirq
            .samples
            .iter()
            .all(|(l, _)| l.contains(&("source".into(), "tick".into()))));
    }
}
