//! The exporter soak's verdict (`bench/soak-export.py --report CSV`, docs/export.md): RSS
//! that breathes in a band with a late allocator step is flat; a steady leak in RSS, or in
//! the live heap alone, is not. The soak itself runs for hours (`make soak-export`); this
//! pins the judgement it ends with on synthetic two-hour records.

use std::path::Path;
use std::process::Command;

const HEADER: &str = "t_s,exporter,rss_bytes,rss_anon_bytes,rss_file_bytes,cpu_s_per_s,\
scrapes_ok,scrape_errors,series,devices,heap_allocated_bytes";

/// Two hours, one row every 5 s, RSS and live heap from the given functions of time.
fn soak_csv(
    rss: impl Fn(f64) -> f64,
    heap: impl Fn(f64) -> f64,
    scrape_errors_at: Option<u32>,
) -> String {
    let mut csv = format!("{HEADER}\n");
    for t in (0..7200).step_by(5) {
        let errors = u32::from(scrape_errors_at == Some(t));
        let (rss, heap) = (rss(f64::from(t)) as u64, heap(f64::from(t)) as u64);
        csv.push_str(&format!(
            "{t},1s,{rss},2000000,9000000,0.01,50,{errors},300,2,{heap}\n"
        ));
    }
    csv
}

/// Runs the verdict on `csv`; returns its exit code and its summary line.
fn judge(name: &str, csv: &str) -> (i32, String) {
    if Command::new("python3").arg("--version").output().is_err() {
        panic!("python3 is not installed: `make deps` installs it (the soak is a Python script)");
    }
    let dir =
        napilab_testkit::scratch_dir(env!("CARGO_TARGET_TMPDIR"), &format!("soak-verdict-{name}"));
    let path = dir.join("soak.csv");
    std::fs::write(&path, csv).expect("write the synthetic soak record");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bench/soak-export.py");
    let out = Command::new("python3")
        .arg(script)
        .arg("--report")
        .arg(&path)
        .args(["--plot-bin", "/nonexistent"])
        .output()
        .expect("run bench/soak-export.py");
    let summary = std::fs::read_to_string(dir.join("summary.txt")).unwrap_or_default();
    (out.status.code().unwrap_or(-1), summary)
}

#[test]
fn a_band_with_a_late_step_is_flat() {
    // 11.4 MB breathing +-100 KB with a 15-minute period, and a 200 KB step in the
    // last 7 minutes (what run 6 showed); the live heap breathes +-30 KB.
    let (code, summary) = judge(
        "band",
        &soak_csv(
            |t| 11.4e6 + 100e3 * (t / 900.0).sin() + if t > 6800.0 { 200e3 } else { 0.0 },
            |t| 650e3 + 30e3 * (t / 700.0).sin(),
            None,
        ),
    );
    assert_eq!(code, 0, "{summary}");
    assert!(summary.contains(": flat after warm-up"), "{summary}");
}

#[test]
fn a_steady_rss_leak_is_not_flat() {
    // 100 KB/h on 11.4 MB is 21% a day, over the 5% limit.
    let (code, summary) = judge(
        "rss-leak",
        &soak_csv(|t| 11.4e6 + t * 100e3 / 3600.0, |_| 650e3, None),
    );
    assert_eq!(code, 2, "{summary}");
    assert!(summary.contains("NOT flat after warm-up"), "{summary}");
}

#[test]
fn a_live_heap_leak_fails_even_when_rss_is_flat() {
    // The allocator may hide a leak in pages it already holds; the live heap does not.
    let (code, summary) = judge(
        "heap-leak",
        &soak_csv(|_| 11.4e6, |t| 650e3 + t * 20e3 / 3600.0, None),
    );
    assert_eq!(code, 2, "{summary}");
    assert!(summary.contains("NOT flat after warm-up"), "{summary}");
}

#[test]
fn growth_in_the_warm_up_does_not_count() {
    // 1 MB in the first 10 minutes (page-in, first scrapes), then flat.
    let (code, summary) = judge(
        "warm-up",
        &soak_csv(|t| 10.4e6 + (t.min(600.0) / 600.0) * 1e6, |_| 650e3, None),
    );
    assert_eq!(code, 0, "{summary}");
}

#[test]
fn one_failed_scrape_fails_the_soak() {
    let (code, summary) = judge("scrape-error", &soak_csv(|_| 11.4e6, |_| 650e3, Some(3600)));
    assert_eq!(code, 2, "{summary}");
    assert!(summary.contains("1 failed"), "{summary}");
}
