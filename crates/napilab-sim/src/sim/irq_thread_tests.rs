//! Unit tests of threaded IRQ handlers (`irq_thread`): the wake-up's need_resched ends
//! an inline softirq restart loop and hands the rest to ksoftirqd, as
//! `handle_softirqs` does (kernel/softirq.c), and the IRQ thread then takes the CPU.

use super::test_support::{builtin_profile, config_from};
use super::*;

fn ap_single_core() -> SimConfig {
    let text = include_str!("../../tests/fixtures/legacy/ap-e2w-single-core.toml");
    config_from(text, "ap-e2w-single-core.toml")
}

fn ap_profile() -> Profile {
    builtin_profile("ap-cortex-a72-bcmgenet")
}

/// CPU 0 at the end of an inline `__do_softirq` pass (nothing left in this pass) with
/// NET_RX raised again meanwhile (the Ethernet instance back on the poll list).
fn end_of_pass_with_work_pending(sim: &mut Sim) {
    let rx = sim
        .lines
        .iter()
        .find(|l| matches!(l.kind, LineKind::Rx { .. }));
    let n = rx.map_or(0, |l| l.napi);
    sim.napis[n].scheduled = true;
    sim.cpus[0].poll_list.push_back(n);
    sim.cpus[0].softirq_pending |= NET_RX;
    sim.cpus[0].idle_since = None;
    sim.cpus[0].softirq = Some(SoftirqRun::new(
        false,
        0,
        sim.tick_ns,
        sim.hz,
        0,
        sim.cfg.settings.max_softirq_restart,
    ));
}

fn wifi_irq_thread(sim: &Sim) -> usize {
    match sim.lines.iter().find_map(|l| l.thread) {
        Some(t) => t,
        None => panic!("the WiFi TX-completion line has an IRQ thread"),
    }
}

#[test]
fn without_need_resched_the_inline_softirq_restarts() {
    let (cfg, p) = (ap_single_core(), ap_profile());
    let mut sim = Sim::new(&cfg, &p, 1);
    end_of_pass_with_work_pending(&mut sim);
    assert!(sim.softirq_step(0), "the pass restarts and polls");
    assert!(sim.cpus[0].softirq.is_some());
    let k = sim.cpus[0].ksoftirqd;
    assert!(!sim.threads[k].runnable, "ksoftirqd stays asleep");
}

#[test]
fn need_resched_from_the_irq_thread_wake_up_hands_the_softirq_to_ksoftirqd() {
    let (cfg, p) = (ap_single_core(), ap_profile());
    let mut sim = Sim::new(&cfg, &p, 1);
    end_of_pass_with_work_pending(&mut sim);
    let t = wifi_irq_thread(&sim);
    // The WiFi vector's hard handler wakes its thread (SCHED_FIFO 50) on CPU 0.
    sim.irq_thread_due(t);
    assert!(sim.need_resched[0]);
    assert!(sim.threads[t].runnable);
    // End of the pass: work is pending, but need_resched ends the restart loop.
    assert!(!sim.softirq_step(0), "no restart");
    assert!(sim.cpus[0].softirq.is_none());
    let k = sim.cpus[0].ksoftirqd;
    assert!(sim.threads[k].runnable, "wakeup_softirqd");
    assert_ne!(
        sim.cpus[0].softirq_pending & NET_RX,
        0,
        "the work is still pending"
    );
    // The scheduler then runs the IRQ thread before ksoftirqd (FIFO over CFS), and the
    // switch serves need_resched.
    sim.dispatch(0);
    assert_eq!(sim.cpus[0].current, Some(t));
    assert!(!sim.need_resched[0]);
}

#[test]
fn a_wake_up_under_a_higher_priority_fifo_thread_sets_no_need_resched() {
    let (cfg, p) = (ap_single_core(), ap_profile());
    let mut sim = Sim::new(&cfg, &p, 1);
    let t = wifi_irq_thread(&sim);
    let k = sim.cpus[0].ksoftirqd;
    sim.threads[k].fifo_priority = Some(60);
    sim.cpus[0].current = Some(k);
    sim.irq_thread_due(t);
    assert!(!sim.need_resched[0]);
    assert!(sim.threads[t].runnable);
}
