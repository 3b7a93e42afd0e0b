"""Two kubelets (issue 22): pod traffic between pods on different nodes, each node's agent
from the one DaemonSet, each node with its own host paths and its own IMDS.

A control plane and two kubelets built from source (demo/kube.py): node 0 uses this
machine's host paths, node 1 its own under a mount namespace of its own. Both nodes' ENIs are
plugged into the demo's routed VPC (demo/dataplane.py), which forwards between ENIs as AWS's
does and drops what an ENI does not own; the internet is a namespace behind a gateway.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from demo.kube import AGENT_IMAGE_TAG, KubeCluster, KubeNode, _run, _wait, kube_cluster
from demo.on_kubelet import is_ready, sandboxes, spread

AGENT_IMAGE = f"docker.io/warmpool/agent:{AGENT_IMAGE_TAG}"
NAMESPACE = "kube-system"
REPLICAS = 20
"""10 a node: more than an m5.large's primary ENI holds (9), so a pod is on a secondary ENI."""
pytestmark = pytest.mark.timeout(5400)  # a fresh machine builds Kubernetes and the images in the fixture


@pytest.fixture(scope="module")
def two() -> Iterator[KubeCluster]:
    with kube_cluster(nodes=2) as c:
        yield c
        print("e2e two-kubelet timings:", json.dumps({k: round(v, 1) for k, v in c.timings.items()}))


def _wait_two_agents(c: KubeCluster) -> Any:
    return _wait(
        "an agent pod Ready on each node",
        lambda: (
            pods
            if len(
                pods := [
                    p
                    for p in c.get("pods", "-n", NAMESPACE, "-l", "app.kubernetes.io/name=warmpool-agent")["items"]
                    if is_ready(p)
                ]
            )
            == 2
            else None
        ),
        300,
        _kubelets(c),
        interval=1.0,
    )


def _kubelets(c: KubeCluster) -> list[Any]:
    return [c.procs[n.kubelet] for n in c.nodes]


def test_each_kubelet_runs_the_agent_from_its_own_host_paths_and_turns_ready(two: KubeCluster) -> None:
    """kubectl apply of the rendered manifests: one agent pod per node turns Ready, both
    nodes turn Ready; each node's init container installed the plugin and conflist in that
    node's own CNI directories (node 1's are not this machine's), and each agent serves its
    own instance (it learnt it from IMDS at 169.254.169.254, where its node's network sends it)."""
    c = two
    c.apply(c.manifests(AGENT_IMAGE))
    t0 = time.monotonic()
    try:
        agents = _wait_two_agents(c)
    except Exception as e:
        logs = c.kubectl(
            "logs",
            "-n",
            NAMESPACE,
            "-l",
            "app.kubernetes.io/name=warmpool-agent",
            "-c",
            "agent",
            "--tail=40",
            "--prefix",
            "--previous",
            check=False,
        )
        raise AssertionError(f"{e}\n--- agent logs:\n{logs}") from None
    c.timings["two_agents_ready_s"] = time.monotonic() - t0

    assert {p["spec"]["nodeName"] for p in agents} == {n.name for n in c.nodes}
    for n in c.nodes:
        _wait(f"{n.name} Ready", lambda n=n: is_ready(c.get("node", n.name)), 60, _kubelets(c))
    node1 = c.nodes[1]
    conf1 = c.base / "host-1/etc/cni/net.d/05-warmpool.conflist"
    assert json.loads(conf1.read_text())["plugins"][0]["type"] == "warmpool-cni"
    assert (c.base / "host-1/opt/cni/bin/warmpool-cni").exists()
    assert Path("/etc/cni/net.d/05-warmpool.conflist").exists()  # node 0's, this machine's
    for n in c.nodes:  # each agent serves its own instance: it read it from its node's IMDS
        mine = {e.id for e in c.stack.ec2.enis.values() if e.attachment and e.attachment.instance_id == n.instance_id}
        seen = _wait(f"{n.name}'s agent's ENIs", lambda n=n: {e["eni_id"] for e in _agent_json(n, "/v1/enis")}, 60)
        assert seen and seen <= mine, (n.name, seen, mine)
    # each node's pool is on its own instance's ENIs
    _wait("both warm pools filled", lambda: all(c.eni_addresses_of(n) for n in c.nodes), 180, _kubelets(c))
    assert not c.eni_addresses_of(c.nodes[0]) & c.eni_addresses_of(node1)


def _agent_json(node: KubeNode, path: str) -> Any:
    """GET the node's agent's local API (127.0.0.1:61680 in the node's network)."""
    script = (
        "import sys, urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())"
    )
    r = _run([*node.enter(), sys.executable, "-c", script, f"http://127.0.0.1:61680{path}"], timeout=30)
    return json.loads(r.stdout)


def _route_to(node: KubeNode, ip: str) -> str:
    lines = _run([*node.enter(), "ip", "-4", "route", "show", "table", "main"]).stdout.splitlines()
    return next(line for line in lines if line.split()[0] == ip)


def test_pods_on_different_kubelets_reach_each_other_and_the_internet(two: KubeCluster) -> None:
    """A Deployment spread over both nodes: every pod gets a distinct address of its own
    node's ENIs; every pod pings and TCP-echoes a pod on the other node and is seen there as
    itself (no SNAT inside the VPC), reaches the internet host seen as its node's primary
    address (SNAT), and a NodePort to a pod on a secondary ENI answers a client on the other
    node (demo/dataplane.py). A negative control: with the agent's host route to one pod
    removed, the other node's pods no longer reach it; put back, they do."""
    from demo import dataplane

    c = two
    for n in c.nodes:
        _wait(f"{n.name} Ready", lambda n=n: is_ready(c.get("node", n.name)), 240, _kubelets(c))
    t0 = time.monotonic()
    c.apply([spread(REPLICAS, {"app": "spread"}, "spread")])

    def running() -> list[dict[str, Any]] | None:
        pods: list[dict[str, Any]] = c.get("pods", "-l", "app=spread")["items"]
        ok = [p for p in pods if p["status"].get("phase") == "Running" and p["status"].get("podIP")]
        return ok if len(ok) == REPLICAS else None

    pods = _wait("every replica Running", running, 300, _kubelets(c), interval=1.0)
    c.timings["spread_pods_running_s"] = time.monotonic() - t0
    by_name = {n.name: n for n in c.nodes}
    ips = [p["status"]["podIP"] for p in pods]
    assert len(set(ips)) == REPLICAS, ips
    assert {p["spec"]["nodeName"] for p in pods} == set(by_name)
    emu = c.stack.ec2
    c.demo.hv.refresh(emu.instance_metadata, [n.instance_id for n in c.nodes])
    netns = {n.index: sandboxes(n) for n in c.nodes}
    ends: list[dataplane.PodEnd] = []
    node_ends: list[dataplane.NodeEnd] = []
    for n in c.nodes:
        md = emu.instance_metadata(n.instance_id)
        node_ends.append(dataplane.NodeEnd(n.ns, str(md["local-ipv4"])))
    for p in pods:
        node = by_name[p["spec"]["nodeName"]]
        ip = p["status"]["podIP"]
        assert ip in c.eni_addresses_of(node), (ip, node.name)
        secondary = any(
            ip in e.secondary
            for e in emu.enis.values()
            if e.attachment and e.attachment.instance_id == node.instance_id and e.attachment.device_index > 0
        )
        ends.append(dataplane.PodEnd(netns[node.index][ip], ip, node.index, secondary))
    res = dataplane.run_checks(ends, node_ends, snat=True, internet_ns=c.demo.hv.inet_ns)
    print("two-kubelet data plane:", json.dumps(res.to_json()))
    assert res.pod_to_pod_ok and res.pod_to_pod_checked == REPLICAS, res.failures
    assert res.egress_ok and res.egress_checked == REPLICAS and res.egress_source == "node", res.failures
    assert res.nodeport_checked == 1 and res.nodeport_ok, res.failures

    # The negative control: the agent's host route to a pod on node 1 is what carries it.
    target = next(e for e in ends if e.node == 1)
    client = next(e for e in ends if e.node == 0)
    node1 = c.nodes[1]
    route = _route_to(node1, target.ip)
    _run([*node1.enter(), "ip", "route", "del", *route.split()])
    try:
        assert not dataplane.ping(client.ns, target.ip), f"{target.ip} answered without its host route"
    finally:
        _run([*node1.enter(), "ip", "route", "add", *route.split()])
    assert dataplane.ping(client.ns, target.ip)
    c.kubectl("delete", "deployment", "spread", "--wait=true", timeout=120)
    _wait(
        "the spread pods gone",
        lambda: not c.get("pods", "-l", "app=spread")["items"],
        120,
        _kubelets(c),
    )


def test_each_agent_keeps_its_checkpoint_on_its_own_node(two: KubeCluster) -> None:
    """The two agents' checkpoints are apart: node 0's under this machine's /var/lib/warmpool,
    node 1's under its own, each naming only its own instance's ENIs."""
    c = two
    found = {}
    for n, root in ((c.nodes[0], Path("/var/lib/warmpool")), (c.nodes[1], c.base / "host-1/var/lib/warmpool")):
        files = [p for p in root.rglob("*") if p.is_file()]
        assert files, (n.name, root)
        found[n.index] = "".join(p.read_text(errors="replace") for p in files)
    enis = {
        n.index: {e.id for e in c.stack.ec2.enis.values() if e.attachment and e.attachment.instance_id == n.instance_id}
        for n in c.nodes
    }
    for k, text in found.items():
        other = 1 - k
        assert any(e in text for e in enis[k]), k
        assert not any(e in text for e in enis[other]), k
