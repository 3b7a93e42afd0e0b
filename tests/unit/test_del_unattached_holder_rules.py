"""A DEL of a pod a rebuild holds for before IMDS shows its address removes the pod's rules (the
simulation's seed 14483, ``hold-unfounded``).

A start rebuilt from the host's wiring while IMDS showed an older state (the pod's address on no
ENI it lists): the pod's address held by its veth, "not attached yet". The pod's DEL tore down its
veth and released the holder, but passed no address to the teardown (``Datastore.lookup_recovered``
finds attached addresses only), so the pod rules of its address stayed. A copy of the checkpoint
from before the DEL, restored later, kept the holder: a pod rule is a trace of a pod by the
restore's rule (``release_gone_holders``), and no DEL comes again. Now the DEL removes the rules of
every address the attachment's recovered holder holds, attached or not."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.helpers.agent_world import cni
from tests.helpers.controller import PRIMARY
from tests.helpers.first_start import Node, pod_on_fresh_address
from tests.helpers.kernel_pods import KernelPods, answered_start

X = "10.0.0.50"


def test_the_del_of_a_pod_held_before_imds_shows_its_address_removes_its_rules(tmp_path: Path) -> None:
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
        assert agent.ds.recovered_holder(X) == veth, "setup: the rebuild holds X for pod1's veth"
        assert agent.ds.lookup_recovered(veth) is None, "setup: X on no ENI IMDS shows"
        backup = tmp_path / "copy"
        shutil.copytree(n.state, backup)  # a copy from before the DEL
        assert cni(agent, "DEL", "pod1")["ok"]
        assert X not in host.rules, "pod1's DEL left the pod rule of its address"
        assert X not in host.routes and ("pod1", "eth0") not in host.veth_of
        n.imds.enis[PRIMARY.eni_id] = eni  # IMDS caught up
        agent = answered_start(n, current=False, backup=backup)
        assert agent.ds.recovered_holder(X) is None, "the copy's holder of DELeted pod1 stays for good"
    finally:
        n.stop()
