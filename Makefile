# The two commands of the README: `make test` and `make demo`. Both set up
# everything they need on a fresh machine (a .venv, Python packages, the
# Debian packages the tests use).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
export JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION := 1

.PHONY: test demo lint typecheck unit integration infra-test runtime-test sim-test bench-planner system-deps clean

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

typecheck: $(STAMP)
	$(BIN)/mypy

test: $(STAMP) system-deps lint typecheck
	$(BIN)/python -m pytest -q

unit: $(STAMP)
	$(BIN)/python -m pytest -q tests/unit

integration: $(STAMP) system-deps
	$(BIN)/python -m pytest -q tests/integration

sim-test: $(STAMP)
	$(BIN)/python -m pytest -q -m sim tests/sim

infra-test: $(STAMP)
	$(BIN)/python -m pytest -q tests/infra

# containerd and runc drive warmpool-cni (part of `make test` too)
runtime-test: $(STAMP) system-deps
	$(BIN)/python -m pytest -q -m runtime tests/runtime

demo: $(STAMP) system-deps
	$(BIN)/warmpool demo

bench-planner: $(STAMP)
	$(BIN)/python tests/perf/planner_throughput.py

clean:
	rm -rf $(VENV) cdk.out .pytest_cache .mypy_cache .ruff_cache
