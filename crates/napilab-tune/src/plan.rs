//! From a profile and its parameters to a plan: every setting it names, on which
//! device, queue or IRQ, with its current value, the new one and why; what it skips and
//! why. All checks (devices, queues, values, kernel limits, support) happen here,
//! before anything changes.

use serde::{Deserialize, Serialize};

use crate::knobs::{knob, Ctx, KnobError};
use crate::model::{Key, Kind, Value};
use crate::profile::{parse_setting, value_for, AppAdvice, Item, Params, Profile, ProfileError};

pub const PLAN_SCHEMA: &str = "napilab.tune-plan/1";

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Change {
    pub key: Key,
    /// Current value; `None` when the object is created by an earlier change (a NAPI
    /// kthread), in which case apply reads it just before changing it.
    pub from: Option<Value>,
    pub to: Value,
    pub why: String,
    pub required: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Skipped {
    pub setting: String,
    pub reason: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    pub schema: String,
    pub profile: String,
    pub summary: String,
    pub study: String,
    /// `shipped:<name>` or the profile file's path.
    pub source: String,
    pub params: Params,
    /// What apply will change, in order.
    pub changes: Vec<Change>,
    /// Settings the profile names that already have the wanted value.
    pub unchanged: Vec<Change>,
    /// Optional settings left out, with the reason.
    pub skipped: Vec<Skipped>,
    pub app: Option<AppAdvice>,
    /// Things to weigh before applying (e.g. many NAPI kthreads); the same text is also
    /// the note of the change concerned, so the plan's text output shows it there.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

/// NAPI kthreads per online CPU above which a plan warns: each kthread is a task the
/// scheduler places and migrates, and the WireGuard study's remedy of one kthread per
/// peer (docs/studies.md WG-4) costs scheduling when instances far outnumber CPUs.
pub const KTHREADS_PER_CPU_WARNING: usize = 4;

#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    #[error(transparent)]
    Profile(#[from] ProfileError),
    #[error("profile {profile} refused, nothing was changed:\n  {}", errors.join("\n  "))]
    Refused {
        profile: String,
        errors: Vec<String>,
    },
}

/// Plans `profile` with `given` parameters on this host (namespace).
pub fn plan(
    ctx: &mut Ctx,
    profile: &Profile,
    source: &str,
    given: &Params,
) -> Result<Plan, PlanError> {
    let params = given.resolve(profile)?;
    let mut out = Plan {
        schema: PLAN_SCHEMA.into(),
        profile: profile.name.clone(),
        summary: profile.summary.clone(),
        study: profile.study.clone(),
        source: source.to_string(),
        params: params.clone(),
        changes: Vec::new(),
        unchanged: Vec::new(),
        skipped: Vec::new(),
        app: profile.app.clone(),
        warnings: Vec::new(),
    };
    let mut errors = Vec::new();
    let mut irqs: Option<Vec<napilab_core::IrqInfo>> = None;
    let mut seen = std::collections::BTreeSet::new();
    for (n, item) in profile.items.iter().enumerate() {
        let label = format!("[[set]] #{} ({})", n + 1, item.setting);
        if let Some(w) = &item.when {
            if !params.has(w) {
                out.skipped.push(Skipped {
                    setting: item.setting.clone(),
                    reason: format!("--{w} not given"),
                });
                continue;
            }
        }
        let targets = match targets(ctx, item, &params, &mut irqs) {
            Ok(t) => t,
            Err(TargetError::Hard(e)) => {
                errors.push(format!("{label}: {e}"));
                continue;
            }
            Err(TargetError::Unsupported(e)) => {
                if item.required {
                    errors.push(format!("{label}: {e} (the profile requires it)"));
                } else {
                    out.skipped.push(Skipped {
                        setting: item.setting.clone(),
                        reason: e,
                    });
                }
                continue;
            }
        };
        for (key, queue) in targets {
            // busy-poll has no device-wide sysfs form: never fall back for it.
            let busy_poll = key.kind == Kind::Napi
                && key.attr == "threaded"
                && item.value.as_integer() == Some(crate::knobs::THREADED_BUSY_POLL as i64);
            let fallback = if busy_poll {
                None
            } else {
                sysfs_fallback(ctx, &key)
            };
            let (key, fallback_note) = match fallback {
                Some((dev_key, note)) => {
                    if seen.contains(&dev_key) {
                        // Another queue of the device already set the device file.
                        out.skipped.push(Skipped {
                            setting: key.to_string(),
                            reason: format!("covered by {dev_key} (set once for the device)"),
                        });
                        continue;
                    }
                    (dev_key, Some(note))
                }
                None => (key, None),
            };
            if !seen.insert(key.clone()) {
                errors.push(format!("{label}: {key} is set twice by the profile"));
                continue;
            }
            let to = match value_for(key.kind, &key.attr, &item.value, &params, queue) {
                Ok(v) => v,
                Err(e) => {
                    errors.push(format!("{label}: {key}: {e}"));
                    continue;
                }
            };
            let k = knob(key.kind);
            let current = k.read(ctx, &key);
            let checked = k.validate(ctx, &key, &to);
            let change = |from| Change {
                key: key.clone(),
                from,
                to: to.clone(),
                why: item.why.clone(),
                required: item.required,
                note: fallback_note.clone(),
            };
            match (current, checked) {
                (_, Err(KnobError::Invalid(e))) | (_, Err(KnobError::Gone(e))) => {
                    errors.push(format!("{label}: {e}"))
                }
                (Err(KnobError::Gone(e)), _)
                | (Err(KnobError::Failed(e)), _)
                | (Err(KnobError::Invalid(e)), _) => errors.push(format!("{label}: {e}")),
                (_, Err(KnobError::Failed(e))) => errors.push(format!("{label}: {e}")),
                (Err(KnobError::NotYet(_)), _) if created_earlier(&out.changes, &key) => {
                    let mut c = change(None);
                    c.note = Some("the kthread is created by an earlier change".into());
                    out.changes.push(c);
                }
                (Err(KnobError::NotYet(e)), _)
                | (Err(KnobError::Unsupported(e)), _)
                | (_, Err(KnobError::Unsupported(e)))
                | (_, Err(KnobError::NotYet(e))) => {
                    if item.required {
                        errors.push(format!("{label}: {e} (the profile requires it)"));
                    } else {
                        out.skipped.push(Skipped {
                            setting: key.to_string(),
                            reason: e,
                        });
                    }
                }
                (Ok(from), Ok(())) => {
                    if from == to {
                        out.unchanged.push(change(Some(from)));
                    } else {
                        out.changes.push(change(Some(from)));
                    }
                }
            }
        }
    }
    if errors.is_empty() {
        warn_about_kthreads(ctx, &mut out);
        Ok(out)
    } else {
        // An item that expands to many queues fails the same way for each: say it once.
        let mut said = std::collections::BTreeSet::new();
        errors.retain(|e| said.insert(e.clone()));
        Err(PlanError::Refused {
            profile: profile.name.clone(),
            errors,
        })
    }
}

/// True when an earlier change switches on threaded mode for the instance `key`
/// names (device-wide or per NAPI).
fn created_earlier(changes: &[Change], key: &Key) -> bool {
    key.kind == Kind::Thread
        && changes.iter().any(|c| {
            c.to != Value::Num(0)
                && c.key.attr == "threaded"
                && c.key.dev == key.dev
                && (c.key.kind == Kind::Device
                    || (c.key.kind == Kind::Napi && c.key.queue == key.queue))
        })
}

/// The per-device sysfs file that holds a per-NAPI setting for every instance of the
/// device, with the note saying why it is used, when the per-NAPI attribute is not
/// there: `defer-hard-irqs` and `gro-flush-timeout` before 6.13, `threaded` before 6.17
/// (docs/kernel.md#per-napi-settings). For `threaded` also when netlink lists no
/// instance for the queue (a kernel before 6.8, or instances without an id such as a
/// TUN device's): `/sys/class/net/<dev>/threaded` (5.12+) covers those too. Not for a
/// veth without instances (GRO and XDP off): the kernel refuses the device file when
/// the device has no NAPI instance, so the plan keeps the per-NAPI refusal, which says
/// to turn GRO on.
fn sysfs_fallback(ctx: &mut Ctx, key: &Key) -> Option<(Key, String)> {
    if key.kind != Kind::Napi {
        return None;
    }
    let (file, since) = match key.attr.as_str() {
        "defer-hard-irqs" => ("napi_defer_hard_irqs", "6.13"),
        "gro-flush-timeout" => ("gro_flush_timeout", "6.13"),
        "threaded" => ("threaded", "6.17"),
        _ => return None,
    };
    let dev_key = Key {
        kind: Kind::Device,
        attr: file.to_string(),
        dev: key.dev.clone(),
        ifindex: key.ifindex,
        queue: None,
        irq: None,
    };
    let why = match ctx.napi(key) {
        Ok(napi) => {
            let missing = match key.attr.as_str() {
                "defer-hard-irqs" => napi.defer_hard_irqs.is_none(),
                "gro-flush-timeout" => napi.gro_flush_timeout_ns.is_none(),
                _ => napi.threaded.is_none(),
            };
            if !missing {
                return None;
            }
            format!("this kernel has no per-NAPI {} ({since}+)", key.attr)
        }
        Err(KnobError::Unsupported(e)) if key.attr == "threaded" => {
            if !ctx
                .path(&format!("sys/class/net/{}/threaded", key.dev()))
                .exists()
                || ctx.driver(key) == "veth"
            {
                return None;
            }
            format!("per-NAPI threaded cannot be set here ({e})")
        }
        Err(_) => return None,
    };
    let note = format!(
        "{why}: the device-wide sysfs file {} is used, for every instance of {}",
        dev_key.attr,
        key.dev()
    );
    Some((dev_key, note))
}

/// How many NAPI kthreads the plan's changes create: one per instance switched from
/// softirq to threaded (a device-wide switch counts the device's RX queues, the usual
/// one instance per queue).
fn kthreads_created(ctx: &Ctx, changes: &[Change]) -> usize {
    changes
        .iter()
        .filter(|c| {
            c.key.attr == "threaded"
                && c.to != Value::Num(0)
                && matches!(c.from, Some(Value::Num(0)))
        })
        .map(|c| match c.key.kind {
            Kind::Device => ctx.rx_queues(c.key.dev()).len().max(1),
            _ => 1,
        })
        .sum()
}

/// The warning for `created` new NAPI kthreads on `cpus` online CPUs, if they are many.
pub fn kthread_warning(created: usize, cpus: usize) -> Option<String> {
    let cpus = cpus.max(1);
    (created > KTHREADS_PER_CPU_WARNING * cpus).then(|| {
        format!(
            "this plan creates {created} NAPI kthreads for {cpus} online CPUs (more than {KTHREADS_PER_CPU_WARNING} per CPU): each is a task the scheduler places, wakes and migrates, so with many instances the context switches and migrations can cost more than the softirq imbalance they remove; consider pinning them (--cpus) or threading only the busiest instances (napi.threaded with queues = ...)"
        )
    })
}

/// Online CPUs of the host `ctx` describes (its `sys/devices/system/cpu/online`), or
/// of this machine when the file cannot be read.
fn online_cpus(ctx: &Ctx) -> usize {
    std::fs::read_to_string(ctx.path("sys/devices/system/cpu/online"))
        .ok()
        .and_then(|s| napilab_probe::procfs::parse_cpu_list(s.trim()))
        .map(|l| l.len())
        .filter(|n| *n > 0)
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, usize::from))
}

fn warn_about_kthreads(ctx: &Ctx, plan: &mut Plan) {
    let created = kthreads_created(ctx, &plan.changes);
    let Some(warning) = kthread_warning(created, online_cpus(ctx)) else {
        return;
    };
    if let Some(first) = plan.changes.iter_mut().find(|c| c.key.attr == "threaded") {
        first.note = Some(match first.note.take() {
            Some(n) => format!("{n}; WARNING: {warning}"),
            None => format!("WARNING: {warning}"),
        });
    }
    plan.warnings.push(warning);
}

enum TargetError {
    Hard(String),
    Unsupported(String),
}

/// The keys an item expands to, each with the queue index used for `${x[queue]}`.
fn targets(
    ctx: &mut Ctx,
    item: &Item,
    params: &Params,
    irqs: &mut Option<Vec<napilab_core::IrqInfo>>,
) -> Result<Vec<(Key, Option<u32>)>, TargetError> {
    let (kind, attr) = parse_setting(&item.setting).map_err(TargetError::Hard)?;
    if kind.is_global() {
        return Ok(vec![(Key::global(kind, &attr), None)]);
    }
    let devs: Vec<String> = match &item.dev {
        Some(d) => params
            .substitute(d, None)
            .map_err(TargetError::Hard)?
            .split(',')
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect(),
        None => params.list("dev").to_vec(),
    };
    if devs.is_empty() {
        return Err(TargetError::Hard("no device given (--dev)".into()));
    }
    let wanted_queues: Option<Vec<u32>> = match &item.queues {
        None => None,
        Some(toml::Value::Integer(i)) => Some(vec![u32::try_from(*i)
            .map_err(|_| TargetError::Hard(format!("queue {i} is not a queue index")))?]),
        Some(toml::Value::String(s)) if s == "all" => None,
        Some(toml::Value::String(s)) => {
            let text = params.substitute(s, None).map_err(TargetError::Hard)?;
            let mut qs = Vec::new();
            for part in text.split(',') {
                qs.push(part.trim().parse::<u32>().map_err(|_| {
                    TargetError::Hard(format!("queue {part:?} is not a queue index"))
                })?);
            }
            Some(qs)
        }
        Some(other) => return Err(TargetError::Hard(format!("queues = {other} is not valid"))),
    };
    let mut out = Vec::new();
    for dev in devs {
        let mut base = Key::global(kind, &attr);
        base.dev = Some(dev.clone());
        let link = ctx.device(&base).map_err(|e| match e {
            KnobError::Gone(_) => TargetError::Hard(format!("unknown device {dev}")),
            other => TargetError::Hard(other.to_string()),
        })?;
        base.ifindex = Some(link.ifindex);
        let queue_list = |all: Vec<u32>, dir: &str| -> Result<Vec<u32>, TargetError> {
            match &wanted_queues {
                None => Ok(all),
                Some(qs) => {
                    for q in qs {
                        if !all.contains(q) {
                            return Err(TargetError::Hard(format!(
                                "unknown queue: {dev} has no {dir} queue {q} (it has {})",
                                all.len()
                            )));
                        }
                    }
                    Ok(qs.clone())
                }
            }
        };
        match kind {
            Kind::RxQueue | Kind::Napi | Kind::Thread => {
                for q in queue_list(ctx.rx_queues(&dev), "RX")? {
                    let mut k = base.clone();
                    k.queue = Some(q);
                    out.push((k, Some(q)));
                }
            }
            Kind::TxQueue => {
                for q in queue_list(ctx.tx_queues(&dev), "TX")? {
                    let mut k = base.clone();
                    k.queue = Some(q);
                    out.push((k, Some(q)));
                }
            }
            Kind::Irq => {
                let all = irqs.get_or_insert_with(|| {
                    napilab_probe::observe::describe_host(&ctx.root, true)
                        .topology
                        .irqs
                });
                let mut mine: Vec<&napilab_core::IrqInfo> =
                    all.iter().filter(|i| i.device == dev).collect();
                // Queue IRQs only (not `virtio2-config` and the like) when the names
                // say which IRQ serves which queue; otherwise (e.g. `mlx5_comp3`) every
                // IRQ of the device, numbered in order.
                if mine.iter().any(|i| i.queue.is_some()) {
                    mine.retain(|i| i.queue.is_some());
                }
                if mine.is_empty() {
                    let driver = ctx.driver(&base);
                    return Err(TargetError::Unsupported(format!(
                        "IRQ affinity not supported by {dev} ({driver}): it has no IRQs of its own"
                    )));
                }
                for (pos, irq) in mine.iter().enumerate() {
                    let q = irq
                        .queue
                        .as_deref()
                        .and_then(|q| q.rsplit('-').next())
                        .and_then(|n| n.parse::<u32>().ok())
                        .unwrap_or(pos as u32);
                    if let Some(qs) = &wanted_queues {
                        if !qs.contains(&q) {
                            continue;
                        }
                    }
                    let mut k = base.clone();
                    k.irq = Some(irq.number);
                    k.queue = irq.queue.as_ref().map(|_| q);
                    out.push((k, Some(q)));
                }
            }
            _ => out.push((base, None)),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod kthread_tests {
    use super::*;

    #[test]
    fn warns_only_past_four_kthreads_per_cpu() {
        assert_eq!(kthread_warning(8, 2), None);
        let w = kthread_warning(9, 2).expect("9 kthreads on 2 CPUs");
        assert!(w.contains("9 NAPI kthreads for 2 online CPUs"), "{w}");
        assert!(kthread_warning(1_000, 18).is_some());
        assert_eq!(kthread_warning(72, 18), None);
        // No CPU count read: judged as one CPU, never a division by zero.
        assert!(kthread_warning(5, 0).is_some());
    }
}
