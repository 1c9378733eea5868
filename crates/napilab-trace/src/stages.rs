//! Stage profile (source `sample`): kernel stacks sampled on every CPU with the
//! software `cpu-clock` perf event (this kind of VM has no hardware counters), each
//! stack mapped to a packet-path stage of docs/studies.md#ap-stages by its callers.
//!
//! The mapping walks a stack from its outermost frame to the sampled function; a frame
//! named in [`RULES`] switches the stage, so a function belongs to the stage of its
//! nearest staged caller: `memcpy` under `ip_forward` is IP stack, under `veth_xmit`
//! Init Xmit; `__qdisc_run` is TX Qdisc under `net_tx_action` (another core draining
//! the queue) and Init Xmit under `__dev_queue_xmit`. The table covers forwarding and
//! local delivery, veth and common NIC drivers (docs/trace.md, "stages").

use std::collections::BTreeMap;
use std::mem::MaybeUninit;

use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{Link, MapCore, MapFlags, OpenObject};

crate::bpf_skeleton!("stage_profile");

use skel::{StageProfileSkel, StageProfileSkelBuilder};

/// Stages, in the order of docs/studies.md#ap-stages, plus where samples outside the path go.
pub const STAGES: [&str; 14] = [
    "init_rx_irq",
    "init_deferred_work",
    "rx_softirq",
    "poll",
    "ip_stack",
    "local_delivery",
    "init_xmit",
    "tx_softirq",
    "tx_qdisc",
    "tx_reclaim",
    "other_softirq",
    "other_kernel",
    "idle",
    "user",
];

/// A frame that switches the stage; `under` restricts it to stacks where the current
/// stage (set by a caller) is one of those listed.
pub struct Rule {
    pub function: &'static str,
    pub stage: &'static str,
    pub under: &'static [&'static str],
}

const fn rule(function: &'static str, stage: &'static str) -> Rule {
    Rule {
        function,
        stage,
        under: &[],
    }
}

const fn under(
    function: &'static str,
    stage: &'static str,
    under: &'static [&'static str],
) -> Rule {
    Rule {
        function,
        stage,
        under,
    }
}

/// The caller-context table. Driver entries: veth, virtio_net, the backlog (RPS), and
/// common NICs (mlx5, ixgbe, igb, i40e, ice, e1000e, bcmgenet, mt76).
pub const RULES: &[Rule] = &[
    // Idle loop: overridden by anything an interrupt does on top of it.
    rule("do_idle", "idle"),
    // Hard IRQ entry of a device interrupt.
    rule("common_interrupt", "init_rx_irq"),
    rule("__handle_irq_event_percpu", "init_rx_irq"),
    rule("handle_irq_event", "init_rx_irq"),
    // Softirq machinery: a softirq other than NET_RX/NET_TX stays "other_softirq".
    rule("handle_softirqs", "other_softirq"),
    rule("__do_softirq", "other_softirq"),
    rule("run_ksoftirqd", "init_deferred_work"),
    rule("tasklet_action_common", "init_deferred_work"),
    rule("net_rx_action", "rx_softirq"),
    rule("net_tx_action", "tx_softirq"),
    // The poll function (driver or backlog), also from NAPI kthreads and busy polling.
    rule("__napi_poll", "poll"),
    rule("napi_threaded_poll", "poll"),
    rule("napi_busy_loop", "poll"),
    rule("veth_poll", "poll"),
    rule("virtnet_poll", "poll"),
    rule("process_backlog", "poll"),
    rule("mlx5e_napi_poll", "poll"),
    rule("ixgbe_poll", "poll"),
    rule("igb_poll", "poll"),
    rule("i40e_napi_poll", "poll"),
    rule("ice_napi_poll", "poll"),
    rule("e1000e_poll", "poll"),
    rule("bcmgenet_rx_poll", "poll"),
    rule("mt76_dma_rx_poll", "poll"),
    // TX completions reclaimed inside a poll.
    rule("free_old_xmit", "tx_reclaim"),
    rule("free_old_xmit_skbs", "tx_reclaim"),
    rule("virtnet_poll_cleantx", "tx_reclaim"),
    rule("mlx5e_poll_tx_cq", "tx_reclaim"),
    rule("ixgbe_clean_tx_irq", "tx_reclaim"),
    rule("igb_clean_tx_irq", "tx_reclaim"),
    rule("i40e_clean_tx_irq", "tx_reclaim"),
    rule("ice_clean_tx_irq", "tx_reclaim"),
    rule("e1000_clean_tx_irq", "tx_reclaim"),
    rule("bcmgenet_tx_reclaim", "tx_reclaim"),
    rule("mt76_dma_tx_cleanup", "tx_reclaim"),
    // IP stack: from the core receive path to just before the egress device.
    rule("__netif_receive_skb_core", "ip_stack"),
    rule("__netif_receive_skb_list_core", "ip_stack"),
    rule("ip_rcv", "ip_stack"),
    rule("ip_list_rcv", "ip_stack"),
    rule("ipv6_rcv", "ip_stack"),
    rule("ip_forward", "ip_stack"),
    // Local delivery to a socket.
    rule("ip_local_deliver_finish", "local_delivery"),
    rule("ip6_input_finish", "local_delivery"),
    // Egress: the device queue, the qdisc and the driver's xmit.
    rule("__dev_queue_xmit", "init_xmit"),
    rule("dev_hard_start_xmit", "init_xmit"),
    rule("ieee80211_subif_start_xmit", "init_xmit"),
    under("__qdisc_run", "tx_qdisc", &["tx_softirq"]),
];

/// The stage of one stack, given outermost frame first; `None` frames are unknown.
pub fn stage_of<'a>(frames: impl IntoIterator<Item = &'a str>) -> &'static str {
    let mut stage = "other_kernel";
    for f in frames {
        if let Some(r) = RULES
            .iter()
            .find(|r| r.function == f && (r.under.is_empty() || r.under.contains(&stage)))
        {
            stage = r.stage;
        }
    }
    stage
}

/// The execution context a stack ran in, given outermost frame first, or `None` for a
/// stack that shows no packet-processing context (user code, other kernel work). The
/// innermost context wins: a softirq run on the exit of an IRQ that interrupted a NAPI
/// kthread counts as "after hardirq". Kernel function names as of Linux 5.10 to 6.18.
pub fn context_of<'a>(
    frames: impl IntoIterator<Item = &'a str>,
) -> Option<napilab_core::trace::ExecContext> {
    use napilab_core::trace::ExecContext;
    let mut context = None;
    // How the next softirq entry was reached.
    let mut entry = None;
    for f in frames {
        match f {
            "napi_threaded_poll" | "napi_threaded_poll_loop" => {
                context = Some(ExecContext::NapiThread)
            }
            "napi_busy_loop" | "__napi_busy_loop" | "napi_busy_loop_rcu" | "busy_poll_stop" => {
                context = Some(ExecContext::BusyPoll)
            }
            "run_ksoftirqd" => {
                context = Some(ExecContext::Ksoftirqd);
                entry = Some(ExecContext::Ksoftirqd);
            }
            "irq_exit_rcu"
            | "__irq_exit_rcu"
            | "irq_exit"
            | "invoke_softirq"
            | "do_softirq_own_stack" => entry = Some(ExecContext::Hardirq),
            "__local_bh_enable_ip" | "local_bh_enable" | "do_softirq" => {
                entry = Some(ExecContext::BhEnable)
            }
            "handle_softirqs" | "__do_softirq" => {
                context = Some(entry.unwrap_or(ExecContext::Hardirq));
            }
            _ => {}
        }
    }
    context
}

/// Per-CPU time by execution context over an interval: the samples in `cur` not yet in
/// `prev` whose stacks show a context ([`context_of`]), over `seconds`.
pub fn context_shares(
    prev: &StageSamples,
    cur: &StageSamples,
    seconds: f64,
) -> Vec<napilab_core::trace::ContextShare> {
    use napilab_core::trace::ContextShare;
    use napilab_core::{Metric, Source, Unit};
    let expected = cur.frequency_hz as f64 * seconds;
    if expected <= 0.0 {
        return Vec::new();
    }
    let mut counts: BTreeMap<(u32, napilab_core::trace::ExecContext), u64> = BTreeMap::new();
    for ((cpu, frames), n) in &cur.stacks {
        let n = n.saturating_sub(
            prev.stacks
                .get(&(*cpu, frames.clone()))
                .copied()
                .unwrap_or(0),
        );
        if n == 0 {
            continue;
        }
        if let Some(context) = context_of(frames.iter().map(String::as_str)) {
            *counts.entry((*cpu, context)).or_default() += n;
        }
    }
    counts
        .into_iter()
        .map(|((cpu, context), samples)| ContextShare {
            cpu,
            context,
            samples,
            share: Metric::derived(
                samples as f64 / expected,
                Unit::CpuFraction,
                Source::Sample,
                "cpu-clock samples whose stack shows the context / (frequency x interval)",
            ),
        })
        .collect()
}

/// Kernel symbols from /proc/kallsyms text, for address -> function name.
pub struct Symbols {
    sorted: Vec<(u64, String)>,
}

impl Symbols {
    pub fn parse(kallsyms: &str) -> Symbols {
        let mut sorted: Vec<(u64, String)> = kallsyms
            .lines()
            .filter_map(|l| {
                let mut it = l.split_whitespace();
                let addr = u64::from_str_radix(it.next()?, 16).ok()?;
                let kind = it.next()?;
                let name = it.next()?;
                (addr != 0 && matches!(kind, "t" | "T" | "W" | "w"))
                    .then(|| (addr, name.to_string()))
            })
            .collect();
        sorted.sort_unstable_by_key(|(a, _)| *a);
        Symbols { sorted }
    }

    pub fn load() -> Option<Symbols> {
        let s = Symbols::parse(&std::fs::read_to_string("/proc/kallsyms").ok()?);
        (!s.sorted.is_empty()).then_some(s)
    }

    pub fn name(&self, addr: u64) -> &str {
        match self.sorted.partition_point(|(a, _)| *a <= addr) {
            0 => "[unknown]",
            i => &self.sorted[i - 1].1,
        }
    }
}

/// Samples by (cpu, folded stack outermost first), with counts.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StageSamples {
    pub stacks: BTreeMap<(u32, Vec<String>), u64>,
    pub frequency_hz: u64,
}

impl StageSamples {
    /// Samples per stage and CPU.
    pub fn by_stage(&self) -> BTreeMap<(&'static str, u32), u64> {
        let mut out = BTreeMap::new();
        for ((cpu, frames), n) in &self.stacks {
            let stage = if frames.is_empty() {
                "user"
            } else {
                stage_of(frames.iter().map(String::as_str))
            };
            *out.entry((stage, *cpu)).or_default() += n;
        }
        out
    }

    /// Folded stacks (`frame;frame;frame count`), one line per stack, the stage as the
    /// root frame so a flame graph groups by stage.
    pub fn folded(&self) -> Vec<String> {
        let mut merged: BTreeMap<String, u64> = BTreeMap::new();
        for ((_, frames), n) in &self.stacks {
            let stage = if frames.is_empty() {
                "user"
            } else {
                stage_of(frames.iter().map(String::as_str))
            };
            let mut line = stage.to_string();
            for f in frames {
                line.push(';');
                line.push_str(f);
            }
            *merged.entry(line).or_default() += n;
        }
        merged
            .into_iter()
            .map(|(l, n)| format!("{l} {n}"))
            .collect()
    }
}

/// The running sampler: one cpu-clock perf event per CPU with the BPF program attached.
pub struct StageSampler {
    links: Vec<Link>,
    skel: StageProfileSkel<'static>,
    symbols: Symbols,
    frequency_hz: u64,
}

impl StageSampler {
    /// Starts sampling `cpus` at `frequency_hz`.
    pub fn start(cpus: &[u32], frequency_hz: u64) -> Result<StageSampler, String> {
        use std::os::fd::{AsRawFd as _, FromRawFd as _, IntoRawFd as _};
        let symbols = Symbols::load().ok_or(
            "/proc/kallsyms has no addresses (kptr_restrict or lockdown): stacks cannot be named",
        )?;
        let storage: &'static mut MaybeUninit<OpenObject> =
            Box::leak(Box::new(MaybeUninit::uninit()));
        let skel = StageProfileSkelBuilder::default()
            .open(storage)
            .and_then(|o| o.load())
            .map_err(|e| format!("cannot load the stage sampler: {e}"))?;
        let mut links = Vec::new();
        for &cpu in cpus {
            let mut attr = libbpf_rs::libbpf_sys::perf_event_attr {
                type_: libbpf_rs::libbpf_sys::PERF_TYPE_SOFTWARE,
                size: std::mem::size_of::<libbpf_rs::libbpf_sys::perf_event_attr>() as u32,
                config: u64::from(libbpf_rs::libbpf_sys::PERF_COUNT_SW_CPU_CLOCK),
                ..Default::default()
            };
            attr.__bindgen_anon_1.sample_freq = frequency_hz;
            attr.set_freq(1);
            // SAFETY: perf_event_open with a valid attr; pid -1 = all tasks on `cpu`.
            let fd = unsafe {
                libc::syscall(
                    libc::SYS_perf_event_open,
                    &attr as *const _,
                    -1,
                    cpu as libc::c_int,
                    -1,
                    libc::c_ulong::from(0x8u32), // PERF_FLAG_FD_CLOEXEC
                )
            };
            if fd < 0 {
                return Err(format!(
                    "perf_event_open(cpu-clock, cpu {cpu}): {}",
                    std::io::Error::last_os_error()
                ));
            }
            // SAFETY: fd is a new perf event descriptor we own.
            let fd = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd as i32) };
            let link = skel
                .progs
                .sample_stack
                .attach_perf_event(fd.as_raw_fd())
                .map_err(|e| format!("cannot attach the sampler on cpu {cpu}: {e}"))?;
            // libbpf's perf-event link closes the event's fd when it is destroyed.
            let _ = fd.into_raw_fd();
            links.push(link);
        }
        Ok(StageSampler {
            links,
            skel,
            symbols,
            frequency_hz,
        })
    }

    /// Everything sampled so far (cumulative).
    pub fn read(&self) -> StageSamples {
        let maps = &self.skel.maps;
        let mut out = StageSamples {
            frequency_hz: self.frequency_hz,
            ..StageSamples::default()
        };
        for key in maps.samples.keys() {
            if key.len() < 8 {
                continue;
            }
            let stack_id = i32::from_ne_bytes([key[0], key[1], key[2], key[3]]);
            let cpu = u32::from_ne_bytes([key[4], key[5], key[6], key[7]]);
            let Ok(Some(v)) = maps.samples.lookup(&key, MapFlags::ANY) else {
                continue;
            };
            let Ok(count) = <[u8; 8]>::try_from(v.as_slice()).map(u64::from_ne_bytes) else {
                continue;
            };
            let mut frames = Vec::new();
            if stack_id >= 0 {
                if let Ok(Some(ips)) = maps.stacks.lookup(&stack_id.to_ne_bytes(), MapFlags::ANY) {
                    // The map holds the sampled function first: reverse to outermost first.
                    for c in ips.chunks_exact(8) {
                        let ip = u64::from_ne_bytes(c.try_into().unwrap_or([0; 8]));
                        if ip == 0 {
                            break;
                        }
                        frames.push(self.symbols.name(ip).to_string());
                    }
                    frames.reverse();
                }
                if frames.is_empty() {
                    frames.push("[unknown]".into());
                }
            }
            *out.stacks.entry((cpu, frames)).or_default() += count;
        }
        out
    }
}

impl Drop for StageSampler {
    fn drop(&mut self) {
        // Detach (closing the perf events) before the object closes with `skel`.
        self.links.clear();
    }
}

/// Per-stage shares over an interval: the samples in `cur` not yet in `prev`, over
/// `seconds`; costs per Mbit/s when `rx_mbps` is known and positive.
pub fn stage_shares(
    prev: &StageSamples,
    cur: &StageSamples,
    seconds: f64,
    rx_mbps: Option<f64>,
) -> (
    Vec<napilab_core::trace::StageShare>,
    Vec<napilab_core::trace::StageCost>,
) {
    use napilab_core::trace::{StageCost, StageShare};
    use napilab_core::{Metric, Source, Unit};
    let before = prev.by_stage();
    let expected = cur.frequency_hz as f64 * seconds;
    let mut shares = Vec::new();
    let mut totals: BTreeMap<&'static str, f64> = BTreeMap::new();
    for ((stage, cpu), n) in cur.by_stage() {
        let n = n.saturating_sub(before.get(&(stage, cpu)).copied().unwrap_or(0));
        if n == 0 || expected <= 0.0 {
            continue;
        }
        let share = n as f64 / expected;
        *totals.entry(stage).or_default() += share;
        shares.push(StageShare {
            stage: stage.to_string(),
            cpu,
            samples: n,
            share: Metric::derived(
                share,
                Unit::CpuFraction,
                Source::Sample,
                "cpu-clock samples in the stage / (frequency x interval)",
            ),
        });
    }
    let costs = STAGES
        .iter()
        .filter_map(|stage| {
            let cpus = *totals.get(stage)?;
            Some(StageCost {
                stage: (*stage).to_string(),
                cpus: Metric::derived(
                    cpus,
                    Unit::CpuFraction,
                    Source::Sample,
                    "sum of the stage's CPU shares",
                ),
                per_mbps: rx_mbps.filter(|m| *m > 0.0).map(|m| {
                    Metric::derived(
                        cpus / m,
                        Unit::CpuPerMbps,
                        Source::Sample,
                        "stage CPUs / host received Mbit/s",
                    )
                }),
            })
        })
        .collect();
    (shares, costs)
}

/// Writes a flame graph (SVG, by inferno) of every stack sampled, rooted at its stage.
pub fn write_flamegraph(samples: &StageSamples, path: &std::path::Path) -> Result<(), String> {
    let lines = samples.folded();
    if lines.is_empty() {
        return Err("no stacks were sampled".into());
    }
    let file = std::fs::File::create(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut options = inferno::flamegraph::Options::default();
    options.title = "napilab: kernel stacks by packet-path stage (cpu-clock samples)".into();
    inferno::flamegraph::from_lines(
        &mut options,
        lines.iter().map(String::as_str),
        std::io::BufWriter::new(file),
    )
    .map_err(|e| format!("cannot write the flame graph: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stage(stack: &str) -> &'static str {
        stage_of(stack.split(';'))
    }

    #[test]
    fn the_same_function_belongs_to_its_callers_stage() {
        let fwd = "do_idle;common_interrupt;handle_softirqs;net_rx_action;__napi_poll;veth_poll;__netif_receive_skb_core;ip_rcv;ip_forward;memcpy";
        assert_eq!(stage(fwd), "ip_stack");
        let xmit = "handle_softirqs;net_rx_action;__napi_poll;veth_poll;ip_rcv;ip_forward;__dev_queue_xmit;veth_xmit;memcpy";
        assert_eq!(stage(xmit), "init_xmit");
        assert_eq!(
            stage("handle_softirqs;net_rx_action;__napi_poll;veth_poll;napi_gro_receive"),
            "poll"
        );
        assert_eq!(
            stage("handle_softirqs;net_rx_action;__kfree_skb"),
            "rx_softirq"
        );
    }

    #[test]
    fn qdisc_run_is_tx_qdisc_only_from_the_tx_softirq() {
        assert_eq!(
            stage("handle_softirqs;net_tx_action;__qdisc_run;sch_direct_xmit"),
            "tx_qdisc"
        );
        assert_eq!(
            stage("ip_forward;__dev_queue_xmit;__qdisc_run;sch_direct_xmit"),
            "init_xmit"
        );
    }

    #[test]
    fn reclaim_local_delivery_idle_and_deferred_work() {
        assert_eq!(
            stage("net_rx_action;__napi_poll;virtnet_poll;free_old_xmit;napi_consume_skb"),
            "tx_reclaim"
        );
        assert_eq!(
            stage("net_rx_action;__napi_poll;ip_rcv;ip_local_deliver_finish;udp_rcv"),
            "local_delivery"
        );
        assert_eq!(stage("do_idle;default_idle"), "idle");
        assert_eq!(
            stage("run_ksoftirqd;handle_softirqs;rcu_core"),
            "other_softirq"
        );
        assert_eq!(
            stage("run_ksoftirqd;smpboot_thread_fn"),
            "init_deferred_work"
        );
        assert_eq!(
            stage("do_idle;common_interrupt;handle_irq_event;vp_interrupt"),
            "init_rx_irq"
        );
        assert_eq!(stage("do_syscall_64;ksys_read"), "other_kernel");
    }

    #[test]
    fn contexts_come_from_the_stack() {
        use napilab_core::trace::ExecContext;
        let ctx = |stack: &str| context_of(stack.split(';'));
        assert_eq!(
            ctx("ret_from_fork;kthread;napi_threaded_poll;napi_threaded_poll_loop;__napi_poll;veth_poll"),
            Some(ExecContext::NapiThread)
        );
        assert_eq!(
            ctx("do_syscall_64;__x64_sys_epoll_wait;do_epoll_wait;ep_poll;napi_busy_loop;__napi_busy_loop;veth_poll"),
            Some(ExecContext::BusyPoll)
        );
        assert_eq!(
            ctx("smpboot_thread_fn;run_ksoftirqd;handle_softirqs;net_rx_action"),
            Some(ExecContext::Ksoftirqd)
        );
        assert_eq!(
            ctx("do_idle;sysvec_apic_timer_interrupt;irq_exit_rcu;handle_softirqs;net_rx_action"),
            Some(ExecContext::Hardirq)
        );
        assert_eq!(
            ctx("do_syscall_64;__sys_sendto;__local_bh_enable_ip;do_softirq;handle_softirqs;net_rx_action"),
            Some(ExecContext::BhEnable)
        );
        // An IRQ's softirq on top of a NAPI kthread: the innermost context.
        assert_eq!(
            ctx("kthread;napi_threaded_poll;__napi_poll;sysvec_apic_timer_interrupt;irq_exit_rcu;handle_softirqs"),
            Some(ExecContext::Hardirq)
        );
        assert_eq!(ctx("do_syscall_64;ksys_read"), None);
    }

    #[test]
    fn context_shares_count_new_samples_only() {
        use napilab_core::trace::ExecContext;
        let stack: Vec<String> = ["kthread", "napi_threaded_poll", "veth_poll"]
            .map(String::from)
            .to_vec();
        let mut prev = StageSamples {
            frequency_hz: 1000,
            ..StageSamples::default()
        };
        prev.stacks.insert((1, stack.clone()), 100);
        let mut cur = prev.clone();
        cur.stacks.insert((1, stack), 350);
        cur.stacks.insert((1, vec!["do_syscall_64".into()]), 500);
        let shares = context_shares(&prev, &cur, 1.0);
        assert_eq!(shares.len(), 1);
        assert_eq!(shares[0].context, ExecContext::NapiThread);
        assert_eq!(shares[0].samples, 250);
        assert!((shares[0].share.value - 0.25).abs() < 1e-12);
    }

    #[test]
    fn symbols_resolve_to_the_enclosing_function() {
        let s = Symbols::parse(
            "ffffffff81000000 T _stext\nffffffff81000100 t ip_rcv\nffffffff81000200 T ip_forward\n",
        );
        assert_eq!(s.name(0xffffffff81000150), "ip_rcv");
        assert_eq!(s.name(0xffffffff81000200), "ip_forward");
        assert_eq!(s.name(0x10), "[unknown]");
    }

    #[test]
    fn folded_lines_start_with_the_stage() {
        let mut s = StageSamples::default();
        s.stacks
            .insert((0, vec!["ip_rcv".into(), "ip_forward".into()]), 3);
        s.stacks.insert((1, vec![]), 2);
        assert_eq!(
            s.folded(),
            vec!["ip_stack;ip_rcv;ip_forward 3".to_string(), "user 2".into()]
        );
        assert_eq!(s.by_stage().get(&("user", 1)), Some(&2));
    }
}
