//! How long a woken NAPI kthread waits for its CPU on a live host: the run delay per run
//! of its kernel threads (`/proc/<pid>/schedstat` deltas in the Observation), which the
//! twin of `napilab tune plan --predict` uses as the kthread's wake-up delay
//! (docs/tune.md, "Predict before you tune").

use serde::{Deserialize, Serialize};

use napilab_core::device_join::DeviceJoin;
use napilab_core::observation::ThreadRole;
use napilab_core::{Interval, ThreadInterval};

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

/// The wake-up delay of the device's NAPI kthreads for the twin, from the host, where
/// `cpus` are the CPUs the twin places them on (none: no delay to estimate): the
/// run delay per run of the device's own NAPI kthreads when they ran (threaded
/// already); else, for kthreads pinned to CPUs (`pinned`), of `ksoftirqd/N` of those
/// CPUs (a kernel thread of the same CPU, woken from its softirq while something else
/// holds the CPU, as the NAPI kthread will be); for unpinned ones, of the `ksoftirqd/N`
/// that waited least (the scheduler wakes an unpinned thread on a CPU that is free, and
/// `ksoftirqd/N` cannot move: the one of the sender's CPU waits behind the sender).
/// `None` when neither settings polls in a kthread; the veth-lab profile's `lab_ns`
/// when the observation has no such runs.
pub fn wake_up_delay(
    traced: &[&Interval],
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
        })
    };
    let own = run_delay(traced, |t| device.runs_kthread(&t.role));
    if let Some(w) = measured(&own, String::new()) {
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
    })
}
