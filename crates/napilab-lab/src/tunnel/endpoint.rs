//! The user-space tunnel endpoint: WireGuard's receive pipeline in user space
//! (docs/studies.md#wireguard-study), for kernels without the wireguard module.
//!
//! One receiver thread reads the tunnel's UDP datagrams and hands them round robin to
//! a pool of worker threads, regardless of how loaded each worker is (as WireGuard
//! spreads decryption over CPUs); a worker opens the datagram (ChaCha20-Poly1305) and
//! writes the inner packet into the TUN queue of its peer. Each queue has an
//! `IFF_NAPI` instance, so that write schedules the peer's NAPI instance on the
//! worker's CPU and its poll runs when the write re-enables bottom halves, inside the
//! worker: the later stage preempts the earlier one, the execution-order inversion the
//! study measured. With `threaded` the polls move to the `napi/<dev>-<n>` kthreads.
//!
//! The endpoint does not build the topology: it runs in a namespace the caller made,
//! listens on an address there and creates its TUN device there.

use std::io;
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde::Serialize;

use super::tun_device::{self, TunDevice, MAX_QUEUES};
use super::wire::{self, OpenError, PeerCipher, HEADER_LEN, TAG_LEN};
use crate::netns;

/// Datagrams waiting per worker; a full queue drops, as WireGuard's bounded queues do.
pub const WORKER_QUEUE: usize = 1024;
/// How often blocked threads look at the stop flag.
const POLL_STOP: Duration = Duration::from_millis(100);
/// How long the sink keeps counting after the workers ended.
const SINK_GRACE: Duration = Duration::from_millis(200);
/// Largest datagram read.
const MAX_DATAGRAM: usize = 65_535;
/// Socket receive buffer asked for (the kernel caps it at `net.core.rmem_max`).
const RCVBUF: libc::c_int = 8 << 20;

/// Where and how to run the endpoint.
#[derive(Clone, Debug)]
pub struct EndpointConfig {
    /// Network namespace to run in (None: the caller's).
    pub netns: Option<String>,
    /// The tunnel's UDP address (the DUT's outer address and port).
    pub listen: SocketAddrV4,
    /// Peers, 1 to 256: peer i's packets go to TUN queue i.
    pub peers: usize,
    /// Decryption workers (WireGuard runs one per CPU).
    pub workers: usize,
    /// Worker i runs on `worker_cpus[i % len]`; empty leaves them unpinned.
    pub worker_cpus: Vec<u32>,
    /// CPU of the receiver thread (None: unpinned).
    pub receiver_cpu: Option<u32>,
    /// Name of the TUN device to create.
    pub tun_name: String,
    /// The inner network, a /16 (e.g. 10.99.0.0): the TUN device gets `.0.1`, peer i
    /// sends from [`peer_address`].
    pub inner_net: Ipv4Addr,
    /// Poll the TUN NAPI instances in their kthreads (`/sys/class/net/<dev>/threaded`).
    pub threaded: bool,
    /// Seed of every peer's key ([`wire::peer_key`]); the peers use the same.
    pub key_seed: [u8; 32],
    /// Bind a UDP socket on the TUN address at this port and count the decrypted
    /// packets the stack delivers to it (the inner packets' destination).
    pub sink_port: Option<u16>,
}

/// The inner network napilab uses by default.
pub const DEFAULT_INNER_NET: Ipv4Addr = Ipv4Addr::new(10, 99, 0, 0);
/// WireGuard's customary port.
pub const DEFAULT_PORT: u16 = 51820;
/// The inner packets' destination port by default (the sink's).
pub const DEFAULT_SINK_PORT: u16 = 9000;

/// The TUN device's address in `inner_net`.
pub fn tun_address(inner_net: Ipv4Addr) -> Ipv4Addr {
    Ipv4Addr::from(u32::from(inner_net) & 0xffff_0000 | 1)
}

/// Peer `i`'s inner address: `.1.1` onwards in `inner_net` (256 peers end at `.2.0`).
pub fn peer_address(inner_net: Ipv4Addr, peer: u32) -> Ipv4Addr {
    Ipv4Addr::from(u32::from(inner_net) & 0xffff_0000 | (0x0101 + peer))
}

/// Checks the peer count against TUN's queue limit.
pub fn check_peers(peers: usize) -> Result<(), String> {
    if peers == 0 || peers > MAX_QUEUES {
        return Err(format!(
            "peers = {peers}: the user-space endpoint maps each peer to a TUN queue, and a \
             TUN device has 1 to {MAX_QUEUES} queues (the kernel's MAX_TAP_QUEUES); ask for \
             1 to {MAX_QUEUES} peers (or use the kernel's WireGuard, which has no such limit)"
        ));
    }
    Ok(())
}

/// What one worker did.
#[derive(Clone, Debug, Default, Serialize)]
pub struct WorkerStats {
    pub worker: usize,
    pub cpu: Option<u32>,
    pub datagrams: u64,
    pub decrypted: u64,
    pub bad_ciphertext: u64,
    pub malformed: u64,
    pub unknown_peer: u64,
    pub written: u64,
    pub write_errors: u64,
    /// CPU time of the worker thread (decryption, the writes, and the NAPI polls that
    /// ran in it at bottom-half enable), seconds.
    pub cpu_s: f64,
}

/// The endpoint's statistics (schema `napilab.tunnel-endpoint/1`).
#[derive(Clone, Debug, Default, Serialize)]
pub struct EndpointStats {
    pub schema: &'static str,
    /// `user-space` (this engine).
    pub engine: &'static str,
    pub tun_device: String,
    pub peers: usize,
    pub threaded: bool,
    pub elapsed_s: f64,
    /// Datagrams the receiver read.
    pub datagrams: u64,
    /// Dropped because the chosen worker's queue was full.
    pub worker_queue_full: u64,
    pub decrypted: u64,
    /// Tag did not verify: counted and dropped.
    pub bad_ciphertext: u64,
    pub malformed: u64,
    pub unknown_peer: u64,
    /// Inner packets written into TUN queues.
    pub written: u64,
    pub write_errors: u64,
    pub decrypted_per_s: f64,
    /// Inner packets the stack delivered to the sink socket (None: no sink). Packets
    /// the sink's full buffer dropped are the namespace's UDP `RcvbufErrors`.
    pub delivered: Option<u64>,
    /// The TUN device's own counters (`statistics/rx_packets`, `rx_dropped`).
    pub tun_rx_packets: Option<u64>,
    pub tun_rx_dropped: Option<u64>,
    /// Packets written per TUN queue (= per peer).
    pub per_queue_written: Vec<u64>,
    pub workers: Vec<WorkerStats>,
    /// CPU time of the receiver thread, seconds.
    pub receiver_cpu_s: f64,
}

#[derive(Default)]
struct WorkerCounters {
    datagrams: AtomicU64,
    decrypted: AtomicU64,
    bad_ciphertext: AtomicU64,
    malformed: AtomicU64,
    unknown_peer: AtomicU64,
    written: AtomicU64,
    write_errors: AtomicU64,
    cpu_ns: AtomicU64,
}

#[derive(Default)]
struct ReceiverCounters {
    datagrams: AtomicU64,
    queue_full: AtomicU64,
    cpu_ns: AtomicU64,
}

/// A running endpoint; [`Endpoint::stop`] ends it and returns its statistics. Dropping
/// it stops it too (threads joined, TUN device closed and so removed).
pub struct Endpoint {
    cfg: EndpointConfig,
    tun: Option<TunDevice>,
    stop: Arc<AtomicBool>,
    receiver: Option<JoinHandle<()>>,
    workers: Vec<JoinHandle<()>>,
    sink: Option<JoinHandle<()>>,
    receiver_counters: Arc<ReceiverCounters>,
    worker_counters: Vec<Arc<WorkerCounters>>,
    per_queue: Arc<Vec<AtomicU64>>,
    delivered: Arc<AtomicU64>,
    /// The sink stops after the workers, so it counts what their last writes delivered.
    sink_stop: Arc<AtomicBool>,
    started: Instant,
    listen: SocketAddrV4,
}

impl Endpoint {
    /// Creates the TUN device (one `IFF_NAPI` queue per peer) in the namespace, gives it
    /// the inner address, sets threaded NAPI if asked, starts the sink, the workers and
    /// the receiver, and returns once the tunnel's socket is bound.
    pub fn start(cfg: EndpointConfig) -> Result<Endpoint, String> {
        check_peers(cfg.peers)?;
        if cfg.workers == 0 {
            return Err("workers = 0: the endpoint needs at least 1 decryption worker".into());
        }
        if u32::from(cfg.inner_net) & 0xffff != 0 {
            return Err(format!(
                "inner network {}: give a /16 network address (x.y.0.0)",
                cfg.inner_net
            ));
        }
        let tun = TunDevice::open(cfg.netns.as_deref(), &cfg.tun_name, cfg.peers)?;
        configure_tun(&cfg)?;
        let stop = Arc::new(AtomicBool::new(false));
        let delivered = Arc::new(AtomicU64::new(0));
        let mut ep = Endpoint {
            listen: cfg.listen,
            cfg,
            tun: Some(tun),
            stop,
            receiver: None,
            workers: Vec::new(),
            sink: None,
            receiver_counters: Arc::default(),
            worker_counters: Vec::new(),
            per_queue: Arc::new(Vec::new()),
            delivered,
            sink_stop: Arc::new(AtomicBool::new(false)),
            started: Instant::now(),
        };
        // On an error below, dropping `ep` stops what was started.
        ep.start_threads()?;
        ep.started = Instant::now();
        Ok(ep)
    }

    fn start_threads(&mut self) -> Result<(), String> {
        let cfg = self.cfg.clone();
        if let Some(port) = cfg.sink_port {
            let addr = SocketAddrV4::new(tun_address(cfg.inner_net), port);
            let socket = bind_in(cfg.netns.as_deref(), addr, "sink")?;
            // The sink is a counter, not the system under test: a larger buffer keeps
            // it from dropping bursts (the kernel caps it at net.core.rmem_max).
            set_rcvbuf(&socket);
            let (stop, delivered) = (self.sink_stop.clone(), self.delivered.clone());
            self.sink = Some(spawn("tunnel-sink", move || {
                sink_loop(&socket, &stop, &delivered)
            })?);
        }
        let tun = self.tun.as_ref().ok_or("the TUN device is closed")?;
        let queue_fds: Arc<Vec<RawFd>> =
            Arc::new((0..tun.queues()).filter_map(|q| tun.queue_fd(q)).collect());
        let ciphers: Arc<Vec<PeerCipher>> = Arc::new(
            (0..cfg.peers)
                .map(|p| PeerCipher::new(&cfg.key_seed, p as u32))
                .collect(),
        );
        self.per_queue = Arc::new((0..cfg.peers).map(|_| AtomicU64::new(0)).collect());
        let mut senders = Vec::with_capacity(cfg.workers);
        for w in 0..cfg.workers {
            let (tx, rx) = mpsc::sync_channel::<Vec<u8>>(WORKER_QUEUE);
            senders.push(tx);
            let counters = Arc::new(WorkerCounters::default());
            self.worker_counters.push(counters.clone());
            let cpu = cpu_of(&cfg.worker_cpus, w);
            let job = WorkerJob {
                rx,
                ciphers: ciphers.clone(),
                queue_fds: queue_fds.clone(),
                per_queue: self.per_queue.clone(),
                counters,
            };
            self.workers.push(spawn(&format!("tunnel-dec{w}"), move || {
                if let Some(c) = cpu {
                    // An unpinned worker still decrypts; the statistics say where it ran.
                    let _ = netns::pin(0, &[c]);
                }
                job.run();
            })?);
        }
        let socket = bind_in(cfg.netns.as_deref(), cfg.listen, "tunnel")?;
        set_rcvbuf(&socket);
        if let Ok(std::net::SocketAddr::V4(a)) = socket.local_addr() {
            self.listen = a;
        }
        let (stop, counters, cpu) = (
            self.stop.clone(),
            self.receiver_counters.clone(),
            cfg.receiver_cpu,
        );
        self.receiver = Some(spawn("tunnel-recv", move || {
            if let Some(c) = cpu {
                let _ = netns::pin(0, &[c]);
            }
            receive_loop(&socket, &senders, &stop, &counters);
        })?);
        Ok(())
    }

    /// The tunnel's bound UDP address (the port resolved if 0 was asked).
    pub fn listen_addr(&self) -> SocketAddrV4 {
        self.listen
    }

    /// The TUN device's inner address (the inner packets' destination).
    pub fn tun_addr(&self) -> Ipv4Addr {
        tun_address(self.cfg.inner_net)
    }

    pub fn tun_name(&self) -> &str {
        &self.cfg.tun_name
    }

    /// The statistics so far (the endpoint keeps running).
    pub fn stats(&self) -> EndpointStats {
        let mut s = EndpointStats {
            schema: "napilab.tunnel-endpoint/1",
            engine: "user-space",
            tun_device: self.cfg.tun_name.clone(),
            peers: self.cfg.peers,
            threaded: self.cfg.threaded,
            elapsed_s: self.started.elapsed().as_secs_f64(),
            datagrams: self.receiver_counters.datagrams.load(Ordering::Relaxed),
            worker_queue_full: self.receiver_counters.queue_full.load(Ordering::Relaxed),
            receiver_cpu_s: ns_to_s(self.receiver_counters.cpu_ns.load(Ordering::Relaxed)),
            delivered: self
                .cfg
                .sink_port
                .map(|_| self.delivered.load(Ordering::Relaxed)),
            per_queue_written: self
                .per_queue
                .iter()
                .map(|c| c.load(Ordering::Relaxed))
                .collect(),
            ..EndpointStats::default()
        };
        for (i, c) in self.worker_counters.iter().enumerate() {
            let w = WorkerStats {
                worker: i,
                cpu: cpu_of(&self.cfg.worker_cpus, i),
                datagrams: c.datagrams.load(Ordering::Relaxed),
                decrypted: c.decrypted.load(Ordering::Relaxed),
                bad_ciphertext: c.bad_ciphertext.load(Ordering::Relaxed),
                malformed: c.malformed.load(Ordering::Relaxed),
                unknown_peer: c.unknown_peer.load(Ordering::Relaxed),
                written: c.written.load(Ordering::Relaxed),
                write_errors: c.write_errors.load(Ordering::Relaxed),
                cpu_s: ns_to_s(c.cpu_ns.load(Ordering::Relaxed)),
            };
            s.decrypted += w.decrypted;
            s.bad_ciphertext += w.bad_ciphertext;
            s.malformed += w.malformed;
            s.unknown_peer += w.unknown_peer;
            s.written += w.written;
            s.write_errors += w.write_errors;
            s.workers.push(w);
        }
        if s.elapsed_s > 0.0 {
            s.decrypted_per_s = s.decrypted as f64 / s.elapsed_s;
        }
        let read = |counter: &str| -> Option<u64> {
            let path = format!("/sys/class/net/{}/statistics/{counter}", self.cfg.tun_name);
            run_sh(self.cfg.netns.as_deref(), &format!("cat {path}"))
                .ok()
                .and_then(|t| t.trim().parse().ok())
        };
        s.tun_rx_packets = read("rx_packets");
        s.tun_rx_dropped = read("rx_dropped");
        s
    }

    /// Stops the receiver, lets the workers finish what is queued, stops the sink, and
    /// returns the final statistics; the TUN device is closed (and so removed).
    pub fn stop(mut self) -> EndpointStats {
        self.shutdown();
        let s = self.stats();
        self.tun = None;
        s
    }

    fn shutdown(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(r) = self.receiver.take() {
            let _ = r.join();
        }
        // The receiver dropped its senders: each worker drains its queue and ends.
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
        if let Some(s) = self.sink.take() {
            // Threaded NAPI polls after the write returns: give the kthreads a moment
            // to deliver the last packets before the sink stops counting.
            std::thread::sleep(SINK_GRACE);
            self.sink_stop.store(true, Ordering::Relaxed);
            let _ = s.join();
        }
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn ns_to_s(ns: u64) -> f64 {
    ns as f64 / 1e9
}

fn cpu_of(cpus: &[u32], i: usize) -> Option<u32> {
    (!cpus.is_empty()).then(|| cpus[i % cpus.len()])
}

fn spawn(name: &str, f: impl FnOnce() + Send + 'static) -> Result<JoinHandle<()>, String> {
    std::thread::Builder::new()
        .name(name.into())
        .spawn(f)
        .map_err(|e| format!("spawning {name}: {e}"))
}

/// Runs a shell snippet in `ns` (with the namespace's /sys), or here.
pub(crate) fn run_sh(ns: Option<&str>, script: &str) -> io::Result<String> {
    match ns {
        Some(ns) => netns::sh_in(ns, script),
        None => netns::cmd("sh", &["-c", script]),
    }
}

fn configure_tun(cfg: &EndpointConfig) -> Result<(), String> {
    let dev = &cfg.tun_name;
    let addr = tun_address(cfg.inner_net);
    // IPv6 off on the device first, so the kernel sends no router solicitations into
    // queues nobody reads.
    run_sh(
        cfg.netns.as_deref(),
        &format!(
            "echo 1 > /proc/sys/net/ipv6/conf/{dev}/disable_ipv6 2>/dev/null; \
             ip addr add {addr}/16 dev {dev} && ip link set {dev} up"
        ),
    )
    .map_err(|e| format!("configuring TUN device {dev}: {e}"))?;
    if cfg.threaded {
        run_sh(
            cfg.netns.as_deref(),
            &format!("echo 1 > /sys/class/net/{dev}/threaded"),
        )
        .map_err(|e| {
            format!(
                "threaded NAPI on {dev}: {e} (/sys/class/net/<dev>/threaded needs Linux 5.12+; \
                 run with softirq NAPI instead)"
            )
        })?;
    }
    Ok(())
}

/// Binds a UDP socket from a thread that entered `ns`, so the socket lives there.
fn bind_in(ns: Option<&str>, addr: SocketAddrV4, what: &str) -> Result<UdpSocket, String> {
    let ns = ns.map(str::to_owned);
    std::thread::scope(|s| {
        s.spawn(|| {
            netns::enter_if(ns.as_deref())?;
            let sock = UdpSocket::bind(addr).map_err(|e| {
                format!("{what} socket: cannot bind UDP {addr}: {e} (is the address configured in the namespace, the port free?)")
            })?;
            sock.set_read_timeout(Some(POLL_STOP))
                .map_err(|e| format!("{what} socket: {e}"))?;
            Ok(sock)
        })
        .join()
        .map_err(|_| format!("binding the {what} socket panicked"))?
    })
}

fn set_rcvbuf(sock: &UdpSocket) {
    // SAFETY: setsockopt with a valid int option on an open socket. A refused size
    // leaves the default buffer, which only means earlier drops under bursts.
    unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
            (&RCVBUF as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
    }
}

fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted
    )
}

fn receive_loop(
    socket: &UdpSocket,
    workers: &[SyncSender<Vec<u8>>],
    stop: &AtomicBool,
    counters: &ReceiverCounters,
) {
    let mut buf = vec![0u8; MAX_DATAGRAM];
    let mut next = 0usize;
    let cpu0 = netns::thread_cpu_ns();
    while !stop.load(Ordering::Relaxed) {
        match socket.recv(&mut buf) {
            Ok(n) => {
                counters.datagrams.fetch_add(1, Ordering::Relaxed);
                // Round robin regardless of load, as WireGuard dispatches decryption.
                match workers[next].try_send(buf[..n].to_vec()) {
                    Ok(()) => {}
                    Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {
                        counters.queue_full.fetch_add(1, Ordering::Relaxed);
                    }
                }
                next = (next + 1) % workers.len();
            }
            Err(e) if is_timeout(&e) => {}
            // Any other receive error (e.g. ECONNREFUSED from an ICMP error) is
            // transient for a UDP socket: keep reading until told to stop.
            Err(_) => {}
        }
        counters
            .cpu_ns
            .store(netns::thread_cpu_ns() - cpu0, Ordering::Relaxed);
    }
}

struct WorkerJob {
    rx: Receiver<Vec<u8>>,
    ciphers: Arc<Vec<PeerCipher>>,
    queue_fds: Arc<Vec<RawFd>>,
    per_queue: Arc<Vec<AtomicU64>>,
    counters: Arc<WorkerCounters>,
}

impl WorkerJob {
    fn run(self) {
        let cpu0 = netns::thread_cpu_ns();
        loop {
            match self.rx.recv_timeout(POLL_STOP) {
                Ok(mut d) => self.handle(&mut d),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => break,
            }
            self.counters
                .cpu_ns
                .store(netns::thread_cpu_ns() - cpu0, Ordering::Relaxed);
        }
    }

    fn handle(&self, d: &mut [u8]) {
        let c = &self.counters;
        c.datagrams.fetch_add(1, Ordering::Relaxed);
        let peer = match wire::receiver_index(d) {
            Ok(p) => p as usize,
            Err(_) => {
                c.malformed.fetch_add(1, Ordering::Relaxed);
                return;
            }
        };
        let (Some(cipher), Some(&fd)) = (self.ciphers.get(peer), self.queue_fds.get(peer)) else {
            c.unknown_peer.fetch_add(1, Ordering::Relaxed);
            return;
        };
        match cipher.open(d) {
            Ok(()) => {}
            Err(OpenError::BadCiphertext) => {
                c.bad_ciphertext.fetch_add(1, Ordering::Relaxed);
                return;
            }
            Err(_) => {
                c.malformed.fetch_add(1, Ordering::Relaxed);
                return;
            }
        }
        c.decrypted.fetch_add(1, Ordering::Relaxed);
        let inner = &d[HEADER_LEN..d.len() - TAG_LEN];
        match tun_device::write_packet(fd, inner) {
            Ok(()) => {
                c.written.fetch_add(1, Ordering::Relaxed);
                self.per_queue[peer].fetch_add(1, Ordering::Relaxed);
            }
            Err(_) => {
                c.write_errors.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

fn sink_loop(socket: &UdpSocket, stop: &AtomicBool, delivered: &AtomicU64) {
    let mut buf = vec![0u8; MAX_DATAGRAM];
    while !stop.load(Ordering::Relaxed) {
        match socket.recv(&mut buf) {
            Ok(_) => {
                delivered.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) if is_timeout(&e) => {}
            Err(_) => {}
        }
    }
    // Count what the stack delivered before the stop, without waiting further.
    let _ = socket.set_nonblocking(true);
    let mut spare = 0;
    while socket.recv(&mut buf).is_ok() && spare < 1_000_000 {
        delivered.fetch_add(1, Ordering::Relaxed);
        spare += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_in_the_inner_network() {
        assert_eq!(tun_address(DEFAULT_INNER_NET), Ipv4Addr::new(10, 99, 0, 1));
        assert_eq!(
            peer_address(DEFAULT_INNER_NET, 0),
            Ipv4Addr::new(10, 99, 1, 1)
        );
        assert_eq!(
            peer_address(DEFAULT_INNER_NET, 255),
            Ipv4Addr::new(10, 99, 2, 0)
        );
    }

    #[test]
    fn peer_counts_outside_tuns_queue_limit_are_refused_with_the_limit() {
        assert!(check_peers(1).is_ok());
        assert!(check_peers(256).is_ok());
        let e = check_peers(257).expect_err("257 peers refused");
        assert!(e.contains("256") && e.contains("MAX_TAP_QUEUES"), "{e}");
        assert!(check_peers(0).is_err());
    }
}
