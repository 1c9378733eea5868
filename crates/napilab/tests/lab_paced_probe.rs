//! The capacity probe on the paced back end: its sweep of fractions lands on loads the
//! generator and the DUT carry, not on the 1 pkt/s a probe at an unreachable rate gave
//! (the paced generator keeps a schedule, and one it cannot follow leaves its measured
//! window with departures from the warm-up only). Needs root (namespaces); without it
//! the test prints why it was skipped.

fn scenario_text() -> String {
    napilab_testkit::router_scenario(
        "paced-probe",
        "backend = \"paced\"\nsweep = { fractions = [0.25, 0.8] }",
        "duration_s = 1.0\nwarmup_s = 0.3",
        "[[configurations]]\nname = \"softirq\"",
    )
}

#[test]
fn a_paced_sweep_of_fractions_follows_the_probed_capacity() {
    if !napilab_testkit::root_or_skip(
        "a_paced_sweep_of_fractions_follows_the_probed_capacity",
        "needs root for network namespaces",
    ) {
        return;
    }
    let dir = napilab_testkit::scratch_dir(env!("CARGO_TARGET_TMPDIR"), "napilab-lab-paced-probe");
    let scenario = dir.join("paced-probe.toml");
    std::fs::write(&scenario, scenario_text()).expect("scenario");
    let out = dir.join("results");
    let record = napilab_testkit::stdout_json(
        std::process::Command::new(env!("CARGO_BIN_EXE_napilab"))
            .args(["lab", "run", "--json", "--no-observe", "--out"])
            .arg(&out)
            .arg(&scenario),
    );
    let config = &record["configurations"][0];
    let sweep_note = config["settings"]
        .as_array()
        .expect("settings")
        .iter()
        .find(|kv| kv[0] == "sweep loads")
        .map(|kv| kv[1].to_string())
        .expect("a 'sweep loads' setting saying where the loads came from");
    assert!(sweep_note.contains("doubling"), "{sweep_note}");
    let points = config["points"].as_array().expect("points");
    assert_eq!(points.len(), 2, "{points:?}");
    for p in points {
        let requested = p["requested_pps"].as_f64().unwrap_or(0.0);
        let offered = p["offered_pps"].as_f64().unwrap_or(0.0);
        // The probe starts at 50 kpps, so a quarter of what it found is at least 12.5 kpps.
        assert!(
            requested >= 12_500.0,
            "a sweep load of {requested} pkt/s: {sweep_note}"
        );
        assert!(
            offered >= 0.5 * requested,
            "offered {offered} of {requested} pkt/s"
        );
    }
}
