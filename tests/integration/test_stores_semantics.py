"""One semantic suite for the store ports, run against the in-memory stores
(emulated/memstores.py) and the DynamoDB stores (functions/stores.py) on moto."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import boto3
import pytest
from moto import mock_aws

from emulated.memstores import MemBuckets, MemLeases, MemLedger
from functions.release_book import LocalReleaseBooks
from functions.stores import DynamoBuckets, DynamoLeases, DynamoLedger, DynamoReleaseBooks, create_tables
from warmpool.buckets import AIMD_DECREASE, BucketSpec, BucketState
from warmpool.release_book import ReleaseBook, Taken

SPEC = BucketSpec(capacity=10, refill_per_s=2)


def spec_of(action: str) -> BucketSpec:
    return SPEC


@dataclass
class Stores:
    buckets: Callable[..., Any]  # (account="a", region="r") -> bucket store
    ledger: Any
    leases: Any
    books: Any


class AtomicRequests:
    """A DynamoDB client whose every request is applied whole before the next: DynamoDB
    evaluates a condition and writes the item as one step server-side, but moto's in-process
    backend does not, so threads racing through it could both pass one condition (seen:
    13 tokens granted of 10 under load). Our code's own interleavings between requests stay."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self._lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if not callable(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            with self._lock:
                return attr(*args, **kwargs)

        return call


@pytest.fixture(params=["memory", "dynamodb"])
def stores(request: pytest.FixtureRequest) -> Iterator[Stores]:
    if request.param == "memory":
        shared: dict[str, BucketState] = {}
        lock = threading.Lock()
        yield Stores(
            buckets=lambda account="a", region="r": MemBuckets(spec_of, account, region, shared, lock),
            ledger=MemLedger(),
            leases=MemLeases(),
            books=LocalReleaseBooks(),
        )
        return
    with mock_aws():
        db = AtomicRequests(boto3.client("dynamodb", region_name="us-east-1"))
        create_tables(db, "ledger", "buckets")
        yield Stores(
            buckets=lambda account="a", region="r": DynamoBuckets(db, "buckets", spec_of, account, region),
            ledger=DynamoLedger(db, "ledger"),
            leases=DynamoLeases(db, "ledger"),
            books=DynamoReleaseBooks(db, "ledger"),
        )


# --- buckets ------------------------------------------------------------------


def test_bucket_starts_full_and_take_spends(stores: Stores) -> None:
    b = stores.buckets()
    assert b.load("Create", 100.0).tokens == 10
    assert b.try_take("Create", 4, 100.0) == (True, 0.0)
    assert b.load("Create", 100.0).tokens == pytest.approx(6)


def test_refused_take_takes_nothing_and_says_when(stores: Stores) -> None:
    b = stores.buckets()
    assert b.try_take("Create", 9, 0.0)[0]
    ok, wait = b.try_take("Create", 3, 0.0)
    assert not ok and wait == pytest.approx(1.0)  # 1 token there, 2 missing at 2/s
    assert b.load("Create", 0.0).tokens == pytest.approx(1)
    assert b.try_take("Create", 3, 1.0)[0]


def test_throttle_cuts_the_refill(stores: Stores) -> None:
    b = stores.buckets()
    b.throttled("Assign", 5.0)
    st = b.load("Assign", 5.0)
    assert st.tokens == 0 and st.rate_factor == pytest.approx(AIMD_DECREASE)
    ok, wait = b.try_take("Assign", 1, 5.0)
    assert not ok and wait == pytest.approx(1 / (2 * AIMD_DECREASE))


def test_take_batch_grants_in_order_and_staggers_the_rest(stores: Stores) -> None:
    b = stores.buckets()
    waits = b.take_batch([{"Create": 4, "Attach": 4}, {"Create": 4}, {"Create": 4}, {"Attach": 2}, {"Create": 4}], 0.0)
    assert waits[0] == 0 and waits[1] == 0 and waits[3] == 0
    assert waits[2] == pytest.approx(1.0)  # 2 left, 2 missing at 2/s
    assert waits[4] == pytest.approx(3.0)  # queued behind the third
    assert b.load("Create", 0.0).tokens == pytest.approx(2)
    assert b.load("Attach", 0.0).tokens == pytest.approx(4)


def test_take_batch_never_grants_more_than_capacity(stores: Stores) -> None:
    b = stores.buckets()
    assert b.take_batch([{"Create": 11}], 0.0) == [float("inf")]
    assert b.load("Create", 0.0).tokens == 10


def test_buckets_are_shared_per_account_and_region_only(stores: Stores) -> None:
    one, two = stores.buckets(), stores.buckets()
    other_region = stores.buckets(region="elsewhere")
    assert one.take_batch([{"Create": 6}], 0.0) == [0.0]
    assert two.take_batch([{"Create": 6}], 0.0)[0] > 0
    assert other_region.take_batch([{"Create": 6}], 0.0) == [0.0]


def test_concurrent_takes_never_double_spend(stores: Stores) -> None:
    granted: list[bool] = []
    lock = threading.Lock()

    def worker() -> None:
        b = stores.buckets()
        for _ in range(5):
            ok = b.take_batch([{"Create": 1}], 0.0) == [0.0]
            with lock:
                granted.append(ok)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(granted) == 10
    assert stores.buckets().load("Create", 0.0).tokens == pytest.approx(0)


# --- ledger -------------------------------------------------------------------


def test_ledger_moves_forward_only(stores: Stores) -> None:
    led = stores.ledger
    assert led.last_seq("c", "n1") == -1
    assert led.record("c", "n1", 5, {"instance_id": "i-0123456789abcdef0", "actions": []}, 1.0)
    assert not led.record("c", "n1", 5, {}, 2.0)
    assert not led.record("c", "n1", 3, {}, 2.0)
    assert led.record("c", "n1", 6, {"instance_id": "i-0123456789abcdef0"}, 3.0)
    assert led.last_seq("c", "n1") == 6


def test_ledger_batch_read_and_listing_are_per_cluster(stores: Stores) -> None:
    led = stores.ledger
    for i in range(150):
        led.record("c", f"n{i}", i, {"instance_id": f"i-{i:08x}"}, 1.0)
    led.record("other", "n1", 99, {}, 1.0)
    seqs = led.last_seqs("c", ["n1", "n149", "ghost", "n1"])
    assert seqs == {"n1": 1, "n149": 149, "ghost": -1}
    assert len(led.nodes("c")) == 150 and led.nodes("other") == {"n1": 99}
    assert led.entries("c")["n7"]["instance_id"] == "i-00000007"
    assert led.forget("c", "n1", instance_id="i-00000001", last_seq=1)
    assert led.last_seq("c", "n1") == -1 and led.last_seq("other", "n1") == 99


# --- leases -------------------------------------------------------------------


def test_lease_excludes_others_until_expiry(stores: Stores) -> None:
    ls = stores.leases
    assert ls.claim("c", "n1", "inv-a", 0.0, 10.0)
    assert not ls.claim("c", "n1", "inv-b", 5.0, 10.0)
    assert ls.claim("c", "n1", "inv-a", 5.0, 10.0)  # renew
    assert ls.claim("c", "n2", "inv-b", 5.0, 10.0)
    assert ls.claim("c", "n1", "inv-b", 15.0, 10.0)  # expired


def test_lease_release_only_by_owner(stores: Stores) -> None:
    ls = stores.leases
    assert ls.claim("c", "n1", "inv-a", 0.0, 10.0)
    ls.release("c", "n1", "inv-b")
    assert not ls.claim("c", "n1", "inv-b", 1.0, 10.0)
    ls.release("c", "n1", "inv-a")
    assert ls.claim("c", "n1", "inv-b", 1.0, 10.0)


def test_sweep_removes_expired_leases_only(stores: Stores) -> None:
    ls = stores.leases
    ls.claim("c", "n1", "a", 0.0, 10.0)
    ls.claim("c", "n2", "a", 0.0, 100.0)
    assert ls.sweep("c", 50.0) == 1
    assert not ls.claim("c", "n2", "b", 50.0, 10.0)
    assert ls.claim("c", "n1", "b", 50.0, 10.0)


def test_ledger_forget_is_conditional_on_the_entry_it_was_decided_on(stores: Stores) -> None:
    # Issue 11, defect 6: a node name reused by a new instance must not lose
    # the new instance's entry to a forget decided on the old one.
    led = stores.ledger
    old, new = "i-00000000000000001", "i-00000000000000002"
    assert led.record("c", "n1", 5, {"instance_id": old}, 1.0)
    assert led.record("c", "n1", 7, {"instance_id": new}, 2.0)  # the name now belongs to a new instance
    assert led.forget("c", "n1", instance_id=old, last_seq=5) is False
    assert led.last_seq("c", "n1") == 7 and led.entries("c")["n1"]["instance_id"] == new
    assert led.forget("c", "n1", instance_id=new, last_seq=6) is False  # served again meanwhile
    assert led.last_seq("c", "n1") == 7
    assert led.forget("c", "n1", instance_id=new, last_seq=7) is True
    assert led.last_seq("c", "n1") == -1
    assert led.forget("c", "n1", instance_id=new, last_seq=7) is False  # already gone


# --- release books ----------------------------------------------------------------


def test_release_book_saves_are_conditional_on_the_version_read(stores: Stores) -> None:
    books = stores.books
    first = books.load("c", ["i-1", "i-2"])
    assert first == {"i-1": ReleaseBook(), "i-2": ReleaseBook()}
    taken = first["i-1"].take("eni-1", ["10.0.0.5", "10.0.0.16/28"], 7).take("eni-2", [], 7)
    stored = books.save("c", "i-1", taken, 1e10)
    assert stored is not None and stored.version == 1 and stored.taken == taken.taken
    assert books.save("c", "i-1", taken, 1e10) is None  # another writer came first (same version read)
    assert books.load("c", ["i-1"])["i-1"] == stored
    assert stored.keys == {"10.0.0.5", "10.0.0.16/28"} and stored.deleted == {"eni-2"}
    again = books.save("c", "i-1", stored.regranted([("eni-1", "10.0.0.5")], 8), 1e10)
    assert (
        again is not None
        and again.version == 2
        and again.taken
        == (
            Taken("eni-1", "10.0.0.16/28", 7),
            Taken("eni-2", "", 7),
        )
    )
    assert books.load("other", ["i-1"])["i-1"] == ReleaseBook()  # per cluster


def test_release_books_are_beside_the_ledger_rows_never_among_them(stores: Stores) -> None:
    stores.ledger.record("c", "i-1", 5, {"instance_id": "i-1"}, 1.0)
    assert stores.books.save("c", "i-1", ReleaseBook().take("eni-1", ["10.0.0.5"], 5), 1e10) is not None
    assert set(stores.ledger.entries("c")) == {"i-1"} and stores.ledger.last_seq("c", "i-1") == 5
    assert stores.ledger.forget("c", "i-1", instance_id="i-1", last_seq=5)
    assert stores.books.load("c", ["i-1"])["i-1"].keys == {"10.0.0.5"}  # kept until its TTL


# --- named placement's records beside the books (review1 P2, P3) ---------------------------


@pytest.mark.parametrize(
    ("holds", "since", "want"),
    [
        ([], 0.0, set()),
        ([("s-1", ["10.0.0.5", "10.0.0.16/28"], 100.0)], 100.0, {"10.0.0.5", "10.0.0.16/28"}),
        ([("s-1", ["10.0.0.5"], 100.0)], 100.5, set()),  # older than the hold
        ([("s-1", ["10.0.0.5"], 100.0), ("s-1", ["10.0.0.5"], 200.0)], 150.0, {"10.0.0.5"}),  # the latest wins
        ([("s-1", ["10.0.0.5"], 100.0), ("s-2", ["10.0.0.6"], 100.0)], 0.0, {"10.0.0.5"}),  # per subnet
        ([("s-1", [f"10.0.{i // 250}.{i % 250}" for i in range(60)], 100.0)], 50.0, None),  # batches of 25
    ],
)
def test_released_keys_are_held_per_subnet_from_their_time(
    stores: Stores, holds: list[tuple[str, list[str], float]], since: float, want: set[str] | None
) -> None:
    for subnet, keys, at in holds:
        stores.books.hold("c", subnet, keys, at, at + 600)
    got = stores.books.held("c", "s-1", since)
    assert got == (want if want is not None else set(holds[0][1]))
    assert stores.books.held("other-cluster", "s-1", 0.0) == frozenset()


def test_a_create_is_recorded_by_its_token_and_read_back_whole(stores: Stores) -> None:
    from warmpool.calls import CreateEni

    assert stores.books.get_create("c", "tok") is None
    named = CreateEni(
        "s-1",
        1,
        0,
        ips=2,
        prefixes=1,
        client_token="tok",
        at_ips=("10.0.0.4", "10.0.0.5", "10.0.0.6"),
        at_prefixes=("10.0.0.16/28",),
    )
    stores.books.put_create("c", named, 1e10)
    assert stores.books.get_create("c", "tok") == named
    by_count = CreateEni("s-1", 1, 0, ips=2, prefixes=1, client_token="tok")
    stores.books.put_create("c", by_count, 1e10)  # the last recorded wins (asked by count again)
    assert stores.books.get_create("c", "tok") == by_count and stores.books.get_create("d", "tok") is None


def test_placement_records_are_never_ledger_rows(stores: Stores) -> None:
    from warmpool.calls import CreateEni

    stores.ledger.record("c", "i-1", 5, {"instance_id": "i-1"}, 1.0)
    stores.books.hold("c", "s-1", ["10.0.0.5"], 1.0, 1e10)
    stores.books.put_create("c", CreateEni("s-1", 1, 0, ips=0, prefixes=0, client_token="t"), 1e10)
    assert set(stores.ledger.entries("c")) == {"i-1"} and set(stores.ledger.nodes("c")) == {"i-1"}


# --- two invocations for one instance at once ---------------------------------------------


class UnassignOnly:
    """EC2 as far as an Unassign goes: records it."""

    def __init__(self) -> None:
        self.unassigned: list[str] = []

    def unassign(self, call: Any) -> None:
        self.unassigned.extend(call.ips)


def _executor(books: Any, ec2: UnassignOnly, clock: Any) -> Any:
    from functions.execute import PlanExecutor
    from functions.settings import Settings
    from functions.telemetry import Tally

    settings = Settings(cluster="c", reports_queue_url="http://q", dlq_url="http://d", result_queue_prefix="r-")
    return PlanExecutor(ec2, None, settings, Tally(), clock, books)  # type: ignore[arg-type]


def _job(books: Any, seq: int, call: Any, now: float) -> Any:
    from types import SimpleNamespace

    from functions.execute import NodeJob
    from warmpool.messages import ReleaseOffer

    offer = ReleaseOffer(eni_id="eni-00000001", ips=["10.0.0.7"], prefixes=[], quarantined_at=now - 5)
    report = SimpleNamespace(node="n1", seq=seq, release=[offer], restored_from=None, epoch=None)
    plan = SimpleNamespace(calls=(call,), unmet=0)
    book = books.load("c", ["i-1"])["i-1"]  # as each invocation read it when planning
    return NodeJob(report, SimpleNamespace(instance_id="i-1"), None, plan, book=book)  # type: ignore[arg-type]


@pytest.mark.parametrize("first", ["unassign", "hand-back"])
def test_two_invocations_never_unassign_and_hand_back_one_address(stores: Stores, first: str) -> None:
    # Two invocations for one instance at once (past the lease: clocks more than its margin
    # apart). A's plan unassigns the offered .7; B's plan, from a Describe that still shows
    # it, hands it back (pods wait). Both read the book before either wrote. Before, the
    # hand-back wrote nothing: both went through, and the agent took back an address EC2
    # had unassigned. Now exactly one of them acts.
    from emulated.clock import VirtualClock
    from functions.execute import _Defer
    from warmpool.calls import Reclaim, UnassignAddresses
    from warmpool.messages import Assigned, Released

    clock = VirtualClock(1000.0)
    ec2 = UnassignOnly()
    a, b = _executor(stores.books, ec2, clock), _executor(stores.books, ec2, clock)
    job_a = _job(stores.books, 7, UnassignAddresses("eni-00000001", ("10.0.0.7",)), clock.now())
    job_b = _job(stores.books, 8, Reclaim("eni-00000001", ("10.0.0.7",), ()), clock.now())
    a._check_book(job_a)  # both checked the book after their lease: same version
    b._check_book(job_b)
    outcomes: dict[str, Any] = {}
    order = [("unassign", a, job_a), ("hand-back", b, job_b)]
    if first == "hand-back":
        order.reverse()
    for name, ex, job in order:
        try:
            outcomes[name] = ex._do(job.plan.calls[0], job, job.facts)
        except _Defer as d:
            outcomes[name] = d.reason
    released = isinstance(outcomes["unassign"], list) and any(isinstance(x, Released) for x in outcomes["unassign"])
    handed = isinstance(outcomes["hand-back"], list) and any(isinstance(x, Assigned) for x in outcomes["hand-back"])
    assert not (released and handed), outcomes
    if first == "unassign":
        assert ec2.unassigned == ["10.0.0.7"] and outcomes["hand-back"] == "release book changed before a hand-back"
    else:
        assert handed and ec2.unassigned == [] and outcomes["unassign"] == "release book not written"


@pytest.mark.parametrize("raw", ["", "[]", "{}", '{"subnet_id": "s"}', '{"subnet_id": "s", "device_index": "x"}'])
def test_a_stored_create_that_does_not_parse_is_refused(raw: str) -> None:
    from functions.stores import loads_create

    with pytest.raises(ValueError):
        loads_create(raw)
