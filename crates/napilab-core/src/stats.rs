//! Averages over intervals, shared by the explain rules and the summary tables.

use crate::metric::Metric;
use crate::observation::{CpuInterval, Interval, Observation};

/// Duration-weighted mean of a metric over the intervals that have it, with the indexes
/// of those intervals. Keeps the unit, source and derivation of the first value.
pub fn mean_over<'a>(
    intervals: impl Iterator<Item = (&'a Interval, Option<&'a Metric>)>,
) -> Option<(Metric, Vec<usize>)> {
    let mut sum = 0.0;
    let mut weight = 0.0;
    let mut first: Option<&Metric> = None;
    let mut used = Vec::new();
    for (interval, metric) in intervals {
        let Some(metric) = metric else { continue };
        if interval.duration_s <= 0.0 || !metric.value.is_finite() {
            continue;
        }
        sum += metric.value * interval.duration_s;
        weight += interval.duration_s;
        first.get_or_insert(metric);
        used.push(interval.index);
    }
    let first = first?;
    (weight > 0.0).then(|| {
        let mut mean = first.clone();
        mean.value = sum / weight;
        (mean, used)
    })
}

/// Mean of one per-CPU metric for `cpu`.
pub fn cpu_mean(
    observation: &Observation,
    cpu: u32,
    pick: impl Fn(&CpuInterval) -> Option<&Metric>,
) -> Option<(Metric, Vec<usize>)> {
    mean_over(
        observation
            .intervals
            .iter()
            .map(|i| (i, i.cpu(cpu).and_then(&pick))),
    )
}

/// CPUs present in any interval, sorted.
pub fn cpus(observation: &Observation) -> Vec<u32> {
    let mut cpus: Vec<u32> = observation
        .intervals
        .iter()
        .flat_map(|i| i.cpus.iter().map(|c| c.cpu))
        .collect();
    cpus.sort_unstable();
    cpus.dedup();
    cpus
}

pub use crate::units::short;

/// Sum starting from +0.0. `Iterator::sum` for f64 starts from -0.0, so an empty sum
/// would print as "-0.0".
pub fn sum(values: impl IntoIterator<Item = f64>) -> f64 {
    values.into_iter().fold(0.0, |a, b| a + b)
}
