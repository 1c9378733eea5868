//! CPUs and the threads they schedule: a simple fair scheduler (least runtime first,
//! with a time slice and a wake-up granularity, in the spirit of CFS) plus SCHED_FIFO
//! priorities that always win. Hard IRQs and softirqs are not threads: they run on top
//! of whatever the CPU was doing.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

use crate::event::Nanos;
use crate::softirq::SoftirqRun;

/// What a hard IRQ on a CPU came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IrqSrc {
    /// A NIC vector (index into the simulator's IRQ lines).
    Line(usize),
    /// The hrtimer of a NAPI instance's deferral (`gro_flush_timeout`).
    NapiTimer(usize),
    /// An RPS IPI: schedule this CPU's backlog instance.
    RpsIpi,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ThreadKind {
    Ksoftirqd,
    Napi(usize),
    App(usize),
    /// The per-CPU workqueue worker (`kworker/N`) of this CPU.
    Worker(usize),
    /// A load generator thread (index into the simulator's clients).
    Client(usize),
    /// The `irq/N-<dev>` thread of a threaded IRQ line (index into the simulator's
    /// IRQ lines).
    Irq(usize),
    /// The host's other work on this CPU (the profile's `stalls`, replayed as a
    /// thread that competes for the CPU like any other, `sim::host_stalls`).
    HostWork,
}

/// The fair scheduler's wake-up preemption (`crate::cpu::pick_thread`).
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum FairScheduler {
    /// CFS: a woken thread preempts the running one only with a lead in runtime over
    /// the wake-up granularity (`wakeup_preempt_entity`).
    #[default]
    Cfs,
    /// EEVDF (Linux 6.6 on), as the lab's 6.18 kernel was measured to behave
    /// (docs/sim.md, "Wake-up preemption on the lab's kernel"): a kernel thread woken
    /// while a user thread runs takes the CPU at that thread's next return to user
    /// space, and a waiting user thread does not take it from a kernel thread within
    /// its slice; otherwise as `cfs` (the twin does not model EEVDF's lag and
    /// deadlines).
    Eevdf,
}

impl FairScheduler {
    /// The scheduler of a kernel `major.minor`: EEVDF from 6.6 (commit 147f3efaa241,
    /// "sched/fair: Implement an EEVDF-like scheduling policy").
    pub fn of_kernel(kernel: &str) -> FairScheduler {
        match napilab_core::host_identity::kernel_version(kernel) {
            Some(v) if v >= (6, 6) => FairScheduler::Eevdf,
            _ => FairScheduler::Cfs,
        }
    }
}

impl ThreadKind {
    /// A kernel thread (ksoftirqd, a NAPI or IRQ kthread, kworker).
    pub fn is_kernel(&self) -> bool {
        matches!(
            self,
            ThreadKind::Ksoftirqd
                | ThreadKind::Napi(_)
                | ThreadKind::Worker(_)
                | ThreadKind::Irq(_)
        )
    }

    /// An application's or load generator's thread: it returns to user space after
    /// every system call, where a `preempt=none` kernel preempts it.
    pub fn is_user(&self) -> bool {
        matches!(self, ThreadKind::App(_) | ThreadKind::Client(_))
    }
}

#[derive(Debug)]
pub struct Thread {
    pub pid: u32,
    pub name: String,
    pub cpu: usize,
    pub kind: ThreadKind,
    pub fifo_priority: Option<u32>,
    /// May run only on `cpu`; an unpinned thread (a NAPI kthread without affinity)
    /// is placed by the scheduler when it wakes.
    pub pinned: bool,
    pub runnable: bool,
    /// Runtime so far (ns), the fair scheduler's key.
    pub vruntime: Nanos,
    /// Switched in and not yet stepped: its next step starts a run (a NAPI kthread
    /// pays the cost of a run then).
    pub switched_in: bool,
    /// Runnable without a CPU since (None: running or asleep), for its run delay.
    pub waiting_since: Option<Nanos>,
    /// It was switched out still runnable (preempted) and has not run since.
    pub preempted: bool,
}

/// CFS-like constants (defaults of sched_min_granularity / wakeup_granularity on a
/// small machine); the exact values only matter when threads compete.
pub const TIME_SLICE_NS: Nanos = 3_000_000;
pub const WAKEUP_GRANULARITY_NS: Nanos = 1_000_000;

/// The fair scheduler's tunables: the slice a running thread keeps while another
/// waits, the lead a waiting thread needs to preempt it, and how far below the
/// least-served runnable thread a waking one is placed (the sleeper credit).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SchedTunables {
    pub slice: Nanos,
    pub wakeup_granularity: Nanos,
    pub sleeper_credit: Nanos,
    /// How a woken thread preempts the running one.
    pub scheduler: FairScheduler,
}

impl SchedTunables {
    /// The constants above, unscaled: CFS's 1-CPU values for two runnable threads
    /// (`sched_latency` 6 ms shared by two, `wakeup_granularity` 1 ms).
    pub const UNSCALED: SchedTunables = SchedTunables {
        slice: TIME_SLICE_NS,
        wakeup_granularity: WAKEUP_GRANULARITY_NS,
        sleeper_credit: TIME_SLICE_NS / 2,
        scheduler: FairScheduler::Cfs,
    };

    /// CFS as Linux up to 6.5 scales it on a machine with `cpus` CPUs
    /// (`sched_tunable_scaling` = log, its default: `update_sysctl` multiplies
    /// `sched_latency` (6 ms), `sched_min_granularity` (0.75 ms) and
    /// `sched_wakeup_granularity` (1 ms) by 1 + ilog2(min(cpus, 8))). Two runnable
    /// threads then share `sched_latency` in slices of half of it, a waking thread
    /// preempts only with a lead over the wake-up granularity, and `place_entity`
    /// (GENTLE_FAIR_SLEEPERS) credits a sleeper half of `sched_latency`.
    pub fn log_scaled(cpus: u32) -> SchedTunables {
        let factor = 1 + u64::from(cpus.clamp(1, 8).ilog2());
        let latency = 6_000_000 * factor;
        SchedTunables {
            slice: latency / 2,
            wakeup_granularity: WAKEUP_GRANULARITY_NS * factor,
            sleeper_credit: latency / 2,
            scheduler: FairScheduler::Cfs,
        }
    }

    /// The same tunables with another fair scheduler's wake-up preemption.
    pub fn with_scheduler(self, scheduler: FairScheduler) -> SchedTunables {
        SchedTunables { scheduler, ..self }
    }
}

#[derive(Debug, Default)]
pub struct Cpu {
    /// A batch of work is running until the next BatchEnd event.
    pub busy: bool,
    pub pending_irqs: VecDeque<IrqSrc>,
    /// A hard IRQ just finished: `irq_exit` decides about inline softirq processing.
    pub irq_exit: bool,
    /// Raised softirqs (`NET_TX`, `NET_RX` bits).
    pub softirq_pending: u8,
    /// `sd->poll_list`.
    pub poll_list: VecDeque<usize>,
    pub softirq: Option<SoftirqRun>,
    /// The thread on the CPU (None: the idle task).
    pub current: Option<usize>,
    pub slice_start: Nanos,
    /// When the CPU went idle (None while it works).
    pub idle_since: Option<Nanos>,
    pub ksoftirqd: usize,
    /// CPUs whose backlog this CPU queued packets to and must wake with an IPI at the
    /// end of `net_rx_action` (`sd->rps_ipi_list`).
    pub rps_ipi: Vec<usize>,
    /// The current thread was interrupted by IRQ or inline softirq work and pays the
    /// cache penalty when it resumes.
    pub interrupted: bool,
    /// Threads on this CPU's run queue (runnable or not), in thread order.
    pub threads: Vec<usize>,
    /// The largest runtime of a thread picked here (CFS's `min_vruntime`, which only
    /// grows): a thread migrating in keeps its lag relative to it.
    pub min_vruntime: Nanos,
}

/// Pick the thread to run on a CPU among `on_cpu` (indices into `threads`, in thread
/// order; only runnable ones are considered). `current` keeps the CPU within its slice
/// unless a higher RT priority or a much less served normal thread is waiting (one
/// whose runtime trails by more than the wake-up granularity). Under EEVDF, as the
/// lab's kernel was measured ([`FairScheduler::Eevdf`]), the kernel
/// thread whose wake-up preempts a user thread (`preempting`) takes the CPU, and a
/// user thread waits for a running kernel thread's slice whatever its runtime.
pub fn pick_thread(
    threads: &[Thread],
    on_cpu: &[usize],
    current: Option<usize>,
    slice_start: Nanos,
    now: Nanos,
    tun: &SchedTunables,
    preempting: Option<usize>,
) -> Option<usize> {
    let runnable = || {
        on_cpu
            .iter()
            .map(|&i| (i, &threads[i]))
            .filter(|(_, t)| t.runnable)
    };
    // SCHED_FIFO: highest priority; the current one keeps the CPU among equals.
    let best_rt = runnable().filter_map(|(_, t)| t.fifo_priority).max();
    if let Some(p) = best_rt {
        if let Some(c) = current {
            if threads[c].runnable && threads[c].fifo_priority == Some(p) {
                return Some(c);
            }
        }
        return runnable()
            .find(|(_, t)| t.fifo_priority == Some(p))
            .map(|(i, _)| i);
    }
    let min = runnable().min_by_key(|(i, t)| (t.vruntime, *i))?;
    let Some(c) = current.filter(|&c| threads[c].runnable) else {
        return Some(min.0);
    };
    let within = now.saturating_sub(slice_start) < tun.slice;
    if tun.scheduler == FairScheduler::Eevdf {
        if let Some(p) = preempting.filter(|&p| threads[p].runnable && on_cpu.contains(&p)) {
            return Some(p);
        }
        // Nor does a waiting user thread take the CPU from a kernel thread within its
        // slice (the lab: 78 such preemptions against 189,658 the other way).
        if within && threads[c].kind.is_kernel() && min.1.kind.is_user() {
            return Some(c);
        }
    }
    if within && min.1.vruntime + tun.wakeup_granularity >= threads[c].vruntime {
        return Some(c);
    }
    Some(min.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    const U: SchedTunables = SchedTunables::UNSCALED;

    fn th(cpu: usize, rt: Option<u32>, vr: Nanos) -> Thread {
        Thread {
            pid: 1,
            name: "t".into(),
            cpu,
            kind: ThreadKind::Ksoftirqd,
            fifo_priority: rt,
            pinned: true,
            runnable: true,
            vruntime: vr,
            switched_in: false,
            waiting_since: None,
            preempted: false,
        }
    }

    #[test]
    fn rt_wins_and_fair_rotates() {
        let ts = vec![
            th(0, None, 0),
            th(0, Some(50), 10_000_000),
            th(1, Some(99), 0),
        ];
        assert_eq!(pick_thread(&ts, &[0, 1], Some(0), 0, 0, &U, None), Some(1));
        let ts = vec![th(0, None, 5_000_000), th(0, None, 0)];
        // Current thread 0 has had far more runtime: switch.
        assert_eq!(pick_thread(&ts, &[0, 1], Some(0), 0, 0, &U, None), Some(1));
        let ts = vec![th(0, None, 500_000), th(0, None, 0)];
        // Within granularity and slice: keep.
        assert_eq!(
            pick_thread(&ts, &[0, 1], Some(0), 0, 100, &U, None),
            Some(0)
        );
        assert_eq!(
            pick_thread(&ts, &[0, 1], Some(0), 0, TIME_SLICE_NS, &U, None),
            Some(1)
        );
    }

    #[test]
    fn eevdf_hands_the_cpu_to_the_preempting_thread() {
        let e = U.with_scheduler(FairScheduler::Eevdf);
        // A preempting wake-up takes the CPU within the slice, even from a less
        // served thread; CFS ignores it.
        let ts = vec![th(0, None, 0), th(0, None, 500_000)];
        assert_eq!(
            pick_thread(&ts, &[0, 1], Some(0), 0, 100, &e, Some(1)),
            Some(1)
        );
        assert_eq!(
            pick_thread(&ts, &[0, 1], Some(0), 0, 100, &U, Some(1)),
            Some(0)
        );
        // Without one, the CFS rule: keep within granularity and slice.
        assert_eq!(
            pick_thread(&ts, &[0, 1], Some(0), 0, 100, &e, None),
            Some(0)
        );
        // A much less served user thread waits for a kernel thread's slice under
        // EEVDF, not under CFS.
        let mut ts = vec![th(0, None, 5_000_000), th(0, None, 0)];
        ts[1].kind = ThreadKind::App(0);
        assert_eq!(
            pick_thread(&ts, &[0, 1], Some(0), 0, 100, &e, None),
            Some(0)
        );
        assert_eq!(
            pick_thread(&ts, &[0, 1], Some(0), 0, 100, &U, None),
            Some(1)
        );
        assert_eq!(
            pick_thread(&ts, &[0, 1], Some(0), 0, U.slice, &e, None),
            Some(1)
        );
        // A preempting thread that is not runnable does not take the CPU.
        let mut ts = vec![th(0, None, 0), th(0, None, 500_000)];
        ts[1].runnable = false;
        assert_eq!(
            pick_thread(&ts, &[0, 1], Some(0), 0, 100, &e, Some(1)),
            Some(0)
        );
        // SCHED_FIFO still wins over a preempting fair thread.
        let ts = vec![th(0, None, 0), th(0, None, 0), th(0, Some(50), 0)];
        assert_eq!(
            pick_thread(&ts, &[0, 1, 2], Some(0), 0, 100, &e, Some(1)),
            Some(2)
        );
    }

    #[test]
    fn log_scaling_follows_the_kernel() {
        // 1 + ilog2(min(cpus, 8)): 1 CPU x1, 2 x2, 4 x3, 8 and more x4.
        assert_eq!(SchedTunables::log_scaled(1).slice, 3_000_000);
        assert_eq!(SchedTunables::log_scaled(2).wakeup_granularity, 2_000_000);
        assert_eq!(SchedTunables::log_scaled(4).slice, 9_000_000);
        let big = SchedTunables::log_scaled(18);
        assert_eq!(big, SchedTunables::log_scaled(8));
        assert_eq!(big.slice, 12_000_000);
        assert_eq!(big.wakeup_granularity, 4_000_000);
        assert_eq!(big.sleeper_credit, 12_000_000);
    }
}
