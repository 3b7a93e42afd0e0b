"""Review 11, W1: the start's wiring check (``node_agent/agent.py::wiring_disagreements``) flags an
address routed to a link of *another* veth prefix only when the restored checkpoint has it in its
pool (``if ip in pool and ...``), while for this prefix's veths any wired address the checkpoint
does not hold is flagged. An older copy of the checkpoint (a backup restored; review 10's own
case) that predates the grant of the running pod's address has that address nowhere: the check
passes, the copy is restored, and ``PoolController._restore_stale`` rests on "the wiring check at
the start proved each running pod is in it". IMDS lists the address, the start learns it free,
and the lost-checkpoint way (the allocator's answer "not current", or none within
``RESTORE_WAIT_S``) offers it as of unknown origin: the allocator unassigns such offers and EC2
gives the address to another node while the pod runs. Were the allocator to say "current"
instead, the address would go to the next pod on this node.

The rebuild (``_routed_pods``) would hold it (``Datastore.recover`` keeps addresses not attached
yet); the restore path does not reach it."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.helpers.agent_world import give
from tests.helpers.controller import PRIMARY
from tests.helpers.first_start import Node, PrefixedWiring, pod_then_older_copy
from warmpool.messages import AllocationResult, Assigned


def _offered(report) -> set[str]:  # type: ignore[no-untyped-def]
    return {ip for o in report.release for ip in o.ips}


def test_an_older_copy_lacking_a_running_pods_address_of_another_veth_prefix_is_not_restored(
    tmp_path: Path,
) -> None:
    n = Node(tmp_path, adopt_launch_pool=False)
    wiring = PrefixedWiring()
    n.pods = wiring
    backup = tmp_path / "backup"
    try:
        agent = n.start()
        first = n.step()
        assert first is not None
        for _ in range(3):
            n.step(30)
        shutil.copytree(n.state, backup)  # the older copy: 10.0.0.50 is not the node's yet
        x = "10.0.0.50"
        n.imds.add(PRIMARY, [x])
        give(
            agent,
            AllocationResult(
                cluster=first.cluster,
                node=first.node,
                instance_id=first.instance_id,
                in_reply_to=agent.controller.last_seq,
                actions=[Assigned(eni_id=PRIMARY.eni_id, ips=[x])],
            ),
        )
        got, offered, others = pod_then_older_copy(n, agent, wiring, backup)
        assert got == x, f"setup: the pod got {got}"
        assert x not in offered and x not in others, (
            f"{x}, routed on the host to a running pod's veth (another prefix), "
            f"{'offered back as of unknown origin' if x in offered else 'given to another pod'} "
            "after an older copy lacking it passed the wiring check"
        )
    finally:
        n.stop()
