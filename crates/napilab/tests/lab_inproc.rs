//! The lab runs its observer, its key-value server and its interrupt modes (napilab
//! tune) in-process: during a packet run and a server run no napilab process is
//! started under the lab, yet the points carry their Observations; and `kill -9` of
//! a server run leaves no napilab process behind, after which `napilab lab clean`
//! removes its namespaces, links and journals. Needs root (namespaces); without it the
//! tests print why they were skipped.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use napilab_testkit::{lab_namespaces, lab_run_id_of, LabRunGuard};
use serde_json::Value;

/// The lab runs of this file take one at a time: each loads both CPUs.
static ONE_LAB_AT_A_TIME: Mutex<()> = Mutex::new(());

fn packet_scenario() -> String {
    napilab_testkit::router_scenario(
        "inproc-packet",
        "loads_pps = [2000]",
        r#"duration_s = 1.0
warmup_s = 0.3"#,
        "",
    )
}

/// One mode (applied with napilab tune), napilab's server, one load.
fn server_scenario(loads: &str, duration_s: f64) -> String {
    napilab_testkit::server_scenario(
        "inproc-server",
        &format!("loads_qps = {loads}\nconnections = 4\nkeys = 1000\nvalue_size = 32\nslo_p99_us = 100000"),
        &format!("duration_s = {duration_s}\nwarmup_s = 0.2"),
        &napilab_testkit::mode_configurations(&["deferral"]),
    )
}

fn napilab_exe() -> PathBuf {
    std::fs::canonicalize(env!("CARGO_BIN_EXE_napilab")).expect("the napilab binary")
}

fn scratch(name: &str) -> PathBuf {
    napilab_testkit::scratch_dir(env!("CARGO_TARGET_TMPDIR"), name)
}

/// (pid, parent pid, start time) of every process, from /proc/*/stat.
fn processes() -> Vec<(u32, u32, u64)> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| {
            let pid: u32 = e.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
            // After the command name's closing parenthesis: state ppid ... starttime
            // (field 22 of the line, the 20th after the name).
            let rest = &stat[stat.rfind(')')? + 2..];
            let fields: Vec<&str> = rest.split_whitespace().collect();
            Some((
                pid,
                fields.get(1)?.parse().ok()?,
                fields.get(19)?.parse().ok()?,
            ))
        })
        .collect()
}

fn exe_of(pid: u32) -> Option<PathBuf> {
    std::fs::read_link(format!("/proc/{pid}/exe")).ok()
}

/// Watches the children of `parent` until `done`: every (pid, start time) seen running
/// `exe` in two scans at least 50 ms apart (a child between fork and exec still runs
/// the lab's own binary, for microseconds), with its command line.
fn napilab_children(parent: u32, exe: &Path, done: &AtomicBool) -> Vec<String> {
    let mut seen: HashMap<(u32, u64), Instant> = HashMap::new();
    let mut offenders = Vec::new();
    while !done.load(Ordering::Relaxed) {
        for (pid, ppid, start) in processes() {
            if ppid != parent || exe_of(pid).as_deref() != Some(exe) {
                continue;
            }
            let first = *seen.entry((pid, start)).or_insert_with(Instant::now);
            if first.elapsed() >= Duration::from_millis(50) {
                let cmdline = std::fs::read(format!("/proc/{pid}/cmdline"))
                    .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
                    .unwrap_or_default();
                if !offenders.contains(&cmdline) {
                    offenders.push(cmdline);
                }
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    offenders
}

/// Runs `napilab lab run --json` on `scenario` (observed), watching its children;
/// returns the record and the napilab children seen.
fn run_watched(dir: &Path, scenario: &str) -> (Value, Vec<String>) {
    let file = dir.join("scenario.toml");
    std::fs::write(&file, scenario).expect("scenario");
    let child = Command::new(env!("CARGO_BIN_EXE_napilab"))
        .args(["lab", "run", "--json", "--out"])
        .arg(dir.join("results"))
        .arg("--journal-dir")
        .arg(dir.join("journal"))
        .arg(&file)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start napilab lab run");
    let pid = child.id();
    let exe = napilab_exe();
    let done = AtomicBool::new(false);
    let (out, offenders) = std::thread::scope(|s| {
        let watcher = s.spawn(|| napilab_children(pid, &exe, &done));
        let out = child.wait_with_output().expect("napilab lab run");
        done.store(true, Ordering::Relaxed);
        (out, watcher.join().expect("watcher"))
    });
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let record: Value = serde_json::from_slice(&out.stdout).expect("RunRecord JSON");
    let run_id = record["run_id"].as_str().expect("run id");
    // Written once, by the binary, with the twin: the file is the printed record.
    let on_disk: Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join("results").join(run_id).join("run.json"))
            .expect("run.json"),
    )
    .expect("run.json is JSON");
    assert_eq!(on_disk, record, "run.json is not the record printed");
    (record, offenders)
}

#[test]
fn lab_runs_start_no_napilab_process_and_still_observe() {
    if !napilab_testkit::root_or_skip(
        "lab_runs_start_no_napilab_process_and_still_observe",
        "needs root for network namespaces",
    ) {
        return;
    }
    let _one = ONE_LAB_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    // The watcher sees a napilab child when there is one (this test's own).
    let mut child = Command::new(env!("CARGO_BIN_EXE_napilab"))
        .args([
            "observe",
            "--json",
            "--no-map",
            "--for",
            "500ms",
            "--interval",
            "100ms",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("napilab observe");
    let done = AtomicBool::new(false);
    let seen = std::thread::scope(|s| {
        let watcher = s.spawn(|| napilab_children(std::process::id(), &napilab_exe(), &done));
        let _ = child.wait();
        done.store(true, Ordering::Relaxed);
        watcher.join().expect("watcher")
    });
    assert!(
        seen.iter().any(|c| c.contains("observe")),
        "the watcher missed a napilab child: {seen:?}"
    );
    let dir = scratch("napilab-lab-inproc-packet");
    let (record, offenders) = run_watched(&dir, &packet_scenario());
    assert!(
        offenders.is_empty(),
        "the packet run started napilab processes: {offenders:?}"
    );
    let point = &record["configurations"][0]["points"][0];
    let devices = point["observation"]["intervals"][0]["devices"]
        .as_array()
        .unwrap_or_else(|| panic!("a packet point without its Observation: {point}"));
    // The DUT's namespace holds its veth ends (named after the run) and lo, none of
    // the host's devices.
    let short = &record["run_id"].as_str().expect("run id")[16..];
    let names: Vec<&str> = devices.iter().filter_map(|d| d["name"].as_str()).collect();
    assert!(
        !names.is_empty()
            && names
                .iter()
                .all(|n| *n == "lo" || n.starts_with(&format!("n{short}"))),
        "the observer saw other devices than the DUT namespace's: {names:?}"
    );

    let dir = scratch("napilab-lab-inproc-server");
    let (record, offenders) = run_watched(&dir, &server_scenario("[1000]", 0.5));
    assert!(
        offenders.is_empty(),
        "the server run started napilab processes: {offenders:?}"
    );
    let requests = &record["configurations"][0]["requests"];
    if let Some(why) = requests["not_runnable"].as_str() {
        println!("the deferral mode is not runnable here ({why}): only the process check ran");
        return;
    }
    let point = &requests["points"][0];
    assert!(
        point["observation"]["intervals"].is_array(),
        "a server point without its Observation: {point}"
    );
    let settings = record["configurations"][0]["settings"].to_string();
    assert!(
        settings.contains("mode: "),
        "the mode's tune apply changed nothing: {settings}"
    );
}

fn kill9(child: &mut Child) {
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
    let _ = child.wait();
}

#[test]
fn kill_9_of_a_server_run_leaves_no_napilab_process_and_clean_removes_the_rest() {
    if !napilab_testkit::root_or_skip(
        "kill_9_of_a_server_run_leaves_no_napilab_process_and_clean_removes_the_rest",
        "needs root for network namespaces",
    ) {
        return;
    }
    let _one = ONE_LAB_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = scratch("napilab-lab-inproc-kill");
    let file = dir.join("scenario.toml");
    std::fs::write(&file, server_scenario("[1000, 1000, 1000]", 10.0)).expect("scenario");
    let journals = dir.join("journal");
    let exe = napilab_exe();
    let mut run = LabRunGuard(
        Command::new(env!("CARGO_BIN_EXE_napilab"))
            .args(["lab", "run", "--json", "--out"])
            .arg(dir.join("results"))
            .arg("--journal-dir")
            .arg(&journals)
            .arg(&file)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start napilab lab run"),
    );
    // Kill it once it has built its namespaces, applied its mode and is measuring.
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut run_id = None;
    let mode_journals = |id: &str| journals.join(format!("lab-{id}-server"));
    loop {
        assert!(
            Instant::now() < deadline,
            "the run never reached its first point"
        );
        if let Some(status) = run.0.try_wait().expect("poll child") {
            let mut err = String::new();
            if let Some(mut e) = run.0.stderr.take() {
                let _ = std::io::Read::read_to_string(&mut e, &mut err);
            }
            panic!("the run ended ({status}) before it could be killed: {err}");
        }
        run_id = run_id.or_else(|| lab_run_id_of(run.0.id()));
        if let Some(id) = run_id.as_deref() {
            let applied = std::fs::read_dir(mode_journals(id))
                .map(|d| d.count() > 0)
                .unwrap_or(false);
            if lab_namespaces(id).len() == 2 && applied {
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let run_id = run_id.expect("run id");
    // Into the window: server, client and observer threads running.
    std::thread::sleep(Duration::from_secs(2));
    let pid = run.0.id();
    kill9(&mut run.0);
    // Give orphans a moment to show (they would be reparented, still running napilab).
    std::thread::sleep(Duration::from_millis(300));
    let left: Vec<(u32, u32)> = processes()
        .into_iter()
        .filter(|(p, _, _)| exe_of(*p).as_deref() == Some(exe.as_path()))
        .map(|(p, pp, _)| (p, pp))
        .collect();
    assert!(
        left.is_empty(),
        "napilab processes outlived the killed run {pid}: {left:?}"
    );
    assert_eq!(
        lab_namespaces(&run_id).len(),
        2,
        "kill -9 runs no cleanup: the namespaces are still there"
    );
    let short = &run_id[run_id.len() - 4..];
    let out = Command::new(env!("CARGO_BIN_EXE_napilab"))
        .args(["lab", "clean", "--json", "--journal-dir"])
        .arg(&journals)
        .output()
        .expect("napilab lab clean");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "lab clean: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        lab_namespaces(&run_id).is_empty(),
        "left behind: {:?}",
        lab_namespaces(&run_id)
    );
    for dev in [format!("n{short}-cli"), format!("n{short}-srv")] {
        let shown = Command::new("ip")
            .args(["link", "show", &dev])
            .output()
            .expect("ip link");
        assert!(!shown.status.success(), "link {dev} left behind");
    }
    assert!(
        !mode_journals(&run_id).exists(),
        "the mode journals were left: {text}"
    );
    assert!(
        !Path::new(&format!("/run/napilab/lab/{run_id}.pid")).exists(),
        "the pid file was left"
    );
}
