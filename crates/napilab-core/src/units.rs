//! Units of the numbers napilab reports. Rates are always per second of wall time.

use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Unit {
    /// Events per second (IRQs, softirqs, polls).
    PerSecond,
    /// Packets per second.
    PacketsPerSecond,
    /// Bits per second.
    BitsPerSecond,
    /// A share of one CPU's time, 0.0 to 1.0.
    CpuFraction,
    /// Packets handled per event (per softirq, per IRQ).
    PacketsPerEvent,
    /// CPUs (sum of CPU fractions) per Mbit/s of traffic, as in the access-point study.
    CpuPerMbps,
    /// A plain count within one interval.
    Count,
    /// A duration or delay, ns (a wake-up's wait, a kernel parameter in ns).
    Nanoseconds,
}

impl Unit {
    /// Short suffix for tables.
    pub fn suffix(self) -> &'static str {
        match self {
            Unit::PerSecond => "/s",
            Unit::PacketsPerSecond => "pkt/s",
            Unit::BitsPerSecond => "bit/s",
            Unit::CpuFraction => "cpu",
            Unit::PacketsPerEvent => "pkt/ev",
            Unit::CpuPerMbps => "cpu/Mbit/s",
            Unit::Count => "",
            Unit::Nanoseconds => "ns",
        }
    }
}

/// Formats a number for titles and tables: 12345.6 -> "12.3k".
pub fn short(value: f64) -> String {
    if value >= 1e6 {
        format!("{:.2}M", value / 1e6)
    } else if value >= 1e3 {
        format!("{:.1}k", value / 1e3)
    } else {
        format!("{value:.1}")
    }
}
