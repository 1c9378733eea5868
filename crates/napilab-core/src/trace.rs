//! What the tracing tier (`observe --trace`, source `trace`) adds to an interval:
//! per-NAPI polls split by execution context, softirq and hard-IRQ time measured by
//! tracepoints, and per-CPU measured time to set beside /proc/stat's tick-sampled
//! shares (misreading 3). Everything here fires per poll, per softirq or per IRQ, never
//! per packet (docs/architecture.md principle 2). Counts are exact event counts over the interval;
//! rates and shares are [`Metric`]s with source `trace`.

use serde::{Deserialize, Serialize};

use crate::metric::Metric;

/// Where a NAPI poll or a softirq run executed (docs/trace.md, "contexts").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExecContext {
    /// Softirq run on the way out of a hard IRQ (`irq_exit`).
    Hardirq,
    /// Softirq run inline when a task re-enabled bottom halves (`local_bh_enable`).
    BhEnable,
    /// Softirq deferred to the per-CPU `ksoftirqd/N` thread.
    Ksoftirqd,
    /// A threaded-NAPI kthread `napi/<dev>-<id>` (no softirq at all).
    NapiThread,
    /// An application polling from its own syscall (busy polling).
    BusyPoll,
}

impl ExecContext {
    pub const ALL: [ExecContext; 5] = [
        ExecContext::Hardirq,
        ExecContext::BhEnable,
        ExecContext::Ksoftirqd,
        ExecContext::NapiThread,
        ExecContext::BusyPoll,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ExecContext::Hardirq => "softirq after hardirq",
            ExecContext::BhEnable => "softirq at bh-enable",
            ExecContext::Ksoftirqd => "ksoftirqd",
            ExecContext::NapiThread => "napi kthread",
            ExecContext::BusyPoll => "busy poll",
        }
    }
}

/// Names of the softirq vectors, indexed by vector number (`softirq_to_name`).
pub const SOFTIRQ_NAMES: [&str; 10] = [
    "HI", "TIMER", "NET_TX", "NET_RX", "BLOCK", "IRQ_POLL", "TASKLET", "SCHED", "HRTIMER", "RCU",
];

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TraceInterval {
    /// One row per NAPI instance, CPU and context that polled in the interval.
    pub napi: Vec<NapiPollTrace>,
    /// One row per CPU, softirq vector and context that ran in the interval.
    pub softirqs: Vec<SoftirqTrace>,
    /// `net_rx_action` runs: one row per CPU and context.
    pub net_rx_runs: Vec<NetRxRunTrace>,
    /// Device hard-IRQ handlers (`irq_handler_entry/exit`): one row per IRQ and CPU.
    pub irqs: Vec<IrqTrace>,
    /// Measured time per CPU, to compare with /proc/stat.
    pub cpus: Vec<CpuTraceTime>,
    /// Stage profile (`observe --trace --stages`, source `sample`): per stage and CPU.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stages: Vec<StageShare>,
    /// Stage profile summed over CPUs, with the cost per received Mbit/s.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stage_costs: Vec<StageCost>,
    /// CPU time by execution context from the stage sampler's stacks (`--stages`):
    /// this is how busy-poll and NAPI-kthread time are found inside "system".
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub context_shares: Vec<ContextShare>,
    /// Per-packet tier (`observe --trace-packets`, source `trace`): latency from one
    /// stage of a packet to its next, per device and stage pair.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub packet_stages: Vec<StageLatency>,
    /// Per-packet tier: packets freed as drops (`skb:kfree_skb`), per reason, device,
    /// protocol and the last stage that saw them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub drops: Vec<DropReasonCount>,
    /// NAPI polls the tier saw but could not count: their CPU's table of (instance,
    /// context) pairs was full (hosts with very many NAPI instances). The `napi` rows
    /// then undercount by at least this much.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub lost_polls: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Latency of one stage pair of the per-packet tier over an interval: how long packets
/// took from stage `from` (a tracepoint name) on `from_device` to stage `to` on
/// `device`. Devices are named as the kernel had them; `*_netns` is the network
/// namespace's inode (ifindexes and names are per namespace).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StageLatency {
    pub device: String,
    pub ifindex: u32,
    pub netns: u32,
    pub from_device: String,
    pub from_ifindex: u32,
    pub from_netns: u32,
    pub from: String,
    pub to: String,
    /// Packets that made this transition in the interval.
    pub count: u64,
    pub mean_ns: f64,
    /// Quantiles interpolated inside the histogram's buckets (at most 25% wide).
    pub p50_ns: f64,
    pub p99_ns: f64,
    pub max_bucket_ns: u64,
    /// The non-empty histogram buckets, so intervals can be merged exactly.
    pub histogram: Vec<LatencyBucket>,
    /// Packets per second making this transition.
    pub rate: Metric,
    pub source: crate::metric::Source,
}

/// `count` latencies in `[lo_ns, hi_ns)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LatencyBucket {
    pub lo_ns: u64,
    pub hi_ns: u64,
    pub count: u64,
}

/// The `q` quantile (0..=1) of a bucketed distribution, interpolated linearly inside
/// the bucket that holds it; `None` when the buckets are empty.
pub fn latency_quantile(buckets: &[LatencyBucket], q: f64) -> Option<f64> {
    let total: u64 = buckets.iter().map(|b| b.count).sum();
    if total == 0 {
        return None;
    }
    let mut sorted: Vec<&LatencyBucket> = buckets.iter().filter(|b| b.count > 0).collect();
    sorted.sort_by_key(|b| b.lo_ns);
    let rank = q.clamp(0.0, 1.0) * total as f64;
    let mut below = 0.0;
    for b in &sorted {
        let next = below + b.count as f64;
        if rank <= next {
            let within = ((rank - below) / b.count as f64).clamp(0.0, 1.0);
            return Some(b.lo_ns as f64 + within * b.hi_ns.saturating_sub(b.lo_ns) as f64);
        }
        below = next;
    }
    sorted.last().map(|b| b.hi_ns as f64)
}

/// Merges bucket lists (same bucket bounds add up).
pub fn merge_buckets<'a>(
    lists: impl IntoIterator<Item = &'a [LatencyBucket]>,
) -> Vec<LatencyBucket> {
    let mut merged: std::collections::BTreeMap<(u64, u64), u64> = std::collections::BTreeMap::new();
    for list in lists {
        for b in list {
            *merged.entry((b.lo_ns, b.hi_ns)).or_default() += b.count;
        }
    }
    merged
        .into_iter()
        .map(|((lo_ns, hi_ns), count)| LatencyBucket {
            lo_ns,
            hi_ns,
            count,
        })
        .collect()
}

/// Packets dropped for one reason (`enum skb_drop_reason`, named from the running
/// kernel's BTF without the `SKB_DROP_REASON_` prefix) over an interval.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DropReasonCount {
    pub reason: String,
    /// The kernel's number for the reason (it changes between kernels; `reason` is
    /// what to compare).
    pub reason_code: u32,
    /// `skb->dev` at the drop; empty when the packet had no device.
    pub device: String,
    pub ifindex: u32,
    pub netns: u32,
    /// `skb->protocol` (EtherType), e.g. "ipv4", "arp", or "0x88cc".
    pub protocol: String,
    /// The last stage of the per-packet tier that saw the packet, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_stage: Option<String>,
    pub count: u64,
    pub rate: Metric,
}

/// Time one CPU spent in one packet-path stage (docs/studies.md#ap-stages), from kernel stacks
/// sampled with the `cpu-clock` event and mapped to stages by their callers.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StageShare {
    pub stage: String,
    pub cpu: u32,
    pub samples: u64,
    /// samples / (sampling frequency x interval): a fraction of this CPU.
    pub share: Metric,
}

/// One CPU's time in one execution context, from cpu-clock samples whose kernel stack
/// shows the context (a NAPI kthread's loop, an application's busy-poll loop,
/// ksoftirqd, or a softirq entered from an IRQ exit or a bh-enable).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ContextShare {
    pub cpu: u32,
    pub context: ExecContext,
    pub samples: u64,
    /// samples / (sampling frequency x interval): a fraction of this CPU.
    pub share: Metric,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StageCost {
    pub stage: String,
    /// Sum of the stage's shares over CPUs (CPUs).
    pub cpus: Metric,
    /// `cpus` per received Mbit/s of the host (absent without traffic).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_mbps: Option<Metric>,
}

impl TraceInterval {
    pub fn cpu(&self, cpu: u32) -> Option<&CpuTraceTime> {
        self.cpus.iter().find(|c| c.cpu == cpu)
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NapiPollTrace {
    pub napi_id: u32,
    /// Device name and ifindex as the kernel had them (both are per network namespace).
    pub device: String,
    pub ifindex: u32,
    /// Inode of the device's network namespace: the tracepoints see every namespace,
    /// and (netns, ifindex) names one device (crate::device_join). 0: unknown
    /// (recorded before napilab kept it) or no device (the backlog).
    #[serde(default)]
    pub netns: u32,
    pub cpu: u32,
    pub context: ExecContext,
    /// For busy polling: the command name of the last application that polled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub application: Option<String>,
    pub polls: u64,
    pub packets: u64,
    /// Polls whose work reached the budget (the instance stays scheduled).
    pub full_budget_polls: u64,
    /// `work_histogram[w]` = polls that returned `w` (0..=64; 64 also counts larger).
    pub work_histogram: Vec<u64>,
    pub polls_per_s: Metric,
    pub packets_per_s: Metric,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SoftirqTrace {
    pub cpu: u32,
    pub vector: u32,
    pub name: String,
    pub context: ExecContext,
    pub count: u64,
    pub total_ns: u64,
    /// Share of the interval this CPU spent in this vector and context.
    pub share: Metric,
    /// `log2_ns[i]` = runs lasting [2^i, 2^(i+1)) ns (slot 0 also holds 0-1 ns).
    pub log2_ns: Vec<u64>,
    /// Runs whose raise (`softirq_raise` on this CPU) was timed, and the summed time from
    /// that first raise to the start of the run: mean latency = sum / raised_runs. Above
    /// 1000 runs/s per CPU and vector only about one run per millisecond is timed (the
    /// clock read is the tier's main cost), and by default `softirq_raise` is attached
    /// only for 100 ms of every second (docs/trace.md, "Overhead"), so this is a sample
    /// of the runs raised inside those windows, not every run.
    pub raised_runs: u64,
    pub raise_to_entry_ns: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NetRxRunTrace {
    pub cpu: u32,
    pub context: ExecContext,
    pub runs: u64,
    /// Packets handled: the sum of napi_poll work inside NET_RX softirq runs.
    pub packets: u64,
    /// Runs that handled at least `netdev_budget` packets (squeezed by the budget).
    pub budget_limited: u64,
    /// Runs under the packet budget that lasted at least `netdev_budget_usecs`
    /// (squeezed by time).
    pub time_limited: u64,
    /// `log2_packets[i]` = runs that handled [2^i, 2^(i+1)) packets (slot 0: 0-1).
    pub log2_packets: Vec<u64>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct IrqTrace {
    pub irq: u32,
    pub cpu: u32,
    pub count: u64,
    pub total_ns: u64,
    pub share: Metric,
}

/// One CPU's measured time over the interval, as fractions of the interval.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CpuTraceTime {
    pub cpu: u32,
    /// All softirq vectors, all contexts (including ksoftirqd).
    pub softirq: Metric,
    /// NET_RX and NET_TX softirqs only.
    pub net_softirq: Metric,
    /// The part of `softirq` that ran inside ksoftirqd (charged to softirq by ticks).
    pub softirq_ksoftirqd: Metric,
    /// Device IRQ handlers (`irq_handler_entry/exit`); local timer and IPI vectors do
    /// not pass through these tracepoints and are not included.
    pub hardirq: Metric,
    /// NAPI polls run by threaded-NAPI kthreads and busy polling on this CPU, per second:
    /// this work is charged to "system" time, not softirq.
    pub napi_thread_polls: Metric,
    pub busy_poll_polls: Metric,
}

#[cfg(test)]
mod packet_tier_tests {
    use super::*;

    #[test]
    fn json_without_the_per_packet_fields_still_reads() {
        let old = r#"{"napi":[],"softirqs":[],"net_rx_runs":[],"irqs":[],"cpus":[]}"#;
        let t: TraceInterval = serde_json::from_str(old).expect("old trace JSON");
        assert!(t.packet_stages.is_empty() && t.drops.is_empty());
        // And empty lists are not written, so old readers see the same JSON.
        let json = serde_json::to_string(&t).expect("serialize");
        assert!(!json.contains("packet_stages") && !json.contains("drops"));
    }

    #[test]
    fn quantiles_interpolate_inside_buckets_and_merge() {
        let a = [LatencyBucket {
            lo_ns: 100,
            hi_ns: 200,
            count: 50,
        }];
        let b = [
            LatencyBucket {
                lo_ns: 100,
                hi_ns: 200,
                count: 49,
            },
            LatencyBucket {
                lo_ns: 1000,
                hi_ns: 2000,
                count: 1,
            },
        ];
        let merged = merge_buckets([&a[..], &b[..]]);
        assert_eq!(merged.len(), 2);
        assert_eq!(merged[0].count, 99);
        let p50 = latency_quantile(&merged, 0.5).expect("p50");
        assert!((100.0..200.0).contains(&p50), "{p50}");
        let p100 = latency_quantile(&merged, 1.0).expect("max");
        assert!((p100 - 2000.0).abs() < 1e-9, "{p100}");
        assert_eq!(latency_quantile(&[], 0.5), None);
    }
}
