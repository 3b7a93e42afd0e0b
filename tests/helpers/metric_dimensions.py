"""Which dimension, beside ``cluster``, each metric the functions emit carries: read from
the functions' own ``tally.add(NAME, ..., dim=...)`` calls (functions/*.py), so the unit
test pins what the code emits and the infra test what the dashboard and alarms read."""

from __future__ import annotations

import ast
from pathlib import Path

from warmpool import names

FUNCTIONS = Path(__file__).resolve().parents[2] / "functions"
NOT_DIMENSIONS = {"value", "unit"}


def _constant(node: ast.expr, module_names: dict[str, str]) -> str | None:
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "names":
        return str(getattr(names, node.attr))
    if isinstance(node, ast.Name) and node.id in module_names:
        return module_names[node.id]
    if isinstance(node, ast.Name) and hasattr(names, node.id):
        return str(getattr(names, node.id))
    return None


def emitted_dimensions() -> dict[str, set[str]]:
    """Metric name -> the dimension names (``cluster`` left out) its ``tally.add`` calls give;
    an empty set: the function's own blob (dimensions ``cluster`` and ``service``)."""
    out: dict[str, set[str]] = {}
    for path in sorted(FUNCTIONS.glob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if not (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("add", "observe")
                and isinstance(node.func.value, ast.Attribute | ast.Name)
                and (getattr(node.func.value, "attr", None) or getattr(node.func.value, "id", None)) == "tally"
                and node.args
            ):
                continue
            name = _constant(node.args[0], {})
            if name is None:
                continue
            dims = {k.arg for k in node.keywords if k.arg and k.arg not in NOT_DIMENSIONS}
            out.setdefault(name, set()).update(dims)
    return out


def dimension_set(metric: str, emitted: dict[str, set[str]]) -> frozenset[str]:
    """The full dimension set CloudWatch files ``metric`` under."""
    extra = emitted.get(metric, set())
    return frozenset({"cluster", *extra}) if extra else frozenset({"cluster", "service"})
