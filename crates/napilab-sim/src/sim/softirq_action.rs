//! The softirq: a run of `__do_softirq` on a CPU (inline or in ksoftirqd), with
//! `net_rx_action` over the poll list and `net_tx_action` over the output queue.

use super::*;

impl Sim<'_> {
    /// An empty NAPI list with a buffer from an earlier `net_rx_action`: each run
    /// takes the poll list and makes a repoll list, and allocating both afresh
    /// every time (then growing them one push at a time) showed in the profile.
    pub(super) fn spare_list(&mut self) -> VecDeque<usize> {
        self.spare_lists.pop().unwrap_or_default()
    }

    /// Keep an emptied list's buffer for `spare_list` (a few at most: memory stays
    /// bounded).
    pub(super) fn keep_list(&mut self, mut l: VecDeque<usize>) {
        l.clear();
        if self.spare_lists.len() < 8 {
            self.spare_lists.push(l);
        }
    }

    pub(super) fn net_rx_mut(&mut self, c: usize) -> Option<&mut NetRxRun> {
        self.cpus[c].softirq.as_mut()?.net_rx.as_mut()
    }

    /// Advance the softirq run of CPU `c`; true if a batch was started.
    pub(super) fn softirq_step(&mut self, c: usize) -> bool {
        loop {
            let now = self.q.now();
            let tick_ns = self.tick_ns;
            let Some(run) = self.cpus[c].softirq.as_mut() else {
                return false;
            };
            let ctx = if run.ksoftirqd {
                Ctx::Ksoftirqd
            } else if run.bh_enable {
                Ctx::SoftirqBh
            } else {
                Ctx::Softirq
            };
            if let Some(nr) = run.net_rx.as_mut() {
                if !nr.squeezed {
                    if nr.list.is_empty() && nr.repoll.is_empty() {
                        // Instances scheduled during this run (6.x "goto start").
                        let cpu = &mut self.cpus[c];
                        if !cpu.poll_list.is_empty() {
                            // Moved over, the poll list keeping its buffer.
                            match cpu.softirq.as_mut().and_then(|r| r.net_rx.as_mut()) {
                                Some(nr) => nr.list.append(&mut cpu.poll_list),
                                None => cpu.poll_list.clear(),
                            }
                            continue;
                        }
                    }
                    let nr = self.net_rx_mut(c).expect("net_rx present");
                    if let Some(n) = nr.list.pop_front() {
                        let entry = !std::mem::replace(&mut nr.entry_paid, true);
                        let (start, pen) = self.begin(c, false);
                        let pre = pen + if entry { self.costs.softirq } else { 0 };
                        let (end, work, repoll) = self.poll(c, n, start + pre, self.weight);
                        self.commit(
                            c,
                            start,
                            end,
                            ctx,
                            Finish::SoftirqPoll {
                                napi: n,
                                work,
                                repoll,
                            },
                        );
                        return true;
                    }
                    if !nr.entry_paid {
                        nr.entry_paid = true;
                        let (start, pen) = self.begin(c, false);
                        let end = start + pen + self.costs.softirq;
                        self.commit(c, start, end, ctx, Finish::Nothing);
                        return true;
                    }
                }
                // End of net_rx_action: what is left goes back on the poll list, the
                // untouched instances first, then the newly scheduled, then repoll.
                let cpu = &mut self.cpus[c];
                let Some(nr) = cpu.softirq.as_mut().and_then(|r| r.net_rx.take()) else {
                    continue;
                };
                let (mut list, mut repoll) = (nr.list, nr.repoll);
                list.append(&mut cpu.poll_list);
                list.append(&mut repoll);
                if !list.is_empty() {
                    cpu.softirq_pending |= NET_RX;
                }
                let old = std::mem::replace(&mut cpu.poll_list, list);
                self.keep_list(old);
                self.keep_list(repoll);
                self.send_rps_ipis(c);
                continue;
            }
            if run.todo & NET_TX != 0 {
                run.todo &= !NET_TX;
                self.count(now, |k| k.cpus[c].tx_softirqs += 1);
                let (start, pen) = self.begin(c, false);
                let t0 = start + pen + self.costs.tx_softirq;
                // net_tx_action: run the qdiscs on this CPU's output queue, one quota
                // each; one that still has a backlog and room stays scheduled.
                let mut end = t0;
                let scheduled = std::mem::take(&mut self.tx_sched[c]);
                for &x in &scheduled {
                    end = self.qdisc_run(x, end, 64);
                    if !self.txqs[x].qdisc.is_empty() && self.txqs[x].has_room() {
                        self.tx_sched[c].push(x);
                        self.cpus[c].softirq_pending |= NET_TX;
                    }
                }
                self.commit(c, start, end, ctx, Finish::Nothing);
                return true;
            }
            if run.todo & NET_RX != 0 {
                run.todo &= !NET_RX;
                self.count(now, |k| k.cpus[c].rx_softirqs += 1);
                let fresh = self.spare_list();
                let repoll = self.spare_list();
                let cpu = &mut self.cpus[c];
                let list: VecDeque<usize> = std::mem::replace(&mut cpu.poll_list, fresh);
                let mut nr = NetRxRun::new(
                    list,
                    self.cfg.settings.netdev_budget,
                    self.budget_usecs,
                    now,
                    tick_ns,
                    self.hz,
                );
                nr.repoll = repoll;
                if let Some(run) = cpu.softirq.as_mut() {
                    run.net_rx = Some(nr);
                }
                continue;
            }
            // End of a pass of __do_softirq.
            let cpu = &mut self.cpus[c];
            let pending = cpu.softirq_pending;
            let run = cpu.softirq.as_mut().expect("softirq run present");
            if pending != 0 {
                // `time_before(jiffies, end) && !need_resched() && --max_restart`.
                if !self.need_resched[c] && run.may_restart(now, tick_ns) {
                    run.todo = pending;
                    cpu.softirq_pending = 0;
                    continue;
                }
                // wakeup_softirqd
                let k = self.cpus[c].ksoftirqd;
                self.cpus[c].softirq = None;
                self.wake_thread(k);
                return false;
            }
            let was_ksoftirqd = run.ksoftirqd;
            self.cpus[c].softirq = None;
            if was_ksoftirqd {
                let k = self.cpus[c].ksoftirqd;
                self.threads[k].runnable = self.cpus[c].softirq_pending != 0;
            }
            return false;
        }
    }
}
