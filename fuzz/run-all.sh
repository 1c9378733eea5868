#!/usr/bin/env bash
# Runs every fuzz target for SECONDS each (default 20), starting from a fresh copy of
# fuzz/seeds/<target> so the committed seeds are never modified. Prints one line per
# target and exits non-zero if any target crashed or failed to build.
#
#   fuzz/run-all.sh 20          (from the repo root or anywhere else)
#
# Needs a nightly toolchain and cargo-fuzz (the Makefile installs both).
set -uo pipefail

seconds=${1:-20}
if ! [[ $seconds =~ ^[0-9]+$ ]] || ((seconds == 0)); then
    echo "usage: $0 [SECONDS>0]" >&2
    exit 2
fi

fuzz_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# cargo-fuzz looks for the project from the current directory; pinning --fuzz-dir makes
# the script independent of where it is started.
fuzz() {
    local command=$1
    shift
    (cd "$fuzz_dir/.." && cargo +nightly fuzz "$command" --fuzz-dir "$fuzz_dir" "$@")
}

work=$(mktemp -d "${TMPDIR:-/tmp}/napilab-fuzz.XXXXXX")
trap 'rm -rf "$work"' EXIT

# One build for all targets, so the time budget below is spent fuzzing, not compiling.
if ! fuzz build >"$work/build.log" 2>&1; then
    tail -n 40 "$work/build.log" >&2
    echo "fuzz: build failed" >&2
    exit 1
fi

mapfile -t targets < <(fuzz list 2>/dev/null)
if ((${#targets[@]} == 0)); then
    echo "fuzz: no targets found in $fuzz_dir" >&2
    exit 1
fi

failed=0
for target in "${targets[@]}"; do
    corpus="$work/corpus-$target"
    mkdir -p "$corpus"
    if [[ -d $fuzz_dir/seeds/$target ]]; then
        cp "$fuzz_dir/seeds/$target"/* "$corpus"/ 2>/dev/null
    fi
    log="$work/$target.log"
    if fuzz run "$target" "$corpus" -- -max_total_time="$seconds" >"$log" 2>&1; then
        runs=$(grep -o 'Done [0-9]* runs' "$log" | tail -n 1 | awk '{print $2}')
        printf '%-12s ok     %s runs in %ss, corpus %s inputs\n' \
            "$target" "${runs:-?}" "$seconds" "$(find "$corpus" -type f | wc -l)"
    else
        failed=1
        artifact=$(grep -o 'Test unit written to [^ ]*' "$log" | tail -n 1 | cut -d' ' -f5)
        printf '%-12s CRASH  %s\n' "$target" "${artifact:-see log below}"
        grep -E 'panicked|ERROR|SUMMARY' "$log" | head -n 5 | sed 's/^/    /'
    fi
done
exit "$failed"
