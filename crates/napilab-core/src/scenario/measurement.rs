//! How a scenario measures: windows, repeats, the loss threshold, the searches and
//! their goals, the trace tier.

use super::*;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Measurement {
    #[serde(default = "d_duration")]
    pub duration_s: f64,
    #[serde(default = "d_warmup")]
    pub warmup_s: f64,
    #[serde(default = "d_repeats")]
    pub repeats: u32,
    /// Highest loss ratio the maximum-throughput search accepts.
    #[serde(default = "d_loss")]
    pub loss_threshold: f64,
    /// Run the maximum-throughput search per configuration.
    #[serde(default)]
    pub search: bool,
    /// The back end of the maximum-throughput search; default: `traffic.backend`.
    /// `line-rate` with a `paced` sweep measures latency with the paced back end and
    /// the maximum with frames made and counted in the kernel, so that neither the
    /// generator nor the sink sets the maximum.
    #[serde(default)]
    pub search_backend: Option<Backend>,
    /// A cap on the search's range, packets per second. Absent (the default): the
    /// range is derived from the configuration's capacity probe (twice the rate the DUT
    /// forwarded, at most what the generator offered) and raised while the search's
    /// answer reaches its top (docs/lab.md, "The search range").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub search_max_pps: Option<f64>,
    /// Most probes the bisection makes (`search_method = "bisection"`).
    #[serde(default = "d_search_iterations")]
    pub search_iterations: u32,
    /// The bisection stops when (high - low) / high is below this; also the default
    /// goal width of MLRsearch.
    #[serde(default = "d_search_resolution")]
    pub search_resolution: f64,
    /// `mlrsearch` (default: several goals in one pass, short trials first, a goal
    /// exceed ratio, docs/lab.md "The maximum-throughput search") or `bisection`
    /// (RFC 2544 section 26.1 with `loss_threshold`).
    #[serde(default)]
    pub search_method: SearchMethod,
    /// MLRsearch goals; default: one goal `pdr` with `loss_threshold`.
    #[serde(default)]
    pub search_goals: Vec<SearchGoal>,
    /// Independent repeats of the whole search per configuration: the maximum is
    /// reported as their mean with a confidence interval (needs at least 2).
    #[serde(default = "d_search_repeats")]
    pub search_repeats: u32,
    /// What MLRsearch does with a trial the machine disturbed (CPU steal, other
    /// processes on the lab's CPUs, a stalled generator): `keep` it, or `repeat` it
    /// (at most `disturbed_retries` times) and leave it out of the classification.
    #[serde(default)]
    pub disturbed_trials: DisturbedTrials,
    #[serde(default = "d_disturbed_retries")]
    pub disturbed_retries: u32,
    /// Most seconds of trials one search may spend (a search that runs out reports the
    /// bounds it has, stopped `time_limit`).
    #[serde(default = "d_search_time_limit")]
    pub search_time_limit_s: f64,
    /// Confidence level of every interval and significance verdict in the report.
    #[serde(default = "d_confidence")]
    pub confidence_level: f64,
    /// Wait after the last departure for packets in flight, ms.
    #[serde(default = "d_drain")]
    pub drain_ms: u64,
    /// What the DUT's Observation of every point adds to the /proc counters.
    #[serde(default)]
    pub trace: TraceTier,
}

/// How much tracing a lab point records on the DUT (docs/trace.md): each tier adds to
/// the one before it, and costs more (the costs are published in docs/trace.md).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TraceTier {
    /// /proc, /sys and netlink counters only.
    #[default]
    Off,
    /// The always-on BPF tier: polls, softirqs and IRQs by execution context.
    Always,
    /// Always-on plus the perf stage profile (1 kHz cpu-clock sampling).
    Stages,
    /// Always-on plus the per-packet tier (stage-to-stage latency, drops by reason).
    Packets,
}

impl TraceTier {
    /// The `napilab observe` flags that record this tier.
    pub fn observe_flags(self) -> &'static [&'static str] {
        match self {
            TraceTier::Off => &[],
            TraceTier::Always => &["--trace"],
            TraceTier::Stages => &["--trace", "--stages"],
            TraceTier::Packets => &["--trace", "--trace-packets"],
        }
    }
}

pub(super) fn d_duration() -> f64 {
    5.0
}
pub(super) fn d_warmup() -> f64 {
    1.0
}
pub(super) fn d_repeats() -> u32 {
    1
}
pub(super) fn d_loss() -> f64 {
    0.001
}
pub(super) fn d_search_iterations() -> u32 {
    8
}
pub(super) fn d_search_resolution() -> f64 {
    0.03
}
pub(super) fn d_drain() -> u64 {
    200
}
pub(super) fn d_search_repeats() -> u32 {
    1
}
pub(super) fn d_disturbed_retries() -> u32 {
    2
}
pub(super) fn d_search_time_limit() -> f64 {
    180.0
}
pub(super) fn d_confidence() -> f64 {
    0.95
}

/// How the maximum-throughput search looks for the maximum.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SearchMethod {
    #[default]
    Mlrsearch,
    Bisection,
}

/// What the search does with disturbed trials.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DisturbedTrials {
    Keep,
    #[default]
    Repeat,
}

/// One MLRsearch goal (draft-ietf-bmwg-mlrsearch, section "Search Goal"): a load is a
/// lower bound when trials longer than `final_trial_s` with loss at most `loss_ratio`
/// make up at least `1 - exceed_ratio` of `duration_sum_s` (short trials can only
/// count against it), an upper bound when high-loss trials already exceed
/// `exceed_ratio` of it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SearchGoal {
    pub name: String,
    pub loss_ratio: f64,
    /// Share of the trial time that may exceed the loss ratio, e.g. 0.5.
    #[serde(default = "d_exceed")]
    pub exceed_ratio: f64,
    /// Trials at least this long decide a lower bound; default `measurement.duration_s`.
    #[serde(default)]
    pub final_trial_s: Option<f64>,
    /// Trial time a decision needs; default twice the final trial duration.
    #[serde(default)]
    pub duration_sum_s: Option<f64>,
    /// Duration of the first, exploring trials; default a quarter of the final one,
    /// at least 0.5 s.
    #[serde(default)]
    pub initial_trial_s: Option<f64>,
    /// The search stops when (upper - lower) / upper is at most this; default
    /// `measurement.search_resolution`.
    #[serde(default)]
    pub width: Option<f64>,
}

pub(super) fn d_exceed() -> f64 {
    0.5
}

/// A goal with every default filled in from the measurement.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ResolvedGoal {
    pub name: String,
    pub loss_ratio: f64,
    pub exceed_ratio: f64,
    pub final_trial_s: f64,
    pub duration_sum_s: f64,
    pub initial_trial_s: f64,
    pub width: f64,
}

impl Measurement {
    /// The MLRsearch goals with their defaults filled in.
    pub fn resolved_goals(&self) -> Vec<ResolvedGoal> {
        let default_goal = [SearchGoal {
            name: "pdr".into(),
            loss_ratio: self.loss_threshold,
            exceed_ratio: d_exceed(),
            final_trial_s: None,
            duration_sum_s: None,
            initial_trial_s: None,
            width: None,
        }];
        let goals: &[SearchGoal] = if self.search_goals.is_empty() {
            &default_goal
        } else {
            &self.search_goals
        };
        goals
            .iter()
            .map(|g| {
                let final_trial_s = g.final_trial_s.unwrap_or(self.duration_s);
                ResolvedGoal {
                    name: g.name.clone(),
                    loss_ratio: g.loss_ratio,
                    exceed_ratio: g.exceed_ratio,
                    final_trial_s,
                    duration_sum_s: g.duration_sum_s.unwrap_or(2.0 * final_trial_s),
                    initial_trial_s: g
                        .initial_trial_s
                        .unwrap_or((final_trial_s / 4.0).max(0.5))
                        .min(final_trial_s),
                    width: g.width.unwrap_or(self.search_resolution),
                }
            })
            .collect()
    }
}

impl Default for Measurement {
    fn default() -> Self {
        Measurement {
            duration_s: d_duration(),
            warmup_s: d_warmup(),
            repeats: d_repeats(),
            loss_threshold: d_loss(),
            search: false,
            search_backend: None,
            search_max_pps: None,
            search_iterations: d_search_iterations(),
            search_resolution: d_search_resolution(),
            search_method: SearchMethod::default(),
            search_goals: Vec::new(),
            search_repeats: d_search_repeats(),
            disturbed_trials: DisturbedTrials::default(),
            disturbed_retries: d_disturbed_retries(),
            search_time_limit_s: d_search_time_limit(),
            confidence_level: d_confidence(),
            drain_ms: d_drain(),
            trace: TraceTier::Off,
        }
    }
}
