"""The demo's pods as bare network namespaces (``--runtime netns``, and plain mode
without namespaces): the demo plays the container runtime and invokes ``warmpool-cni``
as a runtime does (``CNI_*`` environment, the network configuration on stdin, run in
the node's namespace with ``ip netns exec``). The other runtime is
:mod:`demo.containerd`; :meth:`demo.run.Demo.add_pod` retries either like a kubelet.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

from demo import netns as nx
from demo.host import RUN_MARK
from demo.ports import CniHost, PodNode
from demo.report import DemoPod
from warmpool import names

CNI_CONF_NAME = "warmpool"


def cni_env(demo: CniHost, node: PodNode, pod: DemoPod, command: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "LANG", "LC_ALL")}
    env.update(
        {
            "CNI_COMMAND": command,
            "CNI_CONTAINERID": pod.container_id,
            "CNI_NETNS": nx.netns_path(pod.netns) if demo.mode == "netns" else "",
            "CNI_IFNAME": "eth0",
            "CNI_PATH": str(Path(demo.cni_plugin).parent),
            RUN_MARK: str(os.getpid()),
            "CNI_ARGS": (
                f"K8S_POD_NAMESPACE=default;K8S_POD_NAME={pod.netns};K8S_POD_INFRA_CONTAINER_ID={pod.container_id}"
            ),
            names.AGENT_ENV_SOCKET: node.socket,
        }
    )
    if demo.mode == "plain" and command == "ADD":
        env["CNI_NETNS"] = f"/var/run/netns/{pod.netns}"
    return env


def cni(
    demo: CniHost, node: PodNode, pod: DemoPod, command: str, timeout_s: float = 90.0
) -> tuple[int, dict[str, Any]]:
    """One plugin invocation as a runtime makes it; (exit code, parsed stdout)."""
    conf = {"cniVersion": "1.0.0", "name": CNI_CONF_NAME, "type": "warmpool-cni", "socket": node.socket}
    argv = [demo.cni_plugin]
    if demo.mode == "netns":
        argv = ["ip", "netns", "exec", node.ns, *argv]
    p = subprocess.Popen(
        argv,
        env=cni_env(demo, node, pod, command),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    with demo.tracked(p):
        try:
            out, err = p.communicate(json.dumps(conf).encode(), timeout=timeout_s)
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
    try:
        body = json.loads(out) if out.strip() else {}
    except ValueError:
        body = {"msg": out.decode(errors="replace")[:200]}
    if p.returncode != 0 and not body:
        body = {"msg": err.decode(errors="replace")[-300:]}
    return p.returncode, body if isinstance(body, dict) else {}


def prepare(demo: CniHost, pod: DemoPod) -> None:
    """The pod's namespace, before its first ADD (the runtime's sandbox)."""
    if demo.mode == "netns":
        nx.add_namespace(pod.netns)


def try_add(demo: CniHost, node: PodNode, pod: DemoPod) -> bool:
    """One ADD; on success the pod's address as the plugin said and as its ``eth0`` has it."""
    code, body = cni(demo, node, pod, "ADD")
    if code == 0:
        pod.ready_at = time.monotonic()
        ips = body.get("ips") or []
        pod.ip = str(ips[0]["address"]).split("/")[0] if ips else None
        pod.kernel_ip = nx.address_of(pod.netns) if demo.mode == "netns" else None
        return True
    pod.last_error = f"{body.get('code', '?')}: {body.get('msg', '')}"
    return False


def del_pod(demo: CniHost, node: PodNode, pod: DemoPod) -> None:
    """DEL, then the pod's namespace goes."""
    code, body = cni(demo, node, pod, "DEL", timeout_s=30.0)
    if code != 0:
        pod.last_error = f"DEL {body.get('code', '?')}: {body.get('msg', '')}"
    pod.deleted = True
    if demo.mode == "netns":
        nx.delete_namespace(pod.netns)
