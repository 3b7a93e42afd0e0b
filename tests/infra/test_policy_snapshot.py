"""The simulation authorizes its EC2 calls with committed snapshots of the synthesized policies
(``simulation/iam_policies.json``, and one per stack variant its subnet worlds run with): each
must be what the CDK app synthesizes today, or the simulation would test yesterday's roles."""

from __future__ import annotations

import pytest

from emulated.iam import load_snapshot
from infra.policy_snapshot import SIMULATION_CONTEXT, SNAPSHOT, VARIANTS, render, snapshot, snapshot_path
from simulation.base import CLUSTER


def test_the_simulation_policy_snapshot_is_a_fresh_synth() -> None:
    fresh = render(snapshot())
    assert SNAPSHOT.read_text() == fresh, "stale: run `python -m infra.policy_snapshot` and commit the file"


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_each_variant_snapshot_is_a_fresh_synth(variant: str) -> None:
    fresh = render(snapshot(VARIANTS[variant]))
    assert snapshot_path(variant).read_text() == fresh, "stale: run `python -m infra.policy_snapshot`"


def test_the_snapshot_is_for_the_simulation_cluster() -> None:
    data = load_snapshot(SNAPSHOT)
    assert data["context"] == SIMULATION_CONTEXT
    assert SIMULATION_CONTEXT["cluster"] == CLUSTER
    assert set(data["roles"]) == {"allocate", "reconcile", "agent"}
    for variant, context in VARIANTS.items():
        got = load_snapshot(snapshot_path(variant))
        assert got["context"] == context
        assert context["cluster"] == CLUSTER and context["vpc_id"] == SIMULATION_CONTEXT["vpc_id"]
        assert set(got["roles"]) == {"allocate", "reconcile", "agent"}
