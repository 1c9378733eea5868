//! `napilab lab run` stopped by Ctrl-C: exits with status 130, keeps the finished part
//! of the record, and leaves no namespace behind. Needs root (namespaces); without it
//! the test prints why it was skipped.

use std::io::Read;
use std::process::{Command, Stdio};

use napilab_testkit::{lab_namespaces, lab_run_id_of, LabRunGuard};
use std::time::{Duration, Instant};

fn scenario_text() -> String {
    napilab_testkit::router_scenario(
        "interrupt-me",
        "loads_pps = [2000, 2000]",
        r#"duration_s = 30.0
warmup_s = 0.2"#,
        "",
    )
}

#[test]
fn ctrl_c_exits_130_keeps_the_record_and_removes_the_namespaces() {
    if !napilab_testkit::root_or_skip(
        "ctrl_c_exits_130_keeps_the_record_and_removes_the_namespaces",
        "needs root for network namespaces",
    ) {
        return;
    }
    let dir = napilab_testkit::scratch_dir(env!("CARGO_TARGET_TMPDIR"), "napilab-lab-interrupt");
    let scenario = dir.join("interrupt.toml");
    std::fs::write(&scenario, scenario_text()).expect("scenario");
    let out = dir.join("results");
    let mut run = LabRunGuard(
        Command::new(env!("CARGO_BIN_EXE_napilab"))
            .args(["lab", "run", "--no-observe", "--json", "--out"])
            .arg(&out)
            .arg("--journal-dir")
            .arg(dir.join("journal"))
            .arg(&scenario)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start napilab lab run"),
    );
    // Interrupt once the run has built its namespaces and is measuring the first point.
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut run_id = None;
    while Instant::now() < deadline {
        assert!(
            run.0.try_wait().expect("poll child").is_none(),
            "the run ended before it could be interrupted"
        );
        run_id = run_id.or_else(|| lab_run_id_of(run.0.id()));
        if run_id
            .as_deref()
            .is_some_and(|id| lab_namespaces(id).len() == 3)
        {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let run_id = run_id.expect("the run wrote no pid file in /run/napilab/lab");
    assert_eq!(
        lab_namespaces(&run_id).len(),
        3,
        "the run never built its three namespaces"
    );
    std::thread::sleep(Duration::from_secs(2));
    let status = run
        .interrupt(Duration::from_secs(60))
        .unwrap_or_else(|e| panic!("{e}"));
    let mut stdout = String::new();
    let mut stderr = String::new();
    if let Some(mut o) = run.0.stdout.take() {
        o.read_to_string(&mut stdout).expect("stdout");
    }
    if let Some(mut e) = run.0.stderr.take() {
        e.read_to_string(&mut stderr).expect("stderr");
    }
    assert_eq!(status.code(), Some(130), "stderr: {stderr}");
    assert!(stderr.contains("interrupted"), "stderr: {stderr}");
    assert!(
        lab_namespaces(&run_id).is_empty(),
        "left behind: {:?}",
        lab_namespaces(&run_id)
    );
    let record: serde_json::Value =
        serde_json::from_str(&stdout).expect("the record is printed as JSON");
    assert_eq!(record["interrupted"], true);
    assert_eq!(record["run_id"], run_id.as_str());
    let run_json = out.join(&run_id).join("run.json");
    assert!(run_json.is_file(), "{} missing", run_json.display());
}
