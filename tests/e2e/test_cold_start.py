"""A cold cluster where every node runs warmpool (issue 22): the cluster DNS gets its pods'
addresses from warmpool, so the agent must reach AWS before any cluster DNS exists.

The set-up is an EKS node's: the kubelet points ClusterFirst pods at the cluster DNS
address (``clusterDNS``), the node's resolver is the VPC's (here a stub on the host that
answers the local stack's endpoint name, ``demo/dnsstub.py``), and the agent reaches
"AWS" by that name. A DNS Deployment stands in for CoreDNS (the same stub, run by the agent
image's Python, answering ``kubernetes.default.svc.cluster.local``). There is no kube-proxy
here, so nothing routes the cluster DNS address: a pod resolving through it (the agent
with ``dnsPolicy: ClusterFirstWithHostNet``, the manifest before this test) never gets an
answer, as on a real cold cluster whose DNS pods wait for the agent.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from demo import dnsstub
from demo.kube import (
    AGENT_IMAGE_TAG,
    CLUSTER_DNS_IP,
    ENDPOINT_NAME,
    HOST_ADDR,
    NODE_NAME,
    KubeCluster,
    _run,
    _wait,
    deployment,
    kube_cluster,
)

AGENT_IMAGE = f"docker.io/warmpool/agent:{AGENT_IMAGE_TAG}"
NAMESPACE = "kube-system"
API_NAME, API_ADDR = "kubernetes.default.svc.cluster.local", "10.96.0.1"
pytestmark = pytest.mark.timeout(5400)  # a fresh machine builds Kubernetes and the images in the fixture


@pytest.fixture(scope="module")
def cold() -> Iterator[KubeCluster]:
    with kube_cluster(cluster_dns=True) as c:
        yield c
        print("e2e cold-start timings:", json.dumps({k: round(v, 1) for k, v in c.timings.items()}))


def _cluster_dns(replicas: int) -> list[dict[str, Any]]:
    labels = {"k8s-app": "kube-dns"}
    stub = (Path(dnsstub.__file__)).read_text()
    return [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "cluster-dns-stub", "namespace": NAMESPACE},
            "data": {"dnsstub.py": stub},
        },
        deployment(
            "cluster-dns",
            NAMESPACE,
            labels,
            replicas,
            {
                # as CoreDNS's: the node's resolver upstream, critical, any node
                "dnsPolicy": "Default",
                "priorityClassName": "system-cluster-critical",
                "tolerations": [{"key": "CriticalAddonsOnly", "operator": "Exists"}],
                "automountServiceAccountToken": False,
                "terminationGracePeriodSeconds": 1,
                "containers": [
                    {
                        "name": "dns",
                        "image": AGENT_IMAGE,
                        "imagePullPolicy": "Never",
                        "command": [
                            "/opt/warmpool/venv/bin/python",
                            "/dns/dnsstub.py",
                            "0.0.0.0",
                            "53",
                            f"{API_NAME}={API_ADDR}",
                        ],
                        "ports": [{"name": "dns", "containerPort": 53, "protocol": "UDP"}],
                        "volumeMounts": [{"name": "stub", "mountPath": "/dns", "readOnly": True}],
                    }
                ],
                "volumes": [{"name": "stub", "configMap": {"name": "cluster-dns-stub"}}],
            },
        ),
    ]


def _dns_pods_running(c: KubeCluster, n: int) -> dict[str, str] | None:
    pods = c.get("pods", "-n", NAMESPACE, "-l", "k8s-app=kube-dns")["items"]
    ok = {
        p["metadata"]["name"]: p["status"]["podIP"]
        for p in pods
        if p["status"].get("phase") == "Running" and p["status"].get("podIP")
    }
    return ok if len(ok) == n else None


# How long the deadlock is watched: the agent's start, its first reports and an allocation
# take about 20 s here when the agent can reach the allocator.
DEADLOCK_WATCH_S = 90


def test_with_the_cluster_dns_as_its_resolver_the_agent_of_a_cold_cluster_deadlocks(cold: KubeCluster) -> None:
    """The manifest as it was (``dnsPolicy: ClusterFirstWithHostNet``): the agent's resolver
    is the cluster DNS, whose pods wait for the agent's addresses. For longer than a warm
    start takes, the endpoint name is never asked of the node's resolver, the node's ENIs
    get no address and the DNS pods stay waiting."""
    c = cold
    _wait("the node registered", lambda: c.get("node", NODE_NAME), 60, [c.procs["kubelet"]])
    assert c.eni_addresses() == set()  # cold: nothing on the node's ENIs yet
    c.apply(_cluster_dns(2))
    docs = c.manifests(AGENT_IMAGE)
    for d in docs:
        if d["kind"] == "DaemonSet":
            d["spec"]["template"]["spec"]["dnsPolicy"] = "ClusterFirstWithHostNet"
    c.apply(docs)
    _wait("the agent pod started", lambda: c.agent_pods(), 120, [c.procs["kubelet"]])
    time.sleep(DEADLOCK_WATCH_S)  # the test watching for a deadlock, not warmpool logic
    assert _dns_pods_running(c, 0) == {}, "a DNS pod started"
    assert c.eni_addresses() == set(), c.eni_addresses()
    assert ENDPOINT_NAME not in c.resolver.queries, c.resolver.queries


def test_a_cold_cluster_whose_dns_gets_its_addresses_from_warmpool_comes_up(cold: KubeCluster) -> None:
    """A fresh node (no secondary address on its ENIs; after the test above, still), the
    cluster DNS Deployment applied first and waiting, then the rendered manifests as
    shipped: the agent reaches the allocator through the node's resolver (its resolv.conf
    is the node's, not the cluster DNS), the allocator gives the node addresses, the DNS
    pods start with them and answer queries at them."""
    c = cold
    _wait("the node registered", lambda: c.get("node", NODE_NAME), 60, [c.procs["kubelet"]])
    assert c.eni_addresses() == set()  # cold: nothing on the node's ENIs yet
    t0 = time.monotonic()
    replicas = 2
    c.apply(_cluster_dns(replicas))
    c.apply(c.manifests(AGENT_IMAGE))
    try:
        dns = _wait("the cluster DNS pods Running", lambda: _dns_pods_running(c, replicas), 360, [c.procs["kubelet"]])
    except Exception as e:
        names = [p["metadata"]["name"] for p in c.agent_pods()]
        logs = "".join(c.kubectl("logs", "-n", NAMESPACE, "-c", "agent", n, check=False) for n in names)
        raise AssertionError(
            f"{e}\n--- agent log:\n{logs[-3000:]}\n--- resolver saw: {c.resolver.queries[-20:]}"
        ) from None
    c.timings["cold_start_dns_running_s"] = time.monotonic() - t0
    print(f"e2e cold start: the cluster DNS Running on warmpool addresses {time.monotonic() - t0:.0f} s after apply")
    assert set(dns.values()) <= c.eni_addresses(), (dns, c.eni_addresses())
    (agent,) = c.agent_pods()
    resolv = c.kubectl(
        "exec", "-n", NAMESPACE, agent["metadata"]["name"], "-c", "agent", "--", "cat", "/etc/resolv.conf"
    )
    assert f"nameserver {HOST_ADDR}" in resolv and CLUSTER_DNS_IP not in resolv, resolv
    assert ENDPOINT_NAME in c.resolver.queries  # the agent reached "AWS" by name through the node's resolver
    for ip in dns.values():
        r = _run(c.in_node("busybox", "nslookup", API_NAME, ip), check=False, timeout=30)
        assert API_ADDR in r.stdout, (ip, r.stdout, r.stderr)
