//! What veth's receive loop sees of its ring (drivers/net/veth.c `veth_xdp_rcv`; the
//! GRO list in net/core/gro.c `gro_normal_one`, `gro_normal_list`). The loop takes from
//! the ptr_ring only what is there, at a dequeue's cost, and hands each skb to GRO; GRO
//! passes the packets up the stack `gro_normal_batch` (net.core.gro_normal_batch,
//! default 8) at a time, and the rest when the poll ends. So a packet that arrives while
//! a batch goes up the stack is taken only by the loop's next batch, and when fewer
//! than a batch were there, by the next poll: under a steady sender a NAPI kthread polls
//! small batches often, it does not grow one poll by what arrives during it (measured
//! on a veth pair, 2026-11-28: 92,600 polls a second of 2.0 packets at 285,000
//! packets/s, 13.6 polls per sleep of the kthread; docs/sim.md). A NIC driver's loop
//! is modelled packet by packet instead: its stack work follows each descriptor.

use crate::event::Nanos;

/// The current batch of one poll of a veth ring: when it began and how many it took.
#[derive(Clone, Copy, Debug)]
pub(crate) struct GroBatch {
    start: Nanos,
    taken: u32,
    dequeue: Nanos,
    /// `net.core.gro_normal_batch`.
    size: u32,
}

impl GroBatch {
    /// A poll's first batch, from `start`; each dequeue costs `dequeue`; GRO passes
    /// `size` packets up at once (at least 1).
    pub(crate) fn new(start: Nanos, dequeue: Nanos, size: u32) -> Self {
        GroBatch {
            start,
            taken: 0,
            dequeue,
            size: size.max(1),
        }
    }

    /// The latest arrival the loop can take next: what was there when the batch began,
    /// plus what arrived while it dequeued.
    pub(crate) fn visible(&self) -> Nanos {
        self.start + Nanos::from(self.taken) * self.dequeue
    }

    /// One packet taken; `now` is the time after its processing. A full batch went up
    /// the stack by `now`: the next begins then.
    pub(crate) fn took(&mut self, now: Nanos) {
        self.taken += 1;
        if self.taken >= self.size {
            self.start = now;
            self.taken = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_sees_its_start_and_the_next_begins_when_it_went_up() {
        let mut b = GroBatch::new(1_000, 10, 8);
        assert_eq!(b.visible(), 1_000);
        for i in 1..8u64 {
            b.took(1_000 + i * 500);
            assert_eq!(b.visible(), 1_000 + i * 10);
        }
        b.took(5_000);
        assert_eq!(b.visible(), 5_000, "the ninth packet: what arrived by then");
        // A batch of one: each packet goes up before the next is looked for, as a NIC
        // driver's loop does.
        let mut one = GroBatch::new(0, 10, 1);
        one.took(700);
        assert_eq!(one.visible(), 700);
    }
}
