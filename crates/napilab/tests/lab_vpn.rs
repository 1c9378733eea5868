//! `napilab lab run` on the vpn topology (docs/lab.md): 4 peers through napilab's
//! user-space tunnel endpoint into an IFF_NAPI multi-queue TUN device, softirq and
//! threaded NAPI, with the trace tier. The datagrams arrive decrypted, the loss is
//! decomposed, kernel WireGuard's availability is reported, and the TUN's polls run
//! where the context says: at bottom-half enable (in the decryption workers) in softirq
//! mode, in NAPI kthreads in threaded mode. Needs root; skipped with the reason printed
//! otherwise.

use std::process::Command;

use serde_json::Value;

fn vpn_scenario() -> String {
    String::from(
        r#"
name = "vpn-short"
[topology]
kind = "vpn"
[dut]
generator_cpus = [0]
server_cpus = [0, 1]
[tunnel]
peers = 4
loads_pps = [1500]
[measurement]
duration_s = 1.0
warmup_s = 2.0
drain_ms = 200
trace = "always"
"#,
    ) + &napilab_testkit::configurations(&[
        ("softirq", r#"napi = "softirq""#),
        ("threaded", r#"napi = "threaded""#),
    ])
}

/// Polls of `dev`'s NAPI instances per context over the point's Observation.
fn polls_by_context(point: &Value, dev: &str) -> Vec<(String, u64)> {
    let mut out: Vec<(String, u64)> = Vec::new();
    for i in point["observation"]["intervals"]
        .as_array()
        .into_iter()
        .flatten()
    {
        for n in i["trace"]["napi"].as_array().into_iter().flatten() {
            if n["device"] != dev {
                continue;
            }
            let ctx = n["context"].as_str().unwrap_or("?").to_string();
            let polls = n["polls"].as_u64().unwrap_or(0);
            match out.iter_mut().find(|(c, _)| *c == ctx) {
                Some(e) => e.1 += polls,
                None => out.push((ctx, polls)),
            }
        }
    }
    out
}

#[test]
fn vpn_points_are_decrypted_and_polled_where_the_context_says() {
    if !napilab_testkit::root_or_skip(
        "vpn_points_are_decrypted_and_polled_where_the_context_says",
        "needs root for namespaces, TUN and BPF",
    ) {
        return;
    }
    if !std::path::Path::new("/dev/net/tun").exists() {
        println!("SKIPPED vpn_points_are_decrypted_and_polled_where_the_context_says: no /dev/net/tun (CONFIG_TUN)");
        return;
    }
    let dir = napilab_testkit::scratch_dir(env!("CARGO_TARGET_TMPDIR"), "napilab-lab-vpn");
    let scenario = dir.join("vpn-short.toml");
    std::fs::write(&scenario, vpn_scenario()).expect("scenario");
    let record = napilab_testkit::stdout_json(
        Command::new(env!("CARGO_BIN_EXE_napilab"))
            .args(["lab", "run", "--json", "--out"])
            .arg(&dir)
            .arg(&scenario),
    );
    let run_id = record["run_id"].as_str().expect("run id").to_string();
    for (c, want) in record["configurations"]
        .as_array()
        .expect("configurations")
        .iter()
        .zip(["bh_enable", "napi_thread"])
    {
        let name = c["name"].as_str().unwrap_or("?");
        let setting = |k: &str| {
            c["settings"]
                .as_array()
                .and_then(|s| s.iter().find(|kv| kv[0] == k))
                .and_then(|kv| kv[1].as_str())
                .map(str::to_string)
        };
        assert!(
            setting("kernel wireguard").is_some(),
            "{name}: {}",
            c["settings"]
        );
        let tun = setting("tun_device").expect("tun_device setting");
        let p = &c["points"][0];
        let class = &p["classes"][0];
        let (sent, received) = (
            class["sent"].as_u64().unwrap_or(0),
            class["received"].as_u64().unwrap_or(0),
        );
        assert!(
            sent > 0 && received as f64 >= 0.95 * sent as f64,
            "{name}: {class}"
        );
        let polls = polls_by_context(p, &tun);
        let total: u64 = polls.iter().map(|(_, n)| n).sum();
        let in_context = polls.iter().find(|(c, _)| c == want).map_or(0, |(_, n)| *n);
        assert!(
            total > 0 && in_context as f64 >= 0.8 * total as f64,
            "{name}: TUN polls by context {polls:?}, want most in {want}; {} of {} intervals traced; notices {}; devices polled {:?}",
            p["observation"]["intervals"]
                .as_array()
                .map_or(0, |i| i.iter().filter(|i| !i["trace"].is_null()).count()),
            p["observation"]["intervals"].as_array().map_or(0, Vec::len),
            p["observation"]["notices"],
            p["observation"]["intervals"]
                .as_array()
                .into_iter()
                .flatten()
                .flat_map(|i| i["trace"]["napi"].as_array().cloned().unwrap_or_default())
                .map(|n| n["device"].to_string())
                .collect::<std::collections::BTreeSet<_>>()
        );
    }
    let left = Command::new("ip")
        .args(["netns", "list"])
        .output()
        .expect("ip");
    let left = String::from_utf8_lossy(&left.stdout);
    assert!(!left.contains(&run_id), "namespaces left: {left}");
}
