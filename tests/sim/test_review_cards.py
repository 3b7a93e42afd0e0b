"""The review of the multi-card change (tests/unit/test_review_cards.py) in the simulation:
its F4 (an EFA-only interface failed every IMDS read of the agent) was in a world the
simulation never drew. Now ``instance-type`` launches a multi-card instance half the time with
an EFA-only interface at device 0 of every card above 0 (``InstanceType.efa``, from a generator
of its own), the emulated IMDS serves no ``local-ipv4s`` for it, the simulation reads IMDS with
the production parser (``node_agent.imds.parse_interfaces``), and a torn read can show a real
ENI the same way (``imds-torn:no-ipv4``)."""

from __future__ import annotations

from typing import Any

import pytest

import simulation.node
from node_agent.imds import ImdsError, parse_interfaces
from simulation import node, runner
from simulation.kinds import InstanceType
from simulation.runner import plan_for, run_seed
from simulation.schedule import BURST_KINDS, LAUNCH_KINDS, SUBNET_KINDS, draw
from warmpool.limits import KNOWN_TYPES

pytestmark = pytest.mark.sim


EFA_SEEDS = (4, 32, 58, 75, 94, 121, 141, 147, 228, 273)
"""Seeds 0-299 whose ``instance-type`` launches an instance with EFA-only interfaces. With
``parse_interfaces`` as before the fix (``local-ipv4s`` required of every MAC) each ends with
that node's agent down: every start's IMDS read failed (``agent-down``, last crash ``start:
ImdsError``). Shrunk: ``warmpool sim --seed 121 --keep 2`` (n2 replaced by an hpc7a.24xlarge
with an EFA-only interface on card 1)."""


def _parse_as_before(tree: dict[str, Any]) -> Any:
    """``parse_interfaces`` before the fix: a MAC without ``local-ipv4s`` fails the whole read."""
    for mac, leaves in tree["network"]["interfaces"]["macs"].items():
        if "local-ipv4s" not in leaves:
            raise ImdsError(f"IMDS network/interfaces/macs/{mac}/local-ipv4s: not found")
    return parse_interfaces(tree)


def test_efa_only_interfaces_are_drawn_from_a_generator_of_their_own() -> None:
    plans = [draw(s) for s in range(300)]
    drawn = tuple(p.seed for p in plans if any(isinstance(e, InstanceType) and e.efa for e in p.events))
    assert drawn == EFA_SEEDS
    for p in plans:  # only multi-card types launch with them
        for e in p.events:
            if isinstance(e, InstanceType) and e.efa:
                assert KNOWN_TYPES[e.itype].network_cards > 1


@pytest.mark.parametrize("seed", (4, 58, 121, 228))
def test_a_node_with_efa_only_interfaces_reads_its_enis_and_is_served(seed: int) -> None:
    r = runner.run_many([seed], jobs=1, shrink=False)[0]
    assert not r.violations, r.violations
    assert r.faults.get("instance-type:efa-only", 0) >= 1, r.faults


def test_pods_on_a_node_with_an_efa_only_interface_get_addresses() -> None:
    r = run_seed(121, keep=[2, 10, 11], shrink=False)
    assert not r.violations, r.violations
    assert r.faults.get("instance-type:efa-only") == 1


def test_the_simulation_finds_the_efa_only_read_failure_with_the_fix_reverted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(node, "parse_interfaces", _parse_as_before)
    r = run_seed(121, keep=[2], shrink=False)
    assert [v["invariant"] for v in r.violations] == ["agent-down"]
    assert "start: ImdsError" in r.violations[0]["detail"]


def test_the_plan_without_the_event_is_the_plan_it_was() -> None:
    """The seed's schedule with ``instance-type`` left out is exactly its schedule before
    ``efa`` existed (the flag adds no draw to any other generator)."""
    p = draw(121)
    without = plan_for(121, without=frozenset({"instance-type"}))
    assert [e for e in p.events if e.kind != "instance-type"] == list(without.events)


# --- F1: one attachment ADDed again between two GCs -------------------------------------------

READD_SEEDS = (13, 23, 27, 32, 35, 37, 40, 67)
ONE_SUBNET = frozenset(SUBNET_KINDS)
"""The seeds above run in the world they were found in: issue 24's subnet worlds, drawn later and
listed after every other event, left out (seed 13's draws one, in which its re-ADD finds no
attachment old enough)."""
"""Seeds 0-99 whose ``cni-readd`` re-ADDs an attachment old enough for a GC to take (made 60 s+
before) and runs a GC whose list lacks it: with the GC's date of an attachment as before the fix
(its first ADD in the process: ``setdefault``), each GC tore the running pod's wiring down and
freed its address (``cni-gc-freed-running``). Shrunk: ``warmpool sim --seed 35 --keep 3,21`` (3 pods
on n0 at 99.3 s; at 100.9 s the runtime waits for one to be 60 s old, DELs it, ADDs it again and
runs the GC)."""


def _add_dated_from_the_first(monkeypatch: pytest.MonkeyPatch) -> None:
    """``CniService._add`` before the fix (42ff263): an attachment already dated keeps its first
    ADD's date (``self._made.setdefault``), so a re-ADD between two GCs looks old."""
    from node_agent.cniserver import CniService

    real = CniService._add

    def before(
        self: CniService, cid: str, ifname: str, netns: str, conf: dict[str, Any], pod: str = ""
    ) -> dict[str, Any]:
        with self._made_lock:
            first = self._made.get((cid, ifname))
        try:
            return real(self, cid, ifname, netns, conf, pod)
        finally:
            if first is not None:
                with self._made_lock:
                    if (cid, ifname) in self._made:
                        self._made[(cid, ifname)] = first

    monkeypatch.setattr(CniService, "_add", before)


def test_an_attachment_added_again_between_two_gcs_keeps_its_address() -> None:
    results = runner.run_many(READD_SEEDS, jobs=1, shrink=False, without=ONE_SUBNET)
    assert not [v for r in results for v in r.violations]
    assert all(r.faults.get("cni-readd") == 1 for r in results), [r.faults.get("cni-readd") for r in results]


def test_the_simulation_finds_the_gc_of_a_readded_attachment_with_the_fix_reverted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(simulation.node, "FORCE_CONTAINERD", False)  # drawn before stop 49: GC-sending runtimes
    _add_dated_from_the_first(monkeypatch)
    r = run_seed(35, keep=[3, 21], shrink=False, without=ONE_SUBNET)
    assert [v["invariant"] for v in r.violations] == ["cni-gc-freed-running"]
    hits = [s for s in READD_SEEDS if run_seed(s, shrink=False, without=ONE_SUBNET).violations]
    assert hits == list(READD_SEEDS)


def test_readd_is_drawn_from_a_generator_of_its_own_and_listed_last() -> None:
    """Every other event of a seed is what it was, at the index it had: the ``--keep`` of each
    shrunk replay the tests and docs name still keeps the same events."""
    for s in range(60):
        p = draw(s)
        without = plan_for(
            s,
            without=frozenset({"cni-readd", "stale-churn", "host-wiring", "add-cut", *BURST_KINDS, *LAUNCH_KINDS})
            | ONE_SUBNET,
        )
        n = len(without.events)
        assert list(p.events[:n]) == list(without.events)
        # then the re-ADDs, then issue 24's subnet worlds and issue 25's bursts (listed after them),
        # then issue 25's launch pools, then describe-stale's churn, then issue 21's host wiring
        # (simulation.schedule.HOST_KINDS), then the agent killed mid-ADD (listed last:
        # simulation.schedule.CUT_KINDS)
        kinds = [e.kind for e in p.events[n:]]
        while kinds and kinds[-1] == "add-cut":
            kinds.pop()
        while kinds and kinds[-1] == "host-wiring":
            kinds.pop()
        if kinds and kinds[-1] == "stale-churn":
            kinds.pop()
        readds = kinds.count("cni-readd")
        assert kinds[:readds] == ["cni-readd"] * readds
        launch = kinds.count("launch-pool")
        assert launch == 0 or kinds[-launch:] == ["launch-pool"] * launch
        assert all(k in SUBNET_KINDS or k in BURST_KINDS for k in kinds[readds : len(kinds) - launch])
    assert 5 <= sum(any(e.kind == "cni-readd" for e in draw(s).events) for s in range(100)) <= 30


def test_a_readd_whose_del_the_agent_dies_in_leaves_no_pod_holding_the_torn_down_address() -> None:
    """Seed 1760 (the final sweep): the agent was killed in the re-ADD's DEL, after its teardown
    and before the checkpoint write; the restarted agent found the pod unwired and freed its
    address (docs/safety.md, review 7 F1's rule), and the next pod got it. The runtime had torn the
    sandbox's network down with the DEL, so no pod held it; the simulation's re-ADD kept the pod
    as running (``two-holders``, a false one). Now, as the runtime's other deletes, the pod holds
    nothing from the DEL on, and a DEL not answered is retried, then the ADD."""
    r = run_seed(1760, keep=[5, 12, 18, 20], shrink=False)
    assert r.violations == []
    assert r.faults.get("cni-readd:del-failed") == 1
