//! The paced UDP back end: a generator and a sink, each a thread that entered its
//! namespace (`setns` affects only the calling thread) and pinned itself to its CPUs.
//!
//! Every packet carries a header: magic, point id, per-class sequence number, the
//! departure time (CLOCK_MONOTONIC, one clock for all namespaces), class index and a
//! flag saying whether it departed inside the measurement window. The sink counts only
//! packets of the current point that departed in the window, so warm-up and late
//! stragglers never mix into a point.
//!
//! Sending. The generator keeps a schedule (CBR or Poisson per class). Each time round
//! its loop it takes the departures that are due: one when it keeps up, more only while
//! it is behind schedule, at most [`TX_BATCH`]. It reads CLOCK_MONOTONIC once, writes
//! that reading as the departure stamp into every packet of the batch and hands the
//! batch to one `sendmmsg`. With [`TxPath::UdpGso`] (the default) consecutive packets
//! of one class travel as one message with `UDP_SEGMENT`: the UDP/IP send path, the
//! route lookup and the system call are paid once per batch, and the generator's own
//! stack cuts the message into ordinary packets in front of its veth (the veth's
//! `tx-udp-segmentation` is switched off for that, so the DUT receives single packets
//! exactly as with one `sendmsg` each). [`TxPath::Sendmmsg`], one message per packet,
//! is the earlier path, kept for side-by-side benchmarks and as the fallback.
//!
//! Timestamp bound: the stamp is read after the batch was chosen and before its
//! `sendmmsg` starts, and every packet of the batch has entered the kernel (been handed
//! to the veth) when the call returns. A stamp is therefore early by at most the
//! duration of one `sendmmsg` call; the generator measures every call and reports the
//! longest as `max_stamp_age_us`. Packets of one batch share one stamp, so the
//! resolution of departure times is one batch (one packet while on schedule).
//!
//! Scheduling ([`GenSched`]): SCHED_FIFO when the generator has its CPU to itself
//! within the lab, SCHED_OTHER otherwise. Receiving: one socket per class port, read
//! with recvmmsg; optionally with UDP GRO ([`SinkOptions`]).

use std::io;
use std::net::Ipv4Addr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use napilab_core::scenario::Pattern;
use napilab_core::{EngineStats, LatencyHistogram};

use crate::netns::{enter, mono_ns, pin, thread_cpu_ns};

const MAGIC: u32 = 0x4e4c_4142; // "NLAB"
const HEADER: usize = 28;
const FLAG_MEASURED: u16 = 1;
/// Most departures handed to one sendmmsg. It bounds the stamp error (one call's
/// duration: about 1 us per packet with UDP GSO on the project's VM, when the call is
/// not interrupted) and lets the generator catch up after being stopped at several
/// times the requested rate.
pub const TX_BATCH: usize = 32;
/// Largest batch taken from one recvmmsg.
const RX_BATCH: usize = 64;
/// A departure later than this after its scheduled time counts as late.
pub const LATE_NS: u64 = 100_000;
/// IP + UDP header bytes: a class's `size` is the IP packet size.
const IP_UDP: u32 = 28;
/// Payload bytes of one UDP GSO message: the kernel refuses datagrams above 64 KiB.
const GSO_MAX_BYTES: usize = 60_000;

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
    /// Sockets (UDP source ports) the generator sends from, one send batch each in
    /// turn; 0 and 1 both mean one. Each socket is its own flow, which the sending
    /// veth's queue selection (the flow hash) maps to one of its TX queues and so to
    /// one of the peer's RX queues: this spreads traffic over many NAPI instances.
    pub flows: u32,
}

/// How the generator hands its packets to the kernel (see the module documentation).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TxPath {
    /// One sendmmsg message per packet.
    Sendmmsg,
    /// Consecutive packets of a class as one `UDP_SEGMENT` message, segmented by the
    /// generator's stack in front of its veth.
    #[default]
    UdpGso,
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
    /// Departures scheduled inside the window that had not left when it closed (the
    /// generator was that far behind).
    pub behind_at_end: u64,
    /// sendmmsg calls in the window, and the most departures one of them carried.
    pub batches: u64,
    pub max_batch: u64,
    /// Longest sendmmsg call in the window, ns: the bound on how early a departure
    /// stamp is (module documentation).
    pub max_stamp_age_ns: u64,
    /// sendmmsg calls in the window that took longer than [`LATE_NS`] (the thread was
    /// preempted or interrupted inside the call): their packets' stamps may be early by
    /// up to `max_stamp_age_ns`.
    pub slow_sends: u64,
    /// Fraction of the wall time spent preparing and sending batches (the rest is
    /// waiting for the next departure, spinning or sleeping): the generator's headroom,
    /// which `cpu_busy` hides when it spins.
    pub send_busy: f64,
    /// The path actually used (UDP GSO falls back to Sendmmsg when unavailable).
    pub tx_path: TxPath,
    /// Why the path or scheduling differ from the ones asked for, if they do.
    pub tx_note: Option<String>,
    /// The SCHED_FIFO priority the generator ran at (None: SCHED_OTHER).
    pub fifo_priority: Option<u32>,
    /// Steal time of the generator's CPUs over the run, ms (/proc/stat, 10 ms ticks):
    /// time the hypervisor gave the virtual CPU to others. No priority inside the
    /// guest prevents it; late departures and `behind_at_end` then count its effect.
    pub stolen_ms: u64,
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

/// The generator thread's scheduling.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum GenSched {
    /// SCHED_OTHER: it shares its CPU fairly with whatever else runs there.
    Other,
    /// SCHED_FIFO at this priority: other processes on its CPU cannot delay departures.
    Fifo(u32),
    /// SCHED_FIFO at [`AUTO_FIFO_PRIORITY`] when the generator has its CPUs to itself
    /// within the lab (no NAPI kthread of the run, no sink thread of this process and
    /// no RPS of the DUT may run there, and the DUT's ingress polls in its own
    /// kthread), so that real-time priority cannot starve the DUT or the sink;
    /// SCHED_OTHER otherwise.
    #[default]
    Auto,
}

/// Real-time priority of an automatically promoted generator: below the sink veth's
/// NAPI kthread (`topology::SINK_NAPI_FIFO`).
pub const AUTO_FIFO_PRIORITY: u32 = 5;

/// How the generator runs, beyond what it sends ([`GenSpec`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GenOptions {
    pub path: TxPath,
    pub sched: GenSched,
    /// When the next departure is less than this far away the thread spins instead of
    /// sleeping (shorter sleeps cost a timer wake-up each and wake late). None: 20 us
    /// under SCHED_OTHER; 3 us under SCHED_FIFO, where wake-ups are prompt and a
    /// spinning real-time thread would take the whole CPU.
    pub spin_ns: Option<u64>,
}

/// Starts the generator thread with the default [`GenOptions`]; join it for the result.
pub fn start_generator(spec: GenSpec, stop: Arc<AtomicBool>) -> JoinHandle<io::Result<GenResult>> {
    start_generator_with(spec, GenOptions::default(), stop)
}

/// Starts the generator thread with `opts`; join it for the result.
pub fn start_generator_with(
    spec: GenSpec,
    opts: GenOptions,
    stop: Arc<AtomicBool>,
) -> JoinHandle<io::Result<GenResult>> {
    std::thread::spawn(move || {
        pin(0, &spec.cpus)?;
        enter(&spec.ns)?;
        let mut notes = Vec::new();
        let path = match opts.path {
            TxPath::UdpGso => match crate::gso::prepare_gso(&spec.ns, spec.dst) {
                Ok(()) => TxPath::UdpGso,
                Err(e) => {
                    notes.push(format!("UDP GSO not used, one message per packet: {e}"));
                    TxPath::Sendmmsg
                }
            },
            TxPath::Sendmmsg => TxPath::Sendmmsg,
        };
        let prio = match opts.sched {
            GenSched::Other => None,
            GenSched::Fifo(p) => Some(p),
            GenSched::Auto => match cpus_to_itself(&spec.ns, &spec.cpus) {
                Ok(()) => Some(AUTO_FIFO_PRIORITY),
                Err(why) => {
                    notes.push(format!("SCHED_OTHER: {why}"));
                    None
                }
            },
        };
        let mut fifo = None;
        if let Some(p) = prio {
            let param = libc::sched_param {
                sched_priority: p as i32,
            };
            // SAFETY: pid 0 is the calling thread; valid sched_param. The policy ends
            // with the thread.
            if unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) } == 0 {
                fifo = Some(p);
            } else {
                notes.push(format!(
                    "SCHED_FIFO {p} refused ({}): the generator runs SCHED_OTHER",
                    io::Error::last_os_error()
                ));
            }
        }
        let spin_ns = opts
            .spin_ns
            .unwrap_or(if fifo.is_some() { 3_000 } else { 20_000 });
        let mut r = generate(&spec, path, spin_ns, &stop)?;
        r.fifo_priority = fifo;
        if let Some(n) = r.tx_note.take() {
            notes.push(n);
        }
        if !notes.is_empty() {
            r.tx_note = Some(notes.join("; "));
        }
        Ok(r)
    })
}

/// CPUs the sink threads of this process may run on, one entry per live [`Sink`].
static SINK_CPUS: Mutex<Vec<Vec<u32>>> = Mutex::new(Vec::new());

/// `0-2,5` (a kernel CPU list, as in /proc/PID/status) as CPU numbers.
fn parse_cpu_list(s: &str) -> Vec<u32> {
    let mut out = Vec::new();
    for part in s.trim().split(',').filter(|p| !p.is_empty()) {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        if let (Ok(a), Ok(b)) = (a.trim().parse::<u32>(), b.trim().parse::<u32>()) {
            out.extend(a..=b.min(a.saturating_add(4096)));
        }
    }
    out
}

/// Ok when, within the lab run that `gen_ns` belongs to, nothing but the generator may
/// run on `cpus`: the reason otherwise.
fn cpus_to_itself(gen_ns: &str, cpus: &[u32]) -> Result<(), String> {
    if cpus.is_empty() {
        return Err("the generator is not pinned".into());
    }
    let run = crate::netns::run_id_of_ns(gen_ns)
        .ok_or_else(|| format!("{gen_ns} is not a lab namespace"))?;
    let overlaps = |list: &[u32]| list.iter().any(|c| cpus.contains(c));
    if SINK_CPUS
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .any(|l| l.is_empty() || overlaps(l))
    {
        return Err("a sink thread may run on the generator's CPU".into());
    }
    // The run's NAPI kthreads are `napi/n<last 4 of the run id>-<dev>-<id>`.
    let prefix = format!("napi/n{}-", &run[run.len() - 4..]);
    let sink_prefix = format!("{prefix}sink");
    let mut dut_kthread = false;
    let dir = std::fs::read_dir("/proc").map_err(|e| format!("/proc: {e}"))?;
    for e in dir.flatten() {
        let pid = e.file_name();
        let Some(pid) = pid
            .to_str()
            .filter(|p| p.bytes().all(|b| b.is_ascii_digit()))
        else {
            continue;
        };
        let Ok(comm) = std::fs::read_to_string(format!("/proc/{pid}/comm")) else {
            continue;
        };
        if !comm.starts_with(&prefix) {
            continue;
        }
        dut_kthread |= !comm.starts_with(&sink_prefix);
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        let allowed = status
            .lines()
            .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
            .map(parse_cpu_list)
            .unwrap_or_default();
        if allowed.is_empty() || overlaps(&allowed) {
            return Err(format!("{} may run on the generator's CPU", comm.trim()));
        }
    }
    if !dut_kthread {
        return Err(
            "the DUT's ingress polls in softirq context, on the generator's CPU when it sends"
                .into(),
        );
    }
    // RPS moves the DUT's receive work to other CPUs' softirqs.
    let dut_ns = crate::netns::ns_name(run, "dut");
    let masks = crate::netns::sh_in(
        &dut_ns,
        "cat /sys/class/net/*/queues/rx-*/rps_cpus 2>/dev/null; true",
    )
    .map_err(|e| format!("reading RPS masks in {dut_ns}: {e}"))?;
    for m in masks.lines() {
        let hex: String = m.chars().filter(|c| c.is_ascii_hexdigit()).collect();
        // The lowest 64 CPUs are the last 16 hex digits.
        let low = &hex[hex.len().saturating_sub(16)..];
        let bits = u64::from_str_radix(if low.is_empty() { "0" } else { low }, 16).unwrap_or(0);
        if cpus.iter().any(|&c| c < 64 && bits & (1 << c) != 0) {
            return Err(format!(
                "the DUT's RPS mask {} includes the generator's CPU",
                m.trim()
            ));
        }
    }
    Ok(())
}

/// Raises the soft open-file limit towards `want` (at most the hard limit): many flows
/// need many sockets, more than a shell's usual 1,024. Best effort: socket creation
/// says what to do when it still fails.
fn raise_open_file_limit(want: u64) {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit with a valid rlimit pointer.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < want {
            lim.rlim_cur = want.min(lim.rlim_max);
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
}

/// Steal ticks (USER_HZ, 10 ms) summed over `cpus`, from /proc/stat.
fn steal_ticks(cpus: &[u32]) -> u64 {
    let text = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let cpu: u32 = f.next()?.strip_prefix("cpu")?.parse().ok()?;
            if !cpus.contains(&cpu) {
                return None;
            }
            f.nth(7)?.parse::<u64>().ok()
        })
        .sum()
}

/// Sleeps until `t_ns` on CLOCK_MONOTONIC (absolute, nanoseconds; the clock of
/// [`mono_ns`]). The paced and the line-rate generators' one sleep.
pub(crate) fn sleep_until(t_ns: u64) {
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

/// One message of a batch: `count` packets of `class` from packet `first` on, laid out
/// contiguously from byte `off` of the batch buffer.
#[derive(Clone, Copy, Default)]
struct Msg {
    class: usize,
    first: usize,
    count: usize,
    off: usize,
}

fn generate(
    spec: &GenSpec,
    path: TxPath,
    spin_ns: u64,
    stop: &AtomicBool,
) -> io::Result<GenResult> {
    // Precise sleeps: the default 50 us timer slack would add lateness.
    // SAFETY: prctl with an integer argument.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1u64, 0u64, 0u64, 0u64) };
    let socks = flow_sockets(spec.flows.max(1))?;
    let mut next_sock = 0usize;
    let mut gso = path == TxPath::UdpGso;
    let n = spec.classes.len();
    let mut rng = Rng(spec.seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    let plan = ClassPlan::new(spec);
    let mut tx_batch = TxBatch::new(plan.max_payload);
    let mut seq = vec![0u64; n];
    let mut res = GenResult {
        sent: vec![0; n],
        tx_path: path,
        ..GenResult::default()
    };
    let start = mono_ns() + 5_000_000;
    let measure_from = start + spec.warmup.as_nanos() as u64;
    let end = measure_from + spec.duration.as_nanos() as u64;
    // Next departure per class (absolute ns); classes start staggered.
    let mut next: Vec<f64> = (0..n)
        .map(|i| start as f64 + plan.mean_gap[i] * i as f64 / n as f64)
        .collect();
    let cpu0 = thread_cpu_ns();
    let wall0 = mono_ns();
    let steal0 = steal_ticks(&spec.cpus);
    let mut work_ns = 0u64;
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
        let k = tx_batch.take_due(spec, &plan, &mut next, &mut rng, now, end, measure_from);
        if k == 0 {
            let t = next.iter().copied().fold(f64::MAX, f64::min) as u64;
            let wait_to = t.min(end);
            if wait_to > now + spin_ns {
                sleep_until(wait_to.min(now + 10_000_000));
            } else {
                std::hint::spin_loop();
            }
            continue;
        }
        // The departure stamp: read once, after the batch was chosen and right before
        // it is written and sent.
        let tx = mono_ns();
        let (m, measured_batch) = tx_batch.write(spec, &plan, k, tx, gso, &mut seq, &mut res);
        tx_batch.prepare(&plan, m);
        // One flow per batch, in turn (a batch's messages share one sendmmsg, hence one
        // socket).
        let sock = &socks[next_sock];
        next_sock = (next_sock + 1) % socks.len();
        tx_batch.send(sock, m, &mut gso, &mut res);
        let t_done = mono_ns();
        work_ns += t_done.saturating_sub(now);
        if measured_batch {
            let age = t_done.saturating_sub(tx);
            res.max_stamp_age_ns = res.max_stamp_age_ns.max(age);
            if age > LATE_NS {
                res.slow_sends += 1;
            }
            res.batches += 1;
            res.max_batch = res.max_batch.max(k as u64);
        }
    }
    let wall = mono_ns().saturating_sub(wall0).max(1);
    res.cpu_busy = thread_cpu_ns().saturating_sub(cpu0) as f64 / wall as f64;
    res.send_busy = work_ns as f64 / wall as f64;
    res.stolen_ms = steal_ticks(&spec.cpus).saturating_sub(steal0) * 10;
    res.window_s = (mono_ns().min(end).saturating_sub(measure_from)) as f64 / 1e9;
    if !res.interrupted {
        res.behind_at_end = behind_at_end(spec, &plan, &next, &mut rng, measure_from, end);
    }
    Ok(res)
}

/// One UDP socket per flow, with a large send buffer.
fn flow_sockets(flows: u32) -> io::Result<Vec<OwnedFd>> {
    raise_open_file_limit(u64::from(flows) + 256);
    (0..flows)
        .map(|_| {
            let sock = udp_socket().map_err(|e| {
                if e.raw_os_error() == Some(libc::EMFILE) {
                    io::Error::other(format!("the generator needs {flows} sockets (one per flow) and the open-file limit is too low: raise it (ulimit -n) or use fewer NAPI instances: {e}"))
                } else {
                    e
                }
            })?;
            setsockopt_int(&sock, libc::SOL_SOCKET, libc::SO_SNDBUF, 4 << 20)?;
            Ok(sock)
        })
        .collect()
}

/// What the generator computes once per class: its mean gap, destination, payload and
/// how many of its packets one GSO message may carry.
struct ClassPlan {
    mean_gap: Vec<f64>,
    addrs: Vec<libc::sockaddr_in>,
    payload: Vec<usize>,
    max_segs: Vec<usize>,
    max_payload: usize,
}

impl ClassPlan {
    fn new(spec: &GenSpec) -> ClassPlan {
        let mean_gap = spec
            .classes
            .iter()
            .map(|c| 1e9 / (spec.rate_pps * c.share).max(1e-9))
            .collect();
        let addrs = spec
            .classes
            .iter()
            .map(|c| sockaddr(spec.dst, c.port))
            .collect();
        let payload: Vec<usize> = spec
            .classes
            .iter()
            .map(|c| (c.size.saturating_sub(IP_UDP) as usize).max(HEADER))
            .collect();
        let max_segs = payload
            .iter()
            .map(|p| (GSO_MAX_BYTES / p).clamp(1, TX_BATCH))
            .collect();
        let max_payload = payload.iter().copied().max().unwrap_or(HEADER);
        ClassPlan {
            mean_gap,
            addrs,
            payload,
            max_segs,
            max_payload,
        }
    }

    /// The gap to class `c`'s next departure, ns.
    #[inline]
    fn gap(&self, spec: &GenSpec, c: usize, rng: &mut Rng) -> f64 {
        match spec.classes[c].pattern {
            Pattern::Cbr => self.mean_gap[c],
            Pattern::Poisson => -self.mean_gap[c] * rng.next_f64().ln(),
        }
    }
}

/// What the schedule still held for the window when it closed (bounded by twice its departures).
fn behind_at_end(
    spec: &GenSpec,
    plan: &ClassPlan,
    next: &[f64],
    rng: &mut Rng,
    measure_from: u64,
    end: u64,
) -> u64 {
    let cap = (spec.rate_pps * spec.duration.as_secs_f64() * 2.0) as u64 + 1000;
    let mut behind = 0;
    for (c, t0) in next.iter().enumerate() {
        let mut t = *t0;
        while t < end as f64 && behind < cap {
            if t >= measure_from as f64 {
                behind += 1;
            }
            t += plan.gap(spec, c, rng);
        }
    }
    behind
}

/// The scratch of one send batch, allocated once per generator: the due packets, the
/// buffer they are laid out in back to back (so that a run of one class is one
/// contiguous GSO buffer) and the sendmmsg messages over it.
struct TxBatch {
    buf: Vec<u8>,
    pk_class: [usize; TX_BATCH],
    pk_sched: [u64; TX_BATCH],
    pk_measured: [bool; TX_BATCH],
    batch: [Msg; TX_BATCH],
    /// Control buffers for the UDP_SEGMENT cmsg (u64 for cmsghdr alignment).
    ctrl: [[u64; 4]; TX_BATCH],
    iov: Vec<libc::iovec>,
    msgs: Vec<libc::mmsghdr>,
}

impl TxBatch {
    fn new(max_payload: usize) -> TxBatch {
        TxBatch {
            buf: vec![0u8; TX_BATCH * max_payload],
            pk_class: [0usize; TX_BATCH],
            pk_sched: [0u64; TX_BATCH],
            pk_measured: [false; TX_BATCH],
            batch: [Msg::default(); TX_BATCH],
            ctrl: [[0u64; 4]; TX_BATCH],
            // SAFETY: iovec and mmsghdr are plain data; all-zero is a valid empty value.
            iov: vec![unsafe { std::mem::zeroed() }; TX_BATCH],
            msgs: vec![unsafe { std::mem::zeroed() }; TX_BATCH],
        }
    }

    /// Takes the due departures, earliest first: one when on schedule, more only while
    /// behind. Returns how many (0: nothing is due).
    #[inline]
    #[allow(clippy::too_many_arguments)]
    fn take_due(
        &mut self,
        spec: &GenSpec,
        plan: &ClassPlan,
        next: &mut [f64],
        rng: &mut Rng,
        now: u64,
        end: u64,
        measure_from: u64,
    ) -> usize {
        let mut k = 0;
        while k < TX_BATCH {
            let (c, t) =
                next.iter()
                    .enumerate()
                    .fold((0, f64::MAX), |a, (i, &t)| if t < a.1 { (i, t) } else { a });
            if t > now as f64 || t >= end as f64 {
                break;
            }
            self.pk_class[k] = c;
            self.pk_sched[k] = t as u64;
            self.pk_measured[k] = t as u64 >= measure_from;
            next[c] = t + plan.gap(spec, c, rng);
            k += 1;
        }
        k
    }

    /// Writes the headers of the `k` due packets, stamped `tx`, and groups them into
    /// messages (consecutive packets of a class into one GSO message when `gso`).
    /// Returns the number of messages and whether any packet is measured.
    #[inline]
    #[allow(clippy::too_many_arguments)]
    fn write(
        &mut self,
        spec: &GenSpec,
        plan: &ClassPlan,
        k: usize,
        tx: u64,
        gso: bool,
        seq: &mut [u64],
        res: &mut GenResult,
    ) -> (usize, bool) {
        let mut m = 0;
        let mut off = 0;
        let mut measured_batch = false;
        let batch = &mut self.batch;
        for i in 0..k {
            let c = self.pk_class[i];
            seq[c] += 1;
            let b = &mut self.buf[off..off + HEADER];
            b[0..4].copy_from_slice(&MAGIC.to_le_bytes());
            b[4..8].copy_from_slice(&spec.point.to_le_bytes());
            b[8..16].copy_from_slice(&seq[c].to_le_bytes());
            b[16..24].copy_from_slice(&tx.to_le_bytes());
            b[24..26].copy_from_slice(&spec.classes[c].id.to_le_bytes());
            let flags = if self.pk_measured[i] {
                FLAG_MEASURED
            } else {
                0
            };
            b[26..28].copy_from_slice(&flags.to_le_bytes());
            if self.pk_measured[i] {
                measured_batch = true;
                let late = tx.saturating_sub(self.pk_sched[i]);
                if late > LATE_NS {
                    res.late += 1;
                }
                res.max_lateness_ns = res.max_lateness_ns.max(late);
            }
            let extend =
                gso && m > 0 && batch[m - 1].class == c && batch[m - 1].count < plan.max_segs[c];
            if extend {
                batch[m - 1].count += 1;
            } else {
                batch[m] = Msg {
                    class: c,
                    first: i,
                    count: 1,
                    off,
                };
                m += 1;
            }
            off += plan.payload[c];
        }
        (m, measured_batch)
    }

    /// Points the first `m` messages at their packets and destinations, with a
    /// UDP_SEGMENT control message where a message carries several packets.
    #[inline]
    fn prepare(&mut self, plan: &ClassPlan, m: usize) {
        for j in 0..m {
            let g = self.batch[j];
            self.iov[j] = libc::iovec {
                // SAFETY: off + count * payload stays inside `buf` (at most TX_BATCH
                // packets of at most max_payload bytes).
                iov_base: unsafe { self.buf.as_mut_ptr().add(g.off) }.cast(),
                iov_len: g.count * plan.payload[g.class],
            };
            let h = &mut self.msgs[j].msg_hdr;
            h.msg_name = (&plan.addrs[g.class] as *const libc::sockaddr_in)
                .cast_mut()
                .cast();
            h.msg_namelen = std::mem::size_of::<libc::sockaddr_in>() as u32;
            h.msg_iov = &mut self.iov[j];
            h.msg_iovlen = 1;
            if g.count > 1 {
                h.msg_control = self.ctrl[j].as_mut_ptr().cast();
                // SAFETY: CMSG_SPACE(2) = 24 bytes fit the 32-byte, 8-aligned buffer;
                // the header and the u16 segment size are written inside it.
                unsafe {
                    h.msg_controllen = libc::CMSG_SPACE(2) as _;
                    let c = libc::CMSG_FIRSTHDR(h);
                    (*c).cmsg_level = libc::SOL_UDP;
                    (*c).cmsg_type = libc::UDP_SEGMENT;
                    (*c).cmsg_len = libc::CMSG_LEN(2) as _;
                    std::ptr::write_unaligned(
                        libc::CMSG_DATA(c).cast::<u16>(),
                        plan.payload[g.class] as u16,
                    );
                }
            } else {
                h.msg_control = std::ptr::null_mut();
                h.msg_controllen = 0;
            }
            self.msgs[j].msg_len = 0;
        }
    }

    /// Sends the first `m` messages on `sock`, counting what departed; a message the
    /// kernel refuses is counted lost, and a refused GSO message turns `gso` off.
    #[inline]
    fn send(&mut self, sock: &OwnedFd, m: usize, gso: &mut bool, res: &mut GenResult) {
        let mut done = 0;
        let mut retries = 0;
        while done < m {
            // SAFETY: msgs[done..m] are valid mmsghdrs whose pointers (iov, addrs,
            // buf, ctrl) outlive the call.
            let rc = unsafe {
                libc::sendmmsg(
                    sock.as_raw_fd(),
                    self.msgs[done..].as_mut_ptr(),
                    (m - done) as u32,
                    0,
                )
            };
            if rc <= 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted && retries < 3 {
                    retries += 1;
                    continue;
                }
                // The first message failed (e.g. ENOBUFS): its packets were not sent;
                // go on with the rest.
                let g = self.batch[done];
                res.send_errors += g.count as u64;
                if g.count > 1
                    && matches!(
                        e.raw_os_error(),
                        Some(libc::EINVAL | libc::EIO | libc::ENOPROTOOPT | libc::EOPNOTSUPP)
                    )
                {
                    // The kernel refuses UDP GSO here: one message per packet from now on.
                    *gso = false;
                    res.tx_path = TxPath::Sendmmsg;
                    res.tx_note = Some(format!(
                        "UDP GSO refused by the kernel ({e}); {} packets lost, then one message per packet",
                        g.count
                    ));
                }
                done += 1;
                continue;
            }
            for g in &self.batch[done..done + rc as usize] {
                res.sent_total += g.count as u64;
                res.sent[g.class] += self.pk_measured[g.first..g.first + g.count]
                    .iter()
                    .filter(|m| **m)
                    .count() as u64;
            }
            done += rc as usize;
        }
    }
}

impl GenResult {
    /// Merges the results of one thread per queue; `ids[t]` are the scenario class
    /// indexes of thread t's classes. CPU use is the mean over the threads' CPUs.
    pub fn merge(parts: &[GenResult], ids: &[Vec<u16>], classes: usize) -> GenResult {
        let mut out = GenResult {
            sent: vec![0; classes],
            window_s: f64::MAX,
            tx_path: parts.first().map(|p| p.tx_path).unwrap_or_default(),
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
            out.behind_at_end += p.behind_at_end;
            out.batches += p.batches;
            out.max_batch = out.max_batch.max(p.max_batch);
            out.max_stamp_age_ns = out.max_stamp_age_ns.max(p.max_stamp_age_ns);
            out.slow_sends += p.slow_sends;
            out.send_busy += p.send_busy / parts.len() as f64;
            if p.tx_path != out.tx_path {
                out.tx_path = TxPath::Sendmmsg;
            }
            if out.tx_note.is_none() {
                out.tx_note = p.tx_note.clone();
            }
            out.fifo_priority = out.fifo_priority.max(p.fifo_priority);
            out.stolen_ms = out.stolen_ms.max(p.stolen_ms);
        }
        if parts.is_empty() {
            out.window_s = 0.0;
        }
        out
    }

    /// True when the generator did not keep its schedule: more than 1% of the window's
    /// departures left more than [`LATE_NS`] late, or more than 1% never left.
    pub fn saturated(&self) -> bool {
        let sent: u64 = self.sent.iter().sum();
        let scheduled = sent + self.behind_at_end;
        self.late * 100 > sent.max(1) || self.behind_at_end * 100 > scheduled.max(1)
    }

    pub fn engine_stats(&self, cpus: &[u32]) -> EngineStats {
        EngineStats {
            backend: "paced-udp".into(),
            cpus: cpus.to_vec(),
            cpu_busy: Some(self.cpu_busy),
            saturated: self.saturated(),
            counters: vec![
                ("late_departures".into(), self.late),
                ("max_lateness_us".into(), self.max_lateness_ns / 1000),
                ("behind_at_end".into(), self.behind_at_end),
                ("send_errors".into(), self.send_errors),
                ("sent_including_warmup".into(), self.sent_total),
                ("send_calls".into(), self.batches),
                ("max_batch".into(), self.max_batch),
                (
                    "max_stamp_age_us".into(),
                    self.max_stamp_age_ns.div_ceil(1000),
                ),
                ("slow_sends".into(), self.slow_sends),
                (
                    "send_busy_percent".into(),
                    (self.send_busy * 100.0).round() as u64,
                ),
                ("udp_gso".into(), u64::from(self.tx_path == TxPath::UdpGso)),
                ("cpu_stolen_ms".into(), self.stolen_ms),
                (
                    "sched_fifo_priority".into(),
                    u64::from(self.fifo_priority.unwrap_or(0)),
                ),
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
    pub latency: LatencyHistogram,
    /// Drops of this class's socket (SO_MEMINFO's SK_MEMINFO_DROPS delta).
    pub socket_drops: u64,
    max_seq: u64,
}

impl SinkClass {
    /// The highest sequence number received: with no warm-up (every packet measured)
    /// and no loss it equals the number of packets the class sent.
    pub fn max_seq(&self) -> u64 {
        self.max_seq
    }
}

#[derive(Clone, Debug, Default)]
pub struct SinkResult {
    pub classes: Vec<SinkClass>,
    /// Packets of other points (late stragglers) seen while this point ran.
    pub stale: u64,
    /// Packets without a kernel receive timestamp (their latency ends at the read).
    pub unstamped: u64,
    pub cpu_busy: f64,
    /// recvmmsg calls that returned a full batch: the socket held a backlog, the sink
    /// was reading behind the arrivals (drops follow once the buffer is full).
    pub full_reads: u64,
    /// Packets that arrived before their departure stamp (after converting the kernel's
    /// realtime receive timestamp to CLOCK_MONOTONIC); should stay 0.
    pub negative_latency: u64,
}

/// How the sink receives.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SinkOptions {
    /// UDP_GRO on the sink sockets: the sink veth's GRO merges consecutive packets of
    /// a class into one datagram (one socket delivery, one read), which the sink cuts
    /// back into packets. The kernel receive timestamp is then that of the merged
    /// datagram (taken when GRO delivers it, at most one NAPI poll after its first
    /// packet arrived), so latency can be overstated by up to one poll.
    pub udp_gro: bool,
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
        Sink::start_with(ns, ports, cpus, SinkOptions::default())
    }

    /// [`Sink::start`] with `opts`.
    pub fn start_with(
        ns: &str,
        ports: &[u16],
        cpus: &[u32],
        opts: SinkOptions,
    ) -> io::Result<Sink> {
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
                ports.iter().map(|p| bind_sink(*p, opts.udp_gro)).collect()
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
            Ok(Ok(())) => {
                // Known to generators deciding whether they have their CPU to themselves.
                SINK_CPUS
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push(cpus.to_vec());
                Ok(Sink {
                    ctl: ctl_tx,
                    stop,
                    handle: Some(handle),
                    cpus: cpus.to_vec(),
                })
            }
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
        let mut reg = SINK_CPUS.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(i) = reg.iter().position(|c| *c == self.cpus) {
            reg.remove(i);
        }
    }
}

/// The SCM_TIMESTAMPNS receive timestamp (ns, CLOCK_REALTIME) and the UDP_GRO
/// segment size of a received message, when the kernel attached them.
fn rx_cmsgs(m: &libc::mmsghdr) -> (Option<u64>, Option<usize>) {
    let (mut stamp, mut seg) = (None, None);
    // SAFETY: the control buffer was filled by recvmmsg; the CMSG macros walk it
    // within msg_controllen, and the payloads are read unaligned.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&m.msg_hdr);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_TIMESTAMPNS {
                let ts: libc::timespec =
                    std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<libc::timespec>());
                stamp = Some(ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64);
            } else if (*c).cmsg_level == libc::SOL_UDP && (*c).cmsg_type == libc::UDP_GRO {
                let g: i32 = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<i32>());
                seg = usize::try_from(g).ok().filter(|g| *g > 0);
            }
            c = libc::CMSG_NXTHDR(&m.msg_hdr, c);
        }
    }
    (stamp, seg)
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

fn bind_sink(port: u16, udp_gro: bool) -> io::Result<OwnedFd> {
    let s = udp_socket()?;
    if udp_gro {
        setsockopt_int(&s, libc::SOL_UDP, libc::UDP_GRO, 1)?;
    }
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
    let mut window = SinkWindow::begin(None, socks);
    // Receive buffers, control buffers for the kernel's receive timestamps (u64 for
    // alignment), iovecs and message headers: allocated once, re-armed per call.
    // A plain datagram is read up to its header's end (64 bytes); a GRO datagram
    // (several packets) whole, as every packet's header is needed.
    let slot = if any_gro(socks) { 65_536 } else { 64 };
    let mut bufs = vec![0u8; slot * RX_BATCH];
    let mut ctrl = vec![[0u64; 8]; RX_BATCH];
    let mut iov: Vec<libc::iovec> = bufs
        .chunks_mut(slot)
        .map(|b| libc::iovec {
            iov_base: b.as_mut_ptr().cast(),
            iov_len: b.len(),
        })
        .collect();
    // SAFETY: mmsghdr is plain data; all-zero is a valid empty header.
    let mut msgs: Vec<libc::mmsghdr> = vec![unsafe { std::mem::zeroed() }; RX_BATCH];
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
                SinkCtl::Begin(p) => window = SinkWindow::begin(Some(p), socks),
                SinkCtl::Collect(tx) => {
                    let _ = tx.send(window.collect(socks));
                }
            }
        }
        let mut got = 0;
        for (ci, s) in socks.iter().enumerate() {
            for ((h, v), c) in msgs.iter_mut().zip(iov.iter_mut()).zip(ctrl.iter_mut()) {
                h.msg_hdr.msg_iov = v;
                h.msg_hdr.msg_iovlen = 1;
                h.msg_hdr.msg_control = c.as_mut_ptr().cast();
                // The kernel shrinks msg_controllen to what it wrote: re-arm it.
                h.msg_hdr.msg_controllen = std::mem::size_of_val(c) as _;
                h.msg_hdr.msg_flags = 0;
                h.msg_len = 0;
            }
            // SAFETY: the mmsghdrs point at iovecs into `bufs` and at `ctrl`, all of
            // which outlive the call; truncation of longer datagrams is intended (we
            // read the header only).
            let rc = unsafe {
                libc::recvmmsg(
                    s.as_raw_fd(),
                    msgs.as_mut_ptr(),
                    RX_BATCH as u32,
                    libc::MSG_DONTWAIT,
                    std::ptr::null_mut(),
                )
            };
            if rc <= 0 {
                continue;
            }
            let res = &mut window.res;
            if rc as usize == RX_BATCH {
                res.full_reads += 1;
            }
            let now = mono_ns();
            // CLOCK_REALTIME - CLOCK_MONOTONIC, to convert the kernel's receive
            // timestamps (realtime) to the departure stamps' clock.
            let offset = realtime_ns() as i128 - mono_ns() as i128;
            got += rc;
            for (m, dgram) in msgs.iter().zip(bufs.chunks(slot)).take(rc as usize) {
                let len = (m.msg_len as usize).min(slot);
                let (stamp, seg) = rx_cmsgs(m);
                // Arrival: when the sink's veth received it (kernel software
                // timestamp), so the sink thread's own scheduling delay is excluded;
                // the read time if the kernel gave none.
                let arrival = stamp.map(|t| (t as i128 - offset).max(0) as u64);
                let seg = seg.filter(|g| *g >= HEADER).unwrap_or(len.max(1));
                for b in dgram[..len].chunks(seg) {
                    account(res, b, window.point, ci, arrival, now);
                }
            }
        }
        if got == 0 {
            // SAFETY: valid pollfd array.
            unsafe { libc::poll(pfds.as_mut_ptr(), pfds.len() as libc::nfds_t, 5) };
        }
    }
}

/// Whether the kernel coalesces datagrams (UDP_GRO) on any of the sockets.
fn any_gro(socks: &[OwnedFd]) -> bool {
    socks.iter().any(|s| {
        let mut v = 0i32;
        let mut len = std::mem::size_of::<i32>() as u32;
        // SAFETY: valid fd and an int-sized buffer.
        let rc = unsafe {
            libc::getsockopt(
                s.as_raw_fd(),
                libc::SOL_UDP,
                libc::UDP_GRO,
                (&mut v as *mut i32).cast(),
                &mut len,
            )
        };
        rc == 0 && v != 0
    })
}

/// The sink's tallies since the point began, and the drops, CPU and wall time then.
struct SinkWindow {
    point: Option<u32>,
    res: SinkResult,
    drops0: Vec<u64>,
    cpu0: u64,
    wall0: u64,
}

impl SinkWindow {
    fn begin(point: Option<u32>, socks: &[OwnedFd]) -> SinkWindow {
        SinkWindow {
            point,
            res: SinkResult {
                classes: vec![SinkClass::default(); socks.len()],
                ..SinkResult::default()
            },
            drops0: socks.iter().map(socket_drops).collect(),
            cpu0: thread_cpu_ns(),
            wall0: mono_ns(),
        }
    }

    /// The tallies so far, with the socket drops and CPU use since the beginning.
    fn collect(&self, socks: &[OwnedFd]) -> SinkResult {
        let mut out = self.res.clone();
        for (i, s) in socks.iter().enumerate() {
            out.classes[i].socket_drops = socket_drops(s).saturating_sub(self.drops0[i]);
        }
        let wall = mono_ns().saturating_sub(self.wall0).max(1);
        out.cpu_busy = thread_cpu_ns().saturating_sub(self.cpu0) as f64 / wall as f64;
        out
    }
}

/// Counts packet `b` (read on socket `ci`) of point `point`: order, duplicates and its
/// latency from its departure stamp to `arrival` (`now` where the kernel gave none).
#[inline]
fn account(
    res: &mut SinkResult,
    b: &[u8],
    point: Option<u32>,
    ci: usize,
    arrival: Option<u64>,
    now: u64,
) {
    if b.len() < HEADER {
        return;
    }
    let u32_at = |o: usize| u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
    let u64_at = |o: usize| {
        let mut a = [0u8; 8];
        a.copy_from_slice(&b[o..o + 8]);
        u64::from_le_bytes(a)
    };
    if u32_at(0) != MAGIC {
        return;
    }
    let flags = u16::from_le_bytes([b[26], b[27]]);
    if Some(u32_at(4)) != point {
        res.stale += 1;
        return;
    }
    if flags & FLAG_MEASURED == 0 {
        return;
    }
    let n = res.classes.len();
    let class = u16::from_le_bytes([b[24], b[25]]) as usize;
    let c = &mut res.classes[if class < n { class } else { ci }];
    let seq = u64_at(8);
    if seq < c.max_seq {
        c.reordered += 1;
    } else if seq == c.max_seq {
        c.duplicates_or_stale += 1;
        return;
    } else {
        c.max_seq = seq;
    }
    c.received += 1;
    let arrival = arrival.unwrap_or_else(|| {
        res.unstamped += 1;
        now
    });
    let departed = u64_at(16);
    if arrival < departed {
        // Cannot happen with one clock and a stamp read before the send; counted
        // rather than folded into the histogram as 0.
        res.negative_latency += 1;
    }
    c.latency.record(arrival.saturating_sub(departed));
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
                ("full_reads".into(), self.full_reads),
                ("negative_latency".into(), self.negative_latency),
            ],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists() {
        assert_eq!(parse_cpu_list("0-2,5\n"), vec![0, 1, 2, 5]);
        assert_eq!(parse_cpu_list("1"), vec![1]);
        assert_eq!(parse_cpu_list(""), Vec::<u32>::new());
        assert_eq!(parse_cpu_list("x,3"), vec![3]);
    }

    #[test]
    fn saturation_counts_late_and_unsent_departures() {
        let mut g = GenResult {
            sent: vec![600, 400],
            ..GenResult::default()
        };
        assert!(!g.saturated());
        g.late = 10; // 1% of 1000: not more than 1%
        assert!(!g.saturated());
        g.late = 11;
        assert!(g.saturated());
        g.late = 0;
        g.behind_at_end = 11; // 11 of 1011 scheduled: more than 1%
        assert!(g.saturated());
        let s = g.engine_stats(&[0]);
        assert!(s.saturated);
        assert!(s
            .counters
            .iter()
            .any(|(k, v)| k == "behind_at_end" && *v == 11));
    }

    #[test]
    fn merge_keeps_the_worst_bound_and_sums_counts() {
        let a = GenResult {
            sent: vec![5],
            sent_total: 6,
            max_stamp_age_ns: 3_000,
            slow_sends: 1,
            tx_path: TxPath::UdpGso,
            ..GenResult::default()
        };
        let b = GenResult {
            sent: vec![7],
            sent_total: 8,
            max_stamp_age_ns: 9_000,
            tx_path: TxPath::Sendmmsg,
            tx_note: Some("fallback".into()),
            ..GenResult::default()
        };
        let m = GenResult::merge(&[a, b], &[vec![1], vec![0]], 2);
        assert_eq!(m.sent, vec![7, 5]);
        assert_eq!(m.sent_total, 14);
        assert_eq!(m.max_stamp_age_ns, 9_000);
        assert_eq!(m.slow_sends, 1);
        // One thread without GSO makes the merged path the fallback.
        assert_eq!(m.tx_path, TxPath::Sendmmsg);
        assert_eq!(m.tx_note.as_deref(), Some("fallback"));
    }
}
