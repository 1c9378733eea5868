//! What a kernel timer costs a busy CPU (napilab-probe `timer_interrupt_cost` measures
//! it; docs/tune.md, "Deferral and the timer's cost"). Deferral (`gro-flush-timeout`
//! with `defer-hard-irqs`) arms an hrtimer after every poll that defers and is polled
//! again when it fires; on a virtual machine arming it and taking its interrupt may cost
//! the CPU far more than the poll itself.

use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TimerCost {
    pub cpu: u32,
    /// The probe timer's period, ns.
    pub period_ns: f64,
    /// Programming the CPU's timer device once (arming a timer that becomes the next
    /// to expire), ns.
    pub reprogram_ns: f64,
    /// The work a thread spinning on the CPU lost per expiry of a timer it re-arms:
    /// the interrupt, the re-arming and whatever the hypervisor adds, ns.
    pub ns_per_expiry: f64,
    /// How often the probe's timer fired, per second.
    pub expiries_per_s: f64,
}

impl TimerCost {
    /// The share of the CPU a timer of `timeout_ns` takes at most when it is re-armed
    /// as soon as it fires (as deferral does under load): one expiry per timeout plus
    /// the expiry's own cost.
    pub fn max_share(&self, timeout_ns: f64) -> f64 {
        let cost = self.ns_per_expiry.max(0.0);
        if timeout_ns + cost <= 0.0 {
            return 0.0;
        }
        cost / (timeout_ns + cost)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_timer_costing_its_own_period_takes_half_the_cpu() {
        let t = TimerCost {
            cpu: 0,
            period_ns: 20_000.0,
            reprogram_ns: 1_000.0,
            ns_per_expiry: 20_000.0,
            expiries_per_s: 25_000.0,
        };
        assert!((t.max_share(20_000.0) - 0.5).abs() < 1e-12);
        assert_eq!(t.max_share(0.0), 1.0);
        let free = TimerCost {
            ns_per_expiry: -50.0,
            ..t
        };
        assert_eq!(
            free.max_share(20_000.0),
            0.0,
            "noise below zero costs nothing"
        );
    }
}
