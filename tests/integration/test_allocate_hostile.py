"""Issue 12: one node must not be able to hurt others through what it reports.

Each test reproduces a finding of the issue against the allocator (emulated
EC2, in-memory stores, identities signed by the emulated IMDS's test key) and
fails on the code before the fix: forged releases, seq poisoning, name
spraying, ENIs warmpool may not touch, the primary ENI's first-contact tag.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

import boto3
import pytest
from moto import mock_aws

from emulated.clock import VirtualClock
from functions.allocator import SEQ_AHEAD_LIMIT
from tests.helpers.allocate_world import AllocatorWorld
from warmpool import names
from warmpool.messages import OFFER_MAX_AGE_CEILING_S


def _dlq(w: AllocatorWorld) -> list[str]:
    return [m["MessageAttributes"]["reason"]["StringValue"] for m in w.queued(w.dlq_url)]


def _secondaries(w: AllocatorWorld, node: str) -> dict[str, set[str]]:
    return {e.id: set(e.secondary) for e in w.enis(node)}


def _victim_with_pods(w: AllocatorWorld) -> tuple[str, str, list[str]]:
    """n1 whose primary ENI's 9 secondary addresses are all held by pods; n2 the forger."""
    w.add_node("n1", "m5.large")
    w.add_node("n2", "m5.large")
    w.deliver([w.report("n1", warm_ip=10, pending=10)])
    eni = w.enis("n1")[0]
    ips = sorted(eni.secondary)
    assert len(ips) == 9
    w.pods["n1"] = 9
    return w.nodes["n1"], eni.id, ips


def test_a_forged_release_for_another_node_is_refused_and_changes_nothing() -> None:
    """Finding 1: n2 reports as n1 (its instance id and name) offering n1's
    addresses; n2 has only its own identity document, so the report is refused
    before anything is planned (on main the allocator unassigned them)."""
    w = AllocatorWorld()
    victim, eni, ips = _victim_with_pods(w)
    before = _secondaries(w, "n1")
    forged = json.loads(w.report("n1", warm_ip=0, assigned=0, release=[{"eni_id": eni, "ips": ips}]).to_json())
    forged["identity"] = w.imds.identity(w.nodes["n2"]).model_dump()  # the forger's own, genuine identity
    w.clock.advance(5)
    without = {k: v for k, v in forged.items() if k != "identity"}
    without["seq"] = forged["seq"] + 1
    out = w.deliver([json.dumps(forged), json.dumps(without)])
    assert out.rejected == 2 and out.served == 0
    assert sorted(_dlq(w)) == ["identity-instance-mismatch", "identity-missing"]
    assert _secondaries(w, "n1") == before
    assert w.ledger.last_seq("demo", victim) == 1  # nothing recorded for the victim


def test_a_forged_release_through_a_tampered_document_is_refused() -> None:
    """The forger edits the victim's instance id into its own signed document."""
    w = AllocatorWorld()
    victim, eni, ips = _victim_with_pods(w)
    before = _secondaries(w, "n1")
    forged = json.loads(w.report("n1", warm_ip=0, assigned=0, release=[{"eni_id": eni, "ips": ips}]).to_json())
    own = w.imds.identity(w.nodes["n2"])
    forged["identity"] = {"document": own.document.replace(w.nodes["n2"], victim), "signature": own.signature}
    out = w.deliver([json.dumps(forged)])
    assert out.rejected == 1 and _dlq(w) == ["identity-signature-invalid"]
    assert _secondaries(w, "n1") == before


def test_a_seq_far_ahead_is_refused_and_later_reports_are_served() -> None:
    """Finding 2 (seq poisoning): a seq more than 2^20 ahead of max(last seq,
    now in ms) is refused; on main it was recorded and every later report of
    the instance was stale."""
    w = AllocatorWorld()
    iid = w.add_node("n1")
    now_ms = int(w.clock.now() * 1000)
    out = w.deliver([w.report("n1", seq=2**62, warm_ip=1)])
    assert out.rejected == 1 and _dlq(w) == ["seq-too-far-ahead"]
    assert w.ledger.last_seq("demo", iid) == -1
    # Just inside the bound is fine (the agent's seq is max(last + 1, now_ms)).
    out = w.deliver([w.report("n1", seq=now_ms + SEQ_AHEAD_LIMIT, warm_ip=1)])
    assert out.served == 1
    out = w.deliver([w.report("n1", seq=now_ms + SEQ_AHEAD_LIMIT + 1, warm_ip=4, pending=4)])
    assert out.served == 1 and w.addresses("n1") >= 4


def test_another_nodes_name_with_a_huge_seq_does_not_make_its_reports_stale() -> None:
    """Finding 2: n2 (valid identity) reports under n1's name with a seq near
    the limit; n1's own later reports are still served (rows are keyed by
    instance, the name is a label)."""
    w = AllocatorWorld()
    w.add_node("n1")
    w.add_node("n2")
    poison = json.loads(w.report("n2", seq=int(w.clock.now() * 1000) + SEQ_AHEAD_LIMIT, warm_ip=1).to_json())
    poison["node"] = "n1"
    w.deliver([json.dumps(poison)])
    out = w.deliver([w.report("n1", warm_ip=3, pending=3)])
    assert out.stale == 0 and out.served == 1 and w.addresses("n1") >= 3
    assert w.ledger.last_seq("demo", w.nodes["n1"]) == 1


def test_one_instance_under_500_names_has_one_ledger_row_and_one_lease() -> None:
    """Finding 2 (name spraying): 500 invented names for one instance made 500
    rows on main; keyed by instance they are one."""
    w = AllocatorWorld()
    iid = w.add_node("n1")
    for batch in range(50):
        bodies = []
        for i in range(10):
            r = json.loads(w.report("n1", warm_ip=1).to_json())
            r["node"] = f"spray-{batch * 10 + i}"
            bodies.append(json.dumps(r))
        w.deliver(bodies)
    assert list(w.ledger.entries("demo")) == [iid]
    assert w.ledger.last_seq("demo", iid) == 500


def _attach_foreign_eni(w: AllocatorWorld, node: str, tags: dict[str, str]) -> str:
    c = w.emu.client()
    eni = c.create_network_interface(
        SubnetId=w.subnets[0],
        TagSpecifications=[
            {"ResourceType": "network-interface", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}
        ],
    )["NetworkInterface"]["NetworkInterfaceId"]
    c.attach_network_interface(NetworkInterfaceId=eni, InstanceId=w.nodes[node], DeviceIndex=1)
    return eni


def test_an_eni_tagged_no_manage_is_never_filled_or_drained() -> None:
    """Finding 4: the planner filled a no_manage ENI attached by another tool
    with 29 pod addresses on main; now it is skipped as the VPC CNI skips it,
    and ENIs that carry only the cluster's tag are not changed either."""
    w = AllocatorWorld()
    w.add_node("n1", "m5.4xlarge")
    no_manage = _attach_foreign_eni(w, "n1", {names.TAG_NO_MANAGE: "True"})
    other = w.emu.client().create_network_interface(
        SubnetId=w.subnets[0],
        TagSpecifications=[
            {"ResourceType": "network-interface", "Tags": [{"Key": names.TAG_CLUSTER_NAME, "Value": "demo"}]}
        ],
    )["NetworkInterface"]["NetworkInterfaceId"]
    w.emu.client().attach_network_interface(NetworkInterfaceId=other, InstanceId=w.nodes["n1"], DeviceIndex=2)
    out = w.deliver([w.report("n1", warm_ip=40, pending=40)])
    assert out.served == 1
    by_id = {e.id: e for e in w.enis("n1")}
    assert not by_id[no_manage].secondary
    assert not by_id[other].secondary
    assert w.addresses("n1") >= 40  # served elsewhere: the primary and new ENIs
    # A release offer naming the no_manage ENI's addresses changes nothing there.
    w.emu.client().assign_private_ip_addresses(NetworkInterfaceId=no_manage, SecondaryPrivateIpAddressCount=2)
    held = sorted(w.emu.enis[no_manage].secondary)
    w.clock.advance(120)
    w.deliver([w.report("n1", warm_ip=0, release=[{"eni_id": no_manage, "ips": held}])])
    assert sorted(w.emu.enis[no_manage].secondary) == held
    assert no_manage in w.emu.enis


def test_the_primary_eni_is_tagged_for_the_cluster_at_first_contact_paying_a_token() -> None:
    w = AllocatorWorld()
    w.add_node("n1", "m5.large")
    primary = w.enis("n1")[0]
    assert names.TAG_PRIMARY_ENI_OF not in primary.tags
    before = w.buckets.load("CreateTags", w.clock.now()).tokens
    w.deliver([w.report("n1", warm_ip=2, pending=2)])
    assert w.emu.enis[primary.id].tags[names.TAG_PRIMARY_ENI_OF] == "demo"
    assert w.emu.enis[primary.id].secondary  # then filled
    assert w.buckets.load("CreateTags", w.clock.now()).tokens <= before - 1 + 1e-9
    assert w.tally.get("PrimaryEnisTagged") == 1
    w.deliver([w.report("n1", warm_ip=4, pending=4)])
    assert w.tally.get("PrimaryEnisTagged") == 1  # only once


def _churn(w: AllocatorWorld, node: str, rounds: int, every_s: float = 1.0) -> None:
    """Alternate 'fill everything' and 'release everything' (offers dated to look long quarantined)."""
    cap = 240
    for i in range(rounds):
        if i % 2 == 0:
            w.deliver([w.report(node, warm_ip=cap, warm_eni=0, pending=cap, assigned=0)])
        else:
            offers = [
                {"eni_id": e.id, "ips": list(e.secondary), "quarantined_at": w.clock.now() - 30}
                for e in w.enis(node)
                if e.secondary
            ]
            w.deliver([w.report(node, warm_ip=0, warm_eni=0, assigned=0, release=offers)])
        w.clock.advance(every_s)


def test_a_node_flipping_between_fill_and_release_is_damped_and_counted() -> None:
    """Finding 3: on main a churning node's every flip was served (about 1,220
    each of Create/Attach/Modify/Detach/Delete in 300 s); now it is damped
    after a few flips (NodesDamped), its offers are taken back, and it can
    no longer make the allocator create and delete ENIs in a loop."""
    w = AllocatorWorld()
    w.add_node("churn", "m5.4xlarge")
    _churn(w, "churn", 120)
    stats = w.ec2_stats()
    assert w.tally.get("NodesDamped") == 1
    assert stats.get("DeleteNetworkInterface", {}).get("calls", 0) == 0
    assert stats["CreateNetworkInterface"]["calls"] <= 7  # the first fill only
    assert w.tally.get("ReleasesHeld") > 0


def _churn_over_containers(w: AllocatorWorld, rounds: int) -> None:
    """The churn above, its fills landing on one allocator container and its releases on
    another (the event-source mapping runs several; nothing pins a node's reports to one)."""
    containers = [w.alloc, w.allocator()]
    cap = 240
    for i in range(rounds):
        c = containers[i % 2]
        if i % 2 == 0:
            w.deliver([w.report("churn", warm_ip=cap, warm_eni=0, pending=cap, assigned=0)], alloc=c)
        else:
            offers = [
                {"eni_id": e.id, "ips": list(e.secondary), "quarantined_at": w.clock.now() - 30}
                for e in w.enis("churn")
                if e.secondary
            ]
            w.deliver([w.report("churn", warm_ip=0, warm_eni=0, assigned=0, release=offers)], alloc=c)
        w.clock.advance(1.0)


@pytest.mark.parametrize("store", ["memory", "dynamodb"])
def test_a_churning_node_is_damped_though_its_reports_land_on_different_containers(store: str) -> None:
    """Flip histories are shared (``FlipStore``): each container sees fill, release, fill... only
    through the shared store. With a history per container (``flips=None``), which is what
    main had, the same churn is never damped and ENIs are created and deleted in a loop."""

    def run(shared: bool) -> AllocatorWorld:
        w = (
            AllocatorWorld(dynamo=boto3.client("dynamodb", region_name="us-east-1"))
            if store == "dynamodb"
            else AllocatorWorld()
        )
        if not shared:
            w.flips = None
            w.alloc = w.allocator()
        w.add_node("churn", "m5.4xlarge")
        _churn_over_containers(w, 120)
        return w

    with mock_aws():
        w = run(shared=True)
        assert w.tally.get("NodesDamped") == 1
        assert w.ec2_stats().get("DeleteNetworkInterface", {}).get("calls", 0) == 0
        assert w.tally.get("FlipHistoriesUnshared") == 0
    with mock_aws():
        unshared = run(shared=False)
        assert unshared.tally.get("NodesDamped") == 0
        assert unshared.ec2_stats().get("DeleteNetworkInterface", {}).get("calls", 0) > 0


class _Ahead:
    """An allocator container's clock, ``by`` seconds ahead of the world's (``lambda-clock-skew``)."""

    def __init__(self, base: VirtualClock, by: float) -> None:
        self.base, self.by = base, by

    def now(self) -> float:
        return self.base.now() + self.by


def test_an_honest_node_is_not_damped_because_containers_disagree_on_its_offers_age() -> None:
    """Seed 517 of `warmpool sim` (`not-settled`): a node repeats one standing offer in every
    report while a pod waits. To a container whose clock is past the offer's 60 s age limit the
    offer is too old to act on and is dropped from the report it plans; the flip count then read
    that report as asking for addresses, and the next report, on a container in step, as
    offering them: every report a flip, and after six the honest node was damped for 10 minutes,
    its surplus held. The flips are the node's (what it asks for, whatever the rules then let
    happen): counted on the report as it sent it, these are all "release"."""
    w = AllocatorWorld()
    w.add_node("n1", "m5.4xlarge")
    w.deliver([w.report("n1", warm_ip=4, pending=2)])
    eni = w.enis("n1")[0]
    offered = {"eni_id": eni.id, "ips": [eni.secondary[-1]], "quarantined_at": w.clock.now()}
    containers = [w.alloc, w.allocator(clock=_Ahead(w.clock, OFFER_MAX_AGE_CEILING_S + 1.0))]
    for i in range(10):
        w.clock.advance(5.0)
        w.deliver([w.report("n1", warm_ip=4, pending=1, release=[offered])], alloc=containers[i % 2])
    assert w.tally.get("ReleaseOffersExpired") > 0, "the container ahead found the offer too old"
    assert w.tally.get("NodesDamped") == 0


def test_the_allocator_holds_releases_of_young_offers_and_young_enis() -> None:
    """The release delay and the minimum ENI age are the allocator's own rules:
    an agent dating its offer 'now' or offering a new ENI back gets nothing
    unassigned or deleted until they are old enough (on main both went at once)."""
    w = AllocatorWorld(flip_limit=0)
    w.add_node("n1", "m5.large")
    w.deliver([w.report("n1", warm_ip=2, pending=12)])
    primary, second = w.enis("n1")[:2]
    on_primary = len(primary.secondary)
    young = [
        {"eni_id": second.id, "ips": list(second.secondary), "quarantined_at": w.clock.now()},
        {"eni_id": primary.id, "ips": list(primary.secondary[-3:]), "quarantined_at": w.clock.now()},
    ]
    w.deliver([w.report("n1", warm_ip=2, release=young)])
    assert second.id in [e.id for e in w.enis("n1")] and len(w.enis("n1")[0].secondary) == on_primary
    # Old enough offers, but the second ENI is younger than min_eni_age_s: the primary's addresses go, the ENI stays.
    w.clock.advance(w.settings.release_delay_s)
    aged = [{**o, "quarantined_at": w.clock.now() - w.settings.release_delay_s} for o in young]
    w.deliver([w.report("n1", warm_ip=2, release=aged)])
    assert second.id in [e.id for e in w.enis("n1")]
    assert len(w.enis("n1")[0].secondary) == on_primary - 3
    # Once the ENI is old enough, it is deleted.
    w.clock.advance(w.settings.min_eni_age_s)
    again = [{"eni_id": second.id, "ips": list(second.secondary), "quarantined_at": w.clock.now() - 20}]
    w.deliver([w.report("n1", warm_ip=2, release=again)])
    assert second.id not in [e.id for e in w.enis("n1")]
    assert w.tally.get("ReleasesHeld") >= 2


def test_a_node_past_its_fair_share_waits_while_others_are_served() -> None:
    """Finding 3: when a bucket cannot pay everyone, an instance that already
    spent its share in the window is deferred and the others are paid."""
    from warmpool.buckets import BucketSpec

    w = AllocatorWorld(
        bucket_capacity={"CreateNetworkInterface": 10.0},
        bucket_refill={"CreateNetworkInterface": 0.5},
        flip_limit=0,
        budget_fraction=1.0,
    )
    w.add_node("big", "m5.4xlarge")
    for i in range(4):
        w.add_node(f"n{i}", "m5.large")
    w.deliver([w.report("big", warm_ip=90, warm_eni=0)])  # its first plan in the window always goes: 3 ENIs
    assert w.settings.bucket_spec("CreateNetworkInterface") == BucketSpec(capacity=10, refill_per_s=0.5)
    w.clock.advance(1)
    out = w.deliver(
        [w.report("big", warm_ip=200, warm_eni=0, pending=200)]
        + [w.report(f"n{i}", warm_ip=12, warm_eni=0, pending=12) for i in range(4)]
    )
    # On main the largest deficit went first and took the bucket.
    assert out.nodes[w.nodes["big"]].status == "deferred" and out.nodes[w.nodes["big"]].reason.startswith("fair share")
    assert len(w.enis("big")) == 4
    assert sum(len(w.enis(f"n{i}")) >= 2 for i in range(4)) >= 3
    assert w.tally.get("FairShareDeferred") >= 1


def _create_tags_calls(w: AllocatorWorld) -> int:
    return int(w.ec2_stats().get("CreateTags", {}).get("calls", 0))


def test_new_primary_enis_of_one_batch_are_tagged_in_one_call() -> None:
    # A burst of new nodes: one CreateTags for the batch, not one per node (each
    # node's own TagPrimaryEni is dropped once the batched call has tagged it).
    w = AllocatorWorld()
    for n in ("n1", "n2", "n3"):
        w.add_node(n, "m5.large")
    out = w.deliver([w.report(n, warm_ip=2, pending=2) for n in ("n1", "n2", "n3")])
    assert out.served == 3
    assert _create_tags_calls(w) == 1
    for n in ("n1", "n2", "n3"):
        primary = w.enis(n)[0]
        assert w.emu.enis[primary.id].tags[names.TAG_PRIMARY_ENI_OF] == "demo"
        assert w.emu.enis[primary.id].secondary
    assert w.tally.get("PrimaryEnisTagged") == 3


def test_a_throttled_batched_tag_falls_back_to_each_node_tagging_its_own() -> None:
    w = AllocatorWorld()
    for n in ("n1", "n2"):
        w.add_node(n, "m5.large")
    real = w.alloc.ec2.create_tags
    refused: list[list[str]] = []

    def once_throttled(resources: Sequence[str], tags: Mapping[str, str]) -> None:
        if len(resources) > 1 and not refused:
            refused.append(list(resources))
            from functions.errors import Throttled

            raise Throttled("RequestLimitExceeded", "Request limit exceeded.", action="CreateTags")
        real(resources, tags)

    w.alloc.ec2.create_tags = once_throttled  # type: ignore[method-assign]
    out = w.deliver([w.report(n, warm_ip=2, pending=2) for n in ("n1", "n2")])
    assert refused and out.served == 2
    for n in ("n1", "n2"):
        assert w.emu.enis[w.enis(n)[0].id].tags[names.TAG_PRIMARY_ENI_OF] == "demo"
    assert _create_tags_calls(w) == 2  # each node's own, after the refused batch


def test_a_damped_node_is_handed_back_only_what_ec2_still_shows() -> None:
    """Hostile review, finding 2: an earlier invocation unassigned one offered
    address (its ``released`` result late or lost); the node, now damped, offers
    it again with the rest. The hand-back (``assigned``, no EC2 call) must not
    name the address EC2 no longer shows on the ENI, or the agent gives a pod an
    address EC2 may hand to another node."""
    w = AllocatorWorld()
    w.add_node("churn", "m5.4xlarge")
    _churn(w, "churn", 20)
    assert w.tally.get("NodesDamped") >= 1
    eni = w.enis("churn")[1]  # a secondary ENI, wholly offered: a DeleteEni the damping turns into a hand-back
    gone, kept = eni.secondary[0], eni.secondary[1:]
    w.ec2_client.unassign_private_ip_addresses(NetworkInterfaceId=eni.id, PrivateIpAddresses=[gone])  # the earlier call
    offer = [{"eni_id": eni.id, "ips": [gone, *kept], "quarantined_at": w.clock.now() - 30}]
    out = w.deliver([w.report("churn", warm_ip=0, warm_eni=0, assigned=0, release=offer)])
    handed = [
        ip for res in out.results for a in res.actions if a.kind == "assigned" and a.eni_id == eni.id for ip in a.ips
    ]
    assert handed, "the damped node's offer is handed back"
    assert gone not in handed and set(handed) <= set(kept)


def test_pods_waiting_on_a_node_at_its_ceiling_are_counted_and_get_nothing() -> None:
    """Finding D's ceiling, seen from a disagreeing agent (the hostile review's finding 5): the
    cluster's max pods is 6, the node's agent thinks otherwise and keeps asking. It is held at
    the ceiling, and the disagreement is counted (NodesAtPodCeiling) instead of passing unseen."""
    w = AllocatorWorld(max_pods=6)
    w.add_node("n1", "m5.large")
    w.deliver([w.report("n1", warm_ip=2, pending=4)])
    held = w.addresses("n1")
    assert 6 <= held <= 9  # up to the ceiling (the primary ENI's one call may fill it)
    assert w.tally.get("NodesAtPodCeiling") == 0
    w.deliver([w.report("n1", warm_ip=2, pending=20, assigned=held)])
    assert w.addresses("n1") == held
    assert w.tally.get("NodesAtPodCeiling") == 1


def test_a_reports_kubelet_max_pods_lowers_its_nodes_ceiling_and_never_raises_it() -> None:
    """Issue 24: node groups with their own kubelet maxPods. The cluster's ceiling is 12; a node whose
    kubelet says 4 is held at 4, one whose report says 500 (a hostile agent) is still held at 12, and
    one without the field (an older agent) at 12, however many pods each says are waiting."""
    w = AllocatorWorld(max_pods=12)
    for name in ("low", "high", "old"):
        w.add_node(name, "m5.large")
    kubelet = {"low": {"kubelet_max_pods": 4}, "high": {"kubelet_max_pods": 500}, "old": None}
    for _ in range(3):
        w.deliver([w.report(n, warm_ip=2, pending=30, assigned=w.addresses(n), extra=kubelet[n]) for n in kubelet])
    assert w.addresses("low") == 4
    assert w.addresses("high") == w.addresses("old") == 12
    assert w.tally.get("NodesAtPodCeiling") >= 3
