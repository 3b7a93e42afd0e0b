"""Synthesize each stack variant at most once per test session (jsii start-up and synth are
slow: ~15 s a variant here), and only when a test asks for it: a run that needs only the
default stack (e.g. ``tests/infra/test_iam_emulated.py`` alone) synthesizes that one."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.helpers.cdk_synth import VARIANTS, Synthesized, _synth


@pytest.fixture(scope="session")
def synth_variant(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Synthesized]:
    cache: dict[str, Synthesized] = {}

    def get(name: str) -> Synthesized:
        if name not in cache:
            cache[name] = _synth(name, VARIANTS[name], tmp_path_factory.mktemp(f"cdk-{name}"))
        return cache[name]

    return get


@pytest.fixture(scope="session")
def synthesized(synth_variant: Callable[[str], Synthesized]) -> dict[str, Synthesized]:
    return {name: synth_variant(name) for name in VARIANTS}


@pytest.fixture(scope="session")
def default(synth_variant: Callable[[str], Synthesized]) -> Synthesized:
    return synth_variant("default")
