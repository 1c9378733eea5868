#!/usr/bin/env python3
"""How much steal a VM's own work brings: /proc/stat's steal share per CPU over 3 s
idle, 3 s with every CPU busy, and 3 s with every CPU sleeping 100 us at a time (a
halted vCPU woken again and again; KVM counts the wait for a host CPU as steal).
docs/lab.md, "Disturbed trials". Usage: python3 bench/steal-pattern.py [ROUNDS=2]"""
import os
import subprocess
import sys
import time

SECONDS = 3


def read_stat():
    """Per CPU: (steal, total) ticks."""
    out = {}
    with open("/proc/stat") as f:
        for line in f:
            if line.startswith("cpu") and line[3].isdigit():
                fields = line.split()
                out[fields[0]] = (int(fields[8]), sum(int(x) for x in fields[1:9]))
    return out


def on_every_cpu(code):
    procs = [
        subprocess.Popen(["taskset", "-c", str(cpu), sys.executable, "-c", code])
        for cpu in sorted(os.sched_getaffinity(0))
    ]
    for p in procs:
        p.wait()


PATTERNS = {
    "idle": lambda: time.sleep(SECONDS),
    "busy": lambda: on_every_cpu(
        f"import time\nt=time.time()\nwhile time.time()-t<{SECONDS}: pass"
    ),
    "waking": lambda: on_every_cpu(
        f"import time\nt=time.time()\nwhile time.time()-t<{SECONDS}: time.sleep(0.0001)"
    ),
}


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    for _ in range(rounds):
        for name, run in PATTERNS.items():
            before = read_stat()
            run()
            after = read_stat()
            shares = []
            for cpu in sorted(before):
                steal = after[cpu][0] - before[cpu][0]
                total = max(1, after[cpu][1] - before[cpu][1])
                shares.append(f"{cpu} {100 * steal / total:.2f}%")
            print(f"{name:6} steal: {', '.join(shares)}", flush=True)


if __name__ == "__main__":
    main()
