"""Settings shared by every tier.

Hypothesis runs under one of two profiles, chosen by ``HYPOTHESIS_PROFILE``:

- ``dev`` (the default): few examples, so ``make unit`` and a bare ``pytest``
  stay quick while you work;
- ``ci``: the examples CI runs (``make test`` sets it), the same for every
  property test; ``tests/perf/fault_figures.py`` counts its cases under it.

A test states what is particular to it (a deadline, a health check its fixture
trips), never how many examples it runs.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings

PROFILE_ENV = "HYPOTHESIS_PROFILE"
CI_EXAMPLES = 500
DEV_EXAMPLES = 30

settings.register_profile(
    "ci",
    max_examples=CI_EXAMPLES,
    deadline=None,  # shared CI machines: a slow example is not a failure
    suppress_health_check=[HealthCheck.too_slow],
    print_blob=True,  # a failure prints the blob that reproduces it
)
settings.register_profile("dev", max_examples=DEV_EXAMPLES, deadline=None, print_blob=True)

_profile = os.environ.get(PROFILE_ENV, "dev")
if _profile not in ("ci", "dev"):
    raise RuntimeError(f"{PROFILE_ENV}={_profile!r}: expected 'ci' or 'dev'")
settings.load_profile(_profile)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test marked ``slow`` runs without coverage tracing, which would about double
    its time (bench and simulation loops); its tier's other tests cover that code."""
    for item in items:
        if item.get_closest_marker("slow"):
            item.add_marker(pytest.mark.no_cover)
