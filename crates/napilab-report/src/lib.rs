//! napilab's results store and reports (docs/architecture.md section 3, part "report").
//!
//! A [`RunRecord`] from the lab or the twin goes into a SQLite [`Store`] (one row per
//! run with the full record as JSON, plus configurations, points and a long-format
//! metrics table in which every number keeps its source, docs/architecture.md principle 1) and is
//! rendered as a self-contained HTML report with SVG plots, a CSV of the points and the
//! run's JSON. The layout of all of these is documented in docs/report.md.

mod compare_page;
pub mod comparison;
mod csv;
mod html;
pub mod many_napi_page;
mod markup;
mod metrics;
mod openmetrics;
// Public for the exporter soak's plot (crates/napilab/examples/soak_plot.rs).
pub mod plot;
mod series;
mod server_page;
mod store;
pub mod synthetic;
mod twin_page;

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use napilab_core::RunRecord;
use serde::Serialize;

pub use crate::compare_page::comparison_html;
pub use crate::csv::{points_csv, requests_csv};
pub use crate::html::{report_html, utc};
pub use crate::metrics::{point_metrics, MetricRow};
pub use crate::openmetrics::run_openmetrics;
pub use crate::store::{RunSummary, Store, STORE_VERSION};

/// Where [`write_outputs`] put a run's files.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Outputs {
    pub run_id: String,
    pub html: PathBuf,
    pub csv: PathBuf,
    pub json: PathBuf,
    /// Every stored number as an OpenMetrics text exposition.
    pub openmetrics: PathBuf,
    pub db: PathBuf,
}

/// Writes `dir/report.html`, `dir/points.csv` (and `dir/requests.csv` for a server
/// run), `dir/run.json` and
/// `dir/openmetrics.txt`, and stores the run in
/// the database at `db` (replacing an earlier copy of the same run id).
pub fn write_outputs(run: &RunRecord, dir: &Path, db: &Path) -> Result<Outputs> {
    std::fs::create_dir_all(dir)
        .with_context(|| format!("cannot create the output directory {}", dir.display()))?;
    let outputs = Outputs {
        run_id: run.run_id.clone(),
        html: dir.join("report.html"),
        csv: dir.join("points.csv"),
        json: dir.join("run.json"),
        openmetrics: dir.join("openmetrics.txt"),
        db: db.to_path_buf(),
    };
    let json = serde_json::to_string_pretty(run).context("cannot serialise the run record")?;
    write(&outputs.json, &json)?;
    write(&outputs.csv, &points_csv(run))?;
    if let Some(text) = requests_csv(run) {
        write(&dir.join("requests.csv"), &text)?;
    }
    write(&outputs.html, &report_html(run)?)?;
    write(&outputs.openmetrics, &run_openmetrics(run)?)?;
    let mut store = Store::open(db)?;
    store.insert_run(run)?;
    Ok(outputs)
}

fn write(path: &Path, text: &str) -> Result<()> {
    std::fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))
}
