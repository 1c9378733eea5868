#!/usr/bin/env bash
# bench/with-profile.sh PROFILE -- COMMAND...: runs COMMAND with the host-wide tune profile
# PROFILE applied (`napilab tune apply`, journalled in a directory of its own) and reverts
# it after, also on failure and on Ctrl-C or SIGTERM. An empty PROFILE runs COMMAND as it
# is. For benchmarks that should measure the DUT on a host set up a known way, e.g.
# `make bench-predict HOST_PROFILE=vcpu-halt-poll` (idle vCPUs poll before they halt:
# docs/kernel.md, "Idle vCPUs and wake-ups"). Needs root when PROFILE is given.
set -euo pipefail
profile="${1:-}"
shift || true
if [ "${1:-}" = "--" ]; then
    shift
fi
if [ "$#" -eq 0 ]; then
    echo "usage: bench/with-profile.sh PROFILE -- COMMAND [ARGS...]" >&2
    exit 2
fi
if [ -z "$profile" ]; then
    exec "$@"
fi
napilab="${NAPILAB:-./target/release/napilab}"
journal="$(mktemp -d /tmp/napilab-bench-profile.XXXXXX)"
applied=0
revert() {
    if [ "$applied" = 1 ]; then
        "$napilab" tune revert --journal-dir "$journal" > /dev/null && applied=0
        echo "with-profile: $profile reverted"
    fi
    rm -rf "$journal"
}
trap 'revert' EXIT
trap 'revert; exit 130' INT TERM
"$napilab" tune apply "$profile" --journal-dir "$journal" > /dev/null
applied=1
echo "with-profile: $profile applied for: $*"
"$@"
