"""Review 23, G1 (a leak, new in b4963a8): review 22's R5 fix keeps the address of an ADD whose wiring
and teardown both failed held by a recovered holder named after the attachment's veth
(``CniService._hold_for_veth``), and only the attachment's DEL ends it. Before, the address stayed
in the attachment's *record* until the release; the record is what CNI GC sees
(``CniService.gc`` walks ``ds.pods()``), a recovered holder is not ("Recovered holders (known by
host veth only) wait for their DEL"). This holder is no rebuild's: the agent knew its container,
interface and network when it made it, and dropped them.

So when the runtime forgets the attachment without a DEL that reaches the agent (the sandbox removed
after its DEL failed, the DEL's answer lost across a runtime restart: the case CNI GC exists for,
SPEC.md "GC: Clean up any stale resources"), its GC lists the attachment no more, and the address
stays held. The pod's namespace is gone (its veth pair with it), so no start finds anything to
keep it for, but no start need come: until the agent next restarts
(``node_agent.agent.release_gone_holders``) the node's pool is one address short, and each such
ADD takes one more.

Fixed in stop 48: ``_hold_for_veth`` notes the holder with the attachment and its network
(``node_agent.datastore.FAILED_ADD_HOLDS``), and CNI GC tears down and releases it once the
runtime no longer lists the attachment, as it does a record (``CniService._gc_failed_add_holds``:
the same minimum age, the same network rule); the attachment's DEL drops the note."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from node_agent.datastore import FAILED_ADD_HOLDS
from node_agent.hostnet import host_veth_name
from tests.helpers.agent_world import cni, cni_add
from tests.helpers.first_start import Node, grant_more, pod_on_fresh_address
from tests.helpers.kernel_pods import FailingPods, runtime_gc

Y = "10.0.0.51"
VETH = host_veth_name("pod2", "eth0", "eni")


def _holder(agent: Any, ip: str) -> str | None:
    rec = [p.container_id for p in agent.ds.pods() if p.ip == ip]
    return rec[0] if rec else agent.ds.recovered_holder(ip)


def _failed_add_of_pod2(n: Node) -> FailingPods:
    """pod1 on a fresh address; pod2's ADD takes Y and fails, its wiring then its teardown."""
    host = n.pods = FailingPods()
    pod_on_fresh_address(n)
    grant_more(n, n.agent, [Y])
    host.half.add("pod2")
    host.stuck.add("pod2")
    assert cni_add(n.agent, "pod2") is None, "setup: pod2's ADD failed (wiring, then teardown)"
    assert n.agent.ds.recovered_holder(Y) == VETH, "setup: Y held for pod2's veth (R5's fix)"
    assert n.agent.ds.meta.get(FAILED_ADD_HOLDS) == {VETH: ["pod2", "eth0", "warmpool"]}
    host.half.clear()
    host.stuck.clear()
    return host


def test_the_gc_of_an_attachment_whose_failed_add_left_its_address_held_for_its_veth_releases_it(
    tmp_path: Path,
) -> None:
    """Failed before the fix (a strict xfail of review 23)."""
    n = Node(tmp_path, adopt_launch_pool=False)
    try:
        host = _failed_add_of_pod2(n)
        # The runtime removes the sandbox (its namespace, and the veth pair with it); its DEL never
        # reached the agent. Its GC, past the agent's minimum age, lists pod1 alone.
        del host.veth_of[("pod2", "eth0")], host.wired[("pod2", "eth0")]
        assert host.holders(Y) == [], "setup: no interface carries Y"
        n.step(61)
        assert runtime_gc(n.agent, ["pod1"])["ok"]
        for _ in range(3):
            n.step(30)
        assert _holder(n.agent, Y) is None, (
            f"{Y}: pod2 is no attachment of the runtime's and nothing carries it; still held by {_holder(n.agent, Y)!r}"
        )
        assert n.agent.ds.meta.get(FAILED_ADD_HOLDS) is None
    finally:
        n.stop()


def test_a_gc_that_lists_the_attachment_or_comes_too_soon_or_is_another_network_s_keeps_it(tmp_path: Path) -> None:
    n = Node(tmp_path, adopt_launch_pool=False)
    try:
        _failed_add_of_pod2(n)
        assert runtime_gc(n.agent, ["pod1"])["ok"]  # younger than the GC's minimum age
        assert n.agent.ds.recovered_holder(Y) == VETH
        n.step(61)
        assert runtime_gc(n.agent, ["pod1", "pod2"])["ok"]  # listed: the runtime's still
        assert n.agent.ds.recovered_holder(Y) == VETH
        other = {"cniVersion": "1.1.0", "name": "other", "type": "warmpool-cni", "cni.dev/valid-attachments": []}
        assert n.agent.cni.handle({"command": "GC", "config": other})["ok"]
        assert n.agent.ds.recovered_holder(Y) == VETH
        assert n.agent.ds.meta.get(FAILED_ADD_HOLDS) == {VETH: ["pod2", "eth0", "warmpool"]}
    finally:
        n.stop()


def test_the_attachment_s_del_releases_it_and_drops_the_note(tmp_path: Path) -> None:
    n = Node(tmp_path, adopt_launch_pool=False)
    try:
        _failed_add_of_pod2(n)
        assert cni(n.agent, "DEL", "pod2")["ok"]
        assert _holder(n.agent, Y) is None
        assert n.agent.ds.meta.get(FAILED_ADD_HOLDS) is None
    finally:
        n.stop()
