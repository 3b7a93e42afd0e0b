"""Review 28 of 273023c (a DEL removes the rules of every address its recovered holder holds,
attached or not: seed 14483). The fix reads only this prefix's holder and only when the attachment
has no record; the same leak stays where it does not look.

P1 and P2 fixed so in stop 49 (``CniService._holder_ips``; the strict xfails removed)."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.helpers.agent_world import cni
from tests.helpers.controller import PRIMARY
from tests.helpers.first_start import Node, add_until, grant_more, pod_on_fresh_address
from tests.helpers.kernel_pods import KernelPods, answered_start

X = "10.0.0.50"


def test_a_del_under_a_new_prefix_removes_the_rules_of_its_old_veths_unattached_address(tmp_path: Path) -> None:
    n = Node(tmp_path, adopt_launch_pool=False)
    host = n.pods = KernelPods()
    try:
        assert pod_on_fresh_address(n) == X
        n.step(30)
        n.lose_checkpoint()
        eni = n.imds.enis[PRIMARY.eni_id]
        n.imds.enis[PRIMARY.eni_id] = eni._replace(ips=[ip for ip in eni.ips if ip != X])  # IMDS behind
        host.reader = host.made_with = "wp"  # the veth prefix changed across the restart
        agent = n.start(WARMPOOL_VETH_PREFIX="wp")
        n.step(30)
        veth = host.veth_of[("pod1", "eth0")]
        assert veth.startswith("eni") and agent.ds.recovered_holder(X) == veth, "setup: X held for pod1's eni veth"
        assert agent.ds.lookup_recovered(veth) is None, "setup: X on no ENI IMDS shows"
        backup = tmp_path / "copy"
        shutil.copytree(n.state, backup)  # a copy from before the DEL
        assert cni(agent, "DEL", "pod1")["ok"]
        assert agent.ds.recovered_holder(X) is None, "setup: the DEL ended the eni holder"
        assert X not in host.rules, "pod1's DEL (under wp) left the pod rule of its address"
        n.imds.enis[PRIMARY.eni_id] = eni  # IMDS caught up
        agent = answered_start(n, current=False, backup=backup, WARMPOOL_VETH_PREFIX="wp")
        assert agent.ds.recovered_holder(X) is None, "the copy's holder of DELeted pod1 stays for good"
    finally:
        n.stop()


def test_a_del_with_a_record_removes_the_rules_of_its_holders_unattached_address(tmp_path: Path) -> None:
    n = Node(tmp_path, adopt_launch_pool=False)
    host = n.pods = KernelPods()
    try:
        assert pod_on_fresh_address(n) == X
        n.step(30)
        n.lose_checkpoint()
        eni = n.imds.enis[PRIMARY.eni_id]
        n.imds.enis[PRIMARY.eni_id] = eni._replace(ips=[ip for ip in eni.ips if ip != X])  # IMDS behind
        agent = n.start()
        n.step(30)
        veth = host.veth_of[("pod1", "eth0")]
        assert agent.ds.recovered_holder(X) == veth and agent.ds.lookup_recovered(veth) is None, "setup"
        # The runtime's ADD of pod1 again (it saw no answer: the agent killed after the route, before
        # it answered): X is on no ENI IMDS shows, so the ADD gets another address.
        grant_more(n, agent, ["10.0.0.60"])
        y = add_until(n, agent, "pod1")
        assert y != X and agent.ds.recovered_holder(X) == veth, "setup: pod1 has a record of Y, X still held"
        backup = tmp_path / "copy"
        shutil.copytree(n.state, backup)  # a copy from before the DEL
        assert cni(agent, "DEL", "pod1")["ok"]
        assert agent.ds.recovered_holder(X) is None, "setup: the DEL ended the holder"
        assert X not in host.rules, "pod1's DEL left the pod rule of X, which its holder held"
        n.imds.enis[PRIMARY.eni_id] = eni  # IMDS caught up
        agent = answered_start(n, current=False, backup=backup)
        assert agent.ds.recovered_holder(X) is None, "the copy's holder of DELeted pod1 stays for good"
    finally:
        n.stop()
