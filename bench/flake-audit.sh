#!/usr/bin/env bash
# Flake audit of the root tests (namespaces, BPF, the lab): every test of the targets
# below runs RUNS times on its own (one test per process, as `cargo test -- --exact`
# would), and the table gives passes and wall time per test. A test that does not pass
# every run is a flake to fix or re-derive (README, "Tests").
#
#   make flake-audit RUNS=10          # root; about 10 x the root tests' own time
#   bash bench/flake-audit.sh 3 lab_server  # only the targets whose name contains lab_server
#
# The logs of failed runs stay in target/flake-audit/. The host (CPU, kernel) is printed
# first, so a table says where it was measured.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-10}
ONLY=${2:-}
if [ "$(id -u)" != 0 ]; then
	echo "flake-audit: the root tests need root (namespaces, BPF): run it as root" >&2
	exit 2
fi

# package:test-target of every integration test that creates namespaces or loads BPF.
TARGETS=(
	napilab:lab_interrupt napilab:lab_many_napi napilab:lab_search napilab:lab_server
	napilab:lab_trace napilab:lab_vpn napilab:observe_live napilab:trace_live napilab:tun_map
	napilab:export_prometheus napilab:kv_cli
	napilab-lab:dut_settings napilab-lab:kv napilab-lab:linerate napilab-lab:netns napilab-lab:tunnel
	napilab-probe:netlink_live napilab-trace:live napilab-trace:packets napilab-tune:netns
)

OUT=target/flake-audit
rm -rf "$OUT"
mkdir -p "$OUT"
bash bench/host-line.sh; echo "CPUs: $(nproc)"
echo "started: $(date -u +%FT%TZ), $RUNS runs per test"

# The test binary of one target (built once, like `cargo test` does).
binary_of() {
	cargo test -q -p "$1" --test "$2" --no-run --message-format=json 2>/dev/null |
		python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == sys.argv[1]:
        print(m["executable"])' "$2"
}

printf '%-16s %-78s %7s %9s %9s\n' target test passes "median s" "max s" | tee "$OUT/table.txt"
total_fail=0
for t in "${TARGETS[@]}"; do
	pkg=${t%%:*}
	name=${t#*:}
	[ -n "$ONLY" ] && [[ "$name" != *"$ONLY"* ]] && continue
	bin=$(binary_of "$pkg" "$name")
	if [ -z "$bin" ]; then
		echo "flake-audit: no test binary for $pkg --test $name (did it build?)" >&2
		exit 1
	fi
	dir=crates/$pkg
	# Targets with the libtest harness list their tests; the others (harness = false)
	# are one test each.
	if tests=$(cd "$dir" && "$bin" --list --format terse 2>/dev/null | sed -n 's/: test$//p') && [ -n "$tests" ]; then
		harness=1
	else
		tests=$name
		harness=0
	fi
	while IFS= read -r test; do
		pass=0
		times=()
		for i in $(seq 1 "$RUNS"); do
			log="$OUT/$name.$(echo "$test" | tr -c 'A-Za-z0-9_\n' _).$i.log"
			start=$(date +%s%N)
			if [ $harness = 1 ]; then
				cmd=("$bin" --exact "$test" --nocapture)
			else
				cmd=("$bin")
			fi
			if (cd "$dir" && timeout 900 "${cmd[@]}") >"$log" 2>&1; then
				pass=$((pass + 1))
				rm -f "$log"
			fi
			times+=("$((($(date +%s%N) - start) / 1000000))")
		done
		stats=$(printf '%s\n' "${times[@]}" | sort -n | awk '{a[NR]=$1 / 1000} END {printf "%9.1f %9.1f", a[int((NR+1)/2)], a[NR]}')
		[ $pass -lt "$RUNS" ] && total_fail=$((total_fail + 1))
		printf '%-16s %-78s %4d/%-2d %s\n' "$name" "$test" "$pass" "$RUNS" "$stats" | tee -a "$OUT/table.txt"
	done <<<"$tests"
done
echo "finished: $(date -u +%FT%TZ); tests that failed at least once: $total_fail (logs in $OUT)"
