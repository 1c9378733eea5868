//! A thread given a namespace's view (netns::enter_view) sees that namespace's
//! devices and counters through /sys, /proc/net, netlink and the live observation loop,
//! and the rest of the process keeps seeing the host's (needs root: skips otherwise).

use std::collections::BTreeSet;
use std::os::unix::fs::MetadataExt as _;
use std::time::Duration;

use napilab_lab::netns;
use napilab_testkit::{is_root, VethPair};

fn sys_devices() -> BTreeSet<String> {
    std::fs::read_dir("/sys/class/net")
        .expect("/sys/class/net")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect()
}

/// Device names of /proc/net/dev.
fn proc_devices() -> BTreeSet<String> {
    std::fs::read_to_string("/proc/net/dev")
        .expect("/proc/net/dev")
        .lines()
        .filter_map(|l| Some(l.split_once(':')?.0.trim().to_string()))
        .collect()
}

fn rx_packets(dev: &str) -> u64 {
    std::fs::read_to_string(format!("/sys/class/net/{dev}/statistics/rx_packets"))
        .expect("rx_packets")
        .trim()
        .parse()
        .expect("a number")
}

/// Sends `n` UDP datagrams from namespace `ns` to 10.77.0.2 (the pair's b end).
fn send_from(ns: &str, n: usize) {
    netns::in_view(ns, || {
        let s = std::net::UdpSocket::bind("10.77.0.1:0").expect("bind in a");
        for _ in 0..n {
            s.send_to(&[0u8; 64], "10.77.0.2:9").expect("send");
        }
    })
    .expect("a thread in a");
}

#[test]
fn a_view_thread_sees_its_namespace_and_the_process_the_host() {
    if !is_root() {
        println!("SKIPPED: needs root to create network namespaces");
        return;
    }
    let pair = match VethPair::create("napilab-view", "t", false) {
        Ok(p) => p,
        Err(e) => {
            println!("SKIPPED: {e}");
            return;
        }
    };
    let host_sys = sys_devices();
    let host_proc = proc_devices();
    assert!(!host_sys.contains("vb"), "the host has a vb: {host_sys:?}");
    let ns_inode = std::fs::metadata(format!("/run/netns/{}", pair.b))
        .expect("the namespace file")
        .ino();
    let (sys, proc_net, inode, before) = netns::in_view(&pair.b, || {
        let inode = std::fs::metadata("/proc/thread-self/ns/net")
            .expect("thread-self ns")
            .ino();
        (sys_devices(), proc_devices(), inode, rx_packets("vb"))
    })
    .expect("a view of b");
    assert_eq!(inode, ns_inode, "the thread is in b");
    let only: BTreeSet<String> = ["lo", "vb"].iter().map(|s| s.to_string()).collect();
    assert_eq!(sys, only, "/sys/class/net on the thread");
    assert_eq!(proc_net, only, "/proc/net/dev on the thread");
    send_from(&pair.a, 200);
    let (after, links, observation) = netns::in_view(&pair.b, || {
        let links: Vec<String> = napilab_probe::netlink::Netlink::new()
            .links()
            .expect("rtnetlink on the thread")
            .into_iter()
            .map(|l| l.name)
            .collect();
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let options = napilab_trace::live::LiveOptions {
            duration: Duration::from_millis(600),
            interval: Duration::from_millis(200),
            ..Default::default()
        };
        let sender = std::thread::spawn({
            let a = pair.a.clone();
            move || {
                std::thread::sleep(Duration::from_millis(150));
                send_from(&a, 300);
            }
        });
        let observation = napilab_trace::live::observe(&options, &rx, &mut |_| {});
        sender.join().expect("sender");
        drop(tx);
        (
            rx_packets("vb"),
            links,
            observation.expect("a live observation"),
        )
    })
    .expect("a view of b");
    assert!(
        after >= before + 200,
        "vb's rx_packets on the thread: {before} -> {after}"
    );
    let mut links = links;
    links.sort();
    assert_eq!(links, ["lo", "vb"], "netlink on the thread");
    let devices: BTreeSet<&str> = observation
        .intervals
        .iter()
        .flat_map(|i| i.devices.iter().map(|d| d.name.as_str()))
        .collect();
    assert!(devices.contains("vb"), "observed devices: {devices:?}");
    assert!(
        devices.iter().all(|d| only.contains(*d)),
        "the observation saw a host device: {devices:?}"
    );
    let received: f64 = observation
        .intervals
        .iter()
        .flat_map(|i| {
            i.devices
                .iter()
                .filter(|d| d.name == "vb")
                .filter_map(move |d| d.rx_packets.as_ref().map(|m| m.value * i.duration_s))
        })
        .sum();
    assert!(
        received >= 250.0,
        "vb received {received} packets in the observation"
    );
    // The rest of the process still sees the host.
    assert_eq!(sys_devices(), host_sys, "/sys/class/net of the main thread");
    assert_eq!(
        proc_devices(),
        host_proc,
        "/proc/net/dev of the main thread"
    );
    assert_ne!(
        std::fs::metadata("/proc/thread-self/ns/net")
            .expect("ns")
            .ino(),
        ns_inode
    );
}
