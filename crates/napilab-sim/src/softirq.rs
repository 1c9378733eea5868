//! Softirq state: one `__do_softirq` run with its restart limits, and one
//! `net_rx_action` run with its packet budget and time limit (docs/kernel.md#net-rx-action-limits
//! and docs/kernel.md#softirq-restart).

use std::collections::VecDeque;

use crate::event::Nanos;

pub const NET_TX: u8 = 1 << 2;
pub const NET_RX: u8 = 1 << 3;

/// `MAX_SOFTIRQ_RESTART`.
pub const MAX_SOFTIRQ_RESTART: u32 = 10;

/// Jiffies at time `t` (ticks fall on multiples of `tick_ns`).
pub fn jiffies(t: Nanos, tick_ns: Nanos) -> u64 {
    t / tick_ns
}

/// `msecs_to_jiffies`/`usecs_to_jiffies`: round up, as the kernel does.
pub fn usecs_to_jiffies(usecs: u64, hz: u32) -> u64 {
    (usecs * hz as u64).div_ceil(1_000_000)
}

/// `MAX_SOFTIRQ_TIME` = msecs_to_jiffies(2): 2 jiffies at HZ=1000, 1 at HZ=250.
pub fn max_softirq_jiffies(hz: u32) -> u64 {
    usecs_to_jiffies(2_000, hz)
}

/// One `__do_softirq` invocation, inline on IRQ exit or inside ksoftirqd.
#[derive(Debug)]
pub struct SoftirqRun {
    pub ksoftirqd: bool,
    /// Run inline by `local_bh_enable` rather than on IRQ exit (accounting only).
    pub bh_enable: bool,
    /// `end = jiffies + MAX_SOFTIRQ_TIME`: restart only while `jiffies < end`.
    pub end_jiffy: u64,
    pub restarts_left: u32,
    /// Handlers still to run in this pass, taken from the pending mask (bit order:
    /// NET_TX before NET_RX, as in the kernel's softirq vector).
    pub todo: u8,
    pub net_rx: Option<NetRxRun>,
}

impl SoftirqRun {
    /// `max_restart`: `MAX_SOFTIRQ_RESTART` (passes before the hand-over to ksoftirqd).
    pub fn new(
        ksoftirqd: bool,
        now: Nanos,
        tick_ns: Nanos,
        hz: u32,
        pending: u8,
        max_restart: u32,
    ) -> Self {
        SoftirqRun {
            ksoftirqd,
            bh_enable: false,
            end_jiffy: jiffies(now, tick_ns) + max_softirq_jiffies(hz),
            restarts_left: max_restart,
            todo: pending,
            net_rx: None,
        }
    }

    /// The end-of-pass check of `__do_softirq`: restart if time and count allow.
    pub fn may_restart(&mut self, now: Nanos, tick_ns: Nanos) -> bool {
        if jiffies(now, tick_ns) < self.end_jiffy && self.restarts_left > 1 {
            self.restarts_left -= 1;
            true
        } else {
            false
        }
    }
}

/// One `net_rx_action` run.
#[derive(Debug)]
pub struct NetRxRun {
    /// The poll list spliced off `sd->poll_list` at the start.
    pub list: VecDeque<usize>,
    /// Instances that used their whole weight, polled again next run.
    pub repoll: VecDeque<usize>,
    pub budget: i64,
    /// `time_limit = jiffies + usecs_to_jiffies(netdev_budget_usecs)`.
    pub time_limit: u64,
    /// The fixed cost of the run has been charged (with the first poll).
    pub entry_paid: bool,
    /// Budget or time limit hit: stop after the current poll (`time_squeeze`).
    pub squeezed: bool,
}

impl NetRxRun {
    pub fn new(
        list: VecDeque<usize>,
        budget: u32,
        budget_usecs: u64,
        now: Nanos,
        tick_ns: Nanos,
        hz: u32,
    ) -> Self {
        NetRxRun {
            list,
            repoll: VecDeque::new(),
            budget: budget as i64,
            time_limit: jiffies(now, tick_ns) + usecs_to_jiffies(budget_usecs, hz),
            entry_paid: false,
            squeezed: false,
        }
    }

    /// After each poll (never before: one run can exceed `netdev_budget` by up to
    /// weight - 1 packets).
    pub fn account_poll(&mut self, work: u32, now: Nanos, tick_ns: Nanos) -> bool {
        self.budget -= work as i64;
        if self.budget <= 0 || jiffies(now, tick_ns) >= self.time_limit {
            self.squeezed = true;
        }
        self.squeezed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jiffy_limits() {
        assert_eq!(max_softirq_jiffies(1000), 2);
        assert_eq!(max_softirq_jiffies(250), 1);
        assert_eq!(max_softirq_jiffies(100), 1);
        // netdev_budget_usecs default: two jiffies.
        assert_eq!(usecs_to_jiffies(8_000, 250), 2);
    }

    #[test]
    fn budget_is_checked_after_the_poll() {
        let mut r = NetRxRun::new(VecDeque::new(), 300, 8000, 0, 4_000_000, 250);
        for _ in 0..4 {
            assert!(!r.account_poll(64, 0, 4_000_000));
        }
        // 256 done; the fifth poll may take 64 more: 320 > 300.
        assert!(r.account_poll(64, 0, 4_000_000));
        assert_eq!(r.budget, -20);
    }

    #[test]
    fn restart_limit() {
        let mut s = SoftirqRun::new(false, 0, 1_000_000, 1000, NET_RX, MAX_SOFTIRQ_RESTART);
        let n = (0..20).filter(|_| s.may_restart(0, 1_000_000)).count();
        assert_eq!(n, 9); // ten passes in all
        let mut s = SoftirqRun::new(false, 0, 1_000_000, 1000, NET_RX, MAX_SOFTIRQ_RESTART);
        assert!(!s.may_restart(2_000_000, 1_000_000));
    }
}
