//! Turning a configuration's points into plot series: points of one requested load are
//! grouped (repeats averaged), observations are averaged over their intervals.

use napilab_core::stats::{cpu_mean, mean_over};
use napilab_core::trace::CpuTraceTime;
use napilab_core::{
    ConfigurationResult, CpuInterval, Metric, Observation, PointResult, PointRole, Source,
};

/// Duration-weighted mean of a CPU's busy share (everything but idle and iowait), with
/// the source of /proc/stat's times (usually `tick`).
pub fn cpu_busy(obs: &Observation, cpu: u32) -> Option<Metric> {
    let (mut sum, mut weight, mut used) = (0.0, 0.0, 0);
    let mut first: Option<Metric> = None;
    for interval in &obs.intervals {
        let Some(t) = interval.cpu(cpu).and_then(|c| c.time.as_ref()) else {
            continue;
        };
        let busy = t.busy();
        if interval.duration_s <= 0.0 || !busy.is_finite() {
            continue;
        }
        sum += busy * interval.duration_s;
        weight += interval.duration_s;
        used += 1;
        first.get_or_insert_with(|| {
            // One tick-sampled share makes the sum tick-sampled.
            let shares = [&t.user, &t.nice, &t.system, &t.irq, &t.softirq, &t.steal];
            let mut m = t.user.clone();
            if shares.iter().any(|s| s.source == Source::Tick) {
                m.source = Source::Tick;
            }
            m
        });
    }
    let mut mean = first?;
    if weight <= 0.0 {
        return None;
    }
    mean.value = sum / weight;
    mean.derived = Some(format!(
        "user+nice+system+irq+softirq+steal of /proc/stat, mean over {used} interval(s)"
    ));
    Some(mean)
}

/// Duration-weighted mean of one CPU's traced (or modelled) time share over the
/// intervals that carry a trace.
pub fn traced_cpu_time(
    obs: &Observation,
    cpu: u32,
    pick: impl Fn(&CpuTraceTime) -> &Metric,
) -> Option<Metric> {
    let rows = obs.intervals.iter().map(|i| {
        let row = i
            .trace
            .as_ref()
            .and_then(|t| t.cpus.iter().find(|c| c.cpu == cpu));
        (i, row.map(&pick))
    });
    mean_over(rows).map(|(m, _)| m)
}

/// Duration-weighted mean CPU (in cores) each stage of the stage profile used, over the
/// intervals that carry one: (stage, cores) in the order the profile lists them.
pub fn stage_cores(obs: &Observation) -> Vec<(String, f64)> {
    let mut stages: Vec<String> = Vec::new();
    for i in &obs.intervals {
        for c in i.trace.iter().flat_map(|t| &t.stage_costs) {
            if !stages.contains(&c.stage) {
                stages.push(c.stage.clone());
            }
        }
    }
    stages
        .into_iter()
        .filter_map(|stage| {
            let (m, _) = mean_over(obs.intervals.iter().filter_map(|i| {
                let t = i.trace.as_ref()?;
                Some((
                    i,
                    t.stage_costs
                        .iter()
                        .find(|c| c.stage == stage)
                        .map(|c| &c.cpus),
                ))
            }))?;
            Some((stage, m.value))
        })
        .collect()
}

/// Points measured at one requested load.
pub struct LoadGroup<'a> {
    pub requested_pps: f64,
    pub points: Vec<&'a PointResult>,
}

impl LoadGroup<'_> {
    /// Mean over the group's points that have the value.
    pub fn mean(&self, mut f: impl FnMut(&PointResult) -> Option<f64>) -> Option<f64> {
        let values: Vec<f64> = self
            .points
            .iter()
            .filter_map(|p| f(p))
            .filter(|v| v.is_finite())
            .collect();
        (!values.is_empty()).then(|| values.iter().sum::<f64>() / values.len() as f64)
    }

    pub fn offered(&self) -> f64 {
        self.mean(|p| Some(p.offered_pps)).unwrap_or(0.0)
    }

    /// Mean of a per-CPU observation metric, with the metric's source.
    pub fn cpu_metric(
        &self,
        cpu: u32,
        pick: impl Fn(&CpuInterval) -> Option<&Metric> + Copy,
    ) -> Option<(f64, String)> {
        let mut source = None;
        let value = self.mean(|p| {
            let (m, _) = cpu_mean(p.observation.as_ref()?, cpu, pick)?;
            source.get_or_insert_with(|| m.source.as_str().to_string());
            Some(m.value)
        })?;
        Some((value, source.unwrap_or_default()))
    }

    /// Mean of a traced (or modelled) per-CPU time share, with its source.
    pub fn traced_cpu(
        &self,
        cpu: u32,
        pick: impl Fn(&CpuTraceTime) -> &Metric + Copy,
    ) -> Option<(f64, String)> {
        let mut source = None;
        let value = self.mean(|p| {
            let m = traced_cpu_time(p.observation.as_ref()?, cpu, pick)?;
            source.get_or_insert_with(|| m.source.as_str().to_string());
            Some(m.value)
        })?;
        Some((value, source.unwrap_or_default()))
    }

    pub fn cpu_busy(&self, cpu: u32) -> Option<(f64, String)> {
        let mut source = None;
        let value = self.mean(|p| {
            let m = cpu_busy(p.observation.as_ref()?, cpu)?;
            source.get_or_insert_with(|| m.source.as_str().to_string());
            Some(m.value)
        })?;
        Some((value, source.unwrap_or_default()))
    }
}

/// The sweep points of a configuration grouped by requested load, in increasing load.
/// A configuration measured only by the throughput search uses its search points.
pub fn load_groups(conf: &ConfigurationResult) -> Vec<LoadGroup<'_>> {
    let has_sweep = conf.points.iter().any(|p| p.role == PointRole::Sweep);
    let mut groups: Vec<LoadGroup<'_>> = Vec::new();
    for p in &conf.points {
        if has_sweep && p.role != PointRole::Sweep {
            continue;
        }
        match groups
            .iter_mut()
            .find(|g| g.requested_pps == p.requested_pps)
        {
            Some(g) => g.points.push(p),
            None => groups.push(LoadGroup {
                requested_pps: p.requested_pps,
                points: vec![p],
            }),
        }
    }
    groups.sort_by(|a, b| a.requested_pps.total_cmp(&b.requested_pps));
    groups
}

/// CPUs present in any observation of the configuration, sorted.
pub fn conf_cpus(conf: &ConfigurationResult) -> Vec<u32> {
    let mut cpus: Vec<u32> = conf
        .points
        .iter()
        .filter_map(|p| p.observation.as_ref())
        .flat_map(napilab_core::stats::cpus)
        .collect();
    cpus.sort_unstable();
    cpus.dedup();
    cpus
}

/// Class names in order of first appearance.
pub fn class_names(conf: &ConfigurationResult) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for p in &conf.points {
        for c in &p.classes {
            if !names.contains(&c.name) {
                names.push(c.name.clone());
            }
        }
    }
    names
}
