//! Calibrated disturbance limits still catch a real stall: the limits come from this
//! machine's own idle noise (as a lab run's start measures it), then a process outside
//! the lab takes 100 ms of a window of 120 ms and the snapshots' own time (a short
//! search trial) on one CPU at SCHED_FIFO priority (the injected stall), and the window
//! is marked disturbed by other processes on that CPU: above the limits however noisy
//! the machine was (they stop at `MOST_A_LIMIT_RISES_TO`, 25%), as a trial that the
//! stall took most of must be. Both when the stalling process is still there at the
//! window's end and when it ended inside it (its time then is its parent's).
//! Needs root (SCHED_FIFO) and two CPUs; otherwise it prints why it is skipped.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use napilab_core::DisturbanceKind;
use napilab_lab::disturbance::{assess, snapshot, Limits, MOST_A_LIMIT_RISES_TO};

/// The idle windows the limits come from, as a lab run's start measures them.
const IDLE_WINDOW: Duration = Duration::from_millis(250);
/// The window the stall falls in, besides the snapshots' own time (tens of ms on a
/// busy machine).
const WINDOW: Duration = Duration::from_millis(120);
const STALL_MS: u32 = 100;

/// How the injected stall ends.
#[derive(Clone, Copy, Debug)]
enum Stall {
    /// Stopped (SIGSTOP) after `STALL_MS`: still in /proc when the window closes.
    Stopped,
    /// Ended after `STALL_MS` and waited for by its parent, a shell outside the lab
    /// that lives on: gone from /proc, its time in the shell's reaped-children time.
    Ended,
}

/// A SCHED_FIFO busy loop pinned to `cpu`, ended by `timeout` after `STALL_MS` as
/// `how` says. `timeout` runs at a higher SCHED_FIFO priority than the loop, so it gets
/// the CPU to end it; the loop runs under a shell that is not this test's child (the
/// lab counts its own children as lab). The child leads its own process group, which
/// [`end`] kills.
fn stall(cpu: u32, how: Stall) -> std::process::Child {
    use std::os::unix::process::CommandExt as _;
    let seconds = f64::from(STALL_MS) / 1000.0;
    let stalled = format!(
        "timeout {}{seconds}s chrt -f 1 sh -c 'while :; do :; done'",
        match how {
            Stall::Stopped => "-s STOP ",
            Stall::Ended => "",
        }
    );
    // The inner shell (a grandchild) runs the stall and stays alive after it. All of
    // it runs pinned to `cpu` at SCHED_FIFO priority 2 from the start, so that on a
    // busy machine the chain of shells starts at once and the reaping shell's last CPU
    // is `cpu`.
    let script = format!("sh -c \"{stalled}; sleep 10\" & wait");
    Command::new("taskset")
        .args([
            "-c",
            &cpu.to_string(),
            "chrt",
            "-f",
            "2",
            "sh",
            "-c",
            &script,
        ])
        .process_group(0)
        .spawn()
        .expect("taskset, chrt and sh run the stall")
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
    caught(
        "an_injected_stall_is_caught_above_the_calibrated_limits",
        Stall::Stopped,
    );
}

#[test]
fn a_stall_that_ends_inside_the_window_is_caught_through_its_parent() {
    caught(
        "a_stall_that_ends_inside_the_window_is_caught_through_its_parent",
        Stall::Ended,
    );
}

fn caught(test: &str, how: Stall) {
    if !napilab_testkit::root_or_skip(test, "a SCHED_FIFO stall needs root") {
        return;
    }
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    if cpus < 2 {
        println!("SKIPPED {test}: needs two CPUs");
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
    let hog = stall(cpu, how);
    std::thread::sleep(WINDOW);
    let after = snapshot(Path::new("/"));
    end(hog);
    let d = assess(&before, &after, &[cpu], &[], 0.0, false, &limits);
    assert!(
        d.marked_by.contains(&DisturbanceKind::OtherProcesses),
        "a {STALL_MS} ms stall ({how:?}) in {WINDOW:?} on CPU {cpu} was not caught above {:.1}%: {d:?}",
        100.0 * limits.other_processes
    );
}
