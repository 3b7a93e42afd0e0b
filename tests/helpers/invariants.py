"""The invariants every fault test checks afterwards (issue 8), in one place.

1. No address held by two pods or two nodes: in EC2 (every secondary address
   and /28 prefix attached once, no address inside another ENI's prefix) and
   in the agents (no address in two datastores; every pod's address attached,
   in EC2, to an ENI of its own instance).
2. No ENI leaked after one reconcile interval: the reconciler runs, the GC age
   passes, it runs again; then no detached ENI tagged for the cluster is left
   and every secondary ENI of a running instance is DeleteOnTermination.
3. Every valid report served or still pending, none in the DLQ: the DLQ holds
   only what the test expects (invalid or rejected reports), and each live
   node's newest report is recorded in the ledger or still in the reports queue.
4. No pod left without an address the targets and limits allow: every pod a
   node wants holds an address unless the node is at its max-pods ceiling or
   its subnets are out of space.

``FAULTS`` counts faults injected and survived for the report
(``tests/perf/fault_figures.py`` prints it).
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from functions.reconciler import Reconciler
from simulation.checks import agent_problems as agent_problems  # shared with `warmpool sim`
from simulation.checks import ec2_problems as ec2_problems
from warmpool import names

FIGURES = Path(os.environ.get("WARMPOOL_FAULT_FIGURES", "/tmp/warmpool-fault-figures.jsonl"))


class FaultLog:
    """Faults injected and survived during the test run (appended to ``FIGURES``)."""

    def __init__(self) -> None:
        self.injected: Counter[str] = Counter()

    def inject(self, kind: str, n: int = 1) -> None:
        self.injected[kind] += n

    def survived(self, test: str) -> None:
        with FIGURES.open("a") as f:
            for kind, n in self.injected.items():
                f.write(json.dumps({"test": test, "fault": kind, "injected": n, "survived": n}) + "\n")
        self.injected.clear()


def leak_problems(world: Any, reconciler: Reconciler, *, gc_age_s: float) -> list[str]:
    """Invariant 2: one reconcile interval (mark, age, delete) leaves no ENI behind."""
    reconciler.run()
    world.clock.advance(gc_age_s + 1)
    reconciler.run()
    problems = []
    for e in world.emu.enis.values():
        tagged = e.tags.get(names.TAG_CLUSTER_NAME) == world.cluster
        if e.attachment is None and tagged:
            problems.append(f"ENI {e.id} leaked (detached, tagged for {world.cluster})")
        elif e.attachment is not None and e.attachment.device_index > 0:
            inst = world.emu.instances.get(e.attachment.instance_id)
            if inst is not None and inst.state == "running" and not e.attachment.delete_on_termination:
                problems.append(f"ENI {e.id} attached without DeleteOnTermination")
    return problems


def dlq_problems(world: Any, expected: Counter[str] | None = None) -> list[str]:
    """Invariant 3, DLQ side: only the expected reasons, in the expected numbers."""
    got: Counter[str] = Counter(m["MessageAttributes"]["reason"]["StringValue"] for m in world.queued(world.dlq_url))
    want = expected or Counter()
    return [f"DLQ holds {dict(got)}, expected {dict(want)}"] if got != want else []


def served_problems(world: Any, last_sent: dict[str, int]) -> list[str]:
    """Invariant 3, ledger side: each node's newest report recorded, or still queued."""
    if world.sqs.depth(world.reports_url):
        return []  # still pending: nothing lost (the tests drain before checking)
    problems = []
    for node, seq in last_sent.items():
        got = world.ledger.last_seq(world.cluster, world.nodes.get(node, node))  # rows are keyed by instance
        if got < seq:
            problems.append(f"{node}: report {seq} neither served (ledger at {got}) nor pending")
    return problems


def pod_problems(agents: dict[str, tuple[Any, Any, int]], *, short_ok: Iterable[str] = ()) -> list[str]:
    """Invariant 4. ``agents``: node -> (limits ceiling, Datastore, pods wanted)."""
    problems = []
    for node, (ceiling, ds, wanted) in agents.items():
        if node in set(short_ok):
            continue
        held = len(ds.pods())
        if held < min(wanted, ceiling):
            problems.append(f"{node}: {held} pods hold an address, {min(wanted, ceiling)} allowed and wanted")
    return problems


def assert_ok(problems: list[str]) -> None:
    assert not problems, "invariants broken:\n  " + "\n  ".join(problems)
