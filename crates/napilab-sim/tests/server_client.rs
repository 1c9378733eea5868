//! The twin's load generator in the server topology (docs/sim.md, "The server topology
//! on the twin", rows "the client" and "latency"): its CPU per request limits the
//! maximum, the modes differ because the softirq modes poll the requests on its CPU,
//! the maxima stay below the range the twin's capacity probe derives (as the lab
//! derives its own), and a point the client cannot keep up with is flagged as the lab
//! flags it.

use napilab_core::scenario;
use napilab_core::{LatencySummary, RequestResults};
use napilab_sim::calibrate_server::ServerProfile;
use napilab_sim::from_scenario::{self, TwinPlan};
use napilab_sim::from_server_scenario::{self, ServerCosts};

/// The shipped profile: the server's and the client's fitted costs.
fn shipped() -> ServerProfile {
    ServerProfile::load("veth-lab-server").expect("shipped veth-lab-server")
}

fn plan(requests: &str, measurement: &str, modes: &[&str]) -> TwinPlan {
    let text = napilab_testkit::server_scenario(
        "client",
        requests,
        measurement,
        &napilab_testkit::mode_configurations(modes),
    );
    let s = scenario::parse(&text, "client.toml", Some(2)).unwrap_or_else(|e| panic!("{e}"));
    let mut p = from_scenario::plan(&s, "client.toml").unwrap_or_else(|e| panic!("{e}"));
    if let Some(sp) = p.requests.as_mut() {
        sp.costs = shipped().costs.expect("the shipped profile has [server]");
    }
    p
}

fn run_with(plan: &TwinPlan, i: usize, costs: &ServerCosts) -> RequestResults {
    let mut plan = plan.clone();
    if let Some(sp) = plan.requests.as_mut() {
        sp.costs = costs.clone();
    }
    let lab = shipped().lab;
    let profile = costs.profile(&plan.configurations[i].profile_for(&lab.profile, None));
    from_server_scenario::run_configuration(&plan, i, &mut |b| {
        from_server_scenario::run_serial(b, &profile)
    })
    .unwrap_or_else(|e| panic!("{e}"))
}

fn costs(plan: &TwinPlan) -> ServerCosts {
    plan.requests.as_ref().expect("server plan").costs.clone()
}

const SHORT: &str = "duration_s = 0.2\nwarmup_s = 0.05\nsearch_repeats = 1";

#[test]
fn the_clients_cpu_limits_the_maximum() {
    // no-coalescing polls the requests on the client's CPU: that CPU, not the server's,
    // is the limit, so a cheaper client raises the maximum.
    let p = plan(
        "loads_qps = []\nslo_p99_us = 500\nsearch = true\nsearch_max_qps = 240000\nsearch_iterations = 6",
        SHORT,
        &["no-coalescing"],
    );
    let full = costs(&p);
    let mut half = full.clone();
    half.client_cycles /= 2.0;
    let max = |r: &RequestResults| r.max_qps.as_ref().expect("searched").qps;
    let (a, b) = (run_with(&p, 0, &full), run_with(&p, 0, &half));
    assert!(
        max(&b) > 1.15 * max(&a),
        "halving the client's {} cycles a request: maximum {} -> {} requests/s",
        full.client_cycles,
        max(&a),
        max(&b)
    );
    // The client alone could not send more than one request per its cycles.
    let ceiling = 1e9 / full.client_cycles;
    assert!(max(&a) < ceiling, "{} >= {ceiling}", max(&a));
}

#[test]
fn modes_differ_and_stay_below_the_probe_derived_range() {
    let p = plan(
        "loads_qps = []\nslo_p99_us = 500\nsearch = true\nsearch_iterations = 5",
        SHORT,
        &["no-coalescing", "deferral", "busy-wait"],
    );
    let c = costs(&p);
    let mut maxima = Vec::new();
    for i in 0..3 {
        let r = run_with(&p, i, &c);
        let probe = r.capacity.as_ref().expect("the twin probes its capacity");
        assert!(probe.method.contains("closed loop"), "{}", probe.method);
        assert_eq!(probe.connections, 16);
        assert!(probe.achieved_qps > 1000.0, "{}: {probe:?}", r.mode);
        let m = r.max_qps.as_ref().expect("searched");
        // The range's top (each search tries it first, and its raised tops too): the
        // probe's rate times SEARCH_TOP_OF_CAPACITY, or more where a search raised it.
        let derived = napilab_core::requests::SEARCH_TOP_OF_CAPACITY * probe.achieved_qps;
        let top = r
            .points
            .iter()
            .filter(|p| p.role == napilab_core::PointRole::Search)
            .map(|p| p.requested_qps)
            .fold(0.0, f64::max);
        assert!(
            (top - derived.round()).abs() < 1.0 || top > derived,
            "{}: top {top}, derived {derived}",
            r.mode
        );
        assert!(
            m.qps > 0.0 && m.qps < top,
            "{}: maximum {} not below the range's top {top}",
            r.mode,
            m.qps
        );
        maxima.push((r.mode.clone(), m.qps));
    }
    // Busy polling moves the requests' receive onto the server's CPU, leaving the
    // client's to the client, and deferral polls them in fewer, larger batches there:
    // each mode has its own maximum.
    for i in 0..maxima.len() {
        for j in i + 1..maxima.len() {
            assert!(
                (maxima[i].1 - maxima[j].1).abs() > 0.05 * maxima[i].1.max(maxima[j].1),
                "{maxima:?}"
            );
        }
    }
}

#[test]
fn a_point_the_client_cannot_keep_up_with_is_client_limited() {
    let p = plan(
        "loads_qps = [2000, 60000]\nslo_p99_us = 500\nsearch = false",
        SHORT,
        &["threaded"],
    );
    // A client at 25 us a request sends at most 40,000 a second.
    let mut c = costs(&p);
    c.client_cycles = 25_000.0;
    let r = run_with(&p, 0, &c);
    let (low, high) = (&r.points[0], &r.points[1]);
    assert!(
        !low.client_limited,
        "2000/s: {:?} (busy {})",
        low.client_reasons, low.client_cpu_busy
    );
    assert!(low.meets_slo, "2000/s p99 {} us", low.latency.p99_us);
    assert!(high.client_limited, "60000/s with a 25 us client");
    assert!(
        high.client_reasons.iter().any(|r| r.contains("never sent")),
        "{:?}",
        high.client_reasons
    );
    assert!(high.client_cpu_busy > 0.9, "{}", high.client_cpu_busy);
    assert!(high.achieved_qps < 42_000.0, "{}", high.achieved_qps);
    // Latency runs from the intended send time: a client that far behind is late.
    assert!(high.latency.p99_us > 10_000.0, "{}", high.latency.p99_us);
    // At low load the latency includes the path's fixed part and the client's read.
    assert!(
        low.latency.p50_us * 1e3 > c.path_ns,
        "p50 {} us vs path {} ns",
        low.latency.p50_us,
        c.path_ns
    );
}

/// The latency at `rate` requests/s of each mode of `modes`, the server's wake-ups of
/// an idle CPU drawn from `wake_up_samples` (empty: the profile's fixed delay).
fn latency_at(rate: f64, modes: &[&str], wake_up_samples: &[u64]) -> Vec<LatencySummary> {
    let p = plan(
        &format!("loads_qps = [{rate}]\nslo_p99_us = 500\nsearch = false"),
        "duration_s = 0.5\nwarmup_s = 0.05\nsearch_repeats = 1",
        modes,
    );
    let c = costs(&p);
    let lab = shipped().lab;
    (0..modes.len())
        .map(|i| {
            let mut profile = c.profile(&p.configurations[i].profile_for(&lab.profile, None));
            profile.latency_ns.wake_up_samples = wake_up_samples.to_vec();
            let r = from_server_scenario::run_configuration(&p, i, &mut |b| {
                from_server_scenario::run_serial(b, &profile)
            })
            .unwrap_or_else(|e| panic!("{e}"));
            r.points[0].latency.clone()
        })
        .collect()
}

#[test]
fn a_sleeping_servers_wake_ups_set_its_tail_and_a_busy_polling_one_has_none() {
    // The probe's delays as a halting VM gives them: most wake-ups 50 us, 3% 2 ms
    // (more than the 1% a p99 forgives).
    let mut halting = vec![50_000u64; 970];
    halting.extend([2_000_000u64; 30]);
    let modes = ["no-coalescing", "busy-wait"];
    let p99 = |l: Vec<LatencySummary>| -> Vec<f64> { l.iter().map(|l| l.p99_us).collect() };
    let fixed = p99(latency_at(2000.0, &modes, &[]));
    let drawn = p99(latency_at(2000.0, &modes, &halting));
    // The interrupt-driven server sleeps between requests at 2,000/s: a request that
    // wakes it waits as long as its CPU takes to come back.
    assert!(
        fixed[0] < 500.0,
        "no-coalescing, fixed delay: p99 {} us",
        fixed[0]
    );
    assert!(
        drawn[0] > 2_000.0,
        "no-coalescing, 3% of wake-ups 2 ms: p99 {} us",
        drawn[0]
    );
    // The busy-waiting server never sleeps, so nothing wakes it (its own tail at this
    // rate is the NAPI timer's: the next test).
    assert!(
        (drawn[1] - fixed[1]).abs() < 0.2 * fixed[1],
        "busy-wait: p99 {} us with the drawn wake-ups, {} us without",
        drawn[1],
        fixed[1]
    );
}

#[test]
fn a_busy_wait_loop_that_finds_nothing_for_its_busy_poll_time_waits_for_the_timer() {
    // busy-wait: busy_poll_usecs 1000, gro-flush-timeout 5 ms, prefer-busy-poll. At
    // 2,000 requests/s one gap in seven is longer than 1 ms: epoll forgets its NAPI id
    // and the next requests wait for the 5 ms timer. At 20,000/s such gaps (e^-20) do
    // not come, and the loop answers at once.
    let low = &latency_at(2000.0, &["busy-wait"], &[])[0];
    let high = &latency_at(20_000.0, &["busy-wait"], &[])[0];
    assert!(
        low.p99_us > 2_000.0 && low.p99_us < 5_500.0,
        "2,000/s: p99 {} us (the 5 ms timer)",
        low.p99_us
    );
    assert!(high.p99_us < 500.0, "20,000/s: p99 {} us", high.p99_us);
}

/// A cost per return of the server's `epoll_wait` is charged once per return, however
/// many requests it brings, and a cost per round of the generator's loop once per
/// round: so each side's CPU per request falls as its load batches requests (docs/sim.md,
/// "Costs per wake-up and per round"), as the lab's does.
#[test]
fn costs_per_epoll_return_and_per_round_fall_per_request_as_load_batches() {
    // irq-suspend: the server's returns per request fall with the rate in the twin.
    let p = plan(
        "loads_qps = [2000, 100000]\nslo_p99_us = 100000\nsearch = false",
        SHORT,
        &["irq-suspend"],
    );
    let without = costs(&p);
    let mut with = without.clone();
    with.epoll_return_cycles = 5_000.0;
    with.client_round_cycles = 3_000.0;
    let (a, b) = (run_with(&p, 0, &without), run_with(&p, 0, &with));
    assert_eq!(a.points.len(), 2, "{:?}", a.points);
    let per_request = |cpu: f64, qps: f64| cpu / qps * 1e9;
    let mut returns = Vec::new();
    for (pa, pb) in a.points.iter().zip(&b.points) {
        let r = pb.server.epoll_returns_with_events as f64 / pb.server.requests.max(1) as f64;
        let extra = per_request(pb.server.cpu_busy, pb.achieved_qps)
            - per_request(pa.server.cpu_busy, pa.achieved_qps);
        // Each return costs 5,000 cycles (1 GHz: ns); the twin's own timing moves a little.
        assert!(
            (extra - 5_000.0 * r).abs() <= 0.15 * 5_000.0 * r + 100.0,
            "at {} requests/s: {r:.2} returns a request, the server's CPU rose by {extra:.0} ns a request",
            pb.requested_qps
        );
        returns.push(r);
    }
    assert!(
        returns[1] < 0.8 * returns[0],
        "returns per request {returns:?}: the load batches requests"
    );
    // The generator at 2,000 requests/s: a round to send each request and one to read
    // its reply; at 100,000/s rounds carry several.
    let client_extra: Vec<f64> = a
        .points
        .iter()
        .zip(&b.points)
        .map(|(pa, pb)| {
            per_request(pb.client_cpu_busy, pb.achieved_qps)
                - per_request(pa.client_cpu_busy, pa.achieved_qps)
        })
        .collect();
    assert!(
        (client_extra[0] - 6_000.0).abs() <= 0.15 * 6_000.0,
        "the generator's CPU rose by {:.0} ns a request at 2,000/s (two rounds of 3,000)",
        client_extra[0]
    );
    assert!(
        client_extra[1] < 0.8 * client_extra[0],
        "the generator's extra CPU per request {client_extra:?}: rounds carry more requests at the higher rate"
    );
}
