//! `napilab map` on NAPI instances without a NAPI id (docs/cli.md, map; root): a 4-queue
//! TUN device opened with `IFF_NAPI | IFF_MULTI_QUEUE` (napilab's user-space tunnel
//! endpoint) in a fresh namespace `nl-tun-<pid>-<tag>-b`, fed by encrypting peers in
//! `-a`. netdev `napi-get` lists none of its instances; the map must show them from
//! their `napi/<dev>-0` kthreads when the device is threaded, and `map --trace` from
//! `napi:napi_poll`'s device. Prints `SKIPPED <name>: <reason>` when not root or when
//! BPF is unavailable (for the trace part).

use std::net::SocketAddrV4;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use napilab_lab::tunnel::endpoint::{
    Endpoint, EndpointConfig, DEFAULT_INNER_NET, DEFAULT_PORT, DEFAULT_SINK_PORT,
};
use napilab_lab::tunnel::peers::{self, PeersConfig};
use napilab_testkit::VethPair;
use serde_json::Value;

const SEED: [u8; 32] = [9; 32];
const DEV: &str = "nltunmap0";

struct Running {
    pair: VethPair,
    endpoint: Option<Endpoint>,
    stop: Arc<AtomicBool>,
    sender: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(s) = self.sender.take() {
            let _ = s.join();
        }
        drop(self.endpoint.take());
    }
}

/// The endpoint with 4 peers in the pair's `b`, and peers sending from `a` until stopped
/// (at most 20 s).
fn start(name: &str, tag: &str, threaded: bool) -> Option<Running> {
    let pair = match VethPair::create("nl-tun", tag, false) {
        Ok(p) => p,
        Err(e) => {
            println!("SKIPPED {name}: {e}");
            return None;
        }
    };
    let endpoint = Endpoint::start(EndpointConfig {
        netns: Some(pair.b.clone()),
        listen: SocketAddrV4::new([10, 77, 0, 2].into(), DEFAULT_PORT),
        peers: 4,
        workers: 2,
        worker_cpus: vec![0, 1],
        receiver_cpu: None,
        tun_name: DEV.into(),
        inner_net: DEFAULT_INNER_NET,
        threaded,
        key_seed: SEED,
        sink_port: Some(DEFAULT_SINK_PORT),
    })
    .expect("the tunnel endpoint starts");
    let stop = Arc::new(AtomicBool::new(false));
    let cfg = PeersConfig {
        netns: Some(pair.a.clone()),
        endpoint: endpoint.listen_addr(),
        peers: 4,
        threads: 1,
        cpus: vec![],
        rate_pps: Some(2_000.0),
        duration: Duration::from_secs(20),
        payload: 64,
        inner_net: DEFAULT_INNER_NET,
        inner_port: DEFAULT_SINK_PORT,
        key_seed: SEED,
        corrupt_every: 0,
    };
    let sender = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let _ = peers::run(&cfg, &stop);
        })
    };
    std::thread::sleep(Duration::from_millis(500));
    Some(Running {
        pair,
        endpoint: Some(endpoint),
        stop,
        sender: Some(sender),
    })
}

fn map(r: &Running, args: &[&str]) -> Value {
    let out = r
        .pair
        .command(&r.pair.b, env!("CARGO_BIN_EXE_napilab"))
        .arg("map")
        .args(args)
        .arg("--json")
        .output()
        .expect("run napilab map");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("map JSON")
}

fn tun_napis(map: &Value) -> Vec<Value> {
    map["topology"]["devices"]
        .as_array()
        .expect("devices")
        .iter()
        .find(|d| d["name"] == DEV)
        .unwrap_or_else(|| panic!("{DEV} in the map: {map:#}"))["napis"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

fn observed(napis: &[Value]) -> Vec<Value> {
    napis
        .iter()
        .flat_map(|n| {
            n["observed_polling"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .collect()
}

#[test]
fn map_shows_threaded_id_less_tun_instances_from_their_kthreads() {
    let name = "map_shows_threaded_id_less_tun_instances_from_their_kthreads";
    let Some(r) = start(name, "kt", true) else {
        return;
    };
    let napis = tun_napis(&map(&r, &[]));
    let threads: Vec<&Value> = napis
        .iter()
        .filter(|n| n["poller"]["kind"] == "thread")
        .collect();
    assert_eq!(
        threads.len(),
        4,
        "one instance per queue, each with its kthread: {napis:#?}"
    );
    let mut pids: Vec<u64> = threads
        .iter()
        .map(|n| n["poller"]["pid"].as_u64().expect("pid"))
        .collect();
    pids.sort_unstable();
    pids.dedup();
    assert_eq!(pids.len(), 4, "four distinct kthreads: {pids:?}");
    for n in &threads {
        assert_eq!(n["id"], 0, "the kernel gave them no NAPI id");
        assert_eq!(n["poller"]["name"], format!("napi/{DEV}-0"));
    }

    let traced = map(&r, &["--trace", "--for", "1s"]);
    let seen = observed(&tun_napis(&traced));
    if seen.is_empty() && traced["notices"].to_string().contains("trace") {
        println!(
            "SKIPPED {name} (trace part): no trace data: {}",
            traced["notices"]
        );
        return;
    }
    assert!(
        seen.iter().any(
            |o| o["context"] == "napi_thread" && o["polls_per_s"]["value"].as_f64() > Some(0.0)
        ),
        "{DEV}'s instances not seen polled by their kthreads: {seen:#?}"
    );
}

#[test]
fn map_trace_shows_softirq_tun_polls_at_the_writers_bh_enable() {
    let name = "map_trace_shows_softirq_tun_polls_at_the_writers_bh_enable";
    let Some(r) = start(name, "bh", false) else {
        return;
    };
    let traced = map(&r, &["--trace", "--for", "1s"]);
    let napis = tun_napis(&traced);
    let seen = observed(&napis);
    if seen.is_empty() && traced["notices"].to_string().contains("trace") {
        println!("SKIPPED {name}: no trace data: {}", traced["notices"]);
        return;
    }
    // Not threaded: no kthreads, so only the trace tier's entry.
    assert!(
        napis.iter().all(|n| n["poller"]["kind"] != "thread"),
        "{napis:#?}"
    );
    assert!(
        seen.iter()
            .any(|o| o["context"] == "bh_enable" && o["polls_per_s"]["value"].as_f64() > Some(0.0)),
        "{DEV}'s polls at the decryption workers' bottom-half enable not seen: {seen:#?}"
    );
}
