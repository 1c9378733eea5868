//! Root integration tests of the line-rate back end (XDP live frames, in-kernel
//! counting at the sink): exact delivery at a low rate through the runner, the
//! requested rate held at a low rate, and no BPF program or XDP attachment left
//! behind. Without root (or without kernel support) each test prints
//! `SKIPPED <name>: <reason>`.

use std::process::Command;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use napilab_core::scenario::{DutPatch, NapiContext, Topology};
use napilab_core::RunRecord;
use napilab_lab::counters;
use napilab_lab::linerate::{LineRate, LrClass, LrGenSpec};
use napilab_lab::netns::{self, new_run_id};
use napilab_lab::topology::Lab;
use napilab_lab::RunOptions;

/// A test outcome: Err fails, Ok(Some(reason)) skips.
type Outcome = Result<Option<String>, String>;

/// Names of the loaded BPF programs of this back end (lr_gen, lr_sink, lr_pass).
fn our_programs() -> Vec<(u32, String)> {
    libbpf_rs::query::ProgInfoIter::default()
        .filter_map(|p| {
            let name = p.name.to_string_lossy().into_owned();
            name.starts_with("lr_").then_some((p.id, name))
        })
        .collect()
}

/// `ip -d link show` of `dev` in `ns` mentions an XDP program.
fn has_xdp(ns: &str, dev: &str) -> bool {
    netns::cmd("ip", &["-n", ns, "-d", "link", "show", "dev", dev])
        .map(|t| t.contains("prog/xdp"))
        .unwrap_or(false)
}

fn class() -> LrClass {
    LrClass {
        id: 0,
        port: 9000,
        size: 64,
        share: 1.0,
    }
}

/// The share of a point's frames that veth rings may refuse before the point counts as
/// one whose host stalled a vCPU of the path. These tests check the back end's counting,
/// not the DUT's loss; a halting VM's vCPU waits on the host at many wake-ups (docs/kernel.md
/// "Idle vCPUs and wake-ups"), and CI saw 1.1% and 1.2% refused in two tries in a row with
/// every frame counted. Five percent is a stall of about 50 ms in a one-second point.
const DUT_STALLED_SHARE: f64 = 0.05;

/// Frames refused at the path's veth rings (the sender's tx_dropped, generator to DUT
/// and DUT to sink) among a point's loss-counter deltas.
fn refused_at_veth_rings(losses: &[(String, u64)]) -> u64 {
    losses
        .iter()
        .filter(|(k, _)| k.ends_with("tx_dropped"))
        .map(|(_, v)| *v)
        .sum()
}

fn lab(gro: bool) -> Result<Lab, String> {
    let mut s = DutPatch::default().resolve();
    // veth can run its NAPI in a kthread only when NAPI is on (GRO on).
    s.napi = if gro {
        NapiContext::Threaded
    } else {
        NapiContext::Softirq
    };
    s.napi_cpus = vec![1];
    // The DUT's poller must not be kept off its CPU by other processes on this shared
    // machine for longer than its 256-frame ring lasts: these tests check the
    // back end's counting, not the DUT.
    s.napi_fifo = vec![20];
    s.gro = gro;
    Lab::build(&new_run_id(), &Topology::default(), &s).map_err(|e| e.to_string())
}

/// Runs `text` through the runner (no observer, journal in a temporary directory).
fn run_scenario(text: &str, tag: &str) -> Result<RunRecord, String> {
    let out = std::env::temp_dir().join(format!("napilab-{tag}-{}", std::process::id()));
    let opts = RunOptions::quiet(text, &format!("{tag}.toml"), &out);
    let r = napilab_lab::run(&opts)
        .map(|o| o.record)
        .map_err(|e| format!("{e:#}"));
    let _ = std::fs::remove_dir_all(&out);
    r
}

/// Through the runner: a 20 kpps point; the sink's in-kernel count equals the
/// generator's less the frames the kernel counted as refused at a veth ring, latency is not faked, and nothing is left loaded.
fn low_rate_run_counts_every_frame() -> Outcome {
    let before = our_programs();
    let text = "name = \"lr-test\"\n[dut]\nnapi = \"threaded\"\nnapi_cpus = [1]\nnapi_fifo = [20]\ngenerator_cpus = [0]\nsink_cpus = [0]\n[traffic]\nbackend = \"line-rate\"\nloads_pps = [20000]\n[[traffic.classes]]\nname = \"be\"\nshare = 0.75\nsize = 64\nport = 9000\n[[traffic.classes]]\nname = \"bulk\"\nshare = 0.25\nsize = 1000\nport = 9001\n[measurement]\nduration_s = 1.0\nwarmup_s = 0.2\ndrain_ms = 300\n";
    let r = run_scenario(text, "lr-test")?;
    if let Some(n) = r.notices.iter().find(|n| n.why.contains("cannot run here")) {
        return Ok(Some(format!("line-rate back end unavailable: {}", n.why)));
    }
    let p = &r.configurations[0].points[0];
    println!(
        "  offered {:.0} pps in {:.3} s; per class sent/received {:?}; generator {} busy {:?} {:?}; sink {} busy {:?}",
        p.offered_pps,
        p.duration_s,
        p.classes
            .iter()
            .map(|c| (c.sent, c.received))
            .collect::<Vec<_>>(),
        p.generator.backend,
        p.generator.cpu_busy,
        p.generator.counters,
        p.sink.backend,
        p.sink.cpu_busy
    );
    if p.generator.backend != "xdp-live-frames" || p.sink.backend != "xdp-sink" {
        return Err(format!(
            "back ends {} / {}",
            p.generator.backend, p.sink.backend
        ));
    }
    // Every frame that left is counted: by the sink, or by the kernel as refused at a
    // veth ring (the DUT's loss, not the back end's). The DUT's poller runs SCHED_FIFO
    // alone on its CPU, but a hypervisor stall of that vCPU longer than its 256-frame
    // ring lasts (about 13 ms at 20 kpps) still refuses a few (seen in CI: 35 of 19,941
    // frames missing over two classes). The refusal counters are per device, shared by
    // the classes, and also count refused warm-up frames: they cover the missing
    // frames rather than equal them.
    let refused = refused_at_veth_rings(&p.classes[0].loss_counters);
    let sent: u64 = p.classes.iter().map(|c| c.sent).sum();
    let missing: u64 = p
        .classes
        .iter()
        .map(|c| c.sent.saturating_sub(c.received))
        .sum();
    println!(
        "  missing {missing} of {sent}; refused at veth rings {refused} ({:?})",
        p.classes[0].loss_counters
    );
    if missing > refused || refused as f64 > DUT_STALLED_SHARE * sent as f64 {
        return Err(format!(
            "{missing} of {sent} frames missing at the sink, {refused} refused at veth rings"
        ));
    }
    for c in &p.classes {
        if c.sent == 0 || c.received > c.sent {
            return Err(format!(
                "class {}: sent {} received {}",
                c.name, c.sent, c.received
            ));
        }
        if c.latency.is_some() {
            return Err(format!("class {} carries a latency", c.name));
        }
    }
    // Shares: 0.75 / 0.25 of 20 kpps over the window.
    let (be, bulk) = (p.classes[0].sent as f64, p.classes[1].sent as f64);
    if (be / (be + bulk) - 0.75).abs() > 0.01 {
        return Err(format!("class shares {be} / {bulk}, expected 3:1"));
    }
    // Every departure of the window left or was counted as skipped (a generator held
    // off its vCPU skips the departures it missed: seen in CI, 1,089 of 20,000 in one
    // 55 ms stall), and most of them left.
    let skipped = p
        .generator
        .counters
        .iter()
        .find(|(k, _)| k == "skipped_behind_schedule")
        .map_or(0, |(_, v)| *v);
    let scheduled = p.requested_pps * p.duration_s;
    if ((sent + skipped) as f64 / scheduled - 1.0).abs() > 0.01
        || p.offered_pps < 0.5 * p.requested_pps
    {
        return Err(format!(
            "offered {} for {} requested: {sent} sent + {skipped} skipped of {scheduled:.0} scheduled",
            p.offered_pps, p.requested_pps
        ));
    }
    let after = our_programs();
    if after.len() > before.len() {
        return Err(format!(
            "BPF programs left loaded: {after:?} (before: {before:?})"
        ));
    }
    Ok(None)
}

/// `measurement.search_backend = "line-rate"` with a paced sweep: the sweep point
/// measures latency with the paced engine, the search's probes run on the line-rate
/// engine, and the configuration's settings say so.
fn paced_sweep_then_line_rate_search() -> Outcome {
    let text = "name = \"sb-test\"\n[dut]\nnapi = \"threaded\"\nnapi_cpus = [1]\nnapi_fifo = [20]\ngenerator_cpus = [0]\nsink_cpus = [0]\n[traffic]\nbackend = \"paced\"\nloads_pps = [5000]\n[[traffic.classes]]\nname = \"be\"\nshare = 1.0\nsize = 64\nport = 9000\n[measurement]\nduration_s = 0.5\nwarmup_s = 0.2\nsearch = true\nsearch_backend = \"line-rate\"\nsearch_max_pps = 20000\nsearch_iterations = 2\n";
    let r = run_scenario(text, "sb-test")?;
    if let Some(n) = r.notices.iter().find(|n| n.why.contains("cannot run here")) {
        return Ok(Some(format!("line-rate back end unavailable: {}", n.why)));
    }
    let c = &r.configurations[0];
    let engines: Vec<(String, String, bool)> = c
        .points
        .iter()
        .map(|p| {
            (
                format!("{:?}", p.role),
                p.generator.backend.clone(),
                p.classes[0].latency.is_some(),
            )
        })
        .collect();
    println!("  points (role, generator, has latency): {engines:?}");
    let (sweep, search): (Vec<_>, Vec<_>) = engines.iter().partition(|e| e.0 == "Sweep");
    if sweep.len() != 1 || sweep[0].1 == "xdp-live-frames" || !sweep[0].2 {
        return Err(format!(
            "the sweep point is not a paced point with latency: {sweep:?}"
        ));
    }
    if search.is_empty() || search.iter().any(|e| e.1 != "xdp-live-frames" || e.2) {
        return Err(format!(
            "search probes not on the line-rate engine: {search:?}"
        ));
    }
    if !c
        .settings
        .iter()
        .any(|(k, v)| k == "search back end" && v == "line-rate")
    {
        return Err(format!(
            "settings do not name the search back end: {:?}",
            c.settings
        ));
    }
    Ok(None)
}

/// A generator on the CPU of a threaded DUT poller (one-CPU threaded) paces in the
/// kernel at SCHED_IDLE: its settings say so, it makes few long BPF_PROG_RUN calls
/// (200 us batches made at least 1,500 calls a second at 100 kpps, each leaving a page
/// pool to the kernel's release worker on the DUT's CPU), it holds the rate and every
/// frame it sent is counted at the sink or as refused at a veth ring.
fn beside_a_threaded_dut_the_generator_paces_in_the_kernel() -> Outcome {
    let text = "name = \"lr-beside\"\n[dut]\nnapi = \"threaded\"\nnapi_cpus = [0]\ngenerator_cpus = [0]\nsink_cpus = [0]\n[traffic]\nbackend = \"line-rate\"\nloads_pps = [100000]\n[[traffic.classes]]\nname = \"be\"\nshare = 1.0\nsize = 64\nport = 9000\n[measurement]\nduration_s = 1.0\nwarmup_s = 0.2\ndrain_ms = 300\n";
    let r = run_scenario(text, "lr-beside")?;
    if let Some(n) = r.notices.iter().find(|n| n.why.contains("cannot run here")) {
        return Ok(Some(format!("line-rate back end unavailable: {}", n.why)));
    }
    let c = &r.configurations[0];
    let sched = c
        .settings
        .iter()
        .find(|(k, _)| k == "line-rate generator sched")
        .map(|(_, v)| v.clone())
        .unwrap_or_default();
    if !sched.starts_with("in-kernel pacing at SCHED_IDLE") {
        return Err(format!("generator scheduling note: {sched:?}"));
    }
    let p = &c.points[0];
    let find = |counters: &[(String, u64)], name: &str| {
        counters
            .iter()
            .find(|(k, _)| k == name)
            .map_or(0, |(_, v)| *v)
    };
    let counter = |name: &str| find(&p.generator.counters, name);
    let calls_per_s = counter("prog_run_calls") as f64 / (p.duration_s + 0.2);
    let cl = &p.classes[0];
    let refused: u64 = cl
        .loss_counters
        .iter()
        .filter(|(k, _)| k.ends_with("tx_dropped"))
        .map(|(_, v)| *v)
        .sum();

    if calls_per_s > 800.0 {
        return Err(format!(
            "{calls_per_s:.0} BPF_PROG_RUN calls a second: not paced in the kernel"
        ));
    }
    if (p.offered_pps / p.requested_pps - 1.0).abs() > 0.03 {
        return Err(format!(
            "offered {} for {} requested",
            p.offered_pps, p.requested_pps
        ));
    }
    // Refused frames are the DUT's loss (a vCPU stall longer than its ring lasts). The
    // ring's counter spans the whole point, warm-up included (docs/lab.md, loss
    // counters), so the frames are balanced over the whole point: every frame emitted,
    // warm-up or measured, arrived (measured, or "other" for warm-up) or was refused.
    let emitted = counter("sent_including_warmup");
    let warmup_received = find(&p.sink.counters, "other_frames (warm-up, earlier points)");
    println!(
        "  offered {:.0} pps, {calls_per_s:.0} calls/s, sent {} (with warm-up {emitted}) received {} (+ {warmup_received} of the warm-up) refused at veth rings {refused}",
        p.offered_pps, cl.sent, cl.received
    );
    if cl.received + warmup_received + refused != emitted
        || refused as f64 > DUT_STALLED_SHARE * emitted as f64
    {
        return Err(format!(
            "emitted {emitted} (measured {}), received {} measured + {warmup_received} warm-up, refused {refused}",
            cl.sent, cl.received
        ));
    }
    Ok(None)
}

/// Directly: 50 kpps requested for 1 s; every departure sent or counted as skipped,
/// offered within 3% (a second try if the first lost departures to a stall), every
/// frame counted at the sink, whose veth polls from a timer while the back end runs
/// and not after; with the DUT's GRO off the pass-through program makes delivery possible;
/// after the back end is dropped its XDP attachments and programs are gone while the
/// namespaces still exist.
fn rate_held_and_attachments_removed(gro: bool) -> Outcome {
    let before = our_programs();
    let lab = lab(gro)?;
    let mut lr = match LineRate::start(&lab, &[class()], gro) {
        Ok(lr) => lr,
        Err(e) => return Ok(Some(format!("line-rate back end unavailable: {e}"))),
    };
    if !has_xdp(&lab.sink_ns, &lab.sink_dev) {
        return Err(format!("no XDP program on the sink's {}", lab.sink_dev));
    }
    if has_xdp(&lab.dut_ns, &lab.dut_in) == gro {
        return Err(format!(
            "gro = {gro}: the pass-through program on {} is {}",
            lab.dut_in,
            if gro { "attached" } else { "missing" }
        ));
    }
    // A second try only when the first one fell short by skipping departures it
    // counted (the generator's vCPU was held off for tens of ms: seen once in CI, 4,709
    // of 50,000 frames skipped in one burst) or a veth ring refused more than
    // DUT_STALLED_SHARE (a vCPU of the path held off); a frame lost uncounted fails at
    // once.
    // Frames a 256-entry veth ring refused, the DUT's or the sink's: veth counts them
    // as the sender's tx_dropped. The DUT's poller is SCHED_FIFO 20 alone on CPU 1, but
    // a hypervisor stall of that vCPU longer than the ring lasts (5 ms at 50 kpps) still
    // drops a few (seen in CI: 21 of 49,384 frames, in a try whose generator skipped 616
    // departures; and 565 then 601 of 49,999 in two tries, of which 41 missing frames
    // were not in the DUT's ring's counter, so the sink's ring refused them).
    for (attempt, point) in [(1, 7u32), (2, 8)] {
        lr.begin(point);
        let c0 = lr.counts().map_err(|e| e.to_string())?;
        let counters0 = counters::snapshot(&lab);
        let g = lr
            .start_generator(
                LrGenSpec {
                    classes: vec![class()],
                    rate_pps: 50_000.0,
                    warmup: Duration::from_millis(200),
                    duration: Duration::from_secs(1),
                    point,
                    cpus: vec![0],
                    // As the runner does when the generator's CPU does no DUT work.
                    pacing: napilab_lab::linerate::Pacing::InKernel { beside_dut: false },
                },
                Arc::new(AtomicBool::new(false)),
            )
            .join()
            .map_err(|_| "generator panicked".to_string())?
            .map_err(|e| e.to_string())?;
        std::thread::sleep(Duration::from_millis(300));
        let d = lr.counts().map_err(|e| e.to_string())?.since(&c0);
        let losses = counters::deltas(&counters0, &counters::snapshot(&lab));
        let dropped = refused_at_veth_rings(&losses);
        let sent = d.gen[0][1];
        let offered = sent as f64 / g.window_s;
        println!(
            "  gro {gro}, try {attempt}: offered {offered:.0} pps in {:.3} s ({} calls, {} skipped), sink counted {} of {sent}, veth rings refused {dropped}",
            g.window_s, g.calls, g.skipped, d.sink[0]
        );
        if sent != g.issued[0] {
            return Err(format!(
                "program counted {sent}, generator issued {}",
                g.issued[0]
            ));
        }
        // Every departure of the window either left or was counted as skipped.
        let scheduled = 50_000.0 * g.window_s;
        if ((sent + g.skipped) as f64 / scheduled - 1.0).abs() > 0.01 {
            return Err(format!(
                "{sent} sent + {} skipped of {scheduled:.0} scheduled",
                g.skipped
            ));
        }
        // Every frame that left is counted: by the sink, or by the kernel as refused
        // at a veth ring (the path's loss, not the back end's). The ring's counter
        // also counts refused warm-up frames, which the sink does not count as the
        // point's (seen in CI: 49,999 of 49,999 at the sink and 1 refused), so the
        // refusals cover the point's missing frames rather than equal them.
        let missing = sent.saturating_sub(d.sink[0]);
        if d.sink[0] > sent || missing > dropped {
            return Err(format!(
                "sink counted {} of {sent}, veth rings refused {dropped}: frames lost uncounted (loss counters {losses:?})",
                d.sink[0]
            ));
        }
        // More than DUT_STALLED_SHARE refused: a vCPU of the path was held off for far
        // longer than a ring lasts (seen in CI: 5,198 of 48,326 refused, about 100 ms,
        // in a try whose generator also skipped 1,674 departures): the host stalled,
        // which the second try gives a chance to pass; two stalled tries fail.
        let dut_stalled = dropped as f64 > DUT_STALLED_SHARE * sent as f64;
        let rate_held = (offered / 50_000.0 - 1.0).abs() <= 0.03;
        if rate_held && !dut_stalled {
            break;
        }
        let why = if dut_stalled {
            format!(
                "sink counted {} of {sent}, veth rings refused {dropped} (more than {:.0}%)",
                d.sink[0],
                DUT_STALLED_SHARE * 100.0
            )
        } else {
            format!("offered {offered:.0} pps for 50000 requested")
        };
        if attempt == 2 || (!dut_stalled && g.skipped == 0) {
            return Err(why);
        }
        println!(
            "  {why}: the host held a vCPU off (generator skipped {} departures); trying once more",
            g.skipped
        );
    }
    let sink_defer = || {
        netns::sh_in(
            &lab.sink_ns,
            &format!("cat /sys/class/net/{}/napi_defer_hard_irqs", lab.sink_dev),
        )
        .map(|t| t.trim().to_string())
        .map_err(|e| e.to_string())
    };
    let during = sink_defer()?;
    drop(lr);
    let after = sink_defer()?;
    if during != napilab_lab::linerate::SINK_DEFER_HARD_IRQS.to_string() || after != "0" {
        return Err(format!(
            "the sink's napi_defer_hard_irqs was {during} with the back end and {after} after it"
        ));
    }
    if has_xdp(&lab.sink_ns, &lab.sink_dev) || has_xdp(&lab.dut_ns, &lab.dut_in) {
        return Err("an XDP program is still attached after the back end was dropped".into());
    }
    if netns::cmd(
        "ip",
        &["-n", &lab.gen_ns, "-d", "link", "show", "dev", "lo"],
    )
    .map(|t| t.contains("xdpgeneric"))
    .unwrap_or(false)
    {
        return Err("lr_gen is still attached to lo in the generator namespace".into());
    }
    // Program release is synchronous with the last fd close, but give the kernel a
    // moment for deferred frees.
    let deadline = Instant::now() + Duration::from_secs(2);
    while our_programs().len() > before.len() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let after = our_programs();
    if after.len() > before.len() {
        return Err(format!("BPF programs left loaded: {after:?}"));
    }
    drop(lab);
    Ok(None)
}

fn rate_held_gro_on() -> Outcome {
    rate_held_and_attachments_removed(true)
}

fn rate_held_gro_off() -> Outcome {
    rate_held_and_attachments_removed(false)
}

fn main() {
    type Test = fn() -> Outcome;
    let tests: [(&str, Test, bool); 5] = [
        (
            "low_rate_run_counts_every_frame",
            low_rate_run_counts_every_frame,
            true,
        ),
        (
            "rate_held_and_attachments_removed_gro_on",
            rate_held_gro_on,
            true,
        ),
        (
            "rate_held_and_attachments_removed_gro_off",
            rate_held_gro_off,
            true,
        ),
        (
            "paced_sweep_then_line_rate_search",
            paced_sweep_then_line_rate_search,
            true,
        ),
        (
            "beside_a_threaded_dut_the_generator_paces_in_the_kernel",
            beside_a_threaded_dut_the_generator_paces_in_the_kernel,
            true,
        ),
    ];
    napilab_testkit::run_serially(&tests, || {
        napilab_lab::runner::preflight().map_err(|e| e.to_string())?;
        if Command::new("ip").arg("-V").output().is_err() {
            return Err("iproute2 is not installed".into());
        }
        Ok(())
    });
}
