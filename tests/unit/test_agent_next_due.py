"""``PoolController.next_due``: skipping the ticks before it changes nothing.

Two controllers, each with its own datastore, see the same drawn events (pods
added, retried and deleted, results — assigned, attached, released, deferred,
failed, empty —, resyncs, a report that could not be sent, an offered address EC2
unassigned with its result lost) at the same times, over an IMDS whose view changes between
events (a claim shows up there only some seconds after its result, a release
leaves it at once). One is ticked every second and after most events; the
other after the same events and otherwise only at the first whole second at or
after its ``next_due`` (asked again after every event). Their reports, their stats and their datastores must
be the same throughout. The bench relies on it (``bench/strategies/warmpool.py``,
``Warmpool.every_tick``).
"""

from __future__ import annotations

import random
from dataclasses import asdict
from typing import Any

import pytest

from node_agent.controller import PoolController
from node_agent.datastore import Datastore
from tests.helpers.controller import ID, PRIMARY, SECOND, TIMING, FakeImds, attached_second, result
from warmpool.limits import known
from warmpool.messages import AllocationResult
from warmpool.pool import PoolConfig

END_S = 900.0


class Side:
    """One controller, its datastore, and what it sent."""

    def __init__(self, pool: PoolConfig, imds: FakeImds, ips: list[str]) -> None:
        self.ds = Datastore(cooldown_s=TIMING.cooldown_s)
        self.ds.add_eni(PRIMARY, 0.0)
        self.ds.add_addresses(PRIMARY.eni_id, ips)
        self.ctl = PoolController(ID, known("m5.large"), pool, self.ds, TIMING, metadata=imds)
        self.sent: list[tuple[float, str]] = []
        self.ticks = 0

    def tick(self, now: float) -> None:
        self.ticks += 1
        for r in self.ctl.tick(now):
            self.sent.append((now, r.to_json()))

    def state(self) -> tuple[Any, ...]:
        return (self.sent, asdict(self.ctl.stats), self.ds.snapshot(), self.ds.pending_expires_at())


def _events(rng: random.Random) -> list[tuple[float, str]]:
    kinds = ["add"] * 6 + ["del"] * 4 + ["result"] * 5 + ["resync", "imds", "unassigned", "retry_soon", "retry_soon"]
    t, out = 0.0, list[tuple[float, str]]()
    while True:
        t += rng.expovariate(1 / rng.choice([3.0, 15.0, 60.0]))
        if t >= END_S:
            return out
        out.append((round(t, 3) if rng.random() < 0.5 else t, rng.choice(kinds)))


def _result(
    rng: random.Random, a: Side, imds: FakeImds, lagged: list[tuple[float, str, list[str]]], now: float
) -> AllocationResult | None:
    """An allocator's answer to ``a``'s last report (None if it sent none)."""
    if not a.sent:
        return None
    seq = max(0, a.ctl.last_seq - rng.choice([0, 0, 0, 1]))  # now and then an older one
    kind = rng.choice(["assigned", "assigned", "attached", "released", "deferred", "failed", "empty"])
    if kind == "assigned":
        ips = [f"10.0.0.{rng.randint(11, 19)}" for _ in range(rng.randint(1, 3))]
        lagged.append((now + rng.choice([0.0, 0.0, 3.0, 30.0, 90.0]), PRIMARY.eni_id, ips))
        return result(seq, {"kind": "assigned", "eni_id": PRIMARY.eni_id, "ips": sorted(set(ips))})
    if kind == "attached":
        ips = [f"10.0.0.{rng.randint(21, 29)}" for _ in range(rng.randint(1, 3))]
        lagged.append((now + rng.choice([0.0, 5.0, 40.0]), SECOND.eni_id, ips))
        return result(seq, attached_second(sorted(set(ips))))
    if kind == "released":
        offered = a.ds.quarantined()
        if not offered:
            return result(seq)
        eni_id = rng.choice(sorted(offered))
        ips = offered[eni_id][0]
        ips = rng.sample(ips, rng.randint(1, len(ips))) if ips else []
        cur = imds.enis.get(eni_id)
        if cur is not None and rng.random() < 0.7:  # else IMDS still lists them for a while
            imds.enis[eni_id] = cur._replace(ips=[ip for ip in cur.ips if ip not in ips])
        return result(seq, {"kind": "released", "eni_id": eni_id, "ips": sorted(ips)})
    if kind == "deferred":
        return result(seq, {"kind": "deferred", "retry_after_s": rng.choice([2.0, 7.5, 30.0]), "reason": "tokens"})
    if kind == "failed":
        return result(seq, {"kind": "failed", "code": "Throttling", "message": "slow down"})
    return result(seq)


class Run:
    """One drawn sequence played on both sides."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self.rng = rng = random.Random(seed)
        pool = rng.choice(
            [PoolConfig(warm_ip=2), PoolConfig(warm_ip=1), PoolConfig(warm_ip=3, minimum_ip=4), PoolConfig(warm_eni=1)]
        )
        start = [f"10.0.0.{i}" for i in range(11, 11 + rng.randint(0, 6))]
        self.imds = FakeImds()
        self.imds.add(PRIMARY, start)
        self.every, self.skip = Side(pool, self.imds, start), Side(pool, self.imds, start)
        self.lagged: list[tuple[float, str, list[str]]] = []
        self.pods: list[str] = []

    def show_lagged(self, now: float) -> None:
        """IMDS catching up with the results: not an event (the skipping side is not ticked for it)."""
        for item in [x for x in self.lagged if x[0] <= now]:
            self.lagged.remove(item)
            _, eni_id, ips = item
            have = self.imds.enis[eni_id].ips if eni_id in self.imds.enis else []
            self.imds.add(PRIMARY if eni_id == PRIMARY.eni_id else SECOND, [ip for ip in ips if ip not in have])

    def event(self, kind: str, now: float) -> bool:
        """Play one event on both sides; False if it does not reach the agent."""
        rng, every, skip = self.rng, self.every, self.skip
        if kind == "add":
            waiting = [p for p in self.pods if every.ds.lookup(p, "eth0") is None]
            if waiting and rng.random() < 0.3:
                pod = rng.choice(waiting)  # the kubelet retries an ADD that found nothing
            else:
                pod = f"c{len(self.pods)}"
                self.pods.append(pod)
            assert every.ds.assign(pod, "eth0", "ns", now) == skip.ds.assign(pod, "eth0", "ns", now)
        elif kind == "del" and self.pods:
            pod = self.pods.pop(rng.randrange(len(self.pods)))
            assert every.ds.release(pod, "eth0", now) == skip.ds.release(pod, "eth0", now)
        elif kind == "result":
            res = _result(rng, every, self.imds, self.lagged, now)
            if res is not None:
                assert every.ctl.apply_result(res, now) == skip.ctl.apply_result(res, now)
        elif kind == "resync":
            assert every.ctl.resync(now) == skip.ctl.resync(now)
        elif kind == "retry_soon":  # the last report could not be sent
            every.ctl.retry_soon()
            skip.ctl.retry_soon()
        elif kind == "unassigned":  # EC2 unassigned an offered address; its result is lost
            offered = every.ds.quarantined()
            if offered:
                eni_id = rng.choice(sorted(offered))
                cur = self.imds.enis.get(eni_id)
                if cur is not None and offered[eni_id][0]:
                    gone = rng.choice(offered[eni_id][0])
                    self.imds.enis[eni_id] = cur._replace(ips=[ip for ip in cur.ips if ip != gone])
            return False
        elif kind == "imds":
            extra = f"10.0.0.{rng.randint(30, 39)}"  # EC2 assigned it, no result came
            if extra not in self.imds.enis[PRIMARY.eni_id].ips:
                self.imds.add(PRIMARY, [extra])
            return False
        return True

    def play(self) -> None:
        every, skip = self.every, self.skip
        events = _events(self.rng)
        for side in (every, skip):
            side.ctl.start(0.0)
            side.tick(0.0)
        due = skip.ctl.next_due(0.0)
        grid = 1.0  # the next whole second not passed yet
        while grid <= END_S:
            if events and events[0][0] < grid:
                now, kind = events.pop(0)
                self.show_lagged(now)
                if not self.event(kind, now):
                    continue
                if self.rng.random() < 0.7:  # not always followed by a tick (the bench's ADD retries)
                    every.tick(now)
                    skip.tick(now)
                due = skip.ctl.next_due(now)
                assert every.state() == skip.state(), f"seed {self.seed}: differ after {kind} at {now}"
                continue
            now, grid = grid, grid + 1.0
            self.show_lagged(now)
            every.tick(now)
            if now >= due:
                skip.tick(now)
                due = skip.ctl.next_due(now)
            assert every.sent == skip.sent, f"seed {self.seed}: reports differ at {now}"
        assert every.state() == skip.state()


@pytest.mark.parametrize("block", range(5))
def test_ticks_before_next_due_change_nothing(block: int) -> None:
    skipped = 0
    for seed in range(block * 20, block * 20 + 20):
        run = Run(seed)
        run.play()
        skipped += run.every.ticks - run.skip.ticks
    assert skipped > 0  # the skipping side did skip


def test_next_due_is_now_when_a_tick_has_work() -> None:
    side = Side(PoolConfig(warm_ip=2), FakeImds(), [])
    assert side.ctl.next_due(0.0) <= 0.0  # never reported
    side.tick(0.0)
    due = side.ctl.next_due(0.0)
    assert 0.0 < due <= TIMING.retry_s  # short: retried after the backoff
    assert side.ds.assign("c1", "eth0", "ns", 1.0) is None  # an ADD finds nothing
    assert side.ctl.next_due(1.0) <= 1.0  # reported at once
