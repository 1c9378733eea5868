//! Where one sample's CPU goes: the sampler's parts timed one by one on this host.
//!
//!     cargo run --release -p napilab-probe --example sample-cost -- [SAMPLES=300] [GAP_MS=20]
//!
//! Each part runs SAMPLES times with GAP_MS of sleep before each call (GAP_MS 0: back
//! to back, caches warm), and its process CPU time (user + system, getrusage) is
//! divided by SAMPLES, minus the CPU of the sleeping alone (the first line): with a
//! gap the caches and branch predictors are as cold as between two samples of
//! `observe`, which makes every part about three times dearer than back to back. The parts are what one
//! `observe --interval 1s` sample does: the /proc reads, the netlink dumps (the link
//! counters both ways: the full RTM_GETLINK description and the RTM_GETSTATS counters
//! the sampler uses between link changes), and the parsing and interval derivation.
//! Other processes share the machine, but CPU time is charged to this process only.

use std::path::Path;
use std::time::Duration;

use napilab_probe::netlink::Netlink;
use napilab_probe::observe::{describe_host, Analysis};
use napilab_probe::procfs::KeptFiles;
use napilab_probe::sample::Sampler;

/// One netlink dump; true if the kernel answered.
type Dump = fn(&mut Netlink) -> bool;

fn cpu_time() -> Duration {
    // SAFETY: getrusage writes into the struct passed.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    let tv = |t: libc::timeval| {
        Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64)
    };
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

/// CPU microseconds per call of `f`, over `n` calls each after `gap` of sleep.
fn per_call(n: u32, gap: Duration, f: &mut dyn FnMut()) -> f64 {
    let start = cpu_time();
    for _ in 0..n {
        if !gap.is_zero() {
            std::thread::sleep(gap);
        }
        f();
    }
    (cpu_time() - start).as_secs_f64() * 1e6 / f64::from(n)
}

fn main() {
    let n: u32 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(300);
    let gap = Duration::from_millis(
        std::env::args()
            .nth(2)
            .and_then(|a| a.parse().ok())
            .unwrap_or(20),
    );
    let root = Path::new("/");
    let mut files = KeptFiles::default();
    let sleeping = per_call(n, gap, &mut || {});
    println!(
        "CPU per call, mean of {n} calls each after {gap:?} of sleep (us), the sleep's own {sleeping:.1} us subtracted:"
    );
    let per_call = |n: u32, f: &mut dyn FnMut()| per_call(n, gap, f) - sleeping;
    for rel in [
        "proc/interrupts",
        "proc/softirqs",
        "proc/stat",
        "proc/net/softnet_stat",
        "proc/self/stat",
    ] {
        let us = per_call(n, &mut || {
            let _ = std::hint::black_box(files.read_text(root, rel));
        });
        println!("  read {rel:<28} {us:>8.1}");
    }
    let mut netlink = Netlink::new();
    let dumps: [(&str, Dump); 4] = [
        ("netlink links (RTM_GETLINK)", |nl| nl.links().is_ok()),
        ("netlink link_counters (GETSTATS)", |nl| {
            nl.link_counters().is_ok()
        }),
        ("netlink qdiscs (RTM_GETQDISC)", |nl| nl.qdiscs().is_ok()),
        ("netlink qstats (qstats-get)", |nl| nl.qstats().is_ok()),
    ];
    for (what, dump) in dumps {
        let ok = dump(&mut netlink);
        let us = per_call(n, &mut || {
            std::hint::black_box(dump(&mut netlink));
        });
        println!(
            "  {what:<33} {us:>8.1}{}",
            if ok { "" } else { "  (refused)" }
        );
    }
    let mut threads = 0;
    let us = per_call(n / 10, &mut || {
        threads = napilab_probe::procfs::list_packet_threads(root).map_or(0, |t| t.len());
    });
    println!("  list_packet_threads (full scan)   {us:>8.1}  ({threads} threads)");
    let mut scan = napilab_probe::procfs::PacketThreadScan::default();
    let last_pid = || {
        std::fs::read_to_string("/proc/loadavg")
            .ok()
            .and_then(|t| t.split_whitespace().nth(4)?.parse::<u32>().ok())
    };
    let _ = scan.scan(root, last_pid());
    let us = per_call(n / 10, &mut || {
        threads = scan.scan(root, last_pid()).map_or(0, |t| t.len());
    });
    println!("  PacketThreadScan::scan (rescan)   {us:>8.1}  ({threads} threads)");
    let header = describe_host(root, true);
    let mut sampler = Sampler::new(root, true);
    // As observe does: one RawSample refilled each time.
    let mut raw = napilab_probe::sample::RawSample::default();
    let us = per_call(n, &mut || {
        sampler.sample_into(&mut raw);
        std::hint::black_box(&raw);
    });
    println!("  Sampler::sample_into (all reads)  {us:>8.1}");
    let raws: Vec<_> = (0..n).map(|_| sampler.sample()).collect();
    let mut analysis = Analysis::new(header);
    let mut raws = raws.into_iter();
    let us = per_call(n, &mut || {
        if let Some(raw) = raws.next() {
            std::hint::black_box(analysis.push(&raw));
        }
    });
    println!("  Analysis::push (parse + derive)   {us:>8.1}");
}
