#!/usr/bin/env bash
# CPU cost of napilab's 1-second sampling, side by side with sar and node_exporter in
# the same run.
#
#   make bench-sampling            (or: bash bench/sampling-cost.sh [SECONDS])
#   BASELINE=/path/to/older/napilab bash bench/sampling-cost.sh   (before/after)
#
# All of them run at the same time for SECONDS (default 30) at a 1 s interval:
#  - napilab observe --interval 1s: user+system CPU of its process (wait4's rusage, in
#    microseconds). Its start-up (map, ethtool, kernel config) is paid once, so its
#    per-sample figure is the marginal cost: (run of N+1 samples - run of 2 samples)
#    / (N - 1), the short run's CPU the median of three runs after the long one.
#  - reads only (the floor): the sample-reads example (napilab-probe) runs napilab's
#    own Sampler::sample() like observe (same interval, same thread rescan) and does
#    nothing else: no parsing, no deriving, no output. Measured like napilab (marginal
#    cost), it is what reading exactly what napilab reads costs on this kernel;
#    napilab/floor is the part napilab can still cut.
#  - sar -A 1 N: CPU of sar and its sadc child, total / N (its start-up is negligible).
#  - node_exporter (the distribution's prometheus-node-exporter, default collectors),
#    started by this script on 127.0.0.1 and scraped once a second with curl: its CPU
#    (utime+stime from /proc/PID/stat) over the N scrapes / N, curl's own not counted.
#    It is stopped at the end, also on failure or Ctrl-C.
# Other processes share this machine, so the three run concurrently and see the same
# load; rerun for a second figure. With BASELINE set to another napilab binary (e.g.
# one built before a change), it is measured the same way in the same run, beside the
# current one.
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-30}
BIN=./target/release/napilab
[ -x "$BIN" ] || { echo "build first: make build" >&2; exit 1; }
FLOOR=./target/release/examples/sample-reads
[ -x "$FLOOR" ] || { echo "build the floor arm first: cargo build --release -p napilab-probe --example sample-reads (make bench-sampling does)" >&2; exit 1; }
BASELINE=${BASELINE:-}
[ -z "$BASELINE" ] || [ -x "$BASELINE" ] || { echo "BASELINE=$BASELINE is not an executable napilab" >&2; exit 1; }
command -v sar >/dev/null || { echo "sar is missing: apt-get install sysstat (make deps does)" >&2; exit 1; }
NODE_EXPORTER=$(command -v prometheus-node-exporter || command -v node_exporter || true)
[ -n "$NODE_EXPORTER" ] || { echo "node_exporter is missing: apt-get install prometheus-node-exporter (make deps does)" >&2; exit 1; }
command -v curl >/dev/null || { echo "curl is missing: apt-get install curl" >&2; exit 1; }
tmp=$(mktemp -d)
ne_pid=""
cleanup() {
    if [ -n "$ne_pid" ]; then kill "$ne_pid" 2>/dev/null || true; wait "$ne_pid" 2>/dev/null || true; fi
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# CPU seconds (user+sys) of a command and the children it waited for, from wait4's
# rusage (microseconds; bash `times` rounds to 1 ms, 0.03 ms per sample over 30).
cpu_of() {
    local out=$1; shift
    python3 -c '
import os, subprocess, sys
child = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
_, _, usage = os.wait4(child.pid, 0)
print("%.6f" % (usage.ru_utime + usage.ru_stime))' "$@" > "$out"
}

# The median of three runs of a short command (start-up + 2 samples): the start-up
# varies by about a millisecond from run to run, as much as 30 samples differ.
cpu_of_median3() {
    local out=$1; shift
    for i in 1 2 3; do cpu_of "$out.$i" "$@"; done
    sort -g "$out.1" "$out.2" "$out.3" | sed -n 2p > "$out"
}

# utime+stime of a process in seconds.
proc_cpu() {
    awk -v hz="$(getconf CLK_TCK)" '{ sub(/^.*\) /, ""); printf "%.6f\n", ($12 + $13) / hz }' "/proc/$1/stat"
}

# A free port on 127.0.0.1 for node_exporter (never the default 9100, which a system
# service may hold).
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$NODE_EXPORTER" --web.listen-address="127.0.0.1:$port" >"$tmp/node_exporter.log" 2>&1 &
ne_pid=$!
for _ in $(seq 100); do
    curl -sf "http://127.0.0.1:$port/metrics" -o /dev/null && break
    kill -0 "$ne_pid" 2>/dev/null || { echo "node_exporter did not start:" >&2; cat "$tmp/node_exporter.log" >&2; exit 1; }
    sleep 0.1
done
curl -sf "http://127.0.0.1:$port/metrics" -o "$tmp/metrics" || { echo "node_exporter does not answer on 127.0.0.1:$port" >&2; exit 1; }

echo "sampling for ${N} s: napilab observe --interval 1s, its reads alone (the floor), sar -A 1 ${N} and node_exporter scraped each second, concurrently"
cpu_of "$tmp/napilab_long" "$BIN" observe --for "${N}s" --interval 1s --json &
p1=$!
cpu_of "$tmp/floor_long" "$FLOOR" "$N" 1000 &
p4=$!
cpu_of "$tmp/sar" sar -A 1 "$N" &
p2=$!
p3=""
if [ -n "$BASELINE" ]; then
    cpu_of "$tmp/baseline_long" "$BASELINE" observe --for "${N}s" --interval 1s --json &
    p3=$!
fi
ne_before=$(proc_cpu "$ne_pid")
for i in $(seq "$N"); do
    curl -sf "http://127.0.0.1:$port/metrics" -o /dev/null || echo "scrape $i failed" >&2
    sleep 1
done
ne_after=$(proc_cpu "$ne_pid")
wait $p1 $p2 $p3 $p4
cpu_of_median3 "$tmp/napilab_short" "$BIN" observe --for 1s --interval 1s --json
cpu_of_median3 "$tmp/floor_short" "$FLOOR" 1 1000
if [ -n "$BASELINE" ]; then
    cpu_of_median3 "$tmp/baseline_short" "$BASELINE" observe --for 1s --interval 1s --json
    awk -v n="$N" -v long="$(cat "$tmp/baseline_long")" -v short="$(cat "$tmp/baseline_short")" -v cur_long="$(cat "$tmp/napilab_long")" -v cur_short="$(cat "$tmp/napilab_short")" -v base="$BASELINE" 'BEGIN {
        per = (long - short) / (n - 1); if (per < 0) per = 0;
        cur = (cur_long - cur_short) / (n - 1); if (cur < 0) cur = 0;
        printf "baseline (%s): %.3f ms CPU per 1-second sample", base, per*1000;
        if (per > 0) printf "; current/baseline %.2f", cur/per;
        printf "\n";
    }'
fi

awk -v n="$N" -v long="$(cat "$tmp/napilab_long")" -v short="$(cat "$tmp/napilab_short")" -v sar="$(cat "$tmp/sar")" \
    -v floor_long="$(cat "$tmp/floor_long")" -v floor_short="$(cat "$tmp/floor_short")" \
    -v ne="$(awk -v a="$ne_before" -v b="$ne_after" 'BEGIN {print b - a}')" -v lines="$(grep -vc '^#' "$tmp/metrics")" 'BEGIN {
    per = (long - short) / (n - 1); if (per < 0) per = 0;
    sar_per = sar / n; ne_per = ne / n;
    floor = (floor_long - floor_short) / (n - 1); if (floor < 0) floor = 0;
    printf "napilab: %.1f ms CPU in total for %d samples, %.1f ms once (start-up + 2 samples)\n", long*1000, n+1, short*1000;
    printf "napilab: %.3f ms CPU per 1-second sample (goal: <= 0.5 ms)\n", per*1000;
    printf "reads only (the floor): %.3f ms CPU per 1-second sample (sample-reads: the same reads, nothing else)\n", floor*1000;
    printf "sar -A:  %.1f ms CPU in total, %.3f ms per 1-second sample\n", sar*1000, sar_per*1000;
    printf "node_exporter: %.1f ms CPU for %d scrapes (%d series each), %.3f ms per scrape\n", ne*1000, n, lines, ne_per*1000;
    if (sar_per > 0) printf "ratio napilab/sar per sample: %.2f (goal: <= 0.5)\n", per/sar_per;
    if (ne_per > 0) printf "ratio napilab/node_exporter per sample: %.2f\n", per/ne_per;
    if (floor > 0) printf "ratio napilab/floor per sample: %.2f (what parsing, deriving and output add to the reads)\n", per/floor;
    if (sar_per > 0) printf "ratio floor/sar per sample: %.2f (the best napilab could do reading what it reads)\n", floor/sar_per;
}'
echo "(napilab, the floor and sar: wait4 rusage in us; node_exporter: /proc/PID/stat in 1/CLK_TCK = $(awk -v hz="$(getconf CLK_TCK)" 'BEGIN{printf "%.0f", 1000/hz}') ms ticks; other processes share this machine)"
read -r per_ms ratio_sar < <(awk -v n="$N" -v long="$(cat "$tmp/napilab_long")" -v short="$(cat "$tmp/napilab_short")" -v sar="$(cat "$tmp/sar")" 'BEGIN {
    per = (long - short) / (n - 1); if (per < 0) per = 0; sar_per = sar / n;
    printf "%.3f %s\n", per * 1000, (sar_per > 0 ? sprintf("%.2f", per / sar_per) : "inf") }')
met=$(awk -v p="$per_ms" -v r="$ratio_sar" 'BEGIN { print (p <= 0.5 && r != "inf" && r <= 0.5) ? 1 : 0 }')
echo "rerun: make bench-sampling   (or bash bench/sampling-cost.sh ${N})"
bash bench/verdict.sh bench-sampling "${per_ms} ms CPU per 1-second sample, ${ratio_sar}x sar's" "<= 0.5 ms and <= 0.5x sar" "$met"
