//! What a timer interrupt costs the CPU it fires on.
//!
//! A kernel timer that a busy CPU arms again and again takes the CPU from what runs there
//! at every expiry: arming it (`hrtimer_start`, which reprograms the CPU's timer device
//! when it is the next to expire), the interrupt's entry and exit, the callback. On a
//! virtual machine both the reprogramming (a write to the TSC-deadline MSR or the local
//! APIC) and the interrupt's delivery and EOI may be exits to the hypervisor, each worth
//! microseconds. `gro-flush-timeout`'s hrtimer is such a timer: `napi_complete_done`
//! arms it after every poll that defers, and it fires up to 1 / timeout times a second
//! on the polling CPU (docs/tune.md, "Deferral and the timer's cost").
//!
//! The probe pays the price the way a thread on that CPU would: a thread pinned to the
//! CPU spins through fixed work for a window, without and then with a timerfd armed for
//! `period` (an hrtimer on the same CPU). A timerfd's hrtimer does not re-arm itself: it
//! fires once and `read` forwards and restarts it. So the thread reads the timerfd
//! (non-blocking) after every chunk of work, in both windows (in the first it is never
//! armed and the read fails with EAGAIN, so both pay the same system calls), and each read
//! that returns an expiry is one real interrupt and one re-arming. The work lost in time,
//! divided by the interrupts, is the price of one. Windows without and with the timer
//! alternate and the median over the rounds is kept, so that a host whose speed drifts
//! moves both sides.

use std::os::fd::OwnedFd;
use std::time::{Duration, Instant};

use rustix::time::{
    timerfd_create, timerfd_settime, Itimerspec, TimerfdClockId, TimerfdFlags, TimerfdTimerFlags,
    Timespec,
};

#[derive(Debug, thiserror::Error)]
pub enum TimerCostError {
    #[error("cannot pin the timer probe's thread to CPU {cpu}: {source} (is CPU {cpu} online and in this process's affinity mask?)")]
    Pin { cpu: u32, source: std::io::Error },
    #[error("cannot start the timer probe's thread: {0}")]
    Spawn(std::io::Error),
    #[error("timerfd: {0} (the kernel needs CONFIG_TIMERFD)")]
    Timerfd(std::io::Error),
    #[error("the timer probe's period {0:?} is outside 1 us to 10 ms")]
    Period(Duration),
    #[error("the timer never fired in {0:?} windows on CPU {1}: the kernel moved it elsewhere or the CPU did not run the probe")]
    NeverFired(usize, u32),
}

/// One CPU's timer-interrupt cost.
#[derive(Clone, Debug, PartialEq)]
pub struct TimerInterruptCost {
    pub cpu: u32,
    pub period: Duration,
    /// Interrupts per second of the timer in its windows (below 1 / period by the work
    /// between the expiry and the read that re-arms it, and by the price itself).
    pub expiries_per_s: f64,
    /// The median over the rounds of the time the spinning thread lost per interrupt,
    /// ns; negative values (noise larger than the cost) are kept as measured.
    pub ns_per_expiry: f64,
    /// Each round's value, ns per interrupt.
    pub rounds_ns: Vec<f64>,
}

/// Iterations of the spinning thread's fixed work between reads of the timerfd (well
/// under a microsecond of work, so that a 1 us timer is still re-armed soon after it
/// fires).
const CHUNK: u64 = 64;

/// Spins through fixed work until `window` has passed, reading `fd` after every chunk;
/// the work done, in chunks, and the reads that found an expiry (each one an interrupt
/// and a re-arming).
fn spin(window: Duration, fd: &OwnedFd) -> Result<(u64, u64), TimerCostError> {
    let end = Instant::now() + window;
    let (mut chunks, mut fired) = (0u64, 0u64);
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut buf = [0u8; 8];
    while Instant::now() < end {
        for _ in 0..CHUNK {
            // xorshift: work the compiler cannot fold away.
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
        }
        chunks += 1;
        match rustix::io::read(fd, &mut buf) {
            Ok(8) => fired += 1,
            Ok(_) | Err(rustix::io::Errno::AGAIN) => {}
            Err(e) => return Err(io(e)),
        }
    }
    std::hint::black_box(x);
    Ok((chunks, fired))
}

fn io(e: rustix::io::Errno) -> TimerCostError {
    TimerCostError::Timerfd(std::io::Error::from_raw_os_error(e.raw_os_error()))
}

/// Arms `fd` to expire every `period` (`None`: disarms it).
fn arm(fd: &OwnedFd, period: Option<Duration>) -> Result<(), TimerCostError> {
    let period = period.unwrap_or(Duration::ZERO);
    let ts = Timespec {
        tv_sec: period.as_secs() as _,
        tv_nsec: period.subsec_nanos() as _,
    };
    timerfd_settime(
        fd,
        TimerfdTimerFlags::empty(),
        &Itimerspec {
            it_interval: ts,
            it_value: ts,
        },
    )
    .map_err(io)?;
    Ok(())
}

/// What re-programming `cpu`'s timer device costs, ns: `pairs` times arming a timerfd
/// for 1 ms and disarming it (each arming makes its hrtimer the CPU's next to expire,
/// so the device is programmed for it, and the disarming programs it back), against
/// the same pairs with the timer armed for 10 s (later than the tick, so the device is
/// not touched); half the difference per pair, the median of `rounds` alternating
/// rounds. Nothing fires: this is the arming `napi_complete_done` pays when it defers.
pub fn reprogram_ns(cpu: u32, pairs: u32, rounds: usize) -> Result<f64, TimerCostError> {
    let rounds = rounds.max(1);
    on_cpu_with_timerfd(cpu, "napilab-rearm", move |fd| {
        let timed = |after: Duration| -> Result<f64, TimerCostError> {
            let start = Instant::now();
            for _ in 0..pairs {
                arm(fd, Some(after))?;
                arm(fd, None)?;
            }
            Ok(start.elapsed().as_nanos() as f64 / f64::from(pairs.max(1)))
        };
        let mut per_round = Vec::with_capacity(rounds);
        for _ in 0..rounds {
            let far = timed(Duration::from_secs(10))?;
            let near = timed(Duration::from_millis(1))?;
            per_round.push((near - far) / 2.0);
        }
        per_round.sort_by(f64::total_cmp);
        Ok(per_round[per_round.len() / 2])
    })
}

/// Runs `probe` on a thread of its own (named `name`-CPU) pinned to `cpu`, with a
/// non-blocking timerfd created there (so its hrtimer is that CPU's).
fn on_cpu_with_timerfd<T: Send + 'static>(
    cpu: u32,
    name: &str,
    probe: impl FnOnce(&OwnedFd) -> Result<T, TimerCostError> + Send + 'static,
) -> Result<T, TimerCostError> {
    std::thread::Builder::new()
        .name(format!("{name}-{cpu}"))
        .spawn(move || {
            crate::pin::pin_this_thread(cpu)
                .map_err(|source| TimerCostError::Pin { cpu, source })?;
            let fd = timerfd_create(
                TimerfdClockId::Monotonic,
                TimerfdFlags::NONBLOCK | TimerfdFlags::CLOEXEC,
            )
            .map_err(io)?;
            probe(&fd)
        })
        .map_err(TimerCostError::Spawn)?
        .join()
        .unwrap_or_else(|_| {
            Err(TimerCostError::Spawn(std::io::Error::other(
                "the timer probe's thread panicked",
            )))
        })
}

/// The cost of a timer interrupt on `cpu` for a periodic timer of `period`: `rounds`
/// pairs of windows of `window`, without and with the timer; takes about 2 x rounds x
/// window.
pub fn measure(
    cpu: u32,
    period: Duration,
    window: Duration,
    rounds: usize,
) -> Result<TimerInterruptCost, TimerCostError> {
    if period < Duration::from_micros(1) || period > Duration::from_millis(10) {
        return Err(TimerCostError::Period(period));
    }
    let rounds = rounds.max(1);
    on_cpu_with_timerfd(cpu, "napilab-timer", move |fd| {
        let mut per_round = Vec::with_capacity(rounds);
        let (mut expiries_total, mut seconds) = (0u64, 0.0);
        for _ in 0..rounds {
            arm(fd, None)?;
            let (without, _) = spin(window, fd)?;
            arm(fd, Some(period))?;
            let (with, expiries) = spin(window, fd)?;
            arm(fd, None)?;
            if expiries == 0 || without == 0 {
                continue;
            }
            expiries_total += expiries;
            seconds += window.as_secs_f64();
            let lost = 1.0 - with as f64 / without as f64;
            per_round.push(lost * window.as_nanos() as f64 / expiries as f64);
        }
        if per_round.is_empty() {
            return Err(TimerCostError::NeverFired(rounds, cpu));
        }
        let mut sorted = per_round.clone();
        sorted.sort_by(f64::total_cmp);
        Ok(TimerInterruptCost {
            cpu,
            period,
            expiries_per_s: expiries_total as f64 / seconds,
            ns_per_expiry: sorted[sorted.len() / 2],
            rounds_ns: per_round,
        })
    })
}

/// Rounds of each probe per CPU in [`measure_each`], and the length of its windows:
/// 3 x (2 x 50 ms) of spinning and 3 x 2,000 arm/disarm pairs, about 0.35 s a CPU.
const EACH_ROUNDS: usize = 3;
const EACH_WINDOW: Duration = Duration::from_millis(50);
const EACH_PAIRS: u32 = 2_000;

/// About how long [`measure_each`] takes per CPU, seconds: its spinning windows plus
/// the arm/disarm pairs (a few tens of ms on a VM).
pub fn each_seconds_per_cpu() -> f64 {
    EACH_ROUNDS as f64 * 2.0 * EACH_WINDOW.as_secs_f64() + 0.05
}

/// Both probes on each of `cpus`, one CPU after the other, with a timer of `period`
/// (napilab-core `TimerCost`); a CPU that cannot be probed gives its error.
pub fn measure_each(
    cpus: &[u32],
    period: Duration,
) -> Vec<Result<napilab_core::TimerCost, TimerCostError>> {
    cpus.iter()
        .map(|&cpu| {
            let reprogram_ns = reprogram_ns(cpu, EACH_PAIRS, EACH_ROUNDS)?;
            let c = measure(cpu, period, EACH_WINDOW, EACH_ROUNDS)?;
            Ok(napilab_core::TimerCost {
                cpu,
                period_ns: period.as_nanos() as f64,
                reprogram_ns,
                ns_per_expiry: c.ns_per_expiry,
                expiries_per_s: c.expiries_per_s,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// CPU `cpu`'s local timer interrupts so far (the `LOC:` row of /proc/interrupts).
    fn local_timer_interrupts(cpu: u32) -> u64 {
        let text = std::fs::read_to_string("/proc/interrupts").expect("/proc/interrupts");
        let row = text
            .lines()
            .find(|l| l.trim_start().starts_with("LOC:"))
            .expect("a LOC: row (x86)");
        row.split_whitespace()
            .nth(1 + cpu as usize)
            .and_then(|n| n.parse().ok())
            .expect("CPU's LOC count")
    }

    #[test]
    fn every_counted_expiry_is_a_real_interrupt_on_the_probed_cpu() {
        let period = Duration::from_micros(50);
        let before = local_timer_interrupts(0);
        let c = measure(0, period, Duration::from_millis(100), 3).expect("measured");
        let interrupts = local_timer_interrupts(0) - before;
        let counted = (c.expiries_per_s * 0.3).round() as u64;
        // A timerfd's hrtimer fires once per arming; the probe must re-arm it, or it
        // counts expiries that never interrupted anything (an earlier version did: it
        // read 50,000 a second of a 20 us timer and 46 ns each). Ticks add to LOC, so
        // the interrupts are at least the expiries; a loaded machine delays re-arming,
        // so the rate is only bounded above.
        assert!(
            counted > 300 && c.expiries_per_s <= 20_500.0,
            "{} expiries a second of a 50 us timer",
            c.expiries_per_s
        );
        assert!(
            interrupts as f64 >= 0.9 * counted as f64,
            "{counted} expiries counted, {interrupts} local timer interrupts on CPU 0"
        );
        assert_eq!(c.rounds_ns.len(), 3);
        assert!(c.ns_per_expiry.is_finite());
    }

    #[test]
    fn a_period_out_of_range_is_refused_by_name() {
        let e = measure(0, Duration::from_millis(50), Duration::from_millis(10), 1)
            .expect_err("refused");
        assert!(e.to_string().contains("1 us to 10 ms"), "{e}");
    }
}
