//! The egress root qdisc, through rtnetlink (`RTM_NEWQDISC` with create+replace,
//! `RTM_DELQDISC`). Only kinds that need no parameters are set, and restoring puts
//! back the old kind: deleting the root first (which recreates the device's default,
//! e.g. `noqueue` on veth or `mq` with per-queue children on multi-queue NICs), then,
//! if that is not the old kind, creating the old kind with default parameters. A root
//! napilab could not recreate that way (classful, shaped) is refused at plan time.

use netlink_bindings::tc;

use super::{send_ack, Ctx, Knob, KnobError, KnobResult};
use crate::model::{Key, Value};

pub const ATTRS: &[&str] = &["root"];

/// Kinds napilab sets and restores (parameterless, or with defaults that suffice).
pub const KINDS: &[&str] = &[
    "pfifo_fast",
    "pfifo",
    "bfifo",
    "fq_codel",
    "fq",
    "noqueue",
    "mq",
];

const TC_H_ROOT: u32 = 0xffff_ffff;

pub struct RootQdisc;

fn current(ctx: &mut Ctx, key: &Key) -> KnobResult<(String, Vec<String>)> {
    let link = ctx.device(key)?;
    let all = ctx
        .nl
        .qdiscs()
        .map_err(|e| KnobError::Failed(format!("listing qdiscs: {e}")))?;
    let Some(root) = all.iter().find(|q| q.ifindex == link.ifindex && q.is_root) else {
        return Ok(("noqueue".into(), Vec::new()));
    };
    let children = all
        .iter()
        .filter(|q| q.ifindex == link.ifindex && !q.is_root && q.parent >> 16 == root.handle >> 16)
        .map(|q| q.kind.clone())
        .collect();
    Ok((root.kind.clone(), children))
}

fn tcmsg(ifindex: u32) -> tc::Tcmsg {
    let mut msg = tc::Tcmsg::new();
    msg.ifindex = i32::try_from(ifindex).unwrap_or(0);
    msg.parent = TC_H_ROOT;
    msg
}

fn create(ctx: &mut Ctx, key: &Key, kind: &str) -> KnobResult<()> {
    let link = ctx.device(key)?;
    let mut req = tc::Request::new()
        .set_create()
        .set_replace()
        .op_newqdisc_do(&tcmsg(link.ifindex));
    let mut name = kind.as_bytes().to_vec();
    name.push(0);
    let _ = req.encode().push_kind_bytes(&name);
    let what = format!("tc qdisc replace dev {} root {kind}", link.name);
    send_ack(ctx, &req, &what).map_err(|(_, m)| KnobError::Failed(m))
}

fn delete_root(ctx: &mut Ctx, key: &Key) -> KnobResult<()> {
    let link = ctx.device(key)?;
    let req = tc::Request::new().op_delqdisc_do(&tcmsg(link.ifindex));
    let what = format!("tc qdisc del dev {} root", link.name);
    match send_ack(ctx, &req, &what) {
        // No root of its own (already the default): nothing to delete.
        Err((Some(libc::ENOENT), _)) | Err((Some(libc::EINVAL), _)) => Ok(()),
        Err((_, m)) => Err(KnobError::Failed(m)),
        Ok(()) => Ok(()),
    }
}

impl Knob for RootQdisc {
    fn read(&self, ctx: &mut Ctx, key: &Key) -> KnobResult<Value> {
        current(ctx, key).map(|(k, _)| Value::Text(k))
    }

    fn validate(&self, ctx: &mut Ctx, key: &Key, value: &Value) -> KnobResult<()> {
        let Value::Text(kind) = value else {
            return Err(KnobError::Invalid(format!("{key}: expected a qdisc kind")));
        };
        if !KINDS.contains(&kind.as_str()) {
            return Err(KnobError::Invalid(format!(
                "{key}: napilab sets only {} (kinds it can also restore), not {kind}",
                KINDS.join(", ")
            )));
        }
        let (old, children) = current(ctx, key)?;
        if !KINDS.contains(&old.as_str()) || children.iter().any(|c| !KINDS.contains(&c.as_str())) {
            return Err(KnobError::Invalid(format!(
                "{key}: the current root {old} (children: {}) could not be restored exactly by revert; remove it first",
                if children.is_empty() { "none".into() } else { children.join(", ") }
            )));
        }
        Ok(())
    }

    fn write(&self, ctx: &mut Ctx, key: &Key, value: &Value) -> KnobResult<()> {
        let Value::Text(kind) = value else {
            return Err(KnobError::Invalid(format!("{key}: expected a qdisc kind")));
        };
        if kind == "noqueue" {
            delete_root(ctx, key)?;
            if current(ctx, key)?.0 == "noqueue" {
                return Ok(());
            }
        }
        create(ctx, key, kind)
    }

    fn restore(&self, ctx: &mut Ctx, key: &Key, old: &Value) -> KnobResult<()> {
        let Value::Text(kind) = old else {
            return Err(KnobError::Invalid(format!("{key}: expected a qdisc kind")));
        };
        delete_root(ctx, key)?;
        if &current(ctx, key)?.0 == kind {
            return Ok(());
        }
        create(ctx, key, kind)
    }
}
