//! Predict before you tune: a twin of a live host, built from one of its Observations
//! (the map, the observed load and the trace tier's times), run with the host's current
//! per-NAPI settings and with a tune profile's, so `napilab tune plan PROFILE
//! --predict` can say what the profile would change before anything changes.
//!
//! What it does, in order:
//! 1. Reads the current settings of each NAPI instance of the profile's devices from
//!    the map (context, the CPU that polls it, deferral) and the profile's settings
//!    from its items ([`settings_after`]).
//! 2. Refuses when the twin is out of its depth ([`Refusal`]): a driver it has no
//!    model of (veth only), a setting it has no model of, a mechanism the host's
//!    kernel does not have, no trace tier, or too little load to fit.
//! 3. Builds the twin of the veth receive path (crate::twin_plan's veth host, net
//!    settings and ingress) at the observed packet rate and frame size, and fits the
//!    veth-lab profile's per-packet stage costs, one factor for all, so that the twin's
//!    packet CPU for the current settings matches the measured one (NET_RX softirq
//!    time from the trace tier plus the NAPI kthreads' CPU).
//! 4. Runs the fitted twin over [`SEEDS`] seeds for the current and the profile's
//!    settings and reports, per CPU, the CPU share by context, polls/s, packets per
//!    poll and the notification ("IRQ") rate, each as a mean with its interval.

use serde::{Deserialize, Serialize};

use napilab_core::device_join::DeviceJoin;
use napilab_core::{Observation, Poller};
use napilab_tune::model::{Kind, Value};
use napilab_tune::profile::{parse_setting, value_for, Params, Profile as TuneProfile};

use crate::config::{
    ClassConfig, MeasurementConfig, NapiContext, Pattern, QdiscKind, RxQueueConfig, ThreadPolicy,
    TrafficConfig, THREADED_BUSY_POLL_KERNEL,
};
pub use crate::predict_inputs::{Measured, MeasuredCpu, NapiSettings};
use crate::sender_rate::{self, SenderRate};
use crate::twin_plan::{lab_host, veth_ingress, VETH_RING, VETH_WEIGHT};
pub use crate::wake_up::{run_delay, wake_up_delay, RunDelay, WakeUp, MIN_WAKE_UP_RUNS};
use crate::{Profile, SimConfig};

pub const PREDICTION_SCHEMA: &str = "napilab.tune-prediction/1";
/// Fewest packets per second on the profile's devices to fit the per-packet cost: below
/// it the fixed costs per poll and per wake-up dominate the measured time and the
/// per-packet cost is not determined.
pub const MIN_PPS: f64 = 1_000.0;
/// Fewest traced NAPI polls of the devices over the observation.
pub const MIN_POLLS: u64 = 100;
/// Twin runs per setting: the interval of each figure is over these seeds.
pub const SEEDS: u64 = 5;
/// Confidence level of the intervals.
pub const LEVEL: f64 = 0.95;
/// The share of the packets the twin may lose at its headroom: the lab's default loss
/// threshold (docs/lab.md), so a transient at the start of a run is not a limit.
pub const HEADROOM_LOSS: f64 = 0.001;
/// Seeds of the headroom search, one bisection each: the interval is over them.
pub const HEADROOM_SEEDS: u64 = 3;
/// Twin runs per seed of the headroom search, the first at the observed load.
pub const HEADROOM_PROBES: u32 = 9;
/// The bisection stops when its bracket is narrower than this share of its top.
const HEADROOM_RESOLUTION: f64 = 0.02;
/// The twin's window per run (after its warm-up): long enough for thousands of polls
/// at the loads that pass [`MIN_PPS`] times ten, short enough for a plan.
const TWIN_WINDOW_MS: f64 = 200.0;
const TWIN_WARMUP_MS: f64 = 20.0;
/// The headroom search's window when wake-ups are drawn from a measured tail.
const TAIL_WINDOW_MS: f64 = 1000.0;
/// The fit stops when the twin's packet CPU is within this fraction of the measured.
const FIT_TOLERANCE: f64 = 0.02;
const FIT_ROUNDS: usize = 6;

/// The CPUs the NAPI kthreads of `current` or `target` settings would poll on (none
/// when neither polls in a kthread), for [`wake_up_delay`].
fn kthread_cpus(current: &[NapiSettings], target: &[NapiSettings]) -> Vec<u32> {
    let mut cpus: Vec<u32> = current
        .iter()
        .chain(target)
        .filter(|s| threaded(s))
        .map(|s| s.cpu)
        .collect();
    cpus.sort_unstable();
    cpus.dedup();
    cpus
}

fn threaded(s: &NapiSettings) -> bool {
    matches!(
        s.context,
        NapiContext::Threaded | NapiContext::ThreadedBusyPoll
    )
}

/// A figure over the twin's seeds: mean and its interval.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Figure {
    pub mean: f64,
    pub low: f64,
    pub high: f64,
}

impl Figure {
    /// A figure without spread.
    pub(crate) fn point(v: f64) -> Figure {
        Figure {
            mean: v,
            low: v,
            high: v,
        }
    }

    /// The figure times `k`.
    pub(crate) fn scaled(self, k: f64) -> Figure {
        Figure {
            mean: self.mean * k,
            low: self.low * k,
            high: self.high * k,
        }
    }

    fn of(values: &[f64]) -> Figure {
        let mean = values.iter().sum::<f64>() / values.len().max(1) as f64;
        match napilab_core::uncertainty::t_interval(values, LEVEL) {
            Some(ci) => Figure {
                mean,
                low: ci.low,
                high: ci.high,
            },
            None => Figure {
                mean,
                low: mean,
                high: mean,
            },
        }
    }
}

/// One CPU in the twin, for one set of settings.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CpuFigures {
    pub cpu: u32,
    /// Shares of the CPU: NET_RX softirq (with the twin's veth notification, which the
    /// sender's `veth_xmit` does), NAPI kthreads (their polls and context switches),
    /// busy polling.
    pub softirq: Figure,
    pub napi_thread: Figure,
    pub busy_poll: Figure,
    pub polls_per_s: Figure,
    pub packets_per_poll: Figure,
    /// Notifications per second that schedule the instance: veth has no IRQ, the
    /// sender's `veth_xmit` raises the poll (the twin's RX IRQ stands for it).
    pub irqs_per_s: Figure,
}

/// The twin's outcome for one set of settings.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Outcome {
    pub settings: Vec<NapiSettings>,
    pub packets_per_s: Figure,
    pub dropped_per_s: Figure,
    /// Packet-path CPU (all contexts, all CPUs) per offered packet, ns.
    pub cpu_ns_per_packet: Figure,
    pub cpus: Vec<CpuFigures>,
    /// Over all CPUs (`cpu` is u32::MAX): shares and rates summed, packets per poll
    /// over all polls.
    pub total: CpuFigures,
    /// The highest load the twin carries without losing packets ([`headroom`]);
    /// `None` in predictions made before it was searched.
    #[serde(default)]
    pub headroom_pps: Option<Headroom>,
}

/// The twin's headroom for one set of settings: the highest offered load (packets/s)
/// at which it loses at most [`HEADROOM_LOSS`] of the packets, one bisection per seed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Headroom {
    /// Mean and interval over the seeds.
    #[serde(flatten)]
    pub pps: Figure,
    /// Each seed's answer, in seed order.
    pub per_seed: Vec<f64>,
    /// How the searches ended: `converged`; `at_cap` (a seed lost nothing even at the
    /// cap, so the figure is a lower bound); `below_observed` (a seed lost packets at
    /// the observed load already: the headroom is under it); `iterations_exhausted`.
    pub stopped: String,
    /// The top of the search: what the instances could poll at the fitted per-packet
    /// stage cost alone, with no fixed cost and no wait.
    pub cap_pps: f64,
    pub loss_threshold: f64,
    /// Twin runs the searches made.
    pub runs: u32,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Prediction {
    pub schema: String,
    pub profile: String,
    pub hostname: Option<String>,
    pub kernel: String,
    pub devices: Vec<String>,
    pub measured: Measured,
    /// The fitted factor on the veth-lab profile's per-packet stage costs.
    pub fit_factor: f64,
    pub current: Outcome,
    pub predicted: Outcome,
    pub seeds: Vec<u64>,
    pub level: f64,
    /// Every assumption the prediction rests on, in words.
    pub assumed: Vec<String>,
    /// The NAPI kthreads' wake-up delay the twin ran with, and its source; `None` when
    /// neither settings polls in a kthread (and in predictions made before it was
    /// estimated).
    #[serde(default)]
    pub kthread_wake_up: Option<WakeUp>,
    /// Whether the sender's CPU set the observed rate, and the rate the twin ran the
    /// profile at because of it (crate::sender_rate); `None` in predictions made before
    /// it was assessed.
    #[serde(default)]
    pub sender_rate: Option<SenderRate>,
}

/// Why the twin will not predict, and what to do instead.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, thiserror::Error)]
#[error("no prediction: {reason}")]
pub struct Refusal {
    pub reason: String,
}

fn refuse<T>(reason: impl Into<String>) -> Result<T, Refusal> {
    Err(Refusal {
        reason: reason.into(),
    })
}

/// Predicts `profile` (with `given` parameters) on the host `obs` observed.
pub fn predict(
    obs: &Observation,
    profile: &TuneProfile,
    given: &Params,
) -> Result<Prediction, Refusal> {
    let params = given.resolve(profile).map_err(|e| Refusal {
        reason: e.to_string(),
    })?;
    let devs = params.list("dev").to_vec();
    let dev = match devs.as_slice() {
        [] => {
            return refuse(format!(
                "profile {} names no device: the prediction needs --dev",
                profile.name
            ))
        }
        [d] => d.clone(),
        _ => {
            return refuse(format!(
                "the twin predicts one device at a time (given: {}): run --predict once per --dev",
                devs.join(",")
            ))
        }
    };
    let device = obs
        .topology
        .devices
        .iter()
        .find(|d| d.name == dev)
        .ok_or_else(|| Refusal {
            reason: format!("device {dev} is not in this host's map: name one `napilab map` lists"),
        })?;
    let driver = device.driver.as_deref().unwrap_or("unknown");
    if driver != "veth" {
        return refuse(format!(
            "{dev} uses driver {driver}: the twin has a model of a live host's veth receive path only (a NIC's ring, interrupt moderation and DMA are fitted per machine, docs/sim.md); measure the profile instead (napilab tune apply, then napilab observe)"
        ));
    }
    let kernel = obs.origin.kernel.clone().unwrap_or_default();
    let Some(version) = crate::config::parse_kernel(&kernel) else {
        return refuse(format!(
            "the observation names no kernel release ({kernel:?}): observe this host again"
        ));
    };
    let traced: Vec<&napilab_core::Interval> =
        obs.intervals.iter().filter(|i| i.trace.is_some()).collect();
    if traced.is_empty() {
        return refuse("the observation has no trace tier (it needs root and BPF): the fit needs the measured softirq time per packet; run as root on a kernel with BPF");
    }
    let current = current_settings(device, &traced)?;
    let target = settings_after(&current, profile, &params)?;
    if target
        .iter()
        .any(|s| s.context == NapiContext::ThreadedBusyPoll)
        && version < THREADED_BUSY_POLL_KERNEL
    {
        let (maj, min) = THREADED_BUSY_POLL_KERNEL;
        return refuse(format!(
            "profile {} needs threaded busy polling, a Linux {maj}.{min} mechanism; this host runs {kernel}, which cannot apply it: upgrade the kernel to {maj}.{min} or later, or predict `threaded`",
            profile.name
        ));
    }

    let timer = crate::deferral_timer::assess(&target, &obs.host.timer)
        .map_err(|reason| Refusal { reason })?;

    let measured = measure(obs, &dev)?;
    if measured.packets_per_s < MIN_PPS || measured.polls < MIN_POLLS {
        return refuse(format!(
            "too little load to fit: {dev} received {:.0} packets/s in {} traced polls over {:.1} s; the fit needs at least {MIN_PPS:.0} packets/s and {MIN_POLLS} polls (observe under the load you want to tune for, or longer with --for)",
            measured.packets_per_s, measured.polls, measured.seconds
        ));
    }
    let (pps, frame_bytes) = (measured.packets_per_s, measured.frame_bytes);
    let measured_share = measured.total.softirq + measured.total.napi_thread;
    let mut twin = TwinHost::of(obs, version, &current, &target, pps, frame_bytes);
    twin.burst = sender_burst(&current, &measured);
    let mut base = crate::calibrate::LabProfile::load(crate::calibrate::VETH_LAB_NAME)
        .map_err(|e| Refusal {
            reason: format!("the shipped veth-lab profile does not load: {e}"),
        })?
        .profile;
    let device = DeviceJoin::new(&obs.topology, &dev);
    let (kthread_cpus, pinned) = (kthread_cpus(&current, &target), params.has("cpus"));
    let wake_up = wake_up_delay(
        &traced,
        &obs.host.wake_up,
        &device,
        &kthread_cpus,
        pinned,
        base.latency_ns.irq_delivery,
    )
    .map(|w| w.with_probed_samples(&obs.host.wake_up, &kthread_cpus, pinned));
    if let Some(w) = &wake_up {
        base.latency_ns.irq_delivery = w.delay_ns.round() as u64;
        base.latency_ns.wake_up_samples = w.samples_ns.clone();
    }
    let (factor, fitted, residual) = fit(&twin, &current, &base, measured_share)?;
    let seeds: Vec<u64> = (1..=SEEDS).collect();
    let mut current_out = outcome(&twin, &current, &fitted, &seeds)?;
    let headroom_seeds: Vec<u64> = (1..=HEADROOM_SEEDS).collect();
    current_out.headroom_pps = Some(headroom(&twin, &current, &fitted, &headroom_seeds)?);
    let sender = sender_rate::observe(&traced, &device, &measured);
    let (predicted, sender) = predicted_outcome(
        &twin,
        &target,
        &fitted,
        &seeds,
        sender,
        (params.has("cpus"), obs.host.cpus.len()),
    )?;

    let assumed = assumptions(&Assumed {
        factor,
        residual,
        measured: &measured,
        dev: &dev,
        seeds: seeds.len(),
        wake_up: wake_up.as_ref(),
        current: &current,
        target: &target,
        placed: params.has("cpus"),
        sender: &sender,
        burst: twin.burst,
        timer: timer.as_deref(),
    });
    Ok(Prediction {
        schema: PREDICTION_SCHEMA.into(),
        profile: profile.name.clone(),
        hostname: obs.origin.hostname.clone(),
        kernel,
        devices: vec![dev],
        measured,
        fit_factor: factor,
        current: current_out,
        predicted,
        seeds,
        level: LEVEL,
        assumed,
        kthread_wake_up: wake_up,
        sender_rate: Some(sender),
    })
}

/// Whether every instance is polled in NET_RX softirq (veth: in the sender's).
fn all_in_softirq(settings: &[NapiSettings]) -> bool {
    settings.iter().all(|s| s.context == NapiContext::Softirq)
}

/// How many packets the sender hands the device at once, as the twin's arrivals come.
/// Where every instance is polled in NET_RX softirq, veth's poll runs when the sender's
/// transmit ends (`veth_xmit` schedules it on the sending CPU, the softirq runs at its
/// bh-enable), so a poll takes what one send brought: one datagram from a `sendmsg`
/// per packet, a batch from XDP live frames or `sendmmsg`. The measured packets per
/// poll, rounded, at most a poll's weight, is that batch. In a kthread or busy poll the
/// batches are the poller's, not the sender's: single packets then.
fn sender_burst(current: &[NapiSettings], measured: &Measured) -> u32 {
    if all_in_softirq(current) {
        measured
            .total
            .packets_per_poll
            .round()
            .clamp(1.0, f64::from(VETH_WEIGHT)) as u32
    } else {
        1
    }
}

/// What a prediction assumed, in [`assumptions`]' words.
struct Assumed<'a> {
    factor: f64,
    residual: f64,
    measured: &'a Measured,
    dev: &'a str,
    seeds: usize,
    wake_up: Option<&'a WakeUp>,
    current: &'a [NapiSettings],
    target: &'a [NapiSettings],
    /// The profile was given the kthreads' CPUs.
    placed: bool,
    sender: &'a SenderRate,
    /// Packets per batch of the twin's arrivals ([`sender_burst`]).
    burst: u32,
    /// What the prediction assumed of the deferral timer (crate::deferral_timer).
    timer: Option<&'a str>,
}

/// What a prediction assumed and where the twin is out of its depth, in words.
fn assumptions(a: &Assumed<'_>) -> Vec<String> {
    let m = a.measured;
    let mut assumed = vec![
        format!("the twin is the veth receive path of crate napilab-sim with the shipped veth-lab profile's costs (fitted on the lab machine), its per-packet stage costs (poll, IP stack, transmit) scaled by {:.3} so that the twin's packet CPU for the current settings matches the measured {:.0} ns per packet (NET_RX softirq time from the trace tier plus the NAPI kthreads' CPU over {:.1} s); the fit is left at {:+.1}%", a.factor, m.cpu_ns_per_packet, m.seconds, a.residual * 100.0),
        if a.burst > 1 {
            format!("the load stays as observed: {:.0} packets/s of {:.0}-byte frames on {}, in evenly spaced batches of {} packets back to back (the {:.1} packets a softirq poll took: veth's softirq polls once per send, so a poll's packets are what one send handed over, as XDP live frames or sendmmsg do), split evenly over the instances", m.packets_per_s, m.frame_bytes, a.dev, a.burst, m.total.packets_per_poll)
        } else {
            format!("the load stays as observed: {:.0} packets/s of {:.0}-byte frames on {}, evenly spaced (a sender that sends one datagram at a time, as veth's synchronous softirq sees it; the current settings poll {}), split evenly over the instances", m.packets_per_s, m.frame_bytes, a.dev, if all_in_softirq(a.current) { format!("{:.1} packets a softirq poll", m.total.packets_per_poll) } else { "outside the sender's softirq, so its batches are not seen".to_string() })
        },
        format!("the sender's own CPU (its system calls) is not in the twin: in softirq mode veth's poll runs in the sender's softirq, so the twin's CPU is the packet path only. A sender whose CPU was at least {:.0}% busy (/proc/stat) while it ran the device's softirq polls is sender-limited: its cost per packet is that CPU's busy time less steal and the measured packet path there, per packet; once the profile moves the poll off that CPU it sends at 1 / (its cost + the twin's notification cost per packet, which stays on its CPU), unless the profile's headroom is lower; everything else on that CPU counts as the sender's cost. Here: {}", sender_rate::SATURATED_BUSY * 100.0, a.sender.says),
        "packets the host delivers locally are run through the twin's forwarding path (IP stack and transmit); the fitted factor absorbs the difference in cost".into(),
        format!("intervals: Student's t at {:.0}% over {} twin seeds (the twin's own variation, not the host's)", LEVEL * 100.0, a.seeds),
    ];
    match a.wake_up {
        Some(w) if !w.samples_ns.is_empty() => assumed.push(format!("a NAPI kthread runs one of the wake-up probe's delays after veth schedules it onto an idle CPU, drawn at random ({}); its woken CPU's median {:.1} us stands for the rest of the twin. The headroom at {:.1}% loss is set by the longest of them, which a few thousand wake-ups measure poorly, and on a VM whose idle vCPUs halt their share moves from minute to minute (on the project's VM 1.00% and 0.10% over 1 ms at the starts of two lab runs 20 minutes apart, 2026-11-28): the headroom holds for the host as it was probed", w.source, w.delay_ns / 1e3, HEADROOM_LOSS * 100.0)),
        Some(w) if w.measured => assumed.push(format!("a NAPI kthread runs {:.1} us after veth schedules it, every time: the mean wait of a woken kernel thread for its CPU on this host, {}; the real wait varies around it; polls/s, packets per poll and the headroom of threaded polling depend on it", w.delay_ns / 1e3, w.source)),
        Some(w) => assumed.push(format!("a NAPI kthread runs {:.0} us after veth schedules it: {}; polls/s, packets per poll and the headroom of threaded polling depend on it", w.delay_ns / 1e3, w.source)),
        None => {}
    }
    assumed.push(format!("headroom: the highest offered load at which the twin loses at most {:.1}% of the packets, by bisection from the observed load up to what the instances could poll at the fitted per-packet stage cost alone, {HEADROOM_PROBES} twin runs at most per seed over {HEADROOM_SEEDS} seeds, to {:.0}%; it is the packet path's limit: the twin has no sender, whose own system calls share a CPU with veth's softirq polling on a real host", HEADROOM_LOSS * 100.0, HEADROOM_RESOLUTION * 100.0));
    if let Some(t) = a.timer {
        assumed.push(t.to_string());
    }
    for s in a.target {
        if threaded(s)
            && !a.placed
            && a.current
                .iter()
                .any(|c| c.queue == s.queue && c.context == NapiContext::Softirq)
        {
            assumed.push(format!("the new kthread of {}-{} is unpinned: the twin places it on CPU {} (the CPU that polls it today and wakes it); give --cpus to place it", s.device, s.queue, s.cpu));
        }
    }
    assumed
}

/// What `obs` measured on device `dev`: its packet rate and frame size, and per CPU
/// (and over all CPUs) the softirq and NAPI kthread shares, polls/s and packets per
/// poll. The prediction's fit input, and what `tune verify` compares a prediction to.
pub fn measure(obs: &Observation, dev: &str) -> Result<Measured, Refusal> {
    // The polls of this namespace's `dev` only: the trace tier sees every namespace.
    let device = DeviceJoin::new(&obs.topology, dev);
    let traced: Vec<&napilab_core::Interval> =
        obs.intervals.iter().filter(|i| i.trace.is_some()).collect();
    if traced.is_empty() {
        return refuse("the observation has no trace tier (it needs root and BPF): the softirq time per packet is measured there; run as root on a kernel with BPF");
    }
    let seconds: f64 = traced.iter().map(|i| i.duration_s).sum::<f64>().max(1e-9);
    let mean_of = |f: &dyn Fn(&napilab_core::DeviceInterval) -> Option<f64>| {
        traced
            .iter()
            .map(|i| {
                i.devices
                    .iter()
                    .find(|d| d.name == dev)
                    .and_then(f)
                    .unwrap_or(0.0)
                    * i.duration_s
            })
            .sum::<f64>()
            / seconds
    };
    let pps = mean_of(&|d| d.rx_packets.as_ref().map(|m| m.value));
    let bits = mean_of(&|d| d.rx_bits.as_ref().map(|m| m.value));
    let (polls, packets) = traced
        .iter()
        .flat_map(|i| i.trace.iter().flat_map(|t| &t.napi))
        .filter(|n| device.polls(n))
        .fold((0u64, 0u64), |(polls, packets), n| {
            (polls + n.polls, packets + n.packets)
        });
    let cpus: Vec<MeasuredCpu> = obs
        .host
        .cpus
        .iter()
        .map(|&cpu| measured_cpu(&traced, seconds, &device, cpu))
        .collect();
    let total = MeasuredCpu {
        cpu: u32::MAX,
        softirq: cpus.iter().map(|c| c.softirq).sum(),
        napi_thread: cpus.iter().map(|c| c.napi_thread).sum(),
        polls_per_s: polls as f64 / seconds,
        packets_per_poll: if polls > 0 {
            packets as f64 / polls as f64
        } else {
            0.0
        },
    };
    Ok(Measured {
        seconds,
        packets_per_s: pps,
        frame_bytes: if pps > 0.0 { bits / 8.0 / pps } else { 0.0 }.clamp(60.0, 9_000.0),
        cpu_ns_per_packet: if pps > 0.0 {
            (total.softirq + total.napi_thread) / pps * 1e9
        } else {
            0.0
        },
        polls,
        cpus,
        total,
    })
}

/// The device's NAPI instances as they are: the context from the map, the CPU from
/// the kthread's placement or, for softirq polling, where the trace tier saw its polls.
fn current_settings(
    device: &napilab_core::Device,
    traced: &[&napilab_core::Interval],
) -> Result<Vec<NapiSettings>, Refusal> {
    if device.napis.is_empty() {
        return refuse(format!(
            "{} has no NAPI instance in the map: veth gets one with GRO or XDP (ethtool -K {} gro on), and the map needs netdev netlink (Linux 6.8+)",
            device.name, device.name
        ));
    }
    let mut out = Vec::new();
    // veth does not link its instances to its queues (netlink's queue-get has no
    // napi-id for them): it creates one instance per RX queue, in queue order, so the
    // k-th instance by id serves the k-th queue when neither side names the other.
    let mut napis: Vec<&napilab_core::Napi> = device.napis.iter().collect();
    napis.sort_by_key(|n| n.id);
    for (k, napi) in napis.into_iter().enumerate() {
        let mut queues = napi.rx_queues.clone();
        queues.extend(
            device
                .rx_queues
                .iter()
                .filter(|q| q.napi_id == Some(napi.id))
                .map(|q| q.index),
        );
        if queues.is_empty() {
            queues.extend(device.rx_queues.get(k).map(|q| q.index));
        }
        // The CPU that polled it most, from the trace tier.
        let mut by_cpu: std::collections::BTreeMap<u32, u64> = Default::default();
        for n in traced
            .iter()
            .flat_map(|i| i.trace.iter().flat_map(|t| &t.napi))
        {
            if n.napi_id == napi.id {
                *by_cpu.entry(n.cpu).or_default() += n.polls;
            }
        }
        let polled_on = by_cpu.iter().max_by_key(|(_, p)| **p).map(|(c, _)| *c);
        let (context, cpu) = match &napi.poller {
            Poller::Thread(t) => {
                let pinned = (t.allowed_cpus.len() == 1).then(|| t.allowed_cpus[0]);
                (
                    NapiContext::Threaded,
                    pinned.or(polled_on).or(t.last_cpu).unwrap_or(0),
                )
            }
            _ if napi.threaded == Some(true) => (NapiContext::Threaded, polled_on.unwrap_or(0)),
            _ => (NapiContext::Softirq, polled_on.unwrap_or(0)),
        };
        for &queue in queues.iter().take(1) {
            out.push(NapiSettings {
                device: device.name.clone(),
                queue,
                napi_id: Some(napi.id),
                context,
                cpu,
                defer_hard_irqs: napi
                    .defer_hard_irqs
                    .or(device.napi_defer_hard_irqs)
                    .unwrap_or(0),
                gro_flush_timeout_ns: napi
                    .gro_flush_timeout_ns
                    .or(device.gro_flush_timeout_ns)
                    .unwrap_or(0),
            });
        }
    }
    if out.is_empty() {
        return refuse(format!(
            "{}'s NAPI instances serve no RX queue in the map: the twin needs the instance of each RX queue",
            device.name
        ));
    }
    out.sort_by_key(|s| s.queue);
    Ok(out)
}

/// `current` with the profile's settings made: the NAPI context, the kthreads' CPUs
/// and deferral. Any other setting is refused by name: the twin would ignore it.
pub fn settings_after(
    current: &[NapiSettings],
    profile: &TuneProfile,
    params: &Params,
) -> Result<Vec<NapiSettings>, Refusal> {
    let mut out = current.to_vec();
    for item in &profile.items {
        if item.when.as_ref().is_some_and(|w| !params.has(w)) {
            continue;
        }
        let (kind, attr) = parse_setting(&item.setting).map_err(|reason| Refusal { reason })?;
        let modelled = matches!(
            (kind, attr.as_str()),
            (
                Kind::Napi,
                "threaded" | "defer-hard-irqs" | "gro-flush-timeout" | "irq-suspend-timeout"
            ) | (
                Kind::Device,
                "threaded" | "napi_defer_hard_irqs" | "gro_flush_timeout"
            ) | (Kind::Thread, "affinity")
        );
        if !modelled {
            return refuse(format!(
                "profile {} sets {}, which the twin has no model of on a live host: the prediction covers the NAPI context (threaded, softirq), the kthreads' CPUs and deferral; measure this profile instead (napilab tune apply, then napilab observe)",
                profile.name, item.setting
            ));
        }
        let devs: Option<Vec<String>> = match &item.dev {
            None => None,
            Some(d) => Some(
                params
                    .substitute(d, None)
                    .map_err(|reason| Refusal { reason })?
                    .split(',')
                    .map(|s| s.trim().to_string())
                    .collect(),
            ),
        };
        for s in out.iter_mut() {
            if devs.as_ref().is_some_and(|d| !d.contains(&s.device)) {
                continue;
            }
            if !queue_selected(item.queues.as_ref(), params, s.queue)? {
                continue;
            }
            let value =
                value_for(kind, &attr, &item.value, params, Some(s.queue)).map_err(|e| {
                    Refusal {
                        reason: format!("profile {}, {}: {e}", profile.name, item.setting),
                    }
                })?;
            match (attr.as_str(), value) {
                ("threaded", Value::Num(0)) => s.context = NapiContext::Softirq,
                ("threaded", Value::Num(2)) => s.context = NapiContext::ThreadedBusyPoll,
                ("threaded", Value::Num(_)) => s.context = NapiContext::Threaded,
                ("affinity", Value::Cpus(c)) => {
                    if let Some(&first) = c.first() {
                        s.cpu = first;
                    }
                }
                ("defer-hard-irqs" | "napi_defer_hard_irqs", Value::Num(n)) => {
                    s.defer_hard_irqs = u32::try_from(n).unwrap_or(u32::MAX)
                }
                ("gro-flush-timeout" | "gro_flush_timeout", Value::Num(n)) => {
                    s.gro_flush_timeout_ns = n
                }
                // Off is what the twin runs anyway; suspension needs an application that
                // busy polls, which the twin of a live host does not have.
                ("irq-suspend-timeout", Value::Num(0)) => {}
                ("irq-suspend-timeout", Value::Num(_)) => {
                    return refuse(format!(
                        "profile {} suspends IRQs while an application busy polls: the twin of a live host has no model of the host's applications; measure this profile instead (napilab tune apply, then napilab observe)",
                        profile.name
                    ))
                }
                (a, v) => {
                    return refuse(format!(
                        "profile {}: {a} = {v} is not a value the twin takes",
                        profile.name
                    ))
                }
            }
        }
    }
    Ok(out)
}

fn queue_selected(queues: Option<&toml::Value>, params: &Params, q: u32) -> Result<bool, Refusal> {
    Ok(match queues {
        None => true,
        Some(toml::Value::String(s)) if s == "all" => true,
        Some(toml::Value::Integer(i)) => *i == i64::from(q),
        Some(toml::Value::String(s)) => params
            .substitute(s, None)
            .map_err(|reason| Refusal { reason })?
            .split(',')
            .any(|p| p.trim().parse::<u32>().ok() == Some(q)),
        Some(other) => return refuse(format!("queues = {other} is not a queue list")),
    })
}

fn measured_cpu(
    traced: &[&napilab_core::Interval],
    seconds: f64,
    device: &DeviceJoin,
    cpu: u32,
) -> MeasuredCpu {
    let mut softirq = 0.0;
    let mut kthread = 0.0;
    let (mut polls, mut packets) = (0u64, 0u64);
    for i in traced {
        let Some(t) = &i.trace else { continue };
        if let Some(c) = t.cpus.iter().find(|c| c.cpu == cpu) {
            softirq += c.net_softirq.value * i.duration_s;
        }
        for th in &i.threads {
            if device.runs_kthread(&th.role) && th.last_cpu == Some(cpu) {
                kthread += th.cpu.as_ref().map_or(0.0, |m| m.value) * i.duration_s;
            }
        }
        for n in t.napi.iter().filter(|n| device.polls(n) && n.cpu == cpu) {
            polls += n.polls;
            packets += n.packets;
        }
    }
    let seconds = seconds.max(1e-9);
    MeasuredCpu {
        cpu,
        softirq: softirq / seconds,
        napi_thread: kthread / seconds,
        polls_per_s: polls as f64 / seconds,
        packets_per_poll: if polls > 0 {
            packets as f64 / polls as f64
        } else {
            0.0
        },
    }
}

/// The host the twin runs: what is the same for every setting.
#[derive(Clone)]
pub(crate) struct TwinHost {
    pub(crate) cpus: u32,
    pub(crate) hz: u32,
    pub(crate) kernel: String,
    pub(crate) netdev_budget: u32,
    pub(crate) netdev_budget_usecs: Option<u32>,
    pub(crate) pps: f64,
    pub(crate) frame_bytes: f64,
    /// Packets the sender hands the device at once ([`sender_burst`]).
    pub(crate) burst: u32,
}

impl TwinHost {
    /// The twin of the host `obs` observed (kernel `version`) at `pps` packets/s of
    /// `frame_bytes`-byte frames, with a CPU for every CPU either settings poll on.
    fn of(
        obs: &Observation,
        version: (u32, u32),
        current: &[NapiSettings],
        target: &[NapiSettings],
        pps: f64,
        frame_bytes: f64,
    ) -> TwinHost {
        let host_cpus = obs.host.cpus.iter().copied().max().unwrap_or(0) + 1;
        let polling = current.iter().chain(target).map(|s| s.cpu + 1).max();
        TwinHost {
            burst: 1,
            cpus: host_cpus.max(polling.unwrap_or(1)),
            hz: obs.host.hz.value.unwrap_or(crate::twin_plan::LAB_HZ),
            kernel: format!("{}.{}", version.0, version.1),
            netdev_budget: obs
                .settings
                .netdev_budget
                .and_then(|b| u32::try_from(b).ok())
                .unwrap_or(300),
            netdev_budget_usecs: obs
                .settings
                .netdev_budget_usecs
                .and_then(|b| u32::try_from(b).ok()),
            pps,
            frame_bytes,
        }
    }
}

fn config(host: &TwinHost, settings: &[NapiSettings], window_ms: f64) -> SimConfig {
    let mut h = lab_host(host.cpus, &host.kernel);
    h.hz = host.hz;
    let queues = settings
        .iter()
        .map(|s| RxQueueConfig {
            cpu: s.cpu,
            napi: s.context,
            thread: ThreadPolicy::default(),
            // Deferral never acts in threaded busy polling (the kthread never completes
            // the instance): the twin refuses it there.
            defer_hard_irqs: if s.context == NapiContext::ThreadedBusyPoll {
                0
            } else {
                s.defer_hard_irqs
            },
            gro_flush_timeout_ns: if s.defer_hard_irqs > 0
                && s.context != NapiContext::ThreadedBusyPoll
            {
                s.gro_flush_timeout_ns
            } else {
                0
            },
            irq_suspend_timeout_ns: 0,
            rps_cpus: Vec::new(),
            rings: Vec::new(),
            ring_poll: Default::default(),
        })
        .collect();
    let window_s = (window_ms + TWIN_WARMUP_MS) / 1e3 + 0.1;
    let share = 1.0 / settings.len().max(1) as f64;
    SimConfig {
        name: "live host twin".into(),
        host: h,
        settings: crate::config::NetSettings {
            netdev_budget: host.netdev_budget,
            netdev_budget_usecs: host.netdev_budget_usecs,
            weight: VETH_WEIGHT,
            max_backlog: crate::twin_plan::MAX_BACKLOG,
            max_softirq_restart: crate::softirq::MAX_SOFTIRQ_RESTART,
            gro_normal_batch: crate::config::GRO_NORMAL_BATCH,
        },
        ingress: veth_ingress(&settings[0].device, VETH_RING, queues),
        // No TX completions on veth: a ring that holds every packet of the run and a
        // completion timer past its end (as crate::from_scenario maps the lab).
        egress: crate::twin_plan::veth_egress(
            "twin-out",
            (host.pps * window_s).ceil().min(f64::from(u32::MAX - 4096)) as u32 + 4096,
            QdiscKind::None,
        ),
        traffic: TrafficConfig {
            rate_pps: host.pps,
            pattern: Pattern::Constant,
            burst: host.burst,
            classes: settings
                .iter()
                .map(|s| ClassConfig {
                    name: format!("q{}", s.queue),
                    share,
                    size_bytes: host.frame_bytes.round() as u32,
                    queue: Some(s.queue),
                    ring: None,
                    app: None,
                    closed_loop: None,
                    client: None,
                })
                .collect(),
        },
        measurement: MeasurementConfig {
            duration_ms: window_ms,
            warmup_ms: TWIN_WARMUP_MS,
            interval_ms: None,
        },
        apps: Vec::new(),
        tunnel: None,
    }
}

/// The profile a set of settings runs with: veth's softirq notification is synchronous
/// (the sender's `veth_xmit` raises NET_RX), so the lab profile's wake-up delay, which
/// is the threaded poller's, is dropped when nothing is threaded
/// (crate::twin_plan::TwinConfiguration::profile_for).
fn profile_for(base: &Profile, settings: &[NapiSettings]) -> Profile {
    let mut p = base.clone();
    if all_in_softirq(settings) {
        p.latency_ns.irq_delivery = 0;
    }
    p
}

fn scaled(base: &Profile, factor: f64) -> Profile {
    let mut p = base.clone();
    let s = &mut p.stage_cycles;
    s.poll *= factor;
    s.ip_stack *= factor;
    s.xmit *= factor;
    s.unmapped *= factor;
    p
}

/// Packet-path CPU of a twin run, summed over CPUs: everything but applications and idle.
fn packet_cpu(r: &crate::SimResult) -> f64 {
    r.model
        .totals
        .cpus
        .iter()
        .map(|c| c.hardirq + c.softirq_inline + c.ksoftirqd + c.kthread)
        .sum()
}

fn run(
    host: &TwinHost,
    settings: &[NapiSettings],
    profile: &Profile,
    seed: u64,
) -> Result<crate::SimResult, Refusal> {
    crate::try_run(&config(host, settings, TWIN_WINDOW_MS), &profile_for(profile, settings), seed).map_err(|e| Refusal {
        reason: format!("the twin of this host is not a valid configuration ({e}): report it with the observation (napilab observe --json)"),
    })
}

/// Scales the per-packet costs until the twin's packet CPU for `current` is the
/// measured share; returns the factor, the fitted profile and what is left of the gap.
fn fit(
    host: &TwinHost,
    current: &[NapiSettings],
    base: &Profile,
    measured: f64,
) -> Result<(f64, Profile, f64), Refusal> {
    if measured <= 0.0 {
        return refuse("the trace tier measured no softirq or NAPI kthread time for the device: nothing to fit the per-packet cost to (is the load crossing the device observed?)");
    }
    let mut factor = 1.0;
    let mut residual = f64::INFINITY;
    for _ in 0..FIT_ROUNDS {
        let twin = packet_cpu(&run(host, current, &scaled(base, factor), 0)?);
        if twin <= 0.0 {
            return refuse("the twin of this host used no CPU at the observed load: report it with the observation (napilab observe --json)");
        }
        residual = twin / measured - 1.0;
        if residual.abs() <= FIT_TOLERANCE {
            break;
        }
        // Fixed costs (per poll, per wake-up) do not scale, so the factor overshoots
        // a little and a few rounds close the gap.
        factor = (factor * measured / twin).clamp(0.01, 100.0);
    }
    Ok((factor, scaled(base, factor), residual))
}

pub(crate) fn outcome(
    host: &TwinHost,
    settings: &[NapiSettings],
    profile: &Profile,
    seeds: &[u64],
) -> Result<Outcome, Refusal> {
    let runs: Vec<crate::SimResult> = seeds
        .iter()
        .map(|&s| run(host, settings, profile, s))
        .collect::<Result<_, _>>()?;
    let fig =
        |f: &dyn Fn(&crate::SimResult) -> f64| Figure::of(&runs.iter().map(f).collect::<Vec<_>>());
    let cpu_ids: Vec<u32> = (0..host.cpus).collect();
    let cpus = cpu_ids
        .iter()
        .map(|&cpu| {
            let c = |f: &dyn Fn(&crate::CpuReport) -> f64| {
                fig(&|r: &crate::SimResult| {
                    r.model
                        .totals
                        .cpus
                        .iter()
                        .find(|x| x.cpu == cpu)
                        .map_or(0.0, f)
                })
            };
            CpuFigures {
                cpu,
                softirq: c(&|x| x.hardirq + x.softirq_inline + x.ksoftirqd),
                napi_thread: c(&|x| (x.kthread - x.busy_poll - x.app_system).max(0.0)),
                busy_poll: c(&|x| x.busy_poll),
                polls_per_s: c(&|x| x.polls_per_s),
                packets_per_poll: c(&|x| x.packets_per_poll),
                irqs_per_s: c(&|x| x.rx_irqs_per_s),
            }
        })
        .collect();
    let all = |f: &dyn Fn(&crate::CpuReport) -> f64| {
        fig(&|r: &crate::SimResult| r.model.totals.cpus.iter().map(f).sum())
    };
    let total = CpuFigures {
        cpu: u32::MAX,
        softirq: all(&|x| x.hardirq + x.softirq_inline + x.ksoftirqd),
        napi_thread: all(&|x| (x.kthread - x.busy_poll - x.app_system).max(0.0)),
        busy_poll: all(&|x| x.busy_poll),
        polls_per_s: all(&|x| x.polls_per_s),
        packets_per_poll: fig(&|r| {
            let c = &r.model.totals.cpus;
            let polls: f64 = c.iter().map(|x| x.polls_per_s).sum();
            let packets: f64 = c.iter().map(|x| x.polls_per_s * x.packets_per_poll).sum();
            if polls > 0.0 {
                packets / polls
            } else {
                0.0
            }
        }),
        irqs_per_s: all(&|x| x.rx_irqs_per_s),
    };
    Ok(Outcome {
        total,
        headroom_pps: None,
        settings: settings.to_vec(),
        packets_per_s: fig(&|r| r.model.totals.forwarded_pps),
        dropped_per_s: fig(&|r| r.model.totals.rx_dropped_pps + r.model.totals.tx_dropped_pps),
        cpu_ns_per_packet: fig(&|r| packet_cpu(r) / host.pps.max(1e-9) * 1e9),
        cpus,
    })
}

/// The share of the packets a run lost: those offered in its window that it did not
/// deliver (as the lab's loss ratio).
fn loss(r: &crate::SimResult) -> f64 {
    let sent: u64 = r.model.classes.iter().map(|c| c.offered).sum();
    let got: u64 = r.model.classes.iter().map(|c| c.forwarded).sum();
    if sent == 0 {
        0.0
    } else {
        sent.saturating_sub(got) as f64 / sent as f64
    }
}

/// How far the top of the headroom search lies above the stage-cost limit.
const HEADROOM_CAP_MARGIN: f64 = 1.25;

/// The top of the headroom search: a quarter above one packet per fitted per-packet
/// stage cost on each instance's CPU (no more CPUs than the host has), and above the
/// observed load. Every packet costs at least its stages on the CPU that polls it, so
/// no twin carries the top; exactly at the limit a NAPI kthread that never runs out of
/// packets never sleeps, and would pass however long its wake-up.
fn headroom_cap(host: &TwinHost, settings: &[NapiSettings], profile: &Profile) -> f64 {
    let s = &profile.stage_cycles;
    let ns = (s.poll + s.ip_stack + s.xmit + s.unmapped) / profile.cpu_ghz.max(1e-3);
    let pollers = (settings.len() as u32).clamp(1, host.cpus.max(1));
    (f64::from(pollers) * 1e9 / ns.max(1.0)).max(host.pps) * HEADROOM_CAP_MARGIN
}

/// The twin's window per run of the headroom search: [`TWIN_WINDOW_MS`], or
/// [`TAIL_WINDOW_MS`] when the profile draws its wake-ups from a measured tail, whose
/// rare long waits (a few tenths of a percent) a 200 ms window holds only a handful of.
fn headroom_window_ms(profile: &Profile) -> f64 {
    if profile.latency_ns.wake_up_samples.is_empty() {
        TWIN_WINDOW_MS
    } else {
        TAIL_WINDOW_MS
    }
}

/// The headroom of `settings`: per seed, the twin at the observed load, then the
/// experiment layer's bisection up to [`headroom_cap`] (or, when the observed load
/// already loses packets, down from it), [`HEADROOM_PROBES`] runs at most.
pub(crate) fn headroom(
    host: &TwinHost,
    settings: &[NapiSettings],
    profile: &Profile,
    seeds: &[u64],
) -> Result<Headroom, Refusal> {
    use napilab_experiment::bisection::{bisect, Probe};
    let cap = headroom_cap(host, settings, profile);
    // The egress ring holds every packet of a run at the cap.
    let at_cap = TwinHost {
        pps: cap,
        ..host.clone()
    };
    let base = config(&at_cap, settings, headroom_window_ms(profile));
    let run_profile = profile_for(profile, settings);
    let mut per_seed = Vec::with_capacity(seeds.len());
    let mut stops = Vec::with_capacity(seeds.len());
    let mut runs = 0u32;
    for &seed in seeds {
        let mut failure: Option<String> = None;
        let mut probe = |pps: f64| {
            let mut cfg = base.clone();
            cfg.traffic.rate_pps = pps;
            runs += 1;
            match crate::try_run(&cfg, &run_profile, seed) {
                Ok(r) if loss(&r) <= HEADROOM_LOSS => Probe::Pass,
                Ok(_) => Probe::Fail,
                Err(e) => {
                    failure = Some(e.to_string());
                    Probe::Interrupted
                }
            }
        };
        let first = probe(host.pps);
        let (found, stop) = match first {
            Probe::Pass => {
                let o = bisect(
                    cap,
                    &[(host.pps, true)],
                    HEADROOM_PROBES - 1,
                    HEADROOM_RESOLUTION,
                    &mut probe,
                );
                let stop = if o.stopped == "upper_bound_passed" {
                    "at_cap"
                } else {
                    o.stopped
                };
                (o, stop)
            }
            Probe::Fail => (
                bisect(
                    host.pps,
                    &[(host.pps, false)],
                    HEADROOM_PROBES - 1,
                    HEADROOM_RESOLUTION,
                    &mut probe,
                ),
                "below_observed",
            ),
            Probe::Interrupted => (
                napilab_experiment::bisection::SearchOutcome {
                    pps: 0.0,
                    stopped: "interrupted",
                    probed: Vec::new(),
                },
                "interrupted",
            ),
        };
        if let Some(e) = failure {
            return refuse(format!("the twin of this host is not a valid configuration at a higher load ({e}): report it with the observation (napilab observe --json)"));
        }
        per_seed.push(found.pps);
        stops.push(if found.stopped == "interrupted" {
            "interrupted"
        } else {
            stop
        });
    }
    // The weakest claim any seed makes names the whole figure.
    let stopped = [
        "interrupted",
        "below_observed",
        "at_cap",
        "iterations_exhausted",
    ]
    .into_iter()
    .find(|s| stops.contains(s))
    .unwrap_or("converged");
    Ok(Headroom {
        pps: Figure::of(&per_seed),
        per_seed,
        stopped: stopped.into(),
        cap_pps: cap,
        loss_threshold: HEADROOM_LOSS,
        runs,
    })
}

/// The profile's outcome: the twin at the observed load and its headroom; and when the
/// sender's CPU set the rate and the profile moves the poll off it
/// (crate::sender_rate), the twin again at the rate the sender then reaches, with what
/// decided it. `placement`: whether the profile was given the kthreads' CPUs, and the
/// host's CPU count.
pub(crate) fn predicted_outcome(
    twin: &TwinHost,
    target: &[NapiSettings],
    fitted: &Profile,
    seeds: &[u64],
    sender: sender_rate::Observed,
    (placed, host_cpus): (bool, usize),
) -> Result<(Outcome, SenderRate), Refusal> {
    let mut predicted = outcome(twin, target, fitted, seeds)?;
    let headroom_seeds: Vec<u64> = (1..=HEADROOM_SEEDS).collect();
    let h = headroom(twin, target, fitted, &headroom_seeds)?;
    let leaves = match &sender {
        sender_rate::Observed::Limited(c) => {
            sender_rate::poll_leaves(target, c.cpu, placed, host_cpus)
        }
        _ => Ok(None),
    };
    // The twin's notification ("IRQ") costs the profile's fixed hard-IRQ cycles, which
    // the fit does not scale.
    let notification_ns = fitted.fixed_cycles.hardirq / fitted.cpu_ghz.max(1e-3);
    let per_packet = predicted.total.irqs_per_s.mean / twin.pps.max(1e-9);
    // Headroom bounds the rate only where it is the path's limit: a twin that loses
    // packets at the observed load already has its limit below the sender's rate, and
    // runs at the sender's rate to show the loss.
    let bound = (h.stopped != "below_observed").then_some(h.pps.mean);
    // Only a NAPI kthread is placed by the scheduler; a busy-polling application
    // runs where its own affinity puts it.
    let scheduler_places = matches!(leaves, Ok(None)) && target.iter().any(threaded);
    let mut sender = sender_rate::assess(sender, leaves, per_packet, notification_ns, bound);
    if let Some(rate) = sender.rate_pps {
        let at_rate = TwinHost {
            pps: rate,
            ..twin.clone()
        };
        predicted = outcome(&at_rate, target, fitted, seeds)?;
    }
    if scheduler_places {
        sender = sender_rate::with_kthread_beside_sender(sender, predicted.cpu_ns_per_packet.mean);
    }
    predicted.headroom_pps = Some(h);
    Ok((predicted, sender))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use napilab_core::observation::ThreadRole;
    use napilab_core::{Interval, ThreadInterval};

    /// vb's one queue polled in softirq on CPU 0 (NAPI id 8193).
    pub(crate) fn softirq_vb() -> Vec<NapiSettings> {
        vec![NapiSettings {
            device: "vb".into(),
            queue: 0,
            napi_id: Some(8193),
            context: NapiContext::Softirq,
            cpu: 0,
            defer_hard_irqs: 0,
            gro_flush_timeout_ns: 0,
        }]
    }

    fn after(name: &str, cpus: Option<&str>) -> Result<Vec<NapiSettings>, Refusal> {
        let (p, _) = napilab_tune::profile::load(name).expect("shipped profile");
        let params = Params::from_args(&["vb".into()], cpus, &[])
            .and_then(|g| g.resolve(&p).map_err(|e| e.to_string()))
            .expect("params");
        settings_after(&softirq_vb(), &p, &params)
    }

    #[test]
    fn threaded_moves_the_poll_to_a_kthread_on_the_cpu_given() {
        let s = after("threaded", None).expect("threaded is modelled");
        assert_eq!(s[0].context, NapiContext::Threaded);
        assert_eq!(s[0].cpu, 0, "unpinned: stays where it is polled today");
        let s = after("threaded", Some("1")).expect("threaded, pinned");
        assert_eq!((s[0].context, s[0].cpu), (NapiContext::Threaded, 1));
        let s = after("threaded-busy-poll", None).expect("modelled");
        assert_eq!(s[0].context, NapiContext::ThreadedBusyPoll);
    }

    /// A thread's name, role and (run delay ns, runs) over one second.
    type Sched<'a> = (&'a str, ThreadRole, Option<(u64, u64)>);

    /// One second of an observation with these threads' scheduler statistics.
    fn second(threads: &[Sched<'_>]) -> Interval {
        Interval {
            duration_s: 1.0,
            threads: threads
                .iter()
                .enumerate()
                .map(|(k, (name, role, sched))| ThreadInterval {
                    pid: 10 + k as u32,
                    name: (*name).into(),
                    role: role.clone(),
                    last_cpu: None,
                    cpu: None,
                    sched: sched.map(|(run_delay_ns, runs)| napilab_core::SchedDelta {
                        on_cpu_ns: runs * 2_000,
                        run_delay_ns,
                        runs,
                    }),
                })
                .collect(),
            ..Default::default()
        }
    }

    /// The wake-up delay of vb's kthread, with the lab profile's 268,554 ns as the fallback.
    fn vb_wake_up(traced: &[&Interval], cpus: &[u32], pinned: bool) -> Option<WakeUp> {
        let vb = DeviceJoin::new(&napilab_core::TopologyMap::default(), "vb");
        wake_up_delay(traced, &[], &vb, cpus, pinned, 268_554)
    }

    fn ksoftirqd(cpu: u32) -> ThreadRole {
        ThreadRole::Ksoftirqd { cpu }
    }

    #[test]
    fn the_wake_up_delay_is_the_run_delay_of_the_polling_cpus_kthread() {
        let current = softirq_vb();
        let target = after("threaded", None).expect("threaded");
        // ksoftirqd/0 (the CPU the kthread goes on) waited 30 us per run over two
        // seconds, pooled by runs: (1.2 ms + 4.8 ms) / (40 + 160); ksoftirqd/1 is
        // another CPU's and does not count.
        let a = second(&[
            ("ksoftirqd/0", ksoftirqd(0), Some((1_200_000, 40))),
            ("ksoftirqd/1", ksoftirqd(1), Some((90_000_000, 100))),
        ]);
        let b = second(&[("ksoftirqd/0", ksoftirqd(0), Some((4_800_000, 160)))]);
        let w = vb_wake_up(&[&a, &b], &kthread_cpus(&current, &target), false).expect("threaded");
        assert!(w.measured, "{w:?}");
        assert!((w.delay_ns - 30_000.0).abs() < 1e-6, "{w:?}");
        assert!(
            w.source
                .contains("ksoftirqd/0 over 2.0 s: 30.0 us per run (200 runs)"),
            "{}",
            w.source
        );
        // Unpinned, it is woken where a CPU is free: the least wait of any ksoftirqd.
        let busy0 = second(&[
            ("ksoftirqd/0", ksoftirqd(0), Some((90_000_000, 100))),
            ("ksoftirqd/1", ksoftirqd(1), Some((1_000_000, 100))),
        ]);
        let w = vb_wake_up(&[&busy0], &kthread_cpus(&current, &target), false).expect("threaded");
        assert!(
            (w.delay_ns - 10_000.0).abs() < 1e-6 && w.source.contains("ksoftirqd/1"),
            "{w:?}"
        );
        // Pinned to CPU 1 by --cpus: CPU 1's.
        let pinned = after("threaded", Some("1")).expect("pinned");
        let w = vb_wake_up(&[&a, &b], &kthread_cpus(&current, &pinned), true).expect("threaded");
        assert!((w.delay_ns - 900_000.0).abs() < 1e-6, "{w:?}");
        // The device's own NAPI kthread, when it already polls, is its own measure.
        let own = ThreadRole::NapiThread {
            device: Some("vb".into()),
            napi_id: Some(8193),
        };
        let c = second(&[
            ("napi/vb-8193", own, Some((500_000, 100))),
            ("ksoftirqd/0", ksoftirqd(0), Some((9_000_000, 100))),
        ]);
        let w = vb_wake_up(&[&c], &kthread_cpus(&target, &target), false).expect("threaded");
        assert!(
            (w.delay_ns - 5_000.0).abs() < 1e-6 && w.source.contains("napi/vb-8193"),
            "{w:?}"
        );
    }

    #[test]
    fn without_enough_kthread_runs_the_lab_delay_is_kept_and_said() {
        let current = softirq_vb();
        let target = after("threaded", None).expect("threaded");
        let few = second(&[("ksoftirqd/0", ksoftirqd(0), Some((100_000, 3)))]);
        let w = vb_wake_up(&[&few], &kthread_cpus(&current, &target), false).expect("threaded");
        assert!(!w.measured && w.delay_ns == 268_554.0, "{w:?}");
        assert!(
            w.source.contains("ran 3 times") && w.source.contains("veth-lab"),
            "{}",
            w.source
        );
        let none = second(&[("ksoftirqd/0", ksoftirqd(0), None)]);
        let w = vb_wake_up(&[&none], &kthread_cpus(&current, &target), false).expect("threaded");
        assert!(
            !w.measured && w.source.contains("no scheduler statistics of ksoftirqd/0"),
            "{}",
            w.source
        );
        // Nothing threaded on either side: no delay to estimate.
        let deferral = after("deferral", None).expect("deferral");
        assert_eq!(
            vb_wake_up(&[&few], &kthread_cpus(&current, &deferral), false),
            None
        );
    }

    /// A 2-CPU twin host under 100,000 packets/s of 64-byte frames.
    fn twin_host() -> TwinHost {
        TwinHost {
            burst: 1,
            cpus: 2,
            hz: 250,
            kernel: "6.18".into(),
            netdev_budget: 300,
            netdev_budget_usecs: Some(2_000),
            pps: 100_000.0,
            frame_bytes: 64.0,
        }
    }

    fn veth_lab() -> Profile {
        crate::calibrate::LabProfile::load(crate::calibrate::VETH_LAB_NAME)
            .expect("the shipped veth-lab profile")
            .profile
    }

    #[test]
    fn a_longer_kthread_wake_up_lowers_the_threaded_headroom() {
        let host = twin_host();
        let threaded = after("threaded", None).expect("threaded");
        let with = |ns: u64| {
            let mut p = veth_lab();
            p.latency_ns.irq_delivery = ns;
            headroom(&host, &threaded, &p, &[1]).expect("searched")
        };
        let (quick, slow) = (with(10_000), with(1_000_000));
        println!(
            "threaded headroom: {:.0} pps with a 10 us wake-up, {:.0} with 1 ms",
            quick.pps.mean, slow.pps.mean
        );
        assert!(
            slow.pps.mean < quick.pps.mean,
            "a 1 ms wake-up {slow:?} vs 10 us {quick:?}"
        );
        // veth's ring holds 256 packets while the kthread waits: after a 1 ms wait the
        // ring has overflowed from 256 packets per ms on, whatever the CPU.
        assert!(
            slow.pps.mean <= 256.0 / 1e-3,
            "the ring bounds a slow kthread: {slow:?}"
        );
        assert!(slow.runs <= HEADROOM_PROBES && quick.runs <= HEADROOM_PROBES);
    }

    #[test]
    fn the_headroom_search_is_bounded_by_the_stage_cost() {
        let host = twin_host();
        let p = veth_lab();
        let h = headroom(&host, &softirq_vb(), &p, &[1, 2]).expect("searched");
        let s = &p.stage_cycles;
        let limit = 1e9 / ((s.poll + s.ip_stack + s.xmit + s.unmapped) / p.cpu_ghz);
        assert!(
            (h.cap_pps - limit * HEADROOM_CAP_MARGIN).abs() < 1.0,
            "{h:?}"
        );
        assert_eq!(h.stopped, "converged", "{h:?}");
        assert!(
            h.per_seed.iter().all(|&x| x >= host.pps && x <= limit),
            "the observed load passes and nothing passes above the stage-cost limit: {h:?}"
        );
        assert_eq!(h.per_seed.len(), 2);
        assert!(h.runs <= 2 * HEADROOM_PROBES, "{h:?}");
        assert!(h.pps.low <= h.pps.mean && h.pps.mean <= h.pps.high, "{h:?}");
    }

    #[test]
    fn deferral_sets_the_instance_and_other_settings_are_refused_by_name() {
        let s = after("deferral", None).expect("deferral is modelled");
        assert!(
            s[0].defer_hard_irqs > 0 && s[0].gro_flush_timeout_ns > 0,
            "{s:?}"
        );
        let e = after("no-coalescing", None).expect_err("coalescing is not modelled");
        assert!(e.reason.contains("coalesce"), "{}", e.reason);
    }
}
