"""Issue 25 (noticed in stop 47): a node short of its warm target that the allocator cannot serve
(at its ENI limit, its subnets full) is answered ``failed``/``unmet`` every time. Every applied
answer reset the report back-off, so such a node reported every retry interval (5 s plus the
round trip) for good: about 450 reports an hour instead of about 60
(``tests/perf/report_cadence.py``). An answer of ``unmet`` failures alone, while nothing is on
offer, now keeps the back-off (``PoolController._answered``); any other answer, one with an offer
out, or a change in what the node needs, still resets it."""

from __future__ import annotations

import itertools
from typing import Any

from node_agent.controller import AttachedEni
from tests.helpers.controller import PRIMARY, FakeImds, make, result
from warmpool.pool import PoolConfig

UNMET = {"kind": "failed", "code": "unmet", "message": "2 units: instance at its ENI limit"}


def _gaps(answer: Any, until: float = 600.0) -> list[float]:
    """A node with one address and WARM_IP_TARGET=5, each report answered at once with
    ``answer(seq)``; the gaps between its reports over ``until`` seconds, ticked every 0.5 s."""
    _ds, ctl = make(PoolConfig(warm_ip=5), ["10.0.0.11"])
    ctl.start(0.0)
    sent: list[float] = []
    t = 0.0
    while t < until:
        for r in ctl.tick(t):
            sent.append(t)
            ctl.apply_result(answer(r.seq), t + 0.5)
        t += 0.5
    return [b - a for a, b in itertools.pairwise(sent)]


def test_unmet_answers_keep_the_back_off_up_to_the_heartbeat() -> None:
    gaps = _gaps(lambda seq: result(seq, UNMET))
    assert max(gaps) == 60.0  # the heartbeat
    assert gaps[:4] == sorted(gaps[:4]) and gaps[3] >= 4 * gaps[0]  # doubling
    assert len(gaps) + 1 <= 16  # before: about 100 reports in these ten minutes


def test_error_answers_reset_the_back_off_as_before() -> None:
    """A transient error (``InternalError``) is retried at the retry interval, as before."""
    gaps = _gaps(lambda seq: result(seq, {"kind": "failed", "code": "InternalError", "message": "x"}))
    assert max(gaps) < 10.0
    assert len(gaps) + 1 >= 60


def test_unmet_answers_with_an_offer_out_keep_reporting_at_the_retry_interval() -> None:
    """The simulation's seed 7816 (``tests/sim/test_seed_7816.py``): n0 at its ENI limit with a pod
    waiting and three addresses offered as of unknown origin; the allocator acts on an offer only
    between its release delay (10 s) and 60 s after the offer's quarantine, and reports every
    60 s, each 0.5 s after a re-dating or 60.5 s after it, never fell in that window: the pod
    waited for good. With an offer out, the back-off is reset by every answer, as before."""
    imds = FakeImds()
    imds.enis[PRIMARY.eni_id] = AttachedEni(PRIMARY, ["10.0.0.11", "10.0.0.12"], [])
    ds, ctl = make(PoolConfig(warm_ip=5), [], imds=imds)
    ctl.start(0.0, checkpoint_lost=True)  # what IMDS shows: offered, of unknown origin
    assert ds.assign("pod", "eth0", "ns", 0.0) is None, "setup: a pod waits"
    sent: list[float] = []
    t = 0.0
    while t < 300.0:
        for r in ctl.tick(t):
            sent.append(t)
            assert r.release, "setup: the offer stays out"
            ctl.apply_result(result(r.seq, UNMET), t + 0.5)
        t += 0.5
    gaps = [b - a for a, b in itertools.pairwise(sent)]
    assert max(gaps) < 10.0, gaps


def test_an_answer_that_did_something_resets_the_back_off() -> None:
    """After the back-off reached the heartbeat, an answer that gives an address (the node still
    short) brings the next report back to the retry interval."""
    _, ctl = make(PoolConfig(warm_ip=5), ["10.0.0.11"])
    ctl.start(0.0)
    sent: list[float] = []
    t = 0.0
    while t < 400.0:
        for r in ctl.tick(t):
            sent.append(t)
            ctl.apply_result(result(r.seq, UNMET), t + 0.5)
        t += 0.5
    assert sent[-1] - sent[-2] == 60.0
    last = sent[-1]
    gave = False
    while t < last + 120.0:
        for r in ctl.tick(t):
            sent.append(t)
            if not gave:
                gave = True
                given = {"kind": "assigned", "eni_id": PRIMARY.eni_id, "ips": ["10.0.0.12"]}
                ctl.apply_result(result(r.seq, given, UNMET), t + 0.5)
            else:
                ctl.apply_result(result(r.seq, UNMET), t + 0.5)
        t += 0.5
    after = [b - a for a, b in itertools.pairwise(sent) if a > last]
    assert after[0] <= 6.0, after
