//! Live tests of the netlink readers against the running kernel.
//!
//! Tests that change anything run in a network namespace of their own, which is
//! deleted when the test ends, panics included. Netlink and ioctl sockets belong to
//! the namespace of the thread that creates them, so each test body runs in a thread
//! that first joins the namespace with `setns(2)` (which affects only that thread).
//! Without root, or without a working `ip netns`, those tests print why and pass.
//!
//! Traffic is generated with an AF_PACKET socket on one end of a veth pair, so both
//! ends can live in one namespace (a ping between two local addresses would go
//! through `lo`, not the veth pair) and the packet count is exact.

use std::os::fd::AsRawFd;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use napilab_probe::kernel::is_root;
use napilab_probe::netlink::{
    EthtoolSettings, LinkStats, Netlink, NetlinkError, QdiscStats, QueueType,
};

const VA_MAC: [u8; 6] = [0x02, 0x00, 0x0a, 0xfb, 0x00, 0x01];
const VB_MAC: [u8; 6] = [0x02, 0x00, 0x0a, 0xfb, 0x00, 0x02];
const FRAMES: u64 = 20;

/// Runs a command; `Err` carries its stderr so a skip message can say what failed.
fn run(cmd: &str, args: &[&str]) -> Result<(), String> {
    let out = Command::new(cmd)
        .args(args)
        .output()
        .map_err(|e| format!("{cmd}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{cmd} {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// A named network namespace, deleted on drop.
struct Netns {
    name: String,
}

impl Netns {
    /// Creates `nl-<pid>-<n>`; the counter keeps parallel tests apart.
    fn create() -> Result<Self, String> {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let name = format!(
            "nl-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        run("ip", &["netns", "add", &name])?;
        Ok(Self { name })
    }

    /// `ip -n <ns> args...`
    fn ip(&self, args: &[&str]) -> Result<(), String> {
        let mut all = vec!["-n", self.name.as_str()];
        all.extend_from_slice(args);
        run("ip", &all)
    }

    /// `ip netns exec <ns> args...` (remounts /sys, so sysfs paths are the namespace's).
    fn exec(&self, args: &[&str]) -> Result<(), String> {
        let mut all = vec!["netns", "exec", self.name.as_str()];
        all.extend_from_slice(args);
        run("ip", &all)
    }

    /// Runs `f` in a thread that has joined this namespace; re-raises its panic.
    fn run_inside<T: Send>(&self, f: impl FnOnce() -> T + Send) -> T {
        let name = self.name.as_str();
        std::thread::scope(|s| {
            let handle = s.spawn(move || {
                napilab_probe::netns::enter(name).expect("join the namespace");
                f()
            });
            match handle.join() {
                Ok(v) => v,
                Err(panic) => std::panic::resume_unwind(panic),
            }
        })
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        if let Err(e) = run("ip", &["netns", "del", &self.name]) {
            eprintln!("cleanup failed: {e}");
        }
    }
}

/// A namespace with veth pair va (10.251.0.1) <-> vb (10.251.0.2): GRO on vb so it
/// has a NAPI instance, that instance threaded, TSO/GSO off on va so va's frames are
/// eligible for vb's NAPI, and a pfifo root qdisc on va.
fn veth_lab() -> Option<Netns> {
    if !is_root() {
        eprintln!("skipped: needs root to create a network namespace");
        return None;
    }
    let ns = match Netns::create() {
        Ok(ns) => ns,
        Err(e) => {
            eprintln!("skipped: cannot create a network namespace: {e}");
            return None;
        }
    };
    let va_mac = mac_text(&VA_MAC);
    let vb_mac = mac_text(&VB_MAC);
    let setup = || -> Result<(), String> {
        ns.ip(&[
            "link", "add", "va", "address", &va_mac, "type", "veth", "peer", "name", "vb",
            "address", &vb_mac,
        ])?;
        ns.ip(&["addr", "add", "10.251.0.1/30", "dev", "va"])?;
        ns.ip(&["addr", "add", "10.251.0.2/30", "dev", "vb"])?;
        ns.exec(&["ethtool", "-K", "va", "tso", "off", "gso", "off"])?;
        ns.exec(&["ethtool", "-K", "vb", "gro", "on"])?;
        ns.ip(&["link", "set", "va", "up"])?;
        ns.ip(&["link", "set", "vb", "up"])?;
        // After GRO and link-up: toggling either re-creates the NAPI instance.
        ns.exec(&["sh", "-c", "echo 1 > /sys/class/net/vb/threaded"])?;
        ns.exec(&[
            "tc", "qdisc", "add", "dev", "va", "root", "handle", "1:", "pfifo", "limit", "1000",
        ])?;
        Ok(())
    };
    match setup() {
        Ok(()) => Some(ns),
        Err(e) => {
            eprintln!("skipped: cannot set up veth pair in {}: {e}", ns.name);
            None
        }
    }
}

fn mac_text(mac: &[u8; 6]) -> String {
    mac.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// Sends `count` UDP/IPv4 frames 10.251.0.1 -> 10.251.0.2 out of `ifname` through an
/// AF_PACKET socket (through the qdisc: no PACKET_QDISC_BYPASS). Call inside the
/// namespace.
fn send_frames(ifname: &str, count: u64) {
    let cname = std::ffi::CString::new(ifname).expect("no NUL");
    // SAFETY: valid C string.
    let ifindex = unsafe { libc::if_nametoindex(cname.as_ptr()) };
    assert_ne!(ifindex, 0, "no device {ifname} in this namespace");
    let proto = (libc::ETH_P_ALL as u16).to_be();
    // SAFETY: plain socket(2) call.
    let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW, i32::from(proto)) };
    assert!(
        fd >= 0,
        "AF_PACKET socket: {}",
        std::io::Error::last_os_error()
    );
    // SAFETY: fd was just created and is owned here.
    let fd = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };

    let frame = udp_frame();
    // SAFETY: sockaddr_ll is plain data; all-zero is a valid value.
    let mut addr: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    addr.sll_family = libc::AF_PACKET as u16;
    addr.sll_protocol = proto;
    addr.sll_ifindex = i32::try_from(ifindex).expect("ifindex fits");
    addr.sll_halen = 6;
    addr.sll_addr[..6].copy_from_slice(&VB_MAC);
    for _ in 0..count {
        // SAFETY: frame and addr are valid for the lengths given.
        let sent = unsafe {
            libc::sendto(
                fd.as_raw_fd(),
                frame.as_ptr().cast(),
                frame.len(),
                0,
                (&addr as *const libc::sockaddr_ll).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as u32,
            )
        };
        assert_eq!(
            usize::try_from(sent).ok(),
            Some(frame.len()),
            "sendto: {}",
            std::io::Error::last_os_error()
        );
    }
}

/// Ethernet + IPv4 + UDP (to the discard port) with a valid IP header checksum.
fn udp_frame() -> Vec<u8> {
    let payload = [0x5au8; 18];
    let udp_len = 8 + payload.len();
    let ip_len = 20 + udp_len;
    let mut f = Vec::with_capacity(14 + ip_len);
    f.extend_from_slice(&VB_MAC);
    f.extend_from_slice(&VA_MAC);
    f.extend_from_slice(&0x0800u16.to_be_bytes());
    let mut ip = [0u8; 20];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&(ip_len as u16).to_be_bytes());
    ip[8] = 64; // TTL
    ip[9] = 17; // UDP
    ip[12..16].copy_from_slice(&[10, 251, 0, 1]);
    ip[16..20].copy_from_slice(&[10, 251, 0, 2]);
    let mut sum: u32 = ip
        .chunks(2)
        .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    ip[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
    f.extend_from_slice(&ip);
    f.extend_from_slice(&40000u16.to_be_bytes());
    f.extend_from_slice(&9u16.to_be_bytes());
    f.extend_from_slice(&(udp_len as u16).to_be_bytes());
    f.extend_from_slice(&[0, 0]); // no UDP checksum (allowed over IPv4)
    f.extend_from_slice(&payload);
    f
}

fn link<'a>(links: &'a [LinkStats], name: &str) -> &'a LinkStats {
    links
        .iter()
        .find(|l| l.name == name)
        .unwrap_or_else(|| panic!("{name} not in links(): {links:#?}"))
}

/// Reads the links with `read` (`Netlink::links` or `Netlink::link_counters`) until
/// `done` holds: with threaded NAPI the receive side is counted by a kthread some time
/// after the send returns.
fn links_when(
    nl: &mut Netlink,
    read: fn(&mut Netlink) -> Result<Vec<LinkStats>, NetlinkError>,
    done: impl Fn(&[LinkStats]) -> bool,
) -> Vec<LinkStats> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let links = read(nl).expect("reading the links");
        if done(&links) || Instant::now() > deadline {
            return links;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn links_and_qdiscs_count_veth_traffic() {
    let Some(ns) = veth_lab() else { return };
    ns.run_inside(|| {
        let mut nl = Netlink::new();
        let before = nl.links().expect("links()");
        let (va0, vb0) = (link(&before, "va").clone(), link(&before, "vb").clone());
        assert_eq!(va0.kind.as_deref(), Some("veth"));
        assert_eq!(vb0.kind.as_deref(), Some("veth"));
        assert_eq!(va0.operstate.as_deref(), Some("up"));
        assert_eq!(va0.mtu, Some(1500));
        // veth allocates as many queues as possible CPUs unless told otherwise, and
        // enables one of each: only "at least one" holds everywhere.
        assert!(va0.num_rx_queues.is_some_and(|n| n >= 1), "{va0:?}");
        assert!(va0.num_tx_queues.is_some_and(|n| n >= 1), "{va0:?}");
        assert!(link(&before, "lo").kind.is_none());

        let q0 = nl.qdiscs().expect("qdiscs()");
        send_frames("va", FRAMES);

        let after = links_when(&mut nl, Netlink::links, |l| {
            link(l, "vb").rx_packets >= vb0.rx_packets + FRAMES
        });
        let (va1, vb1) = (link(&after, "va"), link(&after, "vb"));
        assert!(
            va1.tx_packets >= va0.tx_packets + FRAMES,
            "va tx {} -> {}",
            va0.tx_packets,
            va1.tx_packets
        );
        assert!(
            vb1.rx_packets >= vb0.rx_packets + FRAMES,
            "vb rx {} -> {}",
            vb0.rx_packets,
            vb1.rx_packets
        );
        let frame_len = udp_frame().len() as u64;
        // Frames that take vb's NAPI path are counted (on both ends) after
        // eth_type_trans, i.e. without the 14-byte Ethernet header; frames that do
        // not are counted whole. Assert the smaller figure.
        let counted = FRAMES * (frame_len - 14);
        assert!(va1.tx_bytes >= va0.tx_bytes + counted, "{va0:?} -> {va1:?}");
        assert!(vb1.rx_bytes >= vb0.rx_bytes + counted, "{vb0:?} -> {vb1:?}");

        let q1 = nl.qdiscs().expect("qdiscs()");
        eprintln!("qdiscs: {q1:?}");
        let root = |qs: &[QdiscStats], ifindex: u32| -> QdiscStats {
            qs.iter()
                .find(|q| q.ifindex == ifindex && q.is_root)
                .cloned()
                .unwrap_or_else(|| panic!("no root qdisc for {ifindex}: {qs:#?}"))
        };
        let (pf0, pf1) = (root(&q0, va0.ifindex), root(&q1, va0.ifindex));
        assert_eq!(pf1.kind, "pfifo");
        assert_eq!(pf1.handle, 0x0001_0000);
        assert_eq!(pf1.parent, 0xffff_ffff);
        assert!(pf1.packets >= pf0.packets + FRAMES, "{pf0:?} -> {pf1:?}");
        assert!(pf1.bytes >= pf0.bytes + FRAMES * frame_len);
        // veth is a no-queue device: its default root is noqueue, which counts nothing.
        let nq = root(&q1, vb0.ifindex);
        assert_eq!(nq.kind, "noqueue");
        assert_eq!(nq.packets, 0);
    });
}

#[test]
fn napi_of_threaded_veth_names_its_kthread() {
    let Some(ns) = veth_lab() else { return };
    // Device-wide deferral settings; 6.13+ copies them into every NAPI instance. The
    // timeout is past 2^32 ns so a 32-bit decode would show the wrapped value.
    if let Err(e) = ns.exec(&[
        "sh",
        "-c",
        "echo 5000000000 > /sys/class/net/vb/gro_flush_timeout && \
         echo 3 > /sys/class/net/vb/napi_defer_hard_irqs",
    ]) {
        eprintln!("skipped: cannot set deferral on vb: {e}");
        return;
    }
    ns.run_inside(|| {
        let mut nl = Netlink::new();
        let links = nl.links().expect("links()");
        let (va, vb) = (link(&links, "va").ifindex, link(&links, "vb").ifindex);
        let napis = match nl.napis() {
            Err(NetlinkError::Unsupported { why, .. }) => {
                eprintln!("skipped: kernel has no napi-get ({why})");
                return;
            }
            other => other.expect("napis()"),
        };
        eprintln!("napis: {napis:?}");
        let vb_napis: Vec<_> = napis.iter().filter(|n| n.ifindex == vb).collect();
        assert_eq!(vb_napis.len(), 1, "one NAPI per veth RX queue: {napis:#?}");
        // GRO is off on va (veth default), so it has no NAPI instance.
        assert!(napis.iter().all(|n| n.ifindex != va), "{napis:#?}");
        let napi = vb_napis[0];
        assert!(napi.id > 0);
        assert_eq!(napi.irq, None, "veth has no IRQ");
        let pid = napi.pid.expect("threaded NAPI reports its kthread pid");
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).expect("kthread comm");
        assert!(comm.starts_with("napi/vb-"), "pid {pid} is {comm:?}");
        // Attributes of newer kernels: check them where present.
        if let Some(threaded) = napi.threaded {
            assert_eq!(threaded, 1);
        }
        if let Some(t) = napi.gro_flush_timeout_ns {
            assert_eq!(t, 5_000_000_000, "gro-flush-timeout decoded as 64-bit");
        }
        if let Some(d) = napi.defer_hard_irqs {
            assert_eq!(d, 3);
        }

        let queues = nl.queues().expect("queues()");
        eprintln!("queues: {queues:?}");
        let rx: Vec<_> = queues
            .iter()
            .filter(|q| q.ifindex == vb && q.kind == QueueType::Rx)
            .collect();
        let tx = queues
            .iter()
            .filter(|q| q.ifindex == vb && q.kind == QueueType::Tx)
            .count();
        // Only enabled queues are listed: one of each on a default veth.
        assert_eq!(rx.len(), 1, "{queues:#?}");
        assert_eq!(tx, 1, "{queues:#?}");
        assert_eq!(rx[0].id, 0);
        // veth does not link its queues to its NAPI instances (6.18 reports no
        // napi-id); a kernel that does must name vb's instance.
        assert!(
            rx[0].napi_id.is_none() || rx[0].napi_id == Some(napi.id),
            "{queues:#?}"
        );

        // veth has no per-queue driver stats; the call must still succeed (or say
        // the kernel lacks it), and never list a queue twice.
        match nl.qstats() {
            Ok(stats) => {
                for s in stats.iter().filter(|s| s.ifindex == vb) {
                    let same = stats
                        .iter()
                        .filter(|o| {
                            o.ifindex == s.ifindex && o.kind == s.kind && o.queue == s.queue
                        })
                        .count();
                    assert_eq!(same, 1);
                }
            }
            Err(NetlinkError::Unsupported { .. }) => {}
            Err(e) => panic!("qstats(): {e}"),
        }
    });
}

#[test]
fn ethtool_reports_veth_driver_and_channels() {
    let Some(ns) = veth_lab() else { return };
    ns.run_inside(|| {
        let mut nl = Netlink::new();
        let links = nl.links().expect("links()");
        let vb = link(&links, "vb").ifindex;
        let settings = nl.ethtool(vb, "vb").expect("ethtool()");
        eprintln!("ethtool vb: {settings:?}");
        let EthtoolSettings {
            driver, channels, ..
        } = settings;
        assert_eq!(driver.as_deref(), Some("veth"));
        // veth implements get_channels: one RX and one TX queue here.
        let channels = channels.expect("veth reports channels");
        let get = |k: &str| channels.iter().find(|(n, _)| n == k).map(|&(_, v)| v);
        assert_eq!(get("rx-count"), Some(1), "{channels:?}");
        assert_eq!(get("tx-count"), Some(1), "{channels:?}");
        // The maximums are the allocated queues, which links() also reports.
        let l = link(&links, "vb");
        assert_eq!(
            get("rx-max"),
            l.num_rx_queues.map(u64::from),
            "{channels:?}"
        );
        assert_eq!(
            get("tx-max"),
            l.num_tx_queues.map(u64::from),
            "{channels:?}"
        );

        // By name only, as callers without an index would do.
        let by_name = nl.ethtool(0, "vb").expect("ethtool() by name");
        assert_eq!(by_name.driver.as_deref(), Some("veth"));
        assert_eq!(by_name.channels, Some(channels.clone()));

        // A device that does not exist is an error, not "unsupported".
        match nl.ethtool(0, "nosuchdev0") {
            Err(e @ NetlinkError::Kernel { .. }) => eprintln!("nosuchdev0: {e}"),
            other => panic!("expected a Kernel error, got {other:?}"),
        }
        // Same through netlink: the ioctl finds vb by name, the index does not exist.
        match nl.ethtool(999_999, "vb") {
            Err(NetlinkError::Kernel { what, source }) => {
                eprintln!("ifindex 999999: {what}: {source}");
                assert_eq!(source.raw_os_error(), Some(libc::ENODEV));
            }
            other => panic!("expected a Kernel error, got {other:?}"),
        }
    });
}

/// Read-only: every call on the test's own namespace decodes without a kernel error.
/// Needs no privileges. Run with `--nocapture` to see what this kernel reports.
#[test]
fn host_namespace_reads_decode() {
    let mut nl = Netlink::new();
    let links = nl.links().expect("links()");
    assert!(links.iter().any(|l| l.name == "lo"), "{links:#?}");
    assert!(links.iter().all(|l| l.ifindex > 0 && !l.name.is_empty()));
    eprintln!("links: {links:#?}");

    let qdiscs = nl.qdiscs().expect("qdiscs()");
    for q in &qdiscs {
        assert!(!q.kind.is_empty());
        assert!(links.iter().any(|l| l.ifindex == q.ifindex), "{q:?}");
    }
    eprintln!("qdiscs: {qdiscs:#?}");

    for (what, res) in [
        ("napis", nl.napis().map(|v| format!("{v:#?}"))),
        ("queues", nl.queues().map(|v| format!("{v:#?}"))),
        ("qstats", nl.qstats().map(|v| format!("{v:#?}"))),
    ] {
        match res {
            Ok(text) => eprintln!("{what}: {text}"),
            Err(e @ NetlinkError::Unsupported { .. }) => eprintln!("{what}: {e}"),
            Err(e) => panic!("{what}: {e}"),
        }
    }
    // A second call goes through the same sockets and cached family id.
    nl.napis().ok();

    for l in &links {
        let s = nl.ethtool(l.ifindex, &l.name).expect("ethtool()");
        eprintln!("ethtool {}: {s:?}", l.name);
    }
}

/// `link_counters()` (RTM_GETSTATS between link notifications) says what `links()`
/// says: fresh counters every call, and a new description after a link changed.
#[test]
fn link_counters_follow_traffic_and_link_changes() {
    let Some(ns) = veth_lab() else { return };
    ns.run_inside(|| {
        let mut nl = Netlink::new();
        let described = nl.links().expect("links()");
        let cached = nl.link_counters().expect("link_counters()");
        let identity = |l: &LinkStats| {
            (
                l.ifindex,
                l.name.clone(),
                l.mtu,
                l.operstate.clone(),
                l.kind.clone(),
                l.num_rx_queues,
                l.num_tx_queues,
            )
        };
        assert_eq!(
            described.iter().map(identity).collect::<Vec<_>>(),
            cached.iter().map(identity).collect::<Vec<_>>()
        );
        let vb0 = link(&cached, "vb").clone();
        send_frames("va", FRAMES);
        let links = links_when(&mut nl, Netlink::link_counters, |l| {
            link(l, "vb").rx_packets >= vb0.rx_packets + FRAMES
        });
        let counted = link(&links, "vb").clone();
        assert!(
            counted.rx_packets >= vb0.rx_packets + FRAMES,
            "vb rx {} -> {} through link_counters()",
            vb0.rx_packets,
            counted.rx_packets
        );
        assert_eq!(identity(&counted), identity(&vb0));
        // Nothing changed since the first call: the counters came from RTM_GETSTATS.
        assert_eq!(
            nl.link_descriptions(),
            1,
            "links described again without a change"
        );
        // Changes of a link's settings and of the set of links reach the cache.
        ns.ip(&["link", "set", "va", "mtu", "1400"]).expect("mtu");
        ns.ip(&[
            "link", "add", "nl-x", "type", "veth", "peer", "name", "nl-y",
        ])
        .expect("second veth pair");
        let links = nl.link_counters().expect("link_counters()");
        assert_eq!(link(&links, "va").mtu, Some(1400), "{links:#?}");
        assert_eq!(nl.link_descriptions(), 2);
        assert_eq!(link(&links, "nl-x").kind.as_deref(), Some("veth"));
        ns.ip(&["link", "del", "nl-x"]).expect("del veth");
        let links = nl.link_counters().expect("link_counters()");
        assert!(
            links.iter().all(|l| l.name != "nl-x" && l.name != "nl-y"),
            "{links:#?}"
        );
        assert_eq!(
            links.iter().map(identity).collect::<Vec<_>>(),
            nl.links()
                .expect("links()")
                .iter()
                .map(identity)
                .collect::<Vec<_>>()
        );
    });
}
