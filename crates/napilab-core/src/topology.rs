//! The packet-path map of a host: NAPI <-> queue <-> IRQ <-> CPU <-> thread, with the
//! per-device and per-NAPI settings in force.

use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TopologyMap {
    pub devices: Vec<Device>,
    /// Every numbered IRQ of /proc/interrupts that was matched to a network device, and
    /// how it was matched.
    pub irqs: Vec<IrqInfo>,
    /// Inode of the network namespace these devices are in (the mapping thread's
    /// /proc/thread-self/ns/net). The trace tier sees every namespace and records each
    /// NAPI instance's; this is what its rows are joined on (crate::device_join). None
    /// for recorded fixtures, the twin, maps recorded before napilab kept it, or when
    /// /proc did not say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub netns: Option<u32>,
}

impl TopologyMap {
    pub fn device(&self, name: &str) -> Option<&Device> {
        self.devices.iter().find(|d| d.name == name)
    }

    pub fn irq(&self, number: u32) -> Option<&IrqInfo> {
        self.irqs.iter().find(|i| i.number == number)
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Device {
    pub name: String,
    pub ifindex: u32,
    /// Driver name (ethtool driver info, or the sysfs driver link), if known.
    pub driver: Option<String>,
    pub mtu: Option<u32>,
    pub operstate: Option<String>,
    /// `/sys/class/net/<dev>/threaded`: 0 softirq, 1 threaded (2 busy-poll threaded on 6.x).
    pub threaded: Option<u32>,
    /// Device-wide `gro_flush_timeout` in ns (per-NAPI values are in [`Napi`]).
    pub gro_flush_timeout_ns: Option<u64>,
    pub napi_defer_hard_irqs: Option<u32>,
    pub qdisc: Option<QdiscInfo>,
    pub ethtool: Option<EthtoolInfo>,
    pub rx_queues: Vec<RxQueue>,
    pub tx_queues: Vec<TxQueue>,
    pub napis: Vec<Napi>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RxQueue {
    pub index: u32,
    /// From netdev `queue-get`, when the driver links queues to NAPI instances.
    pub napi_id: Option<u32>,
    /// CPUs in `rps_cpus` (empty: RPS off).
    pub rps_cpus: Vec<u32>,
    pub rps_flow_cnt: Option<u64>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TxQueue {
    pub index: u32,
    pub napi_id: Option<u32>,
    /// CPUs in `xps_cpus` (empty: XPS off or not offered).
    pub xps_cpus: Vec<u32>,
}

/// One NAPI instance as the netdev netlink family (`napi-get`) reports it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Napi {
    pub id: u32,
    pub ifindex: u32,
    /// IRQ the driver registered for this instance (`netif_napi_set_irq`), if any.
    pub irq: Option<u32>,
    pub defer_hard_irqs: Option<u32>,
    pub gro_flush_timeout_ns: Option<u64>,
    pub irq_suspend_timeout_ns: Option<u64>,
    pub threaded: Option<bool>,
    /// Which queues this instance serves (from `queue-get`).
    pub rx_queues: Vec<u32>,
    pub tx_queues: Vec<u32>,
    /// Who polls this instance.
    pub poller: Poller,
    /// Who was seen polling it (`napilab map --trace`): one row per context and CPU.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub observed_polling: Vec<ObservedPolling>,
}

/// Polls of one NAPI instance in one execution context on one CPU, measured by the
/// always-on trace tier over a short window.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ObservedPolling {
    pub context: crate::trace::ExecContext,
    pub cpu: u32,
    /// The busy-polling application, for `busy_poll`.
    pub application: Option<String>,
    pub polls_per_s: crate::metric::Metric,
    pub packets_per_s: crate::metric::Metric,
}

/// Who runs an instance's poll function.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Poller {
    /// `NET_RX_SOFTIRQ` on the CPU that took the IRQ: these CPUs (the IRQ's affinity),
    /// or, with no IRQ (virtual devices), whichever CPU scheduled the instance.
    Softirq { cpus: Vec<u32>, how: String },
    /// A `napi/<dev>-<id>` kthread.
    Thread(ThreadInfo),
    #[default]
    Unknown,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ThreadInfo {
    pub pid: u32,
    pub name: String,
    /// CPU it last ran on (/proc/<pid>/stat field 39).
    pub last_cpu: Option<u32>,
    /// `Cpus_allowed_list` of /proc/<pid>/status.
    pub allowed_cpus: Vec<u32>,
    /// `SCHED_OTHER`, `SCHED_FIFO`, ...
    pub policy: Option<String>,
    pub rt_priority: Option<u32>,
    pub nice: Option<i32>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct IrqInfo {
    pub number: u32,
    /// Action name(s) from /proc/interrupts, e.g. `virtio2-input.0`, `eth0-TxRx-3`.
    pub name: String,
    pub device: String,
    /// `rx-0`, `tx-3`, `combined-2`, when the name says it.
    pub queue: Option<String>,
    pub affinity: Vec<u32>,
    pub effective_affinity: Vec<u32>,
    pub matched_by: IrqMatch,
}

/// How an IRQ was tied to a device; the first is authoritative, the others heuristics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IrqMatch {
    /// netdev `napi-get` reported this IRQ for one of the device's NAPI instances.
    NetlinkNapi,
    /// The device's PCI function lists it in `/sys/class/net/<dev>/device/msi_irqs`.
    MsiIrqs,
    /// The IRQ's action name contains the interface name or its virtio device name.
    #[default]
    Name,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct QdiscInfo {
    /// Root qdisc kind (`noqueue`, `mq`, `fq_codel`, `pfifo_fast`, ...).
    pub kind: String,
    /// Kinds of the per-queue children under an `mq` root.
    pub children: Vec<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct EthtoolInfo {
    /// (name, value) pairs as ethtool netlink reports them, e.g. `("rx-usecs", 8)`.
    pub channels: Vec<(String, u64)>,
    pub rings: Vec<(String, u64)>,
    pub coalesce: Vec<(String, u64)>,
}
