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

    fn validate(&self, _ctx: &mut Ctx, key: &Key, value: &Value) -> KnobResult<()> {
        let max = match key.attr.as_str() {
            "threaded" => 2,
            "defer-hard-irqs" => i32::MAX as u64,
            // netlink-bindings 0.3.5 sends these as 32-bit values (4.29 s at most).
            _ => u32::MAX as u64,
        };
        num_in(key, value, 0, max).map(|_| ())
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
