"""Review 12, W1b: the eleventh review's W1 fix (``node_agent/agent.py::wiring_disagreements``) flags
an address routed to a link of another veth prefix and held by nobody only when it lies in a subnet
of *the restored copy's* ENIs. An older copy (review 10/11's backup) that predates the attach of an
ENI in another subnet (custom networking: every pod subnet differs from the node's; or a second
subnet after the first ran short) does not have that subnet at all: a running pod's address there,
wired to a veth of the old prefix, passes the check, the copy is restored, IMDS lists the address,
the start learns it free, and the lost-checkpoint way offers it as of unknown origin (or a pod here
is given it). Review 11's own W1 sequence, with the pod's address on the newer ENI."""

from __future__ import annotations

import shutil
from pathlib import Path

from node_agent.records import EniInfo
from tests.helpers.agent_world import give
from tests.helpers.first_start import Node, PrefixedWiring, pod_then_older_copy
from warmpool.messages import AllocationResult, Attached

OTHER = EniInfo("eni-00000002", 1, "0a:00:00:00:00:02", "10.0.1.20", "subnet-b", "10.0.1.0/24")


def _offered(report) -> set[str]:  # type: ignore[no-untyped-def]
    return {ip for o in report.release for ip in o.ips}


def test_an_older_copy_lacking_the_subnet_of_a_running_pods_address_of_another_veth_prefix_is_not_restored(
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
        shutil.copytree(n.state, backup)  # the older copy: no ENI in 10.0.1.0/24 yet
        x = "10.0.1.50"
        n.imds.add(OTHER, [x])
        give(
            agent,
            AllocationResult(
                cluster=first.cluster,
                node=first.node,
                instance_id=first.instance_id,
                in_reply_to=agent.controller.last_seq,
                actions=[
                    Attached(
                        eni_id=OTHER.eni_id,
                        device_index=1,
                        mac=OTHER.mac,
                        subnet_id=OTHER.subnet_id,
                        subnet_cidr=OTHER.subnet_cidr,
                        primary_ip=OTHER.primary_ip,
                        ips=[x],
                    )
                ],
            ),
        )
        got, offered, others = pod_then_older_copy(n, agent, wiring, backup)
        assert got == x, f"setup: the pod got {got}"
        assert x not in offered and x not in others, (
            f"{x}, routed on the host to a running pod's veth (another prefix), "
            f"{'offered back as of unknown origin' if x in offered else 'given to another pod'} "
            "after an older copy lacking its ENI's subnet passed the wiring check"
        )
    finally:
        n.stop()
