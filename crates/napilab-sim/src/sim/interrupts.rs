//! NIC interrupts and timers: arming a vector from its rings' pending arrivals and
//! its coalescing settings, a vector firing, the NAPI deferral hrtimer, and closed-loop
//! clients' requests arriving on a ring.

use super::*;

impl Sim<'_> {
    /// A closed-loop client's request arrives at `at` on its ring.
    pub(super) fn inject(&mut self, class: usize, flow: u32, at: Nanos) {
        let rings = &self.class_rings[class];
        if rings.is_empty() {
            return;
        }
        let r = rings[flow as usize % rings.len()];
        let size = self.cfg.traffic.classes[class].size_bytes;
        self.rings[r].inject(Packet {
            arrival: at,
            class: class as u16,
            size,
            flow,
        });
        // The new arrival may come before what the line's interrupt was armed for.
        let q = self.rings[r].queue;
        if let Some(l) = self.napis[q].line {
            if self.lines[l].enabled {
                self.lines[l].armed = false;
                let now = self.q.now();
                self.arm_line(l, now);
            }
        }
    }

    /// The driver re-enables a vector after a poll completed (`napi_complete_done`
    /// returned true). An adaptive ITR vector first retunes its interval from what it
    /// received since its last update (ixgbe_poll calls `ixgbe_set_itr` there).
    pub(super) fn unmask_line(&mut self, l: usize, now: Nanos) {
        if self.lines[l].itr.is_some_and(|i| i.adaptive) {
            let (mut packets, mut bytes) = (0, 0);
            match self.lines[l].kind {
                LineKind::Rx { .. } => {
                    for &r in &self.napis[self.lines[l].napi].rings {
                        packets += self.rings[r].taken_packets;
                        bytes += self.rings[r].taken_bytes;
                    }
                }
                LineKind::TxCompletion { txq } => {
                    // The vector's TX container: descriptors reclaimed, and their bytes
                    // taken as the offered traffic's mean frame size (the TX ring keeps
                    // completion times only; exact when every class has one size, as
                    // in the router study).
                    packets = self.txqs[txq].reclaimed;
                    bytes = (packets as f64 * self.mean_frame_bytes()) as u64;
                }
            }
            let line = &mut self.lines[l];
            let (p0, b0) = line.itr_seen;
            if let Some(itr) = line.itr.as_mut() {
                if itr.on_complete(packets - p0, bytes - b0) {
                    line.itr_seen = (packets, bytes);
                }
            }
        }
        self.lines[l].enabled = true;
        self.arm_line(l, now);
    }

    /// The offered traffic's mean frame size, bytes (classes weighted by share).
    fn mean_frame_bytes(&self) -> f64 {
        let classes = &self.cfg.traffic.classes;
        let share: f64 = classes.iter().map(|c| c.share).sum();
        if share <= 0.0 {
            return 0.0;
        }
        classes
            .iter()
            .map(|c| c.share * c.size_bytes as f64)
            .sum::<f64>()
            / share
    }

    /// Schedule the interrupt of an unmasked line with pending work.
    pub(super) fn arm_line(&mut self, l: usize, now: Nanos) {
        let line = &self.lines[l];
        if !line.enabled || line.armed {
            return;
        }
        let frames = line.frames as usize;
        let (first, nth) = match line.kind {
            LineKind::Rx { .. } => {
                let napi = line.napi;
                let mut first: Option<Nanos> = None;
                let mut times: Vec<Nanos> = Vec::new();
                for i in 0..self.napis[napi].rings.len() {
                    let r = self.napis[napi].rings[i];
                    if let Some(t) = self.rings[r].nth_pending(1) {
                        first = Some(first.map_or(t, |f: Nanos| f.min(t)));
                    }
                    if frames > 0 {
                        for k in 1..=frames {
                            match self.rings[r].nth_pending(k) {
                                Some(t) => times.push(t),
                                None => break,
                            }
                        }
                    }
                }
                let nth = if frames > 0 && times.len() >= frames {
                    times.sort_unstable();
                    Some(times[frames - 1])
                } else {
                    None
                };
                // A combined vector also fires for the first TX completion.
                if let Some(x) = line.txq {
                    if let Some(&d) = self.txqs[x].inflight.front() {
                        first = Some(first.map_or(d, |f| f.min(d)));
                    }
                }
                (first, nth)
            }
            LineKind::TxCompletion { txq } => {
                let inflight = &self.txqs[txq].inflight;
                let nth = if frames > 0 {
                    inflight.get(frames - 1).copied()
                } else {
                    None
                };
                (inflight.front().copied(), nth)
            }
        };
        let Some(first) = first else { return };
        // A veth has no interrupt to deliver: `veth_xmit` schedules NAPI from the
        // sender as the packet is queued.
        let delivery = if self.is_veth_rx(l) { 0 } else { self.lat_irq };
        let fire = self.lines[l].fire_time(now, first, nth) + delivery;
        if fire <= self.stop {
            let line = &mut self.lines[l];
            line.armed = true;
            line.fire_at = fire;
            line.gen += 1;
            self.q.schedule(fire, Ev::Irq(l, line.gen));
        }
    }

    /// A TX completion line counting frames: a new descriptor may reach the frame
    /// count before the armed timer; fire then instead.
    pub(super) fn rearm_tx_frames(&mut self, l: usize) {
        let line = &self.lines[l];
        let frames = line.frames as usize;
        if !line.enabled || !line.armed || frames == 0 {
            return;
        }
        let LineKind::TxCompletion { txq } = line.kind else {
            return;
        };
        let Some(&nth) = self.txqs[txq].inflight.get(frames - 1) else {
            return;
        };
        let fire = nth.max(self.q.now()) + self.lat_irq;
        if fire < line.fire_at {
            let line = &mut self.lines[l];
            line.fire_at = fire;
            line.gen += 1;
            self.q.schedule(fire, Ev::Irq(l, line.gen));
        }
    }

    pub(super) fn irq_fires(&mut self, l: usize, gen: u64) {
        let line = &mut self.lines[l];
        if gen != line.gen {
            return; // superseded by an earlier re-arm
        }
        line.armed = false;
        if !line.enabled {
            return;
        }
        // The handler masks the vector (docs/kernel.md#packet-path, step 2); the NIC
        // does not raise it again until the driver unmasks it.
        line.enabled = false;
        if self.is_veth_rx(l) && self.veth_notify(l) {
            return;
        }
        let line = &mut self.lines[l];
        // The NIC asserted it `lat_irq` ago; a throttled vector's interval runs from
        // there.
        line.last_assert = Some(self.q.now().saturating_sub(self.lat_irq));
        let c = line.cpu;
        self.cpus[c].pending_irqs.push_back(IrqSrc::Line(l));
        if !self.cpus[c].busy {
            self.dispatch(c);
        }
    }

    /// Line `l` stands for a veth's receive notification, not an interrupt.
    pub(super) fn is_veth_rx(&self, l: usize) -> bool {
        self.veth_rx && matches!(self.lines[l].kind, LineKind::Rx { .. })
    }

    /// `veth_xmit` found the instance of line `l` idle and calls `napi_schedule` on
    /// the sender's CPU (drivers/net/veth.c, `__veth_xdp_flush`). A threaded instance's
    /// kthread is woken from there: a remote wake-up, which costs `lat_irq` when its
    /// CPU is idle; true when handled so. Otherwise (false) the instance is polled in
    /// the softirq the sender raises, which the twin runs on the instance's CPU through
    /// the line's handler, delivered at once (its cost stands for the sender's
    /// `napi_schedule`).
    fn veth_notify(&mut self, l: usize) -> bool {
        let n = self.lines[l].napi;
        let Some(t) = self.napis[n].thread else {
            return false;
        };
        if self.napis[n].schedule() {
            self.wake_thread_remotely(t);
        }
        true
    }

    pub(super) fn napi_timer(&mut self, n: usize, gen: u64) {
        let napi = &self.napis[n];
        if napi.timer_gen != gen || napi.scheduled {
            return;
        }
        let c = napi.timer_cpu;
        self.cpus[c].pending_irqs.push_back(IrqSrc::NapiTimer(n));
        if !self.cpus[c].busy {
            self.dispatch(c);
        }
    }

    /// A descriptor was written on CPU `c`'s TX queue: arm its completion IRQ.
    #[inline(always)]
    pub(super) fn arm_tx_line(&mut self, c: usize) {
        // Most sends find the completion IRQ masked (a poll is running) or already
        // armed: test that here, without the calls.
        let l = self.tx_lines[c];
        let line = &self.lines[l];
        if line.enabled && (!line.armed || line.frames > 0) {
            let now = self.q.now();
            self.arm_line(l, now);
            self.rearm_tx_frames(l);
        }
    }
}
