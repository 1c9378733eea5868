//! The twin beside a lab run (docs/sim.md, "The joint calibration"): what the twin predicts for each
//! configuration the lab measured, kept in the run's record so the text report, the
//! HTML report and `--json` show the same table. napilab-sim computes it; this crate
//! only carries it, so the store and the reports need not depend on the twin.

use serde::{Deserialize, Serialize};

/// The twin's predictions for one lab run.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TwinVsLab {
    /// The profile the twin ran with, e.g. `veth-lab`.
    pub profile: String,
    /// What the predictions are, in words: which runs the profile was fitted on, and
    /// that none of this run's figures went into it.
    pub basis: String,
    /// Per configuration with a maximum-throughput search.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub maxima: Vec<TwinMaximum>,
    /// Per configuration, sweep load and traffic class (scenarios with several
    /// classes, e.g. ingress-qos): latency and loss, lab beside twin.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub classes: Vec<TwinClassPoint>,
    /// Why something is missing or how to read it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// Whether the profile was fitted on the host of this run: `same host`,
    /// `different host (what differs)`, or `unknown (why)`. A prediction made on
    /// another host than its profile's is a transfer, not a check of the model.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub profile_host: String,
}

/// One configuration's maximum, lab and twin.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TwinMaximum {
    pub configuration: String,
    pub lab_pps: f64,
    /// Why the lab's search stopped (its limiter).
    pub lab_stopped: String,
    /// The lab's maximum is the generator's or the sink's, not the DUT's: the DUT's
    /// is at least that, and the twin is judged only by "at least".
    pub lab_lower_bound: bool,
    /// The twin lacks a mechanism that only lowers this maximum (a threaded poller
    /// sharing its CPU with the engines, which have no threads in the twin): its
    /// maximum is an upper bound, also judged by "twin >= lab".
    #[serde(default)]
    pub twin_upper_bound: bool,
    /// The lab's search did not finish (time limit, interruption, no answer): its
    /// maximum is neither the DUT's nor a bound on it; the row is for information.
    #[serde(default)]
    pub lab_unfinished: bool,
    pub twin_pps: f64,
    /// (twin - lab) / lab; absent when the lab's search found no answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub relative_error: Option<f64>,
    /// The comparison in words: a signed error, or whether "twin >= lab" holds.
    pub verdict: String,
    /// The same maximum predicted by a fit to this run's other configurations
    /// (leave-one-out): the twin judged on this host, beside the shipped profile.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leave_one_out: Option<LeaveOneOutMaximum>,
}

/// One configuration's maximum predicted by a twin fitted on the same run without it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LeaveOneOutMaximum {
    /// The configurations whose maxima the fit used (this one left out); the costs
    /// come from one threaded configuration's CPU figures, not from its maximum.
    pub fitted_on: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub twin_pps: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub relative_error: Option<f64>,
    /// As [`TwinMaximum::verdict`], or why there is no prediction.
    pub verdict: String,
}

impl TwinMaximum {
    /// What set the lab's maximum, in a word or two.
    pub fn limiter(&self) -> &'static str {
        if self.lab_unfinished {
            "unfinished"
        } else if self.lab_lower_bound {
            "testbed: lower bound"
        } else {
            "DUT"
        }
    }
}

/// One class at one sweep load of one configuration, lab and twin.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TwinClassPoint {
    pub configuration: String,
    pub requested_pps: f64,
    pub class: String,
    pub lab_p50_us: Option<f64>,
    pub lab_p99_us: Option<f64>,
    pub lab_loss: f64,
    pub twin_p50_us: Option<f64>,
    pub twin_p99_us: Option<f64>,
    pub twin_loss: f64,
}
