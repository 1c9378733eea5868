//! Decoding of rtnetlink replies: `RTM_NEWLINK` (link counters) and `RTM_NEWQDISC`
//! (qdisc counters).
//!
//! Each message is walked once, attribute by attribute: the bindings' `get_*`
//! helpers rescan the whole attribute list per call, and these run every second.
//! An attribute that fails to decode is skipped (it becomes `None` or zero), never
//! fatal: a newer kernel may send shapes this code has not seen.

use netlink_bindings::rt_link::{
    IfStatsMsg, Ifinfomsg, IterableLinkAttrs, IterableStatsAttrs, LinkAttrs, RtnlLinkStats64,
    StatsAttrs,
};
use netlink_bindings::tc::{Attrs, IterableAttrs, TcaStatsAttrs, Tcmsg};

use super::{LinkStats, QdiscStats};

/// `TC_H_ROOT` from `include/uapi/linux/pkt_sched.h`: parent of a device's egress root.
pub(crate) const TC_H_ROOT: u32 = 0xffff_ffff;

/// Decodes one link; `None` for a message without a valid index.
pub(crate) fn decode_link(
    (header, attrs): (Ifinfomsg, IterableLinkAttrs<'_>),
) -> Option<LinkStats> {
    let ifindex = u32::try_from(header.ifi_index).ok().filter(|&i| i != 0)?;
    let mut link = LinkStats {
        ifindex,
        ..LinkStats::default()
    };
    let mut have_stats64 = false;
    for attr in attrs {
        match attr {
            Ok(LinkAttrs::Ifname(name)) => link.name = name.to_string_lossy().into_owned(),
            Ok(LinkAttrs::Mtu(mtu)) => link.mtu = Some(mtu),
            Ok(LinkAttrs::Operstate(state)) => link.operstate = Some(operstate_name(state)),
            Ok(LinkAttrs::Linkinfo(info)) => {
                link.kind = info
                    .get_kind()
                    .ok()
                    .map(|k| k.to_string_lossy().into_owned())
            }
            Ok(LinkAttrs::NumRxQueues(n)) => link.num_rx_queues = Some(n),
            Ok(LinkAttrs::NumTxQueues(n)) => link.num_tx_queues = Some(n),
            Ok(LinkAttrs::Stats64(s)) => {
                have_stats64 = true;
                set_counters64(&mut link, &s);
            }
            // The 32-bit IFLA_STATS comes first in the message and wraps; it is used
            // only if no IFLA_STATS64 follows (kernels before 2.6.35).
            Ok(LinkAttrs::Stats(s)) if !have_stats64 => {
                link.rx_packets = s.rx_packets.into();
                link.tx_packets = s.tx_packets.into();
                link.rx_bytes = s.rx_bytes.into();
                link.tx_bytes = s.tx_bytes.into();
                link.rx_dropped = s.rx_dropped.into();
                link.tx_dropped = s.tx_dropped.into();
                link.rx_errors = s.rx_errors.into();
                link.tx_errors = s.tx_errors.into();
            }
            _ => {}
        }
    }
    Some(link)
}

/// Takes the 64-bit counters, keeping the link's identity and settings.
pub(crate) fn set_counters64(link: &mut LinkStats, s: &RtnlLinkStats64) {
    link.rx_packets = s.rx_packets;
    link.tx_packets = s.tx_packets;
    link.rx_bytes = s.rx_bytes;
    link.tx_bytes = s.tx_bytes;
    link.rx_dropped = s.rx_dropped;
    link.tx_dropped = s.tx_dropped;
    link.rx_errors = s.rx_errors;
    link.tx_errors = s.tx_errors;
}

/// Decodes one `RTM_NEWSTATS` message of a dump that asked for `IFLA_STATS_LINK_64`
/// only: the device's index and its counters. `None` for a message without a valid
/// index or without the counters.
pub(crate) fn decode_link_counters(
    (header, attrs): (IfStatsMsg, IterableStatsAttrs<'_>),
) -> Option<(u32, RtnlLinkStats64)> {
    let ifindex = header.ifindex;
    if ifindex == 0 {
        return None;
    }
    attrs.into_iter().find_map(|attr| match attr {
        Ok(StatsAttrs::Link64(s)) => Some((ifindex, s)),
        _ => None,
    })
}

/// Lower-case name of an `IF_OPER_*` value (`include/uapi/linux/if.h`).
pub(crate) fn operstate_name(state: u8) -> String {
    let name = match state {
        0 => "unknown",
        1 => "notpresent",
        2 => "down",
        3 => "lowerlayerdown",
        4 => "testing",
        5 => "dormant",
        6 => "up",
        other => return format!("state-{other}"),
    };
    name.to_string()
}

/// Decodes one qdisc; `None` for a message without a kind or a valid index.
pub(crate) fn decode_qdisc((header, attrs): (Tcmsg, IterableAttrs<'_>)) -> Option<QdiscStats> {
    let ifindex = u32::try_from(header.ifindex).ok().filter(|&i| i != 0)?;
    let mut q = QdiscStats {
        ifindex,
        handle: header.handle,
        parent: header.parent,
        is_root: header.parent == TC_H_ROOT,
        ..QdiscStats::default()
    };
    let mut kind = None;
    let mut have_stats2 = false;
    for attr in attrs {
        match attr {
            Ok(Attrs::Kind(k)) => kind = Some(k.to_string_lossy().into_owned()),
            Ok(Attrs::Stats2(stats)) => {
                have_stats2 = true;
                let mut pkt64 = None;
                for s in stats {
                    match s {
                        Ok(TcaStatsAttrs::Basic(b)) => {
                            q.bytes = b.bytes;
                            q.packets = b.packets.into();
                        }
                        Ok(TcaStatsAttrs::Queue(qs)) => {
                            q.qlen = qs.qlen.into();
                            q.backlog_bytes = qs.backlog.into();
                            q.drops = qs.drops.into();
                            q.requeues = qs.requeues.into();
                            q.overlimits = qs.overlimits.into();
                        }
                        // Sent (5.5+) only once the 32-bit packet count has wrapped.
                        Ok(TcaStatsAttrs::Pkt64(p)) => pkt64 = Some(p),
                        _ => {}
                    }
                }
                if let Some(p) = pkt64 {
                    q.packets = p;
                }
            }
            // Legacy struct tc_stats, also sent by current kernels; it has no
            // requeues, so TCA_STATS2 wins when both are present.
            Ok(Attrs::Stats(s)) if !have_stats2 => {
                q.bytes = s.bytes;
                q.packets = s.packets.into();
                q.drops = s.drops.into();
                q.overlimits = s.overlimits.into();
                q.qlen = s.qlen.into();
                q.backlog_bytes = s.backlog.into();
            }
            _ => {}
        }
    }
    q.kind = kind?;
    Some(q)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netlink::test_attrs::push_attr;
    use netlink_bindings::rt_link::{OpGetlinkDump, RtnlLinkStats64};
    use netlink_bindings::tc::OpGetqdiscDump;

    #[test]
    fn operstate_names_match_if_h() {
        assert_eq!(operstate_name(6), "up");
        assert_eq!(operstate_name(2), "down");
        assert_eq!(operstate_name(0), "unknown");
        assert_eq!(operstate_name(42), "state-42");
    }

    #[test]
    fn link_message_decodes_counters_and_kind() {
        let header = Ifinfomsg {
            ifi_index: 7,
            ..Default::default()
        };
        let mut msg = header.as_slice().to_vec();
        push_attr(&mut msg, 3, b"vb\0"); // IFLA_IFNAME
        push_attr(&mut msg, 4, &1500u32.to_ne_bytes()); // IFLA_MTU
        push_attr(&mut msg, 16, &[6]); // IFLA_OPERSTATE
        let mut stats = RtnlLinkStats64::new();
        stats.rx_packets = 5_000_000_000; // past 2^32: must survive
        stats.tx_packets = 3;
        stats.rx_dropped = 2;
        push_attr(&mut msg, 23, stats.as_slice()); // IFLA_STATS64
        let mut info = Vec::new();
        push_attr(&mut info, 1, b"veth\0"); // IFLA_INFO_KIND
        push_attr(&mut msg, 18 | 0x8000, &info); // IFLA_LINKINFO, nested
        push_attr(&mut msg, 31, &4u32.to_ne_bytes()); // IFLA_NUM_TX_QUEUES
        push_attr(&mut msg, 32, &2u32.to_ne_bytes()); // IFLA_NUM_RX_QUEUES

        let link = decode_link(OpGetlinkDump::decode_request(&msg)).expect("decodes");
        assert_eq!(link.ifindex, 7);
        assert_eq!(link.name, "vb");
        assert_eq!(link.mtu, Some(1500));
        assert_eq!(link.operstate.as_deref(), Some("up"));
        assert_eq!(link.kind.as_deref(), Some("veth"));
        assert_eq!(link.num_tx_queues, Some(4));
        assert_eq!(link.num_rx_queues, Some(2));
        assert_eq!(link.rx_packets, 5_000_000_000);
        assert_eq!(link.tx_packets, 3);
        assert_eq!(link.rx_dropped, 2);
    }

    #[test]
    fn truncated_link_message_gives_defaults_not_panic() {
        let header = Ifinfomsg {
            ifi_index: 3,
            ..Default::default()
        };
        let mut msg = header.as_slice().to_vec();
        push_attr(&mut msg, 4, &[1, 2]); // IFLA_MTU too short
        msg.extend_from_slice(&[200, 0, 3]); // a header claiming more than there is
        let link = decode_link(OpGetlinkDump::decode_request(&msg)).expect("decodes");
        assert_eq!(link.mtu, None);
        assert_eq!(link.name, "");
        // No index at all: skipped.
        assert!(decode_link(OpGetlinkDump::decode_request(&[1, 2, 3])).is_none());
    }

    #[test]
    fn qdisc_message_prefers_stats2_and_pkt64() {
        let header = Tcmsg {
            ifindex: 4,
            handle: 0x8001_0000,
            parent: TC_H_ROOT,
            ..Default::default()
        };
        let mut msg = header.as_slice().to_vec();
        push_attr(&mut msg, 1, b"pfifo\0"); // TCA_KIND
        let mut basic = Vec::new();
        basic.extend_from_slice(&1234u64.to_ne_bytes());
        basic.extend_from_slice(&10u32.to_ne_bytes());
        basic.extend_from_slice(&[0; 4]);
        let mut queue = Vec::new();
        for v in [1u32, 100, 7, 2, 3] {
            // qlen, backlog, drops, requeues, overlimits
            queue.extend_from_slice(&v.to_ne_bytes());
        }
        let mut stats2 = Vec::new();
        push_attr(&mut stats2, 1, &basic); // TCA_STATS_BASIC
        push_attr(&mut stats2, 3, &queue); // TCA_STATS_QUEUE
        push_attr(&mut stats2, 8, &(1u64 << 33).to_ne_bytes()); // TCA_STATS_PKT64
        push_attr(&mut msg, 7 | 0x8000, &stats2); // TCA_STATS2
        push_attr(&mut msg, 3, &[0xff; 36]); // legacy TCA_STATS: ignored

        let q = decode_qdisc(OpGetqdiscDump::decode_request(&msg)).expect("decodes");
        assert_eq!(q.kind, "pfifo");
        assert!(q.is_root);
        assert_eq!(q.handle, 0x8001_0000);
        assert_eq!(q.bytes, 1234);
        assert_eq!(q.packets, 1 << 33);
        assert_eq!((q.qlen, q.backlog_bytes, q.drops), (1, 100, 7));
        assert_eq!((q.requeues, q.overlimits), (2, 3));
    }

    #[test]
    fn qdisc_without_kind_is_skipped() {
        let header = Tcmsg {
            ifindex: 4,
            ..Default::default()
        };
        let msg = header.as_slice().to_vec();
        assert!(decode_qdisc(OpGetqdiscDump::decode_request(&msg)).is_none());
    }
}
