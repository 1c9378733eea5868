# napilab: `make run` and `make test` on a fresh Debian/Ubuntu machine, as root.
# Both install what they need first (apt packages, the Rust toolchain pieces), so
# nothing has to be installed by hand.

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
CARGO ?= cargo
export PATH := $(HOME)/.cargo/bin:$(PATH)

# iproute2/ethtool/iputils-ping: namespaces and veth for the integration tests;
# sysstat: `sar`, the baseline of the sampling-cost benchmark; clang/llvm/libelf/zlib:
# the C toolchain that cargo-fuzz's libFuzzer build needs.
# clang/llvm/libelf/zlib also build the BPF programs and libbpf (vendored by libbpf-sys).
APT_PACKAGES := build-essential pkg-config ca-certificates iproute2 ethtool iputils-ping \
	sysstat procps clang llvm libelf-dev zlib1g-dev
# memcached: the real server beside napilab's key-value server (lab request workloads,
# their root tests and `make bench-kv`); started by the lab in a namespace, never as a service.
APT_PACKAGES += memcached
# prometheus (ships promtool) and prometheus-node-exporter: the real Prometheus server the
# export test scrapes napilab with, and the baseline of the exporter-cost benchmark.
APT_PACKAGES += prometheus prometheus-node-exporter curl
# bpftrace: the per-packet benchmark's peer arm (one tracepoint counted into a map);
# prometheus-node-exporter: the sampling benchmark's second baseline (bench/sampling-cost.sh).
APT_PACKAGES += bpftrace
# tmux: `napilab top`'s tests drive the view in a detached tmux session (send-keys,
# capture-pane; crates/napilab/tests/top_tmux.rs).
APT_PACKAGES += tmux
# python3: the bench scripts (bench/soak-export.py, its verdict's test soak_verdict.rs)
# and the server-calibration test's fixture trimmer; present on most images, not all.
APT_PACKAGES += python3
# Best effort: `perf kwork` is the independent check of measured softirq time in the
# trace tests (skipped with a printed reason without it); Ubuntu names it differently.
APT_OPTIONAL := linux-perf

RESULTS ?= results
# A host-wide tune profile applied for `make run`, `make bench-predict` and
# `make bench-server-modes` and reverted after, also on failure and Ctrl-C
# (bench/with-profile.sh), e.g. vcpu-halt-poll; empty: the host as it is.
HOST_PROFILE ?=
FUZZ_SECONDS ?= 10

.PHONY: all deps deps-apt deps-rust deps-fuzz build run test lint unit fuzz bench-export bench-sampling bench-ingress bench-sim bench-trace bench-trace-packets bench-lab bench-linerate bench-kv bench-server-modes bench-many-napi bench-stall-replay bench-predict bench-halt-poll soak-export flake-audit code-shape clean

all: build

deps: deps-apt deps-rust

deps-apt:
	@missing=""; for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
		echo "installing:$$missing"; \
		export DEBIAN_FRONTEND=noninteractive; apt-get update -qq && apt-get install -y -qq $$missing >/dev/null; \
	fi
	@for p in $(APT_OPTIONAL); do dpkg -s $$p >/dev/null 2>&1 || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$p >/dev/null 2>&1 \
		|| echo "optional package $$p is not available here: the tests that need it say so and skip"; done

deps-rust:
	@if ! command -v cargo >/dev/null; then \
		echo "no cargo: installing rustup from the distribution"; \
		export DEBIAN_FRONTEND=noninteractive; apt-get update -qq && apt-get install -y -qq rustup >/dev/null \
			|| { echo "napilab: cannot install Rust: install rustup (https://rustup.rs) and rerun make"; exit 1; }; \
		rustup default stable; \
	fi
	@rustup component list --installed 2>/dev/null | grep -q '^clippy' || rustup component add clippy rustfmt

# cargo-fuzz needs nightly for its sanitizer flags.
deps-fuzz: deps-rust
	@rustup toolchain list | grep -q '^nightly' || rustup toolchain install nightly --profile minimal
	@command -v cargo-fuzz >/dev/null || $(CARGO) install cargo-fuzz --locked

build: deps
	$(CARGO) build --release --workspace

# The main job: the built-in lab scenario (scenarios/default.toml: a veth router in
# network namespaces, one-CPU vs two-CPU DUT placement x softirq vs threaded NAPI, a load
# sweep and three maximum-throughput searches per configuration; about 12 minutes), then an observation of
# this host. Needs root for the namespaces. HOST_PROFILE=vcpu-halt-poll runs the lab with
# a KVM guest's idle vCPUs polling before they halt (the run's "idle vCPUs" note says when
# a host needs it: docs/lab.md, "Disturbed trials").
run: build
	@mkdir -p $(RESULTS)
	bash bench/with-profile.sh "$(HOST_PROFILE)" -- ./target/release/napilab lab run --out $(RESULTS) | tee $(RESULTS)/lab.txt
	./target/release/napilab observe --for 5s --interval 1s --record $(RESULTS)/observe.recording.jsonl > $(RESULTS)/observe.txt
	./target/release/napilab observe --replay $(RESULTS)/observe.recording.jsonl --json > $(RESULTS)/observe.json
	@echo
	@echo "results:"
	@echo "  lab run: the report, points.csv, run.json and openmetrics.txt under $(RESULTS)/<run id>/ (paths above), all runs in $(RESULTS)/napilab.db"
	@echo "  this host: $(RESULTS)/observe.txt (report), $(RESULTS)/observe.json (Observation), $(RESULTS)/observe.recording.jsonl (napilab observe --replay FILE)"

lint: deps
	$(CARGO) fmt --all --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

TEST_LOG := target/napilab-test.log

unit: deps
	@mkdir -p target
	$(CARGO) test --workspace 2>&1 | tee $(TEST_LOG)

fuzz: deps-fuzz deps-apt
	@mkdir -p target
	bash fuzz/run-all.sh $(FUZZ_SECONDS) 2>&1 | tee target/napilab-fuzz.log

# The host the tests ran on (napilab host's summary; uname and /proc/cpuinfo if the
# binary did not build), then one closing line for CI: tests of every cargo test binary
# plus one per fuzz target. The summary stays last: CI reads the closing line.
test: deps lint unit fuzz
	@bash bench/host-line.sh
	@awk '/^test result:/ {p += $$4; f += $$6} / ok +[0-9]+ runs/ {p++} / CRASH / {f++} \
		END {printf "summary: %d passed, %d failed\n", p, f}' $(TEST_LOG) target/napilab-fuzz.log

# Sampling cost per 1-second sample, side by side with sar and node_exporter (docs/cli.md, "Benchmarks").
bench-sampling: build
	@bash bench/host-line.sh
	$(CARGO) build --release -p napilab-probe --example sample-reads
	bash bench/sampling-cost.sh

# napilab export's CPU per second (proc tier, --trace with its BPF run time) beside
# prometheus-node-exporter, idle / loaded / 50 concurrent scrapers (root; docs/export.md).
bench-export: deps
	@bash bench/host-line.sh
	$(CARGO) build --release -p napilab
	bash bench/export-cost.sh

# RT latency with and without the ingress-priority profile (docs/cli.md, "Benchmarks").
bench-ingress: deps
	@bash bench/host-line.sh
	bash bench/ingress-priority.sh

# The twin's speed: event loop, 1 s of a 2 Mpps router, and the ratio to a SimPy model
# of the same router run side by side (SimPy from PyPI in a venv: Debian's is 2.x).
bench-sim: deps
	@bash bench/host-line.sh
	@for p in python3 python3-venv; do dpkg -s $$p >/dev/null 2>&1 || { export DEBIAN_FRONTEND=noninteractive; apt-get update -qq && apt-get install -y -qq $$p >/dev/null; }; done
	@[ -x target/simpy-venv/bin/python ] || { python3 -m venv target/simpy-venv && target/simpy-venv/bin/pip install -q simpy; }
	NAPILAB_PYTHON=target/simpy-venv/bin/python $(CARGO) run --release -p napilab-sim --example sim-bench

# Predict before you tune (docs/tune.md, "Predict before you tune"): each profile the live
# host's twin predicts, on a veth pair under a UDP flood, predicted, applied, verified
# and reverted, 3 repeats of 3 s observations; then (LAB=1, about 6 minutes) the
# threaded profile's headroom predicted from a lab run's softirq point against the
# threaded configuration's measured maximum; ends with `predict: N profiles, max
# |error| X%` and the verdict (root). HOST_PROFILE=NAME runs it all with that host-wide
# tune profile applied and reverted after (bench/with-profile.sh), e.g. vcpu-halt-poll.
LAB ?= 1
bench-predict: deps
	@bash bench/host-line.sh
	$(CARGO) build --release -p napilab --bin napilab
	RESULTS=$(RESULTS) bash bench/with-profile.sh "$(HOST_PROFILE)" -- $(CARGO) run --release -p napilab --example predict_bench -- target/release/napilab 3 3s $(LAB)

# Cost of the always-on tracing tier and of 1 kHz stage sampling on a veth router,
# alternating A/B rounds in one run (root); rounds are added until the control arm's 95%
# interval is within +-0.3 points (docs/trace.md, "Overhead").
bench-trace: deps
	@bash bench/host-line.sh
	$(CARGO) run --release -p napilab-trace --example overhead -- 48 0.5 2

# The router's two-CPU configurations with idle vCPUs halting at once and polling first
# (tune profile vcpu-halt-poll, applied and reverted per run), alternately (root, KVM
# guest with the haltpoll governor; docs/kernel.md "Idle vCPUs and wake-ups").
bench-halt-poll: build
	bash bench/halt-poll.sh $(or $(ROUNDS),2)

# Cost of the per-packet tier (--trace-packets) on a saturated veth router, six modes in
# rotating order, 6 rounds of 3 s: untraced / always-on / per-packet on every packet /
# per-packet in its default tracing windows / bpftrace counting one tracepoint / one
# empty BPF program (the floor); CPU per forwarded packet (root; docs/trace.md).
bench-trace-packets: deps
	@bash bench/host-line.sh
	$(CARGO) run --release -p napilab-trace --example packets-overhead -- 6 3

# The lab's own limits: paced generator accuracy, the spread of repeated maxima
# (scenarios/bench-*.toml), and the repeatability of the maximum-throughput search:
# 5 RFC 2544 bisections and 5 MLRsearches alternating in one run (see docs/lab.md). Root.
bench-lab: build
	@bash bench/host-line.sh
	./target/release/napilab lab run scenarios/bench-paced.toml --no-observe --out $(RESULTS)
	./target/release/napilab lab run scenarios/bench-repeat.toml --no-observe --out $(RESULTS)
	$(CARGO) run --release -p napilab-lab --example search-repeatability -- 5 2

# The line-rate back end (XDP live frames): offered Mpps from one core, requested vs
# offered, and the DUT's maximum forwarding rate 5 times with its spread
# (scenarios/line-rate.toml; see docs/lab.md). Root.
bench-linerate: deps
	@bash bench/host-line.sh
	$(CARGO) run --release -p napilab-lab --example linerate-bench -- 5 6

# The request workload engines (docs/lab.md, "Request workloads"): memcached's capacity
# beside what the load generator offers from one core, and napilab's key-value server's
# capacity per interrupt mode, side by side in one run. Root.
bench-kv: deps
	@bash bench/host-line.sh
	$(CARGO) run --release -p napilab-lab --example kv-bench -- 3 3

# The server topology's modes (docs/lab.md): max requests/s at the p99 SLO and CPU per
# request per mode, five searches each, napilab's server and memcached; the report has
# the twin's prediction beside each (scenarios/bench-server-modes.toml; docs/lab.md). Root.
bench-server-modes: build
	@bash bench/host-line.sh
	RESULTS=$(RESULTS) bash bench/with-profile.sh "$(HOST_PROFILE)" -- bash bench/server-modes.sh

# A stall of known length in the lab and in the twin (docs/sim.md, "Host stalls"): threaded
# at a light and a heavy load, without and with a hog busy BUSY_MS every PERIOD_MS on the
# server's CPU, then the twin at the same rates with TWIN_PROFILE without and with those
# stalls; the last line gives the twin's p99 under the hog over the lab's (root, about
# a minute after the build; scenarios/bench-stall-replay.toml).
TWIN_PROFILE ?= veth-lab-server
BUSY_MS ?= 1.5
PERIOD_MS ?= 100
bench-stall-replay: build
	@bash bench/host-line.sh
	python3 bench/stall-replay.py ./target/release/napilab $(TWIN_PROFILE) $(RESULTS) $(BUSY_MS) $(PERIOD_MS)

# The DUT's CPU per packet with 1, 10, 100 and 1000 NAPI instances, softirq vs threaded
# vs threaded-pinned side by side in one run (scenarios/many-napi.toml; docs/lab.md,
# "The many-napi topology"). Root, about 1.5 minutes after the build.
bench-many-napi: build
	@bash bench/host-line.sh
	RESULTS=$(RESULTS) bash bench/many-napi.sh

# The exporter soak (docs/export.md, "Soak"): napilab export at 1 s and 100 ms sampling for
# HOURS while veth pairs and namespaces come and go, a 30% busy loop runs and 50 scrapers
# poll each; RSS and CPU per second to $(RESULTS)/soak-export/soak.csv, plotted, and a
# verdict (bench/soak-export.py; root). SOAK_ARGS passes more options (e.g. --trace).
HOURS ?= 2
SOAK_ARGS ?=
soak-export: deps
	@bash bench/host-line.sh
	$(CARGO) build --release -p napilab --bin napilab --example soak_plot
	python3 bench/soak-export.py --hours $(HOURS) --out $(RESULTS)/soak-export $(SOAK_ARGS)

# Flake audit of the root tests (each must pass every run): each test of the namespace, BPF and lab
# targets RUNS times on its own, a table of passes and wall time per test, the host
# first (bench/flake-audit.sh; root, about RUNS x 6 minutes).
RUNS ?= 10
flake-audit: deps
	@bash bench/host-line.sh
	bash bench/flake-audit.sh $(RUNS)

# How the code base reads: non-test functions over 150 lines and files over 1,500
# lines under crates/*/src, each listed (bench/code-shape.py; needs only python3).
code-shape:
	python3 bench/code-shape.py --list

clean:
	$(CARGO) clean
	rm -rf $(RESULTS)
