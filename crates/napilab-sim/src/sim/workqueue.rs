//! Per-CPU workqueue workers: one `kworker/N` thread of normal priority per CPU runs
//! the work items queued on that CPU in order, one at a time (a worker never preempts
//! another worker of its CPU: the kernel's per-CPU pool runs one item at a time while
//! none sleeps). Two kinds of item: a NAPI instance's poll (the `workqueue` NAPI
//! context: `napi_schedule` queues the instance on the scheduling CPU's worker) and a
//! tunnel's decryption (`sim::tunnel`). Each item's step ends with a bottom-half
//! enable, as `spin_unlock_bh` in the worker and the BH-disabled poll do, so pending
//! softirqs run there before the worker's next step.

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

/// One CPU's worker: its thread and its queue of items.
pub(crate) struct Worker {
    pub thread: usize,
    pub items: VecDeque<WorkItem>,
}

impl Sim<'_> {
    /// `queue_work_on(c, item)` from CPU `from`: append the item and wake the worker.
    pub(super) fn queue_work(&mut self, c: usize, item: WorkItem, from: usize) {
        self.workers[c].items.push_back(item);
        let t = self.workers[c].thread;
        self.wake_thread_from(t, from);
    }

    /// One step of CPU `c`'s worker `t`; false if it has no item (it then sleeps).
    pub(super) fn worker_step(&mut self, c: usize, t: usize) -> bool {
        loop {
            let Some(&item) = self.workers[c].items.front() else {
                self.threads[t].runnable = false;
                return false;
            };
            match item {
                WorkItem::NapiPoll(n) => {
                    self.workers[c].items.pop_front();
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
                    self.workers[c].items.pop_front();
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
