//! What one point of a request workload measured, as the runner stores it (serde):
//! the load generator's [`LoadResult`] with its latency percentiles and its own health
//! (is it, not the server, the limit?), and the server's [`ServerStats`].

use napilab_core::LatencyHistogram;
use serde::{Deserialize, Serialize};

/// Significant decimal digits of the recorders: 3 keeps every value within 0.1%.
const SIGNIFICANT_DIGITS: u8 = 3;

/// A request latency recorder in nanoseconds: napilab-core's [`LatencyHistogram`] at
/// 0.1% resolution from 1 ns to 60 s (longer ones are counted as above the range). One
/// per thread; [`LatencyRecorder::merge`] adds them up exactly.
#[derive(Clone, Debug)]
pub struct LatencyRecorder(LatencyHistogram);

impl Default for LatencyRecorder {
    fn default() -> Self {
        Self::new()
    }
}

impl LatencyRecorder {
    pub fn new() -> Self {
        LatencyRecorder(LatencyHistogram::with_digits(SIGNIFICANT_DIGITS))
    }

    pub fn record_ns(&mut self, ns: u64) {
        self.0.record(ns);
    }

    /// Adds `other`'s samples (the recorders share their buckets, so no sample moves).
    pub fn merge(&mut self, other: &LatencyRecorder) {
        self.0.merge(&other.0);
    }

    pub fn samples(&self) -> u64 {
        self.0.samples()
    }

    pub fn percentiles(&self) -> LatencyPercentiles {
        let h = &self.0;
        LatencyPercentiles {
            samples: h.samples(),
            mean_us: h.mean_ns() / 1e3,
            p50_us: h.quantile_us(0.50),
            p90_us: h.quantile_us(0.90),
            p95_us: h.quantile_us(0.95),
            p99_us: h.quantile_us(0.99),
            p999_us: h.quantile_us(0.999),
            max_us: h.max_ns() as f64 / 1e3,
            above_range: h.above_range(),
        }
    }
}

/// Percentiles in microseconds. Each is the histogram's value at that quantile (within
/// 0.1% above a recorded sample, never above the maximum); the mean and maximum are
/// exact. napilab-core's [`LatencySummary`](napilab_core::LatencySummary) plus p95 and
/// the samples above the range: the request client's and server's own record.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LatencyPercentiles {
    pub samples: u64,
    pub mean_us: f64,
    pub p50_us: f64,
    pub p90_us: f64,
    pub p95_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    pub max_us: f64,
    /// Samples above 60 s, recorded as 60 s.
    #[serde(default)]
    pub above_range: u64,
}

/// Open or closed loop, as run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum LoopKind {
    /// Poisson arrivals at `qps`, independent of the replies (many requests may be
    /// outstanding on a connection).
    Open { qps: f64 },
    /// Each connection sends its next request when the reply to the last arrives.
    Closed,
}

/// The load generator's own state: whether it kept its schedule, so a maximum is never
/// the generator's. `limited` is true when any `reasons` applies.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct GeneratorHealth {
    /// Thread CPU time / wall time, the busiest generator thread, less the time it
    /// polled without sleeping before its sends and found nothing (`idle_polling`).
    pub cpu_busy: f64,
    /// Share of the wall time the most-polling open-loop thread polled its connections
    /// without sleeping before a send and found nothing to read (loadgen::SPIN_AHEAD_NS).
    #[serde(default)]
    pub idle_polling: f64,
    /// Share of the wall time the busiest-waiting generator thread was runnable but
    /// waited for a CPU (other tasks on its CPU; /proc/thread-self/schedstat). None
    /// without schedstat.
    #[serde(default)]
    pub waited_for_cpu: Option<f64>,
    /// Requests sent more than 100 us after their intended time (open loop).
    pub late_sends: u64,
    pub max_lateness_us: f64,
    /// Intended sends of the window that had not been made when it closed.
    pub behind_at_end: u64,
    pub limited: bool,
    pub reasons: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LoadResult {
    pub schema: String,
    pub server: String,
    pub kind: LoopKind,
    pub connections: usize,
    pub threads: usize,
    pub get_fraction: f64,
    pub value_size: usize,
    /// Length of the measurement window, seconds (warm-up excluded).
    pub window_s: f64,
    /// Requests whose intended time fell in the window, sent, per second.
    pub offered_qps: f64,
    /// Replies to those requests per second.
    pub achieved_qps: f64,
    pub sent: u64,
    pub replies: u64,
    pub get_hits: u64,
    pub get_misses: u64,
    /// Error replies (`ERROR`, `CLIENT_ERROR`, `SERVER_ERROR`, `NOT_STORED`), replies
    /// that do not parse, and requests lost with a broken connection.
    pub errors: u64,
    /// Requests of the window still unanswered `timeout` after the window closed.
    pub timeouts: u64,
    /// Latency from the intended send time (open loop: no coordinated omission) or the
    /// send (closed loop) to the whole reply read, over the window's requests.
    pub latency: LatencyPercentiles,
    /// Coefficient of variation of the intended inter-arrival times (open loop; 1 for
    /// a Poisson process).
    pub interarrival_cv: Option<f64>,
    pub generator: GeneratorHealth,
}

/// epoll_wait counts of one server thread.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct EpollStats {
    /// epoll_wait calls.
    pub waits: u64,
    /// Calls that returned at least one event.
    pub returns_with_events: u64,
    /// Calls that returned no event (a timeout: in non-blocking mode, one pass of the
    /// application's busy loop that found nothing).
    pub empty_returns: u64,
    /// Events returned.
    pub events: u64,
    /// Passes of the application's own busy loop (`epoll_pwait2` with a 1 ns timeout,
    /// the `busy-wait` mode, each pass busy-polling in the kernel up to
    /// busy_poll_usecs); 0 with blocking epoll, where the kernel's busy-poll loop runs
    /// inside the call and cannot be counted from user space.
    pub busy_loop_iterations: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct WorkerStats {
    pub worker: usize,
    pub cpu: Option<u32>,
    /// NAPI ids (`SO_INCOMING_NAPI_ID`) of the connections this worker's epoll served.
    pub napi_ids: Vec<u32>,
    pub connections: u64,
    /// Connections whose NAPI id, learnt after accept, belongs to another worker (they
    /// arrived before the id was known).
    pub connections_off_napi: u64,
    pub requests: u64,
    /// Thread CPU time / wall time (user + system, busy polling included).
    pub cpu_busy: f64,
    /// Thread CPU time / (wall time - time it waited for a CPU on the run queue,
    /// /proc/thread-self/schedstat): how much of the CPU it got it kept busy. About 1
    /// for a spinning thread even when other tasks share its CPU (a busy machine), where
    /// `cpu_busy` reads lower. None without schedstat.
    pub busy_when_scheduled: Option<f64>,
    pub epoll: EpollStats,
}

/// What a server reports at exit.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ServerStats {
    pub schema: String,
    /// `napilab-kv` or `memcached`.
    pub engine: String,
    pub mode: String,
    /// The epoll parameters in force (`EPIOCSPARAMS`), if any.
    pub epoll_params: Option<EpollParams>,
    pub blocking_epoll: bool,
    pub uptime_s: f64,
    pub requests: u64,
    pub gets: u64,
    pub get_hits: u64,
    pub sets: u64,
    pub deletes: u64,
    pub protocol_errors: u64,
    /// From the read that delivered a request to the send of its reply (queueing
    /// behind earlier requests of the same read included). None for memcached.
    pub service_time: Option<LatencyPercentiles>,
    pub workers: Vec<WorkerStats>,
    /// CPU seconds (user, system) of the whole server process where known.
    pub cpu_user_s: Option<f64>,
    pub cpu_system_s: Option<f64>,
}

/// The per-epoll busy-poll parameters of `EPIOCSPARAMS` (Linux 6.9+).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EpollParams {
    pub busy_poll_usecs: u32,
    pub busy_poll_budget: u16,
    pub prefer_busy_poll: bool,
}

/// One point of a request workload: the generator's view and the server's.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RequestPoint {
    pub load: LoadResult,
    pub server: Option<ServerStats>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_equals_one_recorder_of_all_samples() {
        let (mut a, mut b, mut all) = (
            LatencyRecorder::new(),
            LatencyRecorder::new(),
            LatencyRecorder::new(),
        );
        for i in 1..=10_000u64 {
            let ns = i * 997 % 5_000_000 + 1;
            if i % 3 == 0 {
                a.record_ns(ns)
            } else {
                b.record_ns(ns)
            }
            all.record_ns(ns);
        }
        a.record_ns(120_000_000_000); // above range: clamped and counted
        all.record_ns(120_000_000_000);
        a.merge(&b);
        assert_eq!(a.samples(), 10_001);
        assert_eq!(a.percentiles(), all.percentiles());
        assert_eq!(a.percentiles().above_range, 1);
    }

    #[test]
    fn percentiles_within_a_tenth_of_a_percent() {
        let mut r = LatencyRecorder::new();
        for us in 1..=1000u64 {
            r.record_ns(us * 1000);
        }
        let p = r.percentiles();
        let close = |got: f64, want: f64| (got / want - 1.0).abs() < 0.001;
        assert!(close(p.p50_us, 500.0), "{p:?}");
        assert!(close(p.p99_us, 990.0), "{p:?}");
        assert!(close(p.p999_us, 999.0), "{p:?}");
        assert!(close(p.max_us, 1000.0), "{p:?}");
        assert_eq!(LatencyRecorder::new().percentiles().p99_us, 0.0);
    }
}
