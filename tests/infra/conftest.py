"""Synthesize each stack variant once per test session (jsii start-up and synth are slow)."""

from __future__ import annotations

import pytest

from tests.infra.synth import VARIANTS, Synthesized, _synth


@pytest.fixture(scope="session")
def synthesized(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Synthesized]:
    return {name: _synth(name, o, tmp_path_factory.mktemp(f"cdk-{name}")) for name, o in VARIANTS.items()}


@pytest.fixture(scope="session")
def default(synthesized: dict[str, Synthesized]) -> Synthesized:
    return synthesized["default"]
