//! `napilab lab clean`: removes what lab runs left behind (after `kill -9`, a crash or
//! a power cut): their namespaces (and with them links and processes) and the sysctl
//! changes of their journals. Runs whose process is still alive are left alone.

use std::path::Path;

use serde::Serialize;

use crate::netns::{self, run_alive, RUN_DIR};
use crate::run_context::JOURNAL_PREFIX;

#[derive(Clone, Debug, Default, Serialize)]
pub struct CleanReport {
    pub namespaces_removed: Vec<String>,
    pub journals_reverted: Vec<String>,
    /// Journal directories of server runs' interrupt modes (`lab-<run_id>-server`),
    /// removed once the run's namespaces are gone: the settings they journalled were
    /// those of the DUT's device, which went with its namespace.
    pub journals_removed: Vec<String>,
    /// Namespaces and journals of runs still in progress, left alone.
    pub left_running: Vec<String>,
    pub errors: Vec<String>,
}

pub fn clean(journal_dir: &Path) -> CleanReport {
    let mut r = CleanReport::default();
    match netns::list_namespaces() {
        Ok(list) => {
            for ns in list {
                let Some(id) = netns::run_id_of_ns(&ns) else {
                    continue;
                };
                if run_alive(id) {
                    r.left_running.push(ns);
                    continue;
                }
                match netns::delete_namespace(&ns) {
                    Ok(()) => r.namespaces_removed.push(ns),
                    Err(e) => r.errors.push(format!("{ns}: {e}")),
                }
            }
        }
        Err(e) => r.errors.push(format!("listing namespaces: {e}")),
    }
    if journal_dir.exists() {
        match napilab_tune::show(journal_dir) {
            Ok(list) => {
                for j in list {
                    let Some(id) = j.profile.strip_prefix(JOURNAL_PREFIX) else {
                        continue;
                    };
                    if !netns::is_run_id(id) {
                        continue;
                    }
                    use napilab_tune::journal::Status;
                    if !matches!(
                        j.status,
                        Status::Applied | Status::Incomplete | Status::RollbackIncomplete
                    ) {
                        continue;
                    }
                    if run_alive(id) {
                        r.left_running.push(j.path.display().to_string());
                        continue;
                    }
                    let mut ctx = napilab_tune::host_ctx();
                    match napilab_tune::revert(&mut ctx, &j.path) {
                        Ok(_) => r.journals_reverted.push(j.path.display().to_string()),
                        Err(e) => r.errors.push(format!("{}: {e}", j.path.display())),
                    }
                }
            }
            Err(e) => r.errors.push(format!("reading journals: {e}")),
        }
    }
    // The server topology's mode journals, of runs whose namespaces are gone.
    if let Ok(dir) = std::fs::read_dir(journal_dir) {
        let remaining = netns::list_namespaces().unwrap_or_default();
        for e in dir.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let Some(id) = name
                .strip_prefix(JOURNAL_PREFIX)
                .and_then(|n| n.strip_suffix(crate::server_runner::MODE_JOURNALS_SUFFIX))
            else {
                continue;
            };
            if !netns::is_run_id(id) || !e.path().is_dir() {
                continue;
            }
            if run_alive(id) {
                r.left_running.push(e.path().display().to_string());
                continue;
            }
            if remaining
                .iter()
                .any(|ns| netns::run_id_of_ns(ns) == Some(id))
            {
                continue;
            }
            match std::fs::remove_dir_all(e.path()) {
                Ok(()) => r.journals_removed.push(e.path().display().to_string()),
                Err(err) => r.errors.push(format!("{}: {err}", e.path().display())),
            }
        }
    }
    // Pid files of dead runs.
    if let Ok(dir) = std::fs::read_dir(RUN_DIR) {
        for e in dir.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if let Some(id) = name.strip_suffix(".pid") {
                if !run_alive(id) {
                    let _ = std::fs::remove_file(e.path());
                }
            }
        }
    }
    r
}
