//! Root integration tests of the lab: topology up and down, exact delivery at a low
//! rate, loss counted where the kernel counts it, latency through a tbf, scenario
//! errors, and `kill -9` followed by `lab clean`. Without root each test prints
//! `SKIPPED <name>: <reason>`.
//!
//! The kill test runs this binary again in "child" mode (env `NAPILAB_LAB_CHILD`),
//! which starts a long run that the parent kills.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use napilab_core::scenario::{self, DutPatch, NapiContext, Qdisc, QdiscKind, Topology};
use napilab_core::RunRecord;
use napilab_lab::netns::{self, new_run_id};
use napilab_lab::topology::Lab;
use napilab_lab::{clean, RunOptions};
use napilab_probe::kernel::is_root;

const CHILD_ENV: &str = "NAPILAB_LAB_CHILD";

fn tmpdir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("napilab-lab-test-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("temp dir");
    d
}

fn scenario_text(loads: &str, dut: &str, class: &str, duration: f64) -> String {
    format!(
        "name = \"test\"\n[dut]\ngenerator_cpus = [0]\nsink_cpus = [0]\n{dut}\n[traffic]\nloads_pps = [{loads}]\n[[traffic.classes]]\nname = \"be\"\nshare = 1.0\nport = 9000\n{class}\n[measurement]\nduration_s = {duration}\nwarmup_s = 0.2\ndrain_ms = 300\n"
    )
}

fn run(text: &str, tag: &str) -> Result<RunRecord, String> {
    let out = tmpdir(tag);
    let opts = RunOptions::quiet(text, &format!("{tag}.toml"), &out);
    let r = napilab_lab::run(&opts)
        .map(|o| o.record)
        .map_err(|e| format!("{e:#}"));
    let _ = std::fs::remove_dir_all(&out);
    r
}

fn leftovers(run_id: &str) -> Vec<String> {
    let mut out: Vec<String> = netns::list_namespaces()
        .unwrap_or_default()
        .into_iter()
        .filter(|n| n.starts_with(&format!("napilab-{run_id}-")))
        .collect();
    let short = &run_id[run_id.len() - 4..];
    if let Ok(links) = netns::cmd("ip", &["-o", "link", "show"]) {
        out.extend(
            links
                .lines()
                .filter(|l| l.contains(&format!("n{short}-")))
                .map(String::from),
        );
    }
    out
}

fn topology_up_and_down_leaves_no_trace() -> Result<(), String> {
    let id = new_run_id();
    let mut settings = DutPatch::default().resolve();
    settings.napi = NapiContext::Threaded;
    settings.napi_cpus = vec![0];
    settings.rps_cpus = vec![0];
    settings.qdisc = Qdisc {
        kind: QdiscKind::Htb,
        limit: Some(100),
        rate_mbit: Some(100.0),
        burst_bytes: Some(16000),
        latency_ms: None,
    };
    let mut lab = Lab::build(&id, &Topology::default(), &settings).map_err(|e| e.to_string())?;
    let up = leftovers(&id);
    if up.len() != 3 {
        return Err(format!("expected 3 namespaces while up, found {up:?}"));
    }
    if napilab_lab::topology::napi_threads(&lab.dut_in).is_empty() {
        return Err("threaded NAPI: no napi kthread for the DUT ingress".into());
    }
    lab.teardown().map_err(|e| e.to_string())?;
    drop(lab);
    let left = leftovers(&id);
    if !left.is_empty() {
        return Err(format!("left behind: {left:?}"));
    }
    Ok(())
}

fn low_rate_run_delivers_everything() -> Result<(), String> {
    let text = scenario_text("2000", "", "size = 64\npattern = \"poisson\"", 1.0);
    let r = run(&text, "lowrate")?;
    let p = &r.configurations[0].points[0];
    let c = &p.classes[0];
    println!(
        "  sent {} received {} reordered {} loss counters {:?} p50 {:?} us",
        c.sent,
        c.received,
        c.reordered,
        c.loss_counters,
        c.latency.as_ref().map(|l| l.p50_us)
    );
    if c.sent < 1500 || c.received != c.sent || p.loss_ratio() != 0.0 {
        return Err(format!("sent {} received {}", c.sent, c.received));
    }
    if !leftovers(&r.run_id).is_empty() {
        return Err("namespaces left after the run".into());
    }
    Ok(())
}

fn tbf_loss_is_counted_by_the_qdisc() -> Result<(), String> {
    // 64-byte packets at 5000/s = 2.56 Mbit/s into a 1 Mbit/s tbf with a tiny queue.
    let dut = "qdisc = { kind = \"tbf\", rate_mbit = 1.0, burst_bytes = 1600, latency_ms = 1.0 }";
    let text = scenario_text("5000", dut, "size = 64", 1.0);
    let r = run(&text, "tbfloss")?;
    let p = &r.configurations[0].points[0];
    let c = &p.classes[0];
    println!(
        "  sent {} received {} loss counters {:?}",
        c.sent, c.received, c.loss_counters
    );
    let lost = c.sent - c.received;
    let qdisc: u64 = c
        .loss_counters
        .iter()
        .filter(|(k, _)| k.contains("qdisc tbf"))
        .map(|(_, v)| *v)
        .sum();
    if lost < c.sent / 4 {
        return Err(format!("expected heavy loss, lost {lost} of {}", c.sent));
    }
    if qdisc == 0 {
        return Err(format!("no tbf drops counted: {:?}", c.loss_counters));
    }
    // The window counts only measured packets; the qdisc also dropped warm-up ones.
    if (qdisc as f64) < lost as f64 * 0.8 {
        return Err(format!("tbf counted {qdisc} drops for {lost} lost packets"));
    }
    Ok(())
}

fn tbf_adds_known_latency() -> Result<(), String> {
    // 1000-byte packets at 400/s = 3.2 Mbit/s into a 2 Mbit/s tbf whose queue holds
    // latency 20 ms: the queue stays full, each packet waits about 20 ms.
    let class = "size = 1000";
    let base = run(&scenario_text("400", "", class, 1.5), "lat-base")?;
    let dut = "qdisc = { kind = \"tbf\", rate_mbit = 2.0, burst_bytes = 1600, latency_ms = 20.0 }";
    let tbf = run(&scenario_text("400", dut, class, 1.5), "lat-tbf")?;
    let l = |r: &RunRecord| {
        r.configurations[0].points[0].classes[0]
            .latency
            .clone()
            .unwrap_or_default()
    };
    let (b, t) = (l(&base), l(&tbf));
    println!(
        "  p50 without tbf {:.0} us, with tbf (2 Mbit/s, latency 20 ms) {:.0} us; p99 {:.0} / {:.0} us",
        b.p50_us, t.p50_us, b.p99_us, t.p99_us
    );
    if !(t.p50_us >= 10_000.0 && t.p50_us <= 60_000.0) {
        return Err(format!("tbf p50 {} us, expected 10-60 ms", t.p50_us));
    }
    if b.p50_us >= 2_000.0 {
        return Err(format!("baseline p50 {} us, expected < 2 ms", b.p50_us));
    }
    Ok(())
}

fn scenario_errors_name_file_line_and_field() -> Result<(), String> {
    let text = scenario_text("1000", "napi_cpus = [4096]", "size = 64", 1.0);
    let e = match scenario::parse(&text, "bad.toml", Some(2)) {
        Ok(_) => return Err("accepted napi_cpus = [4096]".into()),
        Err(e) => e.to_string(),
    };
    println!("  {e}");
    if !e.starts_with("bad.toml:5: dut.napi_cpus: CPU 4096 does not exist") {
        return Err(format!("unexpected message: {e}"));
    }
    if is_root() {
        let bad = scenario_text("1000", "", "size = 9000", 1.0);
        let e = run(&bad, "bad").err().ok_or("run accepted size 9000")?;
        if !e.contains("bad.toml:12: traffic.classes[0].size: 9000 is out of range") {
            return Err(format!("unexpected run error: {e}"));
        }
    }
    Ok(())
}

/// Two ingress queues: each class's packets arrive on its own RX queue of the DUT.
fn classes_land_on_their_rx_queues() -> Result<(), String> {
    use napilab_core::scenario::Pattern;
    use napilab_lab::traffic::{start_generator, ClassSpec, GenSpec, Sink};
    let id = new_run_id();
    let mut settings = DutPatch::default().resolve();
    settings.napi = NapiContext::Threaded;
    settings.generator_cpus = vec![0, 1];
    let topo = Topology {
        ingress_queues: 2,
        ..Topology::default()
    };
    let lab = Lab::build(&id, &topo, &settings).map_err(|e| e.to_string())?;
    let sink = Sink::start(&lab.sink_ns, &[7000, 9000], &[0]).map_err(|e| e.to_string())?;
    sink.begin(1);
    let count = |q: u32| -> u64 {
        netns::cmd(
            "ip",
            &["netns", "exec", &lab.dut_ns, "ethtool", "-S", &lab.dut_in],
        )
        .unwrap_or_default()
        .lines()
        .find_map(|l| {
            let (k, v) = l.trim().split_once(':')?;
            (k == format!("rx_queue_{q}_xdp_packets")).then(|| v.trim().parse().ok())?
        })
        .unwrap_or(0)
    };
    let (q0, q1) = (count(0), count(1));
    let stop = Arc::new(AtomicBool::new(false));
    // Queue 0: class 0 (port 7000) at 1000/s from CPU 0; queue 1: class 1 at 3000/s
    // from CPU 1.
    let gens: Vec<_> = [(0u16, 7000u16, 1000.0, 0u32), (1, 9000, 3000.0, 1)]
        .iter()
        .map(|&(cid, port, rate, cpu)| {
            start_generator(
                GenSpec {
                    ns: lab.gen_ns.clone(),
                    dst: napilab_lab::topology::SINK_ADDR,
                    classes: vec![ClassSpec {
                        id: cid,
                        port,
                        size: 64,
                        share: 1.0,
                        pattern: Pattern::Cbr,
                    }],
                    rate_pps: rate,
                    warmup: Duration::from_millis(0),
                    duration: Duration::from_millis(1000),
                    point: 1,
                    cpus: vec![cpu],
                    seed: 1,
                    flows: 1,
                },
                stop.clone(),
            )
        })
        .collect();
    let mut sent = Vec::new();
    for g in gens {
        let r = g
            .join()
            .map_err(|_| "generator panicked")?
            .map_err(|e| e.to_string())?;
        sent.push(r.sent_total);
    }
    std::thread::sleep(Duration::from_millis(300));
    let got = sink.collect().map_err(|e| e.to_string())?;
    let (d0, d1) = (count(0) - q0, count(1) - q1);
    println!(
        "  sent {sent:?}; rx-0 got {d0}, rx-1 got {d1}; sink per class {:?}",
        got.classes.iter().map(|c| c.received).collect::<Vec<_>>()
    );
    if d0 != sent[0] || d1 != sent[1] {
        return Err(format!("queues got {d0}/{d1} for {sent:?} sent"));
    }
    Ok(())
}

/// Batched sends (UDP GSO and one message per packet) through the router: every
/// packet of each class arrives exactly once and in order (sequence numbers 1..=sent,
/// or each missing one counted as a kernel drop), the DUT receives single packets (its
/// ingress counts at least as many packets as were sent, not one per GSO message), no
/// packet arrives before its departure stamp, and the late-departure counters agree
/// with each other and with the schedule.
fn batched_sends_keep_sequences_gap_free() -> Result<(), String> {
    use napilab_core::scenario::Pattern;
    use napilab_lab::traffic::{
        start_generator_with, ClassSpec, GenOptions, GenSched, GenSpec, Sink, SinkOptions, TxPath,
        LATE_NS,
    };
    let id = new_run_id();
    let mut settings = DutPatch::default().resolve();
    settings.napi = NapiContext::Threaded;
    let lab = Lab::build(&id, &Topology::default(), &settings).map_err(|e| e.to_string())?;
    let rx_packets = || -> Result<u64, String> {
        let t = netns::cmd(
            "ip",
            &[
                "-n",
                &lab.dut_ns,
                "-s",
                "-j",
                "link",
                "show",
                "dev",
                &lab.dut_in,
            ],
        )
        .map_err(|e| e.to_string())?;
        let v: serde_json::Value = serde_json::from_str(&t).map_err(|e| e.to_string())?;
        v[0]["stats64"]["rx"]["packets"]
            .as_u64()
            .ok_or_else(|| format!("no rx packets counter for {}", lab.dut_in))
    };
    let (rate, duration) = (60_000.0, Duration::from_millis(800));
    let shares = [0.25, 0.75];
    let mut batched = false;
    // The third run reads with UDP GRO: the sink cuts merged datagrams back into
    // packets, which must give the same sequence numbers.
    for (point, path, udp_gro) in [
        (1u32, TxPath::UdpGso, false),
        (2, TxPath::Sendmmsg, false),
        (3, TxPath::UdpGso, true),
    ] {
        let sink = Sink::start_with(&lab.sink_ns, &[7000, 9000], &[0], SinkOptions { udp_gro })
            .map_err(|e| e.to_string())?;
        sink.begin(point);
        let before = napilab_lab::counters::snapshot(&lab);
        let rx0 = rx_packets()?;
        let spec = GenSpec {
            ns: lab.gen_ns.clone(),
            dst: napilab_lab::topology::SINK_ADDR,
            classes: [(0u16, 7000u16), (1, 9000)]
                .iter()
                .map(|&(cid, port)| ClassSpec {
                    id: cid,
                    port,
                    size: 64,
                    share: shares[cid as usize],
                    pattern: Pattern::Cbr,
                })
                .collect(),
            rate_pps: rate,
            // No warm-up: every packet is measured, so sequence numbers start at 1.
            warmup: Duration::ZERO,
            duration,
            point,
            cpus: vec![0],
            seed: 7,
            flows: 1,
        };
        // spin_ns 0: the generator sleeps before every departure and wakes late by
        // the timer's latency, so departures fall due in twos and threes: batches.
        let opts = GenOptions {
            path,
            sched: GenSched::Other,
            spin_ns: Some(0),
        };
        let g = start_generator_with(spec, opts, Arc::new(AtomicBool::new(false)))
            .join()
            .map_err(|_| "generator panicked")?
            .map_err(|e| e.to_string())?;
        std::thread::sleep(Duration::from_millis(300));
        let s = sink.collect().map_err(|e| e.to_string())?;
        let after = napilab_lab::counters::snapshot(&lab);
        let rx = rx_packets()? - rx0;
        let deltas = napilab_lab::counters::deltas(&before, &after);
        // Packets the generator's veth could not hand over (the DUT's ring was full)
        // never reach the DUT's counters.
        let gen_dropped: u64 = deltas
            .iter()
            .filter(|(k, _)| *k == format!("{} tx_dropped", lab.gen_dev))
            .map(|(_, v)| v)
            .sum();
        let dropped: u64 = deltas
            .iter()
            .filter(|(k, _)| !k.starts_with("sink udp"))
            .map(|(_, v)| v)
            .sum::<u64>()
            + s.classes.iter().map(|c| c.socket_drops).sum::<u64>();
        println!(
            "  {path:?}, sink UDP GRO {udp_gro}: sent {:?} (total {}), received {:?}, max seq {:?}, dropped {dropped}, DUT rx {rx}, send calls {} (max batch {}), late {} (max {} us), behind {}, max stamp age {} us, note {:?}",
            g.sent,
            g.sent_total,
            s.classes.iter().map(|c| c.received).collect::<Vec<_>>(),
            s.classes.iter().map(|c| c.max_seq()).collect::<Vec<_>>(),
            g.batches,
            g.max_batch,
            g.late,
            g.max_lateness_ns / 1000,
            g.behind_at_end,
            g.max_stamp_age_ns / 1000,
            g.tx_note
        );
        if g.tx_path != path {
            return Err(format!(
                "asked for {path:?}, sent with {:?}: {:?}",
                g.tx_path, g.tx_note
            ));
        }
        batched |= g.max_batch > 1;
        let sent: u64 = g.sent.iter().sum();
        if sent != g.sent_total || g.send_errors > 0 {
            return Err(format!(
                "with no warm-up every packet is measured: sent {sent}, total {}, errors {}",
                g.sent_total, g.send_errors
            ));
        }
        for (i, c) in s.classes.iter().enumerate() {
            let lost = g.sent[i].saturating_sub(c.received);
            if c.reordered > 0 || c.duplicates_or_stale > 0 {
                return Err(format!(
                    "class {i}: {} reordered, {} duplicate",
                    c.reordered, c.duplicates_or_stale
                ));
            }
            if c.received > g.sent[i] || c.max_seq() > g.sent[i] {
                return Err(format!(
                    "class {i}: received {} / max seq {} of {} sent",
                    c.received,
                    c.max_seq(),
                    g.sent[i]
                ));
            }
            // With UDP GRO the socket counts a dropped merged datagram once, whatever
            // the number of packets in it: only require that some drop was counted.
            if lost > 0 && (dropped == 0 || (!udp_gro && lost > dropped)) {
                return Err(format!(
                    "class {i}: {lost} sequence numbers missing, only {dropped} drops counted by the kernel"
                ));
            }
            if lost == 0 && c.max_seq() != g.sent[i] {
                return Err(format!(
                    "class {i}: max seq {} != sent {}",
                    c.max_seq(),
                    g.sent[i]
                ));
            }
            if c.latency.samples() != c.received {
                return Err(format!("class {i}: latency samples != received"));
            }
        }
        if rx + gen_dropped < g.sent_total {
            return Err(format!(
                "the DUT received {rx} packets (+{gen_dropped} dropped in front of it) for {} sent: GSO messages reached it unsegmented",
                g.sent_total
            ));
        }
        if s.negative_latency > 0 || s.unstamped > 0 {
            return Err(format!(
                "{} packets arrived before their departure stamp, {} without kernel timestamp",
                s.negative_latency, s.unstamped
            ));
        }
        if (g.late > 0) != (g.max_lateness_ns > LATE_NS) || g.late > sent {
            return Err(format!(
                "late {} inconsistent with max lateness {} ns",
                g.late, g.max_lateness_ns
            ));
        }
        // CBR: each class's window holds rate x share x duration departures, each
        // either sent or still scheduled when the window closed.
        let expected: f64 = shares
            .iter()
            .map(|sh| rate * sh * duration.as_secs_f64())
            .sum();
        let accounted = (sent + g.behind_at_end) as f64;
        if (accounted - expected).abs() > 2.0 {
            return Err(format!(
                "sent {sent} + behind {} != {expected} scheduled",
                g.behind_at_end
            ));
        }
        if g.max_stamp_age_ns == 0 || g.batches == 0 {
            return Err("no send call was timed".into());
        }
    }
    if !batched {
        return Err("no batch held more than one packet: batching was not exercised".into());
    }
    Ok(())
}

fn netdev_budget() -> Option<String> {
    std::fs::read_to_string("/proc/sys/net/core/netdev_budget")
        .ok()
        .map(|s| s.trim().to_string())
}

fn kill_9_then_clean_leaves_the_host_clean() -> Result<(), String> {
    let jdir = tmpdir("kill-journal");
    let before = netdev_budget().ok_or("cannot read net.core.netdev_budget")?;
    let new_budget: u32 = before.parse::<u32>().map_err(|e| e.to_string())? + 7;
    let id = new_run_id();
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut child = Command::new(exe)
        .env(CHILD_ENV, format!("{id} {new_budget} {}", jdir.display()))
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| e.to_string())?;
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if leftovers(&id).len() >= 3 && netdev_budget().as_deref() == Some(&new_budget.to_string())
        {
            break;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            return Err("the child run did not set up within 20 s".into());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_millis(500));
    child.kill().map_err(|e| e.to_string())?; // SIGKILL
    let _ = child.wait();
    let during = leftovers(&id);
    let r = clean::clean(&jdir);
    println!(
        "  after kill -9: {} leftovers; clean removed {:?}, reverted {} journal(s), errors {:?}",
        during.len(),
        r.namespaces_removed,
        r.journals_reverted.len(),
        r.errors
    );
    let _ = std::fs::remove_dir_all(&jdir);
    if !r.errors.is_empty() {
        return Err(format!("clean errors: {:?}", r.errors));
    }
    let left = leftovers(&id);
    if !left.is_empty() {
        return Err(format!("left after clean: {left:?}"));
    }
    if netdev_budget().as_deref() != Some(before.as_str()) {
        return Err(format!(
            "netdev_budget is {:?}, was {before}",
            netdev_budget()
        ));
    }
    if r.journals_reverted.len() != 1 {
        return Err("expected one reverted journal".into());
    }
    Ok(())
}

/// Child mode: a long run the parent kills.
fn child(spec: &str) -> i32 {
    let mut it = spec.split_whitespace();
    let (Some(id), Some(budget), Some(jdir)) = (it.next(), it.next(), it.next()) else {
        return 2;
    };
    let text = scenario_text(
        "1000",
        &format!("netdev_budget = {budget}"),
        "size = 64",
        60.0,
    );
    let opts = RunOptions {
        scenario_text: text,
        scenario_file: "child.toml".into(),
        out_dir: Path::new(jdir).join("results"),
        observe: false,
        write_record: true,
        journal_dir: PathBuf::from(jdir),
        stop: Arc::new(AtomicBool::new(false)),
        progress: false,
        run_id: Some(id.to_string()),
    };
    match napilab_lab::run(&opts) {
        Ok(_) => 0,
        Err(e) => {
            eprintln!("child: {e:#}");
            1
        }
    }
}

fn main() {
    if let Ok(spec) = std::env::var(CHILD_ENV) {
        std::process::exit(child(&spec));
    }
    type Test = fn() -> Result<(), String>;
    let tests: [(&str, Test, bool); 8] = [
        (
            "scenario_errors_name_file_line_and_field",
            scenario_errors_name_file_line_and_field,
            false,
        ),
        (
            "topology_up_and_down_leaves_no_trace",
            topology_up_and_down_leaves_no_trace,
            true,
        ),
        (
            "low_rate_run_delivers_everything",
            low_rate_run_delivers_everything,
            true,
        ),
        (
            "tbf_loss_is_counted_by_the_qdisc",
            tbf_loss_is_counted_by_the_qdisc,
            true,
        ),
        ("tbf_adds_known_latency", tbf_adds_known_latency, true),
        (
            "classes_land_on_their_rx_queues",
            classes_land_on_their_rx_queues,
            true,
        ),
        (
            "batched_sends_keep_sequences_gap_free",
            batched_sends_keep_sequences_gap_free,
            true,
        ),
        (
            "kill_9_then_clean_leaves_the_host_clean",
            kill_9_then_clean_leaves_the_host_clean,
            true,
        ),
    ];
    napilab_testkit::run_serially(&tests, || {
        napilab_lab::runner::preflight().map_err(|e| e.to_string())
    });
}
