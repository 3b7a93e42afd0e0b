"""Review 29 of 46e1919 (pending demand counted once per pod across its sandboxes).

R1, liveness (under-report): the count is keyed by the pod alone, not by the pod and its
interface. containerd's CNI library attaches a sandbox's networks in parallel (go-cni
``attachNetworks``: one goroutine per loaded network configuration), so a pod with two warmpool
networks has two ADDs waiting at once, each for an address; the report says one. The allocator
reads ``pending_demand`` as addresses (``warmpool.pool.PoolState.available`` = total - assigned -
pending), so it plans one address short for each such pod. Before 46e1919 each waiting attachment
counted.

R2, liveness (over-report of a served pod): once a pod's new sandbox got its address, a waiting
ADD of an earlier sandbox of the pod still counts the pod (until that sandbox's DEL or
``pending_ttl_s``), and that sandbox's DEL, if it comes after, counts the pod for
``PENDING_LINGER_S`` more. kubelet stops a pod's old sandboxes before it makes the next one, so it
needs a DEL that did not reach the agent in time (or a runtime that DELs a failed sandbox late);
the second half is new in 46e1919 (before, the DEL ended the count).

Both fixed: a waiting ADD counts its pod and interface (``Datastore._pending_pod``), and an
address given to a pod's interface ends every waiting ADD of that pod's interface, so a later
DEL of an earlier sandbox starts no linger."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from node_agent.controller import AttachedEni
from node_agent.datastore import PENDING_LINGER_S, Datastore
from tests.helpers.agent_world import cni_add
from tests.helpers.controller import PRIMARY
from tests.helpers.first_start import Node, grant

POD = "default/p"
ARGS = "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=p;K8S_POD_INFRA_CONTAINER_ID=s1"


def full() -> Datastore:
    ds = Datastore(cooldown_s=30.0, pending_ttl_s=120.0)
    ds.add_eni(PRIMARY, 0.0)
    ds.add_addresses(PRIMARY.eni_id, ["10.0.0.11"])
    assert ds.assign("running", "eth0", "ns", 0.0) is not None
    return ds


def test_two_attachments_of_one_sandbox_waiting_at_once_count_two_addresses() -> None:
    ds = full()
    assert ds.assign("s1", "eth0", "ns", 1.0, pod=POD) is None
    assert ds.assign("s1", "net1", "ns", 1.0, pod=POD) is None
    assert ds.pending(1.0) == 2, "two addresses wanted, one pod"


def _add(agent: Any, cid: str, ifname: str) -> dict[str, Any]:
    """An ADD as the plugin sends it, for interface ``ifname``, with containerd's CNI_ARGS."""
    return agent.cni.handle(
        {
            "command": "ADD",
            "container_id": cid,
            "ifname": ifname,
            "netns": f"/var/run/netns/{cid}",
            "config": {"cniVersion": "1.0.0", "name": f"warmpool-{ifname}", "type": "warmpool-cni"},
            "args": ARGS,
        }
    )


def test_the_report_counts_each_waiting_attachment_of_a_multi_network_pod(tmp_path: Path) -> None:
    n = Node(tmp_path, adopt_launch_pool=False)
    try:
        n.imds.enis[PRIMARY.eni_id] = AttachedEni(PRIMARY, [], [])  # no launch pool
        agent = n.start()
        grant(n, agent, ["10.0.0.50"])
        assert cni_add(agent, "other") == "10.0.0.50", "setup: the node's one address is taken"
        assert not _add(agent, "s1", "eth0")["ok"], "setup: nothing free"
        assert not _add(agent, "s1", "net1")["ok"], "setup: nothing free"
        seen = len(n.sqs.reports())
        n.step(2.0)
        sent = n.sqs.reports()[seen:]
        assert sent, "setup: a report after the ADDs found nothing"
        assert sent[-1].pending_demand == 2, [r.pending_demand for r in sent]
    finally:
        n.stop()


def test_a_served_pod_is_not_counted_by_an_earlier_sandboxs_waiting_add() -> None:
    ds = full()
    assert ds.assign("p~0", "eth0", "ns", 1.0, pod=POD) is None  # its DEL has not reached the agent
    ds.release("running", "eth0", 2.0)
    assert ds.assign("p~1", "eth0", "ns", 40.0, pod=POD) is not None, "setup: p's next sandbox served"
    assert ds.pending(40.0) == 0, "p holds an address: no pod waits"


def test_a_late_delete_of_a_served_pods_earlier_sandbox_adds_no_linger() -> None:
    ds = full()
    assert ds.assign("p~0", "eth0", "ns", 1.0, pod=POD) is None
    ds.release("running", "eth0", 2.0)
    assert ds.assign("p~1", "eth0", "ns", 40.0, pod=POD) is not None, "setup: p's next sandbox served"
    ds.release("p~0", "eth0", 45.0)  # the earlier sandbox's DEL, late
    assert ds.pending(45.0) == 0
    assert ds.pending(45.0 + PENDING_LINGER_S / 2) == 0
