//! WireGuard's receive pipeline (docs/studies.md#wireguard-study; docs/sim.md "The
//! WireGuard receive pipeline"): decapsulation in the RX softirq puts each packet in
//! its peer's in-order queue and on the decryption queue of the next CPU round robin,
//! whatever that CPU's load (`wg_cpumask_next_online`); that CPU's worker decrypts it
//! and calls `napi_schedule` for the peer's NAPI instance on its own CPU; the peer's
//! poll (`wg_packet_rx_poll`) takes the decrypted packets at the head of the peer's
//! queue, in order, stopping at the first one not yet decrypted, and hands them to GRO
//! and the socket. In the stock kernel the instance is polled in NET_RX softirq, which
//! the worker's next `spin_unlock_bh` runs at once: the later stage preempts the earlier
//! one (the execution-order inversion). An instance stays on the CPU that scheduled it
//! until its poll completes, so a CPU whose softirq runs long keeps collecting them.
//!
//! The kernel's decryption queue is the device's one ring (`wg->decrypt_queue`, a
//! `ptr_ring` of 1,024 packets): the round robin chooses only which CPU's worker is
//! *kicked* (`queue_work_on`); every worker that runs drains the shared ring
//! (`ptr_ring_consume_bh` in `wg_packet_decrypt_worker`). That is `decrypt_ring =
//! "shared"`, the default. `per-cpu` hands each packet to the kicked CPU's own queue
//! (the queues sharing the ring's limit): an approximation the kernel does not have,
//! which earlier versions of the twin used. With the shared ring, a CPU whose softirqs
//! wait for ksoftirqd while its worker runs a (kernel-scaled) CFS slice gathers the
//! instances (docs/sim.md, "How one core gets hot").

use std::collections::VecDeque;

use super::*;
use crate::config::{DecryptRing, TunnelConfig, Worklist};

/// What one step of a decryption item did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum DecryptStep {
    /// A packet is being decrypted (the batch is committed).
    Decrypted,
    /// Nothing to decrypt: the item ends.
    Empty,
    /// The head packet is queued at this later time (a poll computed as one batch
    /// ahead of the event clock): the item ends, and is queued again then.
    QueuedAt(Nanos),
}

/// One packet in a peer's receive queue.
struct Slot {
    packet: Packet,
    /// When its decryption ended (None: not yet).
    ready: Option<Nanos>,
    /// Dropped after it was queued (decryption queue full): the poll skips it.
    dead: bool,
}

/// A peer: its NAPI instance and its in-order receive queue.
pub(crate) struct Peer {
    pub napi: usize,
    queue: VecDeque<Slot>,
    /// Sequence number of `queue.front()`.
    head_seq: u64,
}

/// The tunnel device's receive state.
pub(crate) struct Tunnel {
    pub peers: Vec<Peer>,
    /// Packets to decrypt (queued at, peer, sequence number), in the order the RX
    /// softirq queued them: one queue per CPU (`per-cpu`) or one for all (`shared`).
    decrypt: Vec<VecDeque<(Nanos, usize, u64)>>,
    shared_ring: bool,
    /// Packets on all decryption queues (the device's ring limit).
    decrypt_queued: usize,
    /// The CPU's decryption item is queued or about to be (`queue_work` is a no-op
    /// while the item is pending).
    decrypt_pending: Vec<bool>,
    /// `tunnel.worklist = "pool"`: beside NAPI work items, the decryption item waits in
    /// the CPU pool's one worklist (`sim::workqueue`).
    pub pool_worklist: bool,
    next_cpu: usize,
    rng: Rng,
    peer_limit: usize,
    decrypt_limit: usize,
    decap_ns: Nanos,
    decrypt_ns: Nanos,
    gro_ns: Nanos,
}

impl Tunnel {
    pub fn new(cfg: &TunnelConfig, profile: &Profile, ncpu: usize, seed: u64) -> Tunnel {
        let cycles = profile
            .tunnel_cycles
            .clone()
            .unwrap_or(crate::profile::TunnelCycles {
                decap: 0.0,
                decrypt: 0.0,
                gro: 0.0,
            });
        let shared_ring = cfg.decrypt_ring == DecryptRing::Shared;
        Tunnel {
            peers: Vec::new(),
            decrypt: vec![VecDeque::new(); if shared_ring { 1 } else { ncpu }],
            shared_ring,
            decrypt_queued: 0,
            decrypt_pending: vec![false; ncpu],
            pool_worklist: cfg.worklist == Worklist::Pool,
            next_cpu: 0,
            rng: Rng::new(seed, 3_000_000),
            peer_limit: cfg.peer_queue as usize,
            decrypt_limit: cfg.decrypt_queue as usize,
            decap_ns: profile.ns(cycles.decap),
            decrypt_ns: profile.ns(cycles.decrypt),
            gro_ns: profile.ns(cycles.gro),
        }
    }

    /// The decryption queue CPU `c`'s worker takes from.
    fn ring_of(&self, c: usize) -> usize {
        if self.shared_ring {
            0
        } else {
            c
        }
    }

    pub fn add_peer(&mut self, napi: usize) {
        self.peers.push(Peer {
            napi,
            queue: VecDeque::new(),
            head_seq: 0,
        });
    }
}

impl Sim<'_> {
    /// `wg_packet_receive` on CPU `c` at `t` (inside the RX poll, after the IP stack's
    /// UDP receive): queue the packet on a peer and on the next CPU's decryption queue.
    pub(super) fn tunnel_receive(&mut self, p: Packet, mut t: Nanos) -> Nanos {
        let ncpu = self.cpus.len();
        let now = self.q.now();
        let ip = self.costs.ip;
        let Some(tun) = self.tunnel.as_mut() else {
            return t;
        };
        t += ip + tun.decap_ns;
        let pe = (tun.rng.next_u64() % tun.peers.len() as u64) as usize;
        let peer = &mut tun.peers[pe];
        let mut kick = None;
        let dropped = if peer.queue.len() >= tun.peer_limit {
            Some(true)
        } else {
            let seq = peer.head_seq + peer.queue.len() as u64;
            let dc = tun.next_cpu;
            tun.next_cpu = (tun.next_cpu + 1) % ncpu;
            let full = tun.decrypt_queued >= tun.decrypt_limit;
            peer.queue.push_back(Slot {
                packet: p,
                ready: None,
                dead: full,
            });
            if !full {
                let ring = tun.ring_of(dc);
                tun.decrypt[ring].push_back((t, pe, seq));
                tun.decrypt_queued += 1;
                if !std::mem::replace(&mut tun.decrypt_pending[dc], true) {
                    kick = Some(dc);
                }
            }
            full.then_some(false)
        };
        if let Some(at_peer) = dropped {
            self.count_tunnel_drop(p, at_peer);
        }
        if let Some(dc) = kick {
            // queue_work_on(dc) at `t`, which may lie ahead of the event clock (this
            // poll is computed as one batch).
            self.q.schedule(t.max(now), Ev::QueueDecrypt(dc));
        }
        t
    }

    fn count_tunnel_drop(&mut self, p: Packet, at_peer: bool) {
        if let Some(i) = self.win.lookup(p.arrival) {
            let k = &mut self.counts[i];
            k.class_rx_dropped[p.class as usize] += 1;
            if at_peer {
                k.tunnel_peer_drops += 1;
            } else {
                k.tunnel_decrypt_drops += 1;
            }
        }
    }

    /// One decryption by CPU `c`'s worker from its queue (or the shared ring), or why
    /// none: nothing is queued, or the head packet is queued only later by a poll
    /// computed ahead of the clock. The caller ends the item and handles its PENDING
    /// bit (`sim::workqueue`).
    pub(super) fn decrypt_step(&mut self, c: usize) -> DecryptStep {
        let now = self.q.now();
        let Some(tun) = self.tunnel.as_mut() else {
            return DecryptStep::Empty;
        };
        let ring = tun.ring_of(c);
        let head = tun.decrypt[ring].front().copied();
        let Some((at, pe, seq)) = head else {
            return DecryptStep::Empty;
        };
        if at > now {
            return DecryptStep::QueuedAt(at);
        }
        tun.decrypt[ring].pop_front();
        tun.decrypt_queued -= 1;
        let cost = tun.decrypt_ns;
        let (start, pen) = self.begin(c, false);
        let end = start + pen + cost;
        self.commit(
            c,
            start,
            end,
            Ctx::KThread,
            Finish::Decrypted { peer: pe, seq },
        );
        DecryptStep::Decrypted
    }

    /// CPU `c`'s decryption item starts. With the pool's worklist (`pool`) its PENDING
    /// bit is cleared now, as `process_one_work` does before it calls the function
    /// (`set_work_pool_and_clear_pending`), so a kick while it runs queues it again.
    pub(super) fn decrypt_item_started(&mut self, c: usize, pool: bool) {
        if let Some(tun) = self.tunnel.as_mut().filter(|_| pool) {
            tun.decrypt_pending[c] = false;
        }
    }

    /// CPU `c`'s decryption item ended (`why`: `Empty` or `QueuedAt`). Without the
    /// pool's worklist the item stays pending until it finds nothing queued (the
    /// earlier model, kept for `split` and for the baseline, where no other item
    /// shares the pool).
    pub(super) fn decrypt_item_ended(&mut self, c: usize, why: DecryptStep, pool: bool) {
        let Some(tun) = self.tunnel.as_mut() else {
            return;
        };
        match why {
            DecryptStep::Decrypted => {}
            DecryptStep::Empty => {
                if !pool {
                    tun.decrypt_pending[c] = false;
                }
            }
            DecryptStep::QueuedAt(at) => {
                // The enqueuer's kick, at the time it queued the packet: a no-op
                // while the item is pending.
                if !pool || !std::mem::replace(&mut tun.decrypt_pending[c], true) {
                    self.q.schedule(at, Ev::QueueDecrypt(c));
                }
            }
        }
    }

    /// A decryption ended on CPU `c`: the packet is ready; `napi_schedule` the peer's
    /// instance from this CPU; the worker's next `spin_unlock_bh` runs pending softirqs.
    pub(super) fn decrypted(&mut self, c: usize, pe: usize, seq: u64) {
        let now = self.q.now();
        let Some(tun) = self.tunnel.as_mut() else {
            return;
        };
        let peer = &mut tun.peers[pe];
        if let Some(slot) = seq
            .checked_sub(peer.head_seq)
            .and_then(|i| peer.queue.get_mut(i as usize))
        {
            slot.ready = Some(now);
        }
        let n = peer.napi;
        self.napi_schedule_on(n, c);
        self.exit[c] = Some(ExitKind::WorkerBhEnable);
    }

    /// `wg_packet_rx_poll` of peer `pe` on CPU `c` from `t`: up to `weight` decrypted
    /// packets from the head of the peer's queue, in order; returns (end, packets).
    pub(super) fn peer_poll(&mut self, pe: usize, mut t: Nanos, weight: u32) -> (Nanos, u32) {
        let mut k = 0;
        let lat_rx_dma = self.lat_rx_dma;
        let Some(tun) = self.tunnel.as_mut() else {
            return (t, 0);
        };
        let gro = tun.gro_ns;
        let peer = &mut tun.peers[pe];
        while k < weight {
            let Some(slot) = peer.queue.front() else {
                break;
            };
            if !slot.dead {
                match slot.ready {
                    Some(r) if r <= t => {}
                    _ => break,
                }
            }
            let dead = slot.dead;
            let p = slot.packet;
            peer.queue.pop_front();
            peer.head_seq += 1;
            if dead {
                continue;
            }
            t += gro;
            k += 1;
            if let Some(i) = self.win.lookup(t) {
                self.counts[i].tunnel_delivered += 1;
            }
            if let Some(i) = self.win.lookup(p.arrival) {
                let cls = p.class as usize;
                self.counts[i].class_forwarded[cls] += 1;
                self.latency[cls].record(t + lat_rx_dma - p.arrival);
            }
        }
        (t, k)
    }
}
