//! OpenMetrics text export of a run, for Prometheus-compatible tools: every number the
//! store keeps for a point (the metric rows of [`point_metrics`]) becomes one gauge
//! sample, and every run's maximum throughput one more. The exposition is rendered by
//! `prometheus-client`, so escaping, `# TYPE`/`# HELP` lines and the `# EOF` terminator
//! follow the OpenMetrics specification.
//!
//! Families are named `napilab_<name>_<unit>` (e.g. `napilab_time_busy_cpu_fraction`);
//! labels say which run, configuration and point a sample belongs to, what it is about
//! (`scope`: `cpu0`, a device, `class:rt`, ...) and its `source` (proc, tick, trace,
//! sample, model), so the provenance survives the export (docs/architecture.md principle 1).

use std::collections::BTreeMap;
use std::sync::atomic::AtomicU64;

use anyhow::{Context, Result};
use napilab_core::RunRecord;
use prometheus_client::encoding::{text::encode, EncodeLabelSet};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::metrics::point_metrics;

type F64Gauge = Gauge<f64, AtomicU64>;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PointLabels {
    run: String,
    kind: String,
    configuration: String,
    /// The point's position within its configuration, from 0.
    point: u32,
    role: String,
    requested_pps: u64,
    repeat: u32,
    scope: String,
    source: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ConfigurationLabels {
    run: String,
    kind: String,
    configuration: String,
    /// How the maximum-throughput search ended (`converged`, ...).
    stopped: String,
}

/// `name` made a valid metric-name part: letters, digits and `_` only, lower case.
fn metric_name(parts: &[&str]) -> String {
    let mut name = String::from("napilab");
    for part in parts {
        name.push('_');
        for c in part.chars() {
            name.push(if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '_'
            });
        }
    }
    name
}

/// The run as an OpenMetrics text exposition.
pub fn run_openmetrics(run: &RunRecord) -> Result<String> {
    let kind = format!("{:?}", run.kind).to_lowercase();
    // (family name) -> (help, family); BTreeMap so the output order is stable.
    let mut families: BTreeMap<String, (String, Family<PointLabels, F64Gauge>)> = BTreeMap::new();
    for conf in &run.configurations {
        for (position, point) in conf.points.iter().enumerate() {
            for row in point_metrics(run.kind, point) {
                let name = metric_name(&[&row.name, &row.unit]);
                let (_, family) = families.entry(name).or_insert_with(|| {
                    let help = match &row.derived {
                        Some(how) => format!("{} ({}), derived: {how}", row.name, row.unit),
                        None => format!("{} ({})", row.name, row.unit),
                    };
                    (help, Family::default())
                });
                let labels = PointLabels {
                    run: run.run_id.clone(),
                    kind: kind.clone(),
                    configuration: conf.name.clone(),
                    point: position as u32,
                    role: format!("{:?}", point.role).to_lowercase(),
                    requested_pps: point.requested_pps.round().max(0.0) as u64,
                    repeat: point.repeat,
                    scope: row.scope.clone(),
                    source: row.source.clone(),
                };
                family.get_or_create(&labels).set(row.value);
            }
        }
    }
    let max_family = Family::<ConfigurationLabels, F64Gauge>::default();
    for conf in &run.configurations {
        if let Some(max) = &conf.max_throughput {
            max_family
                .get_or_create(&ConfigurationLabels {
                    run: run.run_id.clone(),
                    kind: kind.clone(),
                    configuration: conf.name.clone(),
                    stopped: max.stopped.clone(),
                })
                .set(max.pps);
        }
    }
    let mut registry = Registry::default();
    for (name, (help, family)) in families {
        registry.register(name, help, family);
    }
    registry.register(
        "napilab_max_throughput_packets_per_second",
        "highest offered load with loss at or below the run's threshold (RFC 2544-style search)",
        max_family,
    );
    let mut text = String::new();
    encode(&mut text, &registry).context("cannot encode the OpenMetrics exposition")?;
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_sanitised() {
        assert_eq!(
            metric_name(&["time.busy", "cpu_fraction"]),
            "napilab_time_busy_cpu_fraction"
        );
        assert_eq!(metric_name(&["p99.9", "us"]), "napilab_p99_9_us");
    }
}
