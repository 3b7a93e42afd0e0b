"""The first-start tests' shared pieces (docs/safety.md, row 30): a node booted with addresses on
its primary ENI whose agent restarts on a state directory, the allocator's answer to its ask, and
the allocator's side of an ask (tests/unit/test_first_start.py, tests/integration/test_allocate_first_start.py
and the hostile review's tests). The node is the restore check's too (docs/safety.md, row 12:
tests/unit/test_restore_check.py and its reviews; the rest of theirs is in tests/helpers/restore.py)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from emulated.clock import VirtualClock
from emulated.ec2 import Ec2Config
from node_agent.hostnet import HostWiring, host_veth_name
from tests.helpers.agent_world import MemorySqs, WiredPods, make_agent
from tests.helpers.allocate_world import AllocatorWorld
from tests.helpers.controller import PRIMARY, FakeImds
from warmpool.messages import AllocationResult, PoolReport, RestoreChecked

IPS = ["10.0.0.11", "10.0.0.12", "10.0.0.13", "10.0.0.14"]
T0 = 1_000_000.0


class Node:
    """One node booted with IPS on its primary ENI; its agent restartable on a state directory
    that outlives it. ``adopt_launch_pool=False`` (the restore check's tests): the agent's own
    default for ``WARMPOOL_ADOPT_LAUNCH_POOL`` (off), not the first-start tests' ``true``."""

    def __init__(self, tmp_path: Path, *, adopt_launch_pool: bool = True) -> None:
        self.imds = FakeImds()
        self.imds.add(PRIMARY, IPS)
        self.clock = VirtualClock(T0)
        self.sqs = MemorySqs(VirtualClock(T0))
        self.pods = WiredPods()
        self.state = tmp_path / "state"
        self.agent: Any = None
        self.adopt_launch_pool = adopt_launch_pool

    def start(self, **env: str) -> Any:
        """Started with ``WARMPOOL_ADOPT_LAUNCH_POOL=true`` unless ``env`` says otherwise (or the
        node was made with ``adopt_launch_pool=False``: then with ``env`` alone)."""
        if self.adopt_launch_pool:
            env = {"WARMPOOL_ADOPT_LAUNCH_POOL": "true", **env}
        self.agent = make_agent(self.state, self.imds, self.sqs, self.clock, self.pods, **env)
        return self.agent

    def stop(self) -> None:
        if self.agent is not None:
            self.agent.stop()
            self.agent = None

    def lose_checkpoint(self) -> None:
        self.stop()
        shutil.rmtree(self.state)

    def step(self, s: float = 2.0) -> PoolReport | None:
        """Time passes, one pass of the loop; the report it sent, if any."""
        before = len(self.sqs.sent)
        self.clock.advance(s)
        self.agent.run_once()
        return self.sqs.reports()[-1] if len(self.sqs.sent) > before else None

    def meta(self) -> dict[str, Any]:
        return dict(json.loads((self.state / "checkpoint.json").read_text())["meta"])

    def last_seq_on_disk(self) -> int:
        return int(self.meta()["last_seq"])


def started_node(tmp_path: Path) -> Iterator[Node]:
    """A :class:`Node` for a fixture, stopped after the test."""
    n = Node(tmp_path)
    try:
        yield n
    finally:
        n.stop()


def answer(report: PoolReport, confirmed: bool, *, wait: str | None = None) -> AllocationResult:
    return AllocationResult(
        cluster=report.cluster,
        node=report.node,
        instance_id=report.instance_id,
        in_reply_to=report.seq,
        actions=[
            RestoreChecked(
                restored_from=0,
                wait=wait or report.restore_wait or "",
                current=confirmed,
                epoch=(report.epoch or 0) + 1,
            )
        ],
    )


WAIT = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
LATER = "cccccccccccccccccccccccccccccccc"


def booted_world() -> tuple[AllocatorWorld, str, list[str]]:
    """n1 booted with six secondaries on its primary ENI (a launch template's), no pod."""
    w = AllocatorWorld(ec2_config=Ec2Config())
    w.add_node("n1", "m5.large")
    w.tag_primary("n1")
    eni = w.enis("n1")[0].id
    w.emu.client().assign_private_ip_addresses(NetworkInterfaceId=eni, SecondaryPrivateIpAddressCount=6)
    return w, eni, list(w.enis("n1")[0].secondary)


def ask(w: AllocatorWorld, eni: str, ips: list[str], wait: str = WAIT, **kw: Any) -> Any:
    """A first start's report: what IMDS shows offered, of unknown origin, and the ask."""
    offer = {"eni_id": eni, "ips": ips, "unknown": True, "quarantined_at": w.clock.now() - 5}
    extra = {"restored_from": 0, "restore_wait": wait, "first_start": True, **kw.pop("extra", {})}
    return w.report("n1", warm_ip=1, release=[offer], extra=extra, **kw)


def grant(n: Node, agent: Any, ips: list[str]) -> None:
    """One pass, then ``ips`` granted on the primary ENI in reply to its report (IMDS listing
    them), then another pass."""
    from tests.helpers.agent_world import give
    from tests.helpers.controller import PRIMARY
    from warmpool.messages import AllocationResult, Assigned

    first = n.step()
    assert first is not None
    n.imds.add(PRIMARY, ips)
    give(
        agent,
        AllocationResult(
            cluster=first.cluster,
            node=first.node,
            instance_id=first.instance_id,
            in_reply_to=agent.controller.last_seq,
            actions=[Assigned(eni_id=PRIMARY.eni_id, ips=ips)],
        ),
    )
    n.step()


def grant_more(n: Node, agent: Any, ips: list[str]) -> None:
    """30 s on, ``ips`` granted on the primary ENI in reply to the agent's latest report (IMDS
    listing them), then another pass: :func:`grant` when this pass may send no report."""
    from tests.helpers.agent_world import give
    from tests.helpers.controller import PRIMARY
    from warmpool.messages import AllocationResult, Assigned

    n.step(30)
    last = n.sqs.reports()[-1]
    n.imds.add(PRIMARY, ips)
    give(
        agent,
        AllocationResult(
            cluster=last.cluster,
            node=last.node,
            instance_id=last.instance_id,
            in_reply_to=agent.controller.last_seq,
            actions=[Assigned(eni_id=PRIMARY.eni_id, ips=ips)],
        ),
    )
    n.step()


def add_until(n: Node, agent: Any, cid: str) -> str:
    """ADD ``cid`` until it gets an address (5 s between tries); the address."""
    from tests.helpers.agent_world import cni_add

    for _ in range(40):
        got = cni_add(agent, cid)
        if got is not None:
            return got
        n.step(5)
    raise AssertionError(f"setup: {cid} never got an address")


def pod_on_fresh_address(n: Node, **env: str) -> str:
    """Start ``n``'s agent (with ``env``), grant it one address (10.0.0.50, IMDS listing it) and
    ADD a pod until it gets one; the pod's address."""
    agent = n.start(**env)
    grant(n, agent, ["10.0.0.50"])
    return add_until(n, agent, "pod1")


class PrefixedWiring(WiredPods):
    """The host's wiring as ``node_agent.hostnet.wired_pods`` reads it: veths keep the prefix
    they were made with (``made``); only those of the reading agent's prefix are ``pods``."""

    def __init__(self) -> None:
        super().__init__()
        self.made = "eni"
        self.reader = "eni"

    def host_wiring(self) -> HostWiring:
        veths = {ip: host_veth_name(c, i, self.made) for (c, i), ip in self.wired.items()}
        pods = {ip: v for ip, v in veths.items() if v.startswith(self.reader)}
        return HostWiring(
            pods=pods,
            stale=sorted(set(veths) - set(pods)),
            routed=frozenset(veths),
            links=frozenset(veths.values()),
            routed_via=veths,
            veths=frozenset(veths.values()),
        )


def pod_then_older_copy(n: Node, agent: Any, wiring: PrefixedWiring, backup: Path) -> tuple[Any, set[str], list[Any]]:
    """After a grant given to ``agent``: ADD a pod until it gets an address, then restore the older
    checkpoint copy ``backup`` with the agent back under another veth prefix ("wp"), and run past
    ``RESTORE_WAIT_S`` with no answer, a new pod ADDed each step. The pod's address, what the
    reports offered, and what the new pods got."""
    from tests.helpers.agent_world import cni_add

    n.step()
    got = None
    for _ in range(40):
        got = cni_add(agent, "pod1")
        if got is not None:
            break
        n.step(5)
    n.stop()
    shutil.rmtree(n.state)
    shutil.copytree(backup, n.state)
    wiring.reader = "wp"
    agent = n.start(WARMPOOL_VETH_PREFIX="wp")
    offered: set[str] = set()
    others: list[Any] = []
    for k in range(8):
        r = n.step(30)
        if r is not None:
            offered |= {ip for o in r.release for ip in o.ips}
        others.append(cni_add(agent, f"new{k}"))
    return got, offered, others
