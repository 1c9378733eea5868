//! Turns two consecutive samples into one [`Interval`] of rates and shares.
//!
//! Counter handling. /proc/interrupts, /proc/softirqs and /proc/net/softnet_stat print
//! 32-bit kernel counters (`unsigned int`), which wrap (every ~71 minutes at 1 Mpps), so
//! their deltas are taken modulo 2^32. The other counters (link and qdisc statistics,
//! /proc/stat, thread times, netdev qstats) are 64-bit: one that goes backwards was reset
//! (device re-created) and its metric is left out of that interval rather than reported
//! as a huge wrap.

use std::collections::BTreeSet;

use crate::near::find_near;

use napilab_core::{
    CpuAccounting, CpuInterval, CpuTimeShares, DeviceInterval, HostInterval, Interval, IrqInterval,
    Metric, Poller, QdiscInterval, QueueInterval, QueueKind, SchedDelta, Source, ThreadInterval,
    ThreadRole, TopologyMap, Unit,
};

use napilab_core::stats::sum;

use crate::netlink::{LinkStats, QdiscStats, QueueStats, QueueType};
use crate::procfs::{CpuTimes, TaskStat};
use crate::sample::Sample;

/// What derivation needs besides the two samples.
pub struct DeriveContext<'a> {
    pub topology: &'a TopologyMap,
    pub accounting: CpuAccounting,
    pub user_hz: u32,
}

fn delta(prev: u64, cur: u64) -> Option<u64> {
    cur.checked_sub(prev)
}

/// Delta of a 32-bit kernel counter that may have wrapped once since `prev`.
fn delta32(prev: u64, cur: u64) -> Option<u64> {
    let max = u64::from(u32::MAX);
    match cur.checked_sub(prev) {
        Some(d) => Some(d),
        None if prev <= max && cur <= max => Some(cur + (max + 1) - prev),
        None => None,
    }
}

fn ratio(num: Option<&Metric>, den: Option<&Metric>, how: &str) -> Option<Metric> {
    let (num, den) = (num?, den?);
    (den.value > 0.0).then(|| {
        Metric::derived(
            num.value / den.value,
            Unit::PacketsPerEvent,
            Source::Proc,
            how,
        )
    })
}

/// Derives interval `index` from `prev` to `cur`; `start_s` is its offset from the
/// observation's first sample.
pub fn derive_interval(
    prev: &Sample,
    cur: &Sample,
    ctx: &DeriveContext<'_>,
    index: usize,
    start_s: f64,
) -> Interval {
    let seconds = cur.t_ns.saturating_sub(prev.t_ns) as f64 / 1e9;
    let cpus = derive_cpus(prev, cur, ctx, seconds);
    let devices = derive_devices(prev, cur, ctx.topology, seconds);
    let host = derive_host(&cpus, &devices);
    Interval {
        index,
        start_s,
        duration_s: seconds,
        irqs: derive_irqs(prev, cur, ctx.topology, seconds),
        threads: derive_threads(prev, cur, ctx, seconds),
        cpus,
        devices,
        host,
        trace: None,
    }
}

fn cpu_ids(cur: &Sample) -> Vec<u32> {
    let mut ids = BTreeSet::new();
    if let Some(stat) = &cur.stat {
        ids.extend(stat.cpus.iter().map(|(cpu, _)| *cpu));
    }
    if let Some(softirqs) = &cur.softirqs {
        ids.extend(softirqs.cpus.iter().copied());
    }
    ids.into_iter().collect()
}

/// Sum over IRQ lines of the per-CPU delta, for lines accepted by `keep`.
fn irq_delta_on_cpu(
    prev: &Sample,
    cur: &Sample,
    cpu: u32,
    keep: impl Fn(u32) -> bool,
) -> Option<u64> {
    let (p, c) = (prev.interrupts.as_ref()?, cur.interrupts.as_ref()?);
    let (pcol, ccol) = (p.column(cpu)?, c.column(cpu)?);
    let mut sum = 0u64;
    for (index, line) in c.lines.iter().enumerate() {
        if !line.number.is_some_and(&keep) {
            continue;
        }
        let Some(now) = line.counts.get(ccol) else {
            continue;
        };
        // An IRQ registered since the previous sample has no baseline: its count since
        // boot is not activity of this interval.
        let Some(before) = p
            .line_near(index, &line.id)
            .and_then(|l| l.counts.get(pcol))
        else {
            continue;
        };
        sum += delta32(*before, *now).unwrap_or(0);
    }
    Some(sum)
}

fn softirq_delta(prev: &Sample, cur: &Sample, vector: &str, cpu: u32) -> Option<u64> {
    let now = cur.softirqs.as_ref()?.count(vector, cpu)?;
    let before = prev.softirqs.as_ref()?.count(vector, cpu)?;
    delta32(before, now)
}

fn derive_cpus(
    prev: &Sample,
    cur: &Sample,
    ctx: &DeriveContext<'_>,
    seconds: f64,
) -> Vec<CpuInterval> {
    let net_irqs: BTreeSet<u32> = ctx.topology.irqs.iter().map(|i| i.number).collect();
    cpu_ids(cur)
        .into_iter()
        .map(|cpu| {
            let ksoftirqd = format!("ksoftirqd/{cpu}");
            let rate = |d: Option<u64>| {
                d.and_then(|d| Metric::rate(d, seconds, Unit::PerSecond, Source::Proc))
            };
            let pkt_rate = |d: Option<u64>| {
                d.and_then(|d| Metric::rate(d, seconds, Unit::PacketsPerSecond, Source::Proc))
            };
            let softnet = |f: fn(&crate::procfs::SoftnetRow) -> Option<u64>| {
                let row = |s: &Sample| {
                    s.softnet
                        .as_ref()?
                        .iter()
                        .find(|r| r.cpu == cpu)
                        .and_then(f)
                };
                delta32(row(prev)?, row(cur)?)
            };
            let hardirqs = rate(irq_delta_on_cpu(prev, cur, cpu, |_| true));
            let net_hardirqs = if net_irqs.is_empty() {
                None
            } else {
                rate(irq_delta_on_cpu(prev, cur, cpu, |n| net_irqs.contains(&n)))
            };
            let net_rx_softirqs = rate(softirq_delta(prev, cur, "NET_RX", cpu));
            let softnet_processed = pkt_rate(softnet(|r| Some(r.processed)));
            CpuInterval {
                cpu,
                packets_per_net_rx_softirq: ratio(
                    softnet_processed.as_ref(),
                    net_rx_softirqs.as_ref(),
                    "softnet processed / NET_RX softirqs",
                ),
                packets_per_net_hardirq: ratio(
                    softnet_processed.as_ref(),
                    net_hardirqs.as_ref(),
                    "softnet processed / network device hard IRQs",
                ),
                hardirqs,
                net_hardirqs,
                net_rx_softirqs,
                net_tx_softirqs: rate(softirq_delta(prev, cur, "NET_TX", cpu)),
                softnet_processed,
                softnet_dropped: pkt_rate(softnet(|r| Some(r.dropped))),
                time_squeeze: rate(softnet(|r| Some(r.time_squeeze))),
                flow_limit: pkt_rate(softnet(|r| r.flow_limit_count)),
                received_rps: pkt_rate(softnet(|r| r.received_rps)),
                time: derive_time_shares(prev, cur, cpu, ctx.accounting),
                ksoftirqd: thread_share(prev, cur, ctx.user_hz, seconds, |t| t.comm == ksoftirqd),
            }
        })
        .collect()
}

fn derive_time_shares(
    prev: &Sample,
    cur: &Sample,
    cpu: u32,
    accounting: CpuAccounting,
) -> Option<CpuTimeShares> {
    let before: &CpuTimes = prev.stat.as_ref()?.cpu(cpu)?;
    let now: &CpuTimes = cur.stat.as_ref()?.cpu(cpu)?;
    let total = delta(before.total(), now.total()).filter(|t| *t > 0)? as f64;
    // Which categories are measured rather than tick-sampled depends on the kernel's
    // accounting mode (docs/kernel.md#cpu-accounting).
    let measured_irq = matches!(accounting, CpuAccounting::IrqTime | CpuAccounting::Virtual);
    let measured_all = accounting == CpuAccounting::Virtual;
    let share = |b: u64, n: u64, measured: bool| {
        let source = if measured { Source::Proc } else { Source::Tick };
        Metric::new(
            n.saturating_sub(b) as f64 / total,
            Unit::CpuFraction,
            source,
        )
    };
    Some(CpuTimeShares {
        user: share(before.user, now.user, measured_all),
        nice: share(before.nice, now.nice, measured_all),
        system: share(before.system, now.system, measured_all),
        idle: share(before.idle, now.idle, measured_all),
        iowait: share(before.iowait, now.iowait, measured_all),
        irq: share(before.irq, now.irq, measured_irq),
        softirq: share(before.softirq, now.softirq, measured_irq),
        steal: share(before.steal, now.steal, measured_all),
    })
}

/// CPU share of the thread picked by `pick`. utime + stime of /proc/<pid>/stat add up to
/// the scheduler's measured runtime (only their split is tick-based), hence `proc`.
fn thread_share(
    prev: &Sample,
    cur: &Sample,
    user_hz: u32,
    seconds: f64,
    pick: impl Fn(&TaskStat) -> bool,
) -> Option<Metric> {
    let now = cur.threads.iter().find(|t| pick(t))?;
    let before = prev.threads.iter().find(|t| t.pid == now.pid)?;
    let ticks = delta(before.utime + before.stime, now.utime + now.stime)?;
    (seconds > 0.0).then(|| {
        Metric::derived(
            ticks as f64 / f64::from(user_hz) / seconds,
            Unit::CpuFraction,
            Source::Proc,
            "(utime + stime) delta / USER_HZ / interval",
        )
    })
}

/// What `/proc/<pid>/schedstat` of `pid` counted between the samples; `None` when either
/// sample lacks it or a counter went back (the pid was reused).
fn sched_delta(prev: &Sample, cur: &Sample, pid: u32) -> Option<SchedDelta> {
    let find = |s: &Sample| {
        s.schedstats
            .iter()
            .find(|(p, _)| *p == pid)
            .map(|(_, x)| *x)
    };
    let (before, now) = (find(prev)?, find(cur)?);
    Some(SchedDelta {
        on_cpu_ns: delta(before.on_cpu_ns, now.on_cpu_ns)?,
        run_delay_ns: delta(before.run_delay_ns, now.run_delay_ns)?,
        runs: delta(before.runs, now.runs)?,
    })
}

fn derive_threads(
    prev: &Sample,
    cur: &Sample,
    ctx: &DeriveContext<'_>,
    seconds: f64,
) -> Vec<ThreadInterval> {
    cur.threads
        .iter()
        .filter_map(|t| {
            let role = if let Some(cpu) = t.comm.strip_prefix("ksoftirqd/") {
                ThreadRole::Ksoftirqd {
                    cpu: cpu.parse().ok()?,
                }
            } else if t.comm.starts_with("napi/") {
                let napi = ctx.topology.devices.iter().find_map(|d| {
                    d.napis.iter().find_map(|n| match &n.poller {
                        Poller::Thread(th) if th.pid == t.pid => Some((d.name.clone(), n.id)),
                        _ => None,
                    })
                });
                ThreadRole::NapiThread {
                    device: napi.as_ref().map(|(d, _)| d.clone()),
                    napi_id: napi.map(|(_, id)| id),
                }
            } else {
                return None;
            };
            Some(ThreadInterval {
                pid: t.pid,
                name: t.comm.clone(),
                role,
                last_cpu: t.processor,
                cpu: thread_share(prev, cur, ctx.user_hz, seconds, |x| x.pid == t.pid),
                sched: sched_delta(prev, cur, t.pid),
            })
        })
        .collect()
}

fn derive_irqs(
    prev: &Sample,
    cur: &Sample,
    topology: &TopologyMap,
    seconds: f64,
) -> Vec<IrqInterval> {
    let (Some(p), Some(c)) = (prev.interrupts.as_ref(), cur.interrupts.as_ref()) else {
        return Vec::new();
    };
    c.lines
        .iter()
        .enumerate()
        .filter_map(|(index, line)| {
            let number = line.number?;
            let before = p.line_near(index, &line.id)?;
            let per_cpu: Vec<(u32, Metric)> = c
                .cpus
                .iter()
                .zip(&line.counts)
                .filter_map(|(cpu, now)| {
                    let col = p.column(*cpu)?;
                    let d = delta32(*before.counts.get(col)?, *now)?;
                    (d > 0)
                        .then(|| Metric::rate(d, seconds, Unit::PerSecond, Source::Proc))?
                        .map(|m| (*cpu, m))
                })
                .collect();
            let info = topology.irq(number);
            // Quiet IRQs of other subsystems would only bloat the output.
            if per_cpu.is_empty() && info.is_none() {
                return None;
            }
            let total = sum(per_cpu.iter().map(|(_, m)| m.value));
            Some(IrqInterval {
                number,
                name: line.name.clone(),
                device: info.map(|i| i.device.clone()),
                queue: info.and_then(|i| i.queue.clone()),
                total: Some(Metric::new(total, Unit::PerSecond, Source::Proc)),
                per_cpu,
            })
        })
        .collect()
}

fn qdisc_interval(prev: Option<&QdiscStats>, cur: &QdiscStats, seconds: f64) -> QdiscInterval {
    let same = prev.filter(|p| p.kind == cur.kind && p.handle == cur.handle);
    let rate = |f: fn(&QdiscStats) -> u64, unit: Unit| {
        same.and_then(|p| delta(f(p), f(cur)))
            .and_then(|d| Metric::rate(d, seconds, unit, Source::Proc))
    };
    QdiscInterval {
        kind: cur.kind.clone(),
        packets: rate(|q| q.packets, Unit::PacketsPerSecond),
        drops: rate(|q| q.drops, Unit::PacketsPerSecond),
        requeues: rate(|q| q.requeues, Unit::PerSecond),
        overlimits: rate(|q| q.overlimits, Unit::PerSecond),
        backlog_packets: Some(cur.qlen),
    }
}

/// Per-queue rates from netdev qstats, with the NAPI instance serving each queue.
fn derive_queues(
    prev: &Sample,
    cur: &Sample,
    link: &LinkStats,
    topology: &TopologyMap,
    seconds: f64,
) -> Vec<QueueInterval> {
    let device = topology.devices.iter().find(|d| d.ifindex == link.ifindex);
    cur.qstats
        .iter()
        .flatten()
        .enumerate()
        .filter(|(_, q)| q.ifindex == link.ifindex)
        .map(|(index, q)| {
            let before = find_near(prev.qstats.as_deref().unwrap_or_default(), index, |p| {
                p.ifindex == q.ifindex && p.kind == q.kind && p.queue == q.queue
            });
            let rate = |f: fn(&QueueStats) -> Option<u64>, unit: Unit, scale: u64| {
                let d = delta(f(before?)?, f(q)?)?;
                Metric::rate(d.saturating_mul(scale), seconds, unit, Source::Proc)
            };
            let (kind, napi_id) = match q.kind {
                QueueType::Rx => (
                    QueueKind::Rx,
                    device.and_then(|d| d.rx_queues.iter().find(|r| r.index == q.queue)?.napi_id),
                ),
                QueueType::Tx => (
                    QueueKind::Tx,
                    device.and_then(|d| d.tx_queues.iter().find(|t| t.index == q.queue)?.napi_id),
                ),
            };
            QueueInterval {
                kind,
                index: q.queue,
                napi_id,
                packets: rate(|s| s.packets, Unit::PacketsPerSecond, 1),
                bits: rate(|s| s.bytes, Unit::BitsPerSecond, 8),
                hw_drops: rate(|s| s.hw_drops, Unit::PacketsPerSecond, 1),
            }
        })
        .collect()
}

fn root_qdisc(sample: &Sample, ifindex: u32) -> Option<&QdiscStats> {
    sample
        .qdiscs
        .as_ref()?
        .iter()
        .find(|q| q.ifindex == ifindex && q.is_root)
}

fn derive_devices(
    prev: &Sample,
    cur: &Sample,
    topology: &TopologyMap,
    seconds: f64,
) -> Vec<DeviceInterval> {
    let Some(links) = cur.links.as_ref() else {
        return Vec::new();
    };
    links
        .iter()
        .enumerate()
        .map(|(index, link)| {
            let before = find_near(prev.links.as_deref().unwrap_or_default(), index, |p| {
                p.ifindex == link.ifindex && p.name == link.name
            });
            let rate = |f: fn(&LinkStats) -> u64, unit: Unit, scale: u64| {
                let d = delta(f(before?), f(link))?;
                Metric::rate(d.saturating_mul(scale), seconds, unit, Source::Proc)
            };
            DeviceInterval {
                name: link.name.clone(),
                ifindex: link.ifindex,
                rx_packets: rate(|l| l.rx_packets, Unit::PacketsPerSecond, 1),
                tx_packets: rate(|l| l.tx_packets, Unit::PacketsPerSecond, 1),
                rx_bits: rate(|l| l.rx_bytes, Unit::BitsPerSecond, 8),
                tx_bits: rate(|l| l.tx_bytes, Unit::BitsPerSecond, 8),
                rx_dropped: rate(|l| l.rx_dropped, Unit::PacketsPerSecond, 1),
                tx_dropped: rate(|l| l.tx_dropped, Unit::PacketsPerSecond, 1),
                rx_errors: rate(|l| l.rx_errors, Unit::PacketsPerSecond, 1),
                tx_errors: rate(|l| l.tx_errors, Unit::PacketsPerSecond, 1),
                qdisc: root_qdisc(cur, link.ifindex)
                    .map(|q| qdisc_interval(root_qdisc(prev, link.ifindex), q, seconds)),
                queues: derive_queues(prev, cur, link, topology, seconds),
            }
        })
        .collect()
}

fn derive_host(cpus: &[CpuInterval], devices: &[DeviceInterval]) -> HostInterval {
    let rx_bits: Option<f64> = devices
        .iter()
        .filter(|d| d.name != "lo")
        .map(|d| d.rx_bits.as_ref().map(|m| m.value))
        .collect::<Option<Vec<f64>>>()
        .map(sum);
    let rx_bits = rx_bits.map(|b| {
        Metric::derived(
            b,
            Unit::BitsPerSecond,
            Source::Proc,
            "sum of rx bit/s of non-loopback devices",
        )
    });
    let busy: Option<f64> = cpus
        .iter()
        .map(|c| c.time.as_ref().map(|t| t.busy()))
        .collect::<Option<Vec<f64>>>()
        .map(sum);
    let source = cpus
        .iter()
        .filter_map(|c| c.time.as_ref())
        .map(|t| t.system.source)
        .next()
        .unwrap_or(Source::Tick);
    let cpu_per_mbps = match (busy, rx_bits.as_ref()) {
        (Some(busy), Some(bits)) if bits.value >= 10_000.0 => Some(Metric::derived(
            busy / (bits.value / 1e6),
            Unit::CpuPerMbps,
            source,
            "busy CPU summed over CPUs (/proc/stat, all but idle and iowait) / received Mbit/s",
        )),
        _ => None,
    };
    HostInterval {
        rx_bits,
        cpu_per_mbps,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrapping_32_bit_counters() {
        assert_eq!(delta32(10, 15), Some(5));
        assert_eq!(delta32(u64::from(u32::MAX) - 1, 3), Some(5));
        assert_eq!(delta32(1 << 40, 3), None);
        assert_eq!(delta(10, 3), None);
    }

    #[test]
    fn run_delay_over_an_interval() {
        let at = |runs: u64, delay: u64| crate::sample::Sample {
            schedstats: vec![(
                22,
                crate::procfs::Schedstat {
                    on_cpu_ns: runs * 1_000,
                    run_delay_ns: delay,
                    runs,
                },
            )],
            ..Default::default()
        };
        assert_eq!(
            sched_delta(&at(100, 5_000), &at(130, 95_000), 22),
            Some(SchedDelta {
                on_cpu_ns: 30_000,
                run_delay_ns: 90_000,
                runs: 30
            })
        );
        // Another pid, or a counter that went back (the pid was reused): nothing.
        assert_eq!(sched_delta(&at(100, 5_000), &at(130, 95_000), 23), None);
        assert_eq!(sched_delta(&at(100, 5_000), &at(3, 95_000), 22), None);
    }
}
