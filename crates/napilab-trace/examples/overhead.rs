//! A/B overhead benchmark of the always-on tier against the DUT's MAXIMUM forwarding
//! rate (docs/architecture.md principle 8; goal: at most 2%).
//!
//! Builds a three-namespace veth router `napilab-trace-<pid>-bench-{a,r,b}` and keeps
//! the router (the DUT) saturated:
//!  - generator: several threads in namespace a, pinned to CPU 0, each sending 64-byte
//!    UDP datagrams with `sendmmsg` (64 per call) on a connected socket. They offer more
//!    than the DUT forwards; the excess is dropped when the DUT's veth ring is full
//!    (a0's tx_dropped), which is what shows that the DUT is the bottleneck.
//!  - DUT: the router's ingress veth uses threaded NAPI and its kthread is pinned to
//!    CPU 1, so all forwarding (GRO, routing, neighbour output, the egress veth) runs on
//!    CPU 1 in batches of up to 64 packets per poll.
//!  - sink: the router's neighbour entry for the sink carries a MAC address the sink's
//!    veth does not have, so the sink's IP layer drops every frame as PACKET_OTHERHOST
//!    at its first check (no socket, no ICMP, no iptables or XDP). The forwarded count
//!    is the sink veth's RX packet counter.
//!
//! Each round measures eight arms, one window each, in the order of one row of a
//! Williams square (every arm in every position, after every other arm, equally
//! often): A nothing attached; a nothing attached again (the benchmark's own bias: its
//! "cost" should be zero); F empty `tp_btf` programs on exactly the tier's hooks (the
//! floor: what a program run there costs before it does anything); K the same with one
//! clock read in `softirq_entry` and `softirq_exit` (the floor of timing every softirq
//! run exactly, as the tier does); R the tier without `softirq_raise`; B the always-on
//! tier as shipped (`softirq_raise` attached in 100 ms windows of every second); E the
//! tier with `softirq_raise` attached all the time (as before the tracing windows); C 1 kHz stage
//! sampling alone; W an empty program on a tracepoint that does not fire (`mark_victim`,
//! an OOM kill) attached and detached in the tier's raise windows: what the windows cost
//! by attaching and detaching alone (each one patches the kernel's text, which on a VM
//! means IPIs and exits on every CPU). A round counts only if the DUT's ring refused at
//! least 2% of the offered frames in every window: the DUT, not the generator, set the
//! rate (at its maximum). Its busy share is printed but not judged: schedstat's run
//! time leaves out steal, which on a VM moves the busy share of a saturated DUT by
//! several points (2026-11-28: 90-94% busy, saturated, with nothing else running).
//! Each window reports the DUT's CPU per forwarded packet; a is compared with A, every
//! other arm with the round's two untraced windows merged (median and mean of the pair
//! ratios, pooled ns per packet, and the 20% trimmed mean of the pairs' extra cost with
//! its 95% interval, Yuen's). B's windows start with the raise window open (the
//! thread opens one at once), so B sees the hook for about a fifth of its time instead
//! of a tenth: its figure is an upper bound. The pooled figures are put side by side:
//! the tier, its floor, the tier above its floor, the share of `softirq_raise`, each
//! with a 95% interval over the rounds' pairs.
//! ROUNDS is the least number of rounds: more are run, a full Williams square (twice
//! the number of arms) at a time and up to four times ROUNDS, until the control's
//! interval (a against A, over the 20% trimmed mean of its pairs) is within +-0.3
//! points, so that a 1% cost can be told apart; the verdict is B's trimmed mean, met
//! when it is at most 1% and the control is within +-0.3.
//! Then four rounds of windows with the kernel's BPF run-time statistics on (kept out
//! of B because the statistics add two clock reads per program run): the tier, the
//! empty programs on its hooks and, on the softirq hooks, the empty programs with one
//! clock read, alternating; per hook the runs per forwarded packet, the ns per run of
//! each and the difference between tier and empty, what the tier's code costs per
//! packet above its floor. Unlike the A/B arms this needs no resolution across
//! windows: all programs are timed in the same way.
//! ROUNDS 0 runs the statistics windows only (about a minute): the per-hook costs
//! without the A/B arms.
//! Needs root and two online CPUs.
//!
//! NICE (default 0: unchanged) sets the nice value of the generator threads and of the
//! DUT's kthread, e.g. -20 so that other load on the machine takes less CPU from them
//! while the benchmark runs (the figures in docs/trace.md say which was used).
//!
//!     cargo run --release -p napilab-trace --example overhead -- [ROUNDS=48] [SECONDS=0.25] [SENDERS=1] [NICE=0]

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use napilab_trace::always_on::{enable_run_time_stats, possible_cpus};
use napilab_trace::floor::FloorProbe;
use napilab_trace::{AlwaysOn, RaiseTiming, TraceOptions};

mod saturated_router;
use saturated_router::{pin, Flood, Router, RouterNames, DUT_CPU, GEN_CPU, TRIM};

/// This benchmark's router (the per-packet one uses others, so both can be built).
const NAMES: RouterNames = RouterNames {
    tag: "napilab-trace",
    device: "ntr",
    octet: 82,
    mac_byte: 0x69,
};

/// One measurement window.
struct Window {
    offered: f64,
    forwarded: f64,
    /// DUT CPU ns per forwarded packet.
    cost: f64,
    /// Share of the wall time the DUT ran (1.0: it had CPU 1 to itself).
    busy: f64,
    packets: u64,
    cpu_ns: u64,
    seconds: f64,
}

impl Window {
    /// The share of the offered frames the DUT's ring refused (offered = the
    /// generator veth's TX packets and TX drops, forwarded = the sink's RX packets).
    fn refused_share(&self) -> f64 {
        if self.offered <= 0.0 {
            return 0.0;
        }
        (1.0 - self.forwarded / self.offered).max(0.0)
    }

    /// Two windows as one (their packets, CPU and time added).
    fn merged(&self, other: &Window) -> Window {
        let packets = self.packets + other.packets;
        let cpu_ns = self.cpu_ns + other.cpu_ns;
        let seconds = self.seconds + other.seconds;
        Window {
            offered: (self.offered * self.seconds + other.offered * other.seconds)
                / seconds.max(1e-9),
            forwarded: packets as f64 / seconds.max(1e-9),
            cost: cpu_ns as f64 / packets.max(1) as f64,
            busy: cpu_ns as f64 / (seconds * 1e9).max(1.0),
            packets,
            cpu_ns,
            seconds,
        }
    }
}

fn window(router: &Router, seconds: f64) -> Result<Window, String> {
    let (o0, f0) = router.counts()?;
    let c0 = router.dut_cpu_ns()?;
    let start = Instant::now();
    std::thread::sleep(Duration::from_secs_f64(seconds));
    let (o1, f1) = router.counts()?;
    let c1 = router.dut_cpu_ns()?;
    let elapsed = start.elapsed().as_secs_f64();
    let packets = f1.saturating_sub(f0);
    let cpu_ns = c1.saturating_sub(c0);
    Ok(Window {
        offered: o1.saturating_sub(o0) as f64 / elapsed,
        forwarded: packets as f64 / elapsed,
        cost: cpu_ns as f64 / packets.max(1) as f64,
        busy: cpu_ns as f64 / (elapsed * 1e9),
        packets,
        cpu_ns,
        seconds: elapsed,
    })
}

fn start_tracer() -> Result<AlwaysOn, String> {
    AlwaysOn::start(&TraceOptions::default()).map_err(|e| format!("cannot load the BPF tier: {e}"))
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

fn mean_se(v: &[f64]) -> (f64, f64) {
    let n = v.len().max(1) as f64;
    let mean = v.iter().sum::<f64>() / n;
    let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0).max(1.0);
    (mean, (var / n).sqrt())
}

/// Runs and run time per hook over one window with BPF run-time statistics on.
#[derive(Default)]
struct HookCosts {
    /// hook (tracepoint name) -> (runs, ns)
    by_hook: BTreeMap<String, (u64, u64)>,
    packets: u64,
    seconds: f64,
    dut_cpu_ns: u64,
}

impl HookCosts {
    fn add(&mut self, other: &HookCosts) {
        for (hook, (c, t)) in &other.by_hook {
            let e = self.by_hook.entry(hook.clone()).or_default();
            e.0 += c;
            e.1 += t;
        }
        self.packets += other.packets;
        self.seconds += other.seconds;
        self.dut_cpu_ns += other.dut_cpu_ns;
    }

    fn runs_per_packet(&self, hook: &str) -> f64 {
        self.by_hook.get(hook).map_or(0.0, |(c, _)| *c as f64) / self.packets.max(1) as f64
    }

    fn ns_per_run(&self, hook: &str) -> Option<f64> {
        let (c, t) = self.by_hook.get(hook)?;
        (*c > 0).then(|| *t as f64 / *c as f64)
    }

    fn dut_ns_per_packet(&self) -> f64 {
        self.dut_cpu_ns as f64 / self.packets.max(1) as f64
    }
}

/// The tracepoint a program of the tier (`btf_X`, `raw_X`) or of the floor (`floor_X`,
/// `floor_clock_X`) runs on.
fn hook_of(program: &str) -> &str {
    ["floor_clock_", "floor_", "btf_", "raw_"]
        .iter()
        .find_map(|p| program.strip_prefix(p))
        .unwrap_or(program)
}

/// One window with the kernel's BPF run-time statistics on, counting the programs
/// `costs` lists.
fn costs_window(
    router: &Router,
    seconds: f64,
    costs: &dyn Fn() -> Vec<(String, u64, u64)>,
) -> Result<HookCosts, String> {
    let Some(stats) = enable_run_time_stats() else {
        return Err("the kernel refused BPF_ENABLE_STATS".into());
    };
    let before = costs();
    let w = window(router, seconds)?;
    let after = costs();
    drop(stats);
    let old: BTreeMap<String, (u64, u64)> =
        before.into_iter().map(|(n, c, t)| (n, (c, t))).collect();
    let mut out = HookCosts {
        packets: w.packets,
        seconds: w.seconds,
        dut_cpu_ns: w.cpu_ns,
        ..HookCosts::default()
    };
    for (name, c, t) in after {
        let (c0, t0) = old.get(&name).copied().unwrap_or_default();
        let e = out.by_hook.entry(hook_of(&name).to_string()).or_default();
        e.0 += c.saturating_sub(c0);
        e.1 += t.saturating_sub(t0);
    }
    Ok(out)
}

/// Windows with BPF run-time statistics, the tier, its floor (empty programs on the
/// same hooks) and, on the softirq hooks, the floor with one clock read alternating
/// `pairs` times: per hook the runs per packet and ns per run of each, and the
/// difference between tier and floor, the tier's bodies (the clocked column says how
/// much of that is the clock read the tier cannot drop without losing exact softirq
/// time). The statistics time each run with
/// two clock reads and leave out the dispatch around it, so the floor's ns per run is
/// that timing's own cost (and nothing of the dispatch) and the difference is what the
/// tier's code adds, independently of how fast the VM is in either window. Then the
/// DUT's packets per poll from the tier's own snapshot.
fn stats_windows(
    router: &Router,
    tracer: &mut AlwaysOn,
    hooks: &[&str],
    seconds: f64,
    pairs: usize,
) -> Result<(), String> {
    let cpus: Vec<u32> = (0..possible_cpus() as u32).collect();
    // The floor's clocked variant (one clock read) where the tier times the run.
    let clocked: Vec<&str> = hooks
        .iter()
        .copied()
        .filter(|h| matches!(*h, "softirq_entry" | "softirq_exit"))
        .collect();
    let (mut tier, mut floor, mut clock) = (
        HookCosts::default(),
        HookCosts::default(),
        HookCosts::default(),
    );
    let mut snapshots = None;
    for _ in 0..pairs {
        tracer.reattach();
        let before = tracer.snapshot(&cpus);
        tier.add(&costs_window(router, seconds, &|| tracer.program_costs())?);
        let after = tracer.snapshot(&cpus);
        snapshots.get_or_insert((before, after));
        tracer.detach();
        let probe = FloorProbe::start_on(hooks, &[]).map_err(|e| e.to_string())?;
        floor.add(&costs_window(router, seconds, &|| probe.program_costs())?);
        drop(probe);
        if !clocked.is_empty() {
            let probe = FloorProbe::start_on(&clocked, &clocked).map_err(|e| e.to_string())?;
            clock.add(&costs_window(router, seconds, &|| probe.program_costs())?);
        }
    }
    println!(
        "stats windows ({pairs} rounds of {seconds} s, BPF run-time statistics on, the tier, the empty programs and the one-clock programs alternating): DUT {:.0} ns/pkt with the tier, {:.0} with the floor",
        tier.dut_ns_per_packet(),
        floor.dut_ns_per_packet()
    );
    println!(
        "  {:<26} {:>9} {:>8} {:>9} {:>9} {:>8} {:>9}",
        "hook", "runs/pkt", "tier ns", "floor ns", "+clock ns", "body ns", "body/pkt"
    );
    let (mut all_ns, mut body_ns, mut runs) = (0.0, 0.0, 0.0);
    for &hook in hooks {
        let rpp = tier.runs_per_packet(hook);
        let Some(t) = tier.ns_per_run(hook) else {
            continue;
        };
        let f = floor.ns_per_run(hook);
        let body = f.map(|f| t - f);
        runs += rpp;
        all_ns += rpp * t;
        body_ns += rpp * body.unwrap_or(t);
        println!(
            "  {hook:<26} {rpp:>9.3} {t:>8.0} {:>9} {:>9} {:>8} {:>9}",
            f.map_or("-".into(), |f| format!("{f:.0}")),
            clock
                .ns_per_run(hook)
                .map_or("-".into(), |c| format!("{c:.0}")),
            body.map_or("-".into(), |b| format!("{b:.0}")),
            body.map_or("-".into(), |b| format!("{:.2}", rpp * b)),
        );
    }
    let dut = tier.dut_ns_per_packet();
    println!(
        "  all hooks: {runs:.3} runs/pkt; {all_ns:.1} ns/pkt timed by the statistics ({:.2}% of the DUT's {dut:.0} ns/pkt); the bodies above the floor {body_ns:.1} ns/pkt ({:.2}%); the dispatch around each run is not in either (arm F's A/B figure)",
        100.0 * all_ns / dut.max(1.0),
        100.0 * body_ns / dut.max(1.0)
    );
    if let Some((before, after)) = snapshots {
        let t = napilab_trace::trace_interval(&before, &after, seconds);
        for n in t.napi.iter().filter(|n| n.packets > 0) {
            println!(
                "  napi {} ({}) cpu {} {:?}: {:.1} packets/poll, {:.0}% full-budget polls",
                n.napi_id,
                if n.device.is_empty() {
                    "backlog"
                } else {
                    &n.device
                },
                n.cpu,
                n.context,
                n.packets as f64 / n.polls.max(1) as f64,
                100.0 * n.full_budget_polls as f64 / n.polls.max(1) as f64
            );
        }
    }
    Ok(())
}

/// One arm of the benchmark: what is attached during its windows.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Arm {
    /// Nothing attached.
    Untraced,
    /// Nothing attached either: a second untraced arm, whose "cost" against the first is
    /// what the benchmark itself shows as cost when there is none (order and switch
    /// effects plus noise).
    UntracedAgain,
    /// Empty `tp_btf` programs on exactly the tier's hooks: the floor, what running a
    /// program there costs before it does anything.
    Floor,
    /// The floor, with one clock read in `softirq_entry` and `softirq_exit`: what timing
    /// every softirq run exactly costs at the least.
    FloorWithClock,
    /// The tier without `softirq_raise` (its raise-to-entry latency).
    TierWithoutRaise,
    /// The always-on tier as shipped (`softirq_raise` attached in its windows).
    Tier,
    /// The always-on tier with `softirq_raise` attached all the time (before the tracing windows).
    TierEveryRaise,
    /// 1 kHz stage sampling (`observe --stages`) alone.
    StageSampling,
    /// An empty program on a tracepoint that does not fire, attached and detached in
    /// the tier's raise windows: the windows' own cost.
    WindowsAlone,
}

const ARMS: usize = 9;

/// Tier and floor windows with BPF run-time statistics, alternating, after the rounds.
const STATS_PAIRS: usize = 4;

/// The tracepoint of `Arm::WindowsAlone`: `oom:mark_victim` fires only when the OOM
/// killer picks a victim.
const SILENT_TRACEPOINT: &str = "mark_victim";

/// The control's (a against A) 95% interval, in points of the DUT's CPU per packet,
/// within which a 1% cost can be told apart; rounds are added until it is reached.
const CONTROL_HALF_WIDTH_POINTS: f64 = 0.3;

/// A round counts only when the DUT's ring refused at least this share of the offered
/// frames in all its windows (the generator offered more than the DUT forwarded).
const MIN_REFUSED_SHARE: f64 = 0.02;

impl Arm {
    const ALL: [Arm; ARMS] = [
        Arm::Untraced,
        Arm::UntracedAgain,
        Arm::Floor,
        Arm::FloorWithClock,
        Arm::TierWithoutRaise,
        Arm::Tier,
        Arm::TierEveryRaise,
        Arm::StageSampling,
        Arm::WindowsAlone,
    ];

    fn letter(self) -> char {
        match self {
            Arm::Untraced => 'A',
            Arm::UntracedAgain => 'a',
            Arm::Floor => 'F',
            Arm::FloorWithClock => 'K',
            Arm::TierWithoutRaise => 'R',
            Arm::Tier => 'B',
            Arm::TierEveryRaise => 'E',
            Arm::StageSampling => 'C',
            Arm::WindowsAlone => 'W',
        }
    }

    fn describe(self) -> &'static str {
        match self {
            Arm::Untraced => "nothing attached",
            Arm::UntracedAgain => "nothing attached, a second time (the benchmark's own bias and noise)",
            Arm::Floor => "empty tp_btf programs on the tier's hooks (the floor)",
            Arm::FloorWithClock => {
                "the floor with one clock read in softirq_entry and softirq_exit (the floor of exact softirq time)"
            }
            Arm::TierWithoutRaise => "the always-on tier without softirq_raise",
            Arm::Tier => "the always-on tier as shipped (softirq_raise in 100 ms windows of every second)",
            Arm::TierEveryRaise => "the always-on tier with softirq_raise attached all the time",
            Arm::StageSampling => "1 kHz stage sampling alone",
            Arm::WindowsAlone => {
                "an empty program on oom:mark_victim (never fires) attached and detached in the tier's raise windows (the windows' own cost)"
            }
        }
    }
}

/// Round `i`'s order of the arms: row `i mod n` of a Williams square (first row 0, 1,
/// n-1, 2, n-2, ...; row r adds r), read backwards in the second n rounds of every 2n,
/// so over 2n rounds every arm takes every position equally often and follows every
/// other arm equally often (for an odd n too): a drift in load, or what one arm's
/// switch leaves behind for the next window, hits every arm alike.
fn williams_order(i: usize, n: usize) -> Vec<usize> {
    let mut first = vec![0];
    let (mut low, mut high) = (1, n.saturating_sub(1));
    while first.len() < n {
        first.push(low);
        low += 1;
        if first.len() < n {
            first.push(high);
            high = high.saturating_sub(1);
        }
    }
    let mut row: Vec<usize> = first.into_iter().map(|x| (x + i) % n).collect();
    if (i / n) % 2 == 1 {
        row.reverse();
    }
    row
}

/// Pooled figures of a set of windows: (pkt/s, DUT ns/pkt).
fn pooled(w: &[&Window]) -> (f64, f64) {
    let packets: f64 = w.iter().map(|w| w.packets as f64).sum();
    let seconds: f64 = w.iter().map(|w| w.seconds).sum();
    let cpu: f64 = w.iter().map(|w| w.cpu_ns as f64).sum();
    (packets / seconds.max(1e-9), cpu / packets.max(1.0))
}

/// X against A, pair by pair (the same round): rate ratios and rate per DUT CPU second.
/// Returns X's pooled extra ns per packet and its extra cost per pair (trimmed mean and
/// half-width, points).
fn summary(a: &[&Window], x: &[&Window]) -> (f64, f64, f64) {
    let rate: Vec<f64> = a
        .iter()
        .zip(x)
        .map(|(a, x)| x.forwarded / a.forwarded.max(1.0))
        .collect();
    let cost: Vec<f64> = a
        .iter()
        .zip(x)
        .map(|(a, x)| a.cost / x.cost.max(1e-9))
        .collect();
    let (rate_a, cost_a) = pooled(a);
    let (rate_x, cost_x) = pooled(x);
    let (mean, se) = mean_se(&rate);
    println!(
        "  forwarding rate: median of pair ratios {:.4}, mean {mean:.4} +- {se:.4} (standard error); pooled {rate_a:.0} against {rate_x:.0} pkt/s, ratio {:.4}",
        median(&rate),
        rate_x / rate_a.max(1.0)
    );
    let (mean, se) = mean_se(&cost);
    let (points, half) = cost_interval(a, x);
    println!(
        "  forwarding rate per DUT CPU second (ns/pkt ratio): median of pair ratios {:.4}, mean {mean:.4} +- {se:.4} (standard error); pooled {cost_a:.1} against {cost_x:.1} ns/pkt: costs {:.1} ns/pkt = {:.2}%; per pair {points:+.2}% [{:+.2}, {:+.2}] (95%, {:.0}% trimmed mean)",
        median(&cost),
        cost_x - cost_a,
        100.0 * (cost_x - cost_a) / cost_a.max(1e-9),
        points - half,
        points + half,
        100.0 * TRIM
    );
    (cost_x - cost_a, points, half)
}

/// X's extra DUT CPU per packet over A, per pair of the same round, in % of A's: the
/// `TRIM`-trimmed mean and the half-width of its 95% interval (Yuen's; infinite with
/// fewer than three pairs kept).
fn cost_interval(a: &[&Window], x: &[&Window]) -> (f64, f64) {
    let extra: Vec<f64> = a
        .iter()
        .zip(x)
        .map(|(a, x)| 100.0 * (x.cost - a.cost) / a.cost.max(1e-9))
        .collect();
    match napilab_core::uncertainty::trimmed_mean_interval(&extra, TRIM, 0.95) {
        Some((mean, i)) => (mean, (i.high - i.low) / 2.0),
        None => (f64::NAN, f64::INFINITY),
    }
}

/// Switches the machine to `arm`'s state: attaches or detaches the tier and the floor,
/// starts stage sampling (returned: it stops when dropped).
fn switch_to(
    arm: Arm,
    tracer: &mut AlwaysOn,
    floor: &mut Option<(Arm, FloorProbe)>,
    hooks: &[&'static str],
) -> Result<Option<napilab_trace::stages::StageSampler>, String> {
    let shipped = RaiseTiming::default();
    match arm {
        Arm::Tier => {
            tracer.set_raise_timing(shipped);
            tracer.reattach_without(&[]);
        }
        Arm::TierEveryRaise => {
            tracer.set_raise_timing(RaiseTiming::Always);
            tracer.reattach_without(&[]);
        }
        Arm::TierWithoutRaise => {
            tracer.reattach_without(&["softirq_raise"]);
        }
        _ => tracer.detach(),
    }
    tracer.set_raise_timing(shipped);
    if matches!(arm, Arm::Floor | Arm::FloorWithClock) {
        if floor.as_ref().map(|(a, _)| *a) != Some(arm) {
            *floor = None;
            let clocked: &[&str] = if arm == Arm::FloorWithClock {
                &["softirq_entry", "softirq_exit"]
            } else {
                &[]
            };
            let probe = FloorProbe::start_on(hooks, clocked)
                .map_err(|e| format!("cannot attach the floor's empty programs: {e}"))?;
            *floor = Some((arm, probe));
        }
    } else if arm == Arm::WindowsAlone {
        // A fresh window thread per window, as B's: its first window opens at once.
        *floor = None;
        let plan = match shipped {
            RaiseTiming::InWindows(w) => w,
            RaiseTiming::Always => RaiseTiming::DEFAULT_WINDOWS,
        };
        let probe = FloorProbe::windowed_on(SILENT_TRACEPOINT, 1, plan).map_err(|e| {
            format!("cannot load an empty program on {SILENT_TRACEPOINT} for arm W: {e}")
        })?;
        *floor = Some((arm, probe));
    } else {
        *floor = None;
    }
    if arm == Arm::StageSampling {
        let cpus: Vec<u32> = (0..possible_cpus() as u32).collect();
        return napilab_trace::stages::StageSampler::start(&cpus, 1000)
            .map(Some)
            .map_err(|e| format!("stage sampling cannot start: {e}"));
    }
    Ok(None)
}

/// At most four times the rounds asked for, rounded up to whole Williams squares.
fn rounds_at_most(rounds: usize) -> usize {
    (4 * rounds).div_ceil(2 * ARMS) * 2 * ARMS
}

/// The half-width, in points, of the control's (a against A) 95% interval over the
/// rounds kept; infinite with fewer than three.
fn control_half_width(kept: &[[Window; ARMS]]) -> f64 {
    if kept.len() < 3 {
        return f64::INFINITY;
    }
    let a: Vec<&Window> = kept.iter().map(|w| &w[0]).collect();
    let again: Vec<&Window> = kept.iter().map(|w| &w[1]).collect();
    cost_interval(&a, &again).1
}

fn run(rounds: usize, seconds: f64, senders: usize, nice: i32) -> Result<(), String> {
    // Ctrl-C or SIGTERM ends the bench at the next round, through the same drops as
    // its end, so nothing it created stays behind.
    let interrupted = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, interrupted.clone())
            .map_err(|e| format!("cannot catch signal {sig}: {e}"))?;
    }
    if possible_cpus() < 2 {
        return Err("needs two CPUs: the generator on CPU 0, the DUT on CPU 1".into());
    }
    pin(0, GEN_CPU)?;
    let router = Router::create(&NAMES, nice)?;
    println!(
        "generator: {senders} AF_PACKET sendmmsg thread(s) on CPU {GEN_CPU}; DUT: threaded NAPI of {} on CPU {DUT_CPU}; sink: drop as PACKET_OTHERHOST; nice {nice}; at least {rounds} rounds (at most {}, until the control's 95% interval is within +-{CONTROL_HALF_WIDTH_POINTS} points) of {} windows of {seconds} s",
        router.ingress,
        rounds_at_most(rounds),
        Arm::ALL.len()
    );
    for arm in Arm::ALL {
        println!("  {} = {}", arm.letter(), arm.describe());
    }
    // The object is loaded and verified once; untraced windows detach its programs,
    // traced ones attach them, so switching takes milliseconds and the arms alternate
    // quickly enough that changes in the machine's other load hit all of them alike.
    let mut tracer = start_tracer()?;
    let hooks = tracer.hooks();
    println!("  the tier's hooks here: {}", hooks.join(", "));
    tracer.detach();
    let mut floor: Option<(Arm, FloorProbe)> = None;
    // Every window has a settle pause and counter reads, then the statistics window;
    // the senders stop on their own after this bound.
    let max_rounds = rounds_at_most(rounds);
    let total =
        max_rounds as f64 * Arm::ALL.len() as f64 * (seconds + 0.2) + seconds.max(2.0) + 32.0;
    let flood = Flood::start(&router, senders, Duration::from_secs_f64(total));
    // Warm-up: rings full, caches hot, the DUT's kthread settled on its CPU (the first
    // window after 0.5 s still cost 10-15% more per packet).
    std::thread::sleep(Duration::from_secs(2));
    let mut kept: Vec<[Window; ARMS]> = Vec::new();
    let mut left_out = 0;
    let mut i = 0;
    loop {
        if interrupted.load(Ordering::Relaxed) {
            // Returning drops the flood, the programs and the router's namespaces.
            return Err(format!(
                "interrupted after {i} rounds: namespaces, links and programs removed"
            ));
        }
        if i >= rounds && i % (2 * ARMS) == 0 {
            let control = control_half_width(&kept);
            if control <= CONTROL_HALF_WIDTH_POINTS || i >= max_rounds {
                println!(
                    "stopped after {i} rounds: the control's 95% interval is +-{control:.2} points ({})",
                    if control <= CONTROL_HALF_WIDTH_POINTS {
                        format!("within +-{CONTROL_HALF_WIDTH_POINTS}")
                    } else {
                        format!("NOT within +-{CONTROL_HALF_WIDTH_POINTS}: {max_rounds} rounds at most")
                    }
                );
                break;
            }
        }
        i += 1;
        let order = williams_order(i - 1, Arm::ALL.len());
        let mut got: [Option<Window>; ARMS] = Default::default();
        for &k in &order {
            if interrupted.load(Ordering::Relaxed) {
                break;
            }
            let arm = Arm::ALL[k];
            let sampler = switch_to(arm, &mut tracer, &mut floor, &hooks)?;
            std::thread::sleep(Duration::from_millis(20)); // let the switch settle
            got[k] = Some(window(&router, seconds)?);
            if let Some(e) = floor.as_ref().and_then(|(_, f)| f.windows_failure()) {
                return Err(format!("arm W: {e}"));
            }
            drop(sampler);
        }
        if interrupted.load(Ordering::Relaxed) {
            continue;
        }
        let letters: String = order.iter().map(|&k| Arm::ALL[k].letter()).collect();
        let measured: Option<Vec<Window>> = got.into_iter().collect();
        let Some(Ok(windows)) = measured.map(<[Window; ARMS]>::try_from) else {
            return Err("a window was not measured".into());
        };
        // A window without traffic has no cost per packet: the generator got no CPU
        // (other load on CPU 0). The round is left out, and says so.
        if windows.iter().any(|w| w.packets == 0) {
            println!("{i:>3} {letters}: left out, a window forwarded nothing (generator starved)");
            left_out += 1;
            continue;
        }
        // The goal is a share of the DUT's maximum rate: a window in which the
        // generator offered no more than the DUT forwarded (it lost its CPU to other
        // load, or the DUT ran faster than one sender) ran smaller batches, which cost
        // more per packet whatever is attached.
        if let Some(w) = windows
            .iter()
            .find(|w| w.refused_share() < MIN_REFUSED_SHARE)
        {
            println!(
                "{i:>3} {letters}: left out, the DUT's ring refused {:.1}% of the offered frames in a window (offered {:.0}, forwarded {:.0} pkt/s, DUT busy {:.0}%): the generator, not the DUT, set the rate",
                100.0 * w.refused_share(),
                w.offered,
                w.forwarded,
                100.0 * w.busy
            );
            left_out += 1;
            continue;
        }
        let a = &windows[0];
        let per_arm: Vec<String> = Arm::ALL
            .iter()
            .zip(&windows)
            .skip(1)
            .map(|(arm, w)| format!("{} {:.4}", arm.letter(), a.cost / w.cost.max(1e-9)))
            .collect();
        println!(
            "{i:>3} {letters}: A {:>7.0} pkt/s (offered {:>7.0}, DUT busy {:>3.0}%, {:>5.0} ns/pkt); per DUT CPU second against A: {}",
            a.forwarded,
            a.offered,
            100.0 * a.busy,
            a.cost,
            per_arm.join(", ")
        );
        kept.push(windows);
    }
    drop(floor);
    println!(
        "{} of {i} rounds kept ({left_out} left out: the DUT's ring refused under {:.0}% of the offered frames, or a window without traffic)",
        kept.len(),
        100.0 * MIN_REFUSED_SHARE
    );
    let arm_windows = |k: usize| -> Vec<&Window> { kept.iter().map(|w| &w[k]).collect() };
    if !kept.is_empty() {
        // The bias check: the two untraced arms against each other.
        println!("a = {}, against A:", Arm::UntracedAgain.describe());
        let (bias, _, control_half) = summary(&arm_windows(0), &arm_windows(1));
        // Every other arm against both untraced windows of its round, merged: twice the
        // untraced packets, so half the noise of the baseline.
        let untraced: Vec<Window> = kept.iter().map(|w| w[0].merged(&w[1])).collect();
        let untraced: Vec<&Window> = untraced.iter().collect();
        let mut extra = [0.0; ARMS];
        let mut per_pair = [(0.0, 0.0); ARMS];
        for (k, arm) in Arm::ALL.iter().enumerate().skip(2) {
            println!(
                "{} = {}, against A+a (nothing attached, both windows of the round):",
                arm.letter(),
                arm.describe()
            );
            let (pooled_ns, points, half) = summary(&untraced, &arm_windows(k));
            extra[k] = pooled_ns;
            per_pair[k] = (points, half);
        }
        let (_, cost_a) = pooled(&untraced);
        let share = |ns: f64| 100.0 * ns / cost_a.max(1e-9);
        let [_, _, floor_ns, clocked_ns, without_raise, tier, every_raise, _, windows_ns] = extra;
        println!(
            "pooled, of the DUT's {cost_a:.1} ns/pkt untraced: the tier {tier:.1} ns/pkt ({:.2}%; with softirq_raise all the time {every_raise:.1} = {:.2}%, without it {without_raise:.1} = {:.2}%); its floor (empty programs on its hooks) {floor_ns:.1} ({:.2}%); the floor with exact softirq timing {clocked_ns:.1} ({:.2}%); the tier above that {:.1} ({:.2}%); the raise windows' attach and detach alone {windows_ns:.1} ({:.2}%); untraced against itself (a - A) {bias:.1} ({:.2}%)",
            share(tier),
            share(every_raise),
            share(without_raise),
            share(floor_ns),
            share(clocked_ns),
            tier - clocked_ns,
            share(tier - clocked_ns),
            share(windows_ns),
            share(bias)
        );
        // The goal of the "results that travel" round: the tier at most 1% of the DUT's
        // maximum rate on every CPU of this kind (the product's bound, docs/trace.md, is
        // 2%), told apart from the bench's own noise: the control within +-0.3 points.
        let [_, _, _, _, _, (tier_points, tier_half), ..] = per_pair;
        let resolved = control_half <= CONTROL_HALF_WIDTH_POINTS;
        println!(
            "{}",
            napilab_testkit::bench_verdict(
                "bench-trace",
                &format!(
                    "the always-on tier {tier_points:+.2}% [{:+.2}, {:+.2}] of the DUT's CPU per packet ({:.0}% trimmed mean of {} pairs; pooled {:.2}%), the control's interval +-{control_half:.2} points{}",
                    tier_points - tier_half,
                    tier_points + tier_half,
                    100.0 * TRIM,
                    kept.len(),
                    share(tier),
                    if resolved { "" } else { " (too wide to tell 1% apart)" }
                ),
                "<= 1%, control within +-0.3 points",
                resolved && tier_points <= 1.0
            )
        );
    }
    stats_windows(&router, &mut tracer, &hooks, seconds.max(1.0), STATS_PAIRS)?;
    drop(tracer);
    flood.stop()
}

fn main() {
    let mut args = std::env::args().skip(1);
    let rounds: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(48);
    let seconds: f64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(0.25);
    let senders: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(1);
    let nice: i32 = args.next().and_then(|s| s.parse().ok()).unwrap_or(0);
    if let Err(e) = run(
        rounds.min(10_000),
        seconds.clamp(0.05, 60.0),
        senders.clamp(1, 16),
        nice.clamp(-20, 19),
    ) {
        eprintln!("overhead: {e} (needs root, ip, ethtool and BPF)");
        std::process::exit(1);
    }
}
