//! One maximum-rate search of a request workload: the highest offered rate whose
//! point meets the latency objective, by the packet search's bisection (search.rs)
//! from 0 to the top of the range.
//! A range derived from the capacity probe is first raised (doubled while its top still
//! meets the objective, [`SEARCH_RAISES`] times at most), so the answer is never a
//! number that fitted another machine; a cap the scenario gives is searched below.
//! Kept apart from the runner so the algorithm is tested without namespaces.

use napilab_core::requests::SEARCH_RAISES;

use crate::search::{bisect, Probe};

/// What one measured point says to the search.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Trial {
    pub meets_slo: bool,
    /// The client could not keep its schedule (then a failure is the client's).
    pub client_limited: bool,
    /// Busy CPU per reply, microseconds, when observed.
    pub cpu_per_request_us: Option<f64>,
}

#[derive(Clone, Debug, PartialEq)]
pub(crate) struct SearchResult {
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
pub(crate) fn search(
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
    // The bisection is the packet search's (search.rs), between what is known: the
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
}
