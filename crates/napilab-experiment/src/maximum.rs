//! The maximum-throughput search of a packet workload, written once for every testbed:
//! `search_method = "mlrsearch"` runs `search_repeats` independent MLRsearches, every
//! trial kept with what the machine took away during it, and per goal the repeats'
//! conditional throughputs summarised with a confidence interval, with and without the
//! disturbed trials; `"bisection"` runs the RFC 2544 bisection from the sweep's
//! verdicts. The testbed (the lab's namespaces, the twin) only measures one trial.

use napilab_core::scenario::{DisturbedTrials, Measurement, SearchMethod};
use napilab_core::uncertainty::{mean_sd, t_interval};
use napilab_core::{
    Disturbance, GoalResult, GoalSummary, MaxThroughput, PacketCapacityProbe, PointResult,
    RangeSource, SearchRange, SearchRecord, TrialRecord,
};

use crate::bisection::{bisect, Probe};
use crate::mlrsearch::{self, Limits, Measured};

/// A trial a testbed measured for the search.
pub struct MeasuredTrial {
    pub point: PointResult,
    /// What the machine took away during the trial (the twin: nothing).
    pub disturbance: Disturbance,
    /// Seconds the trial took in all (warm-up, drain and overhead included): what the
    /// search's time limit counts. The lab's wall time; the twin's simulated window.
    pub wall_s: f64,
}

/// Where the search's trials run.
pub trait PacketTestbed {
    type Error;
    /// Offers the configuration's packet workload at `load_pps` for `duration_s` (a
    /// search trial of search `search`, 0-based). `Ok(None)`: the run was stopped.
    fn search_trial(
        &mut self,
        load_pps: f64,
        duration_s: f64,
        search: u32,
    ) -> Result<Option<MeasuredTrial>, Self::Error>;
}

/// The record's name of each method.
pub fn method_name(method: SearchMethod) -> &'static str {
    match method {
        SearchMethod::Mlrsearch => "mlrsearch",
        SearchMethod::Bisection => "rfc2544-bisection",
    }
}

/// The method a recorded maximum was searched with: its `method`, or, in a record made
/// before the lab had MLRsearch (no method), the bisection, the only search then.
pub fn recorded_method(max: &MaxThroughput) -> Option<SearchMethod> {
    match max.method.as_str() {
        "" | "rfc2544-bisection" => Some(SearchMethod::Bisection),
        "mlrsearch" => Some(SearchMethod::Mlrsearch),
        _ => None,
    }
}

/// Runs the scenario's search (`m.search_method`) on `testbed` over [0, `top`]. `known`
/// are the sweep's (load, passed) verdicts (the bisection starts from them; MLRsearch
/// has its own trials). Appends every trial's point to `points`; returns the maximum
/// and whether the run was stopped.
pub fn max_throughput<T: PacketTestbed>(
    m: &Measurement,
    top: f64,
    known: &[(f64, bool)],
    points: &mut Vec<PointResult>,
    testbed: &mut T,
) -> Result<(MaxThroughput, bool), T::Error> {
    match m.search_method {
        SearchMethod::Mlrsearch => mlrsearch(m, top, points, testbed),
        SearchMethod::Bisection => bisection(m, top, known, points, testbed),
    }
}

/// The top of a derived range as a multiple of the DUT's forwarded rate in the
/// capacity probe: the probe overloads the DUT, and an overloaded DUT can forward less
/// than its maximum at the loss threshold (receive livelock) or more (its queues were
/// still filling), so the range reaches well above it.
pub const TOP_OF_ESTIMATE: f64 = 2.0;

/// The lowest top of a derived range: a DUT that forwarded almost nothing in the probe
/// still gets a range to search.
pub const MIN_TOP_PPS: f64 = 1_000.0;

/// The highest load a search may try (the scenario's limit of `search_max_pps`).
pub const MAX_TOP_PPS: f64 = 100e6;

/// How often a search whose answer reached the top of its range doubles the range and
/// searches again before it says the last raise, not the DUT, set the answer: up to
/// 16x the first top.
pub const RANGE_RAISES: u32 = 4;

/// The range a search starts with, and how far it may be raised.
#[derive(Clone, Debug, PartialEq)]
pub struct DerivedRange {
    pub top: f64,
    pub source: RangeSource,
    pub detail: String,
    /// The highest the top may be raised to, and what sets it.
    pub ceiling: f64,
    pub ceiling_source: RangeSource,
}

/// The search range from a capacity probe: [`TOP_OF_ESTIMATE`] x what the DUT
/// forwarded (at least [`MIN_TOP_PPS`]), capped by what the generator could offer and
/// by the scenario's `search_max_pps` when it gives one.
pub fn derive_range(cap: Option<f64>, probe: &PacketCapacityProbe) -> DerivedRange {
    // A probe that measured nothing (no window) gives no estimate: the lowest top.
    let estimate = if probe.forwarded_pps.is_finite() {
        probe.forwarded_pps.max(0.0)
    } else {
        0.0
    };
    let derived = (TOP_OF_ESTIMATE * estimate).clamp(MIN_TOP_PPS, MAX_TOP_PPS);
    let mut r = DerivedRange {
        top: derived.round(),
        source: RangeSource::Probe,
        detail: format!(
            "{TOP_OF_ESTIMATE} x the {estimate:.0} pkt/s the DUT forwarded in the capacity probe ({})",
            probe.method
        ),
        ceiling: MAX_TOP_PPS,
        ceiling_source: RangeSource::Probe,
    };
    if let Some(g) = probe.generator_capacity_pps {
        r.ceiling = g.round();
        r.ceiling_source = RangeSource::GeneratorCapacity;
        if g < r.top {
            r.top = g.round();
            r.source = RangeSource::GeneratorCapacity;
            r.detail = format!(
                "the {g:.0} pkt/s the generator offered in the capacity probe ({}), below {TOP_OF_ESTIMATE} x the {estimate:.0} pkt/s the DUT forwarded",
                probe.method
            );
        }
    }
    if let Some(c) = cap {
        if c < r.ceiling {
            r.ceiling = c;
            r.ceiling_source = RangeSource::ScenarioCap;
        }
        if c < r.top {
            r.top = c;
            r.source = RangeSource::ScenarioCap;
            r.detail = format!(
                "measurement.search_max_pps = {c:.0}, below the {derived:.0} pkt/s derived from the capacity probe ({}: the DUT forwarded {estimate:.0})",
                probe.method
            );
        }
    }
    r
}

/// The width within which an answer "reached" the top of its range: the first goal's
/// (MLRsearch) or the bisection's resolution.
fn reach_width(m: &Measurement) -> f64 {
    match m.search_method {
        SearchMethod::Mlrsearch => m
            .resolved_goals()
            .first()
            .map_or(m.search_resolution, |g| g.width),
        SearchMethod::Bisection => m.search_resolution,
    }
}

/// Runs the search over the range derived from `probe` (and the scenario's cap), and
/// while its answer reaches the top of a range the caps allow to grow, doubles the
/// range and searches again ([`RANGE_RAISES`] times at most): no answer is a ceiling
/// nobody chose. The maximum's `range` says what was searched, where it came from, and
/// who set the answer when the DUT did not.
pub fn max_throughput_from_probe<T: PacketTestbed>(
    m: &Measurement,
    probe: &PacketCapacityProbe,
    known: &[(f64, bool)],
    points: &mut Vec<PointResult>,
    testbed: &mut T,
) -> Result<(MaxThroughput, bool), T::Error> {
    let range = derive_range(m.search_max_pps, probe);
    let width = reach_width(m);
    let mut top = range.top;
    let mut known: Vec<(f64, bool)> = known.to_vec();
    let mut raised_from = Vec::new();
    // Bounded: at most RANGE_RAISES + 1 searches.
    loop {
        let (mut max, stopped) = max_throughput(m, top, &known, points, testbed)?;
        let reached = max.pps >= top * (1.0 - width) || max.stopped.contains("upper_bound_passed");
        let can_raise = top < range.ceiling * (1.0 - width);
        if !stopped && reached && can_raise && (raised_from.len() as u32) < RANGE_RAISES {
            // What passed at this top still holds for the bisection.
            known.push((max.pps, true));
            raised_from.push(top);
            top = (2.0 * top).min(range.ceiling).round();
            continue;
        }
        let generator_said = max.stopped.contains("generator_limited");
        let limited_by = if reached && !can_raise {
            Some(match range.ceiling_source {
                RangeSource::GeneratorCapacity => format!(
                    "the generator, not the DUT, set this maximum: it reached the {:.0} pkt/s the generator offered in the capacity probe",
                    range.ceiling
                ),
                RangeSource::ScenarioCap => format!(
                    "the scenario's cap, not the DUT, set this maximum: it reached measurement.search_max_pps = {:.0} (leave it out to search above)",
                    range.ceiling
                ),
                RangeSource::Probe => format!(
                    "the search's limit of {MAX_TOP_PPS:.0} pkt/s, not the DUT, set this maximum"
                ),
            })
        } else if reached && !stopped {
            Some(format!(
                "the range, not the DUT, set this maximum: it reached the top after {RANGE_RAISES} raises ({top:.0} pkt/s); the DUT forwards at least this much"
            ))
        } else if generator_said {
            Some("the generator, not the DUT, set this maximum: the loads above it failed only because the generator could not offer them".to_string())
        } else {
            None
        };
        max.range = Some(SearchRange {
            min_pps: min_load(top),
            max_pps: top,
            source: if raised_from.is_empty() {
                range.source
            } else if top >= range.ceiling {
                range.ceiling_source
            } else {
                RangeSource::Probe
            },
            detail: if raised_from.is_empty() {
                range.detail
            } else {
                format!(
                    "{}; the answer reached the top, so it was doubled {} time(s) (at most to {:.0})",
                    range.detail,
                    raised_from.len(),
                    range.ceiling
                )
            },
            raised_from,
            probe: Some(probe.clone()),
            limited_by,
        });
        return Ok((max, stopped));
    }
}

/// The lowest load of a range with top `top`.
fn min_load(top: f64) -> f64 {
    (top * MIN_LOAD_SHARE).max(1.0)
}

/// A load passes when loss is within the threshold and the generator offered it
/// (at least 99% of the request).
pub fn passes(p: &PointResult, threshold: f64) -> bool {
    p.loss_ratio() <= threshold && p.offered_pps >= 0.99 * p.requested_pps
}

/// The RFC 2544 bisection (`search_method = "bisection"`), one trial per load of the
/// scenario's window.
fn bisection<T: PacketTestbed>(
    m: &Measurement,
    top: f64,
    known: &[(f64, bool)],
    all_points: &mut Vec<PointResult>,
    testbed: &mut T,
) -> Result<(MaxThroughput, bool), T::Error> {
    let first_probe = all_points.len();
    let mut probes = Vec::new();
    let mut points = Vec::new();
    let mut failure = None;
    let outcome = bisect(
        top,
        known,
        m.search_iterations,
        m.search_resolution,
        |load| match testbed.search_trial(load, m.duration_s, 0) {
            Ok(Some(t)) => {
                let ok = passes(&t.point, m.loss_threshold);
                probes.push(first_probe + points.len());
                points.push(t.point);
                if ok {
                    Probe::Pass
                } else {
                    Probe::Fail
                }
            }
            Ok(None) => Probe::Interrupted,
            Err(e) => {
                failure = Some(e);
                Probe::Interrupted
            }
        },
    );
    all_points.extend(points);
    if let Some(e) = failure {
        return Err(e);
    }
    let max = MaxThroughput {
        pps: outcome.pps,
        loss_threshold: m.loss_threshold,
        probes,
        stopped: bisection_stopped(outcome.stopped, outcome.pps, all_points, m.loss_threshold),
        method: method_name(SearchMethod::Bisection).into(),
        ..MaxThroughput::default()
    };
    Ok((max, outcome.stopped == "interrupted"))
}

/// `converged_generator_limited` when every failing point above the answer failed
/// only because the generator could not offer the load (its loss was within the
/// threshold): the answer is then the testbed's sending limit.
fn bisection_stopped(stopped: &str, answer: f64, points: &[PointResult], threshold: f64) -> String {
    let above: Vec<&PointResult> = points
        .iter()
        .filter(|p| p.requested_pps > answer && !passes(p, threshold))
        .collect();
    if stopped == "converged"
        && !above.is_empty()
        && above.iter().all(|p| p.loss_ratio() <= threshold)
    {
        "converged_generator_limited".into()
    } else {
        stopped.to_string()
    }
}

/// Lowest load a search tries, as a share of the highest.
const MIN_LOAD_SHARE: f64 = 0.001;

/// The MLRsearch repeats (`search_method = "mlrsearch"`).
fn mlrsearch<T: PacketTestbed>(
    m: &Measurement,
    top: f64,
    points: &mut Vec<PointResult>,
    testbed: &mut T,
) -> Result<(MaxThroughput, bool), T::Error> {
    let goals = m.resolved_goals();
    let limits = Limits {
        max_load: top,
        min_load: min_load(top),
        time_limit_s: m.search_time_limit_s,
        repeat_disturbed: match m.disturbed_trials {
            DisturbedTrials::Keep => None,
            DisturbedTrials::Repeat => Some(m.disturbed_retries),
        },
    };
    let mut max = MaxThroughput {
        loss_threshold: goals.first().map_or(m.loss_threshold, |g| g.loss_ratio),
        method: method_name(SearchMethod::Mlrsearch).into(),
        ..MaxThroughput::default()
    };
    let mut undisturbed: Vec<Vec<Option<f64>>> = Vec::new();
    let mut stopped = false;
    for search in 0..m.search_repeats {
        let first_trial = max.trials.len();
        let mut failure = None;
        let outcome = mlrsearch::search(&goals, &limits, |load, duration_s| {
            match testbed.search_trial(load, duration_s, search) {
                Ok(Some(t)) => {
                    // Whether a shortfall was a stall is the testbed's to say (it knows
                    // whether the generator's CPU is its own).
                    let generator_short = t.point.generator_short();
                    // A load the generator could not offer says nothing about the DUT
                    // there: it counts against the load, as loss.
                    let loss_ratio = if generator_short {
                        1.0
                    } else {
                        t.point.loss_ratio()
                    };
                    let disturbed = t.disturbance.disturbed;
                    let forwarded_pps = t.point.delivered_pps();
                    max.probes.push(points.len());
                    max.trials.push(TrialRecord {
                        point: points.len(),
                        search,
                        load_pps: load,
                        duration_s,
                        loss_ratio,
                        generator_short,
                        disturbance: t.disturbance,
                    });
                    points.push(t.point);
                    Measured::Trial {
                        loss_ratio,
                        disturbed,
                        wall_s: t.wall_s,
                        forwarded_pps,
                    }
                }
                Ok(None) => Measured::Interrupted,
                Err(e) => {
                    failure = Some(e);
                    Measured::Interrupted
                }
            }
        });
        if let Some(e) = failure {
            return Err(e);
        }
        let again = outcome.without_disturbed(&goals, &limits);
        undisturbed.push(again.iter().map(|g| g.conditional_throughput).collect());
        max.searches.push(SearchRecord {
            search,
            goals: goals
                .iter()
                .zip(outcome.goals.iter().zip(&again))
                .map(|(g, (o, u))| GoalResult {
                    goal: g.name.clone(),
                    relevant_lower_bound: o.relevant_lower_bound,
                    relevant_upper_bound: o.relevant_upper_bound,
                    conditional_throughput: o.conditional_throughput,
                    stopped: refine_stopped(o, &max.trials[first_trial..]),
                    supporting_trials: o.supporting.iter().map(|i| first_trial + i).collect(),
                    undisturbed_conditional_throughput: u.conditional_throughput,
                })
                .collect(),
        });
        if outcome.goals.iter().any(|g| g.stopped == "interrupted") {
            stopped = true;
            break;
        }
    }
    max.goals = goals
        .iter()
        .enumerate()
        .map(|(gi, g)| {
            let values: Vec<f64> = max
                .searches
                .iter()
                .filter_map(|s| s.goals[gi].conditional_throughput)
                .collect();
            let undisturbed_values: Vec<f64> = undisturbed.iter().filter_map(|u| u[gi]).collect();
            GoalSummary {
                goal: g.clone(),
                mean: mean_sd(&values).map(|(m, _)| m),
                interval: t_interval(&values, m.confidence_level),
                undisturbed_mean: mean_sd(&undisturbed_values).map(|(m, _)| m),
                values,
                undisturbed_values,
                trials: max.trials.len(),
                disturbed_trials: max
                    .trials
                    .iter()
                    .filter(|t| t.disturbance.disturbed)
                    .count(),
            }
        })
        .collect();
    max.pps = max.goals.first().and_then(|g| g.mean).unwrap_or(0.0);
    let mut reasons: Vec<String> = max
        .searches
        .iter()
        .filter_map(|s| s.goals.first().map(|g| g.stopped.clone()))
        .collect();
    reasons.dedup();
    max.stopped = reasons.join("+");
    Ok((max, stopped))
}

/// `converged_generator_limited` when every trial at the relevant upper bound failed
/// only because the generator could not offer the load: the answer is then the
/// testbed's sending limit, a lower bound of the DUT's maximum.
fn refine_stopped(o: &mlrsearch::GoalOutcome, trials: &[TrialRecord]) -> String {
    let at_upper: Vec<&TrialRecord> = o
        .relevant_upper_bound
        .map(|u| trials.iter().filter(|t| t.load_pps == u).collect())
        .unwrap_or_default();
    if o.stopped == "converged"
        && !at_upper.is_empty()
        && at_upper.iter().all(|t| t.generator_short)
    {
        "converged_generator_limited".into()
    } else {
        o.stopped.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use napilab_core::PointRole;

    /// A testbed whose DUT forwards up to `capacity` pps and loses the rest.
    struct Dut {
        capacity: f64,
        trials: u32,
    }

    impl PacketTestbed for Dut {
        type Error = String;

        fn search_trial(
            &mut self,
            load_pps: f64,
            duration_s: f64,
            search: u32,
        ) -> Result<Option<MeasuredTrial>, String> {
            self.trials += 1;
            let sent = (load_pps * duration_s).round() as u64;
            let received = (load_pps.min(self.capacity) * duration_s).round() as u64;
            Ok(Some(MeasuredTrial {
                point: point(load_pps, duration_s, search, sent, received),
                disturbance: Disturbance::default(),
                wall_s: duration_s,
            }))
        }
    }

    fn point(load_pps: f64, duration_s: f64, repeat: u32, sent: u64, received: u64) -> PointResult {
        let mut p = napilab_testkit::synthetic_point(
            PointRole::Search,
            load_pps,
            load_pps,
            duration_s,
            sent,
            received,
        );
        p.repeat = repeat;
        p
    }

    fn measurement(method: SearchMethod) -> Measurement {
        Measurement {
            search: true,
            search_method: method,
            search_max_pps: None,
            search_repeats: 2,
            search_iterations: 12,
            search_resolution: 0.02,
            loss_threshold: 0.005,
            duration_s: 1.0,
            ..Measurement::default()
        }
    }

    #[test]
    fn both_methods_find_the_capacity_and_say_which_they_are() {
        for method in [SearchMethod::Mlrsearch, SearchMethod::Bisection] {
            let m = measurement(method);
            let mut dut = Dut {
                capacity: 700_000.0,
                trials: 0,
            };
            let mut points = vec![point(1.0, 1.0, 0, 1, 1)];
            let (max, stopped) =
                max_throughput(&m, 2e6, &[], &mut points, &mut dut).expect("no testbed error");
            assert!(!stopped);
            assert_eq!(max.method, method_name(method));
            assert!(
                max.pps <= 700_000.0 * 1.006 && max.pps >= 700_000.0 * 0.95,
                "{method:?}: {}",
                max.pps
            );
            // Every trial's point was appended after what the caller had, and the
            // probes index them.
            assert_eq!(points.len() as u32, 1 + dut.trials);
            assert!(max.probes.iter().all(|i| *i >= 1 && *i < points.len()));
            assert_eq!(recorded_method(&max), Some(method));
            if method == SearchMethod::Mlrsearch {
                assert_eq!(max.searches.len(), 2);
                assert!(max
                    .trials
                    .iter()
                    .all(|t| points[t.point].repeat == t.search));
            }
        }
    }

    #[test]
    fn a_record_without_a_method_was_a_bisection() {
        let old = MaxThroughput::default();
        assert_eq!(recorded_method(&old), Some(SearchMethod::Bisection));
    }
}
