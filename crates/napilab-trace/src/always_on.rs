//! Loads, attaches and reads the always-on BPF programs of `bpf/napi_trace.bpf.c`.
//!
//! Kernel-dependent decisions happen here, at load time (docs/architecture.md principle 3):
//! each hook uses `tp_btf` when the kernel's BTF has the tracepoint's type and falls
//! back to `raw_tp` otherwise (or when the BTF-typed load fails); a tracepoint that
//! cannot be attached leaves its metric absent and is reported once as a notice. The
//! programs and maps live exactly as long as [`AlwaysOn`]: dropping it (also on the way
//! out after Ctrl-C) detaches the links and closes the object, and the kernel frees
//! everything with the last file descriptor even if the process is killed.

use std::collections::HashMap;
use std::mem::MaybeUninit;
use std::path::Path;

use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{Link, MapCore, MapFlags, OpenObject};
use napilab_core::trace::ExecContext;

use crate::loader::{c_string, load_error, words32, words64, Attach};
pub use crate::loader::{StartError, VMLINUX_BTF};
use crate::snapshot::{
    IrqCounts, NapiCounts, NapiKey, NetRxCounts, Snapshot, SoftirqCounts, IRQ_ARRAY, LOG2_SLOTS,
    NAPI_SLOTS, NR_SOFTIRQS, WORK_SLOTS,
};
use crate::windows::{WindowDriver, WindowProgram, Windows};

crate::bpf_skeleton!("napi_trace");

use skel::{NapiTraceSkel, NapiTraceSkelBuilder, OpenNapiTraceSkel};

#[derive(Clone, Debug, Default)]
pub struct TraceOptions {
    /// `net.core.netdev_budget`: a NET_RX run handling this many packets was squeezed by
    /// the budget (default 300).
    pub netdev_budget: Option<u64>,
    /// `net.core.netdev_budget_usecs`: a shorter run that lasted this long was squeezed
    /// by time (default 2000).
    pub netdev_budget_usecs: Option<u64>,
    /// Use `raw_tp` for every hook even where `tp_btf` would work (the fallback path,
    /// for tests and for comparing the two).
    pub force_raw_tp: bool,
    /// When `softirq_raise` is attached (its only product is the raise-to-entry latency).
    pub raise_timing: RaiseTiming,
}

/// When the `softirq_raise` hook is attached. It fires for every raise (0.03 runs per
/// forwarded packet on a saturated veth router) but only serves the raise-to-entry
/// latency, which is a sample anyway (at most one timed run per millisecond per CPU and
/// vector); attached all the time it cost about a fifth of the tier (docs/trace.md,
/// "Overhead").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RaiseTiming {
    /// Attached all the time: a timed run every millisecond per CPU and vector.
    Always,
    /// Attached for `window` of every `period` by a thread (as the per-packet tier's
    /// stage programs), detached in between: the latency is sampled from the runs
    /// raised inside the windows.
    InWindows(Windows),
}

impl RaiseTiming {
    /// The default: 100 ms of every second (a tenth of the hook's cost).
    pub const DEFAULT_WINDOWS: Windows = Windows {
        window: std::time::Duration::from_millis(100),
        period: std::time::Duration::from_secs(1),
    };
}

impl Default for RaiseTiming {
    fn default() -> Self {
        RaiseTiming::InWindows(RaiseTiming::DEFAULT_WINDOWS)
    }
}

/// The hook `RaiseTiming` is about.
const RAISE_HOOK: &str = "softirq_raise";

/// One hook: the tracepoint, and what is lost without it.
struct Hook {
    tracepoint: &'static str,
    group: &'static str,
    loses: &'static str,
    /// Architecture-specific (x86 `irq_vectors`): silently skipped where absent.
    optional: bool,
    /// Attached only on kernels older than this (major, minor): where it is useless
    /// from this version on and would only cost.
    older_than: Option<(u32, u32)>,
}

const fn hook(tracepoint: &'static str, group: &'static str, loses: &'static str) -> Hook {
    Hook {
        tracepoint,
        group,
        loses,
        optional: false,
        older_than: None,
    }
}

const fn vector(tracepoint: &'static str) -> Hook {
    Hook {
        tracepoint,
        group: "irq_vectors",
        loses: "",
        optional: true,
        older_than: None,
    }
}

const NR_HOOKS: usize = 10;

const HOOKS: [Hook; NR_HOOKS] = [
    hook("napi_poll", "napi", "per-NAPI polls, packets and contexts"),
    hook("softirq_raise", "irq", "softirq raise-to-entry latency"),
    hook("softirq_entry", "irq", "measured softirq time and contexts"),
    hook("softirq_exit", "irq", "measured softirq time"),
    hook("irq_handler_entry", "irq", "measured hard-IRQ time"),
    hook("irq_handler_exit", "irq", "measured hard-IRQ time"),
    vector("local_timer_exit"),
    vector("call_function_single_exit"),
    vector("call_function_exit"),
    // Since 5.8 the reschedule IPI is a "simple" system vector (x86
    // DEFINE_IDTENTRY_SYSVEC_SIMPLE): no irq_exit, so no softirq ever runs on its way
    // out, and marking its end would only misplace a bottom-half re-enable that
    // follows within 4 us. Before 5.8, with its tracepoint on, it ran irq_exit.
    // Profiled on a loaded host it fired 7 times per NET_RX softirq run.
    Hook {
        older_than: Some((5, 8)),
        ..vector("reschedule_exit")
    },
];

/// (major, minor) of a kernel release such as "6.18.44-fc"; `None` if it does not start
/// that way.
fn kernel_version(release: &str) -> Option<(u32, u32)> {
    let mut parts = release.split(['.', '-']);
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

macro_rules! program_pairs {
    ($p:expr) => {
        [
            (&mut $p.btf_napi_poll, &mut $p.raw_napi_poll),
            (&mut $p.btf_softirq_raise, &mut $p.raw_softirq_raise),
            (&mut $p.btf_softirq_entry, &mut $p.raw_softirq_entry),
            (&mut $p.btf_softirq_exit, &mut $p.raw_softirq_exit),
            (&mut $p.btf_irq_handler_entry, &mut $p.raw_irq_handler_entry),
            (&mut $p.btf_irq_handler_exit, &mut $p.raw_irq_handler_exit),
            (&mut $p.btf_local_timer_exit, &mut $p.raw_local_timer_exit),
            (
                &mut $p.btf_call_function_single_exit,
                &mut $p.raw_call_function_single_exit,
            ),
            (
                &mut $p.btf_call_function_exit,
                &mut $p.raw_call_function_exit,
            ),
            (&mut $p.btf_reschedule_exit, &mut $p.raw_reschedule_exit),
        ]
    };
}

/// The loaded and attached always-on tier.
pub struct AlwaysOn {
    // Field order matters: links and the raise windows' thread detach before the object
    // closes.
    links: Vec<Link>,
    /// The thread attaching `softirq_raise` in windows ([`RaiseTiming::InWindows`]).
    raise_windows: Option<WindowDriver>,
    raise_timing: RaiseTiming,
    skel: NapiTraceSkel<'static>,
    /// Which program of each pair is loaded (for reattach).
    plan: [Attach; NR_HOOKS],
    /// `tp_btf` or `raw_tp`.
    pub attach_kind: &'static str,
    /// What could not be attached, and what is lost: (what, why).
    pub notices: Vec<(String, String)>,
}

fn btf_has_type(btf: &[u8], name: &str) -> bool {
    let needle: Vec<u8> = name.bytes().chain(std::iter::once(0)).collect();
    btf.windows(needle.len()).any(|w| w == needle.as_slice())
}

fn open(
    options: &TraceOptions,
    plan: &[Attach; NR_HOOKS],
) -> Result<OpenNapiTraceSkel<'static>, StartError> {
    // The skeleton borrows its storage for as long as it lives; one small allocation per
    // start is leaked so the loaded object can be owned by `AlwaysOn`.
    let storage: &'static mut MaybeUninit<OpenObject> = Box::leak(Box::new(MaybeUninit::uninit()));
    let mut open = NapiTraceSkelBuilder::default()
        .open(storage)
        .map_err(|e| StartError::Load(e.to_string()))?;
    if let Some(rodata) = open.maps.rodata_data.as_deref_mut() {
        rodata.netdev_budget = options.netdev_budget.unwrap_or(300);
        rodata.netdev_budget_ns = options.netdev_budget_usecs.unwrap_or(2000) * 1000;
    }
    // Every CPU numbers its own (NAPI instance, context) slots, so the slot index holds
    // up to NAPI_SLOTS entries per CPU.
    let slots = u32::try_from(NAPI_SLOTS * possible_cpus()).unwrap_or(u32::MAX);
    open.maps
        .napi_slots
        .set_max_entries(slots)
        .map_err(|e| StartError::Load(format!("cannot size map napi_slots: {e}")))?;
    for ((btf, raw), attach) in program_pairs!(open.progs).into_iter().zip(plan) {
        btf.set_autoload(*attach == Attach::Btf);
        raw.set_autoload(*attach == Attach::Raw);
    }
    Ok(open)
}

/// Attaches the loaded program of every hook: the links, and a notice for every
/// non-optional hook that could not be attached.
fn attach_all(
    skel: &mut NapiTraceSkel<'static>,
    plan: &[Attach; NR_HOOKS],
    leave_out: &[&str],
) -> (Vec<Link>, Vec<(String, String)>) {
    let (mut links, mut notices) = (Vec::new(), Vec::new());
    for ((btf_prog, raw_prog), (hook, attach)) in program_pairs!(skel.progs)
        .into_iter()
        .zip(HOOKS.iter().zip(plan))
    {
        if leave_out.contains(&hook.tracepoint) {
            continue;
        }
        let prog = match attach {
            Attach::Btf => btf_prog,
            Attach::Raw => raw_prog,
            Attach::Off => continue,
        };
        match prog.attach() {
            Ok(link) => links.push(link),
            Err(e) if !hook.optional => notices.push((
                format!("tracepoint {}:{}", hook.group, hook.tracepoint),
                format!("cannot attach ({e}): {} absent", hook.loses),
            )),
            Err(_) => {}
        }
    }
    (links, notices)
}

/// The hooks not attached all the time: `leave_out`, and `softirq_raise` when it is
/// attached in windows.
fn leave_out_for<'a>(timing: RaiseTiming, leave_out: &[&'a str]) -> Vec<&'a str> {
    let mut all = leave_out.to_vec();
    if matches!(timing, RaiseTiming::InWindows(_)) {
        all.push(RAISE_HOOK);
    }
    all
}

/// Starts the thread attaching `softirq_raise` in windows, when the timing says so and
/// the hook is neither left out nor off on this kernel.
fn start_raise_windows(
    skel: &NapiTraceSkel<'static>,
    plan: &[Attach; NR_HOOKS],
    timing: RaiseTiming,
    leave_out: &[&str],
) -> Result<Option<WindowDriver>, String> {
    use std::os::fd::AsFd as _;
    let RaiseTiming::InWindows(windows) = timing else {
        return Ok(None);
    };
    let Some(index) = HOOKS.iter().position(|h| h.tracepoint == RAISE_HOOK) else {
        return Ok(None);
    };
    if leave_out.contains(&RAISE_HOOK) {
        return Ok(None);
    }
    let (fd, raw_tracepoint) = match plan[index] {
        Attach::Btf => (skel.progs.btf_softirq_raise.as_fd(), None),
        Attach::Raw => (
            skel.progs.raw_softirq_raise.as_fd(),
            std::ffi::CString::new(RAISE_HOOK).ok(),
        ),
        Attach::Off => return Ok(None),
    };
    let fd = fd
        .try_clone_to_owned()
        .map_err(|e| format!("cannot duplicate the softirq_raise program's fd: {e}"))?;
    Ok(Some(WindowDriver::start(
        windows,
        vec![WindowProgram { fd, raw_tracepoint }],
        None,
        None,
    )))
}

impl AlwaysOn {
    /// Loads and attaches the programs.
    pub fn start(options: &TraceOptions) -> Result<AlwaysOn, StartError> {
        let btf = std::fs::read(VMLINUX_BTF).map_err(|_| StartError::NoBtf)?;
        let mut plan = [Attach::Raw; NR_HOOKS];
        let running = std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .ok()
            .and_then(|r| kernel_version(r.trim()));
        for (attach, hook) in plan.iter_mut().zip(&HOOKS) {
            // An unknown version keeps the hook: it is harmless where useless.
            if let (Some(limit), Some(running)) = (hook.older_than, running) {
                if running >= limit {
                    *attach = Attach::Off;
                    continue;
                }
            }
            if btf_has_type(&btf, &format!("btf_trace_{}", hook.tracepoint)) {
                *attach = if options.force_raw_tp {
                    Attach::Raw
                } else {
                    Attach::Btf
                };
            } else if hook.optional {
                *attach = Attach::Off;
            }
        }
        drop(btf);
        let mut notices = Vec::new();
        let (mut skel, plan, attach_kind) = match open(options, &plan)?.load() {
            Ok(skel) => {
                let kind = Attach::kind(&plan);
                (skel, plan, kind)
            }
            Err(first) => {
                if matches!(load_error(first), StartError::NoPrivilege(_))
                    && !napilab_probe::kernel::is_root()
                {
                    return Err(StartError::NoPrivilege("not root".into()));
                }
                let raw = plan.map(|a| if a == Attach::Off { a } else { Attach::Raw });
                let skel = open(options, &raw)?.load().map_err(load_error)?;
                notices.push((
                    "BPF tp_btf programs".to_string(),
                    "the BTF-typed tracepoint programs did not load; using raw tracepoints (same data, slightly higher cost)".to_string(),
                ));
                (skel, raw, "raw_tp")
            }
        };
        let maps = &skel.maps;
        for (name, actual, expected) in [
            (
                "napi_stats",
                maps.napi_stats.value_size(),
                (4 + WORK_SLOTS) * 8 + 16,
            ),
            ("napi_slots", maps.napi_slots.key_size(), 20),
            ("napi_slots", maps.napi_slots.value_size(), 28),
            (
                "softirq_stats",
                maps.softirq_stats.value_size(),
                (4 + LOG2_SLOTS) * 8,
            ),
            (
                "net_rx_stats",
                maps.net_rx_stats.value_size(),
                (4 + LOG2_SLOTS) * 8,
            ),
            ("irq_stats", maps.irq_stats.value_size(), 16),
            ("irq_stats", maps.irq_stats.max_entries(), IRQ_ARRAY),
            ("irq_stats_high", maps.irq_stats_high.value_size(), 16),
            ("napi_stats", maps.napi_stats.max_entries(), NAPI_SLOTS),
        ] {
            if actual as usize != expected {
                return Err(StartError::Load(format!(
                    "map {name} has a key, value or entry count of {actual}, the reader expects {expected}: napi_trace.h and snapshot.rs disagree"
                )));
            }
        }
        let leave_out = leave_out_for(options.raise_timing, &[]);
        let (links, attach_notices) = attach_all(&mut skel, &plan, &leave_out);
        notices.extend(attach_notices);
        let raise_windows = start_raise_windows(&skel, &plan, options.raise_timing, &[])
            .unwrap_or_else(|e| {
                notices.push((
                    "tracepoint irq:softirq_raise".to_string(),
                    format!("{e}: softirq raise-to-entry latency absent"),
                ));
                None
            });
        Ok(AlwaysOn {
            links,
            raise_windows,
            raise_timing: options.raise_timing,
            skel,
            plan,
            attach_kind,
            notices,
        })
    }

    /// Detaches every program and keeps them loaded, with their counts, until
    /// [`AlwaysOn::reattach`]: the untraced state of an A/B comparison without the cost
    /// of loading and verifying the object again.
    pub fn detach(&mut self) {
        self.raise_windows = None;
        self.links.clear();
    }

    /// Attaches the programs again after [`AlwaysOn::detach`]; returns how many hooks
    /// are attached. Does nothing when they are attached already.
    pub fn reattach(&mut self) -> usize {
        if self.links.is_empty() {
            self.reattach_without(&[]);
        }
        self.links.len()
    }

    /// Detaches everything, then attaches every hook but `leave_out` (tracepoint names
    /// as [`AlwaysOn::hooks`] gives them): what the tier costs without them, measured by
    /// the overhead benchmark. Returns how many hooks are attached all the time (a
    /// windowed `softirq_raise` is not among them).
    pub fn reattach_without(&mut self, leave_out: &[&str]) -> usize {
        self.detach();
        let all_the_time = leave_out_for(self.raise_timing, leave_out);
        self.links = attach_all(&mut self.skel, &self.plan, &all_the_time).0;
        self.raise_windows =
            start_raise_windows(&self.skel, &self.plan, self.raise_timing, leave_out)
                .unwrap_or(None);
        self.links.len()
    }

    /// Changes when `softirq_raise` is attached, from the next [`AlwaysOn::reattach`]
    /// after a [`AlwaysOn::detach`] (the overhead benchmark compares both timings).
    pub fn set_raise_timing(&mut self, timing: RaiseTiming) {
        self.raise_timing = timing;
    }

    /// Raise windows opened so far, and the first error of their thread (it attaches
    /// `softirq_raise` for a window of every period); `None` when the hook is attached
    /// all the time or not at all.
    pub fn raise_windows(&self) -> Option<(u64, Option<String>)> {
        self.raise_windows
            .as_ref()
            .map(|w| (w.windows(), w.error()))
    }

    /// The tracepoints this kernel's plan attaches (name without group, e.g.
    /// `napi_poll`): what an empty-program floor must cover to compare like with like.
    pub fn hooks(&self) -> Vec<&'static str> {
        HOOKS
            .iter()
            .zip(&self.plan)
            .filter(|(_, attach)| **attach != Attach::Off)
            .map(|(hook, _)| hook.tracepoint)
            .collect()
    }

    /// Number of attached hooks.
    pub fn attached(&self) -> usize {
        self.links.len()
    }

    /// Per loaded program: (name, runs, total run time in ns); see
    /// [`loader::program_costs`](crate::loader::program_costs).
    pub fn program_costs(&self) -> Vec<(String, u64, u64)> {
        use libbpf_rs::skel::Skel as _;
        crate::loader::program_costs(self.skel.object())
    }

    /// Reads every map; `cpus` are the CPUs to report measured time for.
    pub fn snapshot(&self, cpus: &[u32]) -> Snapshot {
        let mut snap = Snapshot {
            cpus: cpus.to_vec(),
            ..Snapshot::default()
        };
        self.read_napi(&mut snap);
        self.read_softirqs(&mut snap);
        self.read_net_rx(&mut snap);
        self.read_irqs(&mut snap);
        snap
    }

    /// NAPI polls per (instance, context, CPU) from napi_slots and napi_stats.
    fn read_napi(&self, snap: &mut Snapshot) {
        let maps = &self.skel.maps;
        // Each napi_slots entry names one (NAPI instance, context) pair on one CPU and
        // the napi_stats slot holding its counters on that CPU.
        let mut slot_values: HashMap<u32, Vec<Vec<u8>>> = HashMap::new();
        for key in maps.napi_slots.keys() {
            let Some(k) = words32(&key, 5) else { continue };
            let Some(context) = context(k[1]) else {
                continue;
            };
            let Ok(Some(slot)) = maps.napi_slots.lookup(&key, MapFlags::ANY) else {
                continue;
            };
            let Some(s) = words32(&slot, 3) else { continue };
            let (cpu, slot_index, ifindex, netns) = (k[3], s[0], s[1], s[2]);
            if let std::collections::hash_map::Entry::Vacant(e) = slot_values.entry(slot_index) {
                let Ok(Some(values)) = maps
                    .napi_stats
                    .lookup_percpu(&slot_index.to_ne_bytes(), MapFlags::ANY)
                else {
                    continue;
                };
                e.insert(values);
            }
            let Some(bytes) = slot_values
                .get(&slot_index)
                .and_then(|v| v.get(cpu as usize))
            else {
                continue;
            };
            let Some(w) = words64(bytes, 4 + WORK_SLOTS) else {
                continue;
            };
            if w[0] == 0 {
                continue;
            }
            snap.napi.insert(
                NapiKey {
                    napi_id: k[0],
                    unnamed_ifindex: k[2],
                    unnamed_netns: k[4],
                    cpu,
                    context,
                },
                NapiCounts {
                    polls: w[0],
                    packets: w[1],
                    full_budget: w[2],
                    ifindex,
                    netns,
                    work_hist: w[4..4 + WORK_SLOTS].to_vec(),
                    comm: c_string(bytes.get((4 + WORK_SLOTS) * 8..).unwrap_or_default()),
                    device: c_string(slot.get(12..28).unwrap_or_default()),
                },
            );
        }
    }

    /// Softirq runs per (CPU, vector, context) from softirq_stats.
    fn read_softirqs(&self, snap: &mut Snapshot) {
        let maps = &self.skel.maps;
        for index in 0..NR_SOFTIRQS * ExecContext::ALL.len() as u32 {
            let vector = index / ExecContext::ALL.len() as u32;
            let context = ExecContext::ALL[(index % ExecContext::ALL.len() as u32) as usize];
            let Ok(Some(values)) = maps
                .softirq_stats
                .lookup_percpu(&index.to_ne_bytes(), MapFlags::ANY)
            else {
                continue;
            };
            for (cpu, bytes) in values.iter().enumerate() {
                let Some(w) = words64(bytes, 4 + LOG2_SLOTS) else {
                    continue;
                };
                if w[0] == 0 && w[3] == 0 {
                    continue;
                }
                snap.softirq.insert(
                    (cpu as u32, vector, context),
                    SoftirqCounts {
                        count: w[0],
                        total_ns: w[1],
                        raise_lat_ns: w[2],
                        raise_lat_count: w[3],
                        log2_ns: w[4..].to_vec(),
                    },
                );
            }
        }
    }

    /// NET_RX action runs per (CPU, context) from net_rx_stats.
    fn read_net_rx(&self, snap: &mut Snapshot) {
        let maps = &self.skel.maps;
        for (i, context) in ExecContext::ALL.iter().enumerate() {
            let Ok(Some(values)) = maps
                .net_rx_stats
                .lookup_percpu(&(i as u32).to_ne_bytes(), MapFlags::ANY)
            else {
                continue;
            };
            for (cpu, bytes) in values.iter().enumerate() {
                let Some(w) = words64(bytes, 4 + LOG2_SLOTS) else {
                    continue;
                };
                if w[0] == 0 {
                    continue;
                }
                snap.net_rx.insert(
                    (cpu as u32, *context),
                    NetRxCounts {
                        runs: w[0],
                        packets: w[1],
                        budget_runs: w[2],
                        time_runs: w[3],
                        log2_packets: w[4..].to_vec(),
                    },
                );
            }
        }
    }

    /// Device hard IRQs per (irq, CPU) and the lost-event counters from .bss.
    fn read_irqs(&self, snap: &mut Snapshot) {
        let maps = &self.skel.maps;
        let (seen, napi_lost, irq_lost) = match maps.bss_data.as_deref() {
            // SAFETY: the .bss map is memory-mapped for the skeleton's lifetime; the BPF
            // programs write it concurrently, so every field is read volatile, by value.
            Some(bss) => unsafe {
                (
                    std::ptr::read_volatile(&bss.irq_seen),
                    std::ptr::read_volatile(&bss.napi_lost_polls),
                    std::ptr::read_volatile(&bss.irq_lost),
                )
            },
            None => ([0; IRQ_ARRAY], 0, 0),
        };
        snap.napi_lost_polls = napi_lost;
        snap.irq_lost = irq_lost;
        let mut irq_rows = |irq: u32, values: Vec<Vec<u8>>| {
            for (cpu, bytes) in values.iter().enumerate() {
                let Some(w) = words64(bytes, 2) else { continue };
                if w[0] == 0 {
                    continue;
                }
                snap.irq.insert(
                    (irq, cpu as u32),
                    IrqCounts {
                        count: w[0],
                        total_ns: w[1],
                    },
                );
            }
        };
        for irq in (0..IRQ_ARRAY as u32).filter(|i| seen[*i as usize] != 0) {
            if let Ok(Some(values)) = maps
                .irq_stats
                .lookup_percpu(&irq.to_ne_bytes(), MapFlags::ANY)
            {
                irq_rows(irq, values);
            }
        }
        for key in maps.irq_stats_high.keys() {
            let Some(k) = words32(&key, 1) else { continue };
            if let Ok(Some(values)) = maps.irq_stats_high.lookup_percpu(&key, MapFlags::ANY) {
                irq_rows(k[0], values);
            }
        }
    }
}

fn context(raw: u32) -> Option<ExecContext> {
    ExecContext::ALL.get(raw as usize).copied()
}

/// Whether a BPF program fd of this process is still open (reads /proc/self/fdinfo).
pub fn own_programs_loaded() -> bool {
    let Ok(dir) = std::fs::read_dir(Path::new("/proc/self/fdinfo")) else {
        return false;
    };
    dir.flatten().any(|e| {
        std::fs::read_to_string(e.path())
            .map(|s| s.contains("prog_type:") && s.contains("prog_tag:"))
            .unwrap_or(false)
    })
}

/// Turns on the kernel's BPF run-time statistics for as long as the returned fd is open
/// (BPF_ENABLE_STATS); `None` when the kernel refuses.
pub fn enable_run_time_stats() -> Option<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd as _;
    // SAFETY: plain syscall wrapper; a non-negative result is a new fd we own.
    let fd = unsafe {
        libbpf_rs::libbpf_sys::bpf_enable_stats(libbpf_rs::libbpf_sys::BPF_STATS_RUN_TIME)
    };
    // SAFETY: fd is a fresh descriptor returned by the kernel.
    (fd >= 0).then(|| unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) })
}

/// The CPUs whose per-CPU slots the maps hold.
pub fn possible_cpus() -> usize {
    libbpf_rs::num_possible_cpus().unwrap_or(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_versions_compare_by_major_then_minor() {
        assert_eq!(kernel_version("6.18.44-fc-v657"), Some((6, 18)));
        assert_eq!(kernel_version("5.8.0"), Some((5, 8)));
        assert_eq!(kernel_version("5.4-rc1"), Some((5, 4)));
        assert_eq!(kernel_version("linux"), None);
        assert!(Some((5, 10)) >= Some((5, 8)) && (4, 19) < (5, 8));
        let reschedule = HOOKS.iter().find(|h| h.tracepoint == "reschedule_exit");
        assert_eq!(reschedule.and_then(|h| h.older_than), Some((5, 8)));
    }
}
