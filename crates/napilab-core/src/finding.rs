//! Findings: a named misreading or bottleneck with its evidence (docs/studies.md#misreadings).

use serde::{Deserialize, Serialize};

use crate::metric::Metric;

/// The catalogue of rules. The number in each doc comment is the misreading's number in
/// docs/studies.md#misreadings.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RuleId {
    /// 1: IRQ and softirq counts do not track the packet rate (NAPI in polling mode).
    PollingModeHidesLoad,
    /// 2: more NET_RX softirqs than RX IRQs (TX completions, or devices sharing a CPU).
    SoftirqsExceedRxIrqs,
    /// 3: tick-sampled softirq/CPU figures understate the real cost.
    TickSampledAccounting,
    /// 5: egress without a qdisc keeps the whole path on the ingress core.
    EgressWithoutQdisc,
    /// 7: `time_squeeze` rising: `net_rx_action` hit its packet budget or time limit.
    TimeSqueeze,
    /// 8: ksoftirqd is doing the packet work, competing with applications.
    KsoftirqdActive,
    /// One CPU near saturation with packet work while others have headroom.
    HotCpu,
    /// 3, measured: tracepoint-measured softirq/IRQ time beside /proc/stat's shares.
    AccountingTruth,
    /// 4: full-budget polls that the device's received packets do not justify.
    DriverContract,
    /// 6: NAPI work piled onto one CPU by the threads that schedule it (execution-order
    /// inversion), while device IRQs are spread.
    NapiLoadImbalance,
    /// Idle vCPUs of a VM halt at once (haltpoll, guest_halt_poll_ns 0) while NAPI
    /// kthreads are woken onto them.
    IdleVcpuWakeUp,
}

impl RuleId {
    pub fn name(self) -> &'static str {
        match self {
            RuleId::PollingModeHidesLoad => "polling_mode_hides_load",
            RuleId::SoftirqsExceedRxIrqs => "softirqs_exceed_rx_irqs",
            RuleId::TickSampledAccounting => "tick_sampled_accounting",
            RuleId::EgressWithoutQdisc => "egress_without_qdisc",
            RuleId::TimeSqueeze => "time_squeeze",
            RuleId::KsoftirqdActive => "ksoftirqd_active",
            RuleId::HotCpu => "hot_cpu",
            RuleId::AccountingTruth => "accounting_truth",
            RuleId::DriverContract => "driver_contract",
            RuleId::NapiLoadImbalance => "napi_load_imbalance",
            RuleId::IdleVcpuWakeUp => "idle_vcpu_wake_up",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    /// How to read the numbers correctly; nothing is wrong.
    Info,
    /// A bottleneck or a number that is being misread.
    Warning,
}

/// What a finding is about.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", content = "name", rename_all = "snake_case")]
pub enum Subject {
    Host,
    Cpu(u32),
    Device(String),
}

impl std::fmt::Display for Subject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Subject::Host => write!(f, "host"),
            Subject::Cpu(cpu) => write!(f, "cpu{cpu}"),
            Subject::Device(dev) => write!(f, "{dev}"),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Evidence {
    /// The metric's name, e.g. `cpu1.net_rx_softirqs`.
    pub name: String,
    pub metric: Metric,
}

impl Evidence {
    /// `name=value (source)`, the value shortened (12.3k): how a terminal line shows a
    /// finding's evidence.
    pub fn brief(&self) -> String {
        format!(
            "{}={} ({})",
            self.name,
            crate::units::short(self.metric.value),
            self.metric.source.as_str()
        )
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Finding {
    pub rule: RuleId,
    pub severity: Severity,
    pub subject: Subject,
    /// One line: what was seen.
    pub title: String,
    /// The numbers that triggered the rule (averaged over the intervals named below).
    pub evidence: Vec<Evidence>,
    /// The rule's condition with its thresholds, as text.
    pub threshold: String,
    /// A paragraph in plain language: what it means and what to do.
    pub explanation: String,
    /// Indexes of the intervals the evidence covers.
    pub intervals: Vec<usize>,
}
