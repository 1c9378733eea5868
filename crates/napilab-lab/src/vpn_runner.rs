//! The `vpn` topology (the WireGuard study, docs/studies.md#wireguard-study): two
//! namespaces, `napilab-<run>-peers` and `-dut`, one veth pair for the outer UDP path.
//! In the DUT a tunnel endpoint decrypts the peers' datagrams on worker threads
//! dispatched round robin (as WireGuard does) and writes each inner packet into its
//! peer's queue of a multi-queue TUN device opened with `IFF_NAPI`: each write schedules
//! that queue's NAPI instance on the writing worker's CPU, so in `softirq` mode the GRO
//! poll runs at bottom-half enable inside the worker (the study's execution-order
//! inversion) and in `threaded` mode in a `napi/<tun>-0` kthread. Kernel WireGuard is
//! detected (`ip link add type wireguard` in a scratch namespace) and reported; the
//! endpoint is napilab's user-space one (crate::tunnel), which this kernel can run.
//!
//! Per offered rate: a warm-up, then the measured window with the DUT's Observation
//! (the trace tier shows where the TUN polls ran and explain rule 6 judges it); the
//! points are packet points (sent by the peers, delivered to the inner sink), so the
//! report, the CSV and the findings treat them as the router's.

use std::io;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::{Context, Result};
use napilab_core::scenario::{Configuration, NapiContext, Topology, TunnelWorkload};
use napilab_core::{ClassResult, ConfigurationResult, EngineStats, PointResult, PointRole};
use napilab_experiment::configuration::{self, PointSpec, Probed, Testbed};
use napilab_experiment::maximum::{MeasuredTrial, PacketTestbed};

use crate::netns::{delete_namespace, linked_namespaces, ns_name, pin, sh_in, LinkEnd};
use crate::run_context::{notice, Ctx, Observer, SysctlGuard};
use crate::tunnel::{detect, endpoint, peers};

pub const PEERS_ADDR: Ipv4Addr = Ipv4Addr::new(10, 201, 4, 1);
pub const DUT_ADDR: Ipv4Addr = Ipv4Addr::new(10, 201, 4, 2);

/// The namespaces and the outer veth pair; Drop deletes them (and with them the TUN
/// device the endpoint created in the DUT namespace).
struct VpnLab {
    peers_ns: String,
    dut_ns: String,
    tun_name: String,
    torn_down: bool,
}

impl VpnLab {
    fn build(run_id: &str, topo: &Topology) -> io::Result<VpnLab> {
        let short = &run_id[run_id.len() - 4..];
        let lab = VpnLab {
            peers_ns: ns_name(run_id, "peers"),
            dut_ns: ns_name(run_id, "dut"),
            tun_name: format!("n{short}-tun"),
            torn_down: false,
        };
        let (pdev, ddev) = (format!("n{short}-peer"), format!("n{short}-wan"));
        linked_namespaces(
            &LinkEnd {
                ns: &lab.peers_ns,
                dev: &pdev,
                addr: PEERS_ADDR,
            },
            &LinkEnd {
                ns: &lab.dut_ns,
                dev: &ddev,
                addr: DUT_ADDR,
            },
            topo.ingress_queues,
        )?;
        // GRO on the outer device: the datagrams arrive through its NAPI instance.
        sh_in(&lab.dut_ns, &format!("ethtool -K {ddev} gro on >/dev/null"))?;
        Ok(lab)
    }

    fn teardown(&mut self) -> io::Result<()> {
        if self.torn_down {
            return Ok(());
        }
        self.torn_down = true;
        let mut first = None;
        for ns in [&self.peers_ns, &self.dut_ns] {
            if let Err(e) = delete_namespace(ns) {
                first.get_or_insert(e);
            }
        }
        first.map_or(Ok(()), Err)
    }
}

impl Drop for VpnLab {
    fn drop(&mut self) {
        let _ = self.teardown();
    }
}

/// The keys of the run's peers (the endpoint and the peers derive the same).
const KEY_SEED: [u8; 32] = [0x6e; 32];

/// One configuration on the lab through the experiment layer's loop
/// ([`napilab_experiment::configuration::run`]): the namespaces and the endpoint, the
/// sweep of offered rates (no search: the study compares contexts at fixed rates),
/// teardown. Returns the result and whether the run was stopped.
pub(crate) fn run_configuration(
    ctx: &mut Ctx<'_>,
    run_id: &str,
    cfg: &Configuration,
) -> Result<(ConfigurationResult, bool)> {
    let s = ctx.scenario;
    let w = s
        .tunnel
        .as_ref()
        .context("the vpn topology needs [tunnel] (the scenario check should have said so)")?;
    let plan = configuration::Plan {
        loads: w.loads_pps.clone(),
        loads_of_capacity: Vec::new(),
        search: None,
        ..configuration::Plan::of_scenario(s)
    };
    let mut testbed = LabTunnel {
        ctx,
        run_id,
        built: None,
    };
    let outcome = configuration::run(&mut testbed, cfg, &plan)?;
    Ok((outcome.result, outcome.stopped))
}

/// The lab as the tunnel workload's testbed.
struct LabTunnel<'c, 'a> {
    ctx: &'c mut Ctx<'a>,
    run_id: &'c str,
    built: Option<BuiltTunnel>,
}

/// A configuration as built: fields drop in order, the endpoint (its TUN device and
/// workers) before the namespaces, the sysctls reverted last.
struct BuiltTunnel {
    ep: endpoint::Endpoint,
    lab: VpnLab,
    sysctls: SysctlGuard,
    cfg: Configuration,
    workload: TunnelWorkload,
}

impl Testbed for LabTunnel<'_, '_> {
    type Configuration = Configuration;

    fn build(&mut self, cfg: &Configuration) -> Result<Vec<(String, String)>> {
        let s = self.ctx.scenario;
        let w: &TunnelWorkload = s
            .tunnel
            .as_ref()
            .context("the vpn topology needs [tunnel] (the scenario check should have said so)")?;
        let set = &cfg.settings;
        let worker_cpus = if set.server_cpus.is_empty() {
            vec![self.ctx.ncpus.saturating_sub(1)]
        } else {
            set.server_cpus.clone()
        };
        let workers = w.workers.unwrap_or(worker_cpus.len());
        let detection = detect::detect().map_err(anyhow::Error::msg)?;
        if let Some(why) = &detection.tun_error {
            anyhow::bail!(
                "the vpn topology cannot run here: {why} ({})",
                detection.summary()
            );
        }
        notice(&mut self.ctx.notices, "vpn endpoint", detection.summary());
        let (sysctls, sysctl_notes) =
            SysctlGuard::apply(self.run_id, cfg, &self.ctx.opts.journal_dir)?;
        let lab = VpnLab::build(self.run_id, &s.topology)
            .context("building the peers and DUT namespaces and their veth pair")?;
        let threaded = set.napi == NapiContext::Threaded;
        let ep = endpoint::Endpoint::start(endpoint::EndpointConfig {
            netns: Some(lab.dut_ns.clone()),
            listen: SocketAddrV4::new(DUT_ADDR, endpoint::DEFAULT_PORT),
            peers: w.peers,
            workers,
            worker_cpus: worker_cpus.clone(),
            receiver_cpu: None,
            tun_name: lab.tun_name.clone(),
            inner_net: endpoint::DEFAULT_INNER_NET,
            threaded,
            key_seed: KEY_SEED,
            sink_port: Some(endpoint::DEFAULT_SINK_PORT),
        })
        .map_err(|e| anyhow::anyhow!("starting the tunnel endpoint in {}: {e}", lab.dut_ns))?;
        let mut settings = vec![
            ("topology".to_string(), "vpn".to_string()),
            (
                "endpoint".into(),
                "napilab user-space (ChaCha20-Poly1305, round-robin workers, IFF_NAPI multi-queue TUN)"
                    .into(),
            ),
            (
                "kernel wireguard".into(),
                detection.wireguard_error.clone().map_or_else(
                    || "available (not used: the lab measures napilab's endpoint)".into(),
                    |e| format!("not available: {e}"),
                ),
            ),
            ("peers".into(), w.peers.to_string()),
            ("tun_device".into(), lab.tun_name.clone()),
            ("napi".into(), set.napi.as_str().into()),
            ("workers".into(), workers.to_string()),
            (
                "worker_cpus".into(),
                napilab_core::scenario::cpu_list(&worker_cpus),
            ),
            (
                "peer_cpus".into(),
                napilab_core::scenario::cpu_list(&set.generator_cpus),
            ),
        ];
        // threaded with napi_cpus: pin the TUN's NAPI kthreads (the study's threaded-pinned).
        if threaded && !set.napi_cpus.is_empty() {
            let threads = crate::topology::napi_threads(&lab.tun_name);
            for (i, (pid, _)) in threads.iter().enumerate() {
                let cpu = set.napi_cpus[i % set.napi_cpus.len()];
                pin(*pid, &[cpu])
                    .with_context(|| format!("pinning NAPI kthread {pid} to CPU {cpu}"))?;
            }
            settings.push((
                "napi_cpus".into(),
                format!(
                    "{} kthreads pinned to {}",
                    threads.len(),
                    napilab_core::scenario::cpu_list(&set.napi_cpus)
                ),
            ));
        }
        for n in sysctl_notes {
            settings.push(("sysctl".into(), n));
        }
        self.built = Some(BuiltTunnel {
            ep,
            lab,
            sysctls,
            cfg: cfg.clone(),
            workload: w.clone(),
        });
        Ok(settings)
    }

    /// The tunnel workload's loads are its own rates and it has no search, so its plan
    /// never asks for a capacity probe; asking is an internal error.
    fn probe_capacity(&mut self) -> Result<Probed> {
        anyhow::bail!("internal: the vpn topology's tunnel workload has no capacity probe")
    }

    fn measure(&mut self, points: &[PointSpec]) -> Result<Vec<PointResult>> {
        let Some(b) = self.built.as_ref() else {
            anyhow::bail!("internal: a point was asked for before its configuration was built");
        };
        let mut out = Vec::new();
        for spec in points {
            self.ctx
                .bar
                .set_message(format!("{} @ {:.0} datagrams/s", b.cfg.name, spec.load_pps));
            match measure_point(
                self.ctx,
                &b.lab,
                &b.ep,
                &b.workload,
                &b.cfg,
                spec.load_pps,
                spec.repeat,
            )? {
                Some(p) => out.push(p),
                None => break,
            }
            self.ctx.bar.inc(1);
        }
        Ok(out)
    }

    fn teardown(&mut self) -> Result<()> {
        let Some(BuiltTunnel {
            ep,
            mut lab,
            mut sysctls,
            ..
        }) = self.built.take()
        else {
            return Ok(());
        };
        ep.stop();
        lab.teardown()
            .context("deleting the namespaces (run `napilab lab clean`)")?;
        sysctls.revert()
    }
}

impl PacketTestbed for LabTunnel<'_, '_> {
    type Error = anyhow::Error;

    /// The tunnel workload has no maximum search (the scenario check refuses one); a
    /// plan with a search on it is an internal error, not a measurement.
    fn search_trial(
        &mut self,
        _load: f64,
        _duration_s: f64,
        _search: u32,
    ) -> Result<Option<MeasuredTrial>> {
        anyhow::bail!("internal: the vpn topology's tunnel workload has no maximum search")
    }
}

/// One rate: warm-up, then the measured window with the Observation.
fn measure_point(
    ctx: &mut Ctx<'_>,
    lab: &VpnLab,
    ep: &endpoint::Endpoint,
    w: &TunnelWorkload,
    cfg: &Configuration,
    load: f64,
    repeat: u32,
) -> Result<Option<PointResult>> {
    let stop = ctx.opts.stop.clone();
    if stop.load(Ordering::Relaxed) {
        return Ok(None);
    }
    // A copy of the scenario reference, so `m` does not hold `ctx` borrowed.
    let scenario = ctx.scenario;
    let m = &scenario.measurement;
    let peers_cfg = |secs: f64| peers::PeersConfig {
        netns: Some(lab.peers_ns.clone()),
        endpoint: ep.listen_addr(),
        peers: w.peers,
        threads: cfg.settings.generator_cpus.len().max(1),
        cpus: cfg.settings.generator_cpus.clone(),
        rate_pps: Some(load),
        duration: Duration::from_secs_f64(secs),
        payload: w.payload_bytes,
        inner_net: endpoint::DEFAULT_INNER_NET,
        inner_port: endpoint::DEFAULT_SINK_PORT,
        key_seed: KEY_SEED,
        corrupt_every: 0,
    };
    // The observer first, ready (its programs loaded) before the warm-up's packets; its
    // window opens when the warm-up has drained, however long loading took.
    let mut observer = start_observer(ctx, lab);
    // The warm-up's packets drain before the window's counters are read (below), so
    // the window opens a drain after the warm-up ends.
    if m.warmup_s > 0.0 {
        peers::run(&peers_cfg(m.warmup_s), &stop).map_err(anyhow::Error::msg)?;
        // Without this the warm-up's packets still in the workers' queues and the TUN
        // were delivered inside the window and counted as the window's (delivered
        // above offered by ~3% in threaded mode, where the kthreads deliver in bursts).
        std::thread::sleep(Duration::from_millis(m.drain_ms));
    }
    if let Some(o) = observer.as_mut() {
        o.open();
    }
    let before = ep.stats();
    let sent = peers::run(&peers_cfg(m.duration_s), &stop).map_err(anyhow::Error::msg)?;
    // Packets in flight through the workers and TUN.
    std::thread::sleep(Duration::from_millis(m.drain_ms));
    let after = ep.stats();
    let observation = finish_observer(ctx, observer);
    if stop.load(Ordering::Relaxed) {
        return Ok(None);
    }
    Ok(Some(point_result(
        w,
        cfg,
        load,
        repeat,
        m.duration_s,
        &sent,
        &before,
        &after,
        observation,
    )))
}

/// The DUT's observer, ready to open its window, when the run observes; where it
/// cannot start, a notice says the point has no Observation.
fn start_observer(ctx: &mut Ctx<'_>, lab: &VpnLab) -> Option<Observer> {
    let m = &ctx.scenario.measurement;
    let stop = ctx.opts.stop.clone();
    let observer = ctx
        .opts
        .observe
        .then(|| {
            Observer::start(
                &lab.dut_ns,
                Duration::from_secs_f64(m.duration_s),
                m.trace,
                &stop,
            )
        })
        .transpose();
    match observer {
        Ok(o) => o,
        Err(e) => {
            notice(
                &mut ctx.notices,
                "DUT observation",
                format!("could not start the observer in the DUT namespace ({e}): a point has no Observation"),
            );
            None
        }
    }
}

/// The point's Observation; a failed observer's (or a late one's, which did not see
/// the point: Observer::finish) is left out, with a notice.
fn finish_observer(
    ctx: &mut Ctx<'_>,
    observer: Option<Observer>,
) -> Option<napilab_core::Observation> {
    let stop = ctx.opts.stop.clone();
    match observer.map(|o| o.finish(Duration::from_secs(20), &stop)) {
        Some(Ok(o)) => Some(o),
        Some(Err(e)) => {
            notice(
                &mut ctx.notices,
                "DUT observation",
                format!("a vpn point has no Observation: {e}"),
            );
            None
        }
        None => None,
    }
}

/// The point from the peers' send figures and the endpoint's counters before and
/// after the measured window.
#[allow(clippy::too_many_arguments)]
fn point_result(
    w: &TunnelWorkload,
    cfg: &Configuration,
    load: f64,
    repeat: u32,
    duration_s: f64,
    sent: &peers::PeersStats,
    before: &endpoint::EndpointStats,
    after: &endpoint::EndpointStats,
    observation: Option<napilab_core::Observation>,
) -> PointResult {
    let d = |a: u64, b: u64| a.saturating_sub(b);
    let datagrams = d(after.datagrams, before.datagrams);
    let queue_full = d(after.worker_queue_full, before.worker_queue_full);
    let bad = d(after.bad_ciphertext, before.bad_ciphertext)
        + d(after.malformed, before.malformed)
        + d(after.unknown_peer, before.unknown_peer);
    let written = d(after.written, before.written);
    let delivered = d(
        after.delivered.unwrap_or(after.written),
        before.delivered.unwrap_or(before.written),
    );
    let worker_cpu_s: f64 = after
        .workers
        .iter()
        .zip(&before.workers)
        .map(|(a, b)| a.cpu_s - b.cpu_s)
        .sum();
    let window = sent.elapsed_s.max(1e-9);
    let worker_cpus: Vec<u32> = after.workers.iter().filter_map(|w| w.cpu).collect();
    PointResult {
        role: PointRole::Sweep,
        requested_pps: load,
        offered_pps: sent.sent_pps,
        repeat,
        duration_s,
        classes: vec![ClassResult {
            name: "tunnel".into(),
            // Outer datagram: IP + UDP + the tunnel header and tag + the inner packet.
            packet_bytes: (20 + 8 + 32 + 28 + w.payload_bytes) as u32,
            sent: sent.sent,
            received: delivered,
            reordered: 0,
            loss_counters: vec![
                (
                    "outer path (sent, not read by the endpoint)".into(),
                    d(sent.sent, datagrams),
                ),
                ("endpoint worker queues full".into(), queue_full),
                ("failed authentication or malformed".into(), bad),
                (
                    "TUN and stack (written, not delivered)".into(),
                    d(written, delivered),
                ),
            ],
            latency: None,
        }],
        generator: EngineStats {
            backend: "tunnel-peers".into(),
            cpus: cfg.settings.generator_cpus.clone(),
            cpu_busy: Some(sent.cpu_s / window / cfg.settings.generator_cpus.len().max(1) as f64),
            saturated: sent.generator_limited,
            counters: vec![("send_errors".into(), sent.send_errors)],
        },
        sink: EngineStats {
            backend: "tunnel-endpoint workers".into(),
            cpu_busy: Some(worker_cpu_s / window / worker_cpus.len().max(1) as f64),
            cpus: worker_cpus,
            saturated: queue_full > 0,
            counters: vec![
                ("decrypted".into(), d(after.decrypted, before.decrypted)),
                ("written".into(), written),
            ],
        },
        observation,
        many_napi: None,
    }
}
