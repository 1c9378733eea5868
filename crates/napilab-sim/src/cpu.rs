//! CPUs and the threads they schedule: a simple fair scheduler (least runtime first,
//! with a time slice and a wake-up granularity, in the spirit of CFS) plus SCHED_FIFO
//! priorities that always win. Hard IRQs and softirqs are not threads: they run on top
//! of whatever the CPU was doing.

use std::collections::VecDeque;

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
}

/// CFS-like constants (defaults of sched_min_granularity / wakeup_granularity on a
/// small machine); the exact values only matter when threads compete.
pub const TIME_SLICE_NS: Nanos = 3_000_000;
pub const WAKEUP_GRANULARITY_NS: Nanos = 1_000_000;

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
/// unless a higher RT priority or a much less served normal thread is waiting.
pub fn pick_thread(
    threads: &[Thread],
    on_cpu: &[usize],
    current: Option<usize>,
    slice_start: Nanos,
    now: Nanos,
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
    if let Some(c) = current {
        let ct = &threads[c];
        if ct.runnable
            && now.saturating_sub(slice_start) < TIME_SLICE_NS
            && min.1.vruntime + WAKEUP_GRANULARITY_NS >= ct.vruntime
        {
            return Some(c);
        }
    }
    Some(min.0)
}

#[cfg(test)]
mod tests {
    use super::*;

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
        }
    }

    #[test]
    fn rt_wins_and_fair_rotates() {
        let ts = vec![
            th(0, None, 0),
            th(0, Some(50), 10_000_000),
            th(1, Some(99), 0),
        ];
        assert_eq!(pick_thread(&ts, &[0, 1], Some(0), 0, 0), Some(1));
        let ts = vec![th(0, None, 5_000_000), th(0, None, 0)];
        // Current thread 0 has had far more runtime: switch.
        assert_eq!(pick_thread(&ts, &[0, 1], Some(0), 0, 0), Some(1));
        let ts = vec![th(0, None, 500_000), th(0, None, 0)];
        // Within granularity and slice: keep.
        assert_eq!(pick_thread(&ts, &[0, 1], Some(0), 0, 100), Some(0));
        assert_eq!(
            pick_thread(&ts, &[0, 1], Some(0), 0, TIME_SLICE_NS),
            Some(1)
        );
    }
}
