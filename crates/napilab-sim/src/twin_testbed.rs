//! The twin as a testbed of the experiment layer ([`napilab_experiment::configuration`]):
//! a configuration is "built" by taking its mapped model ([`TwinConfiguration`]), each
//! sweep point is one run of the model at the point's load with the repeat's seed (the
//! sweep's runs side by side, as they do not depend on each other), each search trial
//! one run at the trial's load and duration. The experiment loop, the searches and the
//! findings are the lab's own, so a twin record and a lab record of one scenario have
//! the same shape.

use napilab_core::{MaxThroughput, PacketCapacityProbe, PointResult, PointRole};
use napilab_experiment::capacity_probe::{doubling_probe, After, Doubling};
use napilab_experiment::configuration::{self, Named, PointSpec, Probed, Testbed};
use napilab_experiment::maximum::{MeasuredTrial, PacketTestbed};

use crate::config::{ConfigError, SimConfig};
use crate::output::SimResult;
use crate::profile::Profile;
use crate::twin_plan::{TwinConfiguration, TwinPlan};

impl Named for TwinConfiguration {
    fn name(&self) -> &str {
        &self.name
    }
}

/// Runs a batch of (model, seed, role) and returns their points in order.
pub trait RunMany:
    FnMut(&[(SimConfig, u64, PointRole)]) -> Result<Vec<PointResult>, ConfigError>
{
}
impl<F> RunMany for F where
    F: FnMut(&[(SimConfig, u64, PointRole)]) -> Result<Vec<PointResult>, ConfigError>
{
}

/// The twin as a packet testbed for one plan's configurations.
pub struct TwinPackets<'p, F> {
    seeds: &'p [u64],
    run_many: F,
    /// Settings the record lists after each configuration's own (e.g. the profile and
    /// where its parameters come from).
    extra_settings: Vec<(String, String)>,
    current: Option<TwinConfiguration>,
}

impl<'p, F: RunMany> TwinPackets<'p, F> {
    /// `run_many` runs a batch of (model, seed, role), e.g. side by side, and returns
    /// their points in order.
    pub fn new(plan: &'p TwinPlan, run_many: F) -> Self {
        TwinPackets {
            seeds: &plan.seeds,
            run_many,
            extra_settings: Vec::new(),
            current: None,
        }
    }

    /// Adds settings to every configuration's record.
    pub fn with_settings(mut self, settings: Vec<(String, String)>) -> Self {
        self.extra_settings = settings;
        self
    }

    fn current(&self) -> Result<&TwinConfiguration, ConfigError> {
        self.current.as_ref().ok_or_else(|| {
            ConfigError::new(
                "(twin)",
                "(run)",
                "internal: a point was asked for before its configuration was built",
            )
        })
    }
}

/// The experiment's plan for a twin plan: its loads, one repeat per seed, the
/// scenario's duration, its loss threshold (which `sim run --loss` may have changed)
/// and its search.
pub fn plan_of(plan: &TwinPlan) -> configuration::Plan {
    let duration_s = plan
        .configurations
        .first()
        .map_or(1.0, |c| c.config.measurement.duration_ms / 1e3);
    configuration::Plan {
        loads: plan.loads.clone(),
        loads_of_capacity: plan.load_fractions.clone(),
        repeats: plan.seeds.len() as u32,
        duration_s,
        loss_threshold: plan.loss_threshold,
        search: plan.search.clone(),
    }
}

impl<F: RunMany> Testbed for TwinPackets<'_, F> {
    type Configuration = TwinConfiguration;

    fn build(&mut self, cfg: &TwinConfiguration) -> Result<Vec<(String, String)>, ConfigError> {
        self.current = Some(cfg.clone());
        let mut settings = cfg.settings.clone();
        settings.extend(self.extra_settings.iter().cloned());
        Ok(settings)
    }

    fn measure(&mut self, points: &[PointSpec]) -> Result<Vec<PointResult>, ConfigError> {
        let conf = self.current()?;
        let mut batch = Vec::with_capacity(points.len());
        for spec in points {
            let seed = *self.seeds.get(spec.repeat as usize).ok_or_else(|| {
                ConfigError::new(
                    "(twin)",
                    "(run)",
                    format!("internal: no seed for repeat {}", spec.repeat),
                )
            })?;
            batch.push((
                at_for(conf, spec.load_pps, spec.duration_s),
                seed,
                spec.role,
            ));
        }
        let mut out = (self.run_many)(&batch)?;
        for (p, spec) in out.iter_mut().zip(points) {
            p.repeat = spec.repeat;
        }
        Ok(out)
    }

    /// The twin's traffic is ideal (it offers any load), so its probe looks for the
    /// DUT's limit instead of the generator's: short runs at doubling loads from
    /// [`PROBE_FIRST_PPS`] until the model loses more than [`PROBE_OVERLOAD_LOSS`] of
    /// them; what it forwarded there is the estimate. Doubling keeps the cost of the
    /// probe at about twice that of its last run.
    fn probe_capacity(&mut self) -> Result<Probed, ConfigError> {
        let conf = self.current()?.clone();
        let seed = self.seeds.first().copied().unwrap_or(1);
        let doubling = Doubling {
            from_pps: PROBE_FIRST_PPS,
            max_trials: PROBE_DOUBLINGS,
            ceiling_pps: napilab_experiment::maximum::MAX_TOP_PPS,
        };
        let run_many = &mut self.run_many;
        let trial = |load: f64| {
            // The window is set before `at`, which sizes the egress ring for it.
            let mut short = conf.clone();
            let m = &mut short.config.measurement;
            m.warmup_ms = m.warmup_ms.min(PROBE_WARMUP_MS);
            m.duration_ms = PROBE_WINDOW_MS;
            let config = short.at(load);
            Ok((run_many)(&[(config, seed, PointRole::Search)])?
                .into_iter()
                .next())
        };
        let overloaded = |_: f64, p: &PointResult| {
            if p.loss_ratio() > PROBE_OVERLOAD_LOSS {
                After::StopHere
            } else {
                After::Double
            }
        };
        let Some(p) = doubling_probe(doubling, trial, overloaded)? else {
            return Ok(Probed::Stopped);
        };
        let forwarded = p.delivered_pps();
        Ok(Probed::Measured(PacketCapacityProbe {
            method: format!(
                "twin: {PROBE_WINDOW_MS} ms runs at loads doubling from {PROBE_FIRST_PPS:.0} pkt/s until more than {}% was lost, last at {:.0} pkt/s",
                PROBE_OVERLOAD_LOSS * 100.0,
                p.requested_pps
            ),
            requested_pps: p.requested_pps,
            offered_pps: p.offered_pps,
            forwarded_pps: forwarded,
            // The twin's source is ideal: it has no capacity of its own.
            generator_capacity_pps: None,
            generator_limited: false,
        }))
    }

    fn teardown(&mut self) -> Result<(), ConfigError> {
        self.current = None;
        Ok(())
    }
}

/// The model of `conf` at `load_pps` for a window of `duration_s`: the window is set
/// before [`TwinConfiguration::at`], which sizes the egress ring to hold every packet
/// of it (set after, a window longer than the scenario's overflowed the ring: loss
/// veth never has, e.g. 24% at every load of a search's 0.4 s trials beside a 0.2 s
/// window).
fn at_for(conf: &TwinConfiguration, load_pps: f64, duration_s: f64) -> crate::SimConfig {
    let mut c = conf.clone();
    c.config.measurement.duration_ms = duration_s * 1e3;
    c.at(load_pps)
}

/// The first load of the twin's capacity probe, packets per second.
pub const PROBE_FIRST_PPS: f64 = 50_000.0;
/// Most loads the twin's probe tries (50 kpps doubled 12 times is 100 Mpps, the
/// search's limit).
const PROBE_DOUBLINGS: u32 = 12;
/// Loss above which a probe run counts as overloaded.
pub const PROBE_OVERLOAD_LOSS: f64 = 0.01;
/// The window of a probe run: its queues fill within milliseconds at twice the
/// capacity, so a short window gives the forwarded rate.
const PROBE_WINDOW_MS: f64 = 100.0;
/// The warm-up of a probe run, at most.
const PROBE_WARMUP_MS: f64 = 50.0;

/// Each search trial one run of the configuration at the load, for the trial's
/// duration, with the plan's first seed plus the search's index (MLRsearch's repeats
/// see different arrivals, as the lab's see different noise).
impl<F: RunMany> PacketTestbed for TwinPackets<'_, F> {
    type Error = ConfigError;

    fn search_trial(
        &mut self,
        load_pps: f64,
        duration_s: f64,
        search: u32,
    ) -> Result<Option<MeasuredTrial>, ConfigError> {
        let config = at_for(self.current()?, load_pps, duration_s);
        let wall_s = (config.measurement.warmup_ms + config.measurement.duration_ms) / 1e3;
        let seed = self
            .seeds
            .first()
            .copied()
            .unwrap_or(1)
            .wrapping_add(u64::from(search));
        let mut points = (self.run_many)(&[(config, seed, PointRole::Search)])?;
        if points.is_empty() {
            return Ok(None);
        }
        let mut point = points.remove(0);
        point.repeat = search;
        Ok(Some(MeasuredTrial {
            point,
            // The twin has no other tenants: nothing takes its CPUs away.
            disturbance: Default::default(),
            wall_s,
        }))
    }
}

/// Runs one configuration of `plan` through the experiment loop: its sweep (every
/// load, every repeat's seed, in the lab's order) and, if the plan asks, its search.
/// Returns the points (sweep, then search trials) and the search's answer (indexes
/// into the points).
pub fn run_configuration(
    plan: &TwinPlan,
    conf: &TwinConfiguration,
    run_many: impl RunMany,
) -> Result<(Vec<PointResult>, Option<MaxThroughput>), ConfigError> {
    let mut testbed = TwinPackets::new(plan, run_many);
    let outcome = configuration::run(&mut testbed, conf, &plan_of(plan))?;
    Ok((outcome.result.points, outcome.result.max_throughput))
}

/// Runs (model, seed) pairs on the twin spread over the machine's CPUs; the results
/// keep their order. Each run is single-threaded and independent, so a batch scales
/// with the CPUs.
pub fn run_side_by_side(
    batch: &[(SimConfig, u64)],
    profile: &Profile,
) -> Result<Vec<SimResult>, ConfigError> {
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get());
    let chunk = batch.len().div_ceil(workers).max(1);
    std::thread::scope(|scope| {
        let handles: Vec<_> = batch
            .chunks(chunk)
            .map(|part| {
                scope.spawn(move || {
                    part.iter()
                        .map(|(c, seed)| crate::try_run(c, profile, *seed))
                        .collect::<Result<Vec<_>, _>>()
                })
            })
            .collect();
        let mut results = Vec::with_capacity(batch.len());
        for handle in handles {
            let part = handle.join().map_err(|_| {
                ConfigError::new("(twin)", "(run)", "a twin worker thread panicked")
            })??;
            results.extend(part);
        }
        Ok(results)
    })
}

/// The profile's parameters with their values and sources, as settings of a
/// configuration (so the record's JSON and the report carry them): one pair per
/// parameter, `source: <parameter>` = `<value> (<kind>: <reference>; <detail>)`.
pub fn provenance_pairs(profile: &Profile) -> Vec<(String, String)> {
    profile
        .parameters()
        .into_iter()
        .map(|(key, value)| {
            (
                format!("source: {key}"),
                profile.provenance_text(key, value),
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The twin's probe doubles its load until the model loses more than 1%, and
    /// takes what was forwarded there; the range above it is the experiment's.
    #[test]
    fn the_probe_doubles_until_overloaded_and_takes_the_forwarded_rate() {
        let text = napilab_core::scenario::DEFAULT_SCENARIO;
        let s = napilab_core::scenario::parse(text, "default.toml", Some(2)).expect("parses");
        let plan = crate::from_scenario::plan(&s, "default.toml").expect("maps");
        let capacity = 730_000.0;
        let mut asked = Vec::new();
        let run_many = |batch: &[(SimConfig, u64, PointRole)]| {
            Ok(batch
                .iter()
                .map(|(c, _, role)| {
                    let load = c.traffic.rate_pps;
                    asked.push((load, c.measurement.duration_ms));
                    let secs = c.measurement.duration_ms / 1e3;
                    napilab_testkit::synthetic_point(
                        *role,
                        load,
                        load,
                        secs,
                        (load * secs) as u64,
                        (load.min(capacity) * secs) as u64,
                    )
                })
                .collect())
        };
        let mut twin = TwinPackets::new(&plan, run_many);
        twin.build(&plan.configurations[0]).expect("builds");
        let Probed::Measured(p) = twin.probe_capacity().expect("probes") else {
            panic!("the twin's probe is never stopped");
        };
        // 50k, 100k, 200k, 400k pass; 800k loses 8.75%.
        assert_eq!(p.requested_pps, 800_000.0);
        assert!((p.forwarded_pps - capacity).abs() < 1.0, "{p:?}");
        assert_eq!(p.generator_capacity_pps, None);
        drop(twin);
        assert_eq!(asked.len(), 5);
        assert!(asked.iter().all(|(_, ms)| *ms == PROBE_WINDOW_MS));
    }
}
