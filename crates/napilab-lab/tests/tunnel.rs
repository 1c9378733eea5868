//! Root integration tests of the user-space tunnel endpoint (docs/lab.md), in fresh
//! namespaces `nl-tun-<pid>-<tag>-a` (the peers, 10.77.0.1) and `-b` (the DUT with the
//! endpoint, 10.77.0.2) from napilab-testkit. Without root each test prints
//! `SKIPPED <name>: <reason>`.

use std::net::{SocketAddrV4, UdpSocket};
use std::process::Command;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use napilab_lab::tunnel::detect::{self, EndpointKind};
use napilab_lab::tunnel::endpoint::{
    self, Endpoint, EndpointConfig, DEFAULT_INNER_NET, DEFAULT_SINK_PORT,
};
use napilab_lab::tunnel::peers::{self, PeersConfig, PeersStats};
use napilab_lab::tunnel::wire::{PeerCipher, HEADER_LEN};
use napilab_testkit::VethPair;

const SEED: [u8; 32] = [0x42; 32];
const DUT_IP: &str = "10.77.0.2";

fn pair(name: &str, tag: &str) -> Option<VethPair> {
    match VethPair::create("nl-tun", tag, false) {
        Ok(p) => Some(p),
        Err(e) => {
            println!("SKIPPED {name}: {e}");
            None
        }
    }
}

fn endpoint_cfg(p: &VethPair, peers: usize, threaded: bool) -> EndpointConfig {
    EndpointConfig {
        netns: Some(p.b.clone()),
        listen: SocketAddrV4::new(DUT_IP.parse().expect("constant"), endpoint::DEFAULT_PORT),
        peers,
        workers: 2,
        worker_cpus: vec![0, 1],
        receiver_cpu: None,
        tun_name: "nltun0".into(),
        inner_net: DEFAULT_INNER_NET,
        threaded,
        key_seed: SEED,
        sink_port: Some(DEFAULT_SINK_PORT),
    }
}

fn send(
    p: &VethPair,
    ep: &Endpoint,
    peers: usize,
    rate: f64,
    secs: f64,
    corrupt: u64,
) -> PeersStats {
    let cfg = PeersConfig {
        netns: Some(p.a.clone()),
        endpoint: ep.listen_addr(),
        peers,
        threads: 2,
        cpus: vec![],
        rate_pps: Some(rate),
        duration: Duration::from_secs_f64(secs),
        payload: 64,
        inner_net: DEFAULT_INNER_NET,
        inner_port: DEFAULT_SINK_PORT,
        key_seed: SEED,
        corrupt_every: corrupt,
    };
    peers::run(&cfg, &AtomicBool::new(false)).expect("peers run")
}

fn link_exists(ns: &str, dev: &str) -> bool {
    Command::new("ip")
        .args(["-n", ns, "link", "show", dev])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

#[test]
fn decrypted_packets_arrive_on_the_tun_side_one_queue_per_peer() {
    let Some(p) = pair(
        "decrypted_packets_arrive_on_the_tun_side_one_queue_per_peer",
        "ok",
    ) else {
        return;
    };
    let ep = Endpoint::start(endpoint_cfg(&p, 4, false)).expect("endpoint starts");
    assert!(
        link_exists(&p.b, "nltun0"),
        "the TUN device exists in the DUT namespace"
    );
    // A modest rate: test builds do not optimise the cipher.
    let sent = send(&p, &ep, 4, 2_000.0, 2.0, 0);
    // Let the last datagrams cross before stopping.
    std::thread::sleep(Duration::from_millis(200));
    let st = ep.stop();
    println!("peers: {sent:?}\nendpoint: {st:?}");
    assert!(sent.sent >= 1_000, "the peers sent: {sent:?}");
    assert_eq!(sent.send_errors, 0);
    // Veth inside one host loses nothing at this rate; allow a few for the socket buffer.
    assert!(st.datagrams as f64 >= 0.99 * sent.sent as f64, "{st:?}");
    assert_eq!(
        st.bad_ciphertext + st.malformed + st.unknown_peer,
        0,
        "{st:?}"
    );
    assert_eq!(st.decrypted, st.datagrams - st.worker_queue_full);
    assert_eq!(
        st.written, st.decrypted,
        "every decrypted packet went into its queue"
    );
    assert_eq!(st.write_errors, 0);
    assert_eq!(
        st.delivered,
        Some(st.written),
        "the stack delivered every inner packet"
    );
    assert!(st.tun_rx_packets.is_some_and(|n| n >= st.written), "{st:?}");
    // Peer i's packets went to queue i, and every peer sent a quarter.
    assert_eq!(st.per_queue_written.len(), 4);
    for (q, &n) in st.per_queue_written.iter().enumerate() {
        assert!(
            (n as f64 - st.written as f64 / 4.0).abs() <= 0.02 * st.written as f64,
            "queue {q}: {n} of {}",
            st.written
        );
    }
    // Round robin regardless of load: the two workers got the datagrams in turns.
    let (w0, w1) = (st.workers[0].datagrams, st.workers[1].datagrams);
    assert!(w0.abs_diff(w1) <= 1 + st.worker_queue_full, "{w0} vs {w1}");
    // Stopping closed the queues, which removes the device.
    assert!(
        !link_exists(&p.b, "nltun0"),
        "the TUN device is gone after stop"
    );
}

#[test]
fn bad_ciphertext_is_counted_and_dropped() {
    let Some(p) = pair("bad_ciphertext_is_counted_and_dropped", "bad") else {
        return;
    };
    let ep = Endpoint::start(endpoint_cfg(&p, 2, false)).expect("endpoint starts");
    let sent = send(&p, &ep, 2, 1_000.0, 1.0, 5);
    // By hand: a datagram for a peer the endpoint does not have, and a runt.
    let target = ep.listen_addr();
    std::thread::scope(|s| {
        s.spawn(|| {
            napilab_lab::netns::enter(&p.a).expect("enter the peers' namespace");
            let sock = UdpSocket::bind("0.0.0.0:0").expect("bind");
            let mut d = Vec::new();
            PeerCipher::new(&SEED, 7).seal(7, 0, &[0u8; 40], &mut d);
            sock.send_to(&d, target).expect("send unknown peer");
            sock.send_to(&d[..HEADER_LEN], target).expect("send runt");
        })
        .join()
        .expect("sender thread");
    });
    std::thread::sleep(Duration::from_millis(200));
    let st = ep.stop();
    println!("peers: {sent:?}\nendpoint: {st:?}");
    assert!(sent.corrupted > 0 && sent.corrupted < sent.sent, "{sent:?}");
    assert_eq!(st.worker_queue_full, 0, "{st:?}");
    assert_eq!(st.datagrams, sent.sent + 2, "{st:?}");
    assert_eq!(
        st.bad_ciphertext, sent.corrupted,
        "each corrupted datagram is counted"
    );
    assert_eq!(st.unknown_peer, 1);
    assert_eq!(st.malformed, 1);
    assert_eq!(st.decrypted, sent.sent - sent.corrupted);
    assert_eq!(
        st.delivered,
        Some(st.decrypted),
        "none of the bad ones reached the stack"
    );
}

#[test]
fn more_peers_than_tun_queues_is_refused_before_anything_is_made() {
    let cfg = EndpointConfig {
        netns: Some("nl-tun-never-made".into()),
        listen: "10.77.0.2:51820".parse().expect("constant"),
        peers: 257,
        workers: 1,
        worker_cpus: vec![],
        receiver_cpu: None,
        tun_name: "nltun0".into(),
        inner_net: DEFAULT_INNER_NET,
        threaded: false,
        key_seed: SEED,
        sink_port: None,
    };
    let e = Endpoint::start(cfg).err().expect("257 peers refused");
    assert!(e.contains("257") && e.contains("256"), "{e}");
}

#[test]
fn detection_names_an_endpoint_and_leaves_no_namespace() {
    let name = "detection_names_an_endpoint_and_leaves_no_namespace";
    if !napilab_testkit::is_root() {
        println!("SKIPPED {name}: needs root to create the scratch namespace");
        return;
    }
    let d = detect::detect().expect("detection runs");
    println!("{}", d.summary());
    match d.endpoint {
        EndpointKind::KernelWireguard => assert!(d.wireguard_error.is_none()),
        EndpointKind::UserSpace => assert!(d.wireguard_error.is_some()),
    }
    let left = napilab_lab::netns::list_namespaces().expect("ip netns list");
    let mine = format!("napilab-wgcheck-{}-", std::process::id());
    assert!(!left.iter().any(|n| n.starts_with(&mine)), "{left:?}");
}
