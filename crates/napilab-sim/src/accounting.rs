//! CPU time accounting: the true time each CPU spent per context, and what
//! `/proc/stat` would show under tick sampling (docs/kernel.md#cpu-accounting):
//! a tick landing in softirq counts as softirq (ksoftirqd included), in
//! a hard IRQ as irq, in a kthread as system, otherwise idle. With NOHZ idle the tick
//! is stopped while the CPU sits in the idle loop, so an IRQ and the softirq run on its
//! exit are not sampled at all, and idle is the measured idle sleep time.

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

fn column_of(ctx: Ctx) -> Column {
    match ctx {
        Ctx::HardIrq | Ctx::OtherIrq => Column::Irq,
        Ctx::Softirq | Ctx::SoftirqBh | Ctx::Ksoftirqd => Column::Softirq,
        Ctx::KThread | Ctx::NapiThread | Ctx::BusyPoll | Ctx::AppKernel => Column::System,
        Ctx::User => Column::User,
    }
}

/// Per CPU and interval.
#[derive(Clone, Debug, Default)]
pub struct CpuTime {
    pub busy_ns: [u64; N_CTX],
    pub ticks: [u64; N_COL],
}

pub struct Accounting {
    tick_ns: Nanos,
    nohz: bool,
    start: Nanos,
    interval_ns: Nanos,
    n_intervals: usize,
    end: Nanos,
    next_tick: Vec<Nanos>,
    /// [cpu][interval]
    pub cpus: Vec<Vec<CpuTime>>,
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
        Accounting {
            tick_ns,
            nohz,
            start,
            interval_ns,
            n_intervals,
            end,
            // Ticks fall on jiffy boundaries.
            next_tick: vec![tick_ns; cpus],
            cpus: vec![vec![CpuTime::default(); n_intervals]; cpus],
        }
    }

    fn interval_of(&self, t: Nanos) -> Option<usize> {
        if t < self.start || t >= self.end {
            return None;
        }
        Some((((t - self.start) / self.interval_ns) as usize).min(self.n_intervals - 1))
    }

    fn tick(&mut self, cpu: usize, t: Nanos, col: Column) {
        if let Some(i) = self.interval_of(t) {
            self.cpus[cpu][i].ticks[col as usize] += 1;
        }
    }

    /// Ticks strictly before `t` find the CPU idle.
    fn idle_until(&mut self, cpu: usize, t: Nanos) {
        while self.next_tick[cpu] < t {
            let k = self.next_tick[cpu];
            if !self.nohz {
                self.tick(cpu, k, Column::Idle);
            }
            self.next_tick[cpu] += self.tick_ns;
        }
    }

    /// The CPU ran `ctx` over [s, e). `in_idle_loop`: the work interrupted the idle task
    /// (an IRQ from idle and the softirq on its exit), which NOHZ does not sample.
    /// Segments of one CPU must come in time order.
    pub fn record(&mut self, cpu: usize, s: Nanos, e: Nanos, ctx: Ctx, in_idle_loop: bool) {
        self.idle_until(cpu, s);
        while self.next_tick[cpu] < e {
            let k = self.next_tick[cpu];
            if !(self.nohz && in_idle_loop) {
                self.tick(cpu, k, column_of(ctx));
            }
            self.next_tick[cpu] += self.tick_ns;
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
        for cpu in 0..self.next_tick.len() {
            self.idle_until(cpu, self.end);
        }
    }

    pub fn tick_ns(&self) -> Nanos {
        self.tick_ns
    }

    pub fn nohz(&self) -> bool {
        self.nohz
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn periodic_ticks_sample_the_running_context() {
        // HZ=1000; 10 ms window; softirq over [0, 3 ms), idle after.
        let mut a = Accounting::new(1, 1_000_000, false, 0, 10_000_000, 1, 10_000_000);
        a.record(0, 0, 3_000_000, Ctx::Softirq, true);
        a.finish();
        let c = &a.cpus[0][0];
        assert_eq!(c.busy_ns[Ctx::Softirq as usize], 3_000_000);
        // ticks at 1, 2 ms in softirq; 3..9 ms idle.
        assert_eq!(c.ticks[Column::Softirq as usize], 2);
        assert_eq!(c.ticks[Column::Idle as usize], 7);
    }

    #[test]
    fn nohz_does_not_sample_work_from_idle() {
        let mut a = Accounting::new(1, 1_000_000, true, 0, 10_000_000, 1, 10_000_000);
        a.record(0, 0, 3_000_000, Ctx::Softirq, true);
        a.record(0, 5_000_000, 7_500_000, Ctx::Ksoftirqd, false);
        a.finish();
        let c = &a.cpus[0][0];
        assert_eq!(c.ticks[Column::Softirq as usize], 3); // 5, 6 and 7 ms only
        assert_eq!(c.ticks[Column::Idle as usize], 0);
    }

    #[test]
    fn busy_time_splits_over_intervals_and_clips() {
        let mut a = Accounting::new(1, 1_000_000, false, 1_000, 1_000, 2, 3_000);
        a.record(0, 500, 2_500, Ctx::HardIrq, false);
        assert_eq!(a.cpus[0][0].busy_ns[0], 1_000);
        assert_eq!(a.cpus[0][1].busy_ns[0], 500);
    }
}
