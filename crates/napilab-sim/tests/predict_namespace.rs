//! `predict::measure` on a host with containers: the trace tier sees every network
//! namespace, and the device the prediction is about is this namespace's, whatever
//! other namespaces name theirs (docs/trace.md, "Which namespace").

use napilab_core::trace::{ExecContext, NapiPollTrace, TraceInterval};
use napilab_core::{Interval, Metric, Observation, Source, ThreadInterval, ThreadRole, Unit};
use napilab_sim::predict::measure;

/// One traced second of a host whose map is namespace `OWN` with `vb` (ifindex 2),
/// and these trace rows: (netns, ifindex, cpu, polls, packets, napi id).
fn traced_second(rows: &[(u32, u32, u32, u64, u64, u32)]) -> Observation {
    let napi = rows
        .iter()
        .map(
            |&(netns, ifindex, cpu, polls, packets, napi_id)| NapiPollTrace {
                napi_id,
                device: "vb".into(),
                ifindex,
                netns,
                cpu,
                context: ExecContext::BhEnable,
                application: None,
                polls,
                packets,
                full_budget_polls: 0,
                work_histogram: Vec::new(),
                polls_per_s: Metric::new(polls as f64, Unit::PerSecond, Source::Trace),
                packets_per_s: Metric::new(packets as f64, Unit::PacketsPerSecond, Source::Trace),
            },
        )
        .collect();
    let kthread = |napi_id| ThreadInterval {
        pid: napi_id,
        name: format!("napi/vb-{napi_id}"),
        role: ThreadRole::NapiThread {
            device: Some("vb".into()),
            napi_id: Some(napi_id),
        },
        last_cpu: Some(1),
        cpu: Some(Metric::new(0.25, Unit::CpuFraction, Source::Proc)),
        sched: None,
    };
    Observation {
        schema: String::new(),
        origin: napilab_core::Origin {
            kind: napilab_core::OriginKind::Live,
            hostname: None,
            kernel: None,
            started_unix_ms: 0,
            napilab_version: String::new(),
        },
        host: napilab_core::HostFacts {
            cpus: vec![0, 1],
            ..Default::default()
        },
        settings: Default::default(),
        topology: napilab_core::TopologyMap {
            devices: vec![napilab_core::Device {
                name: "vb".into(),
                ifindex: 2,
                napis: vec![napilab_core::Napi {
                    id: 8193,
                    ifindex: 2,
                    ..Default::default()
                }],
                ..Default::default()
            }],
            irqs: Vec::new(),
            netns: Some(OWN),
        },
        intervals: vec![Interval {
            duration_s: 1.0,
            // Another namespace's vb has a kthread too (napi/vb-9000).
            threads: vec![kthread(8193), kthread(9000)],
            trace: Some(TraceInterval {
                napi,
                ..Default::default()
            }),
            ..Default::default()
        }],
        findings: Vec::new(),
        notices: Vec::new(),
        trace_cost: None,
    }
}

const OWN: u32 = 4026532100;

#[test]
fn measure_counts_this_namespaces_device_only() {
    // This namespace's vb on CPU 0; another namespace's vb (same name and ifindex)
    // on CPU 1, four times as busy.
    let obs = traced_second(&[
        (OWN, 2, 0, 1_000, 8_000, 8193),
        (OWN + 1, 2, 1, 4_000, 4_000, 9000),
    ]);
    let m = measure(&obs, "vb").expect("measured");
    assert_eq!(m.polls, 1_000);
    assert!(
        (m.total.packets_per_poll - 8.0).abs() < 1e-9,
        "{:?}",
        m.total
    );
    assert_eq!(m.cpus[1].polls_per_s, 0.0, "{:?}", m.cpus);
    // Its kthread, not the other namespace's napi/vb-9000.
    assert!((m.total.napi_thread - 0.25).abs() < 1e-9, "{:?}", m.total);
    // A recording without namespaces joins by name: both count.
    let old = traced_second(&[(0, 2, 0, 1_000, 8_000, 8193), (0, 2, 1, 4_000, 4_000, 9000)]);
    assert_eq!(measure(&old, "vb").expect("measured").polls, 5_000);
}
