//! napilab's key-value server, written for the kernel's polling API: one worker thread
//! per NAPI instance, each with its own epoll instance (so `EPIOCSPARAMS` and the
//! kernel's per-epoll busy poll address exactly one NAPI instance), connections handed
//! to the worker of their `SO_INCOMING_NAPI_ID`, workers pinned to the CPUs given.
//!
//! An acceptor thread (entered into the server's namespace, so the listening socket
//! and every connection live there) accepts, reads the connection's NAPI id and adds
//! it to that worker's epoll. The k-th distinct NAPI id goes to worker k mod workers;
//! a connection whose id is not known yet at accept goes round-robin and is counted in
//! `connections_off_napi` when its id, read at its first request, belongs to another
//! worker. The store is a sharded hash map preloaded with the [`Keyspace`].

use std::collections::HashMap;
use std::io;
use std::net::{SocketAddr, SocketAddrV4, TcpListener};
use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::epoll::{self, Epoll, EpollMode, StopFd};
use super::keyspace::Keyspace;
use super::protocol::{self, ProtocolError, Request};
use super::results::{EpollStats, LatencyRecorder, ServerStats, WorkerStats};
use crate::netns;

/// Shards of the store: enough that workers on different CPUs rarely meet on a lock.
const SHARDS: usize = 64;
/// Bytes read per recv.
const READ_CHUNK: usize = 16 * 1024;
/// Events taken per epoll_wait.
const MAX_EVENTS: usize = 64;
/// A blocking worker wakes at least this often (ms) to notice a stop it missed.
const BLOCKING_TIMEOUT_MS: i32 = 1000;
/// epoll data of the stop eventfd (connection fds are never this large).
const STOP_TOKEN: u64 = u64::MAX;

#[derive(Clone, Debug)]
pub struct ServerConfig {
    pub listen: SocketAddrV4,
    /// Namespace to serve in (None: the caller's).
    pub netns: Option<String>,
    /// Worker threads, one per NAPI instance (RX queue) the server should serve.
    pub workers: usize,
    /// Worker i runs on `cpus[i % cpus.len()]`; empty leaves them unpinned.
    pub cpus: Vec<u32>,
    pub mode: EpollMode,
    pub keyspace: Keyspace,
}

struct Item {
    flags: u32,
    data: Box<[u8]>,
}

struct Store {
    shards: Vec<Mutex<HashMap<Box<[u8]>, Item>>>,
}

impl Store {
    fn preloaded(ks: &Keyspace) -> Store {
        let mut maps: Vec<HashMap<Box<[u8]>, Item>> = (0..SHARDS).map(|_| HashMap::new()).collect();
        for i in 0..ks.keys {
            let k = ks.key(i);
            maps[Self::shard_of(&k)].insert(
                Box::from(&k[..]),
                Item {
                    flags: 0,
                    data: ks.value(i).into_boxed_slice(),
                },
            );
        }
        Store {
            shards: maps.into_iter().map(Mutex::new).collect(),
        }
    }

    /// FNV-1a: cheap and good enough to spread `key:NNNNNNNNNN`.
    fn shard_of(key: &[u8]) -> usize {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for &b in key {
            h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
        (h % SHARDS as u64) as usize
    }

    fn shard(&self, key: &[u8]) -> std::sync::MutexGuard<'_, HashMap<Box<[u8]>, Item>> {
        // A worker that panicked while holding a shard left a consistent map (inserts
        // and removes are single calls): keep serving.
        self.shards[Self::shard_of(key)]
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }
}

#[derive(Default)]
struct Counters {
    requests: u64,
    gets: u64,
    get_hits: u64,
    sets: u64,
    deletes: u64,
    protocol_errors: u64,
}

struct WorkerOutput {
    stats: WorkerStats,
    counters: Counters,
    service: LatencyRecorder,
    error: Option<String>,
}

/// A running server; [`KvServer::stop`] ends it and returns its statistics.
pub struct KvServer {
    addr: SocketAddrV4,
    mode: EpollMode,
    stop: Arc<AtomicBool>,
    stop_fd: Arc<StopFd>,
    stall_until_ns: Arc<AtomicU64>,
    acceptor: Option<JoinHandle<()>>,
    workers: Vec<JoinHandle<WorkerOutput>>,
    started: Instant,
}

struct Shared {
    store: Store,
    stop: Arc<AtomicBool>,
    stall_until_ns: Arc<AtomicU64>,
    /// NAPI id -> worker, as assigned by the acceptor.
    napi_owner: Mutex<HashMap<u32, usize>>,
}

impl KvServer {
    /// Preloads the store, checks that this kernel runs the mode (in the server's
    /// namespace), starts the workers and the acceptor, and returns once the listening
    /// socket is bound.
    pub fn start(cfg: ServerConfig) -> Result<KvServer, String> {
        if cfg.workers == 0 {
            return Err("workers: need at least 1".into());
        }
        let stop = Arc::new(AtomicBool::new(false));
        let stop_fd = Arc::new(StopFd::new().map_err(|e| format!("eventfd: {e}"))?);
        let stall_until_ns = Arc::new(AtomicU64::new(0));
        let shared = Arc::new(Shared {
            store: Store::preloaded(&cfg.keyspace),
            stop: stop.clone(),
            stall_until_ns: stall_until_ns.clone(),
            napi_owner: Mutex::new(HashMap::new()),
        });
        let mut epolls = Vec::new();
        for i in 0..cfg.workers {
            let ep = Epoll::new().map_err(|e| format!("worker {i}: epoll_create1: {e}"))?;
            if let Some(p) = cfg.mode.params {
                ep.set_params(&p).map_err(|e| {
                    format!("mode {} is not runnable on this kernel: {e}", cfg.mode.name)
                })?;
            }
            ep.add(stop_fd.fd(), libc::EPOLLIN as u32, STOP_TOKEN)
                .map_err(|e| format!("worker {i}: epoll_ctl(stop eventfd): {e}"))?;
            epolls.push(Arc::new(ep));
        }
        // The listener is bound in a thread that entered the namespace; it then stays
        // the acceptor, so nothing else of this process changes namespace.
        let (ready_tx, ready_rx) = mpsc::channel::<Result<SocketAddrV4, String>>();
        let acceptor = {
            let cfg = cfg.clone();
            let shared = shared.clone();
            let epolls = epolls.clone();
            std::thread::Builder::new()
                .name("kv-accept".into())
                .spawn(move || {
                    let listener = match bind_in(&cfg) {
                        Ok(l) => l,
                        Err(e) => {
                            let _ = ready_tx.send(Err(e));
                            return;
                        }
                    };
                    let addr = match listener.local_addr() {
                        Ok(SocketAddr::V4(a)) => a,
                        _ => cfg.listen,
                    };
                    let _ = ready_tx.send(Ok(addr));
                    accept_loop(&listener, &shared, &epolls);
                })
                .map_err(|e| format!("spawning the acceptor: {e}"))?
        };
        let addr = match ready_rx.recv_timeout(Duration::from_secs(10)) {
            Ok(Ok(a)) => a,
            Ok(Err(e)) => {
                let _ = acceptor.join();
                return Err(e);
            }
            Err(_) => return Err("the acceptor did not start within 10 s".into()),
        };
        let mut workers = Vec::new();
        for (i, ep) in epolls.into_iter().enumerate() {
            let cpu = (!cfg.cpus.is_empty()).then(|| cfg.cpus[i % cfg.cpus.len()]);
            let shared = shared.clone();
            let mode = cfg.mode.clone();
            let workers_n = cfg.workers;
            let h = std::thread::Builder::new()
                .name(format!("kv-worker-{i}"))
                .spawn(move || worker(i, workers_n, cpu, &ep, &mode, &shared))
                .map_err(|e| format!("spawning worker {i}: {e}"))?;
            workers.push(h);
        }
        Ok(KvServer {
            addr,
            mode: cfg.mode,
            stop,
            stop_fd,
            stall_until_ns,
            acceptor: Some(acceptor),
            workers,
            started: Instant::now(),
        })
    }

    /// The address the server listens on (the port the kernel chose for port 0).
    pub fn addr(&self) -> SocketAddrV4 {
        self.addr
    }

    /// Makes every worker stop serving for `d` from now (fault injection: shows what a
    /// stalled server does to the client's tail latency).
    pub fn stall(&self, d: Duration) {
        let until = netns::mono_ns() + d.as_nanos() as u64;
        self.stall_until_ns.store(until, Ordering::SeqCst);
    }

    /// Stops the acceptor and the workers, closes every connection, and returns the
    /// statistics.
    pub fn stop(mut self) -> ServerStats {
        self.stop.store(true, Ordering::SeqCst);
        self.stop_fd.signal();
        if let Some(a) = self.acceptor.take() {
            let _ = a.join();
        }
        let uptime_s = self.started.elapsed().as_secs_f64();
        let mut out = ServerStats {
            schema: "napilab.kv-server/1".into(),
            engine: "napilab-kv".into(),
            mode: self.mode.name.clone(),
            epoll_params: self.mode.params,
            blocking_epoll: self.mode.blocking,
            uptime_s,
            ..ServerStats::default()
        };
        let mut service = LatencyRecorder::new();
        let mut errors = Vec::new();
        for h in self.workers.drain(..) {
            let Ok(w) = h.join() else {
                errors.push("a worker panicked".to_string());
                continue;
            };
            out.requests += w.counters.requests;
            out.gets += w.counters.gets;
            out.get_hits += w.counters.get_hits;
            out.sets += w.counters.sets;
            out.deletes += w.counters.deletes;
            out.protocol_errors += w.counters.protocol_errors;
            service.merge(&w.service);
            if let Some(e) = w.error {
                errors.push(e);
            }
            out.workers.push(w.stats);
        }
        for e in errors {
            eprintln!("napilab kv-server: {e}");
        }
        out.service_time = Some(service.percentiles());
        out
    }
}

impl Drop for KvServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        self.stop_fd.signal();
    }
}

fn bind_in(cfg: &ServerConfig) -> Result<TcpListener, String> {
    netns::enter_if(cfg.netns.as_deref())?;
    // The acceptor's work (accepting, handing connections over) is the server's: on
    // the server's CPUs, as its workers are (each pins itself to one of them).
    netns::pin(0, &cfg.cpus).map_err(|e| {
        format!(
            "pinning the acceptor to CPUs {:?}: {e} (are they online?)",
            cfg.cpus
        )
    })?;
    epoll::check_supported(&cfg.mode)?;
    let l =
        TcpListener::bind(cfg.listen).map_err(|e| format!("listening on {}: {e}", cfg.listen))?;
    l.set_nonblocking(true)
        .map_err(|e| format!("listening socket: {e}"))?;
    Ok(l)
}

fn accept_loop(listener: &TcpListener, shared: &Shared, epolls: &[Arc<Epoll>]) {
    let mut next_rr = 0usize;
    let mut next_napi_slot = 0usize;
    while !shared.stop.load(Ordering::Relaxed) {
        let mut pfd = libc::pollfd {
            fd: listener.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        unsafe { libc::poll(&mut pfd, 1, 100) };
        loop {
            let stream = match listener.accept() {
                Ok((s, _)) => s,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    // EMFILE and the like: drop this round, retry at the next poll.
                    eprintln!("napilab kv-server: accept: {e}");
                    break;
                }
            };
            if stream.set_nonblocking(true).is_err() || stream.set_nodelay(true).is_err() {
                continue;
            }
            let napi = epoll::incoming_napi_id(stream.as_raw_fd());
            let w = if napi != 0 {
                let mut owners = shared.napi_owner.lock().unwrap_or_else(|p| p.into_inner());
                *owners.entry(napi).or_insert_with(|| {
                    let w = next_napi_slot % epolls.len();
                    next_napi_slot += 1;
                    w
                })
            } else {
                next_rr += 1;
                (next_rr - 1) % epolls.len()
            };
            let fd = stream.into_raw_fd();
            if epolls[w]
                .add(fd, (libc::EPOLLIN | libc::EPOLLRDHUP) as u32, fd as u64)
                .is_err()
            {
                // SAFETY: we own fd (into_raw_fd above) and nobody else saw it.
                drop(unsafe { OwnedFd::from_raw_fd(fd) });
            }
        }
    }
}

struct Conn {
    fd: OwnedFd,
    rbuf: Vec<u8>,
    wbuf: Vec<u8>,
    /// The epoll events registered for it.
    interest: u32,
    napi_checked: bool,
    close_after_flush: bool,
}

fn worker(
    index: usize,
    workers: usize,
    cpu: Option<u32>,
    ep: &Epoll,
    mode: &EpollMode,
    shared: &Shared,
) -> WorkerOutput {
    let mut out = WorkerOutput {
        stats: WorkerStats {
            worker: index,
            cpu,
            ..WorkerStats::default()
        },
        counters: Counters::default(),
        service: LatencyRecorder::new(),
        error: None,
    };
    if let Some(c) = cpu {
        if let Err(e) = netns::pin(0, &[c]) {
            out.error = Some(format!("worker {index}: pinning to CPU {c}: {e}"));
        }
    }
    let (wall0, cpu0, delay0) = (
        netns::mono_ns(),
        netns::thread_cpu_ns(),
        super::thread_run_delay_ns(),
    );
    let mut conns: HashMap<RawFd, Conn> = HashMap::new();
    let mut napi_ids: Vec<u32> = Vec::new();
    let mut events = [libc::epoll_event { events: 0, u64: 0 }; MAX_EVENTS];
    let mut chunk = vec![0u8; READ_CHUNK];
    if !mode.blocking {
        // The busy-wait loop's 1 ns epoll timeout (below) would otherwise sleep for the
        // default 50 us timer slack after each empty busy-poll round.
        // SAFETY: PR_SET_TIMERSLACK takes an integer and changes only this thread.
        unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong) };
    }
    let mut ep_stats = EpollStats::default();
    'serve: while !shared.stop.load(Ordering::Relaxed) {
        let stall = shared.stall_until_ns.load(Ordering::Relaxed);
        let now = netns::mono_ns();
        if stall > now {
            std::thread::sleep(Duration::from_nanos(stall - now));
        }
        // Busy-wait never blocks, but its epoll_wait must not use timeout 0: since
        // Linux 5.11 a zero timeout returns before the kernel's busy-poll loop
        // (docs/kernel.md), so the NAPI instance would be left to the deferral timer.
        // A 1 ns timeout busy-polls up to busy_poll_usecs, then returns at once.
        let waited = if mode.blocking {
            ep.wait(&mut events, BLOCKING_TIMEOUT_MS)
        } else {
            ep.wait_ns(&mut events, 1)
        };
        let n = match waited {
            Ok(n) => n,
            Err(e) => {
                out.error = Some(format!("worker {index}: epoll_wait: {e}"));
                break;
            }
        };
        ep_stats.waits += 1;
        if !mode.blocking {
            ep_stats.busy_loop_iterations += 1;
        }
        if n == 0 {
            ep_stats.empty_returns += 1;
            continue;
        }
        ep_stats.returns_with_events += 1;
        ep_stats.events += n as u64;
        for ev in &events[..n] {
            if ev.u64 == STOP_TOKEN {
                break 'serve;
            }
            let fd = ev.u64 as RawFd;
            let conn = conns.entry(fd).or_insert_with(|| {
                out.stats.connections += 1;
                Conn {
                    // SAFETY: the acceptor handed this fd's ownership to our epoll;
                    // it is closed only here, when the Conn is dropped.
                    fd: unsafe { OwnedFd::from_raw_fd(fd) },
                    rbuf: Vec::new(),
                    wbuf: Vec::new(),
                    interest: (libc::EPOLLIN | libc::EPOLLRDHUP) as u32,
                    napi_checked: false,
                    close_after_flush: false,
                }
            });
            let keep = serve(conn, ev.events, &mut chunk, shared, &mut out);
            if !conn.napi_checked {
                conn.napi_checked = true;
                let id = epoll::incoming_napi_id(conn.fd.as_raw_fd());
                if id != 0 {
                    if !napi_ids.contains(&id) {
                        napi_ids.push(id);
                    }
                    let owner = shared
                        .napi_owner
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .get(&id)
                        .copied();
                    if owner.is_some_and(|o| o != index) || (owner.is_none() && workers > 1) {
                        out.stats.connections_off_napi += 1;
                    }
                }
            }
            let keep = keep && update_interest(ep, conn);
            if !keep {
                let _ = ep.delete(fd);
                conns.remove(&fd);
            }
        }
    }
    let wall = netns::mono_ns().saturating_sub(wall0).max(1);
    let cpu = netns::thread_cpu_ns().saturating_sub(cpu0);
    out.stats.cpu_busy = cpu as f64 / wall as f64;
    out.stats.busy_when_scheduled = match (delay0, super::thread_run_delay_ns()) {
        (Some(d0), Some(d1)) => {
            Some(cpu as f64 / wall.saturating_sub(d1.saturating_sub(d0)).max(1) as f64)
        }
        _ => None,
    };
    out.stats.epoll = ep_stats;
    out.stats.requests = out.counters.requests;
    napi_ids.sort_unstable();
    out.stats.napi_ids = napi_ids;
    out
}

/// Registers for EPOLLOUT while replies wait to be sent. False: the connection broke.
/// A connection being closed after an error reply stops reading (its unread input
/// would keep a level-triggered EPOLLIN firing) and only waits to send.
fn update_interest(ep: &Epoll, conn: &mut Conn) -> bool {
    let mut ev = if conn.close_after_flush {
        0
    } else {
        (libc::EPOLLIN | libc::EPOLLRDHUP) as u32
    };
    if !conn.wbuf.is_empty() {
        ev |= libc::EPOLLOUT as u32;
    }
    if ev == conn.interest {
        return true;
    }
    conn.interest = ev;
    let fd = conn.fd.as_raw_fd();
    ep.modify(fd, ev, fd as u64).is_ok()
}

/// Reads what arrived, answers every whole request, sends. False: close it.
fn serve(
    conn: &mut Conn,
    events: u32,
    chunk: &mut [u8],
    shared: &Shared,
    out: &mut WorkerOutput,
) -> bool {
    let fd = conn.fd.as_raw_fd();
    let mut eof = events & (libc::EPOLLHUP | libc::EPOLLERR) as u32 != 0;
    if events & (libc::EPOLLIN | libc::EPOLLRDHUP) as u32 != 0 && !conn.close_after_flush {
        // Bounded: a peer sending faster than we read gets served in later rounds.
        for _ in 0..16 {
            // SAFETY: chunk is writable for its length.
            let n = unsafe { libc::recv(fd, chunk.as_mut_ptr().cast(), chunk.len(), 0) };
            if n > 0 {
                conn.rbuf.extend_from_slice(&chunk[..n as usize]);
                if (n as usize) < chunk.len() {
                    break;
                }
            } else if n == 0 {
                eof = true;
                break;
            } else {
                let e = io::Error::last_os_error();
                match e.kind() {
                    io::ErrorKind::WouldBlock => break,
                    io::ErrorKind::Interrupted => continue,
                    _ => return false,
                }
            }
        }
        let read_at = netns::mono_ns();
        let mut at = 0;
        let mut answered = 0usize;
        loop {
            match protocol::parse_request(&conn.rbuf[at..]) {
                Ok(Some((req, used))) => {
                    execute(&req, &mut conn.wbuf, shared, &mut out.counters);
                    at += used;
                    answered += 1;
                }
                Ok(None) => break,
                Err(e) => {
                    out.counters.protocol_errors += 1;
                    match e {
                        ProtocolError::UnknownCommand(_) => {
                            conn.wbuf.extend_from_slice(b"ERROR\r\n")
                        }
                        other => conn
                            .wbuf
                            .extend_from_slice(format!("CLIENT_ERROR {other}\r\n").as_bytes()),
                    }
                    conn.close_after_flush = true;
                    at = conn.rbuf.len();
                    break;
                }
            }
        }
        conn.rbuf.drain(..at);
        if !flush(conn) {
            return false;
        }
        let done = netns::mono_ns().saturating_sub(read_at);
        for _ in 0..answered {
            out.service.record_ns(done);
        }
    } else if events & libc::EPOLLOUT as u32 != 0 && !flush(conn) {
        return false;
    }
    !(eof || conn.close_after_flush && conn.wbuf.is_empty())
}

fn execute(req: &Request<'_>, w: &mut Vec<u8>, shared: &Shared, c: &mut Counters) {
    c.requests += 1;
    match req {
        Request::Get { keys } => {
            for k in keys.iter() {
                c.gets += 1;
                let shard = shared.store.shard(k);
                if let Some(item) = shard.get(k) {
                    c.get_hits += 1;
                    protocol::write_value(w, k, item.flags, &item.data);
                }
            }
            w.extend_from_slice(b"END\r\n");
        }
        Request::Set {
            key,
            flags,
            data,
            noreply,
            ..
        } => {
            c.sets += 1;
            shared.store.shard(key).insert(
                Box::from(*key),
                Item {
                    flags: *flags,
                    data: Box::from(*data),
                },
            );
            if !noreply {
                w.extend_from_slice(b"STORED\r\n");
            }
        }
        Request::Delete { key, noreply } => {
            c.deletes += 1;
            let found = shared.store.shard(key).remove(*key).is_some();
            if !noreply {
                w.extend_from_slice(if found {
                    b"DELETED\r\n"
                } else {
                    b"NOT_FOUND\r\n"
                });
            }
        }
    }
}

/// Sends what it can of the write buffer. False: the connection broke.
fn flush(conn: &mut Conn) -> bool {
    epoll::send_pending(conn.fd.as_raw_fd(), &mut conn.wbuf).is_ok()
}
