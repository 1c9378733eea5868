//! The opt-in per-packet tier (`observe --trace-packets`): loads `bpf/packets.bpf.c`,
//! reads its maps and turns two readings into stage-to-stage latencies and drops by
//! reason (docs/trace.md, "Per-packet tier").
//!
//! Same rules as [`always_on`](crate::always_on): each hook uses `tp_btf` where the
//! kernel's BTF has the tracepoint's type, `raw_tp` otherwise or when the BTF-typed
//! object does not load; a tracepoint that is missing or cannot be attached is named
//! once in the notices; everything is detached and unloaded when [`PacketTrace`] is
//! dropped. Drop reasons are named at run time from the kernel's own
//! `enum skb_drop_reason` (its BTF, else the `skb:kfree_skb` format file), because the
//! numbering changes between kernels.

use std::collections::BTreeMap;
use std::mem::MaybeUninit;

use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{Link, MapCore, MapFlags, OpenObject};
use napilab_core::trace::{DropReasonCount, LatencyBucket, StageLatency};
use napilab_core::{Metric, Source, Unit};

use crate::loader::{c_string, load_error, words32, words64, Attach};
use crate::loader::{StartError, VMLINUX_BTF};
use crate::windows::{windowed_rate, WindowDriver, WindowProgram, WindowReading, Windows};

crate::bpf_skeleton!("packets");

use skel::{OpenPacketsSkel, PacketsSkel, PacketsSkelBuilder};

/// Stage names, indexed by the `PK_*` numbers of `packets.h`: the tracepoint that
/// marks the stage (`netif_receive_skb_entry` also stands for its `_list_entry`).
pub const STAGES: [&str; 8] = [
    "napi_gro_receive_entry",
    "netif_receive_skb_entry",
    "netif_rx",
    "netif_receive_skb",
    "net_dev_queue",
    "qdisc_dequeue",
    "net_dev_start_xmit",
    "net_dev_xmit",
];
/// `PK_NO_STAGE`: a dropped packet that no stage had seen.
const NO_STAGE: u8 = 255;
/// `PK_OUTSIDE_WINDOW`: a drop while the stage programs were detached.
const OUTSIDE_WINDOW: u8 = 254;
/// What `last_stage` says for a drop between tracing windows.
pub const OUTSIDE_WINDOW_NAME: &str = "outside tracing window";
/// The hook whose program stays attached between windows (drops are counted exactly).
const DROP_HOOK: &str = "kfree_skb";
/// `PK_MAX_MSB` and `PK_SLOTS` of packets.h.
const MAX_MSB: u32 = 39;
pub const SLOTS: usize = 4 + (MAX_MSB as usize - 1) * 4;
const PAIR_VALUE_SIZE: usize = (2 + SLOTS) * 8 + 32;
const DROP_VALUE_SIZE: usize = 8 + 16;

/// `[lo, hi)` nanoseconds of histogram slot `slot` (the inverse of `slot_of` in
/// packets.bpf.c).
pub fn slot_bounds(slot: usize) -> (u64, u64) {
    if slot < 4 {
        return (slot as u64, slot as u64 + 1);
    }
    let msb = (slot as u64 - 4) / 4 + 2;
    let sub = (slot as u64 - 4) % 4;
    let shift = msb - 2;
    let lo = (4 + sub) << shift;
    if slot == SLOTS - 1 {
        // The last slot also holds everything longer.
        return (lo, u64::MAX);
    }
    (lo, (5 + sub) << shift)
}

/// One tracepoint of the tier: (name, group, what its absence loses).
struct Hook {
    tracepoint: &'static str,
    group: &'static str,
    loses: &'static str,
}

const NR_HOOKS: usize = 11;

const HOOKS: [Hook; NR_HOOKS] = [
    Hook {
        tracepoint: "napi_gro_receive_entry",
        group: "net",
        loses: "the receive start of GRO drivers (veth with GRO, most NICs)",
    },
    Hook {
        tracepoint: "netif_receive_skb_entry",
        group: "net",
        loses: "the receive start of drivers calling netif_receive_skb",
    },
    Hook {
        tracepoint: "netif_receive_skb_list_entry",
        group: "net",
        loses: "the receive start of drivers passing skb lists",
    },
    Hook {
        tracepoint: "netif_rx",
        group: "net",
        loses: "the receive start through the backlog (veth without NAPI, loopback)",
    },
    Hook {
        tracepoint: "netif_receive_skb",
        group: "net",
        loses: "the stack's receive stage",
    },
    Hook {
        tracepoint: "net_dev_queue",
        group: "net",
        loses: "the transmit queueing stage",
    },
    Hook {
        tracepoint: "net_dev_start_xmit",
        group: "net",
        loses: "the driver transmit stage",
    },
    Hook {
        tracepoint: "net_dev_xmit",
        group: "net",
        loses: "the end of the driver transmit",
    },
    Hook {
        tracepoint: "qdisc_dequeue",
        group: "qdisc",
        loses: "the qdisc dequeue stage",
    },
    Hook {
        tracepoint: "kfree_skb",
        group: "skb",
        loses: "drops by reason",
    },
    Hook {
        tracepoint: "consume_skb",
        group: "skb",
        loses: "the end of consumed packets (recycled sk_buff addresses may pair wrongly)",
    },
];

macro_rules! program_pairs {
    ($p:expr) => {
        [
            (
                &mut $p.btf_napi_gro_receive_entry,
                &mut $p.raw_napi_gro_receive_entry,
            ),
            (
                &mut $p.btf_netif_receive_skb_entry,
                &mut $p.raw_netif_receive_skb_entry,
            ),
            (
                &mut $p.btf_netif_receive_skb_list_entry,
                &mut $p.raw_netif_receive_skb_list_entry,
            ),
            (&mut $p.btf_netif_rx, &mut $p.raw_netif_rx),
            (&mut $p.btf_netif_receive_skb, &mut $p.raw_netif_receive_skb),
            (&mut $p.btf_net_dev_queue, &mut $p.raw_net_dev_queue),
            (
                &mut $p.btf_net_dev_start_xmit,
                &mut $p.raw_net_dev_start_xmit,
            ),
            (&mut $p.btf_net_dev_xmit, &mut $p.raw_net_dev_xmit),
            (&mut $p.btf_qdisc_dequeue, &mut $p.raw_qdisc_dequeue),
            (&mut $p.btf_kfree_skb, &mut $p.raw_kfree_skb),
            (&mut $p.btf_consume_skb, &mut $p.raw_consume_skb),
        ]
    };
}

#[derive(Clone, Debug, Default)]
pub struct PacketOptions {
    /// Use `raw_tp` for every hook (the fallback path, for tests and comparisons).
    pub force_raw_tp: bool,
    /// Time-sliced tracing: attach the stage programs only for these windows (stage
    /// rates become estimates, drops stay exact). `None`: every packet, exact counts,
    /// at several times the cost (docs/trace.md, "Per-packet tier").
    pub windows: Option<Windows>,
}

/// (from netns, from ifindex, to netns, to ifindex, from stage, to stage)
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct PairKey {
    pub from_netns: u32,
    pub from_ifindex: u32,
    pub to_netns: u32,
    pub to_ifindex: u32,
    pub from_stage: u32,
    pub to_stage: u32,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct PairCounts {
    pub count: u64,
    pub sum_ns: u64,
    pub hist: Vec<u64>,
    pub from_device: String,
    pub to_device: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct DropKey {
    pub reason: u32,
    pub netns: u32,
    pub ifindex: u32,
    /// Host byte order.
    pub protocol: u16,
    pub last_stage: u8,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct DropCounts {
    pub count: u64,
    pub device: String,
}

/// Every counter of the maps at one instant, summed over CPUs (they only grow).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PacketSnapshot {
    pub pairs: BTreeMap<PairKey, PairCounts>,
    pub drops: BTreeMap<DropKey, DropCounts>,
    /// With tracing windows: their time and rates so far. `None`: the stage programs
    /// are attached all the time.
    pub windows: Option<WindowReading>,
}

/// Names of `enum skb_drop_reason` values on the running kernel.
#[derive(Clone, Debug, Default)]
pub struct DropReasons {
    names: BTreeMap<u32, String>,
    /// Where the names came from ("btf", "tracefs") or why there are none.
    pub origin: String,
}

impl DropReasons {
    /// From the kernel's BTF (already parsed, if the caller has it), else from the
    /// `skb:kfree_skb` format file.
    pub fn load(btf: Option<&libbpf_rs::btf::Btf<'_>>) -> DropReasons {
        let from_btf = match btf {
            Some(btf) => Self::from_btf(btf),
            None => libbpf_rs::btf::Btf::from_path(VMLINUX_BTF)
                .map_err(|e| format!("cannot read {VMLINUX_BTF}: {e}"))
                .and_then(|btf| Self::from_btf(&btf)),
        };
        match from_btf {
            Ok(r) => r,
            Err(btf_err) => Self::from_tracefs().unwrap_or_else(|fs_err| DropReasons {
                names: BTreeMap::new(),
                origin: format!("unnamed: {btf_err}; {fs_err}"),
            }),
        }
    }

    fn from_btf(btf: &libbpf_rs::btf::Btf<'_>) -> Result<DropReasons, String> {
        use libbpf_rs::btf::types::Enum;
        let e: Enum<'_> = btf
            .type_by_name("skb_drop_reason")
            .ok_or_else(|| format!("{VMLINUX_BTF} has no enum skb_drop_reason"))?;
        let names: BTreeMap<u32, String> = e
            .iter()
            .filter_map(|m| {
                let name = m.name?.to_string_lossy();
                let short = name.strip_prefix("SKB_DROP_REASON_").unwrap_or(&name);
                Some((u32::try_from(m.value).ok()?, short.to_string()))
            })
            .collect();
        if names.is_empty() {
            return Err(format!("enum skb_drop_reason in {VMLINUX_BTF} is empty"));
        }
        Ok(DropReasons {
            names,
            origin: "btf".into(),
        })
    }

    fn from_tracefs() -> Result<DropReasons, String> {
        let mut last = String::new();
        for base in ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"] {
            let path = format!("{base}/events/skb/kfree_skb/format");
            match std::fs::read_to_string(&path) {
                Ok(text) => {
                    let names = parse_print_fmt(&text);
                    if names.is_empty() {
                        return Err(format!("{path} lists no drop reasons"));
                    }
                    return Ok(DropReasons {
                        names,
                        origin: "tracefs".into(),
                    });
                }
                Err(e) => last = format!("{path}: {e}"),
            }
        }
        Err(last)
    }

    /// The reason's name; subsystem reasons (high 16 bits set) and unknown numbers are
    /// shown by number.
    pub fn name(&self, reason: u32) -> String {
        match self.names.get(&reason) {
            Some(n) => n.clone(),
            None if reason >> 16 != 0 => {
                format!("subsystem {} reason {}", reason >> 16, reason & 0xffff)
            }
            None => format!("reason {reason}"),
        }
    }

    pub fn len(&self) -> usize {
        self.names.len()
    }

    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }
}

/// `{ 3, "NO_SOCKET" }` pairs of a tracepoint format's `__print_symbolic`.
fn parse_print_fmt(text: &str) -> BTreeMap<u32, String> {
    let mut out = BTreeMap::new();
    let Some(fmt) = text.lines().find(|l| l.starts_with("print fmt:")) else {
        return out;
    };
    for part in fmt.split('{').skip(1) {
        let Some((body, _)) = part.split_once('}') else {
            continue;
        };
        let Some((num, name)) = body.split_once(',') else {
            continue;
        };
        if let Ok(n) = num.trim().parse::<u32>() {
            out.insert(n, name.trim().trim_matches('"').to_string());
        }
    }
    out
}

/// The loaded and attached per-packet tier.
pub struct PacketTrace {
    // Field order matters: links detach (and the window thread stops) before the
    // object closes.
    links: Vec<Link>,
    windows: Option<WindowDriver>,
    /// Stage programs the window thread attaches in each window.
    window_programs: usize,
    started: std::time::Instant,
    skel: PacketsSkel<'static>,
    /// `tp_btf`, `raw_tp` or both.
    pub attach_kind: &'static str,
    /// What could not be attached, and what is lost: (what, why).
    pub notices: Vec<(String, String)>,
    pub reasons: DropReasons,
}

/// Whether tracefs lists the event; `None` when tracefs is not mounted.
fn tracefs_has(group: &str, name: &str) -> Option<bool> {
    [
        "/sys/kernel/tracing/events",
        "/sys/kernel/debug/tracing/events",
    ]
    .iter()
    .find(|base| std::path::Path::new(base).is_dir())
    .map(|base| std::path::Path::new(&format!("{base}/{group}/{name}")).is_dir())
}

fn open(plan: &[Attach; NR_HOOKS]) -> Result<OpenPacketsSkel<'static>, StartError> {
    // The skeleton borrows its storage for as long as it lives; one small allocation per
    // start is leaked so the loaded object can be owned by `PacketTrace`.
    let storage: &'static mut MaybeUninit<OpenObject> = Box::leak(Box::new(MaybeUninit::uninit()));
    let mut open = PacketsSkelBuilder::default()
        .open(storage)
        .map_err(|e| StartError::Load(e.to_string()))?;
    for ((btf, raw), attach) in program_pairs!(open.progs).into_iter().zip(plan) {
        btf.set_autoload(*attach == Attach::Btf);
        raw.set_autoload(*attach == Attach::Raw);
    }
    Ok(open)
}

/// What could not be attached or loaded, and what is lost: (what, why).
type Notices = Vec<(String, String)>;

/// Which program of each hook to load: none where this kernel lacks the tracepoint
/// (named in a notice), tp_btf where vmlinux has its BTF type (unless raw is forced),
/// raw_tp otherwise.
fn plan_hooks(
    options: &PacketOptions,
    btf: &libbpf_rs::btf::Btf<'_>,
    notices: &mut Notices,
) -> [Attach; NR_HOOKS] {
    let mut missing = Vec::new();
    let mut plan = [Attach::Raw; NR_HOOKS];
    for (attach, hook) in plan.iter_mut().zip(&HOOKS) {
        if tracefs_has(hook.group, hook.tracepoint) == Some(false) {
            *attach = Attach::Off;
            missing.push(hook);
        } else if !options.force_raw_tp
            && btf
                .type_by_name::<libbpf_rs::btf::types::Typedef<'_>>(&format!(
                    "btf_trace_{}",
                    hook.tracepoint
                ))
                .is_some()
        {
            *attach = Attach::Btf;
        }
    }
    if !missing.is_empty() {
        notices.push((
            "per-packet tracepoints".to_string(),
            format!(
                "this kernel lacks {}: {}",
                missing
                    .iter()
                    .map(|h| format!("{}:{}", h.group, h.tracepoint))
                    .collect::<Vec<_>>()
                    .join(", "),
                missing
                    .iter()
                    .map(|h| h.loses)
                    .collect::<Vec<_>>()
                    .join("; ")
            ),
        ));
    }
    plan
}

/// Loads the skeleton with `plan`; where tp_btf programs fail to load (other than for
/// want of privilege), loads raw tracepoints instead and says so.
fn load_skeleton(
    plan: [Attach; NR_HOOKS],
    notices: &mut Notices,
) -> Result<(PacketsSkel<'static>, [Attach; NR_HOOKS], &'static str), StartError> {
    Ok(match open(&plan)?.load() {
        Ok(skel) => {
            let kind = Attach::kind(&plan);
            (skel, plan, kind)
        }
        Err(first) => {
            let first = load_error(first);
            if matches!(first, StartError::NoPrivilege(_)) {
                return Err(first);
            }
            let raw = plan.map(|a| if a == Attach::Off { a } else { Attach::Raw });
            let skel = open(&raw)?.load().map_err(load_error)?;
            notices.push((
                "per-packet BPF tp_btf programs".to_string(),
                format!("did not load ({first}); using raw tracepoints (same data, slightly higher cost)"),
            ));
            (skel, raw, "raw_tp")
        }
    })
}

/// The map layouts the reader assumes, checked against the loaded object.
fn check_map_sizes(skel: &PacketsSkel<'static>) -> Result<(), StartError> {
    let maps = &skel.maps;
    for (name, actual, expected) in [
        ("pair_stats", maps.pair_stats.value_size(), PAIR_VALUE_SIZE),
        ("pair_stats key", maps.pair_stats.key_size(), 24),
        ("drop_stats", maps.drop_stats.value_size(), DROP_VALUE_SIZE),
        ("drop_stats key", maps.drop_stats.key_size(), 16),
        ("control", maps.control.value_size(), 16),
    ] {
        if actual as usize != expected {
            return Err(StartError::Load(format!(
                "map {name} has {actual} bytes, the reader expects {expected}: packets.h and packets.rs disagree"
            )));
        }
    }
    Ok(())
}

/// Attaches every planned hook once (so one that cannot attach is named now); with
/// tracing windows, the stage programs are detached again and handed to the window
/// driver as fds, only the drop hook stays attached.
fn attach_hooks(
    skel: &mut PacketsSkel<'static>,
    plan: &[Attach; NR_HOOKS],
    options: &PacketOptions,
    notices: &mut Notices,
) -> Result<(Vec<Link>, Vec<WindowProgram>), StartError> {
    let mut links = Vec::new();
    let mut window_programs = Vec::new();
    for ((btf_prog, raw_prog), (hook, attach)) in program_pairs!(skel.progs)
        .into_iter()
        .zip(HOOKS.iter().zip(plan.iter().copied()))
    {
        let prog = match attach {
            Attach::Btf => btf_prog,
            Attach::Raw => raw_prog,
            Attach::Off => continue,
        };
        // Attached once in any case, so a hook that cannot attach is named now.
        let link = match prog.attach() {
            Ok(link) => link,
            Err(e) => {
                notices.push((
                    format!("tracepoint {}:{}", hook.group, hook.tracepoint),
                    format!("cannot attach ({e}): {} absent", hook.loses),
                ));
                continue;
            }
        };
        if options.windows.is_none() || hook.tracepoint == DROP_HOOK {
            links.push(link);
            continue;
        }
        drop(link);
        use std::os::fd::AsFd as _;
        let fd = prog.as_fd().try_clone_to_owned().map_err(|e| {
            StartError::Load(format!(
                "cannot duplicate a program fd for the tracing windows: {e}"
            ))
        })?;
        window_programs.push(WindowProgram {
            fd,
            raw_tracepoint: (attach == Attach::Raw)
                .then(|| std::ffi::CString::new(hook.tracepoint).ok())
                .flatten(),
        });
    }
    Ok((links, window_programs))
}

/// The tracing windows' driver, where windows were asked for.
fn start_windows(
    skel: &PacketsSkel<'static>,
    options: &PacketOptions,
    window_programs: Vec<WindowProgram>,
) -> Result<Option<WindowDriver>, StartError> {
    Ok(match options.windows {
        Some(plan) => {
            use std::os::fd::AsFd as _;
            let dup = |fd: std::os::fd::BorrowedFd<'_>| {
                fd.try_clone_to_owned().map_err(|e| {
                    StartError::Load(format!(
                        "cannot duplicate a map fd for the tracing windows: {e}"
                    ))
                })
            };
            let control = dup(skel.maps.control.as_fd())?;
            let events = dup(skel.maps.window_events.as_fd())?;
            Some(WindowDriver::start(
                plan,
                window_programs,
                Some(control),
                Some(events),
            ))
        }
        None => None,
    })
}

impl PacketTrace {
    /// Loads and attaches the programs.
    pub fn start(options: &PacketOptions) -> Result<PacketTrace, StartError> {
        // libbpf's parser: one parse, then lookups by name.
        let btf = libbpf_rs::btf::Btf::from_path(VMLINUX_BTF).map_err(|_| StartError::NoBtf)?;
        let mut notices = Vec::new();
        let plan = plan_hooks(options, &btf, &mut notices);
        let reasons = DropReasons::load(Some(&btf));
        drop(btf);
        let (mut skel, plan, attach_kind) = load_skeleton(plan, &mut notices)?;
        check_map_sizes(&skel)?;
        if let Some(w) = &options.windows {
            w.validate().map_err(StartError::Load)?;
        }
        let (links, window_programs) = attach_hooks(&mut skel, &plan, options, &mut notices)?;
        let nr_window_programs = window_programs.len();
        let windows = start_windows(&skel, options, window_programs)?;
        if reasons.is_empty() {
            notices.push((
                "drop reason names".to_string(),
                format!("{}; drops are shown by number", reasons.origin),
            ));
        }
        Ok(PacketTrace {
            links,
            windows,
            window_programs: nr_window_programs,
            started: std::time::Instant::now(),
            skel,
            attach_kind,
            notices,
            reasons,
        })
    }

    /// Number of hooks attached, or attached in each tracing window.
    pub fn attached(&self) -> usize {
        self.links.len() + self.window_programs
    }

    /// How many stage programs each tracing window attaches and detaches (0 when
    /// every packet is traced).
    pub fn windowed_programs(&self) -> usize {
        if self.windows.is_some() {
            self.window_programs
        } else {
            0
        }
    }

    /// The tracing windows so far: (windows opened, ns with every stage program
    /// attached, ns spent attaching and detaching), or `None` when every packet is
    /// traced.
    pub fn window_progress(&self) -> Option<(u64, u64, u64)> {
        self.windows
            .as_ref()
            .map(|w| (w.windows(), w.open_ns(), w.transition_ns()))
    }

    /// The measured share of time the stage programs have been counting (windows'
    /// time / time since start), or `None` when every packet is traced.
    pub fn window_duty(&self) -> Option<f64> {
        let w = self.windows.as_ref()?;
        let elapsed = self.started.elapsed().as_secs_f64();
        Some(if elapsed > 0.0 {
            (w.open_ns() as f64 / 1e9 / elapsed).min(1.0)
        } else {
            0.0
        })
    }

    /// The first error of the window thread (an attach that failed in a window).
    pub fn window_error(&self) -> Option<String> {
        self.windows.as_ref().and_then(WindowDriver::error)
    }

    /// The kernel names (at most 15 characters) of the loaded programs.
    pub fn program_names(&self) -> Vec<String> {
        use libbpf_rs::skel::Skel as _;
        self.skel
            .object()
            .progs()
            .filter(|p| p.autoload())
            .map(|p| {
                let name = p.name().to_string_lossy().into_owned();
                name.chars().take(15).collect()
            })
            .collect()
    }

    /// Per loaded program: (name, runs, total run time in ns); see
    /// [`loader::program_costs`](crate::loader::program_costs).
    pub fn program_costs(&self) -> Vec<(String, u64, u64)> {
        use libbpf_rs::skel::Skel as _;
        crate::loader::program_costs(self.skel.object())
    }

    /// Reads every map.
    pub fn snapshot(&self) -> PacketSnapshot {
        let mut snap = PacketSnapshot {
            windows: self.windows.as_ref().map(WindowDriver::reading),
            ..PacketSnapshot::default()
        };
        let maps = &self.skel.maps;
        for key in maps.pair_stats.keys() {
            let Some(k) = words32(&key, 6) else { continue };
            let Ok(Some(values)) = maps.pair_stats.lookup_percpu(&key, MapFlags::ANY) else {
                continue;
            };
            let entry = snap
                .pairs
                .entry(PairKey {
                    from_netns: k[0],
                    from_ifindex: k[1],
                    to_netns: k[2],
                    to_ifindex: k[3],
                    from_stage: k[4],
                    to_stage: k[5],
                })
                .or_insert_with(|| PairCounts {
                    hist: vec![0; SLOTS],
                    ..PairCounts::default()
                });
            for bytes in &values {
                let Some(w) = words64(bytes, 2 + SLOTS) else {
                    continue;
                };
                entry.count += w[0];
                entry.sum_ns += w[1];
                for (h, v) in entry.hist.iter_mut().zip(&w[2..]) {
                    *h += v;
                }
                let names = &bytes[(2 + SLOTS) * 8..];
                if entry.from_device.is_empty() {
                    entry.from_device = c_string(names.get(..16).unwrap_or_default());
                }
                if entry.to_device.is_empty() {
                    entry.to_device = c_string(names.get(16..32).unwrap_or_default());
                }
            }
        }
        for key in maps.drop_stats.keys() {
            let Some(k) = words32(&key, 4) else { continue };
            let Ok(Some(values)) = maps.drop_stats.lookup_percpu(&key, MapFlags::ANY) else {
                continue;
            };
            let tail = k[3].to_ne_bytes();
            let entry = snap
                .drops
                .entry(DropKey {
                    reason: k[0],
                    netns: k[1],
                    ifindex: k[2],
                    protocol: u16::from_be_bytes([tail[0], tail[1]]),
                    last_stage: tail[2],
                })
                .or_default();
            for bytes in &values {
                let Some(w) = words64(bytes, 1) else { continue };
                entry.count += w[0];
                if entry.device.is_empty() {
                    entry.device = c_string(bytes.get(8..24).unwrap_or_default());
                }
            }
        }
        snap
    }
}

/// A readable EtherType.
pub fn protocol_name(protocol: u16) -> String {
    match protocol {
        0x0800 => "ipv4".into(),
        0x86dd => "ipv6".into(),
        0x0806 => "arp".into(),
        0x8100 => "vlan".into(),
        0x88a8 => "qinq".into(),
        0x8847 => "mpls".into(),
        0 => "-".into(),
        // Below 0x600 the field is an 802.3 length or a kernel-internal ETH_P_* value.
        p => format!("0x{p:04x}"),
    }
}

fn stage_name(stage: u32) -> String {
    STAGES
        .get(stage as usize)
        .map_or_else(|| format!("stage {stage}"), |s| (*s).to_string())
}

/// Stage latencies and drops between two snapshots taken `seconds` apart. With
/// `netns`, only stage pairs with one end in that network namespace and drops there
/// (the programs see every namespace; device names and ifindexes are per namespace).
pub fn packet_interval(
    prev: &PacketSnapshot,
    cur: &PacketSnapshot,
    seconds: f64,
    reasons: &DropReasons,
    netns: Option<u32>,
) -> (Vec<StageLatency>, Vec<DropReasonCount>) {
    let wanted = |ns: u32| netns.is_none_or(|n| n == ns);
    let seconds = if seconds > 0.0 {
        seconds
    } else {
        f64::MIN_POSITIVE
    };
    // With tracing windows, the stage programs ran only this long in the interval.
    let windows = match (&prev.windows, &cur.windows) {
        (Some(a), Some(b)) => Some((
            b.open_ns.saturating_sub(a.open_ns) as f64 / 1e9,
            b.rates.since(&a.rates),
        )),
        _ => None,
    };
    let mut stages = Vec::new();
    for (key, c) in &cur.pairs {
        if !wanted(key.from_netns) && !wanted(key.to_netns) {
            continue;
        }
        let p = prev.pairs.get(key);
        let count = c.count.saturating_sub(p.map_or(0, |p| p.count));
        if count == 0 {
            continue;
        }
        let sum = c.sum_ns.saturating_sub(p.map_or(0, |p| p.sum_ns));
        let histogram: Vec<LatencyBucket> = c
            .hist
            .iter()
            .enumerate()
            .filter_map(|(slot, v)| {
                let n = v.saturating_sub(p.and_then(|p| p.hist.get(slot)).copied().unwrap_or(0));
                let (lo_ns, hi_ns) = slot_bounds(slot);
                (n > 0).then_some(LatencyBucket {
                    lo_ns,
                    hi_ns,
                    count: n,
                })
            })
            .collect();
        let q = |q: f64| napilab_core::trace::latency_quantile(&histogram, q).unwrap_or(0.0);
        let rate = match &windows {
            None => Metric::derived(
                count as f64 / seconds,
                Unit::PacketsPerSecond,
                Source::Trace,
                "packets making this stage transition / interval",
            ),
            Some((open, rates)) => {
                let open = *open;
                let (rate, sd) = windowed_rate(count, open, seconds, Some(rates));
                Metric::derived(
                    rate,
                    Unit::PacketsPerSecond,
                    Source::Trace,
                    format!(
                        "estimate: {count} packets seen in {} tracing windows / {:.1} ms of windows in the interval, +-{sd:.0}/s (1 sd)",
                        rates.windows,
                        open * 1e3
                    ),
                )
            }
        };
        stages.push(StageLatency {
            device: c.to_device.clone(),
            ifindex: key.to_ifindex,
            netns: key.to_netns,
            from_device: c.from_device.clone(),
            from_ifindex: key.from_ifindex,
            from_netns: key.from_netns,
            from: stage_name(key.from_stage),
            to: stage_name(key.to_stage),
            count,
            mean_ns: sum as f64 / count as f64,
            p50_ns: q(0.5),
            p99_ns: q(0.99),
            max_bucket_ns: histogram.last().map_or(0, |b| b.hi_ns),
            histogram,
            rate,
            source: Source::Trace,
        });
    }
    let mut drops = Vec::new();
    for (key, c) in &cur.drops {
        if !wanted(key.netns) {
            continue;
        }
        let count = c
            .count
            .saturating_sub(prev.drops.get(key).map_or(0, |p| p.count));
        if count == 0 {
            continue;
        }
        drops.push(DropReasonCount {
            reason: reasons.name(key.reason),
            reason_code: key.reason,
            device: c.device.clone(),
            ifindex: key.ifindex,
            netns: key.netns,
            protocol: protocol_name(key.protocol),
            last_stage: match key.last_stage {
                NO_STAGE => None,
                OUTSIDE_WINDOW => Some(OUTSIDE_WINDOW_NAME.to_string()),
                s => Some(stage_name(u32::from(s))),
            },
            count,
            rate: Metric::derived(
                count as f64 / seconds,
                Unit::PerSecond,
                Source::Trace,
                "skb:kfree_skb events / interval",
            ),
        });
    }
    drops.sort_by(|a, b| b.count.cmp(&a.count).then(a.reason.cmp(&b.reason)));
    (stages, drops)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slot_bounds_invert_the_bpf_bucketing() {
        // The BPF side's slot_of, restated: every value falls in its slot's bounds.
        fn slot_of(ns: u64) -> usize {
            if ns < 4 {
                return ns as usize;
            }
            let msb = 63 - ns.leading_zeros();
            if msb > MAX_MSB {
                return SLOTS - 1;
            }
            let sub = (ns >> (msb - 2)) & 3;
            4 + (msb as usize - 2) * 4 + sub as usize
        }
        for v in [
            0u64,
            1,
            3,
            4,
            5,
            7,
            8,
            15,
            16,
            1000,
            4095,
            4096,
            123_456_789,
            1 << 39,
        ] {
            let (lo, hi) = slot_bounds(slot_of(v));
            assert!(lo <= v && v < hi, "{v} not in [{lo}, {hi})");
        }
        assert_eq!(slot_of(u64::MAX), SLOTS - 1);
        assert_eq!(slot_bounds(SLOTS - 1).1, u64::MAX);
        // Buckets are contiguous.
        for s in 0..SLOTS - 1 {
            assert_eq!(slot_bounds(s).1, slot_bounds(s + 1).0, "slot {s}");
        }
    }

    #[test]
    fn print_fmt_names_parse() {
        let text = "name: kfree_skb\nprint fmt: \"reason: %s\", __print_symbolic(REC->reason, { 2, \"NOT_SPECIFIED\" }, { 3, \"NO_SOCKET\" }, { 128, \"MAX\" })\n";
        let names = parse_print_fmt(text);
        assert_eq!(names.get(&3).map(String::as_str), Some("NO_SOCKET"));
        assert_eq!(names.len(), 3);
    }

    #[test]
    fn interval_subtracts_and_names() {
        let key = PairKey {
            from_netns: 1,
            from_ifindex: 2,
            to_netns: 1,
            to_ifindex: 2,
            from_stage: 6,
            to_stage: 7,
        };
        let mut prev = PacketSnapshot::default();
        let mut hist = vec![0; SLOTS];
        hist[40] = 2;
        prev.pairs.insert(
            key,
            PairCounts {
                count: 2,
                sum_ns: 200,
                hist: hist.clone(),
                from_device: "va".into(),
                to_device: "va".into(),
            },
        );
        let mut cur = prev.clone();
        if let Some(c) = cur.pairs.get_mut(&key) {
            c.count = 12;
            c.sum_ns = 1200;
            c.hist[40] = 12;
        }
        let dk = DropKey {
            reason: 3,
            netns: 1,
            ifindex: 2,
            protocol: 0x0800,
            last_stage: 3,
        };
        cur.drops.insert(
            dk,
            DropCounts {
                count: 5,
                device: "vb".into(),
            },
        );
        let reasons = DropReasons {
            names: [(3, "NO_SOCKET".to_string())].into_iter().collect(),
            origin: "test".into(),
        };
        let (stages, drops) = packet_interval(&prev, &cur, 2.0, &reasons, None);
        let (other, none) = packet_interval(&prev, &cur, 2.0, &reasons, Some(99));
        assert!(other.is_empty() && none.is_empty());
        assert_eq!(stages.len(), 1);
        assert_eq!(stages[0].count, 10);
        assert_eq!(stages[0].from, "net_dev_start_xmit");
        assert_eq!(stages[0].to, "net_dev_xmit");
        assert!((stages[0].mean_ns - 100.0).abs() < 1e-9);
        let (lo, hi) = slot_bounds(40);
        assert!(stages[0].p50_ns >= lo as f64 && stages[0].p50_ns <= hi as f64);
        assert!((stages[0].rate.value - 5.0).abs() < 1e-9);
        assert_eq!(drops.len(), 1);
        assert_eq!(drops[0].reason, "NO_SOCKET");
        assert_eq!(drops[0].protocol, "ipv4");
        assert_eq!(drops[0].last_stage.as_deref(), Some("netif_receive_skb"));
        assert_eq!(reasons.name(0x0003_0001), "subsystem 3 reason 1");
    }
}
