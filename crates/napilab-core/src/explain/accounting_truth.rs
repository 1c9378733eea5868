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
    let mut findings = Vec::new();
    for cpu in cpus(observation) {
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
            continue;
        }
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
        let (Some((softirq, used)), Some((hardirq, _))) =
            (traced(|c| &c.softirq), traced(|c| &c.hardirq))
        else {
            continue;
        };
        let (Some((tick_softirq, _)), Some((tick_irq, _)), Some((system, _)), Some((idle, _))) = (
            ticked(|t| &t.softirq),
            ticked(|t| &t.irq),
            ticked(|t| &t.system),
            ticked(|t| &t.idle),
        ) else {
            continue;
        };
        if tick_softirq.source == Source::Proc && tick_irq.source == Source::Proc {
            // IRQ time accounting measured these too; nothing to correct.
            continue;
        }
        let thread_values: Vec<(f64, f64)> = both
            .iter()
            .filter_map(|i| napi_thread_share(i, cpu).map(|v| (v, i.duration_s)))
            .collect();
        let napi_thread = (!thread_values.is_empty()).then(|| {
            let w = sum(thread_values.iter().map(|(_, d)| *d));
            Metric::derived(
                sum(thread_values.iter().map(|(v, d)| v * d)) / w,
                Unit::CpuFraction,
                Source::Proc,
                "CPU time of napi/* kthreads last seen on this CPU",
            )
        });
        let busy_values: Vec<(f64, f64)> = both
            .iter()
            .filter_map(|i| busy_poll_share(i, cpu).map(|v| (v, i.duration_s)))
            .collect();
        let busy_poll = (!busy_values.is_empty()).then(|| {
            let w = sum(busy_values.iter().map(|(_, d)| *d));
            Metric::derived(
                sum(busy_values.iter().map(|(v, d)| v * d)) / w,
                Unit::CpuFraction,
                Source::Sample,
                "cpu-clock samples inside napi_busy_loop on this CPU",
            )
        });
        let measured = softirq.value + hardirq.value;
        let reported = tick_softirq.value + tick_irq.value;
        let gap = measured - reported;
        let understated = gap >= MIN_GAP && measured >= MIN_RATIO * reported;
        let thread_work = napi_thread.as_ref().is_some_and(|m| m.value >= MIN_GAP);
        let busy_work = busy_poll.as_ref().is_some_and(|m| m.value >= MIN_GAP);
        if !understated && !thread_work && !busy_work {
            continue;
        }
        let mut evidence = vec![
            Evidence {
                name: format!("cpu{cpu}.trace.softirq"),
                metric: softirq.clone(),
            },
            Evidence {
                name: format!("cpu{cpu}.trace.hardirq"),
                metric: hardirq.clone(),
            },
            Evidence {
                name: format!("cpu{cpu}.time.softirq"),
                metric: tick_softirq.clone(),
            },
            Evidence {
                name: format!("cpu{cpu}.time.irq"),
                metric: tick_irq.clone(),
            },
            Evidence {
                name: format!("cpu{cpu}.time.system"),
                metric: system.clone(),
            },
            Evidence {
                name: format!("cpu{cpu}.time.idle"),
                metric: idle.clone(),
            },
        ];
        let mut thread_text = String::new();
        if let Some(m) = &napi_thread {
            thread_text = format!(
                " NAPI kthreads on this CPU used {} of it, which /proc/stat counts as system time ({} system in all), not softirq.",
                pct(m.value),
                pct(system.value)
            );
            evidence.push(Evidence {
                name: format!("cpu{cpu}.napi_threads"),
                metric: m.clone(),
            });
        }
        if let Some(m) = busy_poll.as_ref().filter(|m| m.value >= MIN_GAP) {
            thread_text.push_str(&format!(
                " Applications busy polling on this CPU spent {} of it inside the kernel's busy-poll loop (sampled stacks), also system time for /proc/stat.",
                pct(m.value)
            ));
            evidence.push(Evidence {
                name: format!("cpu{cpu}.busy_poll"),
                metric: m.clone(),
            });
        }
        let title = if understated {
            format!(
                "cpu{cpu}: /proc/stat says {} softirq and {} irq, tracepoints measured {} softirq and {} hard IRQ",
                pct(tick_softirq.value),
                pct(tick_irq.value),
                pct(softirq.value),
                pct(hardirq.value)
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
        findings.push(Finding {
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
                pct(idle.value)
            ),
            intervals: used,
        });
    }
    findings
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
