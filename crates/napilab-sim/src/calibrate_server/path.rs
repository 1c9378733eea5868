//! The request path's latency that the twin's packets do not carry (TCP on both sides,
//! the reply's way back to the client), fitted on the lab's lowest rates, where
//! nothing queues and a request's latency is that path plus the wake-ups the twin
//! already draws from the run's probe.

use napilab_core::scenario::ServerMode;
use napilab_core::RequestPointResult;

use crate::ConfigError;

use super::fit::ServerFit;
use super::points::{lab_by_rate, mode_runs, twin_points};
use super::solve::{fitted, record_fit};
use super::FitCheck;

/// The shortest wake-up a fitted shift leaves, ns: the IPI's delivery.
const MIN_WAKE_UP_NS: f64 = 1_000.0;

/// The modes whose lowest rate shows the path: every mode whose requests wait for
/// nothing else there. Not busy-wait: at its low rates an empty 1 ms busy loop makes
/// epoll forget its NAPI id and requests wait for the 5 ms `gro_flush_timeout`
/// (docs/lab.md), which is its own mechanism, not the path.
const PATH_MODES: [ServerMode; 4] = [
    ServerMode::NoCoalescing,
    ServerMode::Deferral,
    ServerMode::Threaded,
    ServerMode::IrqSuspend,
];

/// ln(99th percentile / median) of an exponential, in units of its mean: ln(100) -
/// ln(2). The tail's mean is what widens p99 - p50 beyond the twin's own.
const EXP_P99_MINUS_P50: f64 = 3.912_023_005_428_146;
/// An exponential's median in units of its mean.
const EXP_P50: f64 = std::f64::consts::LN_2;

/// One mode's lowest rate: the lab's and the twin's (without a path) p50 and p99, us.
struct LowPoint {
    name: String,
    index: usize,
    qps: f64,
    lab: (f64, f64),
    twin: (f64, f64),
}

fn p50_p99(p: &RequestPointResult) -> (f64, f64) {
    (p.latency.p50_us, p.latency.p99_us)
}

/// The median of `v` (not empty).
fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

impl ServerFit<'_> {
    /// The fit's twin wakes its threads onto an idle CPU after one of the probe's
    /// delays less `shift_ns` (at least [`MIN_WAKE_UP_NS`]), and a threaded poller after
    /// the probe's median less it; the provenance says so. Without a probe, nothing.
    pub(super) fn shift_wake_ups(&mut self, shift_ns: f64) {
        let Some(w) = &self.probe else {
            return;
        };
        self.wake_up_shift_ns = shift_ns;
        let shifted = |d: f64| (d - shift_ns).max(MIN_WAKE_UP_NS).round() as u64;
        let p = &mut self.base.profile;
        p.latency_ns.wake_up_samples = w.samples_ns.iter().map(|&d| shifted(d as f64)).collect();
        if p.latency_ns.irq_delivery > 0 {
            p.latency_ns.irq_delivery = shifted(w.delay_ns);
        }
        let detail = if shift_ns > 0.0 {
            format!(
                "the run's wake-up probe, each delay less {:.1} us (at least {:.0} us), fitted with server.path_ns on the lowest rates (see it): the twin's median latency there was above the lab's in most modes with the probe's own delays; {}",
                shift_ns / 1e3,
                MIN_WAKE_UP_NS / 1e3,
                w.source
            )
        } else {
            format!("the run's wake-up probe: {}", w.source)
        };
        p.provenance.insert(
            "latency_ns.irq_delivery".into(),
            fitted(&self.reference, detail),
        );
    }

    /// The last step: `server.path_tail_ns`, the mean of the exponential that widens
    /// the twin's p99 - p50 at each mode's lowest rate to the lab's, and `server.path_ns`,
    /// what then separates the two medians, each the median over the modes. A path is
    /// never below 0: when the twin is the slower there, its wake-ups are shortened by
    /// the excess instead ([`ServerFit::shift_wake_ups`]). Returns the checks: each
    /// mode's p50 and p99 there, lab against the twin with the fitted path.
    pub(super) fn path(&mut self) -> Result<Vec<FitCheck>, ConfigError> {
        let mut costs = self.costs.clone();
        costs.path_ns = 0.0;
        costs.path_tail_ns = 0.0;
        let mut low = Vec::new();
        for mode in PATH_MODES {
            let Some(run) = mode_runs(&self.plan, self.record, mode).into_iter().next() else {
                continue;
            };
            let Some(&qps) = run.rates().first() else {
                continue;
            };
            let lab = (
                lab_by_rate(&run, |p| p50_p99(p).0)[0],
                lab_by_rate(&run, |p| p50_p99(p).1)[0],
            );
            let twin = twin_points(&self.plan, run.index, &self.base, &costs, &[qps])?;
            let Some(t) = twin.first() else { continue };
            low.push(LowPoint {
                name: run.name.to_string(),
                index: run.index,
                qps,
                lab,
                twin: p50_p99(t),
            });
        }
        if low.is_empty() {
            self.unfixed.push(format!(
                "server.path_ns, server.path_tail_ns kept ASSUMED ({:.0}, {:.0}): the run has no point that met the objective in no-coalescing, deferral, threaded or irq-suspend",
                self.costs.path_ns, self.costs.path_tail_ns
            ));
            return Ok(Vec::new());
        }
        let widening = median(
            low.iter()
                .map(|l| ((l.lab.1 - l.lab.0) - (l.twin.1 - l.twin.0)).max(0.0))
                .collect(),
        );
        let tail_us = widening / EXP_P99_MINUS_P50;
        // What the medians still lack (or have too much of) once the tail is added.
        let gap_us = median(
            low.iter()
                .map(|l| l.lab.0 - l.twin.0 - tail_us * EXP_P50)
                .collect(),
        );
        // A twin slower than the lab at its lowest rate waits too long for its
        // wake-ups (one a request there): the probe's thread is parked on a futex and
        // woken by another thread, the server's by the kernel's receive path, and on
        // the project's VM the probe's took 10-21 us longer. They are shortened by the
        // excess, on top of any earlier shift; a twin faster than the lab gets the
        // difference as path.
        let (path_us, shift_us) = if self.probe.is_some() {
            let shift = self.wake_up_shift_ns / 1e3 - gap_us;
            (((-shift).max(0.0)), shift.max(0.0))
        } else {
            (gap_us.max(0.0), 0.0)
        };
        let by_mode = low
            .iter()
            .map(|l| {
                format!(
                    "{} at {:.0} requests/s: lab {:.0}/{:.0} us, twin {:.0}/{:.0}",
                    l.name, l.qps, l.lab.0, l.lab.1, l.twin.0, l.twin.1
                )
            })
            .collect::<Vec<_>>()
            .join("; ");
        self.shift_wake_ups(shift_us * 1e3);
        self.costs.path_tail_ns = (tail_us * 1e3).round();
        self.costs.path_ns = (path_us * 1e3).round();
        let tail_detail = format!(
            "the median over modes of how much the lab's p99 - p50 at its lowest rate exceeds the twin's without a path ({widening:.0} us), as an exponential's mean (its p99 - p50 is ln 50 = 3.9 means); p50/p99 by mode: {by_mode}"
        );
        let path_detail = format!(
            "the median over modes of the lab's p50 at its lowest rate less the twin's without a path and less the tail's median (0.69 x server.path_tail_ns){}; p50/p99 by mode: {by_mode}",
            if shift_us > 0.0 {
                format!(": the twin's was the higher, so no path (0), and its wake-ups shortened by {shift_us:.1} us instead (latency_ns.irq_delivery)")
            } else {
                String::new()
            }
        );
        let (tail, path) = (self.costs.path_tail_ns, self.costs.path_ns);
        record_fit(
            &mut self.notes,
            &mut self.costs,
            &self.reference,
            "server.path_tail_ns",
            tail,
            tail_detail,
        );
        record_fit(
            &mut self.notes,
            &mut self.costs,
            &self.reference,
            "server.path_ns",
            path,
            path_detail,
        );
        let mut checks = Vec::new();
        for l in &low {
            let twin = twin_points(&self.plan, l.index, &self.base, &self.costs, &[l.qps])?;
            let Some(t) = twin.first().map(p50_p99) else {
                continue;
            };
            for (what, lab, twin) in [("p50", l.lab.0, t.0), ("p99", l.lab.1, t.1)] {
                checks.push(FitCheck {
                    configuration: l.name.clone(),
                    statistic: format!("{what} latency at {:.0} requests/s, us", l.qps),
                    lab,
                    twin,
                });
            }
        }
        Ok(checks)
    }
}
