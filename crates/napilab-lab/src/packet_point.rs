//! One point of a packet configuration (router, ap, many-napi): the generator threads
//! for the point's load, the DUT's observer over the measurement window, the sink's
//! counts, and the per-class result. The configuration's loop (crate::packet_runner)
//! calls [`measure_point`] for every sweep point and search trial.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use napilab_core::scenario::{self, Configuration};
use napilab_core::{ClassResult, EngineStats, Observation, PointResult};
use napilab_experiment::configuration::PointSpec;

use crate::counters;
use crate::linerate::{self, LineRate, LrClass, LrGenResult, LrGenSpec, Pacing};
use crate::run_context::{notice, Ctx, Observer};
use crate::topology::{Lab, SINK_ADDR};
use crate::traffic::{start_generator, ClassSpec, GenResult, GenSpec, Sink};
use napilab_core::many_napi::KthreadSample;

/// SCHED_FIFO priority of line-rate generator threads: below the sink's NAPI thread
/// ([`crate::topology::SINK_NAPI_FIFO`]), so that the sink always gets its CPU first.
/// Tried the other way round (generator 15 above the sink's 10): the sink's ring then
/// overflowed at 250-400 kpps and the generator's frames stayed in flight longer,
/// each call costing more (generator 33-69% busy at 108-500 kpps instead of 22-26%).
pub const LR_GEN_FIFO: u32 = 5;

/// The traffic back end of one configuration.
pub(crate) enum Engine {
    Paced(Sink),
    LineRate {
        lr: Box<LineRate>,
        /// The generator's CPUs do no DUT work (see `packet_runner::line_rate_apart`).
        apart: bool,
        /// The DUT polls inline in the generator's softirqs (softirq mode on veth).
        inline_dut: bool,
    },
}

/// How a line-rate generator thread with `classes` classes keeps its schedule.
pub(crate) fn line_rate_pacing(apart: bool, inline_dut: bool, classes: usize) -> Pacing {
    match (apart, inline_dut, classes) {
        (true, _, 1) => Pacing::InKernel { beside_dut: false },
        (true, _, _) => Pacing::Batches {
            fifo: Some(LR_GEN_FIFO),
            inline_dut,
        },
        // Beside a threaded poller or RPS work (not inline): see Pacing::InKernel.
        (false, false, 1) => Pacing::InKernel { beside_dut: true },
        (false, _, _) => Pacing::Batches {
            fifo: None,
            inline_dut,
        },
    }
}

/// The generator threads of one point.
enum Gens {
    Paced(Vec<std::thread::JoinHandle<std::io::Result<GenResult>>>),
    LineRate(Vec<std::thread::JoinHandle<std::io::Result<LrGenResult>>>),
}

/// The line-rate counters at the start of a point.
struct LineRateStart {
    counts: linerate::Counts,
    sink_cpu_ns: Option<u64>,
    at: Instant,
}

/// What the sink side gave for one point.
enum Collected {
    Paced(crate::traffic::SinkResult),
    LineRate {
        counts: linerate::Counts,
        /// On-CPU share of the sink's NAPI kthread over the point.
        busy: Option<f64>,
    },
}

/// What the generators sent and the sink received over a point's window.
struct Delivered {
    classes: Vec<ClassResult>,
    sent: u64,
    window_s: f64,
    generator: EngineStats,
    sink: EngineStats,
}

/// Measures one point; None when the run was stopped during it.
pub(crate) fn measure_point(
    ctx: &mut Ctx<'_>,
    lab: &Lab,
    engine: &mut Engine,
    cfg: &Configuration,
    spec: PointSpec,
) -> Result<Option<PointResult>> {
    let s = ctx.scenario;
    let m = &s.measurement;
    let stop = ctx.opts.stop.clone();
    if stop.load(Ordering::Relaxed) {
        return Ok(None);
    }
    let point = ctx.next_point;
    ctx.next_point += 1;
    let many_napi = many_napi_topology(s);
    let warmup = Duration::from_secs_f64(m.warmup_s);
    let duration = Duration::from_secs_f64(spec.duration_s);
    let specs = generator_specs(s, cfg, lab, spec.load_pps, point, warmup, duration);
    let used_cpus: Vec<u32> = specs.iter().flat_map(|g| g.cpus.clone()).collect();
    let class_ids: Vec<Vec<u16>> = specs
        .iter()
        .map(|g| g.classes.iter().map(|c| c.id).collect())
        .collect();
    // The observer first, ready (its programs loaded) before the traffic starts; its
    // window opens when the warm-up ends, however long loading took.
    let mut observer = start_observer(ctx, lab, duration, &stop);
    let (gens, before, lr_start) = start_generators(engine, lab, specs, point, &stop)?;
    let t_measure = Instant::now() + warmup + Duration::from_millis(5);
    while Instant::now() < t_measure && !stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(10).min(t_measure - Instant::now()));
    }
    if let Some(o) = observer.as_mut() {
        o.open();
    }
    // The NAPI kthreads' counters at the window's opening and (below) its close.
    let kthreads_before = if many_napi {
        crate::many_napi::sample_kthreads(&lab.dut_in)
    } else {
        Vec::new()
    };
    let (g, lr_gen) = join_generators(gens, &class_ids, s.traffic.classes.len())?;
    let kthreads_after = if many_napi {
        crate::many_napi::sample_kthreads(&lab.dut_in)
    } else {
        Vec::new()
    };
    let interrupted =
        g.as_ref().is_some_and(|g| g.interrupted) || lr_gen.as_ref().is_some_and(|g| g.interrupted);
    if interrupted || stop.load(Ordering::Relaxed) {
        return Ok(None);
    }
    if let Some(e) = lr_gen.as_ref().and_then(|g| g.first_error.clone()) {
        notice(
            &mut ctx.notices,
            "line-rate generator errors",
            format!("some BPF_PROG_RUN calls failed (their frames were not sent; the point's offered load shows it): {e}"),
        );
    }
    std::thread::sleep(Duration::from_millis(m.drain_ms));
    let collected = collect_sink(engine, lr_start)?;
    let after = counters::snapshot(lab);
    let observation = finish_observer(ctx, observer, duration, &stop);
    if stop.load(Ordering::Relaxed) {
        return Ok(None);
    }
    let delivered = delivered(
        s,
        cfg,
        lab,
        &collected,
        (g, lr_gen),
        counters::deltas(&before, &after),
        &used_cpus,
        spec.load_pps,
        spec.duration_s,
    )?;
    let many_napi = many_napi.then(|| {
        many_napi_point(
            ctx,
            cfg,
            lab,
            &delivered.classes,
            (&kthreads_before, &kthreads_after),
            observation.as_ref(),
        )
    });
    Ok(Some(PointResult {
        role: spec.role,
        requested_pps: spec.load_pps,
        offered_pps: delivered.sent as f64 / delivered.window_s,
        repeat: spec.repeat,
        duration_s: delivered.window_s,
        classes: delivered.classes,
        generator: delivered.generator,
        sink: delivered.sink,
        observation,
        many_napi,
    }))
}

/// One generator thread per ingress queue, on generator_cpus[queue] (XPS steers its
/// packets to that queue; XDP frames land on the RX queue of the sending CPU modulo the
/// queue count), with the classes of that queue.
fn generator_specs(
    s: &scenario::Scenario,
    cfg: &Configuration,
    lab: &Lab,
    load: f64,
    point: u32,
    warmup: Duration,
    duration: Duration,
) -> Vec<GenSpec> {
    let queues = s.topology.ingress_queues.max(1);
    let gcpus = &cfg.settings.generator_cpus;
    let mut specs = Vec::new();
    for q in 0..queues {
        let classes: Vec<ClassSpec> = s
            .traffic
            .classes
            .iter()
            .enumerate()
            .filter(|(_, c)| c.queue == q)
            .map(|(i, c)| ClassSpec {
                id: i as u16,
                port: c.port,
                size: c.size,
                share: c.share,
                pattern: c.pattern,
            })
            .collect();
        let share: f64 = classes.iter().map(|c| c.share).sum();
        if classes.is_empty() || share <= 0.0 {
            continue;
        }
        specs.push(GenSpec {
            ns: lab.gen_ns.clone(),
            dst: SINK_ADDR,
            classes: classes
                .into_iter()
                .map(|mut c| {
                    c.share /= share;
                    c
                })
                .collect(),
            rate_pps: load * share,
            warmup,
            duration,
            point,
            cpus: vec![gcpus[q as usize % gcpus.len()]],
            flows: if many_napi_topology(s) {
                crate::many_napi::flows_for(cfg.settings.napi_instances)
            } else {
                1
            },
            seed: s
                .traffic
                .seed
                .wrapping_add(u64::from(point))
                .wrapping_add(u64::from(q) << 32),
        });
    }
    specs
}

/// Starts the point's generator threads on the configuration's engine; returns them
/// with the lab's counters just before they start (and the line-rate counters).
fn start_generators(
    engine: &mut Engine,
    lab: &Lab,
    specs: Vec<GenSpec>,
    point: u32,
    stop: &Arc<AtomicBool>,
) -> Result<(Gens, counters::Snapshot, Option<LineRateStart>)> {
    match engine {
        Engine::Paced(sink) => {
            sink.begin(point);
            let before = counters::snapshot(lab);
            let gens = specs
                .into_iter()
                .map(|spec| start_generator(spec, stop.clone()))
                .collect();
            Ok((Gens::Paced(gens), before, None))
        }
        Engine::LineRate {
            lr,
            apart,
            inline_dut,
        } => {
            lr.begin(point);
            let before = counters::snapshot(lab);
            let start = LineRateStart {
                counts: lr.counts().context("reading the line-rate BPF counters")?,
                sink_cpu_ns: lr.sink_cpu_ns(),
                at: Instant::now(),
            };
            let gens = specs
                .into_iter()
                .map(|g| {
                    let spec = LrGenSpec {
                        classes: g
                            .classes
                            .iter()
                            .map(|c| LrClass {
                                id: c.id,
                                port: c.port,
                                size: c.size,
                                share: c.share,
                            })
                            .collect(),
                        rate_pps: g.rate_pps,
                        warmup: g.warmup,
                        duration: g.duration,
                        point: g.point,
                        pacing: line_rate_pacing(*apart, *inline_dut, g.classes.len()),
                        cpus: g.cpus,
                    };
                    lr.start_generator(spec, stop.clone())
                })
                .collect();
            Ok((Gens::LineRate(gens), before, Some(start)))
        }
    }
}

/// The DUT's observer for a window of `duration`, ready to open, or None (with a
/// notice) when it cannot start.
fn start_observer(
    ctx: &mut Ctx<'_>,
    lab: &Lab,
    duration: Duration,
    stop: &AtomicBool,
) -> Option<Observer> {
    if !ctx.opts.observe || stop.load(Ordering::Relaxed) {
        return None;
    }
    match Observer::start(&lab.dut_ns, duration, ctx.scenario.measurement.trace, stop) {
        Ok(o) => Some(o),
        Err(e) => {
            notice(
                &mut ctx.notices,
                "DUT observation",
                format!("could not start the observer in the DUT namespace ({e}): a point carries no Observation"),
            );
            None
        }
    }
}

/// Waits for the generator threads; the paced ones' results merged per class.
fn join_generators(
    gens: Gens,
    class_ids: &[Vec<u16>],
    classes: usize,
) -> Result<(Option<GenResult>, Option<LrGenResult>)> {
    match gens {
        Gens::Paced(handles) => {
            let mut parts = Vec::new();
            for h in handles {
                parts.push(
                    h.join()
                        .map_err(|_| anyhow::anyhow!("the generator thread panicked"))?
                        .context("generator")?,
                );
            }
            Ok((Some(GenResult::merge(&parts, class_ids, classes)), None))
        }
        Gens::LineRate(handles) => {
            let mut parts = Vec::new();
            for h in handles {
                parts.push(
                    h.join()
                        .map_err(|_| anyhow::anyhow!("the line-rate generator thread panicked"))?
                        .context("line-rate generator (XDP live frames)")?,
                );
            }
            Ok((None, Some(LrGenResult::merge(&parts))))
        }
    }
}

/// What the sink counted since the point began.
fn collect_sink(engine: &Engine, lr_start: Option<LineRateStart>) -> Result<Collected> {
    Ok(match engine {
        Engine::Paced(sink) => Collected::Paced(sink.collect()?),
        Engine::LineRate { lr, .. } => {
            let start = lr_start.context("internal: line-rate point without a start")?;
            let counts = lr
                .counts()
                .context("reading the line-rate BPF counters")?
                .since(&start.counts);
            let wall = start.at.elapsed().as_nanos().max(1) as f64;
            let busy = match (start.sink_cpu_ns, lr.sink_cpu_ns()) {
                (Some(a), Some(b)) => Some(b.saturating_sub(a) as f64 / wall),
                _ => None,
            };
            Collected::LineRate { counts, busy }
        }
    })
}

/// The observer's Observation of the window; a notice when there is none.
fn finish_observer(
    ctx: &mut Ctx<'_>,
    observer: Option<Observer>,
    duration: Duration,
    stop: &AtomicBool,
) -> Option<Observation> {
    let o = observer?;
    match o.finish(duration + Duration::from_secs(10), stop) {
        Ok(obs) => Some(obs),
        Err(e) => {
            notice(
                &mut ctx.notices,
                "DUT observation",
                format!("a point has no Observation: {e}"),
            );
            None
        }
    }
}

/// Per class: sent, received, reordered, latency (paced only) and the loss counters
/// of the lab's devices over the point (`shared`, every class's).
#[allow(clippy::too_many_arguments)]
fn delivered(
    s: &scenario::Scenario,
    cfg: &Configuration,
    lab: &Lab,
    collected: &Collected,
    generators: (Option<GenResult>, Option<LrGenResult>),
    mut shared: Vec<(String, u64)>,
    used_cpus: &[u32],
    load: f64,
    duration_s: f64,
) -> Result<Delivered> {
    if let Collected::LineRate { .. } = collected {
        // The sink's own XDP_DROPs are how it discards what it counted, not loss.
        shared.retain(|(k, _)| !(k.starts_with(&lab.sink_dev) && k.contains("xdp_drops")));
    }
    let n = s.traffic.classes.len();
    let shared_counters = || -> Vec<(String, u64)> {
        shared
            .iter()
            .map(|(k, v)| {
                let k = if n > 1 {
                    format!("{k} (all classes)")
                } else {
                    k.clone()
                };
                (k, *v)
            })
            .collect()
    };
    let window_of = |w: f64| if w > 0.0 { w } else { duration_s };
    match (collected, generators) {
        (Collected::Paced(sk), (Some(g), _)) => {
            let classes: Vec<ClassResult> = s
                .traffic
                .classes
                .iter()
                .enumerate()
                .map(|(i, c)| {
                    let sc = &sk.classes[i];
                    let mut loss_counters = Vec::new();
                    if sc.socket_drops > 0 {
                        loss_counters.push((
                            format!("sink socket drops port {} (SO_MEMINFO)", c.port),
                            sc.socket_drops,
                        ));
                    }
                    loss_counters.extend(shared_counters());
                    ClassResult {
                        name: c.name.clone(),
                        packet_bytes: c.size,
                        sent: g.sent[i],
                        received: sc.received,
                        reordered: sc.reordered,
                        loss_counters,
                        latency: Some(sc.latency.summary()),
                    }
                })
                .collect();
            Ok(Delivered {
                classes,
                sent: g.sent.iter().sum(),
                window_s: window_of(g.window_s),
                generator: g.engine_stats(used_cpus),
                sink: sk.engine_stats(&cfg.settings.sink_cpus),
            })
        }
        (Collected::LineRate { counts, busy }, (_, Some(g))) => {
            let classes: Vec<ClassResult> = s
                .traffic
                .classes
                .iter()
                .enumerate()
                .map(|(i, c)| ClassResult {
                    name: c.name.clone(),
                    packet_bytes: c.size,
                    sent: counts.gen.get(i).map_or(0, |x| x[1]),
                    received: counts.sink.get(i).copied().unwrap_or(0),
                    // Frames carry no sequence numbers, and no departure times:
                    // neither reordering nor latency is measured.
                    reordered: 0,
                    loss_counters: shared_counters(),
                    latency: None,
                })
                .collect();
            let window_s = window_of(g.window_s);
            let sent: u64 = classes.iter().map(|c| c.sent).sum();
            let emitted: u64 = counts.gen.iter().map(|x| x[0] + x[1]).sum();
            let ring_drops_key = format!("{} tx_dropped", lab.dut_out);
            let ring_drops = shared
                .iter()
                .filter(|(k, _)| *k == ring_drops_key)
                .map(|(_, v)| *v)
                .sum();
            Ok(Delivered {
                generator: g.engine_stats(used_cpus, load, sent as f64 / window_s, emitted),
                sink: linerate::sink_engine_stats(
                    &cfg.settings.sink_cpus,
                    *busy,
                    ring_drops,
                    counts,
                ),
                classes,
                sent,
                window_s,
            })
        }
        _ => anyhow::bail!("internal: generator and sink results of different back ends"),
    }
}

/// The many-napi topology's row of the point: the NAPI kthreads' work over the window
/// and, where the observer's window was the point's, the trace tier's polls by context.
fn many_napi_point(
    ctx: &mut Ctx<'_>,
    cfg: &Configuration,
    lab: &Lab,
    classes: &[ClassResult],
    (kthreads_before, kthreads_after): (&[KthreadSample], &[KthreadSample]),
    traced: Option<&Observation>,
) -> napilab_core::many_napi::ManyNapiPoint {
    // finish_observer left out an Observation whose window was not the point's.
    let delivered = classes.iter().map(|c| c.received).sum();
    let point = crate::many_napi::point(
        cfg.settings.napi_instances,
        &lab.dut_in,
        kthreads_before,
        kthreads_after,
        traced,
        delivered,
    );
    if point.lost_polls > 0 {
        notice(
            &mut ctx.notices,
            "many-napi polls undercounted",
            "the trace tier's per-CPU table of (NAPI instance, context) pairs was full at some points (lost polls > 0 in their row): the report shows \"undercounted\" instead of their polls per second, packets per poll and instances polled (run.json keeps the counted values beside lost_polls)",
        );
    }
    point
}

pub(crate) fn many_napi_topology(s: &scenario::Scenario) -> bool {
    s.topology.kind == scenario::TopologyKind::ManyNapi
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_rate_pacing_spins_beside_a_threaded_dut_only_at_idle_priority() {
        // Apart from the DUT: spin at nice -10 with one class, FIFO batches with more.
        assert_eq!(
            line_rate_pacing(true, false, 1),
            Pacing::InKernel { beside_dut: false }
        );
        assert!(matches!(
            line_rate_pacing(true, false, 2),
            Pacing::Batches { fifo: Some(_), .. }
        ));
        // Beside a threaded poller: paced at SCHED_IDLE, batches with several classes.
        assert_eq!(
            line_rate_pacing(false, false, 1),
            Pacing::InKernel { beside_dut: true }
        );
        assert_eq!(
            line_rate_pacing(false, false, 3),
            Pacing::Batches {
                fifo: None,
                inline_dut: false
            }
        );
        // The DUT polls inline in the generator's softirqs: batches, whatever the classes.
        assert_eq!(
            line_rate_pacing(false, true, 1),
            Pacing::Batches {
                fifo: None,
                inline_dut: true
            }
        );
    }
}
