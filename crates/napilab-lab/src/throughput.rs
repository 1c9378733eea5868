//! The maximum-throughput search as the runner drives it: `search_repeats` independent
//! MLRsearches per configuration, every trial kept with what the machine took away
//! during it, and per goal the repeats' conditional throughputs summarised with a
//! confidence interval, with and without the disturbed trials.

use anyhow::Result;
use napilab_core::scenario::{DisturbedTrials, Measurement};
use napilab_core::uncertainty::{mean_sd, t_interval};
use napilab_core::{
    Disturbance, GoalResult, GoalSummary, MaxThroughput, PointResult, SearchRecord, TrialRecord,
};

use crate::mlrsearch::{self, Limits, Measured};

/// A trial the runner measured.
pub struct MeasuredTrial {
    pub point: PointResult,
    pub disturbance: Disturbance,
}

/// A generator that fell short of a load below this share of the highest rate it
/// has offered was stalled.
const STALL_SHARE: f64 = 0.9;

/// Lowest load a search tries, as a share of the highest.
const MIN_LOAD_SHARE: f64 = 0.001;

/// Runs the searches. `measure(load, duration_s, search)` measures one trial (None:
/// the run was stopped). Appends every trial's point to `points`; returns the result
/// and whether the run was stopped.
pub fn mlrsearch(
    m: &Measurement,
    points: &mut Vec<PointResult>,
    mut measure: impl FnMut(f64, f64, u32) -> Result<Option<MeasuredTrial>>,
) -> Result<(MaxThroughput, bool)> {
    let goals = m.resolved_goals();
    let limits = Limits {
        max_load: m.search_max_pps,
        min_load: (m.search_max_pps * MIN_LOAD_SHARE).max(1.0),
        time_limit_s: m.search_time_limit_s,
        repeat_disturbed: match m.disturbed_trials {
            DisturbedTrials::Keep => None,
            DisturbedTrials::Repeat => Some(m.disturbed_retries),
        },
    };
    let mut max = MaxThroughput {
        loss_threshold: goals.first().map_or(m.loss_threshold, |g| g.loss_ratio),
        method: "mlrsearch".into(),
        ..MaxThroughput::default()
    };
    let mut undisturbed: Vec<Vec<Option<f64>>> = Vec::new();
    let mut stopped = false;
    // The highest rate the generator has offered in this configuration: falling short
    // of a load well below it is a stall of the generator's CPU, not its speed limit.
    let mut generator_reached: f64 = 0.0;
    for search in 0..m.search_repeats {
        let first_trial = max.trials.len();
        let mut failure = None;
        let outcome = mlrsearch::search(&goals, &limits, |load, duration_s| {
            let started = std::time::Instant::now();
            match measure(load, duration_s, search) {
                Ok(Some(mut t)) => {
                    let generator_short = t.point.offered_pps < 0.99 * t.point.requested_pps;
                    if generator_short
                        && t.point.requested_pps < STALL_SHARE * generator_reached
                        && !t.disturbance.disturbed
                    {
                        t.disturbance.reasons.push(format!(
                            "generator offered {:.0} of {:.0} pkt/s although it reached {:.0} before: stalled",
                            t.point.offered_pps, t.point.requested_pps, generator_reached
                        ));
                        t.disturbance.disturbed = true;
                    }
                    generator_reached = generator_reached.max(t.point.offered_pps);
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
                        wall_s: started.elapsed().as_secs_f64(),
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
