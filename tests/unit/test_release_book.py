"""The release book (``warmpool/release_book.py``): what the allocator took from an
instance, over Describe; what each answer repeats; when an entry goes."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.helpers.release_book import facts, report
from warmpool import names
from warmpool.calls import AssignAddresses, DeleteEni, Reclaim, RepeatGrant, RepeatRelease, UnassignAddresses
from warmpool.limits import known
from warmpool.planner import plan_node
from warmpool.release_book import GIVEN_TTL_MS, MAX_DELETED_UNSEEN, MAX_ENTRIES, ReleaseBook, Taken
from warmpool.subnets import Subnet

E1, E2 = "eni-00000001", "eni-00000002"
P = "10.0.1.16/28"


BOOK = ReleaseBook(3, (Taken(E1, "10.0.0.7", 10), Taken(E1, P, 10), Taken(E2, "", 11)))


def test_the_book_is_over_describe_addresses_off_and_a_deleted_eni_untouchable() -> None:
    seen = BOOK.correct(facts({E1: ["10.0.0.6", "10.0.0.7", P], E2: ["10.0.0.9"]}))
    e1, e2 = seen.enis
    assert e1.eni.ips == ("10.0.0.6",) and e1.eni.prefixes == ()
    assert e2.eni.ips == () and e2.tags[names.TAG_NO_MANAGE] == "true"
    inv = seen.inventory("demo")
    assert not inv.enis[1].usable and not inv.enis[1].lifecycle  # keeps its slot, counts for nothing
    assert ReleaseBook().correct(f := facts({E1: ["10.0.0.7"]})) is f


@pytest.mark.parametrize(
    ("enis", "offers", "want"),
    [
        # still offered, and the deleted ENI still reported: both said again
        (
            {E1: ["10.0.0.6"], E2: []},
            {E1: ["10.0.0.7", P]},
            (RepeatRelease(E1, ("10.0.0.7",), (P,)), RepeatRelease(E2, deleted=True)),
        ),
        # taken back into the pool (the agent lists it as its own): said again too
        ({E1: ["10.0.0.6", "10.0.0.7"]}, None, (RepeatRelease(E1, ("10.0.0.7",)),)),
        # nothing of it named: nothing to repeat
        ({E1: ["10.0.0.6"]}, None, ()),
    ],
)
def test_every_answer_repeats_what_the_report_still_names(
    enis: dict[str, list[str]], offers: dict[str, list[str]] | None, want: tuple[RepeatRelease, ...]
) -> None:
    assert BOOK.repeats(report(12, enis, offers)) == want


ALL = ((E1, P, 10), (E1, "10.0.0.7", 10), (E2, "", 11))


@pytest.mark.parametrize(
    ("seq", "enis", "offers", "dropped_offers", "shown", "left"),
    [
        # newer, names none of it: settled (the deleted ENI kept: a lagging Describe may not show it)
        (12, {E1: ["10.0.0.6"]}, None, (), {E1}, ((E2, "", 11),)),
        (10, {E1: ["10.0.0.6"]}, None, (), {E1}, ALL),  # not newer
        (11, {E1: ["10.0.0.6"]}, None, (), {E1}, ((E2, "", 11),)),  # newer than 10, not than 11
        (12, {E1: ["10.0.0.6"], E2: []}, {E1: ["10.0.0.7"]}, (), {E1}, ((E1, "10.0.0.7", 10), (E2, "", 11))),
        # an offer dropped as too old is still named
        (12, {E1: ["10.0.0.6"]}, None, (P,), {E1}, ((E1, P, 10), (E2, "", 11))),
        # an ENI the report leaves out says nothing of the addresses on it, whether EC2 (maybe
        # a stale Describe) shows it or not (one answering from before its attach does not);
        # a deleted ENI the report names nowhere is kept while EC2 still shows it on the
        # instance (its detach may not be done: it is detached again, ``repeats``), and after
        # (a lagging Describe may not show it yet)
        (12, {}, None, (), {E1, E2}, ALL),
        (12, {}, None, (), {E2}, ALL),
        (12, {}, None, (), set(), ALL),
    ],
)
def test_an_entry_goes_once_a_newer_report_shows_the_agent_dropped_it(
    seq: int,
    enis: dict[str, list[str]],
    offers: dict[str, list[str]] | None,
    dropped_offers: tuple[str, ...],
    shown: set[str],
    left: tuple[tuple[str, str, int], ...],
) -> None:
    after = BOOK.settle(report(seq, enis, offers), dropped_offers, shown)
    assert sorted((t.eni_id, t.key, t.seq) for t in after.taken) == sorted(left)
    assert after.version == BOOK.version  # the store moves the version, not the book


def test_a_deleted_eni_a_lagging_describe_does_not_show_stays_booked_and_is_never_handed_back() -> None:
    """Seed 6952 (``warmpool sim``): E2 offered whole, its detach answered (slow: it stays
    ``detaching`` for minutes) and booked; the agent dropped it on the ``deleted``. The next
    report named it nowhere while Describe answered from before E2 was attached, and the
    entry was settled. The agent then lost its checkpoint, took E2 again from IMDS (which
    lists it while it detaches) and offered it whole with a pod waiting; Describe, caught up,
    showed E2 detaching with its addresses, the book no longer had it, and they were handed
    back: a pod got an address that left the node with the ENI, and EC2 gave it to another
    node once the GC deleted the ENI. Now the entry stays: E2 counts for nothing and the
    answer says ``deleted`` again."""
    x = ["10.0.0.17", "10.0.0.18"]
    book = ReleaseBook(1, (Taken(E2, "", 11),))
    settled = book.settle(report(12, {E1: []}), (), {E1})  # Describe from before E2 was attached
    assert settled.deleted == {E2}
    again = report(13, {E1: [], E2: []}, {E2: x}).model_copy(update={"pending_demand": 1})
    f = facts({E1: [], E2: x})
    f = f.with_enis((f.enis[0], replace(f.enis[1], attachment_status="detaching")))
    subnets = (Subnet("subnet-a", "us-east-1a", "10.0.0.0/24", 200),)
    plan = plan_node(again, settled.correct(f).inventory("demo"), known("m5.large"), subnets, cluster="demo")
    assert not [c for c in plan.calls if isinstance(c, Reclaim)], f"handed back a detaching ENI's addresses: {plan}"
    assert settled.repeats(again) == (RepeatRelease(E2, deleted=True),)


def test_deleted_enis_no_report_names_nor_describe_shows_are_forgotten_oldest_first_past_the_bound() -> None:
    gone = tuple(Taken(f"eni-d{i:07x}", "", 10 + i) for i in range(MAX_DELETED_UNSEEN + 2))
    book = ReleaseBook(1, gone)
    after = book.settle(report(10_000, {E1: ["10.0.0.7"]}), (), {E1, gone[0].eni_id})
    # the one EC2 shows stays, and so do the newest MAX_DELETED_UNSEEN of the others
    assert after.taken == (gone[0], *gone[2:])
    assert after.settle(report(10_001, {E1: ["10.0.0.7"]}), (), {E1, gone[0].eni_id}) is after


def test_take_regrant_and_the_stored_form() -> None:
    book = ReleaseBook().take(E1, ["10.0.0.7"], 4).take(E1, ["10.0.0.7", "10.0.0.8"], 5).take(E2, [], 5)
    assert book.taken == (Taken(E1, "10.0.0.7", 4), Taken(E1, "10.0.0.8", 5), Taken(E2, "", 5))
    again = book.regranted([(E1, "10.0.0.7"), (E1, "10.0.0.99")], 6)
    assert again.keys == {"10.0.0.8"}
    # booked or not, what EC2 gave is said again until a report names it in the pool
    assert again.given == (Taken(E1, "10.0.0.7", 6), Taken(E1, "10.0.0.99", 6))
    assert book.regranted([], 6) is book
    assert again.regranted([(E1, "10.0.0.7")], 9).given == (Taken(E1, "10.0.0.99", 6), Taken(E1, "10.0.0.7", 9))
    assert ReleaseBook.loads(book.dumps(), 9) == ReleaseBook(9, book.taken)
    assert ReleaseBook.loads(again.dumps(), 9) == ReleaseBook(9, again.taken, again.given)
    assert ReleaseBook().full_after(MAX_ENTRIES + 1) and not ReleaseBook().full_after(MAX_ENTRIES)


@pytest.mark.parametrize("raw", ['{"a": 1}', '[["eni-1", "10.0.0.1"]]', '[["eni-1", 5, 1]]', "not json"])
def test_a_book_that_does_not_parse_is_an_error_never_an_empty_book(raw: str) -> None:
    with pytest.raises(ValueError):
        ReleaseBook.loads(raw, 1)


@pytest.mark.parametrize(
    ("enis", "offers", "attached", "want"),
    [
        # still attached, offered whole again: deleted again (its detach may never have been made)
        ({E1: ["10.0.0.6"], E2: []}, {E2: ["10.0.0.9"]}, {E1, E2}, DeleteEni(E2)),
        # EC2 no longer shows it on the instance: said deleted only
        ({E1: ["10.0.0.6"], E2: []}, {E2: ["10.0.0.9"]}, {E1}, RepeatRelease(E2, deleted=True)),
        # the agent holds an address of it in its pool: never deleted on that report
        ({E1: ["10.0.0.6"], E2: ["10.0.0.8"]}, {E2: ["10.0.0.9"]}, {E1, E2}, RepeatRelease(E2, deleted=True)),
        # still attached, and the report names it nowhere (the agent dropped it on the
        # ``deleted``; a detach answered and not done): detached again
        ({E1: ["10.0.0.6"]}, None, {E1, E2}, DeleteEni(E2)),
        # named, not offered: said deleted only
        ({E1: ["10.0.0.6"], E2: []}, None, {E1, E2}, RepeatRelease(E2, deleted=True)),
    ],
)
def test_a_deleted_eni_still_attached_and_offered_whole_is_deleted_again(
    enis: dict[str, list[str]], offers: dict[str, list[str]] | None, attached: set[str], want: object
) -> None:
    book = ReleaseBook(1, (Taken(E2, "", 11),))
    assert book.repeats(report(12, enis, offers), attached=attached) == (want,)


def test_a_booked_address_ec2_still_shows_and_the_report_offers_again_is_unassigned_again() -> None:
    """Seeds 112 and 189 (``warmpool sim``, the earlier world): an invocation died between
    booking an Unassign and making it; every answer after said ``released`` from the book,
    the agent dropped the addresses, and EC2 kept them on the node for good. Now a booked
    address the report offers again while EC2 (before the book's correction) still shows it
    is unassigned again; one EC2 no longer shows is only said released."""
    book = ReleaseBook(
        1, (Taken(E1, "10.0.0.7", 4), Taken(E1, "10.0.0.8", 4), Taken(E1, "10.0.0.9", 4), Taken(E1, P, 4))
    )
    r = report(9, {E1: []}, {E1: ["10.0.0.7", "10.0.0.8", "10.0.0.9", P]})
    calls = book.repeats(r, shown={E1: ("10.0.0.7", "10.0.0.9", P)})
    # one call per key: EC2 refuses a whole call when one key is gone (hostile review)
    assert UnassignAddresses(E1, ips=("10.0.0.7",)) in calls
    assert UnassignAddresses(E1, ips=("10.0.0.9",)) in calls
    assert UnassignAddresses(E1, prefixes=(P,)) in calls
    assert RepeatRelease(E1, ("10.0.0.8",), ()) in calls
    # without EC2's view (or not offered, only listed in the pool): said released, no call
    assert book.repeats(r) == (RepeatRelease(E1, ("10.0.0.7", "10.0.0.8", "10.0.0.9"), (P,)),)
    pooled = report(9, {E1: ["10.0.0.7"]})
    assert book.repeats(pooled, shown={E1: ("10.0.0.7",)}) == (RepeatRelease(E1, ("10.0.0.7",), ()),)


def test_a_booked_address_ec2_gave_back_is_said_assigned_again_until_a_report_names_it() -> None:
    """Seeds 149 and 189: EC2 gave a booked address back to the node in answer to the
    allocator's Assign; the agent refused that ``assigned`` (older than a later offer) and no
    one told it again. The ``given`` entry repeats it to newer reports until one names it
    in its pool."""
    book = ReleaseBook(1, (Taken(E1, "10.0.0.7", 4),)).regranted([(E1, "10.0.0.7")], 6)
    assert not book.taken and book.given == (Taken(E1, "10.0.0.7", 6),)
    assert book.repeats(report(6, {E1: []})) == ()  # the grant's own report: its answer says it
    assert book.repeats(report(7, {E1: []})) == (RepeatGrant(E1, ("10.0.0.7",), ()),)
    assert book.repeats(report(7, {E2: []})) == ()  # the agent does not have the ENI
    assert book.settle(report(7, {E1: []}), (), {E1}) is book  # not named yet: kept
    assert not book.settle(report(7, {E1: ["10.0.0.7"]}), (), {E1}).given  # the agent has it
    # only offered: kept (a late release of an older unassign may still drop it: seed 149)
    assert book.settle(report(7, {E1: []}, {E1: ["10.0.0.7"]}), (), {E1}) is book
    assert book.repeats(report(7, {E1: []}, {E1: ["10.0.0.7"]})) == ()  # named: not said again
    assert not book.settle(report(7, {E1: []}), (), set()).given  # EC2 no longer shows the ENI
    assert not book.settle(report(6 + GIVEN_TTL_MS + 1, {E1: []}), (), {E1}).given  # too old to say again
    assert not book.take(E1, ["10.0.0.7"], 8).given  # the allocator takes it again
    assert not book.take(E1, [], 8).given  # or deletes its ENI


def test_repeated_grants_come_after_the_plans_own_calls() -> None:
    """Hostile review: a repeated ``assigned`` ahead of a delete of the same ENI in one answer
    could hand a pod an address EC2 frees with the ENI. Grants go last (the executor then
    finds the delete dropped their given entries and says nothing of them)."""
    from functions.release_book import with_repeats
    from warmpool.planner import Plan
    from warmpool.pool import PoolDelta

    book = ReleaseBook(1, (Taken(E1, "10.0.0.7", 4),)).regranted([(E2, "10.0.0.9")], 4)
    delta = PoolDelta(short=0, short_units=0, whole_enis=False, over=1, over_units=1, over_enis=1)
    plan = Plan("n1", "i-1", 5, "release", (DeleteEni(E2),), 0, delta)
    r = report(5, {E1: ["10.0.0.7"], E2: []}, {E2: ["10.0.0.8"]})
    calls = with_repeats(plan, book, r, r.to_json()).calls
    assert calls == (RepeatRelease(E1, ("10.0.0.7",), ()), DeleteEni(E2), RepeatGrant(E2, ("10.0.0.9",), ()))
    assert not book.take(E2, [], 5).given  # the delete's write-ahead drops the ENI's given entries


def test_a_booked_address_keeps_its_slot_while_describe_shows_it() -> None:
    """Simulation seed 1099: a booked address EC2 assigned again, in a call whose answer was
    lost, to a new ENI of the node. Kept out of that ENI's pool, it still takes one of its
    address slots: planned into them, the Assign was refused PrivateIpAddressLimitExceeded on
    every re-plan and the node's pods waited for good."""
    book = ReleaseBook(3, (Taken(E1, "10.0.0.11", 10), Taken(E1, "10.0.0.12", 10)))
    seen = book.correct(facts({E1: ["10.0.0.6"], E2: ["10.0.0.11", "10.0.0.12"]}))
    e1, e2 = seen.enis
    assert e2.eni.ips == () and e2.eni.held_slots == 2 and e2.eni.used_slots == 2
    assert e1.eni.held_slots == 0 and e1.eni.used_slots == 1
    # the planner fills E2 only up to EC2's limit (m5.large: 9 secondary addresses an ENI)
    r = report(12, {E1: ["10.0.0.6"], E2: []}).model_copy(update={"pending_demand": 20})
    plan = plan_node(
        r,
        seen.inventory("demo"),
        known("m5.large"),
        [Subnet("subnet-a", "us-east-1a", "10.0.0.0/23", 200)],
        cluster="demo",
    )
    on_e2 = [c for c in plan.calls if isinstance(c, AssignAddresses) and c.eni_id == E2]
    assert on_e2 and all(c.ips <= 7 for c in on_e2), plan.calls


def test_a_booked_address_offered_on_another_eni_ec2_shows_it_on_is_unassigned_there() -> None:
    """Seed 1099, the rest: the agent offers the address on the ENI EC2 put it on again; the
    book's entry names the ENI it was taken from, so the repeat alone said ``released`` there
    (the agent holds nothing of it there) and EC2 kept the address on the node for good. It is
    unassigned from the ENI the report offers it on, while EC2 shows it there (one call per
    key, naming that ENI), and still said released on the booked one."""
    book = ReleaseBook(3, (Taken(E1, "10.0.0.11", 10),))
    r = report(12, {E1: ["10.0.0.6"], E2: []}, {E2: ["10.0.0.11"]})
    shown = {E1: ["10.0.0.6"], E2: ["10.0.0.11"]}
    assert book.repeats(r, shown=shown) == (
        UnassignAddresses(E2, ips=("10.0.0.11",)),
        RepeatRelease(E1, ("10.0.0.11",)),
    )
    # EC2 does not show it there (or no facts): only said again, as before
    assert book.repeats(r, shown={E1: ["10.0.0.6"], E2: []}) == (RepeatRelease(E1, ("10.0.0.11",)),)
    assert book.repeats(r) == (RepeatRelease(E1, ("10.0.0.11",)),)
