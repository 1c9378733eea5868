//! The explain catalogue: rules that turn an Observation into findings. Rules only read
//! the Observation, so they work the same on a live host, a replay, a lab run or the twin.

use crate::finding::Finding;
use crate::observation::Observation;

/// Runs every rule over the observation's intervals.
pub fn explain(observation: &Observation) -> Vec<Finding> {
    let _ = observation;
    Vec::new()
}
