//! Fixtures for the root integration tests: two private network namespaces,
//! `<prefix>-<pid>-<tag>-a` and `-b`, joined by a veth pair `va` (in a, 10.77.0.1)
//! <-> `vb` (in b, 10.77.0.2). The ends must live in different namespaces: with both
//! addresses in one namespace the kernel routes the traffic over loopback. Traffic never
//! leaves the pair, and both namespaces are deleted on drop, also when a test panics.

use std::process::{Command, Output};

pub struct VethPair {
    pub a: String,
    pub b: String,
}

/// The one root check (effective uid 0), re-exported for the tests' skips.
pub use napilab_probe::kernel::is_root;

/// Whether a root test can run; when it cannot, prints `SKIPPED <test>: <why>` so the
/// log says which test did not run and what it needs.
pub fn root_or_skip(test: &str, why: &str) -> bool {
    if is_root() {
        return true;
    }
    println!("SKIPPED {test}: {why}");
    false
}

/// An empty scratch directory `name` under `tmp` (the test's `CARGO_TARGET_TMPDIR`),
/// emptied first so that a run never reads an earlier run's files.
pub fn scratch_dir(tmp: &str, name: &str) -> std::path::PathBuf {
    let dir = std::path::Path::new(tmp).join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch directory");
    dir
}

/// A router scenario's text: one class `be` of 64-byte packets to port 9000, the
/// generator and the sink on CPU 0; `topology`, `traffic` and `measurement` are added
/// to their tables and `rest` (configurations, axes) follows.
pub fn router_scenario(name: &str, traffic: &str, measurement: &str, rest: &str) -> String {
    format!(
        "name = \"{name}\"\n[topology]\nkind = \"router\"\n[dut]\ngenerator_cpus = [0]\nsink_cpus = [0]\n[traffic]\n{traffic}\n[[traffic.classes]]\nname = \"be\"\nshare = 1.0\nsize = 64\nport = 9000\n[measurement]\n{measurement}\n{rest}\n"
    )
}

/// The smallest twin configuration (the old `SimConfig` format): one CPU, one queue on
/// CPU 0 whose inline table gets `queue` after `cpu = 0`, 1,000 pps of one class for
/// 10 ms; `host` is added to the `[host]` table.
pub fn minimal_twin_config(host: &str, queue: &str) -> String {
    format!(
        "[host]\ncpus = 1\n{host}\n[ingress]\nqueues = [{{ cpu = 0{queue} }}]\n[traffic]\nrate_pps = 1000\nclasses = [{{ name = \"be\", share = 1.0 }}]\n[measurement]\nduration_ms = 10\n"
    )
}

/// A server scenario's text: the client on CPU 0 and the server on CPU 1; `requests`
/// and `measurement` are added to their tables (an empty `measurement` leaves the
/// table out) and `rest` (configurations) follows.
pub fn server_scenario(name: &str, requests: &str, measurement: &str, rest: &str) -> String {
    let measurement = if measurement.is_empty() {
        String::new()
    } else {
        format!("[measurement]\n{measurement}\n")
    };
    format!(
        "name = \"{name}\"\n[topology]\nkind = \"server\"\n[dut]\ngenerator_cpus = [0]\nserver_cpus = [1]\n[requests]\n{requests}\n{measurement}{rest}\n"
    )
}

/// A server scenario's `[[configurations]]`, one per interrupt mode, each named after
/// its mode, with napilab's server.
pub fn mode_configurations(modes: &[&str]) -> String {
    modes
        .iter()
        .map(|m| format!("[[configurations]]\nname = \"{m}\"\nset = {{ mode = \"{m}\" }}\n"))
        .collect()
}

/// The `[[configurations]]` entries of a scenario: one per (name, `set` table body).
pub fn configurations(entries: &[(&str, &str)]) -> String {
    entries
        .iter()
        .map(|(name, set)| format!("[[configurations]]\nname = \"{name}\"\nset = {{ {set} }}\n"))
        .collect()
}

/// Every object key path of a JSON value (`.a.b`, arrays as `[]` with every element's
/// keys), leaving out each key (and what is under it) for which `skip(key, value)`
/// holds: the shape of a record, for comparing two records' shapes.
pub fn json_key_paths(
    v: &serde_json::Value,
    skip: &dyn Fn(&str, &serde_json::Value) -> bool,
) -> std::collections::BTreeSet<String> {
    fn walk(
        v: &serde_json::Value,
        at: &str,
        skip: &dyn Fn(&str, &serde_json::Value) -> bool,
        out: &mut std::collections::BTreeSet<String>,
    ) {
        match v {
            serde_json::Value::Object(map) => {
                for (k, child) in map {
                    if skip(k, child) {
                        continue;
                    }
                    let path = format!("{at}.{k}");
                    out.insert(path.clone());
                    walk(child, &path, skip, out);
                }
            }
            serde_json::Value::Array(items) => {
                for item in items {
                    walk(item, &format!("{at}[]"), skip, out);
                }
            }
            _ => {}
        }
    }
    let mut out = std::collections::BTreeSet::new();
    walk(v, "", skip, &mut out);
    out
}

fn run(cmd: &mut Command) -> Result<Output, String> {
    let out = cmd.output().map_err(|e| format!("{cmd:?}: {e}"))?;
    if out.status.success() {
        Ok(out)
    } else {
        Err(format!(
            "{cmd:?} failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Pins the calling thread to CPU `cpu` (`sched_setaffinity` of pid 0).
fn pin_this_thread(cpu: u32) -> std::io::Result<()> {
    if cpu as usize >= libc::CPU_SETSIZE as usize {
        return Err(std::io::Error::other(format!(
            "CPU {cpu} is past CPU_SETSIZE"
        )));
    }
    // SAFETY: cpu_set_t is plain data, zeroed is its empty set, and `cpu` is checked
    // against CPU_SETSIZE above.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu as usize, &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

fn sh_in(ns: &str, script: &str) -> Result<String, String> {
    run(Command::new("ip").args(["netns", "exec", ns, "sh", "-ec", script]))
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
}

impl VethPair {
    /// A thread in namespace `a` sending 64-byte UDP datagrams from va to vb (port 9,
    /// where nobody listens: vb's host drops them after the poll and the IP stack)
    /// until `stop`; it ends with a message on stderr if it cannot enter `a` or bind.
    pub fn flood(
        &self,
        stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    ) -> std::thread::JoinHandle<()> {
        self.flood_on(None, stop)
    }

    /// [`VethPair::flood`] from a thread pinned to `cpu` (`None`: unpinned), so that
    /// vb's polls, which veth runs in the sender's softirq, all run on that CPU; it ends
    /// with a message on stderr if it cannot be pinned.
    pub fn flood_on(
        &self,
        cpu: Option<u32>,
        stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    ) -> std::thread::JoinHandle<()> {
        let ns = self.a.clone();
        std::thread::spawn(move || {
            if let Some(c) = cpu {
                if let Err(e) = pin_this_thread(c) {
                    eprintln!("flood: cannot pin to CPU {c}: {e}");
                    return;
                }
            }
            if let Err(e) = napilab_probe::netns::enter(&ns) {
                eprintln!("flood: cannot enter {ns}: {e}");
                return;
            }
            let Ok(sock) = std::net::UdpSocket::bind("10.77.0.1:0") else {
                eprintln!("flood: cannot bind 10.77.0.1 in {ns}");
                return;
            };
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                for _ in 0..64 {
                    let _ = sock.send_to(&[0u8; 64], ("10.77.0.2", 9));
                }
            }
        })
    }

    /// Creates both namespaces and the pair, with static neighbours and IPv6 off so that
    /// only the test's own packets cross it. GRO on `vb` gives it a NAPI instance and
    /// TSO/GSO off on `va` makes every frame use it (docs/kernel.md#veth); `threaded`
    /// switches that instance to a NAPI kthread. `prefix` names the namespaces after the
    /// suite (e.g. `napilab-test`). `Err` carries why it could not (the caller prints it
    /// and skips).
    pub fn create(prefix: &str, tag: &str, threaded: bool) -> Result<VethPair, String> {
        if !is_root() {
            return Err("needs root to create network namespaces".into());
        }
        let base = format!("{prefix}-{}-{tag}", std::process::id());
        let pair = VethPair {
            a: format!("{base}-a"),
            b: format!("{base}-b"),
        };
        run(Command::new("ip").args(["netns", "add", &pair.a]))?;
        run(Command::new("ip").args(["netns", "add", &pair.b]))?;
        for ns in [&pair.a, &pair.b] {
            sh_in(ns, "sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1; ip link set lo up")?;
        }
        run(Command::new("ip").args([
            "link", "add", "va", "netns", &pair.a, "type", "veth", "peer", "name", "vb", "netns",
            &pair.b,
        ]))?;
        sh_in(
            &pair.a,
            "ip addr add 10.77.0.1/30 dev va; ip link set va up; ethtool -K va tso off gso off >/dev/null",
        )?;
        sh_in(
            &pair.b,
            &format!(
                "ip addr add 10.77.0.2/30 dev vb; ip link set vb up
                 ethtool -K vb gro on >/dev/null
                 echo {} > /sys/class/net/vb/threaded",
                u8::from(threaded)
            ),
        )?;
        let mac_b = sh_in(&pair.b, "cat /sys/class/net/vb/address")?;
        let mac_a = sh_in(&pair.a, "cat /sys/class/net/va/address")?;
        sh_in(
            &pair.a,
            &format!(
                "ip neigh replace 10.77.0.2 lladdr {} dev va nud permanent",
                mac_b.trim()
            ),
        )?;
        sh_in(
            &pair.b,
            &format!(
                "ip neigh replace 10.77.0.1 lladdr {} dev vb nud permanent",
                mac_a.trim()
            ),
        )?;
        Ok(pair)
    }

    /// A command run inside namespace `ns` (one of `self.a`, `self.b`).
    pub fn command(&self, ns: &str, program: &str) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", ns, program]);
        cmd
    }

    /// `NAPILAB tune ARGS` in namespace `b`, where vb is.
    pub fn tune(&self, napilab: &str, args: &[&str]) -> TuneOutput {
        match self
            .command(&self.b, napilab)
            .arg("tune")
            .args(args)
            .output()
        {
            Ok(out) => TuneOutput {
                stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
                stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
                ok: out.status.success(),
            },
            Err(e) => TuneOutput {
                stdout: String::new(),
                stderr: format!("cannot run {napilab}: {e}"),
                ok: false,
            },
        }
    }

    /// Predict, apply, verify and revert one tune profile on vb while `a` floods it:
    /// `tune apply PROFILE --dev vb --predict --for OBSERVE --json`, then (when the
    /// apply succeeded) `tune verify --for OBSERVE --json`, then `tune revert`, always,
    /// so nothing stays applied whatever the caller asserts. The journal is kept in
    /// `journal_dir`.
    pub fn predict_apply_verify(
        &self,
        napilab: &str,
        profile: &str,
        observe: &str,
        journal_dir: &str,
    ) -> PredictedTune {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let sender = self.flood(stop.clone());
        // The flood's first packets, before the observation starts.
        std::thread::sleep(std::time::Duration::from_millis(300));
        let journal = ["--journal-dir", journal_dir];
        let applied = self.tune(
            napilab,
            &[
                &[
                    "apply",
                    profile,
                    "--dev",
                    "vb",
                    "--predict",
                    "--for",
                    observe,
                    "--json",
                ][..],
                &journal,
            ]
            .concat(),
        );
        let verified = applied.ok.then(|| {
            self.tune(
                napilab,
                &[&["verify", "--for", observe, "--json"][..], &journal].concat(),
            )
        });
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let _ = sender.join();
        let reverted = self.tune(napilab, &[&["revert"][..], &journal].concat());
        PredictedTune {
            applied,
            verified,
            reverted,
        }
    }
}

/// What one `napilab tune` command printed and whether it exited 0.
pub struct TuneOutput {
    pub stdout: String,
    pub stderr: String,
    pub ok: bool,
}

/// The three steps of [`VethPair::predict_apply_verify`]; `verified` is `None` when
/// the apply failed.
pub struct PredictedTune {
    pub applied: TuneOutput,
    pub verified: Option<TuneOutput>,
    pub reverted: TuneOutput,
}

impl Drop for VethPair {
    fn drop(&mut self) {
        for ns in [&self.a, &self.b] {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
    }
}

/// A `napilab lab run` child process: SIGINT on drop while it still runs (the run then
/// removes what it created), so nothing outlives a failed test.
pub struct LabRunGuard(pub std::process::Child);

impl Drop for LabRunGuard {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            // SAFETY: kill(2) on our own child's pid; SIGINT lets the run clean up.
            unsafe { libc::kill(self.0.id() as i32, libc::SIGINT) };
            let _ = self.0.wait();
        }
    }
}

impl LabRunGuard {
    /// Sends SIGINT (Ctrl-C) and waits for the run to exit, at most `within`.
    pub fn interrupt(
        &mut self,
        within: std::time::Duration,
    ) -> Result<std::process::ExitStatus, String> {
        // SAFETY: kill(2) on our own child's pid.
        if unsafe { libc::kill(self.0.id() as i32, libc::SIGINT) } != 0 {
            return Err(format!("kill -INT: {}", std::io::Error::last_os_error()));
        }
        let deadline = std::time::Instant::now() + within;
        loop {
            if let Some(s) = self.0.try_wait().map_err(|e| e.to_string())? {
                return Ok(s);
            }
            if std::time::Instant::now() >= deadline {
                return Err(format!(
                    "napilab lab run did not stop within {within:?} of SIGINT"
                ));
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }
}

/// The run id of the lab run with process id `pid`, from its pid file in /run/napilab/lab.
pub fn lab_run_id_of(pid: u32) -> Option<String> {
    std::fs::read_dir("/run/napilab/lab")
        .ok()?
        .flatten()
        .find(|e| {
            std::fs::read_to_string(e.path()).is_ok_and(|text| text.trim() == pid.to_string())
        })
        .and_then(|e| {
            e.file_name()
                .to_string_lossy()
                .strip_suffix(".pid")
                .map(str::to_string)
        })
}

/// The namespaces of lab run `run_id` (`napilab-<run_id>-<role>`).
pub fn lab_namespaces(run_id: &str) -> Vec<String> {
    let listing = Command::new("ip")
        .args(["netns", "list"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    listing
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|ns| ns.starts_with(&format!("napilab-{run_id}-")))
        .map(str::to_string)
        .collect()
}

/// Runs `cmd`, asserts that it succeeded (printing its stderr otherwise) and parses its
/// standard output as JSON: the step every `--json` CLI test starts with.
pub fn stdout_json(cmd: &mut Command) -> serde_json::Value {
    let out = cmd.output().expect("run the command");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON on standard output")
}

/// What a test of a `harness = false` target returns: `Ok(())` or `Ok(None)` passed,
/// `Ok(Some(why))` skipped (printed as `SKIPPED name: why`), `Err` failed.
pub trait TestOutcome {
    fn outcome(self) -> Result<Option<String>, String>;
}

impl TestOutcome for Result<(), String> {
    fn outcome(self) -> Result<Option<String>, String> {
        self.map(|()| None)
    }
}

impl TestOutcome for Result<Option<String>, String> {
    fn outcome(self) -> Result<Option<String>, String> {
        self
    }
}

/// A test of [`run_serially`]: its name, the test, whether it needs root.
pub type SerialTest<'a, R> = (&'a str, fn() -> R, bool);

/// The test loop of a `harness = false` target whose tests must run one at a time
/// (they load both CPUs or share device names): `(name, test, needs_root)` in order,
/// filtered by the command line's words, printed as libtest prints them (CI's summary
/// reads the `test result:` line). A root test runs only as root and when
/// `root_ready` says the machine can (else it prints why it was skipped). Exits 1 when
/// any test failed or panicked.
pub fn run_serially<R: TestOutcome>(
    tests: &[SerialTest<'_, R>],
    root_ready: impl Fn() -> Result<(), String>,
) {
    let filter: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let (mut passed, mut failed) = (0, 0);
    for &(name, test, needs_root) in tests {
        if !filter.is_empty() && !filter.iter().any(|x| name.contains(x.as_str())) {
            continue;
        }
        if needs_root {
            if !is_root() {
                println!("SKIPPED {name}: needs root (network namespaces, BPF)");
                continue;
            }
            if let Err(why) = root_ready() {
                println!("SKIPPED {name}: {why}");
                continue;
            }
        }
        let t = std::time::Instant::now();
        match std::panic::catch_unwind(test).map(TestOutcome::outcome) {
            Ok(Ok(None)) => {
                passed += 1;
                println!("test {name} ... ok ({:.1} s)", t.elapsed().as_secs_f64());
            }
            Ok(Ok(Some(why))) => println!("SKIPPED {name}: {why}"),
            Ok(Err(e)) => {
                failed += 1;
                println!("test {name} ... FAILED: {e}");
            }
            Err(_) => {
                failed += 1;
                println!("test {name} ... FAILED (panicked)");
            }
        }
    }
    println!(
        "test result: {}. {passed} passed; {failed} failed; 0 ignored",
        if failed == 0 { "ok" } else { "FAILED" }
    );
    if failed > 0 {
        std::process::exit(1);
    }
}

/// Runs `bin` (a test's `env!("CARGO_BIN_EXE_napilab")`) with `args` and returns what
/// it printed and its status.
pub fn output_of(bin: &str, args: &[&str]) -> Output {
    Command::new(bin)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {bin}: {e}"))
}

/// A synthetic DUT's point for the experiment layer's tests: one class `be` of 64-byte
/// packets, `sent` of which the generator offered over `duration_s` and `received`
/// reached the sink; nothing observed. Testbeds of several crates' tests build it.
pub fn synthetic_point(
    role: napilab_core::experiment::PointRole,
    requested_pps: f64,
    offered_pps: f64,
    duration_s: f64,
    sent: u64,
    received: u64,
) -> napilab_core::experiment::PointResult {
    use napilab_core::experiment::{ClassResult, PointResult};
    PointResult {
        role,
        requested_pps,
        offered_pps,
        repeat: 0,
        duration_s,
        classes: vec![ClassResult {
            name: "be".into(),
            packet_bytes: 64,
            sent,
            received,
            reordered: 0,
            loss_counters: Vec::new(),
            latency: None,
        }],
        generator: Default::default(),
        sink: Default::default(),
        observation: None,
        many_napi: None,
    }
}

/// A benchmark's last line: its figure against its goal with the host it was measured
/// on (`verdict: BENCH: FIGURE (goal: GOAL): met|NOT met; host: ...`), the same line
/// bench/verdict.sh prints for the shell benchmarks, so that no verdict travels without
/// its host (docs/hosts.md).
pub fn bench_verdict(bench: &str, figure: &str, goal: &str, met: bool) -> String {
    let host = napilab_probe::host_identity::read_host_identity(std::path::Path::new("/"));
    format!(
        "verdict: {bench}: {figure} (goal: {goal}): {}; host: {}",
        if met { "met" } else { "NOT met" },
        host.summary()
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_verdict_names_the_goal_the_outcome_and_the_host() {
        let met = super::bench_verdict("bench-x", "0.8%", "<= 1%", true);
        assert!(
            met.starts_with("verdict: bench-x: 0.8% (goal: <= 1%): met; host: "),
            "{met}"
        );
        let not = super::bench_verdict("bench-x", "1.2%", "<= 1%", false);
        assert!(not.contains("): NOT met; host: "), "{not}");
        // The host part is this machine's identity line: a kernel is always named.
        assert!(
            not.contains("Linux ") || not.contains("kernel unknown"),
            "{not}"
        );
    }
}
