//! Per-CPU workqueue workers: one `kworker/N` thread of normal priority per CPU runs
//! the work items queued on that CPU in order, one at a time (the kernel's per-CPU
//! pool runs one item at a time while none sleeps: concurrency management). Two kinds
//! of item: a NAPI instance's poll (the `workqueue` NAPI context: `napi_schedule`
//! queues the instance on the scheduling CPU's worker) and a tunnel's decryption
//! (`sim::tunnel`). The decryption item is CPU-intensive (WireGuard allocates its
//! `wg-crypt` workqueue with `WQ_CPU_INTENSIVE`): `process_one_work` takes a worker
//! running such an item out of concurrency management and wakes another worker for the
//! pool's other pending items, so when both kinds are on a CPU the decryption runs in a
//! kworker of its own and the scheduler shares the CPU between the two. Each item's
//! step ends with a bottom-half enable, as `spin_unlock_bh` in the worker and the
//! BH-disabled poll do, so pending softirqs run there before the worker's next step.

use std::collections::VecDeque;

use super::*;

/// A work item on a CPU's worker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WorkItem {
    /// Poll this NAPI instance once (with the weight), then complete or requeue it.
    NapiPoll(usize),
    /// Decrypt packets from this CPU's decryption queue (or the tunnel's shared ring),
    /// one per step, until it is empty.
    Decrypt,
}

/// One worker: its CPU, its thread and its queue of items.
pub(crate) struct Worker {
    pub cpu: usize,
    pub thread: usize,
    pub items: VecDeque<WorkItem>,
}

impl Sim<'_> {
    /// `queue_work_on(c, item)` from CPU `from`: append the item to the worker of `c`
    /// that runs it and wake that worker.
    pub(super) fn queue_work(&mut self, c: usize, item: WorkItem, from: usize) {
        let w = match item {
            WorkItem::Decrypt => self.crypt_worker[c],
            WorkItem::NapiPoll(_) => c,
        };
        self.workers[w].items.push_back(item);
        let t = self.workers[w].thread;
        self.wake_thread_from(t, from);
    }

    /// One step of worker `w` (thread `t`); false if it has no item (it then sleeps).
    pub(super) fn worker_step(&mut self, w: usize, t: usize) -> bool {
        let c = self.workers[w].cpu;
        loop {
            let Some(&item) = self.workers[w].items.front() else {
                self.threads[t].runnable = false;
                return false;
            };
            match item {
                WorkItem::NapiPoll(n) => {
                    self.workers[w].items.pop_front();
                    let (start, pen) = self.begin(c, false);
                    let (end, work, repoll) = self.poll(c, n, start + pen, self.weight);
                    self.commit(
                        c,
                        start,
                        end,
                        Ctx::NapiThread,
                        Finish::WorkPoll {
                            napi: n,
                            work,
                            repoll,
                        },
                    );
                    return true;
                }
                WorkItem::Decrypt => {
                    if self.decrypt_step(c) {
                        return true;
                    }
                    // The queue is empty (for now): the item is done.
                    self.workers[w].items.pop_front();
                }
            }
        }
    }

    /// The end of a worker's NAPI poll: requeue an instance that used its weight (or
    /// was scheduled again meanwhile) behind the worker's other items, else complete
    /// it; the poll ran with bottom halves disabled.
    pub(super) fn work_poll_done(&mut self, c: usize, napi: usize, work: u32, repoll: bool) {
        let now = self.q.now();
        self.record_poll(now, c, work, repoll);
        self.count(now, |k| k.cpus[c].thread_polls += 1);
        if repoll {
            self.queue_work(c, WorkItem::NapiPoll(napi), c);
        } else {
            self.napi_complete(napi, work, now);
        }
        self.exit[c] = Some(ExitKind::WorkerBhEnable);
    }
}
