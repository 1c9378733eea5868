//! Applications and busy polling: an application's step over its socket, the
//! `napi_busy_loop` / `busy_poll_stop` loop, and 6.13 IRQ suspension.

use super::*;

/// The least one pass of a non-blocking epoll loop takes (a system call's round trip):
/// a profile without a poll cost would otherwise spin in 1 ns steps.
const MIN_EPOLL_PASS_NS: Nanos = 100;

impl Sim<'_> {
    /// Busy polling (`napi_busy_loop`, net/core/dev.c): with an empty socket the
    /// application polls the instance with its busy-poll budget, holding it so that
    /// the driver does not complete it and its IRQ stays masked, until data arrives or
    /// the busy-poll time is up; then `busy_poll_stop` polls once more normally, which
    /// completes the instance (unmasking the IRQ) or hands it to the softirq if that
    /// poll used the whole budget. Returns true if a batch was started.
    pub(super) fn busy_poll_step(&mut self, c: usize, a: usize, data: bool) -> bool {
        let Some(bs) = self.apps[a].busy else {
            return false;
        };
        let n = bs.napi;
        let now = self.q.now();
        if data {
            self.apps[a].busy_loop_done = false;
        } else if self.apps[a].busy_loop_done {
            return false; // the loop is over: block
        }
        let deadline = *self.apps[a].busy_deadline.get_or_insert(now + bs.usecs);
        if !data && (now < deadline || !self.apps[a].busy_polled) {
            self.apps[a].busy_polled = true;
            let (start, pen) = self.begin(c, false);
            let mut tt = start + pen;
            if !self.apps[a].owns_napi && !self.napis[n].scheduled {
                self.napis[n].scheduled = true;
                self.apps[a].owns_napi = true;
            }
            if self.apps[a].owns_napi {
                let (end, work, _) = self.poll(c, n, tt, bs.budget);
                tt = end;
                self.record_poll(end, c, work, work == bs.budget);
                self.count(end, |k| k.cpus[c].busy_polls += 1);
            } else {
                // Another context polls the instance: spin.
                tt += self.costs.poll.max(1);
            }
            self.commit(c, start, tt.max(start + 1), Ctx::BusyPoll, Finish::Nothing);
            return true;
        }
        self.apps[a].busy_deadline = None;
        self.apps[a].busy_polled = false;
        self.apps[a].busy_loop_done = !data;
        if !self.apps[a].owns_napi {
            return false;
        }
        self.apps[a].owns_napi = false;
        // prefer-busy-poll: reload the deferral so the final completion re-arms the
        // gro-flush-timeout timer and leaves the IRQ masked.
        let napi = &mut self.napis[n];
        let skip = bs.prefer && napi.defer_hard_irqs > 0 && napi.gro_flush_timeout > 0;
        if skip {
            napi.defer_count = napi.defer_hard_irqs;
        }
        let (start, pen) = self.begin(c, false);
        let (end, work, repoll) = self.poll(c, n, start + pen, bs.budget);
        self.commit(
            c,
            start,
            end,
            Ctx::BusyPoll,
            Finish::BusyPollStop {
                napi: n,
                work,
                repoll: repoll || work == bs.budget,
                skip,
            },
        );
        true
    }

    /// IRQ suspension (6.13 `napi_suspend_irqs`): epoll returned events, so push the
    /// instance's timer out to irq-suspend-timeout.
    pub(super) fn suspend_irqs(&mut self, c: usize, a: usize) {
        let Some(bs) = self.apps[a].busy else { return };
        if !bs.prefer || bs.suspend == 0 {
            return;
        }
        let now = self.q.now();
        let napi = &mut self.napis[bs.napi];
        napi.timer_gen += 1;
        napi.timer_cpu = c;
        let gen = napi.timer_gen;
        self.q
            .schedule(now + bs.suspend, Ev::NapiTimer(bs.napi, gen));
    }

    /// `napi_resume_irqs`: epoll found nothing and the application blocks; hand the
    /// instance to the softirq, whose completions then count down the deferral.
    pub(super) fn resume_irqs(&mut self, c: usize, a: usize) {
        let Some(bs) = self.apps[a].busy else { return };
        if !bs.prefer || bs.suspend == 0 {
            return;
        }
        let n = bs.napi;
        if self.napis[n].schedule() {
            match self.napis[n].thread {
                Some(t) => self.wake_thread(t),
                None => {
                    self.cpus[c].poll_list.push_back(n);
                    self.cpus[c].softirq_pending |= NET_RX;
                }
            }
            self.exit[c] = Some(ExitKind::BhEnable);
        }
    }

    /// One step of an application: one return of `epoll_wait` with up to APP_BATCH
    /// packets already on its socket and the first of them, or the next packet of
    /// the last return.
    pub(super) fn app_step(&mut self, c: usize, t: usize, a: usize) -> bool {
        if self.apps[a].unread > 0 {
            self.apps[a].unread -= 1;
            let (start, pen) = self.begin(c, false);
            let (tt, user) = self.app_handle(c, a, start + pen);
            self.commit_split(c, start, tt - user, tt, Ctx::AppKernel, Ctx::User);
            return true;
        }
        let now = self.q.now();
        let ready = self.apps[a]
            .socket
            .iter()
            .take(APP_BATCH)
            .take_while(|(r, _)| *r <= now)
            .count();
        if self.apps[a].busy.is_some() && self.busy_poll_step(c, a, ready > 0) {
            return true;
        }
        if ready == 0 && self.apps[a].busy.is_some_and(|b| b.nonblocking_epoll) {
            // The busy loop found nothing for its whole time, so epoll forgot its NAPI
            // id (`ep_busy_loop`): the server's loop keeps calling epoll_wait, which
            // returns at once without polling, until a request reaches the socket by
            // the instance's own timer or IRQ. (napi_resume_irqs at that moment acts
            // only with an irq-suspend-timeout, which no non-blocking mode sets.)
            let (start, pen) = self.begin(c, false);
            let end = start + pen + self.costs.poll.max(MIN_EPOLL_PASS_NS);
            self.commit(c, start, end, Ctx::AppKernel, Finish::Nothing);
            return true;
        }
        if ready == 0 {
            self.threads[t].runnable = false;
            self.apps[a].busy_loop_done = false;
            self.resume_irqs(c, a);
            // Data queued by a batch computed ahead of time: wake up when it lands.
            if let Some(&(r, _)) = self.apps[a].socket.front() {
                if !self.apps[a].wake_pending {
                    self.apps[a].wake_pending = true;
                    self.q.schedule(r, Ev::WakeApp(a));
                }
            }
            return false;
        }
        self.suspend_irqs(c, a);
        let (start, pen) = self.begin(c, false);
        // One return of epoll_wait with events: its own cost, whatever it brings.
        self.count(start, |k| k.cpus[c].epoll_returns += 1);
        let mut tt = start + pen + self.apps[a].return_ns;
        let mut user = 0;
        // Under EEVDF a woken kernel thread preempts the application between two
        // packets, so each is its own batch; under CFS, where a wake-up preempts
        // within a slice only with a lead over the wake-up granularity, the return is
        // one batch (fewer events, and the interruptions the study profiles were
        // calibrated with).
        let handled_now = match self.sched.scheduler {
            crate::config::FairScheduler::Eevdf => 1,
            crate::config::FairScheduler::Cfs => ready,
        };
        self.apps[a].unread = ready - handled_now;
        for _ in 0..handled_now {
            let (end, u) = self.app_handle(c, a, tt);
            tt = end;
            user += u;
        }
        self.commit_split(c, start, tt - user, tt, Ctx::AppKernel, Ctx::User);
        true
    }

    /// Handle the next packet on application `a`'s socket from `tt`: the time it ends
    /// at and the user time in it (the kernel part, system calls and transmit, first).
    fn app_handle(&mut self, c: usize, a: usize, mut tt: Nanos) -> (Nanos, Nanos) {
        let Some((_, p)) = self.apps[a].socket.pop_front() else {
            return (tt, 0);
        };
        tt += self.apps[a].kernel_ns + self.apps[a].user_ns;
        match self.apps[a].reply_bytes {
            Some(size) => {
                // The reply carries the request's arrival time and class: its
                // latency is the request's response time at the server's NIC.
                let reply = Packet { size, ..p };
                tt = self.egress(c, reply, tt);
            }
            None => {
                if let Some(i) = self.win.lookup(p.arrival) {
                    let cls = p.class as usize;
                    self.counts[i].class_forwarded[cls] += 1;
                    self.latency[cls].record(tt + self.lat_rx_dma - p.arrival);
                }
            }
        }
        (tt, self.apps[a].user_ns)
    }
}
