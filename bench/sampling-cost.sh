#!/usr/bin/env bash
# CPU cost of napilab's 1-second sampling, side by side with sar in the same run.
#
#   make bench-sampling            (or: bash bench/sampling-cost.sh [SECONDS])
#
# Both run at the same time for SECONDS (default 30) at a 1 s interval. CPU time is
# user+system of each process tree (bash `times` of a wrapper shell, which includes
# sar's sadc child). napilab's start-up (map, ethtool, kernel config) is paid once, so
# its per-sample figure is the marginal cost: (run of N+1 samples - run of 2 samples)
# / (N - 1). sar's start-up is negligible, so its figure is total / N.
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-30}
BIN=./target/release/napilab
[ -x "$BIN" ] || { echo "build first: make build" >&2; exit 1; }
command -v sar >/dev/null || { echo "sar is missing: apt-get install sysstat (make deps does)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# CPU seconds (user+sys) of a command's process tree.
cpu_of() {
    local out=$1; shift
    bash -c '"$@" >/dev/null 2>&1; times' _ "$@" | awk 'NR==2 {
        split($1,u,/[ms]/); split($2,s,/[ms]/); printf "%.6f\n", u[1]*60+u[2]+s[1]*60+s[2] }' > "$out"
}

echo "sampling for ${N} s: napilab observe --interval 1s and sar -A 1 ${N}, concurrently"
cpu_of "$tmp/napilab_long" "$BIN" observe --for "${N}s" --interval 1s --json &
p1=$!
cpu_of "$tmp/sar" sar -A 1 "$N" &
p2=$!
wait $p1 $p2
cpu_of "$tmp/napilab_short" "$BIN" observe --for 1s --interval 1s --json

awk -v n="$N" -v long="$(cat "$tmp/napilab_long")" -v short="$(cat "$tmp/napilab_short")" -v sar="$(cat "$tmp/sar")" 'BEGIN {
    per = (long - short) / (n - 1); if (per < 0) per = 0;
    sar_per = sar / n;
    printf "napilab: %.1f ms CPU in total for %d samples, %.1f ms once (start-up + 2 samples)\n", long*1000, n+1, short*1000;
    printf "napilab: %.3f ms CPU per 1-second sample (goal: <= 1 ms)\n", per*1000;
    printf "sar -A:  %.1f ms CPU in total, %.3f ms per 1-second sample\n", sar*1000, sar_per*1000;
    if (sar_per > 0) printf "ratio napilab/sar per sample: %.2f (goal: < 1)\n", per/sar_per;
}'
echo "rerun: make bench-sampling   (or bash bench/sampling-cost.sh ${N})"
