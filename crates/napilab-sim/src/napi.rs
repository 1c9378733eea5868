//! The NAPI instance state machine (docs/kernel.md#napi-contract and
//! docs/kernel.md#irq-deferral): SCHED and MISSED bits, `napi_complete_done` with
//! `defer-hard-irqs` and `gro-flush-timeout`.

use crate::config::RingPoll;
use crate::event::Nanos;

#[derive(Debug)]
pub struct Napi {
    pub id: u32,
    pub name: String,
    /// CPU whose softirq polls it (the CPU of its IRQ) or where its thread runs.
    pub cpu: usize,
    pub rings: Vec<usize>,
    /// How one poll serves several rings.
    pub ring_poll: RingPoll,
    /// Egress TX queue whose completions this poll reclaims.
    pub txq: Option<usize>,
    /// The IRQ line the driver unmasks on completion; None for a CPU's backlog.
    pub line: Option<usize>,
    /// Some(cpu): this is that CPU's RPS backlog instance (`process_backlog`).
    pub backlog: Option<usize>,
    /// NAPI_STATE_SCHED: on a poll list or owned by its thread.
    pub scheduled: bool,
    /// NAPI_STATE_MISSED: scheduled again while scheduled; completion re-polls.
    pub missed: bool,
    pub defer_hard_irqs: u32,
    pub gro_flush_timeout: Nanos,
    pub defer_count: u32,
    /// Generation of the armed deferral timer; a fired timer of an older generation is
    /// stale (the kernel would have cancelled it).
    pub timer_gen: u64,
    /// The CPU that armed the timer: `napi_complete_done` and IRQ suspension arm it
    /// pinned (HRTIMER_MODE_REL_PINNED) on the CPU they run on, and `napi_watchdog`
    /// schedules the instance there.
    pub timer_cpu: usize,
    pub thread: Option<usize>,
    /// Threaded busy polling (`NAPI_STATE_THREADED_BUSY_POLL`, 6.19): the kthread
    /// sets IN_BUSY_POLL once it owns the instance, so `napi_complete_done` returns
    /// false without clearing SCHED; the driver then leaves its IRQ masked and the
    /// kthread, still owning the instance, polls again after `cond_resched`.
    pub threaded_busy_poll: bool,
    /// Polled by a work item on the worker of the CPU that scheduled it (the
    /// `workqueue` context); `cpu` is then that CPU.
    pub workqueue: bool,
    /// Some(p): a tunnel peer's instance, scheduled by `napi_schedule` from a worker
    /// (no ring, no IRQ line); its poll takes the peer's decrypted packets.
    pub peer: Option<usize>,
}

/// What `napi_complete_done` decided.
#[derive(Debug, PartialEq, Eq)]
pub enum Completion {
    /// MISSED was set: the instance stays scheduled and is polled again.
    Reschedule,
    /// IRQ stays masked; the deferral timer fires after this many ns.
    Defer(Nanos),
    /// The driver re-enables (unmasks) the IRQ.
    Unmask,
}

impl Napi {
    /// An idle instance polled on `cpu`, serving nothing yet: callers set its rings,
    /// TX queue, IRQ line, backlog, deferral settings and thread.
    pub fn idle(id: u32, name: String, cpu: usize) -> Napi {
        Napi {
            id,
            name,
            cpu,
            rings: Vec::new(),
            ring_poll: RingPoll::default(),
            txq: None,
            line: None,
            backlog: None,
            scheduled: false,
            missed: false,
            defer_hard_irqs: 0,
            gro_flush_timeout: 0,
            defer_count: 0,
            timer_gen: 0,
            timer_cpu: cpu,
            thread: None,
            threaded_busy_poll: false,
            workqueue: false,
            peer: None,
        }
    }

    /// `napi_schedule`: returns true if the instance was idle and must now be queued
    /// (poll list or thread wake-up); false if it was already scheduled (MISSED set).
    pub fn schedule(&mut self) -> bool {
        if self.scheduled {
            self.missed = true;
            false
        } else {
            self.scheduled = true;
            true
        }
    }

    /// `napi_complete_done(n, work)` as in Linux 6.x (net/core/dev.c): a productive poll
    /// reloads the deferral counter; while it is positive, each completion decrements
    /// it and arms the `gro_flush_timeout` timer instead of unmasking the IRQ.
    pub fn complete_done(&mut self, work: u32) -> Completion {
        if self.missed {
            self.missed = false;
            return Completion::Reschedule;
        }
        if work > 0 {
            self.defer_count = self.defer_hard_irqs;
        }
        let mut timeout = 0;
        if self.defer_count > 0 {
            self.defer_count -= 1;
            timeout = self.gro_flush_timeout;
        }
        self.scheduled = false;
        if timeout > 0 {
            self.timer_gen += 1;
            Completion::Defer(timeout)
        } else {
            Completion::Unmask
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn napi(d: u32, t: Nanos) -> Napi {
        Napi {
            defer_hard_irqs: d,
            gro_flush_timeout: t,
            ..Napi::idle(1, "n".into(), 0)
        }
    }

    #[test]
    fn missed_forces_a_repoll() {
        let mut n = napi(0, 0);
        assert!(n.schedule());
        assert!(!n.schedule());
        assert_eq!(n.complete_done(3), Completion::Reschedule);
        assert!(n.scheduled);
        assert_eq!(n.complete_done(0), Completion::Unmask);
        assert!(!n.scheduled);
    }

    #[test]
    fn deferral_counts_empty_rounds() {
        // D = 2: a productive poll then two empty completions defer; the third unmasks.
        let mut n = napi(2, 20_000);
        n.schedule();
        assert_eq!(n.complete_done(5), Completion::Defer(20_000));
        n.schedule();
        assert_eq!(n.complete_done(0), Completion::Defer(20_000));
        n.schedule();
        assert_eq!(n.complete_done(0), Completion::Unmask);
    }
}
