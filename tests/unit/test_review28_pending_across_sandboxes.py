"""Review 28 of stop 49's runtime (containerd and kubelet): the agent's pending demand across a
pod's sandboxes.

A pod whose ADD finds no address: containerd's ``RunPodSandbox`` DELs the failed sandbox at once,
and kubelet makes the pod's next sandbox (a new container id) 10 to 15 s later
(``pkg/kubelet/pod_workers.go``). The DEL forgets the waiting ADD (``Datastore.release`` pops its
``_pending`` entry), so for the back-off, about half of each cycle, ``pending()`` is 0 while the
pod still waits: the report sent when the count falls (its signature changes) says no pod waits.
The allocator ranks starved nodes first by that figure (``warmpool.scheduling.priority_key``:
``pending_demand > 0``), and the report back-off is reset on an ``unmet`` answer only while it is
above 0 (``PoolController._answered``, review 25 K1). The traced seed 183 showed the count
alternating 1/0 while pods waited.

Fixed: the runtime names the pod in ``CNI_ARGS`` (``K8S_POD_NAMESPACE``, ``K8S_POD_NAME``); a waiting
ADD counts its pod once, and a DEL of its sandbox leaves the pod counted for
``datastore.PENDING_LINGER_S`` (``Datastore.pending``)."""

from __future__ import annotations

from pathlib import Path

from node_agent.controller import AttachedEni
from tests.helpers.agent_world import cni, cni_add, give
from tests.helpers.controller import PRIMARY
from tests.helpers.first_start import Node, grant
from warmpool.messages import AllocationResult, Failed, PoolReport

ADD_WAIT_S = 10.0  # the agent's add_wait_s default: the failed ADD is in flight this long
BACKOFF_S = 12.0  # kubelet's back-off, within its 10-15 s
POD = "default/pod2"


def _answer(r: PoolReport) -> AllocationResult:
    return AllocationResult(
        cluster=r.cluster,
        node=r.node,
        instance_id=r.instance_id,
        in_reply_to=r.seq,
        actions=[Failed(code="unmet", message="1 units: subnets full")],
    )


def test_every_report_while_a_pod_waits_through_its_sandboxes_says_it_waits(tmp_path: Path) -> None:
    n = Node(tmp_path, adopt_launch_pool=False)
    try:
        n.imds.enis[PRIMARY.eni_id] = AttachedEni(PRIMARY, [], [])  # no launch pool
        agent = n.start()
        grant(n, agent, ["10.0.0.50"])
        assert cni_add(agent, "pod1") == "10.0.0.50", "setup: pod1 has the node's one address"
        said: list[tuple[float, int]] = []
        t, sandbox, started = 0.0, 0, 0.0
        while t < 300.0:
            cid = f"pod2~{sandbox}"
            if started <= t < started + ADD_WAIT_S and (t - started) % 5.0 == 0.0:
                assert cni_add(agent, cid, POD) is None, "setup: pod2 still waits"
            elif t == started + ADD_WAIT_S:  # the ADD failed: containerd's DEL at once
                assert cni(agent, "DEL", cid, pod=POD)["ok"]
                sandbox, started = sandbox + 1, t + BACKOFF_S
            seen = len(n.sqs.reports())
            n.step(1.0)
            t += 1.0
            for r in n.sqs.reports()[seen:]:
                said.append((t, r.pending_demand))
                give(agent, _answer(r))
        assert sandbox >= 8, "setup: pod2's sandboxes cycled"
        assert said, "setup: no report"
        zero = [at for at, p in said if at > 1.0 and not p]
        assert not zero, f"reports saying no pod waits while pod2 waited, at {zero} (all: {said})"
    finally:
        n.stop()
