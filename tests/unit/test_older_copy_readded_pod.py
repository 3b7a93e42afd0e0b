"""An older copy of the checkpoint restored after a pod was ADDed again with another address (the
simulation's seed 1001262, ``agent-double``).

Pod P held X; the runtime DELed and ADDed P's attachment again (same container, same interface:
the same veth name) and P got Y; X went back to the pool and EC2 gave it to another node. The
host's pod routes and rules were flushed (systemd-networkd), and the agent restarted on a copy
of its checkpoint from before the re-ADD: nothing on the host contradicted "P holds X", so the
copy was taken, X was kept for P in a second node's datastore, and P's next ADD would have been
given X. The start now also reads what each listed pod's interface carries
(``node_agent.agent.carried_disagreements``): P's carries Y, not X, so the copy is not taken and
the start rebuilds from IMDS and the host."""

from __future__ import annotations

import shutil
from pathlib import Path

from node_agent.agent import carried_disagreements
from node_agent.datastore import Datastore
from tests.helpers.agent_world import cni, cni_add
from tests.helpers.controller import PRIMARY
from tests.helpers.first_start import Node, grant_more, pod_on_fresh_address
from tests.helpers.kernel_pods import KernelPods

X, Y = "10.0.0.50", "10.0.0.51"


def test_an_older_copy_of_a_pod_added_again_since_is_not_taken(tmp_path: Path) -> None:
    n = Node(tmp_path, adopt_launch_pool=False)
    host = n.pods = KernelPods()
    try:
        assert pod_on_fresh_address(n) == X
        agent = n.agent
        n.step(30)
        backup = tmp_path / "copy"
        shutil.copytree(n.state, backup)  # P holds X in this copy
        grant_more(n, agent, [Y])
        assert cni(agent, "DEL", "pod1")["ok"]
        assert cni_add(agent, "pod2") == X, "setup: another pod takes X meanwhile"
        assert cni_add(agent, "pod1") == Y, "setup: pod1's attachment ADDed again gets Y"
        assert cni(agent, "DEL", "pod2")["ok"]
        assert host.carried("/var/run/netns/pod1", "eth0", "pod1") == [Y]
        eni = n.imds.enis[PRIMARY.eni_id]
        n.imds.enis[PRIMARY.eni_id] = eni._replace(ips=[ip for ip in eni.ips if ip != X])  # EC2 took X
        host.flush_routes()
        host.flush_rules()
        n.stop()
        shutil.rmtree(n.state)
        shutil.copytree(backup, n.state)
        agent = n.start()
        n.step()
        mine = agent.ds.lookup("pod1", "eth0")
        assert mine is None or mine.ip != X, "the copy's record of pod1 holding X was taken"
        assert X not in {p.ip for p in agent.ds.pods()}
        assert cni_add(agent, "pod1") == Y, "pod1's next ADD gets the address its interface carries"
    finally:
        n.stop()


class _Carrying:
    def __init__(self, carried: dict[str, list[str] | None] | None = None, broken: bool = False) -> None:
        self.said = carried or {}
        self.broken = broken

    def carried(self, netns: str, ifname: str, container_id: str) -> list[str] | None:
        if self.broken:
            raise OSError(2, "no such namespace")
        return self.said.get(container_id)


def _ds() -> Datastore:
    ds = Datastore()
    ds.add_eni(PRIMARY, 0.0)
    ds.add_addresses(PRIMARY.eni_id, [X, Y])
    assert ds.assign("p", "eth0", "/var/run/netns/p", 1.0) is not None  # p holds X
    return ds


def test_only_an_interface_carrying_other_addresses_disagrees() -> None:
    ds = _ds()
    assert carried_disagreements(ds, _Carrying({"p": [Y]})) == [
        f"p/eth0 carries {Y} but the checkpoint has it holding {X}"
    ]
    assert carried_disagreements(ds, _Carrying({"p": [Y, X]})) == [  # the record's beside another (review 31, A4)
        f"p/eth0 carries {Y}, {X} but the checkpoint has it holding {X}"
    ]
    assert carried_disagreements(ds, _Carrying({"p": [X]})) == []  # the record's alone
    assert carried_disagreements(ds, _Carrying({"p": []})) == []  # nothing on it: no word
    assert carried_disagreements(ds, _Carrying({"p": None})) == []  # no such pair: no word
    # a read that keeps failing (not a namespace gone: that is None) is no check: the start rebuilds
    assert carried_disagreements(ds, _Carrying(broken=True)) == [
        "p/eth0: its interface could not be read ([Errno 2] no such namespace)"
    ]
    assert carried_disagreements(ds, object()) == []  # a pod network that cannot tell
