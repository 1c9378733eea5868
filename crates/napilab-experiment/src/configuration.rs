//! One configuration's packet experiment, written once for every testbed: build the
//! configuration, sweep the offered loads with their repeats, search the maximum
//! throughput if the plan asks for one, name the findings, tear down. The lab (its
//! network namespaces on the real kernel) and the twin (the discrete-event model) each
//! implement [`Testbed`]; this loop is the only place that decides which points are
//! measured, in which order, and what the configuration's record holds.
//!
//! Capacity first: before a sweep with loads given as fractions of the capacity, and
//! before every search, the testbed probes the configuration's capacity (its generator,
//! sink and a first estimate of the DUT), and the sweep's loads and the search's range
//! come from it; the scenario's numbers are caps (maximum.rs, [`maximum::derive_range`]).

use napilab_core::explain;
use napilab_core::scenario::{Configuration, Measurement};
use napilab_core::{ConfigurationResult, PacketCapacityProbe, PointResult, PointRole};

use crate::maximum::{self, passes, PacketTestbed};

/// One point the experiment asks a testbed to measure.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PointSpec {
    /// Offered load, packets per second.
    pub load_pps: f64,
    pub role: PointRole,
    /// 0-based repeat of this load (the twin picks its seed by it).
    pub repeat: u32,
    pub duration_s: f64,
}

/// What a testbed says between the sweep and the search.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SearchSetup {
    /// Settings the search adds to the configuration's (e.g. another traffic engine).
    pub settings: Vec<(String, String)>,
    /// False when the search measures with other means than the sweep did, so the
    /// sweep's pass/fail verdicts do not carry over to the search's starting bounds.
    pub sweep_verdicts_hold: bool,
}

/// A configuration as a testbed takes it: the scenario's own (the lab) or mapped for
/// the model (the twin).
pub trait Named {
    /// Its name in the record, unique within the run.
    fn name(&self) -> &str;
}

impl Named for Configuration {
    fn name(&self) -> &str {
        &self.name
    }
}

/// What a testbed's capacity probe gave.
#[derive(Clone, Debug, PartialEq)]
pub enum Probed {
    Measured(PacketCapacityProbe),
    /// The run was stopped during the probe.
    Stopped,
}

/// A place where a configuration can be built and a packet workload offered to it.
pub trait Testbed: PacketTestbed {
    type Configuration: Named;
    /// Builds `cfg` (the lab: namespaces, sysctls and the traffic engine; the twin: its
    /// model of the configuration). Returns the settings the record lists for it.
    fn build(&mut self, cfg: &Self::Configuration) -> Result<Vec<(String, String)>, Self::Error>;
    /// Probes the built configuration's capacity with its current traffic engine (the
    /// sweep's before [`Testbed::prepare_search`], the search's after it): a short
    /// load above what the DUT forwards, whose forwarded rate is the first estimate of
    /// the DUT's capacity and whose offered rate, where the generator fell short, the
    /// generator's.
    fn probe_capacity(&mut self) -> Result<Probed, Self::Error>;
    /// Measures the sweep's points, in the order given (a testbed may run them side by
    /// side). Fewer points than asked for: the run was stopped after the last one.
    fn measure(&mut self, points: &[PointSpec]) -> Result<Vec<PointResult>, Self::Error>;
    /// Readies the search after the sweep.
    fn prepare_search(&mut self) -> Result<SearchSetup, Self::Error> {
        Ok(SearchSetup {
            settings: Vec::new(),
            sweep_verdicts_hold: true,
        })
    }
    /// Removes what [`Testbed::build`] made. Called after the configuration's last
    /// point; a testbed also cleans up on drop, for the error paths.
    fn teardown(&mut self) -> Result<(), Self::Error>;
}

/// What to measure on each configuration.
#[derive(Clone, Debug)]
pub struct Plan {
    /// The sweep's offered loads, packets per second, in order.
    pub loads: Vec<f64>,
    /// Further sweep loads, as fractions of the configuration's probed capacity (the
    /// rate the DUT forwarded in the probe), measured after `loads`.
    pub loads_of_capacity: Vec<f64>,
    pub repeats: u32,
    pub duration_s: f64,
    /// The loss ratio at or below which a point passes.
    pub loss_threshold: f64,
    /// The search's settings (method, goals, budget), or None for no search.
    pub search: Option<Measurement>,
}

impl Plan {
    /// The scenario's own plan: its loads, repeats, duration and (if it asks for one)
    /// its search.
    pub fn of_scenario(s: &napilab_core::scenario::Scenario) -> Plan {
        let m = &s.measurement;
        Plan {
            loads: s.loads(),
            loads_of_capacity: s.load_fractions(),
            repeats: m.repeats,
            duration_s: m.duration_s,
            loss_threshold: m.loss_threshold,
            search: m.search.then(|| m.clone()),
        }
    }

    /// The sweep's points at `loads`, loads outer and repeats inner, as the lab has
    /// always run them.
    pub fn sweep(&self, loads: &[f64]) -> Vec<PointSpec> {
        loads
            .iter()
            .flat_map(|&load_pps| {
                (0..self.repeats).map(move |repeat| PointSpec {
                    load_pps,
                    role: PointRole::Sweep,
                    repeat,
                    duration_s: self.duration_s,
                })
            })
            .collect()
    }

    /// The search's settings with the plan's loss threshold (a command line's `--loss`
    /// changes the plan's): the search judges by the same threshold as the sweep.
    fn search_measurement(&self) -> Option<Measurement> {
        let mut m = self.search.clone()?;
        if m.loss_threshold != self.loss_threshold {
            m.loss_threshold = self.loss_threshold;
            for goal in &mut m.search_goals {
                goal.loss_ratio = self.loss_threshold;
            }
        }
        Some(m)
    }
}

/// One configuration's result, and whether the run was stopped during it.
pub struct Outcome {
    pub result: ConfigurationResult,
    pub stopped: bool,
}

/// Runs `plan` on configuration `cfg` of `testbed`: build, sweep, search, findings,
/// teardown. The record lists every point in the order measured (the sweep's, then the
/// search's trials) and the search's maximum with its method.
pub fn run<T: Testbed>(
    testbed: &mut T,
    cfg: &T::Configuration,
    plan: &Plan,
) -> Result<Outcome, T::Error> {
    let settings = testbed.build(cfg)?;
    let mut result = ConfigurationResult::new(cfg.name(), settings);
    let mut probe = None;
    let mut stopped = false;
    let mut loads = plan.loads.clone();
    if !plan.loads_of_capacity.is_empty() {
        match testbed.probe_capacity()? {
            Probed::Measured(p) => {
                let c = p.forwarded_pps;
                result.settings.push((
                    "sweep loads".into(),
                    format!(
                        "fractions {} of the {c:.0} pkt/s the DUT forwarded in the capacity probe ({}; the generator offered {:.0}{})",
                        plan.loads_of_capacity
                            .iter()
                            .map(|f| f.to_string())
                            .collect::<Vec<_>>()
                            .join(", "),
                        p.method,
                        p.offered_pps,
                        if p.generator_limited {
                            ": the DUT forwarded all of it, so this capacity is the generator's"
                        } else {
                            ""
                        }
                    ),
                ));
                loads.extend(
                    plan.loads_of_capacity
                        .iter()
                        .map(|f| (f * c).round().max(1.0)),
                );
                probe = Some(p);
            }
            Probed::Stopped => stopped = true,
        }
    }
    let sweep = plan.sweep(&loads);
    if !stopped {
        result.points = testbed.measure(&sweep)?;
        stopped = result.points.len() < sweep.len();
    }
    let mut known: Vec<(f64, bool)> = result
        .points
        .iter()
        .zip(&sweep)
        .map(|(p, spec)| (spec.load_pps, passes(p, plan.loss_threshold)))
        .collect();
    if let (Some(m), false) = (plan.search_measurement(), stopped) {
        let setup = testbed.prepare_search()?;
        result.settings.extend(setup.settings);
        if !setup.sweep_verdicts_hold {
            // Another engine measures the search: neither the sweep's verdicts nor
            // its probe describe it.
            known.clear();
            probe = None;
        }
        let probed = match probe {
            Some(p) => Some(p),
            None => match testbed.probe_capacity()? {
                Probed::Measured(p) => Some(p),
                Probed::Stopped => None,
            },
        };
        match probed {
            Some(p) => {
                let (max, search_stopped) = maximum::max_throughput_from_probe(
                    &m,
                    &p,
                    &known,
                    &mut result.points,
                    testbed,
                )?;
                stopped |= search_stopped;
                result.max_throughput = Some(max);
            }
            None => stopped = true,
        }
    }
    result.findings =
        explain::findings_of(result.points.iter().filter_map(|p| p.observation.as_ref()));
    testbed.teardown()?;
    Ok(Outcome { result, stopped })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::maximum::MeasuredTrial;
    use napilab_core::scenario::SearchMethod;
    use napilab_core::Disturbance;

    /// A DUT that forwards everything up to `capacity` and drops the rest, and keeps a
    /// log of what the loop asked of it.
    struct Synthetic {
        capacity: f64,
        /// What the generator can offer.
        generator: f64,
        /// What the overloaded DUT forwards in the capacity probe, as a share of its
        /// capacity (below 1: receive livelock, the probe underestimates it).
        overloaded_share: f64,
        log: Vec<String>,
        stop_after: Option<usize>,
        measured: usize,
        verdicts_hold: bool,
    }

    impl Synthetic {
        fn new(capacity: f64) -> Self {
            Synthetic {
                capacity,
                generator: f64::INFINITY,
                overloaded_share: 1.0,
                log: Vec::new(),
                stop_after: None,
                measured: 0,
                verdicts_hold: true,
            }
        }

        fn point(&self, spec: PointSpec) -> PointResult {
            let offered = spec.load_pps.min(self.generator);
            let sent = (offered * spec.duration_s) as u64;
            let received = (offered.min(self.capacity) * spec.duration_s) as u64;
            let mut p = napilab_testkit::synthetic_point(
                spec.role,
                spec.load_pps,
                offered,
                spec.duration_s,
                sent,
                received,
            );
            p.repeat = spec.repeat;
            p
        }
    }

    impl PacketTestbed for Synthetic {
        type Error = String;
        fn search_trial(
            &mut self,
            load_pps: f64,
            duration_s: f64,
            search: u32,
        ) -> Result<Option<MeasuredTrial>, String> {
            self.log.push(format!("trial {load_pps:.0}"));
            Ok(Some(MeasuredTrial {
                point: self.point(PointSpec {
                    load_pps,
                    role: PointRole::Search,
                    repeat: search,
                    duration_s,
                }),
                disturbance: Disturbance::default(),
                wall_s: duration_s,
            }))
        }
    }

    impl Testbed for Synthetic {
        type Configuration = Configuration;
        fn build(&mut self, cfg: &Configuration) -> Result<Vec<(String, String)>, String> {
            self.log.push(format!("build {}", cfg.name));
            Ok(vec![("testbed".into(), "synthetic".into())])
        }
        fn measure(&mut self, points: &[PointSpec]) -> Result<Vec<PointResult>, String> {
            let mut out = Vec::new();
            for spec in points {
                if self.stop_after.is_some_and(|n| self.measured >= n) {
                    break;
                }
                self.measured += 1;
                self.log
                    .push(format!("sweep {:.0}/{}", spec.load_pps, spec.repeat));
                out.push(self.point(*spec));
            }
            Ok(out)
        }
        fn probe_capacity(&mut self) -> Result<Probed, String> {
            self.log.push("probe".into());
            let requested = 100e6;
            let offered = self.generator.min(requested);
            let forwarded = if offered > self.capacity {
                self.overloaded_share * self.capacity
            } else {
                offered
            };
            Ok(Probed::Measured(PacketCapacityProbe {
                method: "synthetic".into(),
                requested_pps: requested,
                offered_pps: offered,
                forwarded_pps: forwarded,
                generator_capacity_pps: (offered < 0.99 * requested).then_some(offered),
                generator_limited: forwarded >= 0.99 * offered,
            }))
        }
        fn prepare_search(&mut self) -> Result<SearchSetup, String> {
            self.log.push("prepare".into());
            Ok(SearchSetup {
                settings: vec![("search engine".into(), "other".into())],
                sweep_verdicts_hold: self.verdicts_hold,
            })
        }
        fn teardown(&mut self) -> Result<(), String> {
            self.log.push("teardown".into());
            Ok(())
        }
    }

    fn configuration() -> Configuration {
        let text = include_str!("../../../scenarios/default.toml");
        let s = napilab_core::scenario::parse(text, "scenarios/default.toml", Some(2))
            .expect("the default scenario parses");
        Configuration {
            name: "one".into(),
            ..s.configurations().remove(0)
        }
    }

    fn plan(search: Option<SearchMethod>) -> Plan {
        let m = Measurement {
            search: search.is_some(),
            search_method: search.unwrap_or(SearchMethod::Bisection),
            search_max_pps: None,
            search_repeats: 2,
            search_iterations: 12,
            search_resolution: 0.02,
            loss_threshold: 0.005,
            duration_s: 1.0,
            ..Measurement::default()
        };
        Plan {
            loads: vec![100_000.0, 900_000.0],
            loads_of_capacity: Vec::new(),
            repeats: 2,
            duration_s: 1.0,
            loss_threshold: m.loss_threshold,
            search: search.map(|_| m),
        }
    }

    #[test]
    fn sweeps_loads_then_repeats_builds_first_and_tears_down_last() {
        let mut dut = Synthetic::new(500_000.0);
        let out = run(&mut dut, &configuration(), &plan(None)).expect("no testbed error");
        assert_eq!(
            dut.log,
            [
                "build one",
                "sweep 100000/0",
                "sweep 100000/1",
                "sweep 900000/0",
                "sweep 900000/1",
                "teardown"
            ]
        );
        assert!(!out.stopped);
        assert_eq!(out.result.points.len(), 4);
        assert!(out.result.max_throughput.is_none());
        assert_eq!(
            out.result.settings,
            [("testbed".to_string(), "synthetic".to_string())]
        );
    }

    #[test]
    fn the_search_follows_the_sweep_and_finds_the_capacity_with_either_method() {
        for method in [SearchMethod::Bisection, SearchMethod::Mlrsearch] {
            let mut dut = Synthetic::new(500_000.0);
            let out =
                run(&mut dut, &configuration(), &plan(Some(method))).expect("no testbed error");
            let max = out.result.max_throughput.expect("a maximum");
            assert_eq!(max.method, maximum::method_name(method));
            assert!(
                (max.pps - 500_000.0).abs() < 0.05 * 500_000.0,
                "{method:?}: {} pps",
                max.pps
            );
            let prepare = dut
                .log
                .iter()
                .position(|l| l == "prepare")
                .expect("a prepare");
            assert!(dut.log[..prepare].iter().all(|l| !l.starts_with("trial")));
            assert_eq!(dut.log.last().expect("a log"), "teardown");
            assert!(out.result.points[4..]
                .iter()
                .all(|p| p.role == PointRole::Search));
            assert!(out
                .result
                .settings
                .iter()
                .any(|(k, _)| k == "search engine"));
        }
    }

    #[test]
    fn a_stop_during_the_sweep_skips_the_search_but_still_tears_down() {
        let mut dut = Synthetic::new(500_000.0);
        dut.stop_after = Some(3);
        let out = run(
            &mut dut,
            &configuration(),
            &plan(Some(SearchMethod::Bisection)),
        )
        .expect("as set up");
        assert!(out.stopped);
        assert_eq!(out.result.points.len(), 3);
        assert!(out.result.max_throughput.is_none());
        assert!(!dut
            .log
            .iter()
            .any(|l| l == "prepare" || l.starts_with("trial")));
        assert_eq!(dut.log.last().expect("a log"), "teardown");
    }

    #[test]
    fn sweep_verdicts_that_do_not_hold_are_not_the_bisections_bounds() {
        // With the sweep's verdicts (100k passes, 900k fails) the bisection starts
        // between them; without, from the measurement's own range: its first trial
        // is then not inside the sweep's bracket.
        let first_trial = |hold: bool| {
            let mut dut = Synthetic::new(500_000.0);
            dut.verdicts_hold = hold;
            run(
                &mut dut,
                &configuration(),
                &plan(Some(SearchMethod::Bisection)),
            )
            .expect("as set up");
            let t = dut
                .log
                .iter()
                .find(|l| l.starts_with("trial"))
                .expect("as set up")
                .clone();
            t.trim_start_matches("trial ")
                .parse::<f64>()
                .expect("a load")
        };
        assert_eq!(first_trial(true), 500_000.0);
        assert_ne!(first_trial(false), 500_000.0);
    }

    /// The search's maximum and range on `dut` with `plan`.
    fn searched(dut: &mut Synthetic, plan: &Plan) -> napilab_core::MaxThroughput {
        run(dut, &configuration(), plan)
            .expect("no testbed error")
            .result
            .max_throughput
            .expect("a maximum")
    }

    #[test]
    fn a_dut_above_the_old_default_and_the_first_range_is_found_not_capped() {
        // 3.5 Mpps: above the unchosen 1 Mpps default, and the overloaded DUT forwards
        // only 40% of it in the probe, so the first range (2 x 1.4 Mpps) is below it.
        for method in [SearchMethod::Bisection, SearchMethod::Mlrsearch] {
            let mut dut = Synthetic::new(3_500_000.0);
            dut.overloaded_share = 0.4;
            let max = searched(&mut dut, &plan(Some(method)));
            assert!(
                (max.pps - 3_500_000.0).abs() < 0.06 * 3_500_000.0,
                "{method:?}: {} pps",
                max.pps
            );
            let range = max.range.expect("a range");
            assert_eq!(range.raised_from, [2_800_000.0], "{method:?}");
            assert_eq!(range.max_pps, 5_600_000.0, "{method:?}");
            assert_eq!(range.source, napilab_core::RangeSource::Probe);
            assert_eq!(range.limited_by, None, "{method:?}");
            assert!(!max.stopped.contains("upper_bound_passed"), "{method:?}");
            // The probe ran once, after the search's engine was readied.
            let prepare = dut
                .log
                .iter()
                .position(|l| l == "prepare")
                .expect("prepare");
            assert_eq!(dut.log[prepare + 1], "probe");
            assert_eq!(dut.log.iter().filter(|l| *l == "probe").count(), 1);
        }
    }

    #[test]
    fn a_scenario_cap_stops_the_search_and_says_so() {
        for method in [SearchMethod::Bisection, SearchMethod::Mlrsearch] {
            let mut dut = Synthetic::new(3_500_000.0);
            let mut p = plan(Some(method));
            if let Some(m) = p.search.as_mut() {
                m.search_max_pps = Some(1_000_000.0);
            }
            let max = searched(&mut dut, &p);
            assert!(
                max.pps <= 1_000_000.0 && max.pps >= 0.94e6,
                "{method:?}: {}",
                max.pps
            );
            let range = max.range.expect("a range");
            assert_eq!(range.source, napilab_core::RangeSource::ScenarioCap);
            assert!(range.raised_from.is_empty());
            let by = range.limited_by.expect("the cap set it");
            assert!(by.contains("search_max_pps"), "{by}");
            assert!(dut
                .log
                .iter()
                .filter_map(|l| l.strip_prefix("trial "))
                .all(|l| l.parse::<f64>().expect("a load") <= 1_000_000.0));
        }
    }

    #[test]
    fn a_generator_limited_maximum_is_reported_as_the_generators() {
        for method in [SearchMethod::Bisection, SearchMethod::Mlrsearch] {
            let mut dut = Synthetic::new(3_000_000.0);
            dut.generator = 800_000.0;
            let max = searched(&mut dut, &plan(Some(method)));
            assert!(
                max.pps <= 800_000.0 && max.pps >= 0.94 * 800_000.0,
                "{method:?}: {}",
                max.pps
            );
            let range = max.range.expect("a range");
            assert_eq!(range.source, napilab_core::RangeSource::GeneratorCapacity);
            assert_eq!(range.max_pps, 800_000.0);
            let by = range.limited_by.expect("the generator set it");
            assert!(by.starts_with("the generator, not the DUT"), "{by}");
            assert!(range.probe.expect("its probe").generator_limited);
        }
    }

    #[test]
    fn a_dut_that_sets_its_maximum_below_the_top_is_not_marked() {
        let mut dut = Synthetic::new(700_000.0);
        dut.generator = 5_000_000.0;
        let max = searched(&mut dut, &plan(Some(SearchMethod::Mlrsearch)));
        let range = max.range.expect("a range");
        assert_eq!(range.max_pps, 1_400_000.0);
        assert_eq!(range.limited_by, None);
        assert!((max.pps - 700_000.0).abs() < 0.06 * 700_000.0);
    }

    #[test]
    fn fractions_of_the_probed_capacity_are_the_sweeps_loads() {
        let mut dut = Synthetic::new(2_000_000.0);
        let mut p = plan(None);
        p.loads = vec![10_000.0];
        p.loads_of_capacity = vec![0.25, 0.5];
        p.repeats = 1;
        let out = run(&mut dut, &configuration(), &p).expect("no testbed error");
        assert_eq!(
            dut.log,
            [
                "build one",
                "probe",
                "sweep 10000/0",
                "sweep 500000/0",
                "sweep 1000000/0",
                "teardown"
            ]
        );
        let (_, how) = out
            .result
            .settings
            .iter()
            .find(|(k, _)| k == "sweep loads")
            .expect("the record says where the loads came from");
        assert!(how.contains("2000000 pkt/s"), "{how}");
    }

    #[test]
    fn a_command_line_loss_threshold_reaches_the_search() {
        let mut p = plan(Some(SearchMethod::Mlrsearch));
        p.loss_threshold = 0.05;
        let m = p.search_measurement().expect("a search");
        assert_eq!(m.loss_threshold, 0.05);
        assert!(m.search_goals.iter().all(|g| g.loss_ratio == 0.05));
    }
}
