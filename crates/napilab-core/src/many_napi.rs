//! What a point of the many-napi lab topology measures beside the packet numbers
//! (docs/lab.md, "The many-napi topology"): the DUT's forwarding CPU per packet, the
//! scheduling of its NAPI kthreads (context switches, migrations) and its polls by
//! execution context from the trace tier. This is the real-kernel side of the
//! WireGuard study's "one kthread per peer costs scheduling" (docs/studies.md).

use serde::{Deserialize, Serialize};

use crate::observation::Observation;
use crate::trace::ExecContext;

/// The DUT's NAPI instances over one point's measurement window.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ManyNapiPoint {
    /// NAPI instances of the DUT's ingress device (its RX queues).
    pub instances: u32,
    /// Sender flows (UDP source ports) the traffic was spread over.
    pub flows: u32,
    /// Instances the trace tier saw polled with packets; None without the trace tier.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instances_polled: Option<u32>,
    /// The DUT's forwarding CPU time over the window: NET_RX softirq time (trace tier)
    /// plus the on-CPU time of the ingress's NAPI kthreads (/proc/PID/schedstat), ns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dut_cpu_ns: Option<u64>,
    /// `dut_cpu_ns` / packets the sink received in the window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dut_cpu_ns_per_packet: Option<f64>,
    /// The ingress's NAPI kthreads (threaded contexts only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kthreads: Option<KthreadActivity>,
    /// Polls of the ingress's instances by execution context (trace tier).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub polls: Vec<ContextPolls>,
    /// Polls the trace tier could not count (its per-CPU table of (instance, context)
    /// pairs was full): when non-zero, `polls` and `instances_polled` undercount.
    #[serde(default)]
    pub lost_polls: u64,
}

/// Scheduling of a device's NAPI kthreads over a window: sums and the largest value
/// of one kthread, from /proc/PID/status and /proc/PID/sched.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct KthreadActivity {
    pub count: u32,
    /// Kthreads allowed on exactly one CPU (pinned).
    pub pinned: u32,
    pub voluntary_switches: u64,
    pub involuntary_switches: u64,
    /// `se.nr_migrations`: moves to another CPU.
    pub migrations: u64,
    pub max_voluntary_switches: u64,
    pub max_involuntary_switches: u64,
    pub max_migrations: u64,
    /// On-CPU time of all of them (/proc/PID/schedstat), ns.
    pub on_cpu_ns: u64,
}

/// One kthread's counters at one moment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KthreadSample {
    pub pid: i32,
    pub voluntary_switches: u64,
    pub involuntary_switches: u64,
    pub migrations: u64,
    pub on_cpu_ns: u64,
    pub pinned: bool,
}

impl KthreadActivity {
    /// The activity between two samples of the same kthreads (matched by pid; a
    /// kthread missing from either side is left out).
    pub fn between(before: &[KthreadSample], after: &[KthreadSample]) -> KthreadActivity {
        let mut a = KthreadActivity::default();
        for end in after {
            let Some(start) = before.iter().find(|b| b.pid == end.pid) else {
                continue;
            };
            let vol = end
                .voluntary_switches
                .saturating_sub(start.voluntary_switches);
            let invol = end
                .involuntary_switches
                .saturating_sub(start.involuntary_switches);
            let mig = end.migrations.saturating_sub(start.migrations);
            a.count += 1;
            a.pinned += u32::from(end.pinned);
            a.voluntary_switches += vol;
            a.involuntary_switches += invol;
            a.migrations += mig;
            a.max_voluntary_switches = a.max_voluntary_switches.max(vol);
            a.max_involuntary_switches = a.max_involuntary_switches.max(invol);
            a.max_migrations = a.max_migrations.max(mig);
            a.on_cpu_ns += end.on_cpu_ns.saturating_sub(start.on_cpu_ns);
        }
        a
    }
}

/// Polls of one device's NAPI instances in one execution context.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ContextPolls {
    pub context: ExecContext,
    pub polls: u64,
    pub packets: u64,
    pub polls_per_s: f64,
    /// packets / polls (0 when there were no polls).
    pub packets_per_poll: f64,
}

/// What the trace tier of an Observation says about `device`'s NAPI instances.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TracedPolls {
    pub by_context: Vec<ContextPolls>,
    /// Instances with at least one packet polled.
    pub instances_polled: u32,
    /// Polls the tier could not count, all devices (the table is per CPU).
    pub lost_polls: u64,
    /// NET_RX softirq time, all CPUs and contexts, ns.
    pub net_rx_ns: u64,
}

/// The polls of `device` by context over the traced intervals of `obs`; None when the
/// Observation has no trace tier.
pub fn traced_polls(obs: &Observation, device: &str) -> Option<TracedPolls> {
    let traced: Vec<_> = obs
        .intervals
        .iter()
        .filter_map(|i| i.trace.as_ref().map(|t| (i.duration_s, t)))
        .collect();
    if traced.is_empty() {
        return None;
    }
    let seconds: f64 = traced.iter().map(|(d, _)| d).sum();
    // This namespace's `device` only: the trace tier sees every namespace.
    let join = crate::device_join::DeviceJoin::new(&obs.topology, device);
    let mut out = TracedPolls::default();
    let mut counts: std::collections::BTreeMap<ExecContext, (u64, u64)> = Default::default();
    let mut polled = std::collections::BTreeSet::new();
    for (_, t) in &traced {
        out.lost_polls += t.lost_polls;
        out.net_rx_ns += t
            .softirqs
            .iter()
            .filter(|s| s.name == "NET_RX")
            .map(|s| s.total_ns)
            .sum::<u64>();
        for row in t.napi.iter().filter(|r| join.polls(r)) {
            let c = counts.entry(row.context).or_default();
            c.0 += row.polls;
            c.1 += row.packets;
            if row.packets > 0 {
                polled.insert(row.napi_id);
            }
        }
    }
    out.instances_polled = polled.len() as u32;
    out.by_context = counts
        .into_iter()
        .map(|(context, (polls, packets))| ContextPolls {
            context,
            polls,
            packets,
            polls_per_s: if seconds > 0.0 {
                polls as f64 / seconds
            } else {
                0.0
            },
            packets_per_poll: if polls > 0 {
                packets as f64 / polls as f64
            } else {
                0.0
            },
        })
        .collect();
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(pid: i32, vol: u64, invol: u64, mig: u64, ns: u64) -> KthreadSample {
        KthreadSample {
            pid,
            voluntary_switches: vol,
            involuntary_switches: invol,
            migrations: mig,
            on_cpu_ns: ns,
            pinned: pid == 2,
        }
    }

    #[test]
    fn activity_sums_deltas_and_keeps_the_largest_kthread() {
        let before = [sample(1, 10, 1, 0, 100), sample(2, 5, 0, 3, 50)];
        let after = [
            sample(1, 30, 4, 2, 400),
            sample(2, 6, 0, 3, 60),
            // Born during the window: no start, left out.
            sample(3, 99, 99, 99, 999),
        ];
        let a = KthreadActivity::between(&before, &after);
        assert_eq!(a.count, 2);
        assert_eq!(a.pinned, 1);
        assert_eq!(a.voluntary_switches, 21);
        assert_eq!(a.max_voluntary_switches, 20);
        assert_eq!(a.involuntary_switches, 3);
        assert_eq!(a.migrations, 2);
        assert_eq!(a.max_migrations, 2);
        assert_eq!(a.on_cpu_ns, 310);
    }

    #[test]
    fn old_points_without_the_field_still_load() {
        let p: ManyNapiPoint = serde_json::from_str(r#"{"instances": 8, "flows": 32}"#)
            .expect("a point without the optional fields");
        assert_eq!(p.instances, 8);
        assert_eq!(p.lost_polls, 0);
        assert!(p.kthreads.is_none());
    }
}
