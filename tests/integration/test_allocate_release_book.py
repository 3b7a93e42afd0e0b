"""The allocator's release book against a Describe that lags (issue 21, defect 3;
docs/allocator.md, "Offers, releases and stale Describe"): written before each release
call, over Describe when planning, repeated in answers, settled by reports, and a node
waits rather than acting on a book it could not read or write."""

from __future__ import annotations

import json
from typing import Any

import pytest

from emulated.ec2 import Ec2Config
from functions.errors import AwsError
from tests.helpers.allocate_world import AllocatorWorld
from tests.helpers.crashing import Crash, CrashingEc2
from warmpool.messages import Action, Assigned, Released
from warmpool.release_book import ReleaseBook

LAG_S = 60.0


def _world() -> tuple[AllocatorWorld, str, list[str]]:
    """n1 with six secondaries on its primary ENI, n2 beside it; Describe 60 s behind."""
    w = AllocatorWorld(ec2_config=Ec2Config(describe_lag_min_s=LAG_S, describe_lag_max_s=LAG_S))
    w.add_node("n1", "m5.large")
    w.add_node("n2", "m5.4xlarge")
    w.tag_primary("n1")
    w.tag_primary("n2")
    eni = w.enis("n1")[0].id
    w.emu.client().assign_private_ip_addresses(NetworkInterfaceId=eni, SecondaryPrivateIpAddressCount=6)
    w.clock.advance(LAG_S + 1)
    return w, eni, list(w.enis("n1")[0].secondary)


def _offer(eni: str, ips: list[str], at: float) -> list[dict[str, Any]]:
    return [{"eni_id": eni, "ips": ips, "quarantined_at": at}]


def _actions(w: AllocatorWorld) -> list[Action]:
    return [a for r in w.results("n1") for a in r.actions]


def _give_away(w: AllocatorWorld, ips: list[str]) -> None:
    """EC2 gives these (freed) addresses to another node."""
    w.emu.client().assign_private_ip_addresses(NetworkInterfaceId=w.enis("n2")[0].id, PrivateIpAddresses=ips)


def _claimed(actions: list[Action]) -> set[str]:
    return {ip for a in actions if isinstance(a, Assigned) for ip in a.ips}


def test_a_crash_after_the_unassign_leaves_it_booked_and_nothing_is_handed_back() -> None:
    w, eni, ips = _world()
    x = ips[-2:]  # 6 addresses, 3 in use, WARM_IP_TARGET=1: two may go
    now = w.clock.now()
    n = w.report("n1", warm_ip=1, assigned=3, release=_offer(eni, x, now - 20))
    plain = w.ec2_client
    w.ec2_client = CrashingEc2(plain, "unassign_private_ip_addresses")
    crashing = w.allocator()  # the same stores: the release book is shared, as in DynamoDB
    w.ec2_client = plain
    with pytest.raises(Crash):
        crashing.handle_batch(w.records([n]))
    assert not set(x) & set(w.enis("n1")[0].secondary)  # EC2 took them; no ledger row, no answer
    assert w.ledger.last_seq("demo", w.nodes["n1"]) == -1 and w.results("n1") == []
    _give_away(w, x)
    # The report comes back (SQS), now with pods waiting; Describe still shows x on n1.
    w.clock.advance(w.settings.lease_ttl_s)
    again = w.report("n1", warm_ip=1, assigned=3, pending=2, release=_offer(eni, x, now - 20))
    w.deliver([again])
    actions = _actions(w)
    assert not _claimed(actions) & set(x), f"handed back addresses EC2 gave n2: {actions}"
    assert any(isinstance(a, Released) and set(a.ips) == set(x) for a in actions), actions
    assert w.tally.get("ReleasesRepeated") == 1
    assert w.ec2_stats()["UnassignPrivateIpAddresses"]["calls"] == 1  # not unassigned again (the offer is too old)


def test_a_crash_between_the_booking_and_the_unassign_is_unassigned_on_the_next_delivery() -> None:
    """Seeds 112 and 189 (the simulation's earlier world): the invocation died after booking
    the Unassign and before making it. Every later answer said ``released`` from the book;
    the agent dropped the addresses and EC2 kept them on the node for good. Now a report that
    offers them again, young enough to act on, gets them unassigned, for real. (The dead
    invocation's lease outlasts the first offer's age limit: the offer that comes back is the
    agent's next one, made after its release timeout took the addresses back and found them
    surplus again.)"""
    w, eni, ips = _world()
    x = ips[-2:]
    now = w.clock.now()
    n = w.report("n1", warm_ip=1, assigned=3, release=_offer(eni, x, now - 20))
    plain = w.ec2_client
    w.ec2_client = CrashingEc2(plain, "unassign_private_ip_addresses", before=True)
    crashing = w.allocator()
    w.ec2_client = plain
    with pytest.raises(Crash):
        crashing.handle_batch(w.records([n]))
    assert set(x) <= set(w.enis("n1")[0].secondary)  # never made
    assert w.books.load("demo", [w.nodes["n1"]])[w.nodes["n1"]].keys == set(x)  # booked
    w.clock.advance(w.settings.lease_ttl_s)
    again = w.report("n1", warm_ip=1, assigned=3, release=_offer(eni, x, w.clock.now() - 20))
    w.deliver([again])
    actions = _actions(w)
    assert any(isinstance(a, Released) and set(a.ips) == set(x) for a in actions), actions
    assert not set(x) & set(w.enis("n1")[0].secondary), "EC2 still has the addresses the answer says released"
    assert w.ec2_stats()["UnassignPrivateIpAddresses"]["calls"] == 2  # one per key (the crashed one never made)


def test_answers_repeat_the_release_until_a_report_no_longer_names_it() -> None:
    w, eni, ips = _world()
    x = ips[-2:]
    now = w.clock.now()
    w.deliver([w.report("n1", warm_ip=1, assigned=3, release=_offer(eni, x, now - 20))])
    assert any(isinstance(a, Released) for a in _actions(w))  # this answer is lost, say
    iid = w.nodes["n1"]
    assert w.books.load("demo", [iid])[iid].keys == set(x)
    # The agent still offers x (no answer came); Describe still shows x: only the repeat.
    w.clock.advance(1.0)
    w.deliver([w.report("n1", warm_ip=1, assigned=3, release=_offer(eni, x, now - 20))])
    again = _actions(w)
    assert again == [Released(eni_id=eni, ips=sorted(x), prefixes=[])], again
    # The agent applied a release: its next report names x nowhere; the book is settled.
    w.clock.advance(1.0)
    w.deliver([w.report("n1", warm_ip=1, assigned=3)])
    assert w.books.load("demo", [iid])[iid].taken == ()


class _Unwritable:
    """A release book store that reads but cannot write (DynamoDB down for writes)."""

    def __init__(self) -> None:
        self.saves = 0

    def load(self, cluster: str, instance_ids: Any) -> dict[str, ReleaseBook]:
        return {i: ReleaseBook() for i in instance_ids}

    def save(self, *a: Any) -> ReleaseBook | None:
        self.saves += 1
        raise AwsError("InternalServerError", "boom", "PutItem")


def test_a_release_that_cannot_be_booked_is_not_made() -> None:
    w, eni, ips = _world()
    books = _Unwritable()
    w.books = books
    w.alloc = w.allocator()
    out = w.deliver([w.report("n1", warm_ip=1, assigned=3, release=_offer(eni, ips[-2:], w.clock.now() - 20))])
    assert out.nodes[w.nodes["n1"]].status == "deferred" and "release book" in out.nodes[w.nodes["n1"]].reason
    assert books.saves == 1 and w.tally.get("ReleaseBooksUnread") == 1
    assert w.ec2_stats().get("UnassignPrivateIpAddresses", {}).get("calls", 0) == 0


def test_a_book_changed_since_the_plan_makes_the_node_wait() -> None:
    w, eni, ips = _world()
    x = ips[-2:]
    iid = w.nodes["n1"]
    report = w.report("n1", warm_ip=1, assigned=3, release=_offer(eni, x, w.clock.now() - 20))

    class _Racing:
        """Another invocation books something for the instance between our plan and our call."""

        def __init__(self, inner: Any) -> None:
            self.inner, self.loads = inner, 0

        def load(self, cluster: str, ids: Any) -> dict[str, ReleaseBook]:
            self.loads += 1
            if self.loads == 2:
                self.inner.save(cluster, iid, ReleaseBook().take(eni, ["10.0.0.250"], 1), 1e10)
            return self.inner.load(cluster, ids)

        def save(self, *a: Any) -> ReleaseBook | None:
            return self.inner.save(*a)

    w.books = _Racing(w.books)
    w.alloc = w.allocator()
    out = w.deliver([report])
    assert out.nodes[w.nodes["n1"]].status == "deferred" and "release book" in out.nodes[w.nodes["n1"]].reason
    assert w.ec2_stats().get("UnassignPrivateIpAddresses", {}).get("calls", 0) == 0


def test_an_address_ec2_assigns_to_the_node_again_leaves_the_book() -> None:
    w = AllocatorWorld(
        subnet_cidrs=("10.0.0.0/27",), ec2_config=Ec2Config(describe_lag_min_s=LAG_S, describe_lag_max_s=LAG_S)
    )
    w.add_node("n1", "m5.large")
    w.add_node("n2", "m5.4xlarge")
    w.tag_primary("n1")
    eni = w.enis("n1")[0].id
    w.emu.client().assign_private_ip_addresses(NetworkInterfaceId=eni, SecondaryPrivateIpAddressCount=6)
    w.clock.advance(LAG_S + 1)
    x = list(w.enis("n1")[0].secondary)[-2:]
    now = w.clock.now()
    w.deliver([w.report("n1", warm_ip=1, assigned=3, release=_offer(eni, x, now - 20))])
    assert _actions(w) == [Released(eni_id=eni, ips=sorted(x), prefixes=[])]
    iid = w.nodes["n1"]
    assert w.books.load("demo", [iid])[iid].keys == set(x)
    # All but five free addresses of the subnet go elsewhere: the node's next fill (its
    # ENI's five free slots) gets x back from EC2.
    pool = w.emu.subnets[w.subnets[0]].pool
    free = [pool.ip(i) for i in range(pool.size) if pool.is_free(pool.ip(i))]
    others = [ip for ip in free if ip not in x][3:]
    w.emu.client().assign_private_ip_addresses(NetworkInterfaceId=w.enis("n2")[0].id, PrivateIpAddresses=others)
    w.clock.advance(1.0)
    w.deliver([w.report("n1", warm_ip=1, assigned=4, pending=2, release=_offer(eni, x, now - 20))])
    actions = _actions(w)
    assert set(x) <= _claimed(actions), actions  # EC2's own answer to the Assign
    assert isinstance(actions[0], Released) and set(actions[0].ips) == set(x)  # the repeat comes first
    assert w.books.load("demo", [iid])[iid].taken == ()


@pytest.mark.parametrize(("code", "booked"), [("RequestLimitExceeded", False), ("InternalError", True)])
def test_a_release_ec2_refused_is_unbooked_and_an_ambiguous_one_stays(code: str, booked: bool) -> None:
    """Seed 210 of the simulation: a Detach throttled in a storm stayed booked, so every answer
    told the node its ENI was deleted, while EC2 kept it attached: leaked for good."""
    w, eni, ips = _world()
    w.emu.fail_next("UnassignPrivateIpAddresses", code)
    w.deliver([w.report("n1", warm_ip=1, assigned=3, release=_offer(eni, ips[-2:], w.clock.now() - 20))])
    iid = w.nodes["n1"]
    assert set(ips[-2:]) <= set(w.enis("n1")[0].secondary)  # EC2 did not unassign them
    assert (w.books.load("demo", [iid])[iid].keys == set(ips[-2:])) is booked


class _NoAnswer:
    """EC2 that never gets ``action``: the connection drops before the request is sent (the
    SDK raises; whether EC2 acted is unknown to the allocator, so the release stays booked)."""

    def __init__(self, inner: Any, action: str) -> None:
        self.inner, self.action = inner, action

    def __getattr__(self, name: str) -> Any:
        fn = getattr(self.inner, name)

        def call(**kw: Any) -> Any:
            if name == self.action:
                raise ConnectionResetError(f"{name}: connection reset")
            return fn(**kw)

        return call


def _offering_whole(r: Any, eni: str) -> Any:
    """The report as the agent sends it: a quarantined address is named only in its offer."""
    enis = [e.model_copy(update={"ips": [], "prefixes": [], "assigned": 0}) if e.eni_id == eni else e for e in r.enis]
    return r.model_copy(update={"enis": enis})


def test_a_booked_delete_whose_detach_never_reached_ec2_is_made_on_the_next_offer() -> None:
    """Seed 500004 (``--keep 1,2,3,4,7,8,10``): the invocation booked n0's surplus ENI as
    deleted and died before its Detach; every later answer only said ``deleted`` again, the
    agent dropped the ENI (a deleted ENI is never taken again) and EC2 kept its addresses on
    the instance for good (``address-leaked``). The next report offering the ENI whole, while
    the offer is young enough, gets the delete made."""
    w = AllocatorWorld()
    w.add_node("n1")
    w.deliver([w.report("n1", warm_ip=2, pending=40)])
    _primary, second = w.enis("n1")
    w.pods["n1"] = 20  # on the primary ENI
    w.clock.advance(w.settings.min_eni_age_s)
    at = w.clock.now() - w.settings.release_delay_s - 1
    offer = [{"eni_id": second.id, "ips": list(second.secondary), "quarantined_at": at}]
    plain = w.ec2_client
    w.ec2_client = _NoAnswer(plain, "detach_network_interface")
    failing = w.allocator()  # the same stores: the release book is shared, as in DynamoDB
    w.ec2_client = plain
    out = w.deliver([_offering_whole(w.report("n1", warm_ip=2, release=offer), second.id)], alloc=failing)
    iid = w.nodes["n1"]
    assert out.nodes[iid].status == "failed"  # left for redelivery
    assert w.books.load("demo", [iid])[iid].deleted == {second.id}  # booked, never detached
    assert second.attachment is not None and "DetachNetworkInterface" not in w.ec2_stats()
    # The agent still offers the ENI whole (no answer came), a few seconds later.
    w.clock.advance(5.0)
    w.deliver([_offering_whole(w.report("n1", warm_ip=2, release=offer), second.id)])
    assert [a.kind for a in w.results("n1")[-1].actions] == ["deleted"]
    assert w.ec2_stats()["DetachNetworkInterface"]["calls"] == 1
    assert second.id not in {e.id for e in w.enis("n1")}, "EC2 still has the ENI the agent was told is deleted"


def test_a_grant_is_said_again_until_a_report_names_it_and_each_repeat_writes_the_book() -> None:
    """Fresh seed 900009: the answer that carried a grant was lost while IMDS lagged behind an
    earlier release of the same addresses, and the agent never used them. Every grant now
    leaves a ``given`` entry, said again to newer reports that do not name it; each repeat
    writes the book back first (version bumped), as a hand-back does (hostile review: a
    second invocation's Unassign then fails its write-ahead)."""
    w = AllocatorWorld()
    w.add_node("n1", "m5.large")
    w.tag_primary("n1")
    iid = w.nodes["n1"]
    before = set(w.enis("n1")[0].secondary)
    w.deliver([w.report("n1", warm_ip=2)])
    got = set(w.enis("n1")[0].secondary) - before
    assert got and {g.key for g in w.books.load("demo", [iid])[iid].given} == got
    version = w.books.load("demo", [iid])[iid].version

    lost = json.loads(w.report("n1", warm_ip=2).to_json())  # the agent never got them
    lost["enis"][0]["ips"] = sorted(before)
    w.deliver([json.dumps(lost)])
    again = [a for a in w.results("n1")[-1].actions if isinstance(a, Assigned)]
    assert {ip for a in again for ip in a.ips} == got, again
    assert w.tally.get("GrantsRepeated") == 1
    assert w.books.load("demo", [iid])[iid].version > version

    w.deliver([w.report("n1", warm_ip=2)])  # names them in its pool: settled, not said again
    assert not w.books.load("demo", [iid])[iid].given
    assert not [a for r in w.results("n1") for a in r.actions if isinstance(a, Assigned)]
