"""The shared flip histories (issue 12) against a store that fails: a container that could not
read a row never writes its own view over it, a failed save is retried, and a row's expiry is
in the future (the hostile review's findings 1, 2 and 4; each test fails on the first version)."""

from __future__ import annotations

from collections.abc import Sequence

from emulated.memstores import MemFlips
from functions.errors import AwsError
from functions.fairness import FairShare
from functions.releases import load_flips, save_flips
from functions.telemetry import Tally
from warmpool.buckets import BucketSpec
from warmpool.ports import FlipState


def _fair() -> FairShare:
    return FairShare(spec_of=lambda a: BucketSpec(capacity=10, refill_per_s=1), flip_limit=3)


class Flaky(MemFlips):
    def __init__(self) -> None:
        super().__init__()
        self.fail_load = False
        self.fail_save = False

    def load(self, cluster: str, instance_ids: Sequence[str]) -> dict[str, FlipState]:
        if self.fail_load:
            raise AwsError("ProvisionedThroughputExceededException")
        return super().load(cluster, instance_ids)

    def save(self, cluster: str, instance_id: str, state: FlipState, expires_at: float) -> None:
        if self.fail_save:
            raise AwsError("ThrottlingException")
        super().save(cluster, instance_id, state, expires_at)


def _damp(fair: FairShare, store: Flaky, t: Tally) -> float:
    now = 0.0
    for k in ["allocate", "release"] * 3:
        now += 1
        load_flips(fair, store, "c", ["i-x"], t)
        fair.asked("i-x", k, now)
        save_flips(fair, store, "c", t, now)
    assert store.load("c", ["i-x"])["i-x"].damped_until > now
    return now


def test_a_container_that_cannot_read_a_row_does_not_overwrite_its_damping() -> None:
    store, t = Flaky(), Tally()
    now = _damp(_fair(), store, t)
    b = _fair()  # a cold container that cannot read the row counts a report
    store.fail_load = True
    load_flips(b, store, "c", ["i-x"], t)
    b.asked("i-x", "release", now + 1)
    save_flips(b, store, "c", t, now + 1)
    store.fail_load = False
    c = _fair()
    load_flips(c, store, "c", ["i-x"], t)
    assert c.damped("i-x", now + 2), store.load("c", ["i-x"])
    assert t.get("FlipHistoriesUnshared") == 1
    # once it can read again, B merges the row and saves the merge (the damping kept)
    load_flips(b, store, "c", ["i-x"], t)
    b.asked("i-x", "allocate", now + 3)
    save_flips(b, store, "c", t, now + 3)
    assert store.load("c", ["i-x"])["i-x"].damped_until > now + 3


def test_a_failed_save_is_retried_and_an_old_row_never_lowers_a_damping() -> None:
    store, t = Flaky(), Tally()
    store.save("c", "i-x", FlipState("allocate", (), 0.0), 1e12)
    a = _fair()
    load_flips(a, store, "c", ["i-x"], t)
    now = 0.0
    for k in ["release", "allocate", "release"]:
        now += 1
        a.asked("i-x", k, now)
    assert a.damped("i-x", now)
    store.fail_save = True
    save_flips(a, store, "c", t, now)
    store.fail_save = False
    load_flips(a, store, "c", ["i-x"], t)  # the old row comes back
    assert a.damped("i-x", now + 1)
    save_flips(a, store, "c", t, now + 1)  # the retry
    assert store.load("c", ["i-x"])["i-x"].damped_until > now + 1


def test_a_history_expires_after_its_window_not_in_1970() -> None:
    f = _fair()
    now = 1_764_000_000.0
    f.asked("i-x", "allocate", now)
    st = f.take_dirty()["i-x"]
    assert f.expires_at(st, now) == now + f.flip_window_s
