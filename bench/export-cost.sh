#!/usr/bin/env bash
# CPU cost of `napilab export`, with and without --trace, side by side with the
# distribution's prometheus-node-exporter (default collectors), all scraped every second
# in the same run (docs/export.md, "Cost").
#
#   make bench-export            (or: bash bench/export-cost.sh [SECONDS])
#
# Root. Everything runs inside a private namespace pair napilab-bench-export-<pid>-a/-b
# joined by a veth pair (va 10.78.0.1 <-> vb 10.78.0.2, GRO on vb): the three exporters
# listen on b's loopback and a curl loop in b scrapes each once a second with
# Prometheus' Accept header. Phases of SECONDS each (default 30):
#   idle    no traffic;
#   loaded  a ping flood from a to b (every echo crosses vb's NAPI instance);
#   storm   the flood, plus 50 concurrent scrapers hammering napilab export --trace
#           (its sampler keeps its schedule; its CPU/s should stay near `loaded`).
# Per phase and exporter: process CPU seconds per second (user+system from
# /proc/<pid>/stat); for --trace also the BPF programs' run time per second (kernel BPF
# statistics, --bpf-stats), which the kernel charges to whatever the CPU was running.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_PER_PHASE=${1:-30}
BIN=./target/release/napilab
[ "$(id -u)" = 0 ] || { echo "bench-export needs root (namespaces, BPF)" >&2; exit 1; }
[ -x "$BIN" ] || { echo "build first: make build" >&2; exit 1; }
NODE_EXPORTER=$(command -v prometheus-node-exporter || true)
[ -n "$NODE_EXPORTER" ] || { echo "prometheus-node-exporter is missing: make deps installs it" >&2; exit 1; }
command -v curl >/dev/null || { echo "curl is missing: make deps installs it" >&2; exit 1; }

A="napilab-bench-export-$$-a"
B="napilab-bench-export-$$-b"
tmp=$(mktemp -d)
pids=()
cleanup() {
    # The scrape loops are bash -c under ip netns exec: their curl children end with them.
    for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
    ip netns del "$A" 2>/dev/null || true
    ip netns del "$B" 2>/dev/null || true
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

ip netns add "$A"
ip netns add "$B"
for ns in "$A" "$B"; do
    ip netns exec "$ns" sh -ec 'sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1; ip link set lo up'
done
ip link add va netns "$A" type veth peer name vb netns "$B"
ip netns exec "$A" sh -ec 'ip addr add 10.78.0.1/30 dev va; ip link set va up; ethtool -K va tso off gso off >/dev/null'
ip netns exec "$B" sh -ec 'ip addr add 10.78.0.2/30 dev vb; ip link set vb up; ethtool -K vb gro on >/dev/null'

inb() { ip netns exec "$B" "$@"; }

# Background jobs start `ip netns exec` itself (not a shell function, which would fork
# a subshell), so $! is the process: ip execs the program in place.
ip netns exec "$B" "$BIN" export --listen 127.0.0.1:9977 --interval 1s >/dev/null 2>"$tmp/proc.err" &
P_PROC=$!; pids+=($!)
ip netns exec "$B" "$BIN" export --listen 127.0.0.1:9978 --interval 1s --trace --bpf-stats >/dev/null 2>"$tmp/trace.err" &
P_TRACE=$!; pids+=($!)
ip netns exec "$B" "$NODE_EXPORTER" --web.listen-address=127.0.0.1:9100 >/dev/null 2>"$tmp/node.err" &
P_NODE=$!; pids+=($!)
ACCEPT='application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1'
for port in 9977 9978 9100; do
    for _ in $(seq 1 100); do
        inb curl -sf -o /dev/null "http://127.0.0.1:$port/metrics" && break
        sleep 0.1
    done
    inb curl -sf -o /dev/null "http://127.0.0.1:$port/metrics" || { echo "exporter on port $port did not start" >&2; cat "$tmp"/*.err >&2; exit 1; }
done
# The same 1 s scrape of each, one loop per exporter as one Prometheus job per target
# would do (a slow answer from one does not delay the others' scrapes).
for port in 9977 9978 9100; do
    ip netns exec "$B" bash -c "while :; do curl -s -o /dev/null -H 'Accept: $ACCEPT' http://127.0.0.1:$port/metrics; sleep 1; done" &
    pids+=($!)
done

cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
bpf_ns() {  # the --trace exporter's BPF run time so far, from its own metrics
    inb curl -s "http://127.0.0.1:9978/metrics" | awk '/^napilab_exporter_bpf_program_run_seconds_total/ { s += $2 } END { printf "%.9f\n", s }'
}
HZ=$(getconf CLK_TCK)

phase() {  # name: prints CPU/s of each exporter over SECONDS_PER_PHASE
    local name=$1 a b c d
    a=$(cpu_ticks "$P_PROC"); b=$(cpu_ticks "$P_TRACE"); c=$(cpu_ticks "$P_NODE"); d=$(bpf_ns)
    sleep "$SECONDS_PER_PHASE"
    awk -v n="$name" -v s="$SECONDS_PER_PHASE" -v hz="$HZ" \
        -v p0="$a" -v p1="$(cpu_ticks "$P_PROC")" -v t0="$b" -v t1="$(cpu_ticks "$P_TRACE")" \
        -v n0="$c" -v n1="$(cpu_ticks "$P_NODE")" -v b0="$d" -v b1="$(bpf_ns)" -v ratios="$tmp/ratios" 'BEGIN {
        proc = (p1 - p0) / hz / s * 1000; trace = (t1 - t0) / hz / s * 1000;
        node = (n1 - n0) / hz / s * 1000; bpf = (b1 - b0) / s * 1000;
        printf "%-7s %12.2f %12.2f %12.2f %14.2f %12.2f", n, proc, trace, bpf, trace + bpf, node;
        if (node > 0) printf "   %6.2f %6.2f", proc / node, (trace + bpf) / node;
        printf "\n";
        if (node > 0) printf "%s %.2f\n", n, (trace + bpf) / node >> ratios;
    }'
}

echo "napilab export vs prometheus-node-exporter, scraped every 1 s, ${SECONDS_PER_PHASE} s per phase (ms of CPU per second)"
printf "%-7s %12s %12s %12s %14s %12s   %6s %6s\n" phase "napilab" "napilab" "BPF run" "napilab" "node_exp." "ratio" "ratio"
printf "%-7s %12s %12s %12s %14s %12s   %6s %6s\n" "" "(proc)" "(--trace)" "(--trace)" "(trace+BPF)" "(default)" "proc" "trace"
phase idle
ip netns exec "$A" ping -q -f -w $((2 * SECONDS_PER_PHASE + 10)) 10.78.0.2 >/dev/null 2>&1 &
pids+=($!)
sleep 1
phase loaded
storm=()
for i in $(seq 1 50); do
    ip netns exec "$B" bash -c "end=\$((SECONDS + $SECONDS_PER_PHASE + 2)); while [ \$SECONDS -lt \$end ]; do curl -s -o /dev/null -H 'Accept: $ACCEPT' http://127.0.0.1:9978/metrics; done" &
    storm+=($!); pids+=($!)
done
# The sampler's schedule under the storm: its samples counter and last-sample time,
# read from two scrapes (so the span does not depend on how long a scrape waited).
sampled() { inb curl -s http://127.0.0.1:9978/metrics | awk '/^napilab_exporter_samples_total / { n = $2 } /^napilab_exporter_last_sample_timestamp_seconds / { t = $2 } END { printf "%s %s\n", n, t }'; }
read -r n0 t0 < <(sampled)
phase storm
read -r n1 t1 < <(sampled)
for p in "${storm[@]}"; do wait "$p" 2>/dev/null || true; done
awk -v n0="$n0" -v n1="$n1" -v t0="$t0" -v t1="$t1" 'BEGIN {
    printf "storm: the --trace exporter sampled %d times in %.1f s under 50 concurrent scrapers (interval 1 s): %.2f samples/s\n", n1 - n0, t1 - t0, (n1 - n0) / (t1 - t0) }'
echo "(napilab --trace's CPU/s in the storm row includes serving the 50 scrapers)"
echo "ratio = napilab / node_exporter (goal: napilab's full export <= node_exporter's, ratio <= 1)"
echo "rerun: make bench-export   (or bash bench/export-cost.sh ${SECONDS_PER_PHASE})"
# The verdict on the worst phase of the full export (--trace with its BPF run time).
if [ -s "$tmp/ratios" ]; then
    read -r worst_phase worst < <(sort -k2 -g "$tmp/ratios" | tail -1)
    met=$(awk -v r="$worst" 'BEGIN { print (r <= 1) ? 1 : 0 }')
    bash bench/verdict.sh bench-export "napilab --trace (with BPF) / node_exporter CPU ${worst} at worst (${worst_phase})" "<= 1" "$met"
else
    bash bench/verdict.sh bench-export "no ratio: node_exporter used no measurable CPU" "<= 1" 0
fi
