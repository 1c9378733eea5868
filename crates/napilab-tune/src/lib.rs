//! `napilab tune`: profiles of packet-path settings, a plan of exactly what would
//! change, apply with a crash-safe journal, and revert (docs/architecture.md principle 4).
//!
//! - [`profile`]: the TOML profiles (shipped and user files) and their parameters.
//! - [`plan`]: expands a profile into keyed changes with from/to/why; every check
//!   happens there, before anything changes.
//! - [`knobs`]: one module per kind of setting behind the [`knobs::Knob`] trait.
//! - [`journal`]: the JSON-lines journal.
//! - [`apply`], [`revert`], [`show`]: the verbs.

pub mod journal;
pub mod knobs;
pub mod model;
pub mod plan;
pub mod profile;

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use journal::{Journal, Record, Status, Writer};
use knobs::{knob, Ctx, KnobError};
use model::{Key, Value};
use plan::Plan;

pub use plan::PlanError;

/// Env var read by [`apply`]: pause this many milliseconds after each change (tests
/// use it to kill apply half-way).
pub const PAUSE_ENV: &str = "NAPILAB_TUNE_TEST_PAUSE_MS";

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Applied {
    pub key: Key,
    pub from: Value,
    pub to: Value,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ApplyReport {
    pub schema: String,
    pub profile: String,
    /// None when there was nothing to change (no journal is written then).
    pub journal: Option<PathBuf>,
    pub applied: Vec<Applied>,
    /// Planned changes that had the wanted value by the time apply reached them.
    pub already: Vec<Key>,
    pub plan: Plan,
}

#[derive(Debug, thiserror::Error)]
pub enum TuneError {
    #[error(transparent)]
    Plan(#[from] PlanError),
    #[error("{0}")]
    Io(String),
    #[error("apply failed at {key}: {error}; {} change(s) rolled back{}; journal {}", rolled_back, if rollback_errors.is_empty() { String::new() } else { format!(", but restoring failed for: {} (run `napilab tune revert {}`)", rollback_errors.join("; "), journal.display()) }, journal.display())]
    ApplyFailed {
        key: String,
        error: String,
        rolled_back: usize,
        rollback_errors: Vec<String>,
        journal: PathBuf,
    },
    #[error("revert of {} incomplete: {}", journal.display(), errors.join("; "))]
    RevertFailed {
        journal: PathBuf,
        errors: Vec<String>,
    },
}

fn io_err(what: &str, e: std::io::Error) -> TuneError {
    TuneError::Io(format!("{what}: {e}"))
}

fn pause() {
    if let Some(ms) = std::env::var(PAUSE_ENV)
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
    {
        std::thread::sleep(std::time::Duration::from_millis(ms));
    }
}

/// Applies a plan made just before: journals each change (fsynced) before making it,
/// checks that it reads back, and rolls everything back if one fails.
pub fn apply(ctx: &mut Ctx, plan: Plan, journal_dir: &Path) -> Result<ApplyReport, TuneError> {
    let mut report = ApplyReport {
        schema: "napilab.tune-apply/1".into(),
        profile: plan.profile.clone(),
        journal: None,
        applied: Vec::new(),
        already: Vec::new(),
        plan,
    };
    if report.plan.changes.is_empty() {
        return Ok(report);
    }
    let header = Record::Header {
        schema: journal::JOURNAL_SCHEMA.into(),
        profile: report.plan.profile.clone(),
        source: report.plan.source.clone(),
        params: report.plan.params.clone(),
        started_unix_ms: journal::now_ms(),
        hostname: ctx.read_file("proc/sys/kernel/hostname").ok(),
        kernel: ctx.read_file("proc/sys/kernel/osrelease").ok(),
        netns: journal::netns_id(),
        pid: std::process::id(),
    };
    let mut w = Writer::create(journal_dir, &header).map_err(|e| {
        io_err(
            &format!("creating a journal in {}", journal_dir.display()),
            e,
        )
    })?;
    report.journal = Some(w.path.clone());
    let mut entries: Vec<(Key, Value)> = Vec::new();
    let changes = report.plan.changes.clone();
    let mut seq = 0;
    for change in &changes {
        let k = knob(change.key.kind);
        let result = (|| -> Result<Option<Value>, String> {
            let old = k.read(ctx, &change.key).map_err(|e| e.to_string())?;
            if old == change.to {
                return Ok(None);
            }
            seq += 1;
            w.append(&Record::Change {
                seq,
                key: change.key.clone(),
                old: old.clone(),
                new: change.to.clone(),
            })
            .map_err(|e| format!("writing the journal: {e}"))?;
            entries.push((change.key.clone(), old.clone()));
            k.write(ctx, &change.key, &change.to)
                .map_err(|e| e.to_string())?;
            let now = k.read(ctx, &change.key).map_err(|e| e.to_string())?;
            if now != change.to {
                return Err(format!(
                    "the kernel accepted {} but it reads back as {now}",
                    change.to
                ));
            }
            w.append(&Record::Done { seq })
                .map_err(|e| format!("writing the journal: {e}"))?;
            Ok(Some(old))
        })();
        match result {
            Ok(Some(old)) => {
                report.applied.push(Applied {
                    key: change.key.clone(),
                    from: old,
                    to: change.to.clone(),
                });
                pause();
            }
            Ok(None) => report.already.push(change.key.clone()),
            Err(error) => {
                let mut rollback_errors = Vec::new();
                for (key, old) in entries.iter().rev() {
                    let k = knob(key.kind);
                    // The failed change is journalled before its write; when the kernel
                    // refused the write the value is still the old one and there is
                    // nothing to restore (writing it again may be refused the same way).
                    if k.read(ctx, key).is_ok_and(|now| &now == old) {
                        continue;
                    }
                    if let Err(e) = k.restore(ctx, key, old) {
                        rollback_errors.push(format!("{key}: {e}"));
                    }
                }
                let _ = w.append(&Record::RolledBack {
                    unix_ms: journal::now_ms(),
                    error: format!("{}: {error}", change.key),
                    complete: rollback_errors.is_empty(),
                });
                return Err(TuneError::ApplyFailed {
                    key: change.key.to_string(),
                    error,
                    rolled_back: entries.len() - rollback_errors.len(),
                    rollback_errors,
                    journal: w.path.clone(),
                });
            }
        }
    }
    w.append(&Record::Applied {
        unix_ms: journal::now_ms(),
    })
    .map_err(|e| io_err("writing the journal", e))?;
    Ok(report)
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Restored {
    pub key: Key,
    pub to: Value,
    /// The entry had no `done` mark (apply was cut short around it).
    pub unconfirmed: bool,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RevertReport {
    pub schema: String,
    pub journal: PathBuf,
    pub profile: String,
    pub status_before: Status,
    pub restored: Vec<Restored>,
    /// Entries with nothing left to restore (device recreated, thread gone), and why.
    pub skipped: Vec<(Key, String)>,
    /// Set when revert did nothing (already reverted, rolled back).
    pub message: Option<String>,
}

/// Picks the journal to revert: `which` (a path, or a file name in `dir`), else the
/// newest journal of this network namespace that still has changes in force.
pub fn find_journal(dir: &Path, which: Option<&str>) -> Result<PathBuf, TuneError> {
    if let Some(w) = which {
        let p = PathBuf::from(w);
        if p.exists() {
            return Ok(p);
        }
        let in_dir = dir.join(w);
        if in_dir.exists() {
            return Ok(in_dir);
        }
        return Err(TuneError::Io(format!(
            "no journal {w} (neither a file nor in {})",
            dir.display()
        )));
    }
    let here = journal::netns_id();
    let all = journal::list(dir).map_err(|e| io_err(&dir.display().to_string(), e))?;
    let here_only =
        |j: &&Journal| matches!(j.header(), Some(Record::Header { netns, .. }) if *netns == here);
    let in_force = all.iter().rev().filter(here_only).find(|j| {
        matches!(
            j.status(),
            Status::Applied | Status::Incomplete | Status::RollbackIncomplete
        )
    });
    // Nothing in force: the newest journal of this namespace, so that reverting
    // twice answers "already reverted" instead of failing.
    in_force
        .or_else(|| all.iter().rev().find(here_only))
        .map(|j| j.path.clone())
        .ok_or_else(|| {
            TuneError::Io(format!(
                "no journal for this network namespace in {}",
                dir.display()
            ))
        })
}

/// Restores every journalled change in reverse order, also those of a journal cut
/// short; marks the journal reverted. Reverting twice is a no-op with a message.
pub fn revert(ctx: &mut Ctx, path: &Path) -> Result<RevertReport, TuneError> {
    let j = Journal::read(path).map_err(|e| io_err(&path.display().to_string(), e))?;
    let Some(Record::Header { profile, netns, .. }) = j.header().cloned() else {
        return Err(TuneError::Io(format!("{}: no header", path.display())));
    };
    let mut report = RevertReport {
        schema: "napilab.tune-revert/1".into(),
        journal: path.to_path_buf(),
        profile,
        status_before: j.status(),
        restored: Vec::new(),
        skipped: Vec::new(),
        message: None,
    };
    match j.status() {
        Status::Reverted => {
            report.message = Some("already reverted: nothing to do".into());
            return Ok(report);
        }
        Status::RolledBack => {
            report.message =
                Some("apply failed and rolled its changes back then: nothing to do".into());
            return Ok(report);
        }
        _ => {}
    }
    if netns != journal::netns_id() {
        return Err(TuneError::Io(format!(
            "{} was written in network namespace net:[{netns}], this is net:[{}]: run revert there (e.g. ip netns exec NAME napilab tune revert ...)",
            path.display(),
            journal::netns_id()
        )));
    }
    let mut errors = Vec::new();
    for (_, key, old, _, done) in j.changes().into_iter().rev() {
        match knob(key.kind).restore(ctx, key, old) {
            Ok(()) => report.restored.push(Restored {
                key: key.clone(),
                to: old.clone(),
                unconfirmed: !done,
            }),
            Err(KnobError::Gone(why)) | Err(KnobError::NotYet(why)) => {
                report.skipped.push((key.clone(), why))
            }
            Err(KnobError::Unsupported(why)) if key.kind == model::Kind::Napi => {
                // The instance is gone (GRO off, device down): its settings went
                // with it.
                report.skipped.push((key.clone(), why))
            }
            Err(e) => errors.push(format!("{key}: {e}")),
        }
    }
    if !errors.is_empty() {
        return Err(TuneError::RevertFailed {
            journal: path.to_path_buf(),
            errors,
        });
    }
    Writer::open(path)
        .and_then(|mut w| {
            w.append(&Record::Reverted {
                unix_ms: journal::now_ms(),
            })
        })
        .map_err(|e| io_err("marking the journal reverted", e))?;
    Ok(report)
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JournalSummary {
    pub path: PathBuf,
    pub profile: String,
    pub source: String,
    pub params: profile::Params,
    pub started_unix_ms: u64,
    pub netns: u64,
    pub status: Status,
    pub changes: usize,
    pub done: usize,
}

/// Every journal in `dir`, oldest first.
pub fn show(dir: &Path) -> Result<Vec<JournalSummary>, TuneError> {
    let all = journal::list(dir).map_err(|e| io_err(&dir.display().to_string(), e))?;
    Ok(all
        .iter()
        .filter_map(|j| {
            let Some(Record::Header {
                profile,
                source,
                params,
                started_unix_ms,
                netns,
                ..
            }) = j.header()
            else {
                return None;
            };
            let changes = j.changes();
            Some(JournalSummary {
                path: j.path.clone(),
                profile: profile.clone(),
                source: source.clone(),
                params: params.clone(),
                started_unix_ms: *started_unix_ms,
                netns: *netns,
                status: j.status(),
                done: changes.iter().filter(|c| c.4).count(),
                changes: changes.len(),
            })
        })
        .collect())
}

/// Loads a profile and plans it here.
pub fn plan_profile(
    ctx: &mut Ctx,
    name_or_path: &str,
    params: &profile::Params,
) -> Result<Plan, PlanError> {
    let (p, source) = profile::load(name_or_path)?;
    plan::plan(ctx, &p, &source, params)
}

/// A context on the host's `/`.
pub fn host_ctx() -> Ctx {
    Ctx::new(Path::new("/"))
}
