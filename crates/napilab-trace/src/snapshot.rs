//! Cumulative readings of the BPF maps, and the interval between two of them.

use std::collections::BTreeMap;

use napilab_core::trace::{
    CpuTraceTime, ExecContext, IrqTrace, NapiPollTrace, NetRxRunTrace, SoftirqTrace, TraceInterval,
    SOFTIRQ_NAMES,
};
use napilab_core::{Metric, Source, Unit};

/// Work histogram slots (0..=64), as in `napi_trace.h`.
pub const WORK_SLOTS: usize = 65;
pub const LOG2_SLOTS: usize = 32;
pub const NR_SOFTIRQS: u32 = 10;
pub const NET_TX_SOFTIRQ: u32 = 2;
pub const NET_RX_SOFTIRQ: u32 = 3;
/// Per-CPU NAPI counter slots (`NT_NAPI_SLOTS`).
pub const NAPI_SLOTS: usize = 512;
/// IRQ numbers counted in the per-CPU array (`NT_IRQ_ARRAY`); larger ones in a hash.
pub const IRQ_ARRAY: usize = 1024;

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct NapiKey {
    pub napi_id: u32,
    /// Tell apart instances without a NAPI id (0): the backlog (0, 0) and id-less
    /// driver instances (their device's ifindex and network namespace inode; ifindexes
    /// are per namespace). Both 0 for instances with an id (ids are global).
    pub unnamed_ifindex: u32,
    pub unnamed_netns: u32,
    pub cpu: u32,
    pub context: ExecContext,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct NapiCounts {
    pub polls: u64,
    pub packets: u64,
    pub full_budget: u64,
    pub ifindex: u32,
    /// Inode of the device's network namespace (0: no device).
    pub netns: u32,
    pub work_hist: Vec<u64>,
    pub device: String,
    pub comm: String,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct SoftirqCounts {
    pub count: u64,
    pub total_ns: u64,
    pub raise_lat_ns: u64,
    pub raise_lat_count: u64,
    pub log2_ns: Vec<u64>,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct NetRxCounts {
    pub runs: u64,
    pub packets: u64,
    pub budget_runs: u64,
    pub time_runs: u64,
    pub log2_packets: Vec<u64>,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct IrqCounts {
    pub count: u64,
    pub total_ns: u64,
}

/// Every counter of the maps at one instant (they only grow).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Snapshot {
    pub napi: BTreeMap<NapiKey, NapiCounts>,
    /// (cpu, vector, context)
    pub softirq: BTreeMap<(u32, u32, ExecContext), SoftirqCounts>,
    /// (cpu, context)
    pub net_rx: BTreeMap<(u32, ExecContext), NetRxCounts>,
    /// (irq, cpu)
    pub irq: BTreeMap<(u32, u32), IrqCounts>,
    /// CPUs to report measured time for (every online CPU, also idle ones).
    pub cpus: Vec<u32>,
    /// Polls not counted because their CPU had no free NAPI slot (NAPI_SLOTS pairs of
    /// NAPI instance and context per CPU); 0 unless instances churn a lot.
    pub napi_lost_polls: u64,
    /// IRQ handler runs not counted (an IRQ number above IRQ_ARRAY with no room left).
    pub irq_lost: u64,
}

fn sub_vec(cur: &[u64], prev: Option<&[u64]>) -> Vec<u64> {
    cur.iter()
        .enumerate()
        .map(|(i, c)| c.saturating_sub(prev.and_then(|p| p.get(i)).copied().unwrap_or(0)))
        .collect()
}

fn trace_metric(value: f64, unit: Unit) -> Metric {
    Metric::new(value, unit, Source::Trace)
}

fn share(ns: u64, seconds: f64, how: &str) -> Metric {
    Metric::derived(
        ns as f64 / (seconds * 1e9),
        Unit::CpuFraction,
        Source::Trace,
        how,
    )
}

/// The interval between two snapshots taken `seconds` apart.
pub fn trace_interval(prev: &Snapshot, cur: &Snapshot, seconds: f64) -> TraceInterval {
    let seconds = if seconds > 0.0 {
        seconds
    } else {
        f64::MIN_POSITIVE
    };
    let mut out = TraceInterval {
        lost_polls: cur.napi_lost_polls.saturating_sub(prev.napi_lost_polls),
        ..TraceInterval::default()
    };
    for (key, c) in &cur.napi {
        let p = prev.napi.get(key);
        let polls = c.polls.saturating_sub(p.map_or(0, |p| p.polls));
        if polls == 0 {
            continue;
        }
        let packets = c.packets.saturating_sub(p.map_or(0, |p| p.packets));
        out.napi.push(NapiPollTrace {
            napi_id: key.napi_id,
            device: c.device.clone(),
            ifindex: c.ifindex,
            netns: c.netns,
            cpu: key.cpu,
            context: key.context,
            application: (key.context == ExecContext::BusyPoll && !c.comm.is_empty())
                .then(|| c.comm.clone()),
            polls,
            packets,
            full_budget_polls: c.full_budget.saturating_sub(p.map_or(0, |p| p.full_budget)),
            work_histogram: sub_vec(&c.work_hist, p.map(|p| p.work_hist.as_slice())),
            polls_per_s: trace_metric(polls as f64 / seconds, Unit::PerSecond),
            packets_per_s: trace_metric(packets as f64 / seconds, Unit::PacketsPerSecond),
        });
    }
    let mut softirq_ns: BTreeMap<u32, (u64, u64, u64)> = BTreeMap::new();
    for (&(cpu, vector, context), c) in &cur.softirq {
        let p = prev.softirq.get(&(cpu, vector, context));
        let count = c.count.saturating_sub(p.map_or(0, |p| p.count));
        if count == 0 {
            continue;
        }
        let total_ns = c.total_ns.saturating_sub(p.map_or(0, |p| p.total_ns));
        let lat_n = c
            .raise_lat_count
            .saturating_sub(p.map_or(0, |p| p.raise_lat_count));
        let lat_ns = c
            .raise_lat_ns
            .saturating_sub(p.map_or(0, |p| p.raise_lat_ns));
        let e = softirq_ns.entry(cpu).or_default();
        e.0 += total_ns;
        if vector == NET_RX_SOFTIRQ || vector == NET_TX_SOFTIRQ {
            e.1 += total_ns;
        }
        if context == ExecContext::Ksoftirqd {
            e.2 += total_ns;
        }
        out.softirqs.push(SoftirqTrace {
            cpu,
            vector,
            name: SOFTIRQ_NAMES
                .get(vector as usize)
                .map_or_else(|| format!("vec{vector}"), |s| (*s).to_string()),
            context,
            count,
            total_ns,
            share: share(
                total_ns,
                seconds,
                "softirq_entry..softirq_exit time / interval",
            ),
            log2_ns: sub_vec(&c.log2_ns, p.map(|p| p.log2_ns.as_slice())),
            raised_runs: lat_n,
            raise_to_entry_ns: lat_ns,
        });
    }
    for (&(cpu, context), c) in &cur.net_rx {
        let p = prev.net_rx.get(&(cpu, context));
        let runs = c.runs.saturating_sub(p.map_or(0, |p| p.runs));
        if runs == 0 {
            continue;
        }
        out.net_rx_runs.push(NetRxRunTrace {
            cpu,
            context,
            runs,
            packets: c.packets.saturating_sub(p.map_or(0, |p| p.packets)),
            budget_limited: c.budget_runs.saturating_sub(p.map_or(0, |p| p.budget_runs)),
            time_limited: c.time_runs.saturating_sub(p.map_or(0, |p| p.time_runs)),
            log2_packets: sub_vec(&c.log2_packets, p.map(|p| p.log2_packets.as_slice())),
        });
    }
    let mut irq_ns: BTreeMap<u32, u64> = BTreeMap::new();
    for (&(irq, cpu), c) in &cur.irq {
        let p = prev.irq.get(&(irq, cpu));
        let count = c.count.saturating_sub(p.map_or(0, |p| p.count));
        if count == 0 {
            continue;
        }
        let total_ns = c.total_ns.saturating_sub(p.map_or(0, |p| p.total_ns));
        *irq_ns.entry(cpu).or_default() += total_ns;
        out.irqs.push(IrqTrace {
            irq,
            cpu,
            count,
            total_ns,
            share: share(total_ns, seconds, "irq_handler_entry..exit time / interval"),
        });
    }
    for &cpu in &cur.cpus {
        let (all, net, ksoftirqd) = softirq_ns.get(&cpu).copied().unwrap_or_default();
        let polls_in = |ctx: ExecContext| {
            out.napi
                .iter()
                .filter(|n| n.cpu == cpu && n.context == ctx)
                .map(|n| n.polls)
                .sum::<u64>() as f64
                / seconds
        };
        out.cpus.push(CpuTraceTime {
            cpu,
            softirq: share(all, seconds, "sum of softirq run times / interval"),
            net_softirq: share(net, seconds, "NET_RX + NET_TX softirq run times / interval"),
            softirq_ksoftirqd: share(
                ksoftirqd,
                seconds,
                "softirq run times inside ksoftirqd / interval",
            ),
            hardirq: share(
                irq_ns.get(&cpu).copied().unwrap_or(0),
                seconds,
                "device IRQ handler times / interval",
            ),
            napi_thread_polls: trace_metric(polls_in(ExecContext::NapiThread), Unit::PerSecond),
            busy_poll_polls: trace_metric(polls_in(ExecContext::BusyPoll), Unit::PerSecond),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn napi(polls: u64, packets: u64) -> NapiCounts {
        let mut work_hist = vec![0; WORK_SLOTS];
        work_hist[1] = polls;
        NapiCounts {
            polls,
            packets,
            full_budget: 0,
            ifindex: 3,
            netns: 4026532000,
            work_hist,
            device: "vb".into(),
            comm: String::new(),
        }
    }

    #[test]
    fn interval_is_the_difference_and_drops_idle_rows() {
        let key = NapiKey {
            napi_id: 7,
            unnamed_ifindex: 0,
            unnamed_netns: 0,
            cpu: 1,
            context: ExecContext::NapiThread,
        };
        let idle = NapiKey {
            napi_id: 8,
            ..key.clone()
        };
        let mut prev = Snapshot {
            cpus: vec![0, 1],
            ..Snapshot::default()
        };
        prev.napi.insert(key.clone(), napi(10, 10));
        prev.napi.insert(idle.clone(), napi(5, 5));
        prev.napi_lost_polls = 7;
        let mut cur = prev.clone();
        cur.napi.insert(key, napi(30, 40));
        cur.napi_lost_polls = 12;
        cur.softirq.insert(
            (1, NET_RX_SOFTIRQ, ExecContext::Hardirq),
            SoftirqCounts {
                count: 4,
                total_ns: 250_000_000,
                log2_ns: vec![0; LOG2_SLOTS],
                ..SoftirqCounts::default()
            },
        );
        let t = trace_interval(&prev, &cur, 0.5);
        assert_eq!(
            t.lost_polls, 5,
            "polls the full slot table lost in the interval"
        );
        assert_eq!(t.napi.len(), 1);
        assert_eq!(t.napi[0].polls, 20);
        assert_eq!(
            t.napi[0].netns, 4026532000,
            "the device's namespace is carried"
        );
        assert_eq!(t.napi[0].packets, 30);
        assert_eq!(t.napi[0].work_histogram[1], 20);
        assert!((t.napi[0].packets_per_s.value - 60.0).abs() < 1e-9);
        let cpu1 = t.cpu(1).expect("cpu1");
        assert!((cpu1.softirq.value - 0.5).abs() < 1e-9);
        assert!((cpu1.net_softirq.value - 0.5).abs() < 1e-9);
        assert!((cpu1.napi_thread_polls.value - 40.0).abs() < 1e-9);
        assert_eq!(t.cpu(0).map(|c| c.softirq.value), Some(0.0));
    }
}
