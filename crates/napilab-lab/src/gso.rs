//! The paced generator's UDP GSO messages must leave its namespace as single packets:
//! its egress veth's `tx-udp-segmentation` is switched off once per device of each
//! namespace the lab builds (docs/lab.md, "The paced back end").

use std::io;
use std::net::Ipv4Addr;
use std::sync::Mutex;

use crate::netns::cmd;

/// Devices whose `tx-udp-segmentation` this process switched off: (namespace name, its
/// inode, device). The inode, because the lab builds each configuration's namespaces
/// afresh under the same names: keyed by names only, every configuration after the
/// first kept the new device's segmentation on, and its DUT received whole GSO
/// messages (counted once in its `rx_packets`, forwarded as one packet) whenever the
/// generator sent a batch.
static GSO_READY: Mutex<Vec<(String, u64, String)>> = Mutex::new(Vec::new());

/// The inode of named network namespace `ns` (/run/netns/NS): which namespace of that
/// name this is.
fn netns_inode(ns: &str) -> io::Result<u64> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(format!("/run/netns/{ns}"))
        .map(|m| m.ino())
        .map_err(|e| io::Error::new(e.kind(), format!("network namespace {ns}: {e}")))
}

/// Makes sure a UDP GSO message leaves `ns` towards `dst` as single packets: the
/// egress device must not accept GSO packets (`tx-udp-segmentation` off), or veth would
/// pass the whole message to the DUT as one packet. The device lives in the lab's own
/// namespace and disappears with it.
pub(crate) fn prepare_gso(ns: &str, dst: Ipv4Addr) -> io::Result<()> {
    let route = cmd("ip", &["-n", ns, "-j", "route", "get", &dst.to_string()])?;
    let v: serde_json::Value = serde_json::from_str(&route)
        .map_err(|e| io::Error::other(format!("`ip -n {ns} -j route get {dst}`: {e}")))?;
    let dev = v[0]["dev"]
        .as_str()
        .ok_or_else(|| io::Error::other(format!("`ip -n {ns} route get {dst}` names no device")))?;
    let key = (ns.to_string(), netns_inode(ns)?, dev.to_string());
    let mut ready = GSO_READY.lock().unwrap_or_else(|p| p.into_inner());
    if ready.contains(&key) {
        return Ok(());
    }
    let state = |text: &str| -> Option<String> {
        text.lines()
            .find_map(|l| l.trim().strip_prefix("tx-udp-segmentation:"))
            .map(|s| s.trim().to_string())
    };
    let k = cmd("ip", &["netns", "exec", ns, "ethtool", "-k", dev])?;
    if state(&k).is_some_and(|s| s.starts_with("on")) {
        cmd(
            "ip",
            &[
                "netns",
                "exec",
                ns,
                "ethtool",
                "-K",
                dev,
                "tx-udp-segmentation",
                "off",
            ],
        )?;
        let k = cmd("ip", &["netns", "exec", ns, "ethtool", "-k", dev])?;
        if let Some(s) = state(&k).filter(|s| s.starts_with("on")) {
            return Err(io::Error::other(format!(
                "{dev} in {ns} keeps tx-udp-segmentation {s}: the DUT would receive whole GSO messages"
            )));
        }
    }
    ready.push(key);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Deletes the test's namespaces, also when an assertion fails.
    struct Namespaces(Vec<String>);

    impl Drop for Namespaces {
        fn drop(&mut self) {
            for ns in &self.0 {
                let _ = crate::netns::delete_namespace(ns);
            }
        }
    }

    fn segmentation(ns: &str, dev: &str) -> String {
        let k = cmd("ip", &["netns", "exec", ns, "ethtool", "-k", dev]).expect("ethtool -k");
        k.lines()
            .find_map(|l| l.trim().strip_prefix("tx-udp-segmentation:"))
            .map(|s| s.trim().to_string())
            .unwrap_or_default()
    }

    /// The lab builds every configuration's namespaces afresh under the same names; each
    /// new generator device must leave GSO messages as single packets again.
    #[test]
    fn gso_is_switched_off_on_a_namespace_rebuilt_under_the_same_name() {
        if !napilab_testkit::root_or_skip(
            "gso_is_switched_off_on_a_namespace_rebuilt_under_the_same_name",
            "needs root for network namespaces and ethtool",
        ) {
            return;
        }
        let pid = std::process::id();
        let (a, b) = (format!("nlgso-{pid}-a"), format!("nlgso-{pid}-b"));
        let _cleanup = Namespaces(vec![a.clone(), b.clone()]);
        let dst = Ipv4Addr::new(10, 213, 0, 2);
        for build in 0..2 {
            for ns in [&a, &b] {
                let _ = crate::netns::delete_namespace(ns);
                crate::netns::new_namespace(ns, "").expect("namespace");
            }
            crate::netns::veth_pair((&a, "ga"), (&b, "gb"), None).expect("veth");
            crate::netns::address_up(&a, "ga", Ipv4Addr::new(10, 213, 0, 1)).expect("address");
            crate::netns::address_up(&b, "gb", dst).expect("address");
            assert!(
                segmentation(&a, "ga").starts_with("on"),
                "build {build}: a new veth starts with tx-udp-segmentation on"
            );
            prepare_gso(&a, dst).expect("prepared");
            assert!(
                segmentation(&a, "ga").starts_with("off"),
                "build {build}: {a}'s ga still segments in the receiver: {}",
                segmentation(&a, "ga")
            );
        }
    }
}
