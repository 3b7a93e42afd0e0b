"""The real install on a real kubelet (issue 22, the Kubernetes half).

A control plane and one kubelet built from source (tests/e2e/kube.py), Debian's
containerd, the agent image built from infra/docker/agent.Dockerfile, the
manifests rendered from the local stack's outputs and applied with kubectl.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.kube import AGENT_IMAGE_TAG, INSTANCE_TYPE, NODE_NAME, E2eError, KubeCluster, _wait, kube_cluster

AGENT_IMAGE = f"docker.io/warmpool/agent:{AGENT_IMAGE_TAG}"
WORKLOAD_IMAGE = "docker.io/warmpool/busybox:local"
NAMESPACE = "kube-system"
# The image has no kill(1): its own Python sends SIGTERM to the agent (the container's pid 1).
STOP_PID_1 = ("/opt/warmpool/venv/bin/python", "-c", "import os, signal; os.kill(1, signal.SIGTERM)")
pytestmark = pytest.mark.timeout(1800)  # the first run builds Kubernetes and the images in the fixture


@pytest.fixture(scope="module")
def cluster() -> Iterator[KubeCluster]:
    with kube_cluster() as c:
        yield c
        print("e2e timings:", json.dumps({k: round(v, 1) for k, v in c.timings.items()}))


def _agent_pods(c: KubeCluster) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = c.get("pods", "-n", NAMESPACE, "-l", "app.kubernetes.io/name=warmpool-agent")["items"]
    return items


def _ready(pod: dict[str, Any]) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in pod.get("status", {}).get("conditions", []))


def _node_condition(c: KubeCluster) -> dict[str, Any]:
    node = c.get("node", NODE_NAME)
    cond: dict[str, Any] = next(x for x in node["status"]["conditions"] if x["type"] == "Ready")
    return cond


def test_the_daemonset_installs_the_plugin_and_the_node_turns_ready(cluster: KubeCluster) -> None:
    """Before the DaemonSet the node is NotReady (no CNI config); kubectl apply of the
    rendered manifests: the init container installs warmpool-cni and its conflist, the
    agent pod turns Ready, and so does the node. The kubelet's max pods is warmpool's."""
    c = cluster
    _wait("the node's first status", lambda: _node_condition(c), 60, [c.procs["kubelet"]])
    time.sleep(3)
    before = _node_condition(c)
    assert before["status"] != "True", before
    assert not os.path.exists("/etc/cni/net.d/05-warmpool.conflist")
    t0 = time.monotonic()
    c.apply(c.manifests(AGENT_IMAGE))
    try:
        _wait(
            "the agent pod Ready",
            lambda: [p for p in _agent_pods(c) if _ready(p)],
            240,
            [c.procs["kubelet"]],
            interval=1.0,
        )
    except E2eError as e:
        raise E2eError(f"{e}\n{c.kubectl('describe', 'pods', '-n', NAMESPACE, check=False)[-4000:]}") from None
    c.timings["agent_ready_s"] = time.monotonic() - t0
    _wait("the node Ready", c.node_ready, 60, [c.procs["kubelet"]])
    assert os.path.exists("/opt/cni/bin/warmpool-cni")
    conf = json.loads(Path("/etc/cni/net.d/05-warmpool.conflist").read_text())
    assert conf["plugins"][0]["type"] == "warmpool-cni"
    node = c.get("node", NODE_NAME)
    assert node["status"]["capacity"]["pods"] == str(c.kubelet_config["maxPods"])
    assert INSTANCE_TYPE == "m5.large" and c.kubelet_config["maxPods"] == 29  # the VPC CNI's formula for m5.large


def test_a_pod_gets_its_address_from_the_warm_pool(cluster: KubeCluster) -> None:
    """A pod the scheduler puts on the node gets an address through warmpool-cni: one of
    the node's ENI addresses in emulated EC2, on the pod's eth0."""
    c = cluster
    _wait("the node Ready", c.node_ready, 240, [c.procs["kubelet"]])
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "web-0", "namespace": "default"},
        "spec": {
            "automountServiceAccountToken": False,
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {
                    "name": "app",
                    "image": WORKLOAD_IMAGE,
                    "imagePullPolicy": "Never",
                    "command": ["/bin/sleep", "3600"],
                }
            ],
        },
    }
    c.apply([pod])
    got = _wait(
        "the pod Running with an IP",
        lambda: (p := c.get("pod", "web-0")).get("status", {}).get("podIP") and p["status"]["phase"] == "Running" and p,
        120,
        [c.procs["kubelet"]],
        interval=1.0,
    )
    ip = got["status"]["podIP"]
    assert ip in c.eni_addresses(), (ip, c.eni_addresses())
    shown = c.kubectl("exec", "web-0", "--", "ip", "-4", "-o", "addr", "show", "eth0")
    assert f" {ip}/" in shown, shown


def _deployment(replicas: int) -> dict[str, Any]:
    labels = {"app": "burst"}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "burst", "namespace": "default"},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "automountServiceAccountToken": False,
                    "terminationGracePeriodSeconds": 1,
                    "containers": [
                        {
                            "name": "app",
                            "image": WORKLOAD_IMAGE,
                            "imagePullPolicy": "Never",
                            "command": ["/bin/sleep", "3600"],
                        }
                    ],
                },
            },
        },
    }


def test_a_deployment_scaled_past_the_warm_pool_and_back_to_zero(cluster: KubeCluster) -> None:
    """0 → 8 → 0 on one node whose warm pool holds fewer (MINIMUM_IP_TARGET 4, WARM_IP_TARGET
    2): pods wait in ContainerCreating (the agent holds their ADDs) until the allocator's
    addresses arrive, then every one runs with a distinct address of the node's ENIs; on scale-down the agent holds no
    pod any more and its addresses stay on the node (the warm pool takes them back)."""
    c = cluster
    _wait("the node Ready", c.node_ready, 240, [c.procs["kubelet"]])
    c.kubectl("delete", "pod", "web-0", "--ignore-not-found", "--wait=true", timeout=120)
    replicas = 8
    warm_before = c.eni_addresses()
    assert len(warm_before) < replicas, warm_before  # more pods than the warm pool holds at once
    t0 = time.monotonic()
    c.apply([_deployment(replicas)])

    def running() -> list[dict[str, Any]] | None:
        pods: list[dict[str, Any]] = c.get("pods", "-l", "app=burst")["items"]
        ok = [p for p in pods if p["status"].get("phase") == "Running" and p["status"].get("podIP")]
        return ok if len(ok) == replicas else None

    pods = _wait("every replica Running", running, 240, [c.procs["kubelet"]], interval=1.0)
    c.timings["burst_8_pods_running_s"] = time.monotonic() - t0
    ips = [p["status"]["podIP"] for p in pods]
    assert len(set(ips)) == replicas, ips
    assert set(ips) <= c.eni_addresses(), (ips, c.eni_addresses())
    assert {p["ip"] for p in c.agent_json("/v1/pods")} == set(ips)
    assert set(ips) - warm_before  # some pods waited for addresses the allocator added
    c.kubectl("scale", "deployment", "burst", "--replicas=0")
    _wait("no replica left", lambda: not c.get("pods", "-l", "app=burst")["items"], 120, [c.procs["kubelet"]])
    _wait("the agent holding no pod", lambda: c.agent_json("/v1/pods") == [], 60, [c.procs["kubelet"]])
    pool = {ip for e in c.agent_json("/v1/enis") for ip in e["ips"]}
    assert pool & set(ips), (pool, ips)  # back in the pool, not lost


def test_the_agent_restarted_by_the_kubelet_keeps_running_pods_addresses(cluster: KubeCluster) -> None:
    """The agent's process ends while pods run; the kubelet restarts its container (same
    pod). Every running pod keeps its address in the agent's view, and a new pod started
    after the restart gets an address distinct from theirs."""
    c = cluster
    _wait("the node Ready", c.node_ready, 240, [c.procs["kubelet"]])
    c.apply([_deployment(3)])

    def running(n: int) -> dict[str, str] | None:
        pods = c.get("pods", "-l", "app=burst")["items"]
        ok = {
            p["metadata"]["name"]: p["status"]["podIP"]
            for p in pods
            if p["status"].get("phase") == "Running" and p["status"].get("podIP")
        }
        return ok if len(ok) == n else None

    before = _wait("3 replicas Running", lambda: running(3), 180, [c.procs["kubelet"]], interval=1.0)
    (agent,) = _agent_pods(c)
    restarts = agent["status"]["containerStatuses"][0]["restartCount"]
    c.kubectl("exec", "-n", NAMESPACE, agent["metadata"]["name"], "-c", "agent", "--", *STOP_PID_1)

    def restarted() -> bool:
        (p,) = _agent_pods(c)
        return bool(p["status"]["containerStatuses"][0]["restartCount"] > restarts and _ready(p))

    _wait("the agent restarted by the kubelet and Ready", restarted, 180, [c.procs["kubelet"]], interval=1.0)
    assert _agent_pods(c)[0]["metadata"]["uid"] == agent["metadata"]["uid"]  # the same pod, a new container
    held = {p["ip"] for p in c.agent_json("/v1/pods")}
    assert set(before.values()) <= held, (before, held)
    assert running(3) == before
    c.kubectl("scale", "deployment", "burst", "--replicas=4")
    after = _wait("the 4th replica Running", lambda: running(4), 180, [c.procs["kubelet"]], interval=1.0)
    assert len(set(after.values())) == 4 and set(before.values()) < set(after.values())
    c.kubectl("delete", "deployment", "burst", "--wait=true", timeout=120)
