//! Solving one server cost against the lab: through the twin (its figures taken as
//! linear in the cost, refined by secant steps, clamped to physical bounds) or by
//! least squares on the lab's own counts; and the record of each fitted number.

use crate::from_server_scenario::ServerCosts;
use crate::profile::{ParamSource, SourceKind};
use crate::ConfigError;

/// One cost solved against the lab: its value, whether a bound clamped it, and the
/// twin's figures at the value against the lab's.
pub(super) struct Solved {
    pub(super) value: f64,
    pub(super) clamped: Option<String>,
}

/// The value of a cost at which the twin's figures (`twin(x)`, one per target) best
/// match `targets` by least squares. Each figure is taken as linear in the cost
/// between two runs of the twin (first `x0` and `x1`), the lines solved, and the
/// solution refined by re-running the twin there (secant steps, at most four, until
/// it moves by less than 0.5%); the answer is clamped to `bounds` (lower, upper, and
/// why each). `None` when no figure moves with the cost.
pub(super) fn solve_linear(
    mut twin: impl FnMut(f64) -> Result<Vec<f64>, ConfigError>,
    targets: &[f64],
    (x0, x1): (f64, f64),
    bounds: ((f64, &str), (f64, &str)),
) -> Result<Option<Solved>, ConfigError> {
    let ((lo, lo_why), (hi, hi_why)) = bounds;
    let mut a = (x0, twin(x0)?);
    let mut b = (x1, twin(x1)?);
    let mut raw = f64::NAN;
    for _ in 0..4 {
        let Some(x) = least_squares_root(&a, &b, targets) else {
            break;
        };
        let settled = raw.is_finite() && (x - raw).abs() <= 0.005 * raw.abs().max(1.0);
        raw = x;
        // Outside the bounds the twin is not re-run: the clamp decides.
        if settled || x < lo || x > hi {
            break;
        }
        let y = twin(x)?;
        a = b;
        b = (x, y);
    }
    if !raw.is_finite() {
        return Ok(None);
    }
    let (value, clamped) = if raw < lo {
        (
            lo,
            Some(format!(
                "the data gave {raw:.0}, below the bound {lo:.0} ({lo_why})"
            )),
        )
    } else if raw > hi {
        (
            hi,
            Some(format!(
                "the data gave {raw:.0}, above the bound {hi:.0} ({hi_why})"
            )),
        )
    } else {
        (raw, None)
    };
    Ok(Some(Solved { value, clamped }))
}

/// The x at which the lines through `a` and `b` (one per figure) come closest to
/// `targets` by least squares; `None` when no figure moves between them.
pub(super) fn least_squares_root(
    a: &(f64, Vec<f64>),
    b: &(f64, Vec<f64>),
    targets: &[f64],
) -> Option<f64> {
    let dx = b.0 - a.0;
    if dx == 0.0 {
        return None;
    }
    let (mut num, mut den) = (0.0, 0.0);
    for ((ya, yb), t) in a.1.iter().zip(&b.1).zip(targets) {
        let slope = (yb - ya) / dx;
        num += slope * (t - (ya - slope * a.0));
        den += slope * slope;
    }
    let scale = a.1.iter().chain(&b.1).map(|v| v.abs()).fold(0.0, f64::max);
    (den > (1e-9 * scale / dx.abs()).powi(2) && num.is_finite()).then(|| num / den)
}

/// The most a cost per epoll return or per NAPI kthread run may be, ns: longer
/// would be a stall, not a cost.
pub(super) const STALL_NS: f64 = 100_000.0;
/// The receive fit leaves out rates below this share of the highest (see
/// `ServerFit::receive`).
pub(super) const LOW_RATE_SHARE: f64 = 0.1;

/// [`crate::calibrate::regress_pair`] refusing regressors with |correlation| above
/// 0.9995, whose coefficients the lab's noise would swap.
pub(super) fn regress_pair(points: impl Iterator<Item = (f64, f64, f64)>) -> Option<(f64, f64)> {
    crate::calibrate::regress_pair(points, 1e-3)
}

/// Notes a fitted cost (`key` = `value`, how) and records its provenance.
pub(super) fn record_fit(
    notes: &mut Vec<String>,
    costs: &mut ServerCosts,
    reference: &str,
    key: &str,
    value: f64,
    detail: String,
) {
    notes.push(format!("{key} {value:.0}: {detail}"));
    costs
        .provenance
        .insert(key.to_string(), fitted(reference, detail));
}

/// One fitted cost's record for the profile's provenance and the summary.
pub(super) fn fitted(reference: &str, detail: String) -> ParamSource {
    ParamSource {
        kind: SourceKind::Fitted,
        reference: reference.to_string(),
        detail,
    }
}

pub(super) fn clamp_note(s: &Solved) -> String {
    s.clamped
        .as_deref()
        .map_or(String::new(), |c| format!("; clamped: {c}"))
}
