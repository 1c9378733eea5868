//! Threaded IRQ handlers (`request_threaded_irq`; docs/sim.md, "Threaded IRQ
//! handlers"). The hard handler (`fixed_cycles.hardirq`) only wakes the line's
//! `irq/N-<dev>` thread (kernel/irq/handle.c `__irq_wake_thread`); the thread, SCHED_FIFO
//! 50 on the line's CPU, runs the driver's thread function (kernel/irq/manage.c
//! `irq_thread` -> `irq_thread_fn`), which for iwlwifi's MSI-X vectors is
//! `local_bh_disable(); napi_schedule(); local_bh_enable();`
//! (drivers/net/wireless/intel/iwlwifi/pcie/rx.c `iwl_pcie_irq_rx_msix_handler`,
//! Linux 5.12 onwards), so the NAPI poll runs in the softirq at that bh-enable, in the
//! thread's context. The wake-up sets need_resched on the CPU, which ends an inline
//! `__do_softirq` restart loop at the end of its pass (the rest goes to ksoftirqd:
//! kernel/softirq.c `handle_softirqs`), and the CPU leaves the idle loop for the
//! thread, so the tick samples what it then runs. Each interrupt costs two context
//! switches: into the thread, and out of it when it sleeps.

use super::*;

impl Sim<'_> {
    /// The hard handler of a threaded line ran: set the thread's IRQTF_RUNTHREAD and
    /// wake it, at once or `irq_thread.wakeup_ns` later.
    pub(super) fn irq_thread_due(&mut self, t: usize) {
        self.irq_thread_run[t] = true;
        if self.lat_irq_thread == 0 {
            self.irq_thread_wake(t);
        } else {
            let at = self.q.now() + self.lat_irq_thread;
            self.q.schedule(at, Ev::IrqThreadWake(t));
        }
    }

    /// `wake_up_process` of an IRQ thread on its own CPU: it preempts whatever runs
    /// there unless that is a SCHED_FIFO thread of at least its priority
    /// (`check_preempt_curr` -> `resched_curr`), so need_resched is set.
    pub(super) fn irq_thread_wake(&mut self, t: usize) {
        let c = self.threads[t].cpu;
        let cur = self.cpus[c].current;
        if cur != Some(t) && !self.threads[t].runnable {
            let prio = self.threads[t].fifo_priority.unwrap_or(0);
            let preempts =
                cur.is_none_or(|x| self.threads[x].fifo_priority.is_none_or(|p| p < prio));
            if preempts {
                self.need_resched[c] = true;
            }
        }
        self.wake_thread(t);
    }

    /// One step of IRQ thread `t` (line `l`) on CPU `c`: run the handler when it is
    /// due; else sleep, paying the switch out when the CPU goes idle next (a switch to
    /// another thread is paid when that thread is picked). False: nothing was started.
    pub(super) fn irq_thread_step(&mut self, c: usize, t: usize, l: usize) -> bool {
        if std::mem::take(&mut self.irq_thread_run[t]) {
            let (start, pen) = self.begin(c, false);
            let end = start + pen + self.costs.irq_thread;
            self.commit(
                c,
                start,
                end,
                Ctx::KThread,
                Finish::IrqThreadRun { line: l },
            );
            return true;
        }
        self.threads[t].runnable = false;
        let other = self.cpus[c]
            .threads
            .iter()
            .any(|&x| x != t && self.threads[x].runnable);
        if other {
            return false;
        }
        let (start, pen) = self.begin(c, false);
        let end = start + pen + self.costs.switch;
        self.commit(c, start, end, Ctx::KThread, Finish::Nothing);
        true
    }
}
