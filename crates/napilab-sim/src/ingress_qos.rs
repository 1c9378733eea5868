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

    /// The shipped scenario: (file, text).
    pub fn scenario(self) -> (&'static str, &'static str) {
        match self {
            Strategy::Sq => (
                "scenarios/router-sq.toml",
                include_str!("../scenarios/router-sq.toml"),
            ),
            Strategy::Rr => (
                "scenarios/router-rr.toml",
                include_str!("../scenarios/router-rr.toml"),
            ),
            Strategy::LlRr => (
                "scenarios/router-ll-rr.toml",
                include_str!("../scenarios/router-ll-rr.toml"),
            ),
            Strategy::LlWfq => (
                "scenarios/router-ll-wfq.toml",
                include_str!("../scenarios/router-ll-wfq.toml"),
            ),
        }
    }

    /// The strategy's configuration at `rate_pps` with the class `rt` taking
    /// `rt_share` of it and `be` the rest. SQ's one ring then carries both classes
    /// (counted apart).
    pub fn config(self, rate_pps: f64, rt_share: f64) -> SimConfig {
        let (file, text) = self.scenario();
        let mut c = match SimConfig::from_toml_str(text, file) {
            Ok(c) => c,
            // The scenarios are compiled in and parsed by the tests.
            Err(e) => panic!("shipped scenario {file} does not parse: {e}"),
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
    fn every_strategy_config_is_valid() {
        for s in Strategy::ALL {
            let c = s.config(1e6, 0.3);
            c.validate(s.scenario().0).expect("valid");
            assert_eq!(c.traffic.classes.len(), 2, "{}", s.name());
        }
    }
}
