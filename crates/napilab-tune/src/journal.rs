//! The apply journal: one JSON-lines file per apply. A header, then for each change an
//! entry with the old value, written and fsynced *before* the change, and a `done` mark
//! after it; then `applied` (or `rolled_back`), and `reverted` once reverted.
//!
//! A journal cut short by a crash or `kill -9` is still revertible: an entry without
//! `done` may or may not have been applied, and restoring its old value is safe either
//! way. A last line cut mid-write is ignored (its change had not started).

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::model::{Key, Value};
use crate::profile::Params;

pub const JOURNAL_SCHEMA: &str = "napilab.tune-journal/1";
pub const DEFAULT_DIR: &str = "/var/lib/napilab/journal";

/// `--journal-dir`, else `NAPILAB_JOURNAL_DIR`, else [`DEFAULT_DIR`].
pub fn journal_dir(flag: Option<&Path>) -> PathBuf {
    flag.map(Path::to_path_buf)
        .or_else(|| std::env::var_os("NAPILAB_JOURNAL_DIR").map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from(DEFAULT_DIR))
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Record {
    Header {
        schema: String,
        profile: String,
        source: String,
        params: Params,
        started_unix_ms: u64,
        hostname: Option<String>,
        kernel: Option<String>,
        /// Inode of the network namespace (`/proc/self/ns/net`) the changes were made
        /// in; revert must run in the same one.
        netns: u64,
        pid: u32,
    },
    Change {
        seq: u32,
        key: Key,
        old: Value,
        new: Value,
    },
    Done {
        seq: u32,
    },
    Applied {
        unix_ms: u64,
    },
    RolledBack {
        unix_ms: u64,
        error: String,
        /// Every change was restored.
        complete: bool,
    },
    Reverted {
        unix_ms: u64,
    },
    /// What the twin predicted for the profile on this host before it was applied
    /// (`tune apply --predict`; napilab-sim's `napilab.tune-prediction/1`, kept as JSON
    /// because the twin's crate depends on this one), for `tune verify`.
    Prediction {
        unix_ms: u64,
        prediction: serde_json::Value,
    },
}

pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(0))
        .unwrap_or(0)
}

/// Inode of the calling thread's network namespace (/proc/thread-self: the lab applies
/// and reverts modes on a thread that entered the DUT's namespace).
pub fn netns_id() -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/thread-self/ns/net")
        .or_else(|_| std::fs::metadata("/proc/self/ns/net"))
        .map(|m| m.ino())
        .unwrap_or(0)
}

/// An open journal being written.
#[derive(Debug)]
pub struct Writer {
    file: File,
    pub path: PathBuf,
}

impl Writer {
    /// Creates `<dir>/<ms>-<profile>-<pid>.jsonl` and writes the header.
    pub fn create(dir: &Path, header: &Record) -> std::io::Result<Writer> {
        std::fs::create_dir_all(dir)?;
        let Record::Header {
            profile,
            started_unix_ms,
            pid,
            ..
        } = header
        else {
            return Err(std::io::Error::other("first record must be the header"));
        };
        let safe: String = profile
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        let path = dir.join(format!("{started_unix_ms}-{safe}-{pid}.jsonl"));
        let file = OpenOptions::new()
            .create_new(true)
            .append(true)
            .open(&path)?;
        let mut w = Writer { file, path };
        w.append(header)?;
        // The directory entry must survive a crash too.
        if let Ok(d) = File::open(dir) {
            let _ = d.sync_all();
        }
        Ok(w)
    }

    /// Opens a journal to append to it. A last line cut mid-write by a crash is
    /// terminated first, so the next record gets a line of its own.
    pub fn open(path: &Path) -> std::io::Result<Writer> {
        let cut = std::fs::read(path)?.last().is_some_and(|b| *b != b'\n');
        let mut file = OpenOptions::new().append(true).open(path)?;
        if cut {
            file.write_all(b"\n")?;
        }
        Ok(Writer {
            file,
            path: path.to_path_buf(),
        })
    }

    /// Appends one record and fsyncs it.
    pub fn append(&mut self, record: &Record) -> std::io::Result<()> {
        let mut line = serde_json::to_string(record).map_err(std::io::Error::other)?;
        line.push('\n');
        self.file.write_all(line.as_bytes())?;
        self.file.sync_data()
    }
}

/// A journal read back.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Journal {
    pub path: PathBuf,
    pub records: Vec<Record>,
    /// Lines that did not parse (a line cut by a crash), for messages.
    pub bad_lines: usize,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Every change made.
    Applied,
    /// Cut short (crash, kill): some changes may be in force.
    Incomplete,
    /// Apply failed and undid its changes.
    RolledBack,
    /// Apply failed and could not undo everything: revert it.
    RollbackIncomplete,
    Reverted,
}

impl Journal {
    pub fn read(path: &Path) -> std::io::Result<Journal> {
        let text = std::fs::read_to_string(path)?;
        let mut records = Vec::new();
        let mut bad_lines = 0;
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            match serde_json::from_str::<Record>(line) {
                Ok(r) => records.push(r),
                Err(_) => bad_lines += 1,
            }
        }
        if !matches!(records.first(), Some(Record::Header { .. })) {
            return Err(std::io::Error::other(format!(
                "{}: not a napilab tune journal (no header)",
                path.display()
            )));
        }
        Ok(Journal {
            path: path.to_path_buf(),
            records,
            bad_lines,
        })
    }

    pub fn status(&self) -> Status {
        let mut status = Status::Incomplete;
        for r in &self.records {
            match r {
                Record::Applied { .. } => status = Status::Applied,
                Record::RolledBack { complete: true, .. } => status = Status::RolledBack,
                Record::RolledBack {
                    complete: false, ..
                } => status = Status::RollbackIncomplete,
                Record::Reverted { .. } => status = Status::Reverted,
                _ => {}
            }
        }
        status
    }

    pub fn header(&self) -> Option<&Record> {
        self.records.first()
    }

    /// The prediction kept with the apply, if one was.
    pub fn prediction(&self) -> Option<&serde_json::Value> {
        self.records.iter().rev().find_map(|r| match r {
            Record::Prediction { prediction, .. } => Some(prediction),
            _ => None,
        })
    }

    /// The change entries with whether each was marked done.
    pub fn changes(&self) -> Vec<(u32, &Key, &Value, &Value, bool)> {
        self.records
            .iter()
            .filter_map(|r| match r {
                Record::Change { seq, key, old, new } => Some((
                    *seq,
                    key,
                    old,
                    new,
                    self.records
                        .iter()
                        .any(|d| matches!(d, Record::Done { seq: s } if s == seq)),
                )),
                _ => None,
            })
            .collect()
    }
}

/// Appends `prediction` to the journal at `path` (fsynced like every record).
pub fn keep_prediction(path: &Path, prediction: serde_json::Value) -> std::io::Result<()> {
    Writer::open(path)?.append(&Record::Prediction {
        unix_ms: now_ms(),
        prediction,
    })
}

/// Every journal in `dir`, oldest first.
pub fn list(dir: &Path) -> std::io::Result<Vec<Journal>> {
    let mut paths: Vec<PathBuf> = match std::fs::read_dir(dir) {
        Ok(rd) => rd
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
            .collect(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(e),
    };
    paths.sort();
    Ok(paths.iter().filter_map(|p| Journal::read(p).ok()).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Kind;

    fn header(profile: &str) -> Record {
        Record::Header {
            schema: JOURNAL_SCHEMA.into(),
            profile: profile.into(),
            source: "test".into(),
            params: Params::default(),
            started_unix_ms: now_ms(),
            hostname: None,
            kernel: None,
            netns: netns_id(),
            pid: std::process::id(),
        }
    }

    #[test]
    fn a_cut_journal_reads_back_as_incomplete() {
        let dir = std::env::temp_dir().join(format!("napilab-tune-journal-{}", std::process::id()));
        let mut w = Writer::create(&dir, &header("t")).expect("create");
        let key = Key::global(Kind::Sysctl, "busy_poll");
        w.append(&Record::Change {
            seq: 1,
            key: key.clone(),
            old: Value::Num(0),
            new: Value::Num(50),
        })
        .expect("append");
        w.append(&Record::Done { seq: 1 }).expect("append");
        w.append(&Record::Change {
            seq: 2,
            key: key.clone(),
            old: Value::Num(50),
            new: Value::Num(60),
        })
        .expect("append");
        // A line cut mid-write by kill -9.
        std::fs::OpenOptions::new()
            .append(true)
            .open(&w.path)
            .and_then(|mut f| f.write_all(b"{\"type\":\"cha"))
            .expect("cut line");
        let j = Journal::read(&w.path).expect("read");
        assert_eq!(j.status(), Status::Incomplete);
        assert_eq!(j.bad_lines, 1);
        let ch = j.changes();
        assert_eq!(ch.len(), 2);
        assert!(ch[0].4 && !ch[1].4);
        keep_prediction(&w.path, serde_json::json!({ "schema": "p" })).expect("keep");
        let j = Journal::read(&w.path).expect("read");
        assert_eq!(j.prediction(), Some(&serde_json::json!({ "schema": "p" })));
        assert_eq!(j.status(), Status::Incomplete, "a prediction is no state");
        let mut w = Writer::open(&w.path).expect("open");
        w.append(&Record::Reverted { unix_ms: now_ms() })
            .expect("append");
        assert_eq!(
            Journal::read(&w.path).expect("read").status(),
            Status::Reverted
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
