"""Hostile review of the unknown-offers change (1de634b: c9538aa, fead81a, dfba3a0).

Each test is a strict xfail: it asserts what docs/safety.md row 12 and docs/allocator.md
("Offers of unknown origin") promise, and fails on the merged code.
"""

from __future__ import annotations

from node_agent.checkpoint import MemoryCheckpoint
from node_agent.controller import PoolController
from node_agent.datastore import Datastore
from tests.helpers.agent_findings import POOL, X, holders, listed, released_x, try_pods
from tests.helpers.controller import ID, TIMING, FakeImds, never_free
from warmpool.limits import known

# --- R1. WARMPOOL_POD_NETWORK=recorded: hold_all, then the grace, frees IMDS-only addresses ----


def test_recorded_rebuild_grace_frees_an_address_imds_alone_shows() -> None:
    # X was offered and unassigned by EC2 (released applied); the checkpoint is lost; the read
    # at the rebuild answers from before the unassign (row 6) and lists X. Agent._rebuild in
    # recorded mode: controller.start(checkpoint_lost=True) (X quarantined, unknown), then
    # ds.hold_all (X held by '?', quarantined_at reset to None). _forget_known drops X's
    # unknown mark at the next tick. After the grace (>= release timeout, as config demands)
    # Agent._release_unknown_holders freed X as an ordinary address and a pod got it (fixed:
    # PoolController.release_unknown_holders quarantines it as an offer of unknown origin).
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
    ctl.release_unknown_holders(t2)  # what Agent._release_unknown_holders calls
    ctl.resync(t2 + 1)
    ctl.tick(t2 + 1)
    try_pods(ds, t2 + 40, tag="q")
    assert X not in holders(ds), "a pod got X, which IMDS alone showed after the loss (EC2 unassigned it)"
    assert never_free(ds, ctl, X)


# --- R3. the agent's own refusal of a hand-back of an unknown offer has a hole --------------------


def test_a_hand_back_of_an_unknown_offer_dropped_at_the_timeout_is_refused() -> None:
    # After a loss X is held as an unknown offer and offered; EC2 unassigns it (the answer is
    # lost); at the timeout IMDS lacks X: dropped as released, dated last_seq. A hand-back of X
    # replying to that same report (which the allocator must never send for an unknown offer,
    # the agent's refusal being the last line, docs/allocator.md) then meets a read listing X
    # (regressed, row 6): seen absent once, so it is taken as evidence and X is added free.
    from tests.helpers.agent_findings import lost
    from tests.helpers.controller import PRIMARY, result

    imds = FakeImds()
    t0 = 1000.0
    listed(imds, "10.0.0.11", X)
    ds, ctl = lost(imds, t0)
    reps = [r for k in range(0, 100, 10) for r in ctl.tick(t0 + k)]
    assert any(o.unknown and X in o.ips for r in reps for o in r.release)
    listed(imds, "10.0.0.11")  # EC2 unassigned X; IMDS caught up
    t = t0 + 100
    while ctl.stats.released_without_result == 0 and t < t0 + 1000:
        seq = ctl.last_seq
        ctl.tick(t)
        t += 10
    assert ctl.stats.released_without_result >= 1 and ds.eni_of(X) is None
    listed(imds, "10.0.0.11", X)  # a regressed read
    ctl.apply_result(result(seq, {"kind": "assigned", "eni_id": PRIMARY.eni_id, "ips": [X]}), t + 1)
    try_pods(ds, t + 2, tag="q")
    assert X not in holders(ds), "a hand-back of an unknown offer came back free after the timeout dropped it"
