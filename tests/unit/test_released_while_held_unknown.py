"""Seed 1509 (``warmpool sim --seed 1509 --keep 0,3,23,25``): a false ``released-not-offered``, the
simulation's check, not the agent.

n3 offered 10.0.0.22 and .23; its agent was killed in an ADD (``add-cut``) a second before the
allocator's Unassign of them. The restart held every free address for the cut pod's veth, the
offered ones too (review 15, Q1: ``hold_all``), by ``?``: no longer on offer, never handed out. EC2
then took them, and the check, which asked only whether the running agent still had them
quarantined, called them taken back into the pool. They were not: the hold's end offers its
addresses as of unknown origin and a read that no longer lists them drops them. The check now notes
such an address and calls it ``released-not-offered`` only if the agent ever has it free."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from node_agent.datastore import Datastore
from node_agent.records import EniInfo
from simulation.checks import held_releases
from simulation.world import SimWorld

ENI = "eni-1"
IP = "10.0.0.22"


class Violation(Exception):
    pass


def _world(ds: Datastore) -> Any:
    agent = SimpleNamespace(name="n3", gone=False, alive=True, ds=ds, rt=SimpleNamespace(up={}), released_held=set())
    faults: list[str] = []

    def violation(invariant: str, detail: str) -> None:
        raise Violation(f"{invariant}: {detail}")

    return SimpleNamespace(agents={"n3": agent}, violation=violation, fault=faults.append, faults=faults)


def _held_ds() -> Datastore:
    ds = Datastore()
    ds.add_eni(EniInfo(ENI, 1, "0e:00:00:00:00:01", "10.0.0.10", "subnet-1", "10.0.0.0/24"), 0.0)
    ds.add_addresses(ENI, [IP])
    assert ds.hold_all(1.0) == 1
    return ds


def _unassign(w: Any) -> None:
    SimWorld.check_release(w, "n3", {"NetworkInterfaceId": ENI, "PrivateIpAddresses": [IP]})


def test_an_address_unassigned_while_held_by_a_start_s_hold_is_no_finding() -> None:
    """Failed before: the check said ``released-not-offered`` at the Unassign."""
    w = _world(_held_ds())
    _unassign(w)
    assert w.faults == ["released-while-held-unknown"]
    assert w.agents["n3"].released_held == {IP}
    held_releases(w, list(w.agents.values()))  # still held: fine


def test_such_an_address_free_later_is_the_finding() -> None:
    ds = _held_ds()
    w = _world(ds)
    _unassign(w)
    ds.release_recovered("?", 2.0)  # let go as ordinary (cooldown, then the pool): what the check is for
    with pytest.raises(Violation, match="released-not-offered"):
        held_releases(w, [w.agents["n3"]])
