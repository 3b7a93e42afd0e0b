"""The allocator's release book against a Describe that lags (issue 21, defect 3;
docs/allocator.md, "Offers, releases and stale Describe"): written before each release
call, over Describe when planning, repeated in answers, settled by reports, and a node
waits rather than acting on a book it could not read or write."""

from __future__ import annotations

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
    assert w.ec2_stats()["UnassignPrivateIpAddresses"]["calls"] == 1  # not unassigned again


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
