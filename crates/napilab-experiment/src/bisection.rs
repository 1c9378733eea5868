//! The maximum-throughput search: the highest offered load with loss at most the
//! threshold, by bisection between a passing and a failing load (RFC 2544, section
//! 26.1, with a loss threshold instead of zero loss), with a bounded number of probes.

/// What a probe found: whether the load passed, or that the run was interrupted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Probe {
    Pass,
    Fail,
    Interrupted,
}

#[derive(Clone, Debug, PartialEq)]
pub struct SearchOutcome {
    /// Highest passing load (0 when none passed).
    pub pps: f64,
    /// `converged`, `upper_bound_passed`, `iterations_exhausted`, `interrupted`.
    pub stopped: &'static str,
    /// Loads probed, in order.
    pub probed: Vec<f64>,
}

/// Bisects. `known` are (load, passed) results already measured (e.g. the sweep);
/// `probe` measures one load. At most `iterations` probes; stops when
/// `(high - low) / high < resolution`.
pub fn bisect(
    max_pps: f64,
    known: &[(f64, bool)],
    iterations: u32,
    resolution: f64,
    mut probe: impl FnMut(f64) -> Probe,
) -> SearchOutcome {
    let mut hi: Option<f64> = known
        .iter()
        .filter(|(l, ok)| !ok && *l <= max_pps)
        .map(|(l, _)| *l)
        .fold(None, |a, l| Some(a.map_or(l, |a: f64| a.min(l))));
    let mut lo = known
        .iter()
        .filter(|(l, ok)| *ok && hi.is_none_or(|h| *l < h))
        .map(|(l, _)| *l)
        .fold(0.0, f64::max)
        .min(max_pps);
    let mut out = SearchOutcome {
        pps: lo,
        stopped: "converged",
        probed: Vec::new(),
    };
    let mut left = iterations;
    if hi.is_none() {
        if lo >= max_pps {
            out.stopped = "upper_bound_passed";
            return out;
        }
        if left == 0 {
            out.stopped = "iterations_exhausted";
            return out;
        }
        left -= 1;
        out.probed.push(max_pps);
        match probe(max_pps) {
            Probe::Pass => {
                out.pps = max_pps;
                out.stopped = "upper_bound_passed";
                return out;
            }
            Probe::Fail => hi = Some(max_pps),
            Probe::Interrupted => {
                out.stopped = "interrupted";
                return out;
            }
        }
    }
    let mut hi = hi.unwrap_or(max_pps);
    loop {
        if (hi - lo) / hi < resolution {
            out.stopped = "converged";
            break;
        }
        if left == 0 {
            out.stopped = "iterations_exhausted";
            break;
        }
        left -= 1;
        let mid = ((lo + hi) / 2.0).round();
        out.probed.push(mid);
        match probe(mid) {
            Probe::Pass => lo = mid,
            Probe::Fail => hi = mid,
            Probe::Interrupted => {
                out.stopped = "interrupted";
                break;
            }
        }
    }
    out.pps = lo;
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A synthetic DUT: no loss up to `cap`, then loss (offered - cap) / offered.
    fn dut(cap: f64, threshold: f64) -> impl FnMut(f64) -> Probe {
        move |load| {
            let loss = if load <= cap {
                0.0
            } else {
                (load - cap) / load
            };
            if loss <= threshold {
                Probe::Pass
            } else {
                Probe::Fail
            }
        }
    }

    #[test]
    fn finds_the_knee_within_resolution() {
        let r = bisect(1_000_000.0, &[], 20, 0.01, dut(437_000.0, 0.001));
        assert_eq!(r.stopped, "converged");
        assert!(
            r.pps <= 437_000.0 * 1.001 && r.pps >= 437_000.0 * 0.99,
            "{r:?}"
        );
        assert_eq!(r.probed[0], 1_000_000.0);
        assert!(r.probed.len() <= 9, "{r:?}");
    }

    #[test]
    fn uses_known_points() {
        let known = [(100_000.0, true), (200_000.0, true), (400_000.0, false)];
        let r = bisect(1_000_000.0, &known, 20, 0.02, dut(300_000.0, 0.0));
        assert!(!r.probed.contains(&1_000_000.0));
        assert!(
            r.probed.iter().all(|p| *p > 200_000.0 && *p < 400_000.0),
            "{r:?}"
        );
        assert!((r.pps - 300_000.0).abs() <= 0.02 * 400_000.0, "{r:?}");
    }

    #[test]
    fn upper_bound_and_limits() {
        let r = bisect(50_000.0, &[], 5, 0.01, dut(1e9, 0.0));
        assert_eq!((r.pps, r.stopped), (50_000.0, "upper_bound_passed"));
        let r = bisect(1_000_000.0, &[], 3, 0.001, dut(123_456.0, 0.0));
        assert_eq!(r.stopped, "iterations_exhausted");
        assert_eq!(r.probed.len(), 3);
        assert!(r.pps <= 123_456.0);
        let mut n = 0;
        let r = bisect(1_000_000.0, &[], 10, 0.01, |_| {
            n += 1;
            if n == 2 {
                Probe::Interrupted
            } else {
                Probe::Fail
            }
        });
        assert_eq!(r.stopped, "interrupted");
        assert_eq!(r.pps, 0.0);
    }
}
