"""The demo's pods as containerd sandboxes: the hook :mod:`demo.run` calls when
containerd is installed (``runtime == "containerd"``).

One containerd per node, started in the node's network namespace
(:class:`demo.runtime_containerd.NodeRuntime`); a pod is a CRI sandbox made with
RunPodSandbox, so the runtime — not the demo — calls ``warmpool-cni`` (ADD on
RunPodSandbox, DEL on StopPodSandbox and again on RemovePodSandbox, as the
kubelet's path does). A failed RunPodSandbox is retried like a bare-namespace ADD
(:meth:`demo.run.Demo.add_pod`).
"""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor

from demo import netns as nx
from demo.ports import ContainerdHost, PodNode
from demo.report import DemoPod
from demo.runtime_containerd import NodeRuntime, cleanup_run, remove_default_state
from demo.runtime_cri import CriError
from demo.runtime_image import build_image


def start(demo: ContainerdHost) -> None:
    """One containerd per node, each with the local busybox image imported; in parallel."""
    image = build_image(demo.run_dir / "busybox-oci.tar")
    for node in demo.nodes:
        demo.node_rt[node.k] = NodeRuntime(
            demo.run_dir / "c" / str(node.k), node.ns, demo.cni_plugin, node.socket, image, demo.run_dir
        )
    t0 = time.monotonic()
    with ThreadPoolExecutor(max_workers=max(1, len(demo.nodes))) as pool:
        for f in [pool.submit(rt.start) for rt in demo.node_rt.values()]:
            f.result()
    demo.say(
        f"{len(demo.nodes)} containerd instances ready in {time.monotonic() - t0:.1f}s "
        f"(one per node namespace; CNI config: warmpool-cni, cniVersion 1.0.0)"
    )


def prepare(demo: ContainerdHost, pod: DemoPod) -> None:
    """Nothing before the first RunPodSandbox: containerd makes the pod's namespace."""


def try_add(demo: ContainerdHost, node: PodNode, pod: DemoPod) -> bool:
    """One RunPodSandbox; on success the pod's IP from PodSandboxStatus and its eth0."""
    try:
        sb = demo.node_rt[node.k].run_pod(f"demo-{node.k}-{pod.index}", f"wp-demo-{node.k}-{pod.index}")
    except CriError as e:
        pod.last_error = e.details[-300:]
        return False
    pod.ready_at = time.monotonic()
    pod.container_id = sb.id
    pod.ip = sb.ip or None
    pod.netns = os.path.basename(sb.netns)
    pod.kernel_ip = nx.address_of(pod.netns) if demo.mode == "netns" else None
    return True


def del_pod(demo: ContainerdHost, node: PodNode, pod: DemoPod) -> None:
    """StopPodSandbox and RemovePodSandbox (the runtime calls DEL)."""
    try:
        demo.node_rt[node.k].remove_pod(pod.container_id)
    except CriError as e:
        pod.last_error = f"DEL {e.details[-300:]}"
    pod.deleted = True


def teardown(demo: ContainerdHost) -> None:
    """Every sandbox removed (DELs while the agents still run), then every containerd."""
    with ThreadPoolExecutor(max_workers=max(1, len(demo.node_rt))) as pool:
        for f in [pool.submit(rt.stop) for rt in demo.node_rt.values()]:
            try:
                f.result()
            except Exception as e:  # teardown goes on
                demo.say(f"warmpool demo: stopping containerd: {e}")
    demo.node_rt.clear()
    for what in cleanup_run(demo.run_dir):  # anything a stopped containerd could not take with it
        demo.say(f"warmpool demo: removed {what}")
    remove_default_state()
