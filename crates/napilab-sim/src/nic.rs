//! The NIC: RX rings filled by traffic, TX rings drained at line rate, and IRQ lines
//! with hardware coalescing (ethtool rx-usecs/rx-frames, tx-usecs/tx-frames).

use std::collections::VecDeque;

use crate::event::{Nanos, Window};
use crate::traffic::{Feed, Packet};

/// One RX descriptor ring. Packets enter it lazily: `admit_until(t)` moves every
/// arrival up to `t` in, dropping those that find the ring full (the NIC's
/// rx_missed/rx_fifo drop). The driver consumes from the front.
#[derive(Debug)]
pub struct RxRing {
    pub name: String,
    pub queue: usize,
    pub size: usize,
    /// Packets the poll may take from this ring per call.
    pub budget: u32,
    feed: Feed,
    /// Generated arrivals not yet admitted, in time order (for look-ahead).
    future: VecDeque<Packet>,
    ring: VecDeque<Packet>,
    /// Offered-load accounting, counted where the packet arrives (once per packet,
    /// so it is kept here rather than logged for the simulator): per measured
    /// interval (by arrival time) and class, `[interval * classes + class]`, the
    /// packets admitted and the packets dropped because the ring was full.
    window: Window,
    classes: usize,
    pub admitted: Vec<u64>,
    pub dropped: Vec<u64>,
}

impl RxRing {
    /// A ring that counts nothing until [`RxRing::count_in`] gives it a window.
    pub fn new(name: String, queue: usize, size: usize, budget: u32, feed: Feed) -> Self {
        RxRing {
            name,
            queue,
            size,
            budget,
            feed,
            future: VecDeque::new(),
            ring: VecDeque::with_capacity(size),
            window: Window::new(0, 0, 1, 1),
            classes: 0,
            admitted: Vec::new(),
            dropped: Vec::new(),
        }
    }

    /// Count admissions and drops per interval of `window` and per class (`classes`).
    pub fn count_in(&mut self, window: Window, classes: usize) {
        self.window = window;
        self.classes = classes;
        self.admitted = vec![0; window.len() * classes];
        self.dropped = vec![0; window.len() * classes];
    }

    #[inline(always)]
    fn next_arrival(&mut self) -> Option<Packet> {
        if let Some(p) = self.future.pop_front() {
            return Some(p);
        }
        self.feed.take()
    }

    #[inline]
    fn next_time(&self) -> Nanos {
        match self.future.front() {
            Some(p) => p.arrival,
            None => self.feed.next_time(),
        }
    }

    /// A closed-loop arrival: keeps the look-ahead in time order.
    pub fn inject(&mut self, p: Packet) {
        match self.future.back() {
            Some(b) if p.arrival < b.arrival => {
                let at = self.future.partition_point(|x| x.arrival <= p.arrival);
                self.future.insert(at, p);
            }
            _ => self.feed.inject(p),
        }
    }

    /// Admit every arrival with time <= t.
    #[inline]
    pub fn admit_until(&mut self, t: Nanos) {
        if self.future.is_empty() {
            if let Some(src) = self.feed.single_open() {
                // The common case, one open-loop stream with nothing injected or
                // looked ahead: take straight from its block of arrival times.
                loop {
                    let a = src.peek();
                    if a > t {
                        break;
                    }
                    let p = src.take();
                    let full = self.ring.len() >= self.size;
                    if let Some(i) = self.window.lookup(a) {
                        let k = i * self.classes + p.class as usize;
                        let v = if full {
                            &mut self.dropped
                        } else {
                            &mut self.admitted
                        };
                        if let Some(n) = v.get_mut(k) {
                            *n += 1;
                        }
                    }
                    if !full {
                        self.ring.push_back(p);
                    }
                }
                let a = src.peek();
                self.feed.set_open_next(a);
                return;
            }
        }
        while self.next_time() <= t {
            let Some(p) = self.next_arrival() else { break };
            let full = self.ring.len() >= self.size;
            if let Some(i) = self.window.lookup(p.arrival) {
                let k = i * self.classes + p.class as usize;
                if let Some(n) = if full {
                    self.dropped.get_mut(k)
                } else {
                    self.admitted.get_mut(k)
                } {
                    *n += 1;
                }
            }
            if !full {
                self.ring.push_back(p);
            }
        }
    }

    /// Take the next descriptor that is visible at time `t`.
    #[inline]
    pub fn pop_at(&mut self, t: Nanos) -> Option<Packet> {
        self.admit_until(t);
        self.ring.pop_front()
    }

    /// Whether a packet is visible at `t`.
    pub fn has_at(&mut self, t: Nanos) -> bool {
        self.admit_until(t);
        !self.ring.is_empty()
    }

    /// Time of the `n`-th (1-based) packet not yet consumed, counting the ones in the
    /// ring and the ones still to arrive. Drops are ignored here: only used to time
    /// coalesced IRQs.
    pub fn nth_pending(&mut self, n: usize) -> Option<Nanos> {
        if n == 0 {
            return None;
        }
        if n <= self.ring.len() {
            return Some(self.ring[n - 1].arrival);
        }
        let k = n - self.ring.len();
        while self.future.len() < k {
            let p = self.feed.take()?;
            self.future.push_back(p);
        }
        Some(self.future[k - 1].arrival)
    }
}

/// A TX queue: descriptors in flight (their wire completion times) and the qdisc in
/// front of it.
#[derive(Debug)]
pub struct TxQueue {
    pub size: usize,
    /// Completion time of each descriptor not yet reclaimed, in order.
    pub inflight: VecDeque<Nanos>,
    pub qdisc: VecDeque<Packet>,
}

impl TxQueue {
    pub fn new(size: usize) -> Self {
        TxQueue {
            size,
            inflight: VecDeque::with_capacity(size),
            qdisc: VecDeque::new(),
        }
    }

    pub fn has_room(&self) -> bool {
        self.inflight.len() < self.size
    }

    /// Reclaim up to `limit` descriptors completed by `t`; returns how many, and
    /// whether the queue was cleaned completely (fewer than `limit` were found).
    pub fn reclaim(&mut self, t: Nanos, limit: u32) -> (u32, bool) {
        let mut n = 0;
        while n < limit {
            match self.inflight.front() {
                Some(&c) if c <= t => {
                    self.inflight.pop_front();
                    n += 1;
                }
                _ => return (n, true),
            }
        }
        let more = matches!(self.inflight.front(), Some(&c) if c <= t);
        (n, !more)
    }
}

/// What raises an IRQ line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LineKind {
    /// RX queue `queue` of the ingress device.
    Rx { queue: usize },
    /// TX completions of egress TX queue `txq`.
    TxCompletion { txq: usize },
}

/// One MSI-X vector: which CPU takes it, which NAPI instance it schedules, and whether
/// it is unmasked (`enabled`) and already has an interrupt on its way (`armed`).
#[derive(Debug)]
pub struct IrqLine {
    pub number: u32,
    pub name: String,
    pub kind: LineKind,
    pub cpu: usize,
    pub napi: usize,
    pub enabled: bool,
    pub armed: bool,
    /// When the armed interrupt fires, and its generation: re-arming earlier (a frame
    /// count reached before the timer) bumps the generation so the old event is stale.
    pub fire_at: Nanos,
    pub gen: u64,
    /// A combined TxRx vector also fires for completions of this TX queue.
    pub txq: Option<usize>,
    /// Coalescing: fire `usecs` after the first pending event or at the `frames`-th.
    pub usecs: u32,
    pub frames: u32,
}

impl IrqLine {
    /// When an unmasked line with pending work raises its interrupt: the hardware
    /// coalescing timer starts at the first pending event (`first`), and `nth` is the
    /// time of the `frames`-th one if frame counting is on.
    pub fn fire_time(&self, now: Nanos, first: Nanos, nth: Option<Nanos>) -> Nanos {
        let mut t = first + self.usecs as u64 * 1000;
        if let Some(n) = nth {
            t = t.min(n);
        }
        t.max(now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Pattern;
    use crate::rng::Rng;
    use crate::traffic::Source;

    fn ring(size: usize, rate: f64) -> RxRing {
        let mut f = Feed::default();
        f.push(Source::new(Rng::new(3, 0), Pattern::Constant, rate, 0, 64));
        RxRing::new("rx".into(), 0, size, 64, f)
    }

    #[test]
    fn ring_drops_when_full() {
        // 1 Mpps for 100 us with nobody polling: 100 arrivals, ring of 16.
        let mut r = ring(16, 1e6);
        r.count_in(Window::new(0, 1_000_000, 1_000_000, 1), 1);
        r.admit_until(100_000);
        assert_eq!(r.ring.len(), 16);
        assert_eq!(r.admitted, vec![16]);
        assert!(r.dropped[0] >= 83 && r.dropped[0] <= 84, "{:?}", r.dropped);
    }

    #[test]
    fn lookahead_does_not_lose_packets() {
        let mut r = ring(1024, 1e6);
        let t5 = r.nth_pending(5).expect("arrives");
        let mut seen = Vec::new();
        while let Some(p) = r.pop_at(t5) {
            seen.push(p.arrival);
        }
        assert_eq!(seen.len(), 5);
        assert_eq!(*seen.last().expect("five"), t5);
    }

    #[test]
    fn tx_reclaim_respects_time_and_limit() {
        let mut q = TxQueue::new(8);
        for c in [10, 20, 30, 40] {
            q.inflight.push_back(c);
        }
        assert_eq!(q.reclaim(25, 10), (2, true));
        assert_eq!(q.reclaim(100, 1), (1, false));
        assert_eq!(q.reclaim(100, 1), (1, true));
    }
}
