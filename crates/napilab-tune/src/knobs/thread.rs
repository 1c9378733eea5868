//! The `napi/<dev>-<id>` kthread of a threaded NAPI instance: CPU affinity
//! (`sched_setaffinity`) and scheduling policy and priority (`sched_setscheduler`).
//! The thread is found through the instance's PID in `napi-get`, afresh each time:
//! switching threaded mode off and on creates a new thread.

use super::{cpus, Ctx, Knob, KnobError, KnobResult};
use crate::model::{Key, Value};

pub const ATTRS: &[&str] = &["affinity", "sched"];

pub struct NapiThread;

fn pid(ctx: &mut Ctx, key: &Key) -> KnobResult<libc::pid_t> {
    let napi = ctx.napi(key)?;
    match napi.pid.filter(|p| *p > 0) {
        Some(p) => libc::pid_t::try_from(p)
            .map_err(|_| KnobError::Failed(format!("PID {p} out of range"))),
        None => Err(KnobError::NotYet(format!(
            "the NAPI instance serving {} rx-{} is not threaded: it has no kthread (the softirq runs it)",
            key.dev(),
            key.queue.unwrap_or(0)
        ))),
    }
}

const POLICIES: &[(&str, libc::c_int)] = &[
    ("SCHED_OTHER", libc::SCHED_OTHER),
    ("SCHED_FIFO", libc::SCHED_FIFO),
    ("SCHED_RR", libc::SCHED_RR),
    ("SCHED_BATCH", libc::SCHED_BATCH),
    ("SCHED_IDLE", libc::SCHED_IDLE),
];

/// `fifo:50`, `SCHED_RR:10`, `other` -> a [`Value::Sched`].
pub fn parse_sched(s: &str) -> Result<Value, String> {
    let (p, prio) = match s.split_once(':') {
        Some((p, n)) => (
            p,
            n.trim()
                .parse::<u32>()
                .map_err(|_| format!("{s:?}: priority {n:?} is not a number"))?,
        ),
        None => (s, 0),
    };
    let upper = p.trim().to_ascii_uppercase();
    let name = if upper.starts_with("SCHED_") {
        upper
    } else {
        format!("SCHED_{upper}")
    };
    if !POLICIES.iter().any(|(n, _)| *n == name) {
        return Err(format!(
            "{s:?}: unknown policy (use other, fifo:N, rr:N, batch or idle)"
        ));
    }
    Ok(Value::Sched {
        policy: name,
        priority: prio,
    })
}

impl Knob for NapiThread {
    fn read(&self, ctx: &mut Ctx, key: &Key) -> KnobResult<Value> {
        let pid = pid(ctx, key)?;
        match key.attr.as_str() {
            "affinity" => {
                // SAFETY: cpu_set_t is plain data; sched_getaffinity writes at most
                // its size.
                let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
                let rc = unsafe {
                    libc::sched_getaffinity(pid, std::mem::size_of::<libc::cpu_set_t>(), &mut set)
                };
                if rc != 0 {
                    return Err(KnobError::Failed(format!(
                        "sched_getaffinity({pid}): {}",
                        std::io::Error::last_os_error()
                    )));
                }
                let cpus = (0..libc::CPU_SETSIZE as u32)
                    // SAFETY: index is below CPU_SETSIZE.
                    .filter(|c| unsafe { libc::CPU_ISSET(*c as usize, &set) })
                    .collect();
                Ok(Value::Cpus(cpus))
            }
            _ => {
                // SAFETY: plain syscalls on a PID; param is written by the kernel.
                let policy = unsafe { libc::sched_getscheduler(pid) };
                let mut param = libc::sched_param { sched_priority: 0 };
                let rc = unsafe { libc::sched_getparam(pid, &mut param) };
                if policy < 0 || rc != 0 {
                    return Err(KnobError::Failed(format!(
                        "sched_getscheduler({pid}): {}",
                        std::io::Error::last_os_error()
                    )));
                }
                // SCHED_RESET_ON_FORK may be or-ed in.
                let policy = policy & !libc::SCHED_RESET_ON_FORK;
                let name = POLICIES
                    .iter()
                    .find(|(_, p)| *p == policy)
                    .map(|(n, _)| n.to_string())
                    .ok_or_else(|| KnobError::Unsupported(format!("thread {pid} has scheduling policy {policy}, which napilab cannot restore")))?;
                Ok(Value::Sched {
                    policy: name,
                    priority: u32::try_from(param.sched_priority).unwrap_or(0),
                })
            }
        }
    }

    fn validate(&self, ctx: &mut Ctx, key: &Key, value: &Value) -> KnobResult<()> {
        match (key.attr.as_str(), value) {
            ("affinity", v) => cpus(ctx, key, v, false).map(|_| ()),
            (_, Value::Sched { policy, priority }) => {
                let rt = policy == "SCHED_FIFO" || policy == "SCHED_RR";
                let ok = if rt {
                    (1..=99).contains(priority)
                } else {
                    *priority == 0
                };
                if !POLICIES.iter().any(|(n, _)| n == policy) || !ok {
                    return Err(KnobError::Invalid(format!(
                        "{key}: {value} is not valid (SCHED_FIFO and SCHED_RR take priority 1-99, the others 0)"
                    )));
                }
                Ok(())
            }
            (_, other) => Err(KnobError::Invalid(format!(
                "{key}: expected a policy such as fifo:50, got {other}"
            ))),
        }
    }

    fn write(&self, ctx: &mut Ctx, key: &Key, value: &Value) -> KnobResult<()> {
        self.validate(ctx, key, value)?;
        let pid = pid(ctx, key)?;
        let rc = match value {
            Value::Cpus(c) => {
                // SAFETY: as in read.
                let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
                for cpu in c {
                    // SAFETY: CPU numbers were validated against the online set.
                    unsafe { libc::CPU_SET(*cpu as usize, &mut set) };
                }
                // SAFETY: valid set of the size passed.
                unsafe {
                    libc::sched_setaffinity(pid, std::mem::size_of::<libc::cpu_set_t>(), &set)
                }
            }
            Value::Sched { policy, priority } => {
                let p = POLICIES
                    .iter()
                    .find(|(n, _)| n == policy)
                    .map(|(_, p)| *p)
                    .unwrap_or(libc::SCHED_OTHER);
                let param = libc::sched_param {
                    sched_priority: i32::try_from(*priority).unwrap_or(0),
                };
                // SAFETY: plain syscall with a valid param.
                unsafe { libc::sched_setscheduler(pid, p, &param) }
            }
            _ => {
                return Err(KnobError::Invalid(format!(
                    "{key}: unexpected value {value}"
                )))
            }
        };
        if rc != 0 {
            return Err(KnobError::Failed(format!(
                "{key} = {value} (thread {pid}): {}",
                std::io::Error::last_os_error()
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sched_values_parse() {
        assert_eq!(
            parse_sched("fifo:50"),
            Ok(Value::Sched {
                policy: "SCHED_FIFO".into(),
                priority: 50
            })
        );
        assert_eq!(
            parse_sched("other"),
            Ok(Value::Sched {
                policy: "SCHED_OTHER".into(),
                priority: 0
            })
        );
        assert!(parse_sched("deadline:1").is_err());
        assert!(parse_sched("fifo:x").is_err());
    }
}
