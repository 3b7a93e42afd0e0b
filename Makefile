# The two commands of the README: `make test` and `make demo`. Both set up
# everything they need on a fresh machine (a .venv, Python packages, the
# Debian packages the tests use).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
export JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION := 1

.PHONY: test demo lint typecheck unit integration infra-test sim-test bench-planner system-deps clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[all]'
	touch $(STAMP)

# Debian packages used by the network-namespace and CNI tests. Installed only
# when missing, and only when we can (root with apt-get).
system-deps:
	@if [ ! -x /usr/lib/cni/tuning ] || ! command -v ip >/dev/null || ! command -v ping >/dev/null; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq iproute2 iputils-ping containernetworking-plugins >/dev/null) \
	      || echo "system-deps: could not install iproute2/containernetworking-plugins"; \
	  else echo "system-deps: not root or no apt-get; namespace tests will say what is missing"; fi; \
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

demo: $(STAMP) system-deps
	$(BIN)/warmpool demo

bench-planner: $(STAMP)
	$(BIN)/python tests/perf/planner_throughput.py

clean:
	rm -rf $(VENV) cdk.out .pytest_cache .mypy_cache .ruff_cache
