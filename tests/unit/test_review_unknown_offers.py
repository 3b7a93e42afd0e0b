"""Hostile review of the unknown-offers change (1de634b: c9538aa, fead81a, dfba3a0).

Each test is a strict xfail: it asserts what docs/safety.md row 12 and docs/allocator.md
("Offers of unknown origin") promise, and fails on the merged code.
"""

from __future__ import annotations

import pytest

from node_agent.checkpoint import MemoryCheckpoint
from node_agent.controller import PoolController
from node_agent.datastore import Datastore
from node_agent.records import UNKNOWN_HOLDER
from tests.helpers.controller import ID, TIMING, FakeImds, never_free
from tests.unit.test_agent_review_findings import POOL, X, holders, listed, released_x
from tests.unit.test_agent_step6_review import try_pods
from warmpool.limits import known


def open_finding(reason: str) -> pytest.MarkDecorator:
    return pytest.mark.xfail(strict=True, raises=AssertionError, reason=reason)


# --- R1. WARMPOOL_POD_NETWORK=recorded: hold_all, then the grace, frees IMDS-only addresses ----


@open_finding(
    "open: a rebuild in recorded mode holds every address by '?' (hold_all after start), which "
    "clears the unknown quarantine; WARMPOOL_RECOVERY_GRACE_S later frees them as ordinary"
)
def test_recorded_rebuild_grace_frees_an_address_imds_alone_shows() -> None:
    # X was offered and unassigned by EC2 (released applied); the checkpoint is lost; the read
    # at the rebuild answers from before the unassign (row 6) and lists X. Agent._rebuild in
    # recorded mode: controller.start(checkpoint_lost=True) (X quarantined, unknown), then
    # ds.hold_all (X held by '?', quarantined_at reset to None). _forget_known drops X's
    # unknown mark at the next tick. After the grace (>= release timeout, as config demands)
    # Agent._release_unknown_holders frees X as an ordinary address: a pod gets it.
    imds = FakeImds()
    t0 = 1000.0
    released_x(MemoryCheckpoint(), imds, t0)
    listed(imds, "10.0.0.11", X)  # regressed read: X from before the unassign
    t1 = t0 + 20
    ds = Datastore(cooldown_s=0.0, pending_ttl_s=TIMING.pending_ttl_s, checkpoint=MemoryCheckpoint())
    ctl = PoolController(ID, known("m5.large"), POOL, ds, TIMING, metadata=imds)
    with ds.batch():  # as node_agent/agent.py::_rebuild does with no kernel wiring
        ctl.start(t1, checkpoint_lost=True)
        ds.hold_all(t1)
    for k in range(1, 4):
        ctl.tick(t1 + 60 * k)
    grace = TIMING.release_timeout_s  # the shortest node_agent/config.py allows
    t2 = t1 + grace + 1
    ds.release_recovered(UNKNOWN_HOLDER, t2)  # Agent._release_unknown_holders
    ctl.resync(t2 + 1)
    ctl.tick(t2 + 1)
    try_pods(ds, t2 + 40, tag="q")
    assert X not in holders(ds), "a pod got X, which IMDS alone showed after the loss (EC2 unassigned it)"
    assert never_free(ds, ctl, X)
