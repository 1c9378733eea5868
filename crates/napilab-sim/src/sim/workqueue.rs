//! Per-CPU workqueue workers: `kworker/N` threads of normal priority per CPU run the
//! work items queued on that CPU in order, one at a time (the kernel's per-CPU pool
//! runs one item while none sleeps: concurrency management). Two kinds of item: a NAPI
//! instance's poll (the `workqueue` NAPI context: `napi_schedule` queues the instance
//! on the scheduling CPU's pool) and a tunnel's decryption (`sim::tunnel`). The
//! decryption item is CPU-intensive (WireGuard allocates its `wg-crypt` workqueue with
//! `WQ_CPU_INTENSIVE`): `process_one_work` takes the worker that runs it out of
//! concurrency management and wakes another worker for the pool's other pending items,
//! so the decryption runs in a kworker of its own and the scheduler shares the CPU
//! between it and the worker polling NAPI instances. Each item's step ends with a
//! bottom-half enable, as `spin_unlock_bh` in the worker and the BH-disabled poll do,
//! so pending softirqs run there before the worker's next step.
//!
//! Where the decryption item waits when NAPI items are on the CPU too
//! (`tunnel.worklist`; Linux 6.1, kernel/workqueue.c). Both workqueues are bound and of
//! normal priority, so `__queue_work` puts both kinds on the same per-CPU pool
//! (`cpu_worker_pools[cpu][0]`) and `insert_work` appends them to its one `worklist`;
//! it wakes a worker only when none is running (`__need_more_worker`: `!nr_running`).
//! With `pool` (the default) the decryption item queued while the pool's worker is
//! running NAPI items so waits behind them; the worker that reaches it runs it (it
//! becomes CPU-intensive) and `need_more_worker` wakes an idle worker for the items
//! behind it, which CFS places as any waking thread; its PENDING bit is cleared as it
//! starts (`set_work_pool_and_clear_pending`), so a kick while it runs queues it again
//! at the tail, and one reached while it still runs follows it in its worker
//! (`find_worker_executing_work`). With `split` the item goes straight to its own
//! kworker (the earlier model). Either way NAPI items never wait behind the decryption.

use std::collections::VecDeque;

use super::tunnel::DecryptStep;
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
    /// The item at the front has started (its PENDING bit is clear).
    pub started: bool,
}

impl Sim<'_> {
    /// NAPI items and CPU `c`'s decryption item share the pool's one worklist
    /// (`tunnel.worklist = "pool"` with the `workqueue` NAPI context).
    fn pool_worklist(&self, c: usize) -> bool {
        self.crypt_worker.get(c).is_some_and(|&w| w != c)
            && self.tunnel.as_ref().is_some_and(|t| t.pool_worklist)
    }

    /// `queue_work_on(c, item)` from CPU `from`: append the item to the worker of `c`
    /// that runs it and wake that worker (a no-op if it is runnable). With the pool's
    /// worklist a decryption item queued while the pool's worker runs (`nr_running`
    /// is 1) waits in that worker's list, behind the NAPI items before it.
    pub(super) fn queue_work(&mut self, c: usize, item: WorkItem, from: usize) {
        let w = match item {
            WorkItem::Decrypt
                if self.pool_worklist(c) && self.threads[self.workers[c].thread].runnable =>
            {
                c
            }
            WorkItem::Decrypt => self.crypt_worker[c],
            WorkItem::NapiPoll(_) => c,
        };
        self.workers[w].items.push_back(item);
        let t = self.workers[w].thread;
        self.wake_thread_from(t, from);
    }

    /// Workers `a` and `b` of one CPU exchange their threads: the kernel's workers are
    /// alike, and whichever takes the decryption item off the worklist runs it.
    fn swap_worker_threads(&mut self, a: usize, b: usize) {
        let (ta, tb) = (self.workers[a].thread, self.workers[b].thread);
        self.workers[a].thread = tb;
        self.workers[b].thread = ta;
        self.threads[ta].kind = ThreadKind::Worker(b);
        self.threads[tb].kind = ThreadKind::Worker(a);
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
                WorkItem::Decrypt if w != self.crypt_worker[c] => {
                    // The pool's worker reached the decryption item in the worklist.
                    self.workers[w].items.pop_front();
                    let crypt = self.crypt_worker[c];
                    self.workers[crypt].items.push_back(WorkItem::Decrypt);
                    if self.threads[self.workers[crypt].thread].runnable {
                        // Still running in the other worker: it follows there.
                        continue;
                    }
                    // This worker runs it; an idle one is woken for the rest.
                    self.swap_worker_threads(w, crypt);
                    if !self.workers[w].items.is_empty() {
                        let other = self.workers[w].thread;
                        self.wake_thread_from(other, c);
                    }
                    return self.worker_step(crypt, t);
                }
                WorkItem::Decrypt => {
                    let pool = self.pool_worklist(c);
                    if !std::mem::replace(&mut self.workers[w].started, true) {
                        self.decrypt_item_started(c, pool);
                    }
                    let step = self.decrypt_step(c);
                    if step == DecryptStep::Decrypted {
                        return true;
                    }
                    // Nothing to decrypt (for now): the item is done.
                    self.decrypt_item_ended(c, step, pool);
                    self.workers[w].items.pop_front();
                    self.workers[w].started = false;
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
            self.napi_complete(c, napi, work, now);
        }
        self.exit[c] = Some(ExitKind::WorkerBhEnable);
    }
}
