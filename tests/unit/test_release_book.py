"""The release book (``warmpool/release_book.py``): what the allocator took from an
instance, over Describe; what each answer repeats; when an entry goes."""

from __future__ import annotations

from typing import Any

import pytest

from warmpool import names
from warmpool.facts import EniFacts, NodeFacts
from warmpool.messages import PoolReport
from warmpool.planner import Eni, RepeatRelease
from warmpool.release_book import MAX_ENTRIES, ReleaseBook, Taken

E1, E2 = "eni-00000001", "eni-00000002"
P = "10.0.1.16/28"


def report(seq: int, enis: dict[str, list[str]], offers: dict[str, list[str]] | None = None) -> PoolReport:
    def split(keys: list[str]) -> dict[str, Any]:
        return {"ips": [k for k in keys if "/" not in k], "prefixes": [k for k in keys if "/" in k]}

    return PoolReport.model_validate(
        {
            "schema": "warmpool.report/v1",
            "cluster": "demo",
            "node": "n1",
            "instance_id": "i-0123456789abcdef0",
            "instance_type": "m5.large",
            "availability_zone": "us-east-1a",
            "seq": seq,
            "sent_at": 1.0,
            "mode": "secondary-ip",
            "targets": {"warm_ip": 1},
            "enis": [
                {
                    "eni_id": e,
                    "device_index": i,
                    "network_card": 0,
                    "subnet_id": "subnet-a",
                    "primary_ip": f"10.0.0.{100 + i}",
                    **split(keys),
                    "assigned": 0,
                }
                for i, (e, keys) in enumerate(enis.items())
            ],
            "assigned_ips": 0,
            "pending_demand": 0,
            "release": [{"eni_id": e, **split(k), "quarantined_at": 1.0} for e, k in (offers or {}).items()],
        }
    )


def facts(enis: dict[str, list[str]]) -> NodeFacts:
    return NodeFacts(
        "i-0123456789abcdef0",
        "m5.large",
        "us-east-1a",
        "running",
        "vpc-1",
        {},
        tuple(
            EniFacts(
                Eni(
                    e,
                    i,
                    0,
                    "subnet-a",
                    f"10.0.0.{100 + i}",
                    tuple(k for k in keys if "/" not in k),
                    tuple(k for k in keys if "/" in k),
                ),
                "i-0123456789abcdef0",
                f"att-{i}",
                "02:00:00:00:00:0" + str(i),
                True,
                "in-use",
                {names.TAG_CLUSTER_NAME: "demo", names.TAG_MANAGED: "true"},
            )
            for i, (e, keys) in enumerate(enis.items())
        ),
    )


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
        (12, {E1: ["10.0.0.6"]}, None, (), {E1}, ()),  # newer, names none of it: all settled
        (10, {E1: ["10.0.0.6"]}, None, (), {E1}, ALL),  # not newer
        (11, {E1: ["10.0.0.6"]}, None, (), {E1}, ((E2, "", 11),)),  # newer than 10, not than 11
        (12, {E1: ["10.0.0.6"], E2: []}, {E1: ["10.0.0.7"]}, (), {E1}, ((E1, "10.0.0.7", 10), (E2, "", 11))),
        (12, {E1: ["10.0.0.6"]}, None, (P,), {E1}, ((E1, P, 10),)),  # an offer dropped as too old is still named
        # an ENI the report leaves out says nothing of the addresses on it while EC2 (maybe
        # a stale Describe) still shows it; a deleted ENI the report names nowhere is dropped
        (12, {}, None, (), {E1, E2}, ((E1, P, 10), (E1, "10.0.0.7", 10))),
        (12, {}, None, (), {E2}, ()),
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


def test_take_regrant_and_the_stored_form() -> None:
    book = ReleaseBook().take(E1, ["10.0.0.7"], 4).take(E1, ["10.0.0.7", "10.0.0.8"], 5).take(E2, [], 5)
    assert book.taken == (Taken(E1, "10.0.0.7", 4), Taken(E1, "10.0.0.8", 5), Taken(E2, "", 5))
    assert book.regranted(["10.0.0.7", "10.0.0.99"]).keys == {"10.0.0.8"}
    assert book.regranted(["10.0.0.99"]) is book
    assert ReleaseBook.loads(book.dumps(), 9) == ReleaseBook(9, book.taken)
    assert ReleaseBook().full_after(MAX_ENTRIES + 1) and not ReleaseBook().full_after(MAX_ENTRIES)


@pytest.mark.parametrize("raw", ['{"a": 1}', '[["eni-1", "10.0.0.1"]]', '[["eni-1", 5, 1]]', "not json"])
def test_a_book_that_does_not_parse_is_an_error_never_an_empty_book(raw: str) -> None:
    with pytest.raises(ValueError):
        ReleaseBook.loads(raw, 1)
