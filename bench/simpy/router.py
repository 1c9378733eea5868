#!/usr/bin/env python3
"""Minimal SimPy model of the single-core software router (docs/studies.md#ingress-qos-study), for the
speed comparison printed by napilab-sim's `sim-bench` example.

It keeps the twin's core loop and costs but less detail: Poisson arrivals (one SimPy
event per packet, the idiomatic SimPy way) into a 512-descriptor ring, one IRQ when the
ring gets work while the IRQ is unmasked, then NAPI polls of up to 64 packets, each
costing a fixed per-poll time plus a per-packet time, until a poll finds fewer than 64
packets and the IRQ is unmasked again. No TX completions, ksoftirqd, softirq limits or
tick accounting: the comparison favours SimPy.

Setup:  pip install simpy
Run:    python3 bench/simpy/router.py --rate 2000000 --duration 0.2
Prints one JSON line: simulated seconds, wall seconds of the event loop, forwarded pps.
"""

import argparse
import collections
import json
import random
import time

import simpy


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rate", type=float, default=2_000_000.0, help="offered packets/s")
    ap.add_argument("--duration", type=float, default=0.2, help="simulated seconds")
    ap.add_argument("--per-packet-ns", type=float, default=547.0)
    ap.add_argument("--per-poll-ns", type=float, default=125.0)
    ap.add_argument("--per-irq-ns", type=float, default=1031.0, help="hard IRQ + softirq entry")
    ap.add_argument("--irq-delivery-ns", type=float, default=1000.0)
    ap.add_argument("--ring", type=int, default=512)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()

    rng = random.Random(a.seed)
    env = simpy.Environment()
    ring = collections.deque()
    st = {"irq_enabled": True, "drops": 0, "fwd": 0, "irqs": 0, "lat": 0.0}
    wake = [env.event()]
    mean_gap = 1e9 / a.rate  # time unit: ns

    def raise_irq():
        st["irq_enabled"] = False
        st["irqs"] += 1
        wake[0].succeed()

    def source():
        while True:
            yield env.timeout(rng.expovariate(1.0 / mean_gap))
            if len(ring) >= a.ring:
                st["drops"] += 1
            else:
                ring.append(env.now)
            if st["irq_enabled"]:
                raise_irq()

    def napi():
        while True:
            yield wake[0]
            wake[0] = env.event()
            yield env.timeout(a.irq_delivery_ns + a.per_irq_ns)
            while True:
                n = min(64, len(ring))
                batch = [ring.popleft() for _ in range(n)]
                yield env.timeout(a.per_poll_ns + n * a.per_packet_ns)
                now = env.now
                for t in batch:
                    st["lat"] += now - t
                st["fwd"] += n
                if n < 64:
                    break
            st["irq_enabled"] = True
            if ring:
                raise_irq()

    env.process(source())
    env.process(napi())
    t0 = time.perf_counter()
    env.run(until=a.duration * 1e9)
    wall = time.perf_counter() - t0
    print(json.dumps({
        "simulated_s": a.duration,
        "wall_s": wall,
        "forwarded_pps": st["fwd"] / a.duration,
        "irqs_per_s": st["irqs"] / a.duration,
        "mean_latency_us": st["lat"] / max(st["fwd"], 1) / 1e3,
    }))


if __name__ == "__main__":
    main()
