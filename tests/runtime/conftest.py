"""Fixtures of the runtime tier: one cluster (tests/runtime/cluster.py) for the
whole tier, skipped with the reason when containerd cannot run pods here."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.runtime.cluster import RuntimeCluster, _install_missing, conf, runtime_cluster


@pytest.fixture(scope="session")
def cluster() -> Iterator[RuntimeCluster]:
    why = _install_missing()
    if why is None:
        from demo import netns as nx

        why = nx.support()
    if why is not None:
        pytest.skip(f"runtime tier: {why}")
    with runtime_cluster() as c:
        yield c


@pytest.fixture
def clean_pods(cluster: RuntimeCluster) -> Iterator[RuntimeCluster]:
    """Each test starts and ends with no sandboxes and a running agent."""
    yield cluster
    if cluster.node.proc is None or cluster.node.proc.poll() is not None:
        cluster.start_agent()
    assert cluster.rt.remove_all() == [], "every sandbox removable once the agent runs"
    cluster.rt.containerd.write_conf(conf(cluster))
