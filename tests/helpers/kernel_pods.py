"""The host's pod wiring as the kernel keeps it, for the fourteenth review's tests: each pod's veth
pair (its namespace side carries the pod's address while the pair exists), the ``/32`` routes in
main and the ``to <ip>`` pod rules (priority 512), each of which can go on its own.

What it models, and where from:

* ``setup`` does what ``node_agent.hostnet.setup_pod`` does: the veth pair (host side
  ``host_veth_name``), the ``/32`` route via it (``route replace``: one route per address), the pod
  rule.
* ``teardown`` does what ``node_agent.hostnet.teardown_pod`` does: the attachment's own veth goes
  (the kernel removes its peer with it, ``drivers/net/veth.c::veth_dellink``, and every route
  through it), then, with an address given, every pod rule and every ``/32`` route in main *for
  that address*, whatever link or pod they belong to.
* ``flush_routes`` / ``flush_rules``: the routes or the rules go while the veths stay (a veth set
  down loses its IPv4 routes; systemd-networkd's ``ManageForeignRoutes`` and
  ``ManageForeignRoutingPolicyRules``, both on by default, drop what it did not configure:
  aws/amazon-vpc-cni-k8s#1600, awslabs/amazon-eks-ami#1738).
* ``host_wiring`` reads it as ``node_agent.hostnet.wired_pods`` reads the kernel.
* ``holders(ip)``: the attachments whose namespace carries ``ip`` (their veth exists), whatever
  the host routes: two of them is two pods with one address.
"""

from __future__ import annotations

import shutil
from collections.abc import Collection, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from node_agent.hostnet import HostWiring, PodNet, host_veth_name, note_setup_left
from node_agent.netlink import NetlinkFailure
from tests.helpers.agent_world import WiredPods, cni, cni_add, give
from tests.helpers.controller import PRIMARY
from tests.helpers.first_start import IPS, Node, add_until, grant
from tests.helpers.restore import restore_answer
from warmpool.messages import AllocationResult, Assigned, Released


class KernelPods(WiredPods):
    """Host wiring that survives agent restarts (the node's kernel). ``wired``: the veth pairs,
    attachment -> the address its namespace side carries."""

    def __init__(self, made_with: str = "eni") -> None:
        super().__init__()
        self.made_with = made_with
        """The veth prefix the agent that wires the next pods uses."""
        self.reader = made_with
        """The veth prefix of the agent that reads the wiring (``wired_pods``' ``veth_prefix``)."""
        self.veth_of: dict[tuple[str, str], str] = {}
        self.routes: dict[str, str] = {}
        """``/32`` routes in main: address -> the link it goes through."""
        self.rules: set[str] = set()
        """Addresses with a ``to <ip> lookup main`` rule at priority 512."""

    def setup(self, netns: str, ifname: str, container_id: str, ip: str, table: int, mtu: int) -> PodNet:
        veth = host_veth_name(container_id, ifname, self.made_with)
        self.wired[(container_id, ifname)] = ip
        self.veth_of[(container_id, ifname)] = veth
        self.routes[ip] = veth
        self.rules.add(ip)
        return PodNet(veth, "02:00:00:00:00:01", "02:00:00:00:00:02", 2)

    def teardown(self, container_id: str, ifname: str, ip: str | None) -> None:
        key = (container_id, ifname)
        if ip:  # the address's rules and route first, the pair last, as ``teardown_pod``
            self.rules.discard(ip)
            self.routes.pop(ip, None)
        veth = self.veth_of.pop(key, None)
        self.wired.pop(key, None)
        if veth is not None:
            self.routes = {a: link for a, link in self.routes.items() if link != veth}

    def carried(self, netns: str, ifname: str, container_id: str) -> list[str] | None:
        """As ``node_agent.hostnet.pod_addresses``: what the pod's side of the reading agent's veth
        of the attachment carries; None with no such pair."""
        return self.carried_under(netns, ifname, container_id, self.reader)

    def carried_under(self, netns: str, ifname: str, container_id: str, veth_prefix: str) -> list[str] | None:
        """:meth:`carried` for the attachment's veth under ``veth_prefix`` (an earlier prefix's)."""
        key = (container_id, ifname)
        if self.veth_of.get(key) != host_veth_name(container_id, ifname, veth_prefix):
            return None
        return [self.wired[key]] if key in self.wired else []

    def peers_carried(self, veths: Collection[str]) -> dict[str, list[str]]:
        """As ``NetlinkPods.peers_carried``: what the pod-side peer of each of ``veths`` carries
        (every pod's namespace pinned where the agent looks)."""
        return {
            veth: [self.wired[key]] if key in self.wired else [] for key, veth in self.veth_of.items() if veth in veths
        }

    def flush_routes(self) -> None:
        self.routes.clear()

    def flush_rules(self) -> None:
        self.rules.clear()

    def holders(self, ip: str) -> list[tuple[str, str]]:
        return sorted(k for k, a in self.wired.items() if a == ip)

    def host_wiring(self) -> HostWiring:
        prefix = self.reader
        veths = set(self.veth_of.values())
        pods = {ip: link for ip, link in self.routes.items() if link.startswith(prefix)}
        return HostWiring(
            pods=pods,
            stale=sorted(self.rules - set(pods)),
            routed=frozenset(self.routes),
            links=frozenset({"ens5", *veths}),
            routed_via=dict(self.routes),
            veths=frozenset(veths),
        )


def answered_start(n: Node, current: bool, backup: Path | None = None, **env: str) -> Any:
    """``n``'s agent started again (on the checkpoint copy ``backup`` when given, else on its own
    state), its restore check answered ``current`` or not."""
    n.stop()
    if backup is not None:
        shutil.rmtree(n.state)
        shutil.copytree(backup, n.state)
    agent = n.start(**env)
    r = n.step()
    assert r is not None and r.restored_from is not None, "setup: the restored start asks the allocator"
    give(agent, restore_answer(r, r.restored_from, current))
    n.step()
    assert agent.ds.withheld is False
    return agent


def contradicted_start(n: Node, backup: Path, **env: str) -> Any:
    """``n``'s agent started again on the checkpoint copy ``backup``, which lists a pod with an
    address its interface no longer carries (the pod ADDed again since): the start must not take
    it (``node_agent.agent.carried_disagreements``) and rebuilds, asking the allocator nothing."""
    n.stop()
    shutil.rmtree(n.state)
    shutil.copytree(backup, n.state)
    agent = n.start(**env)
    r = n.step()
    assert r is None or r.restored_from is None, "a copy the pods' interfaces contradict was taken"
    n.step()
    return agent


def offered_within(n: Node, passes: int) -> set[str]:
    """``passes`` passes 30 s apart: what the reports offered back."""
    offered: set[str] = set()
    for _ in range(passes):
        r = n.step(30)
        if r is not None:
            offered |= {ip for o in r.release for ip in o.ips}
    return offered


@contextmanager
def writes_fail(agent: Any) -> Iterator[None]:
    """Every checkpoint write of ``agent`` fails (ENOSPC) inside the block."""
    store = agent.ds._store
    save = store.save

    def enospc(_snapshot: Any) -> None:
        raise OSError(28, "No space left on device")

    store.save = enospc
    try:
        yield
    finally:
        store.save = save


def offers_and_adds(n: Node, agent: Any, passes: int = 6) -> tuple[set[str], list[str | None]]:
    """``passes`` passes 30 s apart, a new pod ADDed after each: what the reports offered back and
    what the new pods got."""
    offered: set[str] = set()
    others: list[str | None] = []
    for k in range(passes):
        r = n.step(30)
        if r is not None:
            offered |= {ip for o in r.release for ip in o.ips}
        others.append(cni_add(agent, f"new{k}"))
    return offered, others


def copy_then_deleted(n: Node, backup: Path, ip: str, cid: str = "old", **env: str) -> Any:
    """``n``'s agent started (with ``env``), granted ``ip``, which pod ``cid`` gets; 30 s on, the
    node's state copied to ``backup`` (``cid`` holds ``ip`` in it), then ``cid`` DELeted. The agent."""
    agent = n.start(**env)
    grant(n, agent, [ip])
    assert add_until(n, agent, cid) == ip
    n.step(30)
    shutil.copytree(n.state, backup)  # the older copy: cid holds ip
    assert cni(agent, "DEL", cid)["ok"]
    return agent


def assert_not_given(n: Node, agent: Any, ip: str, carrier: str, why: str) -> None:
    """Six passes with a new pod ADDed after each: ``ip`` (which pod ``carrier`` still carries)
    neither offered back nor given to a new pod."""
    offered, others = offers_and_adds(n, agent)
    assert n.pods.holders(ip) == [(carrier, "eth0")], f"setup: {carrier} still carries {ip}"  # type: ignore[attr-defined]
    assert ip not in offered and ip not in others, f"{ip}: {carrier} carries it; {why} (new pods: {others})"


class FailingPods(KernelPods):
    """:class:`KernelPods` whose set-up of the attachments in ``half`` stops after the veth pair
    (made, or the one there before) and the pod's address (its host route fails), of those in
    ``early`` fails before it looks at anything (the pod's namespace cannot be opened), and whose
    teardown of those in ``stuck`` fails before anything is removed. Each failed set-up says what it
    left, as ``node_agent.hostnet.setup_pod`` does."""

    def __init__(self) -> None:
        super().__init__()
        self.half: set[str] = set()
        self.early: set[str] = set()
        self.stuck: set[str] = set()

    def setup(self, netns: str, ifname: str, container_id: str, ip: str, table: int, mtu: int) -> PodNet:
        if container_id in self.early:
            exc = NetlinkFailure(2, f"{netns}: No such file or directory")
            note_setup_left(exc, made_pair=False, addressed=False)
            raise exc
        if container_id in self.half:
            veth = host_veth_name(container_id, ifname, self.made_with)
            made = self.veth_of.get((container_id, ifname)) != veth
            self.veth_of[(container_id, ifname)] = veth
            self.wired[(container_id, ifname)] = ip
            exc = NetlinkFailure(105, "route add: No buffer space available")
            note_setup_left(exc, made_pair=made, addressed=True)
            raise exc
        return super().setup(netns, ifname, container_id, ip, table, mtu)

    def teardown(self, container_id: str, ifname: str, ip: str | None) -> None:
        if container_id in self.stuck:
            raise NetlinkFailure(105, "link del: No buffer space available")
        super().teardown(container_id, ifname, ip)


def runtime_gc(agent: Any, valid: list[str]) -> dict[str, Any]:
    """A CNI GC of the ``warmpool`` network listing ``valid`` (their ``eth0``) as the runtime's."""
    conf = {
        "cniVersion": "1.1.0",
        "name": "warmpool",
        "type": "warmpool-cni",
        "cni.dev/valid-attachments": [{"containerID": c, "ifname": "eth0"} for c in valid],
    }
    return agent.cni.handle({"command": "GC", "config": conf})  # type: ignore[no-any-return]


def handed_back_after_the_copy(n: Node, backup: Path, x: str, y: str) -> None:
    """Review 15's Q1 set-up on a ``first_start.Node`` with :class:`KernelPods`: ``y`` offered in a
    report (``backup``: the copy taken then), handed back and given to pod1 (``x`` to p0); then every
    route and pod rule flushed, the veths left (pod1 carries ``y`` in its namespace)."""
    agent = n.start()
    first = n.step()
    assert first is not None
    to = {"cluster": first.cluster, "node": first.node, "instance_id": first.instance_id}
    eni = n.imds.enis[PRIMARY.eni_id]
    n.imds.enis[PRIMARY.eni_id] = eni._replace(ips=[ip for ip in eni.ips if ip not in IPS])
    n.imds.add(PRIMARY, [x, y])
    launch = Released(eni_id=PRIMARY.eni_id, ips=IPS)  # the launch pool, of unknown origin: unassigned
    give(
        agent,
        AllocationResult(**to, in_reply_to=first.seq, actions=[launch, Assigned(eni_id=PRIMARY.eni_id, ips=[x, y])]),
    )
    n.step()
    offer = None
    for _ in range(8):
        r = n.step(30)
        if r is not None and any(y in o.ips and not o.unknown for o in r.release):
            offer = r
            break
    assert offer is not None, "setup: the surplus y is offered"
    shutil.copytree(n.state, backup)  # the copy: y quarantined, offered in report `offer`
    give(agent, AllocationResult(**to, in_reply_to=offer.seq, actions=[Assigned(eni_id=PRIMARY.eni_id, ips=[y])]))
    n.step()  # y handed back
    assert add_until(n, agent, "p0") == x
    assert add_until(n, agent, "pod1") == y
    assert isinstance(n.pods, KernelPods)
    n.pods.flush_routes()  # pod1 and p0 run on: veths, their addresses in their namespaces
    n.pods.flush_rules()
