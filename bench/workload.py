"""A scenario expanded into concrete, seeded events: when each node joins, when
each pod is created and deleted. Every strategy in one run replays the very
same events, and the lower bound reads them too.

Pods are named ``<node>/p<k>``. A pod created on a node that has not joined
yet is created when the node joins (the scheduler cannot place it earlier).
Which pods a ``delete_pods_per_node`` step removes is chosen here (seeded), so
that it does not depend on the strategy.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Literal

from bench.scenario import ClusterSpec, Env, NodeGroup, Scenario


@dataclass(frozen=True)
class WorkloadNode:
    name: str
    group: str
    cluster: str
    instance_type: str
    subnet: str
    """Scenario id of the subnet of its primary ENI."""
    az: str
    join_at: float
    env: Env
    launch_addresses: int = 0
    launch_prefixes: int = 0
    """The primary ENI's addresses (or /28 prefixes) at launch (``node_groups[].launch_pool``)."""

    @property
    def launch_units(self) -> int:
        """Units (addresses, or prefixes in prefix mode) the node boots with."""
        return self.launch_prefixes or self.launch_addresses


@dataclass(frozen=True, order=True)
class PodEvent:
    at: float
    order: int
    kind: Literal["add", "del"] = field(compare=False)
    node: str = field(compare=False)
    pod: str = field(compare=False)


@dataclass(frozen=True)
class Expanded:
    nodes: list[WorkloadNode]
    events: list[PodEvent]
    """Sorted by time (ties: creation order)."""

    def by_node(self) -> dict[str, list[PodEvent]]:
        out: dict[str, list[PodEvent]] = {n.name: [] for n in self.nodes}
        for ev in self.events:
            out[ev.node].append(ev)
        return out

    @property
    def pods_requested(self) -> int:
        return sum(1 for e in self.events if e.kind == "add")

    @property
    def last_add_at(self) -> float:
        return max((e.at for e in self.events if e.kind == "add"), default=0.0)

    @property
    def last_event_at(self) -> float:
        return max((e.at for e in self.events), default=0.0)


def node_name(cluster: ClusterSpec, group: NodeGroup, i: int) -> str:
    return f"{cluster.name}-{group.name}-{i:04d}"


def expand(scenario: Scenario) -> Expanded:
    rng = random.Random(scenario.seed)
    nodes: list[WorkloadNode] = []
    members: dict[str, list[WorkloadNode]] = {}
    for g in scenario.node_groups:
        cluster = scenario.cluster_of(g)
        subnet = scenario.subnet_of(g)
        offsets = sorted(rng.uniform(0.0, g.join_spread_s) for _ in range(g.count))
        group_nodes = [
            WorkloadNode(
                name=node_name(cluster, g, i),
                group=g.name,
                cluster=cluster.name,
                instance_type=g.instance_type,
                subnet=subnet.id,
                az=subnet.az,
                join_at=g.join_at_s + off,
                env=cluster.env,
                launch_addresses=g.launch_pool.addresses if g.launch_pool else 0,
                launch_prefixes=g.launch_pool.prefixes if g.launch_pool else 0,
            )
            for i, off in enumerate(offsets)
        ]
        nodes.extend(group_nodes)
        members[g.name] = group_nodes

    # (time, kind order, node, k): adds are generated first, deletes resolved after
    raw: list[tuple[float, int, str, str]] = []  # at, 0=add/1=del, node, pod-or-""
    counters: dict[str, int] = {n.name: 0 for n in nodes}
    deletes: list[tuple[float, str, int]] = []
    for step in scenario.workload:
        for start in step.times():
            for n in members[step.node_group]:
                if step.add_pods_per_node:
                    for _ in range(step.add_pods_per_node):
                        at = max(start + rng.uniform(0.0, step.spread_s), n.join_at)
                        k = counters[n.name]
                        counters[n.name] += 1
                        raw.append((at, 0, n.name, f"{n.name}/p{k}"))
                else:
                    at = max(start + rng.uniform(0.0, step.spread_s), n.join_at)
                    deletes.append((at, n.name, step.delete_pods_per_node))
    adds_by_node: dict[str, list[tuple[float, str]]] = {}
    for at, _, node, pod in raw:
        adds_by_node.setdefault(node, []).append((at, pod))
    for v in adds_by_node.values():
        v.sort()
    # resolve deletes in time order, against pods alive at that moment
    deleted: set[str] = set()
    events: list[tuple[float, int, str, str]] = [(at, 0, node, pod) for at, _, node, pod in raw]
    for at, node, count in sorted(deletes):
        alive = [p for t, p in adds_by_node.get(node, []) if t < at and p not in deleted]
        rng.shuffle(alive)
        for pod in alive[:count]:
            deleted.add(pod)
            events.append((at, 1, node, pod))
    events.sort(key=lambda e: (e[0], e[1], e[2], e[3]))
    out = [
        PodEvent(at=at, order=i, kind="add" if kind == 0 else "del", node=node, pod=pod)
        for i, (at, kind, node, pod) in enumerate(events)
    ]
    return Expanded(nodes=nodes, events=out)
