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
    bounds: Bounds<'_>,
) -> Result<Option<Solved>, ConfigError> {
    let ((lo, _), (hi, _)) = bounds;
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
    let (value, clamped) = clamp_to(raw, bounds);
    Ok(Some(Solved { value, clamped }))
}

/// A cost's lower and upper bound, each with why.
pub(super) type Bounds<'a> = ((f64, &'a str), (f64, &'a str));

/// `raw` within `bounds`, and when a bound bit, what the data gave and which bound.
fn clamp_to(raw: f64, bounds: Bounds<'_>) -> (f64, Option<String>) {
    let ((lo, lo_why), (hi, hi_why)) = bounds;
    if raw < lo {
        let why = format!("the data gave {raw:.0}, below the bound {lo:.0} ({lo_why})");
        (lo, Some(why))
    } else if raw > hi {
        let why = format!("the data gave {raw:.0}, above the bound {hi:.0} ({hi_why})");
        (hi, Some(why))
    } else {
        (raw, None)
    }
}

/// Two costs solved together: the values at which the twin's figures (`twin(x, y)`,
/// one per target) best match `targets` by least squares, for figures that each cost
/// moves differently (the NAPI kthread's cost a run and a packet: one scales with
/// the kthread's runs, the other with the packets it polls). The figures are
/// taken as a plane in the two costs, its slopes from three runs of the twin (at
/// `start`, and with each cost moved by its `step`); each solution is re-run and the
/// plane moved through it (the slopes kept), at most four times, until neither cost
/// moves by more than 0.5%. A cost outside its bounds is clamped and the other solved
/// alone on the plane. `None` when the figures do not tell the two apart (the
/// slopes' columns nearly parallel).
pub(super) fn solve_pair(
    mut twin: impl FnMut(f64, f64) -> Result<Vec<f64>, ConfigError>,
    targets: &[f64],
    start: (f64, f64),
    step: (f64, f64),
    bounds: [Bounds<'_>; 2],
) -> Result<Option<[Solved; 2]>, ConfigError> {
    let at = twin(start.0, start.1)?;
    let along_x = twin(start.0 + step.0, start.1)?;
    let along_y = twin(start.0, start.1 + step.1)?;
    let slope = |moved: &[f64], by: f64| -> Vec<f64> {
        moved.iter().zip(&at).map(|(m, a)| (m - a) / by).collect()
    };
    let (jx, jy) = (slope(&along_x, step.0), slope(&along_y, step.1));
    let dot = |a: &[f64], b: &[f64]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f64>();
    let (xx, yy, xy) = (dot(&jx, &jx), dot(&jy, &jy), dot(&jx, &jy));
    let det = xx * yy - xy * xy;
    if det.is_nan() || det <= 1e-6 * xx * yy {
        return Ok(None);
    }
    let (mut point, mut values) = ((start.0, start.1), at);
    let mut clamped: [Option<String>; 2] = [None, None];
    for _ in 0..4 {
        let r: Vec<f64> = targets.iter().zip(&values).map(|(t, v)| t - v).collect();
        let (rx, ry) = (dot(&jx, &r), dot(&jy, &r));
        let mut next = [
            point.0 + (yy * rx - xy * ry) / det,
            point.1 + (xx * ry - xy * rx) / det,
        ];
        // One cost out of its bounds: clamp it, and solve the other alone on the
        // plane with the clamped one's move taken into account.
        clamped = [None, None];
        for i in 0..2 {
            let (value, why) = clamp_to(next[i], bounds[i]);
            if why.is_none() {
                continue;
            }
            next[i] = value;
            clamped[i] = why;
            let (moved, free, free_j, own) = if i == 0 {
                (value - point.0, 1, &jy, &jx)
            } else {
                (value - point.1, 0, &jx, &jy)
            };
            let rest: Vec<f64> = r.iter().zip(own).map(|(r, j)| r - j * moved).collect();
            let base = if free == 0 { point.0 } else { point.1 };
            (next[free], clamped[free]) = clamp_to(
                base + dot(free_j, &rest) / dot(free_j, free_j),
                bounds[free],
            );
            break;
        }
        let settled = |a: f64, b: f64| (a - b).abs() <= 0.005 * b.abs().max(1.0);
        let done = settled(next[0], point.0) && settled(next[1], point.1);
        point = (next[0], next[1]);
        if done {
            break;
        }
        values = twin(point.0, point.1)?;
    }
    let [cx, cy] = clamped;
    Ok(Some([
        Solved {
            value: point.0,
            clamped: cx,
        },
        Solved {
            value: point.1,
            clamped: cy,
        },
    ]))
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A twin whose figures are exactly linear in two costs: a kthread's CPU at three
    /// rates, runs a second and requests a second as weights.
    fn plane(run: f64, packet: f64) -> Vec<f64> {
        [
            (2_000.0, 1_900.0),
            (30_000.0, 17_000.0),
            (68_000.0, 24_000.0),
        ]
        .iter()
        .map(|(requests, runs)| (runs * run + requests * packet) * 1e-9)
        .collect()
    }

    /// `solve_pair` on `plane` from `start`, both costs within 0..100,000.
    fn solve_on_plane(targets: &[f64], start: (f64, f64)) -> [Solved; 2] {
        let bounds = ((0.0, "not negative"), (100_000.0, "a stall"));
        solve_pair(
            |a, b| Ok(plane(a, b)),
            targets,
            start,
            (2_000.0, 1_000.0),
            [bounds, bounds],
        )
        .expect("no error")
        .expect("separable")
    }

    #[test]
    fn two_costs_that_move_the_figures_apart_are_both_recovered() {
        let targets = plane(8_700.0, 3_400.0);
        let [run, packet] = solve_on_plane(&targets, (16_000.0, 0.0));
        assert!((run.value - 8_700.0).abs() < 1.0, "{}", run.value);
        assert!((packet.value - 3_400.0).abs() < 1.0, "{}", packet.value);
        assert!(run.clamped.is_none() && packet.clamped.is_none());
    }

    #[test]
    fn a_cost_past_its_bound_is_clamped_and_the_other_solved_alone() {
        // The data want a negative cost a request: it is clamped to 0, and the cost a
        // run takes what the plane then asks of it.
        let targets = plane(12_000.0, -500.0);
        let [run, packet] = solve_on_plane(&targets, (5_000.0, 1_000.0));
        assert_eq!(packet.value, 0.0);
        assert!(packet
            .clamped
            .as_deref()
            .is_some_and(|c| c.contains("below the bound 0")));
        assert!(run.value > 9_000.0 && run.value < 12_000.0, "{}", run.value);
    }

    #[test]
    fn figures_that_move_alike_with_both_costs_do_not_tell_them_apart() {
        // Runs in proportion to requests at every rate: the columns are parallel.
        let twin = |a: f64, b: f64| -> Result<Vec<f64>, ConfigError> {
            Ok([1.0, 2.0, 3.0].iter().map(|x| x * (a + b)).collect())
        };
        let bounds = ((0.0, "not negative"), (100_000.0, "a stall"));
        let solved = solve_pair(
            twin,
            &[3.0, 6.0, 9.0],
            (1.0, 1.0),
            (1.0, 1.0),
            [bounds, bounds],
        )
        .expect("no error");
        assert!(solved.is_none());
    }
}
