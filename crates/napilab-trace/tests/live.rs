//! Root integration tests of the always-on tier on a veth pair in private namespaces
//! (`napilab-trace-<pid>-<tag>-a/-b`). Each prints `SKIPPED <name>: <reason>` and
//! returns when not root or when BPF is unavailable.

use std::net::UdpSocket;
use std::os::fd::AsRawFd;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use napilab_core::trace::{ExecContext, TraceInterval};
use napilab_testkit::VethPair;
use napilab_trace::always_on::own_programs_loaded;
use napilab_trace::{trace_interval, AlwaysOn, RaiseTiming, TraceOptions, Windows};

/// The tests share the kernel's tracepoints and CPU time: run them one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

const PORT: u16 = 47_911;

fn setup(name: &str, tag: &str, threaded: bool) -> Option<(VethPair, AlwaysOn)> {
    setup_with(name, tag, threaded, &TraceOptions::default())
}

fn setup_with(
    name: &str,
    tag: &str,
    threaded: bool,
    options: &TraceOptions,
) -> Option<(VethPair, AlwaysOn)> {
    let pair = match VethPair::create("napilab-trace", tag, threaded) {
        Ok(p) => p,
        Err(e) => {
            println!("SKIPPED {name}: {e}");
            return None;
        }
    };
    match AlwaysOn::start(options) {
        Ok(t) => Some((pair, t)),
        Err(e) => {
            println!("SKIPPED {name}: {e}");
            None
        }
    }
}

fn name_thread(name: &str) {
    let c = std::ffi::CString::new(name).expect("name");
    // SAFETY: PR_SET_NAME with a NUL-terminated string of at most 16 bytes.
    unsafe { libc::prctl(libc::PR_SET_NAME, c.as_ptr() as libc::c_ulong, 0, 0, 0) };
}

/// Sends `count` datagrams from namespace a to 10.77.0.2:PORT, `burst` at a time.
fn send(pair: &VethPair, count: usize, burst: usize, pause: Duration) {
    let ns = pair.a.clone();
    std::thread::spawn(move || {
        napilab_probe::netns::enter(&ns).expect("enter the namespace");
        let sock = UdpSocket::bind("10.77.0.1:0").expect("bind sender");
        let payload = [0u8; 64];
        let mut sent = 0;
        while sent < count {
            for _ in 0..burst.min(count - sent) {
                // A full socket buffer would drop silently; retry until the kernel takes it.
                while sock.send_to(&payload, ("10.77.0.2", PORT)).is_err() {
                    std::thread::sleep(Duration::from_micros(50));
                }
                sent += 1;
            }
            std::thread::sleep(pause);
        }
    })
    .join()
    .expect("sender");
}

fn incoming_napi_id(sock: &UdpSocket) -> u32 {
    let mut id: u32 = 0;
    let mut len = std::mem::size_of::<u32>() as libc::socklen_t;
    // SAFETY: SO_INCOMING_NAPI_ID writes one u32.
    unsafe {
        libc::getsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_INCOMING_NAPI_ID,
            (&mut id as *mut u32).cast(),
            &mut len,
        )
    };
    id
}

/// A receiver in namespace b counting datagrams until `expected` or a 2 s silence;
/// returns (received, napi id of the socket).
fn spawn_receiver(
    pair: &VethPair,
    expected: usize,
    busy_poll: bool,
) -> std::thread::JoinHandle<(usize, u32)> {
    let ns = pair.b.clone();
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let handle = std::thread::spawn(move || {
        napilab_probe::netns::enter(&ns).expect("enter the namespace");
        name_thread("nl-receiver");
        let sock = UdpSocket::bind(("10.77.0.2", PORT)).expect("bind receiver");
        let buf_size: libc::c_int = 8 << 20;
        // SAFETY: SO_RCVBUFFORCE with an int.
        unsafe {
            libc::setsockopt(
                sock.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVBUFFORCE,
                (&buf_size as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        sock.set_nonblocking(true).expect("nonblocking");
        // SAFETY: plain epoll setup on fds owned by this thread.
        let ep = unsafe { libc::epoll_create1(0) };
        let mut ev = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: 0,
        };
        unsafe { libc::epoll_ctl(ep, libc::EPOLL_CTL_ADD, sock.as_raw_fd(), &mut ev) };
        if busy_poll {
            // struct epoll_params { u32 busy_poll_usecs; u16 busy_poll_budget;
            // u8 prefer_busy_poll; u8 pad; }, EPIOCSPARAMS = _IOW(0x8A, 1, 8 bytes).
            let params: [u8; 8] = {
                let mut p = [0u8; 8];
                p[..4].copy_from_slice(&200u32.to_ne_bytes());
                p[4..6].copy_from_slice(&64u16.to_ne_bytes());
                p[6] = 1;
                p
            };
            const EPIOCSPARAMS: libc::c_ulong = 0x4008_8a01;
            // SAFETY: the ioctl reads 8 bytes from `params`.
            let rc = unsafe { libc::ioctl(ep, EPIOCSPARAMS as _, params.as_ptr()) };
            assert_eq!(rc, 0, "EPIOCSPARAMS: {}", std::io::Error::last_os_error());
        }
        let _ = ready_tx.send(());
        let mut received = 0;
        let mut napi_id = 0;
        let mut buf = [0u8; 2048];
        let mut last = Instant::now();
        while received < expected && last.elapsed() < Duration::from_secs(2) {
            let mut events = [libc::epoll_event { events: 0, u64: 0 }; 4];
            // SAFETY: events has room for 4 entries.
            let n = unsafe { libc::epoll_wait(ep, events.as_mut_ptr(), 4, 100) };
            if n <= 0 {
                continue;
            }
            while sock.recv(&mut buf).is_ok() {
                received += 1;
                last = Instant::now();
            }
            if napi_id == 0 {
                napi_id = incoming_napi_id(&sock);
            }
        }
        // SAFETY: closing the epoll fd this thread created.
        unsafe { libc::close(ep) };
        (received, napi_id)
    });
    ready_rx
        .recv_timeout(Duration::from_secs(5))
        .expect("receiver ready");
    handle
}

fn measure(trace: &AlwaysOn, work: impl FnOnce()) -> TraceInterval {
    let cpus: Vec<u32> = (0..napilab_trace::always_on::possible_cpus() as u32).collect();
    let before = trace.snapshot(&cpus);
    let start = Instant::now();
    work();
    // Let the last polls finish.
    std::thread::sleep(Duration::from_millis(200));
    trace_interval(
        &before,
        &trace.snapshot(&cpus),
        start.elapsed().as_secs_f64(),
    )
}

fn napi_packets(t: &TraceInterval, napi_id: u32) -> u64 {
    t.napi
        .iter()
        .filter(|n| n.napi_id == napi_id)
        .map(|n| n.packets)
        .sum()
}

/// Receives `n` datagrams on vb (busy-polling with epoll when `busy_poll`) while va sends
/// them in bursts of `burst` every `gap_us`, measured by the tracer: the trace, how many
/// arrived, and the receiving socket's NAPI id.
fn measured_flood(
    trace: &AlwaysOn,
    pair: &VethPair,
    n: usize,
    busy_poll: bool,
    burst: usize,
    gap_us: u64,
) -> (TraceInterval, usize, u32) {
    let mut result = (0, 0);
    let t = measure(trace, || {
        let rx = spawn_receiver(pair, n, busy_poll);
        send(pair, n, burst, Duration::from_micros(gap_us));
        result = rx.join().expect("receiver");
    });
    (t, result.0, result.1)
}

fn assert_unloaded(trace: AlwaysOn) {
    drop(trace);
    assert!(
        !own_programs_loaded(),
        "a BPF program fd is still open after the tracer was dropped"
    );
}

#[test]
fn napi_poll_packets_equal_packets_received() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let name = "napi_poll_packets_equal_packets_received";
    let Some((pair, trace)) = setup(name, "exact", false) else {
        return;
    };
    const N: usize = 5_000;
    let (t, received, napi_id) = measured_flood(&trace, &pair, N, false, 50, 200);
    // The sender paces its bursts, but a busy machine can still overflow veth's ring
    // (those frames never reach a poll); what was polled must equal what arrived.
    assert!(
        received >= N * 9 / 10,
        "only {received} of {N} datagrams arrived"
    );
    assert_ne!(napi_id, 0, "the socket has no NAPI id: is GRO on for vb?");
    assert_eq!(napi_packets(&t, napi_id), received as u64, "{:#?}", t.napi);
    let row = t.napi.iter().find(|n| n.napi_id == napi_id).expect("row");
    assert_eq!(row.device, "vb");
    assert_unloaded(trace);
}

/// Runs `f` on a thread that entered network namespace `ns`, as napilab does when it
/// runs inside a container or a lab namespace.
fn in_namespace<T: Send + 'static>(ns: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let ns = ns.to_string();
    std::thread::spawn(move || {
        napilab_probe::netns::enter(&ns).expect("enter the namespace");
        f()
    })
    .join()
    .expect("thread in the namespace")
}

/// The map of namespace `ns` as a per-device view joins it: its `vb` (ifindex from its
/// sysfs) and the namespace inode napilab reads there.
fn map_of_vb(ns: &str) -> napilab_core::TopologyMap {
    let ifindex = std::process::Command::new("ip")
        .args(["netns", "exec", ns, "cat", "/sys/class/net/vb/ifindex"])
        .output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
        .expect("vb's ifindex");
    napilab_core::TopologyMap {
        devices: vec![napilab_core::Device {
            name: "vb".into(),
            ifindex,
            ..napilab_core::Device::default()
        }],
        irqs: Vec::new(),
        netns: Some(in_namespace(ns, napilab_probe::netns::own_inode).expect("netns inode")),
    }
}

/// Two pairs whose receiving ends are both `vb` (each in a namespace of its own, and
/// with the same ifindex there), traffic on one only: the tier records each poll with
/// its device's namespace, so the traffic is the busy namespace's vb, and the idle
/// namespace's vb, joined by (netns, ifindex) as per-device views do, sees none.
#[test]
fn polls_of_same_named_devices_are_told_apart_by_namespace() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let name = "polls_of_same_named_devices_are_told_apart_by_namespace";
    let idle = match VethPair::create("napilab-trace", "nsidle", false) {
        Ok(p) => p,
        Err(e) => {
            println!("SKIPPED {name}: {e}");
            return;
        }
    };
    let Some((busy, trace)) = setup(name, "nsbusy", false) else {
        return;
    };
    let (busy_map, idle_map) = (map_of_vb(&busy.b), map_of_vb(&idle.b));
    let busy_ns = busy_map.netns.expect("busy netns");
    assert_ne!(Some(busy_ns), idle_map.netns, "two namespaces");
    const N: usize = 3_000;
    let (t, received, napi_id) = measured_flood(&trace, &busy, N, false, 50, 200);
    assert!(received >= N * 9 / 10, "only {received} of {N} arrived");
    // The tier: every packet polled on the busy pair's vb, recorded in its namespace.
    let rows: Vec<_> = t.napi.iter().filter(|n| n.napi_id == napi_id).collect();
    assert!(!rows.is_empty(), "no row of vb's instance {napi_id}");
    for row in &rows {
        assert_eq!(
            (row.device.as_str(), row.netns),
            ("vb", busy_ns),
            "{row:#?}"
        );
        assert_eq!(row.ifindex, busy_map.devices[0].ifindex, "{row:#?}");
    }
    assert_eq!(napi_packets(&t, napi_id), received as u64, "{:#?}", t.napi);
    // The join of per-device views: all of it is the busy namespace's vb, none the idle
    // one's, although both are named vb.
    let packets_of = |map: &napilab_core::TopologyMap| -> u64 {
        let vb = napilab_core::device_join::DeviceJoin::new(map, "vb");
        t.napi
            .iter()
            .filter(|n| vb.polls(n))
            .map(|n| n.packets)
            .sum()
    };
    assert_eq!(packets_of(&busy_map), received as u64, "{:#?}", t.napi);
    assert_eq!(packets_of(&idle_map), 0, "{:#?}", t.napi);
    // By name alone, as before the namespace was recorded, both would count it.
    let by_name = napilab_core::TopologyMap {
        netns: None,
        ..idle_map.clone()
    };
    assert_eq!(packets_of(&by_name), received as u64);
    assert_unloaded(trace);
}

#[test]
fn softirq_runs_and_raise_latency_are_counted_without_losses() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let name = "softirq_runs_and_raise_latency_are_counted_without_losses";
    // softirq_raise attached all the time: every millisecond's run can be timed.
    let options = TraceOptions {
        raise_timing: RaiseTiming::Always,
        ..TraceOptions::default()
    };
    let Some((pair, trace)) = setup_with(name, "raise", false, &options) else {
        return;
    };
    assert_eq!(trace.attached(), trace.hooks().len());
    assert!(trace.raise_windows().is_none());
    const N: usize = 5_000;
    let (t, received, napi_id) = measured_flood(&trace, &pair, N, false, 50, 200);
    assert_eq!(napi_packets(&t, napi_id), received as u64);
    let net_rx: Vec<_> = t.softirqs.iter().filter(|s| s.name == "NET_RX").collect();
    let runs: u64 = net_rx.iter().map(|s| s.count).sum();
    let timed: u64 = net_rx.iter().map(|s| s.raised_runs).sum();
    assert!(runs > 0, "no NET_RX runs measured: {:#?}", t.softirqs);
    // The raise is timed for at most one run per millisecond per CPU (the clock read
    // is the dearest part of the program), but never for more runs than there were.
    assert!(
        timed > 0,
        "no NET_RX raise was timed during a flood: {net_rx:#?}"
    );
    for s in &t.softirqs {
        assert!(
            s.raised_runs <= s.count,
            "more timed raises than runs: {s:#?}"
        );
    }
    // Every NET_RX run on the flooded CPUs is counted once per context: the run
    // records carry the packets napi_poll saw inside NET_RX softirqs.
    let in_runs: u64 = t.net_rx_runs.iter().map(|r| r.packets).sum();
    assert!(
        in_runs >= received as u64,
        "NET_RX runs handled {in_runs} packets, the socket received {received}"
    );
    let cpus: Vec<u32> = (0..napilab_trace::always_on::possible_cpus() as u32).collect();
    let snap = trace.snapshot(&cpus);
    assert_eq!(
        snap.napi_lost_polls, 0,
        "polls lost for want of a NAPI slot"
    );
    assert_eq!(snap.irq_lost, 0, "IRQ runs lost");
    assert_unloaded(trace);
}

/// The shipped timing: `softirq_raise` is not among the hooks attached all the time; a
/// thread attaches it in windows, and raises inside them are timed.
#[test]
fn raise_latency_is_sampled_in_windows() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let name = "raise_latency_is_sampled_in_windows";
    let options = TraceOptions {
        raise_timing: RaiseTiming::InWindows(Windows {
            window: Duration::from_millis(50),
            period: Duration::from_millis(200),
        }),
        ..TraceOptions::default()
    };
    let Some((pair, mut trace)) = setup_with(name, "raisew", false, &options) else {
        return;
    };
    assert!(
        trace.hooks().contains(&"softirq_raise"),
        "this kernel's plan has no softirq_raise: {:?}",
        trace.hooks()
    );
    assert_eq!(
        trace.attached(),
        trace.hooks().len() - 1,
        "softirq_raise is attached all the time"
    );
    // About a second of traffic: 1000 bursts of 10, 1 ms apart, over five periods.
    const N: usize = 10_000;
    let (t, received, _) = measured_flood(&trace, &pair, N, false, 10, 1000);
    assert!(received > 0, "nothing arrived");
    let net_rx: Vec<_> = t.softirqs.iter().filter(|s| s.name == "NET_RX").collect();
    let runs: u64 = net_rx.iter().map(|s| s.count).sum();
    let timed: u64 = net_rx.iter().map(|s| s.raised_runs).sum();
    let (windows, error) = trace.raise_windows().expect("the raise windows' thread");
    assert_eq!(error, None, "the raise windows' thread failed");
    assert!(
        windows >= 3,
        "{windows} raise windows in a second of traffic"
    );
    assert!(
        timed > 0 && timed <= runs,
        "{timed} timed raises for {runs} NET_RX runs: {net_rx:#?}"
    );
    // Detached, nothing is attached, the window thread included; reattached, the same
    // hooks and the thread again.
    trace.detach();
    assert_eq!(trace.attached(), 0);
    assert!(trace.raise_windows().is_none());
    trace.reattach();
    assert_eq!(trace.attached(), trace.hooks().len() - 1);
    assert!(trace.raise_windows().is_some());
    assert_unloaded(trace);
}

#[test]
fn detached_programs_count_nothing_and_reattached_count_exactly() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let name = "detached_programs_count_nothing_and_reattached_count_exactly";
    let Some((pair, mut trace)) = setup(name, "detach", false) else {
        return;
    };
    let attached = trace.attached();
    trace.detach();
    assert_eq!(trace.attached(), 0);
    const N: usize = 2_000;
    let (t, received, napi_id) = measured_flood(&trace, &pair, N, false, 50, 200);
    assert!(received > 0, "nothing arrived");
    assert_eq!(
        napi_packets(&t, napi_id),
        0,
        "detached programs counted polls: {:#?}",
        t.napi
    );
    assert_eq!(trace.reattach(), attached);
    let (t, received, napi_id) = measured_flood(&trace, &pair, N, false, 50, 200);
    assert_eq!(napi_packets(&t, napi_id), received as u64);
    assert_unloaded(trace);
}

#[test]
fn threaded_napi_polls_are_attributed_to_the_kthread() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let name = "threaded_napi_polls_are_attributed_to_the_kthread";
    let Some((pair, trace)) = setup(name, "thr", true) else {
        return;
    };
    const N: usize = 5_000;
    let (t, received, napi_id) = measured_flood(&trace, &pair, N, false, 50, 200);
    let all: u64 = t
        .napi
        .iter()
        .filter(|n| n.napi_id == napi_id)
        .map(|n| n.polls)
        .sum();
    let kthread: u64 = t
        .napi
        .iter()
        .filter(|n| n.napi_id == napi_id && n.context == ExecContext::NapiThread)
        .map(|n| n.polls)
        .sum();
    assert!(all > 0, "no polls seen for napi {napi_id}");
    assert!(
        kthread as f64 >= 0.95 * all as f64,
        "only {kthread} of {all} polls in the NAPI kthread: {:#?}",
        t.napi
    );
    assert_eq!(napi_packets(&t, napi_id), received as u64);
    assert_unloaded(trace);
}

#[test]
fn epoll_busy_poll_is_attributed_to_the_application() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let name = "epoll_busy_poll_is_attributed_to_the_application";
    let Some((pair, trace)) = setup(name, "busy", false) else {
        return;
    };
    // Prefer-busy-poll keeps the NAPI instance for the application only while IRQ
    // deferral is set (docs/kernel.md#busy-polling).
    if let Err(e) = pair
        .command(&pair.b, "sh")
        .args([
            "-ec",
            "echo 2 > /sys/class/net/vb/napi_defer_hard_irqs; echo 200000 > /sys/class/net/vb/gro_flush_timeout",
        ])
        .status()
    {
        println!("SKIPPED {name}: cannot set IRQ deferral: {e}");
        return;
    }
    const N: usize = 20_000;
    let (t, _, napi_id) = measured_flood(&trace, &pair, N, true, 20, 100);
    let busy: Vec<_> = t
        .napi
        .iter()
        .filter(|n| n.napi_id == napi_id && n.context == ExecContext::BusyPoll)
        .collect();
    let busy_polls: u64 = busy.iter().map(|n| n.polls).sum();
    assert!(
        busy_polls > 0,
        "no busy polls for napi {napi_id}: {:#?}",
        t.napi
    );
    assert!(
        busy.iter()
            .any(|n| n.application.as_deref() == Some("nl-receiver")),
        "busy polls not attributed to the application: {busy:#?}"
    );
    assert_unloaded(trace);
}

/// NET_RX softirq time from `perf kwork` (ms summed over CPUs), or why not.
fn perf_kwork_net_rx_ms(data: &std::path::Path) -> Result<f64, String> {
    let out = std::process::Command::new("perf")
        .args(["kwork", "-k", "softirq", "report", "-i"])
        .arg(data)
        .output()
        .map_err(|e| format!("perf: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let mut ms = 0.0;
    let mut rows = 0;
    for line in text
        .lines()
        .filter(|l| l.trim_start().starts_with("(s)NET_RX"))
    {
        let runtime = line.split('|').nth(2).unwrap_or_default().trim();
        let value: f64 = runtime
            .trim_end_matches("ms")
            .trim()
            .parse()
            .map_err(|_| format!("cannot parse perf kwork runtime {runtime:?}"))?;
        ms += value;
        rows += 1;
    }
    if rows == 0 {
        return Err(format!("perf kwork reported no NET_RX rows: {text}"));
    }
    Ok(ms)
}

#[test]
fn measured_softirq_time_agrees_with_perf_kwork() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let name = "measured_softirq_time_agrees_with_perf_kwork";
    let probe = std::process::Command::new("perf")
        .args(["kwork", "-h"])
        .output();
    if probe.is_err() {
        println!("SKIPPED {name}: perf (linux-perf) is not installed");
        return;
    }
    let Some((pair, trace)) = setup(name, "kwork", false) else {
        return;
    };
    let data =
        std::env::temp_dir().join(format!("napilab-trace-{}-kwork.data", std::process::id()));
    // Both tools measure the same window, host-wide: the BPF snapshots bracket the whole
    // perf recording (6 s; the flood starts 1 s in and lasts 1-3 s), so NET_RX work of
    // anything else on the machine in that window is counted by both.
    const N: usize = 60_000;
    let mut perf_started = true;
    let mut perf_ok = false;
    let t = measure(&trace, || {
        let mut perf = match std::process::Command::new("perf")
            .args(["kwork", "-k", "softirq", "record", "-o"])
            .arg(&data)
            .args(["--", "sleep", "6"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
        {
            Ok(p) => p,
            Err(_) => {
                perf_started = false;
                return;
            }
        };
        std::thread::sleep(Duration::from_secs(1));
        let rx = spawn_receiver(&pair, N, false);
        send(&pair, N, 100, Duration::from_micros(100));
        let _ = rx.join();
        perf_ok = perf.wait().map(|s| s.success()).unwrap_or(false);
    });
    if !perf_started {
        println!("SKIPPED {name}: cannot run perf kwork");
        return;
    }
    let perf_ms = match (perf_ok, perf_kwork_net_rx_ms(&data)) {
        (true, Ok(ms)) => ms,
        (_, Err(e)) => {
            let _ = std::fs::remove_file(&data);
            println!("SKIPPED {name}: {e}");
            return;
        }
        (false, _) => {
            let _ = std::fs::remove_file(&data);
            println!("SKIPPED {name}: perf kwork record failed");
            return;
        }
    };
    let _ = std::fs::remove_file(&data);
    let ours_ms: f64 = t
        .softirqs
        .iter()
        .filter(|s| s.name == "NET_RX")
        .map(|s| s.total_ns as f64 / 1e6)
        .sum();
    println!("NET_RX softirq time: napilab {ours_ms:.1} ms, perf kwork {perf_ms:.1} ms");
    assert!(
        ours_ms > 10.0,
        "too little NET_RX work to compare: {ours_ms} ms"
    );
    assert!(
        (ours_ms - perf_ms).abs() <= 0.10 * perf_ms,
        "napilab measured {ours_ms:.1} ms of NET_RX softirq, perf kwork {perf_ms:.1} ms"
    );
    assert_unloaded(trace);
}

#[test]
fn stage_sampler_maps_flood_stacks_to_packet_stages() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let name = "stage_sampler_maps_flood_stacks_to_packet_stages";
    let pair = match VethPair::create("napilab-trace", "stages", false) {
        Ok(p) => p,
        Err(e) => {
            println!("SKIPPED {name}: {e}");
            return;
        }
    };
    let cpus: Vec<u32> = (0..napilab_trace::always_on::possible_cpus() as u32).collect();
    let sampler = match napilab_trace::stages::StageSampler::start(&cpus, 1000) {
        Ok(s) => s,
        Err(e) => {
            println!("SKIPPED {name}: {e}");
            return;
        }
    };
    let rx = spawn_receiver(&pair, 50_000, false);
    send(&pair, 50_000, 100, Duration::from_micros(50));
    let _ = rx.join();
    let by_stage = sampler.read().by_stage();
    let packet_samples: u64 = by_stage
        .iter()
        .filter(|((stage, _), _)| {
            matches!(
                *stage,
                "poll" | "ip_stack" | "local_delivery" | "init_xmit" | "rx_softirq"
            )
        })
        .map(|(_, n)| *n)
        .sum();
    assert!(packet_samples > 0, "no packet-path samples: {by_stage:?}");
    drop(sampler);
    assert!(
        !own_programs_loaded(),
        "the stage sampler's program is still loaded"
    );
}

#[test]
fn raw_tracepoint_fallback_counts_the_same_packets() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let name = "raw_tracepoint_fallback_counts_the_same_packets";
    let options = TraceOptions {
        force_raw_tp: true,
        ..TraceOptions::default()
    };
    let Some((pair, trace)) = setup_with(name, "raw", false, &options) else {
        return;
    };
    assert_eq!(trace.attach_kind, "raw_tp");
    const N: usize = 3_000;
    let (t, received, napi_id) = measured_flood(&trace, &pair, N, false, 50, 200);
    assert!(
        received >= N * 9 / 10,
        "only {received} of {N} datagrams arrived"
    );
    assert_eq!(napi_packets(&t, napi_id), received as u64, "{:#?}", t.napi);
    // The namespace is read through bpf_probe_read_kernel here, as the tp_btf path
    // loads it directly.
    let vb_netns = in_namespace(&pair.b, napilab_probe::netns::own_inode).expect("netns");
    assert!(
        t.napi
            .iter()
            .any(|n| n.napi_id == napi_id && n.device == "vb" && n.netns == vb_netns),
        "{:#?}",
        t.napi
    );
    assert!(t.softirqs.iter().any(|s| s.name == "NET_RX"));
    assert_unloaded(trace);
}

/// `observe --trace` reports its own cost from the kernel's BPF statistics: over a
/// flood, the meter sees at least one run per NAPI poll the tier counted, and a run time.
#[test]
fn cost_meter_sees_the_programs_runs() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let name = "cost_meter_sees_the_programs_runs";
    let Some((pair, trace)) = setup(name, "cost", false) else {
        return;
    };
    let meter = match napilab_trace::cost::CostMeter::start(trace.program_costs()) {
        Ok(m) => m,
        Err(e) => {
            println!("SKIPPED {name}: {e}");
            return;
        }
    };
    let (t, received, _) = measured_flood(&trace, &pair, 2_000, false, 50, 200);
    let cost = meter.cost(&trace.program_costs());
    drop(meter);
    let polls: u64 = t.napi.iter().map(|n| n.polls).sum();
    assert!(received > 0 && polls > 0, "no traffic was traced");
    assert!(
        cost.runs >= polls,
        "the statistics counted {} runs, fewer than the {polls} NAPI polls traced",
        cost.runs
    );
    assert!(
        cost.run_ns > 0 && cost.cpu_share > 0.0 && cost.cpu_share < 2.0,
        "{cost:?}"
    );
    println!(
        "{name}: {} runs, {:.0} ns/run, {:.3}% of one CPU over {:.2} s",
        cost.runs,
        cost.run_ns as f64 / cost.runs as f64,
        cost.cpu_share * 100.0,
        cost.seconds
    );
    assert_unloaded(trace);
}
