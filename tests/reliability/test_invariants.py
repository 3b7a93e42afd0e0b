"""The invariant checker catches what it claims to (a checker that never fails proves nothing)."""

from __future__ import annotations

from collections import Counter

import pytest

from node_agent.datastore import Datastore
from tests.helpers import invariants as inv
from tests.helpers.reliability_cluster import ReliabilityCluster


def _settled() -> ReliabilityCluster:
    c = ReliabilityCluster(2)
    for n in c.nodes:
        c.scale(n, 12)
    c.settle()
    return c


def test_a_clean_run_passes() -> None:
    _settled().check()


def test_catches_an_address_held_by_pods_of_two_nodes() -> None:
    c = _settled()
    a, b = c.nodes["n0"], c.nodes["n1"]
    ip = a.ds.pods()[0].ip
    rogue = Datastore()  # n1's agent wrongly believes it owns n0's address
    rogue.add_eni(b.ds.enis()[0].info, 0.0)
    rogue.add_addresses(b.ds.enis()[0].info.eni_id, [ip])
    rogue.assign("intruder", "eth0", "/x", 0.0)
    problems = inv.agent_problems(c.w.emu, {"n0": (a.instance_id, a.ds), "n1": (b.instance_id, rogue)})
    assert any("held by" in p for p in problems) and any("has not attached" in p for p in problems)


def test_catches_a_leaked_eni() -> None:
    c = _settled()
    c.w.emu.client().create_network_interface(
        SubnetId=c.w.subnets[0],
        TagSpecifications=[
            {
                "ResourceType": "network-interface",
                "Tags": [{"Key": "cluster.k8s.amazonaws.com/name", "Value": "elsewhere"}],
            }
        ],
    )
    c.check()  # not ours: the reconciler must leave it alone, and so does the checker
    eni = next(e for e in c.w.emu.enis.values() if e.attachment is None)
    eni.tags["cluster.k8s.amazonaws.com/name"] = c.w.cluster
    c.reconciler = lambda: type("Idle", (), {"run": lambda self: None})()  # type: ignore[method-assign]
    with pytest.raises(AssertionError, match="leaked"):
        c.check()


def test_catches_an_unexpected_dlq_message_and_a_hungry_pod() -> None:
    c = _settled()
    c.w.sqs.client().send_message(
        QueueUrl=c.w.dlq_url,
        MessageBody="x",
        MessageAttributes={"reason": {"DataType": "String", "StringValue": "invalid"}},
    )
    c.nodes["n0"].wanted = 13
    with pytest.raises(AssertionError) as info:
        c.check()
    assert "DLQ holds" in str(info.value) and "n0: 12 pods" in str(info.value)


def test_expected_dlq_reasons_pass() -> None:
    c = _settled()
    c.w.sqs.client().send_message(
        QueueUrl=c.w.dlq_url,
        MessageBody="x",
        MessageAttributes={"reason": {"DataType": "String", "StringValue": "invalid"}},
    )
    c.check(dlq=Counter(invalid=1))
