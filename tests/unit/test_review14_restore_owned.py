"""Review 14, O1: ``node_agent/agent.py::hold_wired`` holds what the host shows of a pod only when
*no restored pod holds it*, and ``release_unwired`` keeps a restored pod whenever anything on the
host names its address. Neither asks whether the host's trace is that pod's. An older valid copy
(row 12: a backup restored, a disk that lost its last writes; reviews 10-13's copy) can name a pod
as the holder of an address that a *different*, running pod uses since: the copy's pod was DELeted
after it was written (or DELeted and ADDed again, getting another address), and the address went to
the running pod. When the running pod's ``/32`` route alone is gone (review 7's F1, review 13's
S1: a veth set down, a network manager's flush), ``wiring_disagreements`` reads nothing to refuse
(it reads routes through this prefix's veths only), ``release_unwired`` keeps the copy's pod (the
address has a pod rule: the running pod's), and ``hold_wired`` skips the address (a restored pod
holds it). The address now hangs on the copy's record, and that record's end frees it:

* CNI GC (spec 1.1; CRI-O's ocicni calls it, cri-o/ocicni#197) does not list the copy's pod (it
  was deleted long ago): ``CniService.gc`` tears it down, which removes the running pod's rule for
  the address (``teardown_pod`` removes every rule and route *for the address*), and releases it;
* or the copy's pod is still running under another address (DEL and ADD of the same attachment:
  the simulation's ``cni-readd``) and its own DEL comes one day: ``CniService._delete`` finds the
  copy's address for it (``Datastore.lookup``), tears down and releases *that*.

Answered "current", the address goes to the next pod while the running pod keeps it in its
namespace (two pods, one address); answered "not current", it is offered back as of unknown origin
(``UNKNOWN_ON_RELEASE``) and the allocator unassigns it from under the running pod (two nodes)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.agent_world import cni
from tests.helpers.first_start import Node, add_until, grant
from tests.helpers.kernel_pods import KernelPods, answered_start, contradicted_start, offers_and_adds

X, Y = "10.0.0.50", "10.0.0.51"


def _gc(agent: Any, valid: list[str]) -> dict[str, Any]:
    """CNI GC of the ``warmpool`` network, the runtime listing ``valid`` (interface eth0)."""
    conf = {
        "cniVersion": "1.1.0",
        "name": "warmpool",
        "type": "warmpool-cni",
        "cni.dev/valid-attachments": [{"containerID": c, "ifname": "eth0"} for c in valid],
    }
    return agent.cni.handle({"command": "GC", "config": conf})


def _old_then_run(n: Node, backup: Path | None) -> Any:
    """'old' gets X and is DELeted, then 'run' gets X; with ``backup``, the checkpoint is copied
    there while 'old' holds X. The agent."""
    agent = n.start()
    grant(n, agent, [X])
    assert add_until(n, agent, "old") == X
    n.step(30)
    if backup is not None:
        shutil.copytree(n.state, backup)  # the older copy: "old" holds X
    assert cni(agent, "DEL", "old")["ok"]
    assert add_until(n, agent, "run") == X  # "run" holds X from now on, to the end of the test
    n.step(30)
    return agent


@pytest.mark.parametrize("current", [True, False], ids=["current", "not-current"])
def test_gc_of_the_copys_deleted_pod_frees_the_address_a_running_pod_uses(tmp_path: Path, current: bool) -> None:
    n = Node(tmp_path, adopt_launch_pool=False)
    host = n.pods = KernelPods()
    backup = tmp_path / "backup"
    try:
        _old_then_run(n, backup)
        host.flush_routes()  # run's veth and pod rule stay; its /32 route went
        agent = answered_start(n, current, backup)
        n.step(61)  # GC leaves an earlier process's attachment alone for its first 60 s
        assert _gc(agent, ["run"])["ok"]  # the runtime lists the running pod only
        offered, others = offers_and_adds(n, agent)
        assert X not in offered and X not in others, (
            f"{X}: 'run' uses it (its veth, and until GC tore it down, its pod rule); the copy named"
            f" the deleted 'old' as its holder and GC of 'old' released it; then "
            f"{'offered back as of unknown origin' if X in offered else 'given to another pod'}"
            f" (namespaces carrying it: {host.holders(X)})"
        )
    finally:
        n.stop()


def test_on_its_own_checkpoint_the_same_host_keeps_the_address_the_running_pods(tmp_path: Path) -> None:
    """The contrast (passes): the same steps and the same flushed host, the agent back on its own
    (current) checkpoint, which names the running pod: GC leaves it, nobody else gets X."""
    n = Node(tmp_path, adopt_launch_pool=False)
    host = n.pods = KernelPods()
    try:
        _old_then_run(n, None)
        host.flush_routes()
        agent = answered_start(n, True)
        n.step(61)
        assert _gc(agent, ["run"])["ok"]
        offered, others = offers_and_adds(n, agent)
        assert X not in offered and X not in others
        assert host.holders(X) == [("run", "eth0")]
    finally:
        n.stop()


def test_the_del_of_a_pod_the_copy_names_under_its_old_address_frees_another_pods(tmp_path: Path) -> None:
    n = Node(tmp_path, adopt_launch_pool=False)
    host = n.pods = KernelPods()
    backup = tmp_path / "backup"
    try:
        agent = n.start()
        grant(n, agent, [X, Y])
        assert add_until(n, agent, "p") == X
        n.step(30)
        shutil.copytree(n.state, backup)  # the older copy: p holds X, Y free
        assert cni(agent, "DEL", "p")["ok"]  # the runtime DELs and ADDs p again (cni-readd)
        assert add_until(n, agent, "q") == X  # q's ADD came between the two
        assert add_until(n, agent, "p") == Y
        host.flush_routes()  # both veths and pod rules stay; the /32 routes went
        agent = contradicted_start(n, backup)
        assert cni(agent, "DEL", "p")["ok"]  # p ends, one day
        offered, others = offers_and_adds(n, agent)
        assert X not in others and X not in offered, (
            f"{X}: q uses it; the copy named p as its holder, and p's DEL (p used {Y}) released it"
            f" to {others} (namespaces carrying it: {host.holders(X)})"
        )
    finally:
        n.stop()
