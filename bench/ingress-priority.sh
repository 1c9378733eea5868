#!/bin/sh
# Ingress priority with stock kernel mechanisms (docs/studies.md#ingress-qos-study and docs/kernel.md LAB-3), A/B in
# one run: real-time round-trip latency under a best-effort UDP flood, with both RX
# queues' NAPI threads on one CPU at equal priority (A: `napilab tune apply threaded`)
# and with the RT queue's thread SCHED_FIFO (B: `napilab tune apply ingress-priority`).
#
# Traffic stays inside two namespaces this script creates (napilab-bench-<pid>-s/-r,
# veth va <-> vb, two queues); they, the journals and all processes are removed on
# exit, also on failure or Ctrl-C. Needs root, 2+ CPUs. Bounded: DUR seconds per run
# (default 10), two runs.
#
# Steering: veth delivers what va sends on TX queue i to vb's RX queue i; XPS on va
# maps the RT prober's CPU to TX queue 0 and the flooder's CPU to TX queue 1, so RT
# lands on vb rx-0 and BE on vb rx-1. Both NAPI threads share NAPI_CPU with the RT
# prober and echo server, which run SCHED_FIFO 70 in both runs (only the NAPI thread
# priority differs).
#
#   sudo bench/ingress-priority.sh            # DUR=10 RATE=1000
set -eu

DUR=${DUR:-10}
RATE=${RATE:-1000}
NAPI_CPU=${NAPI_CPU:-1}
FLOOD_CPU=${FLOOD_CPU:-0}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
S=napilab-bench-$$-s
R=napilab-bench-$$-r
JDIR=$(mktemp -d /tmp/napilab-bench-$$-journal.XXXXXX)
PIDS=""

if [ "$(id -u)" != 0 ]; then
    echo "SKIPPED ingress-priority: needs root (network namespaces, SCHED_FIFO)"
    exit 0
fi
if [ "$(nproc)" -lt 2 ]; then
    echo "SKIPPED ingress-priority: needs 2 CPUs"
    exit 0
fi

cleanup() {
    for p in $PIDS; do kill "$p" 2>/dev/null || true; done
    # Traffic started inside a measurement (a subshell) runs in our namespaces only.
    for ns in "$S" "$R"; do
        for p in $(ip netns pids "$ns" 2>/dev/null); do kill "$p" 2>/dev/null || true; done
    done
    wait 2>/dev/null || true
    if ip netns list | grep -q "^$R"; then
        ip netns exec "$R" env NAPILAB_JOURNAL_DIR="$JDIR" "$NAPILAB" tune revert >/dev/null 2>&1 || true
    fi
    ip netns del "$S" 2>/dev/null || true
    ip netns del "$R" 2>/dev/null || true
    rm -rf "$JDIR"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

cd "$ROOT"
cargo build -q --release -p napilab --bin napilab
cargo build -q --release -p napilab-tune --example rt_latency
NAPILAB=$ROOT/target/release/napilab
TRAFFIC=$ROOT/target/release/examples/rt_latency

ip netns add "$S"
ip netns add "$R"
for ns in "$S" "$R"; do
    ip netns exec "$ns" sh -c 'sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1; ip link set lo up'
done
ip link add va netns "$S" numtxqueues 2 numrxqueues 2 type veth peer name vb netns "$R" numtxqueues 2 numrxqueues 2
ip -n "$S" addr add 10.78.0.1/30 dev va
ip -n "$R" addr add 10.78.0.2/30 dev vb
ip -n "$S" link set va up
ip -n "$R" link set vb up
# GRO on vb gives it NAPI instances; the sender needs TSO/GSO off (docs/kernel.md#veth).
ip netns exec "$R" ethtool -K vb gro on >/dev/null
ip netns exec "$S" ethtool -K va tso off gso off >/dev/null
mask() { printf '%x' $((1 << $1)); }
ip netns exec "$S" sh -c "echo $(mask "$NAPI_CPU") > /sys/class/net/va/queues/tx-0/xps_cpus; echo $(mask "$FLOOD_CPU") > /sys/class/net/va/queues/tx-1/xps_cpus"
MAC_B=$(ip netns exec "$R" cat /sys/class/net/vb/address)
MAC_A=$(ip netns exec "$S" cat /sys/class/net/va/address)
ip -n "$S" neigh replace 10.78.0.2 lladdr "$MAC_B" dev va nud permanent
ip -n "$R" neigh replace 10.78.0.1 lladdr "$MAC_A" dev vb nud permanent

tune() { ip netns exec "$R" env NAPILAB_JOURNAL_DIR="$JDIR" "$NAPILAB" tune "$@"; }

# One measurement: prints the prober's line.
measure() {
    ip netns exec "$R" chrt -f 70 taskset -c "$NAPI_CPU" "$TRAFFIC" echo --bind 10.78.0.2:7000 --secs $((DUR + 5)) &
    PIDS="$PIDS $!"
    ip netns exec "$S" taskset -c "$FLOOD_CPU" "$TRAFFIC" flood --to 10.78.0.2:9 --secs $((DUR + 2)) 2>/dev/null &
    PIDS="$PIDS $!"
    sleep 1
    ip netns exec "$S" chrt -f 70 taskset -c "$NAPI_CPU" "$TRAFFIC" probe --to 10.78.0.2:7000 --rate "$RATE" --secs "$DUR"
    for p in $PIDS; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    PIDS=""
}

rxq() { ip netns exec "$R" ethtool -S vb | awk -v q="rx_queue_$1_xdp_packets:" '$1 == q {print $2}'; }

echo "A: both vb NAPI threads on CPU $NAPI_CPU, SCHED_OTHER (napilab tune apply threaded --dev vb --cpus $NAPI_CPU,$NAPI_CPU)"
tune apply threaded --dev vb --cpus "$NAPI_CPU,$NAPI_CPU" >/dev/null
A=$(measure)
tune revert >/dev/null
echo "B: RT queue's thread SCHED_FIFO 50 (napilab tune apply ingress-priority --dev vb --cpus $NAPI_CPU --param rt_queue=0 --param be_queue=1)"
tune apply ingress-priority --dev vb --cpus "$NAPI_CPU" --param rt_queue=0 --param be_queue=1 >/dev/null
B=$(measure)
tune revert >/dev/null

field() { echo "$1" | tr ' ' '\n' | awk -F= -v k="$2" '$1 == k {print $2}'; }
echo
printf '%-34s %9s %9s %9s %9s %9s\n' "RT round trip, ${RATE}/s for ${DUR}s" p50_us p99_us p99.9_us max_us recv
for run in A B; do
    eval line=\$$run
    name="A threaded, equal priority"
    [ "$run" = B ] && name="B ingress-priority (FIFO RT)"
    printf '%-34s %9s %9s %9s %9s %9s\n' "$name" "$(field "$line" p50_us)" "$(field "$line" p99_us)" \
        "$(field "$line" p999_us)" "$(field "$line" max_us)" "$(field "$line" received)/$(field "$line" sent)"
done
pa=$(field "$A" p999_us); pb=$(field "$B" p999_us)
awk -v a="$pa" -v b="$pb" 'BEGIN { if (b > 0) printf "p99.9 ratio A/B: %.1f\n", a / b }'
ratio=$(awk -v a="$pa" -v b="$pb" 'BEGIN { if (a > 0 && b > 0) printf "%.2f", a / b; else print "none" }')
met=$(awk -v r="$ratio" 'BEGIN { print (r != "none" && r >= 2) ? 1 : 0 }')
echo "vb packets per RX queue over both runs (ethtool -S): rx-0 $(rxq 0), rx-1 $(rxq 1)"
# The goal (docs/kernel.md, LAB-3): the profile at least halves the RT queue's p99.9.
bash bench/verdict.sh bench-ingress "RT p99.9 without / with ingress-priority ${ratio}x (${pa} -> ${pb} us)" ">= 2x" "$met"
