//! A number with its unit and its origin (docs/architecture.md principle 1).

use serde::{Deserialize, Serialize};

use crate::units::Unit;

/// Where a number came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    /// A kernel counter read from /proc, /sys or netlink: exact event counts.
    Proc,
    /// Tick-sampled CPU accounting: the kernel charged whole ticks to whatever context
    /// the timer interrupt found running. Wrong for short softirq bursts (misreading 3).
    Tick,
    /// Measured by BPF tracepoints.
    Trace,
    /// Estimated from perf sampling.
    Sample,
    /// Computed by the twin.
    Model,
}

impl Source {
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Proc => "proc",
            Source::Tick => "tick",
            Source::Trace => "trace",
            Source::Sample => "sample",
            Source::Model => "model",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Metric {
    pub value: f64,
    pub unit: Unit,
    pub source: Source,
    /// For a derived number: how it was computed from its inputs, e.g.
    /// `"softnet processed / NET_RX softirqs"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub derived: Option<String>,
}

impl Metric {
    pub fn new(value: f64, unit: Unit, source: Source) -> Self {
        Metric {
            value,
            unit,
            source,
            derived: None,
        }
    }

    pub fn derived(value: f64, unit: Unit, source: Source, how: impl Into<String>) -> Self {
        Metric {
            value,
            unit,
            source,
            derived: Some(how.into()),
        }
    }

    /// A rate from a counter delta over `seconds`; `None` for an empty interval.
    pub fn rate(delta: u64, seconds: f64, unit: Unit, source: Source) -> Option<Self> {
        (seconds > 0.0).then(|| Metric::new(delta as f64 / seconds, unit, source))
    }
}
