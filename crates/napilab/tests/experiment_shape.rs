//! One scenario file, one experiment loop, two testbeds: `napilab lab run` and
//! `napilab sim run` of the same scenario give records of the same shape (the same
//! configurations, the same sweep points in the same order, a search of the same method
//! whose trials follow the sweep, findings and settings in the same places), apart from
//! what only one testbed has (the lab's host identity and its twin table) and the
//! values. Needs root for the lab's namespaces; without it the test prints why it was
//! skipped.

use std::collections::BTreeSet;
use std::process::Command;

use serde_json::Value;

const SCENARIO: &str = r#"
name = "shape"
description = "one router configuration, two loads and a short bisection: the same experiment on the lab and on the twin"
[topology]
kind = "router"
[dut]
generator_cpus = [0]
sink_cpus = [0]
[traffic]
loads_pps = [5000, 20000]
[[traffic.classes]]
name = "be"
share = 1.0
size = 64
port = 9000
[measurement]
duration_s = 0.5
warmup_s = 0.2
repeats = 2
search = true
search_method = "bisection"
search_max_pps = 200000
search_iterations = 3
"#;

fn run_json(args: &[&str]) -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_napilab"))
        .args(args)
        .output()
        .expect("running napilab");
    assert!(
        out.status.success(),
        "napilab {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("the record as JSON")
}

/// The paths that exist in one record and, with their parent, in the other too: where
/// both records have the object, they must have the same keys.
fn shape_differences(a: &Value, b: &Value) -> Vec<String> {
    // Under a null or an empty array nothing is listed, so a field one testbed leaves
    // empty does not count as a difference of shape.
    let (pa, pb) = (
        napilab_testkit::json_key_paths(a, &|_, _| false),
        napilab_testkit::json_key_paths(b, &|_, _| false),
    );
    let parent = |p: &str| p[..p.rfind('.').unwrap_or(0)].to_string();
    let parents_a: BTreeSet<String> = pa.iter().map(|p| parent(p)).collect();
    let parents_b: BTreeSet<String> = pb.iter().map(|p| parent(p)).collect();
    let mut out = Vec::new();
    for p in pa.symmetric_difference(&pb) {
        let par = parent(p);
        if parents_a.contains(&par) && parents_b.contains(&par) {
            out.push(p.clone());
        }
    }
    out
}

/// Fields the comparison leaves out, each with its reason.
const ONE_TESTBED_OR_OPTIONAL: &[(&str, &str)] = &[
    (".twin", "the lab's own twin-vs-lab table"),
    (".host.identity", "the identity of the machine the lab ran on; the twin models a host"),
    (
        ".host.speed",
        "how steadily the lab's CPUs ran a fixed piece of work: the twin's CPUs are steady by construction",
    ),
    (
        ".host.wake_up",
        "how long a thread woken onto each of the lab's idle CPUs waited (the probe at a searching run's start): the twin takes wake-up delays from its profile",
    ),
    (
        ".intervals[].trace",
        "the trace tier's readings: the twin models them always, the lab reads them when the scenario asks (measurement.trace)",
    ),
    (".derived", "how a figure was derived: written only for derived figures"),
    (
        ".role.device",
        "a thread's device: only NAPI kthreads have one (the lab's other threads do not)",
    ),
    (".role.napi_id", "likewise: only NAPI kthreads have a NAPI id"),
    (
        ".topology.netns",
        "the network namespace the lab's map describes (the DUT's): the twin has no namespaces",
    ),
    (
        ".threads[].sched",
        "a thread's scheduler statistics: the lab reads them from /proc/<pid>/schedstat where the kernel keeps them; the twin models no per-thread run delay",
    ),
];

/// (role, requested load, repeat) of every point, in order.
fn point_keys(c: &Value) -> Vec<(String, f64, u64)> {
    c["points"]
        .as_array()
        .expect("points")
        .iter()
        .map(|p| {
            (
                p["role"].as_str().unwrap_or("").to_string(),
                p["requested_pps"].as_f64().unwrap_or(f64::NAN),
                p["repeat"].as_u64().unwrap_or(u64::MAX),
            )
        })
        .collect()
}

#[test]
fn a_scenario_gives_records_of_one_shape_on_the_lab_and_on_the_twin() {
    if !napilab_testkit::root_or_skip(
        "a_scenario_gives_records_of_one_shape_on_the_lab_and_on_the_twin",
        "the lab's namespaces need root (run the tests as root: make test)",
    ) {
        return;
    }
    let dir = napilab_testkit::scratch_dir(env!("CARGO_TARGET_TMPDIR"), "experiment-shape");
    let scenario = dir.join("shape.toml");
    std::fs::write(&scenario, SCENARIO).expect("writing the scenario");
    let scenario = scenario.to_str().expect("a UTF-8 path");
    let out = dir.join("results");
    let lab = run_json(&[
        "lab",
        "run",
        scenario,
        "--json",
        "--out",
        out.to_str().expect("a UTF-8 path"),
        "--journal-dir",
        dir.join("journal").to_str().expect("a UTF-8 path"),
    ]);
    let twin = run_json(&["sim", "run", scenario, "--json", "--no-report"]);

    assert_eq!(lab["kind"], "lab");
    assert_eq!(twin["kind"], "model");
    assert_eq!(lab["scenario_name"], twin["scenario_name"]);
    let top = |v: &Value| -> BTreeSet<String> {
        v.as_object()
            .expect("a record")
            .keys()
            .filter(|k| *k != "twin") // the lab's own twin-vs-lab table
            .cloned()
            .collect()
    };
    assert_eq!(top(&lab), top(&twin), "the records' top-level fields");

    let (lc, tc) = (
        lab["configurations"].as_array().expect("configurations"),
        twin["configurations"].as_array().expect("configurations"),
    );
    assert_eq!(lc.len(), 1);
    assert_eq!(tc.len(), 1);
    let (lc, tc) = (&lc[0], &tc[0]);
    assert_eq!(lc["name"], tc["name"]);

    // The sweep: the same points in the same order (load, then repeat).
    let sweep = |c: &Value| -> Vec<(String, f64, u64)> {
        point_keys(c)
            .into_iter()
            .filter(|(role, _, _)| role == "sweep")
            .collect()
    };
    let expected: Vec<(String, f64, u64)> = [5000.0, 20000.0]
        .iter()
        .flat_map(|&l| (0..2).map(move |r| ("sweep".to_string(), l, r)))
        .collect();
    assert_eq!(sweep(lc), expected, "the lab's sweep");
    assert_eq!(sweep(tc), expected, "the twin's sweep");
    // The search follows the sweep, with the method the scenario names, and its probes
    // are points of the record.
    for (who, c) in [("lab", lc), ("twin", tc)] {
        let keys = point_keys(c);
        let first_search = keys
            .iter()
            .position(|k| k.0 == "search")
            .unwrap_or(keys.len());
        assert_eq!(
            first_search, 4,
            "{who}: the search's trials come after the sweep"
        );
        assert!(
            keys[first_search..].iter().all(|k| k.0 == "search"),
            "{who}"
        );
        let max = &c["max_throughput"];
        assert_eq!(max["method"], "rfc2544-bisection", "{who}");
        for probe in max["probes"].as_array().expect("probes") {
            let i = probe.as_u64().expect("a point index") as usize;
            assert!(i >= 4 && i < keys.len(), "{who}: probe {i}");
        }
        assert!(c["findings"].is_array(), "{who}: findings");
        assert!(
            c["points"]
                .as_array()
                .expect("points")
                .iter()
                .all(|p| p["observation"].is_object()),
            "{who}: every point carries its Observation"
        );
    }
    // Both list the configuration's DUT settings under the same names.
    let setting_names = |c: &Value| -> BTreeSet<String> {
        c["settings"]
            .as_array()
            .expect("settings")
            .iter()
            .filter_map(|pair| pair[0].as_str().map(str::to_string))
            .collect()
    };
    let (ls, ts) = (setting_names(lc), setting_names(tc));
    for name in ["topology", "napi", "napi_cpus", "rps_cpus", "gro", "qdisc"] {
        assert!(ls.contains(name), "lab settings lack {name}: {ls:?}");
        assert!(ts.contains(name), "twin settings lack {name}: {ts:?}");
    }

    // Wherever both records have an object, it has the same fields, apart from what
    // only one testbed has and fields that are present only with a value.
    let differences: Vec<String> = shape_differences(&lab, &twin)
        .into_iter()
        .filter(|p| {
            !ONE_TESTBED_OR_OPTIONAL
                .iter()
                .any(|(end, _)| p.ends_with(end))
        })
        .collect();
    assert!(
        differences.is_empty(),
        "the records differ in shape at: {differences:#?}"
    );
}
