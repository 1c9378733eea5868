//! The lab's topology: three namespaces `napilab-<run>-gen`, `-dut`, `-sink`, joined by
//! two veth pairs, with IP forwarding in the DUT; and the DUT's settings (GRO, NAPI
//! context and kthread affinity, RPS, egress qdisc). Everything lives inside the
//! namespaces, so deleting them removes it all; [`Lab`]'s Drop does that.
//!
//! The many-napi topology is this router with `dut.napi_instances` RX queues on the
//! DUT's ingress veth, each its own NAPI instance (veth adds one per RX queue when GRO
//! is on). One multi-queue veth pair, not N pairs, because it scales: 1,000 queues are
//! one `ip link add` (0.1 s on the project's VM) and one route, where 1,000 pairs would
//! be 1,000 links, addresses and routes, and the DUT would route between them instead of
//! forwarding one flow set (1,000 pairs alone took 1.2 s with `ip -batch`, before any
//! address or route). The generator spreads its packets by sending from many
//! sockets (flows): its veth has no queue selector of its own, so the kernel's flow hash
//! picks the TX queue, which veth delivers to the peer's RX queue of the same number.
//! No XPS is set on it, since XPS would steer by the sending CPU instead.

use std::io;
use std::net::Ipv4Addr;

use napilab_core::scenario::{
    ApDirection, DutSettings, NapiContext, QdiscKind, Topology, TopologyKind,
};

use crate::netns::{
    address_up, cmd, cpu_mask, delete_namespace, mac_of, new_namespace, ns_name, pin,
    set_irq_deferral, sh_in, static_neighbour, veth_pair,
};

/// SCHED_FIFO priority of the sink veth's NAPI kthread.
pub const SINK_NAPI_FIFO: u32 = 10;

pub const GEN_ADDR: Ipv4Addr = Ipv4Addr::new(10, 201, 1, 1);
pub const DUT_IN_ADDR: Ipv4Addr = Ipv4Addr::new(10, 201, 1, 2);
pub const DUT_OUT_ADDR: Ipv4Addr = Ipv4Addr::new(10, 201, 2, 1);
pub const SINK_ADDR: Ipv4Addr = Ipv4Addr::new(10, 201, 2, 2);

/// A built topology. Dropping it deletes its namespaces (and with them the links).
#[derive(Debug)]
pub struct Lab {
    pub run_id: String,
    pub gen_ns: String,
    pub dut_ns: String,
    pub sink_ns: String,
    /// Generator's device (gen namespace).
    pub gen_dev: String,
    /// DUT ingress device.
    pub dut_in: String,
    /// DUT egress device.
    pub dut_out: String,
    /// Sink's device (sink namespace).
    pub sink_dev: String,
    /// What was applied, as (setting, how) notes for the record.
    pub applied: Vec<(String, String)>,
    /// Settings that could not be applied as asked, and why.
    pub warnings: Vec<String>,
    /// RX queues of the DUT ingress (= TX queues of the generator's veth).
    pub queues: u32,
    torn_down: bool,
}

impl Lab {
    /// Builds the topology and applies `s` (all but the global sysctls, which the
    /// runner applies through napilab-tune's journal).
    pub fn build(run_id: &str, topo: &Topology, s: &DutSettings) -> io::Result<Lab> {
        let queues = if topo.kind == TopologyKind::ManyNapi {
            s.napi_instances.max(1)
        } else {
            topo.ingress_queues.max(1)
        };
        let short = &run_id[run_id.len() - 4..];
        let (din, dout) = match (topo.kind, topo.direction) {
            (TopologyKind::Router | TopologyKind::ManyNapi, _) => ("in", "out"),
            (TopologyKind::Ap, ApDirection::WiredToWireless) => ("eth", "wlan"),
            (TopologyKind::Ap, ApDirection::WirelessToWired) => ("wlan", "eth"),
            (TopologyKind::Server | TopologyKind::Vpn, _) => {
                return Err(io::Error::other(
                    "the server and vpn topologies are built by their own modules",
                ))
            }
        };
        let mut lab = Lab {
            run_id: run_id.to_string(),
            gen_ns: ns_name(run_id, "gen"),
            dut_ns: ns_name(run_id, "dut"),
            sink_ns: ns_name(run_id, "sink"),
            gen_dev: format!("n{short}-gen"),
            dut_in: format!("n{short}-{din}"),
            dut_out: format!("n{short}-{dout}"),
            sink_dev: format!("n{short}-sink"),
            applied: Vec::new(),
            warnings: Vec::new(),
            queues: 1,
            torn_down: false,
        };
        // From here on, Drop removes whatever was created.
        lab.queues = queues;
        lab.create()?;
        lab.apply(topo, s)?;
        Ok(lab)
    }

    pub fn namespaces(&self) -> [&str; 3] {
        [&self.gen_ns, &self.dut_ns, &self.sink_ns]
    }

    fn create(&mut self) -> io::Result<()> {
        for ns in self.namespaces() {
            new_namespace(
                ns,
                "sysctl -qw net.ipv4.conf.all.rp_filter=0 net.ipv4.conf.default.rp_filter=0",
            )?;
        }
        let (g, d, s) = (&self.gen_ns, &self.dut_ns, &self.sink_ns);
        veth_pair((g, &self.gen_dev), (d, &self.dut_in), Some(self.queues))?;
        veth_pair((d, &self.dut_out), (s, &self.sink_dev), None)?;
        address_up(g, &self.gen_dev, GEN_ADDR)?;
        address_up(d, &self.dut_in, DUT_IN_ADDR)?;
        address_up(d, &self.dut_out, DUT_OUT_ADDR)?;
        address_up(s, &self.sink_dev, SINK_ADDR)?;
        for (ns, via) in [(g, DUT_IN_ADDR), (s, DUT_OUT_ADDR)] {
            cmd(
                "ip",
                &["-n", ns, "route", "add", "default", "via", &via.to_string()],
            )?;
        }
        sh_in(d, "sysctl -qw net.ipv4.ip_forward=1")?;
        // Static neighbours: no ARP traffic or ARP-queue drops during a measurement.
        let (mac, neigh) = (mac_of, static_neighbour);
        neigh(g, DUT_IN_ADDR, &mac(d, &self.dut_in)?, &self.gen_dev)?;
        neigh(d, GEN_ADDR, &mac(g, &self.gen_dev)?, &self.dut_in)?;
        neigh(d, SINK_ADDR, &mac(s, &self.sink_dev)?, &self.dut_out)?;
        neigh(s, DUT_OUT_ADDR, &mac(d, &self.dut_out)?, &self.sink_dev)?;
        Ok(())
    }

    fn apply(&mut self, topo: &Topology, s: &DutSettings) -> io::Result<()> {
        let (g, d, sk) = (
            self.gen_ns.clone(),
            self.dut_ns.clone(),
            self.sink_ns.clone(),
        );
        // Senders: TSO/GSO off, so that the receiving veth may use its NAPI instance
        // (veth hands GSO packets to the backlog instead).
        sh_in(
            &g,
            &format!("ethtool -K {} tso off gso off >/dev/null", self.gen_dev),
        )?;
        sh_in(
            &d,
            &format!("ethtool -K {} tso off gso off >/dev/null", self.dut_out),
        )?;
        let gro = if s.gro { "on" } else { "off" };
        sh_in(
            &d,
            &format!("ethtool -K {} gro {gro} >/dev/null", self.dut_in),
        )?;
        self.applied
            .push((format!("{} gro", self.dut_in), gro.to_string()));
        // The sink side: its own NAPI kthread on the sink CPUs, so that the sink's
        // receive path does not run on the DUT's CPUs.
        sh_in(
            &sk,
            &format!(
                "ethtool -K {dev} gro on >/dev/null && echo 1 > /sys/class/net/{dev}/threaded",
                dev = self.sink_dev
            ),
        )?;
        let sink_dev = self.sink_dev.clone();
        self.pin_napi_threads(&sink_dev, &s.sink_cpus, "sink")?;
        // The sink is measurement apparatus: its poller runs SCHED_FIFO so that other
        // work on its CPU (the generator, unrelated processes) does not stall it and
        // overflow its ring.
        self.set_napi_fifo(&sink_dev, &[SINK_NAPI_FIFO])?;
        // DUT ingress NAPI context.
        match s.napi {
            NapiContext::Threaded => {
                sh_in(
                    &d,
                    &format!("echo 1 > /sys/class/net/{}/threaded", self.dut_in),
                )?;
                self.applied
                    .push((format!("{} threaded", self.dut_in), "1".into()));
                let dut_in = self.dut_in.clone();
                self.pin_napi_threads(&dut_in, &s.napi_cpus, "dut")?;
                self.set_napi_fifo(&dut_in, &s.napi_fifo)?;
            }
            NapiContext::Softirq => {
                if !s.napi_cpus.is_empty() {
                    self.warnings.push(format!(
                        "napi_cpus = [{}] has no effect with napi = \"softirq\": the veth poll runs in the softirq of the CPU that sent the frame (the generator's); use rps_cpus to move the IP work",
                        napilab_core::scenario::cpu_list(&s.napi_cpus)
                    ));
                }
            }
        }
        // RPS, on every ingress RX queue (one shell for all: many-napi has thousands).
        let mask = cpu_mask(&s.rps_cpus);
        sh_in(
            &d,
            &format!(
                "for f in /sys/class/net/{}/queues/rx-*/rps_cpus; do echo {mask} > $f || exit 1; done",
                self.dut_in
            ),
        )?;
        self.applied
            .push((format!("{} rx-* rps_cpus", self.dut_in), mask));
        // Interrupt deferral. veth has no IRQ: a sender notifies the peer's NAPI instance
        // unless notification is masked, and napi_complete_done() keeps it masked while
        // defer_hard_irqs counts down, with gro_flush_timeout's timer polling instead, as
        // a NIC keeps its IRQ masked. The device-wide sysfs values set every instance.
        if s.defer_hard_irqs > 0 || s.gro_flush_timeout_ns > 0 {
            set_irq_deferral(&d, &self.dut_in, s.defer_hard_irqs, s.gro_flush_timeout_ns)?;
            self.applied.push((
                format!("{} napi_defer_hard_irqs", self.dut_in),
                s.defer_hard_irqs.to_string(),
            ));
            self.applied.push((
                format!("{} gro_flush_timeout", self.dut_in),
                s.gro_flush_timeout_ns.to_string(),
            ));
        }
        // Multi-queue: XPS on the generator's veth maps generator CPU i to TX queue i,
        // which veth delivers to the DUT's RX queue i. (many-napi spreads by flow hash.)
        if self.queues > 1 && topo.kind != TopologyKind::ManyNapi {
            for q in 0..self.queues {
                let cpu = s.generator_cpus[q as usize % s.generator_cpus.len()];
                let m = cpu_mask(&[cpu]);
                sh_in(
                    &g,
                    &format!(
                        "echo {m} > /sys/class/net/{}/queues/tx-{q}/xps_cpus",
                        self.gen_dev
                    ),
                )?;
                self.applied
                    .push((format!("{} tx-{q} xps_cpus", self.gen_dev), m));
            }
        }
        // Egress qdisc: on the egress device (router), on the wired side (ap).
        let wired_is_out = matches!(topo.kind, TopologyKind::Router | TopologyKind::ManyNapi)
            || topo.direction == ApDirection::WirelessToWired;
        let qdisc_dev = if wired_is_out {
            self.dut_out.clone()
        } else {
            self.dut_in.clone()
        };
        if s.qdisc.kind != QdiscKind::None {
            let mut args: Vec<String> = ["-n", &d, "qdisc", "replace", "dev", &qdisc_dev, "root"]
                .iter()
                .map(|x| x.to_string())
                .collect();
            args.extend(s.qdisc.tc_args());
            let refs: Vec<&str> = args.iter().map(String::as_str).collect();
            cmd("tc", &refs)?;
            if s.qdisc.kind == QdiscKind::Htb {
                let mut c: Vec<String> = ["-n", &d, "class", "add", "dev", &qdisc_dev]
                    .iter()
                    .map(|x| x.to_string())
                    .collect();
                c.extend(s.qdisc.htb_class_args());
                let refs: Vec<&str> = c.iter().map(String::as_str).collect();
                cmd("tc", &refs)?;
                let limit = s.qdisc.limit.unwrap_or(1000).to_string();
                cmd(
                    "tc",
                    &[
                        "-n", &d, "qdisc", "add", "dev", &qdisc_dev, "parent", "1:10", "pfifo",
                        "limit", &limit,
                    ],
                )?;
            }
            self.applied
                .push((format!("{qdisc_dev} root qdisc"), s.qdisc.describe()));
        }
        Ok(())
    }

    /// Pins the NAPI kthreads of `dev` (RX queue i -> cpus[i % n]).
    fn pin_napi_threads(&mut self, dev: &str, cpus: &[u32], role: &str) -> io::Result<()> {
        if cpus.is_empty() {
            return Ok(());
        }
        let threads = napi_threads(dev);
        if threads.is_empty() {
            self.warnings.push(format!(
                "no NAPI kthread of {dev} found: the {role} NAPI thread could not be pinned"
            ));
            return Ok(());
        }
        for (i, (pid, comm)) in threads.iter().enumerate() {
            let cpu = cpus[i % cpus.len()];
            pin(*pid, &[cpu])?;
            self.applied
                .push((format!("{comm} (pid {pid}) affinity"), cpu.to_string()));
        }
        Ok(())
    }

    /// SCHED_FIFO priorities of the NAPI kthreads of `dev` (RX queue i -> prio[i]).
    fn set_napi_fifo(&mut self, dev: &str, prio: &[u32]) -> io::Result<()> {
        if prio.iter().all(|p| *p == 0) {
            return Ok(());
        }
        for (i, (pid, comm)) in napi_threads(dev).iter().enumerate() {
            let Some(&p) = prio.get(i) else { break };
            if p == 0 {
                continue;
            }
            let param = libc::sched_param {
                sched_priority: p as i32,
            };
            // SAFETY: valid pid and sched_param.
            if unsafe { libc::sched_setscheduler(*pid, libc::SCHED_FIFO, &param) } != 0 {
                return Err(io::Error::last_os_error());
            }
            self.applied.push((
                format!("{comm} (pid {pid}) sched"),
                format!("SCHED_FIFO {p}"),
            ));
        }
        Ok(())
    }

    /// Deletes the namespaces (idempotent).
    pub fn teardown(&mut self) -> io::Result<()> {
        if self.torn_down {
            return Ok(());
        }
        self.torn_down = true;
        let mut first_err = None;
        for ns in [&self.gen_ns, &self.dut_ns, &self.sink_ns] {
            if let Err(e) = delete_namespace(ns) {
                if crate::netns::list_namespaces()
                    .map(|l| l.contains(ns))
                    .unwrap_or(true)
                {
                    first_err.get_or_insert(e);
                }
            }
        }
        first_err.map_or(Ok(()), Err)
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        let _ = self.teardown();
    }
}

/// The NAPI kthreads of `dev`: `(pid, comm)` of tasks named `napi/<dev>-<id>` (the
/// name is cut at 15 characters), sorted by pid (creation order, i.e. RX queue order).
pub fn napi_threads(dev: &str) -> Vec<(i32, String)> {
    let prefix: String = format!("napi/{dev}-").chars().take(15).collect();
    let mut out = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return out;
    };
    for e in dir.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        let Ok(comm) = std::fs::read_to_string(format!("/proc/{pid}/comm")) else {
            continue;
        };
        let comm = comm.trim_end();
        if comm.starts_with(&prefix) || (prefix.len() == 15 && comm == prefix) {
            out.push((pid, comm.to_string()));
        }
    }
    out.sort();
    out
}
