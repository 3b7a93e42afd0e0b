"""A DEL's ``prevResult`` (the runtime's cached result of the attachment's ADD) never releases an
address: not a running pod's that a record holds, nor one a rebuild holds for a pod whose ``/32``
route alone was flushed (review 12, U1; review 11, W3). The thirteenth review's U1-leak fix let the
DEL of the flushed pod itself release it by its ``prevResult``; review 17 showed the cache can name
an address another pod got since, and the fix was taken back: that DEL leaves the address held (a
leak, the strict xfail below), never a second holder."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from node_agent.agent import UNROUTED_HOLDER
from tests.helpers.agent_world import cni, cni_add
from tests.helpers.bridge_host import DockerNode
from tests.helpers.first_start import Node, pod_on_fresh_address


def _held(agent: Any) -> dict[str, str]:
    return {h.ip: h.holder for h in agent.ds.recovered_holders()}


def _offered(report: Any) -> set[str]:
    return {ip for o in report.release for ip in o.ips}


def test_a_del_naming_a_running_pods_address_releases_nothing(tmp_path: Path) -> None:
    n = Node(tmp_path, adopt_launch_pool=False)
    host = n.pods = DockerNode()
    try:
        y = pod_on_fresh_address(n)
        agent = n.agent
        # an attachment this agent never saw, whose runtime cache names pod1's address
        assert cni(agent, "DEL", "ghost", prev_ip=y).get("ok")
        held = agent.ds.lookup("pod1", "eth0")
        assert held is not None and held.ip == y, f"pod1 lost {y} to another attachment's DEL"
        assert host.wired.get(("pod1", "eth0")) == y, "pod1's wiring was torn down by another attachment's DEL"
    finally:
        n.stop()


def _flushed(tmp_path: Path) -> tuple[Node, DockerNode, Any, str]:
    """pod1 runs on with its /32 route flushed (veth and rule stay), and the checkpoint is lost."""
    n = Node(tmp_path, adopt_launch_pool=False)
    host = n.pods = DockerNode()
    y = pod_on_fresh_address(n)
    n.lose_checkpoint()
    host.flushed.add(y)
    agent = n.start()
    assert _held(agent).get(y) == UNROUTED_HOLDER, "setup: the rebuild holds the flushed pod's address"
    return n, host, agent, y


def test_a_flushed_pod_stays_held_through_other_dels(tmp_path: Path) -> None:
    n, host, agent, y = _flushed(tmp_path)
    try:
        assert cni(agent, "DEL", "ghost").get("ok")  # no cached result
        assert cni(agent, "DEL", "other", prev_ip="10.0.0.99").get("ok")  # another address
        assert cni(agent, "DEL", "stale", prev_ip=y).get("ok")  # a cache naming the running pod's address
        offered: set[str] = set()
        others: list[str | None] = []
        for k in range(4):
            r = n.step(30)
            if r is not None:
                offered |= _offered(r)
            others.append(cni_add(agent, f"new{k}"))
        assert _held(agent).get(y) == UNROUTED_HOLDER, f"{y}, a running pod's (its route alone flushed), let go"
        assert y not in offered and y not in others, f"{y}, a running pod's, offered or given to another pod"
        assert y in host.flushed, "the running pod's rules were removed"
    finally:
        n.stop()


@pytest.mark.xfail(
    strict=True,
    reason="U1-leak open (a leak, never a second holder): a DEL does not trust its prevResult (review 17), "
    "so the flushed pod's own DEL cannot name its address; docs/safety.md, the seventeenth review",
)
def test_the_flushed_pods_own_del_frees_its_address(tmp_path: Path) -> None:
    n, host, agent, y = _flushed(tmp_path)
    try:
        assert cni(agent, "DEL", "pod1", prev_ip=y).get("ok")
        assert y not in _held(agent), f"{y} still held after its pod's DEL"
        assert y not in host.flushed and ("pod1", "eth0") not in host.wired, "pod1's rules and veth left behind"
    finally:
        n.stop()
