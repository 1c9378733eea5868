//! The load generator, mutilate-style: connections spread over generator threads, each
//! thread with its own epoll instance and non-blocking sockets.
//!
//! - **Open loop**: each thread draws Poisson inter-arrival times for its share of the
//!   target QPS and sends each request at its *intended* time on the next connection
//!   (round-robin), whatever is outstanding; latency runs from the intended time, so a
//!   stalled server or a late generator shows in the tail instead of being hidden
//!   (no coordinated omission). A send later than [`LATE_NS`] counts as late. The
//!   thread sleeps in epoll until [`SPIN_AHEAD_NS`] before its next send, then polls
//!   without sleeping: on a VM whose idle vCPUs halt, a sleeping thread's timer
//!   wake-up waits for the hypervisor (tens of microseconds, a tail of milliseconds),
//!   which would make the generator late, not the server slow.
//! - **Closed loop**: each connection keeps one request outstanding; latency runs from
//!   the send.
//!
//! Requests are `get` (a `get_fraction` of them) or `set` of a key drawn uniformly from
//! the [`Keyspace`], with its fixed-size value. The study's ETC workload (docs/studies.md IRQS-1)
//! has a 30:1 get:set ratio, which is the default; its key- and value-size
//! distributions are not reproduced (fixed sizes: docs/lab.md).
//!
//! The generator says when it, not the server, is the limit: late sends, intended
//! sends left undone at the end, or a thread over 90% busy (see [`GeneratorHealth`]).

use std::collections::VecDeque;
use std::io;
use std::net::{SocketAddrV4, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::epoll::{send_pending, Epoll};
use super::keyspace::Keyspace;
use super::protocol::{self, Response};
use super::results::{GeneratorHealth, LatencyRecorder, LoadResult, LoopKind};
use crate::netns;

/// A send later than this after its intended time counts as late (as the paced
/// packet generator counts its departures).
pub const LATE_NS: u64 = 100_000;
/// How long before its next intended send an open-loop thread stops sleeping and polls
/// its connections without blocking. A woken vCPU on the project's KVM VM waits a
/// median 35-75 us, 0.4-0.5 ms at p99 and milliseconds in its tail (docs/kernel.md,
/// "Idle vCPUs and wake-ups"). With 300 us ahead, `make bench-server-modes` still had
/// a median 1.45% of the sends late at up to 5,000 requests/s (10.35% sleeping until
/// each send), and none at 13,000 where the polling covered nearly every gap. 2 ms
/// covers the gaps of every rate from 500 requests/s a thread, so the generator's vCPU
/// does not halt while it keeps a schedule: side by side at 2,000 requests/s (the kv
/// test, debug build, 2026-11-28), 51-119 of 2,995 sends late with 2 ms, 99-670 with
/// 300 us, 564-1,302 sleeping until each send. The generator's CPU is its own; the
/// polling is not counted as the thread's work (its busy share).
pub const SPIN_AHEAD_NS: u64 = 2_000_000;
/// The study's ETC get:set ratio, 30:1.
pub const ETC_GET_FRACTION: f64 = 30.0 / 31.0;
/// A generator thread busier than this may be the limit.
const BUSY_LIMIT: f64 = 0.9;
/// Above this share of its time waiting for a CPU, a late generator says why.
const WAIT_NOTE: f64 = 0.05;
/// Above this share of its time waiting for a CPU, a closed-loop generator is the limit.
const CLOSED_WAIT_LIMIT: f64 = 0.2;
/// Most requests one thread sends per round before it reads replies.
const SEND_BURST: usize = 256;
const READ_CHUNK: usize = 64 * 1024;

#[derive(Clone, Debug)]
pub struct LoadConfig {
    pub server: SocketAddrV4,
    /// Namespace the client runs in (None: the caller's).
    pub netns: Option<String>,
    /// Generator thread i runs on `cpus[i % cpus.len()]`; empty: unpinned.
    pub cpus: Vec<u32>,
    pub threads: usize,
    /// Connections in total, spread over the threads.
    pub connections: usize,
    pub kind: LoopKind,
    pub warmup: Duration,
    pub duration: Duration,
    pub get_fraction: f64,
    pub keyspace: Keyspace,
    /// How long after the window replies are still awaited; later ones are timeouts.
    pub timeout: Duration,
    pub seed: u64,
}

impl LoadConfig {
    /// Checks the numbers a user gives; the error names the field.
    pub fn validate(&self) -> Result<(), String> {
        if self.threads == 0 {
            return Err("threads: need at least 1".into());
        }
        if self.connections < self.threads {
            return Err(format!(
                "connections: {} is fewer than the {} threads (each thread needs one)",
                self.connections, self.threads
            ));
        }
        if !(0.0..=1.0).contains(&self.get_fraction) {
            return Err(format!(
                "get fraction {} is not between 0 and 1",
                self.get_fraction
            ));
        }
        if self.keyspace.keys == 0 {
            return Err("keys: need at least 1".into());
        }
        if self.keyspace.value_size > protocol::MAX_VALUE_LEN {
            return Err(format!(
                "value size above {} bytes",
                protocol::MAX_VALUE_LEN
            ));
        }
        if self.duration.is_zero() {
            return Err("duration: must be above 0".into());
        }
        if let LoopKind::Open { qps } = self.kind {
            if !(qps.is_finite() && qps > 0.0) {
                return Err(format!("qps: {qps} is not a positive rate"));
            }
        }
        Ok(())
    }
}

/// xorshift64*: the generator needs a fast, seedable uniform source for Poisson gaps
/// and key draws, nothing cryptographic; a dependency for ten lines is not worth it.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }
    fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    /// Uniform in (0, 1).
    fn next_f64(&mut self) -> f64 {
        ((self.next_u64() >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }
    /// An exponential gap of mean `mean_ns`.
    fn exp_ns(&mut self, mean_ns: f64) -> u64 {
        (-self.next_f64().ln() * mean_ns) as u64
    }
}

#[derive(Clone, Copy)]
enum Kind {
    Get,
    Set,
}

struct Pending {
    /// Intended send time (open loop) or the send (closed loop).
    start_ns: u64,
    measured: bool,
    kind: Kind,
}

struct Conn {
    stream: TcpStream,
    out: Vec<u8>,
    inbuf: Vec<u8>,
    pending: VecDeque<Pending>,
    broken: bool,
}

#[derive(Default)]
struct ThreadResult {
    latency: LatencyRecorder,
    sent: u64,
    replies: u64,
    hits: u64,
    misses: u64,
    errors: u64,
    timeouts: u64,
    late: u64,
    max_late_ns: u64,
    behind: u64,
    cpu_busy: f64,
    /// Time spent polling without sleeping that found nothing to read (SPIN_AHEAD_NS).
    idle_spin_ns: u64,
    /// The thread's wall time, ns.
    wall_ns: u64,
    waited: Option<f64>,
    gaps: u64,
    gap_sum: f64,
    gap_sq: f64,
}

/// Runs the load and returns what it measured; `stop` (Ctrl-C) ends it early.
pub fn run(cfg: &LoadConfig, stop: &AtomicBool) -> Result<LoadResult, String> {
    cfg.validate()?;
    let stop_ref = stop;
    let results: Vec<Result<ThreadResult, String>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..cfg.threads)
            .map(|t| {
                let conns =
                    cfg.connections / cfg.threads + usize::from(t < cfg.connections % cfg.threads);
                s.spawn(move || thread_main(cfg, t, conns, stop_ref))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err("a generator thread panicked".into()))
            })
            .collect()
    });
    let mut all = ThreadResult::default();
    let mut busiest: f64 = 0.0;
    let mut idle_polling: f64 = 0.0;
    let mut waited: Option<f64> = None;
    for r in results {
        let r = r?;
        all.latency.merge(&r.latency);
        all.sent += r.sent;
        all.replies += r.replies;
        all.hits += r.hits;
        all.misses += r.misses;
        all.errors += r.errors;
        all.timeouts += r.timeouts;
        all.late += r.late;
        all.max_late_ns = all.max_late_ns.max(r.max_late_ns);
        all.behind += r.behind;
        all.gaps += r.gaps;
        all.gap_sum += r.gap_sum;
        all.gap_sq += r.gap_sq;
        busiest = busiest.max(r.cpu_busy);
        idle_polling = idle_polling.max(r.idle_spin_ns as f64 / r.wall_ns.max(1) as f64);
        if let Some(w) = r.waited {
            waited = Some(waited.map_or(w, |x: f64| x.max(w)));
        }
    }
    let window_s = cfg.duration.as_secs_f64();
    let mut reasons = Vec::new();
    if all.late * 100 > all.sent.max(1) {
        reasons.push(format!(
            "{} of {} requests ({:.1}%) left more than {} us after their intended time",
            all.late,
            all.sent,
            all.late as f64 * 100.0 / all.sent.max(1) as f64,
            LATE_NS / 1000
        ));
    }
    if all.behind * 100 > (all.sent + all.behind).max(1) {
        reasons.push(format!(
            "{} intended requests were never sent in the window",
            all.behind
        ));
    }
    if !reasons.is_empty() {
        if let Some(w) = waited.filter(|w| *w > WAIT_NOTE) {
            reasons.push(format!(
                "a generator thread waited for its CPU {:.0}% of the time (other tasks run there: the late sends are the machine's load, not the generator's work)",
                w * 100.0
            ));
        }
    }
    // A closed loop is never late, but a generator kept off its CPU sends its next
    // request late all the same: its rate is then the machine's, not the server's.
    if matches!(cfg.kind, LoopKind::Closed) {
        if let Some(w) = waited.filter(|w| *w > CLOSED_WAIT_LIMIT) {
            reasons.push(format!(
                "a generator thread waited for its CPU {:.0}% of the time (other tasks run there): the closed loop's rate is the machine's load",
                w * 100.0
            ));
        }
    }
    if busiest > BUSY_LIMIT {
        reasons.push(format!(
            "a generator thread was {:.0}% busy (add --threads or CPUs)",
            busiest * 100.0
        ));
    }
    let interarrival_cv = (all.gaps > 1).then(|| {
        let n = all.gaps as f64;
        let mean = all.gap_sum / n;
        let var = (all.gap_sq / n - mean * mean).max(0.0);
        var.sqrt() / mean
    });
    Ok(LoadResult {
        schema: "napilab.kv-load/1".into(),
        server: cfg.server.to_string(),
        kind: cfg.kind.clone(),
        connections: cfg.connections,
        threads: cfg.threads,
        get_fraction: cfg.get_fraction,
        value_size: cfg.keyspace.value_size,
        window_s,
        offered_qps: all.sent as f64 / window_s,
        achieved_qps: all.replies as f64 / window_s,
        sent: all.sent,
        replies: all.replies,
        get_hits: all.hits,
        get_misses: all.misses,
        errors: all.errors,
        timeouts: all.timeouts,
        latency: all.latency.percentiles(),
        interarrival_cv: matches!(cfg.kind, LoopKind::Open { .. })
            .then_some(interarrival_cv)
            .flatten(),
        generator: GeneratorHealth {
            cpu_busy: busiest,
            idle_polling,
            waited_for_cpu: waited,
            late_sends: all.late,
            max_lateness_us: all.max_late_ns as f64 / 1000.0,
            behind_at_end: all.behind,
            limited: !reasons.is_empty(),
            reasons,
        },
    })
}

fn connect(cfg: &LoadConfig, n: usize) -> Result<Vec<Conn>, String> {
    (0..n)
        .map(|i| {
            let s = TcpStream::connect_timeout(&cfg.server.into(), Duration::from_secs(3))
                .map_err(|e| {
                    format!(
                        "connection {i} to {}: {e} (is the server running?)",
                        cfg.server
                    )
                })?;
            s.set_nodelay(true)
                .map_err(|e| format!("TCP_NODELAY: {e}"))?;
            s.set_nonblocking(true)
                .map_err(|e| format!("O_NONBLOCK: {e}"))?;
            Ok(Conn {
                stream: s,
                out: Vec::new(),
                inbuf: Vec::new(),
                pending: VecDeque::new(),
                broken: false,
            })
        })
        .collect()
}

fn thread_main(
    cfg: &LoadConfig,
    index: usize,
    nconns: usize,
    stop: &AtomicBool,
) -> Result<ThreadResult, String> {
    netns::enter_if(cfg.netns.as_deref())?;
    if !cfg.cpus.is_empty() {
        let c = cfg.cpus[index % cfg.cpus.len()];
        netns::pin(0, &[c])
            .map_err(|e| format!("pinning generator thread {index} to CPU {c}: {e}"))?;
    }
    // The default 50 us timer slack would make every timed wake-up late.
    // SAFETY: prctl on the calling thread only.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong) };
    let conns = connect(cfg, nconns)?;
    let ep = Epoll::new().map_err(|e| format!("epoll_create1: {e}"))?;
    for (i, c) in conns.iter().enumerate() {
        ep.add(c.stream.as_raw_fd(), libc::EPOLLIN as u32, i as u64)
            .map_err(|e| format!("epoll_ctl: {e}"))?;
    }
    let (wall0, cpu0, delay0) = (
        netns::mono_ns(),
        netns::thread_cpu_ns(),
        super::thread_run_delay_ns(),
    );
    let window_start = wall0 + cfg.warmup.as_nanos() as u64;
    let mut worker = Worker {
        cfg,
        nconns,
        conns,
        ep,
        rng: Rng::new(cfg.seed ^ ((index as u64 + 1) << 32)),
        res: ThreadResult::default(),
        events: vec![libc::epoll_event { events: 0, u64: 0 }; nconns.clamp(1, 256)],
        chunk: vec![0u8; READ_CHUNK],
        values: cfg.keyspace.value(0),
        window_start,
        window_end: window_start + cfg.duration.as_nanos() as u64,
    };
    match cfg.kind {
        LoopKind::Open { qps } => worker.open_loop(qps, wall0, stop)?,
        LoopKind::Closed => worker.closed_loop(stop)?,
    }
    worker.drain(stop)?;
    let Worker { conns, mut res, .. } = worker;
    for c in &conns {
        res.timeouts += c.pending.iter().filter(|p| p.measured).count() as u64;
    }
    let wall = netns::mono_ns().saturating_sub(wall0).max(1);
    // The idle polling before sends is waiting, not work: left out of the busy share.
    let cpu = netns::thread_cpu_ns().saturating_sub(cpu0);
    res.cpu_busy = cpu.saturating_sub(res.idle_spin_ns) as f64 / wall as f64;
    res.wall_ns = wall;
    res.waited = delay0
        .zip(super::thread_run_delay_ns())
        .map(|(d0, d1)| d1.saturating_sub(d0) as f64 / wall as f64);
    Ok(res)
}

/// One generator thread's connections, buffers and tallies, from its set-up to its
/// result; its loops are methods so that each reads on its own.
struct Worker<'a> {
    cfg: &'a LoadConfig,
    nconns: usize,
    conns: Vec<Conn>,
    ep: Epoll,
    rng: Rng,
    res: ThreadResult,
    events: Vec<libc::epoll_event>,
    chunk: Vec<u8>,
    /// The value every set sends.
    values: Vec<u8>,
    /// The measured window, monotonic ns.
    window_start: u64,
    window_end: u64,
}

/// Writes one request (a get or a set of a random key) to `c` and remembers it as
/// pending.
fn build(
    cfg: &LoadConfig,
    values: &[u8],
    c: &mut Conn,
    rng: &mut Rng,
    start_ns: u64,
    measured: bool,
) {
    let key = cfg.keyspace.key(rng.next_u64() % cfg.keyspace.keys);
    let kind = if rng.next_f64() < cfg.get_fraction {
        protocol::write_get(&mut c.out, &key);
        Kind::Get
    } else {
        protocol::write_set(&mut c.out, &key, values);
        Kind::Set
    };
    c.pending.push_back(Pending {
        start_ns,
        measured,
        kind,
    });
}

impl Worker<'_> {
    /// Waits up to `wait_ns` for replies and reads those that came; how many
    /// connections had something to read.
    fn read_ready(&mut self, wait_ns: u64) -> Result<usize, String> {
        let n = self
            .ep
            .wait_ns(&mut self.events, wait_ns)
            .map_err(|e| format!("epoll_pwait2: {e}"))?;
        for ev in &self.events[..n] {
            if let Some(c) = self.conns.get_mut(ev.u64 as usize) {
                read_replies(c, &mut self.chunk, &mut self.res, |_, _| {});
            }
        }
        Ok(n)
    }

    fn flush_all(&mut self) {
        for c in self.conns.iter_mut() {
            flush(c, &mut self.res);
        }
    }

    /// Open loop: requests at exponential gaps of the thread's share of `qps`,
    /// whatever the replies do.
    fn open_loop(&mut self, qps: f64, wall0: u64, stop: &AtomicBool) -> Result<(), String> {
        let (window_start, window_end, nconns) = (self.window_start, self.window_end, self.nconns);
        let mean_gap = 1e9 * self.cfg.threads as f64 / qps;
        let mut next = wall0 + self.rng.exp_ns(mean_gap);
        let mut rr = 0usize;
        while !stop.load(Ordering::Relaxed) {
            let now = netns::mono_ns();
            // Sends after the window would count toward a rate the generator did
            // not keep; what is left is `behind_at_end`.
            if next >= window_end || now >= window_end {
                break;
            }
            let mut burst = 0;
            let res = &mut self.res;
            while next <= now && burst < SEND_BURST && next < window_end {
                let measured = next >= window_start;
                let c = &mut self.conns[rr % nconns];
                rr += 1;
                if c.broken {
                    // No connection to send on: the request is lost.
                    res.errors += u64::from(measured);
                }
                if !c.broken {
                    build(self.cfg, &self.values, c, &mut self.rng, next, measured);
                }
                if measured && !c.broken {
                    res.sent += 1;
                    let late = now - next;
                    res.max_late_ns = res.max_late_ns.max(late);
                    if late > LATE_NS {
                        res.late += 1;
                    }
                }
                let gap = self.rng.exp_ns(mean_gap);
                if measured {
                    res.gaps += 1;
                    res.gap_sum += gap as f64;
                    res.gap_sq += (gap as f64) * (gap as f64);
                }
                next += gap;
                burst += 1;
            }
            self.flush_all();
            let after_flush = netns::mono_ns();
            let wait = next.saturating_sub(after_flush);
            if wait > SPIN_AHEAD_NS {
                self.read_ready(wait - SPIN_AHEAD_NS)?;
            } else if self.read_ready(0)? == 0 && burst == 0 {
                // A round that sent and read nothing: the whole round was waiting.
                self.res.idle_spin_ns += netns::mono_ns().saturating_sub(now);
            }
        }
        // Intended sends of the window the generator never reached.
        let end = window_end.min(netns::mono_ns());
        while next < end && self.res.behind < u64::MAX {
            self.res.behind += 1;
            next += self.rng.exp_ns(mean_gap).max(1);
        }
        Ok(())
    }

    /// Closed loop: one request outstanding per connection, the next sent when its
    /// reply arrives.
    fn closed_loop(&mut self, stop: &AtomicBool) -> Result<(), String> {
        let (window_start, window_end) = (self.window_start, self.window_end);
        for c in self.conns.iter_mut() {
            let now = netns::mono_ns();
            build(
                self.cfg,
                &self.values,
                c,
                &mut self.rng,
                now,
                now >= window_start,
            );
            flush(c, &mut self.res);
        }
        while !stop.load(Ordering::Relaxed) && netns::mono_ns() < window_end {
            let n = self
                .ep
                .wait_ns(&mut self.events, 10_000_000)
                .map_err(|e| format!("epoll_pwait2: {e}"))?;
            for ev in &self.events[..n] {
                let Some(c) = self.conns.get_mut(ev.u64 as usize) else {
                    continue;
                };
                let mut answered = 0;
                read_replies(c, &mut self.chunk, &mut self.res, |_, _| answered += 1);
                let now = netns::mono_ns();
                if answered > 0 && now < window_end && !c.broken {
                    let measured = now >= window_start;
                    build(self.cfg, &self.values, c, &mut self.rng, now, measured);
                    if measured {
                        self.res.sent += 1;
                    }
                    flush(c, &mut self.res);
                }
            }
        }
        Ok(())
    }

    /// Drain: waits up to the timeout for the window's outstanding replies.
    fn drain(&mut self, stop: &AtomicBool) -> Result<(), String> {
        let drain_end = netns::mono_ns() + self.cfg.timeout.as_nanos() as u64;
        while self
            .conns
            .iter()
            .any(|c| !c.broken && !c.pending.is_empty())
            && !stop.load(Ordering::Relaxed)
        {
            let now = netns::mono_ns();
            if now >= drain_end {
                break;
            }
            self.flush_all();
            self.read_ready((drain_end - now).min(10_000_000))?;
        }
        Ok(())
    }
}

fn flush(c: &mut Conn, res: &mut ThreadResult) {
    if c.broken || c.out.is_empty() {
        return;
    }
    if send_pending(c.stream.as_raw_fd(), &mut c.out).is_err() {
        break_conn(c, res);
    }
}

/// A broken connection loses its outstanding requests: each counts as an error.
fn break_conn(c: &mut Conn, res: &mut ThreadResult) {
    c.broken = true;
    res.errors += c.pending.iter().filter(|p| p.measured).count() as u64;
    c.pending.clear();
    c.out.clear();
}

fn read_replies(
    c: &mut Conn,
    chunk: &mut [u8],
    res: &mut ThreadResult,
    mut on_reply: impl FnMut(Kind, bool),
) {
    if c.broken {
        return;
    }
    let fd = c.stream.as_raw_fd();
    for _ in 0..16 {
        // SAFETY: chunk is writable for its length.
        let n = unsafe { libc::recv(fd, chunk.as_mut_ptr().cast(), chunk.len(), 0) };
        if n > 0 {
            c.inbuf.extend_from_slice(&chunk[..n as usize]);
            if (n as usize) < chunk.len() {
                break;
            }
            continue;
        }
        if n == 0 {
            break_conn(c, res);
            return;
        }
        let e = io::Error::last_os_error();
        match e.kind() {
            io::ErrorKind::WouldBlock => break,
            io::ErrorKind::Interrupted => continue,
            _ => {
                break_conn(c, res);
                return;
            }
        }
    }
    let now = netns::mono_ns();
    let mut at = 0;
    loop {
        match protocol::parse_response(&c.inbuf[at..]) {
            Ok(Some((resp, used))) => {
                at += used;
                let Some(p) = c.pending.pop_front() else {
                    // A reply nobody asked for: the stream is out of step.
                    res.errors += 1;
                    break_conn(c, res);
                    return;
                };
                let ok = match (&resp, p.kind) {
                    (Response::Values { count, .. }, Kind::Get) => {
                        if p.measured {
                            if *count > 0 {
                                res.hits += 1;
                            } else {
                                res.misses += 1;
                            }
                        }
                        true
                    }
                    (Response::Stored, Kind::Set) => true,
                    _ => false,
                };
                if p.measured {
                    res.replies += 1;
                    res.latency.record_ns(now.saturating_sub(p.start_ns));
                    if !ok {
                        res.errors += 1;
                    }
                }
                on_reply(p.kind, ok);
            }
            Ok(None) => break,
            Err(_) => {
                res.errors += 1;
                break_conn(c, res);
                return;
            }
        }
    }
    c.inbuf.drain(..at);
}

/// A blocking one-request-at-a-time client, for preloading and for checking answers.
pub struct Client {
    stream: TcpStream,
    buf: Vec<u8>,
}

/// What a `get` found.
pub type GetReply = Option<(u32, Vec<u8>)>;

impl Client {
    /// Connects from the calling thread's namespace.
    pub fn connect(addr: SocketAddrV4) -> io::Result<Client> {
        let stream = TcpStream::connect_timeout(&addr.into(), Duration::from_secs(3))?;
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(Duration::from_secs(3)))?;
        Ok(Client {
            stream,
            buf: Vec::new(),
        })
    }

    fn roundtrip<T>(&mut self, req: &[u8], f: impl FnOnce(Response<'_>) -> T) -> io::Result<T> {
        use std::io::{Read, Write};
        self.stream.write_all(req)?;
        let mut chunk = [0u8; 16 * 1024];
        // Bounded by the read timeout per read and by the reply size limit overall.
        loop {
            match protocol::parse_response(&self.buf) {
                Ok(Some((r, used))) => {
                    let out = f(r);
                    self.buf.drain(..used);
                    return Ok(out);
                }
                Ok(None) => {}
                Err(e) => return Err(io::Error::new(io::ErrorKind::InvalidData, e.to_string())),
            }
            if self.buf.len() > protocol::MAX_VALUE_LEN * 2 {
                return Err(io::Error::new(io::ErrorKind::InvalidData, "reply too long"));
            }
            let n = self.stream.read(&mut chunk)?;
            if n == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "server closed the connection",
                ));
            }
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }

    pub fn get(&mut self, key: &[u8]) -> io::Result<GetReply> {
        let mut req = Vec::new();
        protocol::write_get(&mut req, key);
        self.roundtrip(&req, |r| match r {
            Response::Values { first, .. } => Ok(first.map(|v| (v.flags, v.data.to_vec()))),
            other => Err(format!("get: unexpected reply {other:?}")),
        })?
        .map_err(io::Error::other)
    }

    /// True when the server answered STORED.
    pub fn set(&mut self, key: &[u8], data: &[u8]) -> io::Result<bool> {
        let mut req = Vec::new();
        protocol::write_set(&mut req, key, data);
        self.roundtrip(&req, |r| r == Response::Stored)
    }

    /// True when the key existed (DELETED), false for NOT_FOUND.
    pub fn delete(&mut self, key: &[u8]) -> io::Result<bool> {
        let mut req = Vec::new();
        protocol::write_delete(&mut req, key);
        self.roundtrip(&req, |r| match r {
            Response::Deleted => Ok(true),
            Response::NotFound => Ok(false),
            other => Err(format!("delete: unexpected reply {other:?}")),
        })?
        .map_err(io::Error::other)
    }

    /// Sends raw bytes and returns the first whole reply's text (tests of bad input).
    pub fn raw(&mut self, req: &[u8]) -> io::Result<String> {
        use std::io::{Read, Write};
        self.stream.write_all(req)?;
        let mut chunk = [0u8; 4096];
        let n = self.stream.read(&mut chunk)?;
        Ok(String::from_utf8_lossy(&chunk[..n]).into_owned())
    }
}

/// Stores every key of `ks` with its value (memcached starts empty), pipelining
/// `noreply` sets and checking the last with a `get`.
pub fn preload(addr: SocketAddrV4, ks: &Keyspace, stop: &Arc<AtomicBool>) -> Result<(), String> {
    use std::io::Write;
    let mut c = Client::connect(addr).map_err(|e| format!("preload: connecting to {addr}: {e}"))?;
    let mut batch = Vec::new();
    for i in 0..ks.keys {
        if stop.load(Ordering::Relaxed) {
            return Err("preload interrupted".into());
        }
        let k = ks.key(i);
        let v = ks.value(i);
        batch.extend_from_slice(b"set ");
        batch.extend_from_slice(&k);
        batch.extend_from_slice(format!(" 0 0 {} noreply\r\n", v.len()).as_bytes());
        batch.extend_from_slice(&v);
        batch.extend_from_slice(b"\r\n");
        if batch.len() > 64 * 1024 || i + 1 == ks.keys {
            c.stream
                .write_all(&batch)
                .map_err(|e| format!("preload: sending to {addr}: {e}"))?;
            batch.clear();
        }
    }
    let last = ks.keys.saturating_sub(1);
    match c.get(&ks.key(last)) {
        Ok(Some((_, v))) if v == ks.value(last) => Ok(()),
        Ok(other) => Err(format!("preload: key {last} reads back as {other:?}")),
        Err(e) => Err(format!("preload: checking key {last}: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exponential_gaps_have_the_right_mean_and_cv() {
        let mut r = Rng::new(7);
        let n = 200_000;
        let (mut s, mut sq) = (0.0, 0.0);
        for _ in 0..n {
            let g = r.exp_ns(10_000.0) as f64;
            s += g;
            sq += g * g;
        }
        let mean = s / n as f64;
        let cv = (sq / n as f64 - mean * mean).sqrt() / mean;
        assert!((mean / 10_000.0 - 1.0).abs() < 0.01, "mean {mean}");
        assert!((cv - 1.0).abs() < 0.02, "cv {cv}");
    }

    #[test]
    fn bad_configurations_name_the_field() {
        let ok = LoadConfig {
            server: "10.0.0.1:11211".parse().expect("addr"),
            netns: None,
            cpus: vec![],
            threads: 1,
            connections: 4,
            kind: LoopKind::Open { qps: 1000.0 },
            warmup: Duration::ZERO,
            duration: Duration::from_secs(1),
            get_fraction: ETC_GET_FRACTION,
            keyspace: Keyspace::default(),
            timeout: Duration::from_secs(1),
            seed: 1,
        };
        assert!(ok.validate().is_ok());
        let e = |f: fn(&mut LoadConfig)| {
            let mut c = ok.clone();
            f(&mut c);
            c.validate().expect_err("invalid")
        };
        assert!(e(|c| c.kind = LoopKind::Open { qps: -1.0 }).contains("qps"));
        assert!(e(|c| c.connections = 0).contains("connections"));
        assert!(e(|c| c.get_fraction = 1.5).contains("get fraction"));
        assert!(e(|c| c.threads = 0).contains("threads"));
    }
}
