//! `napilab export`: a long-running Prometheus exporter (docs/export.md).
//!
//! One background thread samples the host every interval through the observe pipeline
//! (the same Sampler, trace tier and rules as `napilab observe`) and renders both wire
//! formats once; the HTTP server (export_http: hyper, with limits on heads, their time
//! and connections) only hands out the latest rendering. A scrape therefore never reads
//! the kernel, and fifty concurrent scrapers cost what one does.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{mpsc, Arc, RwLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};
use bytes::Bytes;
use napilab_core::{Interval, Observation, OriginKind, OBSERVATION_SCHEMA};
use napilab_probe::derive::{derive_interval, DeriveContext};
use napilab_probe::observe::{describe_host, wait_until};
use napilab_probe::record::RecordingHeader;
use napilab_probe::sample::{Notices, RawSample, Sample, SampleParser, Sampler};
use serde::Deserialize;

use crate::export_http::{self, Asked, HttpCounters, HttpLimits};
use crate::export_metrics::{self, Dropped, Limits, PacketPath, SelfCost};
use crate::exposition;

pub const DEFAULT_LISTEN: &str = "127.0.0.1:9977";

/// How often the process list is rescanned for new ksoftirqd/napi threads.
const THREAD_RESCAN: Duration = Duration::from_secs(10);
/// How often the map (devices, NAPI instances, settings) is read again, so devices and
/// instances that appear or vanish show up without a restart.
const MAP_REFRESH: Duration = Duration::from_secs(30);
/// The map is also read again when the sampled links differ from it (a device appeared
/// or vanished), at most this often, so a vanished device's info series goes within a
/// second instead of a full MAP_REFRESH, and a churning host does not cost a map read per
/// sample.
const MAP_REFRESH_ON_CHANGE: Duration = Duration::from_secs(1);
/// A traced NAPI instance the map does not know (another namespace's, or a deleted
/// device's: the BPF counters keep both) whose polls stopped changing this long ago is
/// left out of the export, so the series of vanished instances go and cardinality stays
/// bounded on a host that creates and deletes devices. It comes back when it polls again.
const NAPI_IDLE_EXPIRY: Duration = Duration::from_secs(300);

pub const OPENMETRICS_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
pub const TEXT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The settings of one exporter, from the command line over the `--config` file.
#[derive(Clone, Debug)]
pub struct Options {
    pub listen: SocketAddr,
    pub allow_remote: bool,
    pub interval: Duration,
    pub trace: bool,
    pub bpf_stats: bool,
    pub root: Option<PathBuf>,
    pub json: bool,
    pub limits: Limits,
    pub findings_window: Duration,
    pub http: HttpLimits,
}

/// The `--config` file (TOML); every key is optional, command-line flags win.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigFile {
    pub listen: Option<String>,
    pub allow_remote: Option<bool>,
    pub interval: Option<String>,
    pub trace: Option<bool>,
    pub bpf_stats: Option<bool>,
    pub max_napi_instances: Option<usize>,
    pub max_devices: Option<usize>,
    pub findings_window: Option<String>,
    pub max_connections: Option<usize>,
    pub header_timeout: Option<String>,
}

impl ConfigFile {
    pub fn read(path: &Path) -> Result<ConfigFile> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read the config file {}", path.display()))?;
        toml::from_str(&text).with_context(|| {
            format!(
                "{} is not a valid napilab export config (keys: listen, allow_remote, interval, trace, bpf_stats, max_napi_instances, max_devices, findings_window, max_connections, header_timeout; see docs/export.md)",
                path.display()
            )
        })
    }
}

pub fn parse_duration(field: &str, text: &str, file: &Path) -> Result<Duration> {
    humantime::parse_duration(text).with_context(|| {
        format!(
            "{}: {field} = {text:?} is not a duration: write e.g. \"1s\" or \"500ms\"",
            file.display()
        )
    })
}

pub fn parse_listen(text: &str, what: &str) -> Result<SocketAddr> {
    text.parse().with_context(|| {
        format!("{what} {text:?} is not an address:port: write e.g. {DEFAULT_LISTEN}")
    })
}

#[derive(clap::Args)]
pub struct ExportArgs {
    /// Address and port to serve on. Loopback unless --allow-remote.
    #[arg(long, value_name = "ADDR:PORT")]
    listen: Option<String>,
    /// Allow --listen on a non-loopback address (the endpoint is read-only; restrict
    /// who reaches it with your firewall).
    #[arg(long)]
    allow_remote: bool,
    /// Sampling interval (e.g. 1s, 500ms); at least 100ms. Scrapes read the latest sample.
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    interval: Option<Duration>,
    /// Load the always-on BPF tier (root): per-NAPI polls by context, measured softirq and
    /// hard-IRQ seconds, NET_RX runs by what ended them. Falls back to /proc, saying so.
    #[arg(long)]
    trace: bool,
    /// With --trace: turn on the kernel's BPF run-time statistics while exporting, so
    /// napilab_exporter_bpf_program_run_seconds counts (costs two clock reads per run).
    #[arg(long)]
    bpf_stats: bool,
    /// At most this many HTTP connections open at once; more are closed as soon as they
    /// are accepted, counted and logged (default 512).
    #[arg(long, value_name = "N")]
    max_connections: Option<usize>,
    /// Close an HTTP connection whose client has not sent a whole request head within
    /// this time (slow clients; idle kept-alive connections) (default 10s).
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    header_timeout: Option<Duration>,
    /// TOML file with any of: listen, allow_remote, interval, trace, bpf_stats,
    /// max_napi_instances, max_devices, findings_window, max_connections,
    /// header_timeout. Flags override it.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Read /proc and /sys under DIR instead of / (a copied tree); netlink and BPF off.
    #[arg(long, value_name = "DIR", conflicts_with = "trace")]
    root: Option<PathBuf>,
    /// Print the start and stop status lines as JSON.
    #[arg(long)]
    json: bool,
}

/// The exporter's settings: defaults, then the config file, then the flags.
pub fn options(args: ExportArgs) -> Result<Options> {
    let (file, path) = match &args.config {
        Some(path) => (ConfigFile::read(path)?, path.clone()),
        None => (ConfigFile::default(), PathBuf::from("(no config file)")),
    };
    let listen = match (&args.listen, &file.listen) {
        (Some(l), _) => parse_listen(l, "--listen")?,
        (None, Some(l)) => parse_listen(l, &format!("{}: listen =", path.display()))?,
        (None, None) => parse_listen(DEFAULT_LISTEN, "the default")?,
    };
    let interval = match (args.interval, &file.interval) {
        (Some(i), _) => i,
        (None, Some(text)) => parse_duration("interval", text, &path)?,
        (None, None) => Duration::from_secs(1),
    };
    let findings_window = match &file.findings_window {
        Some(text) => parse_duration("findings_window", text, &path)?,
        None => Duration::from_secs(10).max(interval),
    };
    let defaults = Limits::default();
    let http_defaults = HttpLimits::default();
    let header_timeout = match (args.header_timeout, &file.header_timeout) {
        (Some(t), _) => t,
        (None, Some(text)) => parse_duration("header_timeout", text, &path)?,
        (None, None) => http_defaults.header_timeout,
    };
    Ok(Options {
        listen,
        allow_remote: args.allow_remote || file.allow_remote.unwrap_or(false),
        interval,
        trace: args.trace || (file.trace.unwrap_or(false) && args.root.is_none()),
        bpf_stats: args.bpf_stats || file.bpf_stats.unwrap_or(false),
        root: args.root,
        json: args.json,
        limits: Limits {
            max_napi_instances: file
                .max_napi_instances
                .unwrap_or(defaults.max_napi_instances),
            max_devices: file.max_devices.unwrap_or(defaults.max_devices),
        },
        findings_window,
        http: HttpLimits {
            max_connections: args
                .max_connections
                .or(file.max_connections)
                .unwrap_or(http_defaults.max_connections),
            header_timeout,
        },
    })
}

/// What every scrape serves: both formats of the latest sample. Shared, not copied, by
/// the answers (a `Bytes` clone is a reference count): a scrape allocates no body-sized
/// buffer, so fifty scrapers do not churn the allocator with fifty copies per interval.
struct Rendered {
    text: Bytes,
    openmetrics: Bytes,
    sampled: Instant,
}

type Latest = Arc<RwLock<Arc<Rendered>>>;

pub fn run(options: &Options) -> Result<()> {
    validate(options)?;
    let root = options.root.clone().unwrap_or_else(|| PathBuf::from("/"));
    if !root.join("proc/stat").exists() {
        bail!(
            "{} has no proc/stat: --root must name a directory holding proc/ and sys/",
            root.display()
        );
    }
    let listener = export_http::bind(options.listen)?;
    let stop = Arc::new(tokio::sync::Notify::new());
    let (stop_tx, stop_rx) = mpsc::channel();
    stop_on_signals(stop.clone(), stop_tx.clone())?;
    let http_counters = Arc::new(HttpCounters::default());

    let mut exporter = Exporter::start(options, &root, http_counters.clone());
    let first = exporter.step()?;
    let latest: Latest = Arc::new(RwLock::new(Arc::new(first)));
    let (traced, tier_reason) = (exporter.tracer.is_some(), exporter.tier_reason.clone());
    status(options.json, "serving", options, traced, &tier_reason);

    let sampler = {
        let latest = latest.clone();
        let interval = options.interval;
        std::thread::Builder::new()
            .name("napilab-sampler".into())
            .spawn(move || -> Result<()> {
                let start = Instant::now();
                let mut step: u32 = 1;
                loop {
                    if wait_until(start + interval * step, &stop_rx) {
                        break;
                    }
                    // A sample that overran its interval skips the deadlines it missed
                    // instead of sampling back to back to catch up.
                    let due = (start.elapsed().as_nanos() / interval.as_nanos().max(1)) as u32;
                    step = step.saturating_add(1).max(due.saturating_add(1));
                    // A failed rendering keeps the previous one; /healthz turns 503
                    // if it goes on.
                    match exporter.step() {
                        Ok(rendered) => {
                            if let Ok(mut slot) = latest.write() {
                                *slot = Arc::new(rendered);
                            }
                        }
                        Err(e) => eprintln!("napilab export: sample failed: {e:#}"),
                    }
                }
                // Dropping the exporter detaches and unloads the BPF programs.
                drop(exporter);
                Ok(())
            })
            .context("cannot start the sampler thread")?
    };

    let stale_after = options.interval * 3 + Duration::from_secs(1);
    // This thread serves until a signal; the answers only read the latest rendering.
    let served = export_http::serve(listener, options.http, http_counters, stop, {
        let latest = latest.clone();
        move |asked: &Asked| respond(asked, &latest, stale_after)
    });
    // After a signal the sampler has been told already; if the server failed, nothing
    // is served, so the sampler stops too.
    let _ = stop_tx.send(());
    let sampled = sampler
        .join()
        .map_err(|_| anyhow::anyhow!("the sampler thread panicked"))?;
    status(options.json, "stopped", options, traced, &tier_reason);
    served.and(sampled)
}

fn validate(options: &Options) -> Result<()> {
    if options.interval < Duration::from_millis(100) {
        bail!(
            "--interval {:?} is too short: use 100ms or more",
            options.interval
        );
    }
    if !options.listen.ip().is_loopback() && !options.allow_remote {
        bail!(
            "--listen {} is not a loopback address: the exporter binds to loopback unless --allow-remote is given (it is read-only, but says a lot about this host; put it behind your network's access control)",
            options.listen
        );
    }
    if options.limits.max_napi_instances == 0 || options.limits.max_devices == 0 {
        bail!("max_napi_instances and max_devices must be at least 1");
    }
    if options.findings_window < options.interval {
        bail!("findings_window must be at least one --interval");
    }
    if options.http.max_connections == 0 {
        bail!("--max-connections (max_connections) must be at least 1");
    }
    if options.http.header_timeout < Duration::from_millis(100) {
        bail!(
            "--header-timeout (header_timeout) {:?} is too short: use 100ms or more (a client needs a round trip or two to send its request)",
            options.http.header_timeout
        );
    }
    Ok(())
}

fn status(json: bool, state: &str, options: &Options, trace: bool, reason: &str) {
    if json {
        let value = serde_json::json!({
            "state": state,
            "listen": options.listen.to_string(),
            "interval_s": options.interval.as_secs_f64(),
            "tier": if trace { "trace" } else { "proc" },
            "tier_reason": reason,
        });
        println!("{value}");
    } else if state == "serving" {
        println!(
            "napilab export: serving http://{}/metrics every {} ({} tier{}); SIGTERM or Ctrl-C stops",
            options.listen,
            humantime::format_duration(options.interval),
            if trace { "trace" } else { "proc" },
            if reason.is_empty() {
                String::new()
            } else {
                format!(": {reason}")
            }
        );
    } else {
        println!("napilab export: stopped");
    }
}

/// On SIGINT or SIGTERM, stops the HTTP server (`server`) and wakes the sampler
/// (`sampler`).
fn stop_on_signals(server: Arc<tokio::sync::Notify>, sampler: mpsc::Sender<()>) -> Result<()> {
    let mut signals = signal_hook::iterator::Signals::new([
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
    ])
    .context("cannot install the SIGTERM/Ctrl-C handler")?;
    std::thread::spawn(move || {
        if signals.forever().next().is_some() {
            // notify_one keeps the wake-up if the server is not waiting yet.
            server.notify_one();
            let _ = sampler.send(());
        }
    });
    Ok(())
}

const PLAIN: &str = "text/plain; charset=utf-8";

fn text_answer(code: u16, body: String) -> export_http::Answer {
    export_http::answer(code, Bytes::from(body), PLAIN, &[])
}

/// Whether the Accept header asks for OpenMetrics (Prometheus sends it first).
pub fn wants_openmetrics(accept: Option<&str>) -> bool {
    accept.is_some_and(|a| {
        a.split(',').any(|part| {
            let mut fields = part.split(';').map(str::trim);
            let is_om = fields.next() == Some("application/openmetrics-text");
            let refused = fields.any(|f| f.replace(' ', "") == "q=0");
            is_om && !refused
        })
    })
}

/// The answer to one request. Read-only: GET and HEAD only (hyper leaves out a HEAD
/// answer's body and keeps its Content-Length).
fn respond(asked: &Asked, latest: &Latest, stale_after: Duration) -> export_http::Answer {
    if !matches!(*asked.method, hyper::Method::GET | hyper::Method::HEAD) {
        return export_http::answer(
            405,
            Bytes::from_static(b"napilab export is read-only: use GET\n"),
            PLAIN,
            &[("Allow", "GET, HEAD")],
        );
    }
    let current = match latest.read() {
        Ok(guard) => guard.clone(),
        Err(poisoned) => poisoned.into_inner().clone(),
    };
    match asked.path {
        "/metrics" => {
            if wants_openmetrics(asked.accept) {
                export_http::answer(200, current.openmetrics.clone(), OPENMETRICS_TYPE, &[])
            } else {
                export_http::answer(200, current.text.clone(), TEXT_TYPE, &[])
            }
        }
        "/healthz" => {
            let age = current.sampled.elapsed();
            if age <= stale_after {
                text_answer(200, "ok\n".into())
            } else {
                text_answer(
                    503,
                    format!("stale: the last sample is {:.1} s old\n", age.as_secs_f64()),
                )
            }
        }
        "/" => text_answer(
            200,
            "napilab export: /metrics (Prometheus text or OpenMetrics by Accept), /healthz\n"
                .into(),
        ),
        _ => text_answer(404, "not found: try /metrics\n".into()),
    }
}

/// The sampling side: the observe pipeline kept open, with a bounded window of
/// intervals for the rules.
struct Exporter {
    root: PathBuf,
    use_netlink: bool,
    header: RecordingHeader,
    sampler: Sampler,
    /// Refilled each step: its strings are reused, not reallocated.
    raw: RawSample,
    /// Parses /proc/interrupts against its cached layout, into recycled samples.
    parser: SampleParser,
    notices: Notices,
    tracer: Option<napilab_trace::AlwaysOn>,
    tier_reason: String,
    bpf_stats_fd: Option<std::os::fd::OwnedFd>,
    previous: Option<(Sample, Option<napilab_trace::Snapshot>)>,
    window: VecDeque<Interval>,
    window_len: usize,
    first_t_ns: Option<u64>,
    intervals_seen: usize,
    last_rescan: Instant,
    last_map: Instant,
    limits: Limits,
    cost: SelfCost,
    napi_activity: NapiActivity,
    /// The links when the map was last read: a difference means a device came or went.
    map_links: Option<Vec<u32>>,
    /// The HTTP server's counts, exported with the exporter's own cost.
    http: Arc<HttpCounters>,
}

impl Exporter {
    fn start(options: &Options, root: &Path, http: Arc<HttpCounters>) -> Exporter {
        let use_netlink = options.root.is_none();
        let header = describe_host(root, use_netlink);
        let (tracer, tier_reason) = if !options.trace {
            (None, "no --trace".to_string())
        } else if options.root.is_some() {
            (None, "--root reads a copied tree: no BPF".to_string())
        } else {
            let trace_options = napilab_trace::TraceOptions {
                netdev_budget: header.settings.netdev_budget,
                netdev_budget_usecs: header.settings.netdev_budget_usecs,
                ..napilab_trace::TraceOptions::default()
            };
            match napilab_trace::AlwaysOn::start(&trace_options) {
                Ok(t) => {
                    for (what, why) in &t.notices {
                        eprintln!("napilab export: {what}: {why}");
                    }
                    (Some(t), String::new())
                }
                Err(e) => {
                    let reason = format!("BPF tracing unavailable ({e}); exporting the /proc tier");
                    eprintln!("napilab export: {reason}");
                    (None, reason)
                }
            }
        };
        let bpf_stats = if options.bpf_stats && tracer.is_some() {
            let fd = napilab_trace::always_on::enable_run_time_stats();
            if fd.is_none() {
                eprintln!("napilab export: the kernel refused to enable BPF statistics (BPF_ENABLE_STATS); BPF run times are absent");
            }
            fd
        } else {
            None
        };
        let window_len = (options.findings_window.as_nanos() / options.interval.as_nanos().max(1))
            .clamp(1, 3600) as usize;
        Exporter {
            root: root.to_path_buf(),
            use_netlink,
            sampler: Sampler::new(root, use_netlink),
            raw: RawSample::default(),
            parser: SampleParser::default(),
            notices: Notices(header.notices.clone()),
            header,
            tracer,
            tier_reason,
            bpf_stats_fd: bpf_stats,
            previous: None,
            window: VecDeque::new(),
            window_len,
            first_t_ns: None,
            intervals_seen: 0,
            last_rescan: Instant::now(),
            last_map: Instant::now(),
            limits: options.limits,
            cost: SelfCost::default(),
            napi_activity: NapiActivity::default(),
            map_links: None,
            http,
        }
    }

    /// Samples once and renders both formats.
    fn step(&mut self) -> Result<Rendered> {
        let began = Instant::now();
        if self.last_rescan.elapsed() >= THREAD_RESCAN {
            self.sampler.refresh_threads();
            self.last_rescan = Instant::now();
        }
        self.sampler.sample_into(&mut self.raw);
        let links = link_indexes(self.raw.links.as_deref());
        let changed = match (&self.map_links, &links) {
            (Some(mapped), Some(now)) => mapped != now,
            (None, _) => {
                self.map_links = links.clone();
                false
            }
            (Some(_), None) => false,
        };
        if self.last_map.elapsed() >= MAP_REFRESH
            || (changed && self.last_map.elapsed() >= MAP_REFRESH_ON_CHANGE)
        {
            self.header = describe_host(&self.root, self.use_netlink);
            self.last_map = Instant::now();
            self.map_links = links;
            if changed {
                // New devices may bring NAPI kthreads.
                self.sampler.refresh_threads();
                self.last_rescan = Instant::now();
            }
        }
        let sample = self
            .parser
            .parse(&self.raw, &self.header.online_cpus, &mut self.notices);
        let snapshot = self
            .tracer
            .as_ref()
            .map(|t| t.snapshot(&self.header.online_cpus));
        self.push_interval(&sample, snapshot.as_ref());
        let findings = self.findings();
        let exported = snapshot.as_ref().map(|snap| {
            self.napi_activity
                .expire(snap, &self.header.topology.devices, Instant::now())
        });
        let (mut families, dropped) = export_metrics::packet_path_families(
            &PacketPath {
                header: &self.header,
                sample: &sample,
                trace: exported.as_deref(),
                findings: &findings,
            },
            self.limits,
        );
        if let Some((replaced, _)) = self.previous.replace((sample, snapshot)) {
            self.parser.recycle(replaced);
        }

        self.cost.samples += 1;
        self.cost.dropped = Dropped {
            napi_instances: self.cost.dropped.napi_instances + dropped.napi_instances,
            devices: self.cost.dropped.devices + dropped.devices,
        };
        self.cost.cpu_seconds = own_cpu_seconds().unwrap_or(self.cost.cpu_seconds);
        self.cost.resident_bytes = own_resident_bytes();
        self.cost.heap = crate::heap::heap_stats();
        self.cost.trace_active = self.tracer.is_some();
        self.cost.bpf_stats_enabled = std::fs::read_to_string("/proc/sys/kernel/bpf_stats_enabled")
            .ok()
            .map(|s| s.trim() != "0")
            .map(|on| on || self.bpf_stats_fd.is_some());
        self.cost.bpf_programs = self
            .tracer
            .as_ref()
            .map(|t| t.program_costs())
            .unwrap_or_default();
        self.cost.http = self.http.counts();
        self.cost.last_sample_unix_seconds = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or(0.0);
        families.extend(export_metrics::exporter_families(&self.cost));
        let text = exposition::prometheus_text(&families)
            .context("cannot encode the Prometheus text format")?;
        let openmetrics = exposition::openmetrics(families).context("cannot encode OpenMetrics")?;
        // The next sample reports how long this one took, rendering included.
        self.cost.last_sample_seconds = began.elapsed().as_secs_f64();
        Ok(Rendered {
            text: Bytes::from(text),
            openmetrics: Bytes::from(openmetrics),
            sampled: Instant::now(),
        })
    }

    /// Derives the interval closed by `sample` into the bounded window.
    fn push_interval(&mut self, sample: &Sample, snapshot: Option<&napilab_trace::Snapshot>) {
        let first = *self.first_t_ns.get_or_insert(sample.t_ns);
        let Some((prev, prev_snap)) = &self.previous else {
            return;
        };
        if sample.t_ns <= prev.t_ns {
            return;
        }
        let ctx = DeriveContext {
            topology: &self.header.topology,
            accounting: self.header.host.accounting,
            user_hz: self.header.host.user_hz,
        };
        let start_s = prev.t_ns.saturating_sub(first) as f64 / 1e9;
        let seconds = sample.t_ns.saturating_sub(prev.t_ns) as f64 / 1e9;
        let mut interval = derive_interval(prev, sample, &ctx, self.intervals_seen, start_s);
        if let (Some(a), Some(b)) = (prev_snap, snapshot) {
            interval.trace = Some(napilab_trace::trace_interval(a, b, seconds));
        }
        self.intervals_seen += 1;
        self.window.push_back(interval);
        while self.window.len() > self.window_len {
            self.window.pop_front();
        }
    }

    /// The rules of `napilab observe` over the window.
    fn findings(&self) -> Vec<napilab_core::Finding> {
        if self.window.is_empty() {
            return Vec::new();
        }
        let mut origin = self.header.origin.clone();
        origin.kind = OriginKind::Live;
        let observation = Observation {
            schema: OBSERVATION_SCHEMA.into(),
            origin,
            host: self.header.host.clone(),
            settings: self.header.settings.clone(),
            topology: self.header.topology.clone(),
            intervals: self.window.iter().cloned().collect(),
            findings: Vec::new(),
            notices: Vec::new(),
            trace_cost: None,
        };
        napilab_core::explain::explain(&observation)
    }
}

/// The sampled links' (rtnetlink) indexes, sorted; None without netlink (--root), where
/// the map refresh timer alone applies.
fn link_indexes(links: Option<&[napilab_probe::netlink::LinkStats]>) -> Option<Vec<u32>> {
    let mut indexes: Vec<u32> = links?.iter().map(|l| l.ifindex).collect();
    indexes.sort_unstable();
    Some(indexes)
}

/// When each traced NAPI instance last polled, to leave idle unknown instances out.
#[derive(Default)]
struct NapiActivity {
    /// (napi_id, unnamed_ifindex) -> (polls summed over CPUs and contexts, when they last
    /// changed). Holds only instances of the latest snapshot: bounded by the BPF map.
    seen: std::collections::HashMap<(u32, u32), (u64, Instant)>,
}

impl NapiActivity {
    /// The snapshot to export: without the instances the map does not know that have not
    /// polled for NAPI_IDLE_EXPIRY. Borrowed when nothing is left out.
    fn expire<'a>(
        &mut self,
        snap: &'a napilab_trace::Snapshot,
        devices: &[napilab_core::topology::Device],
        now: Instant,
    ) -> std::borrow::Cow<'a, napilab_trace::Snapshot> {
        let mut polls: std::collections::HashMap<(u32, u32), u64> = Default::default();
        for (key, counts) in &snap.napi {
            *polls.entry((key.napi_id, key.unnamed_ifindex)).or_default() += counts.polls;
        }
        self.seen.retain(|key, _| polls.contains_key(key));
        let known = |id: u32| id == 0 || devices.iter().any(|d| d.napis.iter().any(|n| n.id == id));
        let mut idle = Vec::new();
        for (key, total) in polls {
            let entry = self.seen.entry(key).or_insert((total, now));
            if entry.0 != total {
                *entry = (total, now);
            }
            if !known(key.0) && now.saturating_duration_since(entry.1) >= NAPI_IDLE_EXPIRY {
                idle.push(key);
            }
        }
        if idle.is_empty() {
            return std::borrow::Cow::Borrowed(snap);
        }
        let mut kept = snap.clone();
        kept.napi
            .retain(|key, _| !idle.contains(&(key.napi_id, key.unnamed_ifindex)));
        std::borrow::Cow::Owned(kept)
    }
}

fn own_cpu_seconds() -> Option<f64> {
    let text = std::fs::read_to_string("/proc/self/stat").ok()?;
    let task = napilab_probe::procfs::parse_task_stat(&text).ok()?;
    Some((task.utime + task.stime) as f64 / f64::from(napilab_probe::kernel::user_hz()))
}

fn own_resident_bytes() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = text.split_whitespace().nth(1)?.parse().ok()?;
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    Some(pages * u64::try_from(page).ok()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accept_negotiation() {
        assert!(wants_openmetrics(Some(
            "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
        )));
        assert!(!wants_openmetrics(Some("text/plain;version=0.0.4")));
        assert!(!wants_openmetrics(Some(
            "application/openmetrics-text; q=0"
        )));
        assert!(!wants_openmetrics(None));
    }

    #[test]
    fn idle_napi_instances_the_map_does_not_know_are_left_out_until_they_poll_again() {
        use napilab_core::trace::ExecContext;
        use napilab_trace::snapshot::{NapiCounts, NapiKey};
        let key = |napi_id| NapiKey {
            napi_id,
            unnamed_ifindex: 0,
            unnamed_netns: 0,
            cpu: 0,
            context: ExecContext::Hardirq,
        };
        let counts = |polls| NapiCounts {
            polls,
            ..NapiCounts::default()
        };
        let mut snap = napilab_trace::Snapshot::default();
        // 0: the backlog, never expired; 7: an instance of another namespace or a
        // deleted device; 9: one the map knows (below).
        for id in [0, 7, 9] {
            snap.napi.insert(key(id), counts(5));
        }
        let devices = vec![napilab_core::topology::Device {
            name: "eth0".into(),
            ifindex: 2,
            napis: vec![napilab_core::topology::Napi {
                id: 9,
                ..Default::default()
            }],
            ..Default::default()
        }];
        let mut activity = NapiActivity::default();
        let t0 = Instant::now();
        let ids = |s: &napilab_trace::Snapshot| -> Vec<u32> {
            let mut v: Vec<u32> = s.napi.keys().map(|k| k.napi_id).collect();
            v.dedup();
            v
        };
        assert_eq!(ids(&activity.expire(&snap, &devices, t0)), [0, 7, 9]);
        let later = t0 + NAPI_IDLE_EXPIRY;
        assert_eq!(ids(&activity.expire(&snap, &devices, later)), [0, 9]);
        // It polls again: back.
        snap.napi.insert(key(7), counts(6));
        assert_eq!(ids(&activity.expire(&snap, &devices, later)), [0, 7, 9]);
        // Gone from the BPF map: forgotten, so what is tracked stays bounded.
        snap.napi.remove(&key(7));
        activity.expire(&snap, &devices, later);
        assert_eq!(activity.seen.len(), 2);
    }

    #[test]
    fn config_rejects_unknown_keys_naming_the_file() {
        let dir = std::env::temp_dir().join(format!("napilab-export-cfg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("tmp");
        let path = dir.join("export.toml");
        std::fs::write(&path, "listen = \"127.0.0.1:1\"\nintervall = \"1s\"\n").expect("write");
        let err = format!("{:#}", ConfigFile::read(&path).expect_err("unknown key"));
        assert!(
            err.contains("export.toml") && err.contains("intervall"),
            "{err}"
        );
        std::fs::write(&path, "listen = \"127.0.0.1:1\"\nmax_devices = 3\n").expect("write");
        let cfg = ConfigFile::read(&path).expect("valid");
        assert_eq!(cfg.max_devices, Some(3));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn config_sets_the_http_limits_and_names_a_bad_one() {
        use clap::Parser;
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            export: ExportArgs,
        }
        let dir = std::env::temp_dir().join(format!("napilab-export-http-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("tmp");
        let path = dir.join("export.toml");
        let parse = |extra: &[&str]| {
            let mut argv = vec!["export", "--config", path.to_str().expect("utf-8 path")];
            argv.extend_from_slice(extra);
            options(Cli::parse_from(argv).export)
        };
        std::fs::write(&path, "max_connections = 7\nheader_timeout = \"2s\"\n").expect("write");
        let o = parse(&[]).expect("valid");
        assert_eq!(o.http.max_connections, 7);
        assert_eq!(o.http.header_timeout, Duration::from_secs(2));
        // Flags win over the file.
        let o = parse(&["--max-connections", "9", "--header-timeout", "5s"]).expect("valid");
        assert_eq!(o.http.max_connections, 9);
        assert_eq!(o.http.header_timeout, Duration::from_secs(5));
        // Defaults without either.
        std::fs::write(&path, "").expect("write");
        let o = parse(&[]).expect("valid");
        assert_eq!(o.http.max_connections, 512);
        assert_eq!(o.http.header_timeout, Duration::from_secs(10));
        std::fs::write(&path, "header_timeout = \"soon\"\n").expect("write");
        let err = format!("{:#}", parse(&[]).expect_err("not a duration"));
        assert!(
            err.contains("export.toml") && err.contains("header_timeout"),
            "{err}"
        );
        std::fs::write(&path, "max_connections = \"many\"\n").expect("write");
        let err = format!("{:#}", parse(&[]).expect_err("not a number"));
        assert!(
            err.contains("export.toml") && err.contains("max_connections"),
            "{err}"
        );
        std::fs::write(&path, "max_connections = 0\n").expect("write");
        let err = format!(
            "{:#}",
            validate(&parse(&[]).expect("parsed")).expect_err("zero")
        );
        assert!(err.contains("max_connections"), "{err}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
