//! Joining host-wide rows to one device of the observing network namespace.
//!
//! The trace tier's tracepoints and /proc's NAPI kthreads see every network namespace
//! of the host, while the map (crate::topology) describes one, and device names and
//! ifindexes are per namespace: on a host with containers `eth0` is many devices. A
//! trace row names its device by (namespace inode, ifindex), so it belongs to a device
//! of the map when both are the device's. When either side does not know its namespace
//! (a recording made before napilab kept it, a map made without /proc), rows are joined
//! by name as before, and devices of the same name in other namespaces are mixed in
//! (docs/trace.md, "Which namespace").

use crate::observation::ThreadRole;
use crate::topology::TopologyMap;
use crate::trace::NapiPollTrace;

/// One device of a map, as host-wide rows are matched to it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceJoin {
    name: String,
    /// The device's ifindex, when the map has the device.
    ifindex: Option<u32>,
    /// The map's network namespace inode, when known.
    netns: Option<u32>,
    /// The NAPI ids of the device's instances in the map (ids are global).
    napi_ids: Vec<u32>,
}

impl DeviceJoin {
    /// The device `name` of `topology`'s namespace (a name the map lacks still matches
    /// rows of that name in the map's namespace).
    pub fn new(topology: &TopologyMap, name: &str) -> Self {
        let device = topology.device(name);
        DeviceJoin {
            name: name.to_string(),
            ifindex: device.map(|d| d.ifindex),
            netns: topology.netns,
            napi_ids: device
                .map(|d| d.napis.iter().map(|n| n.id).filter(|&id| id != 0).collect())
                .unwrap_or_default(),
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether the trace row `row` is a poll of this device: the same namespace and
    /// ifindex when both namespaces are known, else the same name.
    pub fn polls(&self, row: &NapiPollTrace) -> bool {
        match (self.netns, row.netns) {
            (Some(own), netns) if netns != 0 => {
                netns == own
                    && match self.ifindex {
                        Some(ifindex) => row.ifindex == ifindex,
                        None => row.device == self.name,
                    }
            }
            _ => row.device == self.name,
        }
    }

    /// Whether a thread with `role` is one of this device's NAPI kthreads
    /// (`napi/<dev>-<napi id>`): by NAPI id when the map lists the device's instances
    /// (kthread names carry no namespace, ids are global), else by name.
    pub fn runs_kthread(&self, role: &ThreadRole) -> bool {
        let ThreadRole::NapiThread { device, napi_id } = role else {
            return false;
        };
        match napi_id {
            Some(id) if *id != 0 && !self.napi_ids.is_empty() => self.napi_ids.contains(id),
            _ => device.as_deref() == Some(self.name.as_str()),
        }
    }
}

/// Whether a row recorded in namespace `row_netns` belongs to another namespace than
/// the map's (`own`): only when both are known and differ. Host-wide views keep such
/// rows and label them; per-device views leave them out.
pub fn is_elsewhere(own: Option<u32>, row_netns: u32) -> bool {
    matches!(own, Some(own) if row_netns != 0 && row_netns != own)
}

/// How host-wide views name a device: `vb (netns 4026532512)` when it is in another
/// namespace than the map's (device names repeat across namespaces), else its name.
pub fn label(own: Option<u32>, device: &str, netns: u32) -> String {
    if is_elsewhere(own, netns) {
        format!("{device} (netns {netns})")
    } else {
        device.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::{Device, Napi};
    use crate::trace::ExecContext;
    use crate::{Metric, Source, Unit};

    const OWN: u32 = 4026532100;
    const OTHER: u32 = 4026532200;

    fn map(netns: Option<u32>) -> TopologyMap {
        TopologyMap {
            devices: vec![Device {
                name: "vb".into(),
                ifindex: 2,
                napis: vec![Napi {
                    id: 8193,
                    ifindex: 2,
                    ..Napi::default()
                }],
                ..Device::default()
            }],
            irqs: Vec::new(),
            netns,
        }
    }

    fn row(device: &str, ifindex: u32, netns: u32) -> NapiPollTrace {
        NapiPollTrace {
            napi_id: 8193,
            device: device.into(),
            ifindex,
            netns,
            cpu: 0,
            context: ExecContext::BhEnable,
            application: None,
            polls: 1,
            packets: 1,
            full_budget_polls: 0,
            work_histogram: Vec::new(),
            polls_per_s: Metric::new(1.0, Unit::PerSecond, Source::Trace),
            packets_per_s: Metric::new(1.0, Unit::PacketsPerSecond, Source::Trace),
        }
    }

    #[test]
    fn a_device_of_the_same_name_in_another_namespace_is_not_this_one() {
        let vb = DeviceJoin::new(&map(Some(OWN)), "vb");
        assert!(vb.polls(&row("vb", 2, OWN)));
        assert!(!vb.polls(&row("vb", 2, OTHER)), "same name and ifindex");
        assert!(!vb.polls(&row("vb", 7, OTHER)));
        // The namespace and ifindex decide, not the name (a rename keeps the ifindex).
        assert!(vb.polls(&row("vb-renamed", 2, OWN)));
        assert!(
            !vb.polls(&row("vb", 3, OWN)),
            "another device of this namespace"
        );
    }

    #[test]
    fn without_a_namespace_on_either_side_rows_join_by_name() {
        // A recording made before the namespace was kept: rows have netns 0.
        let vb = DeviceJoin::new(&map(Some(OWN)), "vb");
        assert!(vb.polls(&row("vb", 9, 0)));
        assert!(!vb.polls(&row("va", 2, 0)));
        // A map without /proc: every namespace's vb counts, as before.
        let unknown = DeviceJoin::new(&map(None), "vb");
        assert!(unknown.polls(&row("vb", 2, OWN)) && unknown.polls(&row("vb", 2, OTHER)));
        assert!(!unknown.polls(&row("va", 2, OWN)));
    }

    #[test]
    fn a_name_the_map_lacks_matches_only_in_the_maps_namespace() {
        let gone = DeviceJoin::new(&map(Some(OWN)), "tun0");
        assert!(gone.polls(&row("tun0", 5, OWN)));
        assert!(!gone.polls(&row("tun0", 5, OTHER)));
    }

    #[test]
    fn kthreads_join_by_napi_id_when_the_map_lists_the_instances() {
        let vb = DeviceJoin::new(&map(Some(OWN)), "vb");
        let kthread = |device: &str, id: u32| ThreadRole::NapiThread {
            device: Some(device.into()),
            napi_id: Some(id),
        };
        assert!(vb.runs_kthread(&kthread("vb", 8193)));
        assert!(
            !vb.runs_kthread(&kthread("vb", 8200)),
            "napi/vb-8200 is another namespace's vb"
        );
        assert!(!vb.runs_kthread(&ThreadRole::Ksoftirqd { cpu: 0 }));
        // No instances in the map (no netdev netlink): by name.
        let mut bare = map(Some(OWN));
        bare.devices[0].napis.clear();
        let vb = DeviceJoin::new(&bare, "vb");
        assert!(vb.runs_kthread(&kthread("vb", 8200)));
        assert!(!vb.runs_kthread(&kthread("va", 8200)));
    }

    #[test]
    fn elsewhere_only_when_both_namespaces_are_known_and_differ() {
        assert!(is_elsewhere(Some(OWN), OTHER));
        assert!(!is_elsewhere(Some(OWN), OWN));
        assert!(
            !is_elsewhere(Some(OWN), 0),
            "the backlog, or an old recording"
        );
        assert!(!is_elsewhere(None, OTHER), "a map without its namespace");
        assert_eq!(label(Some(OWN), "vb", OTHER), "vb (netns 4026532200)");
        assert_eq!(label(Some(OWN), "vb", OWN), "vb");
    }
}
