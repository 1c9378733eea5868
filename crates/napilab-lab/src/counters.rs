//! Where the kernel counts lost packets: interface statistics and veth's own counters
//! of every lab device, the qdisc drops of the DUT, the sink namespace's UDP receive
//! errors and the host's per-CPU softnet backlog drops. A point's loss counters are the
//! non-zero deltas over its measurement.

use std::collections::BTreeMap;

use crate::netns::{cmd, sh_in};
use crate::topology::Lab;

pub type Snapshot = BTreeMap<String, u64>;

/// Reads every counter (errors while reading leave counters out).
pub fn snapshot(lab: &Lab) -> Snapshot {
    let mut s = Snapshot::new();
    let links = [
        (&lab.gen_ns, &lab.gen_dev),
        (&lab.dut_ns, &lab.dut_in),
        (&lab.dut_ns, &lab.dut_out),
        (&lab.sink_ns, &lab.sink_dev),
    ];
    for (ns, dev) in links {
        link_stats(ns, dev, &mut s);
        ethtool_drops(ns, dev, &mut s);
    }
    for dev in [&lab.dut_in, &lab.dut_out] {
        qdisc_drops(&lab.dut_ns, dev, &mut s);
    }
    if let Ok(text) = sh_in(&lab.sink_ns, "cat /proc/net/snmp") {
        for (k, v) in parse_snmp(&text, "Udp:") {
            if matches!(k.as_str(), "InErrors" | "RcvbufErrors" | "NoPorts") {
                s.insert(format!("sink udp {k}"), v);
            }
        }
    }
    if let Ok(text) = sh_in(&lab.dut_ns, "cat /proc/net/snmp") {
        for (k, v) in parse_snmp(&text, "Ip:") {
            if matches!(
                k.as_str(),
                "InDiscards" | "OutDiscards" | "OutNoRoutes" | "InAddrErrors"
            ) {
                s.insert(format!("dut ip {k}"), v);
            }
        }
    }
    if let Ok(text) = std::fs::read_to_string("/proc/net/softnet_stat") {
        for (cpu, line) in text.lines().enumerate() {
            let cols: Vec<u64> = line
                .split_whitespace()
                .filter_map(|c| u64::from_str_radix(c, 16).ok())
                .collect();
            // Column 2: backlog full (RPS / netif_rx); the CPU is column 13 when
            // present (offline CPUs leave gaps).
            let cpu = cols.get(12).copied().unwrap_or(cpu as u64);
            if let Some(d) = cols.get(1) {
                s.insert(format!("softnet dropped cpu{cpu}"), *d);
            }
        }
    }
    s
}

fn link_stats(ns: &str, dev: &str, s: &mut Snapshot) {
    let Ok(text) = cmd("ip", &["-n", ns, "-s", "-j", "link", "show", "dev", dev]) else {
        return;
    };
    let Ok(v) = serde_json::from_str::<serde_json::Value>(&text) else {
        return;
    };
    let st = &v[0]["stats64"];
    for dir in ["rx", "tx"] {
        for k in ["dropped", "errors", "over_errors", "carrier_errors"] {
            if let Some(n) = st[dir][k].as_u64() {
                s.insert(format!("{dev} {dir}_{k}"), n);
            }
        }
    }
}

fn ethtool_drops(ns: &str, dev: &str, s: &mut Snapshot) {
    let Ok(text) = cmd("ip", &["netns", "exec", ns, "ethtool", "-S", dev]) else {
        return;
    };
    for line in text.lines() {
        let Some((k, v)) = line.trim().split_once(':') else {
            continue;
        };
        if k.contains("drop") {
            if let Ok(n) = v.trim().parse::<u64>() {
                s.insert(format!("{dev} ethtool {k}"), n);
            }
        }
    }
}

fn qdisc_drops(ns: &str, dev: &str, s: &mut Snapshot) {
    let Ok(text) = cmd("tc", &["-n", ns, "-s", "-j", "qdisc", "show", "dev", dev]) else {
        return;
    };
    let Ok(v) = serde_json::from_str::<serde_json::Value>(&text) else {
        return;
    };
    for q in v.as_array().into_iter().flatten() {
        let kind = q["kind"].as_str().unwrap_or("?");
        if kind == "noqueue" {
            continue;
        }
        let handle = q["handle"].as_str().unwrap_or("?");
        if let Some(d) = q["drops"].as_u64() {
            s.insert(format!("{dev} qdisc {kind} {handle} drops"), d);
        }
    }
}

/// `Udp:` (or `Ip:`) header/value line pairs of /proc/net/snmp.
pub fn parse_snmp(text: &str, prefix: &str) -> Vec<(String, u64)> {
    let lines: Vec<&str> = text.lines().filter(|l| l.starts_with(prefix)).collect();
    if lines.len() < 2 {
        return Vec::new();
    }
    lines[0]
        .split_whitespace()
        .skip(1)
        .zip(lines[1].split_whitespace().skip(1))
        .filter_map(|(k, v)| v.parse().ok().map(|v| (k.to_string(), v)))
        .collect()
}

/// Non-zero increases from `before` to `after`.
pub fn deltas(before: &Snapshot, after: &Snapshot) -> Vec<(String, u64)> {
    after
        .iter()
        .filter_map(|(k, v)| {
            let d = v.saturating_sub(before.get(k).copied().unwrap_or(*v));
            (d > 0).then(|| (k.clone(), d))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snmp_and_deltas() {
        let text = "Udp: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors\nUdp: 10 0 3 0 3\n";
        let u = parse_snmp(text, "Udp:");
        assert_eq!(u[2], ("InErrors".to_string(), 3));
        let mut a = Snapshot::new();
        let mut b = Snapshot::new();
        a.insert("x".into(), 5);
        b.insert("x".into(), 9);
        b.insert("new".into(), 4);
        a.insert("same".into(), 1);
        b.insert("same".into(), 1);
        assert_eq!(deltas(&a, &b), vec![("x".to_string(), 4)]);
    }
}
