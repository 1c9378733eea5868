//! Reads the host's identity ([`HostIdentity`]) under a root directory: /proc/cpuinfo,
//! /sys/devices/system/cpu (vulnerabilities, cpuidle, cpufreq), the kernel config,
//! /sys/hypervisor, the clocksources, DMI, /proc/stat's steal and the NUMA nodes.
//! Everything is best effort: a file that is missing, unreadable or odd leaves its field
//! `None` (a stripped container /sys, a microVM without DMI), never an error, because
//! the identity annotates a record and must not stop one being made.

use std::collections::BTreeMap;
use std::path::Path;

use napilab_core::{CpuIdentity, CpuIdle, HostIdentity, KernelIdentity, Virtualization};
use sha2::{Digest, Sha256};

use crate::kernel::{self, KernelConfigText};
use crate::procfs;

/// Reads a small text file: lossy UTF-8 (DMI strings are firmware's), trimmed, `None`
/// when missing, unreadable or empty.
fn text(root: &Path, rel: &str) -> Option<String> {
    let bytes = std::fs::read(root.join(rel)).ok()?;
    let s = String::from_utf8_lossy(&bytes).trim().to_string();
    (!s.is_empty()).then_some(s)
}

/// The first processor block of /proc/cpuinfo, and whether its `flags` line has
/// `hypervisor` (`None` without a `flags` line: Arm has `Features` and no such flag).
pub fn parse_cpuinfo(cpuinfo: &str) -> (CpuIdentity, Option<bool>) {
    let mut cpu = CpuIdentity::default();
    let mut flag = None;
    let mut arm_implementer = None;
    let mut seen_key = false;
    for line in cpuinfo.lines() {
        let line = line.trim_end_matches('\r');
        if line.trim().is_empty() {
            // Blocks are separated by blank lines; the first CPU describes the host.
            if seen_key {
                break;
            }
            continue;
        }
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        seen_key = true;
        let (key, value) = (key.trim(), value.trim());
        let owned = || (!value.is_empty()).then(|| value.to_string());
        match key {
            "vendor_id" => cpu.vendor = owned(),
            "model name" => cpu.model_name = owned(),
            "cpu family" => cpu.family = value.parse().ok(),
            "model" => cpu.model = value.parse().ok(),
            "stepping" => cpu.stepping = value.parse().ok(),
            "microcode" => cpu.microcode = owned(),
            "flags" => flag = Some(value.split_whitespace().any(|f| f == "hypervisor")),
            "CPU implementer" => arm_implementer = owned(),
            _ => {}
        }
    }
    if cpu.vendor.is_none() {
        cpu.vendor = arm_implementer.map(|i| format!("CPU implementer {i}"));
    }
    (cpu, flag)
}

/// The hypervisor a clocksource list names: the kernel registers these only after it
/// detected that hypervisor (by CPUID), so they are as good as asking it.
fn hypervisor_from_clocksources(available: &str) -> Option<&'static str> {
    available.split_whitespace().find_map(|c| match c {
        "kvm-clock" => Some("KVM"),
        "xen" => Some("Xen"),
        c if c.starts_with("hyperv_clocksource") => Some("Microsoft Hyper-V"),
        _ => None,
    })
}

/// The hypervisor DMI names (the table systemd-detect-virt uses, shortened). Clouds
/// built on KVM (Nitro, Compute Engine, OpenStack) are KVM; their own names stay in
/// `sys_vendor`/`product_name`.
fn hypervisor_from_dmi(sys_vendor: &str, product_name: &str) -> Option<&'static str> {
    let table: [(&str, &str); 10] = [
        ("KVM", "KVM"),
        ("Amazon EC2", "KVM"),
        ("Google", "KVM"),
        ("OpenStack", "KVM"),
        // QEMU without a KVM clocksource: possibly emulated (TCG), so not called KVM.
        ("QEMU", "QEMU"),
        ("VMware", "VMware"),
        ("innotek GmbH", "VirtualBox"),
        ("VirtualBox", "VirtualBox"),
        ("Xen", "Xen"),
        ("Parallels", "Parallels"),
    ];
    for field in [sys_vendor, product_name] {
        if let Some((_, h)) = table.iter().find(|(prefix, _)| field.starts_with(prefix)) {
            return Some(h);
        }
    }
    (sys_vendor.starts_with("Microsoft") && product_name.starts_with("Virtual Machine"))
        .then_some("Microsoft Hyper-V")
}

fn read_virtualization(root: &Path, flag: Option<bool>) -> Virtualization {
    let sys_vendor = text(root, "sys/class/dmi/id/sys_vendor");
    let product_name = text(root, "sys/class/dmi/id/product_name");
    let steal = procfs::read_stat(root)
        .ok()
        .and_then(|s| s.total)
        .map(|t| t.steal);
    let mut v = Virtualization {
        hypervisor_flag: flag,
        sys_vendor,
        product_name,
        steal_seen: steal.map(|t| t > 0),
        steal_ticks: steal,
        ..Virtualization::default()
    };
    // A bare-metal cloud instance keeps its cloud's DMI strings and a Xen dom0 has
    // /sys/hypervisor: without the CPU flag those do not make a guest.
    if flag == Some(false) {
        return v;
    }
    let found = text(root, "sys/hypervisor/type")
        .map(|t| {
            let name = match t.as_str() {
                "xen" => "Xen".to_string(),
                other => other.to_string(),
            };
            (name, "/sys/hypervisor/type".to_string())
        })
        .or_else(|| {
            let available = text(
                root,
                "sys/devices/system/clocksource/clocksource0/available_clocksource",
            )?;
            let h = hypervisor_from_clocksources(&available)?;
            let which = available
                .split_whitespace()
                .find(|c| hypervisor_from_clocksources(c) == Some(h))
                .unwrap_or(h);
            Some((h.to_string(), format!("available clocksource {which}")))
        })
        .or_else(|| {
            let vendor = v.sys_vendor.as_deref().unwrap_or("");
            let product = v.product_name.as_deref().unwrap_or("");
            let h = hypervisor_from_dmi(vendor, product)?;
            Some((h.to_string(), format!("dmi ({vendor} / {product})")))
        });
    if let Some((name, source)) = found {
        v.hypervisor = Some(name);
        v.hypervisor_source = Some(source);
    }
    v
}

fn read_mitigations(root: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let Ok(dir) = std::fs::read_dir(root.join("sys/devices/system/cpu/vulnerabilities")) else {
        return out;
    };
    for entry in dir.flatten() {
        let Ok(name) = entry.file_name().into_string() else {
            continue;
        };
        if let Some(t) = text(
            root,
            &format!("sys/devices/system/cpu/vulnerabilities/{name}"),
        ) {
            out.insert(name, t);
        }
    }
    out
}

fn read_numa_nodes(root: &Path) -> Option<Vec<u32>> {
    let dir = std::fs::read_dir(root.join("sys/devices/system/node")).ok()?;
    let mut nodes: Vec<u32> = dir
        .flatten()
        .filter_map(|e| {
            e.file_name()
                .to_str()?
                .strip_prefix("node")?
                .parse::<u32>()
                .ok()
        })
        .collect();
    nodes.sort_unstable();
    Some(nodes)
}

/// Hex SHA-256 of a kernel config's text.
pub fn config_sha256(config: &KernelConfigText) -> String {
    Sha256::digest(config.text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The identity of the host under `root`, given the kernel config its caller already
/// read (or `None` when unreadable) and the HZ it detected (HostFacts' own).
pub fn read_identity(
    root: &Path,
    config: Option<&KernelConfigText>,
    hz: Option<u32>,
) -> HostIdentity {
    let (cpu, flag) = text(root, "proc/cpuinfo")
        .map(|t| parse_cpuinfo(&t))
        .unwrap_or_default();
    let cpu_dir = "sys/devices/system/cpu";
    let cpufreq_driver = root.join(cpu_dir).is_dir().then(|| {
        // No cpufreq directory is normal in VMs: the host controls the frequency.
        text(root, &format!("{cpu_dir}/cpu0/cpufreq/scaling_driver"))
            .unwrap_or_else(|| "none".into())
    });
    HostIdentity {
        cpu,
        mitigations: read_mitigations(root),
        kernel: KernelIdentity {
            release: text(root, "proc/sys/kernel/osrelease"),
            config_sha256: config.map(config_sha256),
            config_source: config.map(|c| c.path.clone()),
        },
        virtualization: read_virtualization(root, flag),
        cpuidle: CpuIdle {
            driver: text(root, &format!("{cpu_dir}/cpuidle/current_driver")),
            governor: text(root, &format!("{cpu_dir}/cpuidle/current_governor"))
                .or_else(|| text(root, &format!("{cpu_dir}/cpuidle/current_governor_ro"))),
            guest_halt_poll_ns: text(root, "sys/module/haltpoll/parameters/guest_halt_poll_ns")
                .and_then(|v| v.parse().ok()),
        },
        cpufreq_driver,
        hz,
        numa_nodes: read_numa_nodes(root),
    }
}

/// [`read_identity`] for a caller that has not read the kernel config: reads it and
/// detects HZ the way `describe_host` does (which, without a config, measures jiffies
/// for 200 ms).
pub fn read_host_identity(root: &Path) -> HostIdentity {
    let release = kernel::read_trimmed(root, "proc/sys/kernel/osrelease");
    let config_text = kernel::read_kernel_config_text(root, release.as_deref());
    let config = config_text
        .as_ref()
        .map(|c| kernel::parse_kernel_config(&c.text, &c.path));
    let hz = kernel::detect_hz(root, config.as_ref());
    read_identity(root, config_text.as_ref(), hz.value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpuinfo_takes_the_first_block_and_the_hypervisor_flag() {
        let text = "processor\t: 0\nvendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: 85\n\
                    model name\t: Intel(R) Xeon(R) CPU @ 2.20GHz\nstepping\t: 7\nmicrocode\t: 0xffffffff\n\
                    flags\t\t: fpu vme hypervisor lahf_lm\n\nprocessor\t: 1\nvendor_id\t: Other\n";
        let (cpu, flag) = parse_cpuinfo(text);
        assert_eq!(cpu.vendor.as_deref(), Some("GenuineIntel"));
        assert_eq!(
            (cpu.family, cpu.model, cpu.stepping),
            (Some(6), Some(85), Some(7))
        );
        assert_eq!(cpu.microcode.as_deref(), Some("0xffffffff"));
        assert_eq!(flag, Some(true));
    }

    #[test]
    fn odd_cpuinfo_gives_nones_not_panics() {
        for text in [
            "",
            "\n\n\n",
            ":::\nmodel : x\ncpu family : -1\nstepping :\nflags",
            "model name : \u{fffd}\u{0}\nmodel : 99999999999999999999\n",
        ] {
            let (cpu, flag) = parse_cpuinfo(text);
            assert_eq!(cpu.family, None, "{text:?}");
            assert_eq!(cpu.model, None, "{text:?}");
            assert_eq!(flag, None, "{text:?}");
        }
        // Arm: no vendor_id, no flags line.
        let (cpu, flag) = parse_cpuinfo(
            "processor\t: 0\nBogoMIPS\t: 50.00\nFeatures\t: fp asimd\nCPU implementer\t: 0x41\nCPU part\t: 0xd0c\n",
        );
        assert_eq!(cpu.vendor.as_deref(), Some("CPU implementer 0x41"));
        assert_eq!(flag, None);
    }

    #[test]
    fn dmi_and_clocksources_name_hypervisors() {
        assert_eq!(
            hypervisor_from_dmi("Google", "Google Compute Engine"),
            Some("KVM")
        );
        assert_eq!(
            hypervisor_from_dmi("Microsoft Corporation", "Virtual Machine"),
            Some("Microsoft Hyper-V")
        );
        assert_eq!(
            hypervisor_from_dmi("Microsoft Corporation", "Surface"),
            None
        );
        assert_eq!(hypervisor_from_dmi("Dell Inc.", "PowerEdge R650"), None);
        assert_eq!(
            hypervisor_from_clocksources("tsc kvm-clock acpi_pm"),
            Some("KVM")
        );
        assert_eq!(
            hypervisor_from_clocksources("hyperv_clocksource_tsc_page tsc"),
            Some("Microsoft Hyper-V")
        );
        assert_eq!(hypervisor_from_clocksources("tsc hpet acpi_pm"), None);
    }
}
