//! Calibrated disturbance limits still catch a real stall: the limits come from this
//! machine's own idle noise (as a lab run's start measures it), then a process outside
//! the lab takes 50 ms of a 100 ms window (a short search trial) on one CPU at
//! SCHED_FIFO priority (the injected stall), and the window is marked disturbed by
//! other processes on that CPU: above the limits however noisy the machine was (they
//! stop at `MOST_A_LIMIT_RISES_TO`, 25%), as a trial the stall took half of must be.
//! Needs root (SCHED_FIFO) and two CPUs; otherwise it prints why it is skipped.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use napilab_core::DisturbanceKind;
use napilab_lab::disturbance::{assess, snapshot, Limits, MOST_A_LIMIT_RISES_TO};

/// The idle windows the limits come from, as a lab run's start measures them.
const IDLE_WINDOW: Duration = Duration::from_millis(250);
/// The window the stall falls in.
const WINDOW: Duration = Duration::from_millis(100);
const STALL_MS: u32 = 50;

/// A SCHED_FIFO busy loop pinned to `cpu` that `timeout` stops (SIGSTOP) after
/// `STALL_MS`: stopped, not ended, so its CPU time is still in /proc when the window
/// closes (the CPU time of a process that exits inside a trial is not seen: docs/lab.md,
/// "Disturbed trials"). `timeout` runs at a higher SCHED_FIFO priority than the loop, so
/// it gets the CPU to stop it; the loop is `timeout`'s child, not this test's (the lab
/// counts its own children as lab). The child leads its own process group, which
/// [`end`] kills.
fn stall(cpu: u32) -> std::process::Child {
    use std::os::unix::process::CommandExt as _;
    let script = format!(
        "exec taskset -c {cpu} chrt -f 2 timeout -s STOP {}s chrt -f 1 sh -c 'while :; do :; done'",
        f64::from(STALL_MS) / 1000.0
    );
    Command::new("sh")
        .args(["-c", &script])
        .process_group(0)
        .spawn()
        .expect("sh runs the stall")
}

/// Kills the stall's process group and reaps its leader.
fn end(mut stall: std::process::Child) {
    let group = i32::try_from(stall.id()).expect("a pid fits an i32");
    // SAFETY: kill(2) with a negative pid signals the group the child leads.
    unsafe { libc::kill(-group, libc::SIGKILL) };
    let _ = stall.wait();
}

#[test]
fn an_injected_stall_is_caught_above_the_calibrated_limits() {
    if !napilab_testkit::root_or_skip(
        "an_injected_stall_is_caught_above_the_calibrated_limits",
        "a SCHED_FIFO stall needs root",
    ) {
        return;
    }
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    if cpus < 2 {
        println!("SKIPPED an_injected_stall_is_caught_above_the_calibrated_limits: needs two CPUs");
        return;
    }
    let cpu = 1u32;
    let mut idle = vec![snapshot(Path::new("/"))];
    for _ in 0..5 {
        std::thread::sleep(IDLE_WINDOW);
        idle.push(snapshot(Path::new("/")));
    }
    let limits = Limits::from_idle_windows(&idle, &[cpu]);
    assert!(
        limits.other_processes >= 0.05 && limits.other_processes <= MOST_A_LIMIT_RISES_TO,
        "{limits:?}"
    );
    assert!(limits.detail.contains("idle windows"), "{}", limits.detail);

    let before = snapshot(Path::new("/"));
    let hog = stall(cpu);
    std::thread::sleep(WINDOW);
    let after = snapshot(Path::new("/"));
    end(hog);
    let d = assess(&before, &after, &[cpu], &[], 0.0, false, &limits);
    assert!(
        d.marked_by.contains(&DisturbanceKind::OtherProcesses),
        "a {STALL_MS} ms stall in {WINDOW:?} on CPU {cpu} was not caught above {:.1}%: {d:?}",
        100.0 * limits.other_processes
    );
}
