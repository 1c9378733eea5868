//! Threads and the scheduler: what a CPU does next (hard IRQs, the softirq in progress,
//! then threads), starting and ending batches of CPU work and charging them, waking
//! threads, and one step of a kernel thread.

use super::*;

impl Sim<'_> {
    pub(super) fn wake_thread(&mut self, t: usize) {
        if self.threads[t].runnable {
            return;
        }
        // CFS places a waking thread near the CPU's least-served runnable thread, so
        // a long sleep does not buy it an unbounded claim on the CPU.
        let cpu = self.threads[t].cpu;
        let min = self.cpus[cpu]
            .threads
            .iter()
            .map(|&x| &self.threads[x])
            .filter(|x| x.runnable)
            .map(|x| x.vruntime)
            .min();
        if let Some(m) = min {
            let floor = m.saturating_sub(self.sched.sleeper_credit);
            self.threads[t].vruntime = self.threads[t].vruntime.max(floor);
        }
        // Every wake-up comes from work on the thread's own CPU (IRQ, timer, softirq
        // of that CPU), whose dispatch follows, so no dispatch here.
        self.threads[t].runnable = true;
        self.threads[t].waiting_since = Some(self.q.now());
        // EEVDF as the lab's 6.18 kernel behaves: a kernel thread woken while a user
        // thread runs preempts it at its next return to user space (the end of its
        // current batch; docs/sim.md, "Wake-up preemption on the lab's kernel").
        if self.sched.scheduler == crate::config::FairScheduler::Eevdf {
            if let Some(cur) = self.cpus[cpu].current.filter(|&x| x != t) {
                let (running, woken) = (&self.threads[cur], &self.threads[t]);
                if running.runnable
                    && running.kind.is_user()
                    && running.fifo_priority.is_none()
                    && woken.kind.is_kernel()
                    && woken.fifo_priority.is_none()
                {
                    self.wake_preempt[cpu] = Some(t);
                }
            }
        }
    }

    /// Wake thread `t` from work on CPU `from`: when the thread lives on another CPU
    /// that is not running a batch, that CPU gets the wake-up IPI and looks at its run
    /// queue.
    pub(super) fn wake_thread_from(&mut self, t: usize, from: usize) {
        if self.threads[t].runnable {
            return;
        }
        self.wake_thread(t);
        let c = self.threads[t].cpu;
        if c != from {
            self.kick_idle_cpu(c);
        }
    }

    /// Wake thread `t` from outside the twin's CPUs (a veth sender): its CPU, if not
    /// running a batch, gets the wake-up IPI.
    pub(super) fn wake_thread_remotely(&mut self, t: usize) {
        if self.threads[t].runnable {
            return;
        }
        self.wake_thread(t);
        self.kick_idle_cpu(self.threads[t].cpu);
    }

    /// A remote wake-up's IPI: CPU `c`, unless running a batch (whose dispatch
    /// follows) or already due to look, looks at its run queue `lat_irq` later, or one
    /// of the measured wake-up delays when the profile has them.
    fn kick_idle_cpu(&mut self, c: usize) {
        if !self.cpus[c].busy && !self.dispatch_pending[c] {
            self.dispatch_pending[c] = true;
            let at = self.q.now() + self.remote_wake_up_delay();
            self.q.schedule(at, Ev::Dispatch(c));
        }
    }

    /// How long a thread woken onto an idle CPU from another waits to run.
    pub(super) fn remote_wake_up_delay(&mut self) -> Nanos {
        match self.wake_up_samples.len() {
            0 => self.lat_irq,
            n => self.wake_up_samples[(self.wake_up_rng.next_u64() % n as u64) as usize],
        }
    }

    /// Wake a NAPI kthread scheduled from CPU `from`. An unpinned one is placed first,
    /// as `select_idle_sibling` would: its previous CPU if idle, else the waker's CPU
    /// if idle, else the next idle CPU after its previous one, else its previous CPU.
    pub(super) fn wake_napi_thread(&mut self, t: usize, from: usize) {
        if self.threads[t].runnable {
            return;
        }
        if !self.threads[t].pinned {
            let prev = self.threads[t].cpu;
            let ncpu = self.cpus.len();
            let target = [prev, from]
                .into_iter()
                .chain((1..ncpu).map(|i| (prev + i) % ncpu))
                .find(|&c| self.cpu_idle(c))
                .unwrap_or(prev);
            self.migrate(t, target);
        }
        self.wake_thread_from(t, from);
    }

    /// Nothing runs on CPU `c` and no wake-up is on its way.
    pub(super) fn cpu_idle(&self, c: usize) -> bool {
        let cpu = &self.cpus[c];
        !cpu.busy
            && cpu.current.is_none()
            && cpu.softirq.is_none()
            && cpu.pending_irqs.is_empty()
            && !self.dispatch_pending[c]
    }

    /// Move a sleeping thread to CPU `to`, keeping its runtime lag relative to the
    /// CPUs' `min_vruntime` (CFS's renormalisation on migration).
    fn migrate(&mut self, t: usize, to: usize) {
        let from = self.threads[t].cpu;
        if from == to || (self.cpus[from].busy && self.cpus[from].current == Some(t)) {
            return;
        }
        if self.cpus[from].current == Some(t) {
            self.cpus[from].current = None;
        }
        self.cpus[from].threads.retain(|&x| x != t);
        let list = &mut self.cpus[to].threads;
        let at = list.partition_point(|&x| x < t);
        list.insert(at, t);
        let v = self.threads[t].vruntime;
        self.threads[t].vruntime =
            (v + self.cpus[to].min_vruntime).saturating_sub(self.cpus[from].min_vruntime);
        self.threads[t].cpu = to;
    }

    /// Start a batch of `pre` + work computed by `work(start)` ... see callers. Returns
    /// the start time (after an idle wake-up) and the idle-exit penalty to add.
    pub(super) fn begin(&mut self, c: usize, irq: bool) -> (Nanos, Nanos) {
        let now = self.q.now();
        match self.cpus[c].idle_since.take() {
            Some(_) => {
                let wake = if irq { self.lat_wake } else { 0 };
                (now + wake, self.costs.idle_exit)
            }
            None => (now, 0),
        }
    }

    pub(super) fn commit(&mut self, c: usize, start: Nanos, end: Nanos, ctx: Ctx, finish: Finish) {
        let end = end.max(start);
        let in_idle_loop = self.cpus[c].current.is_none();
        if !in_idle_loop
            && matches!(
                ctx,
                Ctx::HardIrq | Ctx::OtherIrq | Ctx::Softirq | Ctx::SoftirqBh
            )
        {
            self.cpus[c].interrupted = true;
        }
        self.acct.record(c, start, end, ctx, in_idle_loop);
        if matches!(
            ctx,
            Ctx::Ksoftirqd
                | Ctx::KThread
                | Ctx::User
                | Ctx::NapiThread
                | Ctx::BusyPoll
                | Ctx::AppKernel
        ) {
            if let Some(t) = self.cpus[c].current {
                self.threads[t].vruntime += end - start;
                let d = end - start;
                self.count(start, |k| k.thread_ns[t] += d);
            }
        }
        self.cpus[c].busy = true;
        self.finish[c] = finish;
        self.q.schedule(end, Ev::BatchEnd(c));
    }

    /// A batch of thread work whose first part [start, mid) is `first` and the rest
    /// `second` (an application's system calls, then its own work).
    pub(super) fn commit_split(
        &mut self,
        c: usize,
        start: Nanos,
        mid: Nanos,
        end: Nanos,
        first: Ctx,
        second: Ctx,
    ) {
        let in_idle_loop = self.cpus[c].current.is_none();
        self.acct.record(c, start, mid, first, in_idle_loop);
        self.commit(c, mid, end, second, Finish::Nothing);
        // commit() charged [mid, end) to the thread; charge the first part too.
        if let Some(t) = self.cpus[c].current {
            self.threads[t].vruntime += mid - start;
            let d = mid - start;
            self.count(start, |k| k.thread_ns[t] += d);
        }
    }

    pub(super) fn batch_end(&mut self, c: usize) {
        self.cpus[c].busy = false;
        let now = self.q.now();
        match std::mem::replace(&mut self.finish[c], Finish::Nothing) {
            Finish::Nothing => {}
            Finish::Irq(src) => {
                match src {
                    IrqSrc::Line(l) => {
                        let n = self.lines[l].napi;
                        self.count(now, |k| {
                            k.cpus[c].hardirqs += 1;
                            k.cpus[c].net_hardirqs += 1;
                            k.lines[l] += 1;
                        });
                        match self.lines[l].thread {
                            // The hard handler only wakes the line's thread.
                            Some(t) => self.irq_thread_due(t),
                            // __napi_schedule on this CPU: an instance a busy poll
                            // or a pinned timer moved comes back with its interrupt.
                            None => self.napi_schedule_on(n, c),
                        }
                    }
                    IrqSrc::RpsIpi => {
                        // The enqueuer already set SCHED; the IPI puts the backlog on
                        // this CPU's poll list.
                        self.count(now, |k| {
                            k.cpus[c].hardirqs += 1;
                            k.cpus[c].received_rps += 1;
                        });
                        if let Some(n) = self.backlog_napi[c] {
                            self.napis[n].scheduled = true;
                            let queued = self.cpus[c].poll_list.contains(&n)
                                || self.cpus[c]
                                    .softirq
                                    .as_ref()
                                    .and_then(|r| r.net_rx.as_ref())
                                    .is_some_and(|nr| {
                                        nr.list.contains(&n) || nr.repoll.contains(&n)
                                    });
                            if !queued {
                                self.cpus[c].poll_list.push_back(n);
                            }
                            self.cpus[c].softirq_pending |= NET_RX;
                        }
                    }
                    IrqSrc::NapiTimer(n) => {
                        // napi_watchdog (hrtimer): schedule unless already scheduled,
                        // on this CPU, the one that armed it.
                        self.count(now, |k| k.cpus[c].hardirqs += 1);
                        if !self.napis[n].scheduled {
                            self.napi_schedule_on(n, c);
                        }
                    }
                }
                self.exit[c] = Some(ExitKind::Irq);
            }
            Finish::SoftirqPoll { napi, work, repoll } => {
                self.record_poll(now, c, work, repoll);
                if repoll {
                    if let Some(nr) = self.net_rx_mut(c) {
                        nr.repoll.push_back(napi);
                    }
                } else {
                    self.napi_complete(c, napi, work, now);
                }
                let returned = if repoll { self.weight } else { work };
                let tick_ns = self.tick_ns;
                let squeezed = self
                    .net_rx_mut(c)
                    .is_some_and(|nr| nr.account_poll(returned, now, tick_ns));
                if squeezed {
                    self.count(now, |k| k.cpus[c].squeeze += 1);
                }
            }
            Finish::WorkPoll { napi, work, repoll } => {
                self.work_poll_done(c, napi, work, repoll);
            }
            Finish::Decrypted { peer, seq } => {
                self.decrypted(c, peer, seq);
            }
            Finish::IrqThreadRun { line } => {
                // The driver's thread function schedules NAPI between
                // local_bh_disable and local_bh_enable: the softirq runs at that
                // bh-enable, in the thread's context.
                let n = self.lines[line].napi;
                self.napi_schedule(n);
                self.exit[c] = Some(ExitKind::BhEnable);
            }
            Finish::BusyPollStop {
                napi,
                work,
                repoll,
                skip,
            } => {
                self.record_poll(now, c, work, repoll);
                self.count(now, |k| k.cpus[c].busy_polls += 1);
                // MISSED is cleared: this poll is the reschedule it asked for.
                self.napis[napi].missed = false;
                if repoll && skip {
                    // __busy_poll_stop with skip_schedule: release; the timer polls.
                    let nn = &mut self.napis[napi];
                    nn.scheduled = false;
                    nn.timer_gen += 1;
                    let (gen, t) = (nn.timer_gen, nn.gro_flush_timeout);
                    self.q.schedule(now + t, Ev::NapiTimer(napi, gen));
                } else if repoll {
                    // __napi_schedule from the application: this CPU's poll list.
                    match self.napis[napi].thread {
                        Some(t) => self.wake_thread(t),
                        None => {
                            self.cpus[c].poll_list.push_back(napi);
                            self.cpus[c].softirq_pending |= NET_RX;
                        }
                    }
                } else {
                    self.napi_complete(c, napi, work, now);
                }
                self.exit[c] = Some(ExitKind::BhEnable);
            }
            Finish::ThreadPoll {
                thread,
                napi,
                work,
                repoll,
                passes,
            } => {
                self.record_polls(now, c, work, repoll, passes);
                self.count(now, |k| k.cpus[c].thread_polls += passes);
                if !repoll && self.napis[napi].threaded_busy_poll {
                    // IN_BUSY_POLL: napi_complete_done returns false before it looks
                    // at MISSED or clears SCHED, so the driver does not unmask the
                    // IRQ and the kthread, still the owner, polls again.
                    self.napis[napi].missed = false;
                } else if !repoll {
                    self.napi_complete(c, napi, work, now);
                    self.threads[thread].runnable = self.napis[napi].scheduled;
                }
                self.send_rps_ipis(c);
                // napi_threaded_poll wraps each poll in local_bh_disable/enable.
                self.exit[c] = Some(ExitKind::BhEnable);
            }
        }
        self.dispatch(c);
    }

    /// Decide what CPU `c` does next, by priority: hard IRQs, the softirq in progress
    /// (or one to start on IRQ exit), then threads; else idle.
    pub(super) fn dispatch(&mut self, c: usize) {
        loop {
            if self.cpus[c].busy {
                return;
            }
            let now = self.q.now();
            if let Some(src) = self.cpus[c].pending_irqs.pop_front() {
                let (start, pen) = self.begin(c, true);
                // A timer's expiry costs what the host's timer probe measured (on a
                // virtual machine, exits to the hypervisor: docs/sim.md, "A timer's
                // expiry on a virtual machine").
                let handler = match src {
                    IrqSrc::NapiTimer(_) => self.timer_expiry[c],
                    IrqSrc::Line(_) | IrqSrc::RpsIpi => self.costs.hardirq,
                };
                let end = start + pen + handler;
                let ctx = match src {
                    IrqSrc::Line(_) => Ctx::HardIrq,
                    IrqSrc::RpsIpi | IrqSrc::NapiTimer(_) => Ctx::OtherIrq,
                };
                self.commit(c, start, end, ctx, Finish::Irq(src));
                return;
            }
            if let Some(kind) = self.exit[c].take() {
                let cpu = &self.cpus[c];
                if cpu.softirq.is_none() && cpu.softirq_pending != 0 {
                    let ksoftirqd = cpu.ksoftirqd;
                    let blocked = kind != ExitKind::BhEnable
                        && self.skip_rule
                        && self.threads[ksoftirqd].runnable;
                    if !blocked {
                        let pending = std::mem::take(&mut self.cpus[c].softirq_pending);
                        let mut run = SoftirqRun::new(
                            false,
                            now,
                            self.tick_ns,
                            self.hz,
                            pending,
                            self.cfg.settings.max_softirq_restart,
                        );
                        run.bh_enable = kind != ExitKind::Irq;
                        self.cpus[c].softirq = Some(run);
                    }
                }
            }
            if self.cpus[c].softirq.is_some() {
                if self.softirq_step(c) {
                    return;
                }
                continue;
            }
            let cur = self.cpus[c].current;
            let slice = self.cpus[c].slice_start;
            let tun = self.sched;
            let preempt = self.wake_preempt[c].take();
            let on_cpu = &self.cpus[c].threads;
            match pick_thread(&self.threads, on_cpu, cur, slice, now, &tun, preempt) {
                Some(t) => {
                    let v = self.threads[t].vruntime;
                    self.cpus[c].min_vruntime = self.cpus[c].min_vruntime.max(v);
                    if cur != Some(t) {
                        // schedule() switches: the request for it is served.
                        self.need_resched[c] = false;
                        if let Some(p) = cur.filter(|&p| self.threads[p].runnable) {
                            self.threads[p].waiting_since = Some(now);
                            self.threads[p].preempted = true;
                        }
                        let waited = self.threads[t]
                            .waiting_since
                            .take()
                            .map_or(0, |s| now.saturating_sub(s));
                        self.count(now, |k| {
                            k.thread_runs[t] += 1;
                            k.thread_wait_ns[t] += waited;
                        });
                        self.cpus[c].current = Some(t);
                        self.threads[t].switched_in = true;
                        self.cpus[c].slice_start = now;
                        self.cpus[c].interrupted = false;
                        let (start, pen) = self.begin(c, false);
                        let switched = start + pen + self.costs.switch;
                        // An application preempted earlier pays for its return: the
                        // switch back and the cache the other thread took.
                        let preempted = std::mem::take(&mut self.threads[t].preempted);
                        let resume = match self.threads[t].kind {
                            ThreadKind::App(a) if preempted => self.apps[a].resume_ns,
                            _ => 0,
                        };
                        if resume == 0 {
                            self.commit(c, start, switched, Ctx::KThread, Finish::Nothing);
                        } else {
                            let end = switched + resume;
                            self.commit_split(
                                c,
                                start,
                                switched,
                                end,
                                Ctx::KThread,
                                Ctx::AppKernel,
                            );
                        }
                        return;
                    }
                    if std::mem::take(&mut self.cpus[c].interrupted)
                        && self.costs.after_interrupt > 0
                    {
                        let ctx = match self.threads[t].kind {
                            ThreadKind::App(_) | ThreadKind::Client(_) => Ctx::User,
                            ThreadKind::Ksoftirqd => Ctx::Ksoftirqd,
                            ThreadKind::Napi(_) => Ctx::NapiThread,
                            ThreadKind::Worker(_) | ThreadKind::Irq(_) | ThreadKind::HostWork => {
                                Ctx::KThread
                            }
                        };
                        let end = now + self.costs.after_interrupt;
                        self.commit(c, now, end, ctx, Finish::Nothing);
                        return;
                    }
                    if self.thread_step(c, t) {
                        return;
                    }
                }
                None => {
                    self.need_resched[c] = false;
                    self.cpus[c].current = None;
                    self.cpus[c].interrupted = false;
                    if self.cpus[c].idle_since.is_none() {
                        self.cpus[c].idle_since = Some(now);
                    }
                    // Back in the idle loop (after a task, or after an IRQ that
                    // interrupted it): NOHZ may stop the tick. The twin's kernel timers
                    // are all hrtimers (the NAPI watchdog), which do not hold the tick,
                    // so there is no timer-wheel event to keep it running.
                    self.acct.enter_idle_loop(c, now, None);
                    return;
                }
            }
        }
    }

    /// One step of thread `t`; false if it had nothing to do (it then sleeps).
    pub(super) fn thread_step(&mut self, c: usize, t: usize) -> bool {
        match self.threads[t].kind {
            ThreadKind::Ksoftirqd => {
                let pending = std::mem::take(&mut self.cpus[c].softirq_pending);
                if pending == 0 {
                    self.threads[t].runnable = false;
                    return false;
                }
                let now = self.q.now();
                self.cpus[c].softirq = Some(SoftirqRun::new(
                    true,
                    now,
                    self.tick_ns,
                    self.hz,
                    pending,
                    self.cfg.settings.max_softirq_restart,
                ));
                self.softirq_step(c)
            }
            ThreadKind::App(a) => self.app_step(c, t, a),
            ThreadKind::Client(k) => self.client_step(c, t, k),
            ThreadKind::Worker(w) => self.worker_step(w, t),
            ThreadKind::Irq(l) => self.irq_thread_step(c, t, l),
            ThreadKind::HostWork => self.host_work_step(c, t),
            ThreadKind::Napi(n) => {
                if !self.napis[n].scheduled {
                    self.threads[t].runnable = false;
                    return false;
                }
                let (start, pen) = self.begin(c, false);
                let (end, work, repoll) = self.poll(c, n, start + pen, self.weight);
                let end = end + self.costs.napi_thread_packet * work as Nanos;
                let run_starts = std::mem::take(&mut self.threads[t].switched_in);
                let (end, passes) = if self.napis[n].threaded_busy_poll {
                    self.busy_pass_end(c, t, n, start + pen, end, work == 0 && !repoll)
                } else if run_starts {
                    (end + self.costs.napi_thread_run, 1)
                } else {
                    (end, 1)
                };
                self.commit(
                    c,
                    start,
                    end,
                    Ctx::NapiThread,
                    Finish::ThreadPoll {
                        thread: t,
                        napi: n,
                        work,
                        repoll,
                        passes,
                    },
                );
                true
            }
        }
    }
}
