//! Calibrated disturbance limits still catch a real stall: the limits come from this
//! machine's own idle noise (as a lab run's start measures it), then a process outside
//! the lab takes most of a short window (a short search trial) on one CPU at SCHED_FIFO
//! priority (the injected stall), and the window is marked disturbed by other processes
//! on that CPU: above the limits however noisy the machine was (they stop at
//! `MOST_A_LIMIT_RISES_TO`, 25%). Both when the stalling process is still there at the
//! window's end and when it ended inside it (its time then is its parent's). Needs root
//! (SCHED_FIFO) and two CPUs; otherwise it prints why it is skipped.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use napilab_core::DisturbanceKind;
use napilab_lab::disturbance::{
    assess, snapshot, GeneratorEvidence, Limits, MOST_A_LIMIT_RISES_TO,
};

/// The idle windows the limits come from, as a lab run's start measures them.
const IDLE_WINDOW: Duration = Duration::from_millis(250);
/// The least stall. A window runs from the start of one /proc snapshot to the start
/// of the next, and a snapshot takes tens to hundreds of ms on a busy machine, so the
/// stall also lasts twice the first snapshot's time: it then takes most of the window.
const STALL: Duration = Duration::from_millis(100);

/// How the injected stall ends.
#[derive(Clone, Copy, Debug)]
enum Stall {
    /// Stopped (SIGSTOP): still in /proc when the window closes.
    Stopped,
    /// Ended and waited for by its parent, a shell outside the lab
    /// that lives on: gone from /proc, its time in the shell's reaped-children time.
    Ended,
}

/// A SCHED_FIFO busy loop pinned to `cpu`, ended by `timeout` after `length` as
/// `how` says. `timeout` runs at a higher SCHED_FIFO priority than the loop, so it gets
/// the CPU to end it; the loop runs under a shell that is not this test's child (the
/// lab counts its own children as lab). The child leads its own process group, which
/// [`end`] kills.
fn stall(cpu: u32, how: Stall, length: Duration) -> std::process::Child {
    use std::os::unix::process::CommandExt as _;
    let seconds = length.as_secs_f64();
    // --foreground: `timeout` signals the loop only and stays in this group (without
    // it, it moves to a group of its own, stops itself with the loop, and outlives
    // `end`).
    let stalled = format!(
        "timeout --foreground {}{seconds:.3}s chrt -f 1 sh -c 'while :; do :; done'",
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
    assert!(
        limits.detail().contains("idle windows"),
        "{}",
        limits.detail()
    );

    let reading = Instant::now();
    let before = snapshot(Path::new("/"));
    let length = STALL + 2 * reading.elapsed();
    let hog = stall(cpu, how, length);
    std::thread::sleep(length + Duration::from_millis(20));
    let after = snapshot(Path::new("/"));
    end(hog);
    let d = assess(
        &before,
        &after,
        &[cpu],
        &[],
        &GeneratorEvidence::default(),
        &limits,
    );
    assert!(
        d.marked_by.contains(&DisturbanceKind::OtherProcesses),
        "a {length:?} stall ({how:?}) on CPU {cpu} was not caught above {:.1}%: {d:?}",
        100.0 * limits.other_processes
    );
}
