//! `napilab lab run` on the many-napi topology (docs/lab.md) at N = 8: the DUT's
//! ingress has 8 NAPI instances, the generator's flows reach more than one of them,
//! threaded NAPI creates 8 kthreads and pinning pins them, the kthreads' context
//! switches are reported, and everything is removed afterwards -- also when the run is
//! interrupted mid-point. Needs root; skipped with the reason printed otherwise.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use napilab_testkit::{lab_namespaces, lab_run_id_of, LabRunGuard};

const INSTANCES: u64 = 8;

/// A many-napi scenario: one 64-byte class at `load_pps`, `dut` and `rest` (measurement
/// and configurations) as given.
fn scenario(dut: &str, load_pps: u32, rest: &str) -> String {
    format!(
        "name = \"many-napi-test\"\n[topology]\nkind = \"many-napi\"\n[dut]\n{dut}\n\
         generator_cpus = [0]\nsink_cpus = [0]\n[traffic]\nloads_pps = [{load_pps}]\n\
         [[traffic.classes]]\nname = \"be\"\nshare = 1.0\nsize = 64\nport = 9000\n{rest}"
    )
}

/// Short points in the three contexts, with the trace tier.
fn short() -> String {
    let measurement =
        "[measurement]\nduration_s = 1.0\nwarmup_s = 4.0\ndrain_ms = 200\ntrace = \"always\"\n";
    measurement.to_string()
        + &napilab_testkit::configurations(&[
            ("softirq", r#"napi = "softirq""#),
            ("threaded", r#"napi = "threaded""#),
            ("threaded-pinned", r#"napi = "threaded", napi_cpus = [1]"#),
        ])
}

/// The interrupted run: long points, so that SIGINT lands inside one.
const LONG: &str = "[measurement]\nduration_s = 30.0\nwarmup_s = 0.2\n";

fn scratch(name: &str) -> PathBuf {
    napilab_testkit::scratch_dir(env!("CARGO_TARGET_TMPDIR"), name)
}

/// Links (root namespace) and NAPI kthreads named after the run: its devices are
/// `n<last 4 of the run id>-*`.
fn leftovers(run_id: &str) -> Vec<String> {
    let tag = format!("n{}-", &run_id[run_id.len() - 4..]);
    let links = Command::new("ip")
        .args(["-o", "link"])
        .output()
        .expect("ip link");
    let mut left: Vec<String> = String::from_utf8_lossy(&links.stdout)
        .lines()
        .filter(|l| l.contains(&tag))
        .map(str::to_string)
        .collect();
    for e in std::fs::read_dir("/proc").expect("/proc").flatten() {
        if let Ok(comm) = std::fs::read_to_string(e.path().join("comm")) {
            if comm.starts_with(&format!("napi/{tag}")) {
                left.push(format!("kthread {}", comm.trim()));
            }
        }
    }
    left.extend(lab_namespaces(run_id));
    left
}

/// [`leftovers`] once the kernel has finished removing the run's namespaces: `ip netns
/// del` returns before the namespace's devices and their kthreads are gone (the kernel
/// cleans up network namespaces from a workqueue), so wait for that, bounded.
fn leftovers_after_cleanup(run_id: &str) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let left = leftovers(run_id);
        if left.is_empty() || Instant::now() >= deadline {
            return left;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn run_lab(dir: &Path, scenario_text: &str) -> Command {
    let scenario = dir.join("scenario.toml");
    std::fs::write(&scenario, scenario_text).expect("scenario");
    let mut c = Command::new(env!("CARGO_BIN_EXE_napilab"));
    c.args(["lab", "run", "--json", "--out"])
        .arg(dir.join("results"))
        .arg("--journal-dir")
        .arg(dir.join("journal"))
        .arg(&scenario);
    c
}

#[test]
fn many_napi_spreads_over_the_instances_counts_kthreads_and_cleans_up() {
    if !napilab_testkit::root_or_skip(
        "many_napi_spreads_over_the_instances_counts_kthreads_and_cleans_up",
        "needs root for namespaces and BPF",
    ) {
        return;
    }
    let dir = scratch("napilab-lab-many-napi");
    let record = napilab_testkit::stdout_json(&mut run_lab(
        &dir,
        &scenario("napi_instances = 8", 8000, &short()),
    ));
    let run_id = record["run_id"].as_str().expect("run id").to_string();
    let configs = record["configurations"].as_array().expect("configurations");
    assert_eq!(configs.len(), 3);
    for c in configs {
        let name = c["name"].as_str().unwrap_or("?");
        let p = &c["points"][0];
        let class = &p["classes"][0];
        let (sent, received) = (
            class["sent"].as_u64().unwrap_or(0),
            class["received"].as_u64().unwrap_or(0),
        );
        assert!(
            sent > 0 && received as f64 >= 0.95 * sent as f64,
            "{name}: {class}"
        );
        let m = &p["many_napi"];
        assert_eq!(m["instances"].as_u64(), Some(INSTANCES), "{name}: {m}");
        let polled = m["instances_polled"].as_u64().unwrap_or(0);
        assert!(
            polled > 1 && polled <= INSTANCES,
            "{name}: the traffic reached {polled} of {INSTANCES} instances: {m}; notices {}",
            record["notices"]
        );
        assert!(
            m["dut_cpu_ns_per_packet"].as_f64().is_some_and(|v| v > 0.0),
            "{name}: no forwarding CPU per packet: {m}"
        );
        let k = &m["kthreads"];
        match name {
            "softirq" => assert!(k.is_null(), "{name}: kthreads in softirq mode: {k}"),
            _ => {
                assert_eq!(k["count"].as_u64(), Some(INSTANCES), "{name}: {k}");
                assert!(
                    k["voluntary_switches"].as_u64().unwrap_or(0) > 0,
                    "{name}: no context switches counted: {k}"
                );
                let want_pinned = if name == "threaded-pinned" {
                    INSTANCES
                } else {
                    0
                };
                assert_eq!(k["pinned"].as_u64(), Some(want_pinned), "{name}: {k}");
                if name == "threaded-pinned" {
                    assert_eq!(k["migrations"].as_u64(), Some(0), "{name}: {k}");
                }
            }
        }
        let contexts: Vec<&str> = m["polls"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|c| c["context"].as_str())
            .collect();
        let want = if name == "softirq" {
            "bh_enable"
        } else {
            "napi_thread"
        };
        assert!(contexts.contains(&want), "{name}: polls by context {m}");
    }
    let left = leftovers_after_cleanup(&run_id);
    assert!(left.is_empty(), "left behind: {left:?}");
}

#[test]
fn an_interrupted_many_napi_run_removes_its_links_and_kthreads() {
    if !napilab_testkit::root_or_skip(
        "an_interrupted_many_napi_run_removes_its_links_and_kthreads",
        "needs root for namespaces",
    ) {
        return;
    }
    let dir = scratch("napilab-lab-many-napi-interrupted");
    let mut run = LabRunGuard(
        run_lab(
            &dir,
            &scenario("napi_instances = 64\nnapi = \"threaded\"", 5000, LONG),
        )
        .arg("--no-observe")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start napilab lab run"),
    );
    // Interrupt once the DUT's 64 NAPI kthreads exist (the point is running).
    let deadline = Instant::now() + Duration::from_secs(30);
    let run_id = loop {
        assert!(Instant::now() < deadline, "the run never started its point");
        assert!(
            run.0.try_wait().expect("poll child").is_none(),
            "the run ended before it could be interrupted"
        );
        let id = lab_run_id_of(run.0.id());
        if let Some(id) = id {
            let kthreads = leftovers(&id)
                .iter()
                .filter(|l| l.starts_with("kthread"))
                .count();
            if kthreads >= 64 {
                break id;
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    std::thread::sleep(Duration::from_secs(1));
    let status = run
        .interrupt(Duration::from_secs(60))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(status.code(), Some(130));
    let left = leftovers_after_cleanup(&run_id);
    assert!(left.is_empty(), "left behind: {left:?}");
}
