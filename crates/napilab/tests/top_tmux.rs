//! `napilab top` driven in a real terminal: a detached tmux session of a fixed size on a
//! tmux server of this test's own (`tmux -L`), keys sent with send-keys, the screen read
//! with capture-pane. tmux is installed by `make deps`; without it these tests fail and
//! say so. Every session's server is killed on drop, also when a test fails; every wait
//! is bounded.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::thread::sleep;
use std::time::{Duration, Instant};

/// A tmux server of its own running one session with `napilab top ARGS`; after top
/// exits the pane prints `top-exited:<status>` and stays for the test to read.
struct Session {
    socket: String,
}

fn tmux_output(args: &[&str]) -> Output {
    Command::new("tmux")
        .args(args)
        .output()
        .unwrap_or_else(|e| {
            panic!("cannot run tmux ({e}): napilab top's tests need it; run `make deps` (deps-apt installs tmux)")
        })
}

impl Session {
    fn start(tag: &str, width: u16, height: u16, top_args: &str) -> Session {
        let socket = format!("napilab-top-test-{}-{tag}", std::process::id());
        let bin = env!("CARGO_BIN_EXE_napilab");
        let command = format!("{bin} top {top_args}; echo top-exited:$?; sleep 60");
        let out = tmux_output(&[
            "-L",
            &socket,
            "-f",
            "/dev/null",
            "new-session",
            "-d",
            "-s",
            "top",
            "-x",
            &width.to_string(),
            "-y",
            &height.to_string(),
            &command,
        ]);
        assert!(
            out.status.success(),
            "tmux new-session failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Session { socket }
    }

    fn tmux(&self, args: &[&str]) -> String {
        let mut all = vec!["-L", &self.socket];
        all.extend_from_slice(args);
        let out = tmux_output(&all);
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn screen(&self) -> String {
        self.tmux(&["capture-pane", "-p", "-t", "top"])
    }

    fn keys(&self, keys: &[&str]) {
        let mut args = vec!["send-keys", "-t", "top"];
        args.extend_from_slice(keys);
        self.tmux(&args);
        // The view reads keys every 200 ms at most.
        sleep(Duration::from_millis(600));
    }

    /// Waits (bounded) until the screen holds `what`; returns it.
    fn wait_for(&self, what: &str, within: Duration) -> String {
        let deadline = Instant::now() + within;
        loop {
            let screen = self.screen();
            if screen.contains(what) {
                return screen;
            }
            if Instant::now() >= deadline {
                panic!("{what:?} did not show within {within:?}; the screen:\n{screen}");
            }
            sleep(Duration::from_millis(200));
        }
    }

    /// tmux's view of the pane: 1 while an application holds the alternate screen.
    fn alternate_on(&self) -> String {
        self.tmux(&["display-message", "-p", "-t", "top", "#{alternate_on}"])
            .trim()
            .to_string()
    }

    /// `q` (or other keys) ends top with status 0 and gives the terminal back: the
    /// alternate screen is left and the cursor shown again.
    fn quit_with(&self, keys: &[&str]) {
        self.keys(keys);
        let screen = self.wait_for("top-exited:", Duration::from_secs(15));
        assert!(
            screen.contains("top-exited:0"),
            "top did not exit cleanly:\n{screen}"
        );
        assert_eq!(
            self.alternate_on(),
            "0",
            "the alternate screen was not left"
        );
        let cursor = self.tmux(&["display-message", "-p", "-t", "top", "#{cursor_flag}"]);
        assert_eq!(cursor.trim(), "1", "the cursor was left hidden");
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        // Only this test's server: its socket name is ours alone.
        let _ = Command::new("tmux")
            .args(["-L", &self.socket, "kill-server"])
            .output();
    }
}

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/forwarding.recording.jsonl")
}

/// The recording of a forwarding veth router (tests/fixtures/README.md): the map, the
/// CPUs, findings with their evidence, and every key.
#[test]
fn replay_shows_the_map_cpus_and_findings_and_answers_keys() {
    let session = Session::start(
        "replay",
        160,
        48,
        &format!("--replay {} --speed 4", fixture().display()),
    );
    let screen = session.wait_for("end of recording", Duration::from_secs(20));
    assert_eq!(
        session.alternate_on(),
        "1",
        "top draws on the alternate screen"
    );
    for expected in [
        "napilab top",
        "replay forwarding.recording.jsonl",
        "proc tier",
        "NAPI instances",
        "dut-in",
        "cpu0",
        "cpu1",
        "sirq tick",
        "dropped/s",
        "Findings",
        "evidence:",
        "5 intervals played",
    ] {
        assert!(screen.contains(expected), "{expected:?} missing:\n{screen}");
    }
    session.keys(&["?"]);
    let screen = session.wait_for("napilab top: keys", Duration::from_secs(5));
    assert!(screen.contains("reverse the sort"), "{screen}");
    session.keys(&["x"]);
    assert!(
        !session.screen().contains("napilab top: keys"),
        "help stayed open"
    );
    session.keys(&["s"]);
    session.wait_for("sort rx pkt/s", Duration::from_secs(5));
    session.keys(&["r"]);
    session.wait_for("(reversed)", Duration::from_secs(5));
    // The recording's one NAPI instance is dut-in's (id 281).
    let napi_table = |screen: &str| -> String {
        screen
            .lines()
            .skip_while(|l| !l.contains("NAPI instances"))
            .take_while(|l| !l.contains("CPUs:"))
            .collect::<Vec<_>>()
            .join("\n")
    };
    session.keys(&["/", "d", "u", "t", "-", "i", "n", "Enter"]);
    let screen = session.wait_for("filter \"dut-in\"", Duration::from_secs(5));
    assert!(
        napi_table(&screen).contains("281"),
        "the filter hid dut-in:\n{screen}"
    );
    session.keys(&["/", "z", "z", "Enter"]);
    let screen = session.wait_for("filter \"zz\"", Duration::from_secs(5));
    assert!(
        screen.contains("0 NAPI shown") && !napi_table(&screen).contains("281"),
        "the filter kept dut-in:\n{screen}"
    );
    // Esc clears the filter.
    session.keys(&["Escape"]);
    session.wait_for("1 NAPI shown", Duration::from_secs(5));
    session.keys(&["p"]);
    session.wait_for("PAUSED", Duration::from_secs(5));
    session.quit_with(&["q"]);
}

/// Too small a terminal gets one line; grown, the view comes back.
#[test]
fn a_terminal_too_small_gets_a_notice_until_it_grows() {
    let session = Session::start(
        "small",
        60,
        12,
        &format!("--replay {} --speed 4", fixture().display()),
    );
    let screen = session.wait_for("terminal too small", Duration::from_secs(15));
    assert!(screen.contains("(60x12); needs 80x20"), "{screen}");
    assert!(!screen.contains("NAPI instances"), "{screen}");
    session.tmux(&["resize-window", "-t", "top", "-x", "140", "-y", "40"]);
    session.wait_for("NAPI instances", Duration::from_secs(10));
    session.quit_with(&["q"]);
}

/// The `t=` of the status line: seconds of the interval shown (-1 before the first).
fn shown_t(screen: &str) -> f64 {
    screen
        .split("t=")
        .nth(1)
        .and_then(|rest| rest.split('s').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(-1.0)
}

/// Waits (bounded) until an interval is shown; returns the screen.
fn first_interval(session: &Session, within: Duration) -> String {
    let deadline = Instant::now() + within;
    loop {
        let screen = session.screen();
        if shown_t(&screen) > 0.0 {
            return screen;
        }
        if Instant::now() > deadline {
            panic!("no interval shown within {within:?}:\n{screen}");
        }
        sleep(Duration::from_millis(200));
    }
}

/// Live, proc tier (no root needed): intervals keep coming; Ctrl-C quits like q.
#[test]
fn live_proc_tier_updates_and_ctrl_c_restores_the_terminal() {
    let session = Session::start("live", 150, 45, "--interval 200ms");
    let first = first_interval(&session, Duration::from_secs(15));
    for expected in ["proc tier", "NAPI instances", "│cpu0"] {
        assert!(first.contains(expected), "{expected:?} missing:\n{first}");
    }
    sleep(Duration::from_secs(2));
    let later = session.screen();
    assert!(
        shown_t(&later) > shown_t(&first),
        "the view did not advance: t={} then t={}\n{later}",
        shown_t(&first),
        shown_t(&later)
    );
    session.quit_with(&["C-c"]);
}

/// Live with the BPF tier (root): measured softirq time per CPU; q detaches the
/// programs (the process exits cleanly).
#[test]
fn live_trace_tier_measures_softirq_time() {
    if !napilab_testkit::is_root() {
        eprintln!("skipped: the trace tier needs root");
        return;
    }
    let session = Session::start("trace", 160, 45, "--trace --interval 500ms");
    let screen = first_interval(&session, Duration::from_secs(60));
    assert!(screen.contains("trace tier"), "{screen}");
    let cpu0 = screen
        .lines()
        .find(|l| l.contains("│cpu0 "))
        .unwrap_or_else(|| panic!("no cpu0 row:\n{screen}"));
    // The first column after the CPU is the measured softirq share: a percentage, not
    // "-", with the trace tier.
    let measured = cpu0
        .trim_matches(|c| c == '│' || c == ' ')
        .split_whitespace()
        .nth(1)
        .unwrap_or("");
    assert!(
        measured.ends_with('%'),
        "cpu0 has no measured softirq share: {cpu0}"
    );
    session.quit_with(&["q"]);
}

/// A terminal that goes away (the tmux server killed, as when an ssh session drops)
/// ends top within seconds: it must not keep running, or spin, without a terminal.
#[test]
fn a_closed_terminal_ends_top() {
    let session = Session::start("hangup", 120, 40, "--interval 200ms");
    session.wait_for("NAPI instances", Duration::from_secs(15));
    let shell = session.tmux(&["list-panes", "-t", "top", "-F", "#{pane_pid}"]);
    let children = Command::new("pgrep")
        .args(["-P", shell.trim()])
        .output()
        .expect("pgrep (procps)");
    let top_pid = String::from_utf8_lossy(&children.stdout)
        .lines()
        .next()
        .unwrap_or_default()
        .trim()
        .to_string();
    assert!(
        !top_pid.is_empty(),
        "no top process under the pane's shell {shell}"
    );
    drop(session);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while Path::new(&format!("/proc/{top_pid}")).exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "top (pid {top_pid}) still runs 10 s after its terminal went away"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}
