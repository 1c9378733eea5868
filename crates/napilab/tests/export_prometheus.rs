//! `napilab export` against the distribution's real Prometheus (root; Debian packages
//! `prometheus` and `prometheus-node-exporter`, installed by `make deps`).
//!
//! The exporter and Prometheus run inside the receiving namespace of a fresh veth pair,
//! both on that namespace's loopback, so nothing listens on the host. A known number of
//! packets crosses the pair; PromQL over Prometheus' HTTP API must count them exactly,
//! show the per-NAPI poll series and a finding; promtool checks the shipped rules and a
//! scrape; every expression of the shipped dashboard and rules must parse on the server
//! and name only metrics the exporter served. A second test hammers the exporter with 50
//! concurrent scrapers. Every process and namespace is removed on drop, also on failure.

use std::collections::BTreeSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

use napilab_testkit::VethPair;
use serde_json::Value;

mod common;
use common::*;

const PACKETS: u64 = 20_000;
const EXPORTER: &str = "127.0.0.1:9977";
const PROMETHEUS: &str = "127.0.0.1:9090";

/// A temporary directory removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!("napilab-export-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create temp dir");
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn has_program(name: &str) -> bool {
    Command::new(name)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok()
}

/// One HTTP/1.0 GET (no chunking, the server closes): (status, content type, body).
/// Hand-written: a few lines, where an HTTP client crate would add a dependency tree to
/// the test build; it must run on a thread inside the namespace (see `in_netns`).
fn http_get(
    addr: &str,
    path: &str,
    accept: Option<&str>,
) -> std::io::Result<(u16, String, String)> {
    let addr = addr.parse().map_err(std::io::Error::other)?;
    let accept = accept
        .map(|a| format!("Accept: {a}\r\n"))
        .unwrap_or_default();
    let (status, head, body) = exchange(addr, path, &accept, Duration::from_secs(10))?;
    let header = |name: &str| {
        head.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case(name).then(|| v.trim().to_string())
        })
    };
    let content_type = header("content-type").unwrap_or_default();
    if let Some(length) = header("content-length").and_then(|v| v.parse::<usize>().ok()) {
        if length != body.len() {
            return Err(std::io::Error::other(format!(
                "truncated body: {} of {length} bytes",
                body.len()
            )));
        }
    }
    Ok((status, content_type, body))
}

fn percent_encode(text: &str) -> String {
    text.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// A PromQL instant query in namespace `ns`: the whole API answer.
fn promql(ns: &str, query: &str) -> Value {
    let path = format!("/api/v1/query?query={}", percent_encode(query));
    in_netns(ns, move || {
        let (_, _, body) = http_get(PROMETHEUS, &path, None).expect("query Prometheus");
        serde_json::from_str(&body).unwrap_or_else(|e| panic!("Prometheus answered {body:?}: {e}"))
    })
}

/// The single value of an instant query, or None when the result is empty.
fn scalar(ns: &str, query: &str) -> Option<f64> {
    let answer = promql(ns, query);
    assert_eq!(answer["status"], "success", "{query}: {answer}");
    let result = answer["data"]["result"].as_array()?;
    let first = result.first()?;
    first["value"][1].as_str()?.parse().ok()
}

fn repo_file(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(rel)
}

fn start_exporter(pair: &VethPair, args: &[&str]) -> Running {
    let ns = pair.b.clone();
    spawn_exporter(
        pair.command(&pair.b, env!("CARGO_BIN_EXE_napilab"))
            .arg("export")
            .args(args),
        || {
            in_netns(&ns, || {
                http_get(EXPORTER, "/healthz", None).is_ok_and(|(s, _, _)| s == 200)
            })
        },
    )
}

fn flood(pair: &VethPair, count: u64) -> String {
    let ping = pair
        .command(&pair.a, "ping")
        .args(["-q", "-f", "-c", &count.to_string(), "-w", "8", "10.77.0.2"])
        .output()
        .expect("ping (apt package iputils-ping; make deps installs it)");
    String::from_utf8_lossy(&ping.stdout).into_owned()
}

/// Metric names in a PromQL expression that belong to the exporter (node_* or napilab_*;
/// recording-rule names contain ':' and are not exporter metrics).
fn exporter_names(expr: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut current = String::new();
    let mut in_string = false;
    for c in expr.chars().chain(std::iter::once(' ')) {
        if c == '"' {
            in_string = !in_string;
            current.clear();
            continue;
        }
        if in_string {
            continue;
        }
        if c.is_ascii_alphanumeric() || c == '_' || c == ':' {
            current.push(c);
        } else {
            if (current.starts_with("node_") || current.starts_with("napilab_"))
                && !current.contains(':')
            {
                names.insert(current.clone());
            }
            current.clear();
        }
    }
    names
}

fn dashboard_expressions() -> Vec<String> {
    let text =
        std::fs::read_to_string(repo_file("contrib/grafana/napilab.json")).expect("dashboard");
    let dashboard: Value = serde_json::from_str(&text).expect("the dashboard is JSON");
    let mut exprs = Vec::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        for target in panel["targets"].as_array().expect("targets") {
            exprs.push(target["expr"].as_str().expect("expr").to_string());
        }
    }
    if let Some(vars) = dashboard["templating"]["list"].as_array() {
        for var in vars {
            if let Some(q) = var["query"]["query"].as_str() {
                // label_values(METRIC, label) is Grafana's, not PromQL: check the metric.
                if let Some(metric) = q
                    .strip_prefix("label_values(")
                    .and_then(|r| r.split(',').next())
                {
                    exprs.push(metric.trim().to_string());
                }
            }
        }
    }
    exprs
}

fn rule_expressions() -> Vec<String> {
    let text =
        std::fs::read_to_string(repo_file("contrib/prometheus/napilab.rules.yml")).expect("rules");
    // The expressions are the `expr:` values, single-line or `|` blocks.
    let mut exprs = Vec::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        let Some((indent, rest)) = line.split_once("expr:") else {
            continue;
        };
        let rest = rest.trim();
        if rest != "|" {
            exprs.push(rest.to_string());
            continue;
        }
        let mut block = String::new();
        while let Some(next) = lines.peek() {
            if next.len() - next.trim_start().len() <= indent.len() || next.trim().is_empty() {
                break;
            }
            block.push_str(next.trim());
            block.push(' ');
            lines.next();
        }
        exprs.push(block);
    }
    exprs
}

#[test]
fn prometheus_scrapes_counted_packets_napi_polls_and_findings() {
    let name = "prometheus_scrapes_counted_packets_napi_polls_and_findings";
    for program in ["prometheus", "promtool"] {
        if !has_program(program) {
            eprintln!("SKIPPED {name}: `{program}` is not installed (Debian package prometheus; make deps installs it)");
            return;
        }
    }
    let pair = match VethPair::create("napilab-test", "exp", false) {
        Ok(p) => p,
        Err(why) => {
            eprintln!("SKIPPED {name}: {why}");
            return;
        }
    };
    let dir = TempDir::new("prom");
    let rules = repo_file("contrib/prometheus/napilab.rules.yml");
    let config = dir.0.join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files:\n  - {}\nscrape_configs:\n  - job_name: napilab\n    static_configs:\n      - targets: ['{EXPORTER}']\n",
            rules.display()
        ),
    )
    .expect("write prometheus.yml");

    let _exporter = start_exporter(&pair, &["--trace", "--interval", "500ms"]);
    let prometheus = pair
        .command(&pair.b, "prometheus")
        .arg(format!("--config.file={}", config.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.0.join("data").display()
        ))
        .arg(format!("--web.listen-address={PROMETHEUS}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start prometheus");
    let _prometheus = Running(prometheus, "prometheus");
    wait_for("Prometheus to be ready", Duration::from_secs(30), || {
        in_netns(&pair.b, || {
            http_get(PROMETHEUS, "/-/ready", None).is_ok_and(|(s, _, _)| s == 200)
        })
    });
    wait_for(
        "a successful scrape of napilab",
        Duration::from_secs(20),
        || {
            scalar(&pair.b, "up{job=\"napilab\"}") == Some(1.0)
                && scalar(&pair.b, "node_network_receive_packets_total{device=\"vb\"}").is_some()
        },
    );
    let before = scalar(&pair.b, "node_network_receive_packets_total{device=\"vb\"}");

    let ping = flood(&pair, PACKETS);
    assert!(
        ping.contains(&format!("{PACKETS} received")),
        "ping lost packets: {ping}"
    );
    // The exporter samples every 500 ms and Prometheus scrapes every second.
    sleep(Duration::from_secs(3));

    // Counted packets: exactly what crossed the pair, through the whole chain.
    let counted = scalar(
        &pair.b,
        "max_over_time(node_network_receive_packets_total{device=\"vb\"}[5m]) - min_over_time(node_network_receive_packets_total{device=\"vb\"}[5m])",
    );
    assert_eq!(
        counted,
        Some(PACKETS as f64),
        "before the flood: {before:?}"
    );
    let sent = scalar(
        &pair.b,
        "max_over_time(node_network_transmit_packets_total{device=\"vb\"}[5m]) - min_over_time(node_network_transmit_packets_total{device=\"vb\"}[5m])",
    );
    assert_eq!(sent, Some(PACKETS as f64));

    // The per-NAPI poll series of vb's instance, with the map's labels.
    let info = promql(&pair.b, "napilab_napi_info{device=\"vb\"}");
    let map_id = info["data"]["result"][0]["metric"]["napi_id"].clone();
    assert!(
        map_id.is_string(),
        "vb's NAPI instance missing from the map: {info}"
    );
    let map_id = map_id.as_str().expect("napi_id").to_string();
    // Other tests' namespaces may have a `vb` too: select this pair's instance by id.
    let polls = promql(
        &pair.b,
        &format!("napilab_napi_polls_total{{napi_id=\"{map_id}\"}}"),
    );
    let series = polls["data"]["result"].as_array().expect("result");
    assert!(
        !series.is_empty(),
        "no per-NAPI poll series for vb: {polls}"
    );
    for s in series {
        let labels = &s["metric"];
        assert_eq!(labels["source"], "trace", "{s}");
        assert_eq!(labels["device"], "vb", "{s}");
        assert_eq!(labels["netns"], "own", "{s}");
        assert!(labels["context"].as_str().is_some(), "{s}");
    }
    let polled = scalar(
        &pair.b,
        &format!("sum(max_over_time(napilab_napi_polls_total{{napi_id=\"{map_id}\"}}[5m]))"),
    )
    .expect("polls");
    let napi_packets = scalar(
        &pair.b,
        &format!("sum(max_over_time(napilab_napi_packets_total{{napi_id=\"{map_id}\"}}[5m]))"),
    )
    .expect("packets");
    assert!(polled > 0.0, "polls {polled}");
    // Every echo request entered vb through its NAPI instance (veth with GRO on).
    assert!(
        napi_packets >= PACKETS as f64,
        "NAPI packets {napi_packets} < {PACKETS}"
    );
    assert_eq!(
        scalar(
            &pair.b,
            &format!("count(napilab_napi_packets_per_poll_bucket{{napi_id=\"{map_id}\"}})")
        ),
        Some(9.0),
        "packets-per-poll histogram buckets"
    );

    // A finding: vb answered the flood without an egress qdisc.
    assert_eq!(
        scalar(
            &pair.b,
            "max_over_time(napilab_finding{rule=\"egress_without_qdisc\",subject=\"vb\"}[5m])"
        ),
        Some(1.0)
    );
    assert_eq!(scalar(&pair.b, "napilab_exporter_trace_active"), Some(1.0));

    // The shipped rules loaded into this server and evaluated without errors.
    let rules_api = in_netns(&pair.b, || {
        http_get(PROMETHEUS, "/api/v1/rules", None)
            .expect("rules API")
            .2
    });
    let rules_api: Value = serde_json::from_str(&rules_api).expect("rules JSON");
    let groups = rules_api["data"]["groups"].as_array().expect("groups");
    let mut loaded = 0;
    for group in groups {
        for rule in group["rules"].as_array().expect("rules") {
            loaded += 1;
            assert_ne!(rule["health"], "err", "{rule}");
        }
    }
    assert_eq!(loaded, 11, "{rules_api}");

    // promtool on the shipped rules and on a scrape in the text format.
    let check = Command::new("promtool")
        .args(["check", "rules"])
        .arg(&rules)
        .output()
        .expect("promtool");
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stdout)
    );
    let (status, content_type, scrape) = in_netns(&pair.b, || {
        http_get(EXPORTER, "/metrics", Some("text/plain")).expect("scrape")
    });
    assert_eq!(status, 200);
    assert!(
        content_type.starts_with("text/plain; version=0.0.4"),
        "{content_type}"
    );
    let mut promtool = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool");
    promtool
        .stdin
        .take()
        .expect("stdin")
        .write_all(scrape.as_bytes())
        .expect("feed promtool");
    let linted = promtool.wait_with_output().expect("promtool output");
    assert!(
        linted.status.success(),
        "promtool check metrics: {}{}",
        String::from_utf8_lossy(&linted.stdout),
        String::from_utf8_lossy(&linted.stderr)
    );
    let (_, om_type, om) = in_netns(&pair.b, || {
        http_get(
            EXPORTER,
            "/metrics",
            Some("application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5"),
        )
        .expect("scrape")
    });
    assert!(
        om_type.starts_with("application/openmetrics-text"),
        "{om_type}"
    );
    assert!(om.trim_end().ends_with("# EOF"));

    // Dashboard and rules: every expression parses on this server and names only
    // metrics the exporter served.
    let served: BTreeSet<String> = {
        let answer = in_netns(&pair.b, || {
            http_get(PROMETHEUS, "/api/v1/label/__name__/values", None)
                .expect("names")
                .2
        });
        let answer: Value = serde_json::from_str(&answer).expect("names JSON");
        answer["data"]
            .as_array()
            .expect("names")
            .iter()
            .filter_map(|v| v.as_str().map(str::to_string))
            .collect()
    };
    let dashboard = dashboard_expressions();
    assert!(dashboard.len() >= 15, "{dashboard:?}");
    for expr in dashboard.iter().chain(&rule_expressions()) {
        let query = expr
            .replace("$__rate_interval", "1m")
            .replace("$instance", ".*");
        let answer = promql(&pair.b, &query);
        assert_eq!(answer["status"], "success", "{query}: {answer}");
        for metric in exporter_names(&query) {
            assert!(
                served.contains(&metric),
                "{metric} (in {expr}) is not a metric napilab export served"
            );
        }
    }
}

#[test]
fn fifty_concurrent_scrapes_get_complete_consistent_answers_while_devices_churn() {
    let name = "fifty_concurrent_scrapes_get_complete_consistent_answers_while_devices_churn";
    let pair = match VethPair::create("napilab-test", "exc", false) {
        Ok(p) => p,
        Err(why) => {
            eprintln!("SKIPPED {name}: {why}");
            return;
        }
    };
    let mut exporter = start_exporter(&pair, &["--trace", "--interval", "500ms"]);
    // (samples taken, Unix time of the last one), from one scrape.
    let samples_now = |ns: &str| -> (f64, f64) {
        let (_, _, body) = in_netns(ns, || http_get(EXPORTER, "/metrics", None).expect("scrape"));
        (
            counter(&body, "napilab_exporter_samples_total").expect("samples counter"),
            counter(&body, "napilab_exporter_last_sample_timestamp_seconds").expect("timestamp"),
        )
    };
    // A loaded host: a flood across the pair for the whole run (bounded by ping -w).
    let load = pair
        .command(&pair.a, "ping")
        .args(["-q", "-f", "-w", "12", "10.77.0.2"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("ping");
    let _load = Running(load, "ping");
    // Devices appearing and vanishing while it samples (and while the map is re-read).
    let churn_ns = pair.b.clone();
    let churn = std::thread::spawn(move || {
        for _ in 0..20 {
            let _ = Command::new("ip")
                .args(["netns", "exec", &churn_ns, "sh", "-c"])
                .arg("ip link add vx type veth peer name vy && ip link set vx up && sleep 0.2; ip link del vx")
                .status();
            sleep(Duration::from_millis(200));
        }
    });
    let samples_before = samples_now(&pair.b);
    let run = Duration::from_secs(10);
    let started = Instant::now();
    let scrapers: Vec<_> = (0..50)
        .map(|i| {
            let ns = pair.b.clone();
            std::thread::spawn(move || {
                in_netns(&ns, move || {
                    let accept =
                        (i % 2 == 0).then_some("application/openmetrics-text;version=1.0.0");
                    let (mut answers, mut last_processed) = (0u64, 0.0f64);
                    let end = Instant::now() + run;
                    while Instant::now() < end {
                        let (status, _, body) = http_get(EXPORTER, "/metrics", accept)
                            .unwrap_or_else(|e| panic!("scraper {i}: {e}"));
                        assert_eq!(status, 200, "scraper {i}");
                        // Complete: the last family is there (and OpenMetrics' # EOF).
                        assert!(
                            body.contains(
                                "napilab_exporter_series_dropped_total{family=\"device\"}"
                            ),
                            "scraper {i}: incomplete body"
                        );
                        if accept.is_some() {
                            assert!(body.trim_end().ends_with("# EOF"), "scraper {i}");
                        }
                        // Consistent: counters never go back between one scraper's answers.
                        let processed: f64 = body
                            .lines()
                            .filter(|l| l.starts_with("node_softnet_processed_total{"))
                            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                            .sum();
                        assert!(
                            processed >= last_processed,
                            "scraper {i}: softnet went back"
                        );
                        last_processed = processed;
                        answers += 1;
                    }
                    answers
                })
            })
        })
        .collect();
    let answers: u64 = scrapers
        .into_iter()
        .map(|s| s.join().expect("scraper thread"))
        .sum();
    let elapsed = started.elapsed().as_secs_f64();
    churn.join().expect("device churn thread");
    let samples_after = samples_now(&pair.b);
    let healthy = in_netns(&pair.b, || {
        http_get(EXPORTER, "/healthz", None).map(|(s, _, _)| s)
    });
    assert_eq!(
        healthy.ok(),
        Some(200),
        "the exporter is not healthy after the churn"
    );
    let (taken, span) = (
        samples_after.0 - samples_before.0,
        samples_after.1 - samples_before.1,
    );
    eprintln!(
        "{answers} complete answers to 50 scrapers in {elapsed:.1} s; the sampler took {taken} samples in {span:.1} s"
    );
    assert!(answers >= 50, "{answers}");
    // The sampler kept its schedule (one sample per 500 ms) under the scrape storm:
    // not starved, and not sampling back to back to catch up.
    let expected = span / 0.5;
    assert!(
        taken >= 0.8 * expected && taken <= 1.2 * expected + 1.0,
        "sampler off schedule: {taken} samples in {span:.1} s"
    );
    // SIGTERM: a clean stop (status 0) after detaching the BPF programs.
    let stopped = exporter.terminate();
    assert!(
        stopped.is_some_and(|s| s.success()),
        "napilab export did not stop cleanly on SIGTERM: {stopped:?}"
    );
}

/// The value of an unlabelled sample in a text exposition.
fn counter(body: &str, name: &str) -> Option<f64> {
    body.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

/// Bad input is refused before anything listens (no root, no network needed).
#[test]
fn refuses_bad_input_before_listening() {
    let run = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_napilab"))
            .arg("export")
            .args(args)
            .output()
            .expect("run napilab export");
        assert!(!out.status.success(), "{args:?} was accepted");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let remote = run(&["--listen", "0.0.0.0:9977"]);
    assert!(remote.contains("--allow-remote"), "{remote}");
    let garbled = run(&["--listen", "localhost"]);
    assert!(
        garbled.contains("--listen") && garbled.contains("address:port"),
        "{garbled}"
    );
    let short = run(&["--interval", "10ms"]);
    assert!(short.contains("100ms"), "{short}");
    let dir = TempDir::new("cfg");
    let missing = dir.0.join("absent.toml");
    let absent = run(&["--config", missing.to_str().expect("utf-8")]);
    assert!(absent.contains("absent.toml"), "{absent}");
    let bad = dir.0.join("bad.toml");
    std::fs::write(&bad, "interval = \"soon\"\n").expect("write config");
    let wrong = run(&["--config", bad.to_str().expect("utf-8")]);
    assert!(
        wrong.contains("bad.toml") && wrong.contains("interval"),
        "{wrong}"
    );
}
