"""The restore check's shared pieces (docs/safety.md, row 12; docs/allocator.md, "Restored
checkpoints"). The agent's side (tests/unit/test_restore_check.py, its reviews, the checksum
and settle tests; the node itself is :class:`tests.helpers.first_start.Node`): a checkpoint file
as the agent writes it, and the allocator's answer to a restored report. The allocator's side
(tests/integration/test_allocate_restore_check.py and its reviews): n1 with six secondaries on its
primary ENI, three in use, the restored reports it sends, and what the allocator answered."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from node_agent.checkpoint import FileCheckpoint
from node_agent.datastore import Datastore
from tests.helpers.allocate_world import AllocatorWorld
from tests.helpers.controller import PRIMARY
from tests.helpers.first_start import IPS, booted_world
from warmpool.messages import Action, AllocationResult, PoolReport, RestoreChecked

# --- the agent's side ---------------------------------------------------------------------------


def written(path: Path) -> dict[tuple[str, str], str]:
    """A checkpoint file as the agent writes it: three pods on PRIMARY; returns pod -> address."""
    ds = Datastore(checkpoint=FileCheckpoint(str(path)))
    ds.add_eni(PRIMARY, 1.0)
    ds.add_addresses(PRIMARY.eni_id, IPS)
    pods = {}
    for cid in ("c1", "c2", "c3"):
        a = ds.assign(cid, "eth0", f"/var/run/netns/{cid}", 2.0)
        assert a is not None
        pods[(cid, "eth0")] = a.ip
    ds.set_meta("last_seq", 9)
    return pods


def restore_answer(report: PoolReport, restored_from: int, current: bool) -> AllocationResult:
    """The allocator's ``restore-checked`` answer to ``report``: ``restored_from`` is or is not
    ``current`` (epoch 1)."""
    return AllocationResult(
        cluster=report.cluster,
        node=report.node,
        instance_id=report.instance_id,
        in_reply_to=report.seq,
        actions=[RestoreChecked(restored_from=restored_from, wait=report.restore_wait, current=current, epoch=1)],
    )


# --- the allocator's side -----------------------------------------------------------------------

WAIT = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
"""The restore_wait id the restored reports carry."""


def restore_world() -> tuple[AllocatorWorld, str, list[str]]:
    """n1 with six secondaries on its primary ENI (three in use)."""
    w, eni, ips = booted_world()
    w.pods["n1"] = 3
    return w, eni, ips


def unassigned(w: AllocatorWorld) -> int:
    return int(w.ec2_stats().get("UnassignPrivateIpAddresses", {}).get("calls", 0))


def actions_of(w: AllocatorWorld) -> list[Action]:
    return [a for r in w.results("n1") for a in r.actions]


def verdicts(actions: list[Action]) -> list[RestoreChecked]:
    return [a for a in actions if isinstance(a, RestoreChecked)]


def restored(w: AllocatorWorld, restored_from: int, extra: dict[str, Any] | None = None, **kw: Any) -> Any:
    """n1's report of a checkpoint restored from ``restored_from``, waiting with :data:`WAIT`."""
    return w.report("n1", extra={"restored_from": restored_from, "restore_wait": WAIT, **(extra or {})}, **kw)
