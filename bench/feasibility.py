"""Scenarios no strategy can finish, found before the run.

A node's kubelet runs at most ``--max-pods`` pods (:func:`warmpool.limits.pod_ceiling`:
the VPC CNI's formula for its type, prefix mode and ``MAX_ENI``); the agent and the
allocator stop there too. A scenario whose workload keeps more pods alive on one node
than that asks for pods that can never get an address: every strategy would "not
finish" and the comparison would say nothing. ``warmpool bench`` refuses it (exit 2).
"""

from __future__ import annotations

from dataclasses import dataclass

from bench.workload import Expanded
from warmpool.limits import KNOWN_TYPES, pod_ceiling


@dataclass(frozen=True)
class OverCeiling:
    """One node group whose nodes are asked for more live pods than the kubelet allows."""

    group: str
    instance_type: str
    peak_pods: int
    ceiling: int
    at_s: float
    """Virtual time its worst node first reaches that peak."""

    def describe(self) -> str:
        return (
            f"node_groups {self.group!r}: {self.peak_pods} pods alive on one {self.instance_type} node "
            f"at {self.at_s:g} s, but its max-pods is {self.ceiling} (warmpool max-pods); "
            "those pods could never get an address"
        )


def over_ceiling(expanded: Expanded) -> list[OverCeiling]:
    """Every node group (once, at its worst node) asked for more live pods than its max-pods.

    Live pods are counted over the expanded events in their order (a pod created and one
    deleted at the same instant count the creation first: the deleted pod's slot is not
    free before it is gone, as for the kubelet)."""
    nodes = {n.name: n for n in expanded.nodes}
    live: dict[str, int] = dict.fromkeys(nodes, 0)
    worst: dict[str, OverCeiling] = {}
    ceilings: dict[str, int] = {}
    for ev in expanded.events:
        live[ev.node] += 1 if ev.kind == "add" else -1
        node = nodes[ev.node]
        if node.name not in ceilings:
            env = node.env
            ceilings[node.name] = pod_ceiling(
                KNOWN_TYPES[node.instance_type], prefix=env.ENABLE_PREFIX_DELEGATION, max_eni=env.MAX_ENI or None
            )
        ceiling = ceilings[node.name]
        if ceiling and live[ev.node] > ceiling:
            seen = worst.get(node.group)
            if seen is None or live[ev.node] > seen.peak_pods:
                worst[node.group] = OverCeiling(node.group, node.instance_type, live[ev.node], ceiling, ev.at)
    return list(worst.values())
