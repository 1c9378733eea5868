//! What a setting is (its [`Key`]) and what it holds (its [`Value`]).
//!
//! Keys name the things a setting belongs to by what survives reconfiguration: a
//! device by name *and* ifindex (a recreated device has a new ifindex), a queue by its
//! index, and a NAPI instance or NAPI kthread by the RX queue it serves, never by NAPI
//! id or PID (both change when GRO is toggled or the link flaps; docs/tune.md).

use std::fmt;

use serde::{Deserialize, Serialize};

/// The family of a setting; each has one [`crate::knobs::Knob`] implementation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    /// `net.core.<attr>` sysctl (global: visible only in the initial network namespace).
    Sysctl,
    /// A parameter of the `haltpoll` cpuidle governor of a KVM guest
    /// (`/sys/module/haltpoll/parameters/<attr>`, attr `guest_halt_poll_ns`; global).
    Cpuidle,
    /// `/sys/class/net/<dev>/<attr>`: `threaded`, `gro_flush_timeout`,
    /// `napi_defer_hard_irqs`.
    Device,
    /// `/sys/class/net/<dev>/queues/rx-<q>/<attr>`: `rps_cpus`, `rps_flow_cnt`.
    RxQueue,
    /// `/sys/class/net/<dev>/queues/tx-<q>/<attr>`: `xps_cpus`.
    TxQueue,
    /// Per-NAPI netdev netlink attribute of the instance serving RX queue `queue`:
    /// `defer-hard-irqs`, `gro-flush-timeout`, `irq-suspend-timeout`, `threaded`.
    Napi,
    /// The `napi/<dev>-<id>` kthread of the instance serving RX queue `queue`:
    /// `affinity` or `sched`.
    Thread,
    /// `/proc/irq/<irq>/smp_affinity_list` (attr `affinity`).
    Irq,
    /// ethtool coalescing parameter (`rx-usecs`, `adaptive-rx`, ...).
    Coalesce,
    /// ethtool ring size (`rx`, `tx`).
    Rings,
    /// ethtool channel count (`rx-count`, `tx-count`, `combined-count`, ...).
    Channels,
    /// Offload feature: `gro`, `gso`, `tso`.
    Feature,
    /// Egress root qdisc (attr `root`).
    Qdisc,
}

impl Kind {
    /// One setting for the whole host, named by no device.
    pub fn is_global(self) -> bool {
        matches!(self, Kind::Sysctl | Kind::Cpuidle)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Sysctl => "sysctl",
            Kind::Cpuidle => "cpuidle",
            Kind::Device => "device",
            Kind::RxQueue => "rx-queue",
            Kind::TxQueue => "tx-queue",
            Kind::Napi => "napi",
            Kind::Thread => "thread",
            Kind::Irq => "irq",
            Kind::Coalesce => "coalesce",
            Kind::Rings => "rings",
            Kind::Channels => "channels",
            Kind::Feature => "feature",
            Kind::Qdisc => "qdisc",
        }
    }
}

/// One setting on one object.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Key {
    pub kind: Kind,
    /// Which setting of that kind (`netdev_budget`, `rps_cpus`, `defer-hard-irqs`, ...).
    pub attr: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dev: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ifindex: Option<u32>,
    /// RX or TX queue index (for `napi` and `thread`: the RX queue the instance serves).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub irq: Option<u32>,
}

impl Key {
    pub fn global(kind: Kind, attr: &str) -> Key {
        Key {
            kind,
            attr: attr.to_string(),
            dev: None,
            ifindex: None,
            queue: None,
            irq: None,
        }
    }

    pub fn dev(&self) -> &str {
        self.dev.as_deref().unwrap_or("?")
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let dev = self.dev();
        let q = self.queue.unwrap_or(0);
        match self.kind {
            Kind::Sysctl => write!(f, "sysctl net.core.{}", self.attr),
            Kind::Cpuidle => write!(f, "cpuidle haltpoll {}", self.attr),
            Kind::Device => write!(f, "{dev} {}", self.attr),
            Kind::RxQueue => write!(f, "{dev} rx-{q} {}", self.attr),
            Kind::TxQueue => write!(f, "{dev} tx-{q} {}", self.attr),
            Kind::Napi => write!(f, "{dev} napi(rx-{q}) {}", self.attr),
            Kind::Thread => write!(f, "{dev} napi(rx-{q}) thread {}", self.attr),
            Kind::Irq => match self.queue {
                Some(q) => write!(
                    f,
                    "irq {} ({dev} queue {q}) {}",
                    self.irq.unwrap_or(0),
                    self.attr
                ),
                None => write!(f, "irq {} ({dev}) {}", self.irq.unwrap_or(0), self.attr),
            },
            Kind::Coalesce | Kind::Rings | Kind::Channels | Kind::Feature | Kind::Qdisc => {
                write!(f, "{dev} {} {}", self.kind.as_str(), self.attr)
            }
        }
    }
}

/// A setting's value.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Value {
    Num(u64),
    /// A CPU set (masks and affinity lists alike), sorted, no duplicates.
    Cpus(Vec<u32>),
    /// Scheduling policy (`SCHED_OTHER`, `SCHED_FIFO`, `SCHED_RR`, `SCHED_BATCH`,
    /// `SCHED_IDLE`) and real-time priority (0 for the non-RT policies).
    Sched {
        policy: String,
        priority: u32,
    },
    Text(String),
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Num(n) => write!(f, "{n}"),
            Value::Cpus(c) if c.is_empty() => write!(f, "none"),
            Value::Cpus(c) => write!(f, "cpus {}", cpu_list(c)),
            Value::Sched { policy, priority } if *priority == 0 => write!(f, "{policy}"),
            Value::Sched { policy, priority } => write!(f, "{policy} {priority}"),
            Value::Text(t) => write!(f, "{t}"),
        }
    }
}

/// `[0,1,2,5]` -> `0-2,5`.
pub fn cpu_list(cpus: &[u32]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < cpus.len() {
        let start = cpus[i];
        let mut end = start;
        while i + 1 < cpus.len() && cpus[i + 1] == end + 1 {
            i += 1;
            end = cpus[i];
        }
        out.push(if start == end {
            start.to_string()
        } else {
            format!("{start}-{end}")
        });
        i += 1;
    }
    out.join(",")
}

/// `0-2,5` -> `[0,1,2,5]`; `none` or empty -> `[]`.
pub fn parse_cpus(s: &str) -> Result<Vec<u32>, String> {
    let s = s.trim();
    if s.is_empty() || s == "none" {
        return Ok(Vec::new());
    }
    let mut cpus = Vec::new();
    for part in s.split(',') {
        let part = part.trim();
        let bad = || format!("{part:?} is not a CPU number or range (e.g. 0,2-3)");
        match part.split_once('-') {
            Some((a, b)) => {
                let a: u32 = a.trim().parse().map_err(|_| bad())?;
                let b: u32 = b.trim().parse().map_err(|_| bad())?;
                if a > b || b - a > 4096 {
                    return Err(bad());
                }
                cpus.extend(a..=b);
            }
            None => cpus.push(part.parse().map_err(|_| bad())?),
        }
    }
    cpus.sort_unstable();
    cpus.dedup();
    Ok(cpus)
}

/// A CPU set as the hex mask sysfs `rps_cpus`/`xps_cpus` take: 32-bit groups,
/// most significant first, separated by commas.
pub fn cpu_mask(cpus: &[u32]) -> String {
    let groups = cpus.iter().max().map_or(1, |m| *m as usize / 32 + 1);
    let mut words = vec![0u32; groups];
    for c in cpus {
        words[*c as usize / 32] |= 1 << (c % 32);
    }
    words
        .iter()
        .rev()
        .map(|w| format!("{w:08x}"))
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_round_trip() {
        assert_eq!(cpu_list(&[0, 1, 2, 5]), "0-2,5");
        assert_eq!(parse_cpus("0-2,5").ok(), Some(vec![0, 1, 2, 5]));
        assert_eq!(parse_cpus("none").ok(), Some(vec![]));
        assert!(parse_cpus("x").is_err());
        assert!(parse_cpus("3-1").is_err());
    }

    #[test]
    fn masks_use_32_bit_groups() {
        assert_eq!(cpu_mask(&[]), "00000000");
        assert_eq!(cpu_mask(&[0, 1]), "00000003");
        assert_eq!(cpu_mask(&[33]), "00000002,00000000");
    }

    #[test]
    fn keys_display_what_they_name() {
        let mut k = Key::global(Kind::Napi, "defer-hard-irqs");
        k.dev = Some("vb".into());
        k.queue = Some(1);
        assert_eq!(k.to_string(), "vb napi(rx-1) defer-hard-irqs");
        assert_eq!(
            Key::global(Kind::Sysctl, "dev_weight").to_string(),
            "sysctl net.core.dev_weight"
        );
    }
}
