//! The maximum-throughput search after MLRsearch (draft-ietf-bmwg-mlrsearch-11):
//! several goals in one pass over one database of trials, short trials first, final
//! trials only where they decide, and a goal exceed ratio so that a few bad trials do
//! not decide a load. docs/lab.md ("The maximum-throughput search") says which parts of
//! the draft are implemented.
//!
//! The load classification and the conditional throughput follow the draft's
//! appendices A and B exactly. The controller (which load and duration to try next)
//! is the implementation's freedom in the draft; this one is a bisection in phases:
//! each goal is searched with trial durations doubling from its initial to its final
//! duration, each phase with its own (wider) width, a phase's bounds being where the
//! next phase starts.
//!
//! Pure logic: the caller measures. The tests drive it with a simulated DUT that loses
//! bursts at random.

use napilab_core::scenario::ResolvedGoal;

/// One measured trial.
#[derive(Clone, Debug, PartialEq)]
pub struct Trial {
    pub load: f64,
    pub duration_s: f64,
    pub loss_ratio: f64,
    /// Packets per second the DUT delivered: where the search looks below a failed
    /// load (a load the generator could not offer has loss ratio 1 for the
    /// classification, but its delivered rate still says where the DUT stands).
    pub forwarded_pps: f64,
    /// Left out of the classification (a disturbed trial the policy repeats).
    pub excluded: bool,
}

/// What a load is for a goal (draft appendix A).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    Lower,
    Upper,
    Undecided,
}

/// The four duration sums of the trials at one load, for one goal.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Sums {
    full_low: f64,
    full_high: f64,
    short_low: f64,
    short_high: f64,
}

fn sums<'a>(goal: &ResolvedGoal, trials: impl Iterator<Item = &'a Trial>) -> Sums {
    let mut s = Sums::default();
    for t in trials {
        let high = t.loss_ratio > goal.loss_ratio;
        // A small tolerance: a trial "of 2 s" that the generator measured as
        // 1.9999 s is full length.
        let full = t.duration_s >= goal.final_trial_s * 0.999;
        match (full, high) {
            (true, true) => s.full_high += t.duration_s,
            (true, false) => s.full_low += t.duration_s,
            (false, true) => s.short_high += t.duration_s,
            (false, false) => s.short_low += t.duration_s,
        }
    }
    s
}

/// Classifies a load from its trials (draft appendix A).
pub fn classify<'a>(goal: &ResolvedGoal, trials: impl Iterator<Item = &'a Trial>) -> Class {
    let s = sums(goal, trials);
    let er = goal.exceed_ratio;
    let exceed_coefficient = er / (1.0 - er);
    let balancing = s.short_low * exceed_coefficient;
    let positive_excess = (s.short_high - balancing).max(0.0);
    let effect_high = s.full_high + positive_excess;
    let effect_full = s.full_low + effect_high;
    let effect_whole = effect_full.max(goal.duration_sum_s);
    let quantile = effect_whole * er;
    let pessimistic_high = effect_whole - s.full_low;
    let pessimistic_is_lower = pessimistic_high <= quantile;
    let optimistic_is_lower = effect_high <= quantile;
    match (optimistic_is_lower, pessimistic_is_lower) {
        (true, true) => Class::Lower,
        (false, false) => Class::Upper,
        _ => Class::Undecided,
    }
}

/// The conditional throughput at a load (draft appendix B): the load times one minus
/// the loss ratio at the goal's exceed-ratio quantile of the full-length trials. None
/// without full-length trials.
pub fn conditional_throughput<'a>(
    goal: &ResolvedGoal,
    load: f64,
    trials: impl Iterator<Item = &'a Trial> + Clone,
) -> Option<f64> {
    let s = sums(goal, trials.clone());
    let mut full: Vec<&Trial> = trials
        .filter(|t| t.duration_s >= goal.final_trial_s * 0.999)
        .collect();
    if full.is_empty() {
        return None;
    }
    full.sort_by(|a, b| a.loss_ratio.total_cmp(&b.loss_ratio));
    let whole = goal.duration_sum_s.max(s.full_low + s.full_high);
    let mut remaining = whole * (1.0 - goal.exceed_ratio);
    let mut quantile_loss: Option<f64> = None;
    for t in &full {
        if quantile_loss.is_none() || remaining > 0.0 {
            quantile_loss = Some(t.loss_ratio);
            remaining -= t.duration_s;
        } else {
            break;
        }
    }
    if remaining > 0.0 {
        quantile_loss = Some(1.0);
    }
    quantile_loss.map(|q| load * (1.0 - q))
}

/// What the caller's measurement gave.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Measured {
    Trial {
        loss_ratio: f64,
        /// The machine disturbed this trial (docs/lab.md "Disturbed trials").
        disturbed: bool,
        /// Seconds the trial took in all (warm-up, drain and overhead included):
        /// what the search's time limit counts.
        wall_s: f64,
        /// Packets per second delivered (NaN: unknown, the load times one minus the
        /// loss ratio is assumed).
        forwarded_pps: f64,
    },
    Interrupted,
}

/// The search's limits.
#[derive(Clone, Debug, PartialEq)]
pub struct Limits {
    /// Highest load tried.
    pub max_load: f64,
    /// Lowest load tried (a goal whose lower bound would be below it stops there).
    pub min_load: f64,
    /// Most seconds the trials may take in all (their wall time, overhead included).
    pub time_limit_s: f64,
    /// Repeat a disturbed trial (leaving it out) at most this often per load and
    /// duration; None keeps disturbed trials.
    pub repeat_disturbed: Option<u32>,
}

/// A goal's answer.
#[derive(Clone, Debug, PartialEq)]
pub struct GoalOutcome {
    pub relevant_lower_bound: Option<f64>,
    pub relevant_upper_bound: Option<f64>,
    pub conditional_throughput: Option<f64>,
    /// Indexes into the trials of the full-length trials at the relevant lower bound.
    pub supporting: Vec<usize>,
    /// `converged`, `upper_bound_passed`, `no_lower_bound` (the lowest load failed),
    /// `time_limit`, `interrupted`.
    pub stopped: &'static str,
}

/// The whole search: every trial in order and each goal's answer.
#[derive(Clone, Debug, PartialEq)]
pub struct Outcome {
    pub trials: Vec<Trial>,
    /// Per trial, whether the caller said it was disturbed.
    pub disturbed: Vec<bool>,
    pub goals: Vec<GoalOutcome>,
}

impl Outcome {
    /// The goals classified again over the same trials without the disturbed ones
    /// (those kept as well as those already left out).
    pub fn without_disturbed(&self, goals: &[ResolvedGoal], limits: &Limits) -> Vec<GoalOutcome> {
        let trials: Vec<Trial> = self
            .trials
            .iter()
            .zip(&self.disturbed)
            .map(|(t, d)| Trial {
                excluded: t.excluded || *d,
                ..t.clone()
            })
            .collect();
        goals
            .iter()
            .zip(&self.goals)
            .map(|(g, o)| answer(g, &trials, limits, o.stopped))
            .collect()
    }
}

/// The loads tried, with their class for `goal`, in increasing order.
fn classified(goal: &ResolvedGoal, trials: &[Trial]) -> Vec<(f64, Class)> {
    let mut loads: Vec<f64> = trials.iter().map(|t| t.load).collect();
    loads.sort_by(f64::total_cmp);
    loads.dedup();
    loads
        .into_iter()
        .map(|l| {
            (
                l,
                classify(goal, trials.iter().filter(|t| t.load == l && !t.excluded)),
            )
        })
        .collect()
}

/// Relevant upper bound: the lowest upper bound. Relevant lower bound: the highest
/// lower bound below it.
fn bounds(classes: &[(f64, Class)]) -> (Option<f64>, Option<f64>) {
    let ub = classes
        .iter()
        .find(|(_, c)| *c == Class::Upper)
        .map(|(l, _)| *l);
    let lb = classes
        .iter()
        .filter(|(l, c)| *c == Class::Lower && ub.is_none_or(|u| *l < u))
        .map(|(l, _)| *l)
        .next_back();
    (lb, ub)
}

fn answer(
    goal: &ResolvedGoal,
    trials: &[Trial],
    limits: &Limits,
    stopped: &'static str,
) -> GoalOutcome {
    let classes = classified(goal, trials);
    let (lb, ub) = bounds(&classes);
    let at_lb = |l: f64| {
        trials
            .iter()
            .enumerate()
            .filter(move |(_, t)| t.load == l && !t.excluded)
    };
    let conditional = lb.and_then(|l| conditional_throughput(goal, l, at_lb(l).map(|(_, t)| t)));
    let supporting = lb.map_or_else(Vec::new, |l| {
        at_lb(l)
            .filter(|(_, t)| t.duration_s >= goal.final_trial_s * 0.999)
            .map(|(i, _)| i)
            .collect()
    });
    let stopped = if stopped == "converged" && ub.is_none() && lb == Some(limits.max_load) {
        "upper_bound_passed"
    } else {
        stopped
    };
    GoalOutcome {
        relevant_lower_bound: lb,
        relevant_upper_bound: ub,
        conditional_throughput: conditional,
        supporting,
        stopped,
    }
}

/// A phase of a goal's search: its trial duration and width, and the goal it
/// classifies with (the real goal in the last phase).
fn phases(goal: &ResolvedGoal) -> Vec<ResolvedGoal> {
    let mut durations = vec![goal.initial_trial_s.min(goal.final_trial_s)];
    while let Some(&d) = durations.last() {
        if d >= goal.final_trial_s * 0.999 {
            break;
        }
        durations.push((d * 2.0).min(goal.final_trial_s));
    }
    let n = durations.len();
    durations
        .iter()
        .enumerate()
        .map(|(k, &d)| {
            if k + 1 == n {
                goal.clone()
            } else {
                // One trial of the phase's duration decides a load; the width doubles
                // for each phase before the last.
                ResolvedGoal {
                    name: format!("{} phase {k}", goal.name),
                    final_trial_s: d,
                    duration_sum_s: d,
                    initial_trial_s: d,
                    width: (goal.width * f64::powi(2.0, (n - 1 - k) as i32)).min(0.5),
                    ..goal.clone()
                }
            }
        })
        .collect()
}

/// The next load a phase needs measured, or why it is done.
enum Step {
    Measure(f64),
    Done(&'static str),
}

fn next_step(phase: &ResolvedGoal, trials: &[Trial], limits: &Limits) -> Step {
    let classes = classified(phase, trials);
    let class_of = |load: f64| classes.iter().find(|(l, _)| *l == load).map(|(_, c)| *c);
    let (lb, ub) = bounds(&classes);
    let Some(ub) = ub else {
        return match class_of(limits.max_load) {
            Some(Class::Lower) => Step::Done("converged"),
            _ => Step::Measure(limits.max_load),
        };
    };
    // An undecided load between the bounds needs more trials before anything else.
    let lo = lb.unwrap_or(f64::NEG_INFINITY);
    if let Some((l, _)) = classes
        .iter()
        .find(|(l, c)| *c == Class::Undecided && *l > lo && *l < ub)
    {
        return Step::Measure(*l);
    }
    let Some(lb) = lb else {
        if ub <= limits.min_load {
            return Step::Done("no_lower_bound");
        }
        // Below the upper bound: what the DUT forwarded there (the draft's "MRR"
        // start, as FD.io CSIT does), at least one width below it.
        let forwarded = trials
            .iter()
            .filter(|t| t.load == ub && !t.excluded && t.forwarded_pps > 0.0)
            .map(|t| t.forwarded_pps)
            .fold(f64::INFINITY, f64::min);
        let candidate = forwarded
            .min(ub * (1.0 - phase.width))
            .max(limits.min_load)
            .round();
        return if candidate >= ub {
            Step::Done("no_lower_bound")
        } else {
            Step::Measure(candidate)
        };
    };
    if (ub - lb) / ub <= phase.width {
        return Step::Done("converged");
    }
    let mid = ((lb + ub) / 2.0).round();
    if mid <= lb || mid >= ub {
        Step::Done("converged")
    } else {
        Step::Measure(mid)
    }
}

/// Trials after which the share of disturbed ones decides whether disturbances are
/// persistent.
pub const PERSISTENT_AFTER_TRIALS: usize = 6;
/// Share of disturbed trials from which the machine counts as persistently busy.
pub const PERSISTENT_SHARE: f64 = 0.8;

/// Whether the disturbances so far look persistent rather than transient: at least
/// [`PERSISTENT_AFTER_TRIALS`] trials, [`PERSISTENT_SHARE`] of them disturbed.
pub fn persistently_disturbed(disturbed: &[bool]) -> bool {
    let n = disturbed.len();
    n >= PERSISTENT_AFTER_TRIALS
        && disturbed.iter().filter(|d| **d).count() as f64 >= PERSISTENT_SHARE * n as f64
}

/// Runs the search. `measure(load, duration_s)` measures one trial.
pub fn search(
    goals: &[ResolvedGoal],
    limits: &Limits,
    mut measure: impl FnMut(f64, f64) -> Measured,
) -> Outcome {
    let mut trials: Vec<Trial> = Vec::new();
    let mut disturbed: Vec<bool> = Vec::new();
    let mut spent = 0.0;
    let mut stopped: Vec<&'static str> = vec!["converged"; goals.len()];
    // Goals share the trials, so a later goal's trials can move an earlier goal's
    // bounds: passes repeat until one adds no trial (at most 4).
    'passes: for _ in 0..4 {
        let before = trials.len();
        for (gi, goal) in goals.iter().enumerate() {
            for phase in phases(goal) {
                loop {
                    let load = match next_step(&phase, &trials, limits) {
                        Step::Done(why) => {
                            stopped[gi] = why;
                            break;
                        }
                        Step::Measure(load) => load,
                    };
                    let duration = phase.final_trial_s;
                    if spent + duration > limits.time_limit_s {
                        for s in stopped.iter_mut().skip(gi) {
                            *s = "time_limit";
                        }
                        break 'passes;
                    }
                    let mut retries = 0;
                    loop {
                        match measure(load, duration) {
                            Measured::Interrupted => {
                                for s in stopped.iter_mut() {
                                    *s = "interrupted";
                                }
                                break 'passes;
                            }
                            Measured::Trial {
                                loss_ratio,
                                disturbed: d,
                                wall_s,
                                forwarded_pps,
                            } => {
                                spent += wall_s.max(duration);
                                // A disturbed trial is left out and measured again
                                // until the retries are used up; the last one counts,
                                // or a machine that is always busy would stall the
                                // search at one load. Retrying only helps against
                                // disturbances that come and go: once most trials so
                                // far were disturbed, the machine is busy all the time
                                // and a retry only spends the time limit.
                                let retry = d
                                    && limits.repeat_disturbed.is_some_and(|n| retries < n)
                                    && !persistently_disturbed(&disturbed)
                                    && spent + duration <= limits.time_limit_s;
                                trials.push(Trial {
                                    load,
                                    duration_s: duration,
                                    loss_ratio,
                                    forwarded_pps: if forwarded_pps.is_nan() {
                                        load * (1.0 - loss_ratio)
                                    } else {
                                        forwarded_pps
                                    },
                                    excluded: retry,
                                });
                                disturbed.push(d);
                                if !retry {
                                    break;
                                }
                                retries += 1;
                            }
                        }
                    }
                }
            }
        }
        if trials.len() == before {
            break;
        }
    }
    let goals = goals
        .iter()
        .zip(stopped)
        .map(|(g, s)| answer(g, &trials, limits, s))
        .collect();
    Outcome {
        trials,
        disturbed,
        goals,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn goal(loss: f64, exceed: f64, fin: f64, sum: f64, init: f64, width: f64) -> ResolvedGoal {
        ResolvedGoal {
            name: "g".into(),
            loss_ratio: loss,
            exceed_ratio: exceed,
            final_trial_s: fin,
            duration_sum_s: sum,
            initial_trial_s: init,
            width,
        }
    }

    fn trials(spec: &[(usize, f64, f64)]) -> Vec<Trial> {
        spec.iter()
            .flat_map(|&(n, d, loss)| {
                std::iter::repeat_n(
                    Trial {
                        load: 1e6,
                        duration_s: d,
                        loss_ratio: loss,
                        forwarded_pps: 0.0,
                        excluded: false,
                    },
                    n,
                )
            })
            .collect()
    }

    /// The draft's worked example (section "Example Search", points 1 to 6), goals
    /// RFC2544 (60f60d0l0e), TST009 (60f120d0l50e), 1s final (1f120d.5l50e) and
    /// 20% exceed (60f60d0.5l20e): every classification its tables give.
    #[test]
    fn classification_follows_the_drafts_worked_example() {
        let rfc2544 = goal(0.0, 0.0, 60.0, 60.0, 1.0, 0.01);
        let tst009 = goal(0.0, 0.5, 60.0, 120.0, 1.0, 0.01);
        let one_s = goal(0.005, 0.5, 1.0, 120.0, 1.0, 0.01);
        let exceed20 = goal(0.005, 0.2, 60.0, 60.0, 1.0, 0.01);
        use Class::*;
        type Point<'a> = (&'a [(usize, f64, f64)], [Class; 4]);
        let points: [Point; 6] = [
            (
                &[(59, 1.0, 0.0)],
                [Undecided, Undecided, Undecided, Undecided],
            ),
            (
                &[(59, 1.0, 0.0), (1, 1.0, 0.01)],
                [Upper, Undecided, Undecided, Undecided],
            ),
            (
                &[(59, 1.0, 0.0), (60, 1.0, 0.01)],
                [Upper, Undecided, Undecided, Upper],
            ),
            (
                &[(60, 1.0, 0.0), (60, 1.0, 0.01)],
                [Upper, Undecided, Lower, Upper],
            ),
            (
                &[(60, 1.0, 0.0), (60, 1.0, 0.01), (1, 60.0, 0.001)],
                [Upper, Undecided, Lower, Upper],
            ),
            (
                &[
                    (60, 1.0, 0.0),
                    (60, 1.0, 0.01),
                    (1, 60.0, 0.001),
                    (1, 60.0, 0.0),
                ],
                // 20% exceed: 45 s of effective high loss (point 5's table) stay above
                // 20% of 165 s, so the load stays an upper bound for it.
                [Upper, Lower, Lower, Upper],
            ),
        ];
        for (i, (spec, want)) in points.iter().enumerate() {
            let t = trials(spec);
            let got = [&rfc2544, &tst009, &one_s, &exceed20].map(|g| classify(g, t.iter()));
            assert_eq!(got, *want, "point {}", i + 1);
        }
        // Appendix B's conditional throughputs at point 6: TST009 and 1s final 1 Mpps,
        // 20% exceed 999 kpps.
        let t = trials(points[5].0);
        assert_eq!(conditional_throughput(&tst009, 1e6, t.iter()), Some(1e6));
        assert_eq!(conditional_throughput(&one_s, 1e6, t.iter()), Some(1e6));
        let ct = conditional_throughput(&exceed20, 1e6, t.iter()).expect("ct");
        assert!((ct - 999_000.0).abs() < 1e-6, "{ct}");
    }

    /// xorshift, deterministic per seed.
    struct Rng(u64);
    impl Rng {
        fn uniform(&mut self) -> f64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            (self.0 >> 11) as f64 / (1u64 << 53) as f64
        }
    }

    /// A DUT of capacity `cap` that loses what exceeds it, and on top of that, with
    /// probability `burst_p` per trial, loses a burst of `burst_s` seconds of traffic
    /// (a vCPU stall) whatever the load.
    fn noisy_dut(
        cap: f64,
        burst_p: f64,
        burst_s: f64,
        seed: u64,
    ) -> impl FnMut(f64, f64) -> Measured {
        let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
        move |load, duration| {
            let mut loss = if load > cap { (load - cap) / load } else { 0.0 };
            let burst = rng.uniform() < burst_p;
            if burst {
                loss += (burst_s / duration).min(1.0) * (1.0 - loss);
            }
            Measured::Trial {
                loss_ratio: loss,
                disturbed: false,
                wall_s: 0.0,
                forwarded_pps: f64::NAN,
            }
        }
    }

    fn limits() -> Limits {
        Limits {
            max_load: 2e6,
            min_load: 1e4,
            time_limit_s: 600.0,
            repeat_disturbed: None,
        }
    }

    #[test]
    fn without_noise_it_finds_the_capacity_within_the_width() {
        let g = goal(0.005, 0.5, 2.0, 4.0, 0.5, 0.02);
        let o = search(
            std::slice::from_ref(&g),
            &limits(),
            noisy_dut(777_000.0, 0.0, 0.0, 1),
        );
        let r = &o.goals[0];
        assert_eq!(r.stopped, "converged", "{r:?}");
        let (lb, ub) = (
            r.relevant_lower_bound.expect("lb"),
            r.relevant_upper_bound.expect("ub"),
        );
        // The loss threshold lets loads up to cap / (1 - 0.005) pass.
        let knee = 777_000.0 / (1.0 - 0.005);
        assert!(lb <= knee && ub > knee && (ub - lb) / ub <= 0.02, "{r:?}");
        let ct = r.conditional_throughput.expect("ct");
        assert!(
            (777_000.0 * 0.97..=777_000.0 * 1.0001).contains(&ct),
            "{ct}"
        );
        // Short trials explored; final trials only decided.
        let short = o.trials.iter().filter(|t| t.duration_s < 2.0).count();
        assert!(short >= 3, "{:?}", o.trials);
        assert!(!r.supporting.is_empty());
        for &i in &r.supporting {
            assert_eq!(o.trials[i].duration_s, 2.0);
            assert_eq!(o.trials[i].load, lb);
        }
    }

    /// The noise the lab sees: a stall of 50 ms in 20% of trials. A 0.5% threshold is
    /// exceeded by a 50 ms burst in any trial shorter than 10 s, so the bisection
    /// under-reports whenever a stall hits a probe near the knee; the goal exceed ratio
    /// (0.5 of a 10 s duration sum: 3 of 5 final trials must be low-loss) absorbs it.
    /// Over 100 seeds the search must return the true capacity within its width in at
    /// least 90 (measured: 98; the bisection on the same DUT: 51), and never above it.
    /// The capacity is not a dyadic fraction of the highest load, which would let the
    /// bisection probe it exactly.
    #[test]
    fn bursts_at_random_do_not_decide_the_result() {
        let cap = 487_300.0;
        let g = goal(0.005, 0.5, 2.0, 10.0, 0.5, 0.03);
        let mut within = 0;
        let mut bisect_within = 0;
        for seed in 1..=100u64 {
            let o = search(
                std::slice::from_ref(&g),
                &limits(),
                noisy_dut(cap, 0.2, 0.05, seed),
            );
            let r = &o.goals[0];
            let ct = r.conditional_throughput.unwrap_or(0.0);
            assert!(ct <= cap * 1.0001, "seed {seed}: {r:?}");
            if ct >= cap * (1.0 - 0.03) {
                within += 1;
            }
            // The bisection on the same DUT, final-length trials, one each.
            let mut dut = noisy_dut(cap, 0.2, 0.05, seed);
            let b = crate::bisection::bisect(2e6, &[], 12, 0.03, |load| match dut(load, 2.0) {
                Measured::Trial { loss_ratio, .. } if loss_ratio <= 0.005 => {
                    crate::bisection::Probe::Pass
                }
                _ => crate::bisection::Probe::Fail,
            });
            if b.pps >= cap * (1.0 - 0.03) && b.pps <= cap / (1.0 - 0.005) {
                bisect_within += 1;
            }
        }
        eprintln!(
            "MLRsearch within its width in {within}/100 seeds, bisection {bisect_within}/100"
        );
        assert!(
            within >= 90,
            "MLRsearch within its width in {within}/100 seeds"
        );
        assert!(
            within > bisect_within,
            "MLRsearch {within}/100, bisection {bisect_within}/100"
        );
    }

    #[test]
    fn several_goals_share_one_pass_and_bounds_are_ordered() {
        let ndr = ResolvedGoal {
            name: "ndr".into(),
            ..goal(0.0, 0.5, 2.0, 4.0, 0.5, 0.03)
        };
        let pdr = ResolvedGoal {
            name: "pdr".into(),
            ..goal(0.02, 0.5, 2.0, 4.0, 0.5, 0.03)
        };
        // Loss grows gradually past 400 kpps: 0% below, then (load - 400k) / load.
        let o = search(&[ndr, pdr], &limits(), noisy_dut(400_000.0, 0.0, 0.0, 3));
        let (n, p) = (&o.goals[0], &o.goals[1]);
        let n_ct = n.conditional_throughput.expect("ndr");
        let p_ct = p.conditional_throughput.expect("pdr");
        assert!((400_000.0 * 0.97..=400_000.0).contains(&n_ct), "{n:?}");
        // PDR accepts 2% loss: its load can be 400k / 0.98 = 408k.
        assert!(p.relevant_lower_bound.expect("lb") >= n.relevant_lower_bound.expect("lb"));
        assert!(p_ct >= 400_000.0 * 0.97, "{p:?}");
    }

    #[test]
    fn limits_interruption_and_upper_bound() {
        let g = goal(0.005, 0.5, 1.0, 2.0, 0.5, 0.01);
        // A DUT faster than the highest load: the maximum passes.
        let o = search(
            std::slice::from_ref(&g),
            &limits(),
            noisy_dut(1e9, 0.0, 0.0, 1),
        );
        assert_eq!(o.goals[0].stopped, "upper_bound_passed");
        assert_eq!(o.goals[0].relevant_lower_bound, Some(2e6));
        // A time limit stops it with the bounds it has.
        let l = Limits {
            time_limit_s: 3.0,
            ..limits()
        };
        let o = search(
            std::slice::from_ref(&g),
            &l,
            noisy_dut(300_000.0, 0.0, 0.0, 1),
        );
        assert_eq!(o.goals[0].stopped, "time_limit");
        assert!(o.trials.iter().map(|t| t.duration_s).sum::<f64>() <= 3.0);
        // Interruption.
        let mut n = 0;
        let o = search(std::slice::from_ref(&g), &limits(), |_, _| {
            n += 1;
            if n == 3 {
                Measured::Interrupted
            } else {
                Measured::Trial {
                    loss_ratio: 0.5,
                    disturbed: false,
                    wall_s: 0.0,
                    forwarded_pps: f64::NAN,
                }
            }
        });
        assert_eq!(o.goals[0].stopped, "interrupted");
        assert_eq!(o.trials.len(), 2);
        // Nothing passes even at the lowest load.
        let o = search(std::slice::from_ref(&g), &limits(), |_, _| {
            Measured::Trial {
                loss_ratio: 0.5,
                disturbed: false,
                wall_s: 0.0,
                forwarded_pps: f64::NAN,
            }
        });
        assert_eq!(o.goals[0].stopped, "no_lower_bound");
        assert_eq!(o.goals[0].conditional_throughput, None);
    }

    #[test]
    fn disturbed_trials_are_repeated_and_left_out() {
        let g = goal(0.005, 0.5, 1.0, 2.0, 0.5, 0.02);
        // Every third trial is disturbed and loses 10%.
        let mut n = 0;
        let measure = |load: f64, _d: f64| {
            n += 1;
            let disturbed = n % 3 == 0;
            let base = if load > 600_000.0 {
                (load - 600_000.0) / load
            } else {
                0.0
            };
            Measured::Trial {
                loss_ratio: if disturbed { base.max(0.1) } else { base },
                disturbed,
                wall_s: 0.0,
                forwarded_pps: f64::NAN,
            }
        };
        let l = Limits {
            repeat_disturbed: Some(2),
            ..limits()
        };
        let o = search(std::slice::from_ref(&g), &l, measure);
        let r = &o.goals[0];
        let ct = r.conditional_throughput.expect("ct");
        assert!((600_000.0 * 0.98..=600_000.0).contains(&ct), "{r:?}");
        assert!(o.trials.iter().any(|t| t.excluded));
        assert!(o
            .trials
            .iter()
            .zip(&o.disturbed)
            .all(|(t, d)| t.excluded == *d));
        // Classified again without them: the same here, as they were left out.
        let again = o.without_disturbed(std::slice::from_ref(&g), &l);
        assert_eq!(again[0].conditional_throughput, r.conditional_throughput);
    }

    /// Above 700 kpps the generator cannot offer the load: those trials count as
    /// high-loss (loss ratio 1), but what the DUT delivered there still tells the search
    /// where to look, so it does not fall to the lowest load (as a first version did:
    /// every lab maximum came out at 2 kpps).
    #[test]
    fn a_load_the_generator_could_not_offer_still_points_below() {
        let g = goal(0.005, 0.5, 1.0, 2.0, 0.5, 0.03);
        let o = search(std::slice::from_ref(&g), &limits(), |load, _| {
            if load > 700_000.0 {
                Measured::Trial {
                    loss_ratio: 1.0,
                    disturbed: false,
                    wall_s: 0.0,
                    forwarded_pps: 500_000.0,
                }
            } else {
                let loss = if load > 480_000.0 {
                    (load - 480_000.0) / load
                } else {
                    0.0
                };
                Measured::Trial {
                    loss_ratio: loss,
                    disturbed: false,
                    wall_s: 0.0,
                    forwarded_pps: load * (1.0 - loss),
                }
            }
        });
        let ct = o.goals[0].conditional_throughput.expect("ct");
        assert!(
            (480_000.0 * 0.97..=480_000.0).contains(&ct),
            "{:?}",
            o.goals[0]
        );
        assert!(
            o.trials.iter().all(|t| t.load >= 400_000.0),
            "{:?}",
            o.trials
        );
    }

    /// On a machine that disturbs every trial, the retries stop once the disturbances
    /// are seen to be persistent, and the trials count: the search converges instead of
    /// measuring one load until its time limit (as a first version did, 720 trials at
    /// the highest load), and does not spend its time on retries that cannot help.
    #[test]
    fn a_machine_that_always_disturbs_does_not_stall_the_search() {
        let g = goal(0.005, 0.5, 1.0, 2.0, 0.5, 0.05);
        let l = Limits {
            repeat_disturbed: Some(2),
            ..limits()
        };
        let o = search(std::slice::from_ref(&g), &l, |load, d| Measured::Trial {
            loss_ratio: if load > 300_000.0 {
                (load - 300_000.0) / load
            } else {
                0.0
            },
            disturbed: true,
            wall_s: d + 1.0,
            forwarded_pps: f64::NAN,
        });
        assert_eq!(o.goals[0].stopped, "converged", "{:?}", o.goals[0]);
        // The first two loads are measured three times (two left out, the third kept);
        // from the sixth trial on every trial was disturbed, so no more retries.
        assert!(o.trials[..6].iter().filter(|t| t.excluded).count() == 4);
        assert!(o.trials[6..].iter().all(|t| !t.excluded), "{:?}", o.trials);
        // The time limit counts wall time: 1 s of overhead per trial.
        let spent: f64 = o.trials.iter().map(|t| t.duration_s + 1.0).sum();
        assert!(spent <= l.time_limit_s);
        let again = o.without_disturbed(std::slice::from_ref(&g), &l);
        assert_eq!(again[0].conditional_throughput, None);
    }

    /// Disturbances that come and go are still retried: one trial in four disturbed.
    #[test]
    fn transient_disturbances_keep_their_retries() {
        let g = goal(0.005, 0.5, 1.0, 2.0, 0.5, 0.05);
        let l = Limits {
            repeat_disturbed: Some(1),
            ..limits()
        };
        let mut n = 0;
        let o = search(std::slice::from_ref(&g), &l, |load, d| {
            n += 1;
            Measured::Trial {
                loss_ratio: if load > 300_000.0 {
                    (load - 300_000.0) / load
                } else {
                    0.0
                },
                disturbed: n % 4 == 0,
                wall_s: d,
                forwarded_pps: f64::NAN,
            }
        });
        assert_eq!(o.goals[0].stopped, "converged", "{:?}", o.goals[0]);
        // Every disturbed trial was retried: left out, and the one after it kept.
        for (i, (t, d)) in o.trials.iter().zip(&o.disturbed).enumerate() {
            assert_eq!(t.excluded, *d, "trial {i}: {:?}", o.trials);
        }
        assert!(!persistently_disturbed(&o.disturbed));
        assert!(persistently_disturbed(&[true; 6]));
        assert!(!persistently_disturbed(&[true; 5]));
    }
}
