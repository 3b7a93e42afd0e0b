"""The steady-state script's counting proxy (tests/perf/steady_state.py) counts what it wraps."""

from __future__ import annotations

from collections import Counter

from emulated.memstores import MemBuckets
from tests.perf.steady_state import BucketItems, Counting
from warmpool.buckets import spec_for


class _Store:
    def __init__(self) -> None:
        self.rows: dict[str, int] = {}
        self.size = 0

    def put(self, k: str, v: int) -> bool:
        self.rows[k] = v
        return True

    def get(self, k: str) -> int:
        return self.rows[k]


def test_counts_every_public_call_and_passes_it_through() -> None:
    calls: Counter[str] = Counter()
    inner = _Store()
    s = Counting(inner, "ledger", calls)
    assert s.put("a", 1) is True
    assert s.put("b", 2) is True
    assert s.get("a") == 1
    assert s.size == 0 and s.rows == {"a": 1, "b": 2}  # attributes are not calls
    assert calls == Counter({"ledger.put": 2, "ledger.get": 1})


def test_bucket_items_counts_each_action_item_once_per_call() -> None:
    calls: Counter[str] = Counter()
    items = BucketItems()
    b = Counting(MemBuckets(spec_for), "buckets", calls, on_call=items)
    b.take_batch([{"AssignPrivateIpAddresses": 1}, {"AssignPrivateIpAddresses": 2, "CreateTags": 1}], 0.0)
    b.load("DescribeInstances", 0.0)
    b.try_take("CreateTags", 1, 0.0)
    assert calls == Counter({"buckets.take_batch": 1, "buckets.load": 1, "buckets.try_take": 1})
    assert items.writes == Counter({"AssignPrivateIpAddresses": 1, "CreateTags": 2})
    assert items.reads == Counter({"AssignPrivateIpAddresses": 1, "CreateTags": 2, "DescribeInstances": 1})
