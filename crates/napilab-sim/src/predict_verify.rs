//! A prediction checked against what the host then measured (`napilab tune verify`,
//! docs/tune.md): each figure's predicted interval beside the measurement and its error,
//! the figures a verification cannot measure and why, and, for an unpinned NAPI kthread
//! of a sender-limited host, the placement the scheduler chose and the prediction for it.

use serde::{Deserialize, Serialize};

use crate::predict::{Figure, Prediction};
use crate::predict_inputs::Measured;

/// One figure of a prediction against its later measurement.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Check {
    pub figure: String,
    pub predicted: Figure,
    pub measured: f64,
    /// (predicted mean - measured) / measured; None when nothing was measured.
    pub error: Option<f64>,
    /// The measurement lies in the predicted interval.
    pub within: bool,
}

pub const VERIFY_SCHEMA: &str = "napilab.tune-verify/1";

/// A prediction checked against a measurement made after the profile was applied.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Verification {
    pub schema: String,
    pub profile: String,
    pub device: String,
    pub measured: Measured,
    /// Over all CPUs: the kthreads may run elsewhere than the twin placed them.
    pub checks: Vec<Check>,
    /// Largest |error| over the checks that have one.
    pub max_abs_error: Option<f64>,
    /// Figures the prediction made that this measurement cannot check, and why.
    #[serde(default)]
    pub unverified: Vec<Unverified>,
    /// Where the scheduler ran an unpinned NAPI kthread of a sender-limited host, and
    /// which of the prediction's placements the checks therefore judge.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement: Option<String>,
}

/// A predicted figure a verification does not measure.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Unverified {
    pub figure: String,
    pub predicted: Figure,
    pub why: String,
}

/// Why `tune verify` does not check the headroom.
pub const HEADROOM_NOT_VERIFIED: &str = "predicted but not verified: tune verify observes the load the host carries and does not raise it until packets drop; measuring the headroom takes a load search that drives the path to loss (as the lab's maximum-throughput search does on its testbed, docs/lab.md)";

/// Checks `prediction`'s figures for the profile against `measured`, over all CPUs.
pub fn verify(prediction: &Prediction, measured: Measured) -> Verification {
    let p = &prediction.predicted;
    let m = &measured;
    let beside = kthread_beside_sender(prediction, m);
    // Beside the sender the packet path runs at the sender's lower rate: its shares of a
    // CPU scale with the rate, its cost per packet does not.
    let (packets_per_s, rate_scale) = match &beside {
        Some(b) => (Figure::point(b.pps), b.pps / p.packets_per_s.mean.max(1e-9)),
        None => (p.packets_per_s, 1.0),
    };
    let rows: [(&str, Figure, f64); 7] = [
        ("packets/s", packets_per_s, m.packets_per_s),
        (
            "packet CPU per packet (ns)",
            p.cpu_ns_per_packet,
            m.cpu_ns_per_packet,
        ),
        ("softirq (share of a CPU)", p.total.softirq, m.total.softirq),
        (
            "NAPI kthread (share of a CPU)",
            p.total.napi_thread.scaled(rate_scale),
            m.total.napi_thread,
        ),
        (
            "packet CPU (share of a CPU)",
            sum(p.total.softirq, p.total.napi_thread).scaled(rate_scale),
            m.total.softirq + m.total.napi_thread,
        ),
        ("polls/s", p.total.polls_per_s, m.total.polls_per_s),
        (
            "packets per poll",
            p.total.packets_per_poll,
            m.total.packets_per_poll,
        ),
    ];
    // The twin has no sender: beside it, how the two share the CPU sets the batches,
    // which the twin did not predict.
    let batch_figures = ["polls/s", "packets per poll"];
    let mut unverified: Vec<Unverified> = Vec::new();
    let checks: Vec<Check> = rows
        .into_iter()
        .filter(|(figure, predicted, _)| match &beside {
            Some(b) if batch_figures.contains(figure) => {
                unverified.push(Unverified {
                    figure: (*figure).into(),
                    predicted: *predicted,
                    why: format!("predicted for a kthread on a CPU of its own; the scheduler ran it beside the sender on CPU {}, where the batches follow how the two share the CPU, which the twin (without a sender) does not model", b.cpu),
                });
                false
            }
            _ => true,
        })
        .map(|(figure, predicted, measured)| Check {
            figure: figure.into(),
            predicted,
            measured,
            error: (measured.abs() > 1e-12).then(|| (predicted.mean - measured) / measured),
            within: predicted.low <= measured && measured <= predicted.high,
        })
        .collect();
    let max_abs_error = checks
        .iter()
        .filter_map(|c| c.error.map(f64::abs))
        .fold(None, |a: Option<f64>, e| Some(a.map_or(e, |a| a.max(e))));
    unverified.extend(p.headroom_pps.iter().map(|h| Unverified {
        figure: "headroom (packets/s)".into(),
        predicted: h.pps,
        why: HEADROOM_NOT_VERIFIED.into(),
    }));
    let placement = placement_said(prediction, m, beside.as_ref());
    Verification {
        schema: VERIFY_SCHEMA.into(),
        profile: prediction.profile.clone(),
        device: prediction.devices.first().cloned().unwrap_or_default(),
        measured,
        checks,
        max_abs_error,
        unverified,
        placement,
    }
}

/// The sender's CPU and the rate the prediction gave for a kthread beside it.
struct BesideSender {
    cpu: u32,
    pps: f64,
}

/// The CPU that ran most of the device's NAPI kthread time in `m`.
fn kthread_cpu(m: &Measured) -> Option<u32> {
    m.cpus
        .iter()
        .filter(|c| c.napi_thread > 0.0)
        .max_by(|a, b| a.napi_thread.total_cmp(&b.napi_thread))
        .map(|c| c.cpu)
}

/// `Some` when the prediction carried the beside-the-sender placement and the
/// measurement shows the kthread ran on the sender's CPU.
fn kthread_beside_sender(prediction: &Prediction, m: &Measured) -> Option<BesideSender> {
    let s = prediction.sender_rate.as_ref()?;
    let pps = s.beside_sender_pps?;
    let cpu = s.cost.as_ref()?.cpu;
    (kthread_cpu(m)? == cpu).then_some(BesideSender { cpu, pps })
}

fn placement_said(
    prediction: &Prediction,
    m: &Measured,
    beside: Option<&BesideSender>,
) -> Option<String> {
    let s = prediction.sender_rate.as_ref()?;
    s.beside_sender_pps?;
    let sender = s.cost.as_ref()?.cpu;
    Some(match (beside, kthread_cpu(m)) {
        (Some(b), _) => format!("the scheduler ran the NAPI kthread beside the sender on CPU {}: packets/s is judged against the prediction for that placement ({:.0} packets/s), the CPU shares scaled to it", b.cpu, b.pps),
        (None, Some(cpu)) => format!("the scheduler ran the NAPI kthread on CPU {cpu}, not the sender's CPU {sender}: judged against the prediction for a kthread on a CPU of its own"),
        (None, None) => "no NAPI kthread time was measured: the profile's kthread did not poll".into(),
    })
}

/// Two figures added (their intervals added end to end: an upper bound on the spread).
fn sum(a: Figure, b: Figure) -> Figure {
    Figure {
        mean: a.mean + b.mean,
        low: a.low + b.low,
        high: a.high + b.high,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::predict::tests::softirq_vb;
    use crate::predict::{CpuFigures, Outcome, LEVEL, PREDICTION_SCHEMA};
    use crate::predict_inputs::MeasuredCpu;
    use crate::sender_rate;

    /// A threaded prediction for a sender-limited vb on CPU 0: 100,000 packets/s with
    /// the kthread on a CPU of its own, 64,000 beside the sender; the kthread takes 30%
    /// of a CPU at 3,000 ns a packet, 20,000 polls/s of 5 packets.
    fn sender_limited_prediction() -> Prediction {
        let f = Figure::point;
        let cpu = |cpu, thread: f64, polls: f64| CpuFigures {
            cpu,
            softirq: f(0.0),
            napi_thread: f(thread),
            busy_poll: f(0.0),
            polls_per_s: f(polls),
            packets_per_poll: f(if polls > 0.0 { 5.0 } else { 0.0 }),
            irqs_per_s: f(0.0),
        };
        let outcome = Outcome {
            settings: softirq_vb(),
            packets_per_s: f(100_000.0),
            dropped_per_s: f(0.0),
            cpu_ns_per_packet: f(3_000.0),
            cpus: vec![cpu(0, 0.3, 20_000.0), cpu(1, 0.0, 0.0)],
            total: cpu(u32::MAX, 0.3, 20_000.0),
            headroom_pps: None,
        };
        let cost = sender_rate::SenderCost {
            cpu: 0,
            busy: 1.0,
            steal: 0.0,
            packet_share: 0.3,
            bh_enable_polls: 1.0,
            packets_per_s: 60_000.0,
            ns_per_packet: 12_625.0,
        };
        let rate = sender_rate::assess(
            sender_rate::Observed::Limited(cost),
            Ok(None),
            0.0,
            0.0,
            None,
        );
        Prediction {
            schema: PREDICTION_SCHEMA.into(),
            profile: "threaded".into(),
            hostname: None,
            kernel: "6.18".into(),
            devices: vec!["vb".into()],
            measured: measured_on(&[(0, 0.3, 0.0, 60_000.0)], 60_000.0),
            fit_factor: 1.0,
            current: outcome.clone(),
            predicted: outcome,
            seeds: vec![1],
            level: LEVEL,
            assumed: vec![],
            kthread_wake_up: None,
            sender_rate: Some(sender_rate::with_kthread_beside_sender(rate, 3_000.0)),
        }
    }

    /// A measurement of vb: per CPU (cpu, softirq, NAPI kthread share, polls/s) at
    /// `pps` packets/s.
    fn measured_on(cpus: &[(u32, f64, f64, f64)], pps: f64) -> Measured {
        let row = |cpu, softirq, napi_thread, polls: f64| MeasuredCpu {
            cpu,
            softirq,
            napi_thread,
            polls_per_s: polls,
            packets_per_poll: if polls > 0.0 { pps / polls } else { 0.0 },
        };
        let polls: f64 = cpus.iter().map(|c| c.3).sum();
        Measured {
            seconds: 2.0,
            packets_per_s: pps,
            frame_bytes: 92.0,
            cpu_ns_per_packet: 3_000.0,
            polls: (polls * 2.0) as u64,
            cpus: cpus.iter().map(|&(c, s, t, p)| row(c, s, t, p)).collect(),
            total: row(
                u32::MAX,
                cpus.iter().map(|c| c.1).sum(),
                cpus.iter().map(|c| c.2).sum(),
                polls,
            ),
        }
    }

    #[test]
    fn verify_judges_the_placement_the_scheduler_chose() {
        let p = sender_limited_prediction();
        let beside = p.sender_rate.as_ref().and_then(|s| s.beside_sender_pps);
        assert_eq!(
            beside,
            Some(1e9 / 15_625.0),
            "64,000 packets/s beside the sender"
        );
        let check = |v: &Verification, figure: &str| {
            v.checks
                .iter()
                .find(|c| c.figure == figure)
                .cloned()
                .unwrap_or_else(|| panic!("no check {figure}: {v:?}"))
        };
        // The kthread ran on CPU 1, not the sender's: judged as predicted.
        let away = verify(&p, measured_on(&[(1, 0.0, 0.3, 20_000.0)], 100_000.0));
        assert_eq!(check(&away, "packets/s").predicted.mean, 100_000.0);
        assert_eq!(check(&away, "polls/s").error, Some(0.0));
        assert!(away
            .placement
            .as_deref()
            .is_some_and(|w| w.contains("on CPU 1, not the sender's CPU 0")));
        // Beside the sender on CPU 0: packets/s against the beside rate, the shares
        // scaled to it, and the batches not judged (the twin has no sender).
        let near = verify(&p, measured_on(&[(0, 0.0, 0.192, 18_000.0)], 64_000.0));
        let pps = check(&near, "packets/s");
        assert!(pps.error.is_some_and(|e| e.abs() < 1e-9), "{pps:?}");
        let share = check(&near, "NAPI kthread (share of a CPU)");
        assert!((share.predicted.mean - 0.192).abs() < 1e-9, "{share:?}");
        assert!(near.checks.iter().all(|c| c.figure != "polls/s"));
        assert!(near.unverified.iter().any(
            |u| u.figure == "packets per poll" && u.why.contains("beside the sender on CPU 0")
        ));
        assert!(near
            .placement
            .as_deref()
            .is_some_and(|w| w.contains("beside the sender on CPU 0")));
    }
}
