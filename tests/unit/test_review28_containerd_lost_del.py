"""Review 28 of stop 49's runtime model: what containerd does with a failed ADD whose DEL fails.

``RunPodSandbox`` (containerd ``internal/cri/server/sandbox_run.go``) DELs a failed ADD at once; when
that DEL fails as well and the sandbox has no CNI result, the failure is ignored (``cleanupErr``
reset to nil), the namespace removed (its veth pair with it) and the sandbox forgotten: kubelet got
no sandbox id, makes the pod's next sandbox (a new container id) and never DELs the old one.
containerd sends no CNI GC (docs/safety.md, "containerd's order, no CNI GC"). A failed ADD whose
teardown failed is held for its veth until its DEL or GC (``CniService._hold_for_veth``); the DEL
that comes at once meets the same netlink trouble (``ENOBUFS``), and none comes again.

Fixed so in stop 49 (``CniService.reap_gone_failed_holds``; the strict xfail removed)."""

from __future__ import annotations

from pathlib import Path

from tests.helpers.agent_world import cni
from tests.helpers.first_start import Node, add_until, grant_more, pod_on_fresh_address
from tests.helpers.kernel_pods import FailingPods, offers_and_adds

Y, Z = "10.0.0.51", "10.0.0.52"


def test_the_hold_of_a_failed_add_containerd_forgot_ends_without_a_restart(tmp_path: Path) -> None:
    n = Node(tmp_path, adopt_launch_pool=False)
    host = n.pods = FailingPods()
    try:
        pod_on_fresh_address(n)
        agent = n.agent
        grant_more(n, agent, [Y, Z])
        host.half.add("pod2")
        host.stuck.add("pod2")
        assert not cni(agent, "ADD", "pod2")["ok"], "setup: the set-up fails after the pod's address"
        held = {h.ip for h in agent.ds.recovered_holders()}
        assert len(held) == 1, f"setup: the failed ADD's address held for its veth ({held})"
        (y,) = held
        assert not cni(agent, "DEL", "pod2")["ok"], "setup: containerd's DEL at once fails too"
        # containerd ignores it (no CNI result), removes the namespace: the pair and the routes via it go
        host.stuck.clear()
        host.half.clear()
        host.veth_of.pop(("pod2", "eth0"), None)
        host.wired.pop(("pod2", "eth0"), None)
        assert add_until(n, agent, "pod2~1") != y, "setup: the pod's next sandbox"
        assert cni(agent, "DEL", "pod2~1")["ok"]
        freed = False
        for _ in range(10):  # 30 minutes: 10 x 6 passes 30 s apart, a new pod ADDed after each
            offered, others = offers_and_adds(n, agent)
            if y in offered or y in others:
                freed = True
                break
        assert freed, f"{y}: held for pod2's veth, gone with its namespace, which nothing DELs or GCs"
    finally:
        n.stop()
