"""Review 10, finding A2: the rebuild after a lost (or damaged) checkpoint holds only the pods
whose ``/32`` route goes through a veth of the agent's *current* prefix (``HostWiring.pods``).
A running pod wired under another prefix (``WARMPOOL_VETH_PREFIX`` changed across the restart,
the case review 7's F2 made safe for a restored checkpoint) shows in ``HostWiring.routed`` and
``HostWiring.stale`` only: ``Agent._rebuild`` takes the "empty" way (``not wiring.pods``), or,
damaged, recovers ``wiring.pods`` alone, and the pod's address is quarantined as an offer of
unknown origin, which the allocator unassigns (EC2 then gives it to another node) while the pod
runs. The start's first-start check already counts ``routed`` as a pod (review of row 30, F3);
the rebuild does not."""

from __future__ import annotations

from pathlib import Path

from node_agent.hostnet import HostWiring, host_veth_name
from tests.helpers.agent_world import cni_add
from tests.helpers.controller import PRIMARY
from tests.helpers.first_start import Node, PrefixedWiring, pod_on_fresh_address


def _offered(report) -> set[str]:
    return {ip for o in report.release for ip in o.ips}


def test_a_rebuild_after_a_veth_prefix_change_never_offers_a_running_pods_address(tmp_path: Path) -> None:
    n = Node(tmp_path, adopt_launch_pool=False)
    wiring = PrefixedWiring()
    n.pods = wiring
    try:
        got = pod_on_fresh_address(n)
        # the state directory is lost, and the agent comes back with another veth prefix
        n.lose_checkpoint()
        wiring.reader = "wp"
        agent = n.start(WARMPOOL_VETH_PREFIX="wp")
        offered: set[str] = set()
        for _ in range(5):
            r = n.step(30)
            if r is not None:
                offered |= _offered(r)
        assert got not in offered, (
            f"{got}, routed on the host to a running pod's veth, offered back after the rebuild"
            " (an offer of unknown origin: the allocator unassigns it, another node gets it)"
        )
        assert cni_add(agent, "pod2") != got
    finally:
        n.stop()


def test_a_restored_copy_holds_a_pool_address_routed_to_another_prefixs_veth() -> None:
    """The start after a restore (``hold_wired``): an older valid copy lacking a pod wired under another
    veth prefix leaves its address free; the route alone shows the pod, and the address is held by a
    recovered holder named after that veth (before: free, and the check of this prefix's veths passed
    the copy: argued by review 10). The gateway's route (another link) is held too, never attached."""
    from node_agent.agent import hold_wired
    from node_agent.datastore import Datastore

    ds = Datastore(cooldown_s=0.0)
    ds.add_eni(PRIMARY, 0.0)
    ds.add_addresses(PRIMARY.eni_id, ["10.0.0.50", "10.0.0.51"])
    old = host_veth_name("c1", "eth0", "eni")
    wiring = HostWiring(
        pods={},
        stale=["10.0.0.50"],
        routed=frozenset({"10.0.0.50", "10.0.0.1"}),
        links=frozenset({old, "ens5"}),
        routed_via={"10.0.0.50": old, "10.0.0.1": "ens5"},
        veths=frozenset({old}),
    )
    hold_wired(ds, wiring, 1.0, "wp")
    held = {h.ip: h.holder for h in ds.recovered_holders()}
    assert held == {"10.0.0.50": old, "10.0.0.1": "ens5"}
    assert ds.assign("p1", "eth0", "ns", 2.0).ip == "10.0.0.51"  # type: ignore[union-attr]
    assert ds.assign("p2", "eth0", "ns", 2.0) is None
    assert hold_wired(ds, wiring, 3.0, "wp") == []  # a second start: nothing new to say
