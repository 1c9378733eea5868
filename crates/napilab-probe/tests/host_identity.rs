//! The host identity reader on fixture trees (tests/fixtures/host/README.md): an AMD
//! KVM guest, an Intel Compute Engine guest, odd files and a stripped tree.

use std::path::{Path, PathBuf};

use napilab_probe::host_identity::{read_host_identity, read_identity};
use napilab_probe::kernel::read_kernel_config_text;

fn root(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/host")
        .join(name)
}

/// What describe_host does: the config text it read, and HZ from it.
fn identity(name: &str) -> napilab_core::HostIdentity {
    let root = root(name);
    let release = std::fs::read_to_string(root.join("proc/sys/kernel/osrelease"))
        .ok()
        .map(|s| s.trim().to_string());
    let config = read_kernel_config_text(&root, release.as_deref());
    read_identity(&root, config.as_ref(), Some(250))
}

#[test]
fn amd_kvm_guest() {
    let id = identity("amd-kvm");
    assert_eq!(id.cpu.vendor.as_deref(), Some("AuthenticAMD"));
    assert_eq!(id.cpu.model_name.as_deref(), Some("AMD EPYC"));
    assert_eq!(
        (id.cpu.family, id.cpu.model, id.cpu.stepping),
        (Some(25), Some(1), Some(1))
    );
    assert_eq!(id.cpu.microcode.as_deref(), Some("0x1000065"));
    assert_eq!(id.mitigations.len(), 19);
    assert_eq!(
        id.mitigations
            .get("spec_rstack_overflow")
            .map(String::as_str),
        Some("Mitigation: Safe RET")
    );
    assert_eq!(id.kernel.release.as_deref(), Some("6.18.44-fc-v782"));
    // SHA-256 of the decompressed config text (sha256sum of `zcat proc/config.gz`).
    assert_eq!(
        id.kernel.config_sha256.as_deref(),
        Some("138a7fa00a9fba21559ee198574fc56d9a2e736e67f0a8a34e569fdf29a8b739")
    );
    assert_eq!(id.kernel.config_source.as_deref(), Some("/proc/config.gz"));
    let v = &id.virtualization;
    assert_eq!(v.hypervisor_flag, Some(true));
    assert_eq!(v.hypervisor.as_deref(), Some("KVM"));
    assert_eq!(
        v.hypervisor_source.as_deref(),
        Some("available clocksource kvm-clock")
    );
    assert_eq!(
        (v.sys_vendor.as_deref(), v.product_name.as_deref()),
        (None, None)
    );
    assert_eq!((v.steal_seen, v.steal_ticks), (Some(true), Some(228)));
    assert_eq!(id.cpuidle.driver.as_deref(), Some("none"));
    assert_eq!(id.cpuidle.governor.as_deref(), Some("menu"));
    assert_eq!(id.cpufreq_driver.as_deref(), Some("none"));
    assert_eq!(id.hz, Some(250));
    assert_eq!(id.numa_nodes, Some(vec![0]));
    assert_eq!(
        id.summary(),
        "AMD EPYC (family 25 model 1 stepping 1, microcode 0x1000065), Linux 6.18.44-fc-v782, KVM"
    );
}

#[test]
fn intel_compute_engine_guest() {
    let id = identity("intel-gce");
    assert_eq!(id.cpu.vendor.as_deref(), Some("GenuineIntel"));
    assert_eq!(
        id.cpu.model_name.as_deref(),
        Some("Intel(R) Xeon(R) CPU @ 2.20GHz")
    );
    assert_eq!(
        (id.cpu.family, id.cpu.model, id.cpu.stepping),
        (Some(6), Some(85), Some(7))
    );
    assert_eq!(id.cpu.microcode.as_deref(), Some("0xffffffff"));
    assert_eq!(id.mitigations.len(), 12);
    assert_eq!(
        id.kernel.config_source.as_deref(),
        Some("/boot/config-6.1.0-18-cloud-amd64")
    );
    assert_eq!(
        id.kernel.config_sha256.as_deref(),
        Some("5e11f2c7e9c47a93cb0458a470815078dac1ca737fafb5f4aeeeb532aa47165c")
    );
    let v = &id.virtualization;
    assert_eq!(v.hypervisor.as_deref(), Some("KVM"));
    assert_eq!(
        v.hypervisor_source.as_deref(),
        Some("dmi (Google / Google Compute Engine)")
    );
    assert_eq!(v.sys_vendor.as_deref(), Some("Google"));
    assert_eq!((v.steal_seen, v.steal_ticks), (Some(true), Some(1203)));
    // Only current_governor_ro exists.
    assert_eq!(id.cpuidle.governor.as_deref(), Some("haltpoll"));
    assert_eq!(id.cpuidle.guest_halt_poll_ns, Some(200_000));
    assert_eq!(id.cpufreq_driver.as_deref(), Some("none"));
    assert_eq!(
        id.summary(),
        "Intel(R) Xeon(R) CPU @ 2.20GHz (family 6 model 85 stepping 7, microcode 0xffffffff), \
         Linux 6.1.0-18-cloud-amd64, KVM"
    );
}

#[test]
fn amd_and_intel_differ_by_name_but_not_in_steal() {
    let (amd, intel) = (identity("amd-kvm"), identity("intel-gce"));
    let d = amd.differences(&intel);
    let fields: Vec<&str> = d.iter().map(|d| d.field.as_str()).collect();
    for f in [
        "cpu.vendor",
        "cpu.model_name",
        "cpu.family",
        "cpu.microcode",
        "kernel.release",
        "kernel.config_sha256",
        "cpuidle.driver",
        "mitigations.spectre_v2",
        // Named on one side only: a kernel that knows the vulnerability.
        "mitigations.vmscape",
    ] {
        assert!(fields.contains(&f), "{f} missing from {fields:?}");
    }
    // Same hypervisor (KVM, found two ways), HZ, NUMA and cpufreq: not differences.
    for f in [
        "virtualization.hypervisor",
        "hz",
        "numa_nodes",
        "cpufreq_driver",
    ] {
        assert!(!fields.contains(&f), "{f} in {fields:?}");
    }
    assert!(!fields.iter().any(|f| f.contains("steal")), "{fields:?}");
    // DMI strings exist on one side only: not comparable.
    assert!(!fields.contains(&"virtualization.sys_vendor"));
    assert!(amd.differences(&identity("amd-kvm")).is_empty());
}

#[test]
fn odd_files_give_nones() {
    let id = identity("odd");
    assert_eq!(id.cpu.vendor, None);
    assert_eq!(
        (id.cpu.family, id.cpu.model, id.cpu.stepping),
        (None, None, None)
    );
    assert_eq!(id.cpu.model_name.as_deref(), Some("\u{fffd}\u{fffd}odd"));
    assert_eq!(id.kernel.release, None);
    assert_eq!(id.kernel.config_sha256, None);
    // `hypervisorx` is not the flag: QEMU's DMI and /sys/hypervisor alone do not make a
    // guest (bare-metal clouds keep their DMI strings).
    let v = &id.virtualization;
    assert_eq!(v.hypervisor_flag, Some(false));
    assert_eq!(v.hypervisor, None);
    assert_eq!(v.sys_vendor.as_deref(), Some("QEMU"));
    assert_eq!((v.steal_seen, v.steal_ticks), (None, None));
    assert_eq!(id.hypervisor_label(), "bare metal");
    assert_eq!(id.mitigations.len(), 1, "{:?}", id.mitigations);
    assert!(id.mitigations["spectre_v2"].contains("broken utf-8"));
    assert_eq!(id.cpuidle.driver, None);
    assert_eq!(id.numa_nodes, Some(vec![3]));
}

#[test]
fn a_stripped_tree_gives_an_empty_identity() {
    let root = root("stripped");
    let id = read_host_identity(&root);
    assert_eq!(id.cpu, Default::default());
    assert!(id.mitigations.is_empty());
    assert_eq!(id.kernel, Default::default());
    assert_eq!(id.virtualization, Default::default());
    assert_eq!(id.cpufreq_driver, None);
    assert_eq!(id.numa_nodes, None);
    assert_eq!(id.hz, None);
    assert_eq!(
        id.summary(),
        "CPU unknown, kernel unknown, virtualization unknown"
    );
    // A root that does not exist at all is the same.
    assert_eq!(read_host_identity(&root.join("nowhere")), id);
}

/// describe_host puts the identity into HostFacts, so every Observation, recording and
/// lab run carries it.
#[test]
fn describe_host_carries_the_identity() {
    let header = napilab_probe::observe::describe_host(&root("amd-kvm"), false);
    let id = header.host.identity.expect("identity in HostFacts");
    assert_eq!(id.cpu.vendor.as_deref(), Some("AuthenticAMD"));
    assert_eq!(id.hz, header.host.hz.value);
    assert_eq!(id.hz, Some(250));
}
