"""``warmpool demo`` on a real control plane and kubelets (``--runtime kubelet``, and what
``--runtime auto`` picks when the kubelets can run here).

The demo's job, through Kubernetes as a user runs it: the local stack, a control plane
and one kubelet a node (demo/kube.py: built from source on first use, then cached), the
project's manifests rendered from the stack's outputs and applied with ``kubectl``, the
agent from its image. Then the scale-out is a Deployment of nodes × pods-per-node pods
spread over the nodes; every pod's address is checked (distinct, on its own node's ENIs,
on its ``eth0``); packets go pod to pod, to the internet and through a NodePort
(demo/dataplane.py); the Deployment is scaled down to keep-per-node pods a node and the
pools settle to their targets. The report is the demo's (demo/report.py); its time to
address is each pod's creation to its Ready condition as the API server records them
(1 s resolution), so it includes the kubelet's and containerd's own work.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, TextIO

from demo import dataplane
from demo.options import DemoOptions, Interrupted
from demo.report import DemoPod, DemoReport, ec2_delta, ec2_table

AGENT_IMAGE = "docker.io/warmpool/agent:e2e"
WORKLOAD_IMAGE = "docker.io/warmpool/busybox:local"
APP = "warmpool-demo"
MAX_NODES = 8
"""Each node is a containerd and a kubelet on this machine; more is a machine's worth."""
READY_TIMEOUT_S = 300.0


def support() -> str | None:
    """Why the kubelets cannot run here, or None. Building them is allowed (it takes a while
    once; the demo says so), so Go or the cached binaries will do."""
    from demo import runtime_containerd as rc
    from demo.kube import KUBERNETES_VERSION

    if os.geteuid() != 0:
        return "not running as root"
    why = rc.support()
    if why is not None:
        return why
    if shutil.which("kubectl") is None:
        return "kubectl is not installed"
    if not built(KUBERNETES_VERSION) and shutil.which("go") is None:
        return "the Kubernetes binaries are not built here and Go is not installed to build them"
    for tool in ("buildah", "debootstrap"):
        if shutil.which(tool) is None and shutil.which("apt-get") is None:
            return f"{tool} is not installed (it builds the agent image)"
    return None


def built(version: str) -> bool:
    """The binaries e2e/build-kubernetes.sh makes are in its cache."""
    cache = Path(os.environ.get("WARMPOOL_E2E_CACHE") or Path.home() / ".cache/warmpool-e2e")
    bin_dir = cache / f"kubernetes-{version}" / "bin"
    cmds = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet")
    return all(os.access(bin_dir / c, os.X_OK) for c in cmds)


def check_options(o: DemoOptions) -> str | None:
    """What this runtime cannot do with ``o``, or None."""
    from demo.kube import INSTANCE_TYPE

    if o.nodes > MAX_NODES:
        return f"--nodes {o.nodes}: at most {MAX_NODES} kubelets run on one machine"
    if o.instance_type != INSTANCE_TYPE:
        return f"--instance-type {o.instance_type}: the kubelet demo's nodes are {INSTANCE_TYPE}"
    return None


def ready_latency(pod: Mapping[str, Any]) -> tuple[float, float] | None:
    """(created, Ready) of a pod as the API server recorded them, as Unix times."""

    def at(ts: str) -> float:
        return datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()

    ready = next((c for c in pod.get("status", {}).get("conditions", []) if c.get("type") == "Ready"), None)
    if ready is None or ready.get("status") != "True":
        return None
    return at(pod["metadata"]["creationTimestamp"]), at(ready["lastTransitionTime"])


def sandboxes(node: Any) -> dict[str, str]:
    """Pod address -> its network namespace as this process opens it, from the node's CRI."""
    from demo.runtime_cri import CriClient

    cri = CriClient(node.containerd.socket, timeout_s=30)
    try:
        out = {}
        for sb in cri.list_pod_sandbox_ids():
            st = cri.pod_sandbox_status(sb)
            if st.ready and st.ip and st.netns:
                out[st.ip] = node.host_path(st.netns)
        return out
    finally:
        cri.close()


def eth0_address(netns: str) -> str | None:
    """The IPv4 address on ``eth0`` in the namespace at path ``netns``."""
    r = subprocess.run(
        ["nsenter", f"--net={netns}", "ip", "-4", "-o", "addr", "show", "eth0"],
        capture_output=True,
        text=True,
        timeout=15,
        check=False,
    )
    parts = r.stdout.split()
    return parts[parts.index("inet") + 1].split("/")[0] if "inet" in parts else None


def spread(replicas: int, labels: Mapping[str, str] | None = None, name: str = APP) -> dict[str, Any]:
    """A Deployment of sleeping busybox pods, at most one more on any node than on another."""
    from demo.kube import deployment

    labels = dict(labels or {"app": name})
    pod = {
        "automountServiceAccountToken": False,
        "terminationGracePeriodSeconds": 1,
        "topologySpreadConstraints": [
            {
                "maxSkew": 1,
                "topologyKey": "kubernetes.io/hostname",
                "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {"matchLabels": labels},
            }
        ],
        "containers": [
            {"name": "app", "image": WORKLOAD_IMAGE, "imagePullPolicy": "Never", "command": ["/bin/sleep", "3600"]}
        ],
    }
    return deployment(name, "default", labels, replicas, pod)


def is_ready(obj: Mapping[str, Any]) -> bool:
    return any(x["type"] == "Ready" and x["status"] == "True" for x in obj.get("status", {}).get("conditions", []))


class KubeletDemo:
    """One run; :meth:`run` returns the report (demo/report.py's JSON)."""

    def __init__(self, options: DemoOptions, stream: TextIO, stop: Any) -> None:
        self.o = options
        self.stream = stream
        self.stop = stop
        self.notes: list[str] = []
        self.t0 = time.monotonic()
        self.cluster: Any = None

    def say(self, text: str) -> None:
        self.stream.write(f"[{time.monotonic() - self.t0:7.1f}s] {text}\n")
        self.stream.flush()

    def _wait(self, what: str, ok: Callable[[], Any], timeout_s: float) -> Any:
        """``ok()`` until it is truthy; the kubelets' logs in the error when it never is."""
        deadline = time.monotonic() + timeout_s
        while True:
            if self.stop.is_set():
                raise Interrupted
            v = ok()
            if v:
                return v
            if time.monotonic() >= deadline:
                tails = "\n".join(f"--- {k}:\n{p.tail(15)}" for k, p in self.cluster.procs.items() if "kubelet" in k)
                raise RuntimeError(f"timed out after {timeout_s:.0f} s waiting for {what}\n{tails}")
            self.stop.wait(1.0)

    def run(self) -> dict[str, Any]:
        from demo.kube import kube_cluster

        n = self.o.nodes
        self.say(
            f"warmpool demo: a control plane and {n} kubelet(s) (the DaemonSet and the pods run on Kubernetes); "
            "the first run on a machine builds Kubernetes from source and the agent image, then they are cached"
        )
        with kube_cluster(nodes=n, lock=False, progress=self.say) as c:
            self.cluster = c
            self.say(f"cluster up: {', '.join(f'{k} {v:.0f} s' for k, v in c.timings.items())}")
            report = self._run(c)
            self.say("teardown: the kubelets, every sandbox (DELs through the agents), containerd, the control plane")
            t_down = time.monotonic()
        self.say(f"teardown done in {time.monotonic() - t_down:.0f} s")
        return report

    def _run(self, c: Any) -> dict[str, Any]:
        from demo.host import http_json
        from emulated.figures import leaked_enis

        o = self.o
        c.apply(c.manifests(AGENT_IMAGE, agent_env=o.agent_env))
        self.say("kubectl apply: the manifests rendered from the local stack's outputs")
        agents = self._wait("an agent pod Ready on every node", lambda: self._agents_ready(c), READY_TIMEOUT_S)
        self.say(f"agents Ready on {', '.join(sorted(p['spec']['nodeName'] for p in agents))}")
        for name in [node.name for node in c.nodes]:
            self._wait(f"{name} Ready", functools.partial(self._node_ready, c, name), 120)
        env = c.configmap_env(o.agent_env)
        for made in c.demo.nodes:
            made.env = {**made.env, **env}  # what the pools settle to (Demo._settled reads it)

        replicas = o.nodes * o.pods_per_node
        self.say(f"scale-out: Deployment {APP} 0 -> {replicas} ({o.pods_per_node} a node)")
        t_out = time.monotonic()
        c.apply([spread(replicas)])
        pods = self._wait(f"{replicas} pods Running", lambda: self._running(c, replicas), o.scale_out_timeout_s + 180)
        scale_out_s = time.monotonic() - t_out
        self.say(f"scale-out: {replicas} pods Running in {scale_out_s:.1f} s")
        records = self._records(c, pods)
        c.demo.pods = records
        self._check_addresses(c, records)
        packets = dataplane.check_demo(c.demo)
        for line in dataplane.render_lines(packets):
            self.say(line.strip())

        down = self._scale_down(c, records)
        pools = c.demo.node_pools()
        t_rec = time.monotonic()
        c.demo.reconcile()
        self.say(f"reconcile: the reconcile function twice, {time.monotonic() - t_rec:.1f} s")
        stats = ec2_table(http_json(c.stack.outputs["stats_url"]))
        leaked = leaked_enis(c.stack.ec2)
        t_del = time.monotonic()
        c.kubectl("delete", "deployment", APP, "--wait=true", timeout=120)
        self.say(f"kubectl delete deployment {APP}: {time.monotonic() - t_del:.1f} s")
        report = DemoReport(
            nodes=o.nodes,
            pods_requested=replicas,
            pods=records,
            ec2=ec2_delta(stats, {}),
            leaked_enis=leaked,
            mode="netns",
            runtime="kubelet",
            wall_s=time.monotonic() - self.t0,
            scale_out_s=scale_out_s,
            scale_down=down,
            node_pools=pools,
            notes=self.notes,
            dataplane=packets,
        ).to_json()
        report["cluster_timings_s"] = {k: round(v, 1) for k, v in c.timings.items()}
        report["foreign_addresses"] = sum(1 for p in records if p.last_error == "not on its node's ENIs")
        return report

    def _node_ready(self, c: Any, name: str) -> bool:
        return is_ready(c.get("node", name))

    def _agents_ready(self, c: Any) -> list[dict[str, Any]] | None:
        items = c.get("pods", "-n", "kube-system", "-l", "app.kubernetes.io/name=warmpool-agent")["items"]
        ready = [p for p in items if is_ready(p)]
        return ready if len(ready) == len(c.nodes) else None

    def _running(self, c: Any, replicas: int) -> list[dict[str, Any]] | None:
        pods: list[dict[str, Any]] = c.get("pods", "-l", f"app={APP}")["items"]
        ok = [p for p in pods if p["status"].get("phase") == "Running" and p["status"].get("podIP") and is_ready(p)]
        return ok if len(ok) == replicas else None

    def _records(self, c: Any, pods: Sequence[Mapping[str, Any]]) -> list[DemoPod]:
        """The demo's per-pod records: node, namespace, address as the API server and the pod's
        own ``eth0`` show it, created and Ready times."""
        by_name = {node.name: node for node in c.nodes}
        netns = {node.index: sandboxes(node) for node in c.nodes}
        records = []
        count: dict[int, int] = {}
        for p in sorted(pods, key=lambda p: (p["spec"]["nodeName"], p["metadata"]["name"])):
            node = by_name[p["spec"]["nodeName"]]
            ip = str(p["status"]["podIP"])
            k = count[node.index] = count.get(node.index, -1) + 1
            ns = netns[node.index].get(ip, "")
            times = ready_latency(p)
            rec = DemoPod(node.index, k, ns, str(p["metadata"]["uid"]), ip=ip)
            if times is not None:
                rec.first_add_at, rec.ready_at = times
            rec.kernel_ip = eth0_address(ns) if ns else None
            records.append(rec)
        return records

    def _check_addresses(self, c: Any, records: Sequence[DemoPod]) -> None:
        """Every address on its own node's ENIs as the emulated EC2 holds them."""
        for node in c.nodes:
            mine = c.eni_addresses_of(node)
            for rec in records:
                if rec.node == node.index and rec.ip not in mine:
                    rec.last_error = "not on its node's ENIs"
                    self.notes.append(f"pod {rec.container_id} on {node.name} has {rec.ip}, not on its node's ENIs")

    def _scale_down(self, c: Any, records: list[DemoPod]) -> dict[str, Any]:
        o = self.o
        keep = o.nodes * o.keep_per_node
        before = sum(c.demo.pool_addresses(n) for n in c.demo.nodes)
        self.say(f"scale-down: Deployment {APP} {len(records)} -> {keep}")
        c.kubectl("scale", "deployment", APP, f"--replicas={keep}")
        left = self._wait(
            f"{keep} pods left",
            lambda: (
                ps
                if len(ps := c.get("pods", "-l", f"app={APP}")["items"]) == keep
                and all(p["status"].get("phase") == "Running" for p in ps)
                else None
            ),
            180,
        )
        uids = {p["metadata"]["uid"] for p in left}
        for rec in records:
            rec.deleted = rec.container_id not in uids
        kept = {n.index: sum(1 for r in records if r.node == n.index and not r.deleted) for n in c.nodes}
        start = time.monotonic()
        settled = False
        while time.monotonic() - start < o.settle_timeout_s + 60:
            if self.stop.is_set():
                raise Interrupted
            if all(c.demo._settled(made, kept[made.k]) for made in c.demo.nodes):
                settled = True
                break
            self.stop.wait(1.0)
        took = time.monotonic() - start
        after = sum(c.demo.pool_addresses(n) for n in c.demo.nodes)
        self.say(
            f"scale-down: addresses on the nodes {before} -> {after}"
            + (f", settled in {took:.1f} s" if settled else f", not settled after {took:.0f} s")
        )
        if not settled:
            self.notes.append(f"pools had not settled to their targets {took:.0f} s after the scale-down")
        return {
            "deleted": sum(1 for r in records if r.deleted),
            "kept": sum(kept.values()),
            "addresses_before": before,
            "addresses_after": after,
            "settled": settled,
            "settle_s": round(took, 3),
        }
