//! The hardware half of a profile (`[host]`, `[nic.ingress]`, `[nic.egress]`): what a
//! study's machine is, as opposed to what it is set to (the scenario's `[dut]` and
//! configurations). A profile with it describes a NIC machine, and the twin maps
//! scenarios onto that machine ([`crate::from_study`]); a profile without it is the veth
//! lab's ([`crate::from_scenario`]). docs/sim.md "Scenarios and hardware profiles" says
//! which field lives where and why.

use serde::{Deserialize, Serialize};

use crate::config::{
    ConfigError, FairScheduler, IrqMode, Moderation, SchedScaling, TickMode, TxCompletion,
};

/// The machine: CPUs, CONFIG_HZ, kernel.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct HostHardware {
    /// CPUs the twin models (the cores that do packet work).
    pub cpus: u32,
    /// CONFIG_HZ, a build-time constant of the kernel.
    pub hz: u32,
    /// Kernel version `major.minor` (selects version-dependent softirq rules).
    pub kernel: String,
    #[serde(default)]
    pub tick: TickMode,
    /// The fair scheduler's tunables: `log` as the kernel scales them with the CPU
    /// count, `none` (the default) the 1-CPU values.
    #[serde(default)]
    pub sched_scaling: SchedScaling,
    /// `cfs` (the default, what the study profiles were calibrated with) or `eevdf`.
    #[serde(default)]
    pub scheduler: FairScheduler,
}

/// The NICs: the receiving and the transmitting device.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct NicHardware {
    pub ingress: IngressNic,
    pub egress: EgressNic,
}

/// The receiving device as the driver sets it up.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct IngressNic {
    pub name: String,
    /// RX descriptors per ring.
    pub rx_ring_size: u32,
    /// Interrupt moderation (ethtool -C rx-usecs / rx-frames / adaptive-rx) as the
    /// study ran it, applied the way the NIC's driver does (`moderation`: `timer` or
    /// `ixgbe-itr`, see [`crate::config::Moderation`]). A profile says where each
    /// value comes from (driver source file and function, kernel version) in its
    /// provenance.
    #[serde(default)]
    pub rx_usecs: u32,
    #[serde(default)]
    pub rx_frames: u32,
    #[serde(default)]
    pub moderation: Moderation,
    #[serde(default)]
    pub adaptive_rx: bool,
    /// One RX queue per entry, its IRQ's CPU (the driver's and the study's affinity);
    /// a scenario's `napi_cpus` overrides it, more `topology.ingress_queues` than
    /// entries reuse them in turn.
    pub irq_cpus: Vec<u32>,
    /// The driver's NAPI weight.
    #[serde(default = "default_weight")]
    pub weight: u32,
    /// How the driver handles the device's interrupts (`hardirq` or `threaded`; the
    /// profile's provenance says which driver function requests them).
    #[serde(default, skip_serializing_if = "IrqMode::is_hardirq")]
    pub irq_mode: IrqMode,
}

fn default_weight() -> u32 {
    64
}

/// The transmitting device.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct EgressNic {
    pub name: String,
    #[serde(default = "default_tx_ring")]
    pub tx_ring_size: u32,
    /// Line rate, Mbit/s.
    pub link_mbps: f64,
    /// TX-completion coalescing (ethtool -C tx-usecs / tx-frames), applied as
    /// `moderation` says (with `ixgbe-itr`, `tx_usecs` is the ITR setting of the
    /// port's TxRx vectors: the port's rx-usecs in ixgbe).
    #[serde(default)]
    pub tx_usecs: u32,
    #[serde(default)]
    pub tx_frames: u32,
    #[serde(default)]
    pub moderation: Moderation,
    #[serde(default = "default_tx_work_limit")]
    pub tx_work_limit: u32,
    /// Who reclaims TX completions: the device's own vector (`tx_irq`) or the RX poll
    /// of a combined channel (`rx_napi`).
    #[serde(default)]
    pub completion: TxCompletion,
    /// How the driver handles the device's interrupts (as `nic.ingress.irq_mode`).
    #[serde(default, skip_serializing_if = "IrqMode::is_hardirq")]
    pub irq_mode: IrqMode,
}

fn default_tx_ring() -> u32 {
    512
}
fn default_tx_work_limit() -> u32 {
    256
}

impl HostHardware {
    pub fn validate(&self, file: &str) -> Result<(), ConfigError> {
        if !(1..=1024).contains(&self.cpus) {
            return Err(ConfigError::new(file, "host.cpus", "must be 1..=1024"));
        }
        if crate::config::parse_kernel(&self.kernel).is_none() {
            return Err(ConfigError::new(
                file,
                "host.kernel",
                "expected `major.minor`, e.g. \"6.8\"",
            ));
        }
        Ok(())
    }
}

impl NicHardware {
    pub fn validate(&self, host: &HostHardware, file: &str) -> Result<(), ConfigError> {
        let i = &self.ingress;
        if i.irq_cpus.is_empty() {
            return Err(ConfigError::new(
                file,
                "nic.ingress.irq_cpus",
                "give one CPU per RX queue",
            ));
        }
        if let Some(c) = i.irq_cpus.iter().find(|c| **c >= host.cpus) {
            return Err(ConfigError::new(
                file,
                "nic.ingress.irq_cpus",
                format!("CPU {c} does not exist (host.cpus = {})", host.cpus),
            ));
        }
        Ok(())
    }
}
