"""The simulated runtime handles a failed ADD as containerd and kubelet do, on the nodes drawn so
(stop 49; ``simulation.node.SimAgent._add_failed``): an ADD that found no address is in flight for
the agent's ``add_wait_s``, then containerd's ``RunPodSandbox`` DELs the sandbox at once, and
kubelet makes the pod's next sandbox, a new container id, 10 to 15 s later. The other nodes retry
the same sandbox with no DEL (the spec-breaking variant)."""

from __future__ import annotations

from typing import Any

import pytest

import simulation.node
from node_agent.cni import E_TRY_AGAIN_LATER
from simulation.runner import plan_for, run_plan

pytestmark = pytest.mark.sim

Call = tuple[float, str, str, bool]


def _watch(monkeypatch: pytest.MonkeyPatch, containerd: bool) -> tuple[list[Call], list[tuple[float, str, str, int]]]:
    """Every node's runtime set one way; each CNI call (time, command, container, ok), and each
    sandbox given up (time, container, the pod's next sandbox, the failed ADD's code)."""
    calls: list[Call] = []
    given_up: list[tuple[float, str, str, int]] = []
    init = simulation.node.SimAgent.__init__
    cni_call = simulation.node.SimAgent.cni_call
    add_failed = simulation.node.SimAgent._add_failed

    def make(self: Any, *a: Any, **k: Any) -> None:
        init(self, *a, **k)
        self.rt.containerd = containerd

    def call(self: Any, command: str, cid: str, *a: Any, **k: Any) -> dict[str, Any]:
        out: dict[str, Any] = cni_call(self, command, cid, *a, **k)
        calls.append((self.w.now(), command, cid, bool(out.get("ok"))))
        return out

    def failed(self: Any, cid: str, got: dict[str, Any], now: float) -> None:
        before = set(self.rt.adding)
        add_failed(self, cid, got, now)
        if cid not in self.rt.adding:
            (nxt,) = set(self.rt.adding) - before
            given_up.append((now, cid, nxt, int(got.get("code") or 0)))

    monkeypatch.setattr(simulation.node.SimAgent, "__init__", make)
    monkeypatch.setattr(simulation.node.SimAgent, "cni_call", call)
    monkeypatch.setattr(simulation.node.SimAgent, "_add_failed", failed)
    return calls, given_up


def test_a_failed_add_is_deleted_at_once_and_the_pod_s_next_sandbox_comes_after_kubelet_s_back_off(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls, given_up = _watch(monkeypatch, containerd=True)
    violations, (_, w) = run_plan(plan_for(4, None))
    assert not violations, violations
    assert given_up and w.faults.get("containerd:sandbox-again") == len(given_up)
    for t, cid, nxt, code in given_up:
        adds = [at for at, c, k, _ in calls if c == "ADD" and k == cid]
        if code == E_TRY_AGAIN_LATER:  # no address: the ADD waited the agent's add_wait_s
            assert t - adds[0] >= 10.0, f"{cid}: given up {t - adds[0]:.1f} s after its first ADD"
        else:  # failed otherwise: given up at its first failure
            assert t == adds[-1]
        assert (t, "DEL", cid) in {(at, c, k) for at, c, k, _ in calls}, (
            f"{cid}: its failed ADD was not DELeted at once"
        )
        assert nxt.split("~")[0] == cid.split("~")[0] and nxt != cid
        later = [at for at, c, k, _ in calls if c == "ADD" and k == nxt]
        assert not later or later[0] >= t + 10.0, f"{nxt}: ADDed {later[0] - t:.1f} s after its pod's last sandbox"
    assert not any(c == "ADD" and k == cid and at > t for t, cid, _, _ in given_up for at, c, k, _ in calls)


def test_the_other_runtime_retries_the_same_sandbox_with_no_del(monkeypatch: pytest.MonkeyPatch) -> None:
    calls, given_up = _watch(monkeypatch, containerd=False)
    violations, _ = run_plan(plan_for(4, None))
    assert not violations, violations
    assert not given_up
    failed = {k for _, c, k, ok in calls if c == "ADD" and not ok}
    retried = {k for _, c, k, ok in calls if c == "ADD" and ok and k in failed}
    assert retried, "setup: a failed ADD later answered"
    assert all("~" not in k for _, _, k, _ in calls)
