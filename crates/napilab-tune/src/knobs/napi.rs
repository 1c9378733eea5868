//! Per-NAPI settings through the netdev generic-netlink family (`napi-set`, Linux
//! 6.13+; `threaded` later). The instance is found from its device and RX queue at
//! every read and write, so ids that changed in between do not matter.

use netlink_bindings::netdev as nd;

use super::{num, num_in, send_ack, Ctx, Knob, KnobError, KnobResult};
use crate::model::{Key, Value};

pub const ATTRS: &[&str] = &[
    "defer-hard-irqs",
    "gro-flush-timeout",
    "irq-suspend-timeout",
    "threaded",
];

/// `threaded = busy-poll` (`NETDEV_NAPI_THREADED_BUSY_POLL`): the third value of the
/// netdev family's `napi-threaded` enum, whose kthread polls continuously with the
/// instance's IRQ masked.
pub const THREADED_BUSY_POLL: u64 = 2;

/// The first kernel whose `napi-set` policy takes it (`NLA_POLICY_MAX(NLA_U32, 2)` for
/// `threaded`; 6.17 and 6.18 stop at 1) and whose `napi-get` can report it.
pub const BUSY_POLL_SINCE: (u32, u32) = (6, 19);

/// Whether this kernel takes `threaded = busy-poll`, from its release
/// (`/proc/sys/kernel/osrelease`) and what `napi-get` reports for the instance's
/// `threaded` (`reported`; `Some(2)` can only come from a kernel that has it). `Err`
/// says what is missing and what to do.
pub fn busy_poll_support(release: Option<&str>, reported: Option<u32>) -> Result<(), String> {
    if reported.map(u64::from) == Some(THREADED_BUSY_POLL) {
        return Ok(());
    }
    let (major, minor) = BUSY_POLL_SINCE;
    let Some(release) = release else {
        return Err(format!(
            "netdev napi-set attribute `threaded` = busy-poll (value {THREADED_BUSY_POLL}) needs Linux {major}.{minor} or later, and /proc/sys/kernel/osrelease could not be read to tell this kernel's version"
        ));
    };
    let version = napilab_core::host_identity::kernel_version(release);
    if version.is_some_and(|v| v >= BUSY_POLL_SINCE) {
        return Ok(());
    }
    let why = match version {
        Some(_) => "whose netdev netlink policy accepts `threaded` 0..=1 only (disabled, enabled)",
        None => "whose version cannot be parsed",
    };
    Err(format!(
        "netdev napi-set attribute `threaded` = busy-poll (value {THREADED_BUSY_POLL}, NETDEV_NAPI_THREADED_BUSY_POLL) needs Linux {major}.{minor} or later; this kernel is {release}, {why}. Run it on a {major}.{minor}+ kernel, or choose profile `threaded` (NAPI kthreads that sleep between polls) or `busy-wait` (the application busy-polls from epoll)"
    ))
}

pub struct NapiAttr;

impl Knob for NapiAttr {
    fn read(&self, ctx: &mut Ctx, key: &Key) -> KnobResult<Value> {
        let napi = ctx.napi(key)?;
        let v = match key.attr.as_str() {
            "defer-hard-irqs" => napi.defer_hard_irqs.map(u64::from),
            "gro-flush-timeout" => napi.gro_flush_timeout_ns,
            "irq-suspend-timeout" => napi.irq_suspend_timeout_ns,
            "threaded" => napi.threaded.map(u64::from),
            other => return Err(KnobError::Invalid(format!("unknown NAPI setting {other}"))),
        };
        v.map(Value::Num).ok_or_else(|| {
            KnobError::Unsupported(format!(
                "per-NAPI {} is not reported by this kernel (defer-hard-irqs, gro-flush-timeout and irq-suspend-timeout need Linux 6.13+, threaded 6.17+)",
                key.attr
            ))
        })
    }

    fn validate(&self, ctx: &mut Ctx, key: &Key, value: &Value) -> KnobResult<()> {
        let max = match key.attr.as_str() {
            "threaded" => THREADED_BUSY_POLL,
            "defer-hard-irqs" => i32::MAX as u64,
            // netlink-bindings 0.3.5 sends these as 32-bit values (4.29 s at most).
            _ => u32::MAX as u64,
        };
        let v = num_in(key, value, 0, max)?;
        if key.attr == "threaded" && v == THREADED_BUSY_POLL {
            // A value outside this kernel's policy: refused at plan time, before
            // anything changes, rather than by the kernel's ERANGE half-way through.
            let release = ctx.read_file("proc/sys/kernel/osrelease").ok();
            let reported = ctx.napi(key).ok().and_then(|n| n.threaded);
            busy_poll_support(release.as_deref(), reported)
                .map_err(|e| KnobError::Invalid(format!("{key}: {e}")))?;
        }
        Ok(())
    }

    fn write(&self, ctx: &mut Ctx, key: &Key, value: &Value) -> KnobResult<()> {
        let napi = ctx.napi(key)?;
        let v = u32::try_from(num(key, value)?)
            .map_err(|_| KnobError::Invalid(format!("{key}: value does not fit 32 bits")))?;
        let mut req = nd::Request::new().op_napi_set_do();
        let enc = req.encode().push_id(napi.id);
        let _ = match key.attr.as_str() {
            "defer-hard-irqs" => enc.push_defer_hard_irqs(v),
            "gro-flush-timeout" => enc.push_gro_flush_timeout(v),
            "irq-suspend-timeout" => enc.push_irq_suspend_timeout(v),
            "threaded" => enc.push_threaded(v),
            other => return Err(KnobError::Invalid(format!("unknown NAPI setting {other}"))),
        };
        let what = format!("netdev napi-set id {} {} {v}", napi.id, key.attr);
        send_ack(ctx, &req, &what).map_err(|(errno, msg)| match errno {
            Some(libc::EOPNOTSUPP) | Some(libc::EINVAL) => KnobError::Unsupported(msg),
            _ => KnobError::Failed(msg),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busy_poll_needs_6_19() {
        let e = busy_poll_support(Some("6.18.0-1-amd64"), Some(1)).expect_err("6.18 refuses");
        assert!(e.contains("6.19"), "{e}");
        assert!(e.contains("6.18.0-1-amd64"), "{e}");
        assert!(e.contains("`threaded`") && e.contains("busy-poll"), "{e}");
        assert!(e.contains("profile `threaded`"), "{e}");
        assert!(busy_poll_support(Some("6.19.0"), None).is_ok());
        assert!(busy_poll_support(Some("7.0.1"), Some(0)).is_ok());
        // A kernel that reports the value has it, whatever its release says.
        assert!(busy_poll_support(Some("6.12.9-backport"), Some(2)).is_ok());
        let e = busy_poll_support(Some("weird"), None).expect_err("unparsable");
        assert!(e.contains("cannot be parsed"), "{e}");
        let e = busy_poll_support(None, None).expect_err("unknown");
        assert!(e.contains("osrelease"), "{e}");
    }
}
