"""One node of a seed's world: the real agent (:class:`~node_agent.datastore.Datastore`
with its checkpoint, :class:`~node_agent.controller.PoolController`,
:class:`~node_agent.cniserver.CniService`) over stand-ins for what the node's host
gives it: IMDS with lag (:class:`LaggedImds`), a checkpoint that can be killed
mid-save or damaged (:class:`SimDisk`), the kernel's pod wiring (:class:`SimPods`) and
the container runtime (:class:`Runtime`: ADD until it works, DEL until it works).

Issue 21's agent faults act here: the checkpoint file lost, truncated, zero-filled or
unwritable (:class:`SimDisk`), the restart then running the production start-up
(:meth:`node_agent.agent.Agent._rebuild` from the host's pod wiring, :meth:`SimPods.host_wiring`),
the agent's unmanaged-ENI tag look-up (:class:`node_agent.unmanaged.SkipUnmanaged`) over
its own calls to the emulated EC2 (:class:`AgentEc2`, failing while ``lookup_fails_until``),
and the node's clock off from the allocator's (``skew``: the agent's injected clock).
"""

from __future__ import annotations

import collections
import contextlib
import copy
import dataclasses
import email.utils
import functools
import ipaddress
import json
import os
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar, cast

from botocore.exceptions import ClientError

from emulated.ec2.errors import Ec2Error
from emulated.iam import PolicyPrincipal
from emulated.imds import Imds
from node_agent.agent import (
    RESTART_HOLD_S,
    RESULT_VISIBILITY_S,
    Agent,
    AwsClockCheck,
    Metadata,
    lift_unfounded_holds,
    restore_checked,
)
from node_agent.checkpoint import CheckpointError, CheckpointWriteError, FileCheckpoint
from node_agent.cni import E_IO, E_TRY_AGAIN_LATER
from node_agent.cniserver import CniService
from node_agent.config import Timing
from node_agent.controller import AttachedEni, IncompleteRead, PoolController
from node_agent.datastore import Datastore
from node_agent.hostnet import (
    CLONE_NEWNET,
    HostWiring,
    PodNet,
    PodRefused,
    host_veth_name,
    ifname_problem,
    netns_refusal,
    note_setup_left,
)
from node_agent.imds import Identity, ImdsError, parse_interfaces
from node_agent.netlink import NetlinkFailure, netns_path
from node_agent.records import NodeIdentity
from node_agent.unmanaged import SkipUnmanaged
from simulation.base import (
    AGENT_CONFIG,
    CLUSTER,
    GC_MIN_AGE_S,
    HOST_IFNAMES,
    HOST_NETNS,
    HOST_NS_ID,
    POD_NETNS_DIR,
    RESYNC_S,
    AgentKilled,
)
from simulation.subnets import SubnetsWorld
from warmpool import names
from warmpool.limits import known
from warmpool.messages import MessageError, parse_result
from warmpool.pool import PoolConfig


class NodeWorld(SubnetsWorld, Protocol):
    """What a node (:class:`SimAgent` and its stand-ins) reaches of the seed's world
    (:class:`simulation.world.SimWorld` satisfies it)."""

    @property
    def signer_imds(self) -> Imds: ...

    @property
    def last_report(self) -> dict[str, str]:
        """Instance -> the last report its agent sent."""
        ...

    version: int
    """Bumped by every change the checks look at."""

    agent_timing: Timing
    """The agents' clocks (:data:`simulation.base.TIMING`, with ``burst_window_s`` 0 unless the seed draws
    ``agent-bursts``)."""

    def pod_up(self, agent: SimAgent, cid: str, ip: str) -> None: ...

    def note_carried(self, node: str, key: tuple[str, str], ip: str) -> None:
        """A pod's namespace now carries ``ip`` (its set-up reached its interface): no other
        namespace of any live node may carry it (``two-holders``, as two pods the runtime runs)."""
        ...

    def send_report(self, agent: SimAgent, body: str) -> None: ...

    @property
    def roles(self) -> dict[str, PolicyPrincipal]:
        """The stack's roles as emulated EC2's principals (the agents': ``agent``)."""
        ...


_T = TypeVar("_T")


def picked(items: Sequence[_T], pick: float) -> _T:
    """The item of ``items`` (not empty) that ``pick`` chooses: the schedule draws it
    ``round(random(), 3)``, 0 to 1 both included, so 1.0 chooses the last, as 0.999 does."""
    return items[min(int(pick * len(items)), len(items) - 1)]


def result_problems(actions: Sequence[Any]) -> list[str]:
    """What one answer gives the node and a later action of it says EC2 took (the one-holder
    review's R1: a re-plan unassigned what the same run had handed back). Read on the wire's
    kinds, not through the agent's code."""
    out: list[str] = []
    given: dict[str, str] = {}
    eni_of: dict[str, str] = {}
    for a in actions:
        if a.kind in ("assigned", "attached"):
            for k in (*a.ips, *a.prefixes):
                given[k] = a.kind
                eni_of[k] = a.eni_id
        elif a.kind == "released":
            out.extend(f"{given[k]} then released {k}" for k in (*a.ips, *a.prefixes) if k in given)
        elif a.kind == "deleted":
            out.extend(f"{given[k]} {k} then deleted {a.eni_id}" for k in given if eni_of[k] == a.eni_id)
    return out


# --- IMDS with lag ---------------------------------------------------------------------


def _tree(md: dict[str, Any]) -> dict[str, Any]:
    """The part of an instance's ``meta-data`` tree the agent reads (``network/interfaces/macs``)."""
    return {"network": {"interfaces": {"macs": md["network"]["interfaces"]["macs"]}}}


class LaggedImds:
    """IMDS of one instance: EC2's state as it was ``lag`` seconds ago, never going back in
    time, except while ``regress_s`` (``imds-regress``) is above 0."""

    def __init__(self, w: NodeWorld, iid: str) -> None:
        self.w, self.iid = w, iid
        self.lag = 0.0
        self.torn_span = 0.0
        """While above 0 (``imds-torn``): each ENI's address leaves are read at a moment up to
        this many seconds apart from the ENI list's (each leaf is its own HTTP request)."""
        self._torn_rng: Any = None
        """Drawn from the world at the first torn read (worlds that never tear need no ``rng``)."""
        self.no_card = 0.0
        """While above 0 (``imds-torn``'s ``no_card``): the share of reads that miss the
        ``network-card`` leaf of some interfaces, never of all (each leaf is its own request;
        docs/safety.md row 29)."""
        self._card_rng: Any = None
        self.regress_s = 0.0
        """While above 0 (``imds-regress``): each read answers from a moment drawn up to this many
        seconds before the newest it would show, whatever it served before (a load-balanced
        metadata service whose replicas lag differently)."""
        self._regress_rng: Any = None
        self.served_at: list[float] = []
        """The moment (world time) of the EC2 state each read answered from, in read order."""
        self.history: list[tuple[float, tuple[Any, ...], dict[str, Any]]] = []
        """(moment, fingerprint, the ``meta-data`` tree's interfaces then), read by the production
        parser (:func:`node_agent.imds.parse_interfaces`) when served: an interface with no
        ``local-ipv4s`` (an EFA-only one) reaches the agent as IMDS serves it."""
        self._parsed: dict[int, list[AttachedEni]] = {}
        self._served = 0
        self.observe()

    def identity(self) -> Identity:
        """The instance's identity leaves (they never change, so no lag applies)."""
        inst = self.w.emu.instances[self.iid]
        return Identity(self.iid, inst.instance_type, "us-east-1a", "")

    def fingerprint(self) -> tuple[Any, ...]:
        emu = self.w.emu
        inst = emu.instances[self.iid]
        out = []
        for eid in inst.slots.values():
            e = emu.enis[eid]
            st = e.attachment.status if e.attachment else ""
            out.append((eid, st, tuple(e.secondary), tuple(e.prefixes)))
        return tuple(out)

    def observe(self) -> None:
        if self.w.emu.instances[self.iid].state != "running":
            return
        fp = self.fingerprint()
        if self.history and self.history[-1][1] == fp:
            return
        self.history.append((self.w.now(), fp, _tree(self.w.emu.instance_metadata(self.iid))))

    def _enis(self, i: int) -> list[AttachedEni]:
        """The interfaces of moment ``i``, as the agent's IMDS client parses them (what it raises, raised)."""
        got = self._parsed.get(i)
        if got is None:
            got = self._parsed[i] = parse_interfaces(self.history[i][2])
        return got

    def interfaces(self) -> list[AttachedEni]:
        self.observe()
        cut = self.w.now() - self.lag
        i = self._served
        while i + 1 < len(self.history) and self.history[i + 1][0] <= cut:
            i += 1
        self._served = i
        if self.regress_s > 0:
            i = self._regressed(i, cut)
        self.served_at.append(self.history[i][0])
        read = self._carded(i) if self.no_card > 0 else self._enis(i)
        if self.torn_span <= 0:
            return list(read)
        return self._torn(i, read)

    def _carded(self, i: int) -> list[AttachedEni]:
        """The interfaces of moment ``i`` as the production parser reads its tree with the
        ``network-card`` leaf missing (IMDS's 404) for some interfaces, never for all, in a share
        ``no_card`` of the reads (counted ``imds-torn:no-card``): what the agent's IMDS client
        would hand it from such a read, or the parser's refusal (:class:`~node_agent.imds.ImdsError`),
        raised."""
        macs = self.history[i][2]["network"]["interfaces"]["macs"]
        if self._card_rng is None:
            self._card_rng = self.w.rng(f"imds-torn/no-card/{self.iid}")
        r = self._card_rng
        carded = [m for m, leaves in macs.items() if "network-card" in leaves]
        if len(carded) < 2 or r.random() >= self.no_card:
            return self._enis(i)
        missing = set(r.sample(carded, r.randint(1, len(carded) - 1)))
        self.w.fault("imds-torn:no-card")
        torn = {
            m: {leaf: v for leaf, v in leaves.items() if leaf != "network-card"} if m in missing else leaves
            for m, leaves in macs.items()
        }
        return parse_interfaces({"network": {"interfaces": {"macs": torn}}})

    def _regressed(self, i: int, cut: float) -> int:
        """One of the states in effect at some moment of ``[cut - regress_s, cut]``, each as
        likely (``i``: the newest, in effect at ``cut``); a draw older than a state already
        served is counted ``imds-regress:older``."""
        lo = i
        while lo > 0 and self.history[lo][0] > cut - self.regress_s:
            lo -= 1
        if self._regress_rng is None:
            self._regress_rng = self.w.rng(f"imds-regress/{self.iid}")
        j: int = self._regress_rng.randint(lo, i)
        if self.served_at and self.history[j][0] < max(self.served_at):
            self.w.fault("imds-regress:older")
        return j

    def _torn(self, i: int, read: list[AttachedEni]) -> list[AttachedEni]:
        """The ENI list of moment ``i`` (``read``: as parsed), each ENI's addresses of a moment
        drawn within ``torn_span`` of it (earlier or later, up to now): one tree mixing moments.
        An ENI not attached at the moment its address leaves are read has none: IMDS answers 404
        for its ``local-ipv4s`` (and ``ipv4-prefix``), so it reaches the agent as an EFA-only
        interface does (``no_ipv4``, counted ``imds-torn:no-ipv4``), the case the agent cannot
        tell from one (review of the multi-card change, F4)."""
        t0 = self.history[i][0]
        near = [j for j, h in enumerate(self.history) if abs(h[0] - t0) <= self.torn_span]
        out = []
        for att in read:
            if self._torn_rng is None:
                self._torn_rng = self.w.rng(f"imds-torn/{self.iid}")
            enis = self._enis(near[self._torn_rng.randrange(len(near))])
            other = next((e for e in enis if e.info.eni_id == att.info.eni_id), None)
            if other is None and not att.no_ipv4:
                self.w.fault("imds-torn:no-ipv4")
                bare = dataclasses.replace(att.info, primary_ip="")
                out.append(att._replace(info=bare, ips=[], prefixes=[], no_ipv4=True))
                continue
            out.append(att if other is None else att._replace(ips=other.ips, prefixes=other.prefixes))
        return out


# --- the agent's side ----------------------------------------------------------------


class DiskError(OSError):
    """A checkpoint write refused by the node's disk (ENOSPC, EIO): what ``write``/``fsync``
    raise; the production agent does not catch it (its loop ends, kubelet restarts it)."""


HISTORY_SAVES = 200
"""How many of its last saves a node's disk remembers (``old-copy`` restores one of them)."""


class SimDisk(FileCheckpoint):
    """The agent's checkpoint file on the node's disk (:class:`~node_agent.checkpoint.FileCheckpoint`:
    same path, same reading of a damaged file, same ``keep_aside``), kept in memory.

    What Linux allows to happen to it, none of it promised away: ``armed`` kills the agent
    at the next save, before it is written; :meth:`lose` (the state directory gone),
    :meth:`truncate` (a torn write, a partial copy), :meth:`zero_fill` (blocks lost in a
    crash read back as zeros), :meth:`damage_parsing` (damage that still parses and validates:
    a pod's entry dropped or its address moved, an earlier save restored); ``write_errno``
    makes every save fail with that error (ENOSPC, EIO) until cleared, the file keeping what
    it last held."""

    def __init__(self, w: NodeWorld, node: str) -> None:
        self.older_copy = False
        """An older copy of the checkpoint was put back (``old-copy``): a hold's reason it brings
        back may name pods DELeted since, which no DEL names again (docs/safety.md, review 19's C1)."""
        super().__init__(f"/var/lib/warmpool/{node}/checkpoint.json")
        self.w = w
        self.armed = False
        self.data: dict[str, Any] | None = None
        self.raw: str | None = None
        """The file's bytes once damaged (otherwise ``data`` as written)."""
        self.write_errno: int | None = None
        self.aside: list[str] = []
        self.saves = 0
        self.refused = 0
        self.history: collections.deque[dict[str, Any]] = collections.deque(maxlen=HISTORY_SAVES)
        """The last saves (what a backup may hold; ``old-copy``)."""

    def load(self) -> dict[str, Any] | None:
        if self.raw is None:
            return copy.deepcopy(self.data)
        try:
            data = json.loads(self.raw)
        except ValueError as exc:  # as FileCheckpoint.load words it
            raise CheckpointError(f"{self.path}: {exc}") from None
        if not isinstance(data, dict):
            raise CheckpointError(f"{self.path}: not an object")
        return data

    def save(self, data: dict[str, Any]) -> None:
        if self.armed:
            self.armed = False
            raise AgentKilled("killed before the checkpoint was written")
        if self.write_errno is not None:
            self.refused += 1
            raise DiskError(self.write_errno, os.strerror(self.write_errno), self.path)
        self.data, self.raw = data, None
        self.history.append(data)
        self.saves += 1
        self.w.version += 1

    def keep_aside(self, now: float, keep: int = 3) -> str:
        name = f"{self.path}.corrupt-{int(now)}"
        self.aside.append(name)
        return name

    def _text(self) -> str:
        return self.raw if self.raw is not None else json.dumps(self.data, separators=(",", ":"))

    def lose(self) -> None:
        self.data, self.raw = None, None

    def truncate(self, fraction: float) -> None:
        if self.data is None and self.raw is None:
            return
        text = self._text()
        self.raw = text[: int(len(text) * fraction)]

    def zero_fill(self, start: float, length: int) -> None:
        if self.data is None and self.raw is None:
            return
        text = self._text()
        i = int(len(text) * start)
        self.raw = text[:i] + "\0" * length + text[i + length :]

    def lose_last_write(self, container_id: str, ifname: str) -> str:
        """The disk lacks its last save, the one that recorded the attachment's assignment
        (``add-cut`` without ``written``): the file as the save before left it. Returns what was
        done: ``lost``, or why nothing (no such save last: ``not-last``)."""
        if self.raw is not None or self.data is None or len(self.history) < 2:
            return "no-earlier-save"

        def names(data: dict[str, Any]) -> bool:
            return any(
                a.get("container_id") == container_id and a.get("ifname", ifname) == ifname
                for e in data.get("enis", [])
                for a in e.get("addrs", [])
            )

        if self.history[-1] is not self.data or not names(self.data) or names(self.history[-2]):
            return "not-last"
        self.history.pop()
        self.data = copy.deepcopy(self.history[-1])
        self.w.version += 1
        return "lost"

    def damage_parsing(self, variant: str, pick: float) -> str:
        """Damage the file so that it still parses and validates (``variant``, ``pick`` 0-1
        choosing the pod or the save); returns what was done (``variant``, or why nothing)."""
        if self.raw is not None or self.data is None:
            return "no-file"
        if variant == "old-copy":
            older = list(self.history)[:-1]
            if not older:
                return "no-older-save"
            self.data = copy.deepcopy(picked(older, pick))
            self.w.version += 1
            self.older_copy = True
            return variant
        data = copy.deepcopy(self.data)
        pods = [(e, a) for e in data["enis"] for a in e["addrs"] if a.get("container_id")]
        if not pods:
            return "no-pod"
        eni, entry = picked(pods, pick)
        done = "drop-pod"
        if variant == "move-pod":
            taken = {a["ip"] for a in eni["addrs"]}
            free = [ip for ip in eni["ips"] if ip not in taken]
            for p in eni["prefixes"]:
                free += [str(h) for h in ipaddress.IPv4Network(p) if str(h) not in taken]
            if free:
                entry["ip"] = picked(free, pick)
                done = variant
        if done == "drop-pod":
            eni["addrs"].remove(entry)
        self.data = data
        self.w.version += 1
        return done


class AgentEc2:
    """The agent's own EC2 client (its unmanaged-ENI tag look-up): the emulated EC2, with its
    throttling, and the ``tag-lookup-failure`` fault: while ``agent.lookup_fails_until``,
    every call is answered ``RequestLimitExceeded`` (a rollout restarting many agents at once).
    It calls as the stack's agent role; a refusal is ``iam-denied``."""

    def __init__(self, w: NodeWorld, agent: SimAgent) -> None:
        self.w, self.agent = w, agent
        self.inner = w.emu.client(principal=w.roles["agent"])

    def describe_network_interfaces(self, **kw: Any) -> dict[str, Any]:
        if self.w.now() < self.agent.lookup_fails_until:
            self.w.fault("tag-lookup-failure:refused")
            raise Ec2Error("RequestLimitExceeded", "Request limit exceeded.").client_error("DescribeNetworkInterfaces")
        try:
            return self.inner.describe_network_interfaces(**kw)
        except ClientError as err:
            if err.response.get("Error", {}).get("Code") == "UnauthorizedOperation":
                self.w.violation("iam-denied", f"the agent of {self.agent.name}: describe_network_interfaces refused")
            self.w.fault("tag-lookup:error")
            raise


def aws_dated(t: float) -> dict[str, Any]:
    """The part of an SQS answer :class:`node_agent.agent.AwsClockCheck` reads: its ``Date``
    header (RFC 9110, whole seconds) at the world's (AWS's) time ``t``."""
    return {"ResponseMetadata": {"HTTPHeaders": {"date": email.utils.formatdate(t, usegmt=True)}}}


class SkewedClock:
    """The node's clock: the world's time plus the node's ``skew`` (seconds; either sign),
    and its monotonic reading (:class:`warmpool.clock.SteadyClock`): the world's time, which
    a ``clock-skew`` step does not move, as no step moves ``CLOCK_MONOTONIC``."""

    def __init__(self, w: NodeWorld, agent: SimAgent) -> None:
        self.w, self.agent = w, agent

    def now(self) -> float:
        return self.w.now() + self.agent.skew

    def monotonic(self) -> float:
        return self.w.now()


class SimPods:
    """Recorded pod wiring (the host's kernel state; survives agent restarts).

    Stands in for :class:`node_agent.cniserver.NetlinkPods` over
    :func:`node_agent.hostnet.setup_pod`:

    * ``check_netns`` is the real rule (:func:`node_agent.hostnet.netns_refusal`)
      over a model of the node's namespaces: the host's, named by every path of
      :data:`HOST_NETNS` (the agent runs with host networking, so its own and the
      node's are the host's), and one per path under ``/var/run/netns/`` (a
      pod's); any other path does not exist;
    * ``setup`` refuses, as ``setup_pod`` does, an interface named ``ifname``
      that already exists in the namespace and is not this pod's veth (the
      host's ``eth0``/``ens5``/``lo``, a pod's ``lo``): left alone, never deleted.
      A set-up that reaches the host's namespace at all is the violation
      ``cni-host-touched``: the CNI service must have refused it before taking
      an address (NetlinkPods would refuse it again; nothing else would).

    ``fail`` makes the next set-up of a container fail, early or once the pod's interface has its
    address; the exception says what the set-up left, as ``setup_pod``'s does
    (:func:`node_agent.hostnet.setup_left`).

    The host side is kept as the kernel keeps it (``host-wiring``, issue 21): each attachment's
    veth pair (``veth_of``; its namespace side carries the pod's address while the pair exists:
    ``wired``), the ``/32`` routes in main (``routes``) and the pod rules at priority 512
    (``rules``), each of which can go on its own (:meth:`disturb`), and links of another CNI
    (``foreign``). ``prefix`` is the veth prefix of the agent now running on the node. An ADD
    whose agent was killed in its set-up (``cut``, ``add-cut``) leaves a veth with no route and no
    rule; set-up again, the pair is reused (as ``setup_pod`` reuses a half-made one), or, made under
    another prefix (the prefix changed across the restart), removed and made again under this one
    while its pod's side carries no address and its host side no route (as ``setup_pod`` does:
    ``hostnet.cut_pair_of_another_prefix``); a pair of another prefix with either is refused."""

    def __init__(self, w: NodeWorld, node: str) -> None:
        self.w, self.node = w, node
        self.wired: dict[tuple[str, str], str] = {}
        self.fail: dict[str, str] = {}
        """Container -> where its next set-up fails: ``early`` (before it looks at anything: the
        namespace vanished) or ``addressed`` (once the pod's interface has the address)."""
        self._pod_ns: dict[str, tuple[int, int]] = {}
        self.prefix = AGENT_CONFIG.veth_prefix
        self.veth_of: dict[tuple[str, str], str] = {}
        self.routes: dict[str, str] = {}
        """``/32`` routes in main: address -> the link it goes through (``ip route replace``: one a
        destination)."""
        self.rules: set[str] = set()
        """Addresses with a ``to <ip> lookup main`` rule at priority 512."""
        self.foreign: set[str] = set()
        """Veths of another CNI (a Multus ``ptp`` network's host side)."""
        self.cut: Callable[[str, str], None] | None = None
        """Armed (``add-cut``): the next set-up of an attachment with no veth makes its veth pair
        (its pod side with the address if ``cut_addressed``), then calls this with the attachment
        (container, interface), which kills the agent (raises :class:`~simulation.base.AgentKilled`):
        a veth with no route or rule."""
        self.cut_addressed = False
        self.moved: set[str] = set()
        """Veths whose pod's interface a set-up moved off another address (its pair kept): the
        running pod had that one (review 22, R1: the agent keeps a start's hold for such a veth).
        Not a pair a cut ADD left (``half_made``): no pod ran with what it carried."""
        self.half_made: set[str] = set()

    # the node's namespaces
    def ns_id(self, netns: str) -> tuple[int, int] | None:
        """(device, inode) of the namespace a path names; None: no such file."""
        path = netns_path(netns)
        if path in HOST_NETNS:
            return HOST_NS_ID
        if path.startswith(POD_NETNS_DIR) and "/" not in path[len(POD_NETNS_DIR) :]:
            got = self._pod_ns.get(path)
            if got is None:
                got = self._pod_ns[path] = (4, HOST_NS_ID[1] + 1 + len(self._pod_ns))
            return got
        return None

    def links(self, ns: tuple[int, int]) -> dict[str, str]:
        """Interface name -> kind in a namespace (what ``setup_pod`` would look up)."""
        if ns == HOST_NS_ID:
            return {n: ("loopback" if n == "lo" else "ena") for n in HOST_IFNAMES}
        return {"lo": "loopback"}

    def check_netns(self, netns: str) -> str | None:
        """:meth:`NetlinkPods.check_netns` (``netns_problem``) over the model: the same rule."""
        target = self.ns_id(netns)
        if target is None:
            return f"network namespace {netns}: No such file or directory"
        return netns_refusal(netns, CLONE_NEWNET, target, AGENT_CONFIG.host_netns, self.ns_id)

    def setup(self, netns: str, ifname: str, container_id: str, ip: str, table: int, mtu: int) -> PodNet:
        try:
            return self._setup(netns, ifname, container_id, ip, table, mtu)
        except Exception as exc:
            note_setup_left(exc, made_pair=False, addressed=False)  # as NetlinkPods.setup: unless said
            raise

    def _setup(self, netns: str, ifname: str, container_id: str, ip: str, table: int, mtu: int) -> PodNet:
        ns = self.ns_id(netns)
        if ns is None:
            raise NetlinkFailure(2, f"network namespace {netns}: No such file or directory")
        if ns == HOST_NS_ID:
            self.w.violation(
                "cni-host-touched",
                f"{self.node}: ADD {container_id} reached pod set-up of {ifname} in "
                f"the host network namespace {netns} (the CNI service must refuse it first)",
            )
        if ifname_problem(ifname):  # the kernel would refuse the name
            raise NetlinkFailure(22, f"interface name {ifname!r}: Invalid argument")
        kind = self.links(ns).get(ifname)
        if kind is not None:  # never this pod's veth: the model keeps pod veths apart
            raise PodRefused(
                f"interface {ifname} already exists in {netns} and is not this pod's veth ({kind}): left alone"
            )
        stage = self.fail.pop(container_id, None)
        if stage == "early":
            # as setup_pod's Netlink.open of the pod's namespace failing: nothing looked at or made
            exc = NetlinkFailure(2, f"netns of {container_id} vanished")
            note_setup_left(exc, made_pair=False, addressed=False)
            raise exc
        # as node_agent/hostnet.py::setup_pod: the veth pair (its host side named after the
        # attachment under this agent's prefix), the /32 route via it, the pod rule
        veth = host_veth_name(container_id, ifname, self.prefix)
        have = self.veth_of.get((container_id, ifname))
        if have is not None and have != veth:
            # as setup_pod: the pod's ``ifname`` is the peer of another prefix's veth (an agent
            # before the prefix changed), not of this prefix's name: refused before anything
            # (review 27, M1: the model re-made the pair under this prefix), unless that pair is
            # as an ADD cut before the pod's address left it (``hostnet.cut_pair_of_another_prefix``:
            # its pod's side carrying no address, no route through its host side; the model keeps
            # no pod-side route or neighbour, which follow the address): removed and made again
            if (container_id, ifname) in self.wired or have in self.routes.values():
                raise PodRefused(
                    f"interface {ifname} already exists in {netns} and is not this pod's veth "
                    f"(veth of {have}): left alone"
                )
            self._drop_pair((container_id, ifname))
        if self.cut is not None and (container_id, ifname) not in self.veth_of:
            # ``add-cut``: the agent killed between the pair's making and the host's route (no
            # route, no rule; the pod's interface with its address if ``cut_addressed``)
            cut, self.cut = self.cut, None
            self.veth_of[(container_id, ifname)] = veth
            self.half_made.add(veth)
            if self.cut_addressed:
                self.wired[(container_id, ifname)] = ip
                self.w.note_carried(self.node, (container_id, ifname), ip)
            cut(container_id, ifname)
        made = self.veth_of.get((container_id, ifname)) != veth
        if self.wired.get((container_id, ifname), ip) != ip and veth not in self.half_made:
            self.moved.add(veth)
        self.half_made.discard(veth)
        self.wired[(container_id, ifname)] = ip
        self.veth_of[(container_id, ifname)] = veth
        self.w.note_carried(self.node, (container_id, ifname), ip)
        if stage == "addressed":
            # as setup_pod failing after the pod's interface took the address (``ensure_addrs``)
            # and before the host's route (an ``ip route replace`` refused: ENOBUFS): the pair
            # (reused or made) carries the new address, the host has no route or rule for it
            exc = NetlinkFailure(105, f"route to {ip} via {veth}: No buffer space available")
            note_setup_left(exc, made_pair=made, addressed=True)
            raise exc
        self.routes[ip] = veth
        self.rules.add(ip)
        return PodNet(veth, "ee:ee:ee:ee:ee:ee", "02:00:00:00:00:01", 0)

    def teardown(self, container_id: str, ifname: str, ip: str | None) -> None:
        """As node_agent/hostnet.py::teardown_pod: an address given, every pod rule and ``/32``
        route for that address first, whatever link or pod they belong to (review 34, N1: a failure
        between the two then leaves the pair for the retried DEL to read; none is drawn here), then
        the attachment's veth under this agent's prefix (with its peer, and every route through it:
        ``drivers/net/veth.c::veth_dellink``). The attachment's veth of another prefix (an earlier process's
        setting) goes too, as ``teardown_pod`` removes it since stop 49 (seed 6659: a GC after a
        prefix change left a forgotten sandbox's namespace carrying the address it released).
        A failed second ADD of a running pod no longer tears anything down (its set-up refuses
        another prefix's pair, and made nothing: seeds 6439 and 14955)."""
        key = (container_id, ifname)
        if ip:
            self.rules.discard(ip)
            self.routes.pop(ip, None)
        if self.veth_of.get(key) is not None:
            self._drop_pair(key)

    def _drop_pair(self, key: tuple[str, str]) -> None:
        self.wired.pop(key, None)
        veth = self.veth_of.pop(key, None)
        if veth is not None:
            self.moved.discard(veth)
            self.half_made.discard(veth)
            self.routes = {a: link for a, link in self.routes.items() if link != veth}

    def namespace_gone(self, container_id: str) -> None:
        """The runtime deleted the sandbox's network namespace (after its DEL, or a sandbox it
        forgot): every veth pair of the container goes with it, whatever its prefix."""
        for key in [k for k in self.veth_of if k[0] == container_id]:
            self._drop_pair(key)

    def check(self, netns: str, ifname: str, container_id: str, ip: str, table: int) -> list[str]:
        return [] if self.wired.get((container_id, ifname)) == ip else ["not wired"]

    def carried(self, netns: str, ifname: str, container_id: str) -> list[str] | None:
        """As :meth:`node_agent.cniserver.NetlinkPods.carried` (``hostnet.pod_addresses``): what the
        pod's side of this prefix's veth of the attachment carries; None with no such pair."""
        return self.carried_under(netns, ifname, container_id, self.prefix)

    def carried_under(self, netns: str, ifname: str, container_id: str, veth_prefix: str) -> list[str] | None:
        """:meth:`carried` for the attachment's veth under ``veth_prefix`` (an earlier prefix's)."""
        key = (container_id, ifname)
        if self.ns_id(netns) is None or self.veth_of.get(key) != host_veth_name(container_id, ifname, veth_prefix):
            return None
        return [self.wired[key]] if key in self.wired else []

    def peers_carried(self, veths: Collection[str]) -> dict[str, list[str]]:
        """As :meth:`node_agent.cniserver.NetlinkPods.peers_carried`: what the pod-side peer of each
        of ``veths`` carries (the model pins every pod's namespace where the agent looks)."""
        return {
            veth: [self.wired[key]] if key in self.wired else [] for key, veth in self.veth_of.items() if veth in veths
        }

    def disturb(self, variant: str, pick: float) -> str:
        """The host's pod wiring changed under the agent (``host-wiring``); returns what was done.

        * ``routes-flushed`` / ``rules-flushed`` / ``all-flushed``: every pod's ``/32`` route, or
          pod rule, or both, gone while the veths stay (systemd-networkd's
          ``ManageForeignRoutes`` and ``ManageForeignRoutingPolicyRules``, on by default, drop
          what it did not configure when it starts or reloads);
        * ``veth-down``: one pod's veth set down, which loses its IPv4 routes (its rule stays);
        * ``foreign-veth``: another CNI's pod appears (a Multus ``ptp`` network: a veth named
          ``veth…`` with a ``/32`` route in main to an address of its host-local range);
        * ``prefix-changed``: nothing on the host; the agent's next start runs with another veth
          prefix (the DaemonSet's setting changed: :meth:`SimAgent.boot`)."""
        if variant in ("routes-flushed", "all-flushed"):
            pod_links = set(self.veth_of.values())
            self.routes = {a: link for a, link in self.routes.items() if link not in pod_links}
        if variant in ("rules-flushed", "all-flushed"):
            self.rules.clear()
        if variant == "veth-down":
            wired = sorted(self.veth_of.values())
            if not wired:
                return "no-pod"
            down = picked(wired, pick)
            self.routes = {a: link for a, link in self.routes.items() if link != down}
        if variant == "foreign-veth":
            n = len(self.foreign) + 1
            veth = f"veth{n:04x}{int(pick * 0xFFFF):04x}"  # the ptp plugin's 'veth' + 8 hex digits
            self.foreign.add(veth)
            self.routes[f"192.168.50.{n}"] = veth
        return variant

    def host_wiring(self) -> HostWiring:
        """What :func:`node_agent.hostnet.wired_pods` reads from the kernel: each ``/32`` route in
        main through a link of this agent's prefix is a pod, a pod rule with no such route is
        stale, and every route, link and veth besides (the host's own interfaces too)."""
        veths = set(self.veth_of.values()) | self.foreign
        pods = {ip: link for ip, link in self.routes.items() if link.startswith(self.prefix)}
        return HostWiring(
            pods=pods,
            stale=sorted(self.rules - set(pods)),
            routed=frozenset(self.routes),
            links=frozenset({*HOST_IFNAMES, *veths}),
            routed_via=dict(self.routes),
            veths=frozenset(veths),
        )


@dataclass
class Runtime:
    """The container runtime of one node: what it believes each pod holds."""

    up: dict[str, str] = field(default_factory=dict)  # container -> address
    adding: dict[str, None] = field(default_factory=dict)
    deleting: dict[str, None] = field(default_factory=dict)
    started: int = 0
    made: dict[str, float] = field(default_factory=dict)
    """When each attachment was made: the first ADD after which the agent holds an address for
    it, answered or not (a DEL that works forgets it). Every ADD the harness makes, including
    those whose answer the runtime then loses and those that failed yet left the address held
    (a checkpoint write refused: the agent keeps it for the runtime's retry or DEL). The agent's
    GC dates an attachment from that ADD too (``gc_min_age_s``)."""
    asked: dict[str, float] = field(default_factory=dict)
    """When each pod waiting for an address was started."""
    waits: list[float] = field(default_factory=list)
    """Each pod's wait for an address, from its start to its ADD answered (the fairness figure)."""
    containerd: bool = False
    """A failed ADD is handled as containerd and kubelet handle it (:meth:`SimAgent.runtime_calls`):
    DELeted at once, the pod's next sandbox (a new container id) ADDed after kubelet's back-off.
    Else the runtime retries the ADD of the same container with no DEL between (the CNI spec
    forbids it; the hostile variant, as before stop 49)."""
    failing: dict[str, float] = field(default_factory=dict)
    """containerd: each sandbox whose ADD waits for an address -> when its ADD was made (the
    agent's ADD waits ``ADD_WAIT_S`` for one: its retries here stand for that wait)."""
    not_before: dict[str, float] = field(default_factory=dict)
    """containerd: a pod's next sandbox -> when kubelet's back-off lets it be ADDed; dropped once its
    first ADD is sent (the sandbox is made: deleted, it gets a DEL)."""
    sandboxes: int = 0
    names_pods: bool = True
    """The runtime names each call's pod in ``CNI_ARGS`` (``K8S_POD_NAMESPACE``, ``K8S_POD_NAME``), as
    containerd and CRI-O do; False: it sends no ``CNI_ARGS`` (the CNI spec makes them optional), and
    the agent counts a waiting ADD per attachment (:data:`NAMES_PODS`)."""


RESTART_BACKOFF_S = 10.0

FORCE_CONTAINERD: bool | None = None
"""Every node's runtime one way (a pinned test whose scenario was drawn before stop 49 sets False:
the runtime retried the same sandbox then); None: drawn per node."""

NAMES_PODS: bool | None = None
"""Every node's runtime one way: True names each ADD's and DEL's pod in ``CNI_ARGS``
(``K8S_POD_NAMESPACE``, ``K8S_POD_NAME``), as kubelet's runtimes do; False sends no ``CNI_ARGS``
(the CNI spec makes them optional; a pinned test whose scenario was drawn before stop 50, when the
model sent none); None (the sweeps): drawn per node, :data:`UNNAMED_SHARE` of the runtimes sending
none (a pinned test drawn in stop 50, when every runtime named its pods, sets True)."""

UNNAMED_SHARE = 0.25
"""The share of nodes whose runtime names no pod when :data:`NAMES_PODS` is None: nothing AWS or
Kubernetes documents makes a CNI runtime send ``CNI_ARGS``, so the agent's counting without them
(per attachment) is drawn too."""

ADD_WAIT_S = 10.0
"""How long the agent's ADD waits for a free address before it fails (``node_agent.config``'s
``add_wait_s`` default): in containerd mode the runtime's ADD of a sandbox is in flight this long."""
SANDBOX_BACKOFF_S = 10.0
"""kubelet's back-off before a pod's next sandbox after a failed one: ``pkg/kubelet/pod_workers.go``
``completeWork`` requeues a pod whose sync failed after ``wait.Jitter(backOffPeriod, 0.5)``
(``backOffPeriod`` 10 s in ``pkg/kubelet/kubelet.go``): 10 to 15 s."""
"""kubelet's first crash-loop back-off: an agent whose process ended is started again this much later."""


class SimAgent:
    def __init__(self, w: NodeWorld, name: str, iid: str, itype: str) -> None:
        self.w, self.name, self.iid, self.itype = w, name, iid, itype
        self.cp = SimDisk(w, name)
        self.pods = SimPods(w, name)
        self.veth_prefix = AGENT_CONFIG.veth_prefix
        """The veth prefix the agent runs with (``host-wiring``'s ``prefix-changed`` changes it
        for the next start, as a new DaemonSet setting does)."""
        self.imds = LaggedImds(w, iid)
        self.rt = Runtime()
        # drawn apart from the plan (its events stay as they were): half the nodes' runtimes handle
        # a failed ADD as containerd does, the others retry it with no DEL (the hostile variant)
        drawn = w.rng("runtime").random() < 0.5
        self.rt.containerd = drawn if FORCE_CONTAINERD is None else FORCE_CONTAINERD
        w.fault(f"runtime:{'containerd' if self.rt.containerd else 'same-sandbox-retry'}")
        # its own stream, so the draws above and the plan's events stay as they were
        unnamed = w.rng("runtime-names").random() < UNNAMED_SHARE
        self.rt.names_pods = (not unnamed) if NAMES_PODS is None else NAMES_PODS
        if not self.rt.names_pods:
            w.fault("runtime:no-cni-args")
        self.sqs = w.sqs.client(sender_id=f"AROAEXAMPLE:{iid}")
        self.result_url = self.sqs.create_queue(
            QueueName=names.result_queue(CLUSTER, iid), Attributes={"VisibilityTimeout": str(RESULT_VISIBILITY_S)}
        )["QueueUrl"]
        self.alive = False
        self.gone = False
        self.kill_point: str | None = None
        self.started_at = 0.0
        self.sent: list[tuple[float, int]] = []  # (world time, seq) of every report sent (not the node's clock)
        self.skew = 0.0
        """This node's clock minus the allocator's (``clock-skew``)."""
        self.clock = SkewedClock(w, self)
        self.ec2 = AgentEc2(w, self)
        self.lookup_fails_until = 0.0
        self.last_crash = ""
        """Why the process last ended on an error of its own (:meth:`crashed`)."""
        self.efa_only: tuple[tuple[int, int], ...] = ()
        """The slots of the EFA-only interfaces its instance launched with (a replacement gets them too)."""
        self.starts: list[str] = []
        """How each start found the checkpoint (the production start's words: restored, empty, rebuilt)."""
        self.lean_since = float("-inf")
        """When (world time) a result last made this node's agent lean (``scarce``, not lean before):
        its warm surplus is offered only after the agent's release delay (the ``not-settled`` check)."""
        self.polled_at = float("-inf")
        """When (world time) this node's agent last asked its result queue for messages."""
        self.grants_pushed: list[tuple[float, frozenset[str]]] = []
        """(world time, keys) of every result naming addresses or prefixes EC2 put on the node
        (``assigned``, ``attached``), as the allocator pushed it (:meth:`grants_unpolled`)."""
        self.released_withheld: set[str] = set()
        """Free addresses EC2 took from the node while its agent withheld its pool, a restored
        checkpoint awaiting the allocator's word (:meth:`simulation.world.SimWorld.check_release`)."""
        self.ds: Datastore
        self.ctl: PoolController
        self.cni: CniService
        self.metadata: Any
        self.boot()

    def now(self) -> float:
        """The node's clock (skewed); the world's is ``w.now()``."""
        return self.clock.now()

    # life cycle
    def boot(self) -> None:
        """The production start (:meth:`node_agent.agent.Agent.start` without its threads and
        sockets): the checkpoint restored, or, missing or damaged, rebuilt from IMDS and the
        host's pod wiring by the production :meth:`~node_agent.agent.Agent._rebuild`."""
        w = self.w
        now = self.now()
        timing = w.agent_timing
        ds = Datastore(cooldown_s=timing.cooldown_s, pending_ttl_s=timing.pending_ttl_s, checkpoint=self.cp)
        with self.guard():
            # as node_agent/agent.py reads it: checksum, then the host's pod wiring
            self.pods.prefix = self.veth_prefix
            try:
                restored, damaged = restore_checked(ds, self.pods, self.veth_prefix, now=now)
            except (DiskError, CheckpointWriteError) as exc:
                # as node_agent/agent.py::_run_agent: a start whose restore cannot write the holds
                # it found (hold_wired's recover) exits (an OSError), and kubelet restarts it
                self.crashed(f"start: {exc.strerror if isinstance(exc, DiskError) else 'checkpoint not written'}")
                return
            # custom networking (issue 24): the agents of the world's custom nodes run with
            # AWS_VPC_K8S_CNI_CUSTOM_NETWORK_CFG (simulation/subnets.py)
            pool = PoolConfig(
                warm_ip=w.plan.warm_ip,
                minimum_ip=w.plan.minimum_ip,
                warm_prefix=1,
                prefix_mode=w.plan.prefix_mode,
                custom_networking=self.name in w.nets.custom_nodes,
            )
            ident = NodeIdentity(
                cluster=CLUSTER,
                node=self.name,
                instance_id=self.iid,
                instance_type=self.itype,
                availability_zone="us-east-1a",
            )
            self.ds = ds
            # as node_agent/agent.py measures it: the node's clock against the Date of AWS's
            # answers (a new process measures again; its first sample is at start)
            self.aws_clock = AwsClockCheck(self.clock, w.now)
            self.aws_clock.observe(aws_dated(w.now()), self.now())
            # as node_agent/agent.py wires it: the unmanaged-ENI look-up wraps IMDS (a new one per
            # process: what it classified dies with it), on the node's clock with its back-off
            # jitter drawn from the seed (on the wall clock a seed's outcome was the machine's)
            self.metadata = (
                SkipUnmanaged(self.imds, self.ec2, self.iid, clock=self.clock, rng=w.rng(f"tag-lookup/{self.name}"))
                if AGENT_CONFIG.hostnet.skip_unmanaged_enis
                else self.imds
            )
            # as node_agent/agent.py builds them (add_wait_s 0: an ADD waiting on a real-time
            # condition would stall virtual time; the runtime's retry stands in for the wait)
            self.ctl = PoolController(
                ident,
                known(self.itype),
                pool,
                ds,
                timing,
                metadata=self.metadata,
                restart_hold_s=RESTART_HOLD_S,
                signed_identity=functools.partial(w.signer_imds.identity, self.iid),
                clock_ahead=self.aws_clock.offset,
                # as node_agent/agent.py gives it time.monotonic: every duration that guards an
                # offer is timed on it (without it the stepped clock timed them: seed 478)
                monotonic=self.clock.monotonic,
                # one boot per instance: the world's time is its monotonic clock across restarts
                boot_id=self.iid,
            )
            self.cni = CniService(
                ds, self.pods, clock=self.clock, gc_min_age_s=GC_MIN_AGE_S, veth_prefix=self.veth_prefix
            )
            try:
                if restored:
                    self.ctl.start(now, restored=True)
                    self.starts.append("restored")
                else:
                    agent = Agent(
                        dataclasses.replace(AGENT_CONFIG, veth_prefix=self.veth_prefix),
                        self.sqs,
                        cast(Metadata, self.metadata),
                        pods=self.pods,
                        clock=self.clock,
                        serve_http=False,
                    )
                    agent.ds, agent.controller = ds, self.ctl
                    _, how = agent._rebuild(self.cp, damaged, now)
                    self.starts.append(how)
                    if how != "empty":
                        w.fault("checkpoint-rebuilt:" + how.split(":")[0])
            except (DiskError, CheckpointWriteError) as exc:
                # as node_agent/agent.py::main: a start that cannot write its checkpoint exits
                # (the datastore's saves raise CheckpointWriteError), and kubelet restarts it
                self.crashed(f"start: {exc.strerror if isinstance(exc, DiskError) else 'checkpoint not written'}")
                return
            except (ImdsError, IncompleteRead) as exc:
                # as node_agent/agent.py::main: a start whose IMDS read fails exits (1), and
                # kubelet restarts it (an agent that never reads its ENIs is down at the end:
                # the ``agent-down`` check; review of the multi-card change, F4)
                self.crashed(f"start: {type(exc).__name__}")
                return
            self.alive = True
            # when (world time) this process started: its CNI GC ages an attachment an earlier
            # process made from here (``CniService._age``)
            self.started_at = w.now()
            self.resynced_at = now
            self.kill_point = None

    def crashed(self, why: str) -> None:
        """The agent's process ended on an error it does not catch (a checkpoint write refused):
        kubelet starts it again after its back-off."""
        self.alive = False
        self.kill_point = None
        self.cp.armed = False
        self.pods.cut = None
        self.last_crash = why
        self.w.fault("agent-crash:" + why)
        self.w.loop.call_later(RESTART_BACKOFF_S, self.restart)

    def restart(self) -> None:
        if not self.gone and not self.alive:
            self.boot()

    def die(self, why: str) -> None:
        if not self.alive:
            return
        self.alive = False
        self.kill_point = None
        self.pods.cut = None
        self.cp.armed = False
        self.w.fault("agent-kill:" + why)

    @contextlib.contextmanager
    def guard(self) -> Iterator[None]:
        try:
            yield
        except AgentKilled as k:
            self.die(str(k) or "killed")

    # the loop
    def periodic(self) -> None:
        if self.gone or not self.alive:
            return
        w = self.w
        now = self.now()
        with self.guard():
            try:
                try:  # as Agent.run_once: a write that failed earlier is retried every pass
                    self.ds.flush()
                except CheckpointWriteError:
                    w.fault("checkpoint-write-error:retried")
                self.receive()
                if not self.alive:
                    return
                try:  # as Agent._lift_holds, each pass
                    freed = lift_unfounded_holds(self.ds, self.ctl, now)
                    if freed:
                        w.fault("host-wiring:hold-lifted", len(freed))
                except CheckpointWriteError:
                    w.fault("checkpoint-write-error:lift")
                reaped = self.cni.reap_gone_failed_holds()  # as Agent.run_once, each pass
                if reaped:
                    w.fault("failed-add-hold:veth-gone", len(reaped))
                if now - self.resynced_at >= RESYNC_S:
                    self.resynced_at = now
                    try:
                        self.ctl.resync(now)
                    except CheckpointWriteError:  # Agent.run_once logs a failed resync and goes on
                        w.fault("checkpoint-write-error:resync")
                    except (ImdsError, IncompleteRead) as exc:  # so it does for a failed IMDS read
                        w.fault(f"imds-read-failed:{type(exc).__name__}")
                self.runtime_calls()
                invalid = self.ctl.stats.reports_invalid
                reports = self.ctl.tick(now)
                if self.ctl.stats.reports_invalid > invalid:
                    # a report the agent could not build from its own datastore: none is sent, and
                    # an answer it waits for only comes to a report (seed 1041591: 410 s of none)
                    w.violation("report-invalid", f"{self.name}: a report the datastore could not make valid")
                for report in reports:
                    self.sent.append((w.now(), report.seq))  # the world's time: the check measures real waits
                    body = report.to_json()
                    w.last_report[self.iid] = body
                    w.send_report(self, body)
            except DiskError as exc:  # uncaught by the agent's loop: the process ends
                self.crashed(exc.strerror or "checkpoint write failed")
            except Exception as exc:  # the agent's loop would die (or spin) on this
                w.violation("agent-raised", f"{self.name}: {type(exc).__name__}: {str(exc)[:300]}")

    def last_seq(self) -> int:
        return self.sent[-1][1] if self.sent else -1

    def grants_unpolled(self) -> set[str]:
        """Keys of the grants pushed after the agent last asked its result queue for messages:
        it could not have read them yet (the ``address-leaked`` check at the end; seed 10039)."""
        return {k for t, keys in self.grants_pushed if t > self.polled_at for k in keys}

    def receive(self) -> None:
        w = self.w
        while self.alive:
            self.polled_at = w.now()
            msgs = self.sqs.receive_message(
                QueueUrl=self.result_url, MaxNumberOfMessages=10, VisibilityTimeout=RESULT_VISIBILITY_S
            ).get("Messages", [])
            self.aws_clock.observe(aws_dated(w.now()), self.now())
            if not msgs:
                return
            for m in msgs:
                if self.kill_point == "after-receive":
                    raise AgentKilled("after receiving a result, before applying it")
                try:
                    result = parse_result(m["Body"])
                except MessageError:
                    w.violation("bad-result", f"{self.name}: unparseable result {m['Body'][:200]}")
                    continue
                contradicts = result_problems(result.actions)
                if contradicts:
                    w.violation("result-contradicts", f"{self.name} seq {result.in_reply_to}: {contradicts[:3]}")
                if self.kill_point in ("mid-apply", "mid-checkpoint"):
                    self.cp.armed = True
                asked = (self.ctl.stats.first_starts_confirmed, self.ctl.stats.first_starts_unconfirmed)
                leaned = self.ctl.stats.lean_entered
                try:
                    self.ctl.apply_result(result, self.now())
                except CheckpointWriteError:  # as Agent._apply: not on disk, not acknowledged
                    self.cp.armed = False
                    w.fault("checkpoint-write-error:result-unacknowledged")
                    return
                self.cp.armed = False
                if self.ctl.stats.lean_entered > leaned:
                    self.lean_since = w.now()
                if self.ctl.stats.first_starts_confirmed > asked[0]:
                    w.fault("first-start:confirmed")
                elif self.ctl.stats.first_starts_unconfirmed > asked[1]:
                    w.fault("first-start:not-confirmed")
                if self.kill_point == "after-apply":
                    raise AgentKilled("after applying a result, before deleting it")
                self.sqs.delete_message(QueueUrl=self.result_url, ReceiptHandle=m["ReceiptHandle"])

    def cni_call(self, command: str, cid: str, ifname: str = "eth0", netns: str | None = None) -> dict[str, Any]:
        req = {
            "command": command,
            "container_id": cid,
            "ifname": ifname,
            "netns": netns if netns is not None else f"/var/run/netns/{cid}",
            "config": {"cniVersion": "1.0.0", "name": "warmpool", "type": "warmpool"},
            # as kubelet's runtimes name the pod (containerd: ``internal/cri/server/sandbox_run.go``
            # ``cniNamespaceOpts``); a pod's sandboxes here are ``<pod>~N``
            "args": f"K8S_POD_NAMESPACE=default;K8S_POD_NAME={cid.split('~')[0]};K8S_POD_INFRA_CONTAINER_ID={cid}"
            if self.rt.names_pods
            else "",
        }
        try:
            out: dict[str, Any] = self.cni.handle(req)
        except (DiskError, CheckpointWriteError) as exc:  # the socket server answers it (cniserver.py)
            out = {"ok": False, "code": E_IO, "msg": "agent error", "details": str(exc)[:500]}
        if command == "ADD" and (out.get("ok") or self.ds.lookup(cid, ifname) is not None):
            self.rt.made.setdefault(cid, self.w.now())
        elif out.get("ok") and command == "DEL":
            self.rt.made.pop(cid, None)
            self.pods.namespace_gone(cid)  # the runtime removes the sandbox after its DEL
        return out

    def _add_failed(self, cid: str, got: dict[str, Any], now: float) -> None:
        """containerd: an ADD that found no address waits (the agent's ``add_wait_s``: retried here
        while it lasts, as the agent's own loop takes an address freed meanwhile); failed, or failed
        otherwise, ``RunPodSandbox`` tears the sandbox's network down at once (a CNI DEL: its
        deferred ``teardownPodNetwork``, ``internal/cri/server/sandbox_run.go``) and removes its
        namespace; a DEL not answered ok is retried (kubelet's ``StopPodSandbox`` of the failed
        sandbox). kubelet makes the pod's next sandbox, a new container id, after its back-off
        (:data:`SANDBOX_BACKOFF_S`)."""
        rt = self.rt
        since = rt.failing.setdefault(cid, now)
        if got.get("code") == E_TRY_AGAIN_LATER and now - since < ADD_WAIT_S:
            return  # the ADD still waits for an address
        rt.failing.pop(cid, None)
        rt.not_before.pop(cid, None)
        del rt.adding[cid]
        self.w.version += 1
        if not self.cni_call("DEL", cid).get("ok"):
            # containerd ignores a failed teardown of a sandbox whose ADD gave no result
            # (``sandbox.CNIResult == nil``: ``cleanupErr`` reset), removes its namespace anyway and
            # never sends that DEL again (kubelet has no sandbox id to stop; review 28, M1)
            self.pods.namespace_gone(cid)
            self.w.fault("containerd:del-dropped")
        rt.sandboxes += 1
        nxt = f"{cid.split('~')[0]}~{rt.sandboxes}"
        rt.adding[nxt] = None
        rt.not_before[nxt] = now + SANDBOX_BACKOFF_S * (1 + 0.5 * self.w.rng(f"kubelet-{self.name}").random())
        asked = rt.asked.pop(cid, None)
        if asked is not None:
            rt.asked[nxt] = asked
        self.w.fault("containerd:sandbox-again")

    def runtime_calls(self) -> None:
        rt = self.rt
        for cid in list(rt.deleting):
            if self.cni_call("DEL", cid).get("ok"):
                del rt.deleting[cid]
        now = self.w.now()
        for cid in list(rt.adding):
            if now < rt.not_before.get(cid, now):
                continue  # kubelet's back-off: this sandbox is not made yet
            # made now: its ADD is sent, so a pod deleted from here on gets the sandbox's DEL
            # (``events._delete``), whatever this ADD's fate (an ``add-cut`` kills the agent in
            # it: the veth pair is made, and only that DEL takes it away)
            rt.not_before.pop(cid, None)
            got = self.cni_call("ADD", cid)
            if not got.get("ok") and rt.containerd:
                self._add_failed(cid, got, now)
                break
            if got.get("ok"):
                rt.failing.pop(cid, None)
                rt.not_before.pop(cid, None)
                ip = got["result"]["ips"][0]["address"].split("/")[0]
                del rt.adding[cid]
                rt.up[cid] = ip
                asked = rt.asked.pop(cid, None)
                if asked is not None:
                    rt.waits.append(self.w.now() - asked)
                self.w.pod_up(self, cid, ip)
            else:
                break  # one unmet ADD is demand enough; the others retry next time
