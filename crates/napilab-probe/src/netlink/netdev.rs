//! Decoding of netdev generic-netlink replies: `napi-get`, `queue-get`, `qstats-get`.
//!
//! The netdev spec types counters and timeouts as `uint`: the kernel sends 4 bytes
//! when the value fits in 32 bits and 8 bytes otherwise (`nla_put_uint`).
//! netlink-bindings 0.3.5 decodes `uint` as a u32 from the first 4 bytes, which on
//! little-endian is the low half, so a counter past 2^32 would silently wrap. Those
//! attributes are therefore read from the raw attribute buffer here ([`uint_attr`]);
//! plain `u32` attributes go through the typed decoder.

use netlink_bindings::netdev::{IterableNapi, IterableQstats, IterableQueue, Napi, Qstats, Queue};
use netlink_bindings::utils::IterableChunks;

use super::{NapiEntry, QueueEntry, QueueStats, QueueType};

// Attribute numbers from include/uapi/linux/netdev.h, for the `uint` attributes
// decoded by hand.
const NAPI_A_GRO_FLUSH_TIMEOUT: u16 = 6;
const NAPI_A_IRQ_SUSPEND_TIMEOUT: u16 = 7;
const QSTATS_A_RX_PACKETS: u16 = 8;
const QSTATS_A_RX_BYTES: u16 = 9;
const QSTATS_A_TX_PACKETS: u16 = 10;
const QSTATS_A_TX_BYTES: u16 = 11;
const QSTATS_A_RX_HW_DROPS: u16 = 13;
const QSTATS_A_TX_HW_DROPS: u16 = 24;

/// The value of a netlink `uint` attribute: 4 or 8 bytes, native endian.
pub(crate) fn parse_uint(payload: &[u8]) -> Option<u64> {
    match payload.len() {
        4 => payload
            .try_into()
            .ok()
            .map(u32::from_ne_bytes)
            .map(u64::from),
        8 => payload.try_into().ok().map(u64::from_ne_bytes),
        _ => None,
    }
}

/// Reads the `uint` attributes listed in `wanted` in one pass over `attrs`.
fn uint_attrs<const N: usize>(attrs: &[u8], wanted: [u16; N]) -> [Option<u64>; N] {
    let mut found = [None; N];
    for (header, payload) in IterableChunks::new(attrs) {
        if let Some(i) = wanted.iter().position(|&w| w == header.r#type) {
            found[i] = parse_uint(payload);
        }
    }
    found
}

/// The value of one `uint` attribute of type `kind` in `attrs`.
#[cfg(test)]
fn uint_attr(attrs: &[u8], kind: u16) -> Option<u64> {
    let [v] = uint_attrs(attrs, [kind]);
    v
}

/// Decodes one NAPI instance; `None` without an id or device.
pub(crate) fn decode_napi(attrs: IterableNapi<'_>) -> Option<NapiEntry> {
    let (mut id, mut ifindex) = (None, None);
    let mut napi = NapiEntry::default();
    for attr in attrs {
        match attr {
            Ok(Napi::Id(v)) => id = Some(v),
            Ok(Napi::Ifindex(v)) => ifindex = Some(v),
            Ok(Napi::Irq(v)) => napi.irq = Some(v),
            Ok(Napi::Pid(v)) => napi.pid = Some(v),
            Ok(Napi::Threaded(v)) => napi.threaded = Some(v),
            Ok(Napi::DeferHardIrqs(v)) => napi.defer_hard_irqs = Some(v),
            _ => {}
        }
    }
    napi.id = id?;
    napi.ifindex = ifindex?;
    [napi.gro_flush_timeout_ns, napi.irq_suspend_timeout_ns] = uint_attrs(
        attrs.get_buf(),
        [NAPI_A_GRO_FLUSH_TIMEOUT, NAPI_A_IRQ_SUSPEND_TIMEOUT],
    );
    Some(napi)
}

/// `NETDEV_QUEUE_TYPE_*` to [`QueueType`]; `None` for a type added after this code.
fn queue_type(v: u32) -> Option<QueueType> {
    match v {
        0 => Some(QueueType::Rx),
        1 => Some(QueueType::Tx),
        _ => None,
    }
}

/// Decodes one queue; `None` without id, device or a known type.
pub(crate) fn decode_queue(attrs: IterableQueue<'_>) -> Option<QueueEntry> {
    let (mut id, mut ifindex, mut kind, mut napi_id) = (None, None, None, None);
    for attr in attrs {
        match attr {
            Ok(Queue::Id(v)) => id = Some(v),
            Ok(Queue::Ifindex(v)) => ifindex = Some(v),
            Ok(Queue::Type(v)) => kind = queue_type(v),
            Ok(Queue::NapiId(v)) => napi_id = Some(v),
            _ => {}
        }
    }
    Some(QueueEntry {
        ifindex: ifindex?,
        id: id?,
        kind: kind?,
        napi_id,
    })
}

/// Decodes the stats of one queue; `None` for a message that is not per-queue.
pub(crate) fn decode_qstats(attrs: IterableQstats<'_>) -> Option<QueueStats> {
    let (mut ifindex, mut kind, mut queue) = (None, None, None);
    for attr in attrs {
        match attr {
            Ok(Qstats::Ifindex(v)) => ifindex = Some(v),
            Ok(Qstats::QueueType(v)) => kind = queue_type(v),
            Ok(Qstats::QueueId(v)) => queue = Some(v),
            _ => {}
        }
    }
    let kind = kind?;
    let [rx_packets, rx_bytes, rx_drops, tx_packets, tx_bytes, tx_drops] = uint_attrs(
        attrs.get_buf(),
        [
            QSTATS_A_RX_PACKETS,
            QSTATS_A_RX_BYTES,
            QSTATS_A_RX_HW_DROPS,
            QSTATS_A_TX_PACKETS,
            QSTATS_A_TX_BYTES,
            QSTATS_A_TX_HW_DROPS,
        ],
    );
    let (packets, bytes, hw_drops) = match kind {
        QueueType::Rx => (rx_packets, rx_bytes, rx_drops),
        QueueType::Tx => (tx_packets, tx_bytes, tx_drops),
    };
    Some(QueueStats {
        ifindex: ifindex?,
        kind,
        queue: queue?,
        packets,
        bytes,
        hw_drops,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netlink::test_attrs::push_attr;
    use netlink_bindings::netdev::{OpNapiGetDump, OpQstatsGetDump, OpQueueGetDump};

    /// A genetlink message: the 4-byte genlmsghdr, then attributes.
    fn genl() -> Vec<u8> {
        vec![0, 1, 0, 0]
    }

    #[test]
    fn uint_accepts_four_and_eight_bytes_only() {
        assert_eq!(parse_uint(&7u32.to_ne_bytes()), Some(7));
        assert_eq!(parse_uint(&(5u64 << 32).to_ne_bytes()), Some(5 << 32));
        assert_eq!(parse_uint(&[1, 2]), None);
        assert_eq!(parse_uint(&[]), None);
    }

    #[test]
    fn napi_keeps_64_bit_timeouts() {
        let mut msg = genl();
        push_attr(&mut msg, 1, &3u32.to_ne_bytes()); // ifindex
        push_attr(&mut msg, 2, &8193u32.to_ne_bytes()); // id
        push_attr(&mut msg, 4, &1234u32.to_ne_bytes()); // pid
        push_attr(&mut msg, 5, &2u32.to_ne_bytes()); // defer-hard-irqs
        push_attr(&mut msg, 6, &(5_000_000_000u64).to_ne_bytes()); // gro-flush-timeout > 2^32
        push_attr(&mut msg, 7, &20_000_000u32.to_ne_bytes()); // irq-suspend-timeout
        push_attr(&mut msg, 8, &1u32.to_ne_bytes()); // threaded

        let attrs = OpNapiGetDump::decode_request(&msg);
        // What the typed getter would have given: the low half.
        assert_eq!(attrs.get_gro_flush_timeout().ok(), Some(705_032_704));
        let napi = decode_napi(attrs).expect("decodes");
        assert_eq!(
            napi,
            NapiEntry {
                id: 8193,
                ifindex: 3,
                irq: None,
                pid: Some(1234),
                threaded: Some(1),
                defer_hard_irqs: Some(2),
                gro_flush_timeout_ns: Some(5_000_000_000),
                irq_suspend_timeout_ns: Some(20_000_000),
            }
        );
        assert_eq!(uint_attr(attrs.get_buf(), 7), Some(20_000_000));
    }

    #[test]
    fn napi_without_id_is_skipped() {
        let mut msg = genl();
        push_attr(&mut msg, 1, &3u32.to_ne_bytes());
        assert!(decode_napi(OpNapiGetDump::decode_request(&msg)).is_none());
    }

    #[test]
    fn queue_decodes_type_and_napi() {
        let mut msg = genl();
        push_attr(&mut msg, 1, &0u32.to_ne_bytes()); // id
        push_attr(&mut msg, 2, &5u32.to_ne_bytes()); // ifindex
        push_attr(&mut msg, 3, &1u32.to_ne_bytes()); // type tx
        let q = decode_queue(OpQueueGetDump::decode_request(&msg)).expect("decodes");
        assert_eq!(
            q,
            QueueEntry {
                ifindex: 5,
                id: 0,
                kind: QueueType::Tx,
                napi_id: None
            }
        );
        let mut msg = genl();
        push_attr(&mut msg, 1, &0u32.to_ne_bytes());
        push_attr(&mut msg, 2, &5u32.to_ne_bytes());
        push_attr(&mut msg, 3, &9u32.to_ne_bytes()); // unknown type
        assert!(decode_queue(OpQueueGetDump::decode_request(&msg)).is_none());
    }

    #[test]
    fn qstats_picks_direction_and_keeps_64_bits() {
        let mut msg = genl();
        push_attr(&mut msg, 1, &2u32.to_ne_bytes()); // ifindex
        push_attr(&mut msg, 2, &0u32.to_ne_bytes()); // queue-type rx
        push_attr(&mut msg, 3, &1u32.to_ne_bytes()); // queue-id
        push_attr(&mut msg, 8, &(6u64 << 32).to_ne_bytes()); // rx-packets
        push_attr(&mut msg, 9, &1500u32.to_ne_bytes()); // rx-bytes
        push_attr(&mut msg, 10, &99u32.to_ne_bytes()); // tx-packets: other direction
        let s = decode_qstats(OpQstatsGetDump::decode_request(&msg)).expect("decodes");
        assert_eq!(
            s,
            QueueStats {
                ifindex: 2,
                kind: QueueType::Rx,
                queue: 1,
                packets: Some(6 << 32),
                bytes: Some(1500),
                hw_drops: None,
            }
        );
    }

    #[test]
    fn device_scope_qstats_are_skipped() {
        let mut msg = genl();
        push_attr(&mut msg, 1, &2u32.to_ne_bytes());
        push_attr(&mut msg, 8, &1u32.to_ne_bytes());
        assert!(decode_qstats(OpQstatsGetDump::decode_request(&msg)).is_none());
    }
}
