//! The lab's `server` topology on the twin (docs/sim.md, "The server topology on the
//! twin"): maps a server scenario's configurations (interrupt `mode`, `server`,
//! `server_cpus`, `[requests]`) onto twin configurations with an epoll application
//! per RX queue, runs the request-rate sweep and the lab's bisection for the highest
//! rate whose p99 meets the objective, and returns the lab's result types
//! ([`RequestResults`]), so the report and `napilab compare` set twin and lab side by
//! side.
//!
//! How the lab's veth pair becomes the twin (docs/lab.md, "Modes on veth"):
//! - A request is one packet into the DUT's veth RX queue; the reply is one packet out
//!   of its egress. TCP ACKs, segmentation and the client's own work are not modelled.
//! - In the softirq modes the request's NAPI poll runs in the NET_RX softirq of the
//!   **client's** CPU (the sender's `veth_xmit` raises it): the queue's CPU is
//!   `generator_cpus[q]`. `threaded` puts the NAPI kthread on `server_cpus[q]`;
//!   `busy-wait` and `irq-suspend` poll from the server's epoll loop on its CPU.
//! - Each mode's per-NAPI settings and the server's busy-poll parameters come from the
//!   napilab-tune profile of the same name, as the lab applies them.
//! - A non-blocking epoll loop (`busy-wait`'s `blocking_epoll = false`) never blocks:
//!   it busy-polls for `busy_poll_usecs` at a time; a loop that found nothing makes
//!   epoll forget its NAPI id, and the server spins without polling until a request
//!   reaches its socket through the instance's own timer (`ep_busy_loop`).
//! - The server's per-request costs and the TCP receive cost per request packet are
//!   ASSUMED ([`ServerCosts::assumed`]) unless the profile has a `[server]` table
//!   (`napilab sim calibrate` on a server run writes one, `crate::calibrate_server`;
//!   the shipped veth-lab-server has one); each says where it comes from in the
//!   configuration's `source:` settings.

use std::collections::BTreeMap;

use napilab_core::requests::CAPACITY_PROBE;
use napilab_core::scenario::{RequestWorkload, Scenario, ServerEngine, ServerMode};
use napilab_core::{
    LatencySummary, Notice, PointRole, RequestPointResult, RequestResults, ServerSummary,
};
use napilab_experiment::request_search::RequestTestbed;
use napilab_experiment::requests::{self, Capacity, RequestBench};

use crate::config::{
    AppConfig, BusyPoll, ClassConfig, ClientSide, MeasurementConfig, NapiContext, Pattern,
    RxQueueConfig, ThreadPolicy, TrafficConfig,
};
use crate::profile::{ParamSource, SourceKind};
pub use crate::server_plan::{ServerConfiguration, ServerCosts, ServerPlan};
use crate::twin_plan::{EnginesOnPoller, TwinConfiguration, TwinPlan, LAB_KERNEL, VETH_RING};
use crate::{ConfigError, Profile, SimConfig, SimResult};

/// The server's socket queue, in requests: TCP does not drop a request its socket
/// cannot take (flow control stalls the client instead), so the twin's socket must not
/// overflow before the objective fails.
const SOCKET_REQUESTS: u32 = 65_536;
/// Ethernet, IPv4 and TCP (with timestamps) headers of one request or reply segment.
const TCP_FRAME_HEADERS: u32 = 14 + 20 + 32;
/// `get key:0000000000\r\n`, and the reply's `VALUE <key> 0 <n>\r\n` ... `END\r\n`
/// framing and `set`'s command line and `STORED\r\n` (crates/napilab-lab request
/// protocol, docs/lab.md "Request workloads").
const GET_LINE: u32 = 20;
const VALUE_FRAMING: u32 = 34;
const SET_LINE: u32 = 32;
const STORED_LINE: u32 = 8;

/// One mode as the twin runs it: the per-NAPI settings of the DUT's RX queues and the
/// server's epoll side.
#[derive(Clone, Debug, PartialEq)]
pub struct ModeSettings {
    pub napi: NapiContext,
    pub defer_hard_irqs: u32,
    pub gro_flush_timeout_ns: u64,
    pub irq_suspend_timeout_ns: u64,
    /// The server's busy polling (None: blocking epoll without busy poll).
    pub busy_poll: Option<BusyPoll>,
    /// Blocking `epoll_wait`, or a non-blocking loop: the lab's server calls
    /// `epoll_pwait2` with a 1 ns timeout (timeout 0 returns before the kernel's
    /// busy-poll loop since Linux 5.11), so each call busy-polls.
    pub blocking: bool,
    /// Where the numbers come from.
    pub source: String,
}

/// The per-NAPI integer `setting` of a tune profile (absent: 0, the kernel default).
fn napi_value(p: &napilab_tune::profile::Profile, setting: &str) -> u64 {
    p.items
        .iter()
        .find(|i| i.setting == setting)
        .and_then(|i| i.value.as_integer())
        .map_or(0, |v| u64::try_from(v).unwrap_or(0))
}

/// `mode`'s settings from napilab-tune's profile of the same name, the one the lab
/// applies.
pub fn mode_settings(mode: ServerMode) -> Result<ModeSettings, String> {
    let name = mode.as_str();
    let (p, origin) = napilab_tune::profile::load(name)
        .map_err(|e| format!("mode {name}: its napilab-tune profile: {e}"))?;
    let threaded = napi_value(&p, "napi.threaded");
    let busy_poll = p.app.as_ref().map(|a| BusyPoll {
        usecs: a.busy_poll_usecs,
        budget: u32::from(a.busy_poll_budget),
        queue: 0,
        prefer: a.prefer_busy_poll,
        nonblocking_epoll: !a.blocking_epoll,
    });
    Ok(ModeSettings {
        napi: match threaded {
            0 => NapiContext::Softirq,
            napilab_tune::knobs::THREADED_BUSY_POLL => NapiContext::ThreadedBusyPoll,
            _ => NapiContext::Threaded,
        },
        defer_hard_irqs: u32::try_from(napi_value(&p, "napi.defer-hard-irqs")).unwrap_or(u32::MAX),
        gro_flush_timeout_ns: napi_value(&p, "napi.gro-flush-timeout"),
        irq_suspend_timeout_ns: napi_value(&p, "napi.irq-suspend-timeout"),
        blocking: p.app.as_ref().is_none_or(|a| a.blocking_epoll),
        busy_poll,
        source: format!("napilab-tune profile {name} ({origin})"),
    })
}

fn notice(what: impl Into<String>, why: impl Into<String>) -> Notice {
    Notice {
        what: what.into(),
        why: why.into(),
    }
}

/// Why the lab reports `engine` in `mode` as not runnable, before any kernel check (the
/// same reason napilab-lab's server runner gives).
pub fn not_runnable(engine: ServerEngine, mode: ServerMode) -> Option<String> {
    (engine == ServerEngine::Memcached && mode.needs_epoll_params()).then(|| {
        format!(
            "memcached cannot run {}: it sets no per-epoll busy-poll parameters (EPIOCSPARAMS); napilab's server does",
            mode.as_str()
        )
    })
}

/// Maps a parsed server scenario. `file` names it in errors.
pub fn plan(s: &Scenario, file: &str) -> Result<TwinPlan, ConfigError> {
    let w = s.requests.clone().ok_or_else(|| {
        ConfigError::new(
            file,
            "requests",
            "the server topology needs [requests] (docs/lab.md, \"The server topology\")",
        )
    })?;
    let m = &s.measurement;
    let configs = s.configurations();
    let referenced = configs
        .iter()
        .flat_map(|c| {
            c.settings
                .generator_cpus
                .iter()
                .chain(&c.settings.server_cpus)
                .copied()
                .collect::<Vec<_>>()
        })
        .max()
        .unwrap_or(0);
    let cpus = (referenced + 1).max(2);
    // The highest rate a point may run at: a search range derived from the capacity
    // probe may be raised SEARCH_RAISES times (the probe itself is below the client's
    // and the server's limits, which the default top is above).
    let raised = f64::from(1u32 << napilab_core::requests::SEARCH_RAISES);
    let top = w
        .loads_qps
        .iter()
        .copied()
        .chain(w.search.then_some(twin_search_top(&w) * raised))
        .fold(0.0, f64::max);
    // Every reply stays "in flight" on the veth egress (no TX completion).
    let tx_ring = u32::try_from((top * (m.warmup_s + m.duration_s + 0.1)).ceil() as u64 + 4096)
        .map_err(|_| {
            ConfigError::new(
                file,
                "measurement.duration_s",
                "too many requests per point for the twin's veth egress: shorten the window or lower the rates",
            )
        })?;
    let costs = ServerCosts::assumed();
    let mut notices = vec![
        notice(
            "requests (TCP)",
            "the twin carries one packet per request and one per reply: no TCP ACKs, segmentation, retransmission or flow control; a request it drops or has not answered 5 ms after the window counts as a timeout",
        ),
        notice(
            "load generator",
            "the twin's client is a thread per RX queue on generator_cpus (the lab runs client_threads threads over its connections), costing server.client_cycles a request (send and reply read) beside the softirq work that runs on its CPU; it sends each request when it gets to it and flags a point client-limited by the lab generator's signs; TCP flow control and per-connection batching of sends are not modelled",
        ),
        notice(
            "latency",
            "the twin's latency runs, as the lab's, from the request's intended send time to the end of the client's read of the reply; the TCP/veth path the twin's packets do not carry is server.path_ns plus an exponential tail of mean server.path_tail_ns (see their sources)",
        ),
        notice(
            "server costs",
            "the server's per-request costs and the TCP receive cost are assumed (see each configuration's source: server.* settings) until napilab sim calibrate fits them from a server run",
        ),
    ];
    if m.trace != napilab_core::scenario::TraceTier::Off {
        notices.push(notice(
            "measurement.trace",
            "the twin's CPU by context and polls by context are its own (model), not the trace tier's",
        ));
    }
    if w.search && w.search_max_qps.is_none() {
        notices.push(notice(
            "requests.search_max_qps",
            "not given: the twin runs the lab's capacity probe (a closed loop over the workload's connections through its load generator) and derives the search range from it as the lab does",
        ));
    }
    let mut twins = Vec::new();
    let mut servers = Vec::new();
    for c in &configs {
        let r = &c.settings;
        let server_cpus = if r.server_cpus.is_empty() {
            vec![cpus - 1]
        } else {
            r.server_cpus.clone()
        };
        let mode = mode_settings(r.mode)
            .map_err(|e| ConfigError::new(file, format!("configuration {:?}: mode", c.name), e))?;
        twins.push(map_configuration(
            s,
            &w,
            &c.name,
            r,
            &mode,
            &server_cpus,
            cpus,
            tx_ring,
            file,
        )?);
        servers.push(ServerConfiguration {
            name: c.name.clone(),
            mode: r.mode,
            engine: r.server,
            server_cpus,
            not_runnable: not_runnable(r.server, r.mode),
        });
    }
    Ok(TwinPlan {
        name: s.name.clone(),
        loads: w.loads_qps.clone(),
        load_fractions: Vec::new(),
        seeds: (0..m.repeats.max(1))
            .map(|r| s.traffic.seed.wrapping_add(u64::from(r)))
            .collect(),
        loss_threshold: 0.0,
        search: None,
        configurations: twins,
        notices,
        requests: Some(ServerPlan {
            workload: w,
            search_repeats: m.search_repeats.max(1),
            confidence: m.confidence_level,
            costs,
            configurations: servers,
        }),
    })
}

/// Average request and reply sizes of the get/set mix, bytes on the wire.
fn frame_sizes(w: &RequestWorkload) -> (u32, u32) {
    let g = w.get_fraction;
    let v = w.value_size as f64;
    let request = g * f64::from(GET_LINE) + (1.0 - g) * (f64::from(SET_LINE) + v + 2.0);
    let reply = g * (f64::from(VALUE_FRAMING) + v) + (1.0 - g) * f64::from(STORED_LINE);
    let frame = |payload: f64| (payload.round() as u32).saturating_add(TCP_FRAME_HEADERS);
    (frame(request), frame(reply).clamp(60, 65_535))
}

#[allow(clippy::too_many_arguments)]
fn map_configuration(
    s: &Scenario,
    w: &RequestWorkload,
    name: &str,
    r: &napilab_core::scenario::DutSettings,
    mode: &ModeSettings,
    server_cpus: &[u32],
    cpus: u32,
    tx_ring: u32,
    file: &str,
) -> Result<TwinConfiguration, ConfigError> {
    let mut notices = Vec::new();
    let nq = s.topology.ingress_queues.max(1) as usize;
    let pick = |list: &[u32], q: usize| list.get(q % list.len().max(1)).copied().unwrap_or(0);
    let client_cpu = |q: usize| pick(&r.generator_cpus, q);
    let server_cpu = |q: usize| pick(server_cpus, q);
    let mut poller_cpus = Vec::with_capacity(nq);
    let mut queues = Vec::with_capacity(nq);
    for q in 0..nq {
        let cpu = match mode.napi {
            // No server mode maps onto a workqueue; were one to, it would run where
            // the server's CPUs are, as the kthreads do.
            NapiContext::Threaded | NapiContext::ThreadedBusyPoll | NapiContext::Workqueue => {
                server_cpu(q)
            }
            NapiContext::Softirq => client_cpu(q),
        };
        poller_cpus.push(cpu);
        queues.push(RxQueueConfig {
            cpu,
            napi: mode.napi,
            thread: ThreadPolicy::default(),
            defer_hard_irqs: mode.defer_hard_irqs,
            gro_flush_timeout_ns: mode.gro_flush_timeout_ns,
            irq_suspend_timeout_ns: mode.irq_suspend_timeout_ns,
            rps_cpus: Vec::new(),
            rings: Vec::new(),
            ring_poll: Default::default(),
        });
    }
    if !r.gro {
        notices.push(notice(
            "gro = false",
            "the lab's server veth always has GRO on (its NAPI instance exists only with GRO); the twin maps the queue as with GRO",
        ));
    }
    if !r.rps_cpus.is_empty() || r.napi != napilab_core::scenario::NapiContext::Softirq {
        notices.push(notice(
            "dut.napi / dut.rps_cpus",
            "the server topology sets its NAPI context through the mode; the twin, like the lab, ignores these fields",
        ));
    }
    let kernel = if mode.napi == NapiContext::ThreadedBusyPoll {
        notices.push(notice(
            "threaded busy polling",
            format!("a Linux {}.{} feature: the twin runs the configuration as on 6.19 (its NAPI kthread on the server's CPU, as the lab places threaded kthreads); the lab on a {LAB_KERNEL} kernel refuses the mode's tune profile", crate::config::THREADED_BUSY_POLL_KERNEL.0, crate::config::THREADED_BUSY_POLL_KERNEL.1),
        ));
        crate::twin_plan::BUSY_POLL_KERNEL
    } else {
        LAB_KERNEL
    };
    let (request_bytes, reply_bytes) = frame_sizes(w);
    let apps: Vec<AppConfig> = (0..nq)
        .map(|q| AppConfig {
            name: format!("worker-{q}"),
            cpu: server_cpu(q),
            fifo_priority: None,
            kernel_cycles_per_packet: 0.0,
            kernel_cycles_per_return: 0.0,
            kernel_cycles_per_resume: 0.0,
            user_cycles_per_packet: 0.0,
            reply_bytes: Some(reply_bytes),
            socket_limit: SOCKET_REQUESTS,
            busy_poll: mode.busy_poll.map(|b| BusyPoll {
                queue: q as u32,
                ..b
            }),
        })
        .collect();
    let classes = (0..nq)
        .map(|q| ClassConfig {
            name: format!("requests-q{q}"),
            share: 1.0,
            size_bytes: request_bytes,
            queue: Some(q as u32),
            ring: None,
            app: Some(format!("worker-{q}")),
            closed_loop: None,
            // The lab's load generator, on the queue's generator CPU; its costs and the
            // path's latency are put on by ServerCosts::apply.
            client: Some(ClientSide {
                cpu: client_cpu(q),
                send_cycles: 0.0,
                read_cycles: 0.0,
                round_cycles: 0.0,
                path_ns: 0,
                path_tail_ns: 0,
                connections: None,
            }),
        })
        .collect();
    let config = SimConfig {
        name: format!("{} {}", s.name, name),
        host: crate::twin_plan::lab_host(cpus, kernel),
        settings: crate::twin_plan::lab_net_settings(r),
        ingress: crate::twin_plan::veth_ingress("dut-veth", VETH_RING, queues),
        // The server's replies leave by veth, whose default qdisc is noqueue (veth sets
        // IFF_NO_QUEUE), as the router and the live host are mapped.
        egress: crate::twin_plan::veth_egress(
            "dut-veth-out",
            tx_ring,
            crate::config::QdiscKind::None,
        ),
        traffic: TrafficConfig {
            burst: 1,
            rate_pps: w.loads_qps.first().copied().unwrap_or(twin_search_top(w)),
            pattern: Pattern::Poisson,
            classes,
        },
        measurement: MeasurementConfig {
            duration_ms: s.measurement.duration_s * 1000.0,
            warmup_ms: s.measurement.warmup_s * 1000.0,
            interval_ms: None,
        },
        apps,
        tunnel: None,
    };
    config.validate(&format!(
        "{file} configuration {name:?} (mapped for the twin)"
    ))?;
    let settings = server_settings(r, mode, server_cpus, &poller_cpus);
    Ok(TwinConfiguration {
        name: name.to_string(),
        settings,
        config,
        poller_cpus,
        napi: mode.napi,
        engines_on_poller: EnginesOnPoller::default(),
        notices,
        veth: true,
    })
}

/// The (setting, value) pairs a server configuration records: the lab's, and how the
/// twin runs the mode and where it polls.
fn server_settings(
    r: &napilab_core::scenario::DutSettings,
    mode: &ModeSettings,
    server_cpus: &[u32],
    poller_cpus: &[u32],
) -> Vec<(String, String)> {
    let mut settings = vec![("topology".to_string(), "server".to_string())];
    settings.extend(r.server_pairs());
    settings.retain(|(k, _)| k != "server_cpus");
    settings.push((
        "server_cpus".into(),
        napilab_core::scenario::cpu_list(server_cpus),
    ));
    settings.push((
        "twin mode".into(),
        format!(
            "{}: defer-hard-irqs {}, gro-flush-timeout {} ns, irq-suspend-timeout {} ns, {}; {}",
            r.mode.as_str(),
            mode.defer_hard_irqs,
            mode.gro_flush_timeout_ns,
            mode.irq_suspend_timeout_ns,
            match (mode.busy_poll, mode.blocking) {
                (None, _) => "blocking epoll, no busy poll".to_string(),
                (Some(b), true) => format!(
                    "blocking epoll, busy_poll_usecs {}, budget {}, prefer-busy-poll {}",
                    b.usecs, b.budget, b.prefer
                ),
                (Some(b), false) => format!(
                    "non-blocking epoll loop, busy_poll_usecs {} (then epoll forgets its NAPI id until a request arrives by the timer), budget {}, prefer-busy-poll {}",
                    b.usecs, b.budget, b.prefer
                ),
            },
            mode.source
        ),
    ));
    settings.push((
        "twin poller".into(),
        format!(
            "{} on cpu {}",
            match (mode.napi, mode.busy_poll.is_some()) {
                (NapiContext::Threaded, _) => "NAPI kthread",
                (NapiContext::ThreadedBusyPoll, _) =>
                    "NAPI kthread busy polling (IRQ masked once it owns the instance)",
                (NapiContext::Workqueue, _) => "workqueue worker",
                (NapiContext::Softirq, false) => "NET_RX softirq of the client's CPU",
                (NapiContext::Softirq, true) =>
                    "the server's busy poll; NET_RX softirq of the client's CPU while its IRQ is not masked",
            },
            napilab_core::scenario::cpu_list(poller_cpus)
        ),
    ));
    settings
}

impl ServerCosts {
    /// The twin configuration `config` with these costs on its applications.
    pub fn apply(&self, config: &SimConfig) -> SimConfig {
        let mut c = config.clone();
        for a in &mut c.apps {
            a.user_cycles_per_packet = self.app_user_cycles;
            a.kernel_cycles_per_packet = self.app_kernel_cycles;
            a.kernel_cycles_per_return = self.epoll_return_cycles;
            a.kernel_cycles_per_resume = self.resume_cycles;
        }
        let share = self.client_send_share.clamp(0.0, 1.0);
        for cl in c
            .traffic
            .classes
            .iter_mut()
            .filter_map(|k| k.client.as_mut())
        {
            cl.send_cycles = self.client_cycles * share;
            cl.read_cycles = self.client_cycles * (1.0 - share);
            cl.round_cycles = self.client_round_cycles;
            cl.path_ns = self.path_ns.max(0.0).round() as u64;
            cl.path_tail_ns = self.path_tail_ns.max(0.0).round() as u64;
        }
        c
    }

    /// `base` with the TCP receive cost on the request's poll (`stage_cycles.unmapped`)
    /// and the per-call poll cost (`fixed_cycles.poll`), their provenance saying so.
    pub fn profile(&self, base: &Profile) -> Profile {
        let mut p = base.clone();
        p.stage_cycles.unmapped += self.receive_cycles;
        p.fixed_cycles.poll = self.poll_cycles;
        p.fixed_cycles.napi_thread_run = self.kthread_run_cycles;
        p.fixed_cycles.napi_thread_packet = self.kthread_packet_cycles;
        let mut source = |param: &str, key: &str, how: String| {
            let src = self.provenance.get(key);
            p.provenance.insert(
                param.into(),
                ParamSource {
                    kind: src.map_or(SourceKind::Assumed, |s| s.kind),
                    reference: src.map(|s| s.reference.clone()).unwrap_or_default(),
                    detail: format!(
                        "{} (server topology: {how})",
                        src.map_or("", |s| s.detail.as_str())
                    ),
                },
            );
        };
        source(
            "stage_cycles.unmapped",
            "server.receive_cycles",
            format!(
                "the base profile's {} plus server.receive_cycles {}, the TCP receive of a request",
                base.stage_cycles.unmapped, self.receive_cycles
            ),
        );
        source(
            "fixed_cycles.napi_thread_run",
            "server.kthread_run_cycles",
            format!(
                "server.kthread_run_cycles {} replaces the base profile's {}",
                self.kthread_run_cycles, base.fixed_cycles.napi_thread_run
            ),
        );
        source(
            "fixed_cycles.napi_thread_packet",
            "server.kthread_packet_cycles",
            format!(
                "server.kthread_packet_cycles {} replaces the base profile's {}",
                self.kthread_packet_cycles, base.fixed_cycles.napi_thread_packet
            ),
        );
        source(
            "fixed_cycles.poll",
            "server.poll_cycles",
            format!(
                "server.poll_cycles {} replaces the base profile's {}",
                self.poll_cycles, base.fixed_cycles.poll
            ),
        );
        p
    }
}

/// Merges the latency of several classes (the per-queue request streams).
fn merged_latency(r: &SimResult) -> LatencySummary {
    let classes: Vec<&LatencySummary> = r.model.classes.iter().map(|c| &c.latency).collect();
    if let [one] = classes.as_slice() {
        return (*one).clone();
    }
    let mut hist: BTreeMap<u64, (f64, u64)> = BTreeMap::new();
    let (mut n, mut sum, mut max) = (0u64, 0.0, 0.0f64);
    for l in &classes {
        n += l.samples;
        sum += l.mean_us * l.samples as f64;
        max = max.max(l.max_us);
        for &(hi, k) in &l.histogram {
            // Bucket bounds are the same floats in every class: key them by their bits.
            hist.entry(hi.to_bits()).or_insert((hi, 0)).1 += k;
        }
    }
    let mut buckets: Vec<(f64, u64)> = hist.into_values().collect();
    buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    let quantile = |q: f64| {
        let want = (q * n as f64).ceil() as u64;
        let mut seen = 0;
        for &(hi, k) in &buckets {
            seen += k;
            if seen >= want.max(1) {
                return hi.min(max);
            }
        }
        max
    };
    LatencySummary {
        samples: n,
        mean_us: if n > 0 { sum / n as f64 } else { 0.0 },
        p50_us: quantile(0.5),
        p90_us: quantile(0.9),
        p99_us: quantile(0.99),
        p999_us: quantile(0.999),
        max_us: max,
        histogram: buckets,
    }
}

/// One twin run as a lab request point: the client's view (offered, answered,
/// latency), the server's requests and CPU, the server CPUs' time by context and the
/// DUT queue's polls by context, all the model's own.
pub fn request_point(
    r: &SimResult,
    role: PointRole,
    repeat: u32,
    qps: f64,
    server_cpus: &[u32],
    slo_p99_us: f64,
) -> RequestPointResult {
    let m = &r.model;
    let duration = m.duration_s.max(f64::MIN_POSITIVE);
    let offered: u64 = m.classes.iter().map(|c| c.offered).sum();
    let answered: u64 = m.classes.iter().map(|c| c.forwarded).sum();
    let latency = merged_latency(r);
    let timeouts = offered.saturating_sub(answered);
    let achieved = answered as f64 / duration;
    let (client_reasons, client_cpu_busy) = client_health(&m.clients);
    let mut sum = CpuSums::default();
    for c in m
        .totals
        .cpus
        .iter()
        .filter(|c| server_cpus.contains(&c.cpu))
    {
        sum.add(c);
    }
    let mut polls = [0.0f64; 3];
    for c in &m.totals.cpus {
        polls[0] += c.polls_per_s - c.napi_thread_polls_per_s - c.busy_polls_per_s;
        polls[1] += c.napi_thread_polls_per_s;
        polls[2] += c.busy_polls_per_s;
    }
    let napi_polls_per_s: Vec<(String, f64)> = ["softirq (model)", "napi kthread", "busy poll"]
        .iter()
        .zip(polls)
        .filter(|(_, v)| *v > 0.0)
        .map(|(k, v)| (k.to_string(), v))
        .collect();
    RequestPointResult {
        role,
        repeat,
        duration_s: m.duration_s,
        requested_qps: qps,
        offered_qps: offered as f64 / duration,
        achieved_qps: achieved,
        meets_slo: timeouts == 0 && latency.samples > 0 && latency.p99_us <= slo_p99_us,
        latency,
        errors: 0,
        timeouts,
        client_limited: !client_reasons.is_empty(),
        client_reasons,
        client_cpu_busy,
        server: ServerSummary {
            requests: answered,
            cpu_busy: sum.worker,
            epoll_returns_with_events: (sum.epoll_returns_per_s * m.duration_s).round() as u64,
            ..ServerSummary::default()
        },
        cpu_per_request_us: (achieved > 0.0).then(|| sum.busy / achieved * 1e6),
        cpu: sum.split(),
        napi_polls_per_s,
        empty_polls_per_s: None,
        observation: Some(r.observation.clone()),
    }
}

/// Whether the twin's load generator, not the server, was the limit, by the lab
/// generator's three signs (crates/napilab-lab request loadgen): more than 1% of the
/// window's requests sent more than 100 us late, more than 1% of its intended sends
/// never sent, a generator thread over 90% busy; and the busiest thread's CPU.
pub fn client_health(clients: &[crate::output::ClientReport]) -> (Vec<String>, f64) {
    let (mut sent, mut late, mut behind, mut busiest) = (0u64, 0u64, 0u64, 0.0f64);
    for c in clients {
        sent += c.sent;
        late += c.late;
        behind += c.behind;
        busiest = busiest.max(c.cpu_busy);
    }
    let mut reasons = Vec::new();
    if late * 100 > sent.max(1) {
        reasons.push(format!(
            "{late} of {sent} requests ({:.1}%) left more than 100 us after their intended time (model)",
            late as f64 * 100.0 / sent.max(1) as f64
        ));
    }
    if behind * 100 > (sent + behind).max(1) {
        reasons.push(format!(
            "{behind} intended requests were never sent in the window (model)"
        ));
    }
    if busiest > CLIENT_BUSY_LIMIT {
        reasons.push(format!(
            "a generator thread was {:.0}% busy (model)",
            busiest * 100.0
        ));
    }
    (reasons, busiest)
}

/// A generator thread busier than this may be the limit (the lab generator's).
const CLIENT_BUSY_LIMIT: f64 = 0.9;

/// The server CPUs' time by what ran there, summed over those CPUs.
#[derive(Default)]
struct CpuSums {
    user: f64,
    app_system: f64,
    busy_poll: f64,
    napi_thread: f64,
    other_kthread: f64,
    softirq_irq_exit: f64,
    softirq_bh_enable: f64,
    ksoftirqd: f64,
    hardirq: f64,
    busy: f64,
    /// The server's workers: user, system calls, busy polling, context switches.
    worker: f64,
    /// Their returns of `epoll_wait` with events.
    epoll_returns_per_s: f64,
}

impl CpuSums {
    fn add(&mut self, c: &crate::CpuReport) {
        self.user += c.user;
        self.app_system += c.app_system;
        self.busy_poll += c.busy_poll;
        self.napi_thread += c.napi_thread;
        let other = (c.kthread - c.napi_thread - c.busy_poll - c.app_system).max(0.0);
        self.other_kthread += other;
        self.softirq_bh_enable += c.softirq_bh_enable;
        self.softirq_irq_exit += (c.softirq_inline - c.softirq_bh_enable).max(0.0);
        self.ksoftirqd += c.ksoftirqd;
        self.hardirq += c.hardirq;
        self.busy += c.busy;
        self.worker += c.user + c.app_system + c.busy_poll + other;
        self.epoll_returns_per_s += c.epoll_returns_per_s;
    }

    fn split(&self) -> Vec<(String, f64)> {
        [
            ("user (model)", self.user),
            ("system calls (model)", self.app_system),
            ("busy poll (model)", self.busy_poll),
            ("napi kthread (model)", self.napi_thread),
            ("context switches (model)", self.other_kthread),
            ("softirq after hardirq (model)", self.softirq_irq_exit),
            ("softirq at bh-enable (model)", self.softirq_bh_enable),
            ("ksoftirqd (model)", self.ksoftirqd),
            ("hardirq (model)", self.hardirq),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
    }
}

/// The rate a server configuration's model is built at when the scenario gives no
/// `loads_qps`, and the base of the highest rate a point may run at (the twin's veth
/// egress keeps every reply in flight, so its ring is sized for it). The search range
/// itself comes from the twin's capacity probe, as the lab's does.
pub const TWIN_SEARCH_TOP_QPS: f64 = 200_000.0;

fn twin_search_top(w: &napilab_core::requests::RequestWorkload) -> f64 {
    w.search_max_qps.unwrap_or(TWIN_SEARCH_TOP_QPS)
}

pub type RunMany<'a> = dyn FnMut(&[(SimConfig, u64)]) -> Result<Vec<SimResult>, ConfigError> + 'a;

/// A [`RunMany`] that runs the batch one configuration after another on this thread
/// (the tests; the CLI runs a batch in parallel).
pub fn run_serial(
    batch: &[(SimConfig, u64)],
    profile: &crate::Profile,
) -> Result<Vec<SimResult>, ConfigError> {
    batch
        .iter()
        .map(|(c, seed)| crate::try_run(c, profile, *seed))
        .collect()
}

/// Runs configuration `index` of `plan` (a server plan): the sweep (every load and
/// repeat, one batch), then the lab's maximum-rate search (`search_repeats` searches,
/// napilab-experiment's), each with its own seed. `run_many` runs with the plan's
/// costs on the profile ([`ServerCosts::profile`]); the costs on the applications are
/// put here.
pub fn run_configuration(
    plan: &TwinPlan,
    index: usize,
    run_many: &mut RunMany<'_>,
) -> Result<RequestResults, ConfigError> {
    let sp = plan.requests.as_ref().ok_or_else(|| {
        ConfigError::new(&plan.name, "topology.kind", "not a server scenario's plan")
    })?;
    let (conf, server) = match (plan.configurations.get(index), sp.configurations.get(index)) {
        (Some(c), Some(s)) => (c, s),
        _ => {
            return Err(ConfigError::new(
                &plan.name,
                "configurations",
                format!("no configuration {index}"),
            ))
        }
    };
    let w = &sp.workload;
    let mut out = RequestResults {
        engine: server.engine.as_str().into(),
        mode: server.mode.as_str().into(),
        slo_p99_us: w.slo_p99_us,
        not_runnable: server.not_runnable.clone(),
        ..RequestResults::default()
    };
    if out.not_runnable.is_some() {
        return Ok(out);
    }
    let base = sp.costs.apply(&conf.config);
    let at = |qps: f64| {
        let mut c = base.clone();
        c.traffic.rate_pps = qps;
        c
    };
    let point = |r: &SimResult, role, repeat, qps| {
        request_point(r, role, repeat, qps, &server.server_cpus, w.slo_p99_us)
    };
    // The experiment layer's request loop: the sweep (every load and repeat, one batch)
    // and the lab's maximum-rate search, each search with its own seed. Without a cap
    // the range starts at the twin's default top and is raised while its top meets the
    // objective, as the lab raises its probe-derived range.
    let first_seed = plan.seeds.first().copied().unwrap_or(1).wrapping_add(1000);
    let request_plan = requests::Plan {
        loads_qps: plan.loads.clone(),
        loads_of_capacity: w.loads_of_capacity.clone(),
        repeats: plan.seeds.len() as u32,
        search: w.search,
        search_max_qps: w.search_max_qps,
        search_iterations: w.search_iterations,
        search_repeats: sp.search_repeats,
        confidence: sp.confidence,
    };
    let mut testbed = TwinRequests {
        run_many,
        at: &at,
        point: &point,
        seeds: &plan.seeds,
        first_seed,
        probe: closed_loop(&base, w.connections),
        connections: w.connections,
    };
    requests::run(&mut testbed, &request_plan, &mut out).map_err(|e| match e {
        requests::Error::Testbed(e) => e,
        requests::Error::Plan(why) => ConfigError::new(&plan.name, "requests", why),
    })?;
    Ok(out)
}

/// `config` with its load generators in a closed loop over `connections` connections,
/// spread over them as the lab spreads connections over its threads.
fn closed_loop(config: &SimConfig, connections: usize) -> SimConfig {
    let mut c = config.clone();
    let n = c
        .traffic
        .classes
        .iter()
        .filter(|k| k.client.is_some())
        .count()
        .max(1);
    for (i, cl) in c
        .traffic
        .classes
        .iter_mut()
        .filter_map(|k| k.client.as_mut())
        .enumerate()
    {
        let k = connections / n + usize::from(i < connections % n);
        cl.connections = Some(u32::try_from(k.max(1)).unwrap_or(u32::MAX));
    }
    c
}

/// The twin as the maximum-rate search's testbed: each point one run at the rate, with
/// the search's own seed.
struct TwinRequests<'r, 'm, A, P> {
    run_many: &'r mut RunMany<'m>,
    at: &'r A,
    point: &'r P,
    /// The sweep's seed of each repeat.
    seeds: &'r [u64],
    /// The first search's seed.
    first_seed: u64,
    /// The capacity probe's model (closed loop over the workload's connections).
    probe: SimConfig,
    connections: usize,
}

impl<A, P> RequestBench for TwinRequests<'_, '_, A, P>
where
    A: Fn(f64) -> SimConfig,
    P: Fn(&SimResult, PointRole, u32, f64) -> RequestPointResult,
{
    /// The lab's probe on the twin: [`CAPACITY_PROBE`] (each connection's next request
    /// sent when its reply is read) through the twin's load generator, for the
    /// measurement's duration; its reply rate is the capacity the search range derives
    /// from.
    fn probe_capacity(&mut self) -> Result<Capacity, ConfigError> {
        let seed = self.seeds.first().copied().unwrap_or(1);
        let results = (self.run_many)(&[(self.probe.clone(), seed)])?;
        let Some(r) = results.first() else {
            return Ok(Capacity::Stopped);
        };
        let p = (self.point)(r, PointRole::Sweep, 0, 0.0);
        Ok(Capacity::Measured(napilab_core::CapacityProbe {
            method: format!("{CAPACITY_PROBE} (model)"),
            connections: self.connections,
            duration_s: r.model.duration_s,
            achieved_qps: p.achieved_qps,
            latency: p.latency,
            client_limited: p.client_limited,
            client_reasons: p.client_reasons,
        }))
    }

    fn measure(&mut self, points: &[(f64, u32)]) -> Result<Vec<RequestPointResult>, ConfigError> {
        if points.is_empty() {
            return Ok(Vec::new());
        }
        let batch: Vec<(SimConfig, u64)> = points
            .iter()
            .map(|&(qps, repeat)| {
                let seed = self.seeds.get(repeat as usize).copied().unwrap_or(1);
                ((self.at)(qps), seed)
            })
            .collect();
        let results = (self.run_many)(&batch)?;
        Ok(results
            .iter()
            .zip(points)
            .map(|(r, &(qps, repeat))| (self.point)(r, PointRole::Sweep, repeat, qps))
            .collect())
    }

    fn range_note(&self) -> String {
        format!("; twin seeds {}..", self.first_seed)
    }
}

impl<A, P> RequestTestbed for TwinRequests<'_, '_, A, P>
where
    A: Fn(f64) -> SimConfig,
    P: Fn(&SimResult, PointRole, u32, f64) -> RequestPointResult,
{
    type Error = ConfigError;

    fn request_point(
        &mut self,
        qps: f64,
        role: PointRole,
        search: u32,
    ) -> Result<Option<RequestPointResult>, ConfigError> {
        let seed = self.first_seed.wrapping_add(u64::from(search));
        let results = (self.run_many)(&[((self.at)(qps), seed)])?;
        Ok(results.first().map(|r| (self.point)(r, role, search, qps)))
    }
}

/// The text summary of a twin run of a server scenario: each configuration's points
/// (requested and achieved rate, p50/p99/p99.9, the objective, CPU per request, polls
/// by context) and its maximum at the objective.
pub fn summary(record: &napilab_core::RunRecord, profile: &str) -> String {
    let mut out = format!(
        "twin run {} (model) of server scenario {} on profile {profile}; every figure is source `model`\n",
        record.run_id, record.scenario_name
    );
    out.push_str(&format!(
        "{:<26} {:<6} {:>10} {:>10} {:>8} {:>8} {:>8} {:<6} {:>9}  {}\n",
        "configuration",
        "role",
        "req/s",
        "achieved",
        "p50 us",
        "p99 us",
        "p99.9 us",
        "slo",
        "cpu/req us",
        "polls/s by context"
    ));
    for c in &record.configurations {
        let Some(q) = &c.requests else { continue };
        if let Some(why) = &q.not_runnable {
            out.push_str(&format!("{:<26} not runnable: {why}\n", c.name));
            continue;
        }
        for p in &q.points {
            out.push_str(&format!(
                "{:<26} {:<6} {:>10.0} {:>10.0} {:>8.0} {:>8.0} {:>8.0} {:<6} {:>9}  {}\n",
                c.name,
                match p.role {
                    PointRole::Sweep => "sweep",
                    PointRole::Search => "search",
                },
                p.requested_qps,
                p.achieved_qps,
                p.latency.p50_us,
                p.latency.p99_us,
                p.latency.p999_us,
                if p.meets_slo { "met" } else { "missed" },
                p.cpu_per_request_us
                    .map_or_else(|| "-".to_string(), |v| format!("{v:.1}")),
                p.napi_polls_per_s
                    .iter()
                    .map(|(k, v)| format!("{k} {v:.0}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
    }
    out.push_str("maximum requests/s at the objective (the lab's bisection on the twin)\n");
    for c in &record.configurations {
        let Some(q) = &c.requests else { continue };
        let Some(m) = &q.max_qps else { continue };
        out.push_str(&format!(
            "  {:<26} {:>8.0} (p99 <= {} us){}; searches {}; CPU per request {}; {}\n",
            c.name,
            m.qps,
            q.slo_p99_us,
            m.interval.map_or_else(String::new, |(lo, hi)| format!(
                ", [{lo:.0}, {hi:.0}] at {:.0}%",
                m.confidence * 100.0
            )),
            m.searches
                .iter()
                .map(|v| format!("{v:.0}"))
                .collect::<Vec<_>>()
                .join(", "),
            m.cpu_per_request_us
                .map_or_else(|| "-".to_string(), |v| format!("{v:.1} us")),
            m.note
        ));
    }
    for n in &record.notices {
        out.push_str(&format!("note: {}: {}\n", n.what, n.why));
    }
    out
}
