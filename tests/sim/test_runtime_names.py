"""The sweeps draw runtimes that send no ``CNI_ARGS`` (``simulation.node.UNNAMED_SHARE`` of the
nodes): the CNI spec makes them optional, and only containerd's and CRI-O's habit names the pod
(``K8S_POD_NAMESPACE``, ``K8S_POD_NAME``). An unnamed node's waiting ADDs are counted per
attachment (``node_agent.datastore.Datastore.assign`` with no pod); a named node's per pod and
interface. Drawn on a stream of its own, so no other draw of a seed moves."""

from __future__ import annotations

from typing import Any

import pytest

import simulation.node
from node_agent.cniserver import CniService, pod_of
from simulation.runner import plan_for, run_plan

pytestmark = pytest.mark.sim

SEEDS = range(1030000, 1030012)


def _calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[bool, str]]:
    """Each CNI call: whether its node's runtime was drawn naming pods, and the pod it named ('' for
    none). By the agent, not the node's name: a node replaced under its name draws again."""
    seen: list[tuple[bool, str]] = []
    cni_call = simulation.node.SimAgent.cni_call
    handle = CniService.handle
    caller: list[Any] = []

    def call(self: Any, *a: Any, **k: Any) -> dict[str, Any]:
        caller.append(self)
        try:
            out: dict[str, Any] = cni_call(self, *a, **k)
        finally:
            caller.pop()
        return out

    def watched(self: Any, req: dict[str, Any]) -> dict[str, Any]:
        seen.append((caller[-1].rt.names_pods, pod_of(req.get("args"))))
        out: dict[str, Any] = handle(self, req)
        return out

    monkeypatch.setattr(simulation.node.SimAgent, "cni_call", call)
    monkeypatch.setattr(CniService, "handle", watched)
    return seen


def test_some_runtimes_name_no_pod_and_each_keeps_to_its_draw(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _calls(monkeypatch)
    drawn: list[bool] = []
    init = simulation.node.SimAgent.__init__

    def make(self: Any, *a: Any, **k: Any) -> None:
        init(self, *a, **k)
        drawn.append(self.rt.names_pods)

    monkeypatch.setattr(simulation.node.SimAgent, "__init__", make)
    for seed in SEEDS:
        before = len(drawn)
        violations, (out, _w) = run_plan(plan_for(seed, None))
        assert not violations, (seed, violations)
        assert out.faults.get("runtime:no-cni-args", 0) == drawn[before:].count(False), seed
    assert True in drawn and False in drawn, drawn
    named = [pod for names, pod in seen if names]
    unnamed = [pod for names, pod in seen if not names]
    assert named and unnamed, (len(named), len(unnamed))
    assert "" not in named and set(unnamed) == {""}


def test_the_draw_moves_no_other_draw(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every node named or none, the same seed draws the same runtimes and the same events."""
    drawn = {}
    for mode in (True, False, None):
        monkeypatch.setattr(simulation.node, "NAMES_PODS", mode)
        _violations, (out, w) = run_plan(plan_for(SEEDS[0], [0]))
        drawn[mode] = (
            {n: a.rt.containerd for n, a in w.agents.items()},
            {k: v for k, v in out.faults.items() if k.startswith("runtime:") and k != "runtime:no-cni-args"},
        )
    assert drawn[True] == drawn[False] == drawn[None]
