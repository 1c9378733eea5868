//! NAPI scheduling and the driver poll: `napi_schedule` and `napi_complete_done` for
//! every execution context, one poll of an instance (its rings, its TX reclaim, a
//! CPU's RPS backlog) and the per-poll counters.

use super::workqueue::WorkItem;
use super::*;

impl Sim<'_> {
    pub(super) fn napi_schedule(&mut self, n: usize) {
        if !self.napis[n].schedule() {
            return;
        }
        let c = self.napis[n].cpu;
        self.queue_napi(n, c);
    }

    /// `napi_schedule` from work running on CPU `c` (a thread, not the instance's IRQ):
    /// an idle instance is polled in its context on `c`, or by its kthread; one
    /// already scheduled (on whatever CPU) only gets MISSED set and stays there.
    pub(super) fn napi_schedule_on(&mut self, n: usize, c: usize) {
        if !self.napis[n].schedule() {
            return;
        }
        if self.napis[n].thread.is_none() {
            self.napis[n].cpu = c;
        }
        self.queue_napi(n, c);
    }

    /// Hand a scheduled instance to its context, from CPU `c`: its kthread (woken), a
    /// work item on `c`'s worker, or `c`'s poll list with NET_RX raised.
    fn queue_napi(&mut self, n: usize, c: usize) {
        match (self.napis[n].thread, self.napis[n].workqueue) {
            (Some(t), _) if self.napis[n].peer.is_some() => self.wake_napi_thread(t, c),
            (Some(t), _) => self.wake_thread(t),
            (None, true) => self.queue_work(c, WorkItem::NapiPoll(n), c),
            (None, false) => {
                self.cpus[c].poll_list.push_back(n);
                self.cpus[c].softirq_pending |= NET_RX;
            }
        }
    }

    /// `napi_complete_done` on CPU `c`, which arms the deferral timer there.
    pub(super) fn napi_complete(&mut self, c: usize, n: usize, work: u32, now: Nanos) {
        match self.napis[n].complete_done(work) {
            Completion::Reschedule => {
                let c = self.napis[n].cpu;
                self.queue_napi(n, c);
            }
            Completion::Defer(timeout) => {
                self.napis[n].timer_cpu = c;
                let gen = self.napis[n].timer_gen;
                self.q.schedule(now + timeout, Ev::NapiTimer(n, gen));
            }
            Completion::Unmask => match (self.napis[n].line, self.napis[n].backlog) {
                (Some(l), _) if self.is_veth_rx(l) && self.arrived_on_rings(n, now) => {
                    // veth_poll re-checks its ptr_ring after napi_complete_done and
                    // schedules the instance again at once, on this CPU: the same
                    // softirq, or the running kthread polls again without sleeping.
                    self.napis[n].scheduled = true;
                    let c = self.napis[n].cpu;
                    self.queue_napi(n, c);
                }
                (Some(l), _) => self.unmask_line(l, now),
                (None, Some(b)) => {
                    // Packets queued "later" by another CPU's batch computed ahead of
                    // this one: their enqueuer would have found the instance idle and
                    // sent an IPI; deliver that IPI when the first one is queued.
                    if let Some(&(ready, _)) = self.backlogs[b].front() {
                        self.napis[n].scheduled = true;
                        self.q.schedule(ready.max(now) + self.lat_irq, Ev::Ipi(b));
                    }
                }
                (None, None) => {}
            },
        }
    }

    /// Some ring of instance `n` holds a packet that has arrived by `now`.
    fn arrived_on_rings(&mut self, n: usize, now: Nanos) -> bool {
        (0..self.napis[n].rings.len()).any(|i| {
            let r = self.napis[n].rings[i];
            self.rings[r].nth_pending(1).is_some_and(|a| a <= now)
        })
    }

    /// Run the driver poll of instance `n` from `t`; returns (end time, RX packets,
    /// whether the poll reports "not done" by returning the whole weight).
    pub(super) fn poll(
        &mut self,
        c: usize,
        n: usize,
        mut t: Nanos,
        weight: u32,
    ) -> (Nanos, u32, bool) {
        t += self.costs.poll;
        let mut clean = true;
        if let Some(x) = self.napis[n].txq {
            let (k, complete) = self.txqs[x].reclaim(t, self.cfg.egress.tx_work_limit);
            t += k as u64 * self.costs.reclaim;
            clean &= complete;
            self.count(t, |cn| cn.cpus[c].tx_reclaimed += k as u64);
            // netif_tx_wake_queue: a stopped queue with a backlog reschedules the qdisc
            // on this CPU's output queue (the reclaiming CPU, which need not be the one
            // that transmitted).
            if !self.txqs[x].qdisc.is_empty() && self.txqs[x].has_room() {
                if !self.tx_sched[c].contains(&x) {
                    self.tx_sched[c].push(x);
                }
                self.cpus[c].softirq_pending |= NET_TX;
            }
        }
        let mut total = 0u32;
        let nrings = self.napis[n].rings.len();
        let alternate = self.napis[n].ring_poll == RingPoll::Alternate;
        // One round visits every ring once. The stock driver stops after one round;
        // the study's driver goes round again while the weight lasts and some ring's
        // last visit used its whole allotment (so may hold more).
        loop {
            let mut ring_left_full = false;
            for i in 0..nrings {
                if total >= weight {
                    break;
                }
                let r = self.napis[n].rings[i];
                let rb = self.rings[r].budget.min(weight - total);
                let k;
                (t, k) = self.poll_one_ring(c, r, t, rb);
                // A ring that used its whole allotment may hold more: the stock driver
                // reports "not done" (ixgbe: clean_complete = false) and is polled
                // again; the alternating driver first goes round again.
                if k == rb {
                    ring_left_full = true;
                }
                total += k;
            }
            if !ring_left_full {
                break;
            }
            if !alternate || total >= weight {
                clean = false;
                break;
            }
        }
        if let Some(b) = self.napis[n].backlog {
            // process_backlog: up to the weight, only what was queued by now.
            while total < weight {
                match self.backlogs[b].front() {
                    Some(&(ready, _)) if ready <= t => {}
                    _ => break,
                }
                let Some((_, p)) = self.backlogs[b].pop_front() else {
                    break;
                };
                t = self.forward(c, p, t);
                total += 1;
            }
            if total == weight {
                clean = false;
            }
        }
        if let Some(pe) = self.napis[n].peer {
            let k;
            (t, k) = self.peer_poll(pe, t, weight);
            total += k;
            if total == weight {
                clean = false;
            }
        }
        let repoll = !clean;
        (t, total, repoll)
    }

    /// One visit of ring `r` by a driver poll: up to `rb` packets from `t`; returns
    /// (end time, packets taken).
    pub(super) fn poll_one_ring(
        &mut self,
        c: usize,
        r: usize,
        mut t: Nanos,
        rb: u32,
    ) -> (Nanos, u32) {
        if self.ring_forwards[r] {
            // Its loop ends only when its ring has nothing more for it (or at `rb`).
            return self.poll_ring_forward(c, r, t, rb);
        }
        let q = self.rings[r].queue;
        let mut k = 0;
        let mut batch = self.veth_rx.then(|| {
            super::gro_batch::GroBatch::new(
                t,
                self.costs.rx_poll,
                self.cfg.settings.gro_normal_batch,
            )
        });
        while k < rb {
            let visible = batch.map_or(t, |b| b.visible());
            let Some(p) = self.rings[r].pop_at(visible) else {
                break;
            };
            t += self.costs.rx_poll;
            let size = p.size as u64;
            self.count(t, |cn| {
                cn.rx_packets += 1;
                cn.rx_bytes += size;
                cn.queue_rx_packets[q] += 1;
            });
            if self.tunnel.is_some() {
                t = self.tunnel_receive(p, t);
            } else if self.rps_cpus[q].is_empty() {
                t = self.forward(c, p, t);
            } else {
                t += self.costs.rps;
                self.rps_enqueue(c, q, p, t);
            }
            if let Some(b) = batch.as_mut() {
                b.took(t);
            }
            k += 1;
        }
        (t, k)
    }

    pub(super) fn record_poll(&mut self, now: Nanos, c: usize, work: u32, repoll: bool) {
        self.record_polls(now, c, work, repoll, 1);
    }

    /// `passes` polls ending at `now`: the first took `work` packets, the others none.
    pub(super) fn record_polls(
        &mut self,
        now: Nanos,
        c: usize,
        work: u32,
        repoll: bool,
        passes: u64,
    ) {
        let full = repoll as u64;
        // The context, in ExecContext::ALL order: a softirq run says which entry;
        // otherwise a thread polls (an application: busy polling).
        let ctx = match self.cpus[c].softirq.as_ref() {
            Some(r) if r.ksoftirqd => 2,
            Some(r) if r.bh_enable => 1,
            Some(_) => 0,
            None => match self.cpus[c].current.map(|t| self.threads[t].kind) {
                Some(ThreadKind::App(_)) => 4,
                _ => 3,
            },
        };
        let empty = (work == 0) as u64 + passes - 1;
        self.count(now, |k| {
            let cc = &mut k.cpus[c];
            cc.polls += passes;
            cc.poll_packets += work as u64;
            cc.full_polls += full;
            cc.ctx_polls[ctx] += passes;
            cc.ctx_packets[ctx] += work as u64;
            cc.ctx_empty[ctx] += empty;
            cc.ctx_full[ctx] += full;
        });
        if self.win.index(now).is_some() {
            let i = (work as usize).min(self.poll_hist.len() - 1);
            self.poll_hist[i] += 1;
            self.poll_hist[0] += passes - 1;
        }
    }
}
