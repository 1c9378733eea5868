//! Platform profiles: what work costs on one machine. Loaded from TOML files under
//! `profiles/`, each with comments saying which published figure fixed which number
//! (design.md principle 6).

use serde::{Deserialize, Serialize};

use crate::config::ConfigError;

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    pub name: String,
    #[serde(default)]
    pub description: String,
    /// Core clock; cycles below are divided by it.
    pub cpu_ghz: f64,
    pub stage_cycles: StageCycles,
    pub fixed_cycles: FixedCycles,
    pub latency_ns: LatencyNs,
}

/// Cycles per packet of each stage of domain.md 5.1's decomposition.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct StageCycles {
    /// "Poll function": driver RX work per packet (descriptor, skb, GRO hand-off).
    pub poll: f64,
    /// "IP stack": `ip_rcv` up to `__dev_queue_xmit`.
    pub ip_stack: f64,
    /// "Init Xmit": `__dev_queue_xmit` onwards, driver transmit included.
    pub xmit: f64,
    /// "TX Qdisc": extra cost of enqueue plus dequeue when the qdisc is not bypassed.
    pub qdisc: f64,
    /// "TX Reclaim": per completed TX descriptor.
    pub tx_reclaim: f64,
    /// RPS steering on the receiving CPU (hash, `enqueue_to_backlog`), per packet.
    /// Only used when a queue has `rps_cpus`; absent means 0.
    #[serde(default)]
    pub rps: f64,
    /// Cycles per received packet outside the stage map: a stage decomposition built
    /// from sampled call stacks (docs/studies.md#ap-stages) covers only part
    /// of a core's cycles, and the rest, calibrated against the published total cycles
    /// per core, is charged here (on the polling CPU, with the poll stage), so the
    /// stage figures stay a breakdown. Absent means 0.
    #[serde(default)]
    pub unmapped: f64,
}

/// Cycles per event rather than per packet.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct FixedCycles {
    /// "Init RX-IRQ": entry, handler (mask, napi_schedule), exit, per hard IRQ.
    pub hardirq: f64,
    /// "RX SoftIRQ": `__do_softirq` plus `net_rx_action` outside the polls, per run.
    pub softirq: f64,
    /// Per call of a driver poll function, outside the per-packet work.
    pub poll: f64,
    /// Per `net_tx_action` run ("TX SoftIRQ").
    #[serde(default)]
    pub tx_softirq: f64,
    /// Per switch between two threads on a CPU.
    #[serde(default)]
    pub context_switch: f64,
    /// Cache and TLB refill paid by the first work after the CPU sat idle (the "cache
    /// penalty after interruptions").
    #[serde(default)]
    pub idle_exit: f64,
    /// Cache refill paid by a thread (application, ksoftirqd, NAPI kthread) when it
    /// resumes after hard-IRQ or inline-softirq work interrupted it.
    #[serde(default)]
    pub after_interrupt: f64,
}

/// Delays that take time but no CPU.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct LatencyNs {
    /// From the NIC raising an IRQ to the handler starting on an awake CPU.
    pub irq_delivery: u64,
    /// Extra wake-up delay when the CPU was idle (C-state exit), no CPU time charged.
    #[serde(default)]
    pub idle_wakeup: u64,
    /// From the last bit on the ingress wire to the descriptor being visible to the poll.
    pub rx_dma: u64,
    /// From the driver's doorbell to the first bit on the egress wire.
    pub tx_dma: u64,
}

/// Profiles shipped with the crate, by name.
pub const BUILTIN: &[(&str, &str)] = &[
    (
        "router-e3-1230-ixgbe",
        include_str!("../profiles/router-e3-1230-ixgbe.toml"),
    ),
    (
        "ap-cortex-a72-bcmgenet",
        include_str!("../profiles/ap-cortex-a72-bcmgenet.toml"),
    ),
];

impl Profile {
    pub fn from_toml_str(text: &str, file: &str) -> Result<Self, ConfigError> {
        let p: Profile = toml::from_str(text)
            .map_err(|e| ConfigError::new(file, "(parse)", e.to_string().trim().to_string()))?;
        p.validate(file)?;
        Ok(p)
    }

    pub fn from_file(path: &std::path::Path) -> Result<Self, ConfigError> {
        let name = path.display().to_string();
        let text = std::fs::read_to_string(path)
            .map_err(|e| ConfigError::new(&name, "(file)", e.to_string()))?;
        Self::from_toml_str(&text, &name)
    }

    /// A shipped profile by name (see [`BUILTIN`]).
    pub fn builtin(name: &str) -> Result<Self, ConfigError> {
        let (n, text) = BUILTIN
            .iter()
            .find(|(n, _)| *n == name)
            .ok_or_else(|| ConfigError::new(name, "(name)", "no built-in profile of that name"))?;
        Self::from_toml_str(text, &format!("profiles/{n}.toml"))
    }

    pub fn validate(&self, file: &str) -> Result<(), ConfigError> {
        if !(self.cpu_ghz > 0.0 && self.cpu_ghz.is_finite()) {
            return Err(ConfigError::new(file, "cpu_ghz", "must be positive"));
        }
        let s = &self.stage_cycles;
        let f = &self.fixed_cycles;
        let checks = [
            ("stage_cycles.poll", s.poll),
            ("stage_cycles.ip_stack", s.ip_stack),
            ("stage_cycles.xmit", s.xmit),
            ("stage_cycles.qdisc", s.qdisc),
            ("stage_cycles.tx_reclaim", s.tx_reclaim),
            ("stage_cycles.rps", s.rps),
            ("stage_cycles.unmapped", s.unmapped),
            ("fixed_cycles.hardirq", f.hardirq),
            ("fixed_cycles.softirq", f.softirq),
            ("fixed_cycles.poll", f.poll),
            ("fixed_cycles.tx_softirq", f.tx_softirq),
            ("fixed_cycles.context_switch", f.context_switch),
            ("fixed_cycles.idle_exit", f.idle_exit),
            ("fixed_cycles.after_interrupt", f.after_interrupt),
        ];
        for (field, v) in checks {
            if !(v >= 0.0 && v.is_finite()) {
                return Err(ConfigError::new(
                    file,
                    field,
                    "must be a finite number >= 0",
                ));
            }
        }
        Ok(())
    }

    /// Nanoseconds for a number of cycles at this profile's clock.
    pub fn ns(&self, cycles: f64) -> u64 {
        (cycles / self.cpu_ghz).round() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_profiles_parse() {
        for (name, _) in BUILTIN {
            let p = Profile::builtin(name).expect("builtin profile parses");
            assert!(p.cpu_ghz > 0.0);
        }
        assert!(Profile::builtin("nope").is_err());
    }

    #[test]
    fn bad_field_is_named() {
        let (_, text) = BUILTIN[0];
        let bad = text.replacen("cpu_ghz = 3.2", "cpu_ghz = -1", 1);
        let e = Profile::from_toml_str(&bad, "p.toml").expect_err("must be rejected");
        assert_eq!((e.file.as_str(), e.field.as_str()), ("p.toml", "cpu_ghz"));
    }
}
