//! The Observation: what napilab knows about a host over a span of time, whichever
//! source (live probe, lab, twin) produced it. Its JSON shape is documented in
//! docs/observation.md and versioned by [`OBSERVATION_SCHEMA`].

use serde::{Deserialize, Serialize};

use crate::finding::Finding;
use crate::metric::Metric;
use crate::topology::TopologyMap;

/// Bump the number when a field changes meaning or disappears; adding optional fields
/// keeps it.
pub const OBSERVATION_SCHEMA: &str = "napilab.observation/1";

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Observation {
    pub schema: String,
    pub origin: Origin,
    pub host: HostFacts,
    pub settings: Settings,
    pub topology: TopologyMap,
    pub intervals: Vec<Interval>,
    pub findings: Vec<Finding>,
    /// What could not be measured and why (missing files, no root, old kernel).
    pub notices: Vec<Notice>,
    /// What the BPF tracing tiers (`observe --trace`, `--trace-packets`) cost while
    /// they ran, from the kernel's BPF run-time statistics; absent without them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_cost: Option<TraceCost>,
}

/// The measured cost of napilab's own BPF programs over an observation
/// (docs/trace.md, "What observing costs").
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TraceCost {
    /// Seconds the kernel's statistics covered.
    pub seconds: f64,
    /// Program runs, all programs and CPUs.
    pub runs: u64,
    /// Run time of all programs, ns (it includes the statistics' own two clock reads
    /// per run, so it is an upper bound).
    pub run_ns: u64,
    /// run_ns / (seconds * 1e9): CPUs the programs used, e.g. 0.012 = 1.2% of one CPU.
    pub cpu_share: f64,
    /// Packets the observed devices received in the same time (RX packets of every
    /// device of the observation, summed).
    pub packets: u64,
    /// run_ns / packets, when packets > 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ns_per_packet: Option<f64>,
    /// With `--trace-packets`: the share of time its stage programs were attached
    /// (time-sliced tracing), 1.0 when they traced every packet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub packet_duty: Option<f64>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Origin {
    pub kind: OriginKind,
    pub hostname: Option<String>,
    pub kernel: Option<String>,
    /// Wall-clock time of the first sample, ms since the Unix epoch.
    pub started_unix_ms: u64,
    pub napilab_version: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OriginKind {
    Live,
    Replay,
    Lab,
    Model,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct HostFacts {
    /// CPUs the kernel reports (columns of /proc/stat).
    pub cpus: Vec<u32>,
    pub hz: Hz,
    pub accounting: CpuAccounting,
    /// USER_HZ, the unit of /proc/stat and /proc/<pid>/stat times (almost always 100).
    pub user_hz: u32,
    /// Which machine this was (CPU, mitigations, kernel, virtualization): absent in
    /// records made before napilab kept it, and in the twin's, which ran on no host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity: Option<crate::host_identity::HostIdentity>,
    /// How steadily each CPU ran a fixed piece of work (lab runs: at their start and
    /// end; docs/lab.md, "Host speed"); empty elsewhere.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub speed: Vec<crate::host_speed::HostSpeed>,
    /// How long a thread woken onto each CPU waited to run (`napilab tune plan
    /// --predict` measures it after observing; docs/tune.md); empty elsewhere.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub wake_up: Vec<crate::wake_up_latency::WakeUpLatency>,
    /// What a re-armed kernel timer costs each probed CPU (`napilab tune plan
    /// --predict` measures it for profiles that defer; docs/tune.md); empty elsewhere.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub timer: Vec<crate::timer_cost::TimerCost>,
    /// How much of each CPU a spinning thread did not get, in what pieces (lab runs of
    /// the server topology measure it at their start, docs/lab.md "Host stalls"; a
    /// twin profile can replay it); empty elsewhere.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stalls: Vec<crate::cpu_stalls::CpuStalls>,
}

impl HostFacts {
    /// A distribution kernel's host as recordings without a machine describe it (the
    /// report's synthetic recordings, tests): CPU time tick-sampled at CONFIG_HZ 250,
    /// USER_HZ 100, no identity.
    pub fn tick_sampled_250hz(cpus: Vec<u32>) -> HostFacts {
        HostFacts {
            cpus,
            hz: Hz {
                value: Some(250),
                how: "config".into(),
            },
            accounting: CpuAccounting::TickSampled,
            user_hz: 100,
            identity: None,
            speed: Vec::new(),
            wake_up: Vec::new(),
            timer: Vec::new(),
            stalls: Vec::new(),
        }
    }
}

/// The kernel's tick rate, which sets tick-sampling granularity and the softirq time
/// limits (`MAX_SOFTIRQ_TIME`, `netdev_budget_usecs` default).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Hz {
    pub value: Option<u32>,
    /// `config` (CONFIG_HZ from the kernel config), `jiffies` (measured from
    /// /proc/timer_list), or `unknown`.
    pub how: String,
}

/// How /proc/stat's per-CPU times were produced.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CpuAccounting {
    /// CONFIG_TICK_CPU_ACCOUNTING without IRQ time accounting: every category is
    /// tick-sampled; softirq right after a hard IRQ on an idle CPU reads as idle.
    TickSampled,
    /// CONFIG_IRQ_TIME_ACCOUNTING: irq and inline softirq time are measured; the rest,
    /// including ksoftirqd, is still tick-sampled.
    IrqTime,
    /// Full dynticks/virtual accounting (CONFIG_VIRT_CPU_ACCOUNTING_GEN).
    Virtual,
    #[default]
    Unknown,
}

/// Host-wide packet-path settings in force during the observation.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Settings {
    pub netdev_budget: Option<u64>,
    pub netdev_budget_usecs: Option<u64>,
    pub dev_weight: Option<u64>,
    pub busy_poll: Option<u64>,
    pub busy_read: Option<u64>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Notice {
    /// What is missing, e.g. `/proc/net/softnet_stat`.
    pub what: String,
    /// Why, and what the user loses.
    pub why: String,
}

/// One sampling interval. All rates are per second over `duration_s`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Interval {
    pub index: usize,
    /// Offset of the interval's start from the first sample, seconds.
    pub start_s: f64,
    pub duration_s: f64,
    pub cpus: Vec<CpuInterval>,
    pub devices: Vec<DeviceInterval>,
    pub irqs: Vec<IrqInterval>,
    pub threads: Vec<ThreadInterval>,
    pub host: HostInterval,
    /// Measured by the tracing tier (`observe --trace`, source `trace`); absent without it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<crate::trace::TraceInterval>,
}

impl Interval {
    pub fn cpu(&self, cpu: u32) -> Option<&CpuInterval> {
        self.cpus.iter().find(|c| c.cpu == cpu)
    }

    pub fn device(&self, name: &str) -> Option<&DeviceInterval> {
        self.devices.iter().find(|d| d.name == name)
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CpuInterval {
    pub cpu: u32,
    /// All numbered hard IRQs taken by this CPU (/proc/interrupts), per second.
    pub hardirqs: Option<Metric>,
    /// Hard IRQs of network devices (IRQs in the topology map), per second.
    pub net_hardirqs: Option<Metric>,
    pub net_rx_softirqs: Option<Metric>,
    pub net_tx_softirqs: Option<Metric>,
    /// softnet_stat: packets processed by this CPU's NAPI polls (incl. the RPS backlog).
    pub softnet_processed: Option<Metric>,
    /// softnet_stat: packets dropped because the backlog was full.
    pub softnet_dropped: Option<Metric>,
    /// softnet_stat: `net_rx_action` runs that stopped on budget or time.
    pub time_squeeze: Option<Metric>,
    pub flow_limit: Option<Metric>,
    pub received_rps: Option<Metric>,
    pub packets_per_net_rx_softirq: Option<Metric>,
    pub packets_per_net_hardirq: Option<Metric>,
    pub time: Option<CpuTimeShares>,
    /// Share of this CPU used by `ksoftirqd/<cpu>` (scheduler runtime, not ticks).
    pub ksoftirqd: Option<Metric>,
}

/// /proc/stat's split of one CPU's time, as fractions of the interval.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CpuTimeShares {
    pub user: Metric,
    pub nice: Metric,
    pub system: Metric,
    pub idle: Metric,
    pub iowait: Metric,
    pub irq: Metric,
    pub softirq: Metric,
    pub steal: Metric,
}

impl CpuTimeShares {
    /// Everything but idle and iowait.
    pub fn busy(&self) -> f64 {
        self.user.value
            + self.nice.value
            + self.system.value
            + self.irq.value
            + self.softirq.value
            + self.steal.value
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DeviceInterval {
    pub name: String,
    pub ifindex: u32,
    pub rx_packets: Option<Metric>,
    pub tx_packets: Option<Metric>,
    pub rx_bits: Option<Metric>,
    pub tx_bits: Option<Metric>,
    pub rx_dropped: Option<Metric>,
    pub tx_dropped: Option<Metric>,
    pub rx_errors: Option<Metric>,
    pub tx_errors: Option<Metric>,
    pub qdisc: Option<QdiscInterval>,
    /// Per-queue counters where the driver offers them (netdev `qstats-get`).
    pub queues: Vec<QueueInterval>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct QdiscInterval {
    pub kind: String,
    pub packets: Option<Metric>,
    pub drops: Option<Metric>,
    pub requeues: Option<Metric>,
    pub overlimits: Option<Metric>,
    /// Packets queued at the end of the interval.
    pub backlog_packets: Option<u64>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum QueueKind {
    #[default]
    Rx,
    Tx,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct QueueInterval {
    pub kind: QueueKind,
    pub index: u32,
    pub napi_id: Option<u32>,
    pub packets: Option<Metric>,
    pub bits: Option<Metric>,
    /// Drops the driver counts for this queue (`rx-hw-drops` / `tx-hw-drops`).
    pub hw_drops: Option<Metric>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct IrqInterval {
    pub number: u32,
    pub name: String,
    /// Network device and queue, when the topology map ties the IRQ to one.
    pub device: Option<String>,
    pub queue: Option<String>,
    pub total: Option<Metric>,
    /// (cpu, rate) for every CPU that took this IRQ in the interval.
    pub per_cpu: Vec<(u32, Metric)>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ThreadRole {
    Ksoftirqd {
        cpu: u32,
    },
    NapiThread {
        device: Option<String>,
        napi_id: Option<u32>,
    },
    /// An application thread (the twin's `[[apps]]`, named by the application).
    Application {
        name: String,
    },
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ThreadInterval {
    pub pid: u32,
    pub name: String,
    pub role: ThreadRole,
    pub last_cpu: Option<u32>,
    /// CPU used by the thread (utime + stime), as a fraction of one CPU.
    pub cpu: Option<Metric>,
    /// The scheduler's statistics of the thread over the interval
    /// (`/proc/<pid>/schedstat`); absent on kernels without it (no
    /// `CONFIG_SCHED_INFO`) and in observations made before napilab read it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sched: Option<SchedDelta>,
}

/// What `/proc/<pid>/schedstat` counted over an interval: a kernel thread's run delay
/// per run is how long a woken thread of that CPU waits before it runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SchedDelta {
    /// Time on a CPU, ns (the file's first field, `sum_exec_runtime`).
    pub on_cpu_ns: u64,
    /// Time runnable on a run queue, waiting for a CPU, ns (`run_delay`).
    pub run_delay_ns: u64,
    /// Times the thread was given a CPU (`pcount`).
    pub runs: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct HostInterval {
    /// Received traffic of all non-loopback devices, bit/s.
    pub rx_bits: Option<Metric>,
    /// Busy CPU of the whole host (sum over CPUs) per Mbit/s received.
    pub cpu_per_mbps: Option<Metric>,
}
