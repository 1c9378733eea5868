//! Numbers with their uncertainty, and the differences between them: each
//! configuration's maximum (per search goal, over the search's repeats) and latency
//! percentiles (over the sweep's repeats) with confidence intervals; the verdict on each
//! pairwise difference between configurations of a run; and the A/B comparison of two
//! runs (`napilab compare`).

use napilab_core::uncertainty::{mean_sd, quantile_interval, t_interval, welch};
use napilab_core::uncertainty::{ConfidenceInterval, Difference};
use napilab_core::{ConfigurationResult, IdentityDifference, PointRole, RunKind, RunRecord};
use serde::Serialize;

/// The confidence level when a run does not say (its goals' intervals carry theirs).
pub const DEFAULT_LEVEL: f64 = 0.95;

/// A number measured one or more times.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Estimate {
    pub mean: f64,
    pub interval: Option<ConfidenceInterval>,
    /// Each repeat's value.
    pub values: Vec<f64>,
}

impl Estimate {
    /// Mean and Student-t interval of quantities that cannot be negative (rates,
    /// latencies): a lower end below 0, which two spread-out repeats give, is cut at 0.
    fn of(values: Vec<f64>, level: f64) -> Option<Estimate> {
        let (mean, _) = mean_sd(&values)?;
        Some(Estimate {
            mean,
            interval: t_interval(&values, level).map(|mut ci| {
                ci.low = ci.low.max(0.0);
                ci
            }),
            values,
        })
    }
}

/// A configuration's maximum for one search goal.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct MaxEstimate {
    pub configuration: String,
    /// The goal's name (`max` for a bisection or a twin run).
    pub goal: String,
    pub loss_ratio: f64,
    /// `mlrsearch`, `rfc2544-bisection`.
    pub method: String,
    pub estimate: Estimate,
    pub stopped: String,
    pub trials: usize,
    pub disturbed_trials: usize,
    /// The mean without the disturbed trials (MLRsearch only).
    pub undisturbed_mean: Option<f64>,
}

/// The run's confidence level: that of its goals' intervals, else the default.
pub fn level_of(run: &RunRecord) -> f64 {
    run.configurations
        .iter()
        .filter_map(|c| c.max_throughput.as_ref())
        .flat_map(|m| &m.goals)
        .find_map(|g| g.interval.as_ref().map(|i| i.level))
        .unwrap_or(DEFAULT_LEVEL)
}

/// Every configuration's maxima, a row per goal.
pub fn maxima(run: &RunRecord) -> Vec<MaxEstimate> {
    let level = level_of(run);
    let mut rows = Vec::new();
    for conf in &run.configurations {
        let Some(m) = &conf.max_throughput else {
            continue;
        };
        if m.goals.is_empty() {
            rows.push(MaxEstimate {
                configuration: conf.name.clone(),
                goal: "max".into(),
                loss_ratio: m.loss_threshold,
                method: if m.method.is_empty() {
                    "rfc2544-bisection".into()
                } else {
                    m.method.clone()
                },
                estimate: Estimate {
                    mean: m.pps,
                    interval: None,
                    values: vec![m.pps],
                },
                stopped: m.stopped.clone(),
                trials: m.probes.len(),
                disturbed_trials: 0,
                undisturbed_mean: None,
            });
            continue;
        }
        for (gi, g) in m.goals.iter().enumerate() {
            let mut stopped: Vec<String> = m
                .searches
                .iter()
                .filter_map(|s| s.goals.get(gi).map(|r| r.stopped.clone()))
                .collect();
            stopped.dedup();
            rows.push(MaxEstimate {
                configuration: conf.name.clone(),
                goal: g.goal.name.clone(),
                loss_ratio: g.goal.loss_ratio,
                method: m.method.clone(),
                estimate: Estimate::of(g.values.clone(), level).unwrap_or(Estimate {
                    mean: 0.0,
                    interval: None,
                    values: Vec::new(),
                }),
                stopped: stopped.join("+"),
                trials: g.trials,
                disturbed_trials: g.disturbed_trials,
                undisturbed_mean: g.undisturbed_mean,
            });
        }
    }
    rows
}

/// A latency percentile of one class at one sweep load.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LatencyEstimate {
    pub configuration: String,
    pub requested_pps: f64,
    pub class: String,
    /// `p50`, `p99`, `p999`.
    pub percentile: String,
    pub estimate: Estimate,
}

/// Latency percentiles per configuration, sweep load and class: over the repeats
/// (Student t) when the sweep repeated the load, else within the one point's samples
/// (order statistics, which assume independent samples: a lower bound on the
/// uncertainty).
pub fn latencies(conf: &ConfigurationResult, level: f64) -> Vec<LatencyEstimate> {
    let mut loads: Vec<f64> = conf
        .points
        .iter()
        .filter(|p| p.role == PointRole::Sweep)
        .map(|p| p.requested_pps)
        .collect();
    loads.sort_by(f64::total_cmp);
    loads.dedup();
    let mut out = Vec::new();
    for load in loads {
        let at: Vec<_> = conf
            .points
            .iter()
            .filter(|p| p.role == PointRole::Sweep && p.requested_pps == load)
            .collect();
        let Some(first) = at.first() else { continue };
        for (ci, class) in first.classes.iter().enumerate() {
            for (name, q, pick) in [
                (
                    "p50",
                    0.5,
                    (|l: &napilab_core::LatencySummary| l.p50_us) as fn(&_) -> f64,
                ),
                ("p99", 0.99, |l| l.p99_us),
                ("p999", 0.999, |l| l.p999_us),
            ] {
                let lats: Vec<&napilab_core::LatencySummary> = at
                    .iter()
                    .filter_map(|p| p.classes.get(ci).and_then(|c| c.latency.as_ref()))
                    .filter(|l| l.samples > 0)
                    .collect();
                if lats.is_empty() {
                    continue;
                }
                let values: Vec<f64> = lats.iter().map(|l| pick(l)).collect();
                let estimate = if values.len() >= 2 {
                    Estimate::of(values, level)
                } else {
                    Some(Estimate {
                        mean: values[0],
                        interval: quantile_interval(&lats[0].histogram, q, level),
                        values,
                    })
                };
                if let Some(estimate) = estimate {
                    out.push(LatencyEstimate {
                        configuration: conf.name.clone(),
                        requested_pps: load,
                        class: class.name.clone(),
                        percentile: name.into(),
                        estimate,
                    });
                }
            }
        }
    }
    out
}

/// The difference of one metric between two sides (configurations or runs).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PairDifference {
    pub metric: String,
    pub a: String,
    pub b: String,
    pub a_estimate: Estimate,
    pub b_estimate: Estimate,
    pub difference: Difference,
}

/// Every pair of configurations of a run, on each goal's maximum.
pub fn configuration_differences(run: &RunRecord) -> Vec<PairDifference> {
    let level = level_of(run);
    let rows = maxima(run);
    let mut out = Vec::new();
    for (i, a) in rows.iter().enumerate() {
        for b in rows.iter().skip(i + 1) {
            if a.goal != b.goal || a.configuration == b.configuration {
                continue;
            }
            out.push(PairDifference {
                metric: format!("max throughput ({})", a.goal),
                a: a.configuration.clone(),
                b: b.configuration.clone(),
                difference: welch(&a.estimate.values, &b.estimate.values, level),
                a_estimate: a.estimate.clone(),
                b_estimate: b.estimate.clone(),
            });
        }
    }
    out
}

/// Two runs (or two configurations) side by side.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Comparison {
    pub a_run: String,
    pub b_run: String,
    pub level: f64,
    /// (configuration of A, configuration of B) compared.
    pub pairs: Vec<(String, String)>,
    pub rows: Vec<PairDifference>,
    /// Configurations of either run without a counterpart.
    pub unmatched: Vec<String>,
    /// Whether the two runs ran on the same host.
    pub hosts: HostComparison,
}

/// The verdict given instead of `significant` when the runs ran on different hosts and
/// the caller did not ask to judge across hosts.
pub const DIFFERENT_HOSTS: &str = "different hosts";

/// The two runs' hosts (docs/lab.md, "Comparing runs").
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct HostComparison {
    /// `same` (identities agree in every field both know), `different`, or `unknown`
    /// (a side has no identity: an older record, or the twin's).
    pub status: String,
    /// Each side's host in one line, or why it is unknown.
    pub a: String,
    pub b: String,
    /// With `different`: every field that differs.
    pub differences: Vec<IdentityDifference>,
    /// Whether verdicts were given across different hosts (`--across-hosts`).
    pub across_hosts: bool,
}

impl HostComparison {
    pub fn differ(&self) -> bool {
        self.status == "different"
    }
}

fn host_of(run: &RunRecord) -> String {
    match (&run.host.identity, run.kind) {
        (Some(id), _) => id.summary(),
        (None, RunKind::Model) => "the twin (computed, no host)".into(),
        (None, RunKind::Lab) => {
            "host unknown (recorded before napilab kept the host identity)".into()
        }
    }
}

/// Sets the two runs' hosts side by side.
pub fn compare_hosts(a: &RunRecord, b: &RunRecord, across_hosts: bool) -> HostComparison {
    let (status, differences) = match (&a.host.identity, &b.host.identity) {
        (Some(x), Some(y)) => {
            let d = x.differences(y);
            (if d.is_empty() { "same" } else { "different" }, d)
        }
        _ => ("unknown", Vec::new()),
    };
    HostComparison {
        status: status.into(),
        a: host_of(a),
        b: host_of(b),
        differences,
        across_hosts,
    }
}

/// Compares `b` against `a`. `pairs` names the configurations to set side by side
/// (A's, B's); empty: every configuration name the two runs share. When the runs ran
/// on different hosts, a difference Welch's test calls significant is marked
/// [`DIFFERENT_HOSTS`] instead unless `across_hosts`: the host alone (CPU, microcode,
/// kernel, hypervisor) can move these numbers by more than the setting under test.
pub fn compare(
    a: &RunRecord,
    b: &RunRecord,
    pairs: &[(String, String)],
    across_hosts: bool,
) -> Comparison {
    let level = level_of(a).max(level_of(b));
    let names = |r: &RunRecord| -> Vec<String> {
        r.configurations.iter().map(|c| c.name.clone()).collect()
    };
    let (an, bn) = (names(a), names(b));
    let pairs: Vec<(String, String)> = if pairs.is_empty() {
        an.iter()
            .filter(|n| bn.contains(n))
            .map(|n| (n.clone(), n.clone()))
            .collect()
    } else {
        pairs.to_vec()
    };
    let unmatched = if pairs.is_empty() || pairs.iter().all(|(x, y)| x == y) {
        an.iter()
            .filter(|n| !bn.contains(n))
            .chain(bn.iter().filter(|n| !an.contains(n)))
            .cloned()
            .collect()
    } else {
        Vec::new()
    };
    let (ma, mb) = (maxima(a), maxima(b));
    let mut rows = Vec::new();
    for (ca, cb) in &pairs {
        let label = |run: &RunRecord, c: &str| format!("{} {}", run.run_id, c);
        for xa in ma.iter().filter(|m| &m.configuration == ca) {
            let Some(xb) = mb
                .iter()
                .find(|m| &m.configuration == cb && m.goal == xa.goal)
            else {
                continue;
            };
            rows.push(PairDifference {
                metric: format!("max throughput ({}, loss <= {})", xa.goal, xa.loss_ratio),
                a: label(a, ca),
                b: label(b, cb),
                difference: welch(&xa.estimate.values, &xb.estimate.values, level),
                a_estimate: xa.estimate.clone(),
                b_estimate: xb.estimate.clone(),
            });
        }
        let conf = |r: &RunRecord, n: &str| r.configurations.iter().find(|c| c.name == n).cloned();
        if let (Some(fa), Some(fb)) = (conf(a, ca), conf(b, cb)) {
            rows.extend(request_rows(&fa, &fb, &label(a, ca), &label(b, cb), level));
            let (la, lb) = (latencies(&fa, level), latencies(&fb, level));
            for x in la.iter().filter(|x| x.percentile == "p99") {
                let Some(y) = lb.iter().find(|y| {
                    y.percentile == x.percentile
                        && y.class == x.class
                        && y.requested_pps == x.requested_pps
                }) else {
                    continue;
                };
                rows.push(PairDifference {
                    metric: format!(
                        "{} latency {} us at {:.0} pps",
                        x.class, x.percentile, x.requested_pps
                    ),
                    a: label(a, ca),
                    b: label(b, cb),
                    difference: welch(&x.estimate.values, &y.estimate.values, level),
                    a_estimate: x.estimate.clone(),
                    b_estimate: y.estimate.clone(),
                });
            }
        }
    }
    let hosts = compare_hosts(a, b, across_hosts);
    if hosts.differ() && !across_hosts {
        for r in &mut rows {
            if r.difference.verdict == "significant" {
                r.difference.verdict = DIFFERENT_HOSTS.into();
            }
        }
    }
    Comparison {
        a_run: a.run_id.clone(),
        b_run: b.run_id.clone(),
        level,
        pairs,
        rows,
        unmatched,
        hosts,
    }
}

/// The server topology's figures of two configurations side by side (a lab run and
/// the twin's, or two lab runs): the maximum requests/s at the objective over the
/// searches, and the p99 at each swept request rate over the repeats.
fn request_rows(
    a: &ConfigurationResult,
    b: &ConfigurationResult,
    la: &str,
    lb: &str,
    level: f64,
) -> Vec<PairDifference> {
    let (Some(qa), Some(qb)) = (&a.requests, &b.requests) else {
        return Vec::new();
    };
    let mut rows = Vec::new();
    let mut row = |metric: String, va: Vec<f64>, vb: Vec<f64>| {
        if let (Some(ea), Some(eb)) = (Estimate::of(va, level), Estimate::of(vb, level)) {
            rows.push(PairDifference {
                metric,
                a: la.to_string(),
                b: lb.to_string(),
                difference: welch(&ea.values, &eb.values, level),
                a_estimate: ea,
                b_estimate: eb,
            });
        }
    };
    if let (Some(ma), Some(mb)) = (&qa.max_qps, &qb.max_qps) {
        row(
            format!("max requests/s at p99 <= {} us", qa.slo_p99_us),
            ma.searches.clone(),
            mb.searches.clone(),
        );
    }
    let sweep = |q: &napilab_core::RequestResults, qps: f64| -> Vec<f64> {
        q.points
            .iter()
            .filter(|p| {
                p.role == PointRole::Sweep && p.requested_qps == qps && p.latency.samples > 0
            })
            .map(|p| p.latency.p99_us)
            .collect()
    };
    let mut rates: Vec<f64> = qa
        .points
        .iter()
        .filter(|p| p.role == PointRole::Sweep)
        .map(|p| p.requested_qps)
        .collect();
    rates.sort_by(f64::total_cmp);
    rates.dedup();
    for qps in rates {
        row(
            format!("request latency p99 us at {qps:.0} requests/s"),
            sweep(qa, qps),
            sweep(qb, qps),
        );
    }
    rows
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::synthetic::SyntheticRun;
    use napilab_core::scenario::ResolvedGoal;
    use napilab_core::{GoalSummary, RunKind};

    /// The synthetic run with MLRsearch results: per configuration the repeats'
    /// conditional throughputs of one goal.
    fn searched(values: &[&[f64]]) -> RunRecord {
        let mut run = SyntheticRun::new(RunKind::Lab).build();
        for (conf, v) in run.configurations.iter_mut().zip(values) {
            let m = conf.max_throughput.as_mut().expect("synthetic max");
            m.method = "mlrsearch".into();
            m.goals = vec![GoalSummary {
                goal: ResolvedGoal {
                    name: "pdr".into(),
                    loss_ratio: 0.005,
                    ..ResolvedGoal::default()
                },
                values: v.to_vec(),
                mean: mean_sd(v).map(|(m, _)| m),
                interval: t_interval(v, 0.95),
                ..GoalSummary::default()
            }];
        }
        run
    }

    #[test]
    fn a_run_compared_with_itself_shows_no_significant_difference() {
        let run = searched(&[&[300e3, 310e3, 305e3], &[450e3, 440e3, 455e3]]);
        let c = compare(&run, &run, &[], false);
        assert!(!c.rows.is_empty());
        for r in &c.rows {
            assert_eq!(r.difference.delta, 0.0, "{r:?}");
            assert!(!r.difference.verdict.starts_with("significant"), "{r:?}");
        }
        assert_eq!(c.pairs.len(), 2);
    }

    #[test]
    fn configurations_that_differ_beyond_their_spread_are_significant() {
        let run = searched(&[&[300e3, 310e3, 305e3], &[450e3, 440e3, 455e3]]);
        let d = configuration_differences(&run);
        assert_eq!(d.len(), 1);
        assert_eq!(d[0].difference.verdict, "significant", "{d:?}");
        // Overlapping repeats: not significant.
        let run = searched(&[&[300e3, 340e3, 280e3], &[310e3, 290e3, 330e3]]);
        let d = configuration_differences(&run);
        assert_eq!(d[0].difference.verdict, "not significant", "{d:?}");
        // Maxima carry their interval.
        let m = maxima(&run);
        let ci = m[0].estimate.interval.as_ref().expect("interval");
        assert!(ci.low < 306_667.0 && ci.high > 306_667.0, "{ci:?}");
    }

    #[test]
    fn two_configurations_of_one_run_can_be_compared_by_name() {
        let run = searched(&[&[300e3, 310e3, 305e3], &[450e3, 440e3, 455e3]]);
        let names: Vec<String> = run.configurations.iter().map(|c| c.name.clone()).collect();
        let c = compare(&run, &run, &[(names[0].clone(), names[1].clone())], false);
        let max = c
            .rows
            .iter()
            .find(|r| r.metric.starts_with("max throughput"))
            .expect("max row");
        assert!(max.difference.delta > 100e3);
        assert_eq!(max.difference.verdict, "significant");
    }

    fn on_host(mut run: RunRecord, run_id: &str, microcode: &str) -> RunRecord {
        run.run_id = run_id.into();
        run.host.identity = Some(napilab_core::HostIdentity {
            cpu: napilab_core::CpuIdentity {
                model_name: Some("AMD EPYC".into()),
                microcode: Some(microcode.into()),
                ..Default::default()
            },
            ..Default::default()
        });
        run
    }

    #[test]
    fn across_hosts_a_significant_difference_is_marked_not_judged() {
        let a = searched(&[&[300e3, 310e3, 305e3], &[450e3, 440e3, 455e3]]);
        let b = searched(&[&[400e3, 410e3, 405e3], &[452e3, 438e3, 456e3]]);
        let (a, b) = (on_host(a, "a", "0x1"), on_host(b, "b", "0x2"));
        let verdicts = |c: &Comparison| -> Vec<String> {
            c.rows
                .iter()
                .filter(|r| r.metric.starts_with("max throughput"))
                .map(|r| r.difference.verdict.clone())
                .collect()
        };
        let c = compare(&a, &b, &[], false);
        assert_eq!(c.hosts.status, "different");
        assert_eq!(c.hosts.differences.len(), 1);
        assert_eq!(c.hosts.differences[0].field, "cpu.microcode");
        assert_eq!(verdicts(&c), [DIFFERENT_HOSTS, "not significant"]);
        // Asked for: judged as on one host, and said so.
        let c = compare(&a, &b, &[], true);
        assert!(c.hosts.across_hosts);
        assert_eq!(verdicts(&c), ["significant", "not significant"]);
        // Same host: judged.
        let same = on_host(b.clone(), "b", "0x1");
        let c = compare(&a, &same, &[], false);
        assert_eq!(c.hosts.status, "same");
        assert_eq!(verdicts(&c), ["significant", "not significant"]);
        // An older record without identity: unknown, still judged, and named so.
        let mut old = b;
        old.host.identity = None;
        let c = compare(&a, &old, &[], false);
        assert_eq!(c.hosts.status, "unknown");
        assert!(c.hosts.b.starts_with("host unknown"), "{:?}", c.hosts);
        assert_eq!(verdicts(&c), ["significant", "not significant"]);
    }

    #[test]
    fn a_single_sweep_point_gets_an_order_statistic_interval() {
        let run = SyntheticRun::new(RunKind::Lab).build();
        let l = latencies(&run.configurations[0], 0.95);
        let p99 = l.iter().find(|x| x.percentile == "p99").expect("p99");
        let ci = p99.estimate.interval.as_ref().expect("interval");
        assert!(ci.method.starts_with("order statistics"), "{ci:?}");
        assert!(ci.low <= ci.high);
    }

    /// A lab configuration of the server topology beside the twin's: the maximum at the
    /// objective over the searches and the p99 per swept rate become rows.
    #[test]
    fn request_maxima_and_p99_are_set_side_by_side() {
        use napilab_core::{MaxQpsAtSlo, RequestPointResult, RequestResults};
        let conf = |searches: Vec<f64>, p99: f64| ConfigurationResult {
            name: "irq-suspend".into(),
            settings: Vec::new(),
            points: Vec::new(),
            max_throughput: None,
            findings: Vec::new(),
            requests: Some(RequestResults {
                mode: "irq-suspend".into(),
                slo_p99_us: 500.0,
                points: (0..2)
                    .map(|r| RequestPointResult {
                        repeat: r,
                        requested_qps: 2000.0,
                        latency: napilab_core::LatencySummary {
                            samples: 1000,
                            p99_us: p99 + f64::from(r),
                            ..Default::default()
                        },
                        ..Default::default()
                    })
                    .collect(),
                max_qps: Some(MaxQpsAtSlo {
                    qps: searches.iter().sum::<f64>() / searches.len() as f64,
                    searches,
                    ..Default::default()
                }),
                ..Default::default()
            }),
        };
        let lab = conf(vec![20_000.0, 22_000.0, 21_000.0], 300.0);
        let twin = conf(vec![76_000.0, 77_000.0, 75_000.0], 30.0);
        let rows = request_rows(&lab, &twin, "lab", "twin", 0.95);
        assert_eq!(rows.len(), 2, "{rows:?}");
        assert!(rows[0].metric.starts_with("max requests/s at p99 <= 500"));
        assert_eq!(rows[0].a_estimate.values, [20_000.0, 22_000.0, 21_000.0]);
        assert!((rows[0].difference.delta - 55_000.0).abs() < 1e-6);
        assert!(rows[1].metric.contains("at 2000 requests/s"));
        assert!((rows[1].difference.delta + 270.0).abs() < 1e-6);
        // Packet configurations have no request rows.
        let mut packets = lab.clone();
        packets.requests = None;
        assert!(request_rows(&packets, &twin, "a", "b", 0.95).is_empty());
    }
}
