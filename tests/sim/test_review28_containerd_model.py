"""Review 28 of b69f4ab + 5afdd0e (the simulated runtime as containerd and kubelet run a failed ADD).

containerd's ``RunPodSandbox`` (``internal/cri/server/sandbox_run.go``) defers the sandbox's network
teardown (a CNI DEL) before its ADD; when that DEL fails too, ``cleanupErr`` is set back to nil
while the sandbox has no CNI result (``sandbox.CNIResult == nil``: the ADD failed), so the network
namespace is removed anyway, the sandbox is not kept in the store, and kubelet, whose
``RunPodSandbox`` call failed with no sandbox id, has nothing to ``StopPodSandbox``: the DEL is never
sent again. The model retries it until it works, and keeps the namespace meanwhile (M1). And
containerd sends no CNI GC (docs/safety.md, "containerd's order, no CNI GC"), while the model's
``cni-gc`` events reach its containerd nodes too (M2): both clear what, with containerd, nothing
clears (``tests/unit/test_review28_containerd_lost_del.py``).

M1 and M2 fixed so in stop 49 (the strict xfails removed)."""

from __future__ import annotations

from typing import Any

import pytest

import simulation.node
from simulation.runner import plan_for, run_plan

pytestmark = pytest.mark.sim


def test_a_failed_add_whose_del_fails_is_never_deleted_again(monkeypatch: pytest.MonkeyPatch) -> None:
    init = simulation.node.SimAgent.__init__
    add_failed = simulation.node.SimAgent._add_failed
    kept: list[str] = []
    dropped: list[str] = []

    def make(self: Any, *a: Any, **k: Any) -> None:
        init(self, *a, **k)
        self.rt.containerd = True

    def failed(self: Any, cid: str, got: dict[str, Any], now: float) -> None:
        adding = cid in self.rt.adding
        call = self.cni_call

        def del_fails(command: str, c: str, *a: Any, **k: Any) -> dict[str, Any]:
            if command == "DEL" and c == cid:
                return {"ok": False, "code": 11, "msg": "the agent is not answering"}
            return call(command, c, *a, **k)  # type: ignore[no-any-return]

        self.cni_call = del_fails
        try:
            add_failed(self, cid, got, now)
        finally:
            del self.cni_call
        if adding and cid not in self.rt.adding:  # given up: containerd's DEL sent, and failed
            (kept if cid in self.rt.deleting else dropped).append(cid)

    monkeypatch.setattr(simulation.node.SimAgent, "__init__", make)
    monkeypatch.setattr(simulation.node.SimAgent, "_add_failed", failed)
    run_plan(plan_for(4, None))
    assert kept or dropped, "setup: no sandbox given up"
    assert not kept, f"{len(kept)} failed sandboxes DELeted again by the model (containerd never does): {kept[:3]}"


def test_a_runtime_modelled_as_containerd_sends_no_cni_gc(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(simulation.node, "FORCE_CONTAINERD", True)
    violations, (_, w) = run_plan(plan_for(4, None))
    assert not violations, violations
    assert w.faults.get("runtime:containerd"), "setup: the nodes' runtimes are containerd"
    gcs = {f: c for f, c in w.faults.items() if f.startswith("cni-gc")}
    assert not gcs, f"CNI GC sent to nodes whose runtime is containerd: {gcs}"
