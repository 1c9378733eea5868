//! Results of an experiment: a scenario expanded into configurations x offered loads x
//! repeats, each point with its traffic results and the DUT's Observation. The lab
//! produces a [`RunRecord`] from the real kernel and the twin from its model, so the
//! store and the report render both the same way (docs/architecture.md section 2).

use serde::{Deserialize, Serialize};

use crate::finding::Finding;
use crate::latency::LatencySummary;
use crate::observation::{HostFacts, Notice, Observation};

pub const RUN_SCHEMA: &str = "napilab.run/1";

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunKind {
    /// Measured on the real kernel in network namespaces.
    Lab,
    /// Computed by the twin.
    Model,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    pub schema: String,
    /// `YYYYMMDD-HHMMSS-<4 hex>`; also the suffix of the lab's namespace names.
    pub run_id: String,
    pub kind: RunKind,
    pub scenario_name: String,
    /// The scenario file's text as it was run, so the run can be repeated.
    pub scenario_toml: String,
    pub started_unix_ms: u64,
    pub finished_unix_ms: u64,
    pub host: HostFacts,
    pub napilab_version: String,
    /// True when the run was interrupted (Ctrl-C) and holds only the finished points.
    pub interrupted: bool,
    pub configurations: Vec<ConfigurationResult>,
    pub notices: Vec<Notice>,
    /// The twin's predictions beside the lab's figures (lab runs of packet topologies;
    /// absent in older runs and in the twin's own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub twin: Option<crate::twin_vs_lab::TwinVsLab>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ConfigurationResult {
    /// Unique within the run, e.g. `two-core/threaded`.
    pub name: String,
    /// The settings that define this configuration, as (setting, value) pairs, e.g.
    /// `("napi_context", "threaded")`, `("dut_cpus", "0,1")`.
    pub settings: Vec<(String, String)>,
    pub points: Vec<PointResult>,
    /// The maximum-throughput search's answer, if the scenario asked for one.
    pub max_throughput: Option<MaxThroughput>,
    /// Findings of the explain rules over this configuration's points.
    pub findings: Vec<Finding>,
    /// The request workload's points and maximum (server topology only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests: Option<RequestResults>,
}

impl ConfigurationResult {
    /// A configuration with its settings and nothing measured yet.
    pub fn new(name: &str, settings: Vec<(String, String)>) -> ConfigurationResult {
        ConfigurationResult {
            name: name.to_string(),
            settings,
            points: Vec::new(),
            max_throughput: None,
            findings: Vec::new(),
            requests: None,
        }
    }
}

/// A server-topology configuration's results: the request-rate sweep, the search for the
/// highest rate at the latency objective, or why the configuration could not run.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RequestResults {
    /// `napilab` or `memcached`.
    pub engine: String,
    /// The interrupt mode, e.g. `irq-suspend`.
    pub mode: String,
    /// The objective: p99 latency at or below this, microseconds.
    pub slo_p99_us: f64,
    /// Why this kernel or this server cannot run the mode (then there are no points).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_runnable: Option<String>,
    /// The capacity measured at the configuration's start, from which its
    /// `loads_of_capacity` and (without `search_max_qps`) its search range came.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity: Option<CapacityProbe>,
    pub points: Vec<RequestPointResult>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_qps: Option<MaxQpsAtSlo>,
    /// The twin's maximum at the objective beside this one (lab runs: added after the
    /// run by `napilab lab run`; docs/sim.md "The server topology on the twin").
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub twin: Vec<TwinMaxQps>,
}

/// The capacity probe of a request configuration (`napilab_core::requests::CAPACITY_PROBE`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CapacityProbe {
    /// How it was measured, e.g. "closed loop, one request outstanding per connection".
    pub method: String,
    pub connections: usize,
    pub duration_s: f64,
    /// Replies per second: the capacity estimate.
    pub achieved_qps: f64,
    pub latency: LatencySummary,
    /// The client, not the server, limited the probe: the estimate is the client's.
    pub client_limited: bool,
    pub client_reasons: Vec<String>,
}

/// The twin's maximum request rate at the objective for one configuration of a lab
/// server run, beside the lab's.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TwinMaxQps {
    /// How the twin's costs were obtained: a prediction with a profile fitted on
    /// another run, or a fit on this run's CPU (whose maxima are then not fitted, but
    /// not independent either).
    pub basis: String,
    /// The profile the twin ran with.
    pub profile: String,
    pub twin_max_qps: f64,
    pub lab_max_qps: f64,
    /// What ended the lab's searches: `latency objective` (the server), or
    /// `client-limited` / `search_max_qps` (then the lab's maximum is a lower bound).
    pub lab_limiter: String,
    pub lab_lower_bound: bool,
    /// (twin - lab) / lab; None when the lab met the objective at no rate (a NaN here
    /// was written as JSON null, which then did not load).
    #[serde(default)]
    pub relative_error: Option<f64>,
    /// The lab maximum's 95% interval (its searches' Student-t interval), when it had
    /// two searches or more.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lab_interval: Option<(f64, f64)>,
    /// Where the twin's wake-ups of an idle server CPU came from when it drew them from
    /// the run's wake-up probe (`host.wake_up`), in words; None: the profile's delay.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wake_ups: Option<String>,
}

impl TwinMaxQps {
    /// A signed error against a server-limited maximum; against a lower bound, whether
    /// the twin's maximum is at least the lab's.
    pub fn verdict(&self) -> String {
        let Some(error) = self.relative_error.filter(|_| self.lab_max_qps > 0.0) else {
            return "the lab met the objective at no rate searched: nothing to compare".to_string();
        };
        if let Some((low, high)) = self.lab_interval.filter(|_| !self.lab_max_qps_repeats()) {
            return format!(
                "not judged: the lab's maximum does not repeat (its 95% interval [{low:.0}, {high:.0}] is wider than the maximum; twin {:+.1}%)",
                error * 100.0
            );
        }
        if self.lab_lower_bound {
            format!(
                "lab is a lower bound: twin >= lab {} ({:+.1}%)",
                if self.twin_max_qps >= self.lab_max_qps {
                    "holds"
                } else {
                    "BROKEN"
                },
                error * 100.0
            )
        } else {
            format!("{:+.1}%", error * 100.0)
        }
    }

    /// Whether the lab's maximum repeats well enough to judge an error against it: a
    /// server-limited maximum whose 95% interval reaches 0 or is wider than the
    /// maximum itself does not (the searches landed anywhere: on the project's VM
    /// irq-suspend's and busy-wait's, whose p99 the host's timer costs and stalls set
    /// at every rate; docs/sim.md, "A timer's expiry on a virtual machine"). A lower
    /// bound is still checked.
    pub fn lab_max_qps_repeats(&self) -> bool {
        match self.lab_interval {
            Some((low, high)) if !self.lab_lower_bound => {
                low > 0.0 && high - low <= self.lab_max_qps
            }
            _ => true,
        }
    }

    /// One line: lab (limiter), twin, verdict.
    pub fn summary(&self) -> String {
        format!(
            "lab {:.0} requests/s ({}), twin {:.0} ({}), error {}",
            self.lab_max_qps,
            self.lab_limiter,
            self.twin_max_qps,
            self.profile,
            self.verdict()
        )
    }
}

/// One window of the request load: the client's view, the server's, and the DUT's CPU.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RequestPointResult {
    pub role: PointRole,
    pub repeat: u32,
    pub duration_s: f64,
    pub requested_qps: f64,
    /// Requests the client sent per second (Poisson schedule kept or not).
    pub offered_qps: f64,
    /// Replies per second.
    pub achieved_qps: f64,
    /// From each request's intended send time (open loop: no coordinated omission).
    pub latency: LatencySummary,
    pub errors: u64,
    pub timeouts: u64,
    /// The client, not the server, limited the point (its CPU, late sends).
    pub client_limited: bool,
    pub client_reasons: Vec<String>,
    /// The client's busiest thread: CPU time / wall time.
    pub client_cpu_busy: f64,
    /// p99 at or below the objective, every request answered, no errors, and the
    /// client kept its schedule.
    pub meets_slo: bool,
    pub server: ServerSummary,
    /// CPU of the server's CPUs by what ran there, (what, CPUs), summed over those CPUs;
    /// each entry says its source (`proc` ticks or `trace`).
    pub cpu: Vec<(String, f64)>,
    /// Busy CPU of the server's CPUs per reply, microseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_per_request_us: Option<f64>,
    /// NAPI polls per second on the server's device by context (trace tier).
    pub napi_polls_per_s: Vec<(String, f64)>,
    /// Of those, polls that found nothing, per second.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub empty_polls_per_s: Option<f64>,
    /// The DUT's Observation over the window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observation: Option<Observation>,
}

/// What the server said of one window.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ServerSummary {
    pub requests: u64,
    /// Sum over the server's workers of CPU time / wall time.
    pub cpu_busy: f64,
    /// The busiest worker's CPU time / time it was not waiting for a CPU.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub busy_when_scheduled: Option<f64>,
    pub epoll_waits: u64,
    pub epoll_returns_with_events: u64,
    pub epoll_empty_returns: u64,
    pub busy_loop_iterations: u64,
    /// Per-request service time, p99 (napilab's server only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_p99_us: Option<f64>,
    pub napi_ids: Vec<u32>,
    pub connections_off_napi: u64,
}

/// The highest offered request rate whose p99 met the objective, one answer per search,
/// their mean and its Student-t interval.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct MaxQpsAtSlo {
    pub qps: f64,
    /// The searches' answers.
    pub searches: Vec<f64>,
    /// Student-t interval of the mean at `confidence` (two searches or more).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval: Option<(f64, f64)>,
    pub confidence: f64,
    /// Busy CPU of the server's CPUs per reply at the highest passing load, us.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_per_request_us: Option<f64>,
    /// How the searches ended (the bound hit, the client's limit, ...).
    pub note: String,
}

/// Why a point exists: a step of the load sweep or a probe of the bisection.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PointRole {
    #[default]
    Sweep,
    Search,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PointResult {
    pub role: PointRole,
    /// Requested offered load, packets per second (all classes).
    pub requested_pps: f64,
    /// Load the generator actually offered (packets sent / duration); a point whose
    /// offered load fell short of the request says so here, never silently.
    pub offered_pps: f64,
    pub repeat: u32,
    pub duration_s: f64,
    pub classes: Vec<ClassResult>,
    pub generator: EngineStats,
    pub sink: EngineStats,
    /// The DUT's Observation over the measurement window (warm-up excluded).
    pub observation: Option<Observation>,
    /// The many-napi topology's NAPI measurements (absent for the other topologies and
    /// in records written before it existed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub many_napi: Option<crate::many_napi::ManyNapiPoint>,
}

impl PointResult {
    /// The generator offered less than the load asked of it (1% short or more).
    pub fn generator_short(&self) -> bool {
        self.offered_pps < 0.99 * self.requested_pps
    }

    /// Loss over all classes, 0 to 1.
    pub fn loss_ratio(&self) -> f64 {
        let sent: u64 = self.classes.iter().map(|c| c.sent).sum();
        let received: u64 = self.classes.iter().map(|c| c.received).sum();
        if sent == 0 {
            0.0
        } else {
            sent.saturating_sub(received) as f64 / sent as f64
        }
    }

    /// Delivered packets per second over all classes.
    pub fn delivered_pps(&self) -> f64 {
        if self.duration_s <= 0.0 {
            return 0.0;
        }
        self.classes.iter().map(|c| c.received).sum::<u64>() as f64 / self.duration_s
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ClassResult {
    /// Traffic class name from the scenario, e.g. `rt`, `be`.
    pub name: String,
    pub packet_bytes: u32,
    pub sent: u64,
    pub received: u64,
    /// Packets that arrived with a sequence number below one already seen.
    pub reordered: u64,
    /// Where the kernel counted the lost packets, e.g. `("dut-in rx_dropped", 1234)`,
    /// `("softnet dropped cpu0", 5)`, `("qdisc drops dut-out", 7)`.
    pub loss_counters: Vec<(String, u64)>,
    /// One-way latency (one clock), present for the paced back end.
    pub latency: Option<LatencySummary>,
}

/// How hard a traffic engine (generator or sink) worked, so a report can show it was not
/// the bottleneck.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct EngineStats {
    /// `xdp-live-frames`, `paced-udp`, `socket-sink`, `model`, ...
    pub backend: String,
    /// CPUs the engine ran on.
    pub cpus: Vec<u32>,
    /// CPU the engine used, as a fraction of its CPUs' capacity (0 to 1).
    pub cpu_busy: Option<f64>,
    /// True when the engine could not keep up (fell behind its schedule, or its own
    /// receive path dropped packets); the point's numbers then describe the engine.
    pub saturated: bool,
    /// What it reported about itself, e.g. `("late_departures", 12)`.
    pub counters: Vec<(String, u64)>,
}

/// The highest offered load with loss at most `loss_threshold`: by MLRsearch (the
/// first goal's conditional throughput, the mean over the search's repeats) or by
/// bisection in the manner of RFC 2544.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct MaxThroughput {
    pub pps: f64,
    pub loss_threshold: f64,
    /// Indexes into the configuration's `points` that the search measured.
    pub probes: Vec<usize>,
    /// Why the search stopped: `converged`, `upper_bound_passed` (the generator's
    /// maximum passed: the DUT was not the limit), `interrupted`, `time_limit`;
    /// MLRsearch: the first goal's reasons of all repeats, distinct, joined by `+`.
    pub stopped: String,
    /// `mlrsearch` or `rfc2544-bisection`; empty in runs made before MLRsearch
    /// (bisection).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub method: String,
    /// MLRsearch: every trial, with what the machine took away during it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub trials: Vec<TrialRecord>,
    /// MLRsearch: each repeat's result per goal.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub searches: Vec<SearchRecord>,
    /// MLRsearch: per goal, the repeats summarised (mean, confidence interval).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub goals: Vec<GoalSummary>,
    /// The range searched and where it came from; absent in runs made before the range
    /// was derived from a capacity probe (their range was `search_max_pps`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub range: Option<SearchRange>,
}

/// The capacity probe of a packet configuration: one short trial at a load above what
/// the testbed can offer (the lab) or a few short runs at doubling loads (the twin).
/// What the DUT forwarded is the first estimate of its capacity; what the generator
/// offered, the generator's own capacity.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PacketCapacityProbe {
    /// How it was measured, e.g. "one 1 s trial at 20000000 pkt/s requested, line-rate".
    pub method: String,
    pub requested_pps: f64,
    /// What the generator offered: its capacity here when it fell short of the request
    /// (`generator_capacity_pps`).
    pub offered_pps: f64,
    /// What reached the sink: the DUT's first capacity estimate.
    pub forwarded_pps: f64,
    /// The generator's capacity, when the probe measured it (the twin's traffic is
    /// ideal: none). Written also when none, as are the range's optional fields, so
    /// that a lab record and a twin record have the same shape.
    #[serde(default)]
    pub generator_capacity_pps: Option<f64>,
    /// The DUT forwarded (nearly) everything the generator offered: the estimate is
    /// the generator's capacity, a lower bound of the DUT's.
    pub generator_limited: bool,
}

/// Where the top of a packet search's range came from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RangeSource {
    /// Twice the DUT's forwarded rate in the capacity probe (raised while the answer
    /// reached the top).
    #[default]
    Probe,
    /// The scenario's `search_max_pps`.
    ScenarioCap,
    /// What the generator could offer in the capacity probe.
    GeneratorCapacity,
}

/// The range of a packet search: derived from the capacity probe, capped by the
/// generator's capacity and the scenario's `search_max_pps` when it gives one.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SearchRange {
    pub min_pps: f64,
    /// The top of the last search (after any raises).
    pub max_pps: f64,
    pub source: RangeSource,
    /// How the top was derived, with the numbers.
    pub detail: String,
    /// The tops of earlier searches whose answer reached their top, lowest first: each
    /// was doubled (at most up to the caps) and searched again.
    #[serde(default)]
    pub raised_from: Vec<f64>,
    /// The capacity probe the range was derived from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probe: Option<PacketCapacityProbe>,
    /// Who set the maximum when the DUT did not: the answer reached the top of a range
    /// that could not go higher (the generator's capacity, the scenario's cap, the last
    /// raise), e.g. "the generator, not the DUT, set this maximum: ...". None: the DUT
    /// set it (it lost packets above it).
    #[serde(default)]
    pub limited_by: Option<String>,
}

impl MaxThroughput {
    /// The summary of the goal named `name`.
    pub fn goal(&self, name: &str) -> Option<&GoalSummary> {
        self.goals.iter().find(|g| g.goal.name == name)
    }
}

/// One trial of an MLRsearch: a point of the configuration measured at a load for a
/// duration.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TrialRecord {
    /// Index into the configuration's `points`.
    pub point: usize,
    /// Which repeat of the search measured it (0-based).
    pub search: u32,
    pub load_pps: f64,
    /// Intended trial duration, s.
    pub duration_s: f64,
    /// Loss ratio the goals classify; 1 when the generator could not offer the load
    /// (the trial says nothing about the DUT then, so it counts against the load).
    pub loss_ratio: f64,
    /// The generator offered less than 99% of the load.
    #[serde(default)]
    pub generator_short: bool,
    pub disturbance: Disturbance,
}

/// What the machine took away from the lab during a trial (docs/lab.md, "Disturbed
/// trials").
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Disturbance {
    /// Per lab CPU, the share of the trial the hypervisor ran something else
    /// (`steal` of /proc/stat).
    pub steal: Vec<(u32, f64)>,
    /// Per lab CPU, the share of the trial used by processes outside the lab
    /// (attributed to the CPU each task last ran on: an estimate).
    pub other_processes: Vec<(u32, f64)>,
    /// Per lab thread (DUT NAPI kthreads, ksoftirqd, the engines), the share of the
    /// trial it waited runnable for a CPU (schedstat run delay). Threads of the lab
    /// that share a CPU wait for each other by design, so this is evidence, not a mark.
    pub run_delay: Vec<(String, f64)>,
    /// Share of departures the generator sent late or skipped (a stalled vCPU).
    pub generator_late: f64,
    pub disturbed: bool,
    /// Why it is marked disturbed, with the numbers.
    pub reasons: Vec<String>,
    /// Which kinds of disturbance marked it (one entry per kind; records before
    /// 2026-11-27 have none).
    #[serde(default)]
    pub marked_by: Vec<DisturbanceKind>,
    /// Per lab CPU, ns of CPU time one unit of the host-speed probe's fixed work took,
    /// timed for 100 ms right after the trial (docs/lab.md, "Host speed"): how fast the
    /// CPU ran then, which no steal counter shows. Evidence, not a mark; absent in
    /// records before 2026-11-27 16:00 UTC.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub host_speed_ns: Vec<(u32, f64)>,
}

/// What took a disturbed trial away from the lab.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DisturbanceKind {
    /// The hypervisor ran something else on a lab CPU.
    Steal,
    /// Processes outside the lab used a lab CPU.
    OtherProcesses,
    /// The generator sent late or skipped departures (a stalled vCPU).
    GeneratorLate,
    /// The generator fell short of a load well below a rate it reached before.
    GeneratorStalled,
}

impl DisturbanceKind {
    pub fn describe(self) -> &'static str {
        match self {
            DisturbanceKind::Steal => "steal",
            DisturbanceKind::OtherProcesses => "other processes",
            DisturbanceKind::GeneratorLate => "generator late",
            DisturbanceKind::GeneratorStalled => "generator stalled",
        }
    }
}

/// How many of `trials` each kind of disturbance marked, most first (a trial marked
/// by two kinds counts for both).
pub fn disturbed_by<'a>(
    trials: impl IntoIterator<Item = &'a Disturbance>,
) -> Vec<(DisturbanceKind, usize)> {
    let mut counts: std::collections::BTreeMap<DisturbanceKind, usize> = Default::default();
    for d in trials {
        for k in &d.marked_by {
            *counts.entry(*k).or_default() += 1;
        }
    }
    let mut counts: Vec<(DisturbanceKind, usize)> = counts.into_iter().collect();
    counts.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    counts
}

/// One repeat of an MLRsearch: the result per goal.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SearchRecord {
    pub search: u32,
    pub goals: Vec<GoalResult>,
}

/// An MLRsearch goal's result (draft-ietf-bmwg-mlrsearch, "Goal Result").
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct GoalResult {
    pub goal: String,
    /// The highest load classified as a lower bound below the relevant upper bound.
    pub relevant_lower_bound: Option<f64>,
    /// The lowest load classified as an upper bound.
    pub relevant_upper_bound: Option<f64>,
    /// The load at the relevant lower bound times one minus the loss ratio of the
    /// trials there at the goal's exceed-ratio quantile.
    pub conditional_throughput: Option<f64>,
    /// `converged`, `upper_bound_passed`, `time_limit`, `interrupted`.
    pub stopped: String,
    /// Indexes into `MaxThroughput::trials` of the full-length trials at the relevant
    /// lower bound (those the conditional throughput comes from).
    pub supporting_trials: Vec<usize>,
    /// The same goal classified again without the disturbed trials.
    pub undisturbed_conditional_throughput: Option<f64>,
}

/// A goal over the search's repeats.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct GoalSummary {
    pub goal: crate::scenario::ResolvedGoal,
    /// Conditional throughput of each repeat that found one.
    pub values: Vec<f64>,
    pub mean: Option<f64>,
    pub interval: Option<crate::uncertainty::ConfidenceInterval>,
    /// The same without disturbed trials.
    pub undisturbed_values: Vec<f64>,
    pub undisturbed_mean: Option<f64>,
    pub trials: usize,
    pub disturbed_trials: usize,
}

/// A run id `YYYYMMDD-HHMMSS-<4 hex>` (UTC) from the start time and a salt (e.g. the
/// process id), short enough to fit in namespace and interface names.
pub fn run_id(unix_ms: u64, salt: u32) -> String {
    let t = crate::time::UtcTime::from_unix_ms(unix_ms);
    format!(
        "{:04}{:02}{:02}-{:02}{:02}{:02}-{:04x}",
        t.year,
        t.month,
        t.day,
        t.hour,
        t.minute,
        t.second,
        (salt ^ (unix_ms % 1000) as u32) & 0xffff
    )
}

#[cfg(test)]
mod tests {
    use super::{disturbed_by, run_id, Disturbance, DisturbanceKind};

    #[test]
    fn disturbed_trials_are_counted_by_kind_most_first() {
        let marked = |kinds: &[DisturbanceKind]| Disturbance {
            disturbed: !kinds.is_empty(),
            marked_by: kinds.to_vec(),
            ..Disturbance::default()
        };
        let trials = [
            marked(&[DisturbanceKind::Steal]),
            marked(&[]),
            marked(&[DisturbanceKind::GeneratorLate, DisturbanceKind::Steal]),
            marked(&[DisturbanceKind::GeneratorLate]),
            marked(&[DisturbanceKind::GeneratorLate]),
        ];
        assert_eq!(
            disturbed_by(&trials),
            [
                (DisturbanceKind::GeneratorLate, 3),
                (DisturbanceKind::Steal, 2)
            ]
        );
        assert!(disturbed_by(&[marked(&[])]).is_empty());
        // Records written before the kinds were kept load with none.
        let old: Disturbance =
            serde_json::from_str(r#"{"steal":[],"other_processes":[],"run_delay":[],"generator_late":0.0,"disturbed":true,"reasons":["x"]}"#)
                .expect("an old record loads");
        assert!(old.marked_by.is_empty());
    }

    #[test]
    fn run_ids_are_utc_dates() {
        assert_eq!(run_id(0, 0), "19700101-000000-0000");
        // 2026-11-22 04:55:09.123 UTC
        assert_eq!(run_id(1_795_323_309_123, 0x1234), "20261122-045509-124f");
        assert_eq!(run_id(951_782_400_000, 1), "20000229-000000-0001");
    }

    /// A lab maximum that does not repeat (its interval reaches 0, or is wider than
    /// itself) is not judged; one that does, and any lower bound, is.
    #[test]
    fn a_lab_maximum_that_does_not_repeat_is_not_judged() {
        let row = |interval: (f64, f64), lower_bound: bool| super::TwinMaxQps {
            twin_max_qps: 120_000.0,
            lab_max_qps: 80_000.0,
            lab_limiter: "latency objective".into(),
            lab_lower_bound: lower_bound,
            relative_error: Some(0.5),
            lab_interval: Some(interval),
            ..Default::default()
        };
        // run 20261129-112405-12f3: irq-suspend's searches 42,969, 150,390, 21,485.
        let wide = row((0.0, 243_174.0), false);
        assert!(!wide.lab_max_qps_repeats());
        assert!(
            wide.verdict().starts_with("not judged"),
            "{}",
            wide.verdict()
        );
        let also_wide = row((20_000.0, 110_000.0), false);
        assert!(also_wide.verdict().starts_with("not judged"));
        // threaded's [72,852, 90,917] in the same run.
        let tight = row((72_852.0, 90_917.0), false);
        assert!(tight.lab_max_qps_repeats());
        assert_eq!(tight.verdict(), "+50.0%");
        let bound = row((0.0, 243_174.0), true);
        assert!(
            bound.verdict().starts_with("lab is a lower bound"),
            "{}",
            bound.verdict()
        );
        let text = serde_json::to_string(&wide).expect("serialize");
        let back: super::TwinMaxQps = serde_json::from_str(&text).expect("loads again");
        assert_eq!(back, wide);
    }

    /// A server run whose lab met the objective at no rate has no error: its record
    /// must load again (a NaN error was written as null and broke `napilab report`
    /// and `sim calibrate` on such runs).
    #[test]
    fn a_twin_row_without_a_lab_maximum_round_trips() {
        let row = super::TwinMaxQps {
            twin_max_qps: 90_625.0,
            lab_limiter: "client-limited".into(),
            lab_lower_bound: true,
            ..Default::default()
        };
        let text = serde_json::to_string(&row).expect("serialize");
        let back: super::TwinMaxQps = serde_json::from_str(&text).expect("loads again");
        assert_eq!(back, row);
        assert!(
            back.verdict().contains("nothing to compare"),
            "{}",
            back.verdict()
        );
    }
}
