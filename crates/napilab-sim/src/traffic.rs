//! Traffic sources. Arrivals are generated lazily, per RX ring, only when the model
//! looks at that ring (a poll or an IRQ being armed), so a packet is never an event of
//! its own (issue: "packets live in ring and queue structures").

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use crate::config::Pattern;
use crate::event::Nanos;
use crate::rng::Rng;

/// One packet as the ring and the egress see it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Packet {
    /// When its descriptor became visible to the driver (after RX DMA).
    pub arrival: Nanos,
    pub class: u16,
    pub size: u32,
    /// Closed-loop client that sent it (0 for open-loop traffic).
    pub flow: u32,
}

/// Arrivals a source computes at a time: drawing a block of gaps in one tight loop
/// costs a fraction of drawing them one by one between other work.
const BLOCK: usize = 64;

/// Fractional bits of the fixed-point arrival clock: 1/65536 ns, so that a constant
/// rate drifts by at most 8 us over 10^9 packets, and adding gaps is an integer add.
const FRAC: u32 = 16;
const ONE_NS: f64 = (1u64 << FRAC) as f64;
/// Largest gap kept (2^62 fixed-point units, about 19.5 hours): keeps the f64 to
/// integer conversion in range.
const MAX_GAP: f64 = (1u64 << 62) as f64;

/// One class's stream into one ring.
#[derive(Clone, Debug)]
pub struct Source {
    rng: Rng,
    pattern: Pattern,
    /// Mean gap in fixed-point units (1/65536 ns).
    mean_gap: f64,
    /// Fixed-point time of the first arrival after the current block (`None`: the
    /// stream has ended, or never started for a rate of zero).
    next: Option<u64>,
    /// The current block of arrival times (`NEVER`: no more arrivals) and the
    /// position of the next one. The same draws in the same order as one at a time.
    times: [Nanos; BLOCK],
    pos: usize,
    class: u16,
    size: u32,
    /// Packets per burst (at least 1) and how many of the current burst are drawn.
    burst: u32,
    in_burst: u32,
}

/// A non-negative gap in fixed-point units as an integer.
#[inline(always)]
fn gap_units(x: f64) -> u64 {
    // Clamped below 2^63, so the conversion is a single instruction.
    x.min(MAX_GAP) as i64 as u64
}

impl Source {
    /// `rate_pps` of zero gives a source that never emits.
    pub fn new(rng: Rng, pattern: Pattern, rate_pps: f64, class: u16, size: u32) -> Self {
        Source::bursty(rng, pattern, rate_pps, class, size, 1)
    }

    /// [`Source::new`] with its arrivals `burst` at a time, back to back, and the bursts
    /// spaced by `burst` mean gaps (drawn by the pattern), so the rate is unchanged.
    pub fn bursty(
        rng: Rng,
        pattern: Pattern,
        rate_pps: f64,
        class: u16,
        size: u32,
        burst: u32,
    ) -> Self {
        let burst = burst.max(1);
        let mean_gap = if rate_pps > 0.0 {
            1e9 / rate_pps * ONE_NS * f64::from(burst)
        } else {
            f64::INFINITY
        };
        let mut s = Source {
            rng,
            pattern,
            mean_gap,
            next: None,
            times: [NEVER; BLOCK],
            pos: 0,
            class,
            size,
            burst,
            in_burst: 0,
        };
        if rate_pps > 0.0 {
            let first = match pattern {
                // A random phase, so that several constant streams do not line up.
                Pattern::Constant => s.rng.next_f64() * mean_gap,
                Pattern::Poisson => s.rng.exp1() * mean_gap,
            };
            s.next = Some(gap_units(first));
            s.refill();
        }
        s
    }

    /// Compute the next block of arrival times: each slot is the running fixed-point
    /// time (`NEVER` once it would overflow), the gaps drawn in the same order as one
    /// at a time. One loop, the running time in registers (a local, not
    /// `self.next`) and each draw added as it is made.
    #[inline(never)]
    fn refill(&mut self) {
        let mut next = self.next.unwrap_or(0);
        let mut alive = self.next.is_some();
        let times = &mut self.times;
        let mut put = |i: usize, g: u64| {
            times[i] = if alive { next >> FRAC } else { NEVER };
            let (sum, over) = next.overflowing_add(g);
            next = sum;
            alive &= !over;
        };
        if self.burst > 1 {
            // Within a burst no gap; after its last packet the pattern's gap, whose mean
            // `bursty` scaled by the burst's size.
            let (burst, mut in_burst) = (self.burst, self.in_burst);
            for i in 0..BLOCK {
                in_burst += 1;
                let g = if in_burst < burst {
                    0
                } else {
                    in_burst = 0;
                    match self.pattern {
                        Pattern::Constant => gap_units(self.mean_gap.round()),
                        Pattern::Poisson => gap_units(self.rng.exp1() * self.mean_gap),
                    }
                };
                put(i, g);
            }
            self.in_burst = in_burst;
        } else {
            match self.pattern {
                Pattern::Constant => {
                    let g = gap_units(self.mean_gap.round());
                    for i in 0..BLOCK {
                        put(i, g);
                    }
                }
                Pattern::Poisson => {
                    let mean = self.mean_gap;
                    self.rng
                        .exp1_each(BLOCK, |i, x| put(i, gap_units(x * mean)));
                }
            }
        }
        self.next = alive.then_some(next);
        self.pos = 0;
    }

    /// Next arrival time, `NEVER` if none.
    #[inline(always)]
    pub(crate) fn peek(&self) -> Nanos {
        self.times[self.pos]
    }

    /// The current block of arrival times and the position of the next one.
    #[inline(always)]
    pub(crate) fn block(&self) -> (&[Nanos; BLOCK], usize) {
        (&self.times, self.pos)
    }

    /// Consume the arrivals of the current block before position `pos` (at most the
    /// block's length), computing the next block when all are consumed.
    #[inline(always)]
    pub(crate) fn set_pos(&mut self, pos: usize) {
        self.pos = pos.min(BLOCK);
        if self.pos == BLOCK {
            self.refill();
        }
    }

    pub(crate) fn class(&self) -> u16 {
        self.class
    }

    pub(crate) fn size(&self) -> u32 {
        self.size
    }

    #[inline(always)]
    pub(crate) fn take(&mut self) -> Packet {
        let p = Packet {
            arrival: self.times[self.pos],
            class: self.class,
            size: self.size,
            flow: 0,
        };
        self.pos += 1;
        if self.pos == BLOCK {
            self.refill();
        }
        p
    }
}

/// An injected arrival as the heap orders it: (time, injection number, class, size,
/// flow); the injection number breaks ties deterministically.
type Injected = Reverse<(Nanos, u64, u16, u32, u32)>;

/// All streams feeding one ring, merged in time order: open-loop sources plus
/// packets injected by closed-loop clients.
///
/// The earliest open-loop arrival and its source are cached, so that looking at the
/// next arrival (done once per admitted packet) costs a compare, not a scan.
#[derive(Clone, Debug)]
pub struct Feed {
    sources: Vec<Source>,
    /// Injected arrivals ordered by (time, injection order).
    injected: BinaryHeap<Injected>,
    injections: u64,
    /// Earliest open-loop arrival (`NEVER` if none) and the source it comes from.
    open_next: Nanos,
    open_src: usize,
}

/// "No arrival": no run reaches this time.
const NEVER: Nanos = Nanos::MAX;

impl Default for Feed {
    fn default() -> Self {
        Feed {
            sources: Vec::new(),
            injected: BinaryHeap::new(),
            injections: 0,
            open_next: NEVER,
            open_src: 0,
        }
    }
}

impl Feed {
    pub fn push(&mut self, s: Source) {
        self.sources.push(s);
        self.refresh_open();
    }

    /// Recompute the cached earliest source; ties go to the source listed first.
    fn refresh_open(&mut self) {
        let mut best = NEVER;
        let mut src = 0;
        for (i, s) in self.sources.iter().enumerate() {
            let t = s.peek();
            if t < best {
                best = t;
                src = i;
            }
        }
        self.open_next = best;
        self.open_src = src;
    }

    /// The only open-loop source, when there is exactly one and nothing injected is
    /// pending: the caller may take from it directly, then must tell the feed its
    /// next arrival with [`Feed::set_open_next`].
    #[inline(always)]
    pub(crate) fn single_open(&mut self) -> Option<&mut Source> {
        if self.sources.len() == 1 && self.injected.is_empty() {
            self.sources.first_mut()
        } else {
            None
        }
    }

    #[inline(always)]
    pub(crate) fn set_open_next(&mut self, t: Nanos) {
        self.open_next = t;
    }

    /// A closed-loop arrival, known only once the previous reply left.
    pub fn inject(&mut self, p: Packet) {
        self.injections += 1;
        self.injected.push(Reverse((
            p.arrival,
            self.injections,
            p.class,
            p.size,
            p.flow,
        )));
    }

    /// Next arrival of the merged stream, without consuming it.
    #[inline]
    pub fn peek(&self) -> Option<Nanos> {
        let t = self.next_time();
        (t != NEVER).then_some(t)
    }

    /// Next arrival of the merged stream, `Nanos::MAX` if there is none.
    #[inline(always)]
    pub fn next_time(&self) -> Nanos {
        match self.injected.peek() {
            Some(Reverse(x)) => x.0.min(self.open_next),
            None => self.open_next,
        }
    }

    /// Consume the next arrival. Ties go to the source listed first, then to
    /// injected packets (deterministic).
    #[inline(always)]
    pub fn take(&mut self) -> Option<Packet> {
        if let Some(Reverse((t, _, class, size, flow))) = self.injected.peek().copied() {
            if t < self.open_next {
                self.injected.pop();
                return Some(Packet {
                    arrival: t,
                    class,
                    size,
                    flow,
                });
            }
        }
        if self.open_next == NEVER {
            return None;
        }
        let p = self.sources[self.open_src].take();
        if self.sources.len() == 1 {
            self.open_next = self.sources[0].peek();
        } else {
            self.refresh_open();
        }
        Some(p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constant_rate_is_exact() {
        let mut f = Feed::default();
        f.push(Source::new(Rng::new(1, 1), Pattern::Constant, 1e6, 0, 64));
        let first = f.take().expect("emits").arrival;
        let mut last = first;
        for _ in 0..1000 {
            last = f.take().expect("emits").arrival;
        }
        assert!((last - first) as i64 - 1_000_000 <= 1);
    }

    #[test]
    fn merged_streams_are_ordered_and_rates_add() {
        let mut f = Feed::default();
        f.push(Source::new(Rng::new(1, 1), Pattern::Poisson, 3e5, 0, 64));
        f.push(Source::new(Rng::new(1, 2), Pattern::Poisson, 1e5, 1, 64));
        let mut prev = 0;
        let mut n1 = 0;
        let n = 100_000;
        let mut last = 0;
        for _ in 0..n {
            let p = f.take().expect("emits");
            assert!(p.arrival >= prev);
            prev = p.arrival;
            n1 += (p.class == 1) as u32;
            last = p.arrival;
        }
        let rate = n as f64 / (last as f64 / 1e9);
        assert!((rate - 4e5).abs() / 4e5 < 0.02, "{rate}");
        assert!((n1 as f64 / n as f64 - 0.25).abs() < 0.01);
    }

    #[test]
    fn bursts_arrive_back_to_back_at_the_same_rate() {
        for pattern in [Pattern::Constant, Pattern::Poisson] {
            let mut f = Feed::default();
            f.push(Source::bursty(Rng::new(1, 1), pattern, 1e6, 0, 64, 8));
            let times: Vec<Nanos> = (0..80_000)
                .map(|_| f.take().expect("emits").arrival)
                .collect();
            for burst in times.chunks(8) {
                assert!(
                    burst.iter().all(|&t| t == burst[0]),
                    "{pattern:?}: {burst:?}"
                );
            }
            let gaps: Vec<Nanos> = times
                .chunks(8)
                .map(|b| b[0])
                .collect::<Vec<_>>()
                .windows(2)
                .map(|w| w[1] - w[0])
                .collect();
            assert!(gaps.iter().all(|&g| g > 0), "{pattern:?}: bursts overlap");
            let rate =
                (times.len() - 8) as f64 / ((times[times.len() - 1] - times[0]) as f64 / 1e9);
            assert!((rate - 1e6).abs() / 1e6 < 0.02, "{pattern:?}: {rate}");
            if pattern == Pattern::Constant {
                assert!(gaps.iter().all(|&g| g.abs_diff(8_000) <= 1), "{gaps:?}");
            }
        }
    }
}
