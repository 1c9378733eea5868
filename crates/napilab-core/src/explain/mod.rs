//! The explain catalogue: rules that turn an Observation into findings
//! (docs/studies.md#misreadings). Rules only read the Observation, so they work the
//! same on a live host, a replay, a lab run or the twin. Each rule averages its metrics
//! over the intervals where they exist (weighted by interval length), so a finding
//! speaks for the whole observation rather than repeating per interval.

mod accounting_truth;
mod driver_contract;
mod egress_qdisc;
mod hot_cpu;
mod idle_wake_up;
mod ksoftirqd;
mod napi_imbalance;
mod polling_mode;
mod softirq_excess;
mod tick_sampling;
mod time_squeeze;

use crate::finding::Finding;
use crate::observation::Observation;

/// Runs every rule; findings come out warnings first, then by rule and subject.
pub fn explain(observation: &Observation) -> Vec<Finding> {
    let mut findings = Vec::new();
    findings.extend(polling_mode::check(observation));
    findings.extend(softirq_excess::check(observation));
    findings.extend(tick_sampling::check(observation));
    findings.extend(egress_qdisc::check(observation));
    findings.extend(time_squeeze::check(observation));
    findings.extend(ksoftirqd::check(observation));
    findings.extend(hot_cpu::check(observation));
    findings.extend(accounting_truth::check(observation));
    findings.extend(driver_contract::check(observation));
    findings.extend(napi_imbalance::check(observation));
    findings.extend(idle_wake_up::check(observation));
    sort(&mut findings);
    findings
}

/// Warnings first, then by rule and subject.
fn sort(findings: &mut [Finding]) {
    findings.sort_by(|a, b| {
        b.severity
            .cmp(&a.severity)
            .then(a.rule.cmp(&b.rule))
            .then(a.subject.to_string().cmp(&b.subject.to_string()))
    });
}

/// The findings of several Observations (a configuration's points, lab or twin), each
/// rule and subject once (the first point's evidence), in [`explain`]'s order.
pub fn findings_of<'a>(observations: impl IntoIterator<Item = &'a Observation>) -> Vec<Finding> {
    let mut out: Vec<Finding> = Vec::new();
    for f in observations.into_iter().flat_map(|o| o.findings.iter()) {
        if !out
            .iter()
            .any(|g| g.rule == f.rule && g.subject == f.subject)
        {
            out.push(f.clone());
        }
    }
    sort(&mut out);
    out
}

#[cfg(test)]
pub(crate) mod testkit;
