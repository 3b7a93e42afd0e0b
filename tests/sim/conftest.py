"""Shared by the simulation's tests."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def _quiet_logs() -> Iterator[None]:
    """The agents' and allocator's warnings (thousands a seed) stay out of the test output."""
    logging.disable(logging.WARNING)
    yield
    logging.disable(logging.NOTSET)
