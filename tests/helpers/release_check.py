"""A one-agent stand-in for :class:`simulation.world.SimWorld` enough for its release check
(``SimWorld.check_release``) and ``simulation.checks.withheld_releases``: the agent ``n0`` runs
on ``ds``, a violation raises :class:`Violation`, each fault drawn is kept in ``faults``."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from node_agent.datastore import Datastore
from simulation.world import SimWorld

ENI = "eni-1"


class Violation(Exception):
    pass


def check_world(ds: Datastore) -> Any:
    agent = SimpleNamespace(
        name="n0",
        gone=False,
        alive=True,
        ds=ds,
        rt=SimpleNamespace(up={}),
        pods=SimpleNamespace(wired={}),
        released_withheld=set(),
    )
    faults: list[str] = []

    def violation(invariant: str, detail: str) -> None:
        raise Violation(f"{invariant}: {detail}")

    return SimpleNamespace(agents={"n0": agent}, violation=violation, fault=faults.append, faults=faults)


def unassign(w: Any, ip: str) -> None:
    """The allocator is about to unassign ``ip`` from :data:`ENI` on ``n0``."""
    SimWorld.check_release(w, "n0", {"NetworkInterfaceId": ENI, "PrivateIpAddresses": [ip]})
