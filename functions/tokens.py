"""Sharing the token buckets among the nodes of one batch (pure).

The store reads every bucket the batch needs once, calls :func:`allot`, and
writes the new states back in one conditional write; on a conflict it reads
again and allots again. So a batch costs two store calls, not one per node.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

from warmpool.buckets import BucketSpec, BucketState, full, refill

SpecOf = Callable[[str], BucketSpec]


def allot(
    states: Mapping[str, BucketState | None],
    spec_of: SpecOf,
    requests: Sequence[Mapping[str, float]],
    now: float,
    reserve: Sequence[float] | None = None,
) -> tuple[dict[str, BucketState], list[float]]:
    """Grant the requests, in order, that the buckets can pay for now.

    A request is all-or-nothing across its actions. A request that does not
    fit takes nothing and queues behind the earlier ones that did not fit
    either: its wait is when the bucket will have paid for all of them, so
    deferred nodes come back staggered instead of all at once. Later requests
    that fit may still be granted (no token left idle). ``inf`` if a request
    can never fit (more than a bucket's capacity).

    ``reserve[i]`` (a fraction of each bucket's capacity, default 0) must
    stay in the buckets after request ``i`` is granted: low-priority work
    (a warm-up with no pod waiting) leaves tokens for starved nodes, and waits
    until the buckets refill past the reserve.

    Returns the new states of the buckets that changed and one wait per
    request (0.0 = granted).
    """
    cur: dict[str, BucketState] = {}
    for action in {a for r in requests for a in r}:
        st = states.get(action)
        spec = spec_of(action)
        cur[action] = full(spec, now) if st is None else refill(st, spec, now)
    avail = {a: s.tokens for a, s in cur.items()}
    waits: list[float] = []
    deferred: list[int] = []
    for i, req in enumerate(requests):
        need = {a: n for a, n in req.items() if n > 0}
        keep = reserve[i] if reserve else 0.0
        if all(avail[a] + 1e-9 >= n + keep * spec_of(a).capacity for a, n in need.items()):
            for a, n in need.items():
                avail[a] -= n
            waits.append(0.0)
        else:
            waits.append(math.nan)
            deferred.append(i)
    debt: dict[str, float] = {}
    for i in deferred:
        wait = 0.0
        keep = reserve[i] if reserve else 0.0
        for a, n in requests[i].items():
            if n <= 0:
                continue
            spec = spec_of(a)
            if n > spec.capacity + 1e-9:
                wait = math.inf
                continue
            debt[a] = debt.get(a, 0.0) + n + keep * spec.capacity
            rate = spec.refill_per_s * cur[a].rate_factor
            wait = max(wait, max(0.0, debt[a] - avail[a]) / rate)
        waits[i] = max(wait, 1e-3)
    changed = {
        a: BucketState(tokens=max(0.0, avail[a]), updated_at=now, rate_factor=cur[a].rate_factor)
        for a in cur
        if avail[a] != cur[a].tokens
    }
    return changed, waits
