//! A/B/C cost of the per-packet tier (`--trace-packets`) against a DUT's maximum
//! forwarding rate, beside the always-on tier (docs/trace.md, "Per-packet tier").
//!
//! Builds a three-namespace veth router `napilab-pkt-<pid>-bench-{a,r,b}` and keeps the
//! router (the DUT) saturated:
//!  - generator: threads in namespace a, pinned to CPU 0, sending prebuilt 64-byte UDP
//!    frames with `sendmmsg` on an AF_PACKET socket (qdisc bypassed). They offer more
//!    than the DUT forwards; the excess is dropped at the DUT's full veth ring.
//!  - DUT: the router's ingress veth uses threaded NAPI, its kthread pinned to CPU 1,
//!    so GRO, routing and the egress veth run on CPU 1 in polls of up to 64 packets.
//!  - sink: the router sends every frame to a MAC address the sink's veth does not
//!    have, so the sink's IP layer drops it (OTHERHOST) at its first check. The
//!    forwarded count is the sink veth's RX packet counter.
//!
//! Each round measures seven modes back to back: A untraced, B always-on tier, C
//! always-on + per-packet tier tracing every packet, D always-on + per-packet tier in
//! its default 20 ms tracing windows of every second, E bpftrace counting one
//! per-packet tracepoint (net:netif_receive_skb) into a map, F one empty tp_btf program
//! on the same tracepoint (the floor: what one program run per packet costs on this
//! kernel), W D's windows alone (as many empty programs as D's windows attach, on
//! `oom:mark_victim`, which does not fire, attached and detached in D's windows: what
//! the window driver costs apart from any program run; a round fails if its windows did
//! not open). The order rotates every round (and reverses on odd rounds) so a drift in
//! background load spreads over all modes. It prints every round, then per mode the
//! median ratio to A of the forwarding rate and of the DUT kthread's CPU ns per
//! forwarded packet (the figure to trust on a shared machine), and the cost as a share
//! of the DUT's maximum rate as a 20% trimmed mean over the rounds with its 95%
//! interval (Yuen's). A last round with the kernel's BPF run-time statistics on (kept
//! out of the other rounds because they add two clock reads per program run) prints
//! each per-packet program's runs per forwarded packet and ns per run. Needs root and
//! two online CPUs.
//!
//!     cargo run --release -p napilab-trace --example packets-overhead -- [ROUNDS] [SECONDS] [SENDERS]

use std::process::Command;
use std::time::{Duration, Instant};

use napilab_trace::always_on::enable_run_time_stats;
use napilab_trace::floor::FloorProbe;
use napilab_trace::packets::packet_interval;
use napilab_trace::{AlwaysOn, PacketOptions, PacketTrace, TraceOptions, Windows};

mod saturated_router;
use saturated_router::{pin, Flood, Router, RouterNames, DUT_CPU, GEN_CPU, TRIM};

/// This benchmark's router (the always-on one uses others, so both can be built).
const NAMES: RouterNames = RouterNames {
    tag: "napilab-pkt",
    device: "npk",
    octet: 85,
    mac_byte: 0x6b,
};

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Mode {
    Untraced,
    AlwaysOn,
    Packets,
    Windowed,
    Bpftrace,
    Floor,
    WindowsAlone,
}

/// Every mode, in the order of the result columns.
const MODES: [Mode; 7] = [
    Mode::Untraced,
    Mode::AlwaysOn,
    Mode::Packets,
    Mode::Windowed,
    Mode::Bpftrace,
    Mode::Floor,
    Mode::WindowsAlone,
];

/// The tracepoint of `Mode::WindowsAlone`: `oom:mark_victim` fires only when the OOM
/// killer picks a victim (the always-on bench's arm W uses the same).
const SILENT_TRACEPOINT: &str = "mark_victim";

impl Mode {
    fn letter(self) -> &'static str {
        match self {
            Mode::Untraced => "A",
            Mode::AlwaysOn => "B",
            Mode::Packets => "C",
            Mode::Windowed => "D",
            Mode::Bpftrace => "E",
            Mode::Floor => "F",
            Mode::WindowsAlone => "W",
        }
    }

    fn label(self) -> &'static str {
        match self {
            Mode::Untraced => "A untraced",
            Mode::AlwaysOn => "B always-on tier",
            Mode::Packets => "C always-on + per-packet, every packet",
            Mode::Windowed => "D always-on + per-packet, 20 ms windows of 1 s (default)",
            Mode::Bpftrace => "E bpftrace counting net:netif_receive_skb",
            Mode::Floor => "F one empty tp_btf program on netif_receive_skb",
            Mode::WindowsAlone => {
                "W D's windows alone: as many empty programs on oom:mark_victim, attached and detached"
            }
        }
    }
}

/// The bpftrace peer: one per-packet tracepoint counted into a map. Dropping it stops
/// bpftrace (SIGINT, then SIGKILL after 5 s) and removes its output file.
struct Bpftrace {
    child: std::process::Child,
    out: std::path::PathBuf,
}

impl Bpftrace {
    const PROGRAM: &'static str = "tracepoint:net:netif_receive_skb { @packets = count(); }";

    fn start() -> Result<Bpftrace, String> {
        let out =
            std::env::temp_dir().join(format!("napilab-pkt-{}-bpftrace.out", std::process::id()));
        let file = std::fs::File::create(&out).map_err(|e| format!("{}: {e}", out.display()))?;
        // bpftrace resolves tracepoints through tracefs: when the host has none mounted,
        // it gets one in a private mount namespace (the host's mounts do not change).
        // On the generator's CPU, so its start-up (an LLVM compile) does not take the
        // DUT's CPU.
        let script = format!(
            "ulimit -l unlimited 2>/dev/null || true; [ -d /sys/kernel/tracing/events ] || mount -t tracefs nodev /sys/kernel/tracing; exec taskset -c {GEN_CPU} bpftrace -e '{}'",
            Self::PROGRAM
        );
        let child = Command::new("unshare")
            .args(["-m", "--propagation", "private", "sh", "-ec", &script])
            .stdout(file)
            .stderr(std::process::Stdio::null())
            .spawn()
            .map_err(|e| {
                format!("cannot run bpftrace (apt-get install bpftrace; make deps does): {e}")
            })?;
        let mut me = Bpftrace { child, out };
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let text = std::fs::read_to_string(&me.out).unwrap_or_default();
            if text.contains("Attaching") {
                // "Attaching 1 probe..." is printed just before the attach.
                std::thread::sleep(Duration::from_millis(500));
                return Ok(me);
            }
            if let Ok(Some(status)) = me.child.try_wait() {
                return Err(format!(
                    "bpftrace exited before attaching ({status}): {text}"
                ));
            }
            if Instant::now() > deadline {
                me.stop();
                return Err("bpftrace did not attach within 60 s".into());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn stop(&mut self) {
        let Ok(pid) = i32::try_from(self.child.id()) else {
            let _ = self.child.kill();
            return;
        };
        // SAFETY: signalling our own child.
        unsafe { libc::kill(pid, libc::SIGINT) };
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Bpftrace {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_file(&self.out);
    }
}

/// What a mode loads; dropping it unloads everything.
struct Tier {
    _always_on: Option<AlwaysOn>,
    packets: Option<PacketTrace>,
    _bpftrace: Option<Bpftrace>,
    floor: Option<FloorProbe>,
}

/// Loads `mode`'s programs; `window_links` is how many stage programs D's windows
/// attach, which W attaches and detaches on a tracepoint that does not fire.
fn load(mode: Mode, window_links: usize) -> Result<Tier, String> {
    let always_on = match mode {
        Mode::AlwaysOn | Mode::Packets | Mode::Windowed => Some(
            AlwaysOn::start(&TraceOptions::default())
                .map_err(|e| format!("cannot load the always-on tier: {e}"))?,
        ),
        _ => None,
    };
    let windows = match mode {
        Mode::Packets => Some(None),
        Mode::Windowed => Some(Some(Windows::DEFAULT)),
        _ => None,
    };
    let packets = match windows {
        Some(windows) => Some(
            PacketTrace::start(&PacketOptions {
                windows,
                ..PacketOptions::default()
            })
            .map_err(|e| format!("cannot load the per-packet tier: {e}"))?,
        ),
        None => None,
    };
    let bpftrace = match mode {
        Mode::Bpftrace => Some(Bpftrace::start()?),
        _ => None,
    };
    let floor = match mode {
        Mode::Floor => {
            Some(FloorProbe::start().map_err(|e| format!("cannot load the empty program: {e}"))?)
        }
        Mode::WindowsAlone => Some(
            FloorProbe::windowed_on(SILENT_TRACEPOINT, window_links, Windows::DEFAULT).map_err(
                |e| format!("cannot load an empty program on {SILENT_TRACEPOINT} for mode W: {e}"),
            )?,
        ),
        _ => None,
    };
    Ok(Tier {
        _always_on: always_on,
        packets,
        _bpftrace: bpftrace,
        floor,
    })
}

#[derive(Clone, Copy, Default)]
struct Round {
    /// Forwarded packets per second.
    rate: f64,
    /// DUT kthread CPU ns per forwarded packet.
    ns_per_packet: f64,
}

fn round(router: &Router, senders: usize, seconds: f64) -> Result<Round, String> {
    let flood = Flood::start(router, senders, Duration::from_secs_f64(seconds + 5.0));
    std::thread::sleep(Duration::from_millis(300)); // warm-up: rings full, caches hot
    let f0 = router.forwarded()?;
    let c0 = router.dut_cpu_ns()?;
    let start = Instant::now();
    std::thread::sleep(Duration::from_secs_f64(seconds));
    let f1 = router.forwarded()?;
    let c1 = router.dut_cpu_ns()?;
    let elapsed = start.elapsed().as_secs_f64();
    flood.stop()?;
    let forwarded = f1.saturating_sub(f0);
    Ok(Round {
        rate: forwarded as f64 / elapsed,
        ns_per_packet: c1.saturating_sub(c0) as f64 / forwarded.max(1) as f64,
    })
}

/// Mean, median, minimum and maximum. The median is printed too because one round
/// disturbed by another process on this shared machine can move the mean far.
fn summary(v: &[f64]) -> (f64, f64, f64, f64) {
    let mean = v.iter().sum::<f64>() / v.len().max(1) as f64;
    let mut sorted = v.to_vec();
    sorted.sort_by(f64::total_cmp);
    let median = match sorted.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => sorted[n / 2],
        n => (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0,
    };
    let min = sorted.first().copied().unwrap_or(f64::NAN);
    let max = sorted.last().copied().unwrap_or(f64::NAN);
    (mean, median, min, max)
}

/// Round `r`'s order: the modes rotated by `r`, reversed on odd rounds, so every mode
/// meets every position and drift in the machine's load spreads over all of them.
fn order(r: usize) -> Vec<Mode> {
    let mut v: Vec<Mode> = (0..MODES.len())
        .map(|i| MODES[(i + r / 2) % MODES.len()])
        .collect();
    if r % 2 == 1 {
        v.reverse();
    }
    v
}

/// The round with BPF run-time statistics: per per-packet program, runs per forwarded
/// packet and ns per run; and what the tier saw in the DUT's namespace.
fn stats_round(router: &Router, senders: usize, seconds: f64) -> Result<(), String> {
    let tier = load(Mode::Packets, 0)?;
    let packets = tier
        .packets
        .as_ref()
        .ok_or("the per-packet tier did not load")?;
    let Some(stats) = enable_run_time_stats() else {
        return Err("the kernel refused BPF_ENABLE_STATS".into());
    };
    let costs0 = packets.program_costs();
    let snap0 = packets.snapshot();
    let started = Instant::now();
    let r = round(router, senders, seconds)?;
    let elapsed = started.elapsed().as_secs_f64();
    let costs1 = packets.program_costs();
    let snap1 = packets.snapshot();
    drop(stats);
    println!(
        "\nper-packet programs with BPF run-time statistics on (one {seconds} s round, {:.0} forwarded pkt/s). The programs see every namespace, so runs also count the generator's side and any other traffic on the machine:",
        r.rate
    );
    println!("{:<34} {:>10} {:>8}", "program", "runs/s", "ns/run");
    let (mut total_runs, mut total_ns) = (0u64, 0u64);
    for ((name, runs1, ns1), (_, runs0, ns0)) in costs1.iter().zip(&costs0) {
        let (runs, ns) = (runs1.saturating_sub(*runs0), ns1.saturating_sub(*ns0));
        total_runs += runs;
        total_ns += ns;
        if runs == 0 {
            continue;
        }
        println!(
            "{name:<34} {:>10.0} {:>8.0}",
            runs as f64 / elapsed,
            ns as f64 / runs as f64
        );
    }
    println!(
        "all per-packet programs: {:.0} ns per run on average, {:.1}% of one CPU",
        total_ns as f64 / total_runs.max(1) as f64,
        total_ns as f64 / (elapsed * 1e9) * 100.0
    );
    // Sanity: the tier saw the DUT's packets (pairs with one end in the router's ns).
    let dut_ns = std::fs::metadata(format!("/var/run/netns/{}", router.ns("r")))
        .ok()
        .and_then(|m| u32::try_from(std::os::unix::fs::MetadataExt::ino(&m)).ok());
    let (pairs, drops) = packet_interval(&snap0, &snap1, elapsed, &packets.reasons, dut_ns);
    println!("what the tier measured in the DUT's namespace over that round:");
    for p in pairs.iter().filter(|p| p.rate.value > r.rate * 0.01) {
        println!(
            "  {} {} -> {} {}: {:.0} pkt/s, p50 {:.0} ns, p99 {:.0} ns",
            p.from_device, p.from, p.device, p.to, p.rate.value, p.p50_ns, p.p99_ns
        );
    }
    for d in drops.iter().take(5) {
        println!(
            "  drop {} on {} ({}, after {}): {:.0}/s",
            d.reason,
            d.device,
            d.protocol,
            d.last_stage.as_deref().unwrap_or("no traced stage"),
            d.rate.value
        );
    }
    Ok(())
}

fn run() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize, default: f64| -> Result<f64, String> {
        args.get(i).map_or(Ok(default), |v| {
            v.parse::<f64>()
                .ok()
                .filter(|x| *x > 0.0)
                .ok_or_else(|| format!("argument {} ({v:?}) must be a positive number", i + 1))
        })
    };
    let rounds = arg(0, 6.0)? as usize;
    let seconds = arg(1, 3.0)?;
    let senders = arg(2, 3.0)? as usize;
    if !napilab_probe::kernel::is_root() {
        return Err("needs root (namespaces and BPF)".into());
    }
    let online = std::thread::available_parallelism().map_or(1, |n| n.get());
    if online < 2 {
        return Err(format!(
            "needs two online CPUs (generator on {GEN_CPU}, DUT on {DUT_CPU}); {online} available"
        ));
    }
    let router = Router::create(&NAMES, 0)?;
    // How many stage programs D's windows attach each time (W attaches as many).
    let window_links = load(Mode::Windowed, 0)?
        .packets
        .as_ref()
        .map_or(0, PacketTrace::windowed_programs);
    // Check every mode loads before measuring anything.
    for mode in MODES {
        drop(load(mode, window_links)?);
    }
    pin(0, GEN_CPU)?;
    println!(
        "{rounds} rounds x {} modes x {seconds} s, {senders} sender thread(s) on CPU {GEN_CPU}, DUT kthread on CPU {DUT_CPU}",
        MODES.len()
    );
    for mode in MODES {
        println!("  {}", mode.label());
    }
    println!("  (D's windows attach {window_links} stage programs each; W as many)");
    println!(
        "other processes share this machine: the DUT's CPU per forwarded packet (its kthread's run time / sink RX packets) is the figure to trust; forwarding rates move with the DUT's CPU share"
    );
    print!("{:<6} {:<7}", "round", "order");
    for mode in MODES {
        print!(" {:>9} {:>6}", format!("{} pkt/s", mode.letter()), "ns/pkt");
    }
    println!();
    let mut results: Vec<[Round; MODES.len()]> = Vec::new();
    for r in 0..rounds {
        let order = order(r);
        let mut row = [Round::default(); MODES.len()];
        for mode in &order {
            let tier = load(*mode, window_links)?;
            let res = round(&router, senders, seconds)?;
            // W measures its windows only if they opened: a failed attach would leave
            // it untraced and look free.
            if let Some(e) = tier.floor.as_ref().and_then(FloorProbe::windows_failure) {
                return Err(format!("mode W: {e}"));
            }
            drop(tier);
            row[*mode as usize] = res;
        }
        print!(
            "{:<6} {:<7}",
            r + 1,
            order.iter().map(|m| m.letter()).collect::<String>()
        );
        for res in &row {
            print!(" {:>9.0} {:>6.0}", res.rate, res.ns_per_packet);
        }
        println!();
        results.push(row);
    }
    println!("\nagainst A (untraced) in the same round: median (min..max) of the per-round ratios");
    println!(
        "{:<58} {:>24} {:>24} {:>9} {:>24}",
        "mode",
        "forwarding rate X/A",
        "DUT CPU per packet X/A",
        "+ns/pkt",
        format!("cost, {:.0}% trimmed, 95%", 100.0 * TRIM)
    );
    for mode in &MODES[1..] {
        let i = *mode as usize;
        let rate: Vec<f64> = results.iter().map(|r| r[i].rate / r[0].rate).collect();
        let cpu: Vec<f64> = results
            .iter()
            .map(|r| r[i].ns_per_packet / r[0].ns_per_packet)
            .collect();
        let extra: Vec<f64> = results
            .iter()
            .map(|r| r[i].ns_per_packet - r[0].ns_per_packet)
            .collect();
        let (_, rm, rlo, rhi) = summary(&rate);
        let (_, cm, clo, chi) = summary(&cpu);
        let (_, em, _, _) = summary(&extra);
        // The cost as a share of the DUT's maximum rate, per round.
        let cost: Vec<f64> = results
            .iter()
            .map(|r| 100.0 * (1.0 - r[0].ns_per_packet / r[i].ns_per_packet))
            .collect();
        let trimmed = napilab_core::uncertainty::trimmed_mean_interval(&cost, TRIM, 0.95)
            .map_or("- (too few rounds)".to_string(), |(m, ci)| {
                format!("{m:+.1}% [{:+.1}, {:+.1}]", ci.low, ci.high)
            });
        println!(
            "{:<58} {:>24} {:>24} {:>9.0} {:>24}",
            mode.label(),
            format!("{rm:.3} ({rlo:.3}..{rhi:.3})"),
            format!("{cm:.3} ({clo:.3}..{chi:.3})"),
            em,
            trimmed
        );
    }
    println!(
        "cost as a share of the DUT's maximum rate = 1 - A ns/pkt / X ns/pkt (median): {}",
        MODES[1..]
            .iter()
            .map(|m| {
                let v: Vec<f64> = results
                    .iter()
                    .map(|r| 1.0 - r[0].ns_per_packet / r[*m as usize].ns_per_packet)
                    .collect();
                format!("{} {:.1}%", m.letter(), summary(&v).1 * 100.0)
            })
            .collect::<Vec<_>>()
            .join(", ")
    );
    let windowed: Vec<f64> = results
        .iter()
        .map(|r| 1.0 - r[0].ns_per_packet / r[Mode::Windowed as usize].ns_per_packet)
        .collect();
    let windowed = summary(&windowed).1 * 100.0;
    stats_round(&router, senders, seconds)?;
    // The per-packet tier's goal (docs/trace.md): in its default windows at most 15%.
    println!(
        "{}",
        napilab_testkit::bench_verdict(
            "bench-trace-packets",
            &format!("the per-packet tier in its default windows {windowed:.1}% (median share of the DUT's maximum rate)"),
            "<= 15%",
            windowed <= 15.0
        )
    );
    Ok(())
}

fn main() -> std::process::ExitCode {
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("packets-overhead: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
