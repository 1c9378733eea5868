#!/bin/sh
# The server topology's modes (docs/lab.md, "Benchmark: the modes, five searches each"):
# scenarios/bench-server-modes.toml with its summary as `napilab lab run` prints it, then
# the verdict: every runnable mode's maximum at the p99 objective known to within +-10%
# (half its 95% interval over the searches), so that the modes can be told apart.
#
# Everything the run creates lives in its lab namespaces and is removed by it, also on
# failure or Ctrl-C (`napilab lab clean` after a kill). Needs root. About 21 minutes.
#
#   sudo bench/server-modes.sh [SCENARIO]     # default scenarios/bench-server-modes.toml
set -eu

ROOT=$(cd "$(dirname "$0")/.." && pwd)
SCENARIO=${1:-$ROOT/scenarios/bench-server-modes.toml}
NAPILAB=${NAPILAB:-$ROOT/target/release/napilab}
OUT=${RESULTS:-$ROOT/results}

if [ "$(id -u)" != 0 ]; then
    echo "SKIPPED server-modes: needs root (network namespaces)"
    exit 0
fi
if [ ! -x "$NAPILAB" ]; then
    echo "server-modes: $NAPILAB is missing: run make build (or set NAPILAB)" >&2
    exit 1
fi
mkdir -p "$OUT"
MARK=$(mktemp /tmp/napilab-server-modes.XXXXXX)
trap 'rm -f "$MARK" "$MARK.verdict"' EXIT INT TERM
"$NAPILAB" lab run --out "$OUT" "$SCENARIO"
# The run's record: the newest run.json under OUT written after the run started.
RECORD=$(find "$OUT" -name run.json -newer "$MARK" -printf '%T@ %p\n' | sort -n | tail -1 | cut -d' ' -f2-)
if [ -z "$RECORD" ]; then
    echo "server-modes: no run.json under $OUT newer than the run's start" >&2
    exit 1
fi
python3 - "$RECORD" "$MARK.verdict" <<'PY'
import json, sys
record = json.load(open(sys.argv[1]))
widths, missing = [], []
for c in record["configurations"]:
    r = c.get("requests") or {}
    if r.get("not_runnable"):
        continue
    m = r.get("max_qps")
    if not m or not m.get("interval") or not m.get("qps"):
        missing.append(c["name"])
        continue
    lo, hi = m["interval"]
    widths.append((100.0 * (hi - lo) / 2.0 / m["qps"], c["name"]))
worst = max(widths, default=(float("inf"), "none"))
met = 1 if widths and not missing and worst[0] <= 10.0 else 0
figure = f"maxima known to +-{worst[0]:.1f}% at worst ({worst[1]}) over {len(widths)} modes"
if missing:
    figure += f"; no interval for {', '.join(missing)}"
with open(sys.argv[2], "w") as f:
    f.write(f"{figure}\t{met}\n")
PY
IFS="$(printf '\t')" read -r figure met < "$MARK.verdict"
echo "record: $RECORD"
bash "$ROOT/bench/verdict.sh" bench-server-modes "$figure" "every mode within +-10%" "$met"
