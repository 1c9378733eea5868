//! The NIC: RX rings filled by traffic, TX rings drained at line rate, and IRQ lines
//! with hardware interrupt moderation: generic coalescing (ethtool rx-usecs/rx-frames,
//! tx-usecs/tx-frames) and ixgbe's interrupt throttling with its adaptive ITR
//! ([`IxgbeItr`]).

use std::collections::VecDeque;

use crate::event::{Nanos, Window};
use crate::traffic::{Feed, Packet};

/// A packet's fields other than its arrival time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Meta {
    class: u16,
    size: u32,
    flow: u32,
}

impl Meta {
    fn of(p: &Packet) -> Self {
        Meta {
            class: p.class,
            size: p.size,
            flow: p.flow,
        }
    }
}

/// The packets in an RX ring, oldest first: a circular buffer of a power-of-two
/// capacity above the ring's size, so there is always a spare slot at the tail. The
/// batched admission (`RxRing::pop_batch`) writes every arrival there and keeps it by
/// advancing the length by 0 or 1, instead of branching on "ring full" per arrival;
/// it grows the buffer to hold a batch's admissions before its pops.
///
/// Arrival times and the other fields are kept apart, and while every packet in the
/// ring has the same other fields (one source, the common case) they are held once
/// (`uniform`), so admitting a packet writes 8 bytes rather than a 24-byte packet.
#[derive(Debug)]
struct Fifo {
    times: Box<[Nanos]>,
    /// Per slot, the other fields; only read while `uniform` is `None`.
    meta: Vec<Meta>,
    uniform: Option<Meta>,
    mask: usize,
    head: usize,
    len: usize,
}

impl Fifo {
    fn new(size: usize) -> Self {
        let cap = (size + 1).next_power_of_two();
        Fifo {
            times: vec![0; cap].into_boxed_slice(),
            meta: Vec::new(),
            uniform: None,
            mask: cap - 1,
            head: 0,
            len: 0,
        }
    }

    #[inline(always)]
    fn len(&self) -> usize {
        self.len
    }

    #[inline(always)]
    fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether packets with fields `m` can be added by writing only their time (as
    /// `RxRing::pop_batch` does); makes it so if the ring is empty.
    #[inline]
    fn uniform_as(&mut self, m: Meta) -> bool {
        if self.len == 0 {
            self.uniform = Some(m);
        }
        self.uniform == Some(m)
    }

    #[inline]
    fn push_back(&mut self, p: Packet) {
        let i = (self.head + self.len) & self.mask;
        self.times[i] = p.arrival;
        let m = Meta::of(&p);
        if self.uniform != Some(m) {
            self.set_meta(i, m);
        }
        self.len += 1;
    }

    /// Record fields `m` for slot `i`, the ring holding other fields than `m`: the
    /// per-slot fields are filled in from the uniform ones first, if they were
    /// uniform.
    #[cold]
    fn set_meta(&mut self, i: usize, m: Meta) {
        if self.len == 0 {
            self.uniform = Some(m);
            return;
        }
        if let Some(u) = self.uniform.take() {
            self.meta.clear();
            self.meta.resize(self.times.len(), u);
        }
        self.meta[i] = m;
    }

    #[inline(always)]
    fn packet(&self, i: usize) -> Packet {
        let m = match self.uniform {
            Some(m) => m,
            None => self.meta[i],
        };
        Packet {
            arrival: self.times[i],
            class: m.class,
            size: m.size,
            flow: m.flow,
        }
    }

    #[inline(always)]
    fn pop_front(&mut self) -> Option<Packet> {
        if self.len == 0 {
            return None;
        }
        let p = self.packet(self.head);
        self.head = (self.head + 1) & self.mask;
        self.len -= 1;
        Some(p)
    }

    /// Make room for `total` packets without wrapping onto the oldest one (keeping
    /// their order and fields).
    #[cold]
    fn reserve_total(&mut self, total: usize) {
        let cap = total.next_power_of_two();
        if cap <= self.times.len() {
            return;
        }
        let mut f = Fifo::new(cap - 1);
        f.uniform = self.uniform;
        while let Some(p) = self.pop_front() {
            f.push_back(p);
        }
        *self = f;
    }

    /// The `i`-th packet (0: the oldest), `i < len`.
    fn get(&self, i: usize) -> Packet {
        self.packet((self.head + i) & self.mask)
    }
}

/// What [`RxRing::pop_batch`] popped: how many packets, and their class and size (the
/// same for all: they come from one source). Their arrival times are in the caller's
/// buffer.
#[derive(Clone, Copy, Debug)]
pub struct Batch {
    pub n: u32,
    pub class: u16,
    pub size: u32,
}

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
    ring: Fifo,
    /// Offered-load accounting, counted where the packet arrives (once per packet,
    /// so it is kept here rather than logged for the simulator): per measured
    /// interval (by arrival time) and class, `[interval * classes + class]`, the
    /// packets admitted and the packets dropped because the ring was full.
    window: Window,
    classes: usize,
    pub admitted: Vec<u64>,
    pub dropped: Vec<u64>,
    /// Packets and bytes the driver has taken from the ring since the start: what
    /// the driver's per-vector counters (ixgbe's `q_vector->rx.total_packets` and
    /// `total_bytes`) sum, read by the adaptive ITR.
    pub taken_packets: u64,
    pub taken_bytes: u64,
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
            ring: Fifo::new(size),
            window: Window::new(0, 0, 1, 1),
            classes: 0,
            admitted: Vec::new(),
            dropped: Vec::new(),
            taken_packets: 0,
            taken_bytes: 0,
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

    /// The driver's pops at `t0`, `t0 + step`, `t0 + 2 step`, ... (at most `n`), each
    /// after admitting the arrivals up to its time, exactly as `pop_at` at each of
    /// those times would, the batch ending at the first pop that finds the ring empty.
    /// The popped packets' arrival times are appended to `out`.
    ///
    /// Since the ring is FIFO and the pop times are known in advance, the occupancy an
    /// arrival at `a` finds is the initial occupancy, plus the arrivals admitted before
    /// it, minus the pops before it, and the pops before `a` are a division (those at
    /// times `< a`: an arrival at a pop's time is admitted before that pop). So the
    /// batch is one pass over the arrivals with no branch on the interleaving of
    /// arrivals and pops (a coin toss per packet, mispredicted about half the time).
    /// A pop that finds the ring empty shows as an occupancy below zero at the next
    /// arrival (or after the last one).
    ///
    /// `None`, with nothing done, unless the ring is fed by one open-loop source with
    /// nothing looked ahead or injected, and the arrivals it would admit fall in one
    /// counting interval: the caller then pops one at a time.
    pub fn pop_batch(
        &mut self,
        t0: Nanos,
        step: Nanos,
        n: u32,
        out: &mut Vec<Nanos>,
    ) -> Option<Batch> {
        // The division below needs 2 <= step and n * step < 2^32 (a batch of 4 s).
        if n == 0 || step < 2 || n as u64 * step >= 1 << 32 || !self.future.is_empty() {
            return None;
        }
        // Time of the last pop; every time below stays far from overflow.
        let last = t0.checked_add((n as u64 - 1).checked_mul(step)?)?;
        if last >= Nanos::MAX / 4 {
            return None;
        }
        let classes = self.classes;
        let window = &mut self.window;
        let ring = &mut self.ring;
        let src = self.feed.single_open()?;
        let (class, size) = (src.class(), src.size());
        let meta = Meta {
            class,
            size,
            flow: 0,
        };
        if !ring.uniform_as(meta) {
            return None;
        }
        let first = src.peek();
        let idx = if first <= last {
            let (_, hi, idx) = window.span(first);
            if last >= hi {
                return None;
            }
            idx
        } else {
            None
        };
        // The pops are taken after the pass, so the ring buffer holds, for a moment,
        // every packet admitted during the batch on top of the ring's content: at
        // most the ring's size plus the pops plus the spare slot.
        let total = self.size + n as usize + 1;
        if ring.times.len() < total {
            ring.reserve_total(total);
        }
        // floor(y / step) = high half of y * magic for y, step < 2^32 (Lemire, Kaser
        // and Kurz 2019, "Faster remainder by direct computation"): one multiply.
        let magic = u64::MAX / step + 1;
        let occ0 = ring.len() as i64;
        let cap = self.size as i64;
        // The loop's state in locals (the compiler cannot keep the ring's fields in
        // registers across the stores into its buffer): `len` is the start
        // occupancy plus the arrivals kept so far, so the occupancy an arrival finds
        // is `len` minus the pops before it.
        let (head, mask) = (ring.head, ring.mask);
        let buf = &mut ring.times[..];
        let mut len = occ0;
        let mut consumed = 0u64;
        let mut pops = n as i64;
        let mut emptied = false;
        // Ends as `admit_until` does: each pass consumes one arrival, and the
        // stream's times grow without bound (a positive mean gap), so finitely many
        // are at most `last`.
        loop {
            // One block of the source's arrival times at a time, read in place.
            let (times, start) = src.block();
            let mut j = start;
            while j < times.len() {
                let a = times[j];
                if a > last {
                    break;
                }
                // Pops before `a`: ceil((a - t0) / step) (y < n * step < 2^32).
                let y = a.saturating_sub(t0) + (step - 1);
                let q = ((y as u128 * magic as u128) >> 64) as i64;
                let occ = len - q;
                if occ < 0 {
                    // The pop that left the occupancy at -1 found the ring empty.
                    pops = q + occ;
                    emptied = true;
                    break;
                }
                // Written into the spare slot whether kept or not (see Fifo).
                buf[(head + len as usize) & mask] = a;
                len += (occ < cap) as i64;
                j += 1;
            }
            consumed += (j - start) as u64;
            let more = j == times.len();
            src.set_pos(j);
            if !more {
                break;
            }
        }
        if !emptied && len < n as i64 {
            // The pops after the last arrival emptied the ring.
            pops = len;
        }
        let admitted = (len - occ0) as u64;
        let dropped = consumed - admitted;
        let next = src.peek();
        self.feed.set_open_next(next);
        if let Some(i) = idx {
            let k = i * classes + class as usize;
            if let Some(v) = self.admitted.get_mut(k) {
                *v += admitted;
            }
            if let Some(v) = self.dropped.get_mut(k) {
                *v += dropped;
            }
        }
        // The popped packets are the first `pops` of the buffer: at most two runs.
        let pops = pops.clamp(0, len) as usize;
        let ring = &mut self.ring;
        let first = (ring.times.len() - head).min(pops);
        out.extend_from_slice(&ring.times[head..head + first]);
        out.extend_from_slice(&ring.times[..pops - first]);
        ring.head = (head + pops) & mask;
        ring.len = len as usize - pops;
        self.taken_packets += pops as u64;
        self.taken_bytes += pops as u64 * size as u64;
        Some(Batch {
            n: pops as u32,
            class,
            size,
        })
    }

    /// Take the next descriptor that is visible at time `t`.
    #[inline]
    pub fn pop_at(&mut self, t: Nanos) -> Option<Packet> {
        self.admit_until(t);
        let p = self.ring.pop_front()?;
        self.taken_packets += 1;
        self.taken_bytes += p.size as u64;
        Some(p)
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
            return Some(self.ring.get(n - 1).arrival);
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
    /// Descriptors reclaimed since the start (ixgbe's `q_vector->tx.total_packets`
    /// sums them for the adaptive ITR).
    pub reclaimed: u64,
}

impl TxQueue {
    pub fn new(size: usize) -> Self {
        TxQueue {
            size,
            inflight: VecDeque::with_capacity(size),
            qdisc: VecDeque::new(),
            reclaimed: 0,
        }
    }

    pub fn has_room(&self) -> bool {
        self.inflight.len() < self.size
    }

    /// Reclaim up to `limit` descriptors completed by `t`; returns how many, and
    /// whether the queue was cleaned completely (fewer than `limit` were found).
    pub fn reclaim(&mut self, t: Nanos, limit: u32) -> (u32, bool) {
        // Completion times only grow: every descriptor completes after the one the
        // shared wire sent before it (`Sim::send_wire`: done = max(ready, wire
        // free) + serialization). So the completed ones are a prefix, found by
        // binary search, and dropped at once (popping one by one stored the deque's
        // head and length back to memory per descriptor).
        debug_assert!(self.inflight.iter().is_sorted());
        let (a, b) = self.inflight.as_slices();
        let mut n = a.partition_point(|&c| c <= t);
        if n == a.len() {
            n += b.partition_point(|&c| c <= t);
        }
        let n = n.min(limit as usize);
        self.inflight.drain(..n);
        self.reclaimed += n as u64;
        let more = n == limit as usize && matches!(self.inflight.front(), Some(&c) if c <= t);
        (n as u32, !more)
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
    /// Intel interrupt throttling instead of the coalescing timer (`usecs` is then
    /// 0): the vector's ITR state.
    pub itr: Option<IxgbeItr>,
    /// When the NIC last asserted this vector (the ITR interval counts from there).
    pub last_assert: Option<Nanos>,
    /// The RX packets and bytes the vector's rings had given the driver when the
    /// adaptive ITR last read them (its counters are cleared on each update).
    pub itr_seen: (u64, u64),
    /// A threaded handler: the line's IRQ thread (index into the simulator's threads).
    pub thread: Option<usize>,
}

impl IrqLine {
    /// When an unmasked line with pending work raises its interrupt: the hardware
    /// coalescing timer starts at the first pending event (`first`), and `nth` is the
    /// time of the `frames`-th one if frame counting is on. A throttled (ITR) vector
    /// instead fires at the first pending event, but not before its interval since
    /// the last assertion has passed.
    pub fn fire_time(&self, now: Nanos, first: Nanos, nth: Option<Nanos>) -> Nanos {
        if let Some(itr) = &self.itr {
            let earliest = self.last_assert.map_or(0, |a| a + itr.interval_ns());
            return first.max(earliest).max(now);
        }
        let mut t = first + self.usecs as u64 * 1000;
        if let Some(n) = nth {
            t = t.min(n);
        }
        t.max(now)
    }
}

/// Where the configuration's validation can use it without importing this module.
pub use crate::config::IXGBE_MAX_EITR;
/// The driver's ITR values for its three latency ranges (ixgbe.h, Linux 3.16):
/// `IXGBE_100K_ITR` 40 (10 us), `IXGBE_20K_ITR` 200 (50 us), `IXGBE_8K_ITR` 500
/// (125 us). Bulk became 12K (336) only in Linux 4.3 (commit 8ac34f10a5ea, "ixgbe:
/// Limit lowest interrupt rate for adaptive interrupt moderation to 12K").
pub const IXGBE_100K_ITR: u32 = 40;
pub const IXGBE_20K_ITR: u32 = 200;
pub const IXGBE_8K_ITR: u32 = 500;

/// `enum latency_range` of ixgbe_main.c: the adaptive ITR's three ranges.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum LatencyRange {
    Lowest,
    Low,
    Bulk,
}

/// One vector's interrupt throttling as ixgbe programs it, from the driver of Linux
/// 3.16 (drivers/net/ethernet/intel/ixgbe/ixgbe_main.c, ixgbe_lib.c, ixgbe_ethtool.c):
///
/// - `ixgbe_set_coalesce`: rx-usecs 0 disables throttling (ITR 0), 1 selects the
///   dynamic mode, any other value is a fixed interval (`usecs << 2`). The driver
///   default (`ixgbe_sw_init`: `rx_itr_setting = 1`) is dynamic, and
///   `ixgbe_alloc_q_vector` starts a dynamic RX vector at `IXGBE_20K_ITR`; the ring
///   container's range starts at 0, `lowest_latency` (the vector is zeroed).
/// - `ixgbe_poll`: only when a poll completes (after `napi_complete`, before the
///   vector is unmasked) does it call `ixgbe_set_itr`, in dynamic mode only.
/// - `ixgbe_update_itr`: with the bytes the vector received since the last update,
///   `bytes_perint = bytes / (itr >> 2)`, i.e. bytes per microsecond of the current
///   interval (not of elapsed time); lowest -> low above 10, low -> bulk above 20,
///   low -> lowest at 10 or less, bulk -> low at 20 or less. Nothing changes (and the
///   counters are kept) when no packet was received.
/// - `ixgbe_set_itr`: the range's ITR (100K, 20K, 8K), smoothed as
///   `new = 10 * new * itr / (9 * new + itr)` when it differs, and written to EITR.
/// - `ixgbe_write_eitr`: `itr & IXGBE_MAX_EITR`, with CNT_WDIS so the write does not
///   restart the running interval.
///
/// Only the RX ring container is modelled: the vector's TX container (its own
/// device's transmit completions) stays at `lowest_latency`, which is what it is on a
/// router whose traffic leaves by another port, and `ixgbe_set_itr` takes the larger
/// range of the two.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IxgbeItr {
    /// `q_vector->itr`: microseconds times 4.
    pub itr: u32,
    pub adaptive: bool,
    /// `q_vector->rx.itr`.
    pub range: LatencyRange,
}

impl IxgbeItr {
    /// The vector as `ixgbe_set_coalesce` and `ixgbe_alloc_q_vector` set it up for
    /// ethtool rx-usecs `rx_usecs` (`adaptive` also selects the dynamic mode).
    pub fn new(rx_usecs: u32, adaptive: bool) -> Self {
        let adaptive = adaptive || rx_usecs == 1;
        let itr = if adaptive {
            IXGBE_20K_ITR
        } else {
            rx_usecs.saturating_mul(4)
        };
        IxgbeItr {
            itr,
            adaptive,
            range: LatencyRange::Lowest,
        }
    }

    /// The minimum interval between two assertions that EITR enforces.
    pub fn interval_ns(&self) -> Nanos {
        // Bits 3..11 in 2-us units: (itr & 0xFF8) >> 3 * 2 us = (itr & 0xFF8) / 4 us.
        (self.itr & IXGBE_MAX_EITR) as Nanos * 250
    }

    /// `ixgbe_set_itr` after a completed poll, given the packets and bytes received
    /// since the last update (`ixgbe_update_itr` on the RX container). Returns whether
    /// it consumed them (the driver clears its counters only then).
    pub fn on_complete(&mut self, packets: u64, bytes: u64) -> bool {
        if !self.adaptive {
            return false;
        }
        let mut used = false;
        let timepassed_us = (self.itr >> 2) as u64;
        if packets > 0 && timepassed_us > 0 {
            let bytes_perint = bytes / timepassed_us;
            self.range = match self.range {
                LatencyRange::Lowest if bytes_perint > 10 => LatencyRange::Low,
                LatencyRange::Low if bytes_perint > 20 => LatencyRange::Bulk,
                LatencyRange::Low if bytes_perint <= 10 => LatencyRange::Lowest,
                LatencyRange::Bulk if bytes_perint <= 20 => LatencyRange::Low,
                r => r,
            };
            used = true;
        }
        // max(rx.itr, tx.itr) with the TX container at lowest_latency.
        let target = match self.range {
            LatencyRange::Lowest => IXGBE_100K_ITR,
            LatencyRange::Low => IXGBE_20K_ITR,
            LatencyRange::Bulk => IXGBE_8K_ITR,
        };
        if target != self.itr {
            // Exponential smoothing in the driver's integer arithmetic.
            let (n, o) = (target as u64, self.itr as u64);
            self.itr = ((10 * n * o) / (9 * n + o)) as u32;
        }
        used
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

    /// The batched pops agree with popping one at a time at the same times: the same
    /// packets, admissions, drops and ring contents, over empty, busy and full rings.
    #[test]
    fn pop_batch_matches_pop_at() {
        let mut plan = Rng::new(5, 9);
        let (mut drops, mut short) = (0, 0);
        for (size, rate) in [(4, 3e6), (16, 1e6), (16, 2.5e6), (512, 2e6), (8, 2e5)] {
            for pattern in [Pattern::Poisson, Pattern::Constant] {
                let mk = || {
                    let mut f = Feed::default();
                    f.push(Source::new(Rng::new(3, 1), pattern, rate, 0, 128));
                    let mut r = RxRing::new("rx".into(), 0, size, 64, f);
                    r.count_in(Window::new(0, 50_000_000, 50_000_000, 1), 1);
                    r
                };
                let (mut a, mut b) = (mk(), mk());
                let mut t = 0;
                let mut out = Vec::new();
                for _ in 0..2_000 {
                    t += plan.next_u64() % 20_000;
                    let step = 2 + plan.next_u64() % 900;
                    let n = 1 + (plan.next_u64() % 64) as u32;
                    out.clear();
                    let got = a.pop_batch(t, step, n, &mut out).expect("one source");
                    let mut want = Vec::new();
                    let mut tk = t;
                    while want.len() < n as usize {
                        let Some(p) = b.pop_at(tk) else { break };
                        want.push(p.arrival);
                        tk += step;
                    }
                    assert_eq!(out, want, "size {size} rate {rate} t {t} step {step}");
                    assert_eq!(got.n as usize, want.len());
                    short += (want.len() < n as usize) as u32;
                    assert_eq!(a.ring.len(), b.ring.len());
                    assert_eq!((&a.admitted, &a.dropped), (&b.admitted, &b.dropped));
                    t = tk;
                }
                assert!(a.admitted[0] > 0);
                drops += a.dropped[0];
            }
        }
        // Both ways a batch ends early were exercised: a full ring and an empty one.
        assert!(drops > 0 && short > 0, "{drops} {short}");
    }

    #[test]
    fn fifo_keeps_mixed_fields_in_order() {
        let mut f = Fifo::new(4);
        let pk = |arrival, class, flow| Packet {
            arrival,
            class,
            size: 64 + class as u32,
            flow,
        };
        let mut want = std::collections::VecDeque::new();
        let mut r = Rng::new(1, 2);
        for t in 0..2_000u64 {
            if want.len() < 4 && r.next_u64() % 3 != 0 {
                // Mostly one kind of packet, sometimes another, so the ring goes from
                // uniform to mixed and back.
                let p = pk(
                    t,
                    (r.next_u64() % 7 == 0) as u16,
                    (r.next_u64() % 11 == 0) as u32,
                );
                f.push_back(p);
                want.push_back(p);
            } else {
                assert_eq!(f.pop_front(), want.pop_front());
            }
            if t == 1_000 {
                f.reserve_total(40);
            }
            assert_eq!(f.len(), want.len());
            for (i, w) in want.iter().enumerate() {
                assert_eq!(f.get(i), *w);
            }
        }
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

    /// ethtool rx-usecs as ixgbe_set_coalesce maps it: 0 off, 1 dynamic from 20K, a
    /// fixed interval otherwise, in EITR's 2-us steps.
    #[test]
    fn ixgbe_itr_setup_follows_set_coalesce() {
        let off = IxgbeItr::new(0, false);
        assert_eq!((off.itr, off.adaptive, off.interval_ns()), (0, false, 0));
        let dynamic = IxgbeItr::new(1, false);
        assert!(dynamic.adaptive);
        assert_eq!(
            (dynamic.itr, dynamic.interval_ns()),
            (IXGBE_20K_ITR, 50_000)
        );
        assert_eq!(IxgbeItr::new(0, true), dynamic);
        let fixed = IxgbeItr::new(100, false);
        assert_eq!((fixed.adaptive, fixed.interval_ns()), (false, 100_000));
        // 3 us is ITR 12, whose interval field (bits 3..11) holds 2 us.
        assert_eq!(IxgbeItr::new(3, false).interval_ns(), 2_000);
        // A fixed setting never moves.
        let mut f = fixed;
        assert!(!f.on_complete(64, 64 * 1500));
        assert_eq!(f, fixed);
    }

    /// ixgbe_update_itr / ixgbe_set_itr: bytes per microsecond of the current interval
    /// move the range one step per update, and the ITR follows with the driver's
    /// smoothing.
    #[test]
    fn adaptive_itr_moves_with_rate_and_size() {
        // A busy vector: 64 packets of 128 bytes per interrupt.
        let mut v = IxgbeItr::new(1, false);
        assert!(v.on_complete(64, 64 * 128));
        assert_eq!(v.range, LatencyRange::Low); // 8192 B / 50 us = 163 > 10
                                                // The first smoothing step towards 20K is none (already there)...
        assert_eq!(v.itr, IXGBE_20K_ITR);
        v.on_complete(64, 64 * 128);
        assert_eq!(v.range, LatencyRange::Bulk);
        // ... and towards 8K it is 10 * 500 * 200 / (9 * 500 + 200) = 212.
        assert_eq!(v.itr, 212);
        for _ in 0..200 {
            v.on_complete(64, 64 * 128);
        }
        assert_eq!(v.range, LatencyRange::Bulk);
        assert!(v.itr >= 490 && v.itr <= IXGBE_8K_ITR, "{}", v.itr);
        // Load falls to one small packet per interrupt: back down, step by step.
        v.on_complete(1, 64);
        assert_eq!(v.range, LatencyRange::Low); // 64 B / ~122 us = 0 <= 20
        v.on_complete(1, 64);
        assert_eq!(v.range, LatencyRange::Lowest);
        for _ in 0..200 {
            v.on_complete(1, 64);
        }
        assert_eq!(v.range, LatencyRange::Lowest);
        assert!(v.itr <= IXGBE_100K_ITR + 1, "{}", v.itr);
        // One 128-byte packet per 10-us interval is 12 bytes/us, above the lowest
        // range's 10: the driver leaves it again.
        v.on_complete(1, 128);
        assert_eq!(v.range, LatencyRange::Low);
        // No packet since the last update: the range stays, the counters are kept.
        let before = v.range;
        assert!(!v.on_complete(0, 0));
        assert_eq!(v.range, before);

        // Size, not only rate: one packet per interrupt stays in the lowest range
        // when small, and climbs out of it (low, bulk and back) when MTU-sized.
        let mut small = IxgbeItr::new(1, false);
        let mut large = IxgbeItr::new(1, false);
        for _ in 0..50 {
            small.on_complete(1, 64);
            large.on_complete(1, 1500);
        }
        assert_eq!(small.range, LatencyRange::Lowest);
        assert!(large.range >= LatencyRange::Low, "{:?}", large.range);
        assert!(large.interval_ns() > 4 * small.interval_ns());
    }

    /// A throttled vector fires at its first pending frame, but not sooner than one
    /// interval after its last assertion.
    #[test]
    fn throttled_line_waits_for_its_interval() {
        let mut l = IrqLine {
            number: 100,
            name: "eth0-TxRx-0".into(),
            kind: LineKind::Rx { queue: 0 },
            cpu: 0,
            napi: 0,
            enabled: true,
            armed: false,
            fire_at: 0,
            gen: 0,
            txq: None,
            usecs: 0,
            frames: 0,
            itr: Some(IxgbeItr::new(100, false)),
            last_assert: None,
            itr_seen: (0, 0),
            thread: None,
        };
        assert_eq!(l.fire_time(5_000, 3_000, None), 5_000);
        l.last_assert = Some(10_000);
        assert_eq!(l.fire_time(20_000, 15_000, None), 110_000);
        assert_eq!(l.fire_time(20_000, 300_000, None), 300_000);
        l.itr = Some(IxgbeItr::new(0, false));
        assert_eq!(l.fire_time(20_000, 15_000, None), 20_000);
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
