//! One maximum-rate search of a request workload: the highest offered rate whose
//! point meets the latency objective, by the packet search's bisection (bisection.rs)
//! from 0 to the top of the range.
//! A range derived from the capacity probe is first raised (doubled while its top still
//! meets the objective, [`SEARCH_RAISES`] times at most), so the answer is never a
//! number that fitted another machine; a cap the scenario gives is searched below.
//! [`max_rate`] runs the scenario's repeats of it on a [`RequestTestbed`] (the lab's
//! server topology, the twin) and summarises them the same way for both.

use napilab_core::requests::SEARCH_RAISES;
use napilab_core::uncertainty::t_interval;
use napilab_core::{MaxQpsAtSlo, PointRole, RequestPointResult};

use crate::bisection::{bisect, Probe};

/// What one measured point says to the search.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Trial {
    pub meets_slo: bool,
    /// The client could not keep its schedule (then a failure is the client's).
    pub client_limited: bool,
    /// Busy CPU per reply, microseconds, when observed.
    pub cpu_per_request_us: Option<f64>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct SearchResult {
    /// The highest rate that met the objective (0 when none did).
    pub answer: f64,
    pub answer_cpu_us: Option<f64>,
    /// The lowest rate that missed it (the range's top when none did).
    pub failed_at: f64,
    /// The point at `failed_at` missed because the client could not keep up.
    pub failure_was_client: bool,
    /// Some point missed the objective (none did: the server met it up to the top).
    pub missed_any: bool,
    /// A raised range still met the objective at its last top: the answer is a lower
    /// bound.
    pub top_met: bool,
    /// The top the range reached.
    pub top: f64,
}

/// Searches from 0 to `top`; `raise`: the range came from the capacity probe and may be
/// raised. `measure` runs one point at a rate; None when the run was stopped (then the
/// search returns None).
pub fn search(
    top: f64,
    raise: bool,
    iterations: u32,
    mut measure: impl FnMut(f64) -> Option<Trial>,
) -> Option<SearchResult> {
    let mut r = SearchResult {
        answer: 0.0,
        answer_cpu_us: None,
        failed_at: top,
        failure_was_client: false,
        missed_any: false,
        top_met: false,
        top,
    };
    if raise {
        let mut raises = 0;
        loop {
            let t = measure(r.failed_at)?;
            if !t.meets_slo {
                r.failure_was_client = t.client_limited;
                r.missed_any = true;
                break;
            }
            (r.answer, r.answer_cpu_us) = (r.failed_at, t.cpu_per_request_us);
            if raises == SEARCH_RAISES {
                r.top_met = true;
                return Some(r);
            }
            r.failed_at *= 2.0;
            r.top = r.failed_at;
            raises += 1;
        }
    }
    // The bisection is the packet search's (bisection.rs), between what is known: the
    // answer so far passed, the lowest failure (or the cap, never measured) did not.
    let mut trials: Vec<(f64, Trial)> = Vec::new();
    let outcome = bisect(
        r.failed_at,
        &[(r.answer, true), (r.failed_at, false)],
        iterations,
        0.0,
        |rate| match measure(rate) {
            Some(t) => {
                trials.push((rate, t));
                // A point the client could not offer on schedule never meets the
                // objective: the answer stays below it, and the caller says the bound
                // above the answer may be the client's, not the server's.
                if t.meets_slo {
                    Probe::Pass
                } else {
                    Probe::Fail
                }
            }
            None => Probe::Interrupted,
        },
    );
    if outcome.stopped == "interrupted" {
        return None;
    }
    for (rate, t) in trials {
        if t.meets_slo && rate >= r.answer {
            (r.answer, r.answer_cpu_us) = (rate, t.cpu_per_request_us);
        } else if !t.meets_slo && rate <= r.failed_at {
            r.failed_at = rate;
            r.failure_was_client = t.client_limited;
            r.missed_any = true;
        }
    }
    Some(r)
}

/// Where the maximum-rate search's points run.
pub trait RequestTestbed {
    type Error;
    /// Offers the request workload at `qps` for the scenario's window, as a point of
    /// search `search` (0-based). `Ok(None)`: the run was stopped.
    fn request_point(
        &mut self,
        qps: f64,
        role: PointRole,
        search: u32,
    ) -> Result<Option<RequestPointResult>, Self::Error>;
}

/// The range and repeats of the maximum-rate searches.
#[derive(Clone, Debug, PartialEq)]
pub struct RateSearchSpec {
    /// The top of the range.
    pub top: f64,
    /// The range was derived (from a capacity probe, or the twin's default) and is
    /// raised while its top meets the objective; false: `top` is the scenario's cap.
    pub raise: bool,
    pub iterations: u32,
    pub repeats: u32,
    pub confidence: f64,
    /// Where the range came from, for the record's note (e.g. "(search_max_qps)").
    pub range_source: String,
}

/// Runs `spec.repeats` searches on `testbed`, appending every point to `points`;
/// returns their summary, or `None` when the run was stopped.
pub fn max_rate<T: RequestTestbed>(
    spec: &RateSearchSpec,
    points: &mut Vec<RequestPointResult>,
    testbed: &mut T,
) -> Result<Option<MaxQpsAtSlo>, T::Error> {
    let mut failed: Option<T::Error> = None;
    let mut answers = Vec::new();
    let mut notes = Vec::new();
    let mut best_cpu: Option<(f64, Option<f64>)> = None;
    let mut raised_to = spec.top;
    for search_index in 0..spec.repeats {
        let measured = search(spec.top, spec.raise, spec.iterations, |qps| {
            let p = match testbed.request_point(qps, PointRole::Search, search_index) {
                Ok(Some(p)) => p,
                Ok(None) => return None,
                Err(e) => {
                    failed = Some(e);
                    return None;
                }
            };
            let trial = Trial {
                meets_slo: p.meets_slo,
                client_limited: p.client_limited,
                cpu_per_request_us: p.cpu_per_request_us,
            };
            points.push(p);
            Some(trial)
        });
        if let Some(e) = failed.take() {
            return Err(e);
        }
        let Some(r) = measured else {
            return Ok(None);
        };
        raised_to = raised_to.max(r.top);
        let n = search_index + 1;
        if r.failure_was_client {
            notes.push(format!(
                "search {n}: the client could not keep its schedule at {:.0} requests/s, the failure above the answer: the answer is a lower bound",
                r.failed_at
            ));
        }
        if r.top_met {
            notes.push(format!(
                "search {n}: met the objective at {:.0} requests/s, the top of a range raised {SEARCH_RAISES} times: the answer is a lower bound",
                r.answer
            ));
        } else if !spec.raise && !r.missed_any {
            notes.push(format!(
                "search {n}: met the objective up to search_max_qps ({:.0}): raise it, or leave it out to search from the measured capacity",
                spec.top
            ));
        }
        answers.push(r.answer);
        if best_cpu.is_none_or(|(q, _)| r.answer > q) {
            best_cpu = Some((r.answer, r.answer_cpu_us));
        }
    }
    if let Some(note) = missed_below_the_answers(points, &answers) {
        notes.push(note);
    }
    let qps = answers.iter().sum::<f64>() / answers.len().max(1) as f64;
    let interval = t_interval(&answers, spec.confidence).map(|ci| (ci.low.max(0.0), ci.high));
    let raised = if raised_to > spec.top {
        format!("; raised to {raised_to:.0} where its top met the objective")
    } else {
        String::new()
    };
    Ok(Some(MaxQpsAtSlo {
        qps,
        searches: answers,
        interval,
        confidence: spec.confidence,
        cpu_per_request_us: best_cpu.and_then(|(_, c)| c),
        note: if notes.is_empty() {
            format!(
                "bisection on the offered rate, {} steps from 0 to {:.0} requests/s {}{raised}, {} searches",
                spec.iterations, spec.top, spec.range_source, spec.repeats
            )
        } else {
            notes.join("; ")
        },
    }))
}

/// The points (sweep or search) that missed the objective, with the client keeping its
/// schedule, at a rate below every positive answer: then the server fails at low rates
/// and passes at high ones (a busy-waiting server whose empty busy loops make epoll
/// forget its NAPI id, docs/kernel.md "Busy polling"), and a bisection's answer is the
/// top of a passing range, not a rate below which every rate passes.
fn missed_below_the_answers(points: &[RequestPointResult], answers: &[f64]) -> Option<String> {
    let lowest = answers
        .iter()
        .copied()
        .filter(|&a| a > 0.0)
        .min_by(f64::total_cmp)?;
    let missed: Vec<f64> = points
        .iter()
        .filter(|p| !p.meets_slo && !p.client_limited && p.requested_qps < lowest)
        .map(|p| p.requested_qps)
        .collect();
    let low = missed.iter().copied().min_by(f64::total_cmp)?;
    let high = missed.iter().copied().max_by(f64::total_cmp)?;
    let at = if low == high {
        format!("{low:.0}")
    } else {
        format!("{low:.0}-{high:.0}")
    };
    let noun = if missed.len() == 1 { "point" } else { "points" };
    Some(format!(
        "{} {noun} at {at} requests/s missed the objective below the lowest answer ({lowest:.0}) with the client on schedule: the maximum is the top of a passing range, and lower rates can fail",
        missed.len()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A server that meets the objective up to `capacity` requests/s.
    fn server(capacity: f64) -> impl FnMut(f64) -> Option<Trial> {
        move |rate| {
            Some(Trial {
                meets_slo: rate <= capacity,
                client_limited: false,
                cpu_per_request_us: Some(10.0),
            })
        }
    }

    #[test]
    fn a_derived_range_is_raised_until_its_top_fails() {
        // The probe said 10,000, the range's top is 15,000, the server does 50,000.
        let r = search(15_000.0, true, 8, server(50_000.0)).expect("not stopped");
        assert_eq!(r.top, 60_000.0);
        assert!(!r.top_met && r.missed_any);
        assert!(r.answer <= 50_000.0 && r.answer > 50_000.0 * 0.97, "{r:?}");
    }

    #[test]
    fn a_cap_is_not_raised() {
        let mut rates = Vec::new();
        let r = search(4_000.0, false, 3, |rate| {
            rates.push(rate);
            server(50_000.0)(rate)
        })
        .expect("not stopped");
        assert_eq!(rates, [2_000.0, 3_000.0, 3_500.0]);
        assert_eq!((r.answer, r.failed_at, r.top), (3_500.0, 4_000.0, 4_000.0));
        assert!(!r.missed_any, "the server met the objective up to the cap");
    }

    #[test]
    fn a_server_beyond_every_raise_is_a_lower_bound() {
        let r = search(1_000.0, true, 8, server(1e9)).expect("not stopped");
        assert!(r.top_met && !r.missed_any);
        assert_eq!(r.answer, 1_000.0 * f64::from(1u32 << SEARCH_RAISES));
    }

    #[test]
    fn the_failure_above_the_answer_says_whose_it_was() {
        let r = search(10_000.0, false, 4, |rate| {
            Some(Trial {
                meets_slo: rate < 6_000.0,
                client_limited: rate >= 6_000.0,
                cpu_per_request_us: None,
            })
        })
        .expect("not stopped");
        assert!(r.failure_was_client, "{r:?}");
        assert!(r.answer < 6_000.0 && r.failed_at >= 6_000.0, "{r:?}");
    }

    #[test]
    fn a_stopped_run_ends_the_search() {
        let mut n = 0;
        assert!(search(10_000.0, true, 6, |_| {
            n += 1;
            (n < 3).then_some(Trial {
                meets_slo: true,
                client_limited: false,
                cpu_per_request_us: None,
            })
        })
        .is_none());
    }

    /// A testbed whose server meets the objective up to `capacity`, and not below
    /// `fails_below`.
    struct Server {
        capacity: f64,
        fails_below: f64,
        stop_after: usize,
        points: usize,
    }

    impl RequestTestbed for Server {
        type Error = String;

        fn request_point(
            &mut self,
            qps: f64,
            role: PointRole,
            search: u32,
        ) -> Result<Option<RequestPointResult>, String> {
            self.points += 1;
            if self.points > self.stop_after {
                return Ok(None);
            }
            Ok(Some(RequestPointResult {
                role,
                repeat: search,
                requested_qps: qps,
                meets_slo: qps <= self.capacity && qps >= self.fails_below,
                ..Default::default()
            }))
        }
    }

    #[test]
    fn repeats_are_summarised_with_their_interval_and_points() {
        let spec = RateSearchSpec {
            top: 15_000.0,
            raise: true,
            iterations: 8,
            repeats: 3,
            confidence: 0.95,
            range_source: "(1.5x the capacity probe's 10000)".into(),
        };
        let mut testbed = Server {
            capacity: 50_000.0,
            fails_below: 0.0,
            stop_after: usize::MAX,
            points: 0,
        };
        let mut points = Vec::new();
        let m = max_rate(&spec, &mut points, &mut testbed)
            .expect("no error")
            .expect("not stopped");
        assert_eq!(m.searches.len(), 3);
        assert!(m.qps <= 50_000.0 && m.qps > 0.97 * 50_000.0, "{m:?}");
        assert_eq!(points.len(), testbed.points);
        assert!(points.iter().all(|p| p.role == PointRole::Search));
        assert_eq!(points.last().map(|p| p.repeat), Some(2));
        assert!(m.note.contains("raised to 60000"), "{}", m.note);
        assert!(!m.note.contains("lower rates can fail"), "{}", m.note);
        testbed = Server {
            capacity: 50_000.0,
            fails_below: 0.0,
            stop_after: 4,
            points: 0,
        };
        let stopped = max_rate(&spec, &mut Vec::new(), &mut testbed).expect("no error");
        assert!(stopped.is_none());
    }

    #[test]
    fn a_server_that_fails_at_low_rates_is_said_to() {
        // Meets the objective from 5,000 to 50,000 requests/s; the sweep's 2,000 missed.
        let spec = RateSearchSpec {
            top: 60_000.0,
            raise: false,
            iterations: 6,
            repeats: 2,
            confidence: 0.95,
            range_source: "(search_max_qps)".into(),
        };
        let mut testbed = Server {
            capacity: 50_000.0,
            fails_below: 5_000.0,
            stop_after: usize::MAX,
            points: 0,
        };
        let mut points = vec![testbed
            .request_point(2_000.0, PointRole::Sweep, 0)
            .expect("no error")
            .expect("a point")];
        let m = max_rate(&spec, &mut points, &mut testbed)
            .expect("no error")
            .expect("not stopped");
        assert!(m.qps > 45_000.0, "{m:?}");
        assert!(
            m.note.contains(
                "1 point at 2000 requests/s missed the objective below the lowest answer"
            ),
            "{}",
            m.note
        );
    }
}
