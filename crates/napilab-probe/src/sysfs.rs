//! Per-device packet-path settings from `/sys/class/net/<dev>`.

use std::path::Path;

use napilab_core::{RxQueue, TxQueue};

use crate::kernel::read_trimmed;
use crate::procfs::{parse_cpu_list, parse_cpu_mask};

/// What sysfs says about one network device.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SysfsDevice {
    pub threaded: Option<u32>,
    pub gro_flush_timeout_ns: Option<u64>,
    pub napi_defer_hard_irqs: Option<u32>,
    pub rx_queues: Vec<RxQueue>,
    pub tx_queues: Vec<TxQueue>,
    /// Basename of the `device` link (`virtio3`, `0000:01:00.0`); none for virtual devices.
    pub bus_device: Option<String>,
    /// Name of the bound driver from `device/driver`.
    pub driver: Option<String>,
    /// IRQ numbers from `device/msi_irqs/` (PCI MSI/MSI-X devices).
    pub msi_irqs: Vec<u32>,
}

fn link_basename(path: &Path) -> Option<String> {
    std::fs::read_link(path)
        .ok()?
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
}

/// Queue directories `rx-N` / `tx-N`, sorted by N.
fn queue_indexes(dir: &Path, prefix: &str) -> Vec<u32> {
    let mut indexes: Vec<u32> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.strip_prefix(prefix)?.parse().ok())
        .collect();
    indexes.sort_unstable();
    indexes
}

/// Reads `/sys/class/net/<name>` under `root`; files that are absent (old kernels,
/// drivers without the attribute) are `None` or empty.
pub fn read_device(root: &Path, name: &str) -> SysfsDevice {
    let base = format!("sys/class/net/{name}");
    let dir = root.join(&base);
    let num = |file: &str| read_trimmed(root, &format!("{base}/{file}"));
    let queues = dir.join("queues");
    let rx_queues = queue_indexes(&queues, "rx-")
        .into_iter()
        .map(|index| {
            let q = format!("{base}/queues/rx-{index}");
            RxQueue {
                index,
                napi_id: None,
                rps_cpus: read_trimmed(root, &format!("{q}/rps_cpus"))
                    .and_then(|m| parse_cpu_mask(&m))
                    .unwrap_or_default(),
                rps_flow_cnt: read_trimmed(root, &format!("{q}/rps_flow_cnt"))
                    .and_then(|v| v.parse().ok()),
            }
        })
        .collect();
    let tx_queues = queue_indexes(&queues, "tx-")
        .into_iter()
        .map(|index| TxQueue {
            index,
            napi_id: None,
            xps_cpus: read_trimmed(root, &format!("{base}/queues/tx-{index}/xps_cpus"))
                .and_then(|m| parse_cpu_mask(&m))
                .unwrap_or_default(),
        })
        .collect();
    let mut msi_irqs: Vec<u32> = std::fs::read_dir(dir.join("device/msi_irqs"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect();
    msi_irqs.sort_unstable();
    SysfsDevice {
        threaded: num("threaded").and_then(|v| v.parse().ok()),
        gro_flush_timeout_ns: num("gro_flush_timeout").and_then(|v| v.parse().ok()),
        napi_defer_hard_irqs: num("napi_defer_hard_irqs").and_then(|v| v.parse().ok()),
        rx_queues,
        tx_queues,
        bus_device: link_basename(&dir.join("device")),
        driver: link_basename(&dir.join("device/driver")),
        msi_irqs,
    }
}

/// `/proc/irq/<n>/smp_affinity_list` and `effective_affinity_list`.
pub fn read_irq_affinity(root: &Path, irq: u32) -> (Vec<u32>, Vec<u32>) {
    let list = |file: &str| {
        read_trimmed(root, &format!("proc/irq/{irq}/{file}"))
            .and_then(|s| parse_cpu_list(&s))
            .unwrap_or_default()
    };
    (list("smp_affinity_list"), list("effective_affinity_list"))
}
