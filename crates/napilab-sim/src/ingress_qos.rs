//! The ingress-QoS study's strategies for a software router
//! (docs/studies.md#ingress-qos-study) as twin configurations, and its ring-budget
//! rule: with the BE ring budget b, per-packet service time x and RT load rho_RT, an
//! RT packet waits at most Tmax = b x / (1 - rho_RT) (section IV-C), so keeping Tmax
//! under m packet times needs b <= m (1 - rho_RT).

use crate::config::{ClassConfig, Pattern, SimConfig};
use crate::profile::Profile;

/// One of the study's four strategies (section IV).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Strategy {
    /// One ring, FIFO.
    Sq,
    /// Two separate NAPI devices (two rings, two IRQs), round robin by net_rx_action.
    Rr,
    /// One device, two rings polled alternately with ring budgets 4 / 4.
    LlRr,
    /// One device, two rings polled alternately with ring budgets RT 60 / BE 4.
    LlWfq,
}

impl Strategy {
    pub const ALL: [Strategy; 4] = [Strategy::Sq, Strategy::Rr, Strategy::LlRr, Strategy::LlWfq];

    pub fn name(self) -> &'static str {
        match self {
            Strategy::Sq => "SQ",
            Strategy::Rr => "RR",
            Strategy::LlRr => "LL-RR",
            Strategy::LlWfq => "LL-WFQ",
        }
    }

    /// The shipped study scenario and configuration: (file, configuration).
    pub fn scenario(self) -> (&'static str, &'static str) {
        use crate::studies::{INGRESS_QOS, ROUTER_SQ};
        match self {
            Strategy::Sq => (ROUTER_SQ, "baseline"),
            Strategy::Rr => (INGRESS_QOS, "rr"),
            Strategy::LlRr => (INGRESS_QOS, "ll-rr"),
            Strategy::LlWfq => (INGRESS_QOS, "ll-wfq"),
        }
    }

    /// The strategy's configuration at `rate_pps` with the class `rt` taking
    /// `rt_share` of it and `be` the rest. SQ's one ring then carries both classes
    /// (counted apart).
    pub fn config(self, rate_pps: f64, rt_share: f64) -> SimConfig {
        let (file, configuration) = self.scenario();
        let mut c = match crate::studies::config(file, configuration) {
            Ok((c, _)) => c,
            // The scenarios are compiled in and mapped by the tests.
            Err(e) => panic!("shipped scenario {file} does not map: {e}"),
        };
        c.traffic.rate_pps = rate_pps;
        if c.traffic.classes.len() == 1 {
            let mut rt: ClassConfig = c.traffic.classes[0].clone();
            rt.name = "rt".to_string();
            c.traffic.classes.insert(0, rt);
        }
        for class in &mut c.traffic.classes {
            class.share = if class.name == "rt" {
                rt_share
            } else {
                1.0 - rt_share
            };
        }
        c
    }
}

/// Tmax = b x / (1 - rho_RT), in the unit of `service`.
pub fn tmax(be_budget: u32, service: f64, rho_rt: f64) -> f64 {
    be_budget as f64 * service / (1.0 - rho_rt)
}

/// The largest BE ring budget b with Tmax <= `target_packets` packet times:
/// floor(m (1 - rho_RT)); None when even b = 1 exceeds the target.
pub fn largest_be_budget(target_packets: f64, rho_rt: f64) -> Option<u32> {
    let b = (target_packets * (1.0 - rho_rt) + 1e-9).floor();
    (b >= 1.0).then_some(b.min(u32::MAX as f64) as u32)
}

/// A profile's service time per forwarded packet in ns: driver poll, IP stack,
/// transmit and TX reclaim (the per-packet stages of a router on one core).
pub fn service_ns(profile: &Profile) -> f64 {
    let s = &profile.stage_cycles;
    (s.poll + s.ip_stack + s.xmit + s.tx_reclaim) / profile.cpu_ghz
}

/// What the twin shows for RT waiting at one ring budget.
#[derive(Clone, Debug, serde::Serialize)]
pub struct BudgetCheck {
    pub pattern: &'static str,
    pub rt_packets: u64,
    pub rt_dropped: u64,
    /// RT waiting in ns: latency minus the profile's RX and TX DMA and one service time.
    pub mean_wait_ns: f64,
    pub p99_wait_ns: f64,
    pub max_wait_ns: f64,
}

/// Run LL-WFQ (RT ring budget 60, BE ring budget `be_budget`) on `profile` with RT at
/// `rho_rt` of the core's capacity (1 / x) and BE offered 1.2 times the capacity (BE
/// always has work: the bound's worst case), for `duration_ms`, once with
/// constant-rate RT (the bound's assumption: the maximum should stay under Tmax) and
/// once with Poisson traffic (the study's: the mean and the 99th percentile should).
pub fn check_be_budget(
    profile: &Profile,
    rho_rt: f64,
    be_budget: u32,
    duration_ms: f64,
    seed: u64,
) -> Vec<BudgetCheck> {
    let x = service_ns(profile);
    let capacity = 1e9 / x;
    let total = capacity * (rho_rt + 1.2);
    let mut out = Vec::new();
    for (pattern, name) in [
        (Pattern::Constant, "constant"),
        (Pattern::Poisson, "poisson"),
    ] {
        let mut cfg = Strategy::LlWfq.config(total, rho_rt / (rho_rt + 1.2));
        cfg.traffic.pattern = pattern;
        cfg.measurement.duration_ms = duration_ms;
        cfg.measurement.warmup_ms = 10.0;
        if let Some(be) = cfg.ingress.queues[0]
            .rings
            .iter_mut()
            .find(|r| r.name == "be")
        {
            be.budget = Some(be_budget.max(1));
        }
        let r = crate::run(&cfg, profile, seed);
        let fixed = (profile.latency_ns.rx_dma + profile.latency_ns.tx_dma) as f64 + x;
        if let Some(rt) = r.model.class("rt") {
            let w = |us: f64| (us * 1e3 - fixed).max(0.0);
            out.push(BudgetCheck {
                pattern: name,
                rt_packets: rt.forwarded,
                rt_dropped: rt.rx_dropped + rt.tx_dropped,
                mean_wait_ns: w(rt.latency.mean_us),
                p99_wait_ns: w(rt.latency.p99_us),
                max_wait_ns: w(rt.latency.max_us),
            });
        }
    }
    out
}

/// A profile in which only per-packet work costs time: `service_ns` per packet at
/// 1 GHz (IRQs, softirq entry, polls, DMA free). The twin check of an advice given
/// from a bare service time runs on it: the bound's own model.
pub fn ideal_profile(service_ns: f64) -> Profile {
    use crate::profile::{FixedCycles, LatencyNs, StageCycles};
    Profile {
        name: format!("ideal-{service_ns}ns"),
        description: "only per-packet work costs time (the Tmax bound's model)".to_string(),
        cpu_ghz: 1.0,
        stage_cycles: StageCycles {
            poll: service_ns * 0.25,
            ip_stack: service_ns * 0.5,
            xmit: service_ns * 0.25,
            qdisc: 0.0,
            tx_reclaim: 0.0,
            rps: 0.0,
            unmapped: 0.0,
        },
        fixed_cycles: FixedCycles {
            hardirq: 0.0,
            softirq: 0.0,
            poll: 0.0,
            tx_softirq: 0.0,
            context_switch: 0.0,
            idle_exit: 0.0,
            after_interrupt: 0.0,
            napi_thread_run: 0.0,
            napi_thread_packet: 0.0,
        },
        latency_ns: LatencyNs {
            irq_delivery: 0,
            idle_wakeup: 0,
            wake_up_samples: Vec::new(),
            rx_dma: 0,
            tx_dma: 0,
        },
        tunnel_cycles: None,
        irq_thread: None,
        provenance: Default::default(),
        host: None,
        nic: None,
        stalls: Vec::new(),
        timer: Vec::new(),
    }
}

/// The device budget the ring budgets share (the NAPI weight of the study's driver).
pub const DEVICE_BUDGET: u32 = 64;

/// The ring-budget advice of section IV-C (docs/studies.md#qos-7).
#[derive(Clone, Debug, serde::Serialize)]
pub struct Advice {
    /// RT load as a fraction of the core's capacity (rho_RT).
    pub rt_load: f64,
    /// Per-packet service time x, ns.
    pub service_ns: f64,
    /// Latency target m, in packet times.
    pub target_packets: f64,
    /// The largest BE ring budget b with Tmax <= m x (at most the device budget);
    /// None when even b = 1 exceeds the target.
    pub be_budget: Option<u32>,
    /// Tmax at that budget, ns.
    pub tmax_ns: Option<f64>,
    /// Why there is no budget, or why it was capped.
    pub note: Option<String>,
}

/// The arithmetic: b = floor(m (1 - rho_RT)), capped at the device budget.
pub fn advise(rt_load: f64, service_ns: f64, target_packets: f64) -> Result<Advice, String> {
    if !(0.0..1.0).contains(&rt_load) {
        return Err(format!(
            "RT load {rt_load} must be a fraction of the core's capacity in [0, 1)"
        ));
    }
    if !(service_ns > 0.0 && service_ns.is_finite()) {
        return Err(format!("service time {service_ns} ns must be positive"));
    }
    if !(target_packets > 0.0 && target_packets.is_finite()) {
        return Err(format!(
            "latency target {target_packets} packets must be positive"
        ));
    }
    let mut note = None;
    let be_budget = match largest_be_budget(target_packets, rt_load) {
        None => {
            note = Some(format!(
                "no BE ring budget meets the target: even b = 1 gives Tmax = x / (1 - rho_RT) = {:.2} packet times",
                1.0 / (1.0 - rt_load)
            ));
            None
        }
        Some(b) if b > DEVICE_BUDGET => {
            note = Some(format!(
                "b = {b} exceeds the device budget; capped at {DEVICE_BUDGET}"
            ));
            Some(DEVICE_BUDGET)
        }
        Some(b) => Some(b),
    };
    Ok(Advice {
        rt_load,
        service_ns,
        target_packets,
        be_budget,
        tmax_ns: be_budget.map(|b| tmax(b, service_ns, rt_load)),
        note,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_studys_example_gives_b_4() {
        // m = 6, rho_RT <= 0.3 gives b = 4 (section IV-C).
        assert_eq!(largest_be_budget(6.0, 0.3), Some(4));
        assert_eq!(largest_be_budget(6.0, 0.0), Some(6));
        assert_eq!(largest_be_budget(1.0, 0.5), None);
        assert!((tmax(4, 500.0, 0.3) - 2857.142857).abs() < 1e-3);
    }

    #[test]
    fn advice_arithmetic_and_bad_input() {
        let a = advise(0.3, 550.0, 6.0).expect("valid");
        assert_eq!(a.be_budget, Some(4));
        assert!((a.tmax_ns.expect("tmax") - 4.0 * 550.0 / 0.7).abs() < 1e-6);
        assert!(a.tmax_ns.expect("tmax") <= 6.0 * 550.0);
        // b + 1 would break the target: b is the largest.
        assert!(tmax(5, 550.0, 0.3) > 6.0 * 550.0);
        let none = advise(0.5, 550.0, 1.5).expect("valid");
        assert_eq!(none.be_budget, None);
        assert!(none.note.expect("note").contains("b = 1"));
        let capped = advise(0.0, 550.0, 1000.0).expect("valid");
        assert_eq!(capped.be_budget, Some(DEVICE_BUDGET));
        assert!(advise(1.0, 550.0, 6.0).is_err());
        assert!(advise(0.3, 0.0, 6.0).is_err());
        assert!(advise(0.3, 550.0, -1.0).is_err());
    }

    /// The twin check on the bound's own model (ideal profile): at the advised b the
    /// constant-rate maximum and the Poisson mean and p99 stay under Tmax; one budget
    /// step above the advice the maximum breaks the target m x.
    #[test]
    fn the_twin_confirms_the_advised_budget() {
        let x = 500.0;
        let a = advise(0.3, x, 6.0).expect("valid");
        let b = a.be_budget.expect("budget");
        let tmax = a.tmax_ns.expect("tmax");
        let p = ideal_profile(x);
        let checks = check_be_budget(&p, 0.3, b, 60.0, 7);
        let (cbr, poisson) = (&checks[0], &checks[1]);
        assert!(cbr.max_wait_ns <= tmax, "{cbr:?} Tmax {tmax}");
        assert!(poisson.mean_wait_ns <= tmax, "{poisson:?} Tmax {tmax}");
        assert!(poisson.p99_wait_ns <= tmax, "{poisson:?} Tmax {tmax}");
        let over = check_be_budget(&p, 0.3, 3 * b, 60.0, 7);
        assert!(over[0].max_wait_ns > 6.0 * x, "{:?}", over[0]);
    }

    #[test]
    fn every_strategy_config_is_valid() {
        for s in Strategy::ALL {
            let c = s.config(1e6, 0.3);
            c.validate(s.scenario().0).expect("valid");
            assert_eq!(c.traffic.classes.len(), 2, "{}", s.name());
        }
    }
}
