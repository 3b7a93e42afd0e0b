"""Seeds 7734 and 9369 (stop 49, containerd runtimes): ``not-settled`` at the end, "3 idle
addresses above the targets, none offered" on 7734's n2 (4 on 9369's n0). The simulation's, not
the product's.

Traced: an ``add-cut`` killed the agent in the ADD of a pod's next sandbox (``n2-p2~1``: its first
sandbox's ADD had found no address, containerd DELeted it, kubelet made this one after its
back-off), after the sandbox's veth pair and before its route. The pod was then deleted (``churn``,
``stale-churn``) while the runtime still had its ADD to retry. The model's kubelet back-off mark
(``Runtime.not_before``) was dropped only when an ADD was answered, so it still stood, and
``events._delete`` took it for a sandbox kubelet had not made yet: no DEL was sent. The veth stayed
on the host for good (containerd sends no CNI GC), the restarted agent held every free address for
that routeless veth (``HOLD_REASON``: rightly, its pod may carry any of them), among them addresses
IMDS no longer listed, and the offer of the surplus was taken back by the allocator at every report
(it counts those held addresses as assigned against EC2's smaller total). The mark is now dropped
when the sandbox's first ADD is sent (``SimAgent.runtime_calls``): a pod deleted after that gets
its sandbox's DEL, the veth goes, and the holds end.
"""

from __future__ import annotations

import pytest

import simulation.node
from simulation.runner import plan_for, run_plan, run_seed

pytestmark = pytest.mark.sim

SHRUNK_7734 = [5, 10, 11, 12, 13, 14, 16, 17, 23, 24]
SHRUNK_9369 = [4, 6, 9, 10, 12, 13, 21, 22, 23, 24, 27, 28]
CUT = "agent-kill:add-cut: in an ADD, after the pod's veth pair, before its route and rule"


@pytest.mark.parametrize(
    ("seed", "keep"),
    [(7734, SHRUNK_7734), (7734, None), (9369, SHRUNK_9369), (9369, None)],
    ids=["7734-shrunk", "7734-whole", "9369-shrunk", "9369-whole"],
)
def test_keeps_every_invariant_with_containerd(
    seed: int, keep: list[int] | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(simulation.node, "FORCE_CONTAINERD", True)
    r = run_seed(seed, keep, shrink=False)
    assert not r.violations, r.violations
    assert r.faults.get(CUT), "setup: no ADD cut"
    assert r.faults.get("containerd:sandbox-again"), "setup: no next sandbox"


@pytest.mark.parametrize(("seed", "keep", "node"), [(7734, SHRUNK_7734, "n2"), (9369, SHRUNK_9369, "n0")])
def test_a_deleted_pod_whose_cut_add_made_its_veth_gets_its_del(
    seed: int, keep: list[int], node: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every veth left on the host is one of a sandbox the runtime runs, ADDs or DELetes: the
    next sandbox whose ADD the cut killed was DELeted once its pod was, so its veth is gone."""
    monkeypatch.setattr(simulation.node, "FORCE_CONTAINERD", True)
    _, (_, w) = run_plan(plan_for(seed, keep))
    a = w.agents[node]
    known = {*a.rt.up, *a.rt.adding, *a.rt.deleting}
    orphans = sorted(cid for cid, _ in a.pods.veth_of if cid not in known)
    assert not orphans, f"veths of sandboxes the runtime no longer knows: {orphans}"
    assert w.faults.get(CUT), "setup: no ADD cut"
    assert a.rt.sandboxes, "setup: no next sandbox"
