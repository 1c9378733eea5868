//! `napilab host`: which machine this is, as every record stores it (CPU, microcode,
//! mitigations, kernel, virtualization; docs/observation.md, "Host identity"). Only
//! reads, so it runs without root. `--speed SECONDS` also times a fixed piece of work
//! on each CPU for that long (docs/lab.md, "Host speed"): how steady the CPUs are that
//! a measurement would run on. `--wake-up` times how long a thread woken onto each CPU
//! waits to run (docs/observation.md, "Wake-up latency"): what a NAPI kthread or a
//! busy-polling application pays for every batch it sleeps before. `--timer` measures
//! what a kernel timer costs each CPU (docs/observation.md, "Timer cost"): what a
//! `gro-flush-timeout` deferral pays per expiry. `--stalls SECONDS` measures how much
//! of each CPU a thread that never sleeps does not get, against what /proc/stat counts
//! as steal (docs/observation.md, "CPU stalls").

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use napilab_core::{CpuStalls, HostIdentity, HostSpeed, TimerCost, WakeUpLatency};
use napilab_probe::host_identity::read_host_identity;
use napilab_probe::procfs::parse_cpu_list;

/// One host-speed sample: short enough to see the seconds-long slow spells of a shared
/// host, long enough that the probe's own timing is far below the spread it measures.
const SPEED_SAMPLE: Duration = Duration::from_millis(200);
/// The longest --speed: a bound on the loop, not a recommendation (60 s is plenty).
const MOST_SPEED_SECONDS: f64 = 3600.0;
/// --wake-up: wake-ups per CPU and gap, after a short sleep (a loaded NAPI kthread's
/// between batches) and after a long one (a CPU that went deep idle); about 0.6 s per CPU.
const WAKE_UPS: usize = 200;
/// Most wake-ups `--wake-ups` may ask for per CPU and gap (about 4 minutes a CPU).
const MOST_WAKE_UPS: usize = 1_000_000;
const WAKE_UP_GAPS: [Duration; 2] = [Duration::from_micros(100), Duration::from_millis(2)];
/// --timer: the probe timer's period, the shipped `deferral` profile's
/// gro-flush-timeout.
const TIMER_PERIOD: Duration = Duration::from_micros(20);

#[derive(clap::Args)]
pub struct HostArgs {
    /// Print the identity as JSON (the `identity` object of a record's `host`).
    #[arg(long)]
    json: bool,
    /// Read /proc and /sys under DIR instead of / (a recorded tree).
    #[arg(long, value_name = "DIR")]
    root: Option<PathBuf>,
    /// Also time the same fixed work on every online CPU (all at once) for SECONDS, in
    /// 200 ms samples, and print how much slower than its fastest each CPU ran: on a
    /// shared VM this spread, which no steal counter shows, bounds how steady any
    /// measurement here can be. Keeps every CPU busy meanwhile.
    #[arg(long, value_name = "SECONDS")]
    speed: Option<f64>,
    /// Also time how long a thread woken onto each online CPU waits before it runs
    /// (woken from the next CPU, 200 times after 100 us idle and 200 times after 2 ms):
    /// the wait a NAPI kthread or a sleeping application pays per batch. On a VM whose
    /// idle vCPUs halt at once it is tens of microseconds. Needs two CPUs or more.
    #[arg(long)]
    wake_up: bool,
    /// With --wake-up: how many wake-ups per CPU and idle gap (default 200). A tail of
    /// one wake-up in several thousand, which is what sets a threaded DUT's loss on a
    /// VM whose idle vCPUs halt (docs/lab.md, "Wake-ups"), needs tens of thousands to
    /// show; each takes about 0.2 ms after 100 us idle and 2 ms after 2 ms.
    #[arg(long, value_name = "N", requires = "wake_up")]
    wake_ups: Option<usize>,
    /// Also measure what a kernel timer costs each online CPU: programming its timer
    /// device, and a 20 us timer re-armed as it fires (as `gro-flush-timeout` deferral
    /// does under load) against a thread spinning there, per expiry. On bare metal well
    /// under a microsecond; on a VM where both are exits, tens. About 0.35 s a CPU,
    /// which it keeps busy.
    #[arg(long)]
    timer: bool,
    /// Also spin a thread on each online CPU for SECONDS (one CPU after the other) and
    /// print how much of the time it did not get, in stalls of at least 5 us, by length,
    /// beside what /proc/stat counted as steal meanwhile: on a VM every interrupt can
    /// cost tens of microseconds that no steal counter shows. Keeps that CPU busy.
    #[arg(long, value_name = "SECONDS")]
    stalls: Option<f64>,
    /// With --speed, --wake-up, --timer or --stalls: only these CPUs (a list such as
    /// 0,2-3).
    #[arg(long, value_name = "LIST")]
    cpus: Option<String>,
}

pub fn run(args: HostArgs) -> Result<()> {
    let root = args.root.unwrap_or_else(|| PathBuf::from("/"));
    let identity = read_host_identity(&root);
    if args.cpus.is_some()
        && args.speed.is_none()
        && !args.wake_up
        && !args.timer
        && args.stalls.is_none()
    {
        bail!("--cpus chooses the CPUs of --speed, --wake-up, --timer or --stalls: give one of them too");
    }
    let speed = match args.speed {
        None => None,
        Some(seconds) => {
            let cpus = speed_cpus(args.cpus.as_deref())?;
            Some(measure_speed(seconds, &cpus)?)
        }
    };
    let wake_up = if args.wake_up {
        let cpus = speed_cpus(args.cpus.as_deref())?;
        Some(measure_wake_ups(&cpus, args.wake_ups.unwrap_or(WAKE_UPS))?)
    } else {
        None
    };
    let timer = if args.timer {
        let cpus = speed_cpus(args.cpus.as_deref())?;
        Some(measure_timers(&cpus)?)
    } else {
        None
    };
    let stalls = match args.stalls {
        None => None,
        Some(seconds) => {
            let cpus = speed_cpus(args.cpus.as_deref())?;
            Some(measure_stalls(seconds, &cpus)?)
        }
    };
    if args.json {
        let value = if speed.is_none() && wake_up.is_none() && timer.is_none() && stalls.is_none() {
            serde_json::to_value(&identity)?
        } else {
            let mut value = serde_json::json!({ "identity": identity });
            if let Some(speed) = &speed {
                value["speed"] = speed
                    .iter()
                    .map(|s| serde_json::json!({ "samples": s, "spread": s.spread() }))
                    .collect();
            }
            if let Some(wake_up) = &wake_up {
                value["wake_up"] = wake_up
                    .iter()
                    .map(|w| {
                        serde_json::json!({
                            "samples": w,
                            "median_ns": w.median_ns(),
                            "p90_ns": w.quantile_ns(0.9),
                        })
                    })
                    .collect();
            }
            if let Some(timer) = &timer {
                value["timer"] = timer
                    .iter()
                    .map(|t| {
                        serde_json::json!({
                            "samples": t,
                            "max_share": t.max_share(t.period_ns),
                        })
                    })
                    .collect();
            }
            if let Some(stalls) = &stalls {
                value["stalls"] = serde_json::to_value(stalls)?;
            }
            value
        };
        println!("{}", serde_json::to_string_pretty(&value)?);
    } else {
        print!("{}", text(&identity));
        for s in speed.iter().flatten() {
            println!("speed: {}", s.summary());
        }
        for w in wake_up.iter().flatten() {
            println!("wake-up: {}", w.summary());
        }
        for t in timer.iter().flatten() {
            println!("timer: {}", timer_summary(t));
        }
        for st in stalls.iter().flatten() {
            println!("stalls: {}", st.summary());
        }
    }
    Ok(())
}

/// Each CPU woken `count` times from the next, after each gap of [`WAKE_UP_GAPS`].
fn measure_wake_ups(cpus: &[u32], count: usize) -> Result<Vec<WakeUpLatency>> {
    if cpus.len() < 2 {
        bail!("--wake-up needs two CPUs or more (one to wake the other), got {cpus:?}");
    }
    if !(1..=MOST_WAKE_UPS).contains(&count) {
        bail!("--wake-ups {count}: give between 1 and {MOST_WAKE_UPS} wake-ups per CPU and gap");
    }
    eprintln!(
        "napilab host: waking a thread on each of CPUs {cpus:?} {count} times after each of {WAKE_UP_GAPS:?} idle"
    );
    let mut out = Vec::new();
    for gap in WAKE_UP_GAPS {
        for r in napilab_probe::wake_up_latency::measure_each(cpus, count, gap) {
            out.push(r?);
        }
    }
    Ok(out)
}

/// Both timer probes on each CPU, one after the other.
fn measure_timers(cpus: &[u32]) -> Result<Vec<TimerCost>> {
    eprintln!(
        "napilab host: timing the timer device and a {} us timer on each of CPUs {cpus:?}",
        TIMER_PERIOD.as_micros()
    );
    napilab_probe::timer_interrupt_cost::measure_each(cpus, TIMER_PERIOD)
        .into_iter()
        .map(|r| r.map_err(anyhow::Error::from))
        .collect()
}

/// Each CPU spun for `seconds`, one after the other.
fn measure_stalls(seconds: f64, cpus: &[u32]) -> Result<Vec<CpuStalls>> {
    if !(0.1..=MOST_SPEED_SECONDS).contains(&seconds) {
        bail!("--stalls {seconds}: give between 0.1 and {MOST_SPEED_SECONDS:.0} seconds");
    }
    eprintln!("napilab host: spinning {seconds} s on each of CPUs {cpus:?}, one after the other");
    cpus.iter()
        .map(|&cpu| {
            napilab_probe::stalls::measure(cpu, Duration::from_secs_f64(seconds))
                .map_err(anyhow::Error::from)
        })
        .collect()
}

fn timer_summary(t: &TimerCost) -> String {
    format!(
        "CPU {}: programming the timer device {:.1} us; a {:.0} us timer re-armed as it fires costs {:.1} us per expiry ({:.0} expiries a second), so at most {:.0}% of the CPU",
        t.cpu,
        t.reprogram_ns / 1e3,
        t.period_ns / 1e3,
        t.ns_per_expiry / 1e3,
        t.expiries_per_s,
        t.max_share(t.period_ns) * 100.0
    )
}

fn speed_cpus(asked: Option<&str>) -> Result<Vec<u32>> {
    let (list, from) = match asked {
        Some(list) => (list.to_string(), "--cpus"),
        None => (
            std::fs::read_to_string("/sys/devices/system/cpu/online")
                .context("cannot read /sys/devices/system/cpu/online: give the CPUs with --cpus")?,
            "/sys/devices/system/cpu/online",
        ),
    };
    match parse_cpu_list(&list) {
        Some(cpus) if !cpus.is_empty() => Ok(cpus),
        _ => bail!("{from}: {:?} is not a CPU list such as 0,2-3", list.trim()),
    }
}

/// Every CPU at once, each on a pinned thread of its own.
fn measure_speed(seconds: f64, cpus: &[u32]) -> Result<Vec<HostSpeed>> {
    if !(seconds >= SPEED_SAMPLE.as_secs_f64() && seconds <= MOST_SPEED_SECONDS) {
        bail!(
            "--speed {seconds}: give between {} and {MOST_SPEED_SECONDS:.0} seconds",
            SPEED_SAMPLE.as_secs_f64()
        );
    }
    let samples = (seconds / SPEED_SAMPLE.as_secs_f64()).round() as usize;
    eprintln!(
        "napilab host: timing the same work on CPUs {cpus:?} for {seconds:.0} s ({samples} samples of {} ms each)",
        SPEED_SAMPLE.as_millis()
    );
    napilab_probe::host_speed::measure_all(cpus, SPEED_SAMPLE, samples)
        .into_iter()
        .map(|r| r.map_err(anyhow::Error::from))
        .collect()
}

/// The summary first (what `make test` prints), then one line per field.
fn text(identity: &HostIdentity) -> String {
    let fields = identity.fields();
    let width = fields.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    let mut out = format!("host: {}\n", identity.summary());
    for (name, value) in fields {
        out.push_str(&format!("  {name:<width$}  {value}\n"));
    }
    out
}
