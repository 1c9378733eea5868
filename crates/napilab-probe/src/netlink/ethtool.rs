//! A device's ethtool view: channels, rings and coalescing through the ethtool
//! generic-netlink family, and the driver name through the `ETHTOOL_GDRVINFO` ioctl
//! (ethtool netlink has no driver-info message).
//!
//! Not on the per-second path: a request is encoded per call.
//!
//! netlink-bindings 0.3.5 numbers the ethtool commands as if notifications shared
//! the request id space (it sends 24 for channels-get), which the kernel answers
//! with EOPNOTSUPP. The command byte is therefore overwritten with the values of
//! `include/uapi/linux/ethtool_netlink.h`, which are ABI and never change.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use netlink_bindings::ethtool::{
    self as et, Channels, Coalesce, IterableChannels, IterableCoalesce, IterableRings, Rings,
};
use netlink_bindings::traits::NetlinkRequest;

use super::error::{ErrorClass, Failure, Stage};
use super::{dump, EthtoolSettings, Netlink, NetlinkError};

type Pairs = Vec<(String, u64)>;

// ETHTOOL_MSG_*_GET, userspace-to-kernel ids (see the module comment).
const ETHTOOL_MSG_RINGS_GET: u8 = 15;
const ETHTOOL_MSG_CHANNELS_GET: u8 = 17;
const ETHTOOL_MSG_COALESCE_GET: u8 = 19;

pub(crate) fn settings(
    nl: &mut Netlink,
    ifindex: u32,
    ifname: &str,
) -> Result<EthtoolSettings, NetlinkError> {
    let driver = driver_name(nl, ifname)?;

    let mut req = et::Request::new().op_channels_get_do();
    req.header_mut().cmd = ETHTOOL_MSG_CHANNELS_GET;
    push_header(req.encode().nested_header(), ifindex, ifname);
    let channels = part(nl, "ethtool channels-get", &req, decode_channels)?;

    let mut req = et::Request::new().op_rings_get_do();
    req.header_mut().cmd = ETHTOOL_MSG_RINGS_GET;
    push_header(req.encode().nested_header(), ifindex, ifname);
    let rings = part(nl, "ethtool rings-get", &req, decode_rings)?;

    let mut req = et::Request::new().op_coalesce_get_do();
    req.header_mut().cmd = ETHTOOL_MSG_COALESCE_GET;
    push_header(req.encode().nested_header(), ifindex, ifname);
    let coalesce = part(nl, "ethtool coalesce-get", &req, decode_coalesce)?;

    Ok(EthtoolSettings {
        driver,
        channels,
        rings,
        coalesce,
    })
}

/// Names the device in the request header: by index when known (names can be reused
/// after a rename), else by name.
fn push_header<P: netlink_bindings::traits::Pusher>(
    h: et::PushHeader<P>,
    ifindex: u32,
    ifname: &str,
) {
    let h = if ifindex != 0 {
        h.push_dev_index(ifindex)
    } else {
        h.push_dev_name_bytes(ifname.as_bytes())
    };
    h.end_nested();
}

/// Runs one ethtool "get" request. `Ok(None)` when the driver lacks the operation
/// (EOPNOTSUPP) or the kernel lacks the family.
fn part<R, F>(
    nl: &mut Netlink,
    what: &str,
    req: &R,
    mut decode: F,
) -> Result<Option<Pairs>, NetlinkError>
where
    R: NetlinkRequest,
    F: for<'b> FnMut(R::ReplyType<'b>) -> Pairs,
{
    if nl.ethtool_absent {
        return Ok(None);
    }
    let mut out = Vec::with_capacity(1);
    // A "do" request answers with one message, then the ACK; dump() reads both, so
    // nothing is left on the socket for the next request.
    match dump(&mut nl.sock, req, &mut out, |m| Some(decode(m))) {
        Ok(()) => Ok(out.pop()),
        Err(f) if f.class(true) == ErrorClass::Unsupported => {
            // At the request stage the family itself is missing (kernel before 5.6 or
            // built without ETHTOOL_NETLINK): remember, it will not appear later.
            if f.stage == Stage::Request {
                nl.ethtool_absent = true;
            }
            Ok(None)
        }
        Err(f) => Err(f.into_error("ethtool", true, what)),
    }
}

fn decode_channels(attrs: IterableChannels<'_>) -> Pairs {
    let mut out = Pairs::new();
    for attr in attrs {
        let (name, v) = match attr {
            Ok(Channels::RxMax(v)) => ("rx-max", v),
            Ok(Channels::TxMax(v)) => ("tx-max", v),
            Ok(Channels::OtherMax(v)) => ("other-max", v),
            Ok(Channels::CombinedMax(v)) => ("combined-max", v),
            Ok(Channels::RxCount(v)) => ("rx-count", v),
            Ok(Channels::TxCount(v)) => ("tx-count", v),
            Ok(Channels::OtherCount(v)) => ("other-count", v),
            Ok(Channels::CombinedCount(v)) => ("combined-count", v),
            _ => continue,
        };
        out.push((name.to_string(), v.into()));
    }
    out
}

fn decode_rings(attrs: IterableRings<'_>) -> Pairs {
    let mut out = Pairs::new();
    for attr in attrs {
        let (name, v): (&str, u64) = match attr {
            Ok(Rings::RxMax(v)) => ("rx-max", v.into()),
            Ok(Rings::RxMiniMax(v)) => ("rx-mini-max", v.into()),
            Ok(Rings::RxJumboMax(v)) => ("rx-jumbo-max", v.into()),
            Ok(Rings::TxMax(v)) => ("tx-max", v.into()),
            Ok(Rings::Rx(v)) => ("rx", v.into()),
            Ok(Rings::RxMini(v)) => ("rx-mini", v.into()),
            Ok(Rings::RxJumbo(v)) => ("rx-jumbo", v.into()),
            Ok(Rings::Tx(v)) => ("tx", v.into()),
            Ok(Rings::RxBufLen(v)) => ("rx-buf-len", v.into()),
            Ok(Rings::TcpDataSplit(v)) => ("tcp-data-split", v.into()),
            Ok(Rings::CqeSize(v)) => ("cqe-size", v.into()),
            Ok(Rings::TxPush(v)) => ("tx-push", v.into()),
            Ok(Rings::RxPush(v)) => ("rx-push", v.into()),
            Ok(Rings::TxPushBufLen(v)) => ("tx-push-buf-len", v.into()),
            Ok(Rings::TxPushBufLenMax(v)) => ("tx-push-buf-len-max", v.into()),
            Ok(Rings::HdsThresh(v)) => ("hds-thresh", v.into()),
            Ok(Rings::HdsThreshMax(v)) => ("hds-thresh-max", v.into()),
            _ => continue,
        };
        out.push((name.to_string(), v));
    }
    out
}

/// Names follow `ethtool -C` ("rx-frames" for `rx-max-frames`, "adaptive-rx" for
/// `use-adaptive-rx`, "sample-interval" for `rate-sample-interval`).
fn decode_coalesce(attrs: IterableCoalesce<'_>) -> Pairs {
    let mut out = Pairs::new();
    for attr in attrs {
        let (name, v): (&str, u64) = match attr {
            Ok(Coalesce::RxUsecs(v)) => ("rx-usecs", v.into()),
            Ok(Coalesce::RxMaxFrames(v)) => ("rx-frames", v.into()),
            Ok(Coalesce::RxUsecsIrq(v)) => ("rx-usecs-irq", v.into()),
            Ok(Coalesce::RxMaxFramesIrq(v)) => ("rx-frames-irq", v.into()),
            Ok(Coalesce::TxUsecs(v)) => ("tx-usecs", v.into()),
            Ok(Coalesce::TxMaxFrames(v)) => ("tx-frames", v.into()),
            Ok(Coalesce::TxUsecsIrq(v)) => ("tx-usecs-irq", v.into()),
            Ok(Coalesce::TxMaxFramesIrq(v)) => ("tx-frames-irq", v.into()),
            Ok(Coalesce::StatsBlockUsecs(v)) => ("stats-block-usecs", v.into()),
            Ok(Coalesce::UseAdaptiveRx(v)) => ("adaptive-rx", v.into()),
            Ok(Coalesce::UseAdaptiveTx(v)) => ("adaptive-tx", v.into()),
            Ok(Coalesce::PktRateLow(v)) => ("pkt-rate-low", v.into()),
            Ok(Coalesce::RxUsecsLow(v)) => ("rx-usecs-low", v.into()),
            Ok(Coalesce::RxMaxFramesLow(v)) => ("rx-frames-low", v.into()),
            Ok(Coalesce::TxUsecsLow(v)) => ("tx-usecs-low", v.into()),
            Ok(Coalesce::TxMaxFramesLow(v)) => ("tx-frames-low", v.into()),
            Ok(Coalesce::PktRateHigh(v)) => ("pkt-rate-high", v.into()),
            Ok(Coalesce::RxUsecsHigh(v)) => ("rx-usecs-high", v.into()),
            Ok(Coalesce::RxMaxFramesHigh(v)) => ("rx-frames-high", v.into()),
            Ok(Coalesce::TxUsecsHigh(v)) => ("tx-usecs-high", v.into()),
            Ok(Coalesce::TxMaxFramesHigh(v)) => ("tx-frames-high", v.into()),
            Ok(Coalesce::RateSampleInterval(v)) => ("sample-interval", v.into()),
            Ok(Coalesce::UseCqeModeTx(v)) => ("cqe-mode-tx", v.into()),
            Ok(Coalesce::UseCqeModeRx(v)) => ("cqe-mode-rx", v.into()),
            Ok(Coalesce::TxAggrMaxBytes(v)) => ("tx-aggr-max-bytes", v.into()),
            Ok(Coalesce::TxAggrMaxFrames(v)) => ("tx-aggr-max-frames", v.into()),
            Ok(Coalesce::TxAggrTimeUsecs(v)) => ("tx-aggr-time-usecs", v.into()),
            Ok(Coalesce::RxCqeFrames(v)) => ("rx-cqe-frames", v.into()),
            Ok(Coalesce::RxCqeNsecs(v)) => ("rx-cqe-nsecs", v.into()),
            // The DIM profiles are nested tables, not scalars.
            _ => continue,
        };
        out.push((name.to_string(), v));
    }
    out
}

// ---- ETHTOOL_GDRVINFO ioctl ----

/// `SIOCETHTOOL` from `include/uapi/linux/sockios.h`.
const SIOCETHTOOL: u64 = 0x8946;
/// `ETHTOOL_GDRVINFO` from `include/uapi/linux/ethtool.h`.
const ETHTOOL_GDRVINFO: u32 = 0x0000_0003;
const IFNAMSIZ: usize = 16;

/// `struct ethtool_drvinfo`.
#[repr(C)]
struct EthtoolDrvinfo {
    cmd: u32,
    driver: [u8; 32],
    version: [u8; 32],
    fw_version: [u8; 32],
    bus_info: [u8; 32],
    erom_version: [u8; 32],
    reserved2: [u8; 12],
    n_priv_flags: u32,
    n_stats: u32,
    testinfo_len: u32,
    eedump_len: u32,
    regdump_len: u32,
}

/// `struct ifreq` with the `ifr_data` member; padded to the kernel's 40 bytes (the
/// union also holds a 24-byte `struct ifmap`).
#[repr(C)]
struct IfreqData {
    name: [u8; IFNAMSIZ],
    data: *mut libc::c_void,
    _pad: [u8; 16],
}

/// Driver name via `ETHTOOL_GDRVINFO`; `None` when the name cannot be sent (too
/// long, contains NUL) or the device does not answer the ioctl.
fn driver_name(nl: &mut Netlink, ifname: &str) -> Result<Option<String>, NetlinkError> {
    let what = || format!("ETHTOOL_GDRVINFO ioctl on {ifname}");
    let Some(name) = ifreq_name(ifname) else {
        return Ok(None);
    };
    let fd = match &nl.ioctl_sock {
        Some(fd) => fd.as_raw_fd(),
        None => {
            let fd = open_ioctl_socket()
                .map_err(|e| Failure::request(&e).into_error("ethtool", false, &what()))?;
            nl.ioctl_sock.insert(fd).as_raw_fd()
        }
    };
    let mut info = EthtoolDrvinfo {
        cmd: ETHTOOL_GDRVINFO,
        driver: [0; 32],
        version: [0; 32],
        fw_version: [0; 32],
        bus_info: [0; 32],
        erom_version: [0; 32],
        reserved2: [0; 12],
        n_priv_flags: 0,
        n_stats: 0,
        testinfo_len: 0,
        eedump_len: 0,
        regdump_len: 0,
    };
    let mut ifr = IfreqData {
        name,
        data: (&mut info as *mut EthtoolDrvinfo).cast(),
        _pad: [0; 16],
    };
    // SAFETY: `ifr` is a valid, NUL-terminated ifreq whose data pointer refers to a
    // live ethtool_drvinfo of the size the kernel copies back for this command.
    let rc = unsafe { libc::ioctl(fd, SIOCETHTOOL as _, &mut ifr as *mut IfreqData) };
    if rc < 0 {
        let err = io::Error::last_os_error();
        let failure = Failure::syscall(&err);
        // A vanished device and a refusal are worth reporting; anything else
        // (EOPNOTSUPP, EINVAL from odd drivers) just means "no driver name".
        let fatal = err.raw_os_error() == Some(libc::ENODEV)
            || failure.class(false) == ErrorClass::Permission;
        return if fatal {
            Err(failure.into_error("ethtool", false, &what()))
        } else {
            Ok(None)
        };
    }
    Ok(c_string(&info.driver).filter(|d| !d.is_empty()))
}

/// `ifname` as a NUL-padded `ifr_name`, if it fits (IFNAMSIZ - 1 bytes, no NUL).
fn ifreq_name(ifname: &str) -> Option<[u8; IFNAMSIZ]> {
    let bytes = ifname.as_bytes();
    if bytes.is_empty() || bytes.len() >= IFNAMSIZ || bytes.contains(&0) {
        return None;
    }
    let mut name = [0u8; IFNAMSIZ];
    name[..bytes.len()].copy_from_slice(bytes);
    Some(name)
}

/// The text before the first NUL of a fixed-size kernel string field.
fn c_string(field: &[u8]) -> Option<String> {
    let end = field.iter().position(|&b| b == 0).unwrap_or(field.len());
    std::str::from_utf8(&field[..end]).ok().map(str::to_string)
}

/// Any socket serves SIOCETHTOOL (the core handles it before the protocol); AF_INET
/// datagram is what ethtool(8) uses. Like the netlink sockets, it is bound to the
/// network namespace of the thread that creates it.
fn open_ioctl_socket() -> io::Result<OwnedFd> {
    // SAFETY: plain socket(2) call; the returned descriptor is owned below.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a freshly created descriptor nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ifreq_name_rejects_what_the_kernel_would() {
        assert!(ifreq_name("eth0").is_some());
        assert!(ifreq_name("fifteen-chars-x").is_some());
        assert!(ifreq_name("sixteen-chars-xx").is_none());
        assert!(ifreq_name("").is_none());
        assert!(ifreq_name("a\0b").is_none());
    }

    #[test]
    fn c_string_stops_at_nul() {
        let mut f = [0u8; 32];
        f[..4].copy_from_slice(b"veth");
        assert_eq!(c_string(&f).as_deref(), Some("veth"));
        assert_eq!(c_string(b"full").as_deref(), Some("full"));
    }

    #[test]
    fn kernel_struct_sizes_match() {
        assert_eq!(std::mem::size_of::<EthtoolDrvinfo>(), 196);
        #[cfg(target_pointer_width = "64")]
        assert_eq!(std::mem::size_of::<IfreqData>(), 40);
    }

    #[test]
    fn channel_attributes_get_cli_names() {
        let mut msg = vec![0u8, 1, 0, 0]; // genlmsghdr
        for (kind, v) in [(5u16, 1u32), (9, 4)] {
            // combined-max, combined-count
            msg.extend_from_slice(&8u16.to_ne_bytes());
            msg.extend_from_slice(&kind.to_ne_bytes());
            msg.extend_from_slice(&v.to_ne_bytes());
        }
        let pairs = decode_channels(et::OpChannelsGetDo::decode_request(&msg));
        assert_eq!(
            pairs,
            vec![
                ("combined-max".to_string(), 1),
                ("combined-count".to_string(), 4)
            ]
        );
    }
}
