#!/usr/bin/env bash
# make bench-halt-poll [ROUNDS=2]: scenarios/bench-halt-poll.toml run alternately with the
# haltpoll governor's window as the host has it and at 200 us (`napilab tune apply
# vcpu-halt-poll`, journalled; reverted after each run, on failure and on Ctrl-C), so
# drift in the machine's load hits both arms alike. Prints per configuration and load
# the loss, the DUT ring's refusals and the latency of each arm, then the host.
# Needs root and a KVM guest with the haltpoll cpuidle governor (says so otherwise).
set -euo pipefail
rounds="${1:-2}"
napilab="${NAPILAB:-./target/release/napilab}"
param=/sys/module/haltpoll/parameters/guest_halt_poll_ns
if [ ! -e "$param" ]; then
    echo "bench-halt-poll: $param does not exist: not a KVM guest with the haltpoll cpuidle governor; nothing to compare" >&2
    exit 2
fi
out="$(mktemp -d /tmp/napilab-halt-poll.XXXXXX)"
journal="$out/journal"
applied=0
revert() {
    if [ "$applied" = 1 ]; then
        "$napilab" tune revert --journal-dir "$journal" > /dev/null
        applied=0
    fi
}
trap 'revert' EXIT
trap 'revert; exit 130' INT TERM
echo "host's guest_halt_poll_ns: $(cat "$param"); results in $out"
for r in $(seq 1 "$rounds"); do
    for arm in host poll; do
        if [ "$arm" = poll ]; then
            "$napilab" tune apply vcpu-halt-poll --journal-dir "$journal" > /dev/null
            applied=1
        fi
        echo "round $r, arm $arm (guest_halt_poll_ns $(cat "$param")) ..."
        "$napilab" lab run scenarios/bench-halt-poll.toml --out "$out/$arm-$r" --no-observe > "$out/$arm-$r.txt"
        revert
    done
done
python3 - "$out" "$rounds" <<'PY'
import glob, json, sys
out, rounds = sys.argv[1], int(sys.argv[2])
rows = {}
for arm in ("host", "poll"):
    for r in range(1, rounds + 1):
        for path in glob.glob(f"{out}/{arm}-{r}/*/run.json"):
            run = json.load(open(path))
            for c in run["configurations"]:
                for i, p in enumerate(c["points"]):
                    cl = p["classes"][0]
                    sent, received = cl["sent"], cl["received"]
                    refused = sum(v for k, v in cl["loss_counters"] if "dropped" in k)
                    lat = cl.get("latency") or {}
                    key = (c["name"], i)
                    rows.setdefault(key, {}).setdefault(arm, []).append(
                        (p["requested_pps"], 100.0 * (sent - received) / max(sent, 1), refused,
                         lat.get("p50_us"), lat.get("p99_us")))
print("per run (the sweep's loads are fractions of each run's own capacity probe):")
print(f"{'configuration':<18} {'point':>5}  {'arm':<5} {'load pps':<16} {'loss %':<16} {'refused':<14} {'p50 us':<12} {'p99 us':<12}")
for (name, i), arms in sorted(rows.items()):
    for arm in ("host", "poll"):
        v = arms.get(arm, [])
        if not v:
            continue
        fmt = lambda j, f: " ".join(f.format(x[j]) if x[j] is not None else "-" for x in v)
        print(f"{name:<18} {i:>5}  {arm:<5} {fmt(0, '{:.0f}'):<16} {fmt(1, '{:.3f}'):<16} {fmt(2, '{:d}'):<14} {fmt(3, '{:.0f}'):<12} {fmt(4, '{:.0f}'):<12}")
PY
bash bench/host-line.sh
