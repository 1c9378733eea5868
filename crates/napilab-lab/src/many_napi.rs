//! The many-napi topology's own measurements (docs/lab.md, "The many-napi topology"):
//! the NAPI kthreads' scheduling from /proc, and the point's [`ManyNapiPoint`] from
//! those and the DUT's Observation. The topology itself is the router's
//! ([`crate::topology`]) with many ingress queues; its points are ordinary packet
//! points ([`crate::packet_runner`]).

use napilab_core::many_napi::{traced_polls, KthreadActivity, KthreadSample, ManyNapiPoint};
use napilab_core::Observation;

use crate::topology::napi_threads;

/// Sender flows per NAPI instance. The flow hash places flows on queues at random:
/// with one flow per queue about 37% of the queues would get none (1/e), with four
/// about 2% (e^-4); the trace tier reports how many were polled.
pub const FLOWS_PER_INSTANCE: u32 = 4;

/// The sender flows for `instances` NAPI instances.
pub fn flows_for(instances: u32) -> u32 {
    instances.max(1).saturating_mul(FLOWS_PER_INSTANCE)
}

/// The counters of `dev`'s NAPI kthreads now; kthreads that exit while being read are
/// left out.
pub fn sample_kthreads(dev: &str) -> Vec<KthreadSample> {
    napi_threads(dev)
        .into_iter()
        .filter_map(|(pid, _)| sample(pid))
        .collect()
}

fn sample(pid: i32) -> Option<KthreadSample> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let sched = std::fs::read_to_string(format!("/proc/{pid}/sched")).ok()?;
    let schedstat = std::fs::read_to_string(format!("/proc/{pid}/schedstat")).ok()?;
    Some(parse_sample(pid, &status, &sched, &schedstat))
}

/// One kthread's counters from its /proc/PID/status, /proc/PID/sched and
/// /proc/PID/schedstat texts; a missing field reads as 0.
fn parse_sample(pid: i32, status: &str, sched: &str, schedstat: &str) -> KthreadSample {
    let field = |text: &str, name: &str| -> Option<String> {
        text.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            (k.trim() == name).then(|| v.trim().to_string())
        })
    };
    let number = |text: &str, name: &str| {
        field(text, name)
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    let allowed = field(status, "Cpus_allowed_list").unwrap_or_default();
    KthreadSample {
        pid,
        voluntary_switches: number(status, "voluntary_ctxt_switches"),
        involuntary_switches: number(status, "nonvoluntary_ctxt_switches"),
        migrations: number(sched, "se.nr_migrations"),
        on_cpu_ns: schedstat
            .split_whitespace()
            .next()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0),
        // One CPU: a plain number, no range or list.
        pinned: !allowed.is_empty() && allowed.bytes().all(|b| b.is_ascii_digit()),
    }
}

/// The point's NAPI measurements: kthread activity between the window's two samples,
/// polls by context and NET_RX time from the Observation's trace tier, and from both
/// the forwarding CPU per packet the sink received.
pub fn point(
    instances: u32,
    dut_in: &str,
    kthreads_before: &[KthreadSample],
    kthreads_after: &[KthreadSample],
    observation: Option<&Observation>,
    delivered_packets: u64,
) -> ManyNapiPoint {
    let kthreads = (!kthreads_after.is_empty())
        .then(|| KthreadActivity::between(kthreads_before, kthreads_after));
    let traced = observation.and_then(|o| traced_polls(o, dut_in));
    let kthread_ns = kthreads.as_ref().map_or(0, |k| k.on_cpu_ns);
    // Without the trace tier the softirq share of the forwarding is unknown.
    let dut_cpu_ns = traced.as_ref().map(|t| t.net_rx_ns + kthread_ns);
    ManyNapiPoint {
        instances,
        flows: flows_for(instances),
        instances_polled: traced.as_ref().map(|t| t.instances_polled),
        dut_cpu_ns,
        dut_cpu_ns_per_packet: dut_cpu_ns
            .filter(|_| delivered_packets > 0)
            .map(|ns| ns as f64 / delivered_packets as f64),
        kthreads,
        lost_polls: traced.as_ref().map_or(0, |t| t.lost_polls),
        polls: traced.map(|t| t.by_context).unwrap_or_default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kthread_counters_from_proc_texts() {
        let status = "Name:\tnapi/n1a2b-in-8\nCpus_allowed_list:\t1\nvoluntary_ctxt_switches:\t1234\nnonvoluntary_ctxt_switches:\t7\n";
        let sched = "napi/n1a2b-in-8 (4242, #threads: 1)\n---\nse.exec_start : 1.0\nse.nr_migrations                             :                    3\nnr_switches : 1241\n";
        let s = parse_sample(4242, status, sched, "987654 1000 12\n");
        assert_eq!(s.voluntary_switches, 1234);
        assert_eq!(s.involuntary_switches, 7);
        assert_eq!(s.migrations, 3);
        assert_eq!(s.on_cpu_ns, 987_654);
        assert!(s.pinned);
        let roaming = parse_sample(1, "Cpus_allowed_list:\t0-1\n", "", "");
        assert!(!roaming.pinned);
        assert_eq!(roaming.migrations, 0);
    }

    #[test]
    fn four_flows_per_instance() {
        assert_eq!(flows_for(1000), 4000);
        assert_eq!(flows_for(0), 4);
    }
}
