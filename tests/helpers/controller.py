"""A pool controller on a fake IMDS and host, in virtual time, and what its tests
feed it (tests/unit/test_agent_*.py)."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from node_agent import controller
from node_agent.config import Timing
from node_agent.controller import AttachedEni, PoolController
from node_agent.datastore import Datastore
from node_agent.records import EniInfo, NodeIdentity
from warmpool.limits import known
from warmpool.messages import AllocationResult, PoolReport
from warmpool.pool import PoolConfig

ID = NodeIdentity("demo", "node-1", "i-0123456789abcdef0", "m5.large", "us-east-1a")


PRIMARY = EniInfo("eni-00000000", 0, "0a:00:00:00:00:00", "10.0.0.10", "subnet-a", "10.0.0.0/24")


SECOND = EniInfo("eni-00000001", 1, "0a:00:00:00:00:01", "10.0.0.20", "subnet-a", "10.0.0.0/24")


TIMING = Timing(cooldown_s=30, release_delay_s=60, release_timeout_s=120, heartbeat_s=60, retry_s=5)


class FakeImds:
    def __init__(self) -> None:
        self.enis: dict[str, AttachedEni] = {PRIMARY.eni_id: AttachedEni(PRIMARY, [], [])}

    def identity(self) -> NodeIdentity:
        """The instance (only its ``instance_id`` is read, by ``SkipUnmanaged``)."""
        return ID

    def interfaces(self) -> list[AttachedEni]:
        return list(self.enis.values())

    def add(self, info: EniInfo, ips: list[str] = (), prefixes: list[str] = ()) -> None:  # type: ignore[assignment]
        cur = self.enis.get(info.eni_id, AttachedEni(info, [], []))
        self.enis[info.eni_id] = AttachedEni(info, cur.ips + list(ips), cur.prefixes + list(prefixes))


class RecordingHost:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []
        self.missing: set[str] = set()

    def setup_eni(self, eni: EniInfo, mtu: int, pods: Collection[str] = ()) -> None:
        if eni.mac in self.missing:
            raise LookupError(f"no link with MAC {eni.mac}")
        self.calls.append(("setup", eni.eni_id))

    def teardown_eni(self, eni: EniInfo) -> None:
        self.calls.append(("teardown", eni.eni_id))


def make(pool: PoolConfig, ips: list[str] = (), imds: FakeImds | None = None, host: RecordingHost | None = None):  # type: ignore[assignment]
    ds = Datastore(cooldown_s=TIMING.cooldown_s)
    ds.add_eni(PRIMARY, 0.0)
    ds.add_addresses(PRIMARY.eni_id, ips)
    ctl = PoolController(ID, known("m5.large"), pool, ds, TIMING, host=host, metadata=imds)
    return ds, ctl


def result(seq: int, *actions: dict) -> AllocationResult:
    return AllocationResult.model_validate(
        {
            "schema": "warmpool.result/v1",
            "cluster": "demo",
            "node": "node-1",
            "instance_id": ID.instance_id,
            "in_reply_to": seq,
            "actions": list(actions),
        }
    )


def attached_second(ips: list[str]) -> dict[str, object]:
    """An ``attached`` action for :data:`SECOND` with these addresses."""
    return {
        "kind": "attached",
        "eni_id": SECOND.eni_id,
        "device_index": 1,
        "mac": SECOND.mac,
        "subnet_id": "subnet-a",
        "subnet_cidr": "10.0.0.0/24",
        "primary_ip": SECOND.primary_ip,
        "ips": ips,
    }


def one(reports: list[PoolReport]) -> PoolReport:
    assert len(reports) == 1
    return reports[0]


def never_free(ds: Datastore, ctl: PoolController, ip: str) -> bool:
    """``ip`` is not the pool's: absent, or held as an offer of unknown origin (a released
    address IMDS lists again: docs/safety.md, row 6), which no pod gets and no hand-back returns."""
    for e in ds.enis():
        a = e.addrs.get(ip)
        if a is not None:
            return a.quarantined_at is not None and not a.in_use and ip in ctl._unknown
    return True


def unknown_dated_at_the_start(monkeypatch: Any) -> None:
    """The agent before stop 50 (f80086d): an address of unknown origin learnt inside the rebuild
    window offered dated at the start, for pinned simulation tests whose scenario was drawn then
    (the later date moves their timing: grants, releases, lean holds)."""

    def at_start(self: PoolController, now: float) -> float:
        rebuilt = self._rebuilt_at
        return rebuilt if rebuilt is not None and self._in_rebuild_window(now) else now

    monkeypatch.setattr(PoolController, "_unknown_dated", at_start)


def offers_dated_by_their_oldest(monkeypatch: Any) -> None:
    """The agent before review 32's D1 fix: an address joining an ENI's offer left the offer dated
    by its oldest address (``PoolController._date_joined_offers`` did nothing), for pinned simulation
    tests whose scenario was drawn then (the later date moves their timing)."""

    def unchanged(self: PoolController, new: set[tuple[str, str]], now: float) -> None:
        return None

    monkeypatch.setattr(PoolController, "_date_joined_offers", unchanged)


def offers_dated_anew_at_every_join(monkeypatch: Any) -> None:
    """The agent between review 32's D1 fix and review 33's Y1 fix: an address joining an ENI's
    offer dated the whole offer anew at once, however young the offer (no address was left out of
    it: ``OFFER_DATE_KEPT_S`` 0)."""
    monkeypatch.setattr(controller, "OFFER_DATE_KEPT_S", 0.0)


def offers_signed_by_their_enis(monkeypatch: Any) -> None:
    """The agent before review 33's R1 fix: what a report says that, changed, resets the back-off
    named the offers' ENIs and not their dates (``PoolController._signature``), so a renewal kept
    a back-off grown to the heartbeat."""

    def by_enis(self: PoolController, delta: Any, pending: int, offers: dict[str, Any]) -> tuple[object, ...]:
        return (delta.short_units, delta.whole_enis, pending > 0, tuple(sorted(offers)))

    monkeypatch.setattr(PoolController, "_signature", by_enis)
