"""Review 15, L2: O1's address is lost for good when the running pod's DEL comes before the copy's
record goes, the order containerd gives (it calls no CNI GC).

The fourteenth review's O1 setting: an older copy names ``old`` as X's holder; ``old`` was DELeted
since and ``run`` got X; ``run``'s ``/32`` route went. Restored, ``old``'s record keeps X (``run``'s
pod rule names X) and is doubtful (``HOLD_ON_RELEASE``). docs/safety.md says what that costs: "that
record's address stays held when the pod goes, by `unrouted` ... (a leak until the DEL of the pod
that uses it names it in its `prevResult`". That holds when the record goes first (GC, then
``run``'s DEL). In the other order:

* ``run``'s DEL (its cached result naming X, as libcni sends it) finds no record of ``run``, and X
  held by ``old``'s record, not by ``unrouted``: ``CniService._unrouted_of`` gives None, nothing is
  released, and ``teardown`` without an address leaves X's pod rule;
* with GC (CRI-O), ``old``'s record is released after that: X to ``unrouted``, and no DEL will ever
  name X again (``run``'s was answered; libcni dropped its cache);
* with no GC (containerd), ``old``'s record stays: X's rule is still on the host, so every later
  restore keeps ``old`` (``unwired_pods``), now as a trusted record (no routeless veth is left).

Either way X never returns to the pool: held for as long as the checkpoint lasts."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.agent_world import cni
from tests.helpers.first_start import Node, add_until, grant
from tests.helpers.kernel_pods import KernelPods, answered_start

X = "10.0.0.50"


def _gc(agent: Any, valid: list[str]) -> dict[str, Any]:
    conf = {
        "cniVersion": "1.1.0",
        "name": "warmpool",
        "type": "warmpool-cni",
        "cni.dev/valid-attachments": [{"containerID": c, "ifname": "eth0"} for c in valid],
    }
    return agent.cni.handle({"command": "GC", "config": conf})  # type: ignore[no-any-return]


def _holder(agent: Any) -> str | None:
    """Who holds X: a pod's record, or a recovered holder; None when it is free."""
    rec = [p.container_id for p in agent.ds.pods() if p.ip == X]
    return rec[0] if rec else agent.ds.recovered_holder(X)


@pytest.mark.xfail(
    strict=True,
    reason="review 15, L2: a running pod's DEL that comes before the doubtful record's end frees "
    "nothing; X then stays held by the copy's record or by 'unrouted' for as long as the checkpoint lasts",
)
@pytest.mark.parametrize("runtime", ["gc-after-the-del", "no-gc"])
def test_x_returns_once_both_the_running_pod_and_the_copys_record_are_gone(tmp_path: Path, runtime: str) -> None:
    n = Node(tmp_path, adopt_launch_pool=False)
    host = n.pods = KernelPods()
    backup = tmp_path / "backup"
    try:
        agent = n.start()
        grant(n, agent, [X])
        assert add_until(n, agent, "old") == X
        n.step(30)
        shutil.copytree(n.state, backup)  # the older copy: "old" holds X
        assert cni(agent, "DEL", "old")["ok"]
        assert add_until(n, agent, "run") == X
        n.step(30)
        host.flush_routes()  # run's veth and pod rule stay; its /32 route went
        agent = answered_start(n, True, backup)
        n.step(61)
        assert cni(agent, "DEL", "run", prev_ip=X)["ok"]  # run ends; libcni passes its cached result
        assert host.holders(X) == [], "setup: no pod carries X any more"
        if runtime == "gc-after-the-del":
            assert _gc(agent, [])["ok"]  # the runtime lists neither
        else:
            agent = answered_start(n, True)  # a later restart, on the node's own checkpoint
        for _ in range(4):
            n.step(30)
        assert _holder(agent) is None, (
            f"{X}: no pod carries it (run DELeted, old long gone); still held by {_holder(agent)!r}"
            f" (pod rules for it on the host: {X in host.rules})"
        )
    finally:
        n.stop()
