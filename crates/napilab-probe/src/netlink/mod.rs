//! Netlink readers (YNL-generated bindings): link and qdisc counters (rtnetlink), NAPI
//! instances, queues and per-queue stats (the `netdev` generic-netlink family), and a
//! device's channels, rings and coalescing settings (the `ethtool` family).
//!
//! One [`Netlink`] holds one socket per netlink protocol and the encoded requests, so
//! the per-second sampling (`links()` + `qdiscs()`) costs two syscall round trips and
//! the decoding, with no socket setup or family lookup.
//!
//! Kernel-version notes (docs/kernel.md#per-napi-settings), approximate: the `netdev` family
//! appeared in 6.3 (`dev-get`, XDP features), `queue-get`/`napi-get` in 6.8,
//! `qstats-get` in 6.9 (most drivers implement it from 6.10 on), the per-NAPI
//! `defer-hard-irqs`, `gro-flush-timeout` and `irq-suspend-timeout` in 6.13, and the
//! per-NAPI `threaded` attribute later still. A missing family or operation is
//! reported as [`NetlinkError::Unsupported`]; a missing attribute is `None`.
//!
//! Sockets are opened lazily, on the first request: they belong to the network
//! namespace of the thread that makes that first request, and stay there.

mod error;
mod ethtool;
mod link_watch;
mod netdev;
mod rtnl;

use std::os::fd::OwnedFd;

use netlink_bindings::traits::{NetlinkRequest, Protocol};
use netlink_bindings::{netdev as nd, rt_link, tc};
use netlink_socket2::NetlinkSocket;

use error::Failure;
pub use error::NetlinkError;

/// Counters and identity of one network device, from an `RTM_GETLINK` dump.
///
/// Counters are the kernel's `rtnl_link_stats64` (`IFLA_STATS64`), cumulative since
/// the device was created.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct LinkStats {
    /// Interface index.
    pub ifindex: u32,
    /// Interface name (`IFLA_IFNAME`).
    pub name: String,
    /// MTU in bytes.
    pub mtu: Option<u32>,
    /// RFC 2863 operational state, lower case: "unknown", "notpresent", "down",
    /// "lowerlayerdown", "testing", "dormant", "up" (or "state-N" for a value this
    /// code does not know).
    pub operstate: Option<String>,
    /// Link kind from `IFLA_LINKINFO` ("veth", "bridge", "ifb", ...); `None` for
    /// physical and paravirtual NICs, which carry no link info.
    pub kind: Option<String>,
    /// Number of RX queues the device was created with.
    pub num_rx_queues: Option<u32>,
    /// Number of TX queues the device was created with.
    pub num_tx_queues: Option<u32>,
    /// Packets received.
    pub rx_packets: u64,
    /// Packets transmitted.
    pub tx_packets: u64,
    /// Bytes received.
    pub rx_bytes: u64,
    /// Bytes transmitted.
    pub tx_bytes: u64,
    /// Received packets dropped (no buffer, no handler above the driver, ...).
    pub rx_dropped: u64,
    /// Packets dropped on transmit by the driver.
    pub tx_dropped: u64,
    /// Receive errors.
    pub rx_errors: u64,
    /// Transmit errors.
    pub tx_errors: u64,
}

/// One queueing discipline with its counters, from an `RTM_GETQDISC` dump.
///
/// All qdiscs of all devices are listed, children too; `parent` and `handle` give the
/// tree. Handles are the kernel's 32-bit `major:minor` values (`tc` prints
/// `major >> 16` and `minor & 0xffff` in hex).
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct QdiscStats {
    /// Device the qdisc is attached to.
    pub ifindex: u32,
    /// Qdisc kind ("noqueue", "pfifo_fast", "mq", "tbf", "clsact", ...).
    pub kind: String,
    /// The qdisc's handle.
    pub handle: u32,
    /// The parent: `TC_H_ROOT` (0xffffffff) for a root qdisc, `TC_H_INGRESS`
    /// (0xfffffff1) for ingress/clsact, otherwise the parent class.
    pub parent: u32,
    /// `parent == TC_H_ROOT`: the egress root of the device.
    pub is_root: bool,
    /// Bytes dequeued (sent) by the qdisc.
    pub bytes: u64,
    /// Packets dequeued (sent) by the qdisc; 64-bit even where the kernel's basic
    /// stats counter is 32-bit (`TCA_STATS_PKT64` is used when present).
    pub packets: u64,
    /// Packets dropped by the qdisc.
    pub drops: u64,
    /// Packets requeued (the driver refused them, then they were retried).
    pub requeues: u64,
    /// Times the qdisc throttled (shapers) or was over its limit.
    pub overlimits: u64,
    /// Bytes queued now (a gauge).
    pub backlog_bytes: u64,
    /// Packets queued now (a gauge).
    pub qlen: u64,
}

/// One NAPI instance, from a netdev `napi-get` dump (Linux 6.8+).
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct NapiEntry {
    /// NAPI id, as in `SO_INCOMING_NAPI_ID`. Ids change when the device
    /// reconfigures (GRO toggled on veth, link flap, channel count change).
    pub id: u32,
    /// Device the instance belongs to.
    pub ifindex: u32,
    /// IRQ number the driver associated with the instance; absent for software
    /// devices (veth) and drivers that do not call `netif_napi_set_irq()`.
    pub irq: Option<u32>,
    /// PID of the `napi/<dev>-<id>` kthread; present only in threaded mode.
    pub pid: Option<u32>,
    /// Threaded mode as a per-NAPI attribute (recent kernels; older ones only have
    /// the per-device sysfs file): 0 disabled, 1 enabled, 2 busy-poll.
    pub threaded: Option<u32>,
    /// Consecutive empty polls before hard IRQs are re-enabled (6.13+).
    pub defer_hard_irqs: Option<u32>,
    /// GRO flush / IRQ deferral timer in nanoseconds (6.13+). Decoded from the raw
    /// attribute, so values of 2^32 ns (4.3 s) and more are exact.
    pub gro_flush_timeout_ns: Option<u64>,
    /// IRQ suspension timeout in nanoseconds (6.13+); decoded like
    /// `gro_flush_timeout_ns`.
    pub irq_suspend_timeout_ns: Option<u64>,
}

/// One device queue, from a netdev `queue-get` dump (Linux 6.8+).
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct QueueEntry {
    /// Device the queue belongs to.
    pub ifindex: u32,
    /// Queue index within its type.
    pub id: u32,
    /// RX or TX.
    pub kind: QueueType,
    /// NAPI instance serving the queue, if the driver linked them
    /// (`netif_queue_set_napi()`).
    pub napi_id: Option<u32>,
}

/// Direction of a device queue.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum QueueType {
    /// Receive queue.
    #[default]
    Rx,
    /// Transmit queue.
    Tx,
}

/// Per-queue driver statistics, from a netdev `qstats-get` dump with scope `queue`
/// (Linux 6.9+, drivers with `netdev_stat_ops`).
///
/// Counters are decoded from the raw attributes, so they do not wrap at 2^32. Per the
/// kernel documentation they count since the queue was last reconfigured and need
/// not add up to the device totals.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct QueueStats {
    /// Device the queue belongs to.
    pub ifindex: u32,
    /// RX or TX.
    pub kind: QueueType,
    /// Queue index within its type.
    pub queue: u32,
    /// `rx-packets` or `tx-packets`, as the queue type says.
    pub packets: Option<u64>,
    /// `rx-bytes` or `tx-bytes`.
    pub bytes: Option<u64>,
    /// `rx-hw-drops` or `tx-hw-drops`.
    pub hw_drops: Option<u64>,
}

/// A device's driver name and ethtool settings.
///
/// Each part is `None` when the driver does not implement it (EOPNOTSUPP) or the
/// kernel has no ethtool netlink family (before 5.6). Pairs are named like the
/// ethtool netlink attributes and `ethtool -L/-G/-C` parameters: channels
/// "rx-max", "combined-count", ...; rings "rx-max", "rx", "tx", ...; coalescing
/// "rx-usecs", "rx-frames", "adaptive-rx", ... Only what the driver reports is listed.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct EthtoolSettings {
    /// Driver name from the `ETHTOOL_GDRVINFO` ioctl ("veth", "virtio_net", ...).
    pub driver: Option<String>,
    /// Channel (queue) counts and maximums.
    pub channels: Option<Vec<(String, u64)>>,
    /// Ring sizes and maximums.
    pub rings: Option<Vec<(String, u64)>>,
    /// Interrupt coalescing parameters.
    pub coalesce: Option<Vec<(String, u64)>>,
}

/// The dump operations, for error text and the cache of refused operations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Links,
    LinkCounters,
    Qdiscs,
    Napis,
    Queues,
    Qstats,
}

impl Op {
    const COUNT: usize = 6;

    fn family(self) -> &'static str {
        match self {
            Op::Links | Op::LinkCounters | Op::Qdiscs => "rtnetlink",
            Op::Napis | Op::Queues | Op::Qstats => "netdev",
        }
    }

    fn generic(self) -> bool {
        !matches!(self, Op::Links | Op::LinkCounters | Op::Qdiscs)
    }

    /// The request, as the user would look it up; the kernel version helps the user
    /// judge an Unsupported answer.
    fn what(self) -> &'static str {
        match self {
            Op::Links => "rtnetlink RTM_GETLINK dump",
            Op::LinkCounters => "rtnetlink RTM_GETSTATS dump (Linux 4.7+)",
            Op::Qdiscs => "rtnetlink RTM_GETQDISC dump",
            Op::Napis => "netdev napi-get dump (Linux 6.8+)",
            Op::Queues => "netdev queue-get dump (Linux 6.8+)",
            Op::Qstats => "netdev qstats-get dump, scope queue (Linux 6.9+)",
        }
    }
}

/// `IFLA_STATS_FILTER_BIT(IFLA_STATS_LINK_64)` (`include/uapi/linux/if_link.h`): the
/// `filter_mask` of an `RTM_GETSTATS` request for `struct rtnl_link_stats64` only.
const IFLA_STATS_FILTER_LINK_64: u32 = 1;

/// A netlink client for the readers above. Not thread-safe by itself (`&mut self`),
/// but `Send`: create it in the thread (and network namespace) that samples.
pub struct Netlink {
    /// One socket per netlink protocol, created on first use. netlink-socket2 caches
    /// resolved generic-netlink family ids in it, so "netdev" and "ethtool" are
    /// looked up once per `Netlink`.
    sock: NetlinkSocket,
    // Encoded once: every sample sends the same bytes.
    getlink: rt_link::OpGetlinkDump<'static>,
    /// `RTM_GETSTATS` asking for `IFLA_STATS_LINK_64` only (see [`Netlink::link_counters`]).
    getstats: rt_link::OpGetstatsDump<'static>,
    /// Link notifications, opened with the first [`Netlink::link_counters`]; `None`
    /// before, or if it could not be opened (then every call describes the links).
    link_watch: Option<link_watch::LinkWatch>,
    link_watch_failed: bool,
    /// The links as last described by an `RTM_GETLINK` dump (for `link_counters`).
    described_links: Option<Vec<LinkStats>>,
    /// How often `link_counters` described the links (`RTM_GETLINK`).
    link_descriptions: u64,
    getqdisc: tc::OpGetqdiscDump<'static>,
    napi_get: nd::OpNapiGetDump<'static>,
    queue_get: nd::OpQueueGetDump<'static>,
    qstats_get: nd::OpQstatsGetDump<'static>,
    /// Operations the kernel refused as unsupported, with the reason: the answer
    /// will not change while the kernel runs, and netlink-socket2 would otherwise
    /// ask nlctrl for an absent family on every call.
    refused: [Option<String>; Op::COUNT],
    /// Set when the ethtool family is absent (same reasoning).
    ethtool_absent: bool,
    /// Entries returned last time, per operation: sizes the next result vector.
    last_len: [usize; Op::COUNT],
    /// AF_INET datagram socket for the `SIOCETHTOOL` ioctl, created on first use.
    ioctl_sock: Option<OwnedFd>,
}

impl Default for Netlink {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for Netlink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Netlink")
            .field("refused", &self.refused)
            .field("ethtool_absent", &self.ethtool_absent)
            .finish_non_exhaustive()
    }
}

impl Netlink {
    /// Prepares the requests. Opens nothing yet: sockets are created by the first
    /// request, in the calling thread's network namespace.
    pub fn new() -> Self {
        let mut qstats_get = nd::Request::new().op_qstats_get_dump();
        qstats_get
            .encode()
            .push_scope(nd::QstatsScope::Queue as u32);
        Self {
            sock: NetlinkSocket::new(),
            getlink: rt_link::Request::new().op_getlink_dump(&rt_link::Ifinfomsg::default()),
            getstats: rt_link::Request::new().op_getstats_dump(&rt_link::IfStatsMsg {
                filter_mask: IFLA_STATS_FILTER_LINK_64,
                ..rt_link::IfStatsMsg::default()
            }),
            link_watch: None,
            link_watch_failed: false,
            described_links: None,
            link_descriptions: 0,
            getqdisc: tc::Request::new().op_getqdisc_dump(&tc::Tcmsg::default()),
            napi_get: nd::Request::new().op_napi_get_dump(),
            queue_get: nd::Request::new().op_queue_get_dump(),
            qstats_get,
            refused: Default::default(),
            ethtool_absent: false,
            last_len: [0; Op::COUNT],
            ioctl_sock: None,
        }
    }

    /// All network devices of the namespace with their counters (`RTM_GETLINK` dump).
    pub fn links(&mut self) -> Result<Vec<LinkStats>, NetlinkError> {
        self.check_refused(Op::Links)?;
        let mut out = Vec::with_capacity(self.last_len[Op::Links as usize]);
        let res = dump(&mut self.sock, &self.getlink, &mut out, rtnl::decode_link);
        self.finish(Op::Links, res, out)
    }

    /// The same as [`Netlink::links`], cheaper when called again and again: the links
    /// are described (`RTM_GETLINK`) on the first call and again only after a link
    /// notification (a device came, went, or changed its name, MTU or state); in
    /// between, one `RTM_GETSTATS` dump of the 64-bit counters refreshes the last
    /// description. Kernels without `RTM_GETSTATS` (before 4.7) get `links()` each time.
    pub fn link_counters(&mut self) -> Result<Vec<LinkStats>, NetlinkError> {
        if self.link_watch.is_none() && !self.link_watch_failed {
            // Opened before the first description, so no change after it is missed.
            self.link_watch = link_watch::LinkWatch::open().ok();
            self.link_watch_failed = self.link_watch.is_none();
        }
        let changed = self.link_watch.as_ref().is_none_or(|w| w.changed());
        let stats_refused = self.refused[Op::LinkCounters as usize].is_some();
        // Taken, so that the cache is empty if anything below fails.
        let described = self.described_links.take();
        if let (false, false, Some(described)) = (changed, stats_refused, described) {
            let mut counters = Vec::with_capacity(described.len());
            let res = dump(
                &mut self.sock,
                &self.getstats,
                &mut counters,
                rtnl::decode_link_counters,
            );
            match self.finish(Op::LinkCounters, res, counters) {
                Ok(counters) => {
                    if let Some(links) = link_watch::with_counters(&described, &counters) {
                        self.described_links = Some(described);
                        return Ok(links);
                    }
                }
                // Refused (remembered by finish): describe the links from now on.
                Err(NetlinkError::Unsupported { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        let links = self.links()?;
        self.link_descriptions += 1;
        if self.link_watch.is_some() {
            self.described_links = Some(links.clone());
        }
        Ok(links)
    }

    /// How many of the [`Netlink::link_counters`] calls so far described the links
    /// anew (the others refreshed only the counters).
    pub fn link_descriptions(&self) -> u64 {
        self.link_descriptions
    }

    /// All qdiscs of all devices, roots and children (`RTM_GETQDISC` dump).
    pub fn qdiscs(&mut self) -> Result<Vec<QdiscStats>, NetlinkError> {
        self.check_refused(Op::Qdiscs)?;
        let mut out = Vec::with_capacity(self.last_len[Op::Qdiscs as usize]);
        let res = dump(&mut self.sock, &self.getqdisc, &mut out, rtnl::decode_qdisc);
        self.finish(Op::Qdiscs, res, out)
    }

    /// All NAPI instances of the namespace (netdev `napi-get` dump).
    pub fn napis(&mut self) -> Result<Vec<NapiEntry>, NetlinkError> {
        self.check_refused(Op::Napis)?;
        let mut out = Vec::with_capacity(self.last_len[Op::Napis as usize]);
        let res = dump(
            &mut self.sock,
            &self.napi_get,
            &mut out,
            netdev::decode_napi,
        );
        self.finish(Op::Napis, res, out)
    }

    /// All queues of all devices with their NAPI links (netdev `queue-get` dump).
    pub fn queues(&mut self) -> Result<Vec<QueueEntry>, NetlinkError> {
        self.check_refused(Op::Queues)?;
        let mut out = Vec::with_capacity(self.last_len[Op::Queues as usize]);
        let res = dump(
            &mut self.sock,
            &self.queue_get,
            &mut out,
            netdev::decode_queue,
        );
        self.finish(Op::Queues, res, out)
    }

    /// Per-queue driver statistics (netdev `qstats-get` dump, scope queue).
    ///
    /// Only devices whose driver implements queue stats appear (virtio_net, mlx5,
    /// bnxt, ...; not veth), so an empty result is normal. Unsupported when the
    /// kernel lacks the operation (before 6.9).
    pub fn qstats(&mut self) -> Result<Vec<QueueStats>, NetlinkError> {
        self.check_refused(Op::Qstats)?;
        let mut out = Vec::with_capacity(self.last_len[Op::Qstats as usize]);
        let res = dump(
            &mut self.sock,
            &self.qstats_get,
            &mut out,
            netdev::decode_qstats,
        );
        self.finish(Op::Qstats, res, out)
    }

    /// Driver name (ioctl) and channels, rings and coalescing (ethtool netlink) of
    /// one device. `ifindex` selects the device for netlink (when non-zero, else
    /// `ifname`); `ifname` is needed for the ioctl, which has no index form.
    pub fn ethtool(&mut self, ifindex: u32, ifname: &str) -> Result<EthtoolSettings, NetlinkError> {
        ethtool::settings(self, ifindex, ifname)
    }

    fn check_refused(&self, op: Op) -> Result<(), NetlinkError> {
        match &self.refused[op as usize] {
            Some(why) => Err(NetlinkError::Unsupported {
                family: op.family(),
                why: why.clone(),
            }),
            None => Ok(()),
        }
    }

    fn finish<T>(
        &mut self,
        op: Op,
        res: Result<(), Failure>,
        out: Vec<T>,
    ) -> Result<Vec<T>, NetlinkError> {
        match res {
            Ok(()) => {
                self.last_len[op as usize] = out.len();
                Ok(out)
            }
            Err(failure) => {
                let err = failure.into_error(op.family(), op.generic(), op.what());
                if let NetlinkError::Unsupported { why, .. } = &err {
                    self.refused[op as usize] = Some(why.clone());
                }
                Err(err)
            }
        }
    }
}

/// Sends `req` and decodes every reply message with `decode` (which returns `None`
/// to skip a message it cannot use), appending to `out`.
///
/// The dump is always read to its end, even past a message that does not decode:
/// the kernel refuses a new dump on a socket whose previous dump is unfinished.
fn dump<R, T, F>(
    sock: &mut NetlinkSocket,
    req: &R,
    out: &mut Vec<T>,
    mut decode: F,
) -> Result<(), Failure>
where
    R: NetlinkRequest,
    F: for<'b> FnMut(R::ReplyType<'b>) -> Option<T>,
{
    let protonum = match req.protocol() {
        Protocol::Raw { protonum, .. } => protonum,
        Protocol::Generic(_) => libc::NETLINK_GENERIC as u16,
    };
    let mut reply = sock
        .request(req)
        .map_err(|e| Failure::request(&e).fix_socket_errno(protonum))?;
    let mut failure = None;
    // recv() yields None after NLMSG_DONE, and stops after the first error message.
    while let Some(msg) = reply.recv() {
        match msg {
            Ok(msg) => out.extend(decode(msg)),
            Err(e) => failure = Some(Failure::reply(&e)),
        }
    }
    match failure {
        Some(f) => Err(f),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn netlink_can_move_to_a_sampling_thread() {
        fn assert_send<T: Send>() {}
        assert_send::<Netlink>();
    }

    #[test]
    fn new_opens_nothing_and_refuses_nothing() {
        let nl = Netlink::new();
        assert!(nl.ioctl_sock.is_none());
        assert!(nl.refused.iter().all(Option::is_none));
        for op in [
            Op::Links,
            Op::LinkCounters,
            Op::Qdiscs,
            Op::Napis,
            Op::Queues,
            Op::Qstats,
        ] {
            assert!(nl.check_refused(op).is_ok());
        }
    }

    #[test]
    fn refused_operation_is_answered_from_the_cache() {
        let mut nl = Netlink::new();
        let failure = error::Failure::request(&std::io::Error::from_raw_os_error(libc::ENOENT));
        let res: Result<Vec<NapiEntry>, _> = nl.finish(Op::Napis, Err(failure), Vec::new());
        assert!(matches!(
            res,
            Err(NetlinkError::Unsupported {
                family: "netdev",
                ..
            })
        ));
        // No request is sent now: the socket was never opened, yet the answer is there.
        match nl.napis() {
            Err(NetlinkError::Unsupported { why, .. }) => {
                assert!(why.contains("napi-get"), "{why}")
            }
            other => panic!("expected cached Unsupported, got {other:?}"),
        }
        // Other operations are unaffected.
        assert!(nl.check_refused(Op::Queues).is_ok());
    }
}

/// Building blocks for decoder tests: hand-made netlink attributes.
#[cfg(test)]
pub(crate) mod test_attrs {
    /// Appends one netlink attribute (header, payload, padding to 4 bytes) to `buf`.
    pub fn push_attr(buf: &mut Vec<u8>, kind: u16, payload: &[u8]) {
        let len = u16::try_from(4 + payload.len()).expect("attribute fits");
        buf.extend_from_slice(&len.to_ne_bytes());
        buf.extend_from_slice(&kind.to_ne_bytes());
        buf.extend_from_slice(payload);
        while buf.len() % 4 != 0 {
            buf.push(0);
        }
    }
}
