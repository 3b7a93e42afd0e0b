"""The agent's review findings' shared world (tests/unit/test_agent_review_findings.py, the
step-6 reviews and the reviews after them): the real :class:`PoolController` and
:class:`Datastore` in virtual time on a fake IMDS, booted from a checkpoint or with it lost,
and the address X offered, then released by EC2 while a lagging IMDS goes on listing it."""

from __future__ import annotations

from typing import Any

from node_agent.checkpoint import MemoryCheckpoint
from node_agent.controller import AttachedEni, PoolController
from node_agent.datastore import Datastore
from tests.helpers.controller import ID, PRIMARY, TIMING, FakeImds, one, result
from warmpool.limits import known
from warmpool.messages import PoolReport
from warmpool.pool import PoolConfig

POOL = PoolConfig(warm_ip=1)


def boot(cp: MemoryCheckpoint, metadata: Any, now: float, **kw: Any) -> tuple[Datastore, PoolController]:
    """The agent process starts: checkpoint, then IMDS."""
    ds = Datastore(cooldown_s=0.0, pending_ttl_s=TIMING.pending_ttl_s, checkpoint=cp)
    ds.restore()
    ctl = PoolController(ID, known("m5.large"), POOL, ds, TIMING, metadata=metadata, **kw)
    ctl.start(now)
    return ds, ctl


def holders(ds: Datastore) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for p in ds.pods():
        out.setdefault(p.ip, []).append(p.container_id)
    return out


X = "10.0.0.12"


def listed(imds: FakeImds, *ips: str) -> None:
    imds.enis[PRIMARY.eni_id] = AttachedEni(PRIMARY, list(ips), [])


def offered_x(cp: MemoryCheckpoint, imds: FakeImds, t0: float) -> tuple[Datastore, PoolController, PoolReport]:
    """.11 and .12 attached; .12 surplus, quarantined and offered in the report returned."""
    listed(imds, "10.0.0.11", X)
    ds, ctl = boot(cp, imds, t0)
    ctl.tick(t0)
    ctl.tick(t0 + 1)
    r = one(ctl.tick(t0 + 61))
    assert r.release[0].ips == [X]
    return ds, ctl, r


def released_x(cp: MemoryCheckpoint, imds: FakeImds, t0: float) -> tuple[Datastore, PoolController]:
    """:func:`offered_x`, then .12 released by EC2, while a lagging IMDS goes on listing it."""
    ds, ctl, r = offered_x(cp, imds, t0)
    ctl.apply_result(result(r.seq, {"kind": "released", "eni_id": PRIMARY.eni_id, "ips": [X]}), t0 + 62)
    assert ds.eni_of(X) is None
    return ds, ctl


def lost(imds: Any, now: float, ds_cls: type[Datastore] = Datastore) -> tuple[Datastore, PoolController]:
    """The agent starts with its checkpoint lost (disk replaced, file unreadable)."""
    ds = ds_cls(cooldown_s=0.0, pending_ttl_s=TIMING.pending_ttl_s, checkpoint=MemoryCheckpoint())
    ctl = PoolController(ID, known("m5.large"), POOL, ds, TIMING, metadata=imds)
    ctl.start(now, checkpoint_lost=True)
    return ds, ctl


def try_pods(ds: Datastore, now: float, n: int = 3, tag: str = "p") -> None:
    for i in range(n):
        ds.assign(f"{tag}{i}", "eth0", "ns", now)


def handbacks_with_latency(latency: float, rounds: int = 20) -> tuple[Datastore, PoolController, float]:
    """X offered; a pod needs it; the subnet has no room, so the allocator can only hand X
    back, and does so in answer to every report whose offer is young enough, ``latency``
    seconds after the report (SQS plus the allocator's intake, bounded by nothing)."""
    imds = FakeImds()
    listed(imds, "10.0.0.11", X)
    ds = Datastore(cooldown_s=0.0, pending_ttl_s=10_000.0, checkpoint=MemoryCheckpoint())
    ctl = PoolController(ID, known("m5.large"), POOL, ds, TIMING, metadata=imds)
    ctl.start(0.0)
    ctl.tick(0.0)
    ctl.tick(1.0)
    r = one(ctl.tick(61.0))
    assert r.release and r.release[0].ips == [X]
    assert ds.assign("p1", "eth0", "ns", 62.0) is not None  # .11
    assert ds.assign("p2", "eth0", "ns", 62.0) is None  # waits: X is offered
    inflight: list[tuple[float, PoolReport]] = []
    t = 62.0
    while t < 62.0 + rounds * TIMING.release_timeout_s:
        for due, rep in [x for x in inflight if x[0] <= t]:
            inflight.remove((due, rep))
            fresh = [o for o in rep.release if o.quarantined_at is not None and t - latency - o.quarantined_at < 60.0]
            acts = [{"kind": "assigned", "eni_id": o.eni_id, "ips": o.ips} for o in fresh]
            ctl.apply_result(result(rep.seq, *acts), t)
        for rep in ctl.tick(t):
            inflight.append((t + latency, rep))
        if ds.assign("p2", "eth0", "ns", t) is not None:
            break
        t += 1.0
    return ds, ctl, t
