//! CPU time accounting: the true time each CPU spent per context, and what
//! `/proc/stat` would show under tick sampling (docs/kernel.md#cpu-accounting, docs/sim.md
//! "The tick and /proc/stat"). Without `CONFIG_IRQ_TIME_ACCOUNTING` each tick charges one
//! jiffy to the context it finds (kernel/sched/cputime.c, `account_process_tick`): a
//! softirq (ksoftirqd included) counts as softirq, a task as system or user, the idle task
//! as idle. A tick cannot land inside a hard IRQ handler (handlers run with interrupts
//! masked), so it is taken as the handler ends: in the softirq the IRQ exit runs, or
//! else in what the handler interrupted. Under NOHZ idle the tick is a per-CPU timer that the idle loop stops and
//! the next task restarts (kernel/time/tick-sched.c), so work that an IRQ brings to an
//! idle CPU is seen only when a tick happens to fire during it; idle is the measured idle
//! sleep time.

use crate::event::Nanos;

/// Who the CPU is working for during a batch. The first five are the coarse contexts
/// of the model report; the rest split them further (same tick column) for the
/// tracing-tier view of the Observation: which softirq entry, which kind of kernel
/// thread work, which kind of hard IRQ.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ctx {
    /// A device IRQ handler (NIC RX or TX completion vector).
    HardIrq = 0,
    /// Softirq run inline on IRQ exit.
    Softirq = 1,
    /// Softirq run by `ksoftirqd/N`.
    Ksoftirqd = 2,
    /// Other kernel work in thread context: context switches.
    KThread = 3,
    /// An application's own work.
    User = 4,
    /// Softirq run inline on `local_bh_enable` (after a threaded poll or a busy poll).
    SoftirqBh = 5,
    /// A threaded-NAPI kthread's polls (and its cache penalty after interruption).
    NapiThread = 6,
    /// An application's busy-poll loop (system time).
    BusyPoll = 7,
    /// An application's system calls other than busy polling.
    AppKernel = 8,
    /// Hard IRQs that are not device vectors: the NAPI hrtimer and RPS IPIs.
    OtherIrq = 9,
}
pub const N_CTX: usize = 10;

/// /proc/stat columns the model can produce.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Column {
    Irq = 0,
    Softirq = 1,
    System = 2,
    Idle = 3,
    User = 4,
}
pub const N_COL: usize = 5;

/// Per CPU and interval.
#[derive(Clone, Debug, Default)]
pub struct CpuTime {
    pub busy_ns: [u64; N_CTX],
    pub ticks: [u64; N_COL],
}

/// A time that never comes: a cancelled tick timer.
const NEVER: Nanos = Nanos::MAX;

/// One CPU's tick, as kernel/time/tick-sched.c keeps it in `struct tick_sched` (Linux
/// 6.2-6.8; the access-point study ran 6.7): whether NOHZ idle has stopped it
/// (`tick_stopped`) and when its `sched_timer` fires next.
#[derive(Clone, Copy, Debug)]
struct TickSched {
    stopped: bool,
    /// While the tick runs, the next jiffy boundary; while it is stopped, the next
    /// timer-wheel event the idle loop found, or `NEVER`.
    next_fire: Nanos,
    /// The next timer-wheel event this CPU had when it last entered the idle loop.
    idle_timer: Option<Nanos>,
    /// A tick that fired during a hard IRQ handler and waits for it to end.
    deferred: Option<DeferredTick>,
}

/// A tick held back by a hard IRQ handler: taken when the handler ends at `at`.
#[derive(Clone, Copy, Debug)]
struct DeferredTick {
    at: Nanos,
    /// The handler interrupted the idle task.
    in_idle_loop: bool,
}

pub struct Accounting {
    tick_ns: Nanos,
    nohz: bool,
    start: Nanos,
    interval_ns: Nanos,
    n_intervals: usize,
    end: Nanos,
    ticks: Vec<TickSched>,
    /// [cpu][interval]
    pub cpus: Vec<Vec<CpuTime>>,
}

/// The column a tick charges when it finds the CPU running `ctx` outside a hard IRQ
/// handler, per `account_process_tick` and `account_system_time` without IRQ time
/// accounting: in_serving_softirq() (inline or ksoftirqd) is softirq, a task system or
/// user. Hard IRQs: `DeferredTick`.
fn tick_column(ctx: Ctx) -> Column {
    match ctx {
        Ctx::Softirq | Ctx::SoftirqBh | Ctx::Ksoftirqd => Column::Softirq,
        Ctx::HardIrq
        | Ctx::OtherIrq
        | Ctx::KThread
        | Ctx::NapiThread
        | Ctx::BusyPoll
        | Ctx::AppKernel => Column::System,
        Ctx::User => Column::User,
    }
}

fn is_hard_irq(ctx: Ctx) -> bool {
    matches!(ctx, Ctx::HardIrq | Ctx::OtherIrq)
}

impl Accounting {
    pub fn new(
        cpus: usize,
        tick_ns: Nanos,
        nohz: bool,
        start: Nanos,
        interval_ns: Nanos,
        n_intervals: usize,
        end: Nanos,
    ) -> Self {
        // A periodic tick fires on every jiffy boundary. Under NOHZ the CPUs start as
        // the idle loop leaves them: tick stopped, nothing due.
        let tick = TickSched {
            stopped: nohz,
            next_fire: if nohz { NEVER } else { tick_ns },
            idle_timer: None,
            deferred: None,
        };
        Accounting {
            tick_ns,
            nohz,
            start,
            interval_ns,
            n_intervals,
            end,
            ticks: vec![tick; cpus],
            cpus: vec![vec![CpuTime::default(); n_intervals]; cpus],
        }
    }

    fn interval_of(&self, t: Nanos) -> Option<usize> {
        if t < self.start || t >= self.end {
            return None;
        }
        Some((((t - self.start) / self.interval_ns) as usize).min(self.n_intervals - 1))
    }

    fn charge(&mut self, cpu: usize, t: Nanos, col: Column) {
        if let Some(i) = self.interval_of(t) {
            self.cpus[cpu][i].ticks[col as usize] += 1;
        }
    }

    /// A tick that finds the idle task: `account_idle_time`, which /proc/stat shows only
    /// with a periodic tick (under NOHZ it shows the measured idle sleep instead).
    fn charge_idle(&mut self, cpu: usize, t: Nanos) {
        if !self.nohz {
            self.charge(cpu, t, Column::Idle);
        }
    }

    /// Take a tick held back by a hard IRQ handler, unless the segment about to start at
    /// `s` (`next`: its context) is another hard IRQ right after it. The timer interrupt
    /// is taken at the first point interrupts are on again: in the softirq that the IRQ
    /// exit runs (`irq_exit_rcu` → `invoke_softirq`; `handle_softirqs` enables
    /// interrupts), charged softirq; otherwise in what the handler interrupted (the idle
    /// task or a task). Returns whether a tick is still held back.
    fn take_deferred(&mut self, cpu: usize, s: Nanos, next: Option<Ctx>) -> bool {
        let Some(d) = self.ticks[cpu].deferred else {
            return false;
        };
        if s == d.at {
            match next {
                Some(ctx) if is_hard_irq(ctx) => return true,
                Some(ctx) if tick_column(ctx) == Column::Softirq => {
                    self.ticks[cpu].deferred = None;
                    self.charge(cpu, d.at, Column::Softirq);
                    return false;
                }
                _ => {}
            }
        }
        self.ticks[cpu].deferred = None;
        if d.in_idle_loop {
            self.charge_idle(cpu, d.at);
        } else {
            self.charge(cpu, d.at, Column::System);
        }
        false
    }

    /// The first jiffy boundary strictly after `t`: `tick_nohz_restart` forwards the
    /// sched_timer from the last tick by whole periods (`hrtimer_forward`) until it
    /// lies in the future, so ticks stay on the jiffy grid.
    fn next_boundary(&self, t: Nanos) -> Nanos {
        (t / self.tick_ns + 1) * self.tick_ns
    }

    /// The tick at `k` has fired: a running tick re-arms one period on
    /// (`tick_sched_timer` returns HRTIMER_RESTART), a stopped one does not.
    fn fired(&mut self, cpu: usize, k: Nanos) {
        let tick_ns = self.tick_ns;
        let ts = &mut self.ticks[cpu];
        ts.next_fire = if ts.stopped { NEVER } else { k + tick_ns };
    }

    /// `tick_nohz_idle_stop_tick` at `now` in the idle loop (there is no cpuidle driver
    /// on the access point, so `cpuidle_idle_call` calls it on every pass; a governor
    /// that keeps the tick for short predicted idle is not modelled).
    /// `tick_nohz_next_event`: if the next timer-wheel event is due within one jiffy of
    /// the last jiffy update, a running tick is kept; otherwise it is stopped and the
    /// sched_timer set to that event, or cancelled if there is none (a stopped tick is
    /// re-programmed the same way). hrtimers do not count: with high-resolution timers
    /// they fire by themselves (`hrtimer_get_next_event` returns KTIME_MAX).
    fn stop_or_keep(&mut self, cpu: usize, now: Nanos) {
        let tick_ns = self.tick_ns;
        let basemono = now / tick_ns * tick_ns;
        let ts = &mut self.ticks[cpu];
        // An expired timer has run (its TIMER_SOFTIRQ): it no longer holds the tick.
        let timer = ts.idle_timer.filter(|&t| t > now);
        ts.idle_timer = timer;
        // Timer-wheel timers expire on jiffy boundaries.
        let next_tick = timer.map(|t| t.div_ceil(tick_ns) * tick_ns);
        if next_tick.is_some_and(|t| t - basemono <= tick_ns) && !ts.stopped {
            return;
        }
        ts.stopped = true;
        ts.next_fire = next_tick.unwrap_or(NEVER);
    }

    /// Ticks strictly before `t` find the CPU in the idle loop with nothing running:
    /// idle. Under NOHZ each such tick is an interrupt of the idle loop, which then
    /// decides again whether to stop the tick.
    fn idle_until(&mut self, cpu: usize, t: Nanos) {
        if self.ticks[cpu].deferred.is_some_and(|d| d.at < t) {
            self.take_deferred(cpu, t, None);
        }
        while self.ticks[cpu].next_fire < t {
            let k = self.ticks[cpu].next_fire;
            self.charge_idle(cpu, k);
            self.fired(cpu, k);
            if self.nohz {
                self.stop_or_keep(cpu, k);
            }
        }
    }

    /// CPU `cpu` entered, or came back to, the idle loop at `now` with nothing to run;
    /// `next_timer`: its next timer-wheel event. Under NOHZ this may stop the tick.
    pub fn enter_idle_loop(&mut self, cpu: usize, now: Nanos, next_timer: Option<Nanos>) {
        if !self.nohz {
            return;
        }
        self.idle_until(cpu, now);
        self.ticks[cpu].idle_timer = next_timer;
        self.stop_or_keep(cpu, now);
    }

    /// `tick_nohz_idle_exit`: the CPU leaves the idle loop for a task at `now`; a
    /// stopped tick restarts on the jiffy grid (`tick_nohz_restart_sched_tick`). An
    /// IRQ that interrupts the idle loop does not restart it (`tick_irq_enter` only
    /// updates jiffies and ends the idle sleep).
    fn exit_idle_loop(&mut self, cpu: usize, now: Nanos) {
        self.idle_until(cpu, now);
        if self.ticks[cpu].stopped {
            let first = self.next_boundary(now);
            let ts = &mut self.ticks[cpu];
            ts.stopped = false;
            ts.next_fire = first;
        }
    }

    /// The CPU ran `ctx` over [s, e). `in_idle_loop`: the work interrupted the idle task
    /// (an IRQ from idle and the softirq on its exit); any other work is a task's, so
    /// the CPU has left the idle loop by `s`. Segments of one CPU must come in time
    /// order.
    pub fn record(&mut self, cpu: usize, s: Nanos, e: Nanos, ctx: Ctx, in_idle_loop: bool) {
        let held = self.take_deferred(cpu, s, Some(ctx));
        if in_idle_loop {
            self.idle_until(cpu, s);
        } else {
            self.exit_idle_loop(cpu, s);
        }
        let mut due = false;
        while self.ticks[cpu].next_fire < e {
            let k = self.ticks[cpu].next_fire;
            if is_hard_irq(ctx) {
                due = true;
            } else {
                self.charge(cpu, k, tick_column(ctx));
            }
            self.fired(cpu, k);
        }
        // One pending timer interrupt, however many periods the handlers spanned.
        if due || held {
            let in_idle_loop = match self.ticks[cpu].deferred {
                Some(d) => d.in_idle_loop,
                None => in_idle_loop,
            };
            self.ticks[cpu].deferred = Some(DeferredTick {
                at: e,
                in_idle_loop,
            });
        }
        // True time, split over intervals and clipped to the measured window.
        let (mut s, e) = (s.max(self.start), e.min(self.end));
        while s < e {
            let Some(i) = self.interval_of(s) else { break };
            let iv_end = if i + 1 == self.n_intervals {
                self.end
            } else {
                self.start + (i as u64 + 1) * self.interval_ns
            };
            let upto = e.min(iv_end);
            self.cpus[cpu][i].busy_ns[ctx as usize] += upto - s;
            s = upto;
        }
    }

    /// Close the books at the end of the window: remaining ticks find the CPUs idle.
    pub fn finish(&mut self) {
        for cpu in 0..self.ticks.len() {
            self.idle_until(cpu, self.end);
        }
    }

    pub fn tick_ns(&self) -> Nanos {
        self.tick_ns
    }

    pub fn nohz(&self) -> bool {
        self.nohz
    }

    /// Whether CPU `cpu`'s tick is stopped now (NOHZ idle).
    pub fn tick_stopped(&self, cpu: usize) -> bool {
        self.ticks[cpu].stopped
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Nanos = 1_000_000;

    #[test]
    fn periodic_ticks_sample_the_running_context() {
        // HZ=1000; 10 ms window; softirq over [0, 3 ms), idle after.
        let mut a = Accounting::new(1, MS, false, 0, 10 * MS, 1, 10 * MS);
        a.record(0, 0, 3 * MS, Ctx::Softirq, true);
        a.finish();
        let c = &a.cpus[0][0];
        assert_eq!(c.busy_ns[Ctx::Softirq as usize], 3 * MS);
        // ticks at 1, 2 ms in softirq; 3..9 ms idle.
        assert_eq!(c.ticks[Column::Softirq as usize], 2);
        assert_eq!(c.ticks[Column::Idle as usize], 7);
    }

    /// Work an IRQ brings to an idle CPU is not sampled; a task (ksoftirqd) restarts the
    /// tick on the jiffy grid: it starts at 5 ms exactly, so its first tick is at 6 ms
    /// (`hrtimer_forward` puts the expiry strictly after now). This test counted the
    /// 5 ms tick too before the tick was a per-CPU timer stopped and restarted by the
    /// idle loop.
    #[test]
    fn nohz_does_not_sample_work_from_idle() {
        let mut a = Accounting::new(1, MS, true, 0, 10 * MS, 1, 10 * MS);
        a.record(0, 0, 3 * MS, Ctx::Softirq, true);
        a.enter_idle_loop(0, 3 * MS, None);
        a.record(0, 5 * MS, 7 * MS + MS / 2, Ctx::Ksoftirqd, false);
        a.enter_idle_loop(0, 7 * MS + MS / 2, None);
        a.finish();
        let c = &a.cpus[0][0];
        assert_eq!(c.ticks[Column::Softirq as usize], 2); // 6 and 7 ms only
        assert_eq!(c.ticks[Column::Idle as usize], 0);
        assert!(a.tick_stopped(0));
    }

    #[test]
    fn busy_time_splits_over_intervals_and_clips() {
        let mut a = Accounting::new(1, 1_000_000, false, 1_000, 1_000, 2, 3_000);
        a.record(0, 500, 2_500, Ctx::HardIrq, false);
        assert_eq!(a.cpus[0][0].busy_ns[0], 1_000);
        assert_eq!(a.cpus[0][1].busy_ns[0], 500);
    }

    /// A CPU that works in short bursts (`burst` of every `period`) for 10 s at HZ=250,
    /// entering the idle loop between bursts, with a timer-wheel event due at the next
    /// jiffy boundary or none; returns the ticks charged per column.
    fn bursts(burst: Nanos, period: Nanos, ctx: Ctx, from_idle: bool, timer: bool) -> [u64; N_COL] {
        let (window, tick) = (10_000 * MS, 4 * MS);
        let mut a = Accounting::new(1, tick, true, 0, window, 1, window);
        let mut t = 0;
        while t + period <= window {
            a.record(0, t, t + burst, ctx, from_idle);
            let idle_at = t + burst;
            let next_timer = timer.then_some((idle_at / tick + 1) * tick);
            a.enter_idle_loop(0, idle_at, next_timer);
            t += period;
        }
        a.finish();
        a.cpus[0][0].ticks
    }

    /// Busy 70% in short task bursts (1.3 ms of every 1.857 ms, not a multiple of the
    /// 4 ms tick) with short idle gaps: each burst leaves the idle loop and restarts the
    /// tick, each gap stops it, so a tick fires only when a jiffy boundary falls inside a
    /// burst, and the ticks charged are the busy share of the 2,500 jiffies.
    #[test]
    fn task_bursts_are_sampled_in_proportion_to_their_busy_time() {
        let ticks = bursts(1_300_000, 1_857_000, Ctx::KThread, false, false);
        let share = ticks[Column::System as usize] as f64 / 2_500.0;
        assert!((share - 0.70).abs() < 0.03, "sampled share {share:.3}");
    }

    /// The same bursts as IRQ work on an idle CPU: nothing in the idle loop restarts the
    /// tick, so none is sampled, however busy the CPU is.
    #[test]
    fn irq_bursts_from_idle_are_not_sampled() {
        let ticks = bursts(1_300_000, 1_857_000, Ctx::Softirq, true, false);
        assert_eq!(ticks.iter().sum::<u64>(), 0, "{ticks:?}");
    }

    /// With a timer-wheel event always due within a jiffy at idle entry, the idle loop
    /// programs the tick to it (`tick_nohz_next_event`: a running tick is kept, a stopped
    /// one fires at the timer), so a tick fires on every jiffy and the same IRQ work is
    /// sampled in proportion to its busy time.
    #[test]
    fn a_timer_due_within_a_jiffy_keeps_the_tick_and_irq_work_is_sampled() {
        let ticks = bursts(1_300_000, 1_857_000, Ctx::Softirq, true, true);
        let share = ticks[Column::Softirq as usize] as f64 / 2_500.0;
        assert!((share - 0.70).abs() < 0.03, "sampled share {share:.3}");
    }

    /// A CPU idle for long stretches has its tick stopped: no tick fires while it
    /// idles, and a stopped tick with a far timer fires once, at that timer.
    #[test]
    fn a_long_idle_stops_the_tick() {
        let mut a = Accounting::new(1, 4 * MS, true, 0, 1_000 * MS, 1, 1_000 * MS);
        a.record(0, 0, 10 * MS, Ctx::KThread, false);
        assert!(!a.tick_stopped(0));
        a.enter_idle_loop(0, 10 * MS, Some(500 * MS));
        assert!(a.tick_stopped(0));
        // IRQ work from idle across the timer: the stopped tick's one firing lands in it.
        a.record(0, 498 * MS, 502 * MS, Ctx::Softirq, true);
        a.enter_idle_loop(0, 502 * MS, None);
        a.finish();
        let c = &a.cpus[0][0];
        // Ticks at 4 and 8 ms (the task), then only the one at 500 ms.
        assert_eq!(c.ticks[Column::System as usize], 2);
        assert_eq!(c.ticks[Column::Softirq as usize], 1);
        assert!(a.tick_stopped(0));
    }

    /// A tick due while a hard IRQ handler runs is taken as the handler ends: in the
    /// softirq the IRQ exit runs, or else in what the handler interrupted; never in irq.
    #[test]
    fn a_tick_in_a_hard_irq_is_taken_when_the_handler_ends() {
        let mut a = Accounting::new(1, MS, false, 0, 10 * MS, 1, 10 * MS);
        // A task was running, no softirq follows: system.
        a.record(0, MS / 2, MS + MS / 2, Ctx::HardIrq, false);
        // From idle, two IRQs back to back, then their softirq: softirq.
        a.record(0, 2 * MS - 300_000, 2 * MS + MS / 2, Ctx::HardIrq, true);
        a.record(0, 2 * MS + MS / 2, 2 * MS + 600_000, Ctx::HardIrq, true);
        a.record(0, 2 * MS + 600_000, 2 * MS + 700_000, Ctx::Softirq, true);
        // From idle with nothing after it: the idle task.
        a.record(0, 4 * MS - MS / 2, 4 * MS + MS / 2, Ctx::HardIrq, true);
        a.finish();
        let c = &a.cpus[0][0];
        assert_eq!(c.ticks[Column::Irq as usize], 0);
        assert_eq!(c.ticks[Column::System as usize], 1);
        assert_eq!(c.ticks[Column::Softirq as usize], 1);
        // 3 ms, 4 ms (held back, then the idle task), 5 to 9 ms.
        assert_eq!(c.ticks[Column::Idle as usize], 7);
    }
}
