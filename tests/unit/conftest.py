"""The unit tier runs in-process: no child processes (those tests belong in
tests/integration), so ``make unit`` stays quick."""

from __future__ import annotations

import subprocess
from typing import Any

import pytest


@pytest.fixture(autouse=True)
def _no_subprocesses(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(self: subprocess.Popen[Any], args: Any, *rest: Any, **kw: Any) -> None:
        raise AssertionError(f"a unit test started a process ({args!r}); move it to tests/integration")

    monkeypatch.setattr(subprocess.Popen, "_execute_child", refuse)
