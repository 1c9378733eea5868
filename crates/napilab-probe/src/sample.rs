//! One sample of the host's counters. A [`RawSample`] keeps the kernel's text files as
//! read, so a recording can be re-parsed by a newer napilab (`observe --replay`); the
//! netlink answers are kept as decoded structs because netlink has no text form.

use std::path::{Path, PathBuf};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::netlink::{LinkStats, Netlink, QdiscStats, QueueStats};
use crate::procfs::{
    self, Interrupts, ProcError, ProcStat, Schedstat, Softirqs, SoftnetRow, TaskStat,
};

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RawSample {
    /// Monotonic time of the sample, ns; only differences matter.
    pub t_ns: u64,
    pub unix_ms: u64,
    pub interrupts: Option<String>,
    pub softirqs: Option<String>,
    pub stat: Option<String>,
    pub softnet: Option<String>,
    /// `/proc/<pid>/stat` of ksoftirqd and NAPI threads: (pid, text).
    pub threads: Vec<(u32, String)>,
    /// `/proc/<pid>/schedstat` of the same threads: (pid, text). Absent from recordings
    /// made before napilab read it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub schedstats: Vec<(u32, String)>,
    pub links: Option<Vec<LinkStats>>,
    pub qdiscs: Option<Vec<QdiscStats>>,
    pub qstats: Option<Vec<QueueStats>>,
}

/// A [`RawSample`] parsed. A source that was missing or did not parse is `None`; why is
/// in the notices.
#[derive(Clone, Debug, Default)]
pub struct Sample {
    pub t_ns: u64,
    pub interrupts: Option<Interrupts>,
    pub softirqs: Option<Softirqs>,
    pub stat: Option<ProcStat>,
    pub softnet: Option<Vec<SoftnetRow>>,
    pub threads: Vec<TaskStat>,
    /// (pid, schedstat) of the threads whose file was read and parsed.
    pub schedstats: Vec<(u32, Schedstat)>,
    pub links: Option<Vec<LinkStats>>,
    pub qdiscs: Option<Vec<QdiscStats>>,
    pub qstats: Option<Vec<QueueStats>>,
}

/// Collects notices, each said once however often it recurs.
#[derive(Clone, Debug, Default)]
pub struct Notices(pub Vec<napilab_core::Notice>);

impl Notices {
    pub fn add(&mut self, what: impl Into<String>, why: impl Into<String>) {
        let what = what.into();
        if !self.0.iter().any(|n| n.what == what) {
            self.0.push(napilab_core::Notice {
                what,
                why: why.into(),
            });
        }
    }
}

fn parse_or_note<T>(
    text: &Option<String>,
    file: &str,
    notices: &mut Notices,
    parse: impl FnOnce(&str) -> Result<T, ProcError>,
) -> Option<T> {
    match parse(text.as_deref()?) {
        Ok(v) => Some(v),
        Err(e) => {
            notices.add(
                file,
                format!("could not be parsed ({e}); its metrics are left out"),
            );
            None
        }
    }
}

impl RawSample {
    /// Parses every text; `online_cpus` places softnet rows of kernels without a CPU
    /// column.
    pub fn parse(&self, online_cpus: &[u32], notices: &mut Notices) -> Sample {
        SampleParser::default().parse(self, online_cpus, notices)
    }
}

/// Parses the raw samples of one host in turn, re-using what does not change between
/// them: the layout of /proc/interrupts (its lines and their names, parsed once;
/// [`procfs::InterruptsParser`]) and the allocations of a sample handed back with
/// [`SampleParser::recycle`]. The result is always what [`RawSample::parse`] returns.
#[derive(Debug, Default)]
pub struct SampleParser {
    interrupts: procfs::InterruptsParser,
    /// The parsed /proc/interrupts of a sample that is no longer needed.
    spare_interrupts: Option<Interrupts>,
}

impl SampleParser {
    pub fn parse(&mut self, raw: &RawSample, online_cpus: &[u32], notices: &mut Notices) -> Sample {
        let softnet = parse_or_note(&raw.softnet, "/proc/net/softnet_stat", notices, |t| {
            procfs::parse_softnet(t, online_cpus)
        });
        let mut interrupts = self.spare_interrupts.take().unwrap_or_default();
        let parser = &mut self.interrupts;
        let interrupts = parse_or_note(&raw.interrupts, "/proc/interrupts", notices, |t| {
            parser.parse_into(t, &mut interrupts).map(|()| interrupts)
        });
        Sample {
            t_ns: raw.t_ns,
            interrupts,
            softirqs: parse_or_note(
                &raw.softirqs,
                "/proc/softirqs",
                notices,
                procfs::parse_softirqs,
            ),
            stat: parse_or_note(&raw.stat, "/proc/stat", notices, procfs::parse_stat),
            softnet,
            threads: raw
                .threads
                .iter()
                .filter_map(|(_, text)| procfs::parse_task_stat(text).ok())
                .collect(),
            schedstats: raw
                .schedstats
                .iter()
                .filter_map(|(pid, text)| Some((*pid, procfs::parse_schedstat(text, *pid).ok()?)))
                .collect(),
            links: raw.links.clone(),
            qdiscs: raw.qdiscs.clone(),
            qstats: raw.qstats.clone(),
        }
    }

    /// Hands back a parsed sample that is no longer needed, so the next parse fills
    /// its allocations instead of making new ones.
    pub fn recycle(&mut self, sample: Sample) {
        if sample.interrupts.is_some() {
            self.spare_interrupts = sample.interrupts;
        }
    }
}

/// One packet thread's per-sample files.
#[derive(Debug)]
struct ThreadPaths {
    pid: u32,
    stat: String,
    schedstat: String,
}

/// Reads samples from a live host. Holds the netlink socket and the list of packet
/// threads between samples so that one sample costs a handful of reads.
pub struct Sampler {
    root: PathBuf,
    netlink: Option<Netlink>,
    qstats_offered: bool,
    /// The packet threads' `proc/<pid>/stat` and `proc/<pid>/schedstat` paths
    /// (relative to `root`), from the last scan: formatted once per scan, not once per
    /// sample.
    thread_paths: Vec<ThreadPaths>,
    /// This kernel has `/proc/<pid>/schedstat` (`CONFIG_SCHED_INFO`): cleared at the
    /// first thread without it, so a kernel without it costs no failed open per sample.
    schedstat_offered: bool,
    epoch: Instant,
    files: procfs::KeptFiles,
    /// The last pid the kernel had handed out at the last thread scan (/proc/loadavg).
    scanned_at_pid: Option<u32>,
    thread_scan: procfs::PacketThreadScan,
    pub notices: Notices,
}

impl Sampler {
    /// `netlink` is off when observing a fixture tree or when the caller has no netlink.
    pub fn new(root: &Path, use_netlink: bool) -> Self {
        let mut sampler = Sampler {
            root: root.to_path_buf(),
            netlink: use_netlink.then(Netlink::new),
            qstats_offered: use_netlink,
            thread_paths: Vec::new(),
            schedstat_offered: true,
            epoch: Instant::now(),
            files: procfs::KeptFiles::default(),
            scanned_at_pid: None,
            thread_scan: procfs::PacketThreadScan::default(),
            notices: Notices::default(),
        };
        sampler.refresh_threads();
        sampler
    }

    /// Rescans /proc for ksoftirqd and napi/ threads (they appear when a device is
    /// switched to threaded NAPI). Not done every sample; and a rescan reads only the
    /// kernel threads created since the last one ([`procfs::PacketThreadScan`]).
    ///
    /// Skipped when no process or thread was created since the last scan: the last pid
    /// handed out (the last field of /proc/loadavg) is unchanged. A thread that exited
    /// is simply absent from the next sample.
    pub fn refresh_threads(&mut self) {
        let last_pid = self
            .files
            .read_text(&self.root, "proc/loadavg")
            .ok()
            .and_then(|t| t.split_whitespace().nth(4)?.parse::<u32>().ok());
        if last_pid.is_some() && last_pid == self.scanned_at_pid {
            return;
        }
        self.scanned_at_pid = last_pid;
        match self.thread_scan.scan(&self.root, last_pid) {
            Ok(threads) => {
                // Close the stat files of threads that are gone.
                let proc = self.root.join("proc");
                let listed: std::collections::HashSet<u32> =
                    threads.iter().map(|t| t.pid).collect();
                self.files.retain(|path| {
                    path.strip_prefix(&proc)
                        .ok()
                        .and_then(|rest| rest.iter().next())
                        .and_then(|pid| pid.to_str()?.parse::<u32>().ok())
                        .is_none_or(|pid| listed.contains(&pid))
                });
                self.thread_paths = threads
                    .iter()
                    .map(|t| ThreadPaths {
                        pid: t.pid,
                        stat: format!("proc/{}/stat", t.pid),
                        schedstat: format!("proc/{}/schedstat", t.pid),
                    })
                    .collect();
            }
            Err(e) => self.notices.add(
                "packet threads (ksoftirqd, napi/*)",
                format!("could not list processes ({e}); thread CPU time is left out"),
            ),
        }
    }

    /// Reads `rel` into `slot`, reusing the string it held (see [`Sampler::sample_into`]).
    fn read_into(&mut self, rel: &str, what_is_lost: &str, slot: &mut Option<String>) {
        let mut text = slot.take().unwrap_or_default();
        match self.files.read_into(&self.root, rel, &mut text) {
            Ok(()) => *slot = Some(text),
            Err(e) => self
                .notices
                .add(format!("/{rel}"), format!("{e}; {what_is_lost}")),
        }
    }

    pub fn sample(&mut self) -> RawSample {
        let mut raw = RawSample::default();
        self.sample_into(&mut raw);
        raw
    }

    /// [`Sampler::sample`] into `raw`, reusing the strings of the sample it held: a loop
    /// that passes the same `RawSample` each time allocates no text in the steady state.
    /// Every field is overwritten; nothing of the previous sample is left.
    pub fn sample_into(&mut self, raw: &mut RawSample) {
        raw.t_ns = u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX);
        raw.unix_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| u64::try_from(d.as_millis()).unwrap_or(0))
            .unwrap_or(0);
        self.read_into(
            "proc/interrupts",
            "hard IRQ counts are left out",
            &mut raw.interrupts,
        );
        self.read_into(
            "proc/softirqs",
            "softirq counts are left out",
            &mut raw.softirqs,
        );
        self.read_into("proc/stat", "CPU time shares are left out", &mut raw.stat);
        self.read_into(
            "proc/net/softnet_stat",
            "per-CPU processed/dropped/time_squeeze are left out",
            &mut raw.softnet,
        );
        let mut spare: Vec<String> = raw
            .threads
            .drain(..)
            .chain(raw.schedstats.drain(..))
            .map(|(_, text)| text)
            .collect();
        for t in &self.thread_paths {
            let mut text = spare.pop().unwrap_or_default();
            // A thread that exited since the last scan is simply absent from this sample.
            if self
                .files
                .read_into(&self.root, &t.stat, &mut text)
                .is_err()
            {
                continue;
            }
            raw.threads.push((t.pid, text));
            if !self.schedstat_offered {
                continue;
            }
            let mut text = spare.pop().unwrap_or_default();
            match self.files.read_into(&self.root, &t.schedstat, &mut text) {
                Ok(()) => raw.schedstats.push((t.pid, text)),
                // Missing while the thread is still there: the kernel has none.
                Err(ProcError::Missing { .. })
                    if self.root.join(format!("proc/{}", t.pid)).exists() =>
                {
                    self.schedstat_offered = false;
                    self.notices.add(
                        "/proc/<pid>/schedstat",
                        "not present on this kernel (CONFIG_SCHED_INFO off); the packet threads' run delays are left out",
                    );
                }
                Err(_) => {}
            }
        }
        let (mut links, mut qdiscs, mut qstats) = (None, None, None);
        if let Some(netlink) = self.netlink.as_mut() {
            match netlink.link_counters() {
                Ok(v) => links = Some(v),
                Err(e) => self.notices.add(
                    "rtnetlink link statistics",
                    format!("{e}; device packet and byte rates are left out"),
                ),
            }
            match netlink.qdiscs() {
                Ok(v) => qdiscs = Some(v),
                Err(e) => self.notices.add(
                    "rtnetlink qdisc statistics",
                    format!("{e}; qdisc rates are left out"),
                ),
            }
            if self.qstats_offered {
                match netlink.qstats() {
                    Ok(v) => qstats = Some(v),
                    Err(e) => {
                        // Not offered by this kernel or driver: stop asking.
                        self.qstats_offered = false;
                        self.notices.add(
                            "netdev qstats-get",
                            format!("{e}; per-queue packet rates are left out"),
                        );
                    }
                }
            }
        }
        raw.links = links;
        raw.qdiscs = qdiscs;
        raw.qstats = qstats;
    }
}
