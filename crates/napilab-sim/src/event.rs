//! The event queue: a binary heap ordered by (time, sequence number).
//!
//! docs/architecture.md principle 7: integer nanosecond time, ties broken by the order in which
//! events were scheduled, so a run is a pure function of its inputs and seed. A general
//! DES crate was measured about ten times slower than this on the project's machine, and
//! the twin keeps packets in rings rather than as events, so the heap only carries poll
//! batches, IRQs and timers.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

/// Simulated time in nanoseconds since the start of the run.
pub type Nanos = u64;

/// One scheduled event. Time and sequence number are packed into one `u128` key
/// (time in the high half), so ordering is a single integer comparison.
struct Entry<E> {
    key: u128,
    event: E,
}

impl<E> PartialEq for Entry<E> {
    fn eq(&self, other: &Self) -> bool {
        self.key == other.key
    }
}
impl<E> Eq for Entry<E> {}
impl<E> PartialOrd for Entry<E> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl<E> Ord for Entry<E> {
    // BinaryHeap is a max-heap: reverse so the earliest (time, seq) pops first.
    fn cmp(&self, other: &Self) -> Ordering {
        other.key.cmp(&self.key)
    }
}

/// A future-event list. Popping returns events in (time, scheduling order).
pub struct EventQueue<E> {
    heap: BinaryHeap<Entry<E>>,
    next_seq: u64,
    now: Nanos,
    popped: u64,
}

impl<E> Default for EventQueue<E> {
    fn default() -> Self {
        Self::new()
    }
}

impl<E> EventQueue<E> {
    pub fn new() -> Self {
        EventQueue {
            heap: BinaryHeap::with_capacity(1024),
            next_seq: 0,
            now: 0,
            popped: 0,
        }
    }

    /// Current simulated time: the time of the last popped event.
    pub fn now(&self) -> Nanos {
        self.now
    }

    /// Events popped so far (the figure the benchmark divides by wall time).
    pub fn popped(&self) -> u64 {
        self.popped
    }

    pub fn len(&self) -> usize {
        self.heap.len()
    }

    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }

    /// Schedule `event` at `time`. A time in the past is clamped to now: the model
    /// never travels backwards.
    pub fn schedule(&mut self, time: Nanos, event: E) {
        let time = time.max(self.now);
        let seq = self.next_seq;
        self.next_seq += 1;
        self.heap.push(Entry {
            key: ((time as u128) << 64) | seq as u128,
            event,
        });
    }

    /// Pop the earliest event and advance the clock to it.
    pub fn pop(&mut self) -> Option<(Nanos, E)> {
        let e = self.heap.pop()?;
        let time = (e.key >> 64) as Nanos;
        self.now = time;
        self.popped += 1;
        Some((time, e.event))
    }

    /// Time of the earliest pending event.
    pub fn peek_time(&self) -> Option<Nanos> {
        self.heap.peek().map(|e| (e.key >> 64) as Nanos)
    }
}

/// The measured window `[start, end)` cut into `n` intervals of `interval_ns` (the
/// last one may be shorter), with a one-entry cache: consecutive look-ups almost always
/// fall in the same interval, so the division is paid once per interval change rather
/// than once per counted packet.
#[derive(Clone, Copy, Debug)]
pub struct Window {
    start: Nanos,
    end: Nanos,
    interval_ns: Nanos,
    n: usize,
    /// Cached `[lo, hi)` and its answer (`usize::MAX`: outside the window).
    lo: Nanos,
    hi: Nanos,
    idx: usize,
}

impl Window {
    pub fn new(start: Nanos, end: Nanos, interval_ns: Nanos, n: usize) -> Self {
        Window {
            start,
            end,
            interval_ns: interval_ns.max(1),
            n: n.max(1),
            lo: 1,
            hi: 0,
            idx: usize::MAX,
        }
    }

    /// Number of intervals.
    pub fn len(&self) -> usize {
        self.n
    }

    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// Interval holding `t`, without touching the cache.
    pub fn index(&self, t: Nanos) -> Option<usize> {
        if t < self.start || t >= self.end {
            return None;
        }
        Some((((t - self.start) / self.interval_ns) as usize).min(self.n - 1))
    }

    /// Interval holding `t`, through the cache.
    #[inline]
    pub fn lookup(&mut self, t: Nanos) -> Option<usize> {
        if t < self.lo || t >= self.hi {
            self.refill(t);
        }
        (self.idx != usize::MAX).then_some(self.idx)
    }

    /// The span `[lo, hi)` of equal answers holding `t`, and the answer.
    #[inline]
    pub fn span(&mut self, t: Nanos) -> (Nanos, Nanos, Option<usize>) {
        let i = self.lookup(t);
        (self.lo, self.hi, i)
    }

    #[cold]
    fn refill(&mut self, t: Nanos) {
        if t < self.start {
            (self.lo, self.hi, self.idx) = (0, self.start, usize::MAX);
        } else if t >= self.end {
            (self.lo, self.hi, self.idx) = (self.end, Nanos::MAX, usize::MAX);
        } else {
            let i = (((t - self.start) / self.interval_ns) as usize).min(self.n - 1);
            let lo = self.start + i as Nanos * self.interval_ns;
            let hi = if i + 1 == self.n {
                self.end
            } else {
                lo + self.interval_ns
            };
            (self.lo, self.hi, self.idx) = (lo, hi, i);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pops_by_time_then_sequence() {
        let mut q = EventQueue::new();
        q.schedule(10, "b");
        q.schedule(5, "a");
        q.schedule(10, "c");
        q.schedule(7, "x");
        let order: Vec<_> = std::iter::from_fn(|| q.pop()).collect();
        assert_eq!(order, vec![(5, "a"), (7, "x"), (10, "b"), (10, "c")]);
        assert_eq!(q.popped(), 4);
    }

    #[test]
    fn window_cache_agrees_with_division() {
        let mut w = Window::new(100, 1_050, 100, 10);
        for t in [
            0, 99, 100, 150, 199, 200, 1_000, 1_049, 1_050, 5_000, 120, 99, 1_049,
        ] {
            assert_eq!(w.lookup(t), w.index(t), "t = {t}");
        }
        assert_eq!(w.index(1_049), Some(9));
        assert_eq!(w.index(1_050), None);
    }

    #[test]
    fn past_times_are_clamped_to_now() {
        let mut q = EventQueue::new();
        q.schedule(100, 1);
        q.pop();
        q.schedule(50, 2);
        assert_eq!(q.pop(), Some((100, 2)));
    }
}
