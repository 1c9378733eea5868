//! The sender-rate effect of `napilab tune plan --predict` on a veth host (docs/tune.md,
//! "Predict before you tune"). veth has no interrupt: the sender's `veth_xmit` schedules
//! the peer's NAPI instance on the sending CPU, and the poll runs in that CPU's softirq
//! when the sender re-enables bottom halves (or in its `ksoftirqd`). When that CPU is
//! saturated the packet rate is the sender's: every packet costs the sender's own work
//! plus the poll on one CPU. A profile that moves the poll off that CPU (a NAPI kthread
//! the scheduler wakes elsewhere, or one pinned elsewhere) leaves the sender its own
//! work plus the notification, so it sends faster. The twin has no sender; this module
//! finds the sender's cost per packet in the observation and the rate it reaches once
//! the poll leaves its CPU, and [`crate::predict`] runs the twin at that rate.

use serde::{Deserialize, Serialize};

use napilab_core::device_join::DeviceJoin;
use napilab_core::trace::ExecContext;
use napilab_core::Interval;

use crate::config::NapiContext;
use crate::predict_inputs::{Measured, NapiSettings};

/// A CPU at least this busy (/proc/stat, everything but idle and iowait, over the
/// observation) is saturated. A sender that floods from one CPU keeps it 98-100% busy;
/// the tick-sampled share over a 2 s observation at 250 Hz (500 ticks) has a binomial
/// standard error near 1% there, so 95% is about three errors below a full CPU, and a
/// CPU under it had idle time: its sender waited for something other than its CPU.
pub const SATURATED_BUSY: f64 = 0.95;
/// The share of the device's softirq polls one CPU must run for the sender to be on one
/// CPU: below it the polls (and so the sends) moved between CPUs or came from several
/// senders, and no one CPU's busy time is the sender's cost.
pub const ONE_CPU_POLLS: f64 = 0.9;

/// The sender's cost, as the observation measured it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SenderCost {
    /// The CPU that ran the device's polls in its softirq: the sender's.
    pub cpu: u32,
    /// Its busy share (/proc/stat: everything but idle and iowait).
    pub busy: f64,
    /// Its stolen share (/proc/stat steal): time the sender did not run, so not its cost.
    pub steal: f64,
    /// The packet path's measured share of it (NET_RX/NET_TX softirq time from the trace
    /// tier plus the device's NAPI kthreads' CPU there).
    pub packet_share: f64,
    /// The share of the device's softirq polls that ran at bh-enable on it.
    pub bh_enable_polls: f64,
    pub packets_per_s: f64,
    /// (busy - steal - packet share) / packets per second, ns.
    pub ns_per_packet: f64,
}

/// What the observation says of the sender.
#[derive(Clone, Debug, PartialEq)]
pub enum Observed {
    /// The polls ran in the softirq of one saturated CPU.
    Limited(SenderCost),
    /// The rate is not the sender CPU's: why.
    NotLimited(String),
    /// The inputs do not determine it: why, and what to do.
    Unknown(String),
}

/// The sender's CPU from the observation of device `device` (`traced`: the intervals
/// with the trace tier; `measured`: what predict measured of the device on them).
pub fn observe(traced: &[&Interval], device: &DeviceJoin, measured: &Measured) -> Observed {
    let dev = device.name();
    let mut softirq_polls: std::collections::BTreeMap<u32, (u64, u64)> = Default::default();
    let mut other_polls = 0u64;
    for n in traced
        .iter()
        .flat_map(|i| i.trace.iter().flat_map(|t| &t.napi))
        .filter(|n| device.polls(n))
    {
        match n.context {
            ExecContext::Hardirq | ExecContext::BhEnable | ExecContext::Ksoftirqd => {
                let e = softirq_polls.entry(n.cpu).or_default();
                e.0 += n.polls;
                if n.context == ExecContext::BhEnable {
                    e.1 += n.polls;
                }
            }
            ExecContext::NapiThread | ExecContext::BusyPoll => other_polls += n.polls,
        }
    }
    let in_softirq: u64 = softirq_polls.values().map(|p| p.0).sum();
    let all = in_softirq + other_polls;
    if all == 0 {
        return Observed::Unknown(format!(
            "the trace tier saw no poll of {dev}: observe under load"
        ));
    }
    if (in_softirq as f64) < ONE_CPU_POLLS * all as f64 {
        if in_softirq == 0 {
            return Observed::NotLimited(format!("{dev} is polled in a NAPI kthread or by busy polling, not in the sender's softirq: no sender shares the poll's CPU"));
        }
        return Observed::Unknown(format!(
            "{dev} is polled in softirq ({:.0}% of {all} polls) and in a NAPI kthread or by busy polling (the rest): no one CPU carries both the sender and the poll; observe with one polling context",
            in_softirq as f64 / all as f64 * 100.0
        ));
    }
    let Some((&cpu, &(polls, bh))) = softirq_polls.iter().max_by_key(|(_, p)| p.0) else {
        return Observed::Unknown(format!(
            "the trace tier saw no poll of {dev}: observe under load"
        ));
    };
    if (polls as f64) < ONE_CPU_POLLS * in_softirq as f64 {
        let spread: Vec<String> = softirq_polls
            .iter()
            .map(|(c, p)| format!("CPU {c} {:.0}%", p.0 as f64 / in_softirq as f64 * 100.0))
            .collect();
        return Observed::Unknown(format!(
            "{dev}'s softirq polls spread over several CPUs ({}; one needs {:.0}%): the sender moved between CPUs or several send, so no one CPU's busy time is the sender's cost; pin the sender to one CPU (taskset) and observe again",
            spread.join(", "),
            ONE_CPU_POLLS * 100.0
        ));
    }
    let Some((busy, steal)) = busy_share(traced, cpu) else {
        return Observed::Unknown(format!("the observation has no /proc/stat time of CPU {cpu} in every traced interval: its busy share, which sets the sender's cost, is unknown; observe again"));
    };
    if busy < SATURATED_BUSY {
        return Observed::NotLimited(format!(
            "CPU {cpu}, which polls {dev} in its softirq, was {:.1}% busy (under the {:.0}% of a saturated CPU): the sender had time to spare, so its CPU did not set the rate",
            busy * 100.0,
            SATURATED_BUSY * 100.0
        ));
    }
    let packet_share = measured
        .cpus
        .iter()
        .find(|c| c.cpu == cpu)
        .map_or(0.0, |c| c.softirq + c.napi_thread);
    let pps = measured.packets_per_s;
    let sender_share = busy - steal - packet_share;
    if pps <= 0.0 || sender_share <= 0.0 {
        return Observed::Unknown(format!(
            "CPU {cpu} was {:.1}% busy ({:.1}% stolen) with {:.1}% in the packet path at {pps:.0} packets/s: nothing is left for the sender, so its cost is not determined",
            busy * 100.0,
            steal * 100.0,
            packet_share * 100.0
        ));
    }
    Observed::Limited(SenderCost {
        cpu,
        busy,
        steal,
        packet_share,
        bh_enable_polls: bh as f64 / polls as f64,
        packets_per_s: pps,
        ns_per_packet: sender_share / pps * 1e9,
    })
}

/// CPU `cpu`'s busy and stolen shares over `traced`, weighted by the intervals' length;
/// `None` unless every interval has them.
fn busy_share(traced: &[&Interval], cpu: u32) -> Option<(f64, f64)> {
    let (mut busy, mut steal, mut seconds) = (0.0, 0.0, 0.0);
    for i in traced {
        let t = i.cpu(cpu)?.time.as_ref()?;
        busy += t.busy() * i.duration_s;
        steal += t.steal.value * i.duration_s;
        seconds += i.duration_s;
    }
    (seconds > 0.0).then(|| (busy / seconds, steal / seconds))
}

/// Where the profile's settings put the poll relative to the sender's CPU `cpu`: `Ok`
/// with the CPU it moves to (`None`: one the scheduler picks), `Err` with why it stays.
/// `placed`: the profile was given the kthreads' CPUs; `host_cpus`: the host's count.
pub fn poll_leaves(
    target: &[NapiSettings],
    cpu: u32,
    placed: bool,
    host_cpus: usize,
) -> Result<Option<u32>, String> {
    let mut to = None;
    for s in target {
        match s.context {
            NapiContext::Softirq => {
                return Err(format!(
                    "the profile keeps {}-{} in softirq, which veth_xmit raises on the sender's CPU {cpu}: the poll stays there",
                    s.device, s.queue
                ))
            }
            _ if placed && s.cpu == cpu => {
                return Err(format!(
                    "the profile pins {}-{}'s NAPI kthread to CPU {cpu}, the sender's: the poll stays beside the sender",
                    s.device, s.queue
                ))
            }
            _ if placed => to = Some(s.cpu),
            _ if host_cpus < 2 => {
                return Err(format!(
                    "the host has one CPU: {}-{}'s NAPI kthread runs beside the sender",
                    s.device, s.queue
                ))
            }
            _ => {}
        }
    }
    Ok(to)
}

/// The sender-rate effect as a prediction reports it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SenderRate {
    pub verdict: Verdict,
    /// The busy share from which a CPU counts as saturated ([`SATURATED_BUSY`]).
    pub saturated_busy: f64,
    /// The sender's cost, when the observation determines it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<SenderCost>,
    /// The notification that stays on the sender's CPU once the poll leaves it (veth_xmit
    /// scheduling the instance), ns per packet: the twin's notifications per packet for
    /// the profile at the observed load times its per-notification cost.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notification_ns_per_packet: Option<f64>,
    /// 1 / (sender cost + notification cost): what the sender reaches with its CPU.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sender_pps: Option<f64>,
    /// The offered load the twin ran the profile at (the lower of `sender_pps` and the
    /// profile's headroom); absent: the observed load.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_pps: Option<f64>,
    /// An unpinned kthread goes where the scheduler wakes it: on another CPU the sender
    /// reaches `rate_pps`, but beside the sender on its CPU the two share it, and the
    /// sender reaches 1 / (its cost + the profile's packet path per packet). Which one
    /// happens depends on what else runs (wake-affine placement, idle CPUs), so the
    /// prediction carries both and `tune verify` judges the one the host chose. Absent
    /// when the kthreads were given their CPUs or the rate is not the sender's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub beside_sender_pps: Option<f64>,
    /// The outcome in words.
    pub says: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Sender-limited, and the profile moves the poll off the sender's CPU: the twin ran
    /// the profile at `rate_pps`.
    SenderLimited,
    /// Sender-limited, but the profile leaves the poll on the sender's CPU: the twin ran
    /// the profile at the observed load.
    PollStays,
    /// The sender's CPU was not saturated (or no sender shares the poll's CPU).
    NotSenderLimited,
    /// The observation does not determine it: the twin ran at the observed load.
    Refused,
}

/// The effect for a profile: `observed` from [`observe`]; `leaves` from [`poll_leaves`];
/// `notifications_per_packet` and `notification_ns` the twin's for the profile at the
/// observed load; `headroom_pps` the twin's headroom for the profile.
pub fn assess(
    observed: Observed,
    leaves: Result<Option<u32>, String>,
    notifications_per_packet: f64,
    notification_ns: f64,
    headroom_pps: Option<f64>,
) -> SenderRate {
    let mut out = SenderRate {
        verdict: Verdict::Refused,
        saturated_busy: SATURATED_BUSY,
        cost: None,
        notification_ns_per_packet: None,
        sender_pps: None,
        rate_pps: None,
        beside_sender_pps: None,
        says: String::new(),
    };
    let cost = match observed {
        Observed::Limited(c) => c,
        Observed::NotLimited(why) => {
            out.verdict = Verdict::NotSenderLimited;
            out.says = format!("not sender-limited: {why}; the twin keeps the observed load");
            return out;
        }
        Observed::Unknown(why) => {
            out.says = format!("sender rate not predicted: {why}; the twin keeps the observed load, and a sender limited by its CPU may send faster once the poll leaves it");
            return out;
        }
    };
    let busy = format!(
        "CPU {} was {:.1}% busy, {:.1}% of it the packet path, {:.0}% of the polls at bh-enable",
        cost.cpu,
        cost.busy * 100.0,
        cost.packet_share * 100.0,
        cost.bh_enable_polls * 100.0,
    );
    out.cost = Some(cost.clone());
    let to = match leaves {
        Ok(to) => to,
        Err(why) => {
            out.verdict = Verdict::PollStays;
            out.says = format!(
                "sender-limited on CPU {} (sender cost {:.0} ns/packet; {busy}), but {why}, so the twin keeps the observed load",
                cost.cpu, cost.ns_per_packet
            );
            return out;
        }
    };
    let notify = notifications_per_packet.max(0.0) * notification_ns.max(0.0);
    let sender_pps = 1e9 / (cost.ns_per_packet + notify);
    let (rate, bound) = match headroom_pps {
        Some(h) if h > 0.0 && h < sender_pps => (
            h,
            format!(", bounded by the profile's headroom {h:.0} packets/s"),
        ),
        _ => (sender_pps, String::new()),
    };
    out.verdict = Verdict::SenderLimited;
    out.notification_ns_per_packet = Some(notify);
    out.sender_pps = Some(sender_pps);
    out.rate_pps = Some(rate);
    let to = to.map_or("a CPU the scheduler picks".into(), |c| format!("CPU {c}"));
    out.says = format!(
        "sender-limited on CPU {}: predicted rate {rate:.0} packets/s (observed {:.0}) from sender cost {:.0} ns/packet plus {notify:.0} ns/packet of notification{bound} ({busy}; the profile moves the poll to {to})",
        cost.cpu, cost.packets_per_s, cost.ns_per_packet
    );
    out
}

/// Adds to `rate` (a sender-limited effect whose kthread the scheduler places) the rate
/// the sender reaches if the scheduler runs the kthread beside it on its CPU, where each
/// packet costs the sender's work plus the profile's packet path
/// (`path_ns_per_packet`, the twin's CPU per packet for the profile).
pub fn with_kthread_beside_sender(mut rate: SenderRate, path_ns_per_packet: f64) -> SenderRate {
    let Some(cost) = &rate.cost else {
        return rate;
    };
    if rate.verdict != Verdict::SenderLimited || path_ns_per_packet <= 0.0 {
        return rate;
    }
    let beside = 1e9 / (cost.ns_per_packet + path_ns_per_packet);
    rate.says.push_str(&format!(
        "; if the scheduler runs the unpinned kthread beside the sender on CPU {} instead, both share it and the sender reaches {beside:.0} packets/s (its {:.0} ns plus {path_ns_per_packet:.0} ns of packet path a packet): tune verify judges the placement the host chose, and --cpus pins it",
        cost.cpu, cost.ns_per_packet
    ));
    rate.beside_sender_pps = Some(beside);
    rate
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::predict::MeasuredCpu;
    use crate::predict::{predicted_outcome, TwinHost};
    use napilab_core::metric::{Metric, Source};
    use napilab_core::observation::{CpuInterval, CpuTimeShares};
    use napilab_core::trace::{NapiPollTrace, TraceInterval};
    use napilab_core::units::Unit;

    /// vb of a map without a namespace: rows join by name.
    fn vb_by_name() -> DeviceJoin {
        DeviceJoin::new(&napilab_core::TopologyMap::default(), "vb")
    }

    /// vb's polls in one second: (CPU, context, polls).
    fn poll(cpu: u32, context: ExecContext, polls: u64) -> NapiPollTrace {
        let m = |v: f64| Metric::new(v, Unit::PerSecond, Source::Trace);
        NapiPollTrace {
            napi_id: 8193,
            device: "vb".into(),
            ifindex: 2,
            netns: 0,
            cpu,
            context,
            application: None,
            polls,
            packets: polls * 8,
            full_budget_polls: 0,
            work_histogram: Vec::new(),
            polls_per_s: m(polls as f64),
            packets_per_s: m(polls as f64 * 8.0),
        }
    }

    /// One second with these polls and, per CPU, (system, softirq) shares of /proc/stat
    /// (the rest idle).
    fn second(polls: Vec<NapiPollTrace>, busy: &[(u32, f64, f64)]) -> Interval {
        let m = |v: f64| Metric::new(v, Unit::CpuFraction, Source::Tick);
        Interval {
            duration_s: 1.0,
            cpus: busy
                .iter()
                .map(|&(cpu, system, softirq)| CpuInterval {
                    cpu,
                    time: Some(CpuTimeShares {
                        user: m(0.0),
                        nice: m(0.0),
                        system: m(system),
                        idle: m(1.0 - system - softirq),
                        iowait: m(0.0),
                        irq: m(0.0),
                        softirq: m(softirq),
                        steal: m(0.0),
                    }),
                    ..Default::default()
                })
                .collect(),
            trace: Some(TraceInterval {
                napi: polls,
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    /// vb at 80,000 packets/s with 40% of CPU 1 in its softirq (trace tier).
    fn measured() -> Measured {
        let cpu = |cpu: u32, softirq: f64| MeasuredCpu {
            cpu,
            softirq,
            napi_thread: 0.0,
            polls_per_s: 0.0,
            packets_per_poll: 0.0,
        };
        Measured {
            seconds: 2.0,
            packets_per_s: 80_000.0,
            frame_bytes: 64.0,
            cpu_ns_per_packet: 5_000.0,
            polls: 20_000,
            cpus: vec![cpu(0, 0.0), cpu(1, 0.4)],
            total: cpu(u32::MAX, 0.4),
        }
    }

    fn limited(o: Observed) -> SenderCost {
        match o {
            Observed::Limited(c) => c,
            other => panic!("expected sender-limited: {other:?}"),
        }
    }

    #[test]
    fn a_saturated_bh_enable_cpu_is_sender_limited_and_its_rate_follows_from_its_cost() {
        // CPU 1 ran every poll of vb (9 in 10 at bh-enable) and was 99% busy; CPU 0 idles.
        let s = |bh, ksoftirqd| {
            second(
                vec![
                    poll(1, ExecContext::BhEnable, bh),
                    poll(1, ExecContext::Ksoftirqd, ksoftirqd),
                ],
                &[(0, 0.05, 0.0), (1, 0.59, 0.40)],
            )
        };
        let (a, b) = (s(9_000, 1_000), s(9_000, 1_000));
        let cost = limited(observe(&[&a, &b], &vb_by_name(), &measured()));
        assert_eq!(cost.cpu, 1);
        assert!((cost.busy - 0.99).abs() < 1e-9, "{cost:?}");
        assert!((cost.bh_enable_polls - 0.9).abs() < 1e-9, "{cost:?}");
        // (0.99 busy - 0.40 packet path) / 80,000 packets/s = 7,375 ns per packet.
        assert!((cost.ns_per_packet - 7_375.0).abs() < 1e-6, "{cost:?}");

        // Threaded, unpinned, on 2 CPUs: the poll leaves CPU 1; half the packets notify
        // at 300 ns, so the sender reaches 1e9 / (7,375 + 150) packets/s.
        let target = vec![vb(NapiContext::Threaded, 1)];
        let leaves = poll_leaves(&target, 1, false, 2);
        assert_eq!(leaves, Ok(None));
        let r = assess(
            Observed::Limited(cost.clone()),
            leaves,
            0.5,
            300.0,
            Some(250_000.0),
        );
        let expect = 1e9 / 7_525.0;
        assert_eq!(r.verdict, Verdict::SenderLimited);
        assert!((r.sender_pps.expect("rate") - expect).abs() < 1e-6, "{r:?}");
        assert_eq!(r.rate_pps, r.sender_pps);
        assert!((r.notification_ns_per_packet.expect("notify") - 150.0).abs() < 1e-9);
        assert!(
            r.says.starts_with(&format!(
                "sender-limited on CPU 1: predicted rate {expect:.0} packets/s (observed 80000) from sender cost 7375 ns/packet"
            )),
            "{}",
            r.says
        );
        // A lower headroom bounds it, and the output says so.
        let r = assess(
            Observed::Limited(cost.clone()),
            Ok(None),
            0.5,
            300.0,
            Some(100_000.0),
        );
        assert_eq!(r.rate_pps, Some(100_000.0));
        assert!(
            r.says.contains("bounded by the profile's headroom 100000"),
            "{}",
            r.says
        );
        // Deferral keeps the poll in the sender's softirq: limited, but the rate stays.
        let stays = poll_leaves(&[vb(NapiContext::Softirq, 1)], 1, false, 2);
        let r = assess(Observed::Limited(cost), stays, 0.5, 300.0, None);
        assert_eq!((r.verdict, r.rate_pps), (Verdict::PollStays, None));
        assert!(r.says.contains("keeps vb-0 in softirq"), "{}", r.says);
    }

    fn vb(context: NapiContext, cpu: u32) -> NapiSettings {
        NapiSettings {
            device: "vb".into(),
            queue: 0,
            napi_id: Some(8193),
            context,
            cpu,
            defer_hard_irqs: 0,
            gro_flush_timeout_ns: 0,
        }
    }

    #[test]
    fn an_unsaturated_cpu_is_not_sender_limited() {
        // 80% busy: the sender had a fifth of its CPU to spare.
        let a = second(
            vec![poll(1, ExecContext::BhEnable, 10_000)],
            &[(1, 0.40, 0.40)],
        );
        let o = observe(&[&a], &vb_by_name(), &measured());
        let Observed::NotLimited(why) = &o else {
            panic!("{o:?}")
        };
        assert!(why.contains("80.0% busy") && why.contains("95%"), "{why}");
        let r = assess(o, Ok(None), 0.5, 300.0, None);
        assert_eq!(
            (r.verdict, r.rate_pps, r.cost),
            (Verdict::NotSenderLimited, None, None)
        );
        // Polled in a NAPI kthread already: no sender shares the poll's CPU.
        let k = second(
            vec![poll(0, ExecContext::NapiThread, 10_000)],
            &[(0, 1.0, 0.0), (1, 1.0, 0.0)],
        );
        assert!(
            matches!(observe(&[&k], &vb_by_name(), &measured()), Observed::NotLimited(w) if w.contains("NAPI kthread"))
        );
    }

    #[test]
    fn polls_on_two_cpus_or_missing_inputs_are_refused_with_the_reason() {
        // Both CPUs saturated, 60/40: the sender moved (or two send).
        let a = second(
            vec![
                poll(0, ExecContext::BhEnable, 6_000),
                poll(1, ExecContext::BhEnable, 4_000),
            ],
            &[(0, 0.6, 0.4), (1, 0.6, 0.4)],
        );
        let o = observe(&[&a], &vb_by_name(), &measured());
        let Observed::Unknown(why) = &o else {
            panic!("{o:?}")
        };
        assert!(
            why.contains("spread over several CPUs (CPU 0 60%, CPU 1 40%")
                && why.contains("taskset"),
            "{why}"
        );
        let r = assess(o, Ok(None), 0.5, 300.0, None);
        assert_eq!((r.verdict, r.rate_pps), (Verdict::Refused, None));
        assert!(
            r.says.starts_with("sender rate not predicted:"),
            "{}",
            r.says
        );
        // No /proc/stat time of the polling CPU: its busy share is unknown.
        let mut b = second(
            vec![poll(1, ExecContext::BhEnable, 10_000)],
            &[(1, 0.6, 0.4)],
        );
        b.cpus[0].time = None;
        assert!(
            matches!(observe(&[&b], &vb_by_name(), &measured()), Observed::Unknown(w) if w.contains("/proc/stat time of CPU 1"))
        );
        // Saturated, but the packet path took it all: no sender cost is left.
        let mut all_path = measured();
        all_path.cpus[1].softirq = 1.0;
        let c = second(
            vec![poll(1, ExecContext::BhEnable, 10_000)],
            &[(1, 0.0, 1.0)],
        );
        assert!(
            matches!(observe(&[&c], &vb_by_name(), &all_path), Observed::Unknown(w) if w.contains("nothing is left for the sender"))
        );
    }

    #[test]
    fn only_a_kthread_off_the_senders_cpu_moves_the_poll() {
        let t = |cpu| vec![vb(NapiContext::Threaded, cpu)];
        assert_eq!(poll_leaves(&t(0), 1, true, 2), Ok(Some(0)));
        assert!(poll_leaves(&t(1), 1, true, 2).is_err_and(|w| w.contains("pins vb-0")));
        assert!(poll_leaves(&t(0), 0, false, 1).is_err_and(|w| w.contains("one CPU")));
        let busy_poll = vec![vb(NapiContext::ThreadedBusyPoll, 1)];
        assert_eq!(poll_leaves(&busy_poll, 1, false, 2), Ok(None));
    }

    #[test]
    fn the_twin_runs_the_profile_at_the_rate_the_sender_reaches() {
        let twin = TwinHost {
            burst: 1,
            cpus: 2,
            hz: 250,
            kernel: "6.18".into(),
            netdev_budget: 300,
            netdev_budget_usecs: Some(2_000),
            pps: 80_000.0,
            frame_bytes: 64.0,
        };
        let mut lab = crate::calibrate::LabProfile::load(crate::calibrate::VETH_LAB_NAME)
            .expect("the shipped veth-lab profile")
            .profile;
        lab.latency_ns.irq_delivery = 10_000;
        let threaded = vec![vb(NapiContext::Threaded, 1)];
        let cost = cost_of_sender();
        let (out, s) = predicted_outcome(
            &twin,
            &threaded,
            &lab,
            &[1, 2],
            Observed::Limited(cost),
            (false, 2),
        )
        .expect("predicted");
        let rate = s.rate_pps.expect("sender-limited");
        assert_eq!(s.verdict, Verdict::SenderLimited, "{}", s.says);
        assert!(rate > 115_000.0 && rate <= 125_000.0, "{}", s.says);
        let h = out.headroom_pps.as_ref().expect("headroom");
        assert!(rate <= h.pps.mean || h.stopped == "below_observed", "{h:?}");
        assert!(
            (out.packets_per_s.mean / rate - 1.0).abs() < 0.02,
            "the twin carries the sender's rate {rate:.0}: {:?}",
            out.packets_per_s
        );
        // Unpinned: beside the sender the two share CPU 1, each packet costing the
        // sender's 8,000 ns plus the twin's packet path.
        let beside = s
            .beside_sender_pps
            .expect("the scheduler may place it beside");
        let expect = 1e9 / (8_000.0 + out.cpu_ns_per_packet.mean);
        assert!((beside - expect).abs() < 1e-6, "{beside} vs {expect}");
        assert!(beside < rate, "{}", s.says);
        assert!(s.says.contains("beside the sender on CPU 1"), "{}", s.says);
        // Pinned elsewhere, the placement is known: no second rate.
        let (_, pinned) = predicted_outcome(
            &twin,
            &[vb(NapiContext::Threaded, 0)],
            &lab,
            &[1],
            Observed::Limited(cost_of_sender()),
            (true, 2),
        )
        .expect("predicted");
        assert_eq!(pinned.verdict, Verdict::SenderLimited, "{}", pinned.says);
        assert_eq!(pinned.beside_sender_pps, None);
        // Not sender-limited: the twin keeps the observed load.
        let (kept, s) = predicted_outcome(
            &twin,
            &threaded,
            &lab,
            &[1, 2],
            Observed::NotLimited("idle".into()),
            (false, 2),
        )
        .expect("predicted");
        assert_eq!((s.verdict, s.rate_pps), (Verdict::NotSenderLimited, None));
        assert!(
            (kept.packets_per_s.mean / 80_000.0 - 1.0).abs() < 0.02,
            "{kept:?}"
        );
    }

    /// A sender on CPU 1 at 8,000 ns per packet: it reaches about 1e9 / 8,000 = 125,000
    /// packets/s once the kthread polls for it.
    fn cost_of_sender() -> SenderCost {
        SenderCost {
            cpu: 1,
            busy: 0.99,
            steal: 0.0,
            packet_share: 0.35,
            bh_enable_polls: 1.0,
            packets_per_s: 80_000.0,
            ns_per_packet: 8_000.0,
        }
    }
}
