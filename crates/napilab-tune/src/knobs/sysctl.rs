//! `net.core` sysctls that bound NAPI work and busy polling. Global: they exist only
//! in the initial network namespace and apply to every namespace.

use super::{num_in, read_num_file, Ctx, Knob, KnobResult};
use crate::model::{Key, Value};

pub const ATTRS: &[&str] = &[
    "netdev_budget",
    "netdev_budget_usecs",
    "dev_weight",
    "busy_poll",
    "busy_read",
];

pub struct Sysctl;

fn rel(key: &Key) -> String {
    format!("proc/sys/net/core/{}", key.attr)
}

impl Knob for Sysctl {
    fn read(&self, ctx: &mut Ctx, key: &Key) -> KnobResult<Value> {
        read_num_file(ctx, &rel(key), &format!("net.core.{}", key.attr), || {
            format!(
                "net.core.{} is not visible in this network namespace (it exists only in the initial one)",
                key.attr
            )
        })
    }

    fn validate(&self, _ctx: &mut Ctx, key: &Key, value: &Value) -> KnobResult<()> {
        // Kernel: netdev_budget and dev_weight are ints where 0 stops processing
        // (refused here); netdev_budget_usecs, busy_poll and busy_read are
        // proc_dointvec_minmax with a minimum of 0.
        let min = match key.attr.as_str() {
            "netdev_budget" | "dev_weight" | "netdev_budget_usecs" => 1,
            _ => 0,
        };
        num_in(key, value, min, i32::MAX as u64).map(|_| ())
    }

    fn write(&self, ctx: &mut Ctx, key: &Key, value: &Value) -> KnobResult<()> {
        let n = num_in(key, value, 0, i32::MAX as u64)?;
        ctx.write_file(&rel(key), &n.to_string())
    }
}
