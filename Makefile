# The two commands of the README: `make test` and `make demo`. Both set up
# everything they need on a fresh machine (a .venv, Python packages, the
# Debian packages the tests use).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
export JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION := 1

.PHONY: test demo lint typecheck unit infra infra-test reliability sim sim-test integration runtime runtime-test e2e \
        coverage-total bench-planner system-deps clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[all]'
	touch $(STAMP)

# Debian packages used by the network-namespace, CNI and runtime tests, the
# demo's real pods (containerd, runc, a static busybox for the local image,
# iptables for the chained portmap) and its data plane (nftables: the agent's
# SNAT/NodePort rules; util-linux: nsenter). Installed only when missing, and
# only when we can (root with apt-get).
SYSTEM_PKGS := iproute2 iputils-ping iptables nftables util-linux containernetworking-plugins containerd runc busybox-static
system-deps:
	@if [ ! -x /usr/lib/cni/tuning ] || [ ! -x /usr/lib/cni/portmap ] || [ ! -x /bin/busybox ] \
	    || ! command -v ip >/dev/null || ! command -v ping >/dev/null || ! command -v iptables >/dev/null \
	    || ! command -v nft >/dev/null || ! command -v nsenter >/dev/null \
	    || ! command -v containerd >/dev/null || ! command -v runc >/dev/null || ! command -v ctr >/dev/null; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(SYSTEM_PKGS) >/dev/null) \
	      || echo "system-deps: could not install $(SYSTEM_PKGS)"; \
	  else echo "system-deps: not root or no apt-get; namespace and runtime tests will say what is missing"; fi; \
	fi

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports

typecheck: $(STAMP)
	$(BIN)/mypy

# The test tiers, fastest first. Each prints its coverage and fails below its
# floor: of the product and its stand-ins (every top-level package but infra/), or of infra/ for the
# infra tier (pytest-cov; [tool.coverage] in pyproject.toml). The floors are
# measured on the CI machine (root, so the namespace and runtime tests run) and
# set a few points below; elsewhere lower one, e.g. `make test FLOOR_runtime=0`.
# `make test` runs Hypothesis under its `ci` profile, a tier alone under `dev`
# (tests/conftest.py). PYTEST_ARGS adds pytest options, e.g.
# `make unit PYTEST_ARGS=--durations=30`.
TIERS := unit infra reliability sim integration runtime
# last measured by `make test` (ci profile; README, Figures):  unit 44.0  infra 97.3  reliability 39.4  sim 50.3
#   integration 71.0  runtime 36.7
# e2e (not in TIERS) measured 2026-12-01: 24.5 (its code runs mostly in subprocesses)
FLOOR_unit        := 37
FLOOR_infra       := 94
FLOOR_reliability := 35
FLOOR_sim         := 45
FLOOR_integration := 66
FLOOR_runtime     := 30
FLOOR_e2e         := 20
PYTEST_ARGS ?=
COVERAGE_DIR := .coverage-tiers
PRODUCT := --cov=warmpool --cov=warmpool_cli --cov=functions --cov=node_agent --cov=emulated --cov=bench --cov=simulation --cov=demo
run-tier = @mkdir -p $(COVERAGE_DIR) && echo "== tier $(1)" && \
	COVERAGE_FILE=$(COVERAGE_DIR)/$(1) $(BIN)/python -m pytest -q $(PYTEST_ARGS) \
	  $(or $(3),$(PRODUCT)) --cov-report= --cov-fail-under=$(FLOOR_$(1)) $(2)

test: $(STAMP) system-deps lint typecheck
	HYPOTHESIS_PROFILE=ci $(MAKE) --no-print-directory $(TIERS) coverage-total

unit: $(STAMP)
	$(call run-tier,unit,tests/unit)

infra: infra-test
infra-test: $(STAMP)
	$(call run-tier,infra,tests/infra,--cov=infra)

reliability: $(STAMP)
	$(call run-tier,reliability,tests/reliability)

sim: sim-test
sim-test: $(STAMP)
	$(call run-tier,sim,tests/sim)

# The shipped bench scenarios (pure CPU, untraced: marked slow) run in a second pytest
# process beside the rest of the tier, so the two share the machine's cores; the tier
# fails if either does.
BENCH_TESTS := tests/integration/test_bench_scenarios.py
integration: $(STAMP) system-deps
	@mkdir -p $(COVERAGE_DIR) && echo "== tier integration (its bench scenarios in parallel)"
	@$(BIN)/python -m pytest -q $(PYTEST_ARGS) $(BENCH_TESTS) > $(COVERAGE_DIR).bench.log 2>&1 & bench=$$!; \
	COVERAGE_FILE=$(COVERAGE_DIR)/integration $(BIN)/python -m pytest -q $(PYTEST_ARGS) $(PRODUCT) --cov-report= \
	  --cov-fail-under=$(FLOOR_integration) --ignore=$(BENCH_TESTS) tests/integration; rc=$$?; \
	wait $$bench; brc=$$?; echo "== the tier's bench scenarios:"; cat $(COVERAGE_DIR).bench.log; \
	if [ $$rc -ne 0 ]; then exit $$rc; fi; exit $$brc

# containerd and runc drive warmpool-cni (part of `make test` too)
runtime: runtime-test
runtime-test: $(STAMP) system-deps
	$(call run-tier,runtime,tests/runtime)

# The e2e tier (tests/e2e, not in `make test`): the functions from their deployed
# artifact through the Lambda runtime interface (awslambdaric, and the runtime interface
# emulator built from source with Go), and a control plane and kubelet built from source
# (e2e/build-kubernetes.sh, cached under ~/.cache/warmpool-e2e by version) running the
# DaemonSet from the agent image built from infra/docker/agent.Dockerfile
# (e2e/build-images.sh, Buildah). Root, Go and the package registries are needed; the
# first run builds everything (see README for the measured times).
e2e: $(STAMP) system-deps
	$(call run-tier,e2e,tests/e2e -s)

# Every tier's coverage together (after `make test`, or the tiers you ran).
coverage-total: $(STAMP)
	@$(BIN)/python -m coverage combine --keep -q --data-file=$(COVERAGE_DIR).all $(COVERAGE_DIR)/*
	@echo "== coverage of the tiers run together (every package): $$($(BIN)/python -m coverage report \
	  --data-file=$(COVERAGE_DIR).all --format=total)%"

demo: $(STAMP) system-deps
	$(BIN)/warmpool demo

bench-planner: $(STAMP)
	$(BIN)/python tests/perf/planner_throughput.py

clean:
	rm -rf $(VENV) cdk.out .pytest_cache .mypy_cache .ruff_cache $(COVERAGE_DIR) $(COVERAGE_DIR).all $(COVERAGE_DIR).bench.log
