//! What the machine took away from the lab during a trial: CPU steal (the hypervisor
//! ran another guest), processes outside the lab on the lab's CPUs, how long the lab's
//! threads waited for a CPU, and whether the generator fell behind. A trial with too
//! much of the first two or a stalled generator is marked disturbed, and the search
//! can repeat it (docs/lab.md, "Disturbed trials").
//!
//! Read from /proc around each trial: /proc/stat for steal, and every task's
//! /proc/<pid>/task/<tid>/{stat,schedstat} for CPU time, last CPU and run delay. The
//! CPU time of a task is attributed to the CPU it last ran on, an estimate that is
//! right for pinned tasks and for the short trials of a search.

use std::collections::HashMap;
use std::path::Path;
use std::time::Instant;

use napilab_core::scenario::{DutSettings, NapiContext};
use napilab_core::{Disturbance, DisturbanceKind, EngineStats, PointResult};
use napilab_probe::procfs::{parse_schedstat, parse_task_stat, read_stat};

/// Marks a trial disturbed above these, over what the machine does anyway (its
/// noise, measured at the start of a run: [`Limits`]).
pub const STEAL_LIMIT: f64 = 0.02;
pub const OTHER_PROCESSES_LIMIT: f64 = 0.05;
pub const GENERATOR_LATE_LIMIT: f64 = 0.001;

/// A limit never rises above this share, however noisy the start of the run was: a
/// machine busier than that all the time gives busy-machine figures, and its trials
/// say so.
pub const MOST_A_LIMIT_RISES_TO: f64 = 0.25;

/// The limits a run marks trials by: the fixed margins above over this machine's own
/// noise (docs/lab.md, "Disturbed trials").
#[derive(Clone, Debug, PartialEq)]
pub struct Limits {
    pub steal: f64,
    pub other_processes: f64,
    pub generator_late: f64,
    /// How the steal and other-process limits were set.
    pub machine: String,
    /// How the generator limit was set.
    pub generator: String,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            steal: STEAL_LIMIT,
            other_processes: OTHER_PROCESSES_LIMIT,
            generator_late: GENERATOR_LATE_LIMIT,
            machine: format!(
                "steal {:.0}%, other processes {:.0}% (fixed: the machine's noise not measured)",
                100.0 * STEAL_LIMIT,
                100.0 * OTHER_PROCESSES_LIMIT
            ),
            generator: format!(
                "generator late {:.1}% (fixed: its own lateness not measured)",
                100.0 * GENERATOR_LATE_LIMIT
            ),
        }
    }
}

/// The margin over a noise level, capped.
fn over_noise(noise: f64, margin: f64) -> f64 {
    (noise + margin).clamp(margin, MOST_A_LIMIT_RISES_TO.max(margin))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

impl Limits {
    /// Steal and other processes from `windows` (consecutive snapshots with the lab
    /// idle) on `cpus`: per window the largest share on any of them, and the limit
    /// is the median of those (what the machine does all the time, not one burst)
    /// plus the fixed margin.
    pub fn from_idle_windows(windows: &[Snapshot], cpus: &[u32]) -> Limits {
        let (mut steal, mut other) = (Vec::new(), Vec::new());
        for w in windows.windows(2) {
            let d = assess(
                &w[0],
                &w[1],
                cpus,
                &[],
                &GeneratorEvidence::default(),
                &Limits::default(),
            );
            steal.push(d.steal.iter().map(|(_, s)| *s).fold(0.0, f64::max));
            other.push(
                d.other_processes
                    .iter()
                    .map(|(_, s)| *s)
                    .fold(0.0, f64::max),
            );
        }
        if steal.is_empty() {
            return Limits::default();
        }
        let (n, steal, other) = (steal.len(), median(steal), median(other));
        let seconds = windows
            .last()
            .zip(windows.first())
            .map_or(0.0, |(l, f)| l.at.duration_since(f.at).as_secs_f64());
        let (steal_limit, other_limit) = (
            over_noise(steal, STEAL_LIMIT),
            over_noise(other, OTHER_PROCESSES_LIMIT),
        );
        Limits {
            steal: steal_limit,
            other_processes: other_limit,
            machine: format!(
                "the machine's own noise over {n} idle windows ({seconds:.1} s) at the run's start on CPUs {cpus:?}, median of each window's largest share: steal {:.2}%, other processes {:.2}%; limits steal {:.2}%, other processes {:.2}% (noise + {:.0}% / {:.0}%, at most {:.0}%)",
                100.0 * steal,
                100.0 * other,
                100.0 * steal_limit,
                100.0 * other_limit,
                100.0 * STEAL_LIMIT,
                100.0 * OTHER_PROCESSES_LIMIT,
                100.0 * MOST_A_LIMIT_RISES_TO,
            ),
            ..Limits::default()
        }
    }

    /// These limits with the steal of a window between `before` and `after` in which
    /// the lab's CPUs did `what` (the run start's probes: every CPU busy, and idle CPUs
    /// woken again and again). Idle windows see almost none of the steal a trial gets:
    /// the hypervisor takes nothing from a halted vCPU, but a vCPU woken from halt waits
    /// for a host CPU and that wait is counted as steal, so a guest's own wake-ups bring
    /// it (docs/lab.md, "Disturbed trials"). The steal limit sits the fixed margin above
    /// the largest of the shares measured (the largest share on any CPU, pooled over the
    /// window: /proc/stat counts steal in 1/USER_HZ ticks, too coarse for short windows).
    pub fn with_steal_while(
        &self,
        what: &str,
        before: &Snapshot,
        after: &Snapshot,
        cpus: &[u32],
    ) -> Limits {
        let share = steal_shares(before, after, cpus)
            .iter()
            .map(|(_, s)| *s)
            .fold(0.0, f64::max);
        let seconds = after.at.duration_since(before.at).as_secs_f64();
        let steal = self.steal.max(over_noise(share, STEAL_LIMIT));
        Limits {
            steal,
            machine: format!(
                "{}; steal while {what} ({seconds:.1} s): {:.2}%, steal limit now {:.2}%",
                self.machine,
                100.0 * share,
                100.0 * steal
            ),
            ..self.clone()
        }
    }

    /// How every limit was set, for the run's notices.
    pub fn detail(&self) -> String {
        format!("{}; {}", self.machine, self.generator)
    }

    /// These limits with the generator's own lateness, `late` (a share of
    /// departures, measured where the DUT does not hold it back: the capacity probe's
    /// first, lightest trial), under the fixed margin.
    pub fn with_generator_noise(&self, late: f64, measured_where: &str) -> Limits {
        let generator_late = over_noise(late, GENERATOR_LATE_LIMIT);
        Limits {
            generator_late,
            generator: format!(
                "generator late {:.3}% of departures {measured_where}, limit {:.3}% (+ {:.1}%, at most {:.0}%)",
                100.0 * late,
                100.0 * generator_late,
                100.0 * GENERATOR_LATE_LIMIT,
                100.0 * MOST_A_LIMIT_RISES_TO
            ),
            ..self.clone()
        }
    }
}

/// Who a task belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Owner {
    /// napilab itself and the processes it started (observers, `ip`).
    Lab,
    /// A kernel thread (NAPI kthreads, ksoftirqd, workers): the kernel's share of the
    /// lab's work, or of anything else; never counted as another process.
    Kernel,
    Other,
}

#[derive(Clone, Debug)]
struct TaskSample {
    comm: String,
    owner: Owner,
    /// utime + stime, USER_HZ ticks; for a process's main thread also the time of
    /// its children that ended and were waited for (cutime + cstime): a short-lived
    /// process is gone from /proc when the trial ends, its time is in its parent's.
    ticks: u64,
    cpu: Option<u32>,
    /// schedstat's second field: ns spent runnable, waiting for a CPU.
    run_delay_ns: u64,
    /// The process's parent, on its main thread.
    parent: Option<u32>,
}

/// /proc read before or after a trial.
#[derive(Clone, Debug)]
pub struct Snapshot {
    at: Instant,
    /// Per CPU: (steal, total) ticks.
    stat: Vec<(u32, u64, u64)>,
    tasks: HashMap<u32, TaskSample>,
}

/// /proc/stat alone (no tasks): enough for [`Limits::with_steal_while`], without the
/// walk over every task that [`snapshot`] makes.
pub fn steal_snapshot(root: &Path) -> Snapshot {
    let at = Instant::now();
    let stat = read_stat(root)
        .map(|s| {
            s.cpus
                .iter()
                .map(|(c, t)| (*c, t.steal, t.total()))
                .collect()
        })
        .unwrap_or_default();
    Snapshot {
        at,
        stat,
        tasks: HashMap::new(),
    }
}

/// Parent pid: the field after the state, after the last `)`.
fn ppid_of(stat: &str) -> Option<u32> {
    let (_, rest) = stat.rsplit_once(')')?;
    rest.split_whitespace().nth(1)?.parse().ok()
}

/// How long the host-speed probe runs after each search trial, on the trial's CPUs.
const SPEED_AFTER_TRIAL: std::time::Duration = std::time::Duration::from_millis(100);

/// The host-speed probe's ns per unit on each of `cpus`, timed at once right after a
/// trial (docs/lab.md, "Host speed"); CPUs it could not time are left out.
pub fn host_speed_after_trial(cpus: &[u32]) -> Vec<(u32, f64)> {
    napilab_probe::host_speed::measure_all(cpus, SPEED_AFTER_TRIAL, 1)
        .into_iter()
        .filter_map(Result::ok)
        .filter_map(|s| Some((s.cpu, *s.ns_per_unit.first()?)))
        .collect()
}

/// Reads /proc under `root`. Unreadable tasks (they exit all the time) are skipped.
pub fn snapshot(root: &Path) -> Snapshot {
    let Snapshot { at, stat, .. } = steal_snapshot(root);
    let me = std::process::id();
    let mut tasks = HashMap::new();
    let Ok(procs) = std::fs::read_dir(root.join("proc")) else {
        return Snapshot { at, stat, tasks };
    };
    for p in procs.flatten() {
        let Some(pid) = p.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(process_stat) = std::fs::read_to_string(p.path().join("stat")) else {
            continue;
        };
        let ppid = ppid_of(&process_stat);
        let owner = if pid == me || ppid == Some(me) {
            Owner::Lab
        } else if pid == 2 || ppid == Some(2) {
            Owner::Kernel
        } else {
            Owner::Other
        };
        let Ok(threads) = std::fs::read_dir(p.path().join("task")) else {
            continue;
        };
        for t in threads.flatten() {
            let Some(tid) = t.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
                continue;
            };
            let Ok(text) = std::fs::read_to_string(t.path().join("stat")) else {
                continue;
            };
            let Ok(ts) = parse_task_stat(&text) else {
                continue;
            };
            // A kernel without CONFIG_SCHEDSTATS has no schedstat: no run delay seen.
            let run_delay_ns = std::fs::read_to_string(t.path().join("schedstat"))
                .ok()
                .and_then(|s| parse_schedstat(&s, tid).ok())
                .map_or(0, |s| s.run_delay_ns);
            let reaped = if tid == pid {
                ts.reaped_children_ticks
            } else {
                0
            };
            tasks.insert(
                tid,
                TaskSample {
                    comm: ts.comm,
                    owner,
                    ticks: ts.utime + ts.stime + reaped,
                    cpu: ts.processor,
                    run_delay_ns,
                    parent: if tid == pid { ppid } else { None },
                },
            );
        }
    }
    Snapshot { at, stat, tasks }
}

/// Share of departures the generator sent late or skipped, from its EngineStats.
pub fn generator_late(generator: &EngineStats, sent: u64) -> f64 {
    let counter = |name: &str| {
        generator
            .counters
            .iter()
            .find(|(k, _)| k == name)
            .map_or(0, |(_, v)| *v)
    };
    let late = counter("late_departures") + counter("skipped_behind_schedule");
    late as f64 / (sent + counter("skipped_behind_schedule")).max(1) as f64
}

/// A generator that fell short of a load below this share of the highest rate it
/// offered before in the configuration was stalled (when its CPU is its own).
pub const STALL_SHARE: f64 = 0.9;

/// What the generator did in a trial, as far as it can mark the trial disturbed.
#[derive(Clone, Copy, Debug, Default)]
pub struct GeneratorEvidence {
    /// Share of departures sent late or skipped behind the schedule.
    pub late: f64,
    /// It offered less than the load ([`PointResult::generator_short`]).
    pub short: bool,
    pub requested_pps: f64,
    pub offered_pps: f64,
    /// The highest rate the generator offered before in this configuration.
    pub reached_before: f64,
    /// The generator's CPUs do nothing of the DUT's or the sink's work
    /// ([`generator_shares_cpu`] is `None`). Only then are its lateness and shortfall
    /// evidence of a stall; on a shared CPU they are that work's load.
    pub alone: bool,
}

impl GeneratorEvidence {
    pub fn of(point: &PointResult, reached_before: f64, alone: bool) -> GeneratorEvidence {
        GeneratorEvidence {
            late: point_lateness(point),
            short: point.generator_short(),
            requested_pps: point.requested_pps,
            offered_pps: point.offered_pps,
            reached_before,
            alone,
        }
    }
}

/// Why the generator's CPUs also do the DUT's or the sink's work, if they do. veth
/// polls the receiver's NAPI instance in the sender's NET_RX softirq (docs/kernel.md,
/// "veth"), so a DUT ingress in softirq mode always runs on the generator's CPU; a NAPI
/// kthread or RPS on one of its CPUs, an unpinned kthread (the scheduler may put it
/// there) or the sink on one of them share it too. The generator's lateness and
/// shortfall are then the load of that work on its CPU, a result like the DUT's loss,
/// not a disturbance.
pub fn generator_shares_cpu(s: &DutSettings) -> Option<String> {
    let on_generator = |cpus: &[u32]| cpus.iter().any(|c| s.generator_cpus.contains(c));
    let mut why = Vec::new();
    match s.napi {
        NapiContext::Softirq => why.push(
            "the DUT's ingress is polled in the generator's softirq (veth polls on the sending CPU)"
                .to_string(),
        ),
        NapiContext::Threaded if s.napi_cpus.is_empty() => {
            why.push("the DUT's NAPI kthread is not pinned (it may run there)".to_string())
        }
        NapiContext::Threaded if on_generator(&s.napi_cpus) => {
            why.push(format!("the DUT's NAPI kthread is pinned to CPUs {:?}", s.napi_cpus))
        }
        NapiContext::Threaded => {}
    }
    if on_generator(&s.rps_cpus) {
        why.push(format!("RPS steers to CPUs {:?}", s.rps_cpus));
    }
    if on_generator(&s.sink_cpus) {
        why.push(format!("the sink runs on CPUs {:?}", s.sink_cpus));
    }
    (!why.is_empty()).then(|| {
        format!(
            "the generator's CPUs {:?} also do other work of the lab: {}",
            s.generator_cpus,
            why.join("; ")
        )
    })
}

/// Share of a measured point's departures its generator sent late or skipped.
pub fn point_lateness(point: &PointResult) -> f64 {
    let sent = point.classes.iter().map(|c| c.sent).sum();
    generator_late(&point.generator, sent)
}

/// Per CPU of `cpus`, the share of its time between two snapshots the hypervisor took
/// (/proc/stat steal over all of the CPU's time).
fn steal_shares(before: &Snapshot, after: &Snapshot, cpus: &[u32]) -> Vec<(u32, f64)> {
    let mut out = Vec::new();
    for &cpu in cpus {
        let find = |s: &Snapshot| s.stat.iter().find(|(c, _, _)| *c == cpu).copied();
        if let (Some((_, s0, t0)), Some((_, s1, t1))) = (find(before), find(after)) {
            let total = t1.saturating_sub(t0);
            if total > 0 {
                out.push((cpu, s1.saturating_sub(s0) as f64 / total as f64));
            }
        }
    }
    out
}

/// What happened between two snapshots on the lab's `cpus`; `lab_threads` says which
/// kernel threads' run delay to record (by command-name prefix, e.g. `napi/`,
/// `ksoftirqd/`). `generator`: what the generator did; when its CPU is its own, late
/// departures mark the trial unless it fell short of the load (then lateness is
/// saturation, the load is beyond it), and falling short of a load well below a rate
/// it reached before ([`STALL_SHARE`]) marks it as stalled. `limits`: above what a
/// share marks it.
pub fn assess(
    before: &Snapshot,
    after: &Snapshot,
    cpus: &[u32],
    lab_threads: &[&str],
    generator: &GeneratorEvidence,
    limits: &Limits,
) -> Disturbance {
    let wall_s = after.at.duration_since(before.at).as_secs_f64().max(1e-3);
    let hz = f64::from(napilab_probe::kernel::user_hz());
    let mut d = Disturbance {
        generator_late: generator.late,
        ..Disturbance::default()
    };
    d.steal = steal_shares(before, after, cpus);
    let mut other: HashMap<u32, f64> = cpus.iter().map(|c| (*c, 0.0)).collect();
    // A process that ended inside the trial left its whole time in its parent's
    // reaped-children time; what it had used before the trial is taken off again,
    // where the parent's time is counted.
    for (tid, b) in &before.tasks {
        if b.owner != Owner::Other || after.tasks.contains_key(tid) {
            continue;
        }
        let parent_cpu = b
            .parent
            .and_then(|p| after.tasks.get(&p))
            .and_then(|p| p.cpu);
        if let Some(share) = parent_cpu.and_then(|c| other.get_mut(&c)) {
            *share -= b.ticks as f64 / hz / wall_s;
        }
    }
    let mut delays: Vec<(String, f64)> = Vec::new();
    for (tid, a) in &after.tasks {
        let b = before.tasks.get(tid);
        let ticks = a.ticks.saturating_sub(b.map_or(0, |b| b.ticks));
        if a.owner == Owner::Other {
            if let Some(share) = a.cpu.and_then(|c| other.get_mut(&c)) {
                *share += ticks as f64 / hz / wall_s;
            }
        }
        let is_lab_kthread =
            a.owner == Owner::Kernel && lab_threads.iter().any(|p| a.comm.starts_with(p));
        let is_engine = a.owner == Owner::Lab && a.comm.starts_with("napilab");
        if (is_lab_kthread || is_engine) && a.cpu.is_some_and(|c| cpus.contains(&c)) {
            let delay = a
                .run_delay_ns
                .saturating_sub(b.map_or(0, |b| b.run_delay_ns)) as f64
                / 1e9
                / wall_s;
            if delay > 0.0005 {
                delays.push((format!("{} ({tid})", a.comm), delay));
            }
        }
    }
    delays.sort_by(|x, y| y.1.total_cmp(&x.1));
    delays.truncate(8);
    d.run_delay = delays;
    // Attribution by last CPU can put a multi-threaded process's time of both CPUs on
    // one: a CPU cannot lose more than all of itself.
    let mut other: Vec<(u32, f64)> = other
        .into_iter()
        .map(|(c, s)| (c, s.clamp(0.0, 1.0)))
        .collect();
    other.sort_by_key(|(c, _)| *c);
    d.other_processes = other;
    for (cpu, s) in &d.steal {
        if *s > limits.steal {
            mark(&mut d.marked_by, DisturbanceKind::Steal);
            d.reasons.push(format!(
                "CPU {cpu}: steal {:.1}% of the trial (limit {:.1}%)",
                s * 100.0,
                limits.steal * 100.0
            ));
        }
    }
    for (cpu, s) in &d.other_processes {
        if *s > limits.other_processes {
            mark(&mut d.marked_by, DisturbanceKind::OtherProcesses);
            d.reasons.push(format!(
                "CPU {cpu}: other processes used {:.1}% (limit {:.1}%)",
                s * 100.0,
                limits.other_processes * 100.0
            ));
        }
    }
    if generator.alone && generator.late > limits.generator_late && !generator.short {
        mark(&mut d.marked_by, DisturbanceKind::GeneratorLate);
        d.reasons.push(format!(
            "generator late or skipped on {:.2}% of departures (limit {:.2}%)",
            generator.late * 100.0,
            limits.generator_late * 100.0
        ));
    }
    if generator.alone
        && generator.short
        && generator.requested_pps < STALL_SHARE * generator.reached_before
    {
        mark(&mut d.marked_by, DisturbanceKind::GeneratorStalled);
        d.reasons.push(format!(
            "generator offered {:.0} of {:.0} pkt/s although it reached {:.0} before: stalled",
            generator.offered_pps, generator.requested_pps, generator.reached_before
        ));
    }
    d.disturbed = !d.reasons.is_empty();
    d
}

/// Records `kind` once, however many CPUs it marked.
fn mark(marked_by: &mut Vec<DisturbanceKind>, kind: DisturbanceKind) {
    if !marked_by.contains(&kind) {
        marked_by.push(kind);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parent_pid_survives_odd_command_names() {
        assert_eq!(ppid_of("42 (a) b) c) S 7 42 42 0"), Some(7));
        assert_eq!(ppid_of("42 (kworker/0:1) I 2 0 0"), Some(2));
        assert_eq!(ppid_of("garbage"), None);
    }

    fn snap(steal: u64, total: u64, tasks: &[(u32, &str, Owner, u64, u32, u64)]) -> Snapshot {
        Snapshot {
            at: Instant::now(),
            stat: vec![(0, steal, total), (1, 0, total)],
            tasks: tasks
                .iter()
                .map(|&(tid, comm, owner, ticks, cpu, delay)| {
                    (
                        tid,
                        TaskSample {
                            comm: comm.into(),
                            owner,
                            ticks,
                            cpu: Some(cpu),
                            run_delay_ns: delay,
                            parent: None,
                        },
                    )
                })
                .collect(),
        }
    }

    #[test]
    fn steal_and_other_processes_mark_a_trial() {
        let mut before = snap(0, 1000, &[(10, "cc1", Owner::Other, 0, 0, 0)]);
        before.at -= std::time::Duration::from_secs(1);
        let hz = u64::from(napilab_probe::kernel::user_hz());
        let after = snap(
            50,
            1100,
            &[
                // A compiler took half of CPU 0.
                (10, "cc1", Owner::Other, hz / 2, 0, 0),
                (11, "napi/x-1", Owner::Kernel, hz, 0, 300_000_000),
            ],
        );
        let d = assess(
            &before,
            &after,
            &[0],
            &["napi/"],
            &GeneratorEvidence::default(),
            &Limits::default(),
        );
        assert!(d.disturbed);
        assert_eq!(d.reasons.len(), 2, "{d:?}");
        assert_eq!(
            d.marked_by,
            [DisturbanceKind::Steal, DisturbanceKind::OtherProcesses]
        );
        assert!((d.steal[0].1 - 0.5).abs() < 1e-9);
        assert!(
            d.other_processes[0].1 > 0.4 && d.other_processes[0].1 < 0.6,
            "{d:?}"
        );
        assert!(d.run_delay[0].0.starts_with("napi/x-1"));
        // The same on a CPU the lab does not use: not disturbed.
        let d = assess(
            &before,
            &after,
            &[1],
            &["napi/"],
            &GeneratorEvidence::default(),
            &Limits::default(),
        );
        assert!(!d.disturbed, "{d:?}");
        // A late generator on a CPU of its own marks it; a generator beyond its speed
        // does not, nor one whose CPU does the DUT's or the sink's work as well.
        let alone = |late: f64, offered: f64, reached_before: f64| GeneratorEvidence {
            late,
            short: offered < 99_000.0,
            requested_pps: 100_000.0,
            offered_pps: offered,
            reached_before,
            alone: true,
        };
        let judge = |g: GeneratorEvidence| {
            assess(&before, &after, &[1], &["napi/"], &g, &Limits::default())
        };
        let d = judge(alone(0.01, 100_000.0, 0.0));
        assert!(d.disturbed && d.reasons[0].contains("generator"));
        assert_eq!(d.marked_by, [DisturbanceKind::GeneratorLate]);
        let d = judge(alone(0.5, 50_000.0, 60_000.0));
        assert!(!d.disturbed, "{d:?}");
        assert_eq!(d.generator_late, 0.5);
        // Short of a load well below what it reached before: stalled.
        let d = judge(alone(0.0, 90_000.0, 200_000.0));
        assert_eq!(d.marked_by, [DisturbanceKind::GeneratorStalled], "{d:?}");
        // The same on a CPU it shares with the DUT: the DUT's load, recorded only.
        for g in [alone(0.01, 100_000.0, 0.0), alone(0.0, 90_000.0, 200_000.0)] {
            let d = judge(GeneratorEvidence { alone: false, ..g });
            assert!(!d.disturbed, "{d:?}");
        }
    }

    #[test]
    fn the_generator_shares_its_cpu_when_the_dut_or_the_sink_runs_there() {
        let mut base = napilab_core::scenario::DutPatch::default().resolve();
        base.generator_cpus = vec![0];
        base.sink_cpus = vec![1];
        base.napi = NapiContext::Threaded;
        base.napi_cpus = vec![1];
        base.rps_cpus = vec![];
        assert_eq!(generator_shares_cpu(&base), None);
        let with = |change: &dyn Fn(&mut DutSettings)| {
            let mut s = base.clone();
            change(&mut s);
            s
        };
        let shared = [
            with(&|s| s.napi = NapiContext::Softirq),
            with(&|s| s.napi_cpus = vec![]),
            with(&|s| s.napi_cpus = vec![0]),
            with(&|s| s.rps_cpus = vec![0]),
            with(&|s| s.sink_cpus = vec![0]),
        ];
        for s in shared {
            let why = generator_shares_cpu(&s).expect("shared");
            assert!(why.starts_with("the generator's CPUs [0]"), "{why}");
        }
    }

    /// Snapshots one second apart in which a process outside the lab used `shares[i]`
    /// of CPU 0 in window i.
    fn windows_with_other_process(shares: &[f64]) -> Vec<Snapshot> {
        let hz = f64::from(napilab_probe::kernel::user_hz());
        let start = Instant::now() - std::time::Duration::from_secs(shares.len() as u64 + 1);
        let mut ticks = 0.0;
        let mut out = Vec::new();
        for i in 0..=shares.len() {
            if i > 0 {
                ticks += shares[i - 1] * hz;
            }
            let mut s = snap(
                0,
                1000 * i as u64,
                &[(10, "cron", Owner::Other, ticks.round() as u64, 0, 0)],
            );
            s.at = start + std::time::Duration::from_secs(i as u64);
            out.push(s);
        }
        out
    }

    #[test]
    fn limits_sit_the_margin_above_the_machines_steady_noise() {
        // 3% all the time and one 40% burst: the burst is not the machine's noise.
        let w = windows_with_other_process(&[0.03, 0.03, 0.40, 0.03, 0.03]);
        let l = Limits::from_idle_windows(&w, &[0]);
        assert!((l.other_processes - 0.08).abs() < 0.011, "{l:?}");
        assert!((l.steal - STEAL_LIMIT).abs() < 1e-9, "{l:?}");
        assert!(l.detail().contains("5 idle windows"), "{}", l.detail());
        // A trial with 10% of other processes is disturbed above these, 6% is not.
        let t = windows_with_other_process(&[0.10]);
        let d = assess(&t[0], &t[1], &[0], &[], &GeneratorEvidence::default(), &l);
        assert_eq!(d.marked_by, [DisturbanceKind::OtherProcesses], "{d:?}");
        let t = windows_with_other_process(&[0.06]);
        assert!(!assess(&t[0], &t[1], &[0], &[], &GeneratorEvidence::default(), &l).disturbed);
        // A machine busy all the time: the limit stops at the cap.
        let w = windows_with_other_process(&[0.6, 0.6, 0.6]);
        let l = Limits::from_idle_windows(&w, &[0]);
        assert!(
            (l.other_processes - MOST_A_LIMIT_RISES_TO).abs() < 1e-9,
            "{l:?}"
        );
        // No windows: the fixed limits.
        assert_eq!(Limits::from_idle_windows(&w[..1], &[0]), Limits::default());
    }

    /// Snapshots `seconds` apart in which CPU 0 lost `steal` of its time to the
    /// hypervisor (1,000 ticks of CPU time each way).
    fn stolen(steal: f64, seconds: u64) -> (Snapshot, Snapshot) {
        let mut before = snap(0, 1000, &[]);
        before.at -= std::time::Duration::from_secs(seconds);
        let after = snap((1000.0 * steal).round() as u64, 2000, &[]);
        (before, after)
    }

    #[test]
    fn the_steal_limit_sits_above_what_working_cpus_lose_not_idle_ones() {
        // Idle windows saw no steal (a halted vCPU is not stolen from); while its CPUs
        // were woken again and again, CPU 0 lost 6%.
        let idle = Limits::from_idle_windows(&windows_with_other_process(&[0.0, 0.0, 0.0]), &[0]);
        assert!((idle.steal - STEAL_LIMIT).abs() < 1e-9, "{idle:?}");
        let (b, a) = stolen(0.06, 2);
        let l = idle.with_steal_while("waking idle CPUs", &b, &a, &[0, 1]);
        assert!((l.steal - 0.08).abs() < 1e-9, "{l:?}");
        assert!(
            l.detail()
                .contains("waking idle CPUs (2.0 s): 6.00%, steal limit now 8.00%"),
            "{}",
            l.detail()
        );
        assert_eq!(l.other_processes, idle.other_processes);
        // A trial that loses what this machine's CPUs lose to their own work is not
        // disturbed; one that loses more is.
        let (b, a) = stolen(0.05, 1);
        assert!(!assess(&b, &a, &[0], &[], &GeneratorEvidence::default(), &l).disturbed);
        let (b, a) = stolen(0.10, 1);
        let d = assess(&b, &a, &[0], &[], &GeneratorEvidence::default(), &l);
        assert_eq!(d.marked_by, [DisturbanceKind::Steal], "{d:?}");
        // A second window's lower steal leaves the limit; steal below the idle
        // windows' limit leaves it; a host stealing half of a CPU stops at the cap.
        let (b, a) = stolen(0.01, 2);
        assert!((l.with_steal_while("busy", &b, &a, &[0]).steal - 0.08).abs() < 1e-9);
        let (b, a) = stolen(0.0, 2);
        assert!((idle.with_steal_while("busy", &b, &a, &[0]).steal - idle.steal).abs() < 1e-9);
        let (b, a) = stolen(0.5, 2);
        let capped = idle.with_steal_while("busy", &b, &a, &[0]).steal;
        assert!((capped - MOST_A_LIMIT_RISES_TO).abs() < 1e-9);
    }

    #[test]
    fn the_generator_limit_sits_above_its_own_lateness() {
        let l = Limits::default().with_generator_noise(0.0018, "in a light trial");
        assert!((l.generator_late - 0.0028).abs() < 1e-12, "{l:?}");
        assert!(l.detail().contains("0.180%") && l.detail().contains("in a light trial"));
        let l = Limits::default().with_generator_noise(0.0, "x");
        assert!((l.generator_late - GENERATOR_LATE_LIMIT).abs() < 1e-12);
    }

    #[test]
    fn a_process_that_ends_inside_the_trial_counts_once_through_its_parent() {
        let hz = u64::from(napilab_probe::kernel::user_hz());
        // A shell (20) whose child (21) had used 2 s before the trial, then 0.3 s more
        // in it, and ended: the shell's reaped-children time jumps by the 2.3 s.
        let mut before = snap(
            0,
            0,
            &[
                (20, "sh", Owner::Other, hz, 0, 0),
                (21, "cc1", Owner::Other, 2 * hz, 0, 0),
            ],
        );
        before.tasks.get_mut(&21).expect("child").parent = Some(20);
        before.at -= std::time::Duration::from_secs(1);
        let after = snap(
            0,
            100,
            &[(20, "sh", Owner::Other, hz + 2 * hz + 3 * hz / 10, 0, 0)],
        );
        let d = assess(
            &before,
            &after,
            &[0],
            &[],
            &GeneratorEvidence::default(),
            &Limits::default(),
        );
        let share = d.other_processes[0].1;
        assert!((share - 0.3).abs() < 0.02, "{d:?}");
        assert!(d.disturbed);
    }

    #[test]
    fn this_host_can_be_read() {
        let s = snapshot(Path::new("/"));
        assert!(!s.stat.is_empty(), "no CPUs in /proc/stat");
        assert!(
            s.tasks.values().any(|t| t.owner == Owner::Lab),
            "this test's own process"
        );
    }

    #[test]
    fn generator_lateness_from_either_back_end() {
        let paced = EngineStats {
            counters: vec![("late_departures".into(), 10)],
            ..EngineStats::default()
        };
        assert!((generator_late(&paced, 1000) - 0.01).abs() < 1e-12);
        let lr = EngineStats {
            counters: vec![("skipped_behind_schedule".into(), 100)],
            ..EngineStats::default()
        };
        assert!((generator_late(&lr, 900) - 0.1).abs() < 1e-12);
    }
}
