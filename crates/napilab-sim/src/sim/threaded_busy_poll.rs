//! Threaded busy polling (Linux 6.19, `napi-set threaded=busy-poll`; docs/sim.md
//! "Threaded busy polling"): the instance's kthread, once an IRQ has woken it, owns the
//! instance for good. `napi_threaded_poll` sets NAPI_STATE_IN_BUSY_POLL, so every
//! `napi_complete_done` returns false without clearing SCHED: the driver leaves its IRQ
//! masked, and `napi_threaded_poll_loop` flushes GRO, calls `cond_resched` and polls
//! again. The kthread never sleeps, its CPU is busy whatever the load, and a packet
//! waits at most one pass of the loop.

use super::*;

/// Cycles of one pass of the kthread's loop besides the driver poll's own
/// `fixed_cycles.poll`: `local_bh_disable`/`enable`, the poll lock, the deferred-skb
/// flush, `gro_flush_normal`, `rcu_softirq_qs_periodic` and `cond_resched`. ASSUMED
/// (no published figure and no lab of this kernel): a few tens of cycles each.
pub(crate) const BUSY_LOOP_CYCLES: f64 = 250.0;

/// At most this many empty passes are simulated as one batch (see `idle_passes`).
const MAX_IDLE_PASSES: u64 = 1024;

impl Sim<'_> {
    /// The end of a busy-polling kthread's pass whose driver poll ran from `polled_from`
    /// to `poll_end`, and how many passes it stands for: its loop's own cycles added,
    /// and, when the pass found nothing, the further empty passes that nothing can
    /// interrupt simulated with it as one batch.
    pub(super) fn busy_pass_end(
        &mut self,
        c: usize,
        t: usize,
        n: usize,
        polled_from: Nanos,
        poll_end: Nanos,
        found_nothing: bool,
    ) -> (Nanos, u64) {
        let end = poll_end + self.costs.busy_loop;
        if !(found_nothing && self.coalesce_idle_passes) {
            return (end, 1);
        }
        let pass = (end - polled_from).max(1);
        let extra = self.idle_passes(c, t, n, end, pass);
        (end + extra * pass, 1 + extra)
    }

    /// How many further empty passes of `pass` ns, the first starting at `from`, run
    /// before anything can differ from simulating them one by one: each must poll
    /// before the instance's next arrival (or TX completion), all must end in the
    /// counted interval the first ended in, and by the next pending event, because only an event (an IRQ, a wake-up, another CPU's
    /// batch ending) can wake another thread here or put a new packet on the rings
    /// ahead of the arrivals already known. Another runnable thread on the CPU, or
    /// pending softirq work, means no coalescing: `cond_resched` must look after
    /// every pass.
    fn idle_passes(&mut self, c: usize, t: usize, n: usize, from: Nanos, pass: Nanos) -> u64 {
        let cpu = &self.cpus[c];
        let others = cpu
            .threads
            .iter()
            .any(|&x| x != t && self.threads[x].runnable);
        if others || cpu.softirq_pending != 0 || !cpu.pending_irqs.is_empty() {
            return 0;
        }
        let mut next: Option<Nanos> = None;
        for i in 0..self.napis[n].rings.len() {
            let r = self.napis[n].rings[i];
            if let Some(a) = self.rings[r].nth_pending(1) {
                next = Some(next.map_or(a, |x| x.min(a)));
            }
        }
        if let Some(x) = self.napis[n].txq {
            if let Some(&d) = self.txqs[x].inflight.front() {
                next = Some(next.map_or(d, |v| v.min(d)));
            }
        }
        // Pass j (from 0) looks at the rings at from + j * pass + poll.
        let look = from + self.costs.poll;
        let by_arrival = match next {
            Some(a) if a > look => (a - look).div_ceil(pass),
            Some(_) => 0,
            None => MAX_IDLE_PASSES,
        };
        let by_event = match self.q.peek_time() {
            Some(e) => e.saturating_sub(from) / pass,
            None => MAX_IDLE_PASSES,
        };
        // Every pass is counted when the batch ends: keep them all in the interval of
        // the first one's end (`from`), as one-by-one counting would.
        let by_interval = match self.next_edge(from) {
            Some(edge) => (edge - from - 1) / pass,
            None => MAX_IDLE_PASSES,
        };
        by_arrival
            .min(by_event)
            .min(by_interval)
            .min(MAX_IDLE_PASSES)
    }

    /// The first boundary of a counted interval (the window's start, an interval's end)
    /// after `t`; None past the window.
    fn next_edge(&self, t: Nanos) -> Option<Nanos> {
        if t < self.start {
            return Some(self.start);
        }
        if t >= self.end {
            return None;
        }
        let k = (t - self.start) / self.interval_ns.max(1) + 1;
        Some((self.start + k * self.interval_ns).min(self.end))
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{builtin_profile, config_from};
    use super::*;

    /// Coalescing empty passes is exact: the same run simulated one pass per batch
    /// gives the same latencies, deliveries, polls and CPU time, with far fewer
    /// events (at least three times fewer). Checked on the poll loop (application on another CPU) and on the
    /// ingress-QoS router (TX completions, their IRQs and softirq on the kthread's CPU).
    #[test]
    fn coalesced_passes_change_nothing_but_the_event_count() {
        let p = builtin_profile("router-e3-1230-ixgbe");
        let mut router = config_from(
            include_str!("../../tests/fixtures/legacy/router-sq.toml"),
            "router-sq.toml",
        );
        router.host.kernel = "6.19".into();
        router.ingress.queues[0].napi = crate::config::NapiContext::ThreadedBusyPoll;
        router.traffic.rate_pps = 200_000.0;
        router.measurement.duration_ms = 5.0;
        router.measurement.warmup_ms = 1.0;
        let poll_loop =
            crate::poll_loop::config(crate::poll_loop::Delivery::ThreadedBusyPoll, 50_000.0, 5.0);
        for cfg in [poll_loop, router] {
            let run = |coalesce: bool| {
                let mut sim = Sim::new(&cfg, &p, 3);
                sim.coalesce_idle_passes = coalesce;
                sim.run();
                let r = crate::output::build(&sim);
                (r, sim.q.popped())
            };
            let (a, ea) = run(true);
            let (b, eb) = run(false);
            let (ca, cb) = (&a.model.classes[0], &b.model.classes[0]);
            assert_eq!(ca.forwarded, cb.forwarded, "{}", cfg.name);
            assert_eq!(ca.latency, cb.latency, "{}", cfg.name);
            for (x, y) in a.model.totals.cpus.iter().zip(&b.model.totals.cpus) {
                assert_eq!(x.polls_per_s, y.polls_per_s, "{}", cfg.name);
                assert!((x.busy - y.busy).abs() < 1e-9, "{}", cfg.name);
                assert_eq!(x.hardirqs_per_s, y.hardirqs_per_s, "{}", cfg.name);
            }
            assert!(ea * 3 < eb, "{}: {ea} events coalesced vs {eb}", cfg.name);
        }
    }
}
