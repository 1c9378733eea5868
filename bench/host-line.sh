#!/usr/bin/env bash
# The host a benchmark or test ran on, one line, so that every figure says where it
# came from: `napilab host` (CPU, microcode, kernel, virtualization) when a napilab
# binary is built, else /proc/cpuinfo's model and uname.
cd "$(dirname "$0")/.."
target=${CARGO_TARGET_DIR:-target}
for bin in "$target/release/napilab" "$target/debug/napilab"; do
	if [ -x "$bin" ] && line=$("$bin" host 2>/dev/null | sed -n 1p) && [ -n "$line" ]; then
		echo "$line"
		exit 0
	fi
done
model=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo 2>/dev/null | sed -n 1p)
echo "host: ${model:-CPU unknown}, Linux $(uname -r 2>/dev/null || echo unknown) (uname and /proc/cpuinfo: no napilab binary built)"
