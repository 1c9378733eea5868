//! The floor of tracing: empty `tp_btf` programs (`bpf/floor.bpf.c`, one per
//! tracepoint, named `floor_<tracepoint>`). The cost benchmarks attach them beside the
//! real tiers so the fixed price of a program run on the running kernel is measured in
//! the same run: on `net:netif_receive_skb` for the per-packet tier (docs/trace.md,
//! "Per-packet tier"), on the always-on tier's own hooks for that tier ("Overhead").

use std::mem::MaybeUninit;

use libbpf_rs::skel::{OpenSkel, Skel, SkelBuilder};
use libbpf_rs::{Link, OpenObject};

use crate::loader::StartError;
use crate::windows::{WindowDriver, WindowProgram, Windows};

crate::bpf_skeleton!("floor");

/// The loaded and attached empty programs; dropping it detaches and unloads them.
pub struct FloorProbe {
    // Field order matters: the window thread and the links detach before the object
    // closes.
    windows: Option<WindowDriver>,
    links: Vec<Link>,
    skel: skel::FloorSkel<'static>,
}

const PREFIX: &str = "floor_";
const CLOCKED_PREFIX: &str = "floor_clock_";

impl FloorProbe {
    /// One empty program on `net:netif_receive_skb`: one run per received packet.
    pub fn start() -> Result<FloorProbe, StartError> {
        FloorProbe::start_on(&["netif_receive_skb"], &[])
    }

    /// Empty programs on each of `tracepoints` (names without their group, as the
    /// always-on tier's [`crate::AlwaysOn::hooks`] gives them); those also in `clocked`
    /// read the clock once (`floor_clock_<tracepoint>`, only where the object has one).
    /// Only these are loaded, so a tracepoint this kernel lacks fails only when asked
    /// for, naming it.
    pub fn start_on(tracepoints: &[&str], clocked: &[&str]) -> Result<FloorProbe, StartError> {
        let skel = load(tracepoints, clocked)?;
        let mut links = Vec::new();
        for prog in skel.object().progs_mut() {
            if !prog.autoload() {
                continue;
            }
            let link = prog.attach().map_err(|e| {
                StartError::Load(format!(
                    "cannot attach {}: {e}",
                    prog.name().to_string_lossy()
                ))
            })?;
            links.push(link);
        }
        Ok(FloorProbe {
            windows: None,
            links,
            skel,
        })
    }

    /// One empty program on `tracepoint`, attached `links` times for `plan.window` of
    /// every `plan.period` by the thread that drives the tiers' tracing windows: on a
    /// tracepoint that does not fire (e.g. `mark_victim`, an OOM kill), what the
    /// windows cost by attaching and detaching alone (patching the kernel's text,
    /// which on a VM means IPIs to every CPU), apart from any program run. `links` is
    /// how many programs the windows being measured attach at each opening (one for
    /// the always-on tier's `softirq_raise`, the per-packet tier's stage programs).
    pub fn windowed_on(
        tracepoint: &str,
        links: usize,
        plan: Windows,
    ) -> Result<FloorProbe, StartError> {
        use std::os::fd::AsFd as _;
        plan.validate().map_err(StartError::Load)?;
        let skel = load(&[tracepoint], &[])?;
        let mut programs = Vec::new();
        for prog in skel.object().progs() {
            if !prog.autoload() {
                continue;
            }
            // Each copy is attached as a link of its own (the kernel registers a raw
            // tracepoint's probe per link), as each stage program of a window is.
            for _ in 0..links.max(1) {
                let fd = prog.as_fd().try_clone_to_owned().map_err(|e| {
                    StartError::Load(format!("cannot duplicate {tracepoint}'s program fd: {e}"))
                })?;
                programs.push(WindowProgram {
                    fd,
                    raw_tracepoint: None,
                });
            }
        }
        Ok(FloorProbe {
            windows: Some(WindowDriver::start(plan, programs, None, None)),
            links: Vec::new(),
            skel,
        })
    }

    /// Why a windowed probe measured nothing: its window thread failed to attach, or
    /// opened no window yet. `None` when windows opened (and for a probe without
    /// windows).
    pub fn windows_failure(&self) -> Option<String> {
        match self.windows_opened()? {
            (_, Some(e)) => Some(format!("its window thread failed: {e}")),
            (0, None) => Some("it opened no tracing window".into()),
            _ => None,
        }
    }

    /// Windows opened so far and the first attach error, for a windowed probe.
    pub fn windows_opened(&self) -> Option<(u64, Option<String>)> {
        self.windows.as_ref().map(|w| (w.windows(), w.error()))
    }

    /// Per loaded program: (name, runs, total run time in ns), counted while the
    /// kernel's BPF run-time statistics are on; see
    /// [`loader::program_costs`](crate::loader::program_costs).
    pub fn program_costs(&self) -> Vec<(String, u64, u64)> {
        use libbpf_rs::skel::Skel as _;
        crate::loader::program_costs(self.skel.object())
    }

    /// Number of attached empty programs.
    pub fn attached(&self) -> usize {
        self.links.len()
    }
}

/// Opens `floor.bpf.c` and loads only the programs of `tracepoints` (those also in
/// `clocked` read the clock once), so a tracepoint this kernel lacks fails only when
/// asked for, naming it.
fn load(tracepoints: &[&str], clocked: &[&str]) -> Result<skel::FloorSkel<'static>, StartError> {
    // As in packets.rs: one small allocation per start is leaked so the loaded object
    // can be owned by the returned value.
    let storage: &'static mut MaybeUninit<OpenObject> = Box::leak(Box::new(MaybeUninit::uninit()));
    let mut open = skel::FloorSkelBuilder::default()
        .open(storage)
        .map_err(|e| StartError::Load(e.to_string()))?;
    // The program each tracepoint gets: its clocked one if asked for, else the empty one.
    let wanted: Vec<String> = tracepoints
        .iter()
        .map(|t| {
            if clocked.contains(t) {
                format!("{CLOCKED_PREFIX}{t}")
            } else {
                format!("{PREFIX}{t}")
            }
        })
        .collect();
    let mut missing = wanted.clone();
    for mut prog in open.open_object_mut().progs_mut() {
        let name = prog.name().to_string_lossy().into_owned();
        let load = wanted.contains(&name);
        missing.retain(|w| *w != name);
        prog.set_autoload(load);
    }
    if let Some(missing) = missing.first() {
        return Err(StartError::Load(format!(
            "floor.bpf.c has no program {missing} (add a FLOOR or FLOOR_CLOCK line for its tracepoint)"
        )));
    }
    open.load().map_err(|e| {
        StartError::Load(format!(
            "cannot load empty programs on {}: {e}",
            tracepoints.join(", ")
        ))
    })
}
