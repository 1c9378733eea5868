//! The store, the HTML report and the CSV on synthetic runs (napilab_report::synthetic).

use std::path::PathBuf;

use napilab_core::{PointRole, RunKind, RunRecord};
use napilab_report::synthetic::SyntheticRun;
use napilab_report::{points_csv, report_html, write_outputs, Store, STORE_VERSION};

/// A fresh directory under the target directory, removed and recreated per test.
fn scratch(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("napilab-report-{name}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch directory");
    dir
}

fn lab_run() -> RunRecord {
    SyntheticRun::new(RunKind::Lab).build()
}

#[test]
fn store_round_trip_gives_back_the_same_record() {
    let dir = scratch("round-trip");
    let db = dir.join("results/napilab.db");
    let run = lab_run();
    let model = SyntheticRun::new(RunKind::Model)
        .run_id("20260101-130000-cafe")
        .build();
    {
        let mut store = Store::open(&db).expect("open");
        store.insert_run(&run).expect("insert lab run");
        store.insert_run(&model).expect("insert model run");
        // Storing the same run again replaces it rather than duplicating it.
        store.insert_run(&run).expect("insert again");
    }
    let store = Store::open(&db).expect("reopen");
    let points: i64 = store
        .connection()
        .query_row("SELECT count(*) FROM points", [], |r| r.get(0))
        .expect("points");
    assert_eq!(points, 2 * 14, "storing a run again replaces its rows");
    assert!(
        store.load_run(&run.run_id).expect("load") == run,
        "lab run differs"
    );
    assert!(
        store.load_run(&model.run_id).expect("load model") == model,
        "model run differs"
    );
    let list = store.list_runs().expect("list");
    let ids: Vec<&str> = list.iter().map(|r| r.run_id.as_str()).collect();
    assert_eq!(ids, ["20260101-120000-beef", "20260101-130000-cafe"]);
    assert_eq!(list[0].kind, "lab");
    assert_eq!(list[1].kind, "model");
    assert_eq!(list[0].configurations, 2);
    assert_eq!(list[0].points, 14);
    let err = store.load_run("nope").expect_err("unknown run");
    let msg = format!("{err:#}");
    assert!(msg.contains("no run nope"), "{msg}");
    assert!(msg.contains("20260101-120000-beef"), "{msg}");
}

#[test]
fn metrics_table_holds_rows_with_sources() {
    let dir = scratch("metrics");
    let db = dir.join("napilab.db");
    let run = lab_run();
    let mut store = Store::open(&db).expect("open");
    store.insert_run(&run).expect("insert");
    let conn = store.connection();
    let version: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .expect("version");
    assert_eq!(version, STORE_VERSION);
    // One configuration row and seven points per configuration.
    let points: i64 = conn
        .query_row("SELECT count(*) FROM points", [], |r| r.get(0))
        .expect("points");
    assert_eq!(points, 14);
    let query = |scope: &str, name: &str| -> Vec<(f64, String, String)> {
        let mut stmt = conn
            .prepare(
                "SELECT m.value, m.unit, m.source FROM metrics m
                 JOIN points p ON m.point_id = p.id
                 JOIN configurations c ON p.configuration_id = c.id
                 WHERE c.name = 'one-core/softirq' AND p.position = 0
                   AND m.scope = ?1 AND m.name = ?2",
            )
            .expect("prepare");
        stmt.query_map([scope, name], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .expect("query")
            .collect::<Result<_, _>>()
            .expect("rows")
    };
    // CPU time shares keep their tick source; the busy share is tick-sampled too.
    let busy = query("cpu0", "time.busy");
    assert_eq!(busy.len(), 1);
    assert!((busy[0].0 - 0.4).abs() < 1e-9, "{busy:?}");
    assert_eq!(busy[0].1, "cpu_fraction");
    assert_eq!(busy[0].2, "tick");
    let softirq = query("cpu0", "time.softirq");
    assert_eq!(softirq[0].2, "tick");
    // Kernel counters are `proc`, the traffic engine's numbers `engine`.
    let irqs = query("cpu0", "net_hardirqs");
    assert_eq!(irqs.len(), 1);
    assert_eq!(
        (irqs[0].1.as_str(), irqs[0].2.as_str()),
        ("per_second", "proc")
    );
    let p99 = query("class:rt", "latency_p99_us");
    assert_eq!(p99.len(), 1);
    assert_eq!(
        (p99[0].1.as_str(), p99[0].2.as_str()),
        ("microseconds", "engine")
    );
    let offered = query("traffic", "offered_pps");
    assert_eq!(offered[0].0, 100e3);
    let drops = query("class:be", "loss_counter:dut-in rx_dropped");
    assert_eq!(drops[0].2, "proc");
    let saturated = query("generator", "saturated");
    assert_eq!(saturated[0].0, 0.0);
    // A derived number says how it was derived.
    let derived: String = conn
        .query_row(
            "SELECT derived FROM metrics WHERE scope = 'cpu0'
             AND name = 'packets_per_net_rx_softirq' LIMIT 1",
            [],
            |r| r.get(0),
        )
        .expect("derived");
    assert_eq!(derived, "softnet processed / NET_RX softirqs");
    // No metric row lacks a source.
    let unsourced: i64 = conn
        .query_row(
            "SELECT count(*) FROM metrics WHERE source NOT IN
             ('proc', 'tick', 'trace', 'sample', 'model', 'engine')",
            [],
            |r| r.get(0),
        )
        .expect("sources");
    assert_eq!(unsourced, 0);
}

#[test]
fn model_runs_store_model_sources() {
    let dir = scratch("model-sources");
    let run = SyntheticRun::new(RunKind::Model).build();
    let mut store = Store::open(&dir.join("napilab.db")).expect("open");
    store.insert_run(&run).expect("insert");
    let engine: i64 = store
        .connection()
        .query_row(
            "SELECT count(*) FROM metrics WHERE source IN ('engine', 'proc')",
            [],
            |r| r.get(0),
        )
        .expect("count");
    assert_eq!(engine, 0, "a twin run has no measured numbers");
}

#[test]
fn newer_store_version_is_refused() {
    let dir = scratch("newer");
    let db = dir.join("napilab.db");
    drop(Store::open(&db).expect("create"));
    {
        let conn = rusqlite::Connection::open(&db).expect("raw open");
        conn.pragma_update(None, "user_version", STORE_VERSION + 1)
            .expect("bump");
    }
    let err = Store::open(&db).err().expect("refused");
    let msg = format!("{err:#}");
    assert!(msg.contains("newer than this napilab"), "{msg}");
    assert!(msg.contains("napilab.db"), "{msg}");
}

#[test]
fn concurrent_writers_all_land() {
    let dir = scratch("concurrent");
    let db = dir.join("napilab.db");
    drop(Store::open(&db).expect("create"));
    let handles: Vec<_> = (0..4)
        .map(|i| {
            let db = db.clone();
            std::thread::spawn(move || {
                let run = SyntheticRun::new(RunKind::Model)
                    .run_id(&format!("20260101-12000{i}-0000"))
                    .build();
                Store::open(&db)
                    .and_then(|mut s| s.insert_run(&run))
                    .expect("insert");
            })
        })
        .collect();
    for h in handles {
        h.join().expect("writer");
    }
    assert_eq!(
        Store::open(&db)
            .expect("open")
            .list_runs()
            .expect("list")
            .len(),
        4
    );
}

fn svg_count(html: &str) -> usize {
    html.matches("<svg").count()
}

#[test]
fn html_has_every_plot_the_tables_and_no_external_references() {
    let run = lab_run();
    let html = report_html(&run).expect("html");
    // Throughput and loss, then latency, CPU, IRQ/softirq and packets per softirq for
    // each of the two configurations.
    assert_eq!(svg_count(&html), 2 + 4 * 2);
    assert_eq!(html.matches("</svg>").count(), 10);
    // The maximum-throughput table with its numbers (capacity x 0.97).
    let max = &html[html.find("id=\"max-table\"").expect("max table")..];
    let max = &max[..max.find("</table>").expect("end")];
    assert!(
        max.contains("<td>one-core/softirq</td><td>max</td><td class=\"num\">0.100%</td><td class=\"num\">291,000</td>"),
        "{max}"
    );
    assert!(
        max.contains("<td>two-core/threaded</td><td>max</td><td class=\"num\">0.100%</td><td class=\"num\">436,500</td>"),
        "{max}"
    );
    assert!(max.contains("0.100%"));
    assert!(max.contains("converged"));
    // Findings with evidence and its source.
    assert!(html.contains("cpu0 softirq time is tick-sampled and reads low"));
    assert!(html.contains("IRQs fell while load rose on two-core/threaded"));
    assert!(html.contains("<code>cpu0.time.softirq</code>"));
    assert!(html.contains("softnet processed / net hard IRQs"));
    // CPU plots say they are tick-sampled; axes carry units.
    assert!(html.contains("cpu0 (tick-sampled)"));
    assert!(html.contains("offered load (pkt/s)"));
    assert!(html.contains("latency (us, log scale)"));
    // The saturated generator's point is highlighted.
    assert_eq!(html.matches("<tr class=\"bottleneck\">").count(), 1);
    // Notices and the scenario.
    assert!(html.contains("BPF tracepoints were not requested"));
    assert!(html.contains("name = &quot;synthetic-forwarding&quot;"));
    // Self-contained: no links or sources outside the file, no scripts.
    assert!(!html.contains("http"), "external reference");
    assert!(!html.contains("src="));
    assert!(!html.contains("<script"));
    assert!(!html.contains("<link"));
    assert!(html.contains("napilab lab report"));
}

/// The report's header names the host the run came from, and says so when an older
/// record has none; the store keeps the identity.
#[test]
fn the_header_has_the_host_line_and_the_store_keeps_it() {
    let mut run = lab_run();
    let html = report_html(&run).expect("html");
    assert!(
        html.contains("<tr><th>host</th><td>unknown (recorded before napilab kept the host identity)</td></tr>"),
        "no host row"
    );
    let mut id = napilab_core::HostIdentity::default();
    id.cpu.model_name = Some("AMD EPYC".into());
    id.cpu.microcode = Some("0x1000065".into());
    id.kernel.release = Some("6.18.44".into());
    id.virtualization.hypervisor = Some("KVM".into());
    run.host.identity = Some(id);
    let html = report_html(&run).expect("html");
    assert!(
        html.contains(
            "<tr><th>host</th><td>AMD EPYC (microcode 0x1000065), Linux 6.18.44, KVM</td></tr>"
        ),
        "no host summary"
    );
    let dir = scratch("host-identity");
    let db = dir.join("napilab.db");
    Store::open(&db)
        .expect("open")
        .insert_run(&run)
        .expect("insert");
    let back = Store::open(&db)
        .expect("reopen")
        .load_run(&run.run_id)
        .expect("load");
    assert_eq!(back.host.identity, run.host.identity);
}

#[test]
fn model_runs_render_with_twin_labels() {
    let run = SyntheticRun::new(RunKind::Model).build();
    let html = report_html(&run).expect("html");
    assert!(html.contains("napilab twin report"));
    assert!(html.contains("source: twin (model)"));
    assert!(html.contains("model (twin)"));
    assert!(!html.contains("napilab lab report"));
    assert_eq!(svg_count(&html), 10);
}

#[test]
fn runs_without_latency_or_observations_say_so_instead_of_plotting() {
    let mut run = lab_run();
    for conf in &mut run.configurations {
        for p in &mut conf.points {
            p.observation = None;
            for c in &mut p.classes {
                c.latency = None;
            }
        }
    }
    let html = report_html(&run).expect("html");
    assert_eq!(svg_count(&html), 2);
    assert!(html.contains("No latency was measured"));
    assert!(html.contains("No CPU time shares were observed."));
}

#[test]
fn csv_has_one_row_per_point_and_class() {
    let run = lab_run();
    let csv = points_csv(&run);
    let mut lines = csv.lines();
    let header = lines.next().expect("header");
    assert!(header.starts_with(
        "configuration,point,role,repeat,requested_pps,offered_pps,delivered_pps,loss,class,"
    ));
    assert!(header.contains("latency_p50_us,latency_p90_us,latency_p99_us,latency_p999_us"));
    assert!(header.ends_with(
        "cpu0_busy,cpu0_busy_source,cpu0_net_hardirqs_per_s,cpu0_net_rx_softirqs_per_s,\
         cpu0_packets_per_net_rx_softirq,cpu1_busy,cpu1_busy_source,cpu1_net_hardirqs_per_s,\
         cpu1_net_rx_softirqs_per_s,cpu1_packets_per_net_rx_softirq"
    ));
    let columns = header.split(',').count();
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    // 2 configurations x 7 points x 2 classes.
    assert_eq!(rows.len(), 28);
    assert!(rows.iter().all(|r| r.len() == columns));
    let col = |name: &str| header.split(',').position(|h| h == name).expect(name);
    // one-core/softirq at 400k: delivers 300k, 25% loss; rt row first.
    let row = &rows[6];
    assert_eq!(row[col("configuration")], "one-core/softirq");
    assert_eq!(row[col("requested_pps")], "400000");
    assert_eq!(row[col("delivered_pps")], "300000");
    assert_eq!(row[col("loss")], "0.25");
    assert_eq!(row[col("class")], "rt");
    assert_eq!(row[col("class_sent")], "800000");
    assert_eq!(row[col("cpu0_busy")], "1");
    assert_eq!(row[col("cpu0_busy_source")], "tick");
    assert_eq!(row[col("traffic_source")], "engine");
    let search = rows.iter().filter(|r| r[col("role")] == "search").count();
    assert_eq!(search, 2 * 2 * 2);
    let sweep_points = run.configurations[0]
        .points
        .iter()
        .filter(|p| p.role == PointRole::Sweep)
        .count();
    assert_eq!(sweep_points, 5);
}

#[test]
fn write_outputs_writes_files_and_stores_the_run() {
    let dir = scratch("outputs");
    let run = lab_run();
    let db = dir.join("db/napilab.db");
    let outputs = write_outputs(&run, &dir.join("out"), &db).expect("outputs");
    assert!(outputs.html.ends_with("out/report.html"));
    let html = std::fs::read_to_string(&outputs.html).expect("html");
    assert_eq!(svg_count(&html), 10);
    let json = std::fs::read_to_string(&outputs.json).expect("json");
    let back: RunRecord = serde_json::from_str(&json).expect("parse");
    assert!(back == run, "run.json differs from the run");
    let csv = std::fs::read_to_string(&outputs.csv).expect("csv");
    assert_eq!(csv.lines().count(), 29);
    let om = std::fs::read_to_string(&outputs.openmetrics).expect("openmetrics");
    assert!(om.ends_with("# EOF\n"));
    let stored = Store::open(&db)
        .expect("open")
        .load_run(&run.run_id)
        .expect("load");
    assert!(stored == run, "stored run differs");
}

#[test]
fn repeats_are_averaged_and_csv_quotes_names() {
    let mut builder = SyntheticRun::new(RunKind::Lab).repeats(3);
    builder.configurations[0].name = "one core, softirq".into();
    let run = builder.build();
    let csv = points_csv(&run);
    // 2 configurations x (5 loads x 3 repeats + 2 probes) x 2 classes, plus the header.
    assert_eq!(csv.lines().count(), 1 + 2 * 17 * 2);
    assert!(
        csv.contains("\n\"one core, softirq\",0,sweep,0,100000,"),
        "{csv}"
    );
    assert!(csv.contains("\n\"one core, softirq\",2,sweep,2,100000,"));
    let html = report_html(&run).expect("html");
    assert_eq!(svg_count(&html), 10);
    assert!(html.contains("one core, softirq"));
}

#[test]
fn traced_runs_show_measured_softirq_beside_proc_and_the_stage_profile() {
    let run = SyntheticRun::new(RunKind::Lab).traced().build();
    let html = report_html(&run).expect("html");
    // One more figure per configuration: softirq measured vs reported.
    assert_eq!(svg_count(&html), 2 + 5 * 2);
    assert!(html.contains("Softirq time, measured vs reported: one-core/softirq"));
    assert!(html.contains("cpu0 softirq measured (trace)"));
    assert!(html.contains("cpu0 softirq in /proc/stat"));
    let stages = &html[html.find("<h4>Stage profile</h4>").expect("stage profile")..];
    let stages = &stages[..stages.find("</table>").expect("end")];
    assert!(stages.contains("<td>driver rx</td>"), "{stages}");
    assert!(stages.contains("<td>ip forward</td>"), "{stages}");
    // Untraced runs have neither.
    let plain = report_html(&lab_run()).expect("html");
    assert!(!plain.contains("measured vs reported"));
    assert!(!plain.contains("Stage profile"));
}

#[test]
fn traced_points_store_measured_time_and_stage_rows() {
    let dir = scratch("traced-metrics");
    let run = SyntheticRun::new(RunKind::Lab).traced().build();
    let mut store = Store::open(&dir.join("napilab.db")).expect("open");
    store.insert_run(&run).expect("insert");
    let conn = store.connection();
    let row = |scope: &str, name: &str| -> (f64, String) {
        conn.query_row(
            "SELECT m.value, m.source FROM metrics m JOIN points p ON m.point_id = p.id
             WHERE p.position = 0 AND m.scope = ?1 AND m.name = ?2 LIMIT 1",
            [scope, name],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap_or_else(|e| panic!("{scope}.{name}: {e}"))
    };
    let measured = row("cpu0", "measured.softirq");
    let reported = row("cpu0", "time.softirq");
    assert_eq!(measured.1, "trace");
    assert_eq!(reported.1, "tick");
    assert!(measured.0 > reported.0, "{measured:?} vs {reported:?}");
    assert_eq!(row("stage:ip forward", "cpus").1, "sample");
}

#[test]
fn openmetrics_export_has_every_point_with_its_source_and_the_maxima() {
    let run = lab_run();
    let text = napilab_report::run_openmetrics(&run).expect("openmetrics");
    assert!(text.ends_with("# EOF\n"), "no EOF terminator");
    assert!(text.contains("# TYPE napilab_time_busy_cpu_fraction gauge"));
    // Every sample line names its run, configuration, point and source.
    let busy: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("napilab_time_busy_cpu_fraction{"))
        .collect();
    let points: usize = run.configurations.iter().map(|c| c.points.len()).sum();
    assert_eq!(busy.len(), points * 2, "one per point and CPU");
    assert!(busy
        .iter()
        .all(|l| l.contains("source=\"tick\"") && l.contains("run=\"20260101-120000-beef\"")));
    let max = text
        .lines()
        .find(|l| {
            l.starts_with("napilab_max_throughput_packets_per_second{")
                && l.contains("configuration=\"one-core/softirq\"")
        })
        .expect("max throughput sample");
    assert!(max.ends_with(" 291000.0"), "{max}");
}
