//! The host's stalls of each CPU: the machine's other tasks, its interrupts and, on a
//! virtual machine, the hypervisor take a CPU away for microseconds to milliseconds.
//! A thread spinning on the CPU sees them as gaps
//! (napilab-core `CpuStalls`, measured at a lab run's start), and so does every
//! request that was due on that CPU meanwhile. The twin replays them: per CPU, stalls
//! arrive as a Poisson stream at the measured rate, each as long as one drawn from the
//! measured lengths. The probe spins on every CPU at once, so what it measures is what
//! the host's other work (on the project's VM mostly other tasks of the guest, such as
//! kdamond, not the hypervisor: steal stayed near 0) takes from a CPU that is busy. The
//! twin gives that work to a thread of its own on each CPU that the scheduler runs
//! like any other: on an idle CPU it costs the DUT nothing, beside a busy one it takes
//! its share of the CPU (in pieces, so a thread the fair scheduler prefers can take
//! the CPU back between them). Its time counts as kernel-thread time, and as
//! `stalled` in the CPU's report.

use napilab_core::cpu_stalls::{CpuStalls, STALL_MIN_NS};

use super::*;

/// The host-work thread runs its work in pieces this long, ns: short beside a stall of
/// milliseconds, long beside the twin's batches.
const HOST_WORK_PIECE_NS: Nanos = 50_000;

/// Per CPU: its stall stream (None: no stalls there), the work of its stalls not yet
/// done, ns, and the thread that does it.
pub(crate) struct HostStalls {
    sources: Vec<Option<StallSource>>,
    pending: Vec<Nanos>,
    threads: Vec<Option<usize>>,
}

impl HostStalls {
    /// The profile's stalls on each CPU that has a host-work thread (`threads`, per
    /// CPU).
    pub(crate) fn new(profile: &Profile, seed: u64, threads: Vec<Option<usize>>) -> HostStalls {
        let sources = (0..threads.len())
            .map(|c| {
                let measured = profile.stalls.iter().find(|s| s.cpu as usize == c);
                measured.and_then(|s| StallSource::new(s, seed))
            })
            .collect();
        HostStalls {
            sources,
            pending: vec![0; threads.len()],
            threads,
        }
    }
}

/// One CPU's stall stream.
struct StallSource {
    /// Stalls a second.
    per_s: f64,
    /// (cumulative share of the stalls, shortest, longest) per length bucket.
    lengths: Vec<(f64, f64, f64)>,
    rng: Rng,
}

impl StallSource {
    /// The stream measured by `s`, or None when it saw no stall.
    fn new(s: &CpuStalls, seed: u64) -> Option<StallSource> {
        let total: u64 = s.counts.iter().sum();
        if total == 0 || !s.per_s.is_finite() || s.per_s <= 0.0 {
            return None;
        }
        let mut seen = 0;
        let last = s.counts.len().saturating_sub(1);
        let lengths = s
            .counts
            .iter()
            .enumerate()
            .filter(|(_, &n)| n > 0)
            .map(|(i, &n)| {
                seen += n;
                // Bucket i held [2^i, 2^(i+1)) ns, the last everything longer (up to
                // the longest seen); none is shorter than what counted as a stall.
                let lo = ((1u64 << i).max(STALL_MIN_NS)) as f64;
                let hi = if i == last {
                    (s.longest_ns as f64).max(lo)
                } else {
                    (1u64 << (i + 1)) as f64
                };
                (seen as f64 / total as f64, lo, hi)
            })
            .collect();
        Some(StallSource {
            per_s: s.per_s,
            lengths,
            rng: Rng::new(seed, 5_000_000 + u64::from(s.cpu)),
        })
    }

    /// Time to the next stall, ns (exponential).
    fn gap(&mut self) -> Nanos {
        self.rng.exp(1e9 / self.per_s) as Nanos
    }

    /// One stall's length, ns: a bucket by its share of the stalls, then log-uniform
    /// within it (the buckets are powers of two).
    fn length(&mut self) -> Nanos {
        let u = self.rng.next_f64();
        let &(_, lo, hi) = self
            .lengths
            .iter()
            .find(|(cum, _, _)| u < *cum)
            .unwrap_or_else(|| self.lengths.last().expect("a source has a bucket"));
        let v = self.rng.next_f64();
        (lo * (hi / lo).powf(v)) as Nanos
    }
}

impl Sim<'_> {
    /// The first stall of every CPU with a stream.
    pub(super) fn start_stalls(&mut self) {
        for c in 0..self.host_stalls.sources.len() {
            if let Some(s) = self.host_stalls.sources[c].as_mut() {
                let at = s.gap();
                self.q.schedule(at, Ev::Stall(c));
            }
        }
    }

    /// CPU `c`'s stall is due: its work joins what the CPU's host-work thread has
    /// left to do, the thread wakes (on its own CPU, as a timer would wake it), and
    /// the next stall is scheduled.
    pub(super) fn stall_due(&mut self, c: usize) {
        let hs = &mut self.host_stalls;
        let (Some(s), Some(t)) = (hs.sources[c].as_mut(), hs.threads[c]) else {
            return;
        };
        let (length, gap) = (s.length(), s.gap());
        let now = self.q.now();
        self.q.schedule(now + gap, Ev::Stall(c));
        self.host_stalls.pending[c] += length;
        self.wake_thread(t);
        if !self.cpus[c].busy {
            self.dispatch(c);
        }
    }

    /// One step of CPU `c`'s host-work thread `t`: a piece of its work (the scheduler
    /// looks again between pieces, so a woken thread that CFS prefers gets the CPU);
    /// false when it has none left (it then sleeps).
    pub(super) fn host_work_step(&mut self, c: usize, t: usize) -> bool {
        let piece = self.host_stalls.pending[c].min(HOST_WORK_PIECE_NS);
        if piece == 0 {
            self.threads[t].runnable = false;
            return false;
        }
        self.host_stalls.pending[c] -= piece;
        let (start, pen) = self.begin(c, false);
        self.count(start, |k| k.cpus[c].stalled_ns += piece);
        self.commit(c, start, start + pen + piece, Ctx::KThread, Finish::Nothing);
        true
    }
}
