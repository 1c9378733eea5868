//! The runner: a scenario's configurations, each run by its topology's module
//! (crate::packet_runner for router, ap and many-napi, crate::server_runner for server), which walks
//! its loads x repeats and searches; per point the workload's results and the DUT's
//! Observation. Ctrl-C (the `stop` flag) ends the run
//! cleanly: the point in progress is dropped, finished points are kept, everything
//! created is removed and `RunRecord.interrupted` is set.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};
use napilab_core::scenario::{self, SearchMethod};
use napilab_core::{RunKind, RunRecord};
use napilab_experiment::record::{self, RunStart};

use crate::netns::{self, new_run_id, pid_file, RUN_DIR};
use crate::run_context::{notice, now_ms, Ctx};
pub use crate::run_context::{RunOptions, JOURNAL_PREFIX};

pub struct RunOutcome {
    pub record: RunRecord,
    /// Where `run.json` is (or, without `write_record`, goes).
    pub path: PathBuf,
}

/// Checks root, iproute2, ethtool and network-namespace support; says what is missing.
pub fn preflight() -> Result<()> {
    if !napilab_probe::kernel::is_root() {
        bail!("napilab lab needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN) to create network namespaces, veth links and to pin kernel threads: run it with sudo");
    }
    if !Path::new("/proc/self/ns/net").exists() {
        bail!("this kernel has no network namespaces (/proc/self/ns/net is missing): the lab needs CONFIG_NET_NS and CONFIG_VETH");
    }
    for (prog, pkg) in [
        ("ip", "iproute2"),
        ("tc", "iproute2"),
        ("ethtool", "ethtool"),
    ] {
        if Command::new(prog)
            .arg("-V")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_err()
        {
            bail!("`{prog}` is not installed: install {pkg} (apt-get install {pkg})");
        }
    }
    Ok(())
}

/// Removes the pid file on drop.
struct PidFile(PathBuf);

impl Drop for PidFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Runs a scenario end to end and writes `<out_dir>/<run_id>/run.json`.
pub fn run(opts: &RunOptions) -> Result<RunOutcome> {
    preflight()?;
    let mut host = napilab_probe::observe::describe_host(Path::new("/"), false).host;
    let ncpus = host.cpus.iter().copied().max().map_or(1, |m| m + 1);
    let scenario = scenario::parse(&opts.scenario_text, &opts.scenario_file, Some(ncpus))
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let run_id = opts.run_id.clone().unwrap_or_else(new_run_id);
    std::fs::create_dir_all(RUN_DIR).with_context(|| format!("creating {RUN_DIR}"))?;
    std::fs::write(pid_file(&run_id), std::process::id().to_string())
        .with_context(|| format!("writing {}", pid_file(&run_id).display()))?;
    let _pid = PidFile(pid_file(&run_id));
    let started = now_ms();
    let configs = scenario.configurations();
    // The fixed loads and those given as fractions of the probed capacity.
    let loads = scenario.loads().len() + scenario.load_fractions().len();
    let m = &scenario.measurement;
    let per_config = match (&scenario.requests, &scenario.tunnel) {
        (Some(w), _) => crate::server_runner::points_per_configuration(w, m),
        (_, Some(t)) => t.loads_pps.len() as u64 * u64::from(m.repeats),
        _ => {
            loads as u64 * u64::from(m.repeats)
                + match (m.search, m.search_method) {
                    (false, _) => 0,
                    (true, SearchMethod::Bisection) => u64::from(m.search_iterations),
                    // About a dozen trials per MLRsearch (the bar's end is corrected
                    // per configuration).
                    (true, SearchMethod::Mlrsearch) => 12 * u64::from(m.search_repeats),
                }
        }
    };
    let bar = if opts.progress && std::io::stderr().is_terminal() {
        let b = indicatif::ProgressBar::new(per_config * configs.len() as u64);
        let style = indicatif::ProgressStyle::with_template(
            "lab {bar:30} {pos}/{len} points, eta {eta} {msg} (Ctrl-C stops, keeps finished points)",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar());
        b.set_style(style);
        b
    } else {
        indicatif::ProgressBar::hidden()
    };
    let mut ctx = Ctx {
        scenario: &scenario,
        opts,
        notices: Vec::new(),
        next_point: 1,
        bar,
        ncpus,
        disturbance_limits: crate::disturbance::Limits::default(),
    };
    if scenario.measurement.search
        && matches!(
            scenario.topology.kind,
            scenario::TopologyKind::Router
                | scenario::TopologyKind::Ap
                | scenario::TopologyKind::ManyNapi
        )
    {
        ctx.bar.set_message("the machine's own noise");
        let limits = machine_noise(ncpus, &opts.stop);
        // The probes that follow are the lab's two kinds of work (busy CPUs, and idle
        // CPUs woken again and again): the steal each brings joins the machine's noise.
        let cpus = host.cpus.clone();
        ctx.bar.set_message("the host's speed");
        let what = "every CPU was busy in the host-speed probe";
        let limits = steal_while(limits, what, &cpus, || {
            host_speed(&mut host, &mut ctx.notices, "run start", &opts.stop);
            !host.speed.is_empty()
        });
        ctx.bar.set_message("wake-ups of idle CPUs");
        let what = "the wake-up probe woke idle CPUs again and again";
        let limits = steal_while(limits, what, &cpus, || {
            wake_ups(&mut host, &mut ctx.notices, &opts.stop);
            !host.wake_up.is_empty()
        });
        ctx.disturbance_limits = limits;
        let detail = ctx.disturbance_limits.detail();
        notice(&mut ctx.notices, "disturbance limits", detail);
    } else if scenario.requests.as_ref().is_some_and(|r| r.search) {
        // The server's thread is woken from the client's CPU for each request: the
        // twin beside the lab draws those wake-ups from this probe (docs/lab.md,
        // "Wake-ups"); the host's stalls of each CPU are kept beside them (they set the
        // requests' tail; a twin profile can replay them, docs/sim.md "Host stalls").
        // The server runner classes no trials disturbed, so no other noise probes.
        ctx.bar.set_message("wake-ups of idle CPUs");
        wake_ups(&mut host, &mut ctx.notices, &opts.stop);
        ctx.bar.set_message("the host's stalls of each CPU");
        stalls(&mut host, &mut ctx.notices, &opts.stop);
        // The deferring modes poll from a NAPI hrtimer: what its expiry costs each CPU
        // (on a VM, exits to the hypervisor) is what the twin charges it
        // (docs/sim.md, "A timer's expiry on a virtual machine").
        ctx.bar.set_message("what a timer's expiry costs each CPU");
        timers(&mut host, &mut ctx.notices, &opts.stop);
    }
    if let Some(why) = idle_vcpus_halt_at_once(&host) {
        notice(&mut ctx.notices, "idle vCPUs", why);
    }
    if !opts.observe {
        notice(
            &mut ctx.notices,
            "DUT observation",
            "observation of the DUT namespace was turned off (--no-observe): points carry no Observation",
        );
    }
    let start = RunStart {
        run_id: run_id.clone(),
        kind: RunKind::Lab,
        scenario_name: scenario.name.clone(),
        scenario_toml: opts.scenario_text.clone(),
        started_unix_ms: started,
    };
    let done = record::each_configuration(&configs, &opts.stop, |cfg| {
        ctx.bar.set_message(cfg.name.clone());
        match scenario.topology.kind {
            scenario::TopologyKind::Server => {
                crate::server_runner::run_configuration(&mut ctx, &run_id, cfg)
            }
            scenario::TopologyKind::Vpn => {
                crate::vpn_runner::run_configuration(&mut ctx, &run_id, cfg)
            }
            scenario::TopologyKind::Router
            | scenario::TopologyKind::Ap
            | scenario::TopologyKind::ManyNapi => {
                crate::packet_runner::run_configuration(&mut ctx, &run_id, cfg, per_config)
            }
        }
        .map_err(|e| e.context(format!("configuration {}", cfg.name)))
    });
    if !host.speed.is_empty() {
        ctx.bar.set_message("the host's speed");
        host_speed(&mut host, &mut ctx.notices, "run end", &opts.stop);
    }
    ctx.bar.finish_and_clear();
    let error = done.error;
    let record = start.finish(now_ms(), host, done.results, done.interrupted, ctx.notices);
    let dir = opts.out_dir.join(&run_id);
    let path = dir.join("run.json");
    if opts.write_record || error.is_some() {
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        std::fs::write(&path, serde_json::to_string_pretty(&record)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    if let Some(e) = error {
        return Err(e.context(format!(
            "the run stopped; its finished points are in {}",
            path.display()
        )));
    }
    Ok(RunOutcome { record, path })
}

/// Idle windows at the run's start, before anything is built: what the machine does
/// on its own (steal, other processes), so that the limits a trial is marked by sit
/// above it (the steal of busy and of woken CPUs is added from the probes after).
/// About 2 s; a stop request ends it early with what was read.
fn machine_noise(ncpus: u32, stop: &std::sync::atomic::AtomicBool) -> crate::disturbance::Limits {
    const WINDOWS: usize = 5;
    const WINDOW: std::time::Duration = std::time::Duration::from_millis(400);
    let cpus: Vec<u32> = (0..ncpus).collect();
    let mut snapshots = vec![crate::disturbance::snapshot(Path::new("/"))];
    for _ in 0..WINDOWS {
        if stop.load(std::sync::atomic::Ordering::Relaxed) {
            break;
        }
        std::thread::sleep(WINDOW);
        snapshots.push(crate::disturbance::snapshot(Path::new("/")));
    }
    crate::disturbance::Limits::from_idle_windows(&snapshots, &cpus)
}

/// `limits` with the steal `cpus` showed while `probe` ran ([`Limits::with_steal_while`]),
/// when it ran (it says whether it did).
fn steal_while(
    limits: crate::disturbance::Limits,
    what: &str,
    cpus: &[u32],
    probe: impl FnOnce() -> bool,
) -> crate::disturbance::Limits {
    let from = crate::disturbance::steal_snapshot(Path::new("/"));
    if !probe() {
        return limits;
    }
    let to = crate::disturbance::steal_snapshot(Path::new("/"));
    limits.with_steal_while(what, &from, &to, cpus)
}

/// The same fixed work timed on every CPU at once for [`HOST_SPEED_SAMPLES`] samples
/// (docs/lab.md, "Host speed"): how steadily the CPUs ran, which bounds how steady the
/// run's trials can be. Skipped when a stop was asked for; a failure is a notice.
fn host_speed(
    host: &mut napilab_core::HostFacts,
    notices: &mut Vec<napilab_core::Notice>,
    when: &str,
    stop: &std::sync::atomic::AtomicBool,
) {
    const SAMPLE: std::time::Duration = std::time::Duration::from_millis(200);
    if stop.load(std::sync::atomic::Ordering::Relaxed) {
        return;
    }
    for timed in napilab_probe::host_speed::measure_all(&host.cpus, SAMPLE, HOST_SPEED_SAMPLES) {
        match timed {
            Ok(mut speed) => {
                speed.when = when.to_string();
                notice(notices, "host speed", speed.summary());
                host.speed.push(speed);
            }
            Err(e) => notice(notices, "host speed", format!("{when}: {e}")),
        }
    }
}

/// How long a thread woken onto each idle CPU waits to run, at the run's start
/// (napilab-probe `wake_up_latency`, about 0.4 s per CPU): `napilab tune predict --from
/// run.json` draws a NAPI kthread's wake-ups from it, whose rare long ones on a halting
/// vCPU set how much a threaded DUT loses (docs/lab.md, "Wake-ups"). Skipped when a
/// stop was asked for; a CPU the probe fails on is a notice.
fn wake_ups(
    host: &mut napilab_core::HostFacts,
    notices: &mut Vec<napilab_core::Notice>,
    stop: &std::sync::atomic::AtomicBool,
) {
    if stop.load(std::sync::atomic::Ordering::Relaxed) {
        return;
    }
    let probed = napilab_probe::wake_up_latency::measure_tail_each(&host.cpus);
    // One notice per CPU: notices are kept once per heading.
    for (cpu, probed) in host.cpus.clone().into_iter().zip(probed) {
        let what = format!("wake-ups of CPU {cpu}");
        match probed {
            Ok(w) => {
                notice(notices, what, w.summary());
                host.wake_up.push(w);
            }
            Err(e) => notice(notices, what, e.to_string()),
        }
    }
}

/// How long the stall probe spins on every CPU at once at a server run's start, in
/// pieces of [`STALL_PIECE`] (a stop is noticed between them): on the project's VM the
/// host took the generator's CPU for 2-10 ms about once a second (2026-11-29, docs/lab.md
/// "Host stalls"), so a few seconds hold a few of those.
const STALL_PROBE: std::time::Duration = std::time::Duration::from_secs(8);
const STALL_PIECE: std::time::Duration = std::time::Duration::from_secs(1);

/// The host's stalls of each CPU (napilab-probe `stalls`), every CPU spun at once, so
/// that what the host runs cannot move to an idle one; a twin profile's `[[stalls]]`
/// replays them (docs/sim.md, "Host stalls"). Skipped when a stop was asked for; a CPU the probe
/// fails on is a notice.
fn stalls(
    host: &mut napilab_core::HostFacts,
    notices: &mut Vec<napilab_core::Notice>,
    stop: &std::sync::atomic::AtomicBool,
) {
    let cpus = host.cpus.clone();
    let mut merged: Vec<Option<napilab_core::CpuStalls>> = vec![None; cpus.len()];
    let mut failed: Vec<Option<String>> = vec![None; cpus.len()];
    let pieces = STALL_PROBE.as_secs_f64() / STALL_PIECE.as_secs_f64();
    for _ in 0..pieces.round() as usize {
        if stop.load(std::sync::atomic::Ordering::Relaxed) {
            return;
        }
        let results: Vec<_> = std::thread::scope(|s| {
            let handles: Vec<_> = cpus
                .iter()
                .map(|&cpu| s.spawn(move || napilab_probe::stalls::measure(cpu, STALL_PIECE)))
                .collect();
            handles.into_iter().map(|h| h.join()).collect()
        });
        for (k, r) in results.into_iter().enumerate() {
            match r {
                Ok(Ok(piece)) => {
                    merged[k] = Some(match &merged[k] {
                        Some(m) => m.merged(&piece),
                        None => piece,
                    });
                }
                Ok(Err(e)) => failed[k] = Some(e.to_string()),
                Err(_) => failed[k] = Some("the probe's thread panicked".into()),
            }
        }
    }
    for ((cpu, m), f) in cpus.iter().zip(merged).zip(failed) {
        let what = format!("stalls of CPU {cpu}");
        match (m, f) {
            (_, Some(why)) => notice(notices, what, why),
            (Some(m), None) => {
                notice(notices, what, m.summary());
                host.stalls.push(m);
            }
            (None, None) => {}
        }
    }
}

/// The period of the timer probe at a server run's start: the deferring profiles'
/// `gro-flush-timeout` (deferral, irq-suspend: 20 us).
const TIMER_PROBE_PERIOD: std::time::Duration = std::time::Duration::from_micros(20);

/// What a re-armed timer's expiry costs each CPU (napilab-probe
/// `timer_interrupt_cost`, one CPU after the other, about 0.35 s each); a twin profile's
/// `[[timer]]` charges it to every NAPI hrtimer expiry. Skipped when a stop was asked
/// for; a CPU the probe fails on is a notice.
fn timers(
    host: &mut napilab_core::HostFacts,
    notices: &mut Vec<napilab_core::Notice>,
    stop: &std::sync::atomic::AtomicBool,
) {
    if stop.load(std::sync::atomic::Ordering::Relaxed) {
        return;
    }
    let cpus = host.cpus.clone();
    let measured = napilab_probe::timer_interrupt_cost::measure_each(&cpus, TIMER_PROBE_PERIOD);
    for (cpu, m) in cpus.iter().zip(measured) {
        let what = format!("timer expiries of CPU {cpu}");
        match m {
            Ok(t) => {
                notice(
                    notices,
                    what,
                    format!(
                        "a {:.0} us timer re-armed as it fires cost a spinning thread {:.1} us per expiry ({:.0} expiries a second); programming the timer device {:.1} us",
                        t.period_ns / 1e3,
                        t.ns_per_expiry / 1e3,
                        t.expiries_per_s,
                        t.reprogram_ns / 1e3
                    ),
                );
                host.timer.push(t);
            }
            Err(e) => notice(notices, what, e.to_string()),
        }
    }
}

/// What a KVM guest whose idle vCPUs halt at once (cpuidle `haltpoll` with
/// `guest_halt_poll_ns` 0) does to a run, when the host is one: a DUT poller woken on
/// an idle vCPU waits for the hypervisor first (docs/kernel.md, "Idle vCPUs and
/// wake-ups"), so configurations whose DUT work runs on a CPU of its own lose packets
/// far below their capacity.
fn idle_vcpus_halt_at_once(host: &napilab_core::HostFacts) -> Option<String> {
    host.identity.as_ref()?.cpuidle.halts_at_once().then(|| {
        "this KVM guest's idle vCPUs halt at once (cpuidle haltpoll, guest_halt_poll_ns 0): a DUT poller woken on an idle vCPU (a NAPI kthread, RPS's backlog) waits for the hypervisor to run that vCPU again, so configurations whose DUT work has a CPU of its own lose packets at loads far below their capacity and their latency grows (on the project's VM, 2026-11-28, `make bench-halt-poll`: two-cpu/threaded lost up to 5.2% at 25-80% of capacity with it, up to 0.23% with the window at 200 us). The guest counts that wait as steal, so the trials' steal grows with their own wake-ups (docs/lab.md, \"Disturbed trials\"). To measure the DUT rather than the wake-ups: `make run HOST_PROFILE=vcpu-halt-poll`, or `napilab tune apply vcpu-halt-poll` before the run and `napilab tune revert` after".to_string()
    })
}

/// 200 ms samples at a run's start and end: 2 s each.
const HOST_SPEED_SAMPLES: usize = 10;

/// The lab namespaces of a run (`napilab lab clean` deletes them after a kill).
pub fn namespaces_of(run_id: &str) -> Vec<String> {
    netns::list_namespaces()
        .unwrap_or_default()
        .into_iter()
        .filter(|n| netns::run_id_of_ns(n) == Some(run_id))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(driver: Option<&str>, halt_poll_ns: Option<u64>) -> napilab_core::HostFacts {
        let mut identity = napilab_core::host_identity::HostIdentity::default();
        identity.cpuidle.driver = driver.map(str::to_string);
        identity.cpuidle.guest_halt_poll_ns = halt_poll_ns;
        napilab_core::HostFacts {
            identity: Some(identity),
            ..napilab_core::HostFacts::default()
        }
    }

    #[test]
    fn a_guest_whose_idle_vcpus_halt_at_once_is_named_with_the_remedy() {
        let why = idle_vcpus_halt_at_once(&host(Some("haltpoll"), Some(0))).expect("notice");
        assert!(why.contains("tune apply vcpu-halt-poll"), "{why}");
        for (driver, ns) in [
            (Some("haltpoll"), Some(200_000)),
            (Some("intel_idle"), None),
            (None, None),
        ] {
            assert_eq!(
                idle_vcpus_halt_at_once(&host(driver, ns)),
                None,
                "{driver:?} {ns:?}"
            );
        }
        assert_eq!(
            idle_vcpus_halt_at_once(&napilab_core::HostFacts::default()),
            None
        );
    }
}
