//! The line-rate back end: frames made in the kernel by an XDP program run through
//! `BPF_PROG_RUN` with `BPF_F_TEST_XDP_LIVE_FRAMES` in the generator namespace, and
//! counted (then dropped) by an XDP program on the sink's veth. No per-packet work in
//! userspace on either side, so neither end limits the rates it measures; latency is
//! not measured (points carry `latency: None`).
//!
//! Path of a frame: `lr_gen` returns `XDP_TX`, which live-frames mode turns into a
//! redirect to the context's ingress device (the generator's veth); veth's
//! `ndo_xdp_xmit` puts the frame into the DUT ingress's ring (the RX queue of the
//! sending CPU, modulo the queue count) and schedules its NAPI instance, which builds
//! the skb from the frame, as a NIC driver does. veth accepts redirected frames only
//! when the receiving device runs NAPI: GRO on, or an XDP program attached; with
//! `gro = false` the lab attaches `lr_pass` (XDP_PASS) to the DUT ingress and says so.
//!
//! Rate control: each class has a schedule (`rate * share` frames per second); the
//! generator thread issues the frames that are due in repeat-batches (one
//! `BPF_PROG_RUN` call per class and batch) and sleeps until the next batch is due.
//! A thread that falls more than [`BEHIND_LIMIT_NS`] behind does not burst to catch up:
//! the frames it could not send are counted as `skipped`, so offered < requested says
//! so honestly.

use std::io;
use std::mem::{ManuallyDrop, MaybeUninit};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use libbpf_rs::libbpf_sys;
use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{Link, MapCore, MapFlags, OpenObject};
use napilab_core::EngineStats;
use napilab_trace::loader::words64;

use crate::checksum::internet_checksum;
use crate::netns::{enter, mono_ns, pin, set_irq_deferral, sh_in, thread_cpu_ns};
use crate::topology::{napi_threads, Lab, GEN_ADDR, SINK_ADDR};
use crate::traffic::sleep_until;

napilab_trace::bpf_skeleton!("linerate");

use skel::{LinerateSkel, LinerateSkelBuilder};

/// Most classes (src/bpf/linerate.h `LR_MAX_CLASSES`).
pub const MAX_CLASSES: usize = 16;
/// Ethernet + IPv4 + UDP header bytes (`LR_HDR_LEN`).
const HDR_LEN: usize = 42;
/// Payload magic (`LR_MAGIC`).
const MAGIC: u32 = 0x5258_4c4e;
const FLAG_MEASURED: u16 = 1;
/// Ethernet header bytes: a class's `size` is the IP packet size.
const ETH_LEN: u32 = 14;
/// UDP source port of every generated frame.
const SRC_PORT: u16 = 50_000;
/// Most frames one `BPF_PROG_RUN` call sends (all classes of a thread share it by
/// their shares); at 4 Mpps about 2 ms of traffic, so a stop is seen quickly.
pub const MAX_CHUNK: u32 = 8192;
/// A batch is issued when at least this much traffic (in time) is due. Each call
/// costs about 20 us of fixed work (the run's page pool), and a call whose frames are
/// still in flight when it returns keeps one of the kernel's 65534 XDP memory-model
/// ids for about a second (the page pool's deferred release): calls must stay in the
/// low thousands per second, or runs fail with ENOSPC. At 200 us a call's burst is
/// below the DUT's 256-frame veth ring up to about 1.2 Mpps.
pub const TICK_NS: u64 = 200_000;
/// The batch period when the DUT polls inline in the generator's own softirqs
/// ([`Pacing::Batches`] with `inline_dut`): every 64-frame XDP batch is polled by the
/// DUT at the call's next bottom-half enable, so a longer burst cannot overflow its
/// ring, and five times fewer calls (page pools) leave the kernel's release worker,
/// which competes with a normal-priority generator, idle. 1 ms keeps a burst (400
/// frames at 400 kpps) inside RPS's 1000-packet backlog.
pub const INLINE_TICK_NS: u64 = 1_000_000;
/// Fewest frames a batch call sends (one XDP batch): below about 320 kpps a call per
/// 200 us would carry fewer, and every call costs a page pool whose deferred release
/// competes with the generator for its CPU (at 15.6 kpps, one-CPU threaded: 6.5% of the
/// departures skipped with a call per 200 us).
pub const MIN_FRAMES_PER_CALL: u64 = 64;
/// Frames more than this much behind schedule are skipped, not sent in a burst.
pub const BEHIND_LIMIT_NS: u64 = 2_000_000;
/// ... and never more than this many frames beyond one regular batch (half the DUT's
/// 256-frame veth ring): a catch-up burst must not overflow the ring and pass for loss
/// at the DUT. Counted beyond the batch, because a limit on the whole batch left no
/// slack at high rates (at 500 kpps a batch is 100 frames: a wake-up 56 us late already
/// skipped frames).
pub const BEHIND_LIMIT_FRAMES: u64 = 128;
/// The sink's timer-driven polling (interrupt deferral on its veth): empty polls
/// before its notification is unmasked again, and the timer's period.
pub const SINK_DEFER_HARD_IRQS: u32 = 100;
pub const SINK_POLL_NS: u64 = 50_000;
/// Frames per XDP batch inside one call (the kernel's default is 64, its maximum 256).
pub const XDP_BATCH: u32 = 64;

/// One class as the back end sends it.
#[derive(Clone, Debug)]
pub struct LrClass {
    /// The class's index in the scenario: its counter slot and payload class id.
    pub id: u16,
    pub port: u16,
    /// IP packet size, bytes.
    pub size: u32,
    /// Fraction of its generator thread's rate.
    pub share: f64,
}

/// One generator thread's job.
#[derive(Clone, Debug)]
pub struct LrGenSpec {
    pub classes: Vec<LrClass>,
    /// Requested packets per second (all of the thread's classes).
    pub rate_pps: f64,
    pub warmup: Duration,
    pub duration: Duration,
    pub point: u32,
    pub cpus: Vec<u32>,
    pub pacing: Pacing,
}

/// How a generator thread keeps its schedule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pacing {
    /// One call per [`TICK_NS`] batch, sleeping in between, at this SCHED_FIFO
    /// priority (None: normal scheduling). Frames leave in bursts of a batch; the
    /// CPU is free between batches, so it suits a CPU shared with DUT work.
    Batches {
        fifo: Option<u32>,
        /// The DUT's NAPI polls inline in this thread's softirqs (softirq mode: on
        /// veth the sender's CPU polls): batches of [`INLINE_TICK_NS`] and catch-up
        /// up to [`BEHIND_LIMIT_NS`], since bursts cannot overflow the DUT's ring.
        inline_dut: bool,
    },
    /// One long call after another ([`PACED_RUNS_PER_CALL`] runs each), the program
    /// sending each frame when it is due and dropping the run otherwise
    /// (`lr_pace` in linerate.h): frames leave one by one on schedule and the
    /// kernel's per-call page pools are few, but the thread spins on its CPU (nice
    /// [`PACED_NICE`], SCHED_OTHER: a real-time spinner would be throttled 50 ms a
    /// second). For a thread with one class.
    InKernel {
        /// The thread shares its CPU with a threaded DUT poller (or RPS work): it
        /// runs SCHED_IDLE instead, so it spins only in time the DUT leaves idle and
        /// every wake-up of the DUT's (or the sink's) poller preempts it at once.
        /// Why not batches there: each batch call's page pool still holds frames
        /// when the call returns (the DUT runs only after it), and the deferred
        /// release of thousands of pools a second took 21% of the shared CPU
        /// (`perf record -a -g` at 600 kpps, one-CPU threaded: page_pool_release_retry,
        /// mem_allocator_disconnect); the DUT also gets the CPU only 30-60 us into a
        /// call, by when a burst has overflowed its 256-frame ring. Measured by the
        /// search of one-CPU threaded on this machine: 307.8 kpps with 200 us batches,
        /// 456.2 kpps paced at SCHED_IDLE (docs/lab.md).
        beside_dut: bool,
    },
}

/// Program runs per call with in-kernel pacing: about 12 ms at the ~190 ns a run
/// measured here (about 80 calls a second), so a phase ends and Ctrl-C is seen within
/// one call while the calls, and their page pools, stay few.
pub const PACED_RUNS_PER_CALL: u32 = 65_536;
/// Most departures an in-kernel paced class sends back to back after its thread was
/// held off the CPU (half the DUT's 256-frame veth ring, about 20 us of sending);
/// beyond that they are skipped (counted). With 32, every time the sink's poller held
/// the thread off for more than 80 us at 400 kpps frames were skipped.
pub const PACED_SLACK_FRAMES: u64 = 128;
/// Nice value of an in-kernel paced generator: ahead of ordinary processes on its CPU
/// (about 9:1), behind every real-time thread (the sink's poller preempts it).
pub const PACED_NICE: i32 = -10;

/// What a generator thread saw from userspace; the authoritative frame counts come
/// from the program's own counters ([`Counts`]).
#[derive(Clone, Debug, Default)]
pub struct LrGenResult {
    /// Frames issued in the measurement window, per class of the spec.
    pub issued: Vec<u64>,
    /// Frames issued in the whole run (warm-up included).
    pub issued_total: u64,
    /// Frames skipped because the thread was more than BEHIND_LIMIT_NS behind.
    pub skipped: u64,
    /// `BPF_PROG_RUN` calls and failed calls.
    pub calls: u64,
    pub errors: u64,
    pub first_error: Option<String>,
    /// 50 ms waits after ENOSPC (no XDP memory-model id left).
    pub enospc_waits: u64,
    /// Measurement window actually covered, seconds.
    pub window_s: f64,
    /// Thread CPU time / wall time over the whole run.
    pub cpu_busy: f64,
    pub interrupted: bool,
    /// With in-kernel pacing: runs of the measurement window that found no frame due
    /// (the generator's headroom: its CPU is busy by construction).
    pub idle_runs: Option<u64>,
}

/// Frame and byte counters of the programs, summed over CPUs.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Counts {
    /// Generator: frames emitted per class, `[warm-up, measured]`.
    pub gen: Vec<[u64; 2]>,
    pub gen_bytes: u64,
    /// Sink: measured frames of the current point per class.
    pub sink: Vec<u64>,
    pub sink_bytes: u64,
    /// Sink: other frames to a class's port (warm-up, earlier points).
    pub sink_other: Vec<u64>,
}

impl Counts {
    /// `self - before`, per counter.
    pub fn since(&self, before: &Counts) -> Counts {
        let d = |a: u64, b: u64| a.saturating_sub(b);
        Counts {
            gen: self
                .gen
                .iter()
                .zip(&before.gen)
                .map(|(a, b)| [d(a[0], b[0]), d(a[1], b[1])])
                .collect(),
            gen_bytes: d(self.gen_bytes, before.gen_bytes),
            sink: self
                .sink
                .iter()
                .zip(&before.sink)
                .map(|(a, b)| d(*a, *b))
                .collect(),
            sink_bytes: d(self.sink_bytes, before.sink_bytes),
            sink_other: self
                .sink_other
                .iter()
                .zip(&before.sink_other)
                .map(|(a, b)| d(*a, *b))
                .collect(),
        }
    }
}

/// The loaded programs of one configuration, attached to its lab. Dropping it
/// detaches the programs (the links) and unloads them (the object).
pub struct LineRate {
    // Drop order matters: the links before the skeleton, the skeleton before the
    // storage it borrows.
    links: Vec<Link>,
    skel: ManuallyDrop<LinerateSkel<'static>>,
    storage: *mut MaybeUninit<OpenObject>,
    gen_fd: OwnedFd,
    gen_ns: String,
    gen_dev: String,
    sink_dev: String,
    sink_ns: String,
    /// Interrupt deferral was set on the sink's veth (restored on drop).
    sink_deferral: bool,
    dut_mac: [u8; 6],
    gen_mac: [u8; 6],
    classes: usize,
    /// What the back end changed in the lab, as (setting, how) notes.
    pub applied: Vec<(String, String)>,
}

// SAFETY: the skeleton is Send + Sync (libbpf-cargo); `storage` is only touched in
// Drop, by the owner.
unsafe impl Send for LineRate {}

impl Drop for LineRate {
    fn drop(&mut self) {
        self.links.clear();
        if self.sink_deferral {
            // Best effort: the namespace may already be gone with the run.
            let _ = set_irq_deferral(&self.sink_ns, &self.sink_dev, 0, 0);
        }
        // SAFETY: the skeleton is dropped once, here, before the storage it borrows;
        // `storage` came from Box::into_raw in `start` and is freed once.
        unsafe {
            ManuallyDrop::drop(&mut self.skel);
            drop(Box::from_raw(self.storage));
        }
    }
}

#[derive(Clone, Copy)]
enum Prog {
    Gen,
    Sink,
    Pass,
}

/// Why the back end cannot run here (the runner falls back to paced and says so).
#[derive(Debug)]
pub struct Unavailable(pub String);

impl std::fmt::Display for Unavailable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

fn mac_of(ns: &str, dev: &str) -> io::Result<[u8; 6]> {
    let text = sh_in(ns, &format!("cat /sys/class/net/{dev}/address"))?;
    parse_mac(text.trim())
        .ok_or_else(|| io::Error::other(format!("{dev} in {ns}: unreadable MAC {text:?}")))
}

fn parse_mac(s: &str) -> Option<[u8; 6]> {
    let mut out = [0u8; 6];
    let mut parts = s.split(':');
    for b in &mut out {
        *b = u8::from_str_radix(parts.next()?, 16).ok()?;
    }
    parts.next().is_none().then_some(out)
}

/// One generated frame: Ethernet (gen -> DUT ingress), IPv4 (gen -> sink, DF, TTL 64,
/// header checksum), UDP (no checksum, allowed for IPv4) and the payload header.
pub fn build_frame(
    dst_mac: [u8; 6],
    src_mac: [u8; 6],
    class: &LrClass,
    point: u32,
    measured: bool,
) -> Vec<u8> {
    let ip_len = class.size.max(HDR_LEN as u32 - ETH_LEN + 12) as usize;
    let mut f = vec![0u8; ETH_LEN as usize + ip_len];
    f[0..6].copy_from_slice(&dst_mac);
    f[6..12].copy_from_slice(&src_mac);
    f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
    let ip = &mut f[14..34];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&(ip_len as u16).to_be_bytes());
    ip[6..8].copy_from_slice(&0x4000u16.to_be_bytes());
    ip[8] = 64;
    ip[9] = 17;
    ip[12..16].copy_from_slice(&GEN_ADDR.octets());
    ip[16..20].copy_from_slice(&SINK_ADDR.octets());
    let c = internet_checksum(ip);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    let udp = &mut f[34..42];
    udp[0..2].copy_from_slice(&SRC_PORT.to_be_bytes());
    udp[2..4].copy_from_slice(&class.port.to_be_bytes());
    udp[4..6].copy_from_slice(&((ip_len - 20) as u16).to_be_bytes());
    let p = &mut f[42..54];
    p[0..4].copy_from_slice(&MAGIC.to_le_bytes());
    p[4..8].copy_from_slice(&point.to_le_bytes());
    p[8..10].copy_from_slice(&class.id.to_le_bytes());
    let flags = if measured { FLAG_MEASURED } else { 0 };
    p[10..12].copy_from_slice(&flags.to_le_bytes());
    f
}

/// One `BPF_PROG_RUN` in live-frames mode: `repeat` copies of `frame` through `fd`,
/// entering the stack as if received on `ifindex` (so XDP_TX leaves through it).
///
/// Hand-written on libbpf's C call rather than libbpf-rs's `Program::test_run`:
/// that one has no `batch_size`, and generator threads hold only a program fd.
fn prog_run(fd: &OwnedFd, frame: &[u8], ifindex: u32, repeat: u32) -> io::Result<()> {
    let mut ctx = libbpf_sys::xdp_md {
        data: 0,
        data_end: frame.len() as u32,
        ingress_ifindex: ifindex,
        ..Default::default()
    };
    // SAFETY: bpf_test_run_opts is plain data; zero is "not set" for every field.
    let mut opts: libbpf_sys::bpf_test_run_opts = unsafe { std::mem::zeroed() };
    opts.sz = std::mem::size_of::<libbpf_sys::bpf_test_run_opts>() as _;
    opts.data_in = frame.as_ptr().cast();
    opts.data_size_in = frame.len() as u32;
    opts.ctx_in = (&mut ctx as *mut libbpf_sys::xdp_md).cast();
    opts.ctx_size_in = std::mem::size_of::<libbpf_sys::xdp_md>() as u32;
    opts.repeat = repeat as _;
    opts.flags = libbpf_sys::BPF_F_TEST_XDP_LIVE_FRAMES;
    opts.batch_size = XDP_BATCH;
    // SAFETY: valid program fd; data and ctx outlive the call, sizes match.
    let rc = unsafe { libbpf_sys::bpf_prog_test_run_opts(fd.as_raw_fd(), &mut opts) };
    if rc < 0 {
        return Err(io::Error::from_raw_os_error(-rc));
    }
    Ok(())
}

fn ifindex_of(dev: &str) -> io::Result<u32> {
    let c = std::ffi::CString::new(dev).map_err(io::Error::other)?;
    // SAFETY: valid NUL-terminated name.
    let i = unsafe { libc::if_nametoindex(c.as_ptr()) };
    if i == 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(i)
}

/// What a live-frames error means here.
fn explain_run_error(e: &io::Error, gen_dev: &str) -> String {
    match e.raw_os_error() {
        Some(libc::EINVAL) => format!("BPF_PROG_RUN with BPF_F_TEST_XDP_LIVE_FRAMES failed with EINVAL: this kernel does not support XDP live frames (Linux 5.18 or later; {e})"),
        Some(libc::EOPNOTSUPP) => format!("{gen_dev} cannot transmit XDP frames (ndo_xdp_xmit, EOPNOTSUPP): the DUT ingress must run NAPI (GRO on or an XDP program)"),
        Some(libc::ENOSPC) => format!("BPF_PROG_RUN on {gen_dev} failed with ENOSPC: the kernel ran out of XDP memory-model ids (each call whose frames are still in flight keeps one for about a second); fewer, larger calls avoid it ({e})"),
        Some(libc::EPERM) | Some(libc::EACCES) => format!("BPF_PROG_RUN was refused ({e}): the line-rate back end needs root (CAP_BPF, CAP_NET_ADMIN)"),
        _ => format!("BPF_PROG_RUN (XDP live frames) on {gen_dev} failed: {e}"),
    }
}

/// Total on-CPU time of tasks, ns (`/proc/<pid>/schedstat`, first field).
fn tasks_cpu_ns(pids: &[i32]) -> u64 {
    pids.iter()
        .filter_map(|p| std::fs::read_to_string(format!("/proc/{p}/schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}

impl LineRate {
    /// Loads the programs, attaches the sink counter (and, with the DUT's GRO off,
    /// the pass-through program on its ingress), and sends one probe frame to check
    /// the whole path. `classes[i].id` must be `i` (scenario order).
    pub fn start(lab: &Lab, classes: &[LrClass], dut_gro: bool) -> Result<LineRate, Unavailable> {
        let un = |s: String| Unavailable(s);
        if classes.is_empty() || classes.len() > MAX_CLASSES {
            return Err(un(format!(
                "the line-rate back end sends 1 to {MAX_CLASSES} classes, the scenario has {}",
                classes.len()
            )));
        }
        let storage = Box::into_raw(Box::new(MaybeUninit::<OpenObject>::uninit()));
        // SAFETY: `storage` stays allocated until LineRate's Drop (or the error path
        // below) frees it, after the skeleton that borrows it is gone.
        let storage_ref: &'static mut MaybeUninit<OpenObject> = unsafe { &mut *storage };
        let loaded = LinerateSkelBuilder::default()
            .open(storage_ref)
            .and_then(|o| o.load());
        let skel = match loaded {
            Ok(s) => s,
            Err(e) => {
                // SAFETY: nothing borrows the storage any more (open/load failed and
                // dropped what they made).
                drop(unsafe { Box::from_raw(storage) });
                return Err(un(format!("cannot load the line-rate BPF programs (src/bpf/linerate.bpf.c): {e}: the back end needs root (CAP_BPF) and a kernel with XDP")));
            }
        };
        let gen_fd = match skel.progs.lr_gen.as_fd().try_clone_to_owned() {
            Ok(fd) => fd,
            Err(e) => {
                drop(skel);
                // SAFETY: as above.
                drop(unsafe { Box::from_raw(storage) });
                return Err(un(format!("duplicating the generator program's fd: {e}")));
            }
        };
        let mut lr = LineRate {
            links: Vec::new(),
            skel: ManuallyDrop::new(skel),
            storage,
            gen_fd,
            gen_ns: lab.gen_ns.clone(),
            gen_dev: lab.gen_dev.clone(),
            sink_dev: lab.sink_dev.clone(),
            sink_ns: lab.sink_ns.clone(),
            sink_deferral: false,
            dut_mac: [0; 6],
            gen_mac: [0; 6],
            classes: classes.len(),
            applied: Vec::new(),
        };
        lr.dut_mac = mac_of(&lab.dut_ns, &lab.dut_in).map_err(|e| un(e.to_string()))?;
        lr.gen_mac = mac_of(&lab.gen_ns, &lab.gen_dev).map_err(|e| un(e.to_string()))?;
        {
            let Some(bss) = lr.skel.maps.bss_data.as_deref_mut() else {
                return Err(un("the line-rate BPF object has no mmapped .bss (kernel without BPF_F_MMAPABLE arrays?)".into()));
            };
            for (i, c) in classes.iter().enumerate() {
                if usize::from(c.id) != i {
                    return Err(un(format!("class {i} has id {}", c.id)));
                }
                let f = build_frame(lr.dut_mac, lr.gen_mac, c, 0, false);
                bss.gen_tmpl[i].hdr.copy_from_slice(&f[..HDR_LEN]);
                bss.sink_ports[i] = c.port;
            }
            bss.sink_point = 0;
            bss.sink_nports = classes.len() as u32;
        }
        if !dut_gro {
            let link = lr
                .attach_in(&lab.dut_ns, &lab.dut_in, Prog::Pass)
                .map_err(|e| un(format!("attaching the pass-through XDP program to {} (needed because its GRO is off): {e}", lab.dut_in)))?;
            lr.links.push(link);
            lr.applied.push((
                format!("{} xdp", lab.dut_in),
                "lr_pass (XDP_PASS): veth takes XDP frames only into a NAPI-enabled peer; GRO is off".into(),
            ));
        }
        let link = lr
            .attach_in(&lab.sink_ns, &lab.sink_dev, Prog::Sink)
            .map_err(|e| {
                un(format!(
                    "attaching the counting XDP program to the sink's {}: {e}",
                    lab.sink_dev
                ))
            })?;
        lr.links.push(link);
        lr.applied.push((
            format!("{} xdp", lab.sink_dev),
            "lr_sink (count per class, XDP_DROP)".into(),
        ));
        // The sink's poller is apparatus. Frames that arrive one by one (in-kernel
        // pacing) woke it for each frame, about 7 us a wake-up on this VM (0.78 of
        // CPU 0 at 100 kpps), leaving the generator little of the CPU they share.
        // Interrupt deferral keeps veth's notification masked and polls from a timer
        // instead, a batch per SINK_POLL_NS. Line-rate points carry no latency, so the
        // wait costs no measurement; `Drop` restores the defaults for a paced sink.
        set_irq_deferral(
            &lab.sink_ns,
            &lab.sink_dev,
            SINK_DEFER_HARD_IRQS,
            SINK_POLL_NS,
        )
        .map_err(|e| {
            un(format!(
                "setting interrupt deferral on the sink's {}: {e}",
                lab.sink_dev
            ))
        })?;
        lr.sink_deferral = true;
        lr.applied.push((
            format!("{} napi_defer_hard_irqs, gro_flush_timeout", lab.sink_dev),
            format!("{SINK_DEFER_HARD_IRQS}, {SINK_POLL_NS} ns (the sink polls from a timer)"),
        ));
        // BPF_PROG_RUN with repeat > 1 adds the program to the kernel's XDP
        // dispatcher before the run and removes it after, and each change waits for
        // an RCU grace period: 16-48 ms per call on this machine, which would cap the
        // calls at a few dozen per second. A program that is attached somewhere stays
        // in the dispatcher, so the run changes nothing: attach lr_gen (generic
        // mode) to the generator namespace's lo, where it passes everything that is
        // not a generated frame and nothing is sent anyway.
        let link = lr.attach_in(&lab.gen_ns, "lo", Prog::Gen).map_err(|e| {
            un(format!(
                "attaching the generator program to lo in {}: {e}",
                lab.gen_ns
            ))
        })?;
        lr.links.push(link);
        lr.applied.push((
            format!("{} lo xdp", lab.gen_ns),
            "lr_gen (generic XDP; keeps the program in the XDP dispatcher between BPF_PROG_RUN calls)".into(),
        ));
        lr.probe(&classes[0]).map_err(un)?;
        Ok(lr)
    }

    /// Attaches `lr_pass` (pass) or `lr_sink` to `dev` in `ns`, from a thread that
    /// entered the namespace (the ifindex is resolved there).
    fn attach_in(&self, ns: &str, dev: &str, which: Prog) -> io::Result<Link> {
        let skel = &*self.skel;
        std::thread::scope(|s| {
            s.spawn(|| -> io::Result<Link> {
                enter(ns)?;
                let ifindex = ifindex_of(dev)?;
                let prog = match which {
                    Prog::Pass => &skel.progs.lr_pass,
                    Prog::Sink => &skel.progs.lr_sink,
                    Prog::Gen => &skel.progs.lr_gen,
                };
                prog.attach_xdp(ifindex as i32)
                    .map_err(|e| io::Error::other(e.to_string()))
            })
            .join()
            .unwrap_or_else(|_| Err(io::Error::other("the attaching thread panicked")))
        })
    }

    /// Sends one warm-up frame of `class` and waits (up to 2 s) for the sink to count
    /// it: checks kernel support, MACs, routes and both programs at once.
    fn probe(&self, class: &LrClass) -> Result<(), String> {
        let before = self.counts().map_err(|e| e.to_string())?;
        let frame = build_frame(self.dut_mac, self.gen_mac, class, 0, false);
        let fd = self
            .gen_fd
            .try_clone()
            .map_err(|e| format!("duplicating the program fd: {e}"))?;
        let (ns, dev) = (self.gen_ns.clone(), self.gen_dev.clone());
        let sent = std::thread::spawn(move || -> io::Result<()> {
            enter(&ns)?;
            prog_run(&fd, &frame, ifindex_of(&dev)?, 1)
        })
        .join()
        .unwrap_or_else(|_| Err(io::Error::other("the probe thread panicked")));
        if let Err(e) = sent {
            return Err(explain_run_error(&e, &self.gen_dev));
        }
        let deadline = Instant::now() + Duration::from_secs(2);
        loop {
            let d = self.counts().map_err(|e| e.to_string())?.since(&before);
            if d.sink_other[class.id as usize] >= 1 {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "a probe frame sent by XDP live frames on {} (generator counted {}) did not reach the sink's XDP counter on {} within 2 s",
                    self.gen_dev, d.gen[class.id as usize][0], self.sink_dev
                ));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Makes the sink count the measured frames of `point` from now on.
    pub fn begin(&mut self, point: u32) {
        if let Some(bss) = self.skel.maps.bss_data.as_deref_mut() {
            // SAFETY: a u32 in the mmapped .bss; the BPF program reads it concurrently,
            // which an aligned volatile store keeps whole.
            unsafe { std::ptr::write_volatile(&mut bss.sink_point, point) };
        }
    }

    /// Reads both programs' counters (summed over CPUs).
    pub fn counts(&self) -> libbpf_rs::Result<Counts> {
        let read = |map: &libbpf_rs::MapMut<'_>, key: u32| -> libbpf_rs::Result<(u64, u64)> {
            let per_cpu = map
                .lookup_percpu(&key.to_ne_bytes(), MapFlags::ANY)?
                .unwrap_or_default();
            Ok(per_cpu.iter().fold((0, 0), |(p, b), v| {
                let w = words64(v, 2).unwrap_or_default();
                let word = |i: usize| w.get(i).copied().unwrap_or(0);
                (p + word(0), b + word(1))
            }))
        };
        let maps = &self.skel.maps;
        let mut c = Counts::default();
        for i in 0..self.classes as u32 {
            let (w, wb) = read(&maps.gen_counts, i * 2)?;
            let (m, mb) = read(&maps.gen_counts, i * 2 + 1)?;
            c.gen.push([w, m]);
            c.gen_bytes += wb + mb;
            let (s, sb) = read(&maps.sink_counts, i)?;
            c.sink.push(s);
            c.sink_bytes += sb;
            let (o, _) = read(&maps.sink_counts, MAX_CLASSES as u32 + i)?;
            c.sink_other.push(o);
        }
        Ok(c)
    }

    /// On-CPU time of the sink veth's NAPI kthreads (where `lr_sink` runs), ns; None
    /// when they are not found (sink NAPI not threaded).
    pub fn sink_cpu_ns(&self) -> Option<u64> {
        let pids: Vec<i32> = napi_threads(&self.sink_dev)
            .into_iter()
            .map(|(p, _)| p)
            .collect();
        (!pids.is_empty()).then(|| tasks_cpu_ns(&pids))
    }

    /// Starts a generator thread; join it for the userspace view of the run.
    pub fn start_generator(
        &self,
        spec: LrGenSpec,
        stop: Arc<AtomicBool>,
    ) -> JoinHandle<io::Result<LrGenResult>> {
        let fd = self.gen_fd.try_clone();
        let pace_fd = self.skel.maps.gen_pace.as_fd().try_clone_to_owned();
        let (ns, dev) = (self.gen_ns.clone(), self.gen_dev.clone());
        let (dst, src) = (self.dut_mac, self.gen_mac);
        std::thread::spawn(move || {
            let fd = fd?;
            pin(0, &spec.cpus)?;
            match spec.pacing {
                Pacing::InKernel { beside_dut: false } => {
                    // SAFETY: this thread (tid), a plain integer priority.
                    let tid = unsafe { libc::gettid() } as libc::id_t;
                    // SAFETY: setpriority with valid arguments.
                    if unsafe { libc::setpriority(libc::PRIO_PROCESS, tid, PACED_NICE) } != 0 {
                        return Err(io::Error::last_os_error());
                    }
                }
                Pacing::InKernel { beside_dut: true } => {
                    let param = libc::sched_param { sched_priority: 0 };
                    // SAFETY: this thread (0), a valid sched_param; the policy ends
                    // with the thread.
                    if unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) } != 0 {
                        return Err(io::Error::last_os_error());
                    }
                }
                Pacing::Batches { .. } => {}
            }
            if let Pacing::Batches { fifo: Some(p), .. } = spec.pacing {
                let param = libc::sched_param {
                    sched_priority: p as i32,
                };
                // SAFETY: this thread (0), a valid sched_param; the policy ends with
                // the thread.
                if unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) } != 0 {
                    return Err(io::Error::last_os_error());
                }
            }
            enter(&ns)?;
            let ifindex = ifindex_of(&dev)?;
            let port = GenPort {
                fd: &fd,
                ifindex,
                dev: &dev,
                dst,
                src,
            };
            match spec.pacing {
                Pacing::InKernel { .. } => generate_paced(&port, &pace_fd?, &spec, &stop),
                Pacing::Batches { .. } => generate(&port, &spec, &stop),
            }
        })
    }
}

/// The pacing state of one class, as the map holds it (`struct lr_pace`).
#[derive(Clone, Copy, Debug, Default)]
#[repr(C)]
struct PaceState {
    start_ns: u64,
    end_ns: u64,
    rate_pps: u64,
    slack: u64,
    sent: u64,
    skipped: u64,
    idle_runs: u64,
}

impl PaceState {
    fn write(&self, map: &OwnedFd, class: u32) -> io::Result<()> {
        // SAFETY: key and value point to live data of the map's key and value sizes.
        let rc = unsafe {
            libbpf_sys::bpf_map_update_elem(
                map.as_raw_fd(),
                (&class as *const u32).cast(),
                (self as *const PaceState).cast(),
                0,
            )
        };
        if rc < 0 {
            return Err(io::Error::from_raw_os_error(-rc));
        }
        Ok(())
    }

    fn read(map: &OwnedFd, class: u32) -> io::Result<PaceState> {
        let mut v = PaceState::default();
        // SAFETY: as in write; the value buffer is the map's value size.
        let rc = unsafe {
            libbpf_sys::bpf_map_lookup_elem(
                map.as_raw_fd(),
                (&class as *const u32).cast(),
                (&mut v as *mut PaceState).cast(),
            )
        };
        if rc < 0 {
            return Err(io::Error::from_raw_os_error(-rc));
        }
        Ok(v)
    }
}

/// Where a generator thread's frames go: the program, the generator's veth (the
/// context's ingress device, by index and name) and the frames' MAC addresses.
#[derive(Clone, Copy)]
struct GenPort<'a> {
    fd: &'a OwnedFd,
    ifindex: u32,
    dev: &'a str,
    dst: [u8; 6],
    src: [u8; 6],
}

/// In-kernel pacing ([`Pacing::InKernel`]): per phase, the class's schedule goes into
/// the `gen_pace` map and long calls run until the phase ends; the program decides
/// per run whether a frame is due. One class per thread.
fn generate_paced(
    port: &GenPort<'_>,
    pace: &OwnedFd,
    spec: &LrGenSpec,
    stop: &AtomicBool,
) -> io::Result<LrGenResult> {
    let [class] = spec.classes.as_slice() else {
        return Err(io::Error::other(format!(
            "in-kernel pacing takes one class per generator thread, this one has {}",
            spec.classes.len()
        )));
    };
    let key = u32::from(class.id);
    let rate = (spec.rate_pps * class.share).max(0.0).round() as u64;
    let mut res = LrGenResult {
        issued: vec![0],
        ..LrGenResult::default()
    };
    let cpu0 = thread_cpu_ns();
    let wall0 = mono_ns();
    let start = wall0 + 2_000_000;
    let warm_end = start + spec.warmup.as_nanos() as u64;
    let mut measured_from = warm_end;
    let mut end = warm_end + spec.duration.as_nanos() as u64;
    for measured in [false, true] {
        // The measured phase starts when the warm-up's last call returned (at most
        // one call late), and keeps its full length.
        let now = mono_ns();
        let (p_start, p_end) = if measured {
            measured_from = now.max(warm_end);
            end = measured_from + spec.duration.as_nanos() as u64;
            (measured_from, end)
        } else {
            (start, warm_end)
        };
        if p_end <= p_start {
            continue;
        }
        let frame = build_frame(port.dst, port.src, class, spec.point, measured);
        PaceState {
            start_ns: p_start,
            end_ns: p_end,
            rate_pps: rate.max(1),
            slack: PACED_SLACK_FRAMES,
            ..PaceState::default()
        }
        .write(pace, key)?;
        while mono_ns() < p_end {
            if stop.load(Ordering::Relaxed) {
                res.interrupted = true;
                break;
            }
            res.calls += 1;
            if let Err(e) = prog_run(port.fd, &frame, port.ifindex, PACED_RUNS_PER_CALL) {
                res.errors += 1;
                if res.first_error.is_none() {
                    res.first_error = Some(explain_run_error(&e, port.dev));
                }
                if e.raw_os_error() != Some(libc::EINTR) && res.errors > 100 {
                    return Err(io::Error::other(
                        res.first_error.clone().unwrap_or_default(),
                    ));
                }
            }
        }
        let got = PaceState::read(pace, key)?;
        res.issued_total += got.sent;
        if measured {
            res.issued = vec![got.sent];
            // Departures the program never reached (the thread was held off its CPU
            // at the end of the window) did not leave either: count them as skipped.
            let scheduled = (rate as f64 * (p_end - p_start) as f64 / 1e9) as u64;
            let unreached = if res.interrupted {
                0
            } else {
                scheduled.saturating_sub(got.sent + got.skipped)
            };
            res.skipped = got.skipped + unreached;
            res.idle_runs = Some(got.idle_runs);
        }
        if res.interrupted {
            break;
        }
    }
    // Back to batch mode for the next user of the map (and the thread's next spec).
    PaceState::default().write(pace, key)?;
    let wall = mono_ns().saturating_sub(wall0).max(1);
    res.cpu_busy = thread_cpu_ns().saturating_sub(cpu0) as f64 / wall as f64;
    res.window_s = mono_ns().min(end).saturating_sub(measured_from) as f64 / 1e9;
    Ok(res)
}

fn generate(port: &GenPort<'_>, spec: &LrGenSpec, stop: &AtomicBool) -> io::Result<LrGenResult> {
    let GenPort { dst, src, .. } = *port;
    // Precise wake-ups: the default 50 us timer slack would bunch batches.
    // SAFETY: prctl with an integer argument.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1u64, 0u64, 0u64, 0u64) };
    let n = spec.classes.len();
    let plan = BatchPlan::new(spec);
    let mut res = LrGenResult {
        issued: vec![0; n],
        ..LrGenResult::default()
    };
    let start = mono_ns() + 2_000_000;
    let measure_from = start + spec.warmup.as_nanos() as u64;
    let end = measure_from + spec.duration.as_nanos() as u64;
    let cpu0 = thread_cpu_ns();
    let wall0 = mono_ns();
    'phases: for (measured, p_start, p_end) in
        [(false, start, measure_from), (true, measure_from, end)]
    {
        if p_end <= p_start {
            continue;
        }
        let frames: Vec<Vec<u8>> = spec
            .classes
            .iter()
            .map(|c| build_frame(dst, src, c, spec.point, measured))
            .collect();
        let mut issued = vec![0u64; n];
        let mut skipped = vec![0u64; n];
        let mut due = vec![0u64; n];
        sleep_until(p_start);
        loop {
            if stop.load(Ordering::Relaxed) {
                res.interrupted = true;
                break 'phases;
            }
            let now = mono_ns();
            if now >= p_end {
                break;
            }
            let elapsed = (now - p_start) as f64 / 1e9;
            let (ready, wake) = plan.due(elapsed, p_start, p_end, &issued, &mut skipped, &mut due);
            // Frames due but fewer than a batch are sent when the phase would end
            // before the next batch is due.
            let last_chance = wake >= p_end && due.iter().any(|d| *d > 0);
            if !(ready || last_chance) {
                sleep_until(wake.min(now + 10_000_000));
                continue;
            }
            send_due(port, &plan, &frames, &due, &mut issued, &mut res)?;
        }
        res.skipped += skipped.iter().sum::<u64>() * u64::from(measured);
        if measured {
            res.issued = issued;
        }
    }
    let wall = mono_ns().saturating_sub(wall0).max(1);
    res.cpu_busy = thread_cpu_ns().saturating_sub(cpu0) as f64 / wall as f64;
    res.window_s = mono_ns().min(end).saturating_sub(measure_from) as f64 / 1e9;
    Ok(res)
}

/// Per class, the batch generator's figures: its rate, the most frames one call may
/// send, the fewest worth a call, and how far behind it may fall before frames are
/// skipped rather than sent late.
struct BatchPlan {
    rate: Vec<f64>,
    cap: Vec<u64>,
    min_batch: Vec<u64>,
    behind: Vec<u64>,
}

impl BatchPlan {
    fn new(spec: &LrGenSpec) -> BatchPlan {
        let n = spec.classes.len();
        let rate: Vec<f64> = spec
            .classes
            .iter()
            .map(|c| (spec.rate_pps * c.share).max(0.0))
            .collect();
        // Per call, at most MAX_CHUNK frames over all classes, split by share: at full
        // speed the classes then get their shares of what the CPU can send.
        let cap: Vec<u64> = spec
            .classes
            .iter()
            .map(|c| ((f64::from(MAX_CHUNK) * c.share).round() as u64).max(1))
            .collect();
        let inline_dut = matches!(
            spec.pacing,
            Pacing::Batches {
                inline_dut: true,
                ..
            }
        );
        let tick = if inline_dut { INLINE_TICK_NS } else { TICK_NS };
        let min_batch: Vec<u64> = (0..n)
            .map(|i| {
                ((rate[i] * tick as f64 / 1e9) as u64)
                    .max(MIN_FRAMES_PER_CALL)
                    .clamp(1, cap[i])
            })
            .collect();
        let behind: Vec<u64> = (0..n)
            .map(|i| {
                let catch_up = (rate[i] * BEHIND_LIMIT_NS as f64 / 1e9) as u64;
                let catch_up = if inline_dut {
                    catch_up
                } else {
                    catch_up.min(BEHIND_LIMIT_FRAMES)
                };
                min_batch[i] + catch_up
            })
            .collect();
        BatchPlan {
            rate,
            cap,
            min_batch,
            behind,
        }
    }

    /// The frames due per class `elapsed` seconds into the phase (into `due`; those
    /// beyond the catch-up limit go to `skipped`), whether any class has a batch
    /// ready, and else when the next batch is due.
    #[inline]
    fn due(
        &self,
        elapsed: f64,
        p_start: u64,
        p_end: u64,
        issued: &[u64],
        skipped: &mut [u64],
        due: &mut [u64],
    ) -> (bool, u64) {
        let mut ready = false;
        let mut wake = p_end;
        for i in 0..due.len() {
            let target = (self.rate[i] * elapsed) as u64;
            let mut d = target.saturating_sub(issued[i] + skipped[i]);
            if d > self.behind[i] {
                skipped[i] += d - self.behind[i];
                d = self.behind[i];
            }
            due[i] = d;
            if d >= self.min_batch[i] {
                ready = true;
            } else if self.rate[i] > 0.0 {
                let at = (issued[i] + skipped[i] + self.min_batch[i]) as f64 / self.rate[i];
                wake = wake.min(p_start + (at * 1e9) as u64);
            }
        }
        (ready, wake)
    }
}

/// One program run per class with frames due (at most its cap). Errors are counted;
/// ENOSPC waits for page pools to come back; after 100 errors the generator gives up.
#[inline]
fn send_due(
    port: &GenPort<'_>,
    plan: &BatchPlan,
    frames: &[Vec<u8>],
    due: &[u64],
    issued: &mut [u64],
    res: &mut LrGenResult,
) -> io::Result<()> {
    for i in 0..due.len() {
        let k = due[i].min(plan.cap[i]);
        if k == 0 {
            continue;
        }
        res.calls += 1;
        match prog_run(port.fd, &frames[i], port.ifindex, k as u32) {
            Ok(()) => {
                issued[i] += k;
                res.issued_total += k;
            }
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => {
                // A signal (Ctrl-C): the frames sent so far are in the
                // program's counters; the loop sees `stop` next.
                res.errors += 1;
            }
            Err(e) => {
                res.errors += 1;
                if res.first_error.is_none() {
                    res.first_error = Some(explain_run_error(&e, port.dev));
                }
                if e.raw_os_error() == Some(libc::ENOSPC) {
                    // Memory-model ids come back as earlier calls' page pools
                    // are released (about a second): wait instead of failing;
                    // the frames not sent show in the offered load.
                    sleep_until(mono_ns() + 50_000_000);
                    res.enospc_waits += 1;
                    if res.enospc_waits < 200 {
                        continue;
                    }
                }
                if res.errors > 100 {
                    return Err(io::Error::other(
                        res.first_error.clone().unwrap_or_default(),
                    ));
                }
            }
        }
    }
    Ok(())
}

impl LrGenResult {
    /// Merges the results of one thread per queue (CPU use: mean over threads).
    pub fn merge(parts: &[LrGenResult]) -> LrGenResult {
        let mut out = LrGenResult {
            window_s: if parts.is_empty() { 0.0 } else { f64::MAX },
            ..LrGenResult::default()
        };
        for p in parts {
            out.issued_total += p.issued_total;
            out.skipped += p.skipped;
            out.calls += p.calls;
            out.errors += p.errors;
            out.enospc_waits += p.enospc_waits;
            if out.first_error.is_none() {
                out.first_error.clone_from(&p.first_error);
            }
            out.window_s = out.window_s.min(p.window_s);
            out.cpu_busy += p.cpu_busy / parts.len() as f64;
            out.interrupted |= p.interrupted;
            if let Some(idle) = p.idle_runs {
                out.idle_runs = Some(out.idle_runs.unwrap_or(0) + idle);
            }
        }
        out
    }

    /// The generator's EngineStats: saturated when it offered less than 99% of the
    /// request (it could not go faster, or fell behind schedule).
    pub fn engine_stats(
        &self,
        cpus: &[u32],
        requested_pps: f64,
        offered_pps: f64,
        emitted_total: u64,
    ) -> EngineStats {
        let mut counters = vec![
            ("skipped_behind_schedule".into(), self.skipped),
            ("prog_run_calls".into(), self.calls),
            ("prog_run_errors".into(), self.errors),
            ("enospc_waits_50ms".into(), self.enospc_waits),
            ("sent_including_warmup".into(), emitted_total),
        ];
        if let Some(idle) = self.idle_runs {
            // In-kernel pacing spins: its CPU is busy by construction, and its
            // headroom is the runs that found nothing to send.
            counters.push(("in_kernel_pacing".into(), 1));
            counters.push(("idle_runs_in_window".into(), idle));
        }
        EngineStats {
            backend: "xdp-live-frames".into(),
            cpus: cpus.to_vec(),
            cpu_busy: Some(self.cpu_busy.min(1.0)),
            saturated: offered_pps < 0.99 * requested_pps || self.idle_runs == Some(0),
            counters,
        }
    }
}

/// The sink's EngineStats: busy is the on-CPU share of the sink veth's NAPI kthread
/// (where the counting program runs) over the window; saturated when its ring
/// overflowed (`ring_drops`, the DUT egress veth's tx drops) or it was busy > 90%.
pub fn sink_engine_stats(
    cpus: &[u32],
    busy: Option<f64>,
    ring_drops: u64,
    counts: &Counts,
) -> EngineStats {
    EngineStats {
        backend: "xdp-sink".into(),
        cpus: cpus.to_vec(),
        cpu_busy: busy.map(|b| b.min(1.0)),
        saturated: ring_drops > 0 || busy.is_some_and(|b| b > 0.9),
        counters: vec![
            ("ring_drops".into(), ring_drops),
            (
                "other_frames (warm-up, earlier points)".into(),
                counts.sink_other.iter().sum(),
            ),
            ("received_bytes".into(), counts.sink_bytes),
        ],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_have_valid_headers() {
        let c = LrClass {
            id: 3,
            port: 9000,
            size: 64,
            share: 1.0,
        };
        let f = build_frame([2; 6], [4; 6], &c, 7, true);
        assert_eq!(f.len(), 78);
        assert_eq!(&f[0..6], &[2; 6]);
        // A correct IPv4 header checksums to zero.
        assert_eq!(internet_checksum(&f[14..34]), 0);
        assert_eq!(u16::from_be_bytes([f[16], f[17]]), 64);
        assert_eq!(u16::from_be_bytes([f[36], f[37]]), 9000);
        assert_eq!(u16::from_be_bytes([f[38], f[39]]), 44);
        assert_eq!(u32::from_le_bytes([f[42], f[43], f[44], f[45]]), MAGIC);
        assert_eq!(u32::from_le_bytes([f[46], f[47], f[48], f[49]]), 7);
        assert_eq!(u16::from_le_bytes([f[50], f[51]]), 3);
        assert_eq!(u16::from_le_bytes([f[52], f[53]]), FLAG_MEASURED);
        let big = build_frame([2; 6], [4; 6], &LrClass { size: 1500, ..c }, 7, false);
        assert_eq!(big.len(), 1514);
        assert_eq!(u16::from_le_bytes([big[52], big[53]]), 0);
    }

    #[test]
    fn macs_and_count_deltas() {
        assert_eq!(
            parse_mac("02:00:0a:ff:00:01"),
            Some([2, 0, 0x0a, 0xff, 0, 1])
        );
        assert_eq!(parse_mac("02:00"), None);
        let a = Counts {
            gen: vec![[1, 2]],
            gen_bytes: 10,
            sink: vec![5],
            sink_bytes: 7,
            sink_other: vec![1],
        };
        let b = Counts {
            gen: vec![[3, 9]],
            gen_bytes: 30,
            sink: vec![8],
            sink_bytes: 9,
            sink_other: vec![1],
        };
        let d = b.since(&a);
        assert_eq!(d.gen, vec![[2, 7]]);
        assert_eq!((d.sink[0], d.sink_other[0], d.gen_bytes), (3, 0, 20));
    }
}
