//! Which machine a record came from: CPU, microcode, mitigations, kernel build,
//! virtualization, idle and frequency drivers, HZ and NUMA nodes (docs/observation.md,
//! "Host identity"). Two runs are only comparable as A/B when these agree: a different
//! CPU, kernel or hypervisor moves packet-path costs by more than most tunings do, so
//! `napilab compare` must not credit a setting with what the host did.
//!
//! Every field is optional and defaulted: records written before napilab kept the
//! identity still load, and a stripped /proc or /sys gives `None`, not an error. The
//! probe fills this (napilab-probe `host_identity`); this module only names, summarises
//! and compares.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct HostIdentity {
    pub cpu: CpuIdentity,
    /// /sys/devices/system/cpu/vulnerabilities/*: file name -> its text, e.g.
    /// `spectre_v2` -> `Mitigation: Retpolines; ...`. Empty when unreadable.
    pub mitigations: BTreeMap<String, String>,
    pub kernel: KernelIdentity,
    pub virtualization: Virtualization,
    pub cpuidle: CpuIdle,
    /// cpu0's cpufreq `scaling_driver`; `none` when the CPU has no cpufreq directory
    /// (most VMs), `None` when /sys could not be read at all.
    pub cpufreq_driver: Option<String>,
    /// The kernel's tick rate, as HostFacts detected it (CONFIG_HZ or measured).
    pub hz: Option<u32>,
    /// NUMA node ids (/sys/devices/system/node/node*); `None` without that directory.
    pub numa_nodes: Option<Vec<u32>>,
}

/// The first CPU's /proc/cpuinfo block (napilab does not expect mixed sockets).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct CpuIdentity {
    /// `vendor_id`, e.g. `AuthenticAMD`, `GenuineIntel`; on Arm `CPU implementer 0x41`.
    pub vendor: Option<String>,
    pub model_name: Option<String>,
    pub family: Option<u32>,
    pub model: Option<u32>,
    pub stepping: Option<u32>,
    /// As cpuinfo prints it, e.g. `0x1000065`.
    pub microcode: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct KernelIdentity {
    /// /proc/sys/kernel/osrelease.
    pub release: Option<String>,
    /// SHA-256 (hex) of the kernel config text; `None` when neither /proc/config.gz nor
    /// /boot/config-<release> was readable. Two builds with one release string (a
    /// distribution rebuild, a self-built kernel) differ here.
    pub config_sha256: Option<String>,
    /// Which file was hashed.
    pub config_source: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Virtualization {
    /// The `hypervisor` flag of /proc/cpuinfo (x86); `None` where cpuinfo has no
    /// `flags` line (Arm) or was unreadable.
    pub hypervisor_flag: Option<bool>,
    /// The hypervisor's vendor, e.g. `KVM`, `Xen`, `Microsoft Hyper-V`, `VMware`.
    pub hypervisor: Option<String>,
    /// Where `hypervisor` came from, e.g. `/sys/hypervisor/type`,
    /// `available clocksource kvm-clock` (registered, not necessarily in use), `dmi sys_vendor`.
    pub hypervisor_source: Option<String>,
    /// /sys/class/dmi/id/sys_vendor and product_name (absent in microVMs without DMI).
    pub sys_vendor: Option<String>,
    pub product_name: Option<String>,
    /// Whether /proc/stat's aggregate steal column is above zero: the hypervisor ran
    /// something else on this guest's CPUs since boot. Varies between runs on one host,
    /// so it is never a difference between identities.
    pub steal_seen: Option<bool>,
    /// That column, USER_HZ ticks since boot.
    pub steal_ticks: Option<u64>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct CpuIdle {
    /// /sys/devices/system/cpu/cpuidle/current_driver (`none` in many VMs).
    pub driver: Option<String>,
    /// current_governor, or current_governor_ro on kernels without the writable file.
    pub governor: Option<String>,
    /// /sys/module/haltpoll/parameters/guest_halt_poll_ns: how long an idle vCPU of a
    /// KVM guest polls before it halts (0: it halts at once, so every wake-up of an idle
    /// vCPU is a VM exit); absent without the haltpoll driver.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub guest_halt_poll_ns: Option<u64>,
}

impl CpuIdle {
    /// A KVM guest whose idle vCPUs halt at once (the `haltpoll` driver with
    /// `guest_halt_poll_ns` 0): every wake-up of an idle vCPU waits for the hypervisor.
    pub fn halts_at_once(&self) -> bool {
        self.driver.as_deref() == Some("haltpoll") && self.guest_halt_poll_ns == Some(0)
    }
}

/// One field that differs between two identities.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct IdentityDifference {
    /// Dotted field name, e.g. `cpu.model_name`, `mitigations.spectre_v2`.
    pub field: String,
    pub a: String,
    pub b: String,
}

fn or_unknown<T: ToString>(v: Option<T>) -> String {
    v.map_or_else(|| "unknown".into(), |v| v.to_string())
}

fn node_list(nodes: &[u32]) -> String {
    if nodes.is_empty() {
        return "none".into();
    }
    let ids: Vec<String> = nodes.iter().map(u32::to_string).collect();
    format!("{} ({})", nodes.len(), ids.join(","))
}

impl HostIdentity {
    /// Whether the host is a virtual machine: `Some(true)` with a known hypervisor or
    /// the cpuinfo flag, `None` when nothing says either way.
    pub fn is_virtual(&self) -> Option<bool> {
        if self.virtualization.hypervisor.is_some() {
            return Some(true);
        }
        self.virtualization.hypervisor_flag
    }

    /// `KVM`, `bare metal`, `unknown hypervisor` (a VM whose vendor nothing named) or
    /// `virtualization unknown`.
    pub fn hypervisor_label(&self) -> String {
        match (&self.virtualization.hypervisor, self.is_virtual()) {
            (Some(v), _) => v.clone(),
            (None, Some(true)) => "unknown hypervisor".into(),
            (None, Some(false)) => "bare metal".into(),
            (None, None) => "virtualization unknown".into(),
        }
    }

    /// The CPU as one phrase: model name with family/model/stepping and microcode.
    pub fn cpu_label(&self) -> String {
        let c = &self.cpu;
        let name = c
            .model_name
            .clone()
            .or_else(|| c.vendor.clone())
            .unwrap_or_else(|| "CPU unknown".into());
        let mut details = Vec::new();
        if c.family.is_some() || c.model.is_some() || c.stepping.is_some() {
            details.push(format!(
                "family {} model {} stepping {}",
                or_unknown(c.family),
                or_unknown(c.model),
                or_unknown(c.stepping)
            ));
        }
        if let Some(m) = &c.microcode {
            details.push(format!("microcode {m}"));
        }
        if details.is_empty() {
            name
        } else {
            format!("{name} ({})", details.join(", "))
        }
    }

    /// One line, e.g. `AMD EPYC (family 25 model 1 stepping 1, microcode 0x1000065),
    /// Linux 6.18.44, KVM`.
    pub fn summary(&self) -> String {
        let kernel = match &self.kernel.release {
            Some(r) => format!("Linux {r}"),
            None => "kernel unknown".into(),
        };
        format!(
            "{}, {kernel}, {}",
            self.cpu_label(),
            self.hypervisor_label()
        )
    }

    /// Every field as (name, value) in a fixed order, for one-line-per-field text.
    /// Unknown values read `unknown`; an unreadable kernel config reads `unreadable`.
    pub fn fields(&self) -> Vec<(String, String)> {
        let c = &self.cpu;
        let k = &self.kernel;
        let v = &self.virtualization;
        let mut out: Vec<(String, String)> = vec![
            ("cpu vendor".into(), or_unknown(c.vendor.as_ref())),
            ("cpu model name".into(), or_unknown(c.model_name.as_ref())),
            ("cpu family".into(), or_unknown(c.family)),
            ("cpu model".into(), or_unknown(c.model)),
            ("cpu stepping".into(), or_unknown(c.stepping)),
            ("microcode".into(), or_unknown(c.microcode.as_ref())),
            ("kernel release".into(), or_unknown(k.release.as_ref())),
            (
                "kernel config sha256".into(),
                match (&k.config_sha256, &k.config_source) {
                    (Some(h), Some(src)) => format!("{h} ({src})"),
                    (Some(h), None) => h.clone(),
                    (None, _) => "unreadable".into(),
                },
            ),
            (
                "hypervisor".into(),
                match &v.hypervisor_source {
                    Some(src) if v.hypervisor.is_some() => {
                        format!("{} (from {src})", self.hypervisor_label())
                    }
                    _ => self.hypervisor_label(),
                },
            ),
            (
                "hypervisor cpu flag".into(),
                or_unknown(v.hypervisor_flag.map(|f| if f { "yes" } else { "no" })),
            ),
            ("dmi sys_vendor".into(), or_unknown(v.sys_vendor.as_ref())),
            (
                "dmi product_name".into(),
                or_unknown(v.product_name.as_ref()),
            ),
            (
                "steal time".into(),
                match (v.steal_seen, v.steal_ticks) {
                    (Some(true), Some(t)) => format!("yes ({t} ticks since boot)"),
                    (Some(false), _) => "no".into(),
                    (Some(true), None) => "yes".into(),
                    (None, _) => "unknown".into(),
                },
            ),
            (
                "cpuidle driver".into(),
                or_unknown(self.cpuidle.driver.as_ref()),
            ),
            (
                "cpuidle governor".into(),
                or_unknown(self.cpuidle.governor.as_ref()),
            ),
            (
                "guest halt poll".into(),
                self.cpuidle
                    .guest_halt_poll_ns
                    .map_or("none (no haltpoll driver)".into(), |ns| format!("{ns} ns")),
            ),
            (
                "cpufreq driver".into(),
                or_unknown(self.cpufreq_driver.as_ref()),
            ),
            ("HZ".into(), or_unknown(self.hz)),
            (
                "NUMA nodes".into(),
                self.numa_nodes
                    .as_deref()
                    .map_or_else(|| "unknown".into(), node_list),
            ),
        ];
        if self.mitigations.is_empty() {
            out.push(("mitigations".into(), "unknown".into()));
        }
        for (name, text) in &self.mitigations {
            out.push((format!("mitigation {name}"), text.clone()));
        }
        out
    }

    /// The fields in which `other` (B) differs from `self` (A), by name. A field known
    /// on one side only is not a difference (an older record, a stripped /sys): there
    /// is nothing to compare. Steal time, which changes from run to run on one host,
    /// and where a value was read from, are never compared.
    pub fn differences(&self, other: &HostIdentity) -> Vec<IdentityDifference> {
        let mut out = Vec::new();
        let mut field = |name: &str, a: Option<String>, b: Option<String>| {
            if let (Some(a), Some(b)) = (a, b) {
                if a != b {
                    out.push(IdentityDifference {
                        field: name.into(),
                        a,
                        b,
                    });
                }
            }
        };
        let s = |v: &Option<String>| v.clone();
        let n = |v: Option<u32>| v.map(|v| v.to_string());
        let (a, b) = (self, other);
        field("cpu.vendor", s(&a.cpu.vendor), s(&b.cpu.vendor));
        field("cpu.model_name", s(&a.cpu.model_name), s(&b.cpu.model_name));
        field("cpu.family", n(a.cpu.family), n(b.cpu.family));
        field("cpu.model", n(a.cpu.model), n(b.cpu.model));
        field("cpu.stepping", n(a.cpu.stepping), n(b.cpu.stepping));
        field("cpu.microcode", s(&a.cpu.microcode), s(&b.cpu.microcode));
        field("kernel.release", s(&a.kernel.release), s(&b.kernel.release));
        field(
            "kernel.config_sha256",
            s(&a.kernel.config_sha256),
            s(&b.kernel.config_sha256),
        );
        let virt = |h: &HostIdentity| h.is_virtual().map(|_| h.hypervisor_label());
        match (
            &a.virtualization.hypervisor,
            &b.virtualization.hypervisor,
            a.is_virtual(),
            b.is_virtual(),
        ) {
            // Both named: compare the names.
            (Some(_), Some(_), _, _) => field("virtualization.hypervisor", virt(a), virt(b)),
            // Otherwise only VM against bare metal is a known difference: an unnamed
            // hypervisor may be the named one on the other side.
            (_, _, Some(x), Some(y)) if x != y => {
                field("virtualization.hypervisor", virt(a), virt(b))
            }
            _ => {}
        }
        field(
            "virtualization.sys_vendor",
            s(&a.virtualization.sys_vendor),
            s(&b.virtualization.sys_vendor),
        );
        field(
            "virtualization.product_name",
            s(&a.virtualization.product_name),
            s(&b.virtualization.product_name),
        );
        field("cpuidle.driver", s(&a.cpuidle.driver), s(&b.cpuidle.driver));
        field(
            "cpuidle.governor",
            s(&a.cpuidle.governor),
            s(&b.cpuidle.governor),
        );
        field(
            "cpuidle.guest_halt_poll_ns",
            a.cpuidle.guest_halt_poll_ns.map(|v| v.to_string()),
            b.cpuidle.guest_halt_poll_ns.map(|v| v.to_string()),
        );
        field("cpufreq_driver", s(&a.cpufreq_driver), s(&b.cpufreq_driver));
        field("hz", n(a.hz), n(b.hz));
        field(
            "numa_nodes",
            a.numa_nodes.as_deref().map(node_list),
            b.numa_nodes.as_deref().map(node_list),
        );
        // Mitigations: only when both sides read the directory. A name on one side only
        // is a difference (a kernel that knows a vulnerability the other does not).
        if !a.mitigations.is_empty() && !b.mitigations.is_empty() {
            let mut names: Vec<&String> =
                a.mitigations.keys().chain(b.mitigations.keys()).collect();
            names.sort();
            names.dedup();
            for name in names {
                let text = |m: &BTreeMap<String, String>| {
                    Some(m.get(name).cloned().unwrap_or_else(|| "absent".into()))
                };
                field(
                    &format!("mitigations.{name}"),
                    text(&a.mitigations),
                    text(&b.mitigations),
                );
            }
        }
        out
    }
}

/// `(major, minor)` of a kernel release such as `6.18.0-1-amd64` or `6.19`: what a
/// feature's "Linux X.Y or later" is compared with. None when it does not start so.
pub fn kernel_version(release: &str) -> Option<(u32, u32)> {
    let mut it = release.trim().split('.');
    let major = it.next()?.parse().ok()?;
    let minor = it
        .next()?
        .split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()?;
    Some((major, minor))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn amd() -> HostIdentity {
        HostIdentity {
            cpu: CpuIdentity {
                vendor: Some("AuthenticAMD".into()),
                model_name: Some("AMD EPYC".into()),
                family: Some(25),
                model: Some(1),
                stepping: Some(1),
                microcode: Some("0x1000065".into()),
            },
            mitigations: BTreeMap::from([
                ("meltdown".into(), "Not affected".into()),
                ("spectre_v2".into(), "Mitigation: Retpolines".into()),
            ]),
            kernel: KernelIdentity {
                release: Some("6.18.44".into()),
                config_sha256: Some("30f8".into()),
                config_source: Some("/proc/config.gz".into()),
            },
            virtualization: Virtualization {
                hypervisor_flag: Some(true),
                hypervisor: Some("KVM".into()),
                hypervisor_source: Some("available clocksource kvm-clock".into()),
                steal_seen: Some(true),
                steal_ticks: Some(49),
                ..Virtualization::default()
            },
            cpuidle: CpuIdle {
                driver: Some("none".into()),
                governor: Some("menu".into()),
                guest_halt_poll_ns: None,
            },
            cpufreq_driver: Some("none".into()),
            hz: Some(250),
            numa_nodes: Some(vec![0]),
        }
    }

    #[test]
    fn summary_names_cpu_kernel_and_hypervisor() {
        assert_eq!(
            amd().summary(),
            "AMD EPYC (family 25 model 1 stepping 1, microcode 0x1000065), Linux 6.18.44, KVM"
        );
        assert_eq!(
            HostIdentity::default().summary(),
            "CPU unknown, kernel unknown, virtualization unknown"
        );
        let mut metal = amd();
        metal.virtualization = Virtualization {
            hypervisor_flag: Some(false),
            ..Virtualization::default()
        };
        assert!(metal.summary().ends_with(", bare metal"));
    }

    #[test]
    fn the_same_host_twice_has_no_differences_even_with_more_steal() {
        let a = amd();
        let mut b = amd();
        b.virtualization.steal_ticks = Some(123_456);
        b.virtualization.steal_seen = Some(true);
        b.virtualization.hypervisor_source = Some("dmi sys_vendor".into());
        assert_eq!(a.differences(&b), []);
        // Steal seen on one run and not on the other: still the same host.
        b.virtualization.steal_seen = Some(false);
        assert_eq!(a.differences(&b), []);
    }

    #[test]
    fn differences_are_named_field_by_field() {
        let a = amd();
        let mut b = amd();
        b.cpu.microcode = Some("0x1000066".into());
        b.kernel.release = Some("6.12.1".into());
        b.mitigations
            .insert("spectre_v2".into(), "Vulnerable".into());
        b.mitigations.remove("meltdown");
        b.virtualization.hypervisor = None;
        b.virtualization.hypervisor_flag = Some(false);
        let d = a.differences(&b);
        let fields: Vec<&str> = d.iter().map(|d| d.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "cpu.microcode",
                "kernel.release",
                "virtualization.hypervisor",
                "mitigations.meltdown",
                "mitigations.spectre_v2"
            ]
        );
        assert_eq!(d[2].a, "KVM");
        assert_eq!(d[2].b, "bare metal");
        assert_eq!(d[3].b, "absent");
    }

    #[test]
    fn unknown_on_one_side_is_not_a_difference() {
        let a = amd();
        assert_eq!(a.differences(&HostIdentity::default()), []);
        // An unnamed hypervisor may be the named one.
        let mut b = amd();
        b.virtualization.hypervisor = None;
        assert_eq!(a.differences(&b), []);
    }

    #[test]
    fn old_and_partial_json_parses() {
        let partial: HostIdentity =
            serde_json::from_str(r#"{"cpu":{"vendor":"GenuineIntel"},"future_field":1}"#)
                .expect("partial identity");
        assert_eq!(partial.cpu.vendor.as_deref(), Some("GenuineIntel"));
        assert_eq!(partial.kernel, KernelIdentity::default());
        let round: HostIdentity =
            serde_json::from_str(&serde_json::to_string(&amd()).expect("json")).expect("parse");
        assert_eq!(round, amd());
    }

    #[test]
    fn fields_say_unreadable_and_none() {
        let mut id = amd();
        id.kernel.config_sha256 = None;
        let fields = id.fields();
        let get = |k: &str| {
            fields
                .iter()
                .find(|(n, _)| n == k)
                .map(|(_, v)| v.as_str())
                .unwrap_or("missing")
        };
        assert_eq!(get("kernel config sha256"), "unreadable");
        assert_eq!(get("cpufreq driver"), "none");
        assert_eq!(get("steal time"), "yes (49 ticks since boot)");
        assert_eq!(
            get("hypervisor"),
            "KVM (from available clocksource kvm-clock)"
        );
        assert_eq!(get("mitigation spectre_v2"), "Mitigation: Retpolines");
        assert_eq!(get("NUMA nodes"), "1 (0)");
    }
}
