//! The `haltpoll` cpuidle governor's poll window of a KVM guest
//! (drivers/cpuidle/governors/haltpoll.c, module parameters under
//! /sys/module/haltpoll/parameters/). An idle vCPU polls for up to
//! `guest_halt_poll_ns` before it halts; a wake-up inside that window (a NAPI kthread
//! woken by the packet the other vCPU just sent) costs no VM exit and entry. Global:
//! one value for every CPU, in every network namespace.

use super::{num_in, read_num_file, Ctx, Knob, KnobResult};
use crate::model::{Key, Value};

pub const ATTRS: &[&str] = &["guest_halt_poll_ns"];

pub struct Cpuidle;

fn rel(key: &Key) -> String {
    format!("sys/module/haltpoll/parameters/{}", key.attr)
}

impl Knob for Cpuidle {
    fn read(&self, ctx: &mut Ctx, key: &Key) -> KnobResult<Value> {
        let rel = rel(key);
        read_num_file(ctx, &rel, &format!("/{rel}"), || {
            format!(
                "cpuidle.{}: /{rel} does not exist: the haltpoll cpuidle governor is not built in or loaded (it exists only in KVM guests, CONFIG_HALTPOLL_CPUIDLE)",
                key.attr
            )
        })
    }

    fn validate(&self, _ctx: &mut Ctx, key: &Key, value: &Value) -> KnobResult<()> {
        // Kernel: module_param(guest_halt_poll_ns, uint, 0644).
        num_in(key, value, 0, u64::from(u32::MAX)).map(|_| ())
    }

    fn write(&self, ctx: &mut Ctx, key: &Key, value: &Value) -> KnobResult<()> {
        let n = num_in(key, value, 0, u64::from(u32::MAX))?;
        ctx.write_file(&rel(key), &n.to_string())
    }
}
