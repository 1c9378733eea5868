//! Synthetic RunRecords for tests and for trying the report without a lab: a small
//! builder producing configurations that saturate at a chosen capacity, with traffic
//! classes, latency, engine headroom, tick-sampled CPU time shares, a maximum-throughput
//! result and findings. The numbers are made up but shaped like a real sweep (delivered
//! load flattens at the capacity, latency climbs near it, IRQs fall as NAPI polls).

use napilab_core::scenario::ResolvedGoal;
use napilab_core::trace::{CpuTraceTime, StageCost, TraceInterval};
use napilab_core::uncertainty::{mean_sd, t_interval};
use napilab_core::{
    ClassResult, ConfigurationResult, CpuInterval, CpuTimeShares, EngineStats, Evidence, Finding,
    GoalSummary, HostFacts, Interval, LatencySummary, MaxThroughput, Metric, Notice, Observation,
    Origin, OriginKind, PointResult, PointRole, RuleId, RunKind, RunRecord, Settings, Severity,
    Source, Subject, TopologyMap, Unit, OBSERVATION_SCHEMA, RUN_SCHEMA,
};

/// One configuration of a synthetic run.
#[derive(Clone, Debug)]
pub struct SyntheticConfiguration {
    pub name: String,
    /// Load (pkt/s) above which packets are lost.
    pub capacity_pps: f64,
    /// Largest load the generator can offer; above it the generator is saturated.
    pub generator_limit_pps: f64,
}

/// Builder of a synthetic run.
#[derive(Clone, Debug)]
pub struct SyntheticRun {
    pub run_id: String,
    pub kind: RunKind,
    pub loads_pps: Vec<f64>,
    pub repeats: u32,
    pub duration_s: f64,
    /// (name, share of the load, packet bytes)
    pub classes: Vec<(String, f64, u32)>,
    pub cpus: Vec<u32>,
    pub configurations: Vec<SyntheticConfiguration>,
    pub loss_threshold: f64,
    /// Observations carry the trace tier: measured softirq time and a stage profile.
    pub traced: bool,
    /// MLRsearch repeats of the maximum (0: one bisection): each repeat's conditional
    /// throughput is the capacity x 0.97 moved by -1%, 0, +1%, ... in turn.
    pub search_repeats: u32,
}

impl SyntheticRun {
    /// Two configurations, five loads, classes `rt` (20%) and `be` (80%), two CPUs.
    pub fn new(kind: RunKind) -> Self {
        SyntheticRun {
            run_id: "20260101-120000-beef".into(),
            kind,
            loads_pps: vec![100e3, 200e3, 300e3, 400e3, 500e3],
            repeats: 1,
            duration_s: 10.0,
            classes: vec![("rt".into(), 0.2, 128), ("be".into(), 0.8, 1500)],
            cpus: vec![0, 1],
            configurations: vec![
                SyntheticConfiguration {
                    name: "one-core/softirq".into(),
                    capacity_pps: 300e3,
                    generator_limit_pps: 1e9,
                },
                SyntheticConfiguration {
                    name: "two-core/threaded".into(),
                    capacity_pps: 450e3,
                    generator_limit_pps: 480e3,
                },
            ],
            loss_threshold: 0.001,
            traced: false,
            search_repeats: 0,
        }
    }

    /// Adds what the `stages` trace tier records: measured softirq time per CPU (twice
    /// the tick-sampled share) and the CPU of two stages.
    pub fn traced(mut self) -> Self {
        self.traced = true;
        self
    }

    pub fn run_id(mut self, run_id: &str) -> Self {
        self.run_id = run_id.into();
        self
    }

    pub fn loads(mut self, loads_pps: &[f64]) -> Self {
        self.loads_pps = loads_pps.to_vec();
        self
    }

    /// Maxima found by MLRsearch with `repeats` repeats of one goal (`pdr`).
    pub fn searched(mut self, repeats: u32) -> Self {
        self.search_repeats = repeats;
        self
    }

    pub fn repeats(mut self, repeats: u32) -> Self {
        self.repeats = repeats;
        self
    }

    pub fn build(&self) -> RunRecord {
        let configurations = self
            .configurations
            .iter()
            .map(|c| self.configuration(c))
            .collect();
        RunRecord {
            schema: RUN_SCHEMA.into(),
            run_id: self.run_id.clone(),
            kind: self.kind,
            scenario_name: "synthetic-forwarding".into(),
            scenario_toml: "[scenario]\nname = \"synthetic-forwarding\"\n\n[traffic]\nclasses = [\"rt\", \"be\"]\nsweep_pps = [100000, 500000, 100000]\n".into(),
            started_unix_ms: 1_767_268_800_000,
            finished_unix_ms: 1_767_269_100_000,
            host: self.host(),
            napilab_version: "0.1.0".into(),
            interrupted: false,
            configurations,
            notices: vec![Notice {
                what: "trace tier".into(),
                why: "BPF tracepoints were not requested: softirq time is tick-sampled only"
                    .into(),
            }],
            twin: None,
        }
    }

    fn host(&self) -> HostFacts {
        HostFacts::tick_sampled_250hz(self.cpus.clone())
    }

    fn kernel_source(&self) -> Source {
        match self.kind {
            RunKind::Lab => Source::Proc,
            RunKind::Model => Source::Model,
        }
    }

    fn configuration(&self, conf: &SyntheticConfiguration) -> ConfigurationResult {
        let mut points = Vec::new();
        for &load in &self.loads_pps {
            for repeat in 0..self.repeats {
                points.push(self.point(conf, PointRole::Sweep, load, repeat));
            }
        }
        // The bisection: one probe just below the capacity, one just above.
        let below = conf.capacity_pps * 0.97;
        let above = conf.capacity_pps * 1.03;
        let first_probe = points.len();
        points.push(self.point(conf, PointRole::Search, above, 0));
        points.push(self.point(conf, PointRole::Search, below, 0));
        let stopped = if conf.generator_limit_pps < above {
            "upper_bound_passed"
        } else {
            "converged"
        };
        let source = self.kernel_source();
        let findings = vec![
            Finding {
                rule: RuleId::TickSampledAccounting,
                severity: Severity::Warning,
                subject: Subject::Cpu(0),
                title: "cpu0 softirq time is tick-sampled and reads low".into(),
                evidence: vec![
                    Evidence {
                        name: "cpu0.time.softirq".into(),
                        metric: Metric::new(0.02, Unit::CpuFraction, Source::Tick),
                    },
                    Evidence {
                        name: "cpu0.net_rx_softirqs".into(),
                        metric: Metric::new(41_000.0, Unit::PerSecond, source),
                    },
                ],
                threshold: "softirq share < 5% while NET_RX softirqs > 10000/s".into(),
                explanation: "With tick-sampled accounting a softirq that runs right after a \
                              hard IRQ on an idle CPU is charged as idle; measure softirq time \
                              with tracepoints before trusting /proc/stat."
                    .into(),
                intervals: vec![0],
            },
            Finding {
                rule: RuleId::PollingModeHidesLoad,
                severity: Severity::Info,
                subject: Subject::Device("dut-in".into()),
                title: format!("IRQs fell while load rose on {}", conf.name),
                evidence: vec![Evidence {
                    name: "cpu0.packets_per_net_hardirq".into(),
                    metric: Metric::derived(
                        250.0,
                        Unit::PacketsPerEvent,
                        source,
                        "softnet processed / net hard IRQs",
                    ),
                }],
                threshold: "packets per IRQ > 64".into(),
                explanation: "NAPI stays in polling mode at high load, so IRQ counts stop \
                              tracking the packet rate."
                    .into(),
                intervals: vec![0],
            },
        ];
        ConfigurationResult {
            name: conf.name.clone(),
            settings: vec![
                (
                    "napi_context".into(),
                    conf.name.split('/').nth(1).unwrap_or("softirq").into(),
                ),
                ("dut_cpus".into(), "0,1".into()),
            ],
            max_throughput: Some(self.max_throughput(below, first_probe, stopped)),
            points,
            findings,
            requests: None,
        }
    }

    fn max_throughput(&self, below: f64, first_probe: usize, stopped: &str) -> MaxThroughput {
        let mut max = MaxThroughput {
            pps: below,
            loss_threshold: self.loss_threshold,
            probes: vec![first_probe, first_probe + 1],
            stopped: stopped.into(),
            ..MaxThroughput::default()
        };
        if self.search_repeats > 0 {
            let values: Vec<f64> = (0..self.search_repeats)
                .map(|i| below * (1.0 + 0.01 * (f64::from(i % 3) - 1.0)))
                .collect();
            max.method = "mlrsearch".into();
            max.goals = vec![GoalSummary {
                goal: ResolvedGoal {
                    name: "pdr".into(),
                    loss_ratio: self.loss_threshold,
                    exceed_ratio: 0.5,
                    final_trial_s: self.duration_s,
                    duration_sum_s: 2.0 * self.duration_s,
                    initial_trial_s: self.duration_s / 4.0,
                    width: 0.03,
                },
                mean: mean_sd(&values).map(|(m, _)| m),
                interval: t_interval(&values, 0.95),
                undisturbed_values: values.clone(),
                undisturbed_mean: mean_sd(&values).map(|(m, _)| m),
                values,
                trials: 2,
                disturbed_trials: 0,
            }];
            max.pps = max.goals[0].mean.unwrap_or(below);
        }
        max
    }

    fn point(
        &self,
        conf: &SyntheticConfiguration,
        role: PointRole,
        requested: f64,
        repeat: u32,
    ) -> PointResult {
        let offered = requested.min(conf.generator_limit_pps);
        let delivered = offered.min(conf.capacity_pps);
        let rho = (offered / conf.capacity_pps).min(1.5);
        let classes = self
            .classes
            .iter()
            .map(|(name, share, bytes)| {
                let sent = (offered * share * self.duration_s).round() as u64;
                let received = (delivered * share * self.duration_s).round() as u64;
                let base = if name == "rt" { 8.0 } else { 12.0 };
                let queueing = base * rho / (1.0 - rho.min(0.95));
                let p50 = base + queueing * 0.5;
                ClassResult {
                    name: name.clone(),
                    packet_bytes: *bytes,
                    sent,
                    received,
                    reordered: 0,
                    loss_counters: vec![("dut-in rx_dropped".into(), sent - received)],
                    latency: Some(LatencySummary {
                        samples: received,
                        mean_us: p50 * 1.1,
                        p50_us: p50,
                        p90_us: p50 * 1.8,
                        p99_us: p50 * 3.0,
                        p999_us: p50 * 6.0,
                        max_us: p50 * 10.0,
                        histogram: vec![(p50, received / 2), (p50 * 10.0, received / 2)],
                    }),
                }
            })
            .collect();
        let engine = |backend: &str, busy: f64, saturated: bool| EngineStats {
            backend: backend.into(),
            cpus: vec![2],
            cpu_busy: Some(busy.min(1.0)),
            saturated,
            counters: vec![("late_departures".into(), if saturated { 1200 } else { 0 })],
        };
        PointResult {
            role,
            requested_pps: requested,
            offered_pps: offered,
            repeat,
            duration_s: self.duration_s,
            classes,
            generator: engine(
                "paced-udp",
                offered / conf.generator_limit_pps.min(600e3),
                requested > conf.generator_limit_pps,
            ),
            sink: engine("socket-sink", delivered / 1e6, false),
            observation: Some(self.observation(conf, offered, delivered)),
            many_napi: None,
        }
    }

    fn observation(
        &self,
        conf: &SyntheticConfiguration,
        offered: f64,
        delivered: f64,
    ) -> Observation {
        let src = self.kernel_source();
        let rho = (offered / conf.capacity_pps).min(1.0);
        let cpus: Vec<CpuInterval> = self
            .cpus
            .iter()
            .enumerate()
            .map(|(i, &cpu)| {
                // The first CPU does the packet work; the others help a little.
                let busy = if i == 0 {
                    0.1 + 0.9 * rho
                } else {
                    0.05 + 0.2 * rho
                };
                let irqs = if i == 0 {
                    40e3 * (1.0 - rho) + 500.0
                } else {
                    100.0
                };
                let softirqs = irqs * 1.3 + 200.0;
                let processed = if i == 0 { delivered } else { 0.0 };
                let tick = |v: f64| Metric::new(v, Unit::CpuFraction, Source::Tick);
                CpuInterval {
                    cpu,
                    hardirqs: Some(Metric::new(irqs + 250.0, Unit::PerSecond, src)),
                    net_hardirqs: Some(Metric::new(irqs, Unit::PerSecond, src)),
                    net_rx_softirqs: Some(Metric::new(softirqs, Unit::PerSecond, src)),
                    net_tx_softirqs: Some(Metric::new(10.0, Unit::PerSecond, src)),
                    softnet_processed: Some(Metric::new(processed, Unit::PacketsPerSecond, src)),
                    softnet_dropped: Some(Metric::new(0.0, Unit::PacketsPerSecond, src)),
                    time_squeeze: Some(Metric::new(0.0, Unit::PerSecond, src)),
                    packets_per_net_rx_softirq: Some(Metric::derived(
                        processed / softirqs,
                        Unit::PacketsPerEvent,
                        src,
                        "softnet processed / NET_RX softirqs",
                    )),
                    packets_per_net_hardirq: Some(Metric::derived(
                        processed / irqs,
                        Unit::PacketsPerEvent,
                        src,
                        "softnet processed / net hard IRQs",
                    )),
                    time: Some(CpuTimeShares {
                        user: tick(0.01),
                        nice: tick(0.0),
                        system: tick(busy * 0.6 - 0.01),
                        idle: tick(1.0 - busy),
                        iowait: tick(0.0),
                        irq: tick(0.0),
                        softirq: tick(busy * 0.4),
                        steal: tick(0.0),
                    }),
                    ..CpuInterval::default()
                }
            })
            .collect();
        Observation {
            schema: OBSERVATION_SCHEMA.into(),
            origin: Origin {
                kind: match self.kind {
                    RunKind::Lab => OriginKind::Lab,
                    RunKind::Model => OriginKind::Model,
                },
                hostname: Some("dut".into()),
                kernel: Some("6.18.0".into()),
                started_unix_ms: 1_767_268_800_000,
                napilab_version: "0.1.0".into(),
            },
            host: self.host(),
            settings: Settings::default(),
            topology: TopologyMap::default(),
            intervals: vec![Interval {
                index: 0,
                start_s: 0.0,
                duration_s: self.duration_s,
                trace: self.traced.then(|| trace_of(&cpus)),
                cpus,
                ..Interval::default()
            }],
            findings: Vec::new(),
            notices: Vec::new(),
            trace_cost: None,
        }
    }
}

/// The trace tier's view of `cpus`: softirq time measured at twice what ticks saw, and
/// the CPU split between two stages.
fn trace_of(cpus: &[CpuInterval]) -> TraceInterval {
    let measured = |v: f64| Metric::new(v, Unit::CpuFraction, Source::Trace);
    let rate = |v: f64| Metric::new(v, Unit::PerSecond, Source::Trace);
    let softirq = |c: &CpuInterval| c.time.as_ref().map_or(0.0, |t| t.softirq.value);
    let total: f64 = cpus.iter().map(softirq).sum();
    TraceInterval {
        cpus: cpus
            .iter()
            .map(|c| CpuTraceTime {
                cpu: c.cpu,
                softirq: measured((2.0 * softirq(c)).min(1.0)),
                net_softirq: measured((1.8 * softirq(c)).min(1.0)),
                softirq_ksoftirqd: measured(0.0),
                hardirq: measured(0.01),
                napi_thread_polls: rate(0.0),
                busy_poll_polls: rate(0.0),
            })
            .collect(),
        stage_costs: [("driver rx", 0.4), ("ip forward", 0.6)]
            .into_iter()
            .map(|(stage, part)| StageCost {
                stage: stage.into(),
                cpus: Metric::new(part * 2.0 * total, Unit::CpuFraction, Source::Sample),
                per_mbps: None,
            })
            .collect(),
        ..TraceInterval::default()
    }
}
