"""A second hostile review of step 6's follow-ups (2ebee40, 46d5144, 44f973b): the
report that waits for its offer's answer (``OFFER_ANSWER_WAIT_S``), one datastore batch
over adding and holding, granted entries kept without a time limit.

Each test is a short sequence of world events, the real :class:`PoolController` and
:class:`Datastore` in virtual time, and asserts what the design promises.

1. liveness: the wait for an answer is a bound (10 s) on how late SQS and the allocator
   may answer. Answers slower than it still supersede every hand-back, as before the fix
   (step 6's finding 5), and with no room to assign new addresses the pod waits for ever.
   A permitted configuration is enough: ``batching_window_s`` (infra/config.py, up to 300 s)
   of 10 s or more delays every answer past the wait; so do cold starts, throttled EC2 calls
   and a backlog in the reports queue (docs/safety.md row 25).
2. out of use for good: a grant replying to a report of the process whose checkpoint was
   lost, whose one batch save (adding + ``_hold_unknown``) raises, is applied again when SQS
   redelivers it; by then ``_hold_unknown`` has quarantined the address in memory, so the retry
   takes the grant for a hand-back and does not mark it granted; an older ``released``
   arriving later drops the address EC2 has on the node. Passes on 2ebee40^ (the failed save
   came before ``_hold_unknown`` there). The control test shows the path without the failure.

Both failed on db42a45. 2 is fixed: the grant is marked inside the batch, before
``_hold_unknown``. 1 is open: the wait was tried at 10, 30 and 60 s and removed, each costing
something measured (docs/reliability.md), so every case below is a strict xfail.
"""

from __future__ import annotations

from typing import Any

import pytest

from node_agent.checkpoint import CheckpointWriteError, MemoryCheckpoint
from node_agent.controller import PoolController
from node_agent.datastore import Datastore
from tests.helpers.agent_findings import POOL, X, handbacks_with_latency, listed
from tests.helpers.controller import ID, PRIMARY, TIMING, FakeImds, result
from warmpool.limits import known

OPEN_WAIT = pytest.mark.xfail(strict=True, raises=AssertionError, reason="open: the wait for an answer was removed")


@pytest.mark.parametrize(
    "latency",
    [
        pytest.param(12.0, marks=OPEN_WAIT),
        pytest.param(15.0, marks=OPEN_WAIT),
        pytest.param(
            32.0,
            marks=pytest.mark.xfail(
                strict=True,
                raises=AssertionError,
                reason="open: answers later than the agent's 30 s wait, every time, still supersede",
            ),
        ),
    ],
)
def test_answers_slower_than_the_offer_wait_never_give_an_offered_address_back(latency: float) -> None:
    # Every answer arrives ``latency`` s after its report. The agent waits (at first 10 s, now
    # the offer-age ceiling) for the answer to the newest report with offers, then retries: the
    # retry offers X again, so the hand-back, replying to the report before, is superseded; and so on, and at
    # the release timeout the offer is renewed, never taken back. A cold start, a batching
    # window or a backlog (docs/safety.md row 25) is enough.
    ds, ctl, t = handbacks_with_latency(latency)
    assert ds.lookup("p2", "eth0") is not None, (
        f"latency {latency:.0f} s: X still offered after {t - 62:.0f} s: renewed {ctl.stats.offers_renewed}, "
        f"hand-backs superseded {ctl.stats.handbacks_superseded}"
    )


# --- 2. a grant whose batch could not be written loses its ``granted`` entry -----------------


class FailingCheckpoint(MemoryCheckpoint):
    failing = False

    def save(self, data: dict[str, Any]) -> None:
        if self.failing:
            raise OSError("ENOSPC")
        super().save(data)


def test_a_grant_applied_again_after_its_batch_failed_to_save_is_not_marked_granted() -> None:
    # After a checkpoint loss (window open), a grant of X replying to a report of the lost
    # process arrives; IMDS lists X. ``_apply_addresses`` computes ``offered`` (X not held yet),
    # then in one batch adds X and ``_hold_unknown`` quarantines it; the batch's one save raises
    # (disk full), so the result is not acknowledged and SQS brings it back. Applied again, X is
    # quarantined now, so it counts as a hand-back of an offer and ``mark_granted`` leaves it out.
    # Then the ``released`` of the lost process's earlier report (EC2 unassigned X before it
    # granted X again), delayed in SQS, is not stale any more: X is dropped and filtered from
    # resync until a grant names it again, while EC2 keeps it on the node (out of use for good,
    # counted by the allocator as the node's). Before the batch, the failed save came before
    # ``_hold_unknown`` and the retry marked the grant.
    imds = FakeImds()
    listed(imds, "10.0.0.11")
    cp = FailingCheckpoint()
    ds = Datastore(cooldown_s=0.0, pending_ttl_s=TIMING.pending_ttl_s, checkpoint=cp)
    ctl = PoolController(ID, known("m5.large"), POOL, ds, TIMING, metadata=imds)
    t0 = 1000.0
    ctl.start(t0, checkpoint_lost=True)
    first = ctl.last_seq
    old_release, old_grant = first - 2000, first - 1000  # two reports of the lost process
    listed(imds, "10.0.0.11", X)
    grant = result(old_grant, {"kind": "assigned", "eni_id": PRIMARY.eni_id, "ips": [X]})
    cp.failing = True
    with pytest.raises(CheckpointWriteError):
        ctl.apply_result(grant, t0 + 5)
    cp.failing = False
    ctl.apply_result(grant, t0 + 6)  # redelivered (not acknowledged)
    assert ds.eni_of(X) is not None
    late = result(old_release, {"kind": "released", "eni_id": PRIMARY.eni_id, "ips": [X]})
    ctl.apply_result(late, t0 + 30)
    assert ds.eni_of(X) is not None and ctl.stats.stale_releases == 1, (
        "a released older than the grant dropped X (EC2 has it on the node): out of use for good"
    )


def test_control_the_same_grant_applied_once_is_marked_granted() -> None:
    imds = FakeImds()
    listed(imds, "10.0.0.11")
    ds = Datastore(cooldown_s=0.0, pending_ttl_s=TIMING.pending_ttl_s, checkpoint=MemoryCheckpoint())
    ctl = PoolController(ID, known("m5.large"), POOL, ds, TIMING, metadata=imds)
    t0 = 1000.0
    ctl.start(t0, checkpoint_lost=True)
    first = ctl.last_seq
    listed(imds, "10.0.0.11", X)
    ctl.apply_result(result(first - 1000, {"kind": "assigned", "eni_id": PRIMARY.eni_id, "ips": [X]}), t0 + 5)
    ctl.apply_result(result(first - 2000, {"kind": "released", "eni_id": PRIMARY.eni_id, "ips": [X]}), t0 + 30)
    assert ds.eni_of(X) is not None and ctl.stats.stale_releases == 1
