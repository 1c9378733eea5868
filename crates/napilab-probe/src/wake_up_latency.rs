//! Measures how long a thread woken onto a CPU waits before it runs (napilab-core
//! `WakeUpLatency`).
//!
//! A thread parked on the target CPU (futex, through `std::thread::park`) is woken again
//! and again from a thread on another CPU, each time after the target has been left idle
//! for a while, as a NAPI kthread is between batches. The delay runs from just before the
//! wake-up call to the first instruction of the woken thread, both read from
//! CLOCK_MONOTONIC (one clock for all CPUs): the IPI to an idle CPU, its exit from idle
//! (on a VM, the hypervisor's halt polling or the vCPU's scheduling), the scheduler and a
//! context switch: what a kernel thread woken by `wake_up_process` from another CPU waits
//! too. A user thread's return to user space adds well under a microsecond.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use napilab_core::WakeUpLatency;

#[derive(Debug, thiserror::Error)]
pub enum WakeUpError {
    #[error("cannot pin the wake-up probe's {role} thread to CPU {cpu}: {source} (is CPU {cpu} online and in this process's affinity mask?)")]
    Pin {
        role: &'static str,
        cpu: u32,
        source: std::io::Error,
    },
    #[error("the wake-up probe needs two different CPUs (woken and waking), got CPU {0} for both")]
    SameCpu(u32),
    #[error("cannot start the wake-up probe's thread: {0}")]
    Spawn(std::io::Error),
    #[error("the woken thread did not run within {0:?} of a wake-up (CPU {1}): the CPU is held by something that does not let go")]
    Stuck(Duration, u32),
}

/// How long the prober waits for the woken thread before giving up on the probe.
const WAKE_UP_TIMEOUT: Duration = Duration::from_secs(1);

/// State shared by the waking and the woken thread.
struct Shared {
    /// Both threads' clock: `Instant` is CLOCK_MONOTONIC, one clock for every CPU.
    base: Instant,
    /// ns since `base` just before the latest wake-up; its sequence number.
    sent_ns: AtomicU64,
    sent_seq: AtomicU64,
    /// The woken thread's delay for sequence number `done_seq`.
    delay_ns: AtomicU64,
    done_seq: AtomicU64,
    stop: AtomicBool,
}

impl Shared {
    fn now_ns(&self) -> u64 {
        u64::try_from(self.base.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }
}

/// `samples` wake-ups of a thread pinned to `cpu` from the calling side pinned to
/// `waker_cpu`, each after `idle` with the target parked; takes about samples x idle.
pub fn measure(
    cpu: u32,
    waker_cpu: u32,
    samples: usize,
    idle: Duration,
) -> Result<WakeUpLatency, WakeUpError> {
    if cpu == waker_cpu {
        return Err(WakeUpError::SameCpu(cpu));
    }
    // The waking side runs on a thread of its own too, so the caller's affinity is left
    // as it was.
    std::thread::Builder::new()
        .name("napilab-waker".into())
        .spawn(move || wake_repeatedly(cpu, waker_cpu, samples, idle))
        .map_err(WakeUpError::Spawn)?
        .join()
        .unwrap_or_else(|_| Err(WakeUpError::Spawn(std::io::Error::other("panicked"))))
}

/// Wake-ups per CPU, and the idle time before each, of the probe whose delays the twin
/// draws from (napilab-sim `wake_up::MIN_SAMPLED_WAKE_UPS` asks for at least 1,000).
/// A loaded NAPI kthread sleeps for microseconds to tens of microseconds between
/// batches and is woken tens of thousands of times a second, so a tail of one
/// wake-up in several thousand sets a threaded DUT's loss. On the family-26 AMD EPYC
/// VM (2026-11-28, docs/lab.md "Wake-ups") the two-cpu/threaded router's kthread waited
/// 256 us or more in 126 of 662,970 wake-ups (0.019%) and lost 0.17-0.34% at 300-850
/// kpps; 2,000 probe wake-ups held none of that tail (expected: 0.4), 50,000 after 20
/// us idle held 0.016% and 0.052% (CPU 0 and 1; 0.044% and 0.024% after 100 us).
/// After 2 us to 1 ms idle the median was the same there (20-26 us), so 20 us keeps the
/// probe short: about 3 s per CPU.
pub const TAIL_WAKE_UPS: usize = 20_000;
pub const TAIL_IDLE: Duration = Duration::from_micros(20);

/// [`measure_each`] with [`TAIL_WAKE_UPS`] after [`TAIL_IDLE`] each.
pub fn measure_tail_each(cpus: &[u32]) -> Vec<Result<WakeUpLatency, WakeUpError>> {
    measure_each(cpus, TAIL_WAKE_UPS, TAIL_IDLE)
}

/// [`measure`] on each CPU of `cpus` in turn, woken from the next CPU of the list (the
/// first for the last): one result per CPU, in the order of `cpus`; none for a list of
/// fewer than two CPUs, where there is nothing to wake from.
pub fn measure_each(
    cpus: &[u32],
    samples: usize,
    idle: Duration,
) -> Vec<Result<WakeUpLatency, WakeUpError>> {
    if cpus.len() < 2 {
        return Vec::new();
    }
    cpus.iter()
        .enumerate()
        .map(|(k, &cpu)| measure(cpu, cpus[(k + 1) % cpus.len()], samples, idle))
        .collect()
}

fn wake_repeatedly(
    cpu: u32,
    waker_cpu: u32,
    samples: usize,
    idle: Duration,
) -> Result<WakeUpLatency, WakeUpError> {
    crate::pin::pin_this_thread(waker_cpu).map_err(|source| WakeUpError::Pin {
        role: "waking",
        cpu: waker_cpu,
        source,
    })?;
    let shared = Arc::new(Shared {
        base: Instant::now(),
        sent_ns: AtomicU64::new(0),
        sent_seq: AtomicU64::new(0),
        delay_ns: AtomicU64::new(0),
        done_seq: AtomicU64::new(0),
        stop: AtomicBool::new(false),
    });
    let (pinned_tx, pinned_rx) = std::sync::mpsc::channel();
    let woken = {
        let shared = shared.clone();
        std::thread::Builder::new()
            .name("napilab-woken".into())
            .spawn(move || be_woken(cpu, &shared, &pinned_tx))
            .map_err(WakeUpError::Spawn)?
    };
    let outcome = drive(&shared, woken.thread(), &pinned_rx, cpu, samples, idle);
    // Whatever happened, the woken thread is told to stop and is joined.
    shared.stop.store(true, Ordering::SeqCst);
    woken.thread().unpark();
    let _ = woken.join();
    Ok(WakeUpLatency {
        cpu,
        waker_cpu,
        idle_us: idle.as_secs_f64() * 1e6,
        delays_ns: outcome?,
    })
}

/// Waits for the woken thread to be pinned, then wakes it `samples` times.
fn drive(
    shared: &Shared,
    woken: &std::thread::Thread,
    pinned: &std::sync::mpsc::Receiver<std::io::Result<()>>,
    cpu: u32,
    samples: usize,
    idle: Duration,
) -> Result<Vec<f64>, WakeUpError> {
    match pinned.recv_timeout(WAKE_UP_TIMEOUT) {
        Ok(Ok(())) => {}
        Ok(Err(source)) => {
            return Err(WakeUpError::Pin {
                role: "woken",
                cpu,
                source,
            })
        }
        Err(_) => return Err(WakeUpError::Stuck(WAKE_UP_TIMEOUT, cpu)),
    }
    let mut delays_ns = Vec::with_capacity(samples);
    for seq in 1..=samples as u64 {
        leave_idle(idle);
        shared.sent_ns.store(shared.now_ns(), Ordering::SeqCst);
        shared.sent_seq.store(seq, Ordering::SeqCst);
        woken.unpark();
        let asked = Instant::now();
        // Bounded: the woken thread answers within the timeout or the probe gives up.
        while shared.done_seq.load(Ordering::SeqCst) != seq {
            if asked.elapsed() > WAKE_UP_TIMEOUT {
                return Err(WakeUpError::Stuck(WAKE_UP_TIMEOUT, cpu));
            }
            std::thread::sleep(Duration::from_micros(50));
        }
        delays_ns.push(shared.delay_ns.load(Ordering::SeqCst) as f64);
    }
    Ok(delays_ns)
}

/// The woken side: parks until a new sequence number arrives, then records how long
/// after its wake-up call it came to run.
fn be_woken(cpu: u32, shared: &Shared, pinned: &std::sync::mpsc::Sender<std::io::Result<()>>) {
    let pin = crate::pin::pin_this_thread(cpu);
    let ok = pin.is_ok();
    let _ = pinned.send(pin);
    if !ok {
        return;
    }
    let mut seen = 0;
    while !shared.stop.load(Ordering::SeqCst) {
        // park() may return spuriously: only a new sequence number is a wake-up.
        std::thread::park();
        let now = shared.now_ns();
        let seq = shared.sent_seq.load(Ordering::SeqCst);
        if seq == seen {
            continue;
        }
        seen = seq;
        let sent = shared.sent_ns.load(Ordering::SeqCst);
        shared
            .delay_ns
            .store(now.saturating_sub(sent), Ordering::SeqCst);
        shared.done_seq.store(seq, Ordering::SeqCst);
    }
}

/// Waits `idle` before the next wake-up. Sleeping is exact only to the timer slack (50 us
/// by default), so short gaps are spun on the waking CPU; the target is idle either way.
fn leave_idle(idle: Duration) {
    if idle >= SLEEP_ABOVE {
        std::thread::sleep(idle);
    } else {
        let until = Instant::now() + idle;
        while Instant::now() < until {
            std::hint::spin_loop();
        }
    }
}

/// Gaps from this long on are slept, shorter ones spun.
const SLEEP_ABOVE: Duration = Duration::from_micros(500);

#[cfg(test)]
mod tests {
    use super::*;

    fn two_cpus() -> Option<(u32, u32)> {
        let n = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1);
        (n >= 2).then_some((0, 1))
    }

    #[test]
    fn every_wake_up_is_timed_on_the_cpu_asked_for() {
        let Some((cpu, waker)) = two_cpus() else {
            eprintln!("skipped: the wake-up probe needs two CPUs and this host has one");
            return;
        };
        let w = measure(cpu, waker, 20, Duration::from_millis(1)).expect("probe on CPUs 0 and 1");
        assert_eq!((w.cpu, w.waker_cpu, w.delays_ns.len()), (cpu, waker, 20));
        assert!((w.idle_us - 1000.0).abs() < 1e-6);
        // A wake-up is an IPI and a context switch: more than nothing, and the probe's
        // timeout bounds it.
        for d in &w.delays_ns {
            assert!(*d > 0.0 && *d < 1e9, "{d} ns");
        }
    }

    #[test]
    fn each_cpu_is_woken_from_the_next() {
        assert!(measure_each(&[0], 5, Duration::from_millis(1)).is_empty());
        if two_cpus().is_none() {
            eprintln!("skipped: the wake-up probe needs two CPUs and this host has one");
            return;
        }
        let each = measure_each(&[0, 1], 5, Duration::from_micros(100));
        let pairs: Vec<(u32, u32)> = each
            .iter()
            .map(|r| r.as_ref().map(|w| (w.cpu, w.waker_cpu)).expect("probe"))
            .collect();
        assert_eq!(pairs, [(0, 1), (1, 0)]);
    }

    #[test]
    fn bad_cpus_are_named() {
        let same = measure(0, 0, 1, Duration::from_millis(1)).expect_err("one CPU for both");
        assert!(same.to_string().contains("two different CPUs"), "{same}");
        let missing = measure(100_000, 0, 1, Duration::from_millis(1)).expect_err("no CPU 100000");
        assert!(missing.to_string().contains("CPU 100000"), "{missing}");
    }
}
