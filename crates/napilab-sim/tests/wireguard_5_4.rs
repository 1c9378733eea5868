//! The kernel-VPN study's baseline in the twin (docs/studies.md#wireguard-study, WG-1 to
//! WG-4, the paper's baseline evaluation; the paper's section and figure numbers are not
//! recorded in docs/studies.md). The model is the kernel's (docs/sim.md "The WireGuard
//! receive pipeline"): one shared decryption ring, `napi_schedule` on the decrypting
//! CPU, NAPI_STATE_SCHED/MISSED keeping an instance where it was scheduled, ksoftirqd
//! taking over a busy CPU's softirqs (4.9-6.4) and CFS's slices as Linux scales them
//! for 18 CPUs. The collapse builds up over about a second (instances gathering on a
//! core, their queues filling), so the runs measure after a 1 s warm-up.

use napilab_core::trace::ExecContext;
use napilab_sim::config::Worklist;
use napilab_sim::output::SimResult;
use napilab_sim::wireguard::{config, figures, Context, Figures};
use napilab_sim::{Profile, SimConfig};

fn profile() -> Profile {
    Profile::builtin("wg-xeon-gold-5220").expect("shipped profile parses")
}

const WARMUP_MS: f64 = 1000.0;

fn run_full(clients: u32, context: Context) -> (Figures, SimResult) {
    let cfg = config(clients, context, 200.0, WARMUP_MS);
    let r = napilab_sim::run(&cfg, &profile(), 1);
    (figures(&r), r)
}

fn run(clients: u32, context: Context) -> Figures {
    run_full(clients, context).0
}

/// The cores whose softirq share stands out (the hot cores).
fn hot_cores(f: &Figures) -> Vec<usize> {
    (0..f.softirq.len())
        .filter(|&c| f.softirq[c] > 0.8)
        .collect()
}

/// WG-1: receive throughput near 11.7 Gbit/s at 500 clients, collapsing at 1,000 to
/// about 4.5, which is what one hot core delivers.
#[test]
fn baseline_throughput_peaks_near_500_clients_and_collapses_at_1000() {
    let at_500 = run(500, Context::Softirq);
    let at_1000 = run(1000, Context::Softirq);
    let hot = hot_cores(&at_1000);
    eprintln!(
        "500 clients: {:.2} Gbit/s, 1,000 clients: {:.2} Gbit/s, hot cores {hot:?}",
        at_500.throughput_gbps, at_1000.throughput_gbps
    );
    // docs/studies.md#wg-1: 11.7 (twin 12.5: every packet offered at 500 clients is
    // received; the published 6% loss there is not reproduced).
    assert!(
        (at_500.throughput_gbps / 11.7 - 1.0).abs() < 0.10,
        "500 clients: {:.2} Gbit/s vs 11.7",
        at_500.throughput_gbps
    );
    assert!(
        at_1000.throughput_gbps < 0.75 * at_500.throughput_gbps,
        "no collapse: {:.2} Gbit/s at 1,000 clients",
        at_1000.throughput_gbps
    );
    // The study saw one hot core deliver about 4.5 Gbit/s; the twin gathers the
    // instances on one or two cores (which, varies with the seed), each delivering
    // about that.
    assert!((1..=2).contains(&hot.len()), "hot cores {hot:?}");
    let per_hot = at_1000.throughput_gbps / hot.len() as f64;
    assert!(
        (per_hot / 4.5 - 1.0).abs() < 0.20,
        "{per_hot:.2} Gbit/s per hot core vs 4.5"
    );
    // Below the knee nothing is lost.
    let at_100 = run(100, Context::Softirq);
    assert!(at_100.throughput_gbps > 0.99 * at_100.offered_gbps);
}

/// WG-2 and WG-3 at 1,000 clients: a hot core at about 94% softirq, the others near
/// 20%; bigger batches on the hot core (about 5 packets per poll) than elsewhere
/// (about 1).
#[test]
fn baseline_piles_the_polls_onto_a_hot_core_with_big_batches() {
    let f = run(1000, Context::Softirq);
    let hot = hot_cores(&f);
    let others: Vec<usize> = (0..f.softirq.len()).filter(|c| !hot.contains(c)).collect();
    let mean = |v: &[f64], cs: &[usize]| cs.iter().map(|&c| v[c]).sum::<f64>() / cs.len() as f64;
    let others_softirq = mean(&f.softirq, &others);
    eprintln!(
        "hot cores {hot:?} softirq {:?}, others {others_softirq:.2}; packets per poll {:.2} vs {:.2}",
        hot.iter().map(|&c| f.softirq[c]).collect::<Vec<_>>(),
        f.hot_packets_per_poll,
        f.others_packets_per_poll
    );
    // docs/studies.md#wg-2: 0.94 and ~0.20.
    assert!(!hot.is_empty());
    for &c in &hot {
        assert!(
            (f.softirq[c] - 0.94).abs() < 0.10,
            "hot core {c}: {:.2}",
            f.softirq[c]
        );
    }
    assert!(
        (others_softirq - 0.20).abs() < 0.08,
        "others {others_softirq:.2}"
    );
    // docs/studies.md#wg-3: ~5 vs ~1. The twin's hot core polls whole weights (its
    // open-loop clients keep every gathered peer's queue full; docs/sim.md) and the
    // other cores' NIC polls batch about 3: only the direction is asserted.
    assert!(
        f.hot_packets_per_poll > 3.0,
        "{:.2}",
        f.hot_packets_per_poll
    );
    assert!(
        f.others_packets_per_poll < 3.5,
        "{:.2}",
        f.others_packets_per_poll
    );
    assert!(f.hot_packets_per_poll > 2.5 * f.others_packets_per_poll);
}

/// Packets the peers' polls took in a NAPI thread or worker (not in softirq), per
/// packet delivered through the tunnel.
fn thread_polled_share(r: &SimResult) -> f64 {
    let m = &r.model;
    let in_thread: u64 = m
        .totals
        .cpus
        .iter()
        .flat_map(|c| &c.polls_by_context)
        .filter(|p| p.context == ExecContext::NapiThread)
        .map(|p| p.packets)
        .sum();
    let delivered = m.tunnel_delivered_pps.unwrap_or(0.0) * m.duration_s;
    in_thread as f64 / delivered.max(1.0)
}

/// WG-4, the inversion: with either remedy the peers' polls leave softirq (no poll
/// at the decryption worker's bh-enable any more), while the baseline polls every
/// peer in softirq.
#[test]
fn both_remedies_take_the_peers_polls_out_of_softirq() {
    let (_, base) = run_full(1000, Context::Softirq);
    assert!(thread_polled_share(&base) < 0.01);
    for context in [Context::Threaded, Context::Workqueue] {
        let (_, r) = run_full(1000, context);
        let share = thread_polled_share(&r);
        assert!(
            share > 0.95,
            "{}: {share:.2} of the delivered packets polled in a thread",
            context.name()
        );
    }
}

/// Max minus min of the CPUs' busy shares.
fn busy_spread(f: &Figures) -> f64 {
    f.busy.iter().copied().fold(0.0, f64::max) - f.busy.iter().copied().fold(1.0, f64::min)
}

/// CPUs that spend more than half their time polling the peers in a thread or worker.
fn polling_cpus(r: &SimResult) -> usize {
    r.model
        .totals
        .cpus
        .iter()
        .filter(|c| c.napi_thread > 0.5)
        .count()
}

/// WG-4, the load: threaded NAPI balances it and removes the collapse.
#[test]
fn threaded_napi_balances_the_load() {
    let f = run(1000, Context::Threaded);
    assert!(busy_spread(&f) < 0.05, "threaded: busy {:?}", f.busy);
    assert!(
        f.throughput_gbps > 3.0 * 4.5,
        "threaded: {:.2}",
        f.throughput_gbps
    );
}

/// WG-4, the load, for the workqueue remedy: the mechanism that decides it is where the
/// decryption item waits beside the NAPI work items (`tunnel.worklist`, docs/sim.md).
/// In the CPU pool's one worklist (the kernel's, the default) a CPU whose worker polls
/// many instances decrypts only when its worker reaches the decryption item, so it
/// stops taking in new instances: no hot core, every CPU busy within a few points of
/// the others, throughput far above the baseline's collapse; the polls still gather on
/// a few CPUs, which poll and do little else (the twin's prediction, written down in
/// docs/results/sim.md before any comparison). With the item in a kworker of its own
/// at once (`split`, the earlier model) a few CPUs saturate while the others idle a
/// quarter of the time, at about two thirds of threaded NAPI's throughput.
#[test]
fn the_pools_worklist_spreads_the_workqueue_remedys_load_and_split_does_not() {
    let (pool, pool_r) = run_full(1000, Context::Workqueue);
    let polling = polling_cpus(&pool_r);
    eprintln!(
        "pool: {:.2} Gbit/s, busy {:?}, {polling} polling cpus",
        pool.throughput_gbps, pool.busy
    );
    assert!(busy_spread(&pool) < 0.10, "pool: busy {:?}", pool.busy);
    assert!(
        pool.throughput_gbps > 3.0 * 4.5,
        "pool: {:.2} Gbit/s",
        pool.throughput_gbps
    );
    assert!((1..=9).contains(&polling), "pool: {polling} polling cpus");

    let mut cfg = config(1000, Context::Workqueue, 200.0, WARMUP_MS);
    if let Some(t) = cfg.tunnel.as_mut() {
        t.worklist = Worklist::Split;
    }
    let split = figures(&napilab_sim::run(&cfg, &profile(), 1));
    eprintln!(
        "split: {:.2} Gbit/s, busy {:?}",
        split.throughput_gbps, split.busy
    );
    assert!(busy_spread(&split) > 0.15, "split: busy {:?}", split.busy);
    assert!(
        split.throughput_gbps < 0.75 * pool.throughput_gbps,
        "split: {:.2} Gbit/s",
        split.throughput_gbps
    );
}

/// The shipped scenarios parse and name the four contexts.
#[test]
fn shipped_wireguard_scenarios_parse() {
    for (file, text) in [
        (
            "wg-softirq",
            include_str!("fixtures/legacy/wg-softirq.toml"),
        ),
        (
            "wg-threaded",
            include_str!("fixtures/legacy/wg-threaded.toml"),
        ),
        (
            "wg-threaded-pinned",
            include_str!("fixtures/legacy/wg-threaded-pinned.toml"),
        ),
        (
            "wg-workqueue",
            include_str!("fixtures/legacy/wg-workqueue.toml"),
        ),
    ] {
        let cfg = SimConfig::from_toml_str(text, file).expect("parses");
        let t = cfg.tunnel.expect("has a tunnel");
        assert_eq!(t.peers, 1000, "{file}");
    }
}

/// Bad tunnel input is refused with the field named.
#[test]
fn bad_tunnel_fields_are_named() {
    let base = include_str!("fixtures/legacy/wg-threaded.toml");
    let bad = base.replace("peers = 1000", "peers = 0");
    let e = SimConfig::from_toml_str(&bad, "x.toml").expect_err("0 peers");
    assert_eq!(e.field, "tunnel.peers");
    let bad = include_str!("fixtures/legacy/wg-softirq.toml")
        .replace("napi = \"softirq\"", "napi = \"softirq\"\npinned = true");
    let e = SimConfig::from_toml_str(&bad, "x.toml").expect_err("pinned softirq");
    assert_eq!(e.field, "tunnel.pinned");
}
