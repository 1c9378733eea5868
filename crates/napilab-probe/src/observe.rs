//! The observe pipeline, shared by live sampling and replay: raw samples in, an
//! [`Observation`] with findings out.

use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use napilab_core::{explain, Interval, Observation, Origin, OriginKind, OBSERVATION_SCHEMA};

use crate::derive::{derive_interval, DeriveContext};
use crate::host_identity;
use crate::kernel;
use crate::map;
use crate::netlink::Netlink;
use crate::procfs;
use crate::record::{RecordingHeader, RECORDING_SCHEMA};
use crate::sample::{Notices, RawSample, Sample, SampleParser};
use crate::sysctl;

/// Milliseconds since the Unix epoch (0 if the clock is before it).
pub fn unix_ms_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(0))
        .unwrap_or(0)
}

/// Reads what does not change between samples: kernel facts, settings and the map.
/// `origin.started_unix_ms` is now; a caller that loads more before its first sample
/// sets it again then.
pub fn describe_host(root: &Path, use_netlink: bool) -> RecordingHeader {
    let mut notices = Notices::default();
    let release = kernel::read_trimmed(root, "proc/sys/kernel/osrelease");
    let config_text = kernel::read_kernel_config_text(root, release.as_deref());
    let config = config_text
        .as_ref()
        .map(|c| kernel::parse_kernel_config(&c.text, &c.path));
    if config.is_none() {
        notices.add(
            "kernel config",
            "neither /proc/config.gz nor /boot/config-<release> is readable: HZ is measured from jiffies and the CPU-accounting mode is unknown (assume tick-sampled)",
        );
    }
    let hz = kernel::detect_hz(root, config.as_ref());
    let identity = host_identity::read_identity(root, config_text.as_ref(), hz.value);
    let settings = sysctl::read_settings(root);
    if settings.netdev_budget.is_none() && root.join("proc/sys/net/core").is_dir() {
        notices.add(
            "net.core.netdev_budget, netdev_budget_usecs, dev_weight, busy_poll, busy_read",
            "not readable here: these sysctls exist only in the initial network namespace; run napilab there to see them (they apply to every namespace)",
        );
    }
    let online_cpus = kernel::read_trimmed(root, "sys/devices/system/cpu/online")
        .and_then(|s| procfs::parse_cpu_list(&s))
        .unwrap_or_default();
    let stat_cpus = procfs::read_stat(root)
        .map(|s| s.cpus.iter().map(|(c, _)| *c).collect())
        .unwrap_or_else(|_| online_cpus.clone());
    let mut netlink = use_netlink.then(Netlink::new);
    let inputs = map::gather(root, netlink.as_mut(), &mut notices);
    let mut topology = map::build_map(root, &inputs, netlink.as_mut());
    if root == Path::new("/") {
        topology.netns = crate::netns::own_inode();
        if topology.netns.is_none() {
            notices.add(
                "network namespace of this map",
                "/proc/thread-self/ns/net and /proc/self/ns/net cannot be stat'ed: the trace tier's NAPI rows are joined to this map's devices by name, so polls of a device of the same name in another network namespace (a container's eth0) are counted as this one's; mount /proc to tell them apart",
            );
        }
    }
    if !crate::kernel::is_root() {
        notices.add(
            "root privileges",
            "not running as root: some files (/proc/timer_list, per-thread details) and netlink requests may be refused; run with sudo for the full picture",
        );
    }
    RecordingHeader {
        schema: RECORDING_SCHEMA.into(),
        origin: Origin {
            kind: OriginKind::Live,
            hostname: kernel::read_trimmed(root, "proc/sys/kernel/hostname"),
            kernel: release,
            started_unix_ms: unix_ms_now(),
            napilab_version: env!("CARGO_PKG_VERSION").into(),
        },
        host: napilab_core::HostFacts {
            cpus: stat_cpus,
            hz,
            accounting: config.map(|c| c.accounting()).unwrap_or_default(),
            user_hz: kernel::user_hz(),
            identity: Some(identity),
            speed: Vec::new(),
            wake_up: Vec::new(),
            timer: Vec::new(),
            stalls: Vec::new(),
        },
        online_cpus,
        settings,
        topology,
        notices: notices.0,
    }
}

/// Accumulates intervals from a stream of raw samples.
pub struct Analysis {
    header: RecordingHeader,
    previous: Option<Sample>,
    parser: SampleParser,
    first_t_ns: Option<u64>,
    intervals: Vec<Interval>,
    notices: Notices,
}

impl Analysis {
    pub fn new(header: RecordingHeader) -> Self {
        let notices = Notices(header.notices.clone());
        Analysis {
            header,
            previous: None,
            parser: SampleParser::default(),
            first_t_ns: None,
            intervals: Vec::new(),
            notices,
        }
    }

    pub fn header(&self) -> &RecordingHeader {
        &self.header
    }

    /// Adds a sample; returns the interval it closes, if any.
    pub fn push(&mut self, raw: &RawSample) -> Option<&Interval> {
        let sample = self
            .parser
            .parse(raw, &self.header.online_cpus, &mut self.notices);
        let first = *self.first_t_ns.get_or_insert(sample.t_ns);
        let previous = self.previous.replace(sample);
        let (Some(prev), Some(cur)) = (previous, self.previous.as_ref()) else {
            return None;
        };
        if cur.t_ns <= prev.t_ns {
            self.notices.add(
                "sample timestamps",
                "a sample was not later than the one before it and was skipped",
            );
            if let Some(skipped) = self.previous.replace(prev) {
                self.parser.recycle(skipped);
            }
            return None;
        }
        let ctx = DeriveContext {
            topology: &self.header.topology,
            accounting: self.header.host.accounting,
            user_hz: self.header.host.user_hz,
        };
        let start_s = prev.t_ns.saturating_sub(first) as f64 / 1e9;
        let interval = derive_interval(&prev, cur, &ctx, self.intervals.len(), start_s);
        self.parser.recycle(prev);
        self.intervals.push(interval);
        self.intervals.last()
    }

    /// Attaches what the tracing tier measured over the interval `push` last closed.
    pub fn attach_trace(&mut self, trace: napilab_core::trace::TraceInterval) {
        if let Some(last) = self.intervals.last_mut() {
            last.trace = Some(trace);
        }
    }

    /// Adds one notice (said once, however often it is added).
    pub fn add_notice(&mut self, what: impl Into<String>, why: impl Into<String>) {
        self.notices.add(what.into(), why.into());
    }

    pub fn merge_notices(&mut self, other: &Notices) {
        for n in &other.0 {
            self.notices.add(n.what.clone(), n.why.clone());
        }
    }

    pub fn intervals(&self) -> &[Interval] {
        &self.intervals
    }

    /// The Observation with findings.
    pub fn finish(self, kind: OriginKind) -> Observation {
        let mut origin = self.header.origin;
        origin.kind = kind;
        let mut observation = Observation {
            schema: OBSERVATION_SCHEMA.into(),
            origin,
            host: self.header.host,
            settings: self.header.settings,
            topology: self.header.topology,
            intervals: self.intervals,
            findings: Vec::new(),
            notices: self.notices.0,
            trace_cost: None,
        };
        observation.findings = explain::explain(&observation);
        observation
    }
}

/// Replays a recording into an Observation.
pub fn replay(path: &Path) -> Result<Observation, crate::record::RecordError> {
    let (header, samples) = crate::record::read_recording(path)?;
    let mut analysis = Analysis::new(header);
    for sample in &samples {
        analysis.push(sample);
    }
    Ok(analysis.finish(OriginKind::Replay))
}

/// Blocks until `deadline` or until a message arrives on `stop` (Ctrl-C); true when
/// stopped. Blocking on the channel instead of polling a flag keeps an idle observer at
/// one wake-up per sample, which is most of its cost budget.
pub fn wait_until(deadline: std::time::Instant, stop: &std::sync::mpsc::Receiver<()>) -> bool {
    let timeout = deadline.saturating_duration_since(std::time::Instant::now());
    match stop.recv_timeout(timeout) {
        Ok(()) | Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => true,
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => false,
    }
}
