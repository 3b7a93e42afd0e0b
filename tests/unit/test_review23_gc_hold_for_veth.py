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

The GC should treat the holder as the attachment's: tear down (the veth name and the address are
known) and release, as it does a record (or ``_hold_for_veth`` should keep the record, marked, so
the GC sees it)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from node_agent.hostnet import PodNet, host_veth_name
from node_agent.netlink import NetlinkFailure
from tests.helpers.agent_world import cni_add
from tests.helpers.first_start import Node, grant_more, pod_on_fresh_address
from tests.helpers.kernel_pods import KernelPods

Y = "10.0.0.51"


class FailingPods(KernelPods):
    """:class:`KernelPods` whose set-up of ``half`` stops after the veth pair and the pod's address
    (its host route fails), and whose teardown of ``stuck`` fails before anything is removed."""

    def __init__(self) -> None:
        super().__init__()
        self.half: set[str] = set()
        self.stuck: set[str] = set()

    def setup(self, netns: str, ifname: str, container_id: str, ip: str, table: int, mtu: int) -> PodNet:
        if container_id in self.half:
            self.veth_of[(container_id, ifname)] = host_veth_name(container_id, ifname, self.made_with)
            self.wired[(container_id, ifname)] = ip
            raise NetlinkFailure(105, "route add: No buffer space available")
        return super().setup(netns, ifname, container_id, ip, table, mtu)

    def teardown(self, container_id: str, ifname: str, ip: str | None) -> None:
        if container_id in self.stuck:
            raise NetlinkFailure(105, "link del: No buffer space available")
        super().teardown(container_id, ifname, ip)


def _gc(agent: Any, valid: list[str]) -> dict[str, Any]:
    conf = {
        "cniVersion": "1.1.0",
        "name": "warmpool",
        "type": "warmpool-cni",
        "cni.dev/valid-attachments": [{"containerID": c, "ifname": "eth0"} for c in valid],
    }
    return agent.cni.handle({"command": "GC", "config": conf})  # type: ignore[no-any-return]


def _holder(agent: Any, ip: str) -> str | None:
    rec = [p.container_id for p in agent.ds.pods() if p.ip == ip]
    return rec[0] if rec else agent.ds.recovered_holder(ip)


@pytest.mark.xfail(
    strict=True,
    reason="review 23 G1 (a leak): the holder _hold_for_veth makes for a failed ADD whose teardown failed is "
    "invisible to CNI GC; an attachment the runtime forgot without a DEL keeps its address until a restart",
)
def test_the_gc_of_an_attachment_whose_failed_add_left_its_address_held_for_its_veth_releases_it(
    tmp_path: Path,
) -> None:
    n = Node(tmp_path, adopt_launch_pool=False)
    host = n.pods = FailingPods()
    try:
        pod_on_fresh_address(n)
        grant_more(n, n.agent, [Y])
        host.half.add("pod2")
        host.stuck.add("pod2")
        assert cni_add(n.agent, "pod2") is None, "setup: pod2's ADD failed (wiring, then teardown)"
        veth = host_veth_name("pod2", "eth0", "eni")
        assert n.agent.ds.recovered_holder(Y) == veth, "setup: Y held for pod2's veth (R5's fix)"
        host.half.clear()
        host.stuck.clear()
        # The runtime removes the sandbox (its namespace, and the veth pair with it); its DEL never
        # reached the agent. Its GC, past the agent's minimum age, lists pod1 alone.
        del host.veth_of[("pod2", "eth0")], host.wired[("pod2", "eth0")]
        assert host.holders(Y) == [], "setup: no interface carries Y"
        n.step(61)
        assert _gc(n.agent, ["pod1"])["ok"]
        for _ in range(3):
            n.step(30)
        assert _holder(n.agent, Y) is None, (
            f"{Y}: pod2 is no attachment of the runtime's and nothing carries it; still held by {_holder(n.agent, Y)!r}"
        )
    finally:
        n.stop()
