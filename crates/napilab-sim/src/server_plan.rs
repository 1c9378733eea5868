//! What a server scenario adds to a twin plan: the request workload, the server's costs
//! and each configuration's mode. crate::from_server_scenario builds it.

use std::collections::BTreeMap;

use napilab_core::scenario::{RequestWorkload, ServerEngine, ServerMode};

use crate::profile::{ParamSource, SourceKind};

/// The client's send and read split its CPU per request evenly: ASSUMED (the lab
/// measures the generator thread's time as one number).
pub const CLIENT_SEND_SHARE: f64 = 0.5;
pub const CLIENT_SEND_SHARE_WHY: &str = "the lab measures the load generator thread's CPU as one number: half for the send (request build, send, TCP transmit, veth_xmit), half for the reply's read (epoll_wait, recv, parse)";
/// TCP/veth latency per request beyond the twin's packets, and its tail: ASSUMED,
/// read off one lab point by hand (the reasons say which); `napilab sim calibrate` does
/// not fit them yet.
pub const PATH_NS: f64 = 60_000.0;
pub const PATH_TAIL_NS: f64 = 11_000.0;
pub const PATH_NS_WHY: &str = "read off by hand, not fitted by napilab sim calibrate: lab run 20261125-222032-e182 (docs/results/lab.md, server-modes, a quiet VM) has no-coalescing at p50 84 us, p99 134 us at 2,000 requests/s, the twin without this path 16 / 22 us; 60 us fixed plus the tail's median (0.69 x 11 us) makes up the p50 difference";
pub const PATH_TAIL_NS_WHY: &str = "read off by hand, not fitted by napilab sim calibrate: the same point's p99 - p50 (50 us in the lab, 6 us in the twin without it) is ln(50) = 3.9 times an exponential's mean, so 11 us; one mode at one rate of one run";

/// Why the costs per epoll return and per generator round are 0 unless a profile
/// gives them (docs/sim.md, "Costs per wake-up and per round").
pub const EPOLL_RETURN_WHY: &str = "0, not charged, until napilab sim calibrate fits it on a server run: the no-coalescing server's CPU against its requests and its epoll returns (3,381-5,132 ns a return on lab runs 20261128-212107-bf57 and 20261128-195727-32e3 of the AMD EPYC family-26 VM, docs/sim.md 'Costs per wake-up and per round')";
pub const RESUME_WHY: &str = "0, not charged, until napilab sim calibrate fits it on a server run: threaded's worker CPU against the twin's, whose NAPI kthread preempts the worker as the lab's 6.18 kernel does (docs/sim.md 'Wake-up preemption on the lab's kernel')";
pub const CLIENT_ROUND_WHY: &str = "0, not charged: napilab sim calibrate does not fit it (through the twin a cost a round and one a request move its generator's CPU almost alike: the recovery fixture gave 731-1,315 a round for 1,500; docs/sim.md 'Costs per wake-up and per round')";

/// What a request costs the server, cycles at the profile's clock (veth-lab: 1 GHz,
/// so cycles are ns), and where each number comes from.
#[derive(Clone, Debug, PartialEq)]
pub struct ServerCosts {
    /// The server's own work per request (parse, key lookup, reply): user time.
    pub app_user_cycles: f64,
    /// Kernel work per request in the server's thread: `epoll_wait`, `recv`, the TCP
    /// send of the reply and `veth_xmit`, and the client namespace's receive of the
    /// reply, which on veth runs in the server CPU's softirq at bh-enable.
    pub app_kernel_cycles: f64,
    /// Kernel work per return of the server's `epoll_wait` with events, however many
    /// requests it brings: the system call and, when the worker slept, its switch back
    /// in. With it the server's CPU per request falls as load batches requests, as the
    /// lab's does (docs/sim.md, "Costs per wake-up and per round").
    pub epoll_return_cycles: f64,
    /// TCP receive of the request segment (`tcp_v4_rcv`, socket queue, the server's
    /// wake-up) beyond the profile's per-packet UDP forwarding stages; charged on the
    /// CPU that polls the request (the profile's `stage_cycles.unmapped`).
    pub receive_cycles: f64,
    /// Per call of the veth poll, whoever calls it (the profile's `fixed_cycles.poll`,
    /// which the veth-lab profile leaves at 0): the poll's entry and its look at the
    /// ring. It is also the length of one pass of a busy-polling loop that finds
    /// nothing, so it must not be 0 (a busy-wait server would loop in zero time).
    pub poll_cycles: f64,
    /// A NAPI kthread's run beyond its polls (the profile's
    /// `fixed_cycles.napi_thread_run`, charged when it is switched in): its wake-up,
    /// `schedule()` and the sleep after.
    pub kthread_run_cycles: f64,
    /// Per request a NAPI kthread polls, beyond the request's receive (the profile's
    /// `fixed_cycles.napi_thread_packet`): fitted with `kthread_run_cycles` on
    /// threaded's kthread CPU, whose two parts the kthread's batching tells apart.
    pub kthread_packet_cycles: f64,
    /// The worker's cost each time it resumes after a NAPI kthread preempted it (the
    /// application's `kernel_cycles_per_resume`): its switch back in and the cache the
    /// kthread took; fitted on threaded's worker CPU.
    pub resume_cycles: f64,
    /// The load generator's CPU per request, send and reply read together (cycles of
    /// its thread on `generator_cpus`).
    pub client_cycles: f64,
    /// The part of `client_cycles` spent sending (the rest reads the reply).
    pub client_send_share: f64,
    /// The load generator's CPU per round of its loop (a burst of sends, then the
    /// replies that are in), however many requests the round carries.
    pub client_round_cycles: f64,
    /// TCP/veth latency per request that the twin's packets do not carry (TCP on both
    /// sides, the reply's way to the client and its wake-up), ns, and the mean of an
    /// exponential addition to it (its tail).
    pub path_ns: f64,
    pub path_tail_ns: f64,
    /// By key (`server.app_user_cycles`, ...).
    pub provenance: BTreeMap<String, ParamSource>,
}

impl ServerCosts {
    /// The costs before any fit. ASSUMED from the lab's `make bench-kv` figures
    /// (docs/results/lab.md, "kv-bench": the server's worker CPU per request 12-16 us on a
    /// loaded machine, user and kernel together), split about 1:2 between the
    /// application and the kernel, and a TCP receive of about 1.5 us.
    pub fn assumed() -> ServerCosts {
        let mut provenance = BTreeMap::new();
        let why = |d: &str| ParamSource {
            kind: SourceKind::Assumed,
            reference: String::new(),
            detail: d.to_string(),
        };
        provenance.insert(
            "server.app_user_cycles".into(),
            why("no lab fit yet: a third of the ~10 us per request that docs/lab.md's kv benchmark shows for the server's worker (user and system together, a loaded machine); run napilab sim calibrate on a server run"),
        );
        provenance.insert(
            "server.app_kernel_cycles".into(),
            why("no lab fit yet: two thirds of that ~10 us (recv, TCP send, veth_xmit, and the client namespace's receive of the reply in the server CPU's softirq)"),
        );
        provenance.insert("server.epoll_return_cycles".into(), why(EPOLL_RETURN_WHY));
        provenance.insert(
            "server.kthread_run_cycles".into(),
            why("no lab fit yet: 0, a NAPI kthread's run costs only its polls; napilab sim calibrate on a server run fits it on threaded's NAPI kthread CPU at each rate"),
        );
        provenance.insert(
            "server.kthread_packet_cycles".into(),
            why("no lab fit yet: 0, a request polled by a NAPI kthread costs what its softirq poll does; napilab sim calibrate on a server run fits it with server.kthread_run_cycles"),
        );
        provenance.insert("server.resume_cycles".into(), why(RESUME_WHY));
        provenance.insert(
            "server.receive_cycles".into(),
            why("no lab fit yet: TCP receive of a request segment beyond the veth-lab profile's UDP forwarding stages, about 1.5 us on this VM"),
        );
        provenance.insert(
            "server.poll_cycles".into(),
            why("no lab fit yet: an empty veth poll plus the epoll_wait system call around a busy-poll pass, about 0.5 us on this VM"),
        );
        provenance.insert(
            "server.client_cycles".into(),
            why("no lab fit yet: about as much as the server's ~10 us a request (docs/lab.md kv benchmark); napilab sim calibrate on a server run fits it from the load generator thread's CPU"),
        );
        provenance.insert(
            "server.client_send_share".into(),
            why(CLIENT_SEND_SHARE_WHY),
        );
        provenance.insert("server.client_round_cycles".into(), why(CLIENT_ROUND_WHY));
        provenance.insert("server.path_ns".into(), why(PATH_NS_WHY));
        provenance.insert("server.path_tail_ns".into(), why(PATH_TAIL_NS_WHY));
        ServerCosts {
            app_user_cycles: 3_000.0,
            app_kernel_cycles: 7_000.0,
            epoll_return_cycles: 0.0,
            receive_cycles: 1_500.0,
            poll_cycles: 500.0,
            kthread_run_cycles: 0.0,
            kthread_packet_cycles: 0.0,
            resume_cycles: 0.0,
            client_cycles: 10_000.0,
            client_send_share: CLIENT_SEND_SHARE,
            client_round_cycles: 0.0,
            path_ns: PATH_NS,
            path_tail_ns: PATH_TAIL_NS,
            provenance,
        }
    }

    /// Every cost with its value.
    pub fn parameters(&self) -> Vec<(&'static str, f64)> {
        vec![
            ("server.app_user_cycles", self.app_user_cycles),
            ("server.app_kernel_cycles", self.app_kernel_cycles),
            ("server.epoll_return_cycles", self.epoll_return_cycles),
            ("server.receive_cycles", self.receive_cycles),
            ("server.poll_cycles", self.poll_cycles),
            ("server.kthread_run_cycles", self.kthread_run_cycles),
            ("server.kthread_packet_cycles", self.kthread_packet_cycles),
            ("server.resume_cycles", self.resume_cycles),
            ("server.client_cycles", self.client_cycles),
            ("server.client_send_share", self.client_send_share),
            ("server.client_round_cycles", self.client_round_cycles),
            ("server.path_ns", self.path_ns),
            ("server.path_tail_ns", self.path_tail_ns),
        ]
    }

    /// `source: <key>` = `<value> (<kind>: <reference>; <detail>)` settings, as the
    /// profile's parameters are recorded.
    pub fn provenance_pairs(&self) -> Vec<(String, String)> {
        self.parameters()
            .into_iter()
            .map(|(k, v)| {
                let text = match self.provenance.get(k) {
                    Some(p) if p.reference.is_empty() => {
                        format!("{v} ({}: {})", p.kind.as_str(), p.detail)
                    }
                    Some(p) => format!("{v} ({}: {}; {})", p.kind.as_str(), p.reference, p.detail),
                    None => format!("{v} (source not given)"),
                };
                (format!("source: {k}"), text)
            })
            .collect()
    }
}

/// One server configuration beside its [`TwinConfiguration`] (same index).
#[derive(Clone, Debug, PartialEq)]
pub struct ServerConfiguration {
    pub name: String,
    pub mode: ServerMode,
    pub engine: ServerEngine,
    pub server_cpus: Vec<u32>,
    /// Why the lab cannot run it (memcached without epoll parameters); then no points.
    pub not_runnable: Option<String>,
}

/// What a server scenario adds to a [`TwinPlan`].
#[derive(Clone, Debug, PartialEq)]
pub struct ServerPlan {
    pub workload: RequestWorkload,
    pub search_repeats: u32,
    pub confidence: f64,
    pub costs: ServerCosts,
    pub configurations: Vec<ServerConfiguration>,
}
