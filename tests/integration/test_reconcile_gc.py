"""Reconcile: two-phase GC, terminated nodes, drift, expired leases (emulated EC2)."""

from __future__ import annotations

from functions.reconciler import Reconciler
from tests.integration.test_allocate_world import World
from warmpool import names


def _rec(w: World) -> Reconciler:
    return Reconciler(ec2=w.ec2_client, sqs=w.sqs.client(), buckets=w.buckets, ledger=w.ledger, leases=w.leases,
                      clock=w.clock, settings=w.settings, tally=w.tally)


def _detached_eni(w: World, tags: dict[str, str]) -> str:
    c = w.emu.client()
    resp = c.create_network_interface(
        SubnetId=w.subnets[0], TagSpecifications=[{"ResourceType": "network-interface",
                                                    "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}],
    )
    return str(resp["NetworkInterface"]["NetworkInterfaceId"])


def test_gc_marks_then_deletes_only_our_detached_enis_after_the_age() -> None:
    w = World(gc_age_s=300)
    ours = _detached_eni(w, {names.TAG_CLUSTER_NAME: "demo", names.TAG_MANAGED: "true"})
    theirs = _detached_eni(w, {names.TAG_CLUSTER_NAME: "prod"})
    untagged = _detached_eni(w, {})
    rec = _rec(w)
    first = rec.run()
    assert first.marked == [ours] and first.deleted == []
    w.clock.advance(100)
    assert rec.run().deleted == []
    w.clock.advance(201)
    assert rec.run().deleted == [ours]
    left = set(w.detached_enis())
    assert ours not in left and {theirs, untagged} <= left


def test_a_marked_eni_attached_again_is_unmarked() -> None:
    w = World(gc_age_s=300)
    w.add_node("n1")
    eni = _detached_eni(w, {names.TAG_CLUSTER_NAME: "demo"})
    rec = _rec(w)
    assert rec.run().marked == [eni]
    w.emu.client().attach_network_interface(InstanceId=w.nodes["n1"], NetworkInterfaceId=eni, DeviceIndex=1)
    assert rec.run().unmarked == [eni]
    w.clock.advance(400)
    out = rec.run()
    assert out.deleted == [] and eni in [e.id for e in w.enis("n1")]


def test_terminated_nodes_lose_their_ledger_entry_and_result_queue() -> None:
    w = World()
    w.add_node("n1")
    w.add_node("n2")
    w.deliver([w.report("n1", warm_ip=2, pending=40), w.report("n2", warm_ip=1)])
    w.emu.terminate_instance(w.nodes["n1"])
    out = _rec(w).run()
    assert out.forgotten_nodes == ["n1"] and out.queues_deleted == [w.nodes["n1"]]
    assert out.drift["ledger-without-instance"] == 1
    assert w.ledger.last_seq("demo", "n1") == -1 and w.ledger.last_seq("demo", "n2") == 1
    # DeleteOnTermination was set: nothing of n1 is left to collect.
    assert w.detached_enis() == []


def test_expired_leases_are_swept() -> None:
    w = World()
    w.leases.claim("demo", "n1", "crashed", w.clock.now(), 60)
    w.clock.advance(61)
    assert _rec(w).run().leases_swept == 1


def test_missing_delete_on_termination_is_fixed() -> None:
    w = World()
    w.add_node("n1")
    eni = _detached_eni(w, {names.TAG_CLUSTER_NAME: "demo"})
    w.emu.client().attach_network_interface(InstanceId=w.nodes["n1"], NetworkInterfaceId=eni, DeviceIndex=1)
    assert _rec(w).run().fixed_delete_on_termination == [eni]
