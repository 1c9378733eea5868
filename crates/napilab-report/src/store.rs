//! The results store: one SQLite file holding every run, its configurations, points and
//! a long-format metrics table, plus the full RunRecord JSON so a run re-renders exactly.
//! The schema is documented in docs/report.md and versioned with `PRAGMA user_version`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use napilab_core::{PointRole, RunKind, RunRecord};
use rusqlite::{params, Connection, OptionalExtension, TransactionBehavior};
use serde::Serialize;

use crate::metrics::{point_metrics, traffic_source};

/// The schema version this build writes (`PRAGMA user_version`).
pub const STORE_VERSION: i64 = 1;

const SCHEMA_V1: &str = "
CREATE TABLE runs (
    run_id TEXT PRIMARY KEY,
    kind TEXT NOT NULL,
    scenario_name TEXT NOT NULL,
    started_unix_ms INTEGER NOT NULL,
    finished_unix_ms INTEGER NOT NULL,
    napilab_version TEXT NOT NULL,
    interrupted INTEGER NOT NULL,
    record_schema TEXT NOT NULL,
    record_json TEXT NOT NULL,
    stored_unix_ms INTEGER NOT NULL
);
CREATE TABLE configurations (
    id INTEGER PRIMARY KEY,
    run_id TEXT NOT NULL REFERENCES runs(run_id) ON DELETE CASCADE,
    position INTEGER NOT NULL,
    name TEXT NOT NULL,
    settings_json TEXT NOT NULL,
    max_pps REAL,
    max_loss_threshold REAL,
    max_stopped TEXT,
    findings INTEGER NOT NULL,
    UNIQUE (run_id, position)
);
CREATE TABLE points (
    id INTEGER PRIMARY KEY,
    configuration_id INTEGER NOT NULL REFERENCES configurations(id) ON DELETE CASCADE,
    position INTEGER NOT NULL,
    role TEXT NOT NULL,
    repeat INTEGER NOT NULL,
    requested_pps REAL NOT NULL,
    offered_pps REAL NOT NULL,
    delivered_pps REAL NOT NULL,
    loss REAL NOT NULL,
    duration_s REAL NOT NULL,
    traffic_source TEXT NOT NULL,
    generator_saturated INTEGER NOT NULL,
    sink_saturated INTEGER NOT NULL,
    UNIQUE (configuration_id, position)
);
CREATE TABLE metrics (
    point_id INTEGER NOT NULL REFERENCES points(id) ON DELETE CASCADE,
    scope TEXT NOT NULL,
    name TEXT NOT NULL,
    value REAL NOT NULL,
    unit TEXT NOT NULL,
    source TEXT NOT NULL,
    derived TEXT
);
CREATE INDEX metrics_by_point ON metrics (point_id);
CREATE INDEX metrics_by_name ON metrics (name, scope);
";

pub struct Store {
    conn: Connection,
    path: PathBuf,
}

/// One line of `napilab report --list`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RunSummary {
    pub run_id: String,
    pub kind: String,
    pub scenario_name: String,
    pub started_unix_ms: u64,
    pub finished_unix_ms: u64,
    pub interrupted: bool,
    pub configurations: u64,
    pub points: u64,
}

fn kind_name(kind: RunKind) -> &'static str {
    match kind {
        RunKind::Lab => "lab",
        RunKind::Model => "model",
    }
}

fn role_name(role: PointRole) -> &'static str {
    match role {
        PointRole::Sweep => "sweep",
        PointRole::Search => "search",
    }
}

impl Store {
    /// Opens (creating if needed, with its parent directory) the store at `path`.
    pub fn open(path: &Path) -> Result<Store> {
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent).with_context(|| {
                format!(
                    "cannot create the directory of the store {}",
                    path.display()
                )
            })?;
        }
        let conn = Connection::open(path)
            .with_context(|| format!("cannot open the results store {}", path.display()))?;
        // Several runs may finish at once: wait for another writer instead of failing.
        conn.busy_timeout(Duration::from_secs(30))?;
        conn.pragma_update(None, "foreign_keys", "ON")?;
        let mut store = Store {
            conn,
            path: path.to_path_buf(),
        };
        store.migrate()?;
        Ok(store)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn migrate(&mut self) -> Result<()> {
        let path = self.path.display().to_string();
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .with_context(|| format!("cannot lock the results store {path}"))?;
        let version: i64 = tx.query_row("PRAGMA user_version", [], |r| r.get(0))?;
        match version {
            0 => {
                let tables: i64 = tx.query_row(
                    "SELECT count(*) FROM sqlite_master WHERE type = 'table'",
                    [],
                    |r| r.get(0),
                )?;
                if tables > 0 {
                    bail!(
                        "{path} is an SQLite file but not a napilab results store \
                         (it has tables and no schema version); pass another --db path"
                    );
                }
                tx.execute_batch(SCHEMA_V1)
                    .with_context(|| format!("cannot create the schema in {path}"))?;
                tx.pragma_update(None, "user_version", STORE_VERSION)?;
            }
            STORE_VERSION => {}
            newer => bail!(
                "the results store {path} has schema version {newer}, newer than this \
                 napilab understands ({STORE_VERSION}); use a newer napilab or another --db path"
            ),
        }
        tx.commit()?;
        Ok(())
    }

    /// Stores a run in one transaction, replacing an earlier copy with the same run id.
    pub fn insert_run(&mut self, run: &RunRecord) -> Result<()> {
        let path = self.path.display().to_string();
        let json = serde_json::to_string(run).context("cannot serialise the run record")?;
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0);
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .with_context(|| format!("cannot lock the results store {path}"))?;
        tx.execute("DELETE FROM runs WHERE run_id = ?1", [&run.run_id])?;
        tx.execute(
            "INSERT INTO runs (run_id, kind, scenario_name, started_unix_ms, finished_unix_ms,
                napilab_version, interrupted, record_schema, record_json, stored_unix_ms)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
            params![
                run.run_id,
                kind_name(run.kind),
                run.scenario_name,
                run.started_unix_ms as i64,
                run.finished_unix_ms as i64,
                run.napilab_version,
                run.interrupted,
                run.schema,
                json,
                now_ms
            ],
        )?;
        for (ci, conf) in run.configurations.iter().enumerate() {
            let settings = serde_json::to_string(&conf.settings)?;
            let max = conf.max_throughput.as_ref();
            tx.execute(
                "INSERT INTO configurations (run_id, position, name, settings_json, max_pps,
                    max_loss_threshold, max_stopped, findings)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                params![
                    run.run_id,
                    ci as i64,
                    conf.name,
                    settings,
                    max.map(|m| m.pps),
                    max.map(|m| m.loss_threshold),
                    max.map(|m| m.stopped.as_str()),
                    conf.findings.len() as i64
                ],
            )?;
            let conf_id = tx.last_insert_rowid();
            for (pi, point) in conf.points.iter().enumerate() {
                tx.execute(
                    "INSERT INTO points (configuration_id, position, role, repeat,
                        requested_pps, offered_pps, delivered_pps, loss, duration_s,
                        traffic_source, generator_saturated, sink_saturated)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
                    params![
                        conf_id,
                        pi as i64,
                        role_name(point.role),
                        point.repeat,
                        point.requested_pps,
                        point.offered_pps,
                        point.delivered_pps(),
                        point.loss_ratio(),
                        point.duration_s,
                        traffic_source(run.kind),
                        point.generator.saturated,
                        point.sink.saturated
                    ],
                )?;
                let point_id = tx.last_insert_rowid();
                let mut stmt = tx.prepare_cached(
                    "INSERT INTO metrics (point_id, scope, name, value, unit, source, derived)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                )?;
                for row in point_metrics(run.kind, point) {
                    stmt.execute(params![
                        point_id,
                        row.scope,
                        row.name,
                        row.value,
                        row.unit,
                        row.source,
                        row.derived
                    ])?;
                }
            }
        }
        tx.commit()
            .with_context(|| format!("cannot store run {} in {path}", run.run_id))?;
        Ok(())
    }

    /// The run exactly as it was stored. An unknown id names the known ones.
    pub fn load_run(&self, run_id: &str) -> Result<RunRecord> {
        let path = self.path.display();
        let json: Option<String> = self
            .conn
            .query_row(
                "SELECT record_json FROM runs WHERE run_id = ?1",
                [run_id],
                |r| r.get(0),
            )
            .optional()?;
        let Some(json) = json else {
            let known: Vec<String> = self.list_runs()?.into_iter().map(|r| r.run_id).collect();
            if known.is_empty() {
                bail!("no run {run_id} in {path}: the store holds no runs yet (run `napilab lab run` or `napilab sim run` first, or pass --db)");
            }
            bail!(
                "no run {run_id} in {path}; known runs: {} (see `napilab report --list`)",
                known.join(", ")
            );
        };
        serde_json::from_str(&json)
            .with_context(|| format!("run {run_id} in {path} has an unreadable record"))
    }

    /// All runs, oldest first.
    pub fn list_runs(&self) -> Result<Vec<RunSummary>> {
        let mut stmt = self.conn.prepare(
            "SELECT r.run_id, r.kind, r.scenario_name, r.started_unix_ms, r.finished_unix_ms,
                    r.interrupted,
                    (SELECT count(*) FROM configurations c WHERE c.run_id = r.run_id),
                    (SELECT count(*) FROM points p JOIN configurations c
                        ON p.configuration_id = c.id WHERE c.run_id = r.run_id)
             FROM runs r ORDER BY r.started_unix_ms, r.run_id",
        )?;
        let rows = stmt.query_map([], |r| {
            Ok(RunSummary {
                run_id: r.get(0)?,
                kind: r.get(1)?,
                scenario_name: r.get(2)?,
                started_unix_ms: r.get::<_, i64>(3)? as u64,
                finished_unix_ms: r.get::<_, i64>(4)? as u64,
                interrupted: r.get(5)?,
                configurations: r.get::<_, i64>(6)? as u64,
                points: r.get::<_, i64>(7)? as u64,
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
    }

    /// The underlying connection, for queries over the documented schema.
    pub fn connection(&self) -> &Connection {
        &self.conn
    }
}
