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

/// One class's stream into one ring.
#[derive(Clone, Debug)]
pub struct Source {
    rng: Rng,
    pattern: Pattern,
    mean_gap_ns: f64,
    /// Exact next arrival time in ns, kept as f64 so constant rates do not drift.
    next: f64,
    class: u16,
    size: u32,
}

impl Source {
    /// `rate_pps` of zero gives a source that never emits.
    pub fn new(rng: Rng, pattern: Pattern, rate_pps: f64, class: u16, size: u32) -> Self {
        let mean_gap_ns = if rate_pps > 0.0 {
            1e9 / rate_pps
        } else {
            f64::INFINITY
        };
        let mut s = Source {
            rng,
            pattern,
            mean_gap_ns,
            next: 0.0,
            class,
            size,
        };
        s.next = match pattern {
            // A random phase, so that several constant streams do not line up.
            Pattern::Constant => s.rng.next_f64() * mean_gap_ns,
            Pattern::Poisson => s.rng.exp(mean_gap_ns),
        };
        s
    }

    fn peek(&self) -> Option<Nanos> {
        if self.next.is_finite() && self.next < u64::MAX as f64 {
            Some(self.next as Nanos)
        } else {
            None
        }
    }

    fn take(&mut self) -> Packet {
        let p = Packet {
            arrival: self.next as Nanos,
            class: self.class,
            size: self.size,
            flow: 0,
        };
        self.next += match self.pattern {
            Pattern::Constant => self.mean_gap_ns,
            Pattern::Poisson => self.rng.exp(self.mean_gap_ns),
        };
        p
    }
}

/// An injected arrival as the heap orders it: (time, injection number, class, size,
/// flow); the injection number breaks ties deterministically.
type Injected = Reverse<(Nanos, u64, u16, u32, u32)>;

/// All streams feeding one ring, merged in time order: open-loop sources plus
/// packets injected by closed-loop clients.
#[derive(Clone, Debug, Default)]
pub struct Feed {
    sources: Vec<Source>,
    /// Injected arrivals ordered by (time, injection order).
    injected: BinaryHeap<Injected>,
    injections: u64,
}

impl Feed {
    pub fn push(&mut self, s: Source) {
        self.sources.push(s);
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
    pub fn peek(&self) -> Option<Nanos> {
        let open = self.sources.iter().filter_map(|s| s.peek()).min();
        let inj = self.injected.peek().map(|Reverse(x)| x.0);
        match (open, inj) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Consume the next arrival. Ties go to the source listed first, then to
    /// injected packets (deterministic).
    pub fn take(&mut self) -> Option<Packet> {
        let mut best: Option<(usize, Nanos)> = None;
        for (i, s) in self.sources.iter().enumerate() {
            if let Some(t) = s.peek() {
                if best.is_none_or(|(_, b)| t < b) {
                    best = Some((i, t));
                }
            }
        }
        if let Some(Reverse((t, _, class, size, flow))) = self.injected.peek().copied() {
            if best.is_none_or(|(_, b)| t < b) {
                self.injected.pop();
                return Some(Packet {
                    arrival: t,
                    class,
                    size,
                    flow,
                });
            }
        }
        best.map(|(i, _)| self.sources[i].take())
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
}
