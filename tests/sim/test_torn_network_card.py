"""docs/safety.md row 29, which AWS does not document: IMDS lists
``network/interfaces/macs/<mac>/network-card`` for every interface of an instance, or for none.

The fix (the final review, F3; ``tests/unit/test_review_final_torn_network_card.py``): a tree
listing the leaf for some interfaces only is a torn read, and ``parse_interfaces`` raises
``ImdsError`` (the read is not acted on). Before it, a missing leaf read as card 0, so another
tool's interface on a card above 0, never the pool's without ``WARMPOOL_MULTI_CARD``, could be.

The simulation draws both halves: ``instance-type`` launches three multi-card instances in four
with another tool's ordinary ENI (untagged, with addresses) at the first free device of card 1
(``InstanceType.foreign``, from a generator of its own), and for ``no_card_s`` from then every IMDS
read of that node misses the ``network-card`` leaf of some of its interfaces, never of all
(``LaggedImds._carded``: the leaf dropped from the raw tree, which the production parser then
reads); ``imds-torn`` does so in half the reads of half its windows (``ImdsTorn.no_card``). The
checks count that tool's ENI in an agent's datastore (``foreign-taken``: one step from a pod
holding its address) and a pod holding one of its addresses (``two-holders``)."""

from __future__ import annotations

import functools
from typing import Any

import pytest

from node_agent.imds import ImdsError, parse_interfaces
from simulation import checks, events, node, runner
from simulation.base import ANOTHER_TOOL, ESM_EVERY_S, T0, Stop
from simulation.kinds import ImdsTorn, InstanceType
from simulation.runner import plan_for, run_seed
from simulation.schedule import draw
from simulation.world import SimWorld
from warmpool.limits import KNOWN_TYPES

pytestmark = pytest.mark.sim

FOREIGN_SEEDS = (1, 4, 24, 32, 57, 58, 75, 141, 201, 228, 233, 252, 261, 273)
"""Seeds 0-299 whose ``instance-type`` world has another tool's ENI on card 1 (in 233 ``ec2-ambiguous``
answers one of that tool's calls ``InternalError``: ``instance-type:foreign-refused:InternalError``,
no torn window)."""

REVERTED_SEEDS = (24, 261, 273)
"""The seeds of :data:`FOREIGN_SEEDS` that fail with the fix reverted (``_parse_as_before``): in
each, a read missing the leaf of the other tool's ENI (device 0 of card 1, read as the primary's
slot in 24 and 261; device 1, beside an EFA-only interface at device 0, in 273) put it in the
node's datastore (``foreign-taken``). In the others no read that lost that leaf was a resync's (the
one read the datastore is reconciled from), or the same read lost an EFA-only interface's leaf
too (read as card 0 device 0 with no address: a primary without addresses, ``IncompleteRead``,
refused all the same), or the node runs with custom networking (252: the primary's slot is not
the pool's). Seeds 300-399 add 303, 330 and 360. No pod got one of the other tool's addresses in
any of them: a misread lasts until the next resync, and the datastore hands out the primary's
free addresses first."""


def _parse_as_before(tree: dict[str, Any]) -> Any:
    """``parse_interfaces`` before the fix: a missing ``network-card`` leaf reads as card 0."""
    macs = tree["network"]["interfaces"]["macs"]
    whole = {mac: {"network-card": "0", **leaves} for mac, leaves in macs.items()}
    return parse_interfaces({"network": {"interfaces": {"macs": whole}}})


def test_another_tools_eni_and_the_missing_leaves_are_drawn_from_generators_of_their_own() -> None:
    plans = [draw(s) for s in range(300)]
    drawn = tuple(p.seed for p in plans if any(isinstance(e, InstanceType) and e.foreign for e in p.events))
    assert drawn == FOREIGN_SEEDS
    for p in plans:
        for e in p.events:
            if isinstance(e, InstanceType) and e.foreign:  # only where a card 1 exists, torn for a while
                assert KNOWN_TYPES[e.itype].network_cards > 1 and 60 <= e.no_card_s <= 180
            if isinstance(e, InstanceType) and not e.foreign:
                assert e.no_card_s == 0.0
    torn = [e for p in plans for e in p.events if isinstance(e, ImdsTorn)]
    assert 0.3 < sum(e.no_card for e in torn) / len(torn) < 0.8  # about half of imds-torn's windows (45 of 64)
    # the flags add no draw to any other generator: without the two kinds, a seed is what it was
    for s in FOREIGN_SEEDS[:4]:
        without = plan_for(s, without=frozenset({"instance-type", "imds-torn"}))
        assert [e for e in draw(s).events if e.kind not in ("instance-type", "imds-torn")] == list(without.events)


def test_with_the_fix_another_tools_eni_is_never_taken(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every read missing a leaf reaches the production parser, which refuses it; the seeds pass."""
    refused: list[int] = []

    def spy(tree: dict[str, Any]) -> Any:
        macs = tree["network"]["interfaces"]["macs"]
        carded = [("network-card" in leaves) for leaves in macs.values()]
        try:
            return parse_interfaces(tree)
        except ImdsError:
            refused.append(sum(carded))
            raise

    monkeypatch.setattr(node, "parse_interfaces", spy)
    results = runner.run_many(REVERTED_SEEDS, jobs=1, shrink=False)
    assert [r.violations for r in results] == [[] for _ in REVERTED_SEEDS]
    for r in results:
        assert r.faults.get("instance-type:foreign") == 1 and r.faults.get("imds-torn:no-card", 0) >= 1, r.faults
    assert refused and all(n >= 1 for n in refused)  # some interfaces carded, never none


def test_the_simulation_finds_another_tools_eni_taken_with_the_fix_reverted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(node, "parse_interfaces", _parse_as_before)
    for seed in REVERTED_SEEDS:
        r = run_seed(seed, shrink=False)
        assert [v["invariant"] for v in r.violations] == ["foreign-taken"], (seed, r.violations)
        assert "another tool's" in r.violations[0]["detail"]


def test_a_pod_given_another_tools_address_is_two_holders() -> None:
    """The check a pod would meet: seed 24's n1, replaced at 21.1 s by a dl1.24xlarge with the
    other tool's ENI at device 0 of card 1, its addresses that tool's."""
    w = SimWorld(plan_for(24))
    for ev in w.plan.events:
        w.loop.call_at(T0 + ev.at, functools.partial(events.apply, w, ev))
    w.loop.every(ESM_EVERY_S, w.esm_tick, start=T0 + 0.5)
    w.loop.run_until(T0 + 60.0, stop=w._after)
    other = next(e for e in w.emu.enis.values() if e.description == ANOTHER_TOOL)
    assert other.attachment is not None and (other.attachment.card, other.attachment.device_index) == (1, 0)
    assert other.secondary
    a = w.agents["n1"]
    assert a.iid == other.attachment.instance_id
    assert other.id not in {e.info.eni_id for e in a.ds.enis()}
    a.rt.up["pod-x"] = other.secondary[0]
    w.version += 1
    with pytest.raises(Stop):
        checks.after_event(w)
    assert w.violations[-1][0] == "two-holders" and "another tool's" in w.violations[-1][1]
