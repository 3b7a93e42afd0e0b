"""The U1-leak fix (docs/safety.md, the thirteenth review) lets a DEL release an address a rebuild
holds by ``UNROUTED_HOLDER`` when the runtime's cached result of that attachment's ADD
(``prevResult``) names it. What it must not do: release a running pod's address, whether a pod
record holds it or the rebuild holds it for a pod whose ``/32`` route alone was flushed (review 12,
U1; review 11, W3), on a DEL of another attachment, or on a DEL that carries no result or a
malformed one. The DEL of the flushed pod itself does release it (the pod is gone)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from node_agent.agent import UNROUTED_HOLDER
from node_agent.cniserver import _prev_address
from tests.helpers.agent_world import cached_result, cni, cni_add
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


def test_a_flushed_pod_stays_held_through_other_dels_and_goes_with_its_own(tmp_path: Path) -> None:
    n = Node(tmp_path, adopt_launch_pool=False)
    host = n.pods = DockerNode()
    try:
        y = pod_on_fresh_address(n)
        # pod1 runs on with its /32 route flushed (veth and rule stay), and the checkpoint is lost
        n.lose_checkpoint()
        host.flushed.add(y)
        agent = n.start()
        assert _held(agent).get(y) == UNROUTED_HOLDER, "setup: the rebuild holds the flushed pod's address"
        assert cni(agent, "DEL", "ghost").get("ok")  # no cached result
        assert cni(agent, "DEL", "other", prev_ip="10.0.0.99").get("ok")  # another address
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
        # pod1 is deleted: its DEL (no record, its veth's name holds nothing) names y in its prevResult
        assert cni(agent, "DEL", "pod1", prev_ip=y).get("ok")
        assert y not in _held(agent), f"{y} still held after its pod's DEL"
        assert y not in host.flushed and ("pod1", "eth0") not in host.wired, "pod1's rules and veth left behind"
    finally:
        n.stop()


def test_the_address_is_read_only_from_our_interfaces_entry_of_a_well_formed_result() -> None:
    ours = cached_result("c1", "10.0.0.50")
    assert _prev_address({"prevResult": ours}, "eth0") == "10.0.0.50"
    assert _prev_address({"prevResult": ours}, "net1") is None  # another interface of the pod
    # chained after another plugin: its interface and address come first in the result
    chained = {
        "interfaces": [{"name": "macvlan0", "sandbox": "/var/run/netns/c1"}, *ours["interfaces"]],
        "ips": [
            {"address": "192.168.5.5/24", "interface": 0},
            {"address": "10.0.0.50/32", "interface": 2},
        ],
    }
    assert _prev_address({"prevResult": chained}, "eth0") == "10.0.0.50"
    host_side = {"interfaces": [{"name": "eth0"}], "ips": [{"address": "10.0.0.50/32", "interface": 0}]}
    assert _prev_address({"prevResult": host_side}, "eth0") is None  # no sandbox: not the pod's end
    for bad in (
        None,
        "x",
        {"prevResult": "x"},
        {"prevResult": {"interfaces": ours["interfaces"], "ips": [{"address": "10.0.0.50/32", "interface": 9}]}},
        {"prevResult": {"interfaces": ours["interfaces"], "ips": [{"address": "10.0.0.50/32", "interface": True}]}},
        {"prevResult": {"interfaces": ours["interfaces"], "ips": [{"address": "10.0.0.0/24", "interface": 1}]}},
        {"prevResult": {"interfaces": ours["interfaces"], "ips": [{"address": "fd00::1/32", "interface": 1}]}},
        {"prevResult": {"interfaces": ours["interfaces"], "ips": ["10.0.0.50/32"]}},
    ):
        assert _prev_address(bad, "eth0") is None, bad
