//! One configuration's request workload, written once for every testbed: the capacity
//! probe where the workload needs one, the sweep (fixed rates and fractions of the
//! measured capacity, with repeats), then the maximum-rate searches over a range that
//! is the scenario's cap, or derived from the capacity and raised while its top still
//! meets the objective. The lab (its client and server namespaces) and the twin each
//! implement [`RequestBench`]; building and tearing down their configurations stays
//! theirs, as a server configuration may turn out not runnable on the way.

use napilab_core::requests::SEARCH_TOP_OF_CAPACITY;
use napilab_core::{CapacityProbe, RequestPointResult, RequestResults};

use crate::request_search::{self, RateSearchSpec, RequestTestbed};

/// What a testbed's capacity probe gave.
pub enum Capacity {
    Measured(CapacityProbe),
    /// The testbed has no probe (the twin): fractions of capacity are not run and an
    /// uncapped search starts from [`RequestBench::default_top`].
    NotAvailable,
    /// The run was stopped during the probe.
    Stopped,
}

/// A testbed that can offer a request workload to a built configuration.
pub trait RequestBench: RequestTestbed {
    /// Measures the configuration's capacity (a short closed-loop run).
    fn probe_capacity(&mut self) -> Result<Capacity, Self::Error>;
    /// Measures the sweep's points, (requests/s, repeat) in the order given (a testbed
    /// may run them side by side). Fewer than asked for: the run was stopped.
    fn measure(&mut self, points: &[(f64, u32)]) -> Result<Vec<RequestPointResult>, Self::Error>;
    /// The top of an uncapped search's range when there is no capacity probe, and
    /// where it comes from; None: such a search cannot run here.
    fn default_top(&self) -> Option<(f64, String)> {
        None
    }
    /// Added to the record's note of where the search range came from (e.g. the
    /// twin's seeds).
    fn range_note(&self) -> String {
        String::new()
    }
}

/// What to measure on a request configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    pub loads_qps: Vec<f64>,
    /// Loads as fractions of the probed capacity.
    pub loads_of_capacity: Vec<f64>,
    pub repeats: u32,
    pub search: bool,
    /// The scenario's cap on the search range, if it gives one.
    pub search_max_qps: Option<f64>,
    pub search_iterations: u32,
    pub search_repeats: u32,
    pub confidence: f64,
}

impl Plan {
    /// A plan that runs the capacity probe: it has loads relative to the capacity, or
    /// an uncapped search.
    pub fn needs_capacity(&self) -> bool {
        !self.loads_of_capacity.is_empty() || (self.search && self.search_max_qps.is_none())
    }
}

/// Why the loop stopped short of a result.
#[derive(Debug)]
pub enum Error<E> {
    /// The testbed failed.
    Testbed(E),
    /// The plan cannot run on this testbed (the message says why and what to do).
    Plan(String),
}

impl<E> From<E> for Error<E> {
    fn from(e: E) -> Self {
        Error::Testbed(e)
    }
}

/// Runs `plan` on `testbed`'s built configuration, filling `out` (its capacity, points
/// and maximum). Returns whether the run was stopped.
pub fn run<T: RequestBench>(
    testbed: &mut T,
    plan: &Plan,
    out: &mut RequestResults,
) -> Result<bool, Error<T::Error>> {
    let mut capacity = None;
    if plan.needs_capacity() {
        match testbed.probe_capacity()? {
            Capacity::Measured(probe) => {
                capacity = Some(probe.achieved_qps);
                out.capacity = Some(probe);
            }
            Capacity::NotAvailable => {}
            Capacity::Stopped => return Ok(true),
        }
    }
    let loads: Vec<f64> = plan
        .loads_qps
        .iter()
        .copied()
        .chain(capacity.into_iter().flat_map(|c| {
            plan.loads_of_capacity
                .iter()
                .map(move |f| (f * c).round().max(1.0))
        }))
        .collect();
    let sweep: Vec<(f64, u32)> = loads
        .iter()
        .flat_map(|&qps| (0..plan.repeats).map(move |r| (qps, r)))
        .collect();
    out.points = testbed.measure(&sweep)?;
    if out.points.len() < sweep.len() {
        return Ok(true);
    }
    if !plan.search {
        return Ok(false);
    }
    let spec = search_spec(plan, capacity, testbed)?;
    match request_search::max_rate(&spec, &mut out.points, testbed)? {
        Some(max) => out.max_qps = Some(max),
        None => return Ok(true),
    }
    Ok(false)
}

/// The search's range: the scenario's cap, searched below; or a range derived from the
/// capacity (or the testbed's default), raised while its top still meets the objective,
/// so that no search stops at a number that fitted one machine.
fn search_spec<T: RequestBench>(
    plan: &Plan,
    capacity: Option<f64>,
    testbed: &T,
) -> Result<RateSearchSpec, Error<T::Error>> {
    let (top, raise, source) = match (plan.search_max_qps, capacity) {
        (Some(cap), _) => (cap, false, "search_max_qps".to_string()),
        (None, Some(c)) => (
            (SEARCH_TOP_OF_CAPACITY * c).round(),
            true,
            format!("{SEARCH_TOP_OF_CAPACITY}x the capacity probe's {c:.0}"),
        ),
        (None, None) => match testbed.default_top() {
            Some((top, source)) => (top, true, source),
            None => {
                return Err(Error::Plan(
                    "a search without search_max_qps needs the capacity probe, which did not run: give search_max_qps".into(),
                ))
            }
        },
    };
    Ok(RateSearchSpec {
        top,
        raise,
        iterations: plan.search_iterations,
        repeats: plan.search_repeats.max(1),
        confidence: plan.confidence,
        range_source: format!("({source}{})", testbed.range_note()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use napilab_core::{LatencySummary, PointRole};

    /// A server that meets the objective up to `capacity` requests/s.
    struct Server {
        capacity: f64,
        probe: bool,
        asked: Vec<(f64, PointRole)>,
    }

    impl Server {
        fn point(&mut self, qps: f64, role: PointRole, repeat: u32) -> RequestPointResult {
            self.asked.push((qps, role));
            RequestPointResult {
                role,
                requested_qps: qps,
                achieved_qps: qps.min(self.capacity),
                repeat,
                meets_slo: qps <= self.capacity,
                ..Default::default()
            }
        }
    }

    impl RequestTestbed for Server {
        type Error = String;
        fn request_point(
            &mut self,
            qps: f64,
            role: PointRole,
            search: u32,
        ) -> Result<Option<RequestPointResult>, String> {
            Ok(Some(self.point(qps, role, search)))
        }
    }

    impl RequestBench for Server {
        fn probe_capacity(&mut self) -> Result<Capacity, String> {
            Ok(if self.probe {
                Capacity::Measured(CapacityProbe {
                    achieved_qps: self.capacity,
                    latency: LatencySummary::default(),
                    ..Default::default()
                })
            } else {
                Capacity::NotAvailable
            })
        }
        fn measure(&mut self, points: &[(f64, u32)]) -> Result<Vec<RequestPointResult>, String> {
            Ok(points
                .iter()
                .map(|&(q, r)| self.point(q, PointRole::Sweep, r))
                .collect())
        }
    }

    fn plan() -> Plan {
        Plan {
            loads_qps: vec![1000.0],
            loads_of_capacity: vec![0.5],
            repeats: 2,
            search: true,
            search_max_qps: None,
            search_iterations: 8,
            search_repeats: 2,
            confidence: 0.95,
        }
    }

    #[test]
    fn sweeps_fixed_and_capacity_loads_then_searches_from_the_capacity() {
        let mut s = Server {
            capacity: 40_000.0,
            probe: true,
            asked: Vec::new(),
        };
        let mut out = RequestResults::default();
        let stopped = run(&mut s, &plan(), &mut out).expect("runs");
        assert!(!stopped);
        let sweep: Vec<f64> = out
            .points
            .iter()
            .filter(|p| p.role == PointRole::Sweep)
            .map(|p| p.requested_qps)
            .collect();
        assert_eq!(sweep, [1000.0, 1000.0, 20_000.0, 20_000.0]);
        let max = out.max_qps.expect("a maximum");
        assert!(max.note.contains("capacity probe's 40000"), "{}", max.note);
        assert!((max.qps - 40_000.0).abs() < 0.05 * 40_000.0, "{}", max.qps);
    }

    #[test]
    fn without_a_probe_capacity_loads_are_skipped_and_a_search_needs_a_top() {
        let mut s = Server {
            capacity: 40_000.0,
            probe: false,
            asked: Vec::new(),
        };
        let mut out = RequestResults::default();
        match run(&mut s, &plan(), &mut out) {
            Err(Error::Plan(why)) => assert!(why.contains("search_max_qps"), "{why}"),
            other => panic!("expected a plan error, got {:?}", other.map(|_| ())),
        }
        // Only the fixed loads were measured.
        assert!(s.asked.iter().all(|(q, _)| *q == 1000.0));
    }

    #[test]
    fn a_scenario_cap_is_searched_below_and_not_raised() {
        let mut s = Server {
            capacity: 40_000.0,
            probe: true,
            asked: Vec::new(),
        };
        let mut p = plan();
        p.loads_of_capacity.clear();
        p.search_max_qps = Some(30_000.0);
        let mut out = RequestResults::default();
        run(&mut s, &p, &mut out).expect("runs");
        assert!(
            out.capacity.is_none(),
            "a capped plan without relative loads probes nothing"
        );
        assert!(s.asked.iter().all(|(q, _)| *q <= 30_000.0));
        assert!(out
            .max_qps
            .expect("a maximum")
            .note
            .contains("search_max_qps"));
    }
}
