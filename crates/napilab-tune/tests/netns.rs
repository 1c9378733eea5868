//! Root integration tests of plan, apply and revert on veth pairs in private network
//! namespaces `napilab-tune-<pid>-<tag>` (deleted on drop, also on panic).
//!
//! The tuner must run inside the namespace with its own /sys, as `ip netns exec`
//! arranges, so each step runs this test binary again under `ip netns exec` in "child"
//! mode (env `NAPILAB_TUNE_CHILD`): it does one verb through the library and prints JSON.
//! Without root every test prints `SKIPPED <name>: <reason>`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use napilab_probe::kernel::is_root;
use serde_json::{json, Value as Json};

const CHILD_ENV: &str = "NAPILAB_TUNE_CHILD";

// ---------------------------------------------------------------- child mode

fn child(spec: &str) -> i32 {
    let spec: Json = match serde_json::from_str(spec) {
        Ok(s) => s,
        Err(e) => {
            println!("{}", json!({ "error": format!("bad child spec: {e}") }));
            return 1;
        }
    };
    let verb = spec["verb"].as_str().unwrap_or("");
    let strings = |k: &str| -> Vec<String> {
        spec[k]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default()
    };
    let dir = PathBuf::from(spec["journal_dir"].as_str().unwrap_or("/nonexistent"));
    let mut ctx = napilab_tune::host_ctx();
    let result: Result<Json, String> = match verb {
        "snapshot" => {
            let header = napilab_probe::observe::describe_host(Path::new("/"), true);
            serde_json::to_value(&header.topology).map_err(|e| e.to_string())
        }
        "plan" | "apply" => {
            let params = napilab_tune::profile::Params::from_args(
                &strings("dev"),
                spec["cpus"].as_str(),
                &strings("param"),
            );
            params.and_then(|p| {
                let plan = napilab_tune::plan_profile(
                    &mut ctx,
                    spec["profile"].as_str().unwrap_or(""),
                    &p,
                )
                .map_err(|e| e.to_string())?;
                if verb == "plan" {
                    serde_json::to_value(&plan).map_err(|e| e.to_string())
                } else {
                    let r = napilab_tune::apply(&mut ctx, plan, &dir).map_err(|e| e.to_string())?;
                    serde_json::to_value(&r).map_err(|e| e.to_string())
                }
            })
        }
        "revert" => napilab_tune::find_journal(&dir, spec["journal"].as_str())
            .and_then(|p| napilab_tune::revert(&mut ctx, &p))
            .map_err(|e| e.to_string())
            .and_then(|r| serde_json::to_value(&r).map_err(|e| e.to_string())),
        "show" => napilab_tune::show(&dir)
            .map_err(|e| e.to_string())
            .and_then(|r| serde_json::to_value(&r).map_err(|e| e.to_string())),
        other => Err(format!("unknown verb {other}")),
    };
    match result {
        Ok(v) => {
            println!("{}", json!({ "ok": v }));
            0
        }
        Err(e) => {
            println!("{}", json!({ "error": e }));
            1
        }
    }
}

// ---------------------------------------------------------------- fixture

fn sh(script: &str) -> Result<String, String> {
    let out = Command::new("sh")
        .args(["-ec", script])
        .output()
        .map_err(|e| e.to_string())?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "{script}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// One namespace with a veth pair `va` <-> `vb`, two queues each, GRO on `vb` (so it
/// has two NAPI instances), optionally threaded.
struct Netns {
    name: String,
    journal_dir: PathBuf,
    /// Scratch directory for test profiles; removed on drop.
    scratch: PathBuf,
}

impl Netns {
    fn create(tag: &str, threaded: bool) -> Result<Netns, String> {
        let name = format!("napilab-tune-{}-{tag}", std::process::id());
        let journal_dir = std::env::temp_dir().join(format!("{name}-journal"));
        let scratch = std::env::temp_dir().join(format!("{name}-profiles"));
        let _ = std::fs::remove_dir_all(&journal_dir);
        let _ = std::fs::remove_dir_all(&scratch);
        std::fs::create_dir_all(&scratch).map_err(|e| e.to_string())?;
        sh(&format!("ip netns add {name}"))?;
        let ns = Netns {
            name,
            journal_dir,
            scratch,
        };
        sh(&format!(
            "ip -n {n} link add va numrxqueues 2 numtxqueues 2 type veth peer vb numrxqueues 2 numtxqueues 2
             ip -n {n} link set va up; ip -n {n} link set vb up
             ip netns exec {n} ethtool -K vb gro on >/dev/null
             ip netns exec {n} sh -c 'echo {t} > /sys/class/net/vb/threaded'",
            n = ns.name,
            t = u8::from(threaded)
        ))?;
        Ok(ns)
    }

    /// Runs the child in the namespace; returns its JSON (`ok` or `error`).
    fn run(&self, spec: Json) -> Json {
        run_child(Some(&self.name), &self.journal_dir, spec, &[])
    }

    fn spawn(&self, spec: Json, envs: &[(&str, &str)]) -> std::process::Child {
        let mut spec = spec;
        spec["journal_dir"] = json!(self.journal_dir);
        let exe = std::env::current_exe().expect("test binary path");
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.name])
            .arg(exe)
            .env(CHILD_ENV, spec.to_string())
            .stdout(Stdio::null());
        for (k, v) in envs {
            cmd.env(k, v);
        }
        cmd.spawn().expect("spawn child")
    }

    /// The topology with what legitimately moves stripped: thread PIDs (a thread
    /// re-created by revert gets a new one) and the CPU a thread last ran on.
    fn snapshot(&self) -> Json {
        let mut v = self.run(json!({ "verb": "snapshot" }));
        let mut snap = v["ok"].take();
        assert!(!snap.is_null(), "snapshot failed: {v}");
        strip(&mut snap, &["pid", "last_cpu"]);
        snap
    }

    fn ok(&self, spec: Json) -> Json {
        let v = self.run(spec.clone());
        match v.get("ok") {
            Some(ok) => ok.clone(),
            None => panic!("{spec} failed: {v}"),
        }
    }

    fn err(&self, spec: Json) -> String {
        let v = self.run(spec.clone());
        match v.get("error").and_then(Json::as_str) {
            Some(e) => e.to_string(),
            None => panic!("{spec} should have been refused: {v}"),
        }
    }

    fn journals(&self) -> Vec<PathBuf> {
        let mut v: Vec<PathBuf> = std::fs::read_dir(&self.journal_dir)
            .map(|rd| rd.flatten().map(|e| e.path()).collect())
            .unwrap_or_default();
        v.sort();
        v
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
        let _ = std::fs::remove_dir_all(&self.journal_dir);
        let _ = std::fs::remove_dir_all(&self.scratch);
    }
}

fn run_child(ns: Option<&str>, dir: &Path, mut spec: Json, envs: &[(&str, &str)]) -> Json {
    spec["journal_dir"] = json!(dir);
    let exe = std::env::current_exe().expect("test binary path");
    let mut cmd = match ns {
        Some(ns) => {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", ns]).arg(exe);
            c
        }
        None => Command::new(exe),
    };
    cmd.env(CHILD_ENV, spec.to_string());
    for (k, v) in envs {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run child");
    let text = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(text.trim()).unwrap_or_else(|e| {
        panic!(
            "child output is not JSON ({e}): {text} / {}",
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

fn strip(v: &mut Json, keys: &[&str]) {
    match v {
        Json::Object(m) => {
            for k in keys {
                m.remove(*k);
            }
            for (_, x) in m.iter_mut() {
                strip(x, keys);
            }
        }
        Json::Array(a) => a.iter_mut().for_each(|x| strip(x, keys)),
        _ => {}
    }
}

fn assert_same(before: &Json, after: &Json, what: &str) {
    if before != after {
        panic!(
            "{what}: topology differs\nbefore: {}\nafter:  {}",
            serde_json::to_string(before).unwrap_or_default(),
            serde_json::to_string(after).unwrap_or_default()
        );
    }
}

/// Parameters that make each shipped profile plan on the fixture.
/// Whether this kernel has threaded busy polling (napi-set threaded=busy-poll).
fn busy_poll_kernel() -> bool {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").ok();
    napilab_tune::knobs::busy_poll_support(release.as_deref(), None).is_ok()
}

fn shipped_args(name: &str) -> Json {
    match name {
        "single-core" => json!({ "dev": ["va", "vb"], "cpus": "1" }),
        "dual-core" => json!({ "dev": ["vb", "va"], "cpus": "1,0" }),
        "queue-per-cpu" | "threaded" | "threaded-busy-poll" => {
            json!({ "dev": ["vb"], "cpus": "1,0" })
        }
        "irq-packing" => json!({ "dev": ["vb"], "cpus": "1" }),
        "vcpu-halt-poll" => json!({}),
        "ingress-priority" => {
            json!({ "dev": ["vb"], "cpus": "1", "param": ["rt_queue=0", "be_queue=1"] })
        }
        _ => json!({ "dev": ["vb"] }),
    }
}

fn with(mut base: Json, extra: Json) -> Json {
    if let (Some(b), Json::Object(e)) = (base.as_object_mut(), extra) {
        b.extend(e);
    }
    base
}

// ---------------------------------------------------------------- tests

fn every_shipped_profile_applies_and_reverts_exactly() {
    for threaded in [false, true] {
        let ns =
            Netns::create(if threaded { "ship-t" } else { "ship" }, threaded).expect("fixture");
        for (name, _) in napilab_tune::profile::SHIPPED {
            let before = ns.snapshot();
            let spec = with(
                json!({ "verb": "apply", "profile": name }),
                shipped_args(name),
            );
            if *name == "threaded-busy-poll" && !busy_poll_kernel() {
                // Before 6.19 the plan refuses it, naming the kernel and the attribute.
                let e = ns.err(spec);
                assert!(
                    e.contains("6.19") && e.contains("`threaded`") && e.contains("busy-poll"),
                    "{e}"
                );
                assert_same(&before, &ns.snapshot(), &format!("{name} refused"));
                continue;
            }
            if *name == "vcpu-halt-poll" && halt_poll_ns().is_none() {
                // Outside a KVM guest with the haltpoll governor: refused, saying why.
                let e = ns.err(spec);
                assert!(e.contains("haltpoll"), "{e}");
                assert_same(&before, &ns.snapshot(), &format!("{name} refused"));
                continue;
            }
            let report = ns.ok(spec);
            let applied = report["applied"].as_array().map_or(0, Vec::len);
            let expect_change = match *name {
                "vcpu-halt-poll" => halt_poll_ns().as_deref() != Some("200000"),
                "irq-suspend" | "busy-wait" | "ingress-priority" | "queue-per-cpu"
                | "threaded-busy-poll" => true,
                "threaded" => !threaded,
                "softirq" | "single-core" | "irq-packing" => threaded,
                _ => false,
            };
            if expect_change {
                assert!(
                    applied > 0,
                    "{name} (threaded={threaded}) changed nothing: {report}"
                );
                let during = ns.snapshot();
                if *name != "queue-per-cpu" {
                    assert_ne!(
                        before, during,
                        "{name}: apply left no trace in the topology"
                    );
                }
            }
            if applied > 0 {
                let r = ns.ok(json!({ "verb": "revert" }));
                assert_eq!(
                    r["restored"].as_array().map_or(0, Vec::len),
                    applied,
                    "{name}: {r}"
                );
            }
            assert_same(
                &before,
                &ns.snapshot(),
                &format!("{name} threaded={threaded}"),
            );
        }
    }
}

fn kill_9_during_apply_is_revertible() {
    let ns = Netns::create("kill", false).expect("fixture");
    let before = ns.snapshot();
    let mut child = ns.spawn(
        json!({ "verb": "apply", "profile": "irq-suspend", "dev": ["vb"] }),
        &[(napilab_tune::PAUSE_ENV, "5000")],
    );
    // Wait for two changes to be made and marked done, then kill -9 mid-apply.
    let deadline = Instant::now() + Duration::from_secs(30);
    let journal = loop {
        assert!(Instant::now() < deadline, "apply made no progress");
        if let Some(j) = ns.journals().first() {
            let text = std::fs::read_to_string(j).unwrap_or_default();
            if text.matches("\"type\":\"done\"").count() >= 2 {
                break j.clone();
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    child.kill().expect("kill -9");
    let _ = child.wait();
    let text = std::fs::read_to_string(&journal).expect("journal");
    assert!(
        !text.contains("\"applied\""),
        "apply finished before the kill"
    );
    let during = ns.snapshot();
    assert_ne!(before, during, "the killed apply changed nothing");
    let shown = ns.ok(json!({ "verb": "show" }));
    assert_eq!(shown[0]["status"], "incomplete", "{shown}");
    assert_eq!(shown[0]["profile"], "irq-suspend", "{shown}");
    // Revert refuses to run from another network namespace (here: the initial one).
    let elsewhere = run_child(
        None,
        &ns.journal_dir,
        json!({ "verb": "revert", "journal": journal.display().to_string() }),
        &[],
    );
    assert!(
        elsewhere["error"]
            .as_str()
            .is_some_and(|e| e.contains("network namespace")),
        "{elsewhere}"
    );
    let r = ns.ok(json!({ "verb": "revert" }));
    assert_eq!(r["status_before"], "incomplete", "{r}");
    let shown = ns.ok(json!({ "verb": "show" }));
    assert_eq!(shown[0]["status"], "reverted", "{shown}");
    assert_same(&before, &ns.snapshot(), "after kill -9 and revert");
    // Reverting again is a no-op with a message.
    let again = ns.ok(json!({ "verb": "revert" }));
    assert!(
        again["message"]
            .as_str()
            .is_some_and(|m| m.contains("already reverted")),
        "{again}"
    );
}

fn invalid_profiles_are_refused_with_nothing_changed() {
    let ns = Netns::create("bad", false).expect("fixture");
    let before = ns.snapshot();
    let dir = ns.scratch.clone();
    let file = |name: &str, body: &str| -> String {
        let p = dir.join(name);
        let text = format!(
            "name = \"{name}\"\nsummary = \"test\"\nstudy = \"test\"\n[params.dev]\nhelp = \"d\"\nrequired = true\n{body}"
        );
        std::fs::write(&p, text).expect("write profile");
        p.display().to_string()
    };
    let cases: Vec<(Json, &str)> = vec![
        (
            json!({ "profile": "irq-suspend", "dev": ["nosuch0"] }),
            "unknown device nosuch0",
        ),
        (
            json!({ "profile": "dual-core", "dev": ["va", "vb"] }),
            "--cpus",
        ),
        (
            json!({ "profile": "ingress-priority", "dev": ["vb"], "cpus": "0", "param": ["rt_queue=7", "be_queue=1"] }),
            "unknown queue",
        ),
        (
            json!({ "profile": "ingress-priority", "dev": ["vb"], "cpus": "0", "param": ["rt_queue=0"] }),
            "--be_queue",
        ),
        (
            json!({ "profile": file("big.toml", "[[set]]\nsetting = \"napi.defer-hard-irqs\"\nvalue = 4294967296\nwhy = \"w\"\n"), "dev": ["vb"] }),
            "outside the kernel's range",
        ),
        (
            json!({ "profile": file("prio.toml", "[[set]]\nsetting = \"napi.threaded\"\nvalue = 1\nwhy = \"w\"\n[[set]]\nsetting = \"thread.sched\"\nvalue = \"fifo:150\"\nwhy = \"w\"\n"), "dev": ["vb"] }),
            "priority 1-99",
        ),
        (
            json!({ "profile": file("cpu.toml", "[[set]]\nsetting = \"tx-queue.xps_cpus\"\nvalue = \"4095\"\nwhy = \"w\"\n"), "dev": ["vb"] }),
            "not online",
        ),
        (
            json!({ "profile": file("typo.toml", "[[set]]\nsetting = \"napi.defer-hard-irqs\"\nvaleu = 3\nwhy = \"w\"\n"), "dev": ["vb"] }),
            "valeu",
        ),
        (
            json!({ "profile": file("kind.toml", "[[set]]\nsetting = \"napi.defer_hard_irqs\"\nvalue = 3\nwhy = \"w\"\n"), "dev": ["vb"] }),
            "setting",
        ),
        (
            // A required setting veth cannot do: refused, naming device and driver.
            json!({ "profile": file("coal.toml", "[[set]]\nsetting = \"napi.defer-hard-irqs\"\nvalue = 3\nwhy = \"w\"\n[[set]]\nsetting = \"coalesce.rx-usecs\"\nvalue = 3\nwhy = \"w\"\n"), "dev": ["vb"] }),
            "not supported by vb (veth)",
        ),
    ];
    for (spec, wanted) in cases {
        let e = ns.err(with(json!({ "verb": "apply" }), spec.clone()));
        assert!(
            e.contains(wanted),
            "{spec}: error {e:?} does not mention {wanted:?}"
        );
        assert_same(&before, &ns.snapshot(), &format!("refused {spec}"));
    }
    assert!(
        ns.journals().is_empty(),
        "a refused profile wrote a journal"
    );
}

fn failure_part_way_rolls_back() {
    let ns = Netns::create("fail", false).expect("fixture");
    let before = ns.snapshot();
    let dir = ns.scratch.clone();
    let p = dir.join("fails.toml");
    // Zero RX channels passes napilab's range check (0 <= rx-max) but the kernel
    // refuses it: the defer-hard-irqs change made before must be rolled back.
    std::fs::write(
        &p,
        "name = \"fails\"\nsummary = \"t\"\nstudy = \"t\"\n[params.dev]\nhelp = \"d\"\nrequired = true\n\
         [[set]]\nsetting = \"napi.defer-hard-irqs\"\nvalue = 7\nwhy = \"w\"\n\
         [[set]]\nsetting = \"channels.rx-count\"\nvalue = 0\nwhy = \"w\"\n",
    )
    .expect("write");
    let e = ns.err(json!({ "verb": "apply", "profile": p.display().to_string(), "dev": ["vb"] }));
    assert!(e.contains("rolled back"), "{e}");
    assert_same(&before, &ns.snapshot(), "after a failed apply");
    let j = ns.journals();
    assert_eq!(j.len(), 1);
    let text = std::fs::read_to_string(&j[0]).expect("journal");
    assert!(
        text.contains("\"rolled_back\"") && text.contains("\"complete\":true"),
        "{text}"
    );
    let r = ns.ok(json!({ "verb": "revert" }));
    assert!(
        r["message"].as_str().is_some_and(|m| m.contains("rolled")),
        "{r}"
    );
}

fn revert_finds_instances_after_their_ids_change() {
    let ns = Netns::create("ids", false).expect("fixture");
    let before = ns.snapshot();
    ns.ok(json!({ "verb": "apply", "profile": "irq-suspend", "dev": ["vb"] }));
    let ids = |s: &Json| -> Vec<Json> {
        s["devices"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|d| d["napis"].as_array().cloned().unwrap_or_default())
            .map(|n| n["id"].clone())
            .collect()
    };
    // GRO off and on: the NAPI instances are re-created with new ids.
    sh(&format!(
        "ip netns exec {n} ethtool -K vb gro off >/dev/null; ip netns exec {n} ethtool -K vb gro on >/dev/null",
        n = ns.name
    ))
    .expect("toggle GRO");
    let mid = ns.snapshot();
    assert_ne!(ids(&before), ids(&mid), "NAPI ids did not change");
    // The kernel dropped the per-NAPI values with the old instances; revert must
    // still find the instances by device and RX queue and restore every entry.
    let r = ns.ok(json!({ "verb": "revert" }));
    assert_eq!(r["restored"].as_array().map_or(0, Vec::len), 6, "{r}");
    let mut after = ns.snapshot();
    let mut b = before.clone();
    strip(&mut after, &["id"]);
    strip(&mut b, &["id"]);
    assert_same(&b, &after, "revert after NAPI ids changed");
}

fn global_sysctls_are_restored() {
    // net.core.* exist only in the initial namespace: this test runs the child there,
    // and puts the values back itself too should anything fail.
    let names = ["netdev_budget", "busy_read"];
    let read = |n: &str| -> String {
        std::fs::read_to_string(format!("/proc/sys/net/core/{n}"))
            .unwrap_or_default()
            .trim()
            .to_string()
    };
    struct Restore(Vec<(String, String)>);
    impl Drop for Restore {
        fn drop(&mut self) {
            for (n, v) in &self.0 {
                let _ = std::fs::write(format!("/proc/sys/net/core/{n}"), v);
            }
        }
    }
    let old: Vec<(String, String)> = names.iter().map(|n| (n.to_string(), read(n))).collect();
    let _guard = Restore(old.clone());
    let budget: u64 = old[0].1.parse().expect("netdev_budget");
    // The namespace is used at the end; its scratch directory holds the profile and
    // the initial-namespace journal, and goes with it.
    let ns = Netns::create("sysctl", false).expect("fixture");
    let dir = ns.scratch.clone();
    let p = dir.join("sysctl.toml");
    std::fs::write(
        &p,
        format!(
            "name = \"sysctl-test\"\nsummary = \"t\"\nstudy = \"t\"\n\
             [[set]]\nsetting = \"sysctl.netdev_budget\"\nvalue = {}\nwhy = \"w\"\n\
             [[set]]\nsetting = \"sysctl.busy_read\"\nvalue = 37\nwhy = \"w\"\n",
            budget + 11
        ),
    )
    .expect("write");
    let jdir = dir.join("journal");
    let v = run_child(
        None,
        &jdir,
        json!({ "verb": "apply", "profile": p.display().to_string() }),
        &[],
    );
    assert!(v.get("ok").is_some(), "{v}");
    assert_eq!(read("netdev_budget"), (budget + 11).to_string());
    assert_eq!(read("busy_read"), "37");
    let v = run_child(None, &jdir, json!({ "verb": "revert" }), &[]);
    assert!(v.get("ok").is_some(), "{v}");
    for (n, val) in &old {
        assert_eq!(&read(n), val, "net.core.{n} not restored");
    }
    // Inside a namespace the sysctls are invisible: a required one is refused there.
    let e = ns.err(json!({ "verb": "plan", "profile": p.display().to_string() }));
    assert!(e.contains("initial"), "{e}");
}

const HALT_POLL_NS: &str = "/sys/module/haltpoll/parameters/guest_halt_poll_ns";

/// The haltpoll governor's poll window, if this is a KVM guest that has it.
fn halt_poll_ns() -> Option<String> {
    std::fs::read_to_string(HALT_POLL_NS)
        .ok()
        .map(|s| s.trim().to_string())
}

/// `vcpu-halt-poll` sets the host-wide module parameter from any network namespace and
/// revert puts the old value back; the test restores it itself too should anything fail.
fn halt_poll_window_is_applied_and_restored() {
    let Some(old) = halt_poll_ns() else {
        println!("  SKIPPED: {HALT_POLL_NS} does not exist (not a KVM guest with the haltpoll cpuidle governor); the refusal is checked by every_shipped_profile_applies_and_reverts_exactly");
        return;
    };
    struct Restore(String);
    impl Drop for Restore {
        fn drop(&mut self) {
            let _ = std::fs::write(HALT_POLL_NS, &self.0);
        }
    }
    let _guard = Restore(old.clone());
    // Start from a value the profile changes, whatever this host had.
    let start = if old == "200000" { "0" } else { old.as_str() };
    std::fs::write(HALT_POLL_NS, start).expect("write guest_halt_poll_ns");
    let ns = Netns::create("halt", false).expect("fixture");
    let plan = ns.ok(json!({ "verb": "plan", "profile": "vcpu-halt-poll" }));
    assert!(
        plan.to_string().contains("guest_halt_poll_ns"),
        "the plan names the setting: {plan}"
    );
    let applied = ns.ok(json!({ "verb": "apply", "profile": "vcpu-halt-poll" }));
    assert_eq!(
        applied["applied"].as_array().map_or(0, Vec::len),
        1,
        "{applied}"
    );
    assert_eq!(halt_poll_ns().as_deref(), Some("200000"));
    let r = ns.ok(json!({ "verb": "revert" }));
    assert_eq!(r["restored"].as_array().map_or(0, Vec::len), 1, "{r}");
    assert_eq!(halt_poll_ns().as_deref(), Some(start), "not restored");
}

fn every_kind_veth_supports_applies_and_reverts() {
    let ns = Netns::create("kinds", false).expect("fixture");
    let features = || {
        sh(&format!(
            "ip netns exec {n} ethtool -k va | grep -E '^(generic-receive-offload|generic-segmentation-offload|tcp-segmentation-offload):'",
            n = ns.name
        ))
        .expect("ethtool -k")
    };
    let before = ns.snapshot();
    let features_before = features();
    let dir = ns.scratch.clone();
    let p = dir.join("kinds.toml");
    std::fs::write(
        &p,
        "name = \"kinds\"\nsummary = \"t\"\nstudy = \"t\"\n[params.dev]\nhelp = \"d\"\nrequired = true\n\
         [[set]]\nsetting = \"device.gro_flush_timeout\"\ndev = \"vb\"\nvalue = 50000\nwhy = \"w\"\n\
         [[set]]\nsetting = \"device.napi_defer_hard_irqs\"\ndev = \"vb\"\nvalue = 2\nwhy = \"w\"\n\
         [[set]]\nsetting = \"rx-queue.rps_cpus\"\ndev = \"vb\"\nvalue = \"0-1\"\nwhy = \"w\"\n\
         [[set]]\nsetting = \"rx-queue.rps_flow_cnt\"\ndev = \"vb\"\nqueues = 1\nvalue = 256\nwhy = \"w\"\n\
         [[set]]\nsetting = \"tx-queue.xps_cpus\"\ndev = \"va\"\nvalue = \"1\"\nwhy = \"w\"\n\
         [[set]]\nsetting = \"napi.threaded\"\ndev = \"vb\"\nqueues = 0\nvalue = 1\nwhy = \"w\"\n\
         [[set]]\nsetting = \"thread.sched\"\ndev = \"vb\"\nqueues = 0\nvalue = \"rr:10\"\nwhy = \"w\"\n\
         [[set]]\nsetting = \"feature.tso\"\ndev = \"va\"\nvalue = \"off\"\nwhy = \"w\"\n\
         [[set]]\nsetting = \"feature.gso\"\ndev = \"va\"\nvalue = \"off\"\nwhy = \"w\"\n\
         [[set]]\nsetting = \"feature.gro\"\ndev = \"va\"\nvalue = \"on\"\nwhy = \"w\"\n\
         [[set]]\nsetting = \"channels.rx-count\"\ndev = \"va\"\nvalue = 1\nwhy = \"w\"\n\
         [[set]]\nsetting = \"qdisc.root\"\ndev = \"va\"\nvalue = \"pfifo\"\nwhy = \"w\"\n",
    )
    .expect("write");
    let report =
        ns.ok(json!({ "verb": "apply", "profile": p.display().to_string(), "dev": ["vb"] }));
    let applied = report["applied"].as_array().map_or(0, Vec::len);
    // 2 device files, 2 rps_cpus, 1 flow count, 2 xps, threaded, sched, 3 features,
    // channels, qdisc.
    assert_eq!(applied, 14, "{report}");
    assert_ne!(features(), features_before);
    let during = ns.snapshot();
    let va = during["devices"]
        .as_array()
        .and_then(|d| d.iter().find(|d| d["name"] == "va"))
        .cloned()
        .unwrap_or_default();
    assert_eq!(va["qdisc"]["kind"], "pfifo", "{va}");
    assert_eq!(va["rx_queues"].as_array().map_or(0, Vec::len), 1, "{va}");
    let r = ns.ok(json!({ "verb": "revert" }));
    assert_eq!(r["restored"].as_array().map_or(0, Vec::len), applied, "{r}");
    assert_same(&before, &ns.snapshot(), "every kind");
    assert_eq!(features(), features_before);
}

/// `napi.threaded` (the `threaded` profile) on a veth whose receive side has no NAPI
/// instance (GRO off): the kernel would refuse the device-wide `threaded` file too, so
/// the plan is refused up front, saying to turn GRO on, and nothing changes. (The
/// sysfs fallback itself, for kernels before 6.17 and id-less instances, cannot be
/// reached on a 6.17+ kernel with veth.)
fn threaded_without_napi_instances_is_refused_with_the_reason() {
    let ns = Netns::create("thr-nogro", false).expect("fixture");
    sh(&format!(
        "ip netns exec {} ethtool -K vb gro off >/dev/null",
        ns.name
    ))
    .expect("GRO off");
    let before = ns.snapshot();
    let e = ns.err(json!({ "verb": "apply", "profile": "threaded", "dev": ["vb"] }));
    assert!(e.contains("GRO"), "{e}");
    // Both queues fail the same way; the refusal says it once.
    assert_eq!(e.matches("has no NAPI instance now").count(), 1, "{e}");
    assert_same(&before, &ns.snapshot(), "refused threaded plan");
}

/// A write the kernel refuses (the device-wide `threaded` file of a veth without NAPI
/// instances, GRO off: EOPNOTSUPP) after napilab's own checks passed: the apply fails
/// naming the setting, and the rollback does not report the untouched value as a
/// failed restore.
fn a_refused_write_leaves_nothing_to_restore() {
    let ns = Netns::create("refused", false).expect("fixture");
    sh(&format!(
        "ip netns exec {} ethtool -K vb gro off >/dev/null",
        ns.name
    ))
    .expect("GRO off");
    let before = ns.snapshot();
    let p = ns.scratch.join("refused.toml");
    std::fs::write(
        &p,
        "name = \"refused\"\nsummary = \"t\"\nstudy = \"t\"\n[params.dev]\nhelp = \"d\"\nrequired = true\n\
         [[set]]\nsetting = \"device.threaded\"\nvalue = 1\nwhy = \"w\"\n",
    )
    .expect("write");
    let e = ns.err(json!({ "verb": "apply", "profile": p.display().to_string(), "dev": ["vb"] }));
    assert!(e.contains("vb threaded"), "{e}");
    assert!(!e.contains("restoring failed"), "{e}");
    assert_same(&before, &ns.snapshot(), "after a refused write");
    let j = ns.journals();
    assert_eq!(j.len(), 1);
    let text = std::fs::read_to_string(&j[0]).expect("journal");
    assert!(text.contains("\"complete\":true"), "{text}");
}

fn main() {
    if let Ok(spec) = std::env::var(CHILD_ENV) {
        std::process::exit(child(&spec));
    }
    let tests: &[(&str, fn())] = &[
        (
            "every_shipped_profile_applies_and_reverts_exactly",
            every_shipped_profile_applies_and_reverts_exactly,
        ),
        (
            "kill_9_during_apply_is_revertible",
            kill_9_during_apply_is_revertible,
        ),
        (
            "invalid_profiles_are_refused_with_nothing_changed",
            invalid_profiles_are_refused_with_nothing_changed,
        ),
        ("failure_part_way_rolls_back", failure_part_way_rolls_back),
        (
            "revert_finds_instances_after_their_ids_change",
            revert_finds_instances_after_their_ids_change,
        ),
        ("global_sysctls_are_restored", global_sysctls_are_restored),
        (
            "halt_poll_window_is_applied_and_restored",
            halt_poll_window_is_applied_and_restored,
        ),
        (
            "every_kind_veth_supports_applies_and_reverts",
            every_kind_veth_supports_applies_and_reverts,
        ),
        (
            "threaded_without_napi_instances_is_refused_with_the_reason",
            threaded_without_napi_instances_is_refused_with_the_reason,
        ),
        (
            "a_refused_write_leaves_nothing_to_restore",
            a_refused_write_leaves_nothing_to_restore,
        ),
    ];
    let filter: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let (mut passed, mut failed, mut skipped) = (0, 0, 0);
    for (name, test) in tests {
        if !filter.is_empty() && !filter.iter().any(|f| name.contains(f.as_str())) {
            continue;
        }
        if !is_root() {
            println!("SKIPPED {name}: needs root to create network namespaces");
            skipped += 1;
            continue;
        }
        let started = Instant::now();
        match std::panic::catch_unwind(test) {
            Ok(()) => {
                passed += 1;
                println!(
                    "test {name} ... ok ({:.1}s)",
                    started.elapsed().as_secs_f64()
                );
            }
            Err(_) => {
                println!("test {name} ... FAILED");
                failed += 1;
            }
        }
    }
    // The closing line in libtest's format, so CI and `make test` count these tests.
    let verdict = if failed > 0 { "FAILED" } else { "ok" };
    println!(
        "\ntest result: {verdict}. {passed} passed; {failed} failed; {skipped} ignored; 0 measured; 0 filtered out"
    );
    if failed > 0 {
        std::process::exit(1);
    }
}
