//! A run's record, assembled once for every testbed: the scenario as it was run, its
//! configurations in order (a stop or a failure ends the run and keeps what finished),
//! the host, the notices. The lab and the twin each run their configurations through
//! [`each_configuration`] and close the record with [`RunStart::finish`], so a record's
//! shape does not depend on which testbed made it.

use std::sync::atomic::{AtomicBool, Ordering};

use napilab_core::{ConfigurationResult, HostFacts, Notice, RunKind, RunRecord, RUN_SCHEMA};

/// What a run says about itself before its first configuration runs.
#[derive(Clone, Debug)]
pub struct RunStart {
    pub run_id: String,
    pub kind: RunKind,
    pub scenario_name: String,
    /// The scenario file's text as it was run, so the run can be repeated.
    pub scenario_toml: String,
    pub started_unix_ms: u64,
}

/// The configurations a run got through.
#[derive(Debug)]
pub struct Configurations<E> {
    /// Every configuration that finished, and the one that was stopped with its
    /// finished points.
    pub results: Vec<ConfigurationResult>,
    /// The run was stopped (Ctrl-C) or failed before its last configuration finished.
    pub interrupted: bool,
    /// Why it failed, if it did.
    pub error: Option<E>,
}

/// Runs `configurations` in order through `run_one`, which returns a configuration's
/// result and whether it was stopped part way. The run ends at the first configuration
/// that was stopped or failed, or before the next one when `stop` is set.
pub fn each_configuration<C, E>(
    configurations: impl IntoIterator<Item = C>,
    stop: &AtomicBool,
    mut run_one: impl FnMut(C) -> Result<(ConfigurationResult, bool), E>,
) -> Configurations<E> {
    let mut done = Configurations {
        results: Vec::new(),
        interrupted: false,
        error: None,
    };
    for configuration in configurations {
        if stop.load(Ordering::Relaxed) {
            done.interrupted = true;
            break;
        }
        match run_one(configuration) {
            Ok((result, stopped)) => {
                done.results.push(result);
                if stopped {
                    done.interrupted = true;
                    break;
                }
            }
            Err(e) => {
                done.interrupted = true;
                done.error = Some(e);
                break;
            }
        }
    }
    done
}

impl RunStart {
    /// The record of the run: its configurations' results, the host they ran on (the
    /// machine for the lab, the modelled host for the twin) and the run's notices.
    pub fn finish(
        self,
        finished_unix_ms: u64,
        host: HostFacts,
        configurations: Vec<ConfigurationResult>,
        interrupted: bool,
        notices: Vec<Notice>,
    ) -> RunRecord {
        RunRecord {
            schema: RUN_SCHEMA.into(),
            run_id: self.run_id,
            kind: self.kind,
            scenario_name: self.scenario_name,
            scenario_toml: self.scenario_toml,
            started_unix_ms: self.started_unix_ms,
            finished_unix_ms,
            host,
            napilab_version: env!("CARGO_PKG_VERSION").into(),
            interrupted,
            configurations,
            notices,
            twin: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(name: &str) -> ConfigurationResult {
        ConfigurationResult::new(name, Vec::new())
    }

    #[test]
    fn a_run_ends_at_the_first_stopped_or_failed_configuration() {
        let stop = AtomicBool::new(false);
        let all = each_configuration(["a", "b"], &stop, |c| Ok::<_, String>((result(c), false)));
        assert_eq!(all.results.len(), 2);
        assert!(!all.interrupted && all.error.is_none());

        let stopped = each_configuration(["a", "b", "c"], &stop, |c| {
            Ok::<_, String>((result(c), c == "b"))
        });
        let names: Vec<_> = stopped.results.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(
            names,
            ["a", "b"],
            "the stopped configuration keeps its points"
        );
        assert!(stopped.interrupted && stopped.error.is_none());

        let failed = each_configuration(["a", "b", "c"], &stop, |c| {
            if c == "b" {
                Err(format!("{c} failed"))
            } else {
                Ok((result(c), false))
            }
        });
        assert_eq!(failed.results.len(), 1);
        assert!(failed.interrupted);
        assert_eq!(failed.error.as_deref(), Some("b failed"));
    }

    #[test]
    fn a_stop_before_a_configuration_runs_none_of_the_rest() {
        let stop = AtomicBool::new(true);
        let mut ran = 0;
        let run = each_configuration(["a"], &stop, |c| {
            ran += 1;
            Ok::<_, String>((result(c), false))
        });
        assert_eq!(ran, 0);
        assert!(run.interrupted && run.results.is_empty());
    }
}
