#!/usr/bin/env python3
"""A stall of known length in the lab and in the twin (docs/sim.md, "Host stalls").

Runs scenarios/bench-stall-replay.toml (threaded, a light and a heavy load as
fractions of the capacity probe) in the lab twice, without and with a hog: a process
pinned to the server's CPU that is busy BUSY_MS every PERIOD_MS (an ordinary
SCHED_OTHER task, as the host's own work is). Then the twin at the lab's rates with
PROFILE, without stalls and with a `[[stalls]]` table of the hog's rate and length
on that CPU. Prints each p99 side by side and, last, the twin's p99 under the hog
over the lab's at each load.

usage: stall-replay.py NAPILAB PROFILE RESULTS [BUSY_MS PERIOD_MS]
"""

import json
import math
import multiprocessing
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCENARIO = ROOT / "scenarios" / "bench-stall-replay.toml"
# The goal (docs/hosts.md): the twin's p99 under the hog within this share of the lab's.
GOAL = 0.15
# A hog longer than this would not be a stall (and bounds the busy loop).
MAX_BUSY_MS = 50.0


def hog(cpu, busy_s, period_s, until, bursts):
    """Busy `busy_s` every `period_s` on `cpu` until the monotonic time `until`."""
    os.sched_setaffinity(0, {cpu})
    while time.monotonic() < until:
        start = time.monotonic()
        while time.monotonic() - start < busy_s:
            pass
        with bursts.get_lock():
            bursts.value += 1
        time.sleep(max(0.0, period_s - (time.monotonic() - start)))


def lab_run(napilab, scenario, out):
    """One `napilab lab run` of `scenario`; its run.json."""
    done = subprocess.run(
        [napilab, "lab", "run", str(scenario), "--out", str(out)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        sys.exit(f"stall-replay: napilab lab run failed:\n{done.stderr[-2000:]}")
    record = re.search(r"record: (\S+)", done.stdout + done.stderr)
    if not record:
        sys.exit("stall-replay: napilab lab run printed no record path")
    return json.loads(Path(record.group(1)).read_text())


def server_cpu(scenario_text):
    found = re.search(r"server_cpus\s*=\s*\[(\d+)", scenario_text)
    return int(found.group(1)) if found else 1


def points(record):
    """(requested rate, p99 us) of the threaded configuration, in run order."""
    conf = record["configurations"][0]
    return [
        (p["requested_qps"], p["latency"]["p99_us"])
        for p in conf["requests"]["points"]
    ]


def by_rate(pts):
    out = {}
    for rate, p99 in pts:
        out.setdefault(round(rate), []).append(p99)
    return out


def twin_run(napilab, scenario, profile):
    done = subprocess.run(
        [napilab, "sim", "run", str(scenario), "--profile", str(profile), "--json", "--no-report"],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        sys.exit(f"stall-replay: napilab sim run failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout)


def profile_file(name):
    path = Path(name)
    if path.is_file():
        return path
    shipped = ROOT / "crates" / "napilab-sim" / "profiles" / f"{name}.toml"
    if shipped.is_file():
        return shipped
    sys.exit(f"stall-replay: no profile {name!r}: give a file or a shipped name")


def stalls_table(cpu, per_s, busy_ms):
    """The hog as the stall probe would record it: one log2 bucket of lengths."""
    bucket = int(math.log2(busy_ms * 1e6))
    counts = [0] * 25
    counts[min(bucket, 24)] = 100
    return (
        "\n[[stalls]]\n"
        f"cpu = {cpu}\nseconds = {100.0 / per_s}\nper_s = {per_s}\n"
        f"stalled_share = {per_s * busy_ms / 1000.0}\nsteal_share = 0.0\n"
        f"longest_ns = {int(busy_ms * 1e6)}\ncounts = {counts}\n"
    )


def main():
    if len(sys.argv) not in (4, 6):
        sys.exit(__doc__)
    napilab, profile, results = sys.argv[1], profile_file(sys.argv[2]), Path(sys.argv[3])
    busy_ms, period_ms = (float(sys.argv[4]), float(sys.argv[5])) if len(sys.argv) == 6 else (1.5, 100.0)
    if not 0.0 < busy_ms <= MAX_BUSY_MS or period_ms <= busy_ms:
        sys.exit(f"stall-replay: BUSY_MS must be in (0, {MAX_BUSY_MS}] and below PERIOD_MS")
    text = SCENARIO.read_text()
    cpu = server_cpu(text)
    out = results / "stall-replay"
    out.mkdir(parents=True, exist_ok=True)

    print(f"lab without the hog ({SCENARIO.name})", flush=True)
    quiet = lab_run(napilab, SCENARIO, out / "lab-quiet")
    # The same rates for the hog's run and the twin: the quiet run's, from its
    # capacity probe (a probe under the hog would give others).
    rates = sorted({round(rate) for rate, _ in points(quiet)})
    fixed = out / "fixed-rates.toml"
    fixed_text = re.sub(r"(?m)^loads_of_capacity\s*=.*$", "", text)
    fixed.write_text(
        fixed_text.replace("[requests]", "[requests]\nloads_qps = " + str(rates), 1)
    )
    print(f"lab with the hog on CPU {cpu}: {busy_ms} ms every {period_ms} ms", flush=True)
    bursts = multiprocessing.Value("l", 0)
    # Bounded: the lab run of this scenario takes well under a minute after its probes.
    until = time.monotonic() + 300.0
    proc = multiprocessing.Process(
        target=hog, args=(cpu, busy_ms / 1000.0, period_ms / 1000.0, until, bursts), daemon=True
    )
    started = time.monotonic()
    proc.start()
    try:
        loaded = lab_run(napilab, fixed, out / "lab-hog")
    finally:
        proc.terminate()
        proc.join(5)
    per_s = bursts.value / (time.monotonic() - started)

    with_stalls = out / "profile-with-hog.toml"
    with_stalls.write_text(profile.read_text() + stalls_table(cpu, per_s, busy_ms))
    twin_quiet = twin_run(napilab, fixed, profile)
    twin_hog = twin_run(napilab, fixed, with_stalls)

    lab_q, lab_h = by_rate(points(quiet)), by_rate(points(loaded))
    tw_q, tw_h = by_rate(points(twin_quiet)), by_rate(points(twin_hog))
    fmt = lambda v: "/".join(f"{x:.0f}" for x in v)
    print(f"hog: {bursts.value} bursts, {per_s:.1f} a second; twin profile {profile}")
    print(f"{'requests/s':>11}  {'lab p99':>12}  {'lab+hog p99':>12}  {'twin p99':>10}  {'twin+hog p99':>13}  us")
    ratios, met = [], True
    for rate in rates:
        print(
            f"{rate:>11.0f}  {fmt(lab_q.get(rate, [])):>12}  {fmt(lab_h.get(rate, [])):>12}  "
            f"{fmt(tw_q.get(rate, [])):>10}  {fmt(tw_h.get(rate, [])):>13}"
        )
        lab = sum(lab_h.get(rate, [0])) / max(1, len(lab_h.get(rate, [])))
        twin = sum(tw_h.get(rate, [0])) / max(1, len(tw_h.get(rate, [])))
        ratios.append(f"{rate:.0f}/s {twin / lab:.2f}" if lab > 0 else f"{rate:.0f}/s n/a")
        met = met and lab > 0 and abs(twin / lab - 1.0) <= GOAL
    verdict = "met" if met else "not met"
    print(
        "stall-replay: twin/lab p99 under the hog: "
        + ", ".join(ratios)
        + f" (goal: within {GOAL:.0%} at each load: {verdict})"
    )


if __name__ == "__main__":
    main()
