"""A real pool controller for a node of an allocator test world (tests/helpers/allocate_world.py),
with an IMDS that lags EC2 (:class:`simulation.node.LaggedImds`): the agent's side of the
stale-Describe tests (issue 21, defect 3)."""

from __future__ import annotations

from node_agent.config import Timing
from node_agent.controller import PoolController
from node_agent.datastore import Datastore
from node_agent.records import NodeIdentity
from simulation.node import LaggedImds
from tests.helpers.allocate_world import AllocatorWorld
from warmpool.limits import known
from warmpool.pool import PoolConfig


class _Clocked:
    """What :class:`LaggedImds` reads of its world: the emulator and the time."""

    def __init__(self, w: AllocatorWorld) -> None:
        self.emu = w.emu
        self.now = w.clock.now


def lagging_imds(w: AllocatorWorld, node: str, lag_s: float) -> LaggedImds:
    """The node's IMDS, ``lag_s`` behind EC2 (from now on: it never shows an earlier state)."""
    imds = LaggedImds(_Clocked(w), w.nodes[node])  # type: ignore[arg-type]
    imds.lag = lag_s
    return imds


def world_agent(
    w: AllocatorWorld, node: str, imds: LaggedImds, timing: Timing, pool: PoolConfig
) -> tuple[Datastore, PoolController]:
    """The node's datastore and controller, signing its reports as the node."""
    iid = w.nodes[node]
    itype = w.emu.instances[iid].instance_type
    ds = Datastore(cooldown_s=timing.cooldown_s)
    ctl = PoolController(
        NodeIdentity(w.cluster, node, iid, itype, "us-east-1a"),
        known(itype),
        pool,
        ds,
        timing,
        metadata=imds,
        signed_identity=lambda: w.imds.identity(iid),
    )
    return ds, ctl
