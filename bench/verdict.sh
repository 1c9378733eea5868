#!/usr/bin/env bash
# A benchmark's last line: its figure against its goal, with the host it was measured
# on, so that a verdict never travels without its host (docs/hosts.md).
#   bash bench/verdict.sh BENCH FIGURE GOAL MET     (MET: 1 met, 0 not met)
# The Rust benchmarks print the same line through napilab_testkit::bench_verdict.
cd "$(dirname "$0")/.."
[ $# -eq 4 ] || { echo "usage: bench/verdict.sh BENCH FIGURE GOAL MET(1|0)" >&2; exit 2; }
bench=$1 figure=$2 goal=$3
case $4 in
	1) met="met" ;;
	0) met="NOT met" ;;
	*) echo "bench/verdict.sh: MET must be 1 or 0, not '$4'" >&2; exit 2 ;;
esac
host=$(bash bench/host-line.sh)
echo "verdict: $bench: $figure (goal: $goal): $met; ${host}"
