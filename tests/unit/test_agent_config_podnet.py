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


def test_a_recovery_grace_shorter_than_the_release_timeout_is_refused():
    # Before, only documented: a grace of 60 s let the addresses held after a rebuild return
    # while an offer of the previous process could still be acted on (the take-back waits
    # release_timeout_s for the same reason).
    assert load(base_env()).recovery_grace_s == 0
    assert load(base_env(WARMPOOL_RECOVERY_GRACE_S="240")).recovery_grace_s == 240
    with pytest.raises(ConfigError, match=r"WARMPOOL_RECOVERY_GRACE_S=60: .* release timeout 240"):
        load(base_env(WARMPOOL_RECOVERY_GRACE_S="60"))
    env = base_env(WARMPOOL_RECOVERY_GRACE_S="300", WARMPOOL_RELEASE_TIMEOUT_S="400")
    with pytest.raises(ConfigError, match="WARMPOOL_RECOVERY_GRACE_S=300"):
        load(env)
