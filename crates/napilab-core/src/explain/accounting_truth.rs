//! Misreading 3, measured: /proc/stat's tick-sampled softirq and irq shares beside the
//! softirq and hard-IRQ time the tracepoints measured over the same intervals
//! (`observe --trace`). Also names the packet work that ticks charge to "system": NAPI
//! kthreads and busy polling.

use crate::finding::{Evidence, Finding, RuleId, Severity, Subject};
use crate::metric::{Metric, Source};
use crate::observation::{Interval, Observation, ThreadRole};
use crate::stats::{cpus, mean_over, sum};
use crate::units::Unit;

/// Measured minus reported softirq+irq share (of one CPU) from which it is a finding.
pub const MIN_GAP: f64 = 0.02;
/// ... and measured must be at least this multiple of what /proc/stat reported.
pub const MIN_RATIO: f64 = 1.5;

fn pct(v: f64) -> String {
    format!("{:.1}%", v * 100.0)
}

fn napi_thread_share(interval: &Interval, cpu: u32) -> Option<f64> {
    let shares: Vec<f64> = interval
        .threads
        .iter()
        .filter(|t| matches!(t.role, ThreadRole::NapiThread { .. }) && t.last_cpu == Some(cpu))
        .filter_map(|t| t.cpu.as_ref().map(|m| m.value))
        .collect();
    (!shares.is_empty()).then(|| sum(shares))
}

/// Busy-poll time on `cpu` from the stage sampler's stacks (`--stages`), if sampled.
fn busy_poll_share(interval: &Interval, cpu: u32) -> Option<f64> {
    let trace = interval.trace.as_ref()?;
    if trace.context_shares.is_empty() {
        return None;
    }
    Some(sum(trace
        .context_shares
        .iter()
        .filter(|c| c.cpu == cpu && c.context == crate::trace::ExecContext::BusyPoll)
        .map(|c| c.share.value)))
}

pub fn check(observation: &Observation) -> Vec<Finding> {
    cpus(observation)
        .into_iter()
        .filter_map(|cpu| check_cpu(observation, cpu))
        .collect()
}

/// Both views of one CPU's time over the intervals that have both: what the
/// tracepoints measured and what /proc/stat's ticks reported.
struct CpuViews {
    softirq: Metric,
    hardirq: Metric,
    tick_softirq: Metric,
    tick_irq: Metric,
    system: Metric,
    idle: Metric,
    /// The intervals the means cover.
    used: Vec<usize>,
}

/// The tracepoint and tick means of `cpu` over `both`, or None where a figure is
/// missing or IRQ time accounting already measured the tick side (nothing to correct).
fn cpu_views(both: &[&Interval], cpu: u32) -> Option<CpuViews> {
    let traced = |pick: fn(&crate::trace::CpuTraceTime) -> &Metric| {
        mean_over(
            both.iter()
                .map(|i| (*i, i.trace.as_ref().and_then(|t| t.cpu(cpu)).map(pick))),
        )
    };
    let ticked = |pick: fn(&crate::observation::CpuTimeShares) -> &Metric| {
        mean_over(
            both.iter()
                .map(|i| (*i, i.cpu(cpu).and_then(|c| c.time.as_ref()).map(pick))),
        )
    };
    let (softirq, used) = traced(|c| &c.softirq)?;
    let (hardirq, _) = traced(|c| &c.hardirq)?;
    let (tick_softirq, _) = ticked(|t| &t.softirq)?;
    let (tick_irq, _) = ticked(|t| &t.irq)?;
    let (system, _) = ticked(|t| &t.system)?;
    let (idle, _) = ticked(|t| &t.idle)?;
    if tick_softirq.source == Source::Proc && tick_irq.source == Source::Proc {
        return None;
    }
    Some(CpuViews {
        softirq,
        hardirq,
        tick_softirq,
        tick_irq,
        system,
        idle,
        used,
    })
}

/// The duration-weighted mean of a per-interval share of `cpu`, where any interval has it.
fn weighted_share(
    both: &[&Interval],
    cpu: u32,
    share: fn(&Interval, u32) -> Option<f64>,
    source: Source,
    what: &str,
) -> Option<Metric> {
    let values: Vec<(f64, f64)> = both
        .iter()
        .filter_map(|i| share(i, cpu).map(|v| (v, i.duration_s)))
        .collect();
    (!values.is_empty()).then(|| {
        let w = sum(values.iter().map(|(_, d)| *d));
        Metric::derived(
            sum(values.iter().map(|(v, d)| v * d)) / w,
            Unit::CpuFraction,
            source,
            what,
        )
    })
}

fn check_cpu(observation: &Observation, cpu: u32) -> Option<Finding> {
    // Only intervals with both views, so the comparison covers the same time.
    let both: Vec<&Interval> = observation
        .intervals
        .iter()
        .filter(|i| {
            i.trace.as_ref().is_some_and(|t| t.cpu(cpu).is_some())
                && i.cpu(cpu).and_then(|c| c.time.as_ref()).is_some()
        })
        .collect();
    if both.is_empty() {
        return None;
    }
    let v = cpu_views(&both, cpu)?;
    let napi_thread = weighted_share(
        &both,
        cpu,
        napi_thread_share,
        Source::Proc,
        "CPU time of napi/* kthreads last seen on this CPU",
    );
    let busy_poll = weighted_share(
        &both,
        cpu,
        busy_poll_share,
        Source::Sample,
        "cpu-clock samples inside napi_busy_loop on this CPU",
    );
    let measured = v.softirq.value + v.hardirq.value;
    let reported = v.tick_softirq.value + v.tick_irq.value;
    let gap = measured - reported;
    let understated = gap >= MIN_GAP && measured >= MIN_RATIO * reported;
    let thread_work = napi_thread.as_ref().is_some_and(|m| m.value >= MIN_GAP);
    let busy_work = busy_poll.as_ref().is_some_and(|m| m.value >= MIN_GAP);
    if !understated && !thread_work && !busy_work {
        return None;
    }
    let mut evidence: Vec<Evidence> = [
        ("trace.softirq", &v.softirq),
        ("trace.hardirq", &v.hardirq),
        ("time.softirq", &v.tick_softirq),
        ("time.irq", &v.tick_irq),
        ("time.system", &v.system),
        ("time.idle", &v.idle),
    ]
    .into_iter()
    .map(|(name, metric)| Evidence {
        name: format!("cpu{cpu}.{name}"),
        metric: metric.clone(),
    })
    .collect();
    let thread_text = system_time_text(
        cpu,
        &v,
        napi_thread.as_ref(),
        busy_poll.as_ref(),
        &mut evidence,
    );
    let title = if understated {
        format!(
            "cpu{cpu}: /proc/stat says {} softirq and {} irq, tracepoints measured {} softirq and {} hard IRQ",
            pct(v.tick_softirq.value),
            pct(v.tick_irq.value),
            pct(v.softirq.value),
            pct(v.hardirq.value)
        )
    } else if busy_work && !thread_work {
        format!(
            "cpu{cpu}: busy polling ({}) is reported as system time",
            pct(busy_poll.as_ref().map_or(0.0, |m| m.value))
        )
    } else {
        format!(
            "cpu{cpu}: packet work in NAPI kthreads ({}) is reported as system time",
            pct(napi_thread.as_ref().map_or(0.0, |m| m.value))
        )
    };
    Some(Finding {
        rule: RuleId::AccountingTruth,
        severity: if understated { Severity::Warning } else { Severity::Info },
        subject: Subject::Cpu(cpu),
        title,
        evidence,
        threshold: format!(
            "measured softirq+hardirq minus /proc/stat softirq+irq >= {} points and measured >= {MIN_RATIO}x reported; or NAPI kthread or sampled busy-poll time >= {}",
            MIN_GAP * 100.0,
            pct(MIN_GAP)
        ),
        explanation: format!(
            "Over the same intervals the tracepoints timed every softirq run (softirq_entry to softirq_exit) and every device IRQ handler on cpu{cpu}: {} of the CPU, where /proc/stat, which charges each whole timer tick to whatever it interrupts, reported {} (and {} idle). The difference is softirq work that started and finished between ticks, typically right after an IRQ on an otherwise idle CPU, so the tick found the CPU idle or in the task it interrupted.{thread_text} Size the CPU from the measured figure, not from mpstat or top.",
            pct(measured),
            pct(reported),
            pct(v.idle.value)
        ),
        intervals: v.used,
    })
}

/// The sentences on packet work /proc/stat counts as system time (NAPI kthreads,
/// busy polling), with their evidence added to `evidence`.
fn system_time_text(
    cpu: u32,
    v: &CpuViews,
    napi_thread: Option<&Metric>,
    busy_poll: Option<&Metric>,
    evidence: &mut Vec<Evidence>,
) -> String {
    let mut text = String::new();
    if let Some(m) = napi_thread {
        text = format!(
            " NAPI kthreads on this CPU used {} of it, which /proc/stat counts as system time ({} system in all), not softirq.",
            pct(m.value),
            pct(v.system.value)
        );
        evidence.push(Evidence {
            name: format!("cpu{cpu}.napi_threads"),
            metric: m.clone(),
        });
    }
    if let Some(m) = busy_poll.filter(|m| m.value >= MIN_GAP) {
        text.push_str(&format!(
            " Applications busy polling on this CPU spent {} of it inside the kernel's busy-poll loop (sampled stacks), also system time for /proc/stat.",
            pct(m.value)
        ));
        evidence.push(Evidence {
            name: format!("cpu{cpu}.busy_poll"),
            metric: m.clone(),
        });
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::explain::testkit::{cpu, observation_of};
    use crate::trace::{CpuTraceTime, TraceInterval};

    fn with_trace(mut obs: Observation, cpu: u32, softirq: f64) -> Observation {
        let m = |v: f64| Metric::new(v, Unit::CpuFraction, Source::Trace);
        for i in &mut obs.intervals {
            i.trace = Some(TraceInterval {
                cpus: vec![CpuTraceTime {
                    cpu,
                    softirq: m(softirq),
                    net_softirq: m(softirq),
                    softirq_ksoftirqd: m(0.0),
                    hardirq: m(0.01),
                    napi_thread_polls: Metric::new(0.0, Unit::PerSecond, Source::Trace),
                    busy_poll_polls: Metric::new(0.0, Unit::PerSecond, Source::Trace),
                }],
                ..TraceInterval::default()
            });
        }
        obs
    }

    #[test]
    fn names_the_gap_between_ticks_and_tracepoints() {
        let obs = with_trace(
            observation_of(vec![cpu(1).net_rx(5_000.0).shares(0.02, 0.6, Source::Tick)]),
            1,
            0.14,
        );
        let f = check(&obs);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].severity, Severity::Warning);
        assert!(f[0].title.contains("says 2.0% softirq"), "{}", f[0].title);
        assert!(
            f[0].title.contains("measured 14.0% softirq"),
            "{}",
            f[0].title
        );
        assert_eq!(f[0].subject, Subject::Cpu(1));
    }

    #[test]
    fn names_sampled_busy_poll_time_inside_system() {
        use crate::trace::{ContextShare, ExecContext};
        let mut obs = with_trace(
            observation_of(vec![cpu(1).net_rx(5_000.0).shares(0.14, 0.3, Source::Tick)]),
            1,
            0.14,
        );
        for i in &mut obs.intervals {
            if let Some(t) = i.trace.as_mut() {
                t.context_shares = vec![ContextShare {
                    cpu: 1,
                    context: ExecContext::BusyPoll,
                    samples: 300,
                    share: Metric::new(0.3, Unit::CpuFraction, Source::Sample),
                }];
            }
        }
        let f = check(&obs);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].severity, Severity::Info);
        assert!(
            f[0].title.contains("busy polling (30.0%)"),
            "{}",
            f[0].title
        );
        assert!(f[0]
            .evidence
            .iter()
            .any(|e| e.name == "cpu1.busy_poll" && e.metric.source == Source::Sample));
    }

    #[test]
    fn silent_when_ticks_agree() {
        let obs = with_trace(
            observation_of(vec![cpu(1).net_rx(5_000.0).shares(0.14, 0.6, Source::Tick)]),
            1,
            0.14,
        );
        assert!(check(&obs).is_empty());
    }

    #[test]
    fn silent_without_trace() {
        let obs = observation_of(vec![cpu(1).net_rx(5_000.0).shares(0.02, 0.6, Source::Tick)]);
        assert!(check(&obs).is_empty());
    }
}
