//! Tuning profiles: TOML files naming settings, parameterised by device names, CPUs and
//! other values given on the command line. The shipped ones are compiled in.
//!
//! ```toml
//! name = "irq-suspend"
//! summary = "..."
//! study = "docs/studies.md IRQS-1 ..."
//! [params.dev]
//! help = "device(s) whose RX NAPI instances get the settings"
//! required = true
//! [[set]]
//! setting = "napi.defer-hard-irqs"   # kind.attr
//! value = 100                        # number or string; "${name}", "${name[0]}",
//!                                    # "${name[queue]}" substitute parameters
//! dev = "${dev[0]}"                  # default: every --dev
//! queues = "all"                     # or a number or "${rt_queue}"
//! required = true                    # false: skipped with a note when unsupported
//! when = "cpus"                      # only when this parameter is given
//! why = "..."
//! ```

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::knobs::known_attrs;
use crate::model::{parse_cpus, Kind, Value};

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    pub name: String,
    pub summary: String,
    /// The study (docs/studies.md, with the study's anchor and figure ids) the settings come from.
    pub study: String,
    #[serde(default)]
    pub params: BTreeMap<String, ParamSpec>,
    #[serde(default, rename = "set")]
    pub items: Vec<Item>,
    /// What the application must do itself (printed, never applied).
    #[serde(default)]
    pub app: Option<AppAdvice>,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ParamSpec {
    pub help: String,
    #[serde(default)]
    pub required: bool,
    #[serde(default)]
    pub default: Option<String>,
    /// Fewest values the parameter must have (e.g. 2 CPUs for dual-core).
    #[serde(default)]
    pub min: Option<usize>,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Item {
    pub setting: String,
    pub value: toml::Value,
    #[serde(default)]
    pub dev: Option<String>,
    #[serde(default)]
    pub queues: Option<toml::Value>,
    #[serde(default = "yes")]
    pub required: bool,
    #[serde(default)]
    pub when: Option<String>,
    pub why: String,
}

fn yes() -> bool {
    true
}

/// The epoll busy-poll parameters of docs/studies.md IRQS-1, for the application
/// (`EPIOCSPARAMS`; see examples/epoll_busy_poll.rs).
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct AppAdvice {
    pub busy_poll_usecs: u32,
    pub busy_poll_budget: u16,
    pub prefer_busy_poll: bool,
    /// Blocking `epoll_wait` (timeout -1) or a non-blocking loop (timeout 0).
    pub blocking_epoll: bool,
    pub note: String,
}

/// The shipped profiles: (name, TOML text).
pub const SHIPPED: &[(&str, &str)] = &[
    (
        "no-coalescing",
        include_str!("../profiles/no-coalescing.toml"),
    ),
    (
        "adaptive-coalescing",
        include_str!("../profiles/adaptive-coalescing.toml"),
    ),
    ("deferral", include_str!("../profiles/deferral.toml")),
    ("busy-wait", include_str!("../profiles/busy-wait.toml")),
    ("irq-suspend", include_str!("../profiles/irq-suspend.toml")),
    ("single-core", include_str!("../profiles/single-core.toml")),
    ("dual-core", include_str!("../profiles/dual-core.toml")),
    (
        "queue-per-cpu",
        include_str!("../profiles/queue-per-cpu.toml"),
    ),
    ("irq-packing", include_str!("../profiles/irq-packing.toml")),
    ("softirq", include_str!("../profiles/softirq.toml")),
    ("threaded", include_str!("../profiles/threaded.toml")),
    (
        "threaded-busy-poll",
        include_str!("../profiles/threaded-busy-poll.toml"),
    ),
    (
        "ingress-priority",
        include_str!("../profiles/ingress-priority.toml"),
    ),
    (
        "vcpu-halt-poll",
        include_str!("../profiles/vcpu-halt-poll.toml"),
    ),
];

#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    #[error("no shipped profile {0:?} and no such file (shipped: {1})")]
    NotFound(String, String),
    #[error("{path}: {message}")]
    Parse { path: String, message: String },
    #[error("profile {profile}: {message}")]
    Invalid { profile: String, message: String },
    #[error("profile {profile} needs parameter --{param} ({help})")]
    MissingParam {
        profile: String,
        param: String,
        help: String,
    },
}

/// Loads a shipped profile by name, or a TOML file by path. Returns the profile and
/// where it came from.
pub fn load(name_or_path: &str) -> Result<(Profile, String), ProfileError> {
    if let Some((_, text)) = SHIPPED.iter().find(|(n, _)| *n == name_or_path) {
        let p = parse(text, &format!("shipped profile {name_or_path}"))?;
        return Ok((p, format!("shipped:{name_or_path}")));
    }
    let path = std::path::Path::new(name_or_path);
    if !path.exists() {
        let names: Vec<&str> = SHIPPED.iter().map(|(n, _)| *n).collect();
        return Err(ProfileError::NotFound(
            name_or_path.to_string(),
            names.join(", "),
        ));
    }
    let text = std::fs::read_to_string(path).map_err(|e| ProfileError::Parse {
        path: name_or_path.to_string(),
        message: e.to_string(),
    })?;
    let abs = std::fs::canonicalize(path)
        .map(|p| p.display().to_string())
        .unwrap_or_else(|_| name_or_path.to_string());
    Ok((parse(&text, name_or_path)?, abs))
}

/// Parses and checks a profile (settings, attributes, parameter references).
pub fn parse(text: &str, origin: &str) -> Result<Profile, ProfileError> {
    let p: Profile = toml::from_str(text).map_err(|e| ProfileError::Parse {
        path: origin.to_string(),
        message: e.to_string().trim_end().to_string(),
    })?;
    let bad = |message: String| ProfileError::Invalid {
        profile: p.name.clone(),
        message,
    };
    for (i, item) in p.items.iter().enumerate() {
        let n = i + 1;
        let (kind, _) = parse_setting(&item.setting)
            .map_err(|m| bad(format!("[[set]] #{n}, field `setting`: {m}")))?;
        let mut refs = Vec::new();
        if let toml::Value::String(s) = &item.value {
            refs.extend(param_refs(s));
        } else if !matches!(
            item.value,
            toml::Value::Integer(_) | toml::Value::Boolean(_)
        ) {
            return Err(bad(format!(
                "[[set]] #{n} ({}), field `value`: must be a number, boolean or string",
                item.setting
            )));
        }
        if let Some(d) = &item.dev {
            refs.extend(param_refs(d));
        }
        if let Some(toml::Value::String(q)) = &item.queues {
            refs.extend(param_refs(q));
        }
        if let Some(w) = &item.when {
            refs.push(w.clone());
        }
        if !kind.is_global() && item.dev.is_none() {
            refs.push("dev".into());
        }
        for r in refs {
            if !p.params.contains_key(&r) {
                return Err(bad(format!(
                    "[[set]] #{n} ({}) uses parameter {r:?}, which [params] does not declare",
                    item.setting
                )));
            }
        }
        if matches!(item.value, toml::Value::Integer(v) if v < 0) {
            return Err(bad(format!(
                "[[set]] #{n} ({}), field `value`: negative values are not settings",
                item.setting
            )));
        }
    }
    Ok(p)
}

/// `napi.defer-hard-irqs` -> (Napi, "defer-hard-irqs"), checked against the knobs.
pub fn parse_setting(s: &str) -> Result<(Kind, String), String> {
    let kinds = [
        Kind::Sysctl,
        Kind::Cpuidle,
        Kind::Device,
        Kind::RxQueue,
        Kind::TxQueue,
        Kind::Napi,
        Kind::Thread,
        Kind::Irq,
        Kind::Coalesce,
        Kind::Rings,
        Kind::Channels,
        Kind::Feature,
        Kind::Qdisc,
    ];
    let (k, attr) = s
        .split_once('.')
        .ok_or_else(|| format!("{s:?} is not kind.attribute (e.g. napi.defer-hard-irqs)"))?;
    let kind = kinds
        .iter()
        .find(|x| x.as_str() == k)
        .copied()
        .ok_or_else(|| {
            let names: Vec<&str> = kinds.iter().map(|x| x.as_str()).collect();
            format!("unknown kind {k:?} (known: {})", names.join(", "))
        })?;
    let attrs = known_attrs(kind);
    if !attrs.contains(&attr) {
        return Err(format!(
            "unknown {k} setting {attr:?} (known: {})",
            attrs.join(", ")
        ));
    }
    Ok((kind, attr.to_string()))
}

/// Names referenced as `${name}` or `${name[...]}`.
fn param_refs(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = s;
    while let Some(start) = rest.find("${") {
        let after = &rest[start + 2..];
        let Some(end) = after.find('}') else { break };
        let inner = &after[..end];
        let name = inner.split('[').next().unwrap_or(inner);
        out.push(name.to_string());
        rest = &after[end + 1..];
    }
    out
}

/// Parameter values given on the command line (lists; scalars are one-element lists).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Params(pub BTreeMap<String, Vec<String>>);

impl Params {
    /// `--dev a --dev b,c`, `--cpus 0-1`, `--param name=value` (repeatable).
    pub fn from_args(
        devs: &[String],
        cpus: Option<&str>,
        others: &[String],
    ) -> Result<Params, String> {
        let mut map = BTreeMap::new();
        let devs: Vec<String> = devs
            .iter()
            .flat_map(|d| d.split(','))
            .map(|d| d.trim().to_string())
            .filter(|d| !d.is_empty())
            .collect();
        if !devs.is_empty() {
            map.insert("dev".to_string(), devs);
        }
        if let Some(c) = cpus {
            let list = parse_cpus(c).map_err(|e| format!("--cpus: {e}"))?;
            // Keep the order given ("1,0" makes CPU 1 the first): parse_cpus sorts,
            // so take the order from the text when it is a plain list.
            let ordered: Vec<String> = if c.contains('-') {
                list.iter().map(u32::to_string).collect()
            } else {
                c.split(',').map(|s| s.trim().to_string()).collect()
            };
            map.insert("cpus".to_string(), ordered);
        }
        for o in others {
            let (k, v) = o
                .split_once('=')
                .ok_or_else(|| format!("--param {o:?}: expected name=value"))?;
            map.insert(
                k.trim().to_string(),
                v.split(',').map(|s| s.trim().to_string()).collect(),
            );
        }
        Ok(Params(map))
    }

    /// Adds defaults and checks required parameters and minimum lengths.
    pub fn resolve(&self, profile: &Profile) -> Result<Params, ProfileError> {
        let mut out = self.clone();
        for (name, spec) in &profile.params {
            if !out.0.contains_key(name) {
                if let Some(d) = &spec.default {
                    out.0.insert(
                        name.clone(),
                        d.split(',').map(|s| s.trim().to_string()).collect(),
                    );
                } else if spec.required {
                    return Err(ProfileError::MissingParam {
                        profile: profile.name.clone(),
                        param: name.clone(),
                        help: spec.help.clone(),
                    });
                }
            }
            if let (Some(min), Some(v)) = (spec.min, out.0.get(name)) {
                if v.len() < min {
                    return Err(ProfileError::Invalid {
                        profile: profile.name.clone(),
                        message: format!(
                            "parameter --{name} needs at least {min} values, got {} ({})",
                            v.len(),
                            spec.help
                        ),
                    });
                }
            }
        }
        for name in out.0.keys() {
            if !profile.params.contains_key(name) {
                return Err(ProfileError::Invalid {
                    profile: profile.name.clone(),
                    message: format!(
                        "parameter --{name} is not one of this profile's ({})",
                        profile
                            .params
                            .keys()
                            .cloned()
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                });
            }
        }
        Ok(out)
    }

    pub fn has(&self, name: &str) -> bool {
        self.0.contains_key(name)
    }

    pub fn list(&self, name: &str) -> &[String] {
        self.0.get(name).map(Vec::as_slice).unwrap_or(&[])
    }

    /// Replaces `${name}` (all values, comma-joined), `${name[i]}` and
    /// `${name[queue]}` (value at `queue` modulo the count).
    pub fn substitute(&self, s: &str, queue: Option<u32>) -> Result<String, String> {
        let mut out = String::new();
        let mut rest = s;
        while let Some(start) = rest.find("${") {
            out.push_str(&rest[..start]);
            let after = &rest[start + 2..];
            let end = after
                .find('}')
                .ok_or_else(|| format!("{s:?}: unclosed ${{"))?;
            let inner = &after[..end];
            let (name, index) = match inner.split_once('[') {
                Some((n, i)) => (n, Some(i.trim_end_matches(']'))),
                None => (inner, None),
            };
            let values = self
                .0
                .get(name)
                .ok_or_else(|| format!("parameter --{name} is not given"))?;
            let text = match index {
                None => values.join(","),
                Some("queue") => {
                    let q = queue
                        .ok_or_else(|| format!("{s:?}: [queue] used outside a per-queue item"))?;
                    values[q as usize % values.len().max(1)].clone()
                }
                Some(i) => {
                    let i: usize = i
                        .parse()
                        .map_err(|_| format!("{s:?}: index {i:?} is not a number or `queue`"))?;
                    values.get(i).cloned().ok_or_else(|| {
                        format!("parameter --{name} needs at least {} values", i + 1)
                    })?
                }
            };
            out.push_str(&text);
            rest = &after[end + 1..];
        }
        out.push_str(rest);
        Ok(out)
    }
}

/// Turns an item's TOML value (after substitution) into the value the setting takes.
pub fn value_for(
    kind: Kind,
    attr: &str,
    raw: &toml::Value,
    params: &Params,
    queue: Option<u32>,
) -> Result<Value, String> {
    let text = match raw {
        toml::Value::Integer(i) => i.to_string(),
        toml::Value::Boolean(b) => u8::from(*b).to_string(),
        toml::Value::String(s) => params.substitute(s, queue)?,
        other => return Err(format!("unsupported value {other}")),
    };
    let t = text.trim();
    let is_cpus = matches!(
        (kind, attr),
        (Kind::RxQueue, "rps_cpus") | (Kind::TxQueue, "xps_cpus") | (Kind::Irq, _)
    ) || (kind == Kind::Thread && attr == "affinity");
    if is_cpus {
        return parse_cpus(t).map(Value::Cpus);
    }
    if kind == Kind::Thread {
        return crate::knobs::parse_sched(t);
    }
    if kind == Kind::Qdisc {
        return Ok(Value::Text(t.to_string()));
    }
    match t {
        "on" | "true" => return Ok(Value::Num(1)),
        "off" | "false" => return Ok(Value::Num(0)),
        _ => {}
    }
    t.parse::<u64>()
        .map(Value::Num)
        .map_err(|_| format!("{t:?} is not a non-negative number"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_shipped_profile_parses() {
        for (name, text) in SHIPPED {
            let p = parse(text, name).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(&p.name, name);
            assert!(!p.study.is_empty(), "{name} names its study");
        }
    }

    #[test]
    fn bad_toml_names_the_field() {
        let text = "name = \"x\"\nsummary = \"s\"\nstudy = \"t\"\n[[set]]\nsetting = \"napi.defer-hard-irqs\"\nvalu = 3\nwhy = \"w\"\n";
        let e = parse(text, "x.toml").expect_err("refused").to_string();
        assert!(e.contains("valu"), "{e}");
        let text = "name = \"x\"\nsummary = \"s\"\nstudy = \"t\"\n[params.dev]\nhelp = \"d\"\n[[set]]\nsetting = \"napi.defer-hard-irq\"\nvalue = 3\nwhy = \"w\"\n";
        let e = parse(text, "x.toml").expect_err("refused").to_string();
        assert!(e.contains("setting") && e.contains("defer-hard-irq"), "{e}");
    }

    #[test]
    fn parameters_substitute_and_are_required() {
        let (p, _) = load("dual-core").expect("shipped");
        let given = Params::from_args(&["a,b".into()], None, &[]).expect("args");
        let e = given.resolve(&p).expect_err("cpus missing").to_string();
        assert!(e.contains("--cpus"), "{e}");
        let given = Params::from_args(&["a".into()], Some("1,0"), &[]).expect("args");
        let r = given.resolve(&p);
        assert!(r.is_err(), "dual-core needs two devices");
        let given = Params::from_args(&["a".into(), "b".into()], Some("1,0"), &[]).expect("args");
        let r = given.resolve(&p).expect("resolves");
        assert_eq!(r.substitute("${cpus[0]}", None).ok().as_deref(), Some("1"));
        assert_eq!(
            r.substitute("${cpus[queue]}", Some(3)).ok().as_deref(),
            Some("0")
        );
        assert_eq!(r.substitute("${cpus}", None).ok().as_deref(), Some("1,0"));
        assert!(r.substitute("${cpus[5]}", None).is_err());
    }

    #[test]
    fn values_take_the_setting_type() {
        let params = Params::default();
        let v = |k, a, t: &str| value_for(k, a, &toml::Value::String(t.into()), &params, None);
        assert_eq!(
            v(Kind::Thread, "sched", "fifo:50").ok(),
            Some(Value::Sched {
                policy: "SCHED_FIFO".into(),
                priority: 50
            })
        );
        assert_eq!(
            v(Kind::Irq, "affinity", "0-1").ok(),
            Some(Value::Cpus(vec![0, 1]))
        );
        assert_eq!(v(Kind::Feature, "gro", "off").ok(), Some(Value::Num(0)));
        assert!(v(Kind::Napi, "defer-hard-irqs", "lots").is_err());
    }
}
