//! The server fit's steps, each fitting one cost on the costs the steps before it
//! fitted (the order and the reasons in [`super::calibrate`]).

use napilab_core::scenario::ServerMode;
use napilab_core::{RequestPointResult, RunRecord};

use crate::calibrate::LabProfile;
use crate::from_server_scenario::ServerCosts;
use crate::profile::SourceKind;
use crate::wake_up::WakeUp;
use crate::{ConfigError, TwinPlan};

use super::points::{
    kthread_polls, lab_by_rate, mode_runs, names, napi_kthreads, pass_time, server_work, too_few,
    twin_by_rate, twin_points, ModeRun, Side,
};
use super::solve::{
    clamp_note, fitted, record_fit, regress_pair, solve_linear, solve_pair, Bounds, LOW_RATE_SHARE,
    STALL_NS,
};
use super::FitCheck;

/// The share of its idle polling that the lab's generator counts as busy: its busy
/// share at threaded's lowest rate that met the objective, where its work is about
/// 1% of a CPU and no softirq runs on its CPU (threaded polls the requests in the
/// server's NAPI kthread), so the rest is polling (run 20261128-195727-32e3: 0.12 at
/// 2,000 requests/s, about 60 us a request); without threaded, the median of the
/// other modes' lowest points. At most 0.5: more would not be bookkeeping.
pub(super) fn idle_polling_share(plan: &TwinPlan, record: &RunRecord) -> f64 {
    let lowest_busy = |r: &ModeRun<'_>| {
        r.points
            .iter()
            .min_by(|a, b| a.requested_qps.total_cmp(&b.requested_qps))
            .map(|p| p.client_cpu_busy)
    };
    if let Some(b) = mode_runs(plan, record, ServerMode::Threaded)
        .first()
        .and_then(lowest_busy)
    {
        return b.clamp(0.0, 0.5);
    }
    let mut lowest: Vec<f64> = ServerMode::ALL
        .iter()
        .flat_map(|&m| mode_runs(plan, record, m))
        .filter_map(|r| lowest_busy(&r))
        .collect();
    lowest.sort_by(f64::total_cmp);
    lowest
        .get(lowest.len() / 2)
        .copied()
        .unwrap_or(0.0)
        .clamp(0.0, 0.5)
}

/// Busy-wait's run at its low rates: (run, requested rate, the lab's median CPU time
/// per busy poll, points the median is over).
pub(super) type LowRates<'r> = (ModeRun<'r>, f64, f64, usize);

/// `values` as the notes list them: "0.570/0.600/..." with `decimals` decimals.
fn slash_list(values: &[f64], decimals: usize) -> String {
    values
        .iter()
        .map(|v| format!("{v:.decimals$}"))
        .collect::<Vec<_>>()
        .join("/")
}

/// The server fit's inputs and what it has fitted so far; each step fits one cost,
/// in order, on the costs the steps before it fitted.
pub(super) struct ServerFit<'r> {
    pub(super) plan: TwinPlan,
    /// The share of its idle polling that the lab's generator counts as busy
    /// ([`idle_polling_share`]).
    pub(super) idle_polling: f64,
    pub(super) record: &'r RunRecord,
    /// The platform the fit's twin runs on: the base profile, its wake-ups drawn from
    /// the run's probe, less `wake_up_shift_ns` (`ServerFit::shift_wake_ups`).
    pub(super) base: LabProfile,
    /// The run's wake-up probe on the server's CPUs, when it measured enough there.
    pub(super) probe: Option<WakeUp>,
    /// How much shorter this path's wake-ups are than the probe's, ns (fitted with
    /// the path, `ServerFit::path`).
    pub(super) wake_up_shift_ns: f64,
    pub(super) ghz: f64,
    /// Names the run and the command in the provenance.
    pub(super) reference: String,
    pub(super) costs: ServerCosts,
    pub(super) notes: Vec<String>,
    pub(super) unfixed: Vec<String>,
}

impl<'r> ServerFit<'r> {
    pub(super) fn cycles(&self, seconds: f64) -> f64 {
        seconds * 1e9 * self.ghz
    }

    /// The twin's generator CPU (with the softirqs on its CPU) at each rate of each of
    /// `runs`, in order, with `costs`.
    pub(super) fn twin_client_cpu(
        &self,
        runs: &[ModeRun<'_>],
        costs: &ServerCosts,
    ) -> Result<Vec<f64>, ConfigError> {
        let mut all = Vec::new();
        for r in runs {
            all.extend(twin_by_rate(
                &self.plan,
                r.index,
                &self.base,
                costs,
                &r.rates(),
                |p| p.client_cpu_busy,
            )?);
        }
        Ok(all)
    }

    /// The lab generator's own work, a share of a CPU, from its busy share: between
    /// sends it polls without sleeping (SPIN_AHEAD_NS) and leaves `idle_polling` of
    /// that polling counted as busy (the rounds' bookkeeping outside the idle time it
    /// subtracts), so busy = work + idle_polling x (1 - work). The twin's generator
    /// sleeps instead.
    pub(super) fn client_work(&self, busy: f64) -> f64 {
        ((busy - self.idle_polling) / (1.0 - self.idle_polling)).max(0.0)
    }

    /// A cost per request on one CPU cannot exceed that CPU's time per request at the
    /// highest rate the server kept up with.
    pub(super) fn ceiling(&self, runs: &[ModeRun<'_>]) -> f64 {
        let top = runs
            .iter()
            .flat_map(|r| r.points.iter().map(|p| p.achieved_qps))
            .fold(0.0, f64::max);
        self.cycles(1.0 / top.max(1.0))
    }

    /// Step 1: the server's own cost, where the requests' receive is on the client's
    /// CPU. Returns the runs it was fitted on.
    pub(super) fn app(&mut self) -> Result<Vec<ModeRun<'r>>, ConfigError> {
        let (plan, record) = (&self.plan, self.record);
        let mut app_runs = mode_runs(plan, record, ServerMode::NoCoalescing);
        let mut why_not = too_few(&app_runs, ServerMode::NoCoalescing);
        if let Some(first) = &why_not {
            let deferral = mode_runs(plan, record, ServerMode::Deferral);
            match too_few(&deferral, ServerMode::Deferral) {
                None => {
                    app_runs = deferral;
                    why_not = None;
                }
                Some(second) => why_not = Some(format!("{first}; {second}")),
            }
        }
        app_runs.retain(|r| r.rates().len() >= 2);
        // The lab's worker time is one number (user and system together): the split
        // between the two is kept from the assumed costs.
        let user_part = self.costs.app_user_cycles
            / (self.costs.app_user_cycles + self.costs.app_kernel_cycles);
        match (why_not, app_runs.first()) {
            (None, Some(run)) => {
                // The cost per epoll return from the lab's own counts: its CPU against
                // its requests and its returns (one a request at low rates, fewer as
                // the load batches them). Not solved through the twin: while the
                // twin's server keeps up with its requests each has a return of its
                // own, and the two costs move its CPU alike.
                let side = run.side();
                let per_return = regress_pair(run.points.iter().map(|p| {
                    let secs = p.duration_s.max(f64::MIN_POSITIVE);
                    (
                        p.achieved_qps,
                        p.server.epoll_returns_with_events as f64 / secs,
                        server_work(p, &side),
                    )
                }))
                .map(|(_, w)| self.cycles(w))
                .filter(|w| w.is_finite() && *w >= 0.0);
                let returns_per_request = lab_by_rate(run, |p| {
                    p.server.epoll_returns_with_events as f64 / p.server.requests.max(1) as f64
                })
                .iter()
                .map(|t| format!("{t:.2}"))
                .collect::<Vec<_>>()
                .join("/");
                match per_return {
                    Some(w) => {
                        self.costs.epoll_return_cycles =
                            w.min(STALL_NS * self.ghz).round();
                        let detail = format!(
                            "the lab's server CPU in {} (workers and NAPI kthreads) against its requests and its epoll_wait returns with events a second, least squares through the origin over {} points (returns per request {returns_per_request} by rate); the coefficient of the returns",
                            run.name,
                            run.points.len(),
                        );
                        let value = self.costs.epoll_return_cycles;
                        record_fit(&mut self.notes, &mut self.costs, &self.reference, "server.epoll_return_cycles", value, detail);
                    }
                    None => self.unfixed.push(format!(
                        "server.epoll_return_cycles kept ASSUMED ({:.0}): {}'s points do not tell a cost per epoll return from one per request (no returns counted, or as many as requests at every rate)",
                        self.costs.epoll_return_cycles, run.name
                    )),
                }
                // Then the cost per request: the twin's server CPU at each rate matched
                // to the lab's.
                let targets = lab_by_rate(run, |p| server_work(p, &side));
                let rates = run.rates();
                let solved = solve_linear(
                    |total| {
                        let mut c = self.costs.clone();
                        c.app_user_cycles = total * user_part;
                        c.app_kernel_cycles = total * (1.0 - user_part);
                        twin_by_rate(&self.plan, run.index, &self.base, &c, &rates, |p| {
                            server_work(p, &Side::Twin)
                        })
                    },
                    &targets,
                    (1_000.0, 4_000.0),
                    (
                        (0.0, "a cost is not negative"),
                        (
                            self.ceiling(std::slice::from_ref(run)),
                            "a CPU cannot spend more per request than 1 / the highest rate it kept up with",
                        ),
                    ),
                )?;
                match solved {
                    Some(s) => {
                        self.costs.app_user_cycles = (s.value * user_part).round();
                        self.costs.app_kernel_cycles = (s.value * (1.0 - user_part)).round();
                        let detail = format!(
                            "the server's CPU in {} (its workers' CPU time and NAPI kthreads', a share of a CPU: {} at {} requests/s), where the requests' receive runs on the client's CPU, the twin's matched by least squares beside server.epoll_return_cycles{}; the user/kernel split {:.0}/{:.0} is ASSUMED (the lab measures the worker's time as one number)",
                            run.name,
                            slash_list(&targets, 3),
                            slash_list(&rates, 0),
                            clamp_note(&s),
                            user_part * 100.0,
                            (1.0 - user_part) * 100.0
                        );
                        self.notes.push(format!(
                            "server.app_user_cycles {:.0} + server.app_kernel_cycles {:.0}: {detail}",
                            self.costs.app_user_cycles, self.costs.app_kernel_cycles
                        ));
                        for key in ["server.app_user_cycles", "server.app_kernel_cycles"] {
                            self.costs
                                .provenance
                                .insert(key.into(), fitted(&self.reference, detail.clone()));
                        }
                    }
                    None => self.unfixed.push(format!(
                        "server.app_user_cycles, server.app_kernel_cycles kept ASSUMED: the twin's server CPU in {} does not move with them",
                        run.name
                    )),
                }
            }
            (why, _) => self.unfixed.push(format!(
                "server.app_user_cycles, server.app_kernel_cycles kept ASSUMED ({:.0}, {:.0}): {}",
                self.costs.app_user_cycles,
                self.costs.app_kernel_cycles,
                why.unwrap_or_default()
            )),
        }

        Ok(app_runs)
    }

    /// The NAPI kthread's cost a run (its wake-up, the scheduler's work around it)
    /// and a request it polls beyond the request's receive: the twin's kthread CPU at
    /// threaded's rates matched to the lab's by least squares, with the poll call and
    /// the switch the twin already charges, and its wake-ups drawn from the run's
    /// probe, so that the twin polls about as often as the lab. The two are solved
    /// together: the kthread batches more requests a run the higher the rate (the
    /// lab's on 2026-11-29: 1.1 requests a run at 2,000/s, 3.6 at 88,000/s), so its
    /// time a run grows with its requests a run, and a cost a run alone, fitted
    /// where the kthread also received, made the twin's kthread cheaper a request the
    /// more it batched (its maximum 60-80% above the lab's). With fewer than three
    /// rates (two unknowns need more), the cost a run alone. Returns the run it was
    /// fitted on.
    pub(super) fn kthread_run(&mut self) -> Result<Option<ModeRun<'r>>, ConfigError> {
        let (plan, record) = (&self.plan, self.record);
        let runs = mode_runs(plan, record, ServerMode::Threaded);
        if let Some(why) = too_few(&runs, ServerMode::Threaded) {
            self.unfixed.push(format!(
                "server.kthread_run_cycles kept ASSUMED ({:.0}): {why}",
                self.costs.kthread_run_cycles
            ));
            return Ok(None);
        }
        let Some(run) = runs.into_iter().find(|r| r.rates().len() >= 2) else {
            return Ok(None);
        };
        let side = run.side();
        let targets = lab_by_rate(&run, |p| napi_kthreads(p, &side));
        let rates = run.rates();
        let kthread_cpu = |c: &ServerCosts| {
            twin_by_rate(&self.plan, run.index, &self.base, c, &rates, |p| {
                napi_kthreads(p, &Side::Twin)
            })
        };
        let run_bounds = self.per_event_bounds();
        let evidence = format!(
            "{}'s NAPI kthread CPU (napi/<device>-* in the Observation, a share of a CPU: {} at {} requests/s)",
            run.name,
            slash_list(&targets, 3),
            slash_list(&rates, 0),
        );
        if rates.len() >= 3 {
            let packet_bounds = (
                (0.0, "a cost is not negative"),
                (
                    self.ceiling(std::slice::from_ref(&run)),
                    "a CPU cannot spend more per request than 1 / the highest rate it kept up with",
                ),
            );
            let solved = solve_pair(
                |per_run, per_packet| {
                    let mut c = self.costs.clone();
                    c.kthread_run_cycles = per_run;
                    c.kthread_packet_cycles = per_packet;
                    kthread_cpu(&c)
                },
                &targets,
                (
                    self.costs.kthread_run_cycles,
                    self.costs.kthread_packet_cycles,
                ),
                (2_000.0, 1_000.0),
                [run_bounds, packet_bounds],
            )?;
            if let Some([per_run, per_packet]) = solved {
                let how = format!(
                    "{evidence}, the twin's matched by least squares with its wake-ups drawn from the run's probe, solved with"
                );
                self.costs.kthread_run_cycles = per_run.value.round();
                self.note_fit(
                    "server.kthread_run_cycles",
                    self.costs.kthread_run_cycles,
                    format!(
                        "{how} server.kthread_packet_cycles (the cost a run; the kthread's runs batch more requests at higher rates){}",
                        clamp_note(&per_run)
                    ),
                );
                self.costs.kthread_packet_cycles = per_packet.value.round();
                self.note_fit(
                    "server.kthread_packet_cycles",
                    self.costs.kthread_packet_cycles,
                    format!(
                        "{how} server.kthread_run_cycles (the cost a request it polls, beyond the request's receive){}",
                        clamp_note(&per_packet)
                    ),
                );
                return Ok(Some(run));
            }
            self.unfixed.push(format!(
                "server.kthread_packet_cycles kept ({:.0}): {} does not tell the kthread's cost a request from its cost a run (its runs batch as many requests at every rate)",
                self.costs.kthread_packet_cycles, run.name
            ));
        } else {
            self.unfixed.push(format!(
                "server.kthread_packet_cycles kept ({:.0}): {} met the objective at {} rates, and the costs a run and a request need three",
                self.costs.kthread_packet_cycles,
                run.name,
                rates.len()
            ));
        }
        let solved = solve_linear(
            |k| {
                let mut c = self.costs.clone();
                c.kthread_run_cycles = k;
                kthread_cpu(&c)
            },
            &targets,
            (0.0, 5_000.0),
            run_bounds,
        )?;
        let Some(s) = solved else {
            self.unfixed.push(format!(
                "server.kthread_run_cycles kept ASSUMED ({:.0}): the twin's NAPI kthread CPU in {} does not move with it",
                self.costs.kthread_run_cycles, run.name
            ));
            return Ok(Some(run));
        };
        self.costs.kthread_run_cycles = s.value.round();
        self.note_fit(
            "server.kthread_run_cycles",
            self.costs.kthread_run_cycles,
            format!(
                "{evidence}, the twin's matched by least squares with its wake-ups drawn from the run's probe, beside what it already charges a kthread poll (the requests' receive, server.kthread_packet_cycles, server.poll_cycles, the context switch){}",
                clamp_note(&s)
            ),
        );
        Ok(Some(run))
    }

    /// The worker's cost each time it resumes after the NAPI kthread preempted it:
    /// threaded's worker CPU matched to the lab's at its rates by least squares, with
    /// the kthread's costs of the pass before (its own fit follows, on the kthread's
    /// CPU, with this one). The twin's kthread preempts the worker as the lab kernel's
    /// does (docs/sim.md "Wake-up preemption on the lab's kernel"), and no-coalescing,
    /// whose worker gave the costs a request and a return, has no kthread to preempt
    /// it: what threaded's worker spends beyond them is its resumes.
    pub(super) fn resume(&mut self, run: Option<&ModeRun<'r>>) -> Result<(), ConfigError> {
        let Some(run) = run else {
            self.unfixed.push(format!(
                "server.resume_cycles kept ASSUMED ({:.0}): no threaded run with two rates that met the objective",
                self.costs.resume_cycles
            ));
            return Ok(());
        };
        let targets = lab_by_rate(run, |p| p.server.cpu_busy);
        let rates = run.rates();
        let solved = solve_linear(
            |k| {
                let mut c = self.costs.clone();
                c.resume_cycles = k;
                twin_by_rate(&self.plan, run.index, &self.base, &c, &rates, |p| {
                    p.server.cpu_busy
                })
            },
            &targets,
            (0.0, 2_000.0),
            self.per_event_bounds(),
        )?;
        let Some(s) = solved else {
            self.unfixed.push(format!(
                "server.resume_cycles kept ASSUMED ({:.0}): the twin's server CPU in {} does not move with it (its worker is not preempted)",
                self.costs.resume_cycles, run.name
            ));
            return Ok(());
        };
        self.costs.resume_cycles = s.value.round();
        self.note_fit(
            "server.resume_cycles",
            self.costs.resume_cycles,
            format!(
                "{}'s worker CPU (the server's CPU time, a share of a CPU: {} at {} requests/s), the twin's matched by least squares with the NAPI kthread's costs of the pass before, its kthread preempting the worker as on the lab's 6.18 kernel{}",
                run.name,
                slash_list(&targets, 3),
                slash_list(&rates, 0),
                clamp_note(&s)
            ),
        );
        Ok(())
    }

    /// The bounds of a cost charged per event (a kthread's run, a worker's resume):
    /// not negative, and shorter than a stall.
    fn per_event_bounds(&self) -> Bounds<'static> {
        (
            (0.0, "a cost is not negative"),
            (STALL_NS * self.ghz, "longer would be a stall, not a cost"),
        )
    }

    /// Notes a cost just fitted (`key` = `value`, already set in `costs`).
    fn note_fit(&mut self, key: &str, value: f64, detail: String) {
        record_fit(
            &mut self.notes,
            &mut self.costs,
            &self.reference,
            key,
            value,
            detail,
        );
    }

    /// Step 2: one pass of the busy-polling loop. Returns the low rates it was
    /// fitted at.
    pub(super) fn poll(&mut self) -> Result<Option<LowRates<'r>>, ConfigError> {
        let (plan, record) = (&self.plan, self.record);
        // One pass of the busy-polling loop: the worker's CPU time per busy poll at
        // busy-wait's low rates (up to three times the lowest, where passes that find
        // nothing dominate), the median over those points: the worker's CPU time and the
        // trace tier's poll count cover slightly different windows, so single points
        // scatter.
        let busy = mode_runs(plan, record, ServerMode::BusyWait);
        let low = busy.first().and_then(|run| {
            let lowest = run
                .results
                .points
                .iter()
                .map(|p| p.requested_qps)
                .fold(f64::INFINITY, f64::min);
            let mut passes: Vec<(f64, f64)> = run
                .results
                .points
                .iter()
                .filter(|p| p.requested_qps <= 3.0 * lowest)
                .filter_map(|p| Some((p.requested_qps, pass_time(p)?)))
                .collect();
            passes.sort_by(|a, b| a.1.total_cmp(&b.1));
            let median = passes.get(passes.len() / 2)?;
            Some((run, median.0, median.1, passes.len()))
        });
        match low {
        None => self.unfixed.push(format!(
            "server.poll_cycles kept ASSUMED ({:.0}): {}",
            self.costs.poll_cycles,
            if busy.is_empty() {
                "the run has no configuration of napilab's server in mode busy-wait"
            } else {
                "busy-wait's lowest rate has no busy polls counted (measurement.trace = \"always\" counts them)"
            }
        )),
        Some((run, qps, lab_pass, n)) => {
            let solved = solve_linear(
                |x| {
                    let mut c = self.costs.clone();
                    c.poll_cycles = x;
                    let pts = twin_points(&self.plan, run.index, &self.base, &c, &[qps])?;
                    Ok(vec![pts.first().and_then(pass_time).unwrap_or(0.0)])
                },
                &[lab_pass],
                (200.0, 1_000.0),
                (
                    (50.0 * self.ghz, "a system call and an empty veth poll take at least ~50 ns"),
                    (100_000.0 * self.ghz, "a pass of 100 us would not be busy polling"),
                ),
            )?;
            match solved {
                Some(s) => {
                    self.costs.poll_cycles = s.value.round();
                    let detail = format!(
                        "{}'s worker CPU time per busy poll, the median of {n} point(s) at its low rates: {:.0} ns at {qps:.0} requests/s (its CPU time over the trace tier's busy polls; CPU time, not wall time, so a worker waiting for its CPU does not lengthen the pass); solved so the twin's pass at that rate matches{}",
                        run.name,
                        lab_pass * 1e9,
                        clamp_note(&s)
                    );
                    let value = self.costs.poll_cycles;
                    record_fit(&mut self.notes, &mut self.costs, &self.reference, "server.poll_cycles", value, detail);
                }
                None => self.unfixed.push(format!(
                    "server.poll_cycles kept ASSUMED ({:.0}): the twin's busy-polling pass in {} does not move with it",
                    self.costs.poll_cycles, run.name
                )),
            }
        }
    }

        // The run is cloned so that the checks at the end can use it again.
        Ok(low.map(|(run, qps, pass, n)| (run.clone(), qps, pass, n)))
    }

    /// Step 3: the requests' receive. Returns the runs it was fitted on.
    pub(super) fn receive(&mut self) -> Result<Vec<ModeRun<'r>>, ConfigError> {
        let (plan, record) = (&self.plan, self.record);
        // The requests' receive where the lab times it beside nothing else: on the
        // client's CPU in no-coalescing (else deferral), in the softirq the client's
        // send raises and runs at its bh-enable, which the kernel (no
        // CONFIG_IRQ_TIME_ACCOUNTING) counts in the generator thread's runtime. The
        // generator's own costs are fitted first (step 1), where the requests are polled
        // on the server's CPU. Not in threaded: there the server's CPU also holds the
        // NAPI kthread's wake-ups, which the twin charges only a context switch.
        let mut receive_runs = mode_runs(plan, record, ServerMode::NoCoalescing);
        receive_runs.retain(|r| r.rates().len() >= 2);
        if receive_runs.is_empty() {
            receive_runs = mode_runs(plan, record, ServerMode::Deferral);
            receive_runs.retain(|r| r.rates().len() >= 2);
        }
        for r in &mut receive_runs {
            let top = r.points.iter().map(|p| p.achieved_qps).fold(0.0, f64::max);
            r.points.retain(|p| p.requested_qps >= LOW_RATE_SHARE * top);
        }
        receive_runs.retain(|r| r.rates().len() >= 2);
        if receive_runs.is_empty() {
            self.unfixed.push(format!(
                "server.receive_cycles kept ASSUMED ({:.0}): neither no-coalescing nor deferral of napilab's server met the objective at two offered rates above a tenth of its highest",
                self.costs.receive_cycles
            ));
            return Ok(receive_runs);
        }
        let targets: Vec<f64> = receive_runs
            .iter()
            .flat_map(|r| lab_by_rate(r, |p| self.client_work(p.client_cpu_busy)))
            .collect();
        let top = self.ceiling(&receive_runs);
        let solved = solve_linear(
            |x| {
                let mut c = self.costs.clone();
                c.receive_cycles = x;
                self.twin_client_cpu(&receive_runs, &c)
            },
            &targets,
            (500.0, 5_000.0),
            (
                (0.0, "a cost is not negative"),
                (
                    (top - self.costs.client_cycles).max(0.0),
                    "with the generator's own cost it cannot exceed 1 / the highest rate served",
                ),
            ),
        )?;
        match solved {
            Some(s) => {
                self.costs.receive_cycles = s.value.round();
                let detail = format!(
                    "the load generator thread's CPU in {} (a share of a CPU, with the softirqs at its bh-enable: {} at {} requests/s; rates below a tenth of the highest left out), where the requests' receive runs in the softirq its sends raise, beside its own costs; the twin's matched by least squares{}",
                    names(&receive_runs),
                    slash_list(&targets, 3),
                    slash_list(&receive_runs.iter().flat_map(|r| r.rates()).collect::<Vec<_>>(), 0),
                    clamp_note(&s)
                );
                let value = self.costs.receive_cycles;
                record_fit(&mut self.notes, &mut self.costs, &self.reference, "server.receive_cycles", value, detail);
            }
            None => self.unfixed.push(format!(
                "server.receive_cycles kept ASSUMED ({:.0}): the twin's generator CPU in {} does not move with it",
                self.costs.receive_cycles,
                names(&receive_runs)
            )),
        }
        Ok(receive_runs)
    }

    /// Step 4: the load generator's cost per request and per round of its loop,
    /// where the requests are not polled on its CPU. Returns the cost per request.
    pub(super) fn client(&mut self) -> Result<Option<f64>, ConfigError> {
        let (plan, record) = (&self.plan, self.record);
        // The modes that poll the requests on the server's CPU: the generator's CPU
        // there is its own work (and, in busy-wait and irq-suspend at low rates, the
        // requests' polls while the IRQ is not masked, which the twin puts on its CPU
        // too). In threaded each send may also wake the NAPI kthread on the other CPU,
        // an IPI the twin does not charge the sender (docs/sim.md).
        let mut client_runs = mode_runs(plan, record, ServerMode::Threaded);
        client_runs.extend(mode_runs(plan, record, ServerMode::BusyWait));
        client_runs.extend(mode_runs(plan, record, ServerMode::IrqSuspend));
        client_runs.retain(|r| !r.points.is_empty());
        let rates: usize = client_runs.iter().map(|r| r.rates().len()).sum();
        if rates < 2 {
            self.unfixed.push(
                "server.client_cycles kept ASSUMED: threaded, busy-wait and irq-suspend of napilab's server met the objective at fewer than two offered rates".into(),
            );
            return Ok(None);
        }
        let targets: Vec<f64> = client_runs
            .iter()
            .flat_map(|r| lab_by_rate(r, |p| self.client_work(p.client_cpu_busy)))
            .collect();
        let ceiling = self.ceiling(&client_runs);
        let solved = solve_linear(
            |per_request| {
                let mut c = self.costs.clone();
                c.client_cycles = per_request;
                self.twin_client_cpu(&client_runs, &c)
            },
            &targets,
            (2_000.0, 8_000.0),
            (
                (0.0, "a cost is not negative"),
                (
                    ceiling,
                    "a CPU cannot spend more per request than 1 / the highest rate it kept up with",
                ),
            ),
        )?;
        let Some(s) = solved else {
            self.unfixed.push(format!(
                "server.client_cycles kept ASSUMED: the twin's generator CPU in {} does not move with it",
                names(&client_runs)
            ));
            return Ok(None);
        };
        self.costs.client_cycles = s.value.round();
        let detail = format!(
            "the load generator thread's CPU in {} (a share of a CPU less the {:.3} of its idle polling that the lab counts as busy: {} at {} requests/s; the requests are polled on the server's CPU there), the twin's matched by least squares; split between send and read by server.client_send_share{}",
            names(&client_runs),
            self.idle_polling,
            slash_list(&targets, 3),
            slash_list(&client_runs.iter().flat_map(|r| r.rates()).collect::<Vec<_>>(), 0),
            clamp_note(&s)
        );
        self.costs.provenance.insert(
            "server.client_cycles".into(),
            fitted(&self.reference, detail.clone()),
        );
        self.notes.push(format!(
            "client_cycles_per_request {:.0}: {detail}",
            self.costs.client_cycles
        ));
        Ok(Some(s.value / (1e9 * self.ghz)))
    }

    pub(super) fn mark_unfixed(&mut self) {
        // A cost the run could not fix says so in its provenance, beside why it is assumed.
        for (key, src) in self.costs.provenance.iter_mut() {
            if src.kind == SourceKind::Assumed {
                if let Some(why) = self.unfixed.iter().find(|u| u.contains(key.as_str())) {
                    src.detail = format!(
                        "{}; not fitted on lab run {}: {why}",
                        src.detail, self.record.run_id
                    );
                }
            }
        }
    }

    /// The fitted costs against the lab, per statistic used.
    pub(super) fn checks(
        &self,
        app_runs: &[ModeRun<'r>],
        receive_runs: &[ModeRun<'r>],
        low: Option<&LowRates<'r>>,
        kthread_run: Option<&ModeRun<'r>>,
    ) -> Result<Vec<FitCheck>, ConfigError> {
        // In % of a CPU: the summary prints whole numbers.
        let mean = |v: &[f64]| 100.0 * v.iter().sum::<f64>() / v.len().max(1) as f64;
        let mut checks = Vec::new();
        for r in app_runs {
            let side = r.side();
            let twin = twin_by_rate(
                &self.plan,
                r.index,
                &self.base,
                &self.costs,
                &r.rates(),
                |p| server_work(p, &Side::Twin),
            )?;
            checks.push(FitCheck {
                configuration: r.name.to_string(),
                statistic: "server CPU (workers + NAPI kthreads), mean % of a CPU over its rates"
                    .into(),
                lab: mean(&lab_by_rate(r, |p| server_work(p, &side))),
                twin: mean(&twin),
            });
        }
        for r in receive_runs {
            checks.push(FitCheck {
                configuration: r.name.to_string(),
                statistic:
                    "load generator CPU (less its idle polling), mean % of a CPU over its rates"
                        .into(),
                lab: mean(&lab_by_rate(r, |p| self.client_work(p.client_cpu_busy))),
                twin: mean(&self.twin_client_cpu(std::slice::from_ref(r), &self.costs)?),
            });
        }
        if let Some(r) = kthread_run {
            let side = r.side();
            let twin = twin_points(&self.plan, r.index, &self.base, &self.costs, &r.rates())?;
            let per_rate = |v: &dyn Fn(&RequestPointResult) -> f64| -> Vec<f64> {
                twin.iter().map(v).collect()
            };
            checks.push(FitCheck {
                configuration: r.name.to_string(),
                statistic: "NAPI kthread CPU, mean % of a CPU over its rates".into(),
                lab: mean(&lab_by_rate(r, |p| napi_kthreads(p, &side))),
                twin: mean(&per_rate(&|p| napi_kthreads(p, &Side::Twin))),
            });
            checks.push(FitCheck {
                configuration: r.name.to_string(),
                statistic: "NAPI kthread polls a second, mean over its rates".into(),
                lab: mean(&lab_by_rate(r, kthread_polls)) / 100.0,
                twin: mean(&per_rate(&kthread_polls)) / 100.0,
            });
        }
        if let Some(&(ref run, qps, lab_pass, _)) = low {
            let pts = twin_points(&self.plan, run.index, &self.base, &self.costs, &[qps])?;
            checks.push(FitCheck {
                configuration: run.name.to_string(),
                statistic: format!("worker CPU per busy poll at {qps:.0} requests/s, ns"),
                lab: lab_pass * 1e9,
                twin: pts.first().and_then(pass_time).unwrap_or(0.0) * 1e9,
            });
        }
        Ok(checks)
    }
}
