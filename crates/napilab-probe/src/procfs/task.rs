//! Per-task files: `/proc/<pid>/stat`, the `Cpus_allowed_list` of `/proc/<pid>/status`,
//! and the scan for the kernel threads that process packets (`ksoftirqd/N`,
//! `napi/<dev>-<id>`).

use std::collections::HashMap;
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{parse_cpu_list, parse_dec, parse_dec_u32, parse_signed, read_text, ProcError};

/// The fields of `/proc/<pid>/stat` napilab uses.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskStat {
    pub pid: u32,
    /// Command name as printed between the parentheses (at most 15 bytes in the kernel).
    pub comm: String,
    /// `R`, `S`, `D`, `I`, ...
    pub state: char,
    /// User time, USER_HZ ticks.
    pub utime: u64,
    /// System time, USER_HZ ticks. Threaded NAPI polling is charged here.
    pub stime: u64,
    /// User and system time of the process's children that ended and were waited
    /// for (`cutime` + `cstime`, fields 16 and 17), USER_HZ ticks: where the CPU time of
    /// a short-lived child goes once it is gone from /proc.
    pub reaped_children_ticks: u64,
    /// Kernel priority: 20 + nice for normal tasks, -1 - rt_priority for RT ones.
    pub priority: i64,
    pub nice: i64,
    /// CPU the task last ran on (field 39).
    pub processor: Option<u32>,
    /// Field 40; 0 for non-RT tasks.
    pub rt_priority: Option<u32>,
    /// Scheduling policy (field 41), see [`policy_name`].
    pub policy: Option<u32>,
}

/// A kernel thread that processes packets.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KernelThread {
    pub pid: u32,
    /// `ksoftirqd/0`, `napi/eth0-8193` (cut at 15 bytes by the kernel, so long device
    /// names are truncated).
    pub comm: String,
}

/// Parses `/proc/<pid>/stat`.
///
/// The command name is in parentheses and may itself contain spaces and `)`, so the
/// fields are split at the *last* `)`. `processor`, `rt_priority` and `policy` are
/// `None` if the line ends before them.
pub fn parse_task_stat(text: &str) -> Result<TaskStat, ProcError> {
    const GENERIC: &str = "/proc/<pid>/stat";
    let (Some(open), Some(close)) = (text.find('('), text.rfind(')')) else {
        return Err(ProcError::parse(
            GENERIC,
            1,
            "expected '<pid> (<comm>) <state> ...'",
        ));
    };
    let pid_text = text.get(..open).unwrap_or_default().trim();
    let pid = parse_dec_u32(pid_text)
        .ok_or_else(|| ProcError::unexpected(GENERIC, 1, "a process id", pid_text))?;
    // A last ')' before the first '(' means this is not a stat line at all.
    let comm = text
        .get(open + 1..close)
        .ok_or_else(|| ProcError::parse(GENERIC, 1, "expected '(<comm>)' after the process id"))?;

    // Only the error path names the pid, so the common path allocates nothing for it.
    let file = || format!("/proc/{pid}/stat");
    let mut fields = text.get(close + 1..).unwrap_or_default().split_whitespace();
    let mut required = |skip: usize, what: &str| -> Result<&str, ProcError> {
        fields
            .nth(skip)
            .ok_or_else(|| ProcError::ended(&file(), 1, what))
    };
    // Fields are numbered as in proc(5); `state` is field 3.
    let state_tok = required(0, "the state (field 3)")?;
    let utime_tok = required(10, "utime (field 14)")?;
    let stime_tok = required(0, "stime (field 15)")?;
    let cutime_tok = required(0, "cutime (field 16)")?;
    let cstime_tok = required(0, "cstime (field 17)")?;
    let priority_tok = required(0, "priority (field 18)")?;
    let nice_tok = required(0, "nice (field 19)")?;
    let processor_tok = fields.nth(19);
    let rt_priority_tok = fields.next();
    let policy_tok = fields.next();

    let mut state_chars = state_tok.chars();
    let state = match (state_chars.next(), state_chars.next()) {
        (Some(c), None) => c,
        _ => {
            return Err(ProcError::unexpected(
                &file(),
                1,
                "a one-letter state",
                state_tok,
            ))
        }
    };
    let unsigned = |tok: &str, what: &str| {
        parse_dec(tok).ok_or_else(|| ProcError::unexpected(&file(), 1, what, tok))
    };
    let signed = |tok: &str, what: &str| {
        parse_signed(tok).ok_or_else(|| ProcError::unexpected(&file(), 1, what, tok))
    };
    let optional_u32 = |tok: Option<&str>, what: &str| {
        tok.map(|t| parse_dec_u32(t).ok_or_else(|| ProcError::unexpected(&file(), 1, what, t)))
            .transpose()
    };
    Ok(TaskStat {
        pid,
        comm: comm.to_owned(),
        state,
        utime: unsigned(utime_tok, "utime ticks")?,
        stime: unsigned(stime_tok, "stime ticks")?,
        // Signed in the kernel's format (clock_t), never negative in practice.
        reaped_children_ticks: signed(cutime_tok, "cutime ticks")?.max(0).unsigned_abs()
            + signed(cstime_tok, "cstime ticks")?.max(0).unsigned_abs(),
        priority: signed(priority_tok, "a priority")?,
        nice: signed(nice_tok, "a nice value")?,
        processor: optional_u32(processor_tok, "a CPU number")?,
        rt_priority: optional_u32(rt_priority_tok, "an RT priority")?,
        policy: optional_u32(policy_tok, "a scheduling policy")?,
    })
}

/// Reads and parses `<root>/proc/<pid>/stat`; errors name the real pid.
pub fn read_task_stat(root: &Path, pid: u32) -> Result<TaskStat, ProcError> {
    parse_task_stat(&read_text(root, &format!("proc/{pid}/stat"))?)
}

/// The three numbers of `/proc/<pid>/schedstat` (fs/proc/base.c, `proc_pid_schedstat`):
/// time on a CPU, time waiting on a run queue (both ns) and the number of times the task
/// was given a CPU. A kernel that keeps no scheduler statistics prints `0 0 0`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Schedstat {
    pub on_cpu_ns: u64,
    pub run_delay_ns: u64,
    pub runs: u64,
}

/// Parses `/proc/<pid>/schedstat` (`pid` only names the file in errors).
pub fn parse_schedstat(text: &str, pid: u32) -> Result<Schedstat, ProcError> {
    let file = || format!("/proc/{pid}/schedstat");
    let mut fields = text.split_whitespace();
    let mut next = |what: &str| -> Result<u64, ProcError> {
        let tok = fields
            .next()
            .ok_or_else(|| ProcError::ended(&file(), 1, what))?;
        parse_dec(tok).ok_or_else(|| ProcError::unexpected(&file(), 1, what, tok))
    };
    Ok(Schedstat {
        on_cpu_ns: next("the time on a CPU in ns")?,
        run_delay_ns: next("the run delay in ns")?,
        runs: next("the number of runs")?,
    })
}

/// Name of a scheduling policy number (`SCHED_*` in include/uapi/linux/sched.h).
pub fn policy_name(policy: u32) -> &'static str {
    match policy {
        0 => "SCHED_OTHER",
        1 => "SCHED_FIFO",
        2 => "SCHED_RR",
        3 => "SCHED_BATCH",
        5 => "SCHED_IDLE",
        6 => "SCHED_DEADLINE",
        7 => "SCHED_EXT",
        _ => "unknown",
    }
}

/// CPUs of the `Cpus_allowed_list:` line of `/proc/<pid>/status`; `None` if the line
/// is absent or not a CPU list.
pub fn parse_status_cpus_allowed(text: &str) -> Option<Vec<u32>> {
    text.lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .and_then(parse_cpu_list)
}

/// Reads `<root>/proc/<pid>/status` and returns its allowed CPUs (`Ok(None)` if the
/// file has no usable `Cpus_allowed_list`).
pub fn read_task_cpus_allowed(root: &Path, pid: u32) -> Result<Option<Vec<u32>>, ProcError> {
    Ok(parse_status_cpus_allowed(&read_text(
        root,
        &format!("proc/{pid}/status"),
    )?))
}

/// Finds the packet-processing kernel threads: every `<root>/proc/<pid>` whose `comm`
/// starts with `ksoftirqd/` or `napi/`, sorted by pid.
///
/// Reads only `comm` (one small read per process) and reuses one buffer and one path, as
/// this scans every process on the host. Processes that exit during the scan, or whose
/// `comm` cannot be read, are skipped silently. A missing `<root>/proc` is an error.
pub fn list_packet_threads(root: &Path) -> Result<Vec<KernelThread>, ProcError> {
    let mut path = root.join("proc");
    let entries = match std::fs::read_dir(&path) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(ProcError::Missing { path })
        }
        Err(source) => return Err(ProcError::Io { path, source }),
    };
    let mut threads = Vec::new();
    let mut buf = Vec::with_capacity(32);
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(parse_dec_u32) else {
            continue;
        };
        if let Some(Some(comm)) = packet_thread_comm(&mut path, pid, &mut buf) {
            threads.push(KernelThread { pid, comm });
        }
    }
    threads.sort_unstable_by_key(|t| t.pid);
    Ok(threads)
}

/// Reads `<proc>/<pid>/comm` (`proc` is the `<root>/proc` path, restored on return):
/// `Some(Some(comm))` for a packet thread, `Some(None)` for any other task, `None` when
/// it cannot be read (the task exited).
fn packet_thread_comm(proc: &mut PathBuf, pid: u32, buf: &mut Vec<u8>) -> Option<Option<String>> {
    const PREFIXES: [&[u8]; 2] = [b"ksoftirqd/", b"napi/"];
    proc.push(pid.to_string());
    proc.push("comm");
    buf.clear();
    let read = File::open(&*proc).and_then(|mut f| f.read_to_end(buf));
    proc.pop();
    proc.pop();
    read.ok()?;
    let comm = buf.strip_suffix(b"\n").unwrap_or(buf);
    Some(
        PREFIXES
            .iter()
            .any(|p| comm.starts_with(p))
            .then(|| String::from_utf8_lossy(comm).into_owned()),
    )
}

/// [`list_packet_threads`] for a sampler that asks again and again: only kernel
/// threads can be packet threads, and every kernel thread is a child of `kthreadd`
/// (pid 2), so one read of `/proc/2/task/2/children` lists the candidates; and a
/// thread seen in the previous scan keeps its name, so only pids handed out since then
/// (from the last pid of `/proc/loadavg`) have their `comm` read. Profiled, the full
/// scan (a `comm` read per process on the host) was the sampler's dearest part when
/// amortised over its 10-second period; this costs one read plus one per new kernel
/// thread. Kernels without `CONFIG_PROC_CHILDREN` (and fixture trees) get the full scan.
#[derive(Debug, Default)]
pub struct PacketThreadScan {
    /// Kernel threads of the last scan: pid -> comm if it is a packet thread.
    seen: HashMap<u32, Option<String>>,
    /// `/proc/loadavg`'s last pid at the last scan.
    last_pid: Option<u32>,
}

impl PacketThreadScan {
    /// The packet threads now, sorted by pid. `last_pid` is the last pid the kernel
    /// handed out (`/proc/loadavg`), `None` if unknown (then every `comm` is read).
    pub fn scan(
        &mut self,
        root: &Path,
        last_pid: Option<u32>,
    ) -> Result<Vec<KernelThread>, ProcError> {
        let previous_last_pid = std::mem::replace(&mut self.last_pid, last_pid);
        let Ok(children) = read_text(root, "proc/2/task/2/children") else {
            self.seen.clear();
            return list_packet_threads(root);
        };
        let mut proc = root.join("proc");
        let mut buf = Vec::with_capacity(32);
        let mut seen = HashMap::with_capacity(self.seen.len());
        let mut threads = Vec::new();
        for pid in children.split_ascii_whitespace().filter_map(parse_dec_u32) {
            let reused = match (previous_last_pid, last_pid) {
                (Some(from), Some(to)) => handed_out_between(pid, from, to),
                _ => true,
            };
            let known = if reused { None } else { self.seen.remove(&pid) };
            let Some(comm) = known.or_else(|| packet_thread_comm(&mut proc, pid, &mut buf)) else {
                continue;
            };
            if let Some(comm) = &comm {
                threads.push(KernelThread {
                    pid,
                    comm: comm.clone(),
                });
            }
            seen.insert(pid, comm);
        }
        self.seen = seen;
        threads.sort_unstable_by_key(|t| t.pid);
        Ok(threads)
    }
}

/// Whether `pid` may have been handed out after the last pid was `from` and up to its
/// being `to`: the kernel hands pids out in increasing order and wraps around at
/// `pid_max`. (A complete wrap between two scans would go unseen; that takes
/// `pid_max` (at least 32768) process creations within one rescan period.)
fn handed_out_between(pid: u32, from: u32, to: u32) -> bool {
    if from <= to {
        pid > from && pid <= to
    } else {
        pid > from || pid <= to
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fixture tree whose kthreadd has children `pids` named `comms`.
    fn kthreads(dir: &Path, pids: &[u32], comms: &[&str]) {
        let children: Vec<String> = pids.iter().map(u32::to_string).collect();
        let _ = std::fs::create_dir_all(dir.join("proc/2/task/2"));
        assert!(std::fs::write(dir.join("proc/2/task/2/children"), children.join(" ")).is_ok());
        for (pid, comm) in pids.iter().zip(comms) {
            let _ = std::fs::create_dir_all(dir.join(format!("proc/{pid}")));
            assert!(
                std::fs::write(dir.join(format!("proc/{pid}/comm")), format!("{comm}\n")).is_ok()
            );
        }
    }

    #[test]
    fn a_rescan_reads_only_the_kernel_threads_created_since() {
        let dir = std::env::temp_dir().join(format!("napilab-kthreads-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        kthreads(
            &dir,
            &[3, 14, 500],
            &["kworker/0:0", "ksoftirqd/0", "napi/eth0-8193"],
        );
        let mut scan = PacketThreadScan::default();
        let names =
            |t: Vec<KernelThread>| t.into_iter().map(|t| (t.pid, t.comm)).collect::<Vec<_>>();
        assert_eq!(
            names(scan.scan(&dir, Some(600)).expect("scan")),
            vec![(14, "ksoftirqd/0".into()), (500, "napi/eth0-8193".into())]
        );
        // pid 3's comm changes on disk but it was not handed out again (last pid 600 ->
        // 700): its name is not read again. pid 650 is new and read; 500 is gone.
        kthreads(
            &dir,
            &[3, 14, 650],
            &["napi/not-read", "ksoftirqd/0", "napi/eth1-8194"],
        );
        assert_eq!(
            names(scan.scan(&dir, Some(700)).expect("scan")),
            vec![(14, "ksoftirqd/0".into()), (650, "napi/eth1-8194".into())]
        );
        // pid 14 was handed out again (the last pid wrapped past it): read again.
        kthreads(&dir, &[3, 14], &["kworker/0:0", "napi/eth2-8195"]);
        assert_eq!(
            names(scan.scan(&dir, Some(20)).expect("scan")),
            vec![(14, "napi/eth2-8195".into())]
        );
        // Without the children file: the full scan of every process.
        assert!(std::fs::remove_file(dir.join("proc/2/task/2/children")).is_ok());
        assert_eq!(
            names(scan.scan(&dir, Some(20)).expect("scan")),
            names(list_packet_threads(&dir).expect("full scan"))
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_kthreadd_scan_finds_what_the_full_scan_finds_on_this_host() {
        let root = Path::new("/");
        // Other tests may create NAPI threads meanwhile: a few tries.
        for _ in 0..5 {
            let full = list_packet_threads(root).expect("full scan");
            let fast = PacketThreadScan::default().scan(root, None).expect("scan");
            if full == fast {
                if !full.iter().any(|t| t.comm.starts_with("ksoftirqd/")) {
                    eprintln!("SKIPPED the_kthreadd_scan_finds_what_the_full_scan_finds_on_this_host: no ksoftirqd thread is visible (a PID namespace?)");
                }
                return;
            }
        }
        panic!("the kthreadd scan and the full scan disagree five times in a row");
    }

    #[test]
    fn pids_handed_out_wrap_around() {
        assert!(handed_out_between(11, 10, 20));
        assert!(handed_out_between(20, 10, 20));
        assert!(!handed_out_between(10, 10, 20));
        assert!(!handed_out_between(21, 10, 20));
        assert!(!handed_out_between(15, 20, 20));
        // Wrapped at pid_max: above the old last pid or up to the new one.
        assert!(handed_out_between(32000, 30000, 400));
        assert!(handed_out_between(301, 30000, 400));
        assert!(!handed_out_between(500, 30000, 400));
    }

    const KSOFTIRQD: &str = "14 (ksoftirqd/0) S 2 0 0 0 -1 69238848 0 0 0 0 2 0 0 0 20 0 1 0 14 0 0 18446744073709551615 0 0 0 0 0 0 0 2147483647 0 1 0 0 17 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n";

    #[test]
    fn reaped_children_time_is_cutime_plus_cstime() {
        let shell = KSOFTIRQD
            .replacen("(ksoftirqd/0) S 2", "(sh) S 1", 1)
            .replacen(" 2 0 0 0 20 0 ", " 2 0 7 3 20 0 ", 1);
        let t = parse_task_stat(&shell).expect("parses");
        assert_eq!((t.utime, t.stime, t.reaped_children_ticks), (2, 0, 10));
        assert_eq!(t.priority, 20);
    }

    #[test]
    fn ksoftirqd_line() {
        let t = parse_task_stat(KSOFTIRQD).expect("parses");
        assert_eq!(
            t,
            TaskStat {
                pid: 14,
                comm: "ksoftirqd/0".into(),
                state: 'S',
                utime: 2,
                stime: 0,
                reaped_children_ticks: 0,
                priority: 20,
                nice: 0,
                processor: Some(0),
                rt_priority: Some(0),
                policy: Some(0),
            }
        );
    }

    #[test]
    fn comm_with_spaces_and_parens() {
        let line = KSOFTIRQD.replace("(ksoftirqd/0)", "(a) b (c))");
        let t = parse_task_stat(&line).expect("parses");
        assert_eq!(t.comm, "a) b (c)");
        assert_eq!((t.utime, t.stime, t.processor), (2, 0, Some(0)));
    }

    #[test]
    fn rt_thread() {
        // A napi thread after `chrt -f -p 50`: priority -51, rt_priority 50, policy 1.
        let line = "7578 (napi/vb-259) R 2 0 0 0 -1 2129984 0 0 0 0 0 402 0 0 -51 0 1 0 80284 0 0 18446744073709551615 0 0 0 0 0 0 0 2147483647 0 0 0 0 17 1 50 1 0 0 0";
        let t = parse_task_stat(line).expect("parses");
        assert_eq!((t.priority, t.nice), (-51, 0));
        assert_eq!(
            (t.processor, t.rt_priority, t.policy),
            (Some(1), Some(50), Some(1))
        );
        assert_eq!(policy_name(t.policy.unwrap_or(99)), "SCHED_FIFO");
    }

    #[test]
    fn old_kernel_without_tail_fields() {
        let line = "1 (init) S 0 1 1 0 -1 4194560 1 2 3 4 50 60 0 0 20 -5 1 0 5";
        let t = parse_task_stat(line).expect("parses");
        assert_eq!((t.utime, t.stime, t.nice), (50, 60, -5));
        assert_eq!((t.processor, t.rt_priority, t.policy), (None, None, None));
    }

    #[test]
    fn errors() {
        let msg = |s: &str| parse_task_stat(s).err().map(|e| e.to_string());
        assert_eq!(
            msg("14 (x) S 2 0").as_deref(),
            Some("/proc/14/stat line 1: expected utime (field 14), found the end of the line")
        );
        assert_eq!(
            msg("x (y) S").as_deref(),
            Some("/proc/<pid>/stat line 1: expected a process id, found 'x'")
        );
        assert!(msg("14 x) S (").is_some());
        assert!(msg("").is_some());
        assert_eq!(
            msg("14 (x) SS 2 0 0 0 -1 0 0 0 0 0 1 2 0 0 20 0").as_deref(),
            Some("/proc/14/stat line 1: expected a one-letter state, found 'SS'")
        );
        assert_eq!(
            msg("14 (x) S 2 0 0 0 -1 0 0 0 0 0 1 2 0 0 20 -0x").as_deref(),
            Some("/proc/14/stat line 1: expected a nice value, found '-0x'")
        );
    }

    #[test]
    fn schedstat() {
        assert_eq!(
            parse_schedstat("26565697393 141081313013 522723\n", 22).expect("parses"),
            Schedstat {
                on_cpu_ns: 26_565_697_393,
                run_delay_ns: 141_081_313_013,
                runs: 522_723
            }
        );
        let msg = |s: &str| parse_schedstat(s, 22).err().map(|e| e.to_string());
        assert_eq!(
            msg("1 2").as_deref(),
            Some(
                "/proc/22/schedstat line 1: expected the number of runs, found the end of the line"
            )
        );
        assert_eq!(
            msg("1 -2 3").as_deref(),
            Some("/proc/22/schedstat line 1: expected the run delay in ns, found '-2'")
        );
    }

    #[test]
    fn policies() {
        let names: Vec<_> = (0..9).map(policy_name).collect();
        assert_eq!(
            names,
            [
                "SCHED_OTHER",
                "SCHED_FIFO",
                "SCHED_RR",
                "SCHED_BATCH",
                "unknown",
                "SCHED_IDLE",
                "SCHED_DEADLINE",
                "SCHED_EXT",
                "unknown"
            ]
        );
    }

    #[test]
    fn cpus_allowed() {
        let status = "Name:\tx\nCpus_allowed:\t3\nCpus_allowed_list:\t0-1\n";
        assert_eq!(parse_status_cpus_allowed(status), Some(vec![0, 1]));
        assert_eq!(parse_status_cpus_allowed("Name:\tx\n"), None);
        assert_eq!(
            parse_status_cpus_allowed("Cpus_allowed_list:\tgarbage\n"),
            None
        );
    }
}
