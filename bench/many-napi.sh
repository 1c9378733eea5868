#!/bin/sh
# The DUT's forwarding CPU per packet with many NAPI instances (docs/lab.md, "The
# many-napi topology"): scenarios/many-napi.toml (N = 1, 10, 100, 1000 x softirq,
# threaded, threaded-pinned at one fixed rate) in one run, then one table with the
# contexts side by side per N and their ratios to softirq, the NAPI kthreads' context
# switches per packet and migrations, and the polls the trace tier lost.
#
# Everything the run creates lives in its lab namespaces and is removed by it, also on
# failure or Ctrl-C (`napilab lab clean` after a kill). Needs root. About 1.5 minutes.
#
#   sudo bench/many-napi.sh [SCENARIO]       # default scenarios/many-napi.toml
set -eu

ROOT=$(cd "$(dirname "$0")/.." && pwd)
SCENARIO=${1:-$ROOT/scenarios/many-napi.toml}
NAPILAB=${NAPILAB:-$ROOT/target/release/napilab}
OUT=${RESULTS:-$ROOT/results}

if [ "$(id -u)" != 0 ]; then
    echo "SKIPPED many-napi: needs root (network namespaces, BPF)"
    exit 0
fi
if [ ! -x "$NAPILAB" ]; then
    echo "many-napi: $NAPILAB is missing: run make build (or set NAPILAB)" >&2
    exit 1
fi
mkdir -p "$OUT"
RECORD=$(mktemp /tmp/napilab-many-napi.XXXXXX.json)
trap 'rm -f "$RECORD" "$RECORD.verdict"' EXIT INT TERM
"$NAPILAB" lab run --json --out "$OUT" "$SCENARIO" > "$RECORD"

python3 - "$RECORD" <<'PY'
import json, sys
record = json.load(open(sys.argv[1]))
contexts = ["softirq", "threaded", "threaded-pinned"]
rows = {}
for c in record["configurations"]:
    for p in c["points"]:
        m = p.get("many_napi")
        if not m:
            continue
        context = c["name"].split("/")[-1]
        sent = sum(cl["sent"] for cl in p["classes"])
        got = sum(cl["received"] for cl in p["classes"])
        rows.setdefault(m["instances"], {})[context] = (m, sent, got)
print(f"run {record['run_id']} ({record['scenario_name']}): DUT forwarding CPU per delivered packet, ns")
print("(NET_RX softirq time of the host + NAPI kthreads' on-CPU time; a shared machine inflates softirq)")
head = f"{'N':>5} | " + " | ".join(f"{c:>15}" for c in contexts)
head += " | thr/soft | pin/soft | ctxsw/pkt thr | ctxsw/pkt pin | migr thr | delivered % | lost polls"
print(head)
print("-" * len(head))
def ns(cell):
    return cell[0].get("dut_cpu_ns_per_packet") if cell else None
for n in sorted(rows):
    r = rows[n]
    vals = [ns(r.get(c)) for c in contexts]
    cells = [f"{v:>15.0f}" if v is not None else f"{'-':>15}" for v in vals]
    ratio = lambda a, b: f"{a / b:>8.2f}" if a is not None and b else f"{'-':>8}"
    def switches(c):
        cell = r.get(c)
        k = cell and cell[0].get("kthreads")
        if not k or not cell[2]:
            return f"{'-':>13}"
        return f"{(k['voluntary_switches'] + k['involuntary_switches']) / cell[2]:>13.2f}"
    thr = r.get("threaded")
    migr = thr[0].get("kthreads", {}).get("migrations") if thr else None
    delivered = [100.0 * cell[2] / cell[1] for cell in r.values() if cell[1]]
    lost = sum(cell[0].get("lost_polls", 0) for cell in r.values())
    print(f"{n:>5} | " + " | ".join(cells)
          + f" | {ratio(vals[1], vals[0])} | {ratio(vals[2], vals[0])} | {switches('threaded')} | {switches('threaded-pinned')}"
          + f" | {migr if migr is not None else '-':>8} | {min(delivered) if delivered else 0:>11.1f} | {lost}"
          + ("  (polls undercounted)" if lost else ""))
# The benchmark's goal is comparable figures: every point delivered at least 95% of
# what was sent (CPU per packet of the same traffic) and the trace tier lost no polls.
worst = min((100.0 * cell[2] / cell[1] for r in rows.values() for cell in r.values() if cell[1]), default=0.0)
lost_all = sum(cell[0].get("lost_polls", 0) for r in rows.values() for cell in r.values())
met = 1 if rows and worst >= 95.0 and lost_all == 0 else 0
with open(sys.argv[1] + ".verdict", "w") as f:
    f.write(f"{worst:.1f}% delivered at worst, {lost_all} polls lost, over {len(rows)} N\t{met}\n")
PY
IFS="$(printf '\t')" read -r figure met < "$RECORD.verdict"
rm -f "$RECORD.verdict"
bash "$ROOT/bench/verdict.sh" bench-many-napi "$figure" ">= 95% delivered at every point, no poll lost" "$met"
