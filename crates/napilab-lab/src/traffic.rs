//! The paced UDP back end: a generator and a sink, each a thread that entered its
//! namespace (`setns` affects only the calling thread) and pinned itself to its CPUs.
//!
//! Every packet carries a header: magic, point id, per-class sequence number, the
//! departure time (CLOCK_MONOTONIC, one clock for all namespaces), class index and a
//! flag saying whether it departed inside the measurement window. The sink counts only
//! packets of the current point that departed in the window, so warm-up and late
//! stragglers never mix into a point.

use std::io;
use std::net::Ipv4Addr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use napilab_core::scenario::Pattern;
use napilab_core::EngineStats;

use crate::histogram::Histogram;
use crate::netns::{enter, mono_ns, pin, thread_cpu_ns};

const MAGIC: u32 = 0x4e4c_4142; // "NLAB"
const HEADER: usize = 28;
const FLAG_MEASURED: u16 = 1;
/// Largest batch handed to sendmmsg / taken from recvmmsg.
const BATCH: usize = 64;
/// A departure later than this after its scheduled time counts as late.
pub const LATE_NS: u64 = 100_000;
/// IP + UDP header bytes: a class's `size` is the IP packet size.
const IP_UDP: u32 = 28;

#[derive(Clone, Debug)]
pub struct ClassSpec {
    /// The class's index in the scenario (carried in every packet).
    pub id: u16,
    pub port: u16,
    /// IP packet size.
    pub size: u32,
    pub share: f64,
    pub pattern: Pattern,
}

#[derive(Clone, Debug)]
pub struct GenSpec {
    pub ns: String,
    pub dst: Ipv4Addr,
    pub classes: Vec<ClassSpec>,
    pub rate_pps: f64,
    pub warmup: Duration,
    pub duration: Duration,
    pub point: u32,
    pub cpus: Vec<u32>,
    pub seed: u64,
}

#[derive(Clone, Debug, Default)]
pub struct GenResult {
    /// Packets per class that departed in the measurement window.
    pub sent: Vec<u64>,
    pub sent_total: u64,
    /// Departures more than [`LATE_NS`] behind schedule (measurement window).
    pub late: u64,
    pub max_lateness_ns: u64,
    /// sendmmsg errors (packets not sent).
    pub send_errors: u64,
    /// Measurement window actually covered, seconds.
    pub window_s: f64,
    /// Thread CPU time / wall time over the whole run (warm-up included).
    pub cpu_busy: f64,
    pub interrupted: bool,
}

/// xorshift64*: a small deterministic generator for Poisson departures.
struct Rng(u64);

impl Rng {
    fn next_f64(&mut self) -> f64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        let x = self.0.wrapping_mul(0x2545_f491_4f6c_dd1d);
        ((x >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }
}

fn udp_socket() -> io::Result<OwnedFd> {
    // SAFETY: plain socket(2) call; the fd is owned below.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd is a fresh, valid descriptor we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn setsockopt_int(fd: &OwnedFd, level: i32, opt: i32, v: i32) -> io::Result<()> {
    // SAFETY: valid fd and a pointer to an int of the stated size.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            opt,
            (&v as *const i32).cast(),
            std::mem::size_of::<i32>() as u32,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn sockaddr(ip: Ipv4Addr, port: u16) -> libc::sockaddr_in {
    libc::sockaddr_in {
        sin_family: libc::AF_INET as u16,
        sin_port: port.to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from(ip).to_be(),
        },
        sin_zero: [0; 8],
    }
}

/// Starts the generator thread; join it for the result.
pub fn start_generator(spec: GenSpec, stop: Arc<AtomicBool>) -> JoinHandle<io::Result<GenResult>> {
    std::thread::spawn(move || {
        pin(0, &spec.cpus)?;
        enter(&spec.ns)?;
        generate(&spec, &stop)
    })
}

fn sleep_until(t_ns: u64) {
    let ts = libc::timespec {
        tv_sec: (t_ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (t_ns % 1_000_000_000) as libc::c_long,
    };
    // SAFETY: absolute sleep on CLOCK_MONOTONIC with a valid timespec.
    unsafe {
        libc::clock_nanosleep(
            libc::CLOCK_MONOTONIC,
            libc::TIMER_ABSTIME,
            &ts,
            std::ptr::null_mut(),
        )
    };
}

fn generate(spec: &GenSpec, stop: &AtomicBool) -> io::Result<GenResult> {
    // Precise sleeps: the default 50 us timer slack would add lateness.
    // SAFETY: prctl with an integer argument.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1u64, 0u64, 0u64, 0u64) };
    let sock = udp_socket()?;
    setsockopt_int(&sock, libc::SOL_SOCKET, libc::SO_SNDBUF, 4 << 20)?;
    let n = spec.classes.len();
    let mut rng = Rng(spec.seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    let mean_gap: Vec<f64> = spec
        .classes
        .iter()
        .map(|c| 1e9 / (spec.rate_pps * c.share).max(1e-9))
        .collect();
    let addrs: Vec<libc::sockaddr_in> = spec
        .classes
        .iter()
        .map(|c| sockaddr(spec.dst, c.port))
        .collect();
    let payload: Vec<usize> = spec
        .classes
        .iter()
        .map(|c| (c.size.saturating_sub(IP_UDP) as usize).max(HEADER))
        .collect();
    let max_payload = payload.iter().copied().max().unwrap_or(HEADER);
    let mut bufs = vec![vec![0u8; max_payload]; BATCH];
    let mut seq = vec![0u64; n];
    let mut res = GenResult {
        sent: vec![0; n],
        ..GenResult::default()
    };
    let start = mono_ns() + 5_000_000;
    let measure_from = start + spec.warmup.as_nanos() as u64;
    let end = measure_from + spec.duration.as_nanos() as u64;
    // Next departure per class (absolute ns); classes start staggered.
    let mut next: Vec<f64> = (0..n)
        .map(|i| start as f64 + mean_gap[i] * i as f64 / n as f64)
        .collect();
    let cpu0 = thread_cpu_ns();
    let wall0 = mono_ns();
    let mut batch_class = [0usize; BATCH];
    let mut batch_measured = [false; BATCH];
    let mut iter: u64 = 0;
    loop {
        iter += 1;
        if iter % 64 == 0 && stop.load(Ordering::Relaxed) {
            res.interrupted = true;
            break;
        }
        let now = mono_ns();
        if now >= end {
            break;
        }
        // Collect due departures, earliest first.
        let mut k = 0;
        while k < BATCH {
            let (c, t) =
                next.iter()
                    .enumerate()
                    .fold((0, f64::MAX), |a, (i, &t)| if t < a.1 { (i, t) } else { a });
            if t > now as f64 || t >= end as f64 {
                break;
            }
            let sched = t as u64;
            let measured = sched >= measure_from;
            if measured {
                let late = now.saturating_sub(sched);
                if late > LATE_NS {
                    res.late += 1;
                }
                res.max_lateness_ns = res.max_lateness_ns.max(late);
            }
            let gap = match spec.classes[c].pattern {
                Pattern::Cbr => mean_gap[c],
                Pattern::Poisson => -mean_gap[c] * rng.next_f64().ln(),
            };
            next[c] = t + gap;
            batch_class[k] = c;
            batch_measured[k] = measured;
            k += 1;
        }
        if k == 0 {
            let t = next.iter().copied().fold(f64::MAX, f64::min) as u64;
            let wait_to = t.min(end);
            if wait_to > now + 20_000 {
                sleep_until(wait_to.min(now + 10_000_000));
            } else {
                std::hint::spin_loop();
            }
            continue;
        }
        let tx = mono_ns();
        let mut iov: Vec<libc::iovec> = Vec::with_capacity(k);
        for i in 0..k {
            let c = batch_class[i];
            seq[c] += 1;
            let b = &mut bufs[i];
            b[0..4].copy_from_slice(&MAGIC.to_le_bytes());
            b[4..8].copy_from_slice(&spec.point.to_le_bytes());
            b[8..16].copy_from_slice(&seq[c].to_le_bytes());
            b[16..24].copy_from_slice(&tx.to_le_bytes());
            b[24..26].copy_from_slice(&spec.classes[c].id.to_le_bytes());
            let flags = if batch_measured[i] { FLAG_MEASURED } else { 0 };
            b[26..28].copy_from_slice(&flags.to_le_bytes());
            iov.push(libc::iovec {
                iov_base: b.as_mut_ptr().cast(),
                iov_len: payload[c],
            });
        }
        // SAFETY: mmsghdr is plain data; every pointer below stays valid until
        // sendmmsg returns (iov, addrs and bufs outlive the call).
        let mut msgs: Vec<libc::mmsghdr> = (0..k)
            .map(|i| {
                let mut h: libc::mmsghdr = unsafe { std::mem::zeroed() };
                h.msg_hdr.msg_name = (&addrs[batch_class[i]] as *const libc::sockaddr_in)
                    .cast_mut()
                    .cast();
                h.msg_hdr.msg_namelen = std::mem::size_of::<libc::sockaddr_in>() as u32;
                h.msg_hdr.msg_iov = &mut iov[i];
                h.msg_hdr.msg_iovlen = 1;
                h
            })
            .collect();
        let mut done = 0;
        while done < k {
            // SAFETY: msgs[done..k] are valid mmsghdrs (see above).
            let rc = unsafe {
                libc::sendmmsg(
                    sock.as_raw_fd(),
                    msgs[done..].as_mut_ptr(),
                    (k - done) as u32,
                    0,
                )
            };
            if rc <= 0 {
                // The first message failed (e.g. ENOBUFS): count it as not sent and
                // go on with the rest.
                res.send_errors += 1;
                done += 1;
                continue;
            }
            for i in done..done + rc as usize {
                res.sent_total += 1;
                if batch_measured[i] {
                    res.sent[batch_class[i]] += 1;
                }
            }
            done += rc as usize;
        }
    }
    let wall = mono_ns().saturating_sub(wall0).max(1);
    res.cpu_busy = thread_cpu_ns().saturating_sub(cpu0) as f64 / wall as f64;
    res.window_s = (mono_ns().min(end).saturating_sub(measure_from)) as f64 / 1e9;
    Ok(res)
}

impl GenResult {
    /// Merges the results of one thread per queue; `ids[t]` are the scenario class
    /// indexes of thread t's classes. CPU use is the mean over the threads' CPUs.
    pub fn merge(parts: &[GenResult], ids: &[Vec<u16>], classes: usize) -> GenResult {
        let mut out = GenResult {
            sent: vec![0; classes],
            window_s: f64::MAX,
            ..GenResult::default()
        };
        for (p, ids) in parts.iter().zip(ids) {
            for (local, id) in ids.iter().enumerate() {
                if let (Some(slot), Some(n)) = (out.sent.get_mut(*id as usize), p.sent.get(local)) {
                    *slot += n;
                }
            }
            out.sent_total += p.sent_total;
            out.late += p.late;
            out.max_lateness_ns = out.max_lateness_ns.max(p.max_lateness_ns);
            out.send_errors += p.send_errors;
            out.window_s = out.window_s.min(p.window_s);
            out.cpu_busy += p.cpu_busy / parts.len() as f64;
            out.interrupted |= p.interrupted;
        }
        if parts.is_empty() {
            out.window_s = 0.0;
        }
        out
    }

    pub fn engine_stats(&self, cpus: &[u32]) -> EngineStats {
        EngineStats {
            backend: "paced-udp".into(),
            cpus: cpus.to_vec(),
            cpu_busy: Some(self.cpu_busy),
            // Behind schedule by more than LATE_NS for more than 1% of departures.
            saturated: self.late * 100 > self.sent.iter().sum::<u64>().max(1),
            counters: vec![
                ("late_departures".into(), self.late),
                ("max_lateness_us".into(), self.max_lateness_ns / 1000),
                ("send_errors".into(), self.send_errors),
                ("sent_including_warmup".into(), self.sent_total),
            ],
        }
    }
}

/// Per-class results of one point at the sink.
#[derive(Clone, Debug, Default)]
pub struct SinkClass {
    pub received: u64,
    pub reordered: u64,
    pub duplicates_or_stale: u64,
    pub latency: Histogram,
    /// Drops of this class's socket (SO_MEMINFO's SK_MEMINFO_DROPS delta).
    pub socket_drops: u64,
    max_seq: u64,
}

#[derive(Clone, Debug, Default)]
pub struct SinkResult {
    pub classes: Vec<SinkClass>,
    /// Packets of other points (late stragglers) seen while this point ran.
    pub stale: u64,
    /// Packets without a kernel receive timestamp (their latency ends at the read).
    pub unstamped: u64,
    pub cpu_busy: f64,
}

enum SinkCtl {
    Begin(u32),
    Collect(mpsc::Sender<SinkResult>),
}

/// The sink thread, alive for a whole configuration.
pub struct Sink {
    ctl: mpsc::Sender<SinkCtl>,
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<io::Result<()>>>,
    pub cpus: Vec<u32>,
}

impl Sink {
    /// Binds one socket per class port in `ns` and starts receiving.
    pub fn start(ns: &str, ports: &[u16], cpus: &[u32]) -> io::Result<Sink> {
        let (ctl_tx, ctl_rx) = mpsc::channel();
        let (ready_tx, ready_rx) = mpsc::channel::<io::Result<()>>();
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = stop.clone();
        let ns = ns.to_string();
        let ports = ports.to_vec();
        let cpus2 = cpus.to_vec();
        let handle = std::thread::spawn(move || {
            let socks = (|| -> io::Result<Vec<OwnedFd>> {
                pin(0, &cpus2)?;
                enter(&ns)?;
                ports.iter().map(|p| bind_sink(*p)).collect()
            })();
            let socks = match socks {
                Ok(s) => {
                    let _ = ready_tx.send(Ok(()));
                    s
                }
                Err(e) => {
                    let msg = e.to_string();
                    let _ = ready_tx.send(Err(e));
                    return Err(io::Error::other(msg));
                }
            };
            receive(&socks, &ctl_rx, &stop2);
            Ok(())
        });
        match ready_rx.recv_timeout(Duration::from_secs(10)) {
            Ok(Ok(())) => Ok(Sink {
                ctl: ctl_tx,
                stop,
                handle: Some(handle),
                cpus: cpus.to_vec(),
            }),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(io::Error::other("the sink did not start within 10 s")),
        }
    }

    /// Starts counting packets of point `point` (forgets the previous point).
    pub fn begin(&self, point: u32) {
        let _ = self.ctl.send(SinkCtl::Begin(point));
    }

    /// The counts since `begin`.
    pub fn collect(&self) -> io::Result<SinkResult> {
        let (tx, rx) = mpsc::channel();
        self.ctl
            .send(SinkCtl::Collect(tx))
            .map_err(|_| io::Error::other("the sink thread is gone"))?;
        rx.recv_timeout(Duration::from_secs(10))
            .map_err(|_| io::Error::other("the sink did not answer within 10 s"))
    }
}

impl Drop for Sink {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// The SCM_TIMESTAMPNS receive timestamp of a received message, ns (CLOCK_REALTIME).
fn rx_timestamp(m: &libc::mmsghdr) -> Option<u64> {
    // SAFETY: the control buffer was filled by recvmmsg; the CMSG macros walk it
    // within msg_controllen, and the timespec is read unaligned.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&m.msg_hdr);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_TIMESTAMPNS {
                let ts: libc::timespec =
                    std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<libc::timespec>());
                return Some(ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64);
            }
            c = libc::CMSG_NXTHDR(&m.msg_hdr, c);
        }
    }
    None
}

fn realtime_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid pointer to a timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn bind_sink(port: u16) -> io::Result<OwnedFd> {
    let s = udp_socket()?;
    // Kernel receive timestamps: latency ends when the sink's veth received the frame.
    setsockopt_int(&s, libc::SOL_SOCKET, libc::SO_TIMESTAMPNS, 1)?;
    // Root may exceed rmem_max; fall back to SO_RCVBUF otherwise.
    if setsockopt_int(&s, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, 16 << 20).is_err() {
        setsockopt_int(&s, libc::SOL_SOCKET, libc::SO_RCVBUF, 16 << 20)?;
    }
    let a = sockaddr(Ipv4Addr::UNSPECIFIED, port);
    // SAFETY: valid fd and sockaddr_in.
    let rc = unsafe {
        libc::bind(
            s.as_raw_fd(),
            (&a as *const libc::sockaddr_in).cast(),
            std::mem::size_of::<libc::sockaddr_in>() as u32,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fcntl on a valid fd.
    unsafe {
        let fl = libc::fcntl(s.as_raw_fd(), libc::F_GETFL);
        libc::fcntl(s.as_raw_fd(), libc::F_SETFL, fl | libc::O_NONBLOCK);
    }
    Ok(s)
}

/// SK_MEMINFO_DROPS of a socket (index 8 of SO_MEMINFO), the packets the socket
/// dropped (full receive buffer).
fn socket_drops(fd: &OwnedFd) -> u64 {
    let mut info = [0u32; 16];
    let mut len = std::mem::size_of_val(&info) as u32;
    // SAFETY: valid fd and buffer of `len` bytes.
    let rc = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_MEMINFO,
            info.as_mut_ptr().cast(),
            &mut len,
        )
    };
    if rc != 0 || len < 36 {
        return 0;
    }
    u64::from(info[8])
}

fn receive(socks: &[OwnedFd], ctl: &mpsc::Receiver<SinkCtl>, stop: &AtomicBool) {
    let n = socks.len();
    let mut point: Option<u32> = None;
    let mut res = SinkResult {
        classes: vec![SinkClass::default(); n],
        ..SinkResult::default()
    };
    let mut drops0: Vec<u64> = socks.iter().map(socket_drops).collect();
    let mut cpu0 = thread_cpu_ns();
    let mut wall0 = mono_ns();
    let mut bufs = vec![[0u8; 64]; BATCH];
    // Control buffers for the kernel's receive timestamps (u64 for alignment).
    let mut ctrl = vec![[0u64; 8]; BATCH];
    let mut pfds: Vec<libc::pollfd> = socks
        .iter()
        .map(|s| libc::pollfd {
            fd: s.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    while !stop.load(Ordering::Relaxed) {
        while let Ok(m) = ctl.try_recv() {
            match m {
                SinkCtl::Begin(p) => {
                    point = Some(p);
                    res = SinkResult {
                        classes: vec![SinkClass::default(); n],
                        ..SinkResult::default()
                    };
                    drops0 = socks.iter().map(socket_drops).collect();
                    cpu0 = thread_cpu_ns();
                    wall0 = mono_ns();
                }
                SinkCtl::Collect(tx) => {
                    let mut out = res.clone();
                    for (i, s) in socks.iter().enumerate() {
                        out.classes[i].socket_drops = socket_drops(s).saturating_sub(drops0[i]);
                    }
                    let wall = mono_ns().saturating_sub(wall0).max(1);
                    out.cpu_busy = thread_cpu_ns().saturating_sub(cpu0) as f64 / wall as f64;
                    let _ = tx.send(out);
                }
            }
        }
        let mut got = 0;
        for (ci, s) in socks.iter().enumerate() {
            // SAFETY: zeroed mmsghdrs pointing at iovecs into `bufs`, which outlive the
            // call; truncation of longer datagrams is intended (we read the header).
            let mut iov: Vec<libc::iovec> = bufs
                .iter_mut()
                .map(|b| libc::iovec {
                    iov_base: b.as_mut_ptr().cast(),
                    iov_len: b.len(),
                })
                .collect();
            let mut msgs: Vec<libc::mmsghdr> = iov
                .iter_mut()
                .zip(ctrl.iter_mut())
                .map(|(v, c)| {
                    let mut h: libc::mmsghdr = unsafe { std::mem::zeroed() };
                    h.msg_hdr.msg_iov = v;
                    h.msg_hdr.msg_iovlen = 1;
                    h.msg_hdr.msg_control = c.as_mut_ptr().cast();
                    h.msg_hdr.msg_controllen = std::mem::size_of_val(c) as _;
                    h
                })
                .collect();
            // SAFETY: see above.
            let rc = unsafe {
                libc::recvmmsg(
                    s.as_raw_fd(),
                    msgs.as_mut_ptr(),
                    BATCH as u32,
                    libc::MSG_DONTWAIT,
                    std::ptr::null_mut(),
                )
            };
            if rc <= 0 {
                continue;
            }
            let now = mono_ns();
            // CLOCK_REALTIME - CLOCK_MONOTONIC, to convert the kernel's receive
            // timestamps (realtime) to the departure stamps' clock.
            let offset = realtime_ns() as i128 - mono_ns() as i128;
            got += rc;
            for (m, b) in msgs.iter().zip(bufs.iter()).take(rc as usize) {
                if (m.msg_len as usize) < HEADER {
                    continue;
                }
                let u32_at = |o: usize| u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
                let u64_at = |o: usize| {
                    let mut a = [0u8; 8];
                    a.copy_from_slice(&b[o..o + 8]);
                    u64::from_le_bytes(a)
                };
                if u32_at(0) != MAGIC {
                    continue;
                }
                let flags = u16::from_le_bytes([b[26], b[27]]);
                if Some(u32_at(4)) != point {
                    res.stale += 1;
                    continue;
                }
                if flags & FLAG_MEASURED == 0 {
                    continue;
                }
                let class = u16::from_le_bytes([b[24], b[25]]) as usize;
                let c = &mut res.classes[if class < n { class } else { ci }];
                let seq = u64_at(8);
                if seq < c.max_seq {
                    c.reordered += 1;
                } else if seq == c.max_seq {
                    c.duplicates_or_stale += 1;
                    continue;
                } else {
                    c.max_seq = seq;
                }
                c.received += 1;
                // Arrival: when the sink's veth received it (kernel software
                // timestamp), so the sink thread's own scheduling delay is excluded;
                // the read time if the kernel gave none.
                let arrival = rx_timestamp(m)
                    .map(|t| (t as i128 - offset).max(0) as u64)
                    .unwrap_or(now);
                if rx_timestamp(m).is_none() {
                    res.unstamped += 1;
                }
                c.latency.record_ns(arrival.saturating_sub(u64_at(16)));
            }
        }
        if got == 0 {
            // SAFETY: valid pollfd array.
            unsafe { libc::poll(pfds.as_mut_ptr(), pfds.len() as libc::nfds_t, 5) };
        }
    }
}

impl SinkResult {
    pub fn engine_stats(&self, cpus: &[u32]) -> EngineStats {
        let drops: u64 = self.classes.iter().map(|c| c.socket_drops).sum();
        EngineStats {
            backend: "socket-sink".into(),
            cpus: cpus.first().copied().into_iter().collect(),
            cpu_busy: Some(self.cpu_busy),
            saturated: drops > 0,
            counters: vec![
                ("socket_drops".into(), drops),
                ("stale_packets".into(), self.stale),
                ("latency_without_kernel_timestamp".into(), self.unstamped),
            ],
        }
    }
}
