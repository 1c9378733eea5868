//! The NIC: RX rings filled by traffic, TX rings drained at line rate, and IRQ lines
//! with hardware coalescing (ethtool rx-usecs/rx-frames, tx-usecs/tx-frames).

use std::collections::VecDeque;

use crate::event::Nanos;
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
    /// Drops by class index.
    pub drops: Vec<u64>,
    /// Arrival times of dropped packets are reported through this callback buffer,
    /// drained by the simulator for per-interval accounting.
    pub dropped_log: Vec<(Nanos, u16)>,
    /// Admissions (arrival time, class) for offered-load accounting, drained likewise.
    pub admitted_log: Vec<(Nanos, u16)>,
}

impl RxRing {
    pub fn new(name: String, queue: usize, size: usize, budget: u32, feed: Feed) -> Self {
        RxRing {
            name,
            queue,
            size,
            budget,
            feed,
            future: VecDeque::new(),
            ring: VecDeque::with_capacity(size),
            drops: Vec::new(),
            dropped_log: Vec::new(),
            admitted_log: Vec::new(),
        }
    }

    fn next_arrival(&mut self) -> Option<Packet> {
        if let Some(p) = self.future.pop_front() {
            return Some(p);
        }
        self.feed.take()
    }

    fn peek_arrival(&self) -> Option<Nanos> {
        match self.future.front() {
            Some(p) => Some(p.arrival),
            None => self.feed.peek(),
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
    pub fn admit_until(&mut self, t: Nanos) {
        while let Some(a) = self.peek_arrival() {
            if a > t {
                break;
            }
            let Some(p) = self.next_arrival() else { break };
            if self.ring.len() >= self.size {
                self.dropped_log.push((p.arrival, p.class));
            } else {
                self.admitted_log.push((p.arrival, p.class));
                self.ring.push_back(p);
            }
        }
    }

    /// Take the next descriptor that is visible at time `t`.
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
        r.admit_until(100_000);
        assert_eq!(r.ring.len(), 16);
        assert!(r.dropped_log.len() >= 83 && r.dropped_log.len() <= 84);
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
