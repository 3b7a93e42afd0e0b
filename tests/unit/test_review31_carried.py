"""Review 31: the start's read of what each listed pod's interface carries
(``node_agent.agent.carried_disagreements``, stop 50, seed 1001262), where it says nothing.

The shape of seed 1001262 throughout: pod1 held X in an older copy of the checkpoint; its
attachment was DELed and ADDed again since and got Y; X went back to the pool and EC2 gave it to
another node (IMDS no longer lists it); the host's pod routes and rules were flushed; the agent
restarts on the older copy. The check reads the pod's side of the attachment's veth and rebuilds
when it carries other addresses than the record's. Review 31 found where it said nothing (A1,
A3 and A4 fixed in ``node_agent.agent.carried_disagreements``, A2 in
``node_agent.agent.holder_disagreements``; each test a strict xfail before its fix):

* A1: the veth of the attachment under the prefix it was made with, once ``WARMPOOL_VETH_PREFIX``
  changed across the restart (``PodNetwork.carried`` looks only under the current prefix, while
  ``teardown_pod`` and the rebuild both know a veth of another prefix is the attachment's): now
  the attachment's veths of other prefixes among the host's are read too (``carried_under``);
* A2: a recovered holder named after the attachment's veth (``ds.pods()`` lists named records
  only), which the attachment's next ADD takes (``CniService._held``/``ds.assign(..., holder)``):
  the pod's interface was read through the pod's namespace, which a holder does not name. Now the
  peer of each holder's veth (one of the agent's the host has) is found among the namespaces the
  runtimes pin (``PodNetwork.peers_carried``: the link there paired with the veth) and read; one
  carrying anything but one of the addresses the copy gives the veth alone is a disagreement (the
  start rebuilds). Not taken (docs/safety.md): refusing every copy with such a holder whose veth
  lost its route (refuses copies the product makes), the pod rule as proof (it outlives its
  address's release);
* A3: anything, when the read fails with an ``OSError`` that is not the namespace gone (an
  interrupted dump, ``EINTR``; ``ENOBUFS``): the copy is taken on the spot, where
  ``read_wiring`` reads again and a start never goes on without its read (hostile review of the
  checkpoint checks, C2) -- fixed in stop 50: read again, and a read that keeps failing is a
  disagreement (the start rebuilds);
* A4: a pod whose interface carries the record's address beside another (a pod that set its old
  address again on its own interface: ``p.ip in has``): now anything but the record's address
  alone disagrees.

Unfixed, the copy is taken, X is kept for pod1 (or its veth) in this node's datastore while EC2
gave it to another node, and pod1's next ADD is given X: two holders."""

from __future__ import annotations

import errno
import shutil
from pathlib import Path
from typing import Any

from node_agent.agent import carried_disagreements
from node_agent.datastore import Datastore
from node_agent.hostnet import HostWiring, host_veth_name
from tests.helpers.agent_world import cni, cni_add
from tests.helpers.controller import PRIMARY
from tests.helpers.first_start import Node, grant_more, pod_on_fresh_address
from tests.helpers.kernel_pods import KernelPods
from tests.helpers.peers import FixedPeers, one_veth

X, Y = "10.0.0.50", "10.0.0.51"


def _readded_since_the_copy(n: Node, host: KernelPods, tmp_path: Path) -> Path:
    """pod1 on X in the copy; since: DELed, ADDed again on Y, X taken by EC2, routes and rules
    flushed. The copy's place."""
    agent = n.agent
    n.step(30)
    backup = tmp_path / "copy"
    shutil.copytree(n.state, backup)  # pod1 (or its veth's holder) holds X in this copy
    grant_more(n, agent, [Y])
    assert cni(agent, "DEL", "pod1")["ok"]
    assert cni_add(agent, "pod2") == X, "setup: another pod takes X meanwhile"
    assert cni_add(agent, "pod1") == Y, "setup: pod1's attachment ADDed again gets Y"
    assert cni(agent, "DEL", "pod2")["ok"]
    eni = n.imds.enis[PRIMARY.eni_id]
    n.imds.enis[PRIMARY.eni_id] = eni._replace(ips=[ip for ip in eni.ips if ip != X])  # EC2 took X
    host.flush_routes()
    host.flush_rules()
    return backup


def _restart_on(n: Node, backup: Path, **env: str) -> Any:
    n.stop()
    shutil.rmtree(n.state)
    shutil.copytree(backup, n.state)
    agent = n.start(**env)
    n.step()
    return agent


def test_a_prefix_change_hides_what_the_readded_pod_carries(tmp_path: Path) -> None:
    n = Node(tmp_path, adopt_launch_pool=False)
    host = n.pods = KernelPods()
    try:
        assert pod_on_fresh_address(n) == X
        backup = _readded_since_the_copy(n, host, tmp_path)
        assert host.carried("ns", "eth0", "pod1") == [Y]
        host.reader = "wp"  # the agent comes back under another veth prefix
        agent = _restart_on(n, backup, WARMPOOL_VETH_PREFIX="wp")
        held = {p.ip: p.container_id for p in agent.ds.pods()}
        again = cni_add(agent, "pod1")
        assert X not in held and again != X, (
            f"the copy's record of pod1 holding {X} was taken ({held}), pod1's next ADD got {again}: its"
            f" interface carries {Y} (its veth {host.veth_of[('pod1', 'eth0')]}), and EC2 gave {X} to another node"
        )
    finally:
        n.stop()


def test_a_recovered_holder_of_the_readded_pods_veth_is_not_read(tmp_path: Path) -> None:
    n = Node(tmp_path, adopt_launch_pool=False)
    host = n.pods = KernelPods()
    try:
        assert pod_on_fresh_address(n) == X
        # the checkpoint lost once: the rebuild holds X for pod1's veth (its route), by name
        n.lose_checkpoint()
        agent = n.start()
        n.step()
        assert {h.ip: h.holder for h in agent.ds.recovered_holders()}.get(X) == host.veth_of[("pod1", "eth0")], (
            "setup: the rebuild holds X for pod1's veth"
        )
        backup = _readded_since_the_copy(n, host, tmp_path)
        agent = _restart_on(n, backup)
        kept = {h.ip: h.holder for h in agent.ds.recovered_holders()}
        again = cni_add(agent, "pod1")
        assert X not in kept and again != X, (
            f"the copy's holder of {X} for pod1's veth was taken ({kept}); pod1's next ADD got {again}"
            f" while its interface carries {Y} and EC2 gave {X} to another node"
        )
    finally:
        n.stop()


class _Interrupted(KernelPods):
    """The kernel's wiring, whose pod-side read of pod1 fails once, as an address dump the kernel
    interrupted (``NLM_F_DUMP_INTR`` on each of ``Netlink``'s tries: ``NetlinkFailure(EINTR)``)."""

    def __init__(self) -> None:
        super().__init__()
        self.fail = 0

    def carried(self, netns: str, ifname: str, container_id: str) -> list[str] | None:
        if self.fail and container_id == "pod1":
            self.fail -= 1
            raise OSError(errno.EINTR, "addr dump interrupted (NLM_F_DUMP_INTR) 3 times running")
        return super().carried(netns, ifname, container_id)


def test_one_interrupted_read_of_the_pod_lets_the_copy_through(tmp_path: Path) -> None:
    n = Node(tmp_path, adopt_launch_pool=False)
    host = n.pods = _Interrupted()
    try:
        assert pod_on_fresh_address(n) == X
        backup = _readded_since_the_copy(n, host, tmp_path)
        host.fail = 1  # the namespace is there, pod1's interface carries Y: one read fails
        agent = _restart_on(n, backup)
        held = {p.ip: p.container_id for p in agent.ds.pods()}
        assert host.fail == 0, "setup: the start read pod1's interface"
        again = cni_add(agent, "pod1")
        assert X not in held and again != X, (
            f"one failed read of pod1's interface and the copy was taken ({held}); pod1's next ADD got {again}"
        )
    finally:
        n.stop()


class _AlsoOld(KernelPods):
    """pod1's interface carries its old address beside the one it was given (the pod set it)."""

    def carried(self, netns: str, ifname: str, container_id: str) -> list[str] | None:
        has = super().carried(netns, ifname, container_id)
        return sorted({*has, X}) if has and container_id == "pod1" else has


def test_a_pod_carrying_its_old_address_too_passes_the_check(tmp_path: Path) -> None:
    n = Node(tmp_path, adopt_launch_pool=False)
    host = n.pods = _AlsoOld()
    try:
        assert pod_on_fresh_address(n) == X
        backup = _readded_since_the_copy(n, host, tmp_path)
        assert host.carried("ns", "eth0", "pod1") == [X, Y]
        agent = _restart_on(n, backup)
        held = {p.ip: p.container_id for p in agent.ds.pods()}
        again = cni_add(agent, "pod1")
        assert X not in held and again != X, (
            f"pod1 carries {Y} (its own) and {X} (set by itself); the copy was taken ({held}), its next ADD got {again}"
        )
    finally:
        n.stop()


class _Reads:
    """A pod network whose reads are counted: ``carried`` (this prefix) and ``carried_under``."""

    def __init__(self, under: dict[str, list[str]]) -> None:
        self.under = under
        self.reads: list[tuple[str, str | None]] = []

    def carried(self, netns: str, ifname: str, container_id: str) -> list[str] | None:
        self.reads.append((container_id, None))
        return None

    def carried_under(self, netns: str, ifname: str, container_id: str, veth_prefix: str) -> list[str] | None:
        self.reads.append((container_id, veth_prefix))
        return self.under.get(container_id)


def test_an_earlier_prefix_s_veth_is_read_only_for_its_own_attachment() -> None:
    """A1: each record is read under this prefix, and under another only when the host has the
    attachment's veth of that prefix (a veth of another pod, or of another CNI, is not read)."""
    ds = Datastore()
    ds.add_eni(PRIMARY, 0.0)
    ds.add_addresses(PRIMARY.eni_id, [X, Y, "10.0.0.52"])
    for cid in ("p", "q", "r"):
        assert ds.assign(cid, "eth0", f"/var/run/netns/{cid}", 1.0) is not None
    held = {p.container_id: p.ip for p in ds.pods()}
    veths = {host_veth_name("p", "eth0", "eni"), host_veth_name("q", "eth0", "eni"), "cali0123456789a"}
    wiring = HostWiring(pods={}, stale=[], links=frozenset(veths), veths=frozenset(veths))
    pods = _Reads({"p": [held["p"]], "q": ["10.0.0.99"]})
    wrong = carried_disagreements(ds, pods, wiring, "wp")
    assert wrong == [
        f"q/eth0 carries 10.0.0.99 (its veth {host_veth_name('q', 'eth0', 'eni')})"
        f" but the checkpoint has it holding {held['q']}"
    ]
    assert sorted(pods.reads, key=str) == sorted(
        [("p", None), ("p", "eni"), ("q", None), ("q", "eni"), ("r", None)], key=str
    )
    assert carried_disagreements(ds, pods, None, "wp") == []  # no host wiring read: this prefix only


def test_each_recovered_holder_of_an_agent_veth_is_read_by_its_peer() -> None:
    """A2's readings: a holder of this prefix's veth, or of an earlier prefix's, whose peer carries
    another address, or its own beside another, disagrees; its own address alone, the address of
    the attachment's own record, nothing, or a peer found nowhere says nothing; a veth the host
    lacks, another CNI's veth, and the rebuild's ``unknown``/``unrouted`` holders are not read."""
    ds = Datastore()
    ds.add_eni(PRIMARY, 0.0)
    ips = [f"10.0.0.{k}" for k in range(60, 72)]
    ds.add_addresses(PRIMARY.eni_id, ips)
    a = ds.assign("rec", "eth0", "/var/run/netns/rec", 1.0)
    assert a is not None
    v = {c: host_veth_name(c, "eth0", "eni") for c in ("moved", "both", "own", "empty", "nowhere", "rec", "gone")}
    earlier = host_veth_name("old", "eth0", "wp")  # an earlier prefix's veth (the agent reads as "eni")
    foreign = "cali0123456789a"  # another CNI's: not of the agent's shape, read never
    free = [ip for ip in ips if ip != a.ip]
    held = dict(zip([*v.values(), earlier, foreign], free, strict=False))
    held.pop(v["rec"])
    ds.recover({ip: holder for holder, ip in held.items()}, 2.0)
    ds.recover({free[9]: "unrouted", free[10]: "unknown"}, 2.0)
    ds.recover({free[8]: v["rec"]}, 2.0)  # the record's attachment's veth holds another address too
    veths = (set(v.values()) - {v["gone"]}) | {earlier, foreign}
    wiring = HostWiring(pods={}, stale=[], links=frozenset(veths), veths=frozenset(veths))
    pods = FixedPeers(
        {
            v["moved"]: ["10.0.0.99"],
            v["both"]: sorted([held[v["both"]], "10.0.0.99"]),
            v["own"]: [held[v["own"]]],
            v["empty"]: [],
            v["rec"]: [a.ip],
            earlier: ["10.0.0.98"],
            foreign: ["10.0.0.97"],
        }
    )
    wrong = carried_disagreements(ds, pods, wiring, "eni")
    assert sorted(wrong) == sorted(
        [
            f"the peer of veth {v['moved']} carries 10.0.0.99 but the checkpoint has it holding {held[v['moved']]}",
            f"the peer of veth {v['both']} carries {', '.join(sorted([held[v['both']], '10.0.0.99']))}"
            f" but the checkpoint has it holding {held[v['both']]}",
            f"the peer of veth {earlier} carries 10.0.0.98 but the checkpoint has it holding {held[earlier]}",
        ]
    )
    assert pods.asked == [sorted(veths - {foreign})], "the agent's veths the host has, read once"
    assert carried_disagreements(ds, pods, None, "eni") == [], "no host wiring read: no holder read"


def test_a_read_of_the_holders_peers_that_keeps_failing_makes_the_start_rebuild() -> None:
    """A3's rule for A2's read: failed, read again; failing every time, a disagreement."""
    ds, veth, wiring = one_veth([X])
    ds.recover({X: veth}, 1.0)
    once = FixedPeers({veth: [X]}, fail=2)
    assert carried_disagreements(ds, once, wiring, "eni") == [], "read again, it answers"
    always = FixedPeers({veth: [X]}, fail=3)
    wrong = carried_disagreements(ds, always, wiring, "eni")
    assert len(wrong) == 1 and "could not be read" in wrong[0], wrong


def test_a_copy_whose_holder_s_peer_carries_its_address_is_taken(tmp_path: Path) -> None:
    """The guard beside A2's fix (passes before it too): a copy written after a rebuild, restored
    while pod1 still carries the address its veth's holder holds (routes and rules flushed, so the
    host's routes cannot tell), is taken, not rebuilt; pod1's next ADD gets its own address."""
    n = Node(tmp_path, adopt_launch_pool=False)
    host = n.pods = KernelPods()
    try:
        assert pod_on_fresh_address(n) == X
        n.lose_checkpoint()
        agent = n.start()
        n.step()
        veth = host.veth_of[("pod1", "eth0")]
        assert {h.ip: h.holder for h in agent.ds.recovered_holders()}.get(X) == veth, "setup: held by veth"
        n.step(30)
        backup = tmp_path / "copy"
        shutil.copytree(n.state, backup)
        host.flush_routes()
        host.flush_rules()
        agent = _restart_on(n, backup)
        assert agent.counters["checkpoint_rebuilds_damaged"] == 0, "a copy its pods agree with was refused"
        assert {h.ip: h.holder for h in agent.ds.recovered_holders()}.get(X) == veth
        assert cni_add(agent, "pod1") == X
    finally:
        n.stop()
