//! How long a woken NAPI kthread waits for its CPU on a live host: the wake-up probe's
//! delays (`host.wake_up`, a thread woken onto each CPU) or the run delay per run of its
//! kernel threads (`/proc/<pid>/schedstat` deltas in the Observation), which the twin of
//! `napilab tune plan --predict` uses as the kthread's wake-up delay (docs/tune.md,
//! "Predict before you tune").

use serde::{Deserialize, Serialize};

use napilab_core::device_join::DeviceJoin;
use napilab_core::observation::ThreadRole;
use napilab_core::{Interval, ThreadInterval, WakeUpLatency};

/// Fewest runs of the kernel threads a wake-up delay is estimated from: below it the
/// mean is a handful of waits, each as long as whatever happened to hold the CPU.
pub const MIN_WAKE_UP_RUNS: u64 = 20;

/// How long a woken NAPI kthread waits for its CPU in the twin (the profile's
/// `latency_ns.irq_delivery`, which the twin applies to threaded polling only).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WakeUp {
    /// The delay, ns.
    pub delay_ns: f64,
    /// Measured on this host (the run delay of its kernel threads), or else the
    /// veth-lab profile's.
    pub measured: bool,
    /// Where it comes from, in words (what was measured, or why nothing was).
    pub source: String,
    /// The wake-up probe's delays on the kthread's CPUs, ns, when it measured at least
    /// [`MIN_SAMPLED_WAKE_UPS`] there: the twin then draws each remote wake-up from
    /// them (`latency_ns.wake_up_samples`), its rare long ones included, instead of
    /// waiting `delay_ns` every time.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub samples_ns: Vec<u64>,
}

impl WakeUp {
    /// This delay, and the probe's delays on the kthread's CPUs to draw each wake-up
    /// from when it measured enough there ([`MIN_SAMPLED_WAKE_UPS`]; `cpus` and
    /// `pinned` as for [`wake_up_delay`]), said in the source.
    pub fn with_probed_samples(
        mut self,
        probed: &[WakeUpLatency],
        cpus: &[u32],
        pinned: bool,
    ) -> WakeUp {
        if let Some((samples, says)) = probed_samples(probed, cpus, pinned) {
            self.samples_ns = samples;
            self.source = format!("{}; {says}", self.source);
        }
        self
    }
}

/// The probe's wake-ups for threads pinned to `cpus`: its delay (the mean of those
/// CPUs' medians) with the samples to draw each wake-up from, or None when it did not
/// measure enough there to draw from ([`MIN_SAMPLED_WAKE_UPS`]).
pub fn probed_wake_ups(probed: &[WakeUpLatency], cpus: &[u32]) -> Option<WakeUp> {
    probed_delay(probed, cpus, true)
        .map(|w| w.with_probed_samples(probed, cpus, true))
        .filter(|w| !w.samples_ns.is_empty())
}

/// Fewest probed wake-ups the twin draws from: a tail of a few tenths of a percent
/// needs thousands to show at all (on the project's VM, 0.35-0.44% of 5,000 wake-ups
/// took over 1 ms, 2026-11-28).
pub const MIN_SAMPLED_WAKE_UPS: usize = 1000;

/// The probe's delays to draw from for kthreads on `cpus` (pinned: all of them pooled;
/// unpinned: the CPU with the least median, as [`probed_delay`] takes), or none when
/// the probe measured too few there.
fn probed_samples(
    probed: &[WakeUpLatency],
    cpus: &[u32],
    pinned: bool,
) -> Option<(Vec<u64>, String)> {
    let chosen = probes_for(probed, cpus, pinned, MIN_SAMPLED_WAKE_UPS);
    if chosen.is_empty() {
        return None;
    }
    let samples: Vec<u64> = chosen
        .iter()
        .flat_map(|p| p.delays_ns.iter().map(|&d| d.max(0.0).round() as u64))
        .collect();
    let over_1ms = samples.iter().filter(|&&d| d > 1_000_000).count();
    let longest = samples.iter().copied().max().unwrap_or(0);
    let cpus: Vec<String> = chosen.iter().map(|p| p.cpu.to_string()).collect();
    let says = format!(
        "each remote wake-up draws one of the probe's {} wake-ups of CPU {} ({over_1ms} over 1 ms, {:.2}%, the longest {:.1} ms), the IPI and the idle CPU's return included",
        samples.len(),
        cpus.join(", "),
        100.0 * over_1ms as f64 / samples.len() as f64,
        longest as f64 / 1e6
    );
    Some((samples, says))
}

/// Run delay pooled over some kernel threads over an observation.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RunDelay {
    /// The threads that had scheduler statistics, by name.
    pub threads: Vec<String>,
    pub run_delay_ns: u64,
    pub runs: u64,
    /// The intervals' length, s.
    pub seconds: f64,
}

impl RunDelay {
    /// Mean wait per run, ns: the run delay of all the threads over all their runs.
    pub fn mean_ns(&self) -> Option<f64> {
        (self.runs > 0).then(|| self.run_delay_ns as f64 / self.runs as f64)
    }
}

/// The scheduler statistics (`/proc/<pid>/schedstat` deltas) of the threads `pick`
/// selects, pooled over `intervals`: each run's wait counts once, so a thread that ran
/// more weighs more.
pub fn run_delay(intervals: &[&Interval], pick: impl Fn(&ThreadInterval) -> bool) -> RunDelay {
    let mut out = RunDelay::default();
    for i in intervals {
        out.seconds += i.duration_s;
        for t in i.threads.iter().filter(|t| pick(t)) {
            let Some(d) = t.sched else { continue };
            out.run_delay_ns += d.run_delay_ns;
            out.runs += d.runs;
            if !out.threads.contains(&t.name) {
                out.threads.push(t.name.clone());
            }
        }
    }
    out
}

/// Fewest wake-ups of the probe a CPU's median is taken from.
pub const MIN_PROBED_WAKE_UPS: usize = 20;

/// The probes a kthread on `cpus` is judged by, of those with at least `min` wake-ups:
/// pinned, every CPU it is pinned to; unpinned, the CPU with the least median (the
/// scheduler wakes an unpinned thread where a CPU is free).
fn probes_for<'a>(
    probed: &'a [WakeUpLatency],
    cpus: &[u32],
    pinned: bool,
    min: usize,
) -> Vec<&'a WakeUpLatency> {
    let usable = probed
        .iter()
        .filter(|p| p.delays_ns.len() >= min)
        .filter(|p| !pinned || cpus.contains(&p.cpu));
    if pinned {
        return usable.collect();
    }
    usable
        .filter_map(|p| Some((p.median_ns()?, p)))
        .min_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, p)| vec![p])
        .unwrap_or_default()
}

/// The probe's delay for kthreads on `cpus` (pinned) or anywhere (unpinned); None when
/// the probe did not measure a CPU that applies.
fn probed_delay(probed: &[WakeUpLatency], cpus: &[u32], pinned: bool) -> Option<WakeUp> {
    let chosen = probes_for(probed, cpus, pinned, MIN_PROBED_WAKE_UPS);
    let medians: Vec<f64> = chosen.iter().filter_map(|p| p.median_ns()).collect();
    if medians.is_empty() {
        return None;
    }
    let delay_ns = medians.iter().sum::<f64>() / medians.len() as f64;
    let each: Vec<String> = chosen
        .iter()
        .map(|p| {
            format!(
                "CPU {} woken from CPU {}: median {:.1} us of {} wake-ups after {:.0} us idle",
                p.cpu,
                p.waker_cpu,
                p.median_ns().unwrap_or(f64::NAN) / 1e3,
                p.delays_ns.len(),
                p.idle_us
            )
        })
        .collect();
    let why = if pinned {
        "the CPUs the kthread is pinned to"
    } else {
        "the least of any CPU: the NAPI kthread is unpinned, and the scheduler wakes it where a CPU is free"
    };
    Some(WakeUp {
        delay_ns,
        measured: true,
        source: format!("wake-up probe of this host ({}), {why}", each.join("; ")),
        samples_ns: Vec::new(),
    })
}

/// The wake-up delay of the device's NAPI kthreads for the twin, from the host, where
/// `cpus` are the CPUs the twin places them on (none: no delay to estimate), in this
/// order of preference:
/// 1. the run delay per run of the device's own NAPI kthreads when they ran (threaded
///    already);
/// 2. the wake-up probe of the host (`probed`, napilab-probe `wake_up_latency`: a thread
///    woken onto each CPU from another): for kthreads pinned to CPUs (`pinned`) the
///    median of those CPUs; for unpinned ones the least median of any CPU (the
///    scheduler wakes an unpinned thread where a CPU is free);
/// 3. the run delay of `ksoftirqd/N`: of the CPUs they are pinned to (a kernel thread
///    of the same CPU, woken from its softirq while something else holds the CPU, as the
///    NAPI kthread will be), or for unpinned ones the `ksoftirqd/N` that waited least.
///    `ksoftirqd` runs when softirq work overflows, so it is woken onto a busy CPU by
///    construction and overstates what a kthread woken onto an idle one waits (docs/tune.md);
/// 4. the veth-lab profile's `lab_ns`.
///
/// `None` when neither settings polls in a kthread.
pub fn wake_up_delay(
    traced: &[&Interval],
    probed: &[WakeUpLatency],
    device: &DeviceJoin,
    cpus: &[u32],
    pinned: bool,
    lab_ns: u64,
) -> Option<WakeUp> {
    if cpus.is_empty() {
        return None;
    }
    let measured = |r: &RunDelay, what: String| {
        let mean = r.mean_ns()?;
        (r.runs >= MIN_WAKE_UP_RUNS).then(|| WakeUp {
            delay_ns: mean,
            measured: true,
            source: format!(
                "run delay of {} over {:.1} s: {:.1} us per run ({} runs){what}",
                r.threads.join(", "),
                r.seconds,
                mean / 1e3,
                r.runs
            ),
            samples_ns: Vec::new(),
        })
    };
    let own = run_delay(traced, |t| device.runs_kthread(&t.role));
    if let Some(w) = measured(&own, String::new()) {
        return Some(w);
    }
    if let Some(w) = probed_delay(probed, cpus, pinned) {
        return Some(w);
    }
    if !pinned {
        // Per CPU, the one whose ksoftirqd waited least, among those that ran enough.
        let mut all: Vec<u32> = traced
            .iter()
            .flat_map(|i| &i.threads)
            .filter_map(|t| match t.role {
                ThreadRole::Ksoftirqd { cpu } => Some(cpu),
                _ => None,
            })
            .collect();
        all.sort_unstable();
        all.dedup();
        let least = all
            .iter()
            .map(|&c| {
                run_delay(
                    traced,
                    |t| matches!(t.role, ThreadRole::Ksoftirqd { cpu } if cpu == c),
                )
            })
            .filter(|r| r.runs >= MIN_WAKE_UP_RUNS)
            .filter_map(|r| Some((r.mean_ns()?, r)))
            .min_by(|a, b| a.0.total_cmp(&b.0));
        if let Some((_, r)) = least {
            return measured(
                &r,
                ", the least wait of any CPU's ksoftirqd: the NAPI kthread is unpinned, and the scheduler wakes it where a CPU is free".into(),
            );
        }
    }
    let ksoftirqd = run_delay(
        traced,
        |t| matches!(t.role, ThreadRole::Ksoftirqd { cpu } if cpus.contains(&cpu)),
    );
    let names: Vec<String> = cpus.iter().map(|c| format!("ksoftirqd/{c}")).collect();
    if let Some(w) = measured(
        &ksoftirqd,
        format!(
            ", the kernel thread of the CPU{} the twin places the NAPI kthread on",
            if cpus.len() > 1 { "s" } else { "" }
        ),
    ) {
        return Some(w);
    }
    let why = if own.threads.is_empty() && ksoftirqd.threads.is_empty() {
        format!(
            "the observation has no scheduler statistics of {} (a kernel without /proc/<pid>/schedstat, or a recording made before napilab read it)",
            names.join(", ")
        )
    } else {
        let seen: Vec<String> = own
            .threads
            .iter()
            .chain(&ksoftirqd.threads)
            .cloned()
            .collect();
        format!(
            "{} ran {} times over {:.1} s, fewer than the {MIN_WAKE_UP_RUNS} runs an estimate needs",
            seen.join(", "),
            ksoftirqd.runs + own.runs,
            ksoftirqd.seconds
        )
    };
    Some(WakeUp {
        delay_ns: lab_ns as f64,
        measured: false,
        source: format!("the veth-lab profile's delay, fitted on the lab machine's maximum throughput and not this host's: {why}"),
        samples_ns: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One second in which thread `name` (`role`) ran `runs` times, waiting `wait_ns` in all.
    fn second(name: &str, role: ThreadRole, wait_ns: u64, runs: u64) -> Interval {
        Interval {
            duration_s: 1.0,
            threads: vec![ThreadInterval {
                pid: 10,
                name: name.into(),
                role,
                last_cpu: None,
                cpu: None,
                sched: Some(napilab_core::SchedDelta {
                    on_cpu_ns: runs * 2_000,
                    run_delay_ns: wait_ns,
                    runs,
                }),
            }],
            ..Default::default()
        }
    }

    fn probe(cpu: u32, median_us: f64, wake_ups: usize) -> WakeUpLatency {
        WakeUpLatency {
            cpu,
            waker_cpu: 1 - cpu,
            idle_us: 100.0,
            delays_ns: vec![median_us * 1e3; wake_ups],
        }
    }

    #[test]
    fn the_twin_draws_from_the_probe_of_the_kthreads_cpus_once_it_has_enough() {
        let vb = DeviceJoin::new(&napilab_core::TopologyMap::default(), "vb");
        let mut slow_tail = probe(1, 45.0, MIN_SAMPLED_WAKE_UPS - 4);
        slow_tail.delays_ns.extend([2.0e6, 3.0e6, 5.0e6, 6.8e6]);
        let probed = [probe(0, 40.0, MIN_SAMPLED_WAKE_UPS), slow_tail];
        // Pinned to CPU 1: its delays, the tail with them, named in the source.
        let drawn = |probed: &[WakeUpLatency], pinned: bool| {
            wake_up_delay(&[], probed, &vb, &[1], pinned, 268_554)
                .expect("threaded")
                .with_probed_samples(probed, &[1], pinned)
        };
        let w = drawn(&probed, true);
        assert_eq!(w.samples_ns.len(), MIN_SAMPLED_WAKE_UPS);
        assert_eq!(w.samples_ns.iter().max(), Some(&6_800_000));
        assert!((w.delay_ns - 45_000.0).abs() < 1e-6, "{w:?}");
        assert!(
            w.source.contains("4 over 1 ms, 0.40%, the longest 6.8 ms"),
            "{}",
            w.source
        );
        // Unpinned: the CPU with the least median, as for the delay itself.
        let w = drawn(&probed, false);
        assert!(w.samples_ns.iter().all(|&d| d == 40_000), "{w:?}");
        // Too few wake-ups: the one delay, every time.
        let few = [probe(1, 45.0, MIN_SAMPLED_WAKE_UPS - 1)];
        let w = drawn(&few, true);
        assert!(w.samples_ns.is_empty() && w.measured, "{w:?}");
    }

    #[test]
    fn the_wake_up_probe_comes_before_ksoftirqd_and_after_the_own_kthread() {
        let vb = DeviceJoin::new(&napilab_core::TopologyMap::default(), "vb");
        let probed = [probe(0, 45.0, 40), probe(1, 900.0, 40)];
        let ks = second(
            "ksoftirqd/1",
            ThreadRole::Ksoftirqd { cpu: 1 },
            1_000_000,
            100,
        );
        // Unpinned: the least probed CPU, not ksoftirqd's 10 us.
        let w = wake_up_delay(&[&ks], &probed, &vb, &[1], false, 268_554).expect("threaded");
        assert!(w.measured && (w.delay_ns - 45_000.0).abs() < 1e-6, "{w:?}");
        assert!(
            w.source
                .contains("CPU 0 woken from CPU 1: median 45.0 us of 40"),
            "{}",
            w.source
        );
        // Pinned to CPU 1: CPU 1's, however slow.
        let w = wake_up_delay(&[&ks], &probed, &vb, &[1], true, 268_554).expect("threaded");
        assert!((w.delay_ns - 900_000.0).abs() < 1e-6, "{w:?}");
        // Too few wake-ups on every CPU: ksoftirqd's estimate, as without the probe.
        let few = [probe(0, 45.0, MIN_PROBED_WAKE_UPS - 1)];
        let w = wake_up_delay(&[&ks], &few, &vb, &[1], false, 268_554).expect("threaded");
        assert!(w.source.contains("ksoftirqd/1"), "{}", w.source);
        // The device's own kthread, when it already polls, comes first.
        let own = ThreadRole::NapiThread {
            device: Some("vb".into()),
            napi_id: Some(8193),
        };
        let c = second("napi/vb-8193", own, 500_000, 100);
        let w = wake_up_delay(&[&c], &probed, &vb, &[0], false, 268_554).expect("threaded");
        assert!(w.source.contains("napi/vb-8193"), "{}", w.source);
    }
}
