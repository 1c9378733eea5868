//! Misreading 5: a device that transmits with no qdisc (`noqueue`, typical of virtual
//! devices and of mac80211 WiFi) sends in the caller's context, so the whole path stays
//! on the ingress core; with a qdisc, the TX softirq can drain it on another core.

use crate::finding::{Evidence, Finding, RuleId, Severity, Subject};
use crate::observation::Observation;
use crate::stats::{mean_over, short};

/// Transmit rate from which the rule speaks.
pub const MIN_TX_PACKETS_PER_SECOND: f64 = 1_000.0;

pub fn check(observation: &Observation) -> Vec<Finding> {
    let mut findings = Vec::new();
    for device in &observation.topology.devices {
        if device.name == "lo" {
            continue;
        }
        let noqueue = device.qdisc.as_ref().is_none_or(|q| q.kind == "noqueue");
        if !noqueue {
            continue;
        }
        let Some((tx, intervals)) = mean_over(observation.intervals.iter().map(|i| {
            (
                i,
                i.device(&device.name).and_then(|d| d.tx_packets.as_ref()),
            )
        })) else {
            continue;
        };
        if tx.value < MIN_TX_PACKETS_PER_SECOND {
            continue;
        }
        let kind = device
            .qdisc
            .as_ref()
            .map(|q| q.kind.as_str())
            .unwrap_or("none");
        findings.push(Finding {
            rule: RuleId::EgressWithoutQdisc,
            severity: Severity::Info,
            subject: Subject::Device(device.name.clone()),
            title: format!(
                "{}: {} pkt/s transmitted without a qdisc ({kind}): egress runs on the core that received the packets",
                device.name,
                short(tx.value)
            ),
            evidence: vec![Evidence {
                name: format!("{}.tx_packets", device.name),
                metric: tx,
            }],
            threshold: format!("root qdisc noqueue or absent, and tx >= {MIN_TX_PACKETS_PER_SECOND} pkt/s"),
            explanation: format!(
                "{} has no egress qdisc, so __dev_queue_xmit hands each packet straight to the driver in the context that forwarded it: receive, IP processing and transmit all stay on the ingress core. A queueing qdisc (even pfifo) lets NET_TX_SOFTIRQ drain packets on another core, spreading the work at a per-packet cost (the access-point study's Ethernet-to-WiFi vs WiFi-to-Ethernet asymmetry, docs/studies.md AP-7).",
                device.name
            ),
            intervals,
        });
    }
    findings
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::explain::testkit::{device, observation_of_devices};

    #[test]
    fn fires_for_busy_noqueue_device() {
        let obs = observation_of_devices(vec![device("veth1", "noqueue", 50_000.0)]);
        let f = check(&obs);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].subject, Subject::Device("veth1".into()));
    }

    #[test]
    fn silent_with_a_qdisc_or_when_idle() {
        assert!(check(&observation_of_devices(vec![device(
            "eth0", "fq_codel", 50_000.0
        )]))
        .is_empty());
        assert!(check(&observation_of_devices(vec![device(
            "veth1", "noqueue", 10.0
        )]))
        .is_empty());
    }
}
