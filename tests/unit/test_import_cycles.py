"""No module of the project imports itself back, through any chain of imports
(``TYPE_CHECKING`` imports and imports inside functions included): the check of
``scripts/import_cycles.py``, run in-process."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "import_cycles.py"


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("import_cycles", SCRIPT)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_no_import_cycle() -> None:
    graph, _, found = _script().build()
    assert len(graph.modules) > 100  # the packages were found
    assert found == []


def test_components_finds_cycles() -> None:
    """The component pass itself: a two-module cycle and a longer one are found, a chain is not."""
    mod = _script()
    out = {"a": {"b"}, "b": {"a"}, "c": {"d"}, "d": {"e"}, "e": {"c", "f"}, "f": set()}
    assert mod.components(out) == [["a", "b"], ["c", "d", "e"]]
    assert mod.cycle_in(out, ["c", "d", "e"]) == ["c", "d", "e", "c"]
