//! Platform profiles: what work costs on one machine. Loaded from TOML files under
//! `profiles/`, each with comments saying which published figure fixed which number
//! (docs/architecture.md principle 6).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::config::ConfigError;
use crate::hardware::{HostHardware, NicHardware};

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
    /// Per-packet costs of a tunnel's receive pipeline (configurations with a
    /// `[tunnel]`); absent: the profile cannot run one.
    #[serde(default)]
    pub tunnel_cycles: Option<TunnelCycles>,
    /// The costs of a threaded IRQ handler (a device with `irq_mode = "threaded"`);
    /// absent: the profile cannot run one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub irq_thread: Option<IrqThreadCosts>,
    /// Where each parameter's value comes from, by parameter path
    /// (`stage_cycles.poll`, `latency_ns.rx_dma`, ...; see [`Profile::parameters`]).
    #[serde(default)]
    pub provenance: BTreeMap<String, ParamSource>,
    /// The machine (CPUs, HZ, kernel); with `nic`, the profile describes a NIC machine
    /// and scenarios map onto it (crate::from_study). Absent: the veth lab.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<HostHardware>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nic: Option<NicHardware>,
    /// The host's stalls of each CPU, as a thread spinning there measured them
    /// (napilab-core `CpuStalls`, a lab run's `host.stalls`): the twin replays them
    /// on the CPU of the same number (docs/sim.md, "Host stalls"). Empty: a host that
    /// never takes a CPU away.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stalls: Vec<napilab_core::CpuStalls>,
    /// What a re-armed kernel timer's expiry costs each CPU, as napilab's timer probe
    /// measured it (napilab-core `TimerCost`, a lab run's `host.timer`): each expiry of
    /// a NAPI hrtimer on that CPU takes that long instead of the hard-IRQ cost
    /// (docs/sim.md, "A timer's expiry on a virtual machine"). Empty: every expiry costs
    /// `fixed_cycles.hardirq`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub timer: Vec<napilab_core::TimerCost>,
}

/// The source of one profile parameter, machine-readable (docs/sim.md, "Profiles...").
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ParamSource {
    pub kind: SourceKind,
    /// `published`: the study and its figure (`docs/studies.md#ap-5`, with the
    /// paper's table, figure or section there). `fitted`: the lab run and the command
    /// (`lab run 20261123-182646-fb51 by napilab sim calibrate ...`). `calibrated`:
    /// the published figures the value was fitted to. `assumed`: empty.
    #[serde(default)]
    pub reference: String,
    /// How the number follows from the reference, or, when assumed, why.
    pub detail: String,
}

#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum SourceKind {
    /// Taken from a published figure by arithmetic.
    Published,
    /// Fitted so the twin reproduces published figures.
    Calibrated,
    /// Fitted from a lab run of this machine.
    Fitted,
    /// No figure fixes it.
    Assumed,
}

impl SourceKind {
    pub fn as_str(self) -> &'static str {
        match self {
            SourceKind::Published => "published",
            SourceKind::Calibrated => "calibrated",
            SourceKind::Fitted => "fitted",
            SourceKind::Assumed => "assumed",
        }
    }
}

/// Cycles per packet of each stage of the access-point study's decomposition
/// (docs/studies.md#ap-stages).
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

/// Cycles per packet of WireGuard's receive pipeline (docs/studies.md#wireguard-study).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TunnelCycles {
    /// UDP receive and decapsulation in the RX softirq (`wg_packet_receive`, queueing
    /// on the peer and the decryption queue), on top of `stage_cycles.poll`.
    pub decap: f64,
    /// Decryption in the per-CPU worker (ChaCha20-Poly1305 of one packet, the
    /// worker's queue handling).
    pub decrypt: f64,
    /// GRO and delivery of one decrypted packet in the peer's NAPI poll, up to the
    /// receiving socket.
    pub gro: f64,
}

/// A threaded IRQ handler (`request_threaded_irq`): what the `irq/N-<dev>` thread costs
/// beyond the hard handler (`fixed_cycles.hardirq`) and its two context switches
/// (`fixed_cycles.context_switch` each).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct IrqThreadCosts {
    /// One run of the thread's handler outside the softirq it raises: the `irq_thread`
    /// loop, `irq_thread_fn`, the driver's thread function up to its `local_bh_enable`
    /// (for iwlwifi: `napi_schedule` and the vector's bookkeeping).
    pub handler_cycles: f64,
    /// From the hard handler's wake-up of the thread to the thread being runnable on
    /// its CPU, ns, no CPU time (0: at once, as a wake-up of a thread on the waking CPU
    /// is).
    #[serde(default)]
    pub wakeup_ns: u64,
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
    /// Per run of a NAPI kthread (charged when it is switched in, however many polls
    /// the run makes), beyond its polls: the wake-up, `schedule()` and the sleep after,
    /// which on a VM whose idle vCPUs halt cost microseconds. Per run, not per poll:
    /// the lab's threaded kthread costs about 8.7 us a run plus 3.4 us a request at
    /// 2,000-117,000 requests/s (its schedstat runs, run 20261128-195727-32e3), while
    /// its polls a run rise from 1 to 1.9.
    #[serde(default)]
    pub napi_thread_run: f64,
    /// Per packet a NAPI kthread polls, beyond the packet's stages: what the kthread's
    /// time grows by with each request it receives that a softirq's poll of the same
    /// packet does not cost. The lab's threaded kthread grows by about 3.6 us a
    /// request a run (12.2 us a run at 1.1 requests a run, 20.9 at 3.6; run
    /// 20261129-045430-9bc5) where the twin's, with the stages alone, grew by 0.6;
    /// fitted with `napi_thread_run` (the server topology's
    /// `server.kthread_packet_cycles`), not explained by a mechanism the twin has.
    #[serde(default)]
    pub napi_thread_packet: f64,
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
    /// Measured delays of a remote wake-up onto an idle CPU (the wake-up probe of a live
    /// host, `napilab_core::WakeUpLatency`), ns. When given, each thread woken onto an
    /// idle CPU by another waits one of them, drawn at random, instead of
    /// `irq_delivery`: on a VM whose idle vCPUs halt, a few of those waits last
    /// milliseconds (the hypervisor runs the vCPU late), and a ring that fills in less
    /// loses packets, which a median cannot show (docs/sim.md, "Wake-up delays").
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub wake_up_samples: Vec<u64>,
    /// From the last bit on the ingress wire to the descriptor being visible to the poll.
    pub rx_dma: u64,
    /// From the driver's doorbell to the first bit on the egress wire.
    pub tx_dma: u64,
}

/// Most log2 buckets a `[[stalls]]` table may have: bucket 62 is 4.6e18 ns already.
const MAX_STALL_BUCKETS: usize = 63;

include!(concat!(env!("OUT_DIR"), "/profiles.rs"));

/// The plain profiles shipped with the crate, by name: every file under profiles/
/// except the lab profiles, whose extra tables (`[testbed]`, `[server]`) only
/// `calibrate::LabProfile` and `calibrate_server::ServerProfile` read.
pub fn builtin_profiles() -> impl Iterator<Item = (&'static str, &'static str)> {
    SHIPPED
        .iter()
        .copied()
        .filter(|(n, _)| !LAB_PROFILES.contains(n))
}

/// The shipped lab profiles (veth lab, with `[testbed]` or `[server]`).
pub const LAB_PROFILES: &[&str] = &["veth-lab", "veth-lab-server"];

/// The names of every shipped profile, for messages.
pub fn shipped_names() -> Vec<&'static str> {
    SHIPPED.iter().map(|(n, _)| *n).collect()
}

impl Profile {
    /// What an expiry of a kernel timer costs CPU `cpu`, ns, when the profile measured
    /// it (`timer`); a probe's negative figure (its noise above the cost) counts as 0.
    pub fn timer_expiry_ns(&self, cpu: usize) -> Option<u64> {
        self.timer
            .iter()
            .find(|t| t.cpu as usize == cpu)
            .map(|t| t.ns_per_expiry.max(0.0).round() as u64)
    }

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
        let (n, text) = builtin_profiles()
            .find(|(n, _)| *n == name)
            .ok_or_else(|| {
                ConfigError::new(
                    name,
                    "(name)",
                    format!(
                        "no shipped profile of that name (shipped: {})",
                        shipped_names().join(", ")
                    ),
                )
            })?;
        Self::from_toml_str(text, &format!("profiles/{n}.toml"))
    }

    pub fn validate(&self, file: &str) -> Result<(), ConfigError> {
        if !(self.cpu_ghz > 0.0 && self.cpu_ghz.is_finite()) {
            return Err(ConfigError::new(file, "cpu_ghz", "must be positive"));
        }
        // The cycle costs (the latencies are whole nanoseconds, cpu_ghz is checked above).
        let cycles = self.parameters().into_iter();
        let cycle_keys = |k: &&str| k.contains("_cycles.") || *k == "irq_thread.handler_cycles";
        for (field, v) in cycles.filter(|(k, _)| cycle_keys(k)) {
            if !(v >= 0.0 && v.is_finite()) {
                return Err(ConfigError::new(
                    file,
                    field,
                    "must be a finite number >= 0",
                ));
            }
        }
        if let Some(h) = &self.host {
            h.validate(file)?;
        }
        for (i, st) in self.stalls.iter().enumerate() {
            let field = |what: &str| format!("stalls[{i}].{what}");
            if !(st.per_s.is_finite() && st.per_s >= 0.0) {
                return Err(ConfigError::new(
                    file,
                    field("per_s"),
                    "must be a finite number >= 0 (stalls a second)",
                ));
            }
            if st.counts.len() > MAX_STALL_BUCKETS {
                return Err(ConfigError::new(
                    file,
                    field("counts"),
                    format!(
                        "at most {MAX_STALL_BUCKETS} log2 buckets (the stall probe keeps 25): paste `counts` from a run's host.stalls"
                    ),
                ));
            }
            if self.stalls[..i].iter().any(|o| o.cpu == st.cpu) {
                return Err(ConfigError::new(
                    file,
                    field("cpu"),
                    format!("CPU {} has stalls twice: one table per CPU", st.cpu),
                ));
            }
        }
        for (i, t) in self.timer.iter().enumerate() {
            let field = |what: &str| format!("timer[{i}].{what}");
            for (name, v) in [
                ("period_ns", t.period_ns),
                ("reprogram_ns", t.reprogram_ns),
                ("ns_per_expiry", t.ns_per_expiry),
                ("expiries_per_s", t.expiries_per_s),
            ] {
                if !v.is_finite() {
                    return Err(ConfigError::new(
                        file,
                        field(name),
                        "must be a finite number: paste the table from a run's host.timer",
                    ));
                }
            }
            if self.timer[..i].iter().any(|o| o.cpu == t.cpu) {
                return Err(ConfigError::new(
                    file,
                    field("cpu"),
                    format!("CPU {} has a timer cost twice: one table per CPU", t.cpu),
                ));
            }
        }
        match (&self.host, &self.nic) {
            (Some(h), Some(n)) => n.validate(h, file)?,
            (None, None) => {}
            _ => {
                return Err(ConfigError::new(
                    file,
                    "host",
                    "a hardware profile needs both [host] and [nic.ingress]/[nic.egress]",
                ))
            }
        }
        self.validate_provenance(file)
    }

    /// The machine, when the profile describes one (`[host]` and `[nic]`).
    pub fn hardware(&self) -> Option<(&HostHardware, &NicHardware)> {
        self.host.as_ref().zip(self.nic.as_ref())
    }

    /// Every parameter with its path and value, in file order.
    pub fn parameters(&self) -> Vec<(&'static str, f64)> {
        let (s, f, l) = (&self.stage_cycles, &self.fixed_cycles, &self.latency_ns);
        vec![
            ("cpu_ghz", self.cpu_ghz),
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
            ("fixed_cycles.napi_thread_run", f.napi_thread_run),
            ("fixed_cycles.napi_thread_packet", f.napi_thread_packet),
            ("latency_ns.irq_delivery", l.irq_delivery as f64),
            ("latency_ns.idle_wakeup", l.idle_wakeup as f64),
            ("latency_ns.rx_dma", l.rx_dma as f64),
            ("latency_ns.tx_dma", l.tx_dma as f64),
        ]
        .into_iter()
        .chain(self.irq_thread.iter().flat_map(|t| {
            [
                ("irq_thread.handler_cycles", t.handler_cycles),
                ("irq_thread.wakeup_ns", t.wakeup_ns as f64),
            ]
        }))
        .chain(self.tunnel_cycles.iter().flat_map(|t| {
            [
                ("tunnel_cycles.decap", t.decap),
                ("tunnel_cycles.decrypt", t.decrypt),
                ("tunnel_cycles.gro", t.gro),
            ]
        }))
        // The RX interrupt moderation of a NIC machine (how it is applied, `timer` or
        // `ixgbe-itr`, is in the file and its source in the provenance's detail).
        .chain(self.nic.iter().flat_map(|n| {
            let (i, e) = (&n.ingress, &n.egress);
            [
                ("nic.ingress.rx_usecs", i.rx_usecs as f64),
                ("nic.ingress.rx_frames", i.rx_frames as f64),
                ("nic.ingress.adaptive_rx", i.adaptive_rx as u8 as f64),
                ("nic.egress.tx_usecs", e.tx_usecs as f64),
                ("nic.egress.tx_frames", e.tx_frames as f64),
            ]
        }))
        // A device whose driver requests a threaded IRQ says so, with the driver
        // function as its source (absent for hard-IRQ devices, the default).
        .chain(self.nic.iter().flat_map(|n| {
            [
                ("nic.ingress.irq_threaded", n.ingress.irq_mode),
                ("nic.egress.irq_threaded", n.egress.irq_mode),
            ]
            .into_iter()
            .filter(|(_, m)| *m == crate::config::IrqMode::Threaded)
            .map(|(k, _)| (k, 1.0))
        }))
        .collect()
    }

    /// Each parameter with its value and source (None: the profile does not say).
    pub fn provenance_rows(&self) -> Vec<(&'static str, f64, Option<&ParamSource>)> {
        self.parameters()
            .into_iter()
            .map(|(k, v)| (k, v, self.provenance.get(k)))
            .collect()
    }

    /// One line per parameter for reports: `value (kind: reference; detail)`.
    pub fn provenance_text(&self, key: &str, value: f64) -> String {
        match self.provenance.get(key) {
            Some(p) if p.reference.is_empty() => {
                format!("{value} ({}: {})", p.kind.as_str(), p.detail)
            }
            Some(p) => format!(
                "{value} ({}: {}; {})",
                p.kind.as_str(),
                p.reference,
                p.detail
            ),
            None => format!("{value} (source not given)"),
        }
    }

    fn validate_provenance(&self, file: &str) -> Result<(), ConfigError> {
        let known: Vec<&str> = self.parameters().iter().map(|(k, _)| *k).collect();
        for (key, src) in &self.provenance {
            let field = format!("provenance.\"{key}\"");
            if !known.contains(&key.as_str()) {
                return Err(ConfigError::new(
                    file,
                    &field,
                    format!("not a profile parameter (one of: {})", known.join(", ")),
                ));
            }
            let needs_reference = src.kind != SourceKind::Assumed;
            if needs_reference && src.reference.trim().is_empty() {
                return Err(ConfigError::new(
                    file,
                    &field,
                    "a published, calibrated or fitted value needs a reference (docs/studies.md#..., or the lab run and command)",
                ));
            }
            if src.detail.trim().is_empty() {
                return Err(ConfigError::new(
                    file,
                    &field,
                    "say how the value follows from its source, or why it is assumed (detail)",
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

    fn router_text() -> &'static str {
        SHIPPED
            .iter()
            .find(|(n, _)| *n == "router-e3-1230-ixgbe")
            .map(|(_, t)| *t)
            .expect("shipped")
    }

    #[test]
    fn every_file_is_shipped() {
        let names = shipped_names();
        for f in std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/profiles")).expect("dir") {
            let p = f.expect("entry").path();
            let stem = p.file_stem().expect("stem").to_string_lossy().into_owned();
            assert!(names.contains(&stem.as_str()), "{stem} not shipped");
        }
        assert!(names.len() >= 6, "{names:?}");
    }

    #[test]
    fn builtin_profiles_parse() {
        for (name, _) in builtin_profiles() {
            let p = Profile::builtin(name).expect("builtin profile parses");
            assert!(p.cpu_ghz > 0.0);
        }
        assert!(Profile::builtin("nope").is_err());
    }

    /// Every parameter of every shipped profile says where its value
    /// comes from.
    #[test]
    fn every_shipped_parameter_has_a_source() {
        for (name, text) in SHIPPED
            .iter()
            .copied()
            .filter(|(n, _)| *n != "veth-lab-server")
        {
            let table: toml::Table = toml::from_str(text).expect("parses");
            let mut table = table;
            table.remove("testbed");
            table.remove("fitted_on_host");
            let p: Profile = toml::Value::Table(table).try_into().expect("profile");
            p.validate(name).expect("valid");
            for (key, _, src) in p.provenance_rows() {
                assert!(src.is_some(), "{name}: {key} has no source");
            }
        }
    }

    #[test]
    fn provenance_is_checked() {
        let text = router_text();
        let bad = format!(
            "{text}\n[provenance.\"stage_cycles.nope\"]\nkind = \"assumed\"\ndetail = \"x\"\n"
        );
        let e = Profile::from_toml_str(&bad, "p.toml").expect_err("unknown key");
        assert!(e.field.contains("stage_cycles.nope"), "{e:?}");
        let mut p = Profile::builtin("router-e3-1230-ixgbe").expect("profile");
        if let Some(src) = p.provenance.get_mut("stage_cycles.poll") {
            src.kind = SourceKind::Published;
            src.reference.clear();
        }
        assert!(p.validate("p").is_err());
    }

    #[test]
    fn stalls_round_trip_and_bad_ones_are_named() {
        let mut p = Profile::builtin("router-e3-1230-ixgbe").expect("profile");
        p.stalls = vec![napilab_core::CpuStalls {
            cpu: 1,
            seconds: 8.0,
            per_s: 400.0,
            stalled_share: 0.01,
            steal_share: 0.0,
            longest_ns: 4_000_000,
            counts: vec![0, 0, 3, 1],
        }];
        let text = toml::to_string(&p).expect("serializes");
        let back = Profile::from_toml_str(&text, "p.toml").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(back.stalls, p.stalls);
        let mut bad = p.clone();
        bad.stalls[0].per_s = -1.0;
        let e = bad.validate("p.toml").expect_err("negative rate");
        assert_eq!(e.field, "stalls[0].per_s", "{e:?}");
        let mut bad = p.clone();
        bad.stalls[0].counts = vec![1; 64];
        let e = bad.validate("p.toml").expect_err("too many buckets");
        assert_eq!(e.field, "stalls[0].counts", "{e:?}");
        let mut bad = p;
        bad.stalls.push(bad.stalls[0].clone());
        let e = bad.validate("p.toml").expect_err("a CPU twice");
        assert_eq!(e.field, "stalls[1].cpu", "{e:?}");
    }

    #[test]
    fn timer_costs_round_trip_and_bad_ones_are_named() {
        let mut p = Profile::builtin("router-e3-1230-ixgbe").expect("profile");
        p.timer = vec![napilab_core::TimerCost {
            cpu: 1,
            period_ns: 20_000.0,
            reprogram_ns: 1_146.8,
            ns_per_expiry: 18_584.5,
            expiries_per_s: 49_560.0,
        }];
        let text = toml::to_string(&p).expect("serializes");
        let back = Profile::from_toml_str(&text, "p.toml").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(back.timer, p.timer);
        assert_eq!(back.timer_expiry_ns(1), Some(18_585));
        assert_eq!(back.timer_expiry_ns(0), None);
        let nan = text.replacen("ns_per_expiry = 18584.5", "ns_per_expiry = nan", 1);
        let e = Profile::from_toml_str(&nan, "p.toml").expect_err("not a number");
        assert_eq!(e.field, "timer[0].ns_per_expiry", "{e:?}");
        let mut bad = p;
        bad.timer.push(bad.timer[0].clone());
        let e = bad.validate("p.toml").expect_err("a CPU twice");
        assert_eq!(e.field, "timer[1].cpu", "{e:?}");
    }

    #[test]
    fn bad_field_is_named() {
        let text = router_text();
        let bad = text.replacen("cpu_ghz = 3.2", "cpu_ghz = -1", 1);
        let e = Profile::from_toml_str(&bad, "p.toml").expect_err("must be rejected");
        assert_eq!((e.file.as_str(), e.field.as_str()), ("p.toml", "cpu_ghz"));
    }
}
