"""A hostile review of step 6 (f84d583 and its follow-ups: offers renewed at the release
timeout, offered addresses kept through reads that lack them). Each test is the short
sequence of world events that breaks the claim (docs/safety.md) or leaves an address out of
use for good: the real :class:`PoolController`, :class:`Datastore`, :class:`ReleaseBook`
and planner in virtual time, IMDS as a fake that lags or regresses as a seed could draw it.

Every test here failed on f84d583 (each asserts what the design promises). 3 and 4 are fixed
(``node_agent/controller.py``: one datastore batch over the adding and the holding;
``_known_keys`` leaves out a held ENI's addresses). 1 and 2 are fixed, found in the simulation
by directed worlds (tests/sim/test_checkpoint_loss_regress.py): after a checkpoint loss an
address learnt from IMDS alone is held as offered at any time, not only in the window
(``PoolController._holds_learnt``), and offered as of unknown origin, which the allocator never
hands back (``warmpool/planner.py::_split_unknown``: it unassigns it) nor the agent takes back
(``PoolController._may_reclaim``). 6 is fixed with them: a released address IMDS lists again
is held as offered, of unknown origin, rather than left out for good (the leak
``DROPPED_ON_A_READ_BEFORE_THE_GRANT`` pinned in tests/sim/test_undocumented_rows.py). 5 is
open, a strict xfail: its fix, a wait for the answer, was tried and removed
(docs/reliability.md).

1. after a checkpoint loss, a regressed read past the rebuild window (a time bound on
   IMDS) brings an address EC2 unassigned before the loss back free;
2. after a checkpoint loss, a regressed read inside the window re-offers an address whose
   release-book entry settled; a stale Describe lets the allocator hand it back;
3. a CNI ADD between ``reconcile`` and ``_hold_unknown`` (two threads) takes an address
   learnt inside the window before it is quarantined;
4. an ENI held while its tags are unknown gets new addresses that ``_hold_unknown`` skips;
   free once the ENI is managed again, inside the window;
5. liveness: answers slower than ``retry_s`` supersede every hand-back; with no room to
   assign new addresses the offered one never returns and the pod waits for ever;
6. liveness: a read from before a grant, at the timeout, drops the granted address as
   released; nothing ever gives it back (EC2 keeps it on the node).
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from node_agent.checkpoint import MemoryCheckpoint
from node_agent.controller import AttachedEni, PoolController
from node_agent.datastore import Datastore
from tests.helpers.agent_findings import POOL, X, handbacks_with_latency, holders, listed, lost, released_x, try_pods
from tests.helpers.controller import ID, PRIMARY, SECOND, TIMING, FakeImds, never_free, one, result
from warmpool import names
from warmpool.calls import AssignAddresses, Reclaim, UnassignAddresses
from warmpool.facts import EniFacts, NodeFacts
from warmpool.limits import known
from warmpool.planner import Eni, plan_node
from warmpool.release_book import ReleaseBook
from warmpool.subnets import Subnet

Y = "10.0.0.13"


def open_finding(reason: str) -> pytest.MarkDecorator:
    """An open finding: a strict xfail, failing on an assertion only."""
    return pytest.mark.xfail(strict=True, raises=AssertionError, reason=reason)


# --- 1. the rebuild window is a lag bound ------------------------------------------------


def test_a_regressed_read_after_the_rebuild_window_brings_a_released_address_back_free() -> None:
    # EC2 unassigned X (released applied), IMDS caught up. The checkpoint (and with it the
    # released filter) is lost 20 s later. The window after the loss lasts one release timeout;
    # a regressed read after it (imds-regress serves states up to 5 min old; the sim draws a
    # loss and a regress together in tests/sim/test_checkpoint_loss_regress.py) lists X from
    # before the unassign. Not in the window, X was added free and a pod got an address EC2
    # may have given to another node. Now held as offered, of unknown origin, at any time.
    imds = FakeImds()
    t0 = 1000.0
    released_x(MemoryCheckpoint(), imds, t0)
    listed(imds, "10.0.0.11")
    ds, ctl = lost(imds, t0 + 80)
    t = t0 + 80 + TIMING.release_timeout_s + 5
    ctl.tick(t)
    listed(imds, "10.0.0.11", X)  # a regressed read: from before the unassign
    ctl.resync(t + 1)
    try_pods(ds, t + 2)
    assert X not in holders(ds), "a pod holds an address EC2 unassigned before the checkpoint loss"


# --- 2. a settled book entry, a stale Describe, a hand-back --------------------------------


def _facts(ips: list[str]) -> NodeFacts:
    eni = Eni(PRIMARY.eni_id, 0, 0, "subnet-a", PRIMARY.primary_ip, tuple(ips))
    tags = {names.TAG_CLUSTER_NAME: "demo", names.TAG_MANAGED: "true"}
    ef = EniFacts(eni, ID.instance_id, "att-0", PRIMARY.mac, True, "in-use", tags, attachment_status="attached")
    return NodeFacts(ID.instance_id, "m5.large", "us-east-1a", "running", "vpc-1", {}, (ef,))


def test_a_settled_release_is_handed_back_after_a_checkpoint_loss_under_a_stale_describe() -> None:
    imds = FakeImds()
    t0 = 1000.0
    _, ctl0 = released_x(MemoryCheckpoint(), imds, t0)
    s0 = ctl0.last_seq
    book = ReleaseBook().take(PRIMARY.eni_id, [X], s0)  # booked before its Unassign
    listed(imds, "10.0.0.11")
    ctl0.resync(t0 + 70)
    r1 = one(ctl0.tick(t0 + 200))  # heartbeat: names the ENI, not X
    book = book.settle(r1, (), {PRIMARY.eni_id})
    assert not book.taken, "settled: the agent dropped X"
    # The checkpoint is lost; IMDS regresses (lists X from before the unassign) inside the window.
    listed(imds, "10.0.0.11", X)
    ds, ctl = lost(imds, t0 + 230)
    assert ds.eni_of(X) is not None  # held as offered (the window), fine so far
    assert ds.assign("p1", "eth0", "ns", t0 + 231) is None  # pod waits: every address held
    r2 = one(ctl.tick(t0 + 232))
    assert r2.pending_demand == 1 and X in r2.release[0].ips
    # The allocator: the book no longer names X; Describe answers from before the unassign.
    facts = book.correct(_facts(["10.0.0.11", X]))
    assert book.repeats(r2, shown={PRIMARY.eni_id: ["10.0.0.11", X]}) == ()
    subnets = (Subnet("subnet-a", "us-east-1a", "10.0.0.0/24", 0),)
    # Before: planned a hand-back (Reclaim) of X on Describe's word, and the pod got X. The offer
    # is of unknown origin now: never handed back; X is unassigned (EC2 answers "not assigned",
    # said released) and the pod's need met with a fresh address.
    assert r2.release[0].unknown
    plan = plan_node(r2, facts.inventory("demo"), known("m5.large"), subnets, cluster="demo")
    assert not [ip for c in plan.calls if isinstance(c, Reclaim) for ip in c.ips if ip == X], plan
    drop = [c for c in plan.calls if isinstance(c, UnassignAddresses)]
    assert drop and X in drop[0].ips, plan
    assert any(isinstance(c, AssignAddresses) for c in plan.calls), plan
    # and a hand-back of it, whatever planned it, is refused by the agent
    ctl.apply_result(result(r2.seq, {"kind": "assigned", "eni_id": PRIMARY.eni_id, "ips": [X]}), t0 + 233)
    try_pods(ds, t0 + 234, tag="q")
    assert X not in holders(ds), "a hand-back gave a pod an address EC2 unassigned (book settled, Describe stale)"
    ctl.apply_result(result(r2.seq, {"kind": "released", "eni_id": PRIMARY.eni_id, "ips": [X]}), t0 + 235)
    assert ds.eni_of(X) is None


# --- 3. a CNI ADD between reconcile and _hold_unknown ---------------------------------------


class AddBetween(Datastore):
    """A CNI ADD on another thread (the socket server's) started right after ``reconcile``
    returns: it runs as soon as the datastore's lock is free."""

    armed = False
    racer: threading.Thread | None = None

    def reconcile(self, *a: Any, **kw: Any) -> list[str]:
        notes = super().reconcile(*a, **kw)
        if self.armed:
            self.racer = threading.Thread(target=self.assign, args=("racer", "eth0", "ns", a[1]))
            self.racer.start()
            self.racer.join(0.5)  # let it run now if the lock is free
        return notes


def test_a_cni_add_between_reconcile_and_hold_unknown_takes_an_address_of_the_window() -> None:
    imds = FakeImds()
    listed(imds, "10.0.0.11")  # IMDS lags: X (offered by the lost process, maybe unassigned) not yet
    ds, ctl = lost(imds, 1000.0, AddBetween)
    assert isinstance(ds, AddBetween)
    ds.armed = True
    listed(imds, "10.0.0.11", X)
    ctl.resync(1010.0)  # 10 s into the window: X must be held as offered
    assert ds.racer is not None
    ds.racer.join()
    assert X not in holders(ds), "a pod took an address learnt inside the window before it was quarantined"


# --- 4. _hold_unknown skips held ENIs -------------------------------------------------------


class TagImds(FakeImds):
    managed: bool | None = True

    def interfaces(self) -> list[AttachedEni]:
        return [a if a.info.eni_id != SECOND.eni_id else a._replace(managed=self.managed) for a in self.enis.values()]


def test_addresses_learnt_while_an_eni_is_held_for_unknown_tags_come_out_free_inside_the_window() -> None:
    imds = TagImds()
    imds.add(SECOND, ["10.0.0.21"])
    ds, ctl = lost(imds, 1000.0)
    assert ds.eni(SECOND.eni_id) is not None
    imds.managed = None  # the tag look-up fails: the ENI is kept, held
    imds.add(SECOND, [Y])  # a lagging IMDS shows Y now (the lost process may have offered it)
    ctl.resync(1010.0)
    imds.managed = True
    ctl.resync(1020.0)  # 20 s into the window
    try_pods(ds, 1021.0)
    assert Y not in holders(ds), "an address learnt inside the window handed out unquarantined"


# --- 5. hand-backs superseded for ever ------------------------------------------------------
# (handbacks_with_latency: tests/helpers/agent_findings.py)


@open_finding(
    "open: answers slower than retries supersede every hand-back (a wait for the answer was tried and removed)"
)
def test_answers_slower_than_retry_never_give_an_offered_address_back() -> None:
    # X offered; then a pod needs it and the subnet has no room (the allocator can only hand
    # back). Every answer arrives 6 s after its report; the agent reported every retry_s (5 s)
    # while the offer stood, so each hand-back replied to a report older than the newest that
    # offered X: superseded. At the timeout the offer is renewed (never taken back), and so on.
    ds, ctl, t = handbacks_with_latency(6.0)
    assert ds.lookup("p2", "eth0") is not None, (
        f"X still offered after {t - 62:.0f} s: renewed {ctl.stats.offers_renewed}, "
        f"hand-backs superseded {ctl.stats.handbacks_superseded}"
    )


# --- 6. a read from before a grant drops it for good ----------------------------------------


def test_a_read_from_before_a_grant_at_the_timeout_leaks_the_granted_address() -> None:
    # Y is granted (its ``given`` entry settles once a report names it in the pool), later
    # surplus: quarantined, offered, every answer lost. At the timeout a regressed read answers
    # from after X's grant and before Y's: it lists the pod's .11 and X, so ``_read_predates_pods``
    # sees nothing amiss, and Y is dropped as released (filtered until a grant names it again).
    # EC2 still has Y on the node; no answer names it again: out of use for good, and the
    # allocator counts it as the node's free address.
    imds = FakeImds()
    listed(imds, "10.0.0.11")
    ds = Datastore(cooldown_s=0.0, pending_ttl_s=TIMING.pending_ttl_s, checkpoint=MemoryCheckpoint())
    ctl = PoolController(ID, known("m5.large"), POOL, ds, TIMING, metadata=imds)
    ctl.start(0.0)
    ctl.tick(0.0)
    assert ds.assign("p1", "eth0", "ns", 1.0) is not None  # .11
    r = one(ctl.tick(2.0))  # short
    listed(imds, "10.0.0.11", X)
    ctl.apply_result(result(r.seq, {"kind": "assigned", "eni_id": PRIMARY.eni_id, "ips": [X]}), 3.0)
    assert ds.assign("p2", "eth0", "ns", 4.0) == (X, PRIMARY.eni_id)
    r = one(ctl.tick(10.0))  # short again
    listed(imds, "10.0.0.11", X, Y)
    ctl.apply_result(result(r.seq, {"kind": "assigned", "eni_id": PRIMARY.eni_id, "ips": [Y]}), 11.0)
    ds.release("p2", "eth0", 20.0)  # surplus of one
    t = 21.0
    while not ds.quarantined() and t < 400:
        ctl.tick(t)
        t += 1
    assert ds.quarantined()[PRIMARY.eni_id][0] == [Y]
    listed(imds, "10.0.0.11", X)  # regressed: from between the two grants
    ctl.tick(t + TIMING.release_timeout_s + 1)
    listed(imds, "10.0.0.11", X, Y)  # right again, for good
    for k in range(20):
        ctl.resync(t + 200 + 60 * k)
        ctl.tick(t + 200 + 60 * k)
    assert ctl.stats.released_without_result == 1  # dropped at the timeout, on the regressed read
    # Listed again: held as offered, of unknown origin (the allocator unassigns it, or says it
    # released again), no longer left out for good.
    assert ds.eni_of(Y) is not None, "Y (EC2 still has it) dropped as released: out of use for good"
    assert never_free(ds, ctl, Y)
