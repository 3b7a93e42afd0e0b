"""Reconcile: two-phase GC, terminated nodes, drift, expired leases (emulated EC2)."""

from __future__ import annotations

import pytest

from functions.reconciler import ABSENT_GRACE_S, Reconciler
from tests.helpers.allocate_world import AllocatorWorld
from warmpool import names
from warmpool.eni_scope import lifecycle_permitted, permissions


def _rec(w: AllocatorWorld) -> Reconciler:
    return w.reconciler()


def _detached_eni(w: AllocatorWorld, tags: dict[str, str]) -> str:
    c = w.emu.client()
    resp = c.create_network_interface(
        SubnetId=w.subnets[0],
        TagSpecifications=[
            {"ResourceType": "network-interface", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}
        ],
    )
    return str(resp["NetworkInterface"]["NetworkInterfaceId"])


WARMPOOL = {names.TAG_CLUSTER_NAME: "demo", names.TAG_MANAGED: "true"}
VPC_CNI = {
    names.TAG_CLUSTER_NAME: "demo",
    names.TAG_INSTANCE_ID: "i-0123456789abcdef0",
    names.TAG_CREATED_AT: "2026-01-01T00:00:00Z",
}
ENI_KINDS: dict[str, tuple[dict[str, str], bool]] = {
    # kind: (tags, whether the reconciler may mark, delete, unmark and repair it)
    "warmpool-created": (WARMPOOL, True),
    "vpc-cni-created": (VPC_CNI, False),
    "no-manage": ({names.TAG_CLUSTER_NAME: "demo", names.TAG_NO_MANAGE: "true"}, False),
    "no-manage-on-warmpool-created": ({**WARMPOOL, names.TAG_NO_MANAGE: "True"}, False),
    "other-cluster": ({**WARMPOOL, names.TAG_CLUSTER_NAME: "prod"}, False),
    "untagged": ({}, False),
}
ENI_MUTATIONS = ("CreateTags", "DeleteNetworkInterface", "ModifyNetworkInterfaceAttribute")


def _mutations(w: AllocatorWorld) -> int:
    return sum(v["calls"] for a, v in w.ec2_stats().items() if a in ENI_MUTATIONS)


@pytest.mark.parametrize("kind", sorted(ENI_KINDS))
def test_gc_follows_the_allocators_ownership_rule_for_detached_enis(kind: str) -> None:
    """Issue 21, defect 6: the GC decided on the cluster tag alone, so it marked and
    deleted the VPC CNI's and ``no_manage`` ENIs. Only an ENI the allocator itself may
    delete (``eni_scope.lifecycle_permitted``) is marked, then deleted."""
    tags, ours = ENI_KINDS[kind]
    w = AllocatorWorld(gc_age_s=300)
    eni = _detached_eni(w, tags)
    assert lifecycle_permitted(tags, "demo") is ours
    assert permissions(tags, "demo", in_cluster_vpc=True, device_index=-1).lifecycle is ours
    rec = _rec(w)
    w.emu.reset_stats()
    first = rec.run()
    w.clock.advance(301)
    second = rec.run()
    if ours:
        assert (first.marked, second.deleted) == ([eni], [eni])
        assert eni not in w.emu.enis
    else:
        assert first.marked == [] and second.deleted == [] and first.postponed == 0
        assert eni in w.emu.enis and names.TAG_GC_MARK not in w.emu.enis[eni].tags
        assert _mutations(w) == 0


@pytest.mark.parametrize("kind", sorted(ENI_KINDS))
def test_delete_on_termination_is_repaired_only_on_enis_warmpool_created(kind: str) -> None:
    """Defect 6: the repair modified attached VPC CNI ENIs (IAM refuses it in the stack;
    the local stack has no IAM, so there it really happened)."""
    tags, ours = ENI_KINDS[kind]
    w = AllocatorWorld()
    w.add_node("n1")
    eni = _detached_eni(w, tags)
    w.emu.client().attach_network_interface(InstanceId=w.nodes["n1"], NetworkInterfaceId=eni, DeviceIndex=1)
    w.emu.reset_stats()
    out = _rec(w).run()
    attachment = w.emu.enis[eni].attachment
    assert attachment is not None
    assert out.fixed_delete_on_termination == ([eni] if ours else [])
    assert attachment.delete_on_termination is ours
    if not ours:
        assert _mutations(w) == 0


@pytest.mark.parametrize("kind", sorted(ENI_KINDS))
def test_a_mark_is_cleared_only_on_enis_warmpool_created(kind: str) -> None:
    tags, ours = ENI_KINDS[kind]
    w = AllocatorWorld()
    w.add_node("n1")
    eni = _detached_eni(w, {**tags, names.TAG_GC_MARK: "1"})
    w.emu.client().attach_network_interface(InstanceId=w.nodes["n1"], NetworkInterfaceId=eni, DeviceIndex=1)
    w.emu.reset_stats()
    out = _rec(w).run()
    assert out.unmarked == ([eni] if ours else [])
    assert (w.emu.enis[eni].tags.get(names.TAG_GC_MARK) == "") is ours
    if not ours:
        assert _mutations(w) == 0


def test_gc_marks_then_deletes_only_our_detached_enis_after_the_age() -> None:
    w = AllocatorWorld(gc_age_s=300)
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
    w = AllocatorWorld(gc_age_s=300)
    w.add_node("n1")
    eni = _detached_eni(w, WARMPOOL)
    rec = _rec(w)
    assert rec.run().marked == [eni]
    w.emu.client().attach_network_interface(InstanceId=w.nodes["n1"], NetworkInterfaceId=eni, DeviceIndex=1)
    assert rec.run().unmarked == [eni]
    w.clock.advance(400)
    out = rec.run()
    assert out.deleted == [] and eni in [e.id for e in w.enis("n1")]


def test_terminated_nodes_lose_their_ledger_entry_and_result_queue() -> None:
    w = AllocatorWorld()
    w.add_node("n1")
    w.add_node("n2")
    w.deliver([w.report("n1", warm_ip=2, pending=40), w.report("n2", warm_ip=1)])
    w.emu.terminate_instance(w.nodes["n1"])
    out = _rec(w).run()
    assert out.forgotten_nodes == [w.nodes["n1"]] and out.queues_deleted == [w.nodes["n1"]]
    assert out.drift["ledger-without-instance"] == 1
    assert w.ledger.last_seq("demo", w.nodes["n1"]) == -1 and w.ledger.last_seq("demo", w.nodes["n2"]) == 1
    # DeleteOnTermination was set: nothing of n1 is left to collect.
    assert w.detached_enis() == []


def test_result_queues_of_gone_instances_are_deleted_whatever_the_ledger_says() -> None:
    """Issue 12: queues under the cluster's result prefix whose instance is gone,
    terminated or not the cluster's go even without a ledger entry; live
    cluster instances keep theirs."""
    w = AllocatorWorld()
    live = w.add_node("n1")
    dead = w.add_node("n2")  # a queue, never served: no ledger entry
    foreign = w.add_node("n3", cluster_tag=None)
    c = w.sqs.client()
    c.create_queue(QueueName=names.result_queue("demo", "i-0123456789abcdef0"))  # no such instance
    c.create_queue(QueueName=names.result_queue("other", dead))  # another cluster's prefix: not ours
    w.emu.terminate_instance(dead)
    assert w.ledger.entries("demo") == {}
    out = _rec(w).run()
    # Issue 21: an instance missing from DescribeInstances whose queue is young may be one
    # Describe does not list yet: its queue waits until it is older than EC2 lists the ended.
    assert sorted(out.orphan_queues_deleted) == sorted([dead, foreign])
    assert out.absent_kept == ["i-0123456789abcdef0"]
    w.clock.advance(ABSENT_GRACE_S + 1)
    out = _rec(w).run()
    assert out.orphan_queues_deleted == ["i-0123456789abcdef0"]
    left = c.list_queues(QueueNamePrefix="warmpool-").get("QueueUrls", [])
    names_left = sorted(u.rsplit("/", 1)[-1] for u in left)
    assert names.result_queue("demo", live) in names_left
    assert names.result_queue("other", dead) in names_left
    assert not any(
        i in n for n in names_left if n.startswith(names.result_queue_prefix("demo")) for i in (dead, foreign)
    )
    assert w.tally.get("OrphanResultQueuesDeleted") == 3


def test_rows_of_terminated_instances_are_removed() -> None:
    w = AllocatorWorld()
    w.add_node("n1")
    w.deliver([w.report("n1", warm_ip=1)])
    iid = w.nodes["n1"]
    assert iid in w.ledger.entries("demo")
    w.emu.terminate_instance(iid)
    out = _rec(w).run()
    assert out.forgotten_nodes == [iid] and w.ledger.entries("demo") == {}


def test_expired_leases_are_swept() -> None:
    w = AllocatorWorld()
    w.leases.claim("demo", "n1", "crashed", w.clock.now(), 60)
    w.clock.advance(61)
    assert _rec(w).run().leases_swept == 1


def test_missing_delete_on_termination_is_fixed() -> None:
    w = AllocatorWorld()
    w.add_node("n1")
    eni = _detached_eni(w, WARMPOOL)
    w.emu.client().attach_network_interface(InstanceId=w.nodes["n1"], NetworkInterfaceId=eni, DeviceIndex=1)
    assert _rec(w).run().fixed_delete_on_termination == [eni]
