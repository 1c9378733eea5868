//! The deferral timer's cost in `napilab tune plan --predict` (docs/tune.md, "Deferral
//! and the timer's cost"). A NAPI instance that defers (`defer-hard-irqs` with
//! `gro-flush-timeout`) is polled from an hrtimer: `napi_complete_done` arms it after
//! each poll that defers, and it fires `gro-flush-timeout` later on the polling CPU,
//! again and again while packets keep coming. The twin charges each expiry its profile's
//! hard-IRQ cost, fitted on a machine where that is a few hundred nanoseconds. On a
//! virtual machine arming the timer and taking its interrupt are exits to the
//! hypervisor: on the KVM guest of docs/hosts.md a re-armed timer cost a busy CPU about
//! 25 us per expiry, so a 20 us timeout takes half of the CPU whatever the load, and the
//! sender beside the poll slowed threefold, which the twin (no sender, the expiry's cost
//! as on bare metal) cannot predict. So the prediction uses the host's own measured
//! timer cost (napilab-probe `timer_interrupt_cost`) and refuses where it matters.

use napilab_core::TimerCost;

use crate::predict_inputs::NapiSettings;

/// The most of a CPU the deferral timer may take at its fastest (one expiry per timeout
/// plus its own cost) for the twin to predict the profile: above it the timer, which the
/// twin charges as on bare metal, would set what the CPU carries.
pub const TIMER_SHARE_LIMIT: f64 = 0.10;

/// Whether the twin can predict `target`'s deferral on a host whose timers cost what
/// `timers` measured: `Err` with the refusal's reason where the timer would take more
/// than [`TIMER_SHARE_LIMIT`] of a polling CPU; `Ok` with what the prediction assumed
/// of the timer (`None` where no instance defers).
pub fn assess(target: &[NapiSettings], timers: &[TimerCost]) -> Result<Option<String>, String> {
    let deferring: Vec<&NapiSettings> = target
        .iter()
        .filter(|s| s.defer_hard_irqs > 0 && s.gro_flush_timeout_ns > 0)
        .collect();
    if deferring.is_empty() {
        return Ok(None);
    }
    let mut said = Vec::new();
    for s in &deferring {
        let timeout = s.gro_flush_timeout_ns as f64;
        let Some(t) = timers.iter().find(|t| t.cpu == s.cpu) else {
            said.push(format!(
                "{}-{}'s deferral timer ({:.0} us) on CPU {}: its cost was not measured on this host (napilab measures it on a live host only, `tune plan --predict`); the twin charges each expiry its profile's hard-IRQ cost, as on bare metal. On a virtual machine an expiry can cost tens of microseconds (docs/tune.md), and the twin then predicts more than the host carries",
                s.device, s.queue, timeout / 1e3, s.cpu
            ));
            continue;
        };
        let share = t.max_share(timeout);
        let measured = format!(
            "on this host a timer re-armed as it fires costs CPU {} {:.1} us per expiry and programming the timer device {:.1} us (napilab's timer probe, a {:.0} us timer fired {:.0} times a second, beside whatever else ran there)",
            t.cpu,
            t.ns_per_expiry / 1e3,
            t.reprogram_ns / 1e3,
            t.period_ns / 1e3,
            t.expiries_per_s
        );
        if share > TIMER_SHARE_LIMIT {
            return Err(format!(
                "{measured}; {}-{}'s {:.0} us deferral timer would fire up to {:.0} times a second and take up to {:.0}% of CPU {} (the twin can predict up to {:.0}%): the twin charges an expiry its hard-IRQ cost as on bare metal and has no sender to slow on that CPU, so it would predict far more than this host carries. Measure the profile instead (napilab tune apply, then napilab tune verify), or predict it on a host with cheap timers",
                s.device,
                s.queue,
                timeout / 1e3,
                1e9 / (timeout + t.ns_per_expiry.max(0.0)),
                share * 100.0,
                s.cpu,
                TIMER_SHARE_LIMIT * 100.0
            ));
        }
        said.push(format!(
            "{measured}; {}-{}'s {:.0} us deferral timer takes at most {:.1}% of it, which the twin leaves out (it charges an expiry its profile's hard-IRQ cost)",
            s.device,
            s.queue,
            timeout / 1e3,
            share * 100.0
        ));
    }
    Ok(Some(said.join("; ")))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// vb's one queue in softirq on CPU 0, deferring `defer` polls with `timeout_ns`.
    fn vb(defer: u32, timeout_ns: u64) -> Vec<NapiSettings> {
        let mut s = crate::predict::tests::softirq_vb();
        s[0].defer_hard_irqs = defer;
        s[0].gro_flush_timeout_ns = timeout_ns;
        s
    }

    fn timer(cpu: u32, ns_per_expiry: f64) -> TimerCost {
        TimerCost {
            cpu,
            period_ns: 20_000.0,
            reprogram_ns: 1_300.0,
            ns_per_expiry,
            expiries_per_s: 1e9 / (20_000.0 + ns_per_expiry),
        }
    }

    #[test]
    fn no_deferral_needs_no_timer() {
        assert_eq!(assess(&vb(0, 20_000), &[]), Ok(None));
        assert_eq!(assess(&vb(2, 0), &[timer(0, 25_000.0)]), Ok(None));
    }

    #[test]
    fn a_timer_that_takes_half_the_cpu_is_refused_with_its_measured_cost() {
        // As measured on the KVM guest of docs/hosts.md: about 25 us per expiry.
        let why = assess(&vb(2, 20_000), &[timer(0, 25_000.0)]).expect_err("refused");
        assert!(why.contains("25.0 us per expiry"), "{why}");
        assert!(why.contains("up to 56% of CPU 0"), "{why}");
        assert!(why.contains("napilab tune verify"), "{why}");
    }

    #[test]
    fn a_cheap_timer_is_assumed_and_an_unmeasured_one_is_said() {
        let said = assess(&vb(2, 20_000), &[timer(0, 800.0)])
            .expect("predicted")
            .expect("said");
        assert!(said.contains("at most 3.8% of it"), "{said}");
        // Measured on another CPU only: this one's cost is unknown, and said so.
        let said = assess(&vb(2, 20_000), &[timer(1, 800.0)])
            .expect("predicted")
            .expect("said");
        assert!(said.contains("was not measured"), "{said}");
    }
}
