//! The load generator: a thread per client class that sends the class's requests
//! into its RX ring and reads the application's replies, on its own CPU beside
//! whatever else runs there (in the server topology's softirq modes, the requests'
//! NAPI polls). Modelled on the lab's generator (crates/napilab-lab request
//! `loadgen`): open loop at Poisson intended times, due sends before reads, latency
//! from the intended time to the end of the reply's read, and the same three signs
//! that the client, not the server, was the limit.

use super::*;
use crate::config::ClientSide;

/// A send later than this after its intended time counts as late (the lab
/// generator's `LATE_NS`).
pub(crate) const LATE_NS: Nanos = 100_000;
/// Most requests one burst sends before the thread reads replies (the lab
/// generator's `SEND_BURST`).
const SEND_BURST: usize = 256;

pub(crate) struct Client {
    pub thread: usize,
    pub class: usize,
    ring: usize,
    send_ns: Nanos,
    read_ns: Nanos,
    round_ns: Nanos,
    /// The current round of the loop has paid its `round_ns`.
    round_open: bool,
    path_ns: Nanos,
    tail_ns: f64,
    rng: Rng,
    /// Open loop: the mean gap between intended sends, ns (None: closed loop).
    mean_gap_ns: Option<f64>,
    connections: u32,
    /// Open loop: the next intended send time (None: past the window's end).
    next_intended: Option<Nanos>,
    /// Closed loop: sends due (intended time each: the read of the previous reply).
    due: VecDeque<Nanos>,
    seq: u32,
    /// Requests in flight, in the order sent: (sequence, intended time, send time).
    outstanding: VecDeque<(u32, Nanos, Nanos)>,
    /// Replies that reach the client, in order: (when readable, sequence).
    replies: VecDeque<(Nanos, u32)>,
    /// The earliest wake-up already scheduled (Nanos::MAX: none).
    wake_at: Nanos,
    /// Sends in the current burst; None: the thread is reading the replies that are
    /// in (as the lab's loop: a burst of due sends, then every readable reply).
    burst: Option<usize>,
    /// Requests of the window sent, sent late, the latest lateness; intended sends of
    /// the window never sent (`behind`).
    pub sent: u64,
    pub late: u64,
    pub max_late_ns: Nanos,
    pub behind: u64,
}

impl Client {
    pub(crate) fn new(
        cs: &ClientSide,
        class: usize,
        ring: usize,
        thread: usize,
        rate: f64,
        profile: &Profile,
        rng: Rng,
    ) -> Client {
        let mean_gap_ns = match cs.connections {
            Some(_) => None,
            None => Some(if rate > 0.0 {
                1e9 / rate
            } else {
                f64::INFINITY
            }),
        };
        Client {
            thread,
            class,
            ring,
            send_ns: profile.ns(cs.send_cycles),
            read_ns: profile.ns(cs.read_cycles),
            round_ns: profile.ns(cs.round_cycles),
            round_open: false,
            path_ns: cs.path_ns,
            tail_ns: cs.path_tail_ns as f64,
            rng,
            mean_gap_ns,
            connections: cs.connections.unwrap_or(0),
            next_intended: None,
            due: VecDeque::new(),
            seq: 0,
            outstanding: VecDeque::new(),
            replies: VecDeque::new(),
            wake_at: Nanos::MAX,
            burst: Some(0),
            sent: 0,
            late: 0,
            max_late_ns: 0,
            behind: 0,
        }
    }

    /// The next open-loop intended time after `t`, or None past `end`.
    fn draw_after(&mut self, t: Nanos, end: Nanos) -> Option<Nanos> {
        let gap = self.mean_gap_ns?;
        if !gap.is_finite() {
            return None;
        }
        let next = t + (self.rng.exp(gap) as Nanos).max(1);
        (next < end).then_some(next)
    }

    /// The cost of the loop's round if this step opens one (0 if it is already open).
    fn open_round(&mut self) -> Nanos {
        if self.round_open {
            return 0;
        }
        self.round_open = true;
        self.round_ns
    }

    /// The intended time of the next due send, if any.
    fn next_send(&self) -> Option<Nanos> {
        match self.mean_gap_ns {
            Some(_) => self.next_intended,
            None => self.due.front().copied(),
        }
    }
}

impl Sim<'_> {
    /// At the start: the first intended send (open loop) or one request per connection
    /// (closed loop), and the thread's first wake-up.
    pub(super) fn start_clients(&mut self) {
        for k in 0..self.clients.len() {
            let end = self.end;
            let cl = &mut self.clients[k];
            if cl.mean_gap_ns.is_some() {
                cl.next_intended = cl.draw_after(0, end);
            } else {
                // Connections open staggered over the first 10 us.
                for i in 0..cl.connections {
                    cl.due
                        .push_back(10_000 * Nanos::from(i) / Nanos::from(cl.connections));
                }
            }
            if let Some(t) = self.clients[k].next_send() {
                self.client_wake_at(k, t);
            }
        }
    }

    /// Schedule client `k`'s thread to wake at `t` unless a wake-up at or before it is
    /// already on its way.
    fn client_wake_at(&mut self, k: usize, t: Nanos) {
        let t = t.max(self.q.now());
        if self.clients[k].wake_at <= t && self.clients[k].wake_at >= self.q.now() {
            return;
        }
        self.clients[k].wake_at = t;
        self.q.schedule(t, Ev::ClientWake(k));
    }

    pub(super) fn client_wakes(&mut self, k: usize) {
        if self.clients[k].wake_at == self.q.now() {
            self.clients[k].wake_at = Nanos::MAX;
        }
        let t = self.clients[k].thread;
        self.wake_thread(t);
        let c = self.threads[t].cpu;
        if !self.cpus[c].busy {
            self.dispatch(c);
        }
    }

    /// The server's reply to request `p` of client `k` left the DUT at `done`: it is
    /// readable by the client after the path's latency.
    pub(super) fn client_reply(&mut self, k: usize, p: Packet, done: Nanos) {
        let cl = &mut self.clients[k];
        let tail = if cl.tail_ns > 0.0 {
            cl.rng.exp(cl.tail_ns) as Nanos
        } else {
            0
        };
        let ready = done + self.lat_rx_dma + cl.path_ns + tail;
        // TCP delivers a connection's bytes in order: a reply is not readable before
        // the one ahead of it.
        let ready = cl.replies.back().map_or(ready, |&(r, _)| ready.max(r));
        cl.replies.push_back((ready, p.flow));
        self.client_wake_at(k, ready);
    }

    /// One step of client `k`'s thread on CPU `c`: a due send of the current burst, or
    /// a readable reply; false when neither (the thread sleeps until the next one).
    pub(super) fn client_step(&mut self, c: usize, t: usize, k: usize) -> bool {
        let now = self.q.now();
        let end = self.end;
        let ready = self.clients[k].replies.front().is_some_and(|r| r.0 <= now);
        let due = self.clients[k].next_send().filter(|&i| i <= now);
        // A burst ends when nothing is due or it is full; the thread then reads every
        // reply that is in before it sends again, so an overloaded client still reads.
        let cl = &mut self.clients[k];
        let was_reading = cl.burst.is_none();
        cl.burst = match cl.burst {
            Some(n) if due.is_some() && n < SEND_BURST => Some(n),
            _ if ready => None,
            _ => Some(0),
        };
        // A burst after the reads is the loop's next round.
        if was_reading && cl.burst.is_some() {
            cl.round_open = false;
        }
        if let (Some(intended), Some(n)) = (due, cl.burst) {
            cl.burst = Some(n + 1);
            let round = self.clients[k].open_round();
            let (start, pen) = self.begin(c, false);
            let t0 = start + pen + round;
            let sent_at = t0 + self.clients[k].send_ns;
            let in_window = intended >= self.start && intended < end;
            let cl = &mut self.clients[k];
            match cl.mean_gap_ns {
                Some(_) => cl.next_intended = cl.draw_after(intended, end),
                None => {
                    cl.due.pop_front();
                }
            }
            if in_window {
                // A closed loop sends when its reply is read: it is never late.
                let late = if cl.mean_gap_ns.is_some() {
                    t0 - intended.min(t0)
                } else {
                    0
                };
                cl.sent += 1;
                cl.max_late_ns = cl.max_late_ns.max(late);
                cl.late += u64::from(late > LATE_NS);
            }
            let seq = cl.seq;
            cl.seq = cl.seq.wrapping_add(1);
            cl.outstanding.push_back((seq, intended, sent_at));
            let (class, ring) = (cl.class, cl.ring);
            let size = self.cfg.traffic.classes[class].size_bytes;
            self.rings[ring].inject(Packet {
                arrival: sent_at,
                class: class as u16,
                size,
                flow: seq,
            });
            // Sends are in time order, so an armed line already fires for an earlier
            // request; re-arming it would push its IRQ past this one's (and, with an
            // IRQ delivery delay longer than the gap between sends, forever).
            let q = self.rings[ring].queue;
            if let Some(l) = self.napis[q].line {
                self.arm_line(l, now);
            }
            self.commit(c, start, sent_at, Ctx::User, Finish::Nothing);
            return true;
        }
        if let Some(&(_, seq)) = self.clients[k].replies.front().filter(|r| r.0 <= now) {
            self.clients[k].replies.pop_front();
            let round = self.clients[k].open_round();
            let (start, pen) = self.begin(c, false);
            let done = start + pen + round + self.clients[k].read_ns;
            let cl = &mut self.clients[k];
            // Requests ahead of this one that were dropped were never answered.
            while cl.outstanding.front().is_some_and(|o| o.0 != seq) {
                cl.outstanding.pop_front();
            }
            if let Some((_, intended, sent_at)) = cl.outstanding.pop_front() {
                if cl.mean_gap_ns.is_none() && done < end {
                    cl.due.push_back(done);
                }
                let cls = cl.class;
                if let Some(i) = self.win.lookup(sent_at) {
                    self.counts[i].class_forwarded[cls] += 1;
                    self.latency[cls].record(done - intended);
                }
            }
            self.commit(c, start, done, Ctx::User, Finish::Nothing);
            return true;
        }
        self.threads[t].runnable = false;
        self.clients[k].round_open = false;
        let next = [
            self.clients[k].next_send(),
            self.clients[k].replies.front().map(|r| r.0),
        ]
        .into_iter()
        .flatten()
        .min();
        if let Some(at) = next {
            self.client_wake_at(k, at);
        }
        false
    }

    /// At the end: the open loop's intended sends of the window it never reached.
    pub(super) fn finish_clients(&mut self) {
        for cl in &mut self.clients {
            let mut next = cl.next_intended.take();
            // Bounded: at most the window's intended sends.
            while let Some(t) = next {
                if t >= self.start {
                    cl.behind += 1;
                }
                next = cl.draw_after(t, self.end);
            }
        }
    }
}
