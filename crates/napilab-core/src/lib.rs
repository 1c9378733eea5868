//! napilab's shared vocabulary.
//!
//! A live host, a lab run and the twin all produce the same [`Observation`], so the
//! explain rules, the store and the reports never care where numbers came from. Every
//! number is a [`Metric`] that carries its [`Source`]; a derived number also says how it
//! was derived. Nothing in this crate touches the operating system.

pub mod cpu_stalls;
pub mod device_join;
pub mod experiment;
pub mod explain;
pub mod finding;
pub mod host_identity;
pub mod host_speed;
pub mod latency;
pub mod many_napi;
pub mod metric;
pub mod observation;
pub mod requests;
pub mod scenario;
pub mod stats;
pub mod time;
pub mod timer_cost;
pub mod topology;
pub mod trace;
pub mod twin_vs_lab;
pub mod uncertainty;
pub mod units;
pub mod wake_up_latency;

pub use cpu_stalls::CpuStalls;
pub use experiment::{
    disturbed_by, CapacityProbe, ClassResult, ConfigurationResult, Disturbance, DisturbanceKind,
    EngineStats, GoalResult, GoalSummary, MaxQpsAtSlo, MaxThroughput, PacketCapacityProbe,
    PointResult, PointRole, RangeSource, RequestPointResult, RequestResults, RunKind, RunRecord,
    SearchRange, SearchRecord, ServerSummary, TrialRecord, TwinMaxQps, RUN_SCHEMA,
};
pub use finding::{Evidence, Finding, RuleId, Severity, Subject};
pub use host_identity::{
    CpuIdentity, CpuIdle, HostIdentity, IdentityDifference, KernelIdentity, Virtualization,
};
pub use host_speed::{nearest_rank, HostSpeed, SpeedSpread, SLOW_SAMPLE};
pub use latency::{LatencyHistogram, LatencySummary};
pub use metric::{Metric, Source};
pub use observation::{
    CpuAccounting, CpuInterval, CpuTimeShares, DeviceInterval, HostFacts, HostInterval, Hz,
    Interval, IrqInterval, Notice, Observation, Origin, OriginKind, QdiscInterval, QueueInterval,
    QueueKind, SchedDelta, Settings, ThreadInterval, ThreadRole, TraceCost, OBSERVATION_SCHEMA,
};
pub use timer_cost::TimerCost;
pub use topology::{
    Device, EthtoolInfo, IrqInfo, IrqMatch, Napi, ObservedPolling, Poller, QdiscInfo, RxQueue,
    ThreadInfo, TopologyMap, TxQueue,
};
pub use twin_vs_lab::{LeaveOneOutMaximum, TwinClassPoint, TwinMaximum, TwinVsLab};
pub use units::Unit;
pub use wake_up_latency::WakeUpLatency;
