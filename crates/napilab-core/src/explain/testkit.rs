//! Builders for rule tests: small Observations with exactly the numbers a test needs.

use crate::metric::{Metric, Source};
use crate::observation::*;
use crate::topology::{Device, IrqInfo, IrqMatch, QdiscInfo, TopologyMap};
use crate::units::Unit;

#[derive(Clone, Default)]
pub struct CpuBuilder(CpuInterval);

pub fn cpu(n: u32) -> CpuBuilder {
    CpuBuilder(CpuInterval {
        cpu: n,
        ..CpuInterval::default()
    })
}

fn proc(value: f64, unit: Unit) -> Option<Metric> {
    Some(Metric::new(value, unit, Source::Proc))
}

impl CpuBuilder {
    pub fn processed(mut self, pps: f64) -> Self {
        self.0.softnet_processed = proc(pps, Unit::PacketsPerSecond);
        self
    }
    pub fn net_rx(mut self, rate: f64) -> Self {
        self.0.net_rx_softirqs = proc(rate, Unit::PerSecond);
        self
    }
    pub fn net_irqs(mut self, rate: f64) -> Self {
        self.0.net_hardirqs = proc(rate, Unit::PerSecond);
        self
    }
    pub fn squeeze(mut self, rate: f64) -> Self {
        self.0.time_squeeze = proc(rate, Unit::PerSecond);
        self
    }
    pub fn ksoftirqd(mut self, share: f64) -> Self {
        self.0.ksoftirqd = proc(share, Unit::CpuFraction);
        self
    }
    /// Time shares: the given softirq and idle, the rest system.
    pub fn shares(mut self, softirq: f64, idle: f64, source: Source) -> Self {
        let m = |v: f64| Metric::new(v, Unit::CpuFraction, source);
        self.0.time = Some(CpuTimeShares {
            user: m(0.0),
            nice: m(0.0),
            system: m(1.0 - softirq - idle),
            idle: m(idle),
            iowait: m(0.0),
            irq: m(0.0),
            softirq: m(softirq),
            steal: m(0.0),
        });
        self
    }
    fn build(mut self) -> CpuInterval {
        let ratio = |n: &Option<Metric>, d: &Option<Metric>| match (n, d) {
            (Some(n), Some(d)) if d.value > 0.0 => proc(n.value / d.value, Unit::PacketsPerEvent),
            _ => None,
        };
        self.0.packets_per_net_rx_softirq =
            ratio(&self.0.softnet_processed, &self.0.net_rx_softirqs);
        self.0.packets_per_net_hardirq = ratio(&self.0.softnet_processed, &self.0.net_hardirqs);
        self.0
    }
}

fn empty_observation(intervals: Vec<Interval>, topology: TopologyMap) -> Observation {
    Observation {
        schema: OBSERVATION_SCHEMA.into(),
        origin: Origin {
            kind: OriginKind::Replay,
            hostname: None,
            kernel: None,
            started_unix_ms: 0,
            napilab_version: "test".into(),
        },
        host: HostFacts::tick_sampled_250hz(Vec::new()),
        settings: Settings {
            netdev_budget: Some(300),
            netdev_budget_usecs: Some(8000),
            ..Settings::default()
        },
        topology,
        intervals,
        findings: Vec::new(),
        notices: Vec::new(),
        trace_cost: None,
    }
}

/// Two one-second intervals with the same per-CPU numbers.
pub fn observation_of(cpus: Vec<CpuBuilder>) -> Observation {
    let cpus: Vec<CpuInterval> = cpus.into_iter().map(CpuBuilder::build).collect();
    let intervals = (0..2)
        .map(|index| Interval {
            index,
            start_s: index as f64,
            duration_s: 1.0,
            cpus: cpus.clone(),
            ..Interval::default()
        })
        .collect();
    empty_observation(intervals, TopologyMap::default())
}

/// Adds a network IRQ for `queue` taken by `cpu` at `rate` in every interval.
pub fn with_irq(
    mut obs: Observation,
    number: u32,
    queue: &str,
    cpu: u32,
    rate: f64,
) -> Observation {
    obs.topology.irqs.push(IrqInfo {
        number,
        name: format!("eth0-{queue}"),
        device: "eth0".into(),
        queue: Some(queue.into()),
        affinity: vec![cpu],
        effective_affinity: vec![cpu],
        matched_by: IrqMatch::Name,
    });
    for interval in &mut obs.intervals {
        interval.irqs.push(IrqInterval {
            number,
            name: format!("eth0-{queue}"),
            device: Some("eth0".into()),
            queue: Some(queue.into()),
            total: proc(rate, Unit::PerSecond),
            per_cpu: vec![(cpu, Metric::new(rate, Unit::PerSecond, Source::Proc))],
        });
    }
    obs
}

pub struct DeviceFixture {
    device: Device,
    tx_pps: f64,
}

pub fn device(name: &str, qdisc: &str, tx_pps: f64) -> DeviceFixture {
    DeviceFixture {
        device: Device {
            name: name.into(),
            qdisc: Some(QdiscInfo {
                kind: qdisc.into(),
                children: Vec::new(),
            }),
            ..Device::default()
        },
        tx_pps,
    }
}

pub fn observation_of_devices(devices: Vec<DeviceFixture>) -> Observation {
    let topology = TopologyMap {
        devices: devices.iter().map(|d| d.device.clone()).collect(),
        irqs: Vec::new(),
        netns: None,
    };
    let intervals = (0..2)
        .map(|index| Interval {
            index,
            start_s: index as f64,
            duration_s: 1.0,
            devices: devices
                .iter()
                .map(|d| DeviceInterval {
                    name: d.device.name.clone(),
                    tx_packets: proc(d.tx_pps, Unit::PacketsPerSecond),
                    ..DeviceInterval::default()
                })
                .collect(),
            ..Interval::default()
        })
        .collect();
    empty_observation(intervals, topology)
}
