//! End-to-end tests of `napilab report` on a synthetic run.json.

use std::path::{Path, PathBuf};

use napilab_core::RunKind;
use napilab_report::synthetic::SyntheticRun;
use serde_json::Value;

fn napilab(args: &[&str]) -> std::process::Output {
    napilab_testkit::output_of(env!("CARGO_BIN_EXE_napilab"), args)
}

fn scratch(name: &str) -> PathBuf {
    napilab_testkit::scratch_dir(
        env!("CARGO_TARGET_TMPDIR"),
        &format!("napilab-report-cli-{name}"),
    )
}

fn s(path: &Path) -> &str {
    path.to_str().expect("utf-8 path")
}

fn write_run_json(dir: &Path, kind: RunKind, run_id: &str) -> PathBuf {
    let run = SyntheticRun::new(kind).run_id(run_id).build();
    let path = dir.join(format!("{run_id}.json"));
    std::fs::write(&path, serde_json::to_string(&run).expect("json")).expect("write run");
    path
}

#[test]
fn report_of_a_run_file_writes_the_files_and_stores_the_run() {
    let dir = scratch("file");
    let run_json = write_run_json(&dir, RunKind::Lab, "20260101-120000-beef");
    let db = dir.join("results/napilab.db");
    let out_dir = dir.join("out");
    let out = napilab(&[
        "report",
        s(&run_json),
        "--db",
        s(&db),
        "--out",
        s(&out_dir),
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).expect("json output");
    assert_eq!(v["run_id"], "20260101-120000-beef");
    for key in ["html", "csv", "json"] {
        let path = PathBuf::from(v[key].as_str().expect(key));
        assert!(path.starts_with(&out_dir), "{key}: {}", path.display());
        assert!(path.is_file(), "{key} missing: {}", path.display());
    }
    let html = std::fs::read_to_string(out_dir.join("report.html")).expect("html");
    assert_eq!(html.matches("<svg").count(), 10);
    assert!(html.contains("291,000"));
    let csv = std::fs::read_to_string(out_dir.join("points.csv")).expect("csv");
    assert!(csv.starts_with("configuration,point,role,"));
    assert!(db.is_file());

    // Re-render the stored run by id, to another directory, with the text output.
    let again = dir.join("again");
    let out = napilab(&[
        "report",
        "20260101-120000-beef",
        "--db",
        s(&db),
        "--out",
        s(&again),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("report.html"), "{text}");
    let rerendered = std::fs::read_to_string(again.join("report.html")).expect("html");
    assert_eq!(rerendered, html, "a stored run re-renders exactly");

    // The list names the run.
    let out = napilab(&["report", "--list", "--db", s(&db), "--json"]);
    assert!(out.status.success());
    let list: Value = serde_json::from_slice(&out.stdout).expect("list json");
    assert_eq!(list[0]["run_id"], "20260101-120000-beef");
    assert_eq!(list[0]["points"], 14);
    let out = napilab(&["report", "--list", "--db", s(&db)]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("20260101-120000-beef"), "{text}");
    assert!(text.contains("synthetic-forwarding"), "{text}");
}

#[test]
fn unknown_run_id_lists_the_known_ones() {
    let dir = scratch("unknown");
    let run_json = write_run_json(&dir, RunKind::Model, "20260101-130000-cafe");
    let db = dir.join("napilab.db");
    let out = napilab(&[
        "report",
        s(&run_json),
        "--db",
        s(&db),
        "--out",
        s(&dir.join("out")),
    ]);
    assert!(out.status.success());
    let html = std::fs::read_to_string(dir.join("out/report.html")).expect("html");
    assert!(html.contains("napilab twin report"));
    let out = napilab(&["report", "20991231-000000-0000", "--db", s(&db)]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no run 20991231-000000-0000"), "{err}");
    assert!(err.contains("20260101-130000-cafe"), "{err}");
    assert!(err.contains("--list"), "{err}");
}

#[test]
fn missing_store_and_bad_files_are_named() {
    let dir = scratch("missing");
    let db = dir.join("nowhere.db");
    let out = napilab(&["report", "20260101-120000-beef", "--db", s(&db)]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("nowhere.db"), "{err}");
    assert!(err.contains("napilab lab run"), "{err}");
    assert!(!db.exists(), "looking up a run must not create a store");

    let bad = dir.join("bad.json");
    std::fs::write(&bad, "{\"not\": \"a run\"}").expect("write");
    let out = napilab(&["report", s(&bad), "--db", s(&db)]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("bad.json"), "{err}");
    assert!(err.contains("not a napilab run record"), "{err}");

    let out = napilab(&["report", "--list", "--db", s(&db)]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("nowhere.db"), "{err}");
}
