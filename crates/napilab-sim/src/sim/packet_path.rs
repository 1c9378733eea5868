//! The packet path after the driver: the forwarding fast path, RPS steering, local
//! delivery to an application's socket, the egress qdisc, the TX ring and the wire.

use super::*;

impl Sim<'_> {
    /// The ring loop of `poll` for a ring whose packets are all forwarded by this CPU
    /// (no RPS, no local delivery, no closed-loop client): the same steps as
    /// `forward` -> `egress` -> `send` per packet, written out so that the common case
    /// of a router stays a tight loop. A packet that meets a non-empty qdisc or a full
    /// TX ring takes the general `egress`. A dedicated TX-completion IRQ is armed once
    /// after the loop rather than after each descriptor: the same fire time results
    /// (the first pending completion plus tx-usecs, or the tx-frames-th completion),
    /// since no completion is reclaimed inside the loop.
    pub(super) fn poll_ring_forward(
        &mut self,
        c: usize,
        r: usize,
        mut t: Nanos,
        rb: u32,
    ) -> (Nanos, u32) {
        let (rx_poll, ip, xmit) = (self.costs.rx_poll, self.costs.ip, self.costs.xmit);
        let q = self.rings[r].queue;
        let noqueue = self.cfg.egress.qdisc == QdiscKind::None;
        let arm_each = !matches!(
            self.lines[self.tx_lines[c]].kind,
            LineKind::TxCompletion { .. }
        );
        // veth's loop takes only what its ring holds (super::gro_batch): not the fast
        // path, which pops the k-th packet at t + k steps whatever arrives meanwhile.
        let mut batch = self.veth_rx.then(|| {
            super::gro_batch::GroBatch::new(t, rx_poll, self.cfg.settings.gro_normal_batch)
        });
        if !arm_each && batch.is_none() {
            let txq = &self.txqs[c];
            if (noqueue || txq.qdisc.is_empty()) && txq.inflight.len() + rb as usize <= txq.size {
                // Every packet of the poll takes the bypass to a TX ring with room, so
                // the k-th pop is at t + k (rx_poll + ip + xmit) whatever arrives: the
                // ring can do its admissions and pops in one pass.
                let mut buf = std::mem::take(&mut self.pop_buf);
                buf.clear();
                let step = rx_poll + ip + xmit;
                let done = self.rings[r].pop_batch(t, step, rb, &mut buf);
                if let Some(b) = done {
                    t = self.forward_batch(c, q, t, b, &buf);
                }
                self.pop_buf = buf;
                if let Some(b) = done {
                    if b.n > 0 {
                        self.arm_tx_line(c);
                    }
                    return (t, b.n);
                }
            }
        }
        let mut sent = false;
        let mut k = 0;
        // Counters of the interval span holding the times seen so far, added to the
        // interval at the end (or when a time leaves the span): rx packets, rx bytes,
        // processed, tx packets, tx bytes.
        let (_, mut hi, mut idx) = self.win.span(t);
        let mut acc = [0u64; 5];
        while k < rb {
            let visible = batch.map_or(t, |b| b.visible());
            let Some(p) = self.rings[r].pop_at(visible) else {
                break;
            };
            let size = p.size as u64;
            let t_rx = t + rx_poll;
            t = t_rx + ip;
            if t < hi {
                acc[0] += 1;
                acc[1] += size;
                acc[2] += 1;
            } else {
                self.flush_forward(c, q, idx, &mut acc);
                self.count(t_rx, |cn| {
                    cn.rx_packets += 1;
                    cn.rx_bytes += size;
                    cn.queue_rx_packets[q] += 1;
                });
                self.count(t, |cn| cn.cpus[c].processed += 1);
                (_, hi, idx) = self.win.span(t);
            }
            let txq = &self.txqs[c];
            if noqueue || txq.qdisc.is_empty() {
                t += xmit;
                if txq.has_room() {
                    let done = self.send_wire(c, p, t);
                    if t < hi {
                        acc[3] += 1;
                        acc[4] += size;
                    } else {
                        self.flush_forward(c, q, idx, &mut acc);
                        self.count(t, |cn| {
                            cn.tx_packets += 1;
                            cn.tx_bytes += size;
                        });
                        (_, hi, idx) = self.win.span(t);
                    }
                    self.send_delivered(p, done);
                    if arm_each {
                        self.arm_tx_line(c);
                    }
                    sent = true;
                } else if noqueue {
                    self.count(p.arrival, |cn| cn.class_tx_dropped[p.class as usize] += 1);
                } else {
                    // A full TX ring: the qdisc takes it (undo the bypass cost).
                    t = self.egress(c, p, t - xmit);
                }
            } else {
                t = self.egress(c, p, t);
            }
            if let Some(b) = batch.as_mut() {
                b.took(t);
            }
            k += 1;
        }
        self.flush_forward(c, q, idx, &mut acc);
        if sent && !arm_each {
            self.arm_tx_line(c);
        }
        (t, k)
    }

    /// The rest of `poll_ring_forward` for packets popped by `RxRing::pop_batch` at
    /// `t0`, `t0 + step`, ...: the same counters, TX descriptors and latencies as the
    /// packet-at-a-time loop, the counters added once when the batch's times fall in
    /// one interval. Returns the time after the last packet.
    pub(super) fn forward_batch(
        &mut self,
        c: usize,
        q: usize,
        t0: Nanos,
        b: Batch,
        arrivals: &[Nanos],
    ) -> Nanos {
        let (rx_poll, ip, xmit) = (self.costs.rx_poll, self.costs.ip, self.costs.xmit);
        let step = rx_poll + ip + xmit;
        let n = arrivals.len() as u64;
        let size = b.size as u64;
        let end = t0 + n * step;
        if n == 0 {
            return end;
        }
        // CPU-side counters: rx at t + rx_poll, processed at + ip, tx at + xmit.
        let (_, hi, idx) = self.win.span(t0 + rx_poll);
        if end < hi {
            if let Some(i) = idx {
                let k = &mut self.counts[i];
                k.rx_packets += n;
                k.rx_bytes += n * size;
                k.queue_rx_packets[q] += n;
                k.cpus[c].processed += n;
                k.tx_packets += n;
                k.tx_bytes += n * size;
            }
        } else {
            for j in 0..n {
                let t_rx = t0 + j * step + rx_poll;
                self.count(t_rx, |cn| {
                    cn.rx_packets += 1;
                    cn.rx_bytes += size;
                    cn.queue_rx_packets[q] += 1;
                });
                self.count(t_rx + ip, |cn| cn.cpus[c].processed += 1);
                self.count(t_rx + ip + xmit, |cn| {
                    cn.tx_packets += 1;
                    cn.tx_bytes += size;
                });
            }
        }
        // The wire (send_wire) and each packet's latency, counted by its arrival.
        if self.ser_memo.0 != b.size {
            let ser = ((b.size as f64 + 20.0) * self.ser_ns_per_byte).round() as Nanos;
            self.ser_memo = (b.size, ser);
        }
        let ser = self.ser_memo.1;
        let (dma, rx_dma) = (self.lat_tx_dma, self.lat_rx_dma);
        // Departures first (a serial max/add chain), then the TX ring takes them in
        // one extend, then they become latencies in place: three simple loops
        // rather than one with two growing containers.
        let mut lat = std::mem::take(&mut self.lat_buf);
        lat.clear();
        let mut wire = self.wire_free;
        let mut t_tx = t0 + step;
        lat.extend(arrivals.iter().map(|_| {
            let done = (t_tx + dma).max(wire) + ser;
            wire = done;
            t_tx += step;
            done
        }));
        self.txqs[c].inflight.extend(lat.iter().copied());
        for (l, &a) in lat.iter_mut().zip(arrivals) {
            *l = *l + rx_dma - a;
        }
        self.wire_free = wire;
        let cls = b.class as usize;
        let (_, hi, idx) = self.win.span(arrivals[0]);
        if arrivals[arrivals.len() - 1] < hi {
            if let Some(i) = idx {
                self.counts[i].class_forwarded[cls] += n;
                self.latency[cls].record_all(&lat);
            }
        } else {
            for (&a, &l) in arrivals.iter().zip(&lat) {
                if let Some(i) = self.win.lookup(a) {
                    self.counts[i].class_forwarded[cls] += 1;
                    self.latency[cls].record(l);
                }
            }
        }
        self.lat_buf = lat;
        end
    }

    /// Add `poll_ring_forward`'s accumulated counters to interval `idx` and reset them.
    #[inline]
    pub(super) fn flush_forward(
        &mut self,
        c: usize,
        q: usize,
        idx: Option<usize>,
        acc: &mut [u64; 5],
    ) {
        if let Some(i) = idx {
            let k = &mut self.counts[i];
            k.rx_packets += acc[0];
            k.rx_bytes += acc[1];
            k.queue_rx_packets[q] += acc[0];
            k.cpus[c].processed += acc[2];
            k.tx_packets += acc[3];
            k.tx_bytes += acc[4];
        }
        *acc = [0; 5];
    }

    /// RPS: `enqueue_to_backlog` of the target CPU at time `t`.
    pub(super) fn rps_enqueue(&mut self, c: usize, q: usize, p: Packet, t: Nanos) {
        let cpus = &self.rps_cpus[q];
        let target = cpus[(self.rps_rng[q].next_u64() % cpus.len() as u64) as usize];
        if self.backlogs[target].len() >= self.cfg.settings.max_backlog as usize {
            self.count(t, |k| k.cpus[target].backlog_drops += 1);
            self.count(p.arrival, |k| k.class_rx_dropped[p.class as usize] += 1);
            return;
        }
        self.backlogs[target].push_back((t, p));
        let Some(n) = self.backlog_napi[target] else {
            return;
        };
        if self.napis[n].scheduled {
            return;
        }
        self.napis[n].scheduled = true;
        if target == c {
            self.cpus[c].poll_list.push_back(n);
            self.cpus[c].softirq_pending |= NET_RX;
        } else if !self.cpus[c].rps_ipi.contains(&target) {
            self.cpus[c].rps_ipi.push(target);
        }
    }

    /// `net_rps_action_and_irq_enable`: send the IPIs queued during the run.
    pub(super) fn send_rps_ipis(&mut self, c: usize) {
        if self.cpus[c].rps_ipi.is_empty() {
            return;
        }
        let now = self.q.now();
        for b in std::mem::take(&mut self.cpus[c].rps_ipi) {
            self.q.schedule(now + self.lat_irq, Ev::Ipi(b));
        }
    }

    /// One received packet through the IP stack (on CPU `c`) to the egress.
    #[inline]
    pub(super) fn forward(&mut self, c: usize, p: Packet, mut t: Nanos) -> Nanos {
        t += self.costs.ip;
        self.count(t, |k| k.cpus[c].processed += 1);
        if let Some(a) = self.class_app[p.class as usize] {
            self.deliver(c, a, p, t);
            return t;
        }
        self.egress(c, p, t)
    }

    /// Local delivery: queue on the application's socket and wake its thread.
    pub(super) fn deliver(&mut self, c: usize, a: usize, p: Packet, t: Nanos) {
        if self.apps[a].socket.len() >= self.apps[a].limit {
            self.count(t, |k| k.cpus[c].socket_drops += 1);
            self.count(p.arrival, |k| k.class_rx_dropped[p.class as usize] += 1);
            return;
        }
        self.apps[a].socket.push_back((t, p));
        let th = self.apps[a].thread;
        if self.threads[th].runnable || self.apps[a].wake_pending {
            return;
        }
        if self.threads[th].cpu == c {
            // Same CPU: the thread becomes runnable; it runs after the softirq.
            self.wake_thread(th);
        } else {
            // Another CPU: an idle one waits as a remote wake-up of an idle CPU does
            // (the measured delays when the profile has them: on a VM whose idle
            // vCPUs halt, the host's), a busy one takes the IPI's delivery.
            let target = self.threads[th].cpu;
            let delay = if self.cpu_idle(target) {
                self.remote_wake_up_delay()
            } else {
                self.lat_irq
            };
            self.apps[a].wake_pending = true;
            self.q.schedule(t + delay, Ev::WakeApp(a));
        }
    }

    /// The transmit half: qdisc (or none) and the driver, on CPU `c`'s TX queue.
    #[inline]
    pub(super) fn egress(&mut self, c: usize, p: Packet, mut t: Nanos) -> Nanos {
        match self.cfg.egress.qdisc {
            QdiscKind::None => {
                t += self.costs.xmit;
                if self.txqs[c].has_room() {
                    self.send(c, p, t);
                } else {
                    self.count(p.arrival, |k| k.class_tx_dropped[p.class as usize] += 1);
                }
            }
            QdiscKind::Fifo => {
                if self.txqs[c].qdisc.is_empty() && self.txqs[c].has_room() {
                    // TCQ_F_CAN_BYPASS: an empty qdisc sends directly.
                    t += self.costs.xmit;
                    self.send(c, p, t);
                } else if self.txqs[c].qdisc.len() < self.cfg.egress.qdisc_limit as usize {
                    t += self.costs.qdisc;
                    self.txqs[c].qdisc.push_back(p);
                    self.count(t, |k| k.qdisc_enqueued += 1);
                    t = self.qdisc_run(c, t, u32::MAX);
                } else {
                    t += self.costs.qdisc;
                    self.count(t, |k| k.qdisc_drops += 1);
                    self.count(p.arrival, |k| k.class_tx_dropped[p.class as usize] += 1);
                }
            }
        }
        t
    }

    /// `__qdisc_run`: dequeue while the TX ring has room, at most `quota` packets.
    pub(super) fn qdisc_run(&mut self, c: usize, mut t: Nanos, quota: u32) -> Nanos {
        let mut k = 0;
        while k < quota && self.txqs[c].has_room() {
            let Some(p) = self.txqs[c].qdisc.pop_front() else {
                break;
            };
            t += self.costs.xmit;
            self.send(c, p, t);
            k += 1;
        }
        t
    }

    /// The driver writes a TX descriptor at `t`; the NIC sends it at line rate.
    #[inline]
    pub(super) fn send(&mut self, c: usize, p: Packet, t: Nanos) {
        let done = self.send_wire(c, p, t);
        // A reply to a closed-loop client: its next request follows.
        let cls = p.class as usize;
        if let Some((cl, rng)) = self.closed[cls].as_mut() {
            let think = if cl.think_us > 0.0 {
                rng.exp(cl.think_us * 1e3) as Nanos
            } else {
                0
            };
            let next = done + (cl.rtt_us * 1e3) as Nanos + think;
            self.inject(cls, p.flow, next);
        }
        self.send_count(p, t, done);
        self.arm_tx_line(c);
    }

    /// The descriptor's DMA and serialization: when the frame has left the wire.
    #[inline(always)]
    pub(super) fn send_wire(&mut self, c: usize, p: Packet, t: Nanos) -> Nanos {
        if self.ser_memo.0 != p.size {
            let ser = ((p.size as f64 + 20.0) * self.ser_ns_per_byte).round() as Nanos;
            self.ser_memo = (p.size, ser);
        }
        let ser = self.ser_memo.1;
        let start = (t + self.lat_tx_dma).max(self.wire_free);
        let done = start + ser;
        self.wire_free = done;
        self.txqs[c].inflight.push_back(done);
        done
    }

    /// TX counters at `t`, and the packet's delivery and latency by its arrival.
    #[inline(always)]
    pub(super) fn send_count(&mut self, p: Packet, t: Nanos, done: Nanos) {
        let size = p.size as u64;
        self.count(t, |k| {
            k.tx_packets += 1;
            k.tx_bytes += size;
        });
        self.send_delivered(p, done);
    }

    /// The packet's delivery and latency, counted by its arrival.
    #[inline(always)]
    pub(super) fn send_delivered(&mut self, p: Packet, done: Nanos) {
        if let Some(k) = self.class_client[p.class as usize] {
            // The client reads the reply; its latency is counted there.
            self.client_reply(k, p, done);
            return;
        }
        if let Some(i) = self.win.lookup(p.arrival) {
            let cls = p.class as usize;
            self.counts[i].class_forwarded[cls] += 1;
            self.latency[cls].record(done + self.lat_rx_dma - p.arrival);
        }
    }
}
