"""Shared by the simulation's tests."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

import simulation.node


@pytest.fixture(autouse=True)
def _quiet_logs() -> Iterator[None]:
    """The agents' and allocator's warnings (thousands a seed) stay out of the test output."""
    logging.disable(logging.WARNING)
    yield
    logging.disable(logging.NOTSET)


@pytest.fixture
def pods_named(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every runtime names the pod of each CNI call (``simulation.node.NAMES_PODS`` True), as the
    model did when a seed pinned in stop 50 was found; the sweeps draw it per node since."""
    monkeypatch.setattr(simulation.node, "NAMES_PODS", True)
