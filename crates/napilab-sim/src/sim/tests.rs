//! Unit tests of the execution contexts (docs/sim.md): workqueue workers, NAPI
//! instances scheduled from threads, the softirq at a worker's bottom-half enable,
//! and the placement of unpinned NAPI kthreads. Each builds a small tunnel
//! configuration, queues work by hand and steps the event loop.

use super::test_support::{builtin_profile, config_from};
use super::workqueue::WorkItem;
use super::*;
use crate::config::Worklist;

fn tunnel_config(cpus: u32, peers: u32, napi: &str, pinned: bool) -> SimConfig {
    let queues = (0..cpus)
        .map(|c| format!("{{ cpu = {c} }}"))
        .collect::<Vec<_>>()
        .join(", ");
    let text = format!(
        r#"
        [host]
        cpus = {cpus}
        kernel = "6.1"
        [ingress]
        queues = [{queues}]
        [tunnel]
        peers = {peers}
        napi = "{napi}"
        pinned = {pinned}
        [traffic]
        rate_pps = 1.0
        classes = [{{ name = "t", share = 1.0, size_bytes = 1500 }}]
        [measurement]
        duration_ms = 10
        "#
    );
    config_from(&text, "test")
}

fn profile() -> Profile {
    builtin_profile("wg-xeon-gold-5220")
}

fn packet() -> Packet {
    Packet {
        arrival: 0,
        class: 0,
        size: 1500,
        flow: 0,
    }
}

/// Handle events until CPU `c` starts a batch ending in something other than a
/// context switch or nothing; return that batch's `Finish`.
fn next_work(sim: &mut Sim, c: usize) -> Finish {
    for _ in 0..1000 {
        if sim.cpus[c].busy && !matches!(sim.finish[c], Finish::Nothing) {
            let f = sim.finish[c];
            // Let that batch end before the caller looks again.
            return f;
        }
        let Some((_, ev)) = sim.q.pop() else {
            panic!("no more events, cpu {c} idle");
        };
        sim.handle(ev);
    }
    panic!("no work on cpu {c} within 1000 events");
}

/// End CPU `c`'s current batch (its BatchEnd is the earliest event of that CPU).
fn end_batch(sim: &mut Sim, c: usize) {
    for _ in 0..1000 {
        let Some((_, ev)) = sim.q.pop() else {
            panic!("no BatchEnd for cpu {c}");
        };
        let done = matches!(ev, Ev::BatchEnd(x) if x == c);
        sim.handle(ev);
        if done {
            return;
        }
    }
    panic!("cpu {c}'s batch did not end within 1000 events");
}

#[test]
fn a_softirq_at_the_workers_bh_enable_preempts_its_next_item() {
    let cfg = tunnel_config(1, 1, "softirq", false);
    let p = profile();
    let mut sim = Sim::new(&cfg, &p, 1);
    // Two packets of the one peer to decrypt on CPU 0.
    sim.tunnel_receive(packet(), 0);
    sim.tunnel_receive(packet(), 0);
    assert!(matches!(
        next_work(&mut sim, 0),
        Finish::Decrypted { seq: 0, .. }
    ));
    end_batch(&mut sim, 0);
    // The decryption scheduled the peer's instance on this CPU; the worker's
    // spin_unlock_bh runs NET_RX before the second decryption.
    let napi = sim.tunnel.as_ref().map(|t| t.peers[0].napi);
    match next_work(&mut sim, 0) {
        Finish::SoftirqPoll { napi: n, work, .. } => {
            assert_eq!(Some(n), napi);
            assert_eq!(work, 1, "the first packet is ready");
        }
        other => panic!("expected the peer's softirq poll, got {other:?}"),
    }
    assert_eq!(
        sim.cpus[0].softirq.as_ref().map(|r| r.bh_enable),
        Some(true),
        "the poll runs in the softirq at bh-enable"
    );
    end_batch(&mut sim, 0);
    assert!(matches!(
        next_work(&mut sim, 0),
        Finish::Decrypted { seq: 1, .. }
    ));
}

#[test]
fn a_napi_work_item_runs_in_a_second_worker_beside_the_decryption() {
    let cfg = tunnel_config(1, 1, "workqueue", false);
    let p = profile();
    let mut sim = Sim::new(&cfg, &p, 1);
    sim.tunnel_receive(packet(), 0);
    sim.tunnel_receive(packet(), 0);
    assert!(matches!(
        next_work(&mut sim, 0),
        Finish::Decrypted { seq: 0, .. }
    ));
    end_batch(&mut sim, 0);
    // The decryption item is CPU-intensive: the peer's poll is queued on the CPU's
    // pool worker, not behind the decryption in the decryption's worker.
    let napi = sim.tunnel.as_ref().map_or(usize::MAX, |t| t.peers[0].napi);
    let crypt = sim.crypt_worker[0];
    assert_ne!(crypt, 0);
    assert_eq!(
        sim.workers[crypt].items.iter().copied().collect::<Vec<_>>(),
        vec![WorkItem::Decrypt]
    );
    assert_eq!(
        sim.workers[0].items.iter().copied().collect::<Vec<_>>(),
        vec![WorkItem::NapiPoll(napi)]
    );
    assert!(sim.cpus[0].poll_list.is_empty(), "no softirq poll");
    // Within its slice the running decryption worker keeps the CPU: the second packet
    // is decrypted first, then the poll takes both.
    assert!(matches!(
        next_work(&mut sim, 0),
        Finish::Decrypted { seq: 1, .. }
    ));
    end_batch(&mut sim, 0);
    match next_work(&mut sim, 0) {
        Finish::WorkPoll { napi: n, work, .. } => {
            assert_eq!(n, napi);
            assert_eq!(work, 2);
        }
        other => panic!("expected the worker's poll, got {other:?}"),
    }
}

#[test]
fn the_scheduler_shares_a_cpu_between_decryption_and_napi_work_items() {
    // 600 decryptions (about 2.5 ms): the pool worker's poll runs before they end, the
    // scheduler giving it the CPU once the decryption worker leads by the wake-up
    // granularity (a single worker would poll only after the last decryption).
    let cfg = tunnel_config(1, 1, "workqueue", false);
    let p = profile();
    let mut sim = Sim::new(&cfg, &p, 1);
    for _ in 0..600 {
        sim.tunnel_receive(packet(), 0);
    }
    let mut decrypted = 0;
    loop {
        match next_work(&mut sim, 0) {
            Finish::Decrypted { .. } => decrypted += 1,
            Finish::WorkPoll { work, .. } => {
                assert!(work > 0);
                break;
            }
            _ => {}
        }
        end_batch(&mut sim, 0);
    }
    assert!(
        (1..600).contains(&decrypted),
        "{decrypted} decryptions before the first poll"
    );
}

#[test]
fn napi_schedule_from_a_thread_lands_on_its_cpu_and_stays_while_scheduled() {
    let cfg = tunnel_config(2, 1, "softirq", false);
    let p = profile();
    let mut sim = Sim::new(&cfg, &p, 1);
    let n = sim.tunnel.as_ref().map_or(usize::MAX, |t| t.peers[0].napi);
    sim.napi_schedule_on(n, 1);
    assert_eq!(sim.napis[n].cpu, 1);
    assert!(sim.cpus[1].poll_list.contains(&n));
    assert_ne!(sim.cpus[1].softirq_pending & NET_RX, 0);
    // Scheduled again from CPU 0 while still scheduled: MISSED, no move.
    sim.napi_schedule_on(n, 0);
    assert!(sim.napis[n].missed);
    assert_eq!(sim.napis[n].cpu, 1);
    assert!(sim.cpus[0].poll_list.is_empty());
    // The completion honours MISSED on the same CPU.
    sim.cpus[1].poll_list.clear();
    sim.napi_complete(0, n, 0, 0);
    assert!(sim.cpus[1].poll_list.contains(&n));
}

#[test]
fn an_unpinned_napi_kthread_wakes_on_an_idle_cpu_and_a_pinned_one_stays() {
    for pinned in [false, true] {
        let cfg = tunnel_config(3, 3, "threaded", pinned);
        let p = profile();
        let mut sim = Sim::new(&cfg, &p, 1);
        let Some(tun) = sim.tunnel.as_ref() else {
            panic!("tunnel built");
        };
        // Peer 0's kthread starts on CPU 0; CPUs 0 and 1 are busy.
        let n = tun.peers[0].napi;
        let t = sim.napis[n].thread.unwrap_or(usize::MAX);
        assert_eq!(sim.threads[t].cpu, 0);
        sim.cpus[0].busy = true;
        sim.cpus[1].busy = true;
        sim.napi_schedule_on(n, 1);
        assert!(sim.threads[t].runnable);
        let expect = if pinned { 0 } else { 2 };
        assert_eq!(sim.threads[t].cpu, expect, "pinned: {pinned}");
        assert!(sim.cpus[expect].threads.contains(&t));
        let other = if pinned { 2 } else { 0 };
        assert!(!sim.cpus[other].threads.contains(&t));
    }
}

#[test]
fn the_decryption_item_waits_behind_napi_items_in_the_pools_worklist() {
    for worklist in [Worklist::Pool, Worklist::Split] {
        let mut cfg = tunnel_config(1, 2, "workqueue", false);
        if let Some(t) = cfg.tunnel.as_mut() {
            t.worklist = worklist;
        }
        let p = profile();
        let mut sim = Sim::new(&cfg, &p, 1);
        let peer =
            |sim: &Sim, i: usize| sim.tunnel.as_ref().map_or(usize::MAX, |t| t.peers[i].napi);
        let (a, b) = (peer(&sim, 0), peer(&sim, 1));
        // Both peers' instances are queued on CPU 0's pool, then a packet arrives and
        // its kick queues the decryption item while the pool's worker is runnable.
        sim.napi_schedule_on(a, 0);
        sim.napi_schedule_on(b, 0);
        sim.tunnel_receive(packet(), 0);
        let crypt = sim.crypt_worker[0];
        let first = next_work(&mut sim, 0);
        assert!(matches!(first, Finish::WorkPoll { napi, .. } if napi == a));
        let poller = sim.cpus[0].current;
        if worklist == Worklist::Split {
            // Straight to a kworker of its own (the earlier model).
            assert_eq!(sim.workers[crypt].items, [WorkItem::Decrypt]);
            assert_eq!(sim.workers[0].items, [WorkItem::NapiPoll(b)]);
            continue;
        }
        // insert_work appended it to the one worklist, behind the NAPI items.
        assert!(sim.workers[crypt].items.is_empty());
        assert_eq!(
            sim.workers[0].items,
            [WorkItem::NapiPoll(b), WorkItem::Decrypt]
        );
        end_batch(&mut sim, 0);
        assert!(matches!(next_work(&mut sim, 0), Finish::WorkPoll { napi, .. } if napi == b));
        end_batch(&mut sim, 0);
        // The worker that reaches the item runs it (out of concurrency management).
        assert!(matches!(next_work(&mut sim, 0), Finish::Decrypted { .. }));
        assert_eq!(sim.cpus[0].current, poller);
        assert_eq!(poller, Some(sim.workers[crypt].thread));
    }
}
