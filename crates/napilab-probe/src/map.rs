//! Builds the [`TopologyMap`]: for every device its queues, NAPI instances, IRQs and
//! who polls each instance, from netlink, sysfs and /proc.

use std::path::Path;

use napilab_core::{
    Device, EthtoolInfo, IrqInfo, IrqMatch, Napi, Poller, QdiscInfo, ThreadInfo, TopologyMap,
};

use crate::netlink::{LinkStats, NapiEntry, Netlink, QdiscStats, QueueEntry, QueueType};
use crate::procfs::{self, Interrupts, KernelThread};
use crate::sample::Notices;
use crate::sysfs::{self, SysfsDevice};

/// Everything the map is built from, gathered once so the pure [`build_map`] can be
/// tested on recorded inputs.
#[derive(Clone, Debug, Default)]
pub struct MapInputs {
    pub links: Vec<LinkStats>,
    pub qdiscs: Vec<QdiscStats>,
    pub napis: Vec<NapiEntry>,
    pub queues: Vec<QueueEntry>,
    pub interrupts: Option<Interrupts>,
    /// The `napi/<dev>-<n>` kthreads, which also reveal instances netdev netlink does
    /// not list (see [`kthread_instances`]).
    pub napi_threads: Vec<KernelThread>,
}

/// Reads the map's inputs from the live host (netlink and files under `root`).
pub fn gather(root: &Path, netlink: Option<&mut Netlink>, notices: &mut Notices) -> MapInputs {
    let mut inputs = MapInputs {
        interrupts: procfs::read_interrupts(root).ok(),
        napi_threads: procfs::list_packet_threads(root)
            .map(|t| {
                t.into_iter()
                    .filter(|t| t.comm.starts_with("napi/"))
                    .collect()
            })
            .unwrap_or_default(),
        ..MapInputs::default()
    };
    let Some(netlink) = netlink else {
        inputs.links = links_from_sysfs(root);
        return inputs;
    };
    match netlink.links() {
        Ok(links) => inputs.links = links,
        Err(e) => {
            notices.add(
                "rtnetlink links",
                format!("{e}; devices are listed from /sys/class/net"),
            );
            inputs.links = links_from_sysfs(root);
        }
    }
    match netlink.qdiscs() {
        Ok(q) => inputs.qdiscs = q,
        Err(e) => notices.add(
            "rtnetlink qdiscs",
            format!("{e}; egress qdiscs are unknown"),
        ),
    }
    match netlink.napis() {
        Ok(n) => inputs.napis = n,
        Err(e) => notices.add(
            "netdev napi-get",
            format!("{e}; NAPI instances, their IRQs, threads and per-NAPI settings are unknown (the netdev family needs Linux 6.8 or later)"),
        ),
    }
    match netlink.queues() {
        Ok(q) => inputs.queues = q,
        Err(e) => notices.add(
            "netdev queue-get",
            format!("{e}; queue-to-NAPI links are unknown"),
        ),
    }
    inputs
}

/// Device list without netlink: names and ifindexes from sysfs.
fn links_from_sysfs(root: &Path) -> Vec<LinkStats> {
    let mut links: Vec<LinkStats> = std::fs::read_dir(root.join("sys/class/net"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_str()?.to_string();
            let ifindex =
                crate::kernel::read_trimmed(root, &format!("sys/class/net/{name}/ifindex"))?
                    .parse()
                    .ok()?;
            Some(LinkStats {
                ifindex,
                name,
                ..LinkStats::default()
            })
        })
        .collect();
    links.sort_by_key(|l| l.ifindex);
    links
}

/// `-input.3` -> `rx-3`, `-TxRx-2` -> `combined-2`, ...: the queue an IRQ name names.
fn queue_from_irq_name(name: &str) -> Option<String> {
    let lower = name.to_ascii_lowercase();
    let patterns = [
        ("-input.", "rx"),
        ("-output.", "tx"),
        ("-txrx-", "combined"),
        ("-rx-", "rx"),
        ("-tx-", "tx"),
        ("-rxtx-", "combined"),
    ];
    patterns.iter().find_map(|(pat, kind)| {
        let at = lower.find(pat)?;
        let digits: String = lower[at + pat.len()..]
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        (!digits.is_empty()).then(|| format!("{kind}-{digits}"))
    })
}

/// True when `action` names `prefix` at a token boundary (`eth0`, `eth0-rx-1`), so that
/// `eth1` does not match `eth10-rx-0`.
fn names(action: &str, prefix: &str) -> bool {
    action.split(',').map(str::trim).any(|a| {
        a.strip_prefix(prefix)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with(['-', '_', ':', '@', '.']))
    })
}

fn thread_info(root: &Path, pid: u32) -> ThreadInfo {
    let stat = procfs::read_text(root, &format!("proc/{pid}/stat"))
        .ok()
        .and_then(|t| procfs::parse_task_stat(&t).ok());
    let allowed = procfs::read_text(root, &format!("proc/{pid}/status"))
        .ok()
        .and_then(|t| procfs::parse_status_cpus_allowed(&t))
        .unwrap_or_default();
    ThreadInfo {
        pid,
        name: stat.as_ref().map(|s| s.comm.clone()).unwrap_or_default(),
        last_cpu: stat.as_ref().and_then(|s| s.processor),
        allowed_cpus: allowed,
        policy: stat
            .as_ref()
            .and_then(|s| s.policy)
            .map(|p| procfs::policy_name(p).to_string()),
        rt_priority: stat.as_ref().and_then(|s| s.rt_priority),
        nice: stat.as_ref().and_then(|s| i32::try_from(s.nice).ok()),
    }
}

fn qdisc_info(qdiscs: &[QdiscStats], ifindex: u32) -> Option<QdiscInfo> {
    let root = qdiscs.iter().find(|q| q.ifindex == ifindex && q.is_root)?;
    let children = qdiscs
        .iter()
        .filter(|q| q.ifindex == ifindex && !q.is_root && q.parent >> 16 == root.handle >> 16)
        .map(|q| q.kind.clone())
        .collect();
    Some(QdiscInfo {
        kind: root.kind.clone(),
        children,
    })
}

/// Ties each numbered IRQ to a network device: first from netlink (authoritative), then
/// the PCI function's MSI list, then by name.
fn match_irqs(root: &Path, inputs: &MapInputs, sys: &[(LinkStats, SysfsDevice)]) -> Vec<IrqInfo> {
    let Some(interrupts) = inputs.interrupts.as_ref() else {
        return Vec::new();
    };
    let mut irqs = Vec::new();
    for line in &interrupts.lines {
        let Some(number) = line.number else { continue };
        let by_netlink = inputs
            .napis
            .iter()
            .find(|n| n.irq == Some(number))
            .and_then(|n| sys.iter().find(|(l, _)| l.ifindex == n.ifindex))
            .map(|(l, _)| (l.name.clone(), IrqMatch::NetlinkNapi));
        let by_msi = || {
            sys.iter()
                .find(|(_, s)| s.msi_irqs.contains(&number))
                .map(|(l, _)| (l.name.clone(), IrqMatch::MsiIrqs))
        };
        let by_name = || {
            sys.iter()
                .find(|(l, s)| {
                    names(&line.name, &l.name)
                        || s.bus_device
                            .as_deref()
                            .is_some_and(|b| names(&line.name, b))
                })
                .map(|(l, _)| (l.name.clone(), IrqMatch::Name))
        };
        let Some((device, matched_by)) = by_netlink.or_else(by_msi).or_else(by_name) else {
            continue;
        };
        let (affinity, effective_affinity) = sysfs::read_irq_affinity(root, number);
        irqs.push(IrqInfo {
            number,
            name: line.name.clone(),
            device,
            queue: queue_from_irq_name(&line.name),
            affinity,
            effective_affinity,
            matched_by,
        });
    }
    irqs
}

fn poller_for(
    root: &Path,
    napi: &NapiEntry,
    device_irqs: &[&IrqInfo],
    rx_queues: &[u32],
) -> Poller {
    if let Some(pid) = napi.pid.filter(|p| *p > 0) {
        return Poller::Thread(thread_info(root, pid));
    }
    let irq = napi
        .irq
        .and_then(|n| device_irqs.iter().find(|i| i.number == n))
        .or_else(|| {
            // No IRQ from netlink: use the IRQ whose name names this instance's RX queue.
            device_irqs.iter().find(|i| {
                i.queue.as_deref().is_some_and(|q| {
                    rx_queues
                        .iter()
                        .any(|r| q == format!("rx-{r}") || q == format!("combined-{r}"))
                })
            })
        });
    match irq {
        Some(irq) => {
            let cpus = if irq.effective_affinity.is_empty() {
                irq.affinity.clone()
            } else {
                irq.effective_affinity.clone()
            };
            Poller::Softirq {
                cpus,
                how: format!("NET_RX softirq on the CPU that takes IRQ {} ({})", irq.number, irq.name),
            }
        }
        None => Poller::Softirq {
            cpus: Vec::new(),
            how: "no IRQ of its own: NET_RX softirq on whichever CPU schedules it (for veth, the sending CPU)".into(),
        },
    }
}

/// Builds the map. `ethtool` is asked per device when given (it costs a few syscalls per
/// device, so only `map` and the start of `observe` use it).
pub fn build_map(
    root: &Path,
    inputs: &MapInputs,
    mut ethtool: Option<&mut Netlink>,
) -> TopologyMap {
    let sys: Vec<(LinkStats, SysfsDevice)> = inputs
        .links
        .iter()
        .map(|l| (l.clone(), sysfs::read_device(root, &l.name)))
        .collect();
    let irqs = match_irqs(root, inputs, &sys);
    let devices = sys
        .iter()
        .map(|(link, s)| {
            let queues_of = |napi_id: u32, kind: QueueType| -> Vec<u32> {
                inputs
                    .queues
                    .iter()
                    .filter(|q| {
                        q.ifindex == link.ifindex && q.kind == kind && q.napi_id == Some(napi_id)
                    })
                    .map(|q| q.id)
                    .collect()
            };
            let device_irqs: Vec<&IrqInfo> =
                irqs.iter().filter(|i| i.device == link.name).collect();
            let listed: Vec<&NapiEntry> = inputs
                .napis
                .iter()
                .filter(|n| n.ifindex == link.ifindex)
                .collect();
            let from_kthreads = if s.threaded.is_some_and(|t| t != 0) {
                kthread_instances(
                    root,
                    &link.name,
                    link.ifindex,
                    &listed,
                    &inputs.napi_threads,
                )
            } else {
                Vec::new()
            };
            let napis = listed
                .iter()
                .map(|n| {
                    let rx_queues = queues_of(n.id, QueueType::Rx);
                    Napi {
                        id: n.id,
                        ifindex: n.ifindex,
                        irq: n.irq,
                        defer_hard_irqs: n.defer_hard_irqs,
                        gro_flush_timeout_ns: n.gro_flush_timeout_ns,
                        irq_suspend_timeout_ns: n.irq_suspend_timeout_ns,
                        threaded: n.threaded.map(|t| t != 0),
                        poller: poller_for(root, n, &device_irqs, &rx_queues),
                        tx_queues: queues_of(n.id, QueueType::Tx),
                        rx_queues,
                        observed_polling: Vec::new(),
                    }
                })
                .chain(from_kthreads)
                .collect();
            let mut rx_queues = s.rx_queues.clone();
            for q in &mut rx_queues {
                q.napi_id = napi_of(inputs, link.ifindex, QueueType::Rx, q.index);
            }
            let mut tx_queues = s.tx_queues.clone();
            for q in &mut tx_queues {
                q.napi_id = napi_of(inputs, link.ifindex, QueueType::Tx, q.index);
            }
            let ethtool_settings = ethtool
                .as_deref_mut()
                .and_then(|nl| nl.ethtool(link.ifindex, &link.name).ok());
            Device {
                name: link.name.clone(),
                ifindex: link.ifindex,
                driver: ethtool_settings
                    .as_ref()
                    .and_then(|e| e.driver.clone())
                    .or_else(|| s.driver.clone()),
                mtu: link.mtu,
                operstate: link.operstate.clone(),
                threaded: s.threaded,
                gro_flush_timeout_ns: s.gro_flush_timeout_ns,
                napi_defer_hard_irqs: s.napi_defer_hard_irqs,
                qdisc: qdisc_info(&inputs.qdiscs, link.ifindex),
                ethtool: ethtool_settings.map(|e| EthtoolInfo {
                    channels: e.channels.unwrap_or_default(),
                    rings: e.rings.unwrap_or_default(),
                    coalesce: e.coalesce.unwrap_or_default(),
                }),
                rx_queues,
                tx_queues,
                napis,
            }
        })
        .collect();
    TopologyMap {
        devices,
        irqs,
        netns: None,
    }
}

/// NAPI instances of a threaded device that netdev netlink does not list, found from
/// their kthreads `napi/<dev>-<n>`: instances added without a NAPI id (the kernel names
/// their kthreads `napi/<dev>-0`, all alike; TUN with `IFF_NAPI`, TX-only NAPIs), and,
/// on kernels without the netdev family, every threaded instance (`n` is its id). One
/// instance per kthread, id `n` (0: no id), polled by that kthread.
///
/// Kernel threads are host-wide: a device of the same name in another network
/// namespace has kthreads of the same name, which this cannot tell apart. A name the
/// kernel cut at 15 bytes (long device names) is not matched.
pub fn kthread_instances(
    root: &Path,
    device: &str,
    ifindex: u32,
    listed: &[&NapiEntry],
    threads: &[KernelThread],
) -> Vec<Napi> {
    let prefix = format!("napi/{device}-");
    threads
        .iter()
        .filter_map(|t| {
            let id: u32 = t.comm.strip_prefix(&prefix)?.parse().ok()?;
            let known = listed.iter().any(|n| n.id == id || n.pid == Some(t.pid));
            (!known).then(|| Napi {
                id,
                ifindex,
                threaded: Some(true),
                poller: Poller::Thread(thread_info(root, t.pid)),
                ..Napi::default()
            })
        })
        .collect()
}

fn napi_of(inputs: &MapInputs, ifindex: u32, kind: QueueType, id: u32) -> Option<u32> {
    inputs
        .queues
        .iter()
        .find(|q| q.ifindex == ifindex && q.kind == kind && q.id == id)
        .and_then(|q| q.napi_id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_names() {
        assert_eq!(
            queue_from_irq_name("virtio2-input.0").as_deref(),
            Some("rx-0")
        );
        assert_eq!(
            queue_from_irq_name("virtio2-output.3").as_deref(),
            Some("tx-3")
        );
        assert_eq!(
            queue_from_irq_name("eth0-TxRx-7").as_deref(),
            Some("combined-7")
        );
        assert_eq!(queue_from_irq_name("mlx5_comp0@pci").as_deref(), None);
        assert_eq!(queue_from_irq_name("virtio2-config"), None);
    }

    #[test]
    fn id_less_instances_come_from_their_kthreads() {
        let threads: Vec<KernelThread> = [
            (10, "napi/tun0-0"),
            (11, "napi/tun0-0"),
            (12, "napi/tun01-0"),
            (13, "napi/vb-8193"),
            (14, "napi/tun0-8200"),
        ]
        .iter()
        .map(|&(pid, comm)| KernelThread {
            pid,
            comm: comm.into(),
        })
        .collect();
        let listed = NapiEntry {
            id: 8200,
            ifindex: 4,
            ..NapiEntry::default()
        };
        let root = Path::new("/nonexistent");
        let found = kthread_instances(root, "tun0", 4, &[&listed], &threads);
        let pids: Vec<u32> = found
            .iter()
            .map(|n| match &n.poller {
                Poller::Thread(t) => t.pid,
                _ => 0,
            })
            .collect();
        assert_eq!(
            pids,
            vec![10, 11],
            "tun01's and the listed instance's threads are not tun0's id-less ones"
        );
        assert!(found
            .iter()
            .all(|n| n.id == 0 && n.ifindex == 4 && n.threaded == Some(true)));
        // Without netlink (old kernels) every threaded instance comes from its kthread.
        let old = kthread_instances(root, "vb", 7, &[], &threads);
        assert_eq!(old.len(), 1);
        assert_eq!(old[0].id, 8193);
    }

    #[test]
    fn name_matching_respects_token_boundaries() {
        assert!(names("eth1-rx-0", "eth1"));
        assert!(names("eth1", "eth1"));
        assert!(!names("eth10-rx-0", "eth1"));
        assert!(names("virtio2-input.0", "virtio2"));
        assert!(!names("virtio21-input.0", "virtio2"));
        assert!(names("eth0-other, eth1-TxRx-0", "eth1"));
    }
}
