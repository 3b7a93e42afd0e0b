"""The simulation authorizes its EC2 calls with a committed snapshot of the synthesized policies
(``simulation/iam_policies.json``): it must be what the CDK app synthesizes today, or the
simulation would test yesterday's roles."""

from __future__ import annotations

from emulated.iam import load_snapshot
from infra.policy_snapshot import SIMULATION_CONTEXT, SNAPSHOT, render, snapshot
from simulation.base import CLUSTER


def test_the_simulation_policy_snapshot_is_a_fresh_synth() -> None:
    fresh = render(snapshot())
    assert SNAPSHOT.read_text() == fresh, "stale: run `python -m infra.policy_snapshot` and commit the file"


def test_the_snapshot_is_for_the_simulation_cluster() -> None:
    data = load_snapshot(SNAPSHOT)
    assert data["context"] == SIMULATION_CONTEXT
    assert SIMULATION_CONTEXT["cluster"] == CLUSTER
    assert set(data["roles"]) == {"allocate", "reconcile", "agent"}
