#!/usr/bin/env python3
"""Soak of `napilab export`: hours of sampling while the host changes and 50 scrapers poll.

    make soak-export HOURS=2          (or: python3 bench/soak-export.py --hours 2 --out DIR)

Root. Everything happens in a network namespace this script creates
(napilab-soak-<pid>) and in child namespaces it creates and deletes
(napilab-soak-<pid>-c<k>); nothing outside them is touched, and all of them are removed
on exit, Ctrl-C or SIGTERM.

In that namespace it runs one `napilab export` per --intervals entry (default 1s and
100ms, proc tier; --trace adds the BPF tier) and, for each exporter, --scrapers HTTP
clients (default 50) that each scrape /metrics every --scrape-every seconds (half ask
for OpenMetrics, half for text 0.0.4) and check each answer is complete. Meanwhile:

  churn  every --churn-every seconds a child namespace and a veth pair into it are
         created (the namespace's end gets GRO, so its NAPI instance polls), a short
         ping burst crosses it, and the oldest pair and namespace are deleted (at most
         three alive): devices, ifindexes and NAPI ids keep appearing and vanishing;
  load   one busy loop at --cpu-duty of one CPU (default 30%).

Every second it writes one row per exporter to DIR/soak.csv: elapsed seconds, the
exporter, its RSS, its CPU seconds per second, scrapes that succeeded and failed in that
second, series in the latest answer, devices alive, and its live heap (its own
napilab_exporter_heap_allocated_bytes from the latest text answer). At the end (or on Ctrl-C) it plots
RSS and CPU over time (DIR/rss.svg, DIR/cpu.svg, by the soak_plot example, plotters) and
prints a verdict per exporter from the end of the warm-up (the first 10% of the run) to
the end: "flat after warm-up" when the growth of its RSS and of its live heap, each
extrapolated to 24 hours, is under 5% of that stretch's mean, and the scrape errors,
which must be zero. The growth is the Theil-Sen slope (the median of the slopes between
every two of the stretch's per-minute medians), not a least-squares line: RSS moves in
allocator steps and breathes in a band, and neither a late step nor half a band may
decide; a steady leak moves every pair and the median with it. Only growth counts: memory
given back is not a leak. The live heap (jemalloc's allocated bytes) is what a leak grows
whatever the allocator keeps. The least-squares line is printed beside it. (Criterion
fixed on 2026-11-27, after soak run 6 and before run 7; runs 4-6 were judged over the
second half only.)

--report CSV re-plots and re-judges an existing (possibly still growing) CSV.
"""

import argparse
import csv
import http.client
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time

ACCEPT_OM = "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5"
ACCEPT_TEXT = "text/plain;version=0.0.4"
FIELDS = ["t_s", "exporter", "rss_bytes", "rss_anon_bytes", "rss_file_bytes", "cpu_s_per_s",
          "scrapes_ok", "scrape_errors", "series", "devices", "heap_allocated_bytes"]
FLAT_FRACTION_PER_DAY = 0.05
WARM_UP_FRACTION = 0.10
HEAP_LINE = re.compile(rb"^napilab_exporter_heap_allocated_bytes ([0-9.e+]+)$", re.M)


def log(msg):
    print(f"soak-export: {msg}", flush=True)


def run(cmd, check=True):
    """Runs a command, quietly; raises with its stderr on failure when check."""
    p = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if check and p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {p.stderr.strip()}")
    return p.returncode == 0


# ---------------------------------------------------------------- the outer process


def outer(args):
    if os.geteuid() != 0:
        sys.exit("soak-export needs root (network namespaces): run it with sudo")
    if not os.access(args.bin, os.X_OK):
        sys.exit(f"{args.bin} is missing: build first (make build)")
    os.makedirs(args.out, exist_ok=True)
    ns = f"napilab-soak-{os.getpid()}"
    run(["ip", "netns", "add", ns])
    inner = None

    def stop(_sig, _frame):
        # The inner process stops its exporters, writes its summary and exits.
        if inner and inner.poll() is None:
            inner.send_signal(signal.SIGTERM)

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    try:
        run(["ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up"])
        # nsenter --net, not `ip netns exec`: the latter gives the inner process a mount
        # namespace of its own, where the child namespaces the churn creates with
        # `ip netns add` are not seen by the next `ip` command. The exporters themselves
        # start under `ip netns exec`, so they read this namespace's /sys.
        cmd = ["nsenter", f"--net=/run/netns/{ns}", sys.executable, os.path.abspath(__file__),
               "--inner", ns] + sys.argv[1:]
        inner = subprocess.Popen(cmd)
        while inner.poll() is None:
            try:
                inner.wait()
            except KeyboardInterrupt:
                stop(None, None)
        rc = inner.returncode
    finally:
        cleanup_namespaces(ns)
    sys.exit(rc)


def cleanup_namespaces(ns):
    names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    for line in names.splitlines():
        name = line.split()[0] if line.split() else ""
        if name.startswith(ns + "-"):
            run(["ip", "netns", "del", name], check=False)
    run(["ip", "netns", "del", ns], check=False)


# ---------------------------------------------------------------- the inner process


class Counters:
    def __init__(self):
        self.lock = threading.Lock()
        self.ok = 0
        self.errors = 0
        self.series = 0
        # The exporter's own live heap from its latest text answer (empty when absent).
        self.heap = ""
        self.first_errors = []

    def take(self):
        with self.lock:
            ok, err = self.ok, self.errors
            self.ok = self.errors = 0
            return ok, err, self.series, self.heap


def scraper(port, om, every, counters, stop):
    # Staggered so the fifty do not arrive in lock-step.
    stop.wait(random.uniform(0, every))
    while not stop.is_set():
        began = time.monotonic()
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            conn.request("GET", "/metrics", headers={"Accept": ACCEPT_OM if om else ACCEPT_TEXT})
            resp = conn.getresponse()
            body = resp.read()  # raises IncompleteRead if shorter than Content-Length
            conn.close()
            if resp.status != 200:
                raise RuntimeError(f"status {resp.status}")
            if om and not body.endswith(b"# EOF\n"):
                raise RuntimeError("OpenMetrics answer without # EOF")
            if b"napilab_exporter_samples_total" not in body:
                raise RuntimeError("answer without the exporter's own families")
            with counters.lock:
                counters.ok += 1
                if not om:
                    # Series in the text format (OpenMetrics adds # EOF and _created).
                    counters.series = (body.count(b"\n") - body.count(b"\n#")
                                       - (1 if body.startswith(b"#") else 0))
                    heap = HEAP_LINE.search(body)
                    if heap:
                        counters.heap = heap.group(1).decode()
        except Exception as e:  # any failure is a scrape error, counted and kept
            with counters.lock:
                counters.errors += 1
                if len(counters.first_errors) < 20:
                    counters.first_errors.append(f"{time.strftime('%H:%M:%S')} port {port}: {e!r}")
        stop.wait(max(0.0, every - (time.monotonic() - began)))


def churn(ns, every, stop, alive_count):
    """Creates a child namespace + veth pair per step, deletes the oldest (three alive)."""
    alive = []
    k = 0
    while not stop.is_set():
        k += 1
        child = f"{ns}-c{k}"
        a, b = f"sk{k % 10000}", f"sp{k % 10000}"
        base4 = (k % 4096) * 4  # a /30 per step, reused after 4096 steps
        net = f"10.90.{base4 // 256}.{base4 % 256}"
        try:
            run(["ip", "netns", "add", child])
            run(["ip", "link", "add", a, "type", "veth", "peer", "name", b, "netns", child])
            o = net.split(".")
            base = int(o[3])
            here = f"{o[0]}.{o[1]}.{o[2]}.{base + 1}"
            there = f"{o[0]}.{o[1]}.{o[2]}.{base + 2}"
            run(["ip", "addr", "add", f"{here}/30", "dev", a])
            run(["ip", "link", "set", a, "up"])
            run(["ethtool", "-K", a, "gro", "on"], check=False)
            run(["ip", "netns", "exec", child, "sh", "-ec",
                 f"ip link set lo up; ip addr add {there}/30 dev {b}; ip link set {b} up; "
                 f"ethtool -K {b} gro on >/dev/null 2>&1 || true"])
            alive.append((child, a))
            # A short burst each way: both ends' NAPI instances poll.
            run(["ip", "netns", "exec", child, "ping", "-q", "-c", "20", "-i", "0.01", "-W", "1",
                 here], check=False)
            run(["ping", "-q", "-c", "20", "-i", "0.01", "-W", "1", there], check=False)
        except RuntimeError as e:
            log(f"churn step {k}: {e}")
        while len(alive) > 3:
            old_ns, old_dev = alive.pop(0)
            run(["ip", "link", "del", old_dev], check=False)
            run(["ip", "netns", "del", old_ns], check=False)
        alive_count[0] = len(alive)
        stop.wait(every)
    for old_ns, old_dev in alive:
        run(["ip", "link", "del", old_dev], check=False)
        run(["ip", "netns", "del", old_ns], check=False)


BUSY = """
import time, sys
duty = float(sys.argv[1])
while True:
    end = time.monotonic() + 0.1 * duty
    while time.monotonic() < end:
        pass
    time.sleep(0.1 * (1 - duty))
"""


def proc_rss_cpu(pid):
    """(RSS, its anonymous part, its file-backed part, CPU seconds) of a process.

    RSS splits in two: anonymous memory (heap, thread arenas, stacks: what a leak grows)
    and file-backed pages (mostly the binary's own code, paged in as code paths first
    run; the kernel can drop them and they are shared with the page cache)."""
    kb = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "RssAnon", "RssFile", "RssShmem"):
                kb[key] = int(value.split()[0])
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    ticks = int(fields[11]) + int(fields[12])  # utime + stime
    file_kb = kb.get("RssFile", 0) + kb.get("RssShmem", 0)
    return (kb.get("VmRSS", 0) * 1024, kb.get("RssAnon", 0) * 1024, file_kb * 1024,
            ticks / os.sysconf("SC_CLK_TCK"))


def wait_serving(port, proc, deadline_s=30):
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if proc.poll() is not None:
            return False
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            conn.request("GET", "/healthz")
            if conn.getresponse().status == 200:
                return True
        except OSError:
            pass
        time.sleep(0.2)
    return False


def inner(args):
    ns = args.inner
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    procs = []
    exporters = []
    for i, interval in enumerate(args.intervals.split(",")):
        port = args.port + i
        cmd = ["ip", "netns", "exec", ns, args.bin, "export", "--listen", f"127.0.0.1:{port}",
               "--interval", interval]
        if args.trace:
            cmd.append("--trace")
        err = open(os.path.join(args.out, f"export-{interval}.err"), "w")
        # Own session: a Ctrl-C on the terminal reaches this script, which stops the
        # exporters itself after its last row, instead of them dying first.
        p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)
        procs.append(p)
        exporters.append({"interval": interval, "port": port, "proc": p, "counters": Counters()})
    threads = []
    busy = None
    failed = None
    try:
        for e in exporters:
            if not wait_serving(e["port"], e["proc"]):
                raise RuntimeError(f"the exporter at {e['interval']} did not start: "
                                   f"see {args.out}/export-{e['interval']}.err")
        for e in exporters:
            for s in range(args.scrapers):
                t = threading.Thread(target=scraper, daemon=True,
                                     args=(e["port"], s % 2 == 0, args.scrape_every,
                                           e["counters"], stop))
                t.start()
                threads.append(t)
        alive = [0]
        if args.churn_every > 0:
            t = threading.Thread(target=churn, args=(ns, args.churn_every, stop, alive))
            t.start()
            threads.append(t)
        if args.cpu_duty > 0:
            busy = subprocess.Popen([sys.executable, "-c", BUSY, str(args.cpu_duty)],
                                    start_new_session=True)
        log(f"namespace {ns}; exporters "
            + ", ".join(f"{e['interval']} (pid {e['proc'].pid}, port {e['port']})" for e in exporters)
            + f"; {args.scrapers} scrapers each every {args.scrape_every}s; churn every "
            f"{args.churn_every}s; busy loop {args.cpu_duty:.0%}; {args.hours} h; rows in {args.out}/soak.csv")
        csv_path = os.path.join(args.out, "soak.csv")
        with open(csv_path, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(FIELDS)
            start = time.monotonic()
            last_cpu = {}
            next_row = start + 1.0
            while not stop.is_set() and time.monotonic() - start < args.hours * 3600:
                if stop.wait(max(0.0, next_row - time.monotonic())):
                    break
                next_row += 1.0
                now = time.monotonic()
                with open("/proc/self/net/dev") as dev:  # this namespace's devices
                    devices = len(dev.readlines()) - 2
                for e in exporters:
                    if e["proc"].poll() is not None:
                        raise RuntimeError(f"the exporter at {e['interval']} exited with "
                                           f"status {e['proc'].returncode}")
                    rss, anon, filed, cpu = proc_rss_cpu(e["proc"].pid)
                    prev = last_cpu.get(e["interval"])
                    last_cpu[e["interval"]] = (now, cpu)
                    rate = (cpu - prev[1]) / (now - prev[0]) if prev else 0.0
                    ok, err, series, heap = e["counters"].take()
                    w.writerow([f"{now - start:.1f}", e["interval"], rss, anon, filed, f"{rate:.4f}",
                                ok, err, series, devices, heap])
                f.flush()
    except RuntimeError as e:
        failed = str(e)
        log(failed)
    finally:
        stop.set()
        if busy:
            busy.terminate()
            busy.wait()
        for p in procs:
            if p.poll() is None:
                p.terminate()
        for p in procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
        for t in threads:
            t.join(timeout=30)
    for e in exporters:
        for line in e["counters"].first_errors:
            log(f"scrape error: {line}")
    ok = report(os.path.join(args.out, "soak.csv"), args.out, args.plot_bin)
    if failed:
        sys.exit(1)
    sys.exit(0 if ok else 2)


# ---------------------------------------------------------------- verdict and plot


def fit_slope(xs, ys):
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx == 0:
        return 0.0, my
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx, my


def per_minute_medians(xs, ys):
    minutes = {}
    for x, y in zip(xs, ys):
        minutes.setdefault(int(x // 60), []).append(y)
    return [(60 * m + 30, sorted(v)[len(v) // 2]) for m, v in sorted(minutes.items())]


def theil_sen_slope(points):
    """The median of the slopes between every two points (robust to steps that move
    fewer than about 29% of the pairs)."""
    slopes = sorted(
        (y2 - y1) / (x2 - x1)
        for i, (x1, y1) in enumerate(points)
        for x2, y2 in points[i + 1 :]
        if x2 != x1
    )
    if not slopes:
        return 0.0
    mid = len(slopes) // 2
    return slopes[mid] if len(slopes) % 2 else (slopes[mid - 1] + slopes[mid]) / 2


class Growth:
    """The Theil-Sen growth of a series over a stretch, and whether it is flat: growth
    extrapolated to a day under FLAT_FRACTION_PER_DAY of the stretch's mean."""

    def __init__(self, slope_per_s, mean):
        self.slope_per_s = slope_per_s
        self.mean = mean
        self.flat = slope_per_s * 86400 < FLAT_FRACTION_PER_DAY * mean

    def describe(self):
        per_day = self.slope_per_s * 86400 / self.mean if self.mean else 0.0
        return (f"{self.slope_per_s * 3600 / 1024:+.1f} KB/h ({per_day:+.2%} of {self.mean / 2**20:.2f} MB "
                f"per day, limit {FLAT_FRACTION_PER_DAY:.0%})")


def growth_after_warm_up(xs, ys, warm_up_end):
    stretch = [(x, y) for x, y in zip(xs, ys) if x >= warm_up_end]
    if len(stretch) < 2:
        return Growth(0.0, 0.0)
    mean = sum(y for _, y in stretch) / len(stretch)
    return Growth(theil_sen_slope(per_minute_medians(*zip(*stretch))), mean)


def report(csv_path, out, plot_bin):
    rows = {}
    with open(csv_path) as f:
        for r in csv.DictReader(f):
            rows.setdefault(r["exporter"], []).append(r)
    all_ok = True
    lines = []
    for name, rs in rows.items():
        if len(rs) < 20:
            lines.append(f"{name}: only {len(rs)} s recorded, no verdict")
            all_ok = False
            continue
        t = [float(r["t_s"]) for r in rs]
        rss = [int(r["rss_bytes"]) for r in rs]
        anon = [int(r.get("rss_anon_bytes") or 0) for r in rs]
        warm_up_end = t[-1] * WARM_UP_FRACTION
        rss_growth = growth_after_warm_up(t, rss, warm_up_end)
        verdicts = [rss_growth.flat]
        heap_pairs = [(x, float(r["heap_allocated_bytes"])) for x, r in zip(t, rs)
                      if r.get("heap_allocated_bytes")]
        heap_text = ""
        if heap_pairs:
            heap_growth = growth_after_warm_up(*zip(*heap_pairs), warm_up_end)
            verdicts.append(heap_growth.flat)
            heap_text = (f"; live heap {heap_pairs[0][1] / 2**20:.2f} -> {heap_pairs[-1][1] / 2**20:.2f} MB, "
                         f"growth {heap_growth.describe()}")
        flat = all(verdicts)
        least_squares, _ = fit_slope(*zip(*[(x, y) for x, y in zip(t, rss) if x >= warm_up_end]))
        anon_slope, _ = fit_slope(*zip(*[(x, y) for x, y in zip(t, anon) if x >= warm_up_end]))
        errors = sum(int(r["scrape_errors"]) for r in rs)
        scrapes = sum(int(r["scrapes_ok"]) for r in rs)
        cpu = [float(r["cpu_s_per_s"]) for r in rs[1:]]
        series = [int(r["series"]) for r in rs if int(r["series"]) > 0]
        warm = rss[min(len(rss) - 1, int(len(rss) * WARM_UP_FRACTION))]
        lines.append(
            f"{name}: {t[-1] / 3600:.2f} h; RSS {rss[0] / 2**20:.2f} MB at start, "
            f"{warm / 2**20:.2f} MB after warm-up ({WARM_UP_FRACTION:.0%} of the run), {rss[-1] / 2**20:.2f} MB last, "
            f"max {max(rss) / 2**20:.2f} MB; growth after warm-up (Theil-Sen over per-minute medians): "
            f"RSS {rss_growth.describe()} (least-squares {least_squares * 3600 / 1024:+.1f} KB/h; anonymous part "
            f"{anon[min(len(anon) - 1, int(len(anon) * WARM_UP_FRACTION))] / 2**20:.2f} -> {anon[-1] / 2**20:.2f} MB, "
            f"fit {anon_slope * 3600 / 1024:+.1f} KB/h){heap_text}: "
            + ("flat after warm-up" if flat else "NOT flat after warm-up")
            + f"; CPU {sum(cpu) / max(1, len(cpu)) * 1000:.1f} ms/s mean; "
            f"scrapes {scrapes} ok, {errors} failed; series per answer "
            f"{min(series) if series else 0}-{max(series) if series else 0}")
        all_ok = all_ok and flat and errors == 0
    if plot_bin and os.access(plot_bin, os.X_OK):
        p = subprocess.run([plot_bin, csv_path, out], capture_output=True, text=True)
        lines.append(p.stdout.strip() if p.returncode == 0 else f"plot failed: {p.stderr.strip()}")
    else:
        lines.append(f"no plot: {plot_bin} is not built (cargo build --release -p napilab --example soak_plot)")
    with open(os.path.join(out, "summary.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    for line in lines:
        log(line)
    return all_ok


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    repo = os.path.dirname(here)
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hours", type=float, default=2.0)
    ap.add_argument("--intervals", default="1s,100ms", help="one exporter per interval")
    ap.add_argument("--scrapers", type=int, default=50, help="scrapers per exporter")
    ap.add_argument("--scrape-every", type=float, default=1.0, help="seconds between one scraper's scrapes")
    ap.add_argument("--churn-every", type=float, default=2.0, help="seconds between churn steps (0: none)")
    ap.add_argument("--cpu-duty", type=float, default=0.3, help="busy-loop share of one CPU (0: none)")
    ap.add_argument("--trace", action="store_true", help="export with the BPF tier too")
    ap.add_argument("--port", type=int, default=9981)
    ap.add_argument("--out", default=os.path.join(repo, "results", "soak-export"))
    ap.add_argument("--bin", default=os.path.join(repo, "target", "release", "napilab"))
    ap.add_argument("--plot-bin", default=os.path.join(repo, "target", "release", "examples", "soak_plot"))
    ap.add_argument("--report", metavar="CSV", help="only re-judge and re-plot CSV (into its directory)")
    ap.add_argument("--inner", help=argparse.SUPPRESS)
    args = ap.parse_args()
    args.out = os.path.abspath(args.out)
    args.bin = os.path.abspath(args.bin)
    if args.report:
        sys.exit(0 if report(args.report, os.path.dirname(os.path.abspath(args.report)), args.plot_bin) else 2)
    if args.inner:
        inner(args)
    else:
        outer(args)


if __name__ == "__main__":
    main()
