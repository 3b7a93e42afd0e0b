"""The agent's pod-network switch: netlink by default, a recorder on request."""

from __future__ import annotations

import pytest

from node_agent.cniserver import RecordedPods
from node_agent.config import ConfigError, load


def base_env(**kw: str) -> dict[str, str]:
    env = {
        "CLUSTER_NAME": "demo",
        "WARMPOOL_REPORTS_QUEUE_URL": "http://q/reports",
        "WARMPOOL_RESULT_QUEUE_PREFIX": "warmpool-demo-result-",
    }
    env.update(kw)
    return env


def test_pod_network_defaults_to_netlink_and_validates():
    assert load(base_env()).pod_network == "netlink"
    assert load(base_env(WARMPOOL_POD_NETWORK="Recorded")).pod_network == "recorded"
    with pytest.raises(ConfigError, match="WARMPOOL_POD_NETWORK"):
        load(base_env(WARMPOOL_POD_NETWORK="ebpf"))


def test_recorded_pods_record_and_check():
    pods = RecordedPods()
    net = pods.setup("/var/run/netns/p1", "eth0", "c0ffee", "10.0.0.9", 2, 9001)
    assert net.host_veth.startswith("eni")
    assert pods.check("/var/run/netns/p1", "eth0", "c0ffee", "10.0.0.9", 2) == []
    assert pods.check("/var/run/netns/p1", "eth0", "c0ffee", "10.0.0.8", 2) != []
    pods.teardown("c0ffee", "eth0", "10.0.0.9")
    assert pods.check("/var/run/netns/p1", "eth0", "c0ffee", "10.0.0.9", 2) != []
