//! ethtool settings: coalescing, ring sizes and channel counts through the ethtool
//! generic-netlink family (`coalesce-set`, `rings-set`, `channels-set`), and the GRO,
//! GSO and TSO offloads through the `SIOCETHTOOL` ioctl (`ETHTOOL_S{GRO,GSO,TSO}`),
//! which sets one feature without the bitset encoding of `features-set`.
//!
//! netlink-bindings 0.3.5 numbers ethtool commands wrongly (see the probe's
//! netlink/ethtool.rs); the command byte is overwritten with the uapi values.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use netlink_bindings::ethtool as et;

use super::{num, num_in, send_ack, Ctx, Knob, KnobError, KnobResult};
use crate::model::{Key, Kind, Value};

// ETHTOOL_MSG_*_SET from include/uapi/linux/ethtool_netlink.h.
const ETHTOOL_MSG_RINGS_SET: u8 = 16;
const ETHTOOL_MSG_CHANNELS_SET: u8 = 18;
const ETHTOOL_MSG_COALESCE_SET: u8 = 20;

pub const COALESCE_ATTRS: &[&str] = &[
    "adaptive-rx",
    "adaptive-tx",
    "rx-usecs",
    "rx-frames",
    "tx-usecs",
    "tx-frames",
    "rx-usecs-irq",
    "rx-frames-irq",
    "tx-usecs-irq",
    "tx-frames-irq",
];
pub const RINGS_ATTRS: &[&str] = &["rx", "tx"];
pub const CHANNELS_ATTRS: &[&str] = &["rx-count", "tx-count", "combined-count", "other-count"];
pub const FEATURE_ATTRS: &[&str] = &["gro", "gso", "tso"];

pub struct EthtoolParam;

fn pairs(ctx: &mut Ctx, key: &Key) -> KnobResult<Vec<(String, u64)>> {
    let link = ctx.device(key)?;
    let settings = ctx
        .nl
        .ethtool(link.ifindex, &link.name)
        .map_err(|e| KnobError::Failed(format!("ethtool {}: {e}", link.name)))?;
    let part = match key.kind {
        Kind::Coalesce => settings.coalesce,
        Kind::Rings => settings.rings,
        _ => settings.channels,
    };
    let what = format!("ethtool {}", key.kind.as_str());
    part.ok_or_else(|| ctx.unsupported(key, &what))
}

fn lookup(p: &[(String, u64)], name: &str) -> Option<u64> {
    p.iter().find(|(n, _)| n == name).map(|(_, v)| *v)
}

/// One ethtool SET request for `link`, its attribute pushed by `$push` (which may
/// `return` an error for an attribute napilab cannot set), sent and acknowledged. A
/// macro, not a function: each operation's generated request is a type of its own.
macro_rules! set_one {
    ($ctx:expr, $op:ident, $cmd:expr, $link:expr, $what:expr, |$enc:ident| $push:expr) => {{
        let mut req = et::Request::new().$op();
        req.header_mut().cmd = $cmd;
        let $enc = req
            .encode()
            .nested_header()
            .push_dev_index($link.ifindex)
            .end_nested();
        let _ = $push;
        send_ack($ctx, &req, $what)
    }};
}

impl Knob for EthtoolParam {
    fn read(&self, ctx: &mut Ctx, key: &Key) -> KnobResult<Value> {
        let p = pairs(ctx, key)?;
        match lookup(&p, &key.attr) {
            Some(v) => Ok(Value::Num(v)),
            None => {
                let what = format!("{} {}", key.kind.as_str(), key.attr);
                Err(ctx.unsupported(key, &what))
            }
        }
    }

    fn validate(&self, ctx: &mut Ctx, key: &Key, value: &Value) -> KnobResult<()> {
        if key.attr.starts_with("adaptive-") {
            return num_in(key, value, 0, 1).map(|_| ());
        }
        let n = num_in(key, value, 0, u32::MAX as u64)?;
        let max_name = match (key.kind, key.attr.as_str()) {
            (Kind::Rings, "rx") => Some("rx-max".to_string()),
            (Kind::Rings, "tx") => Some("tx-max".to_string()),
            (Kind::Channels, a) => a.strip_suffix("-count").map(|k| format!("{k}-max")),
            _ => None,
        };
        if let Some(max_name) = max_name {
            let p = pairs(ctx, key)?;
            if let Some(max) = lookup(&p, &max_name) {
                if n > max {
                    return Err(KnobError::Invalid(format!(
                        "{key}: {n} exceeds the device's {max_name} of {max}"
                    )));
                }
            }
            if key.kind == Kind::Rings && n == 0 {
                return Err(KnobError::Invalid(format!("{key}: a ring cannot be empty")));
            }
        }
        Ok(())
    }

    fn write(&self, ctx: &mut Ctx, key: &Key, value: &Value) -> KnobResult<()> {
        let link = ctx.device(key)?;
        let v = u32::try_from(num(key, value)?)
            .map_err(|_| KnobError::Invalid(format!("{key}: value does not fit 32 bits")))?;
        let what = format!(
            "ethtool {} {} {v} on {}",
            key.kind.as_str(),
            key.attr,
            link.name
        );
        let unknown = || KnobError::Invalid(format!("{key}: napilab cannot set {}", key.attr));
        let res = match key.kind {
            Kind::Coalesce => set_one!(
                ctx,
                op_coalesce_set_do,
                ETHTOOL_MSG_COALESCE_SET,
                link,
                &what,
                |enc| {
                    let b = u8::from(v != 0);
                    match key.attr.as_str() {
                        "adaptive-rx" => enc.push_use_adaptive_rx(b),
                        "adaptive-tx" => enc.push_use_adaptive_tx(b),
                        "rx-usecs" => enc.push_rx_usecs(v),
                        "rx-frames" => enc.push_rx_max_frames(v),
                        "tx-usecs" => enc.push_tx_usecs(v),
                        "tx-frames" => enc.push_tx_max_frames(v),
                        "rx-usecs-irq" => enc.push_rx_usecs_irq(v),
                        "rx-frames-irq" => enc.push_rx_max_frames_irq(v),
                        "tx-usecs-irq" => enc.push_tx_usecs_irq(v),
                        "tx-frames-irq" => enc.push_tx_max_frames_irq(v),
                        _ => return Err(unknown()),
                    }
                }
            ),
            Kind::Rings => set_one!(
                ctx,
                op_rings_set_do,
                ETHTOOL_MSG_RINGS_SET,
                link,
                &what,
                |enc| {
                    match key.attr.as_str() {
                        "rx" => enc.push_rx(v),
                        "tx" => enc.push_tx(v),
                        _ => return Err(unknown()),
                    }
                }
            ),
            _ => set_one!(
                ctx,
                op_channels_set_do,
                ETHTOOL_MSG_CHANNELS_SET,
                link,
                &what,
                |enc| {
                    match key.attr.as_str() {
                        "rx-count" => enc.push_rx_count(v),
                        "tx-count" => enc.push_tx_count(v),
                        "combined-count" => enc.push_combined_count(v),
                        "other-count" => enc.push_other_count(v),
                        _ => return Err(unknown()),
                    }
                }
            ),
        };
        res.map_err(|(errno, msg)| match errno {
            Some(libc::EOPNOTSUPP) => KnobError::Unsupported(msg),
            _ => KnobError::Failed(msg),
        })
    }
}

// ---- offload features through SIOCETHTOOL ----

const SIOCETHTOOL: libc::c_ulong = 0x8946;
// include/uapi/linux/ethtool.h
const ETHTOOL_GTSO: u32 = 0x1e;
const ETHTOOL_STSO: u32 = 0x1f;
const ETHTOOL_GGSO: u32 = 0x23;
const ETHTOOL_SGSO: u32 = 0x24;
const ETHTOOL_GGRO: u32 = 0x2b;
const ETHTOOL_SGRO: u32 = 0x2c;

#[repr(C)]
struct EthtoolValue {
    cmd: u32,
    data: u32,
}

#[repr(C)]
struct IfreqData {
    name: [u8; 16],
    data: *mut libc::c_void,
    _pad: [u8; 16],
}

pub struct Feature;

fn feature_cmds(attr: &str) -> Option<(u32, u32)> {
    match attr {
        "gro" => Some((ETHTOOL_GGRO, ETHTOOL_SGRO)),
        "gso" => Some((ETHTOOL_GGSO, ETHTOOL_SGSO)),
        "tso" => Some((ETHTOOL_GTSO, ETHTOOL_STSO)),
        _ => None,
    }
}

fn ethtool_value(ctx: &mut Ctx, dev: &str, cmd: u32, data: u32) -> std::io::Result<u32> {
    let bytes = dev.as_bytes();
    if bytes.is_empty() || bytes.len() >= 16 || bytes.contains(&0) {
        return Err(std::io::Error::from_raw_os_error(libc::ENODEV));
    }
    let fd = match &ctx.ioctl_fd {
        Some(fd) => fd.as_raw_fd(),
        None => {
            // SAFETY: plain socket(2); the descriptor is owned below.
            let fd =
                unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
            if fd < 0 {
                return Err(std::io::Error::last_os_error());
            }
            // SAFETY: fresh descriptor nobody else owns.
            ctx.ioctl_fd
                .insert(unsafe { OwnedFd::from_raw_fd(fd) })
                .as_raw_fd()
        }
    };
    let mut value = EthtoolValue { cmd, data };
    let mut ifr = IfreqData {
        name: [0; 16],
        data: (&mut value as *mut EthtoolValue).cast(),
        _pad: [0; 16],
    };
    ifr.name[..bytes.len()].copy_from_slice(bytes);
    // SAFETY: a valid ifreq whose data points at a live ethtool_value.
    let rc = unsafe { libc::ioctl(fd, SIOCETHTOOL as _, &mut ifr as *mut IfreqData) };
    if rc < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(value.data)
}

impl Knob for Feature {
    fn read(&self, ctx: &mut Ctx, key: &Key) -> KnobResult<Value> {
        let link = ctx.device(key)?;
        let (get, _) = feature_cmds(&key.attr)
            .ok_or_else(|| KnobError::Invalid(format!("unknown feature {}", key.attr)))?;
        match ethtool_value(ctx, &link.name, get, 0) {
            Ok(v) => Ok(Value::Num(u64::from(v != 0))),
            Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => {
                let what = key.attr.to_string();
                Err(ctx.unsupported(key, &what))
            }
            Err(e) => Err(KnobError::Failed(format!("reading {key}: {e}"))),
        }
    }

    fn validate(&self, _ctx: &mut Ctx, key: &Key, value: &Value) -> KnobResult<()> {
        num_in(key, value, 0, 1).map(|_| ())
    }

    fn write(&self, ctx: &mut Ctx, key: &Key, value: &Value) -> KnobResult<()> {
        let link = ctx.device(key)?;
        let (_, set) = feature_cmds(&key.attr)
            .ok_or_else(|| KnobError::Invalid(format!("unknown feature {}", key.attr)))?;
        let on = num_in(key, value, 0, 1)?;
        ethtool_value(ctx, &link.name, set, on as u32)
            .map(|_| ())
            .map_err(|e| KnobError::Failed(format!("setting {key} to {on}: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ioctl_structs_match_the_kernel() {
        assert_eq!(std::mem::size_of::<EthtoolValue>(), 8);
        #[cfg(target_pointer_width = "64")]
        assert_eq!(std::mem::size_of::<IfreqData>(), 40);
    }
}
