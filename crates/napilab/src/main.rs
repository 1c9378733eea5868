//! The `napilab` binary: argument parsing and wiring only (docs/architecture.md section 3).

mod compare_cmd;
mod export_cmd;
mod export_http;
mod export_metrics;
mod exposition;
mod heap;
mod host_cmd;
mod kv_cmd;
mod lab_cmd;
mod lab_requests;
mod map_cmd;
mod observe_cmd;
mod render;
mod report_cmd;
mod sim_calibrate_server;
mod sim_cmd;
mod timed_run;
mod top;
mod top_cmd;
mod tune_cmd;
mod tune_predict;
mod tunnel_cmd;
mod twin_table;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// jemalloc rather than glibc malloc: the exporter runs for days and must hold its RSS
/// flat and report its live heap (crate::heap says why).
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// See, explain, experiment with and tune how Linux processes packets: which NAPI
/// instance runs on which CPU, in which context, at what cost, and which kernel
/// statistics are being misread.
#[derive(Parser)]
#[command(name = "napilab", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Show the packet-path map: devices, queues, NAPI instances, IRQs, CPUs, who polls
    /// what, and the per-device and per-NAPI settings.
    Map(MapArgs),
    /// Sample this host's packet-path counters, derive per-CPU, per-device and per-IRQ
    /// rates, and name misreadings and bottlenecks.
    Observe(ObserveArgs),
    /// A full-screen live view: the NAPI map with who polls each instance, polls/s and
    /// packets per poll by context (--trace), per-CPU measured vs tick-sampled softirq
    /// and IRQ time, softnet drops and squeezes, findings as they fire; `?` for keys.
    Top(top_cmd::TopArgs),
    /// Plan, apply (with a journal) and revert packet-path settings from profiles.
    Tune(tune_cmd::TuneArgs),
    /// Run experiment scenarios on the real kernel in network namespaces (gen -> DUT ->
    /// sink), and clean up after interrupted runs.
    Lab(lab_cmd::LabArgs),
    /// Predict with the twin, a deterministic model of the packet path, what this host
    /// cannot run: other hardware, other settings.
    Sim(sim_cmd::SimArgs),
    /// Render a run (from the results store or a run.json file) as an HTML report with
    /// plots, a CSV of its points and its JSON; `--list` lists the stored runs.
    Report(report_cmd::ReportArgs),
    /// Compare two stored runs (or two configurations of one run): each maximum and
    /// latency with its confidence interval, the difference, and whether it is
    /// significant (Welch's t-test); `--html` writes the paired plots.
    Compare(compare_cmd::CompareArgs),
    /// Serve the memcached text protocol (get/set/delete) in a namespace with one epoll
    /// instance per NAPI instance and an interrupt mode's epoll parameters; prints its
    /// statistics at exit (the lab's key-value server).
    KvServer(kv_cmd::ServerArgs),
    /// Offer open-loop (Poisson) or closed-loop memcached-protocol load and report QPS,
    /// latency percentiles, errors, and whether the generator was the limit.
    KvLoad(kv_cmd::LoadArgs),
    /// The vpn topology's user-space tunnel endpoint: UDP in, ChaCha20-Poly1305 on
    /// round-robin workers, each peer's packets into its own IFF_NAPI TUN queue; prints
    /// its statistics at exit. `--detect`: kernel WireGuard or this endpoint.
    TunnelEndpoint(tunnel_cmd::EndpointArgs),
    /// Encrypting peers sending sealed UDP tunnel packets to a tunnel endpoint at a rate.
    TunnelPeers(tunnel_cmd::PeersArgs),
    /// Show which machine this is, as every record stores it: CPU, microcode,
    /// mitigations, kernel, virtualization, idle and frequency drivers, HZ, NUMA nodes.
    Host(host_cmd::HostArgs),
    /// Serve this host's packet-path metrics to Prometheus (node_exporter-compatible raw
    /// counters and the corrected napilab_* ones) until SIGTERM; docs/export.md.
    Export(export_cmd::ExportArgs),
}

#[derive(clap::Args)]
struct MapArgs {
    /// Print the map as JSON.
    #[arg(long)]
    json: bool,
    /// Read /proc and /sys under DIR instead of / (a recorded tree); netlink is skipped.
    #[arg(long, value_name = "DIR", conflicts_with = "trace")]
    root: Option<PathBuf>,
    /// Also watch who actually polls each NAPI instance (BPF on napi:napi_poll, needs
    /// root): execution context, CPU, polls and packets per second.
    #[arg(long)]
    trace: bool,
    /// How long `--trace` watches (e.g. 1s, 500ms).
    #[arg(long = "for", value_name = "DURATION", default_value = "1s", value_parser = humantime::parse_duration, requires = "trace")]
    duration: std::time::Duration,
}

#[derive(clap::Args)]
#[command(group(clap::ArgGroup::new("tracing").args(["trace", "trace_packets"]).multiple(true)))]
struct ObserveArgs {
    /// How long to observe (e.g. 10s, 1m).
    #[arg(long = "for", value_name = "DURATION", default_value = "10s", value_parser = humantime::parse_duration)]
    duration: std::time::Duration,
    /// Sampling interval (e.g. 1s, 500ms); at least 100ms.
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = humantime::parse_duration)]
    interval: std::time::Duration,
    /// Print the Observation as JSON (docs/observation.md) instead of tables.
    #[arg(long)]
    json: bool,
    /// Keep the raw samples in FILE so `--replay FILE` can rerun the analysis offline.
    #[arg(long, value_name = "FILE", conflicts_with = "replay")]
    record: Option<PathBuf>,
    /// Analyse a recording made with --record instead of sampling this host.
    #[arg(long, value_name = "FILE")]
    replay: Option<PathBuf>,
    /// Read /proc and /sys under DIR instead of / (a recorded tree); netlink is skipped.
    #[arg(long, value_name = "DIR", conflicts_with = "replay")]
    root: Option<PathBuf>,
    /// Do not print the map before the observation (tables only).
    #[arg(long)]
    no_map: bool,
    /// Also measure NAPI polls, softirq and hard-IRQ time with BPF tracepoints (source
    /// `trace`, needs root); falls back to /proc only, saying what is missing.
    #[arg(long, conflicts_with_all = ["replay", "root"])]
    trace: bool,
    /// With --trace: sample kernel stacks at 1 kHz (cpu-clock) and split CPU time by
    /// packet-path stage (source `sample`).
    #[arg(long, requires = "trace")]
    stages: bool,
    /// With --stages: write a flame graph (SVG) of the sampled stacks, rooted by stage.
    #[arg(long, value_name = "FILE", requires = "stages")]
    flamegraph: Option<PathBuf>,
    /// Implies --trace: follow packets through their stages (netif_receive_skb ->
    /// net_dev_queue -> net_dev_start_xmit -> net_dev_xmit, qdisc_dequeue) for
    /// stage-to-stage latency, and count drops by reason (skb:kfree_skb, every drop).
    /// Stages are traced 20 ms of every second, so their rates are estimates with an
    /// error; see docs/trace.md for the cost.
    #[arg(long, conflicts_with_all = ["replay", "root"])]
    trace_packets: bool,
    /// With --trace-packets: trace every packet at every stage (exact stage counts, at
    /// several times the CPU per packet).
    #[arg(long, requires = "trace_packets")]
    trace_packets_full: bool,
    /// With --trace or --trace-packets: keep softirq_raise attached all the time, so
    /// the raise-to-entry latency is timed every millisecond instead of only in its
    /// default windows (100 ms of every second); costs about 0.1-0.4% more of a
    /// saturated DUT (docs/trace.md, "Overhead").
    #[arg(long, requires = "tracing")]
    trace_raise_always: bool,
    /// Take the first sample at this wall-clock time (milliseconds since the Unix
    /// epoch), after loading everything: for lining the window up with another tool's
    /// (the lab does). At most 10 minutes ahead; a time already past starts at once.
    #[arg(long, value_name = "UNIX_MS", conflicts_with = "replay")]
    start_at: Option<u64>,
}

/// Exit status of a run stopped by SIGINT or SIGTERM, as shells report a signal death.
const INTERRUPTED_EXIT: u8 = 130;

/// A verb stopped early by Ctrl-C or SIGTERM after saving what it had finished.
#[derive(Debug)]
pub struct Interrupted(pub &'static str);

impl std::fmt::Display for Interrupted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "interrupted: {}", self.0)
    }
}

impl std::error::Error for Interrupted {}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // Commands that only read (their BPF programs and perf events are fd-bound and go
    // with the process) end quietly when the reader of their output goes away, as
    // `napilab sim calibrate --json | head` should, instead of panicking in println!.
    // The lab and tune keep SIGPIPE ignored: they must run their cleanup.
    if matches!(
        cli.command,
        Command::Map(_)
            | Command::Observe(_)
            | Command::Sim(_)
            | Command::Report(_)
            | Command::Compare(_)
            | Command::Host(_)
    ) {
        // SAFETY: called before any thread is started; restores the default action.
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        }
    }
    let result = match cli.command {
        Command::Map(args) => map_cmd::run(&map_cmd::Options {
            json: args.json,
            root: args.root,
            trace: args.trace.then_some(args.duration),
        }),
        Command::Observe(args) => observe_cmd::run(&observe_cmd::Options {
            live: napilab_trace::live::LiveOptions {
                duration: args.duration,
                interval: args.interval,
                record: args.record,
                root: args.root,
                trace: args.trace || args.trace_packets,
                stages: args.stages,
                flamegraph: args.flamegraph,
                trace_packets: args.trace_packets,
                trace_packets_full: args.trace_packets_full,
                trace_raise_always: args.trace_raise_always,
                start_at_unix_ms: args.start_at,
            },
            json: args.json,
            replay: args.replay,
            show_map: !args.no_map,
        }),
        Command::Top(args) => top_cmd::run(args),
        Command::Tune(args) => tune_cmd::run(args),
        Command::Lab(args) => lab_cmd::run(args),
        Command::Sim(args) => sim_cmd::run(args),
        Command::Report(args) => report_cmd::run(args),
        Command::Compare(args) => compare_cmd::run(args),
        Command::KvServer(args) => kv_cmd::run_server(args),
        Command::KvLoad(args) => kv_cmd::run_load(args),
        Command::TunnelEndpoint(args) => tunnel_cmd::run_endpoint(args),
        Command::TunnelPeers(args) => tunnel_cmd::run_peers(args),
        Command::Host(args) => host_cmd::run(args),
        Command::Export(args) => export_cmd::options(args).and_then(|o| export_cmd::run(&o)),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.is::<Interrupted>() => {
            eprintln!("napilab: {e}");
            ExitCode::from(INTERRUPTED_EXIT)
        }
        Err(e) => {
            eprintln!("napilab: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
