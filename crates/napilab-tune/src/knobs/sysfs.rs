//! Per-device and per-queue sysfs files: `threaded`, `gro_flush_timeout`,
//! `napi_defer_hard_irqs` (the fallback for the per-NAPI netlink values), and the RPS
//! and XPS masks and RPS flow counts.

use super::{cpus, io_unsupported, num_in, Ctx, Knob, KnobError, KnobResult};
use crate::model::{cpu_mask, Key, Kind, Value};

pub const DEVICE_ATTRS: &[&str] = &["threaded", "gro_flush_timeout", "napi_defer_hard_irqs"];
pub const RX_ATTRS: &[&str] = &["rps_cpus", "rps_flow_cnt"];
pub const TX_ATTRS: &[&str] = &["xps_cpus"];

pub struct DeviceAttr;

fn device_rel(key: &Key) -> String {
    format!("sys/class/net/{}/{}", key.dev(), key.attr)
}

fn read_num(ctx: &mut Ctx, key: &Key, rel: &str) -> KnobResult<Value> {
    match ctx.read_file(rel) {
        Ok(t) => t
            .parse()
            .map(Value::Num)
            .map_err(|_| KnobError::Failed(format!("/{rel} reads {t:?}"))),
        Err(e) if io_unsupported(&e) => Err(ctx.unsupported(key, &key.attr)),
        Err(e) => Err(KnobError::Failed(format!("reading /{rel}: {e}"))),
    }
}

impl Knob for DeviceAttr {
    fn read(&self, ctx: &mut Ctx, key: &Key) -> KnobResult<Value> {
        ctx.device(key)?;
        read_num(ctx, key, &device_rel(key))
    }

    fn validate(&self, _ctx: &mut Ctx, key: &Key, value: &Value) -> KnobResult<()> {
        let max = match key.attr.as_str() {
            // 0 softirq, 1 threaded. Threaded busy polling (6.19) has no device-wide
            // form: `modify_napi_threaded` refuses anything but 0 and 1, so busy-poll
            // goes per instance through netdev napi-set (`napi.threaded` 2).
            "threaded" => 1,
            // Kernel: napi_defer_hard_irqs is capped at S32_MAX.
            "napi_defer_hard_irqs" => i32::MAX as u64,
            // An unsigned long of nanoseconds; napilab keeps to 32 bits so the
            // per-NAPI netlink value (sent as u32) can always carry it too.
            _ => u32::MAX as u64,
        };
        num_in(key, value, 0, max).map(|_| ())
    }

    fn write(&self, ctx: &mut Ctx, key: &Key, value: &Value) -> KnobResult<()> {
        ctx.device(key)?;
        let n = super::num(key, value)?;
        ctx.write_file(&device_rel(key), &n.to_string())
    }
}

pub struct QueueAttr;

fn queue_rel(key: &Key) -> String {
    let dir = if key.kind == Kind::TxQueue {
        "tx"
    } else {
        "rx"
    };
    format!(
        "sys/class/net/{}/queues/{dir}-{}/{}",
        key.dev(),
        key.queue.unwrap_or(0),
        key.attr
    )
}

fn check_queue(ctx: &mut Ctx, key: &Key) -> KnobResult<()> {
    let link = ctx.device(key)?;
    let q = key.queue.unwrap_or(0);
    let queues = if key.kind == Kind::TxQueue {
        ctx.tx_queues(&link.name)
    } else {
        ctx.rx_queues(&link.name)
    };
    if !queues.contains(&q) {
        let dir = if key.kind == Kind::TxQueue {
            "TX"
        } else {
            "RX"
        };
        return Err(KnobError::Gone(format!(
            "{} has no {dir} queue {q} (it has {})",
            link.name,
            queues.len()
        )));
    }
    Ok(())
}

impl Knob for QueueAttr {
    fn read(&self, ctx: &mut Ctx, key: &Key) -> KnobResult<Value> {
        check_queue(ctx, key)?;
        let rel = queue_rel(key);
        if key.attr == "rps_flow_cnt" {
            return read_num(ctx, key, &rel);
        }
        match ctx.read_file(&rel) {
            Ok(t) => napilab_probe::procfs::parse_cpu_mask(&t)
                .map(Value::Cpus)
                .ok_or_else(|| KnobError::Failed(format!("/{rel} reads {t:?}"))),
            Err(e) if io_unsupported(&e) => Err(ctx.unsupported(key, &key.attr)),
            Err(e) => Err(KnobError::Failed(format!("reading /{rel}: {e}"))),
        }
    }

    fn validate(&self, ctx: &mut Ctx, key: &Key, value: &Value) -> KnobResult<()> {
        if key.attr == "rps_flow_cnt" {
            // The kernel rounds up to a power of two (and refuses more than 2^29 on
            // 64-bit); only powers of two read back as written, so revert is exact.
            let n = num_in(key, value, 0, 1 << 29)?;
            if n != 0 && !n.is_power_of_two() {
                return Err(KnobError::Invalid(format!(
                    "{key}: {n} is not a power of two (the kernel would round it up)"
                )));
            }
            return Ok(());
        }
        cpus(ctx, key, value, true).map(|_| ())
    }

    fn write(&self, ctx: &mut Ctx, key: &Key, value: &Value) -> KnobResult<()> {
        check_queue(ctx, key)?;
        let text = match value {
            Value::Cpus(c) => cpu_mask(c),
            other => super::num(key, other)?.to_string(),
        };
        ctx.write_file(&queue_rel(key), &text)
    }
}
