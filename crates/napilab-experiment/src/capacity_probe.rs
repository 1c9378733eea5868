//! The doubling capacity probe: trials at loads doubling from a first load until the
//! testbed's own criterion says the last trial (or the one before it) is the estimate.
//! The twin stops when the model loses packets; the lab's paced generator stops when
//! it cannot follow the schedule or the DUT drops. Both are this loop: only the
//! criterion differs, so it is written once and each testbed gives its criterion.

use napilab_core::experiment::PointResult;

/// Where doubling starts and how far it may go.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Doubling {
    /// The first trial's load, packets per second.
    pub from_pps: f64,
    /// Most trials (the cost of the probe is about twice that of its last trial).
    pub max_trials: u32,
    /// No trial asks for more; a trial at this load is the last.
    pub ceiling_pps: f64,
}

/// What a testbed's criterion makes of one trial.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum After {
    /// Nothing limited this load: try twice the load.
    Double,
    /// This trial found the limit: it is the estimate.
    StopHere,
    /// This trial says less than the one before (e.g. the generator could not follow
    /// the request): the one before is the estimate, or this one when it is the first.
    StopBefore,
}

/// Runs the probe. `trial(load)` measures one load (None: the run was stopped, and so
/// is the probe); `judge(load, &point)` is the testbed's criterion. Returns the trial
/// that is the estimate, or None when the run was stopped before one finished.
pub fn doubling_probe<E>(
    doubling: Doubling,
    mut trial: impl FnMut(f64) -> Result<Option<PointResult>, E>,
    mut judge: impl FnMut(f64, &PointResult) -> After,
) -> Result<Option<PointResult>, E> {
    let mut load = doubling.from_pps.min(doubling.ceiling_pps);
    let mut estimate: Option<PointResult> = None;
    for _ in 0..doubling.max_trials {
        let Some(p) = trial(load)? else {
            return Ok(None);
        };
        match judge(load, &p) {
            After::StopHere => return Ok(Some(p)),
            After::StopBefore => return Ok(Some(estimate.unwrap_or(p))),
            After::Double => estimate = Some(p),
        }
        if load >= doubling.ceiling_pps {
            break;
        }
        load = (2.0 * load).min(doubling.ceiling_pps);
    }
    Ok(estimate)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A point at `load` (1 s) of which `forwarded` got through.
    fn point(load: f64, forwarded: f64) -> PointResult {
        use napilab_core::experiment::PointRole;
        napilab_testkit::synthetic_point(
            PointRole::Search,
            load,
            load,
            1.0,
            load as u64,
            forwarded as u64,
        )
    }

    const D: Doubling = Doubling {
        from_pps: 50_000.0,
        max_trials: 12,
        ceiling_pps: 1e9,
    };

    /// Probes a DUT that forwards at most `capacity` with `judge`: the loads asked for
    /// and the load of the estimate.
    fn probe(
        doubling: Doubling,
        capacity: f64,
        judge: impl FnMut(f64, &PointResult) -> After,
    ) -> (Vec<f64>, Option<f64>) {
        let mut asked = Vec::new();
        let est = doubling_probe::<()>(
            doubling,
            |l| {
                asked.push(l);
                Ok(Some(point(l, l.min(capacity))))
            },
            judge,
        )
        .expect("a synthetic trial never fails");
        (asked, est.map(|p| p.requested_pps))
    }

    #[test]
    fn doubles_until_the_criterion_stops_and_keeps_that_trial() {
        let lossy = |l: f64, p: &PointResult| {
            if p.delivered_pps() < 0.99 * l {
                After::StopHere
            } else {
                After::Double
            }
        };
        let (asked, est) = probe(D, 300e3, lossy);
        assert_eq!(asked, vec![50e3, 100e3, 200e3, 400e3]);
        assert_eq!(est, Some(400e3));
    }

    #[test]
    fn stop_before_keeps_the_previous_trial_or_the_first() {
        let above_100k = |l: f64, _: &PointResult| {
            if l > 100e3 {
                After::StopBefore
            } else {
                After::Double
            }
        };
        assert_eq!(probe(D, 1e9, above_100k).1, Some(100e3));
        assert_eq!(probe(D, 1e9, |_, _| After::StopBefore).1, Some(50e3));
    }

    #[test]
    fn ceiling_and_trial_count_bound_it_and_a_stop_ends_it() {
        let capped = Doubling {
            ceiling_pps: 150e3,
            ..D
        };
        let (asked, est) = probe(capped, 1e9, |_, _| After::Double);
        assert_eq!(asked, vec![50e3, 100e3, 150e3]);
        assert_eq!(est, Some(150e3));
        let few = Doubling { max_trials: 2, ..D };
        assert_eq!(probe(few, 1e9, |_, _| After::Double).1, Some(100e3));
        let stopped = doubling_probe::<()>(D, |_| Ok(None), |_, _| After::Double);
        assert_eq!(stopped, Ok(None));
    }
}
