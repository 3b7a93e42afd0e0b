"""One seed's world: the real allocator, reconciler and agents against the
emulated AWS, in virtual time, with the faults of the seed's schedule.

What is real: :class:`functions.allocator.Allocator` (driven by the emulated
event-source mapping, :class:`sim.esm.EventSourceMapping`),
:class:`functions.reconciler.Reconciler`, and per node the agent's
:class:`~node_agent.datastore.Datastore` (with its checkpoint),
:class:`~node_agent.controller.PoolController` and
:class:`~node_agent.cniserver.CniService` (ADD/DEL/CHECK; GC and hostile
input go through the real plugin, :func:`node_agent.cni.run`, and the real
socket server). What stands in: EC2 (:mod:`sim.ec2`), SQS (:mod:`sim.sqs`),
the ledger, leases and buckets (:mod:`sim.memstores`; the ledger's batched
read goes through :class:`functions.stores.DynamoLedger` over a small
DynamoDB stand-in so UnprocessedKeys can be injected), IMDS (a per-node
lagging view of EC2), the pod wiring (recorded, :class:`SimPods`) and the
container runtime (:class:`Runtime`: ADD until it works, DEL until it works).

The run stops at the first violation (see :mod:`sim.dst.checks`).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import ipaddress
import json
import os
import random
import tempfile
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import ClientError

from functions.allocator import Allocator, Record, serial_map
from functions.reconciler import Reconciler
from functions.settings import Settings
from functions.stores import DynamoLedger
from node_agent import cni as cni_plugin
from node_agent.agent import RESTART_HOLD_S, RESULT_VISIBILITY_S
from node_agent.checkpoint import CheckpointError, MemoryCheckpoint
from node_agent.cniserver import CniService, CniSocketServer
from node_agent.config import ENV_CLUSTER_NAME
from node_agent.config import load as load_agent_config
from node_agent.controller import AttachedEni, NodeIdentity, PoolController
from node_agent.datastore import Datastore
from node_agent.hostnet import CLONE_NEWNET, PodNet, PodRefused, host_veth_name, ifname_problem, netns_refusal
from node_agent.netlink import NetlinkFailure, netns_path
from node_agent.records import EniInfo
from sim.clock import EventLoop, VirtualClock
from sim.dst import checks, hostile
from sim.dst.schedule import HOSTILE_KINDS, QUIET_S, SPAN_S, Event, Plan
from sim.ec2 import Ec2Config, Ec2Emulator
from sim.ec2.errors import Ec2Error
from sim.esm import EsmConfig, EventSourceMapping
from sim.iid import IdentitySigner
from sim.imds import Imds
from sim.memstores import MemBuckets, MemFlips, MemLeases, MemLedger
from sim.sqs import FastSqs
from warmpool import names
from warmpool.buckets import DEFAULT_SPECS, MUTATING_ENI_ACTIONS, BucketSpec, spec_for
from warmpool.limits import known
from warmpool.messages import MessageError, parse_result
from warmpool.pool import PoolConfig

T0 = 1_700_000_000.0
CLUSTER = "dst"
SUBNET_CIDR = "10.0.0.0/23"
AGENT_CONFIG = load_agent_config({ENV_CLUSTER_NAME: CLUSTER})
"""A production agent's settings (defaults, checked as the agent checks them at start:
release timeout >= MIN_RELEASE_TIMEOUT_S, ...)."""
TIMING = AGENT_CONFIG.timing  # cooldown 30 s, release delay 60 s, release timeout 120 s
GC_MIN_AGE_S = 60.0
"""The agent's CniService default (node_agent/agent.py does not change it)."""
GC_AGE_S = 120.0
RECONCILE_EVERY_S = 60.0
AGENT_EVERY_S = 2.0
RESYNC_S = AGENT_CONFIG.resync_s
ESM_EVERY_S = 1.0
FUNCTION_TIMEOUT_S = 300
REPORTS_VISIBILITY_S = 300
HOST_NETNS = ("/proc/1/ns/net", "/proc/self/ns/net")
"""The paths by which a CNI call could name the host's network namespace (the agent runs
with host networking: its own namespace is the host's, and the node's is its own)."""
HOST_IFNAMES = ("eth0", "ens5", "lo")
HOST_NS_ID = (4, 4026531840)
"""(device, inode) of the host's network namespace (nsfs)."""
POD_NETNS_DIR = "/var/run/netns/"
DESCRIBE_ACTIONS = ("DescribeInstances", "DescribeNetworkInterfaces")


class AgentKilled(BaseException):
    """kill -9 of the agent process (nothing in the agent may catch it)."""


class LambdaCrash(BaseException):
    """The invocation's process dies (nothing in the allocator may catch it)."""


class Stop(BaseException):
    """A violation was found: stop the run."""


@functools.cache
def _signer() -> IdentitySigner:
    """One test key per process (making one costs a few milliseconds)."""
    return IdentitySigner()


# --- IMDS with lag ---------------------------------------------------------------------


def _interfaces(md: dict[str, Any]) -> list[AttachedEni]:
    out = []
    for mac, d in md["network"]["interfaces"]["macs"].items():
        local = d["local-ipv4s"].split("\n")
        pfx = d.get("ipv4-prefix", "")
        info = EniInfo(eni_id=d["interface-id"], device_index=int(d["device-number"]), mac=mac,
                       primary_ip=local[0], subnet_id=d["subnet-id"], subnet_cidr=d["subnet-ipv4-cidr-block"],
                       network_card=int(d["network-card"]))
        out.append(AttachedEni(info, local[1:], pfx.split("\n") if pfx else []))
    return sorted(out, key=lambda a: (a.info.network_card, a.info.device_index))


class LaggedImds:
    """IMDS of one instance: EC2's state as it was ``lag`` seconds ago (never going back in time)."""

    def __init__(self, w: World, iid: str) -> None:
        self.w, self.iid = w, iid
        self.lag = 0.0
        self.history: list[tuple[float, tuple[Any, ...], list[AttachedEni]]] = []
        self._served = 0
        self.observe()

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
        self.history.append((self.w.now(), fp, _interfaces(self.w.emu.instance_metadata(self.iid))))

    def interfaces(self) -> list[AttachedEni]:
        self.observe()
        cut = self.w.now() - self.lag
        i = self._served
        while i + 1 < len(self.history) and self.history[i + 1][0] <= cut:
            i += 1
        self._served = i
        return list(self.history[i][2])


# --- the agent's side ----------------------------------------------------------------


class KillCheckpoint(MemoryCheckpoint):
    """The agent's checkpoint file; ``armed`` kills the agent at the next save, before it is written."""

    def __init__(self, w: World) -> None:
        super().__init__()
        self.w = w
        self.armed = False

    def save(self, data: dict[str, Any]) -> None:
        if self.armed:
            self.armed = False
            raise AgentKilled("killed before the checkpoint was written")
        super().save(data)
        self.w.version += 1


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

    ``fail`` makes the next set-up of a container fail (e.g. the netns vanished)."""

    def __init__(self, w: World, node: str) -> None:
        self.w, self.node = w, node
        self.wired: dict[tuple[str, str], str] = {}
        self.fail: set[str] = set()
        self._pod_ns: dict[str, tuple[int, int]] = {}

    # the node's namespaces
    def ns_id(self, netns: str) -> tuple[int, int] | None:
        """(device, inode) of the namespace a path names; None: no such file."""
        path = netns_path(netns)
        if path in HOST_NETNS:
            return HOST_NS_ID
        if path.startswith(POD_NETNS_DIR) and "/" not in path[len(POD_NETNS_DIR):]:
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
        ns = self.ns_id(netns)
        if ns is None:
            raise NetlinkFailure(2, f"network namespace {netns}: No such file or directory")
        if ns == HOST_NS_ID:
            self.w.violation("cni-host-touched", f"{self.node}: ADD {container_id} reached pod set-up of {ifname} in "
                             f"the host network namespace {netns} (the CNI service must refuse it first)")
        if ifname_problem(ifname):  # the kernel would refuse the name
            raise NetlinkFailure(22, f"interface name {ifname!r}: Invalid argument")
        kind = self.links(ns).get(ifname)
        if kind is not None:  # never this pod's veth: the model keeps pod veths apart
            raise PodRefused(f"interface {ifname} already exists in {netns} and is not this pod's veth "
                             f"({kind}): left alone")
        if container_id in self.fail:
            self.fail.discard(container_id)
            raise NetlinkFailure(2, f"netns of {container_id} vanished")
        self.wired[(container_id, ifname)] = ip
        return PodNet(host_veth_name(container_id, ifname), "ee:ee:ee:ee:ee:ee", "02:00:00:00:00:01", 0)

    def teardown(self, container_id: str, ifname: str, ip: str | None) -> None:
        self.wired.pop((container_id, ifname), None)

    def check(self, netns: str, ifname: str, container_id: str, ip: str, table: int) -> list[str]:
        return [] if self.wired.get((container_id, ifname)) == ip else ["not wired"]

    def host_wiring(self) -> None:
        return None


@dataclass
class Runtime:
    """The container runtime of one node: what it believes each pod holds."""

    up: dict[str, str] = field(default_factory=dict)  # container -> address
    adding: dict[str, None] = field(default_factory=dict)
    deleting: dict[str, None] = field(default_factory=dict)
    started: int = 0
    made: dict[str, float] = field(default_factory=dict)
    asked: dict[str, float] = field(default_factory=dict)
    """When each pod waiting for an address was started."""
    waits: list[float] = field(default_factory=list)
    """Each pod's wait for an address, from its start to its ADD answered (the fairness figure)."""
    """When each attachment's first ADD was answered (a DEL that works forgets it): every ADD
    the harness makes, including those whose answer the runtime then loses."""


class SimAgent:
    def __init__(self, w: World, name: str, iid: str, itype: str) -> None:
        self.w, self.name, self.iid, self.itype = w, name, iid, itype
        self.cp = KillCheckpoint(w)
        self.pods = SimPods(w, name)
        self.imds = LaggedImds(w, iid)
        self.rt = Runtime()
        self.sqs = w.sqs.client(sender_id=f"AROAEXAMPLE:{iid}")
        self.result_url = self.sqs.create_queue(
            QueueName=names.result_queue(CLUSTER, iid), Attributes={"VisibilityTimeout": str(RESULT_VISIBILITY_S)}
        )["QueueUrl"]
        self.alive = False
        self.gone = False
        self.kill_point: str | None = None
        self.sent: list[tuple[float, int]] = []  # (time, seq) of every report sent
        self.ds: Datastore
        self.ctl: PoolController
        self.cni: CniService
        self.boot()

    # life cycle
    def boot(self) -> None:
        w = self.w
        now = w.now()
        ds = Datastore(cooldown_s=TIMING.cooldown_s, pending_ttl_s=TIMING.pending_ttl_s, checkpoint=self.cp)
        with self.guard():
            try:
                ds.restore()
            except CheckpointError:
                pass
            pool = PoolConfig(warm_ip=w.plan.warm_ip, minimum_ip=w.plan.minimum_ip,
                              warm_prefix=1, prefix_mode=w.plan.prefix_mode)
            ident = NodeIdentity(cluster=CLUSTER, node=self.name, instance_id=self.iid,
                                 instance_type=self.itype, availability_zone="us-east-1a")
            self.ds = ds
            # as node_agent/agent.py builds them (add_wait_s 0: an ADD waiting on a real-time
            # condition would stall virtual time; the runtime's retry stands in for the wait)
            self.ctl = PoolController(ident, known(self.itype), pool, ds, TIMING, metadata=self.imds,
                                      restart_hold_s=RESTART_HOLD_S,
                                      signed_identity=functools.partial(w.signer_imds.identity, self.iid))
            self.cni = CniService(ds, self.pods, clock=w.loop, gc_min_age_s=GC_MIN_AGE_S,
                                  veth_prefix=AGENT_CONFIG.veth_prefix)
            self.alive = True
            self.resynced_at = now
            self.ctl.start(now)

    def die(self, why: str) -> None:
        if not self.alive:
            return
        self.alive = False
        self.kill_point = None
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
        now = w.now()
        with self.guard():
            try:
                self.receive()
                if not self.alive:
                    return
                if now - self.resynced_at >= RESYNC_S:
                    self.resynced_at = now
                    self.ctl.resync(now)
                self.runtime_calls()
                for report in self.ctl.tick(now):
                    self.sent.append((now, report.seq))
                    body = report.to_json()
                    w.last_report[self.iid] = body
                    w.send_report(self, body)
            except Exception as exc:  # the agent's loop would die (or spin) on this
                w.violation("agent-raised", f"{self.name}: {type(exc).__name__}: {str(exc)[:300]}")

    def last_seq(self) -> int:
        return self.sent[-1][1] if self.sent else -1

    def receive(self) -> None:
        w = self.w
        while self.alive:
            msgs = self.sqs.receive_message(QueueUrl=self.result_url, MaxNumberOfMessages=10,
                                            VisibilityTimeout=RESULT_VISIBILITY_S).get("Messages", [])
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
                if self.kill_point in ("mid-apply", "mid-checkpoint"):
                    self.cp.armed = True
                self.ctl.apply_result(result, w.now())
                self.cp.armed = False
                if self.kill_point == "after-apply":
                    raise AgentKilled("after applying a result, before deleting it")
                self.sqs.delete_message(QueueUrl=self.result_url, ReceiptHandle=m["ReceiptHandle"])

    def cni_call(self, command: str, cid: str, ifname: str = "eth0", netns: str | None = None) -> dict[str, Any]:
        req = {"command": command, "container_id": cid, "ifname": ifname,
               "netns": netns if netns is not None else f"/var/run/netns/{cid}",
               "config": {"cniVersion": "1.0.0", "name": "warmpool", "type": "warmpool"}}
        out: dict[str, Any] = self.cni.handle(req)
        if out.get("ok") and command == "ADD":
            self.rt.made.setdefault(cid, self.w.now())
        elif out.get("ok") and command == "DEL":
            self.rt.made.pop(cid, None)
        return out

    def runtime_calls(self) -> None:
        rt = self.rt
        for cid in list(rt.deleting):
            if self.cni_call("DEL", cid).get("ok"):
                del rt.deleting[cid]
        for cid in list(rt.adding):
            got = self.cni_call("ADD", cid)
            if got.get("ok"):
                ip = got["result"]["ips"][0]["address"].split("/")[0]
                del rt.adding[cid]
                rt.up[cid] = ip
                asked = rt.asked.pop(cid, None)
                if asked is not None:
                    rt.waits.append(self.w.now() - asked)
                self.w.pod_up(self, cid, ip)
            else:
                break  # one unmet ADD is demand enough; the others retry next time


# --- the allocator's side: wrappers ------------------------------------------------------


class InvClock:
    """The allocator's clock: virtual time plus the time the running invocation has taken."""

    def __init__(self, base: VirtualClock) -> None:
        self.base = base
        self.elapsed = 0.0

    def now(self) -> float:
        return self.base.now() + self.elapsed


@dataclass
class Invocation:
    owner: str
    crash: tuple[str, int] | None
    slow_s: float
    mutating: int = 0
    timeout_at: float = 0.0
    bodies: list[str] = field(default_factory=list)
    stalled: bool = False


class AllocEc2:
    """The allocator's EC2 client: crashes, slow calls, termination mid-allocation, lease checks."""

    def __init__(self, w: World) -> None:
        self.w = w
        self.inner = w.emu.client()

    def __getattr__(self, name: str) -> Callable[..., dict[str, Any]]:
        fn = getattr(self.inner, name)
        mutating = not name.startswith(("describe_", "get_", "list_"))
        w = self.w

        def call(**kw: Any) -> dict[str, Any]:
            inv = w.invocations[-1] if w.invocations else None
            if inv is not None:
                if inv.slow_s and mutating and not inv.stalled:
                    # one call hangs (connect timeouts, SDK retries) and then goes through
                    inv.stalled = True
                    w.clock_inv.elapsed += inv.slow_s
                    if w.clock_inv.now() >= inv.timeout_at:
                        raise LambdaCrash("timed out")
                    w.maybe_overlap(inv)
                if mutating and inv.crash is not None and inv.crash[0] == "ec2" and inv.mutating >= inv.crash[1]:
                    raise LambdaCrash("crashed between EC2 calls")
            # the instance a call acts for, read before anything changes (a termination
            # armed for this call detaches the ENI the call names)
            iid = w.iid_of_call(kw) if mutating else None
            node = w.node_of_iid(iid)
            if iid is not None and mutating:
                w.calls_by_iid.setdefault(iid, []).append((w.now(), name))
            if iid is not None and inv is not None:
                w.check_lease(inv, node or iid, name, iid)
            if node is not None:
                w.maybe_terminate_now(node)
                if name == "unassign_private_ip_addresses":
                    w.check_release(node, kw)
            out: dict[str, Any] = fn(**kw)
            if inv is not None and mutating:
                inv.mutating += 1
            return out

        return call


class FakeDynamo:
    """Just enough DynamoDB for :meth:`DynamoLedger.last_seqs`: BatchGetItem over a
    :class:`MemLedger`, with UnprocessedKeys on demand (every retry, as in a hot partition)."""

    def __init__(self, w: World, ledger: MemLedger) -> None:
        self.w, self.ledger = w, ledger

    def batch_get_item(self, RequestItems: dict[str, Any]) -> dict[str, Any]:
        (table, req), = RequestItems.items()
        got, left = [], []
        rate = self.w.active.get("ddb-unprocessed", 0.0)
        for key in req["Keys"]:
            if rate and self.w.rng("ddb").random() < rate:
                left.append(key)
                continue
            node = key[names.LEDGER_PK]["S"].split("#", 2)[2]
            item = self.ledger._items.get((CLUSTER, node))
            if item is not None:
                got.append({names.LEDGER_PK: key[names.LEDGER_PK], "last_seq": {"N": str(item["last_seq"])}})
        if left:
            self.w.fault("ddb-unprocessed")
        out: dict[str, Any] = {"Responses": {table: got}}
        if left:
            out["UnprocessedKeys"] = {table: {**req, "Keys": left}}
        return out


class SimLedger(MemLedger):
    """The ledger: MemLedger, but batched reads through the real DynamoLedger code;
    crash points before and after a write; every write noted for the checks."""

    def __init__(self, w: World) -> None:
        super().__init__()
        self.w = w
        self.dynamo = DynamoLedger(FakeDynamo(w, self), "ledger")  # type: ignore[arg-type]

    def last_seqs(self, cluster: str, nodes: list[str]) -> dict[str, int]:
        return self.dynamo.last_seqs(cluster, nodes)

    def record(self, cluster: str, node: str, seq: int, outcome: dict[str, Any], now: float) -> bool:
        inv = self.w.invocations[-1] if self.w.invocations else None
        if inv is not None and inv.crash == ("ledger-before", 0):
            raise LambdaCrash("crashed before the ledger write")
        ok = super().record(cluster, node, seq, outcome, now)
        if ok:
            self.w.recorded[node] = (str(outcome.get("instance_id", "")), seq)
            if (node, seq) in self.w.forged:
                self.w.violation("forged-served", f"the ledger of {node} moved to {seq}, the seq of a crafted "
                                 f"report (status {outcome.get('status')}, actions {outcome.get('actions')})"[:400])
        if inv is not None and inv.crash == ("ledger-after", 0):
            raise LambdaCrash("crashed after the ledger write")
        return ok


class TrackedLeases(MemLeases):
    def __init__(self) -> None:
        super().__init__()
        self.held: dict[str, tuple[str, float]] = {}

    def claim(self, cluster: str, node: str, owner: str, now: float, ttl_s: float) -> bool:
        ok = super().claim(cluster, node, owner, now, ttl_s)
        if ok:
            self.held[node] = (owner, now + ttl_s)
        return ok

    def release(self, cluster: str, node: str, owner: str) -> None:
        super().release(cluster, node, owner)
        if self.held.get(node, ("", 0))[0] == owner:
            del self.held[node]


class AllocSqs:
    """The allocator's SQS client: results (checked, delayed, duplicated) and deferrals."""

    def __init__(self, w: World) -> None:
        self.w = w
        self.inner = w.sqs.client()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def send_message(self, **kw: Any) -> dict[str, Any]:
        inv = self.w.invocations[-1] if self.w.invocations else None
        if inv is not None and inv.crash == ("push", 0):
            raise LambdaCrash("crashed before pushing a result")
        self.w.on_message(kw["QueueUrl"], kw["MessageBody"])
        return self.w.deliver(self.inner, kw)

    def send_message_batch(self, **kw: Any) -> dict[str, Any]:
        out: dict[str, Any] = {"Successful": [], "Failed": []}
        for e in kw["Entries"]:
            one = {k: v for k, v in e.items() if k != "Id"}
            self.send_message(QueueUrl=kw["QueueUrl"], **one)
            out["Successful"].append({"Id": e["Id"], "MessageId": "x", "MD5OfMessageBody": ""})
        return out


class ReconcilerEc2:
    """The reconciler's EC2 client; under ``reconcile-race`` an invocation runs while it reads."""

    def __init__(self, w: World) -> None:
        self.w = w
        self.inner = w.emu.client()
        self.once: Callable[[], None] | None = None

    def __getattr__(self, name: str) -> Any:
        fn = getattr(self.inner, name)
        if name != "describe_instances":
            return fn

        def call(**kw: Any) -> dict[str, Any]:
            out: dict[str, Any] = fn(**kw)
            if self.once is not None:
                once, self.once = self.once, None
                once()
            if "reconcile-race" in self.w.active:
                self.w.fault("reconcile-race")
                self.w.esm_tick()
            return out

        return call


class ReconcilerSqs:
    def __init__(self, w: World) -> None:
        self.w = w
        self.inner = w.sqs.client()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def delete_queue(self, **kw: Any) -> dict[str, Any]:
        if "queue-delete-failure" in self.w.active:
            self.w.fault("queue-delete-failure")
            raise ClientError({"Error": {"Code": "InternalError", "Message": "injected"}}, "DeleteQueue")
        out: dict[str, Any] = self.inner.delete_queue(**kw)
        return out


# --- the world ---------------------------------------------------------------------------


@dataclass
class Outcome:
    seed: int
    events: int
    faults: Counter[str]
    violations: list[tuple[str, str]]
    virtual_s: float


class World:
    def __init__(self, plan: Plan, mutate: Callable[[World], None] | None = None) -> None:
        self.plan = plan
        self.loop = EventLoop(VirtualClock(T0))
        self.faults: Counter[str] = Counter()
        self.violations: list[tuple[str, str]] = []
        self.active: dict[str, Any] = {}
        self._rngs: dict[str, random.Random] = {}
        fraction = plan.quota_fraction
        real = {a: BucketSpec(capacity=max(1.0, s.capacity * fraction), refill_per_s=s.refill_per_s * fraction)
                for a, s in DEFAULT_SPECS.items()} if fraction < 1 else {}
        if real:
            self.faults["quota-below"] += 1
        self.emu = Ec2Emulator(self.loop.clock, Ec2Config(buckets=real, attach_delay_s=2.0, detach_delay_s=1.0),
                               seed=plan.seed)
        vpc = self.emu.add_vpc("10.0.0.0/16")
        self.subnet = self.emu.add_subnet(az="us-east-1a", cidr=SUBNET_CIDR, vpc_id=vpc,
                                          tags={names.cluster_tag_key(CLUSTER): "shared"})
        self.sqs = FastSqs(self.loop.clock)
        self.signer_imds = Imds(self.emu, signer=_signer())
        """Signs each instance's identity document; agents carry it in every report and the
        allocator verifies it against this signer's certificate (``identity_verification`` is
        left at its default, ``required``: fail-closed)."""
        raw = self.sqs.client()
        self.dlq_url = raw.create_queue(QueueName=names.reports_dlq(CLUSTER))["QueueUrl"]
        dlq_arn = raw.get_queue_attributes(QueueUrl=self.dlq_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        self.reports_url = raw.create_queue(QueueName=names.reports_queue(CLUSTER), Attributes={
            "VisibilityTimeout": str(REPORTS_VISIBILITY_S),
            "RedrivePolicy": json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": 5}),
        })["QueueUrl"]
        trust = {"identity_certificates": self.signer_imds.signer.certificate_pem, "region": self.emu.config.region}
        self.settings = Settings(cluster=CLUSTER, reports_queue_url=self.reports_url, dlq_url=self.dlq_url,
                                 result_queue_prefix=names.result_queue_prefix(CLUSTER),
                                 ledger_table=names.ledger_table(CLUSTER), account=self.emu.owner,
                                 gc_age_s=GC_AGE_S, allocate_timeout_s=FUNCTION_TIMEOUT_S, **trust)
        # lease TTL and deadline margin derived from the function timeout, as in the stack
        self.clock_inv = InvClock(self.loop.clock)
        self.buckets = MemBuckets(self.settings.bucket_spec, self.settings.account, self.settings.region)
        self.ledger = SimLedger(self)
        self.leases = TrackedLeases()
        self.recorded: dict[str, tuple[str, int]] = {}
        self.invocations: list[Invocation] = []
        self.alloc_ec2 = AllocEc2(self)
        self.allocator = Allocator(ec2=self.alloc_ec2, sqs=AllocSqs(self), buckets=self.buckets, ledger=self.ledger,
                                   leases=self.leases, clock=self.clock_inv, settings=self.settings,
                                   mapper=serial_map, flips=MemFlips())
        self._handle_kw = set(inspect.signature(self.allocator.handle_batch).parameters)
        self.reconciler_ec2 = ReconcilerEc2(self)
        self.reconciler = Reconciler(ec2=self.reconciler_ec2, sqs=ReconcilerSqs(self), buckets=self.buckets,
                                     ledger=self.ledger, leases=self.leases, clock=self.loop.clock,
                                     settings=self.settings)
        self.esm = EventSourceMapping(
            raw, self.reports_url, self.handler,
            EsmConfig(function_name="warmpool-dst-allocate", batch_size=10, maximum_concurrency=2,
                      function_timeout_s=FUNCTION_TIMEOUT_S),
            self.clock_inv, duration=lambda batch, out: 0.2,
        )
        self.agents: dict[str, SimAgent] = {}
        self.by_url: dict[str, SimAgent] = {}
        self.by_iid: dict[str, SimAgent] = {}
        self.terminated: dict[str, float] = {}  # instance -> when
        self.pushed: dict[str, int] = {}  # node -> highest in_reply_to of a result with EC2 effects
        self.detached_since: dict[str, float] = {}
        self.arm_terminate: set[str] = set()
        self.overlap_done: set[str] = set()
        self.events_run = 0
        self.invocation_count = 0
        self.version = 0
        """Bumped by every change the checks look at (checkpoint saves, pods, EC2 calls)."""
        self.checked: tuple[Any, ...] = ()
        self.sockdir: str | None = None
        # issue 12's hostile nodes (sim.dst.hostile)
        self.last_report: dict[str, str] = {}  # instance -> the last report its agent sent
        self.forged: set[tuple[str, int]] = set()  # (instance, seq) of every crafted report
        self.crafted_bodies: set[str] = set()  # every hostile report (left out of the DLQ check)
        self.churners: list[hostile.Churner] = []
        self.calls_by_iid: dict[str, list[tuple[float, str]]] = {}  # the allocator's mutating EC2 calls
        self.sprayed: set[str] = set()  # node names a node sprayed
        self.outsider_sqs = self.sqs.client(sender_id="AROAEXAMPLE:outsider")
        for name, itype in plan.nodes:
            self.join(name, itype)
        if mutate is not None:
            mutate(self)

    # --- helpers
    def now(self) -> float:
        return self.loop.now()

    def rng(self, purpose: str) -> random.Random:
        r = self._rngs.get(purpose)
        if r is None:
            r = self._rngs[purpose] = random.Random(f"{self.plan.seed}/{purpose}")
        return r

    def fault(self, kind: str, n: int = 1) -> None:
        self.faults[kind] += n

    def violation(self, invariant: str, detail: str) -> None:
        self.violations.append((invariant, f"t={self.now() - T0:.1f}s: {detail}"))
        if threading.current_thread() is not threading.main_thread():
            return  # the CNI socket server's thread: the plugin call's caller stops the run
        raise Stop()

    def join(self, name: str, itype: str) -> SimAgent:
        iid = self.emu.run_instance(itype, subnet_id=self.subnet,
                                    tags={names.cluster_tag_key(CLUSTER): "owned", "Name": name})
        a = SimAgent(self, name, iid, itype)
        self.agents[name] = a
        self.by_url[a.result_url] = a
        self.by_iid[iid] = a
        self.loop.every(AGENT_EVERY_S, a.periodic, start=self.now() + self.rng("jitter").uniform(0, AGENT_EVERY_S))
        return a

    def iid_of_call(self, kw: dict[str, Any]) -> str | None:
        """The instance an EC2 call of the allocator acts for: the instance it names, the one
        the ENI it names is attached to (or was created for: warmpool's instance-id tag), the
        ENI of the attachment it names, the ENI it tags, or the instance a new ENI is tagged for."""
        iid = kw.get("InstanceId")
        if iid:
            return str(iid)
        eni_id = kw.get("NetworkInterfaceId")
        if not eni_id and kw.get("Resources"):
            eni_id = kw["Resources"][0]
        e = self.emu.enis.get(eni_id) if eni_id else None
        if e is None and kw.get("AttachmentId"):
            e = next((x for x in self.emu.enis.values()
                      if x.attachment is not None and x.attachment.id == kw["AttachmentId"]), None)
        if e is not None:
            if e.attachment is not None:
                return e.attachment.instance_id
            return e.tags.get(names.TAG_INSTANCE_ID) or None
        for spec in kw.get("TagSpecifications") or ():
            for t in spec.get("Tags", ()):
                if t.get("Key") == names.TAG_INSTANCE_ID:
                    return str(t["Value"])
        return None

    def node_of_iid(self, iid: str | None) -> str | None:
        a = self.by_iid.get(iid) if iid else None
        return a.name if a is not None else None

    def node_of_call(self, kw: dict[str, Any]) -> str | None:
        return self.node_of_iid(self.iid_of_call(kw))

    def ledger_row(self, a: SimAgent) -> dict[str, Any] | None:
        """The agent's ledger row: keyed by its instance id (``node`` is only a label)."""
        return self.ledger._items.get((CLUSTER, a.iid))

    # --- messages
    def deliver(self, client: Any, kw: dict[str, Any]) -> dict[str, Any]:
        """Send with the schedule's SQS faults: a delay, duplicates (each with its own delay)."""
        copies = 1
        dup = self.active.get("sqs-duplicate")
        if dup and self.rng("sqs").random() < dup[0]:
            copies = dup[1]
            self.fault(f"sqs-duplicate-x{copies}")
        out: dict[str, Any] = {}
        for _ in range(copies):
            one = dict(kw)
            max_delay = self.active.get("sqs-delay")
            if max_delay:
                d = int(self.rng("sqs").uniform(0, max_delay))
                if d:
                    self.fault("sqs-delay")
                    one["DelaySeconds"] = min(900, int(one.get("DelaySeconds", 0)) + d)
            out = client.send_message(**one)
        return out

    def send_report(self, agent: SimAgent, body: str) -> None:
        self.deliver(agent.sqs, {"QueueUrl": self.reports_url, "MessageBody": body})

    def on_message(self, url: str, body: str) -> None:
        """Every message the allocator sends: results are checked (a stale report acted on)."""
        agent = self.by_url.get(url)
        if agent is None:
            return
        try:
            res = parse_result(body)
        except MessageError:
            self.violation("bad-result", f"allocator sent an unparseable result: {body[:200]}")
            return
        if (res.instance_id, res.in_reply_to) in self.forged:
            self.violation("forged-served", f"{res.node} ({res.instance_id}): a result in reply to crafted report "
                           f"{res.in_reply_to}: {[a.kind for a in res.actions]}")
        if any(a.kind in ("attached", "assigned", "released", "deleted") for a in res.actions):
            last = self.pushed.get(res.instance_id, -1)
            if res.in_reply_to < last:
                self.violation("stale-report-served", f"{res.node} ({res.instance_id}): report {res.in_reply_to} "
                               f"acted on after report {last} had been (kinds {[a.kind for a in res.actions]})")
            self.pushed[res.instance_id] = max(last, res.in_reply_to)

    # --- the allocator
    def handler(self, event: dict[str, Any], ctx: Any) -> dict[str, Any]:
        # the invocation's id (the allocator's lease owner) from the seed, not the
        # context's random request id: violation messages replay word for word
        self.invocation_count += 1
        return self._invoke(event["Records"], f"inv-{self.plan.seed}-{self.invocation_count}", ctx)

    def _invoke(self, recs: list[dict[str, Any]], owner: str, ctx: Any = None) -> dict[str, Any]:
        crash: tuple[str, int] | None = None
        rate = self.active.get("lambda-crash", 0.0)
        r = self.rng("lambda")
        if rate and r.random() < rate:
            crash = r.choice((("ec2", 0), ("ec2", 1), ("ec2", 2), ("ledger-before", 0), ("ledger-after", 0),
                              ("push", 0)))
        slow = 0.0
        srate = self.active.get("slow-invocation", 0.0)
        if srate and r.random() < srate:
            slow = r.choice((45.0, 90.0, 150.0))
            self.fault("slow-invocation")
        nested = bool(self.invocations)
        inv = Invocation(owner, crash, slow, timeout_at=self.clock_inv.now() + FUNCTION_TIMEOUT_S,
                         bodies=[x["body"] for x in recs])
        records = [Record(message_id=x["messageId"], body=x["body"],
                          sender_id=str((x.get("attributes") or {}).get("SenderId", ""))) for x in recs]
        kw: dict[str, Any] = {"invocation_id": owner}
        if "context" in self._handle_kw and ctx is not None:
            kw["context"] = ctx
        if "deadline" in self._handle_kw:
            kw["deadline"] = inv.timeout_at
        self.invocations.append(inv)
        try:
            out = self.allocator.handle_batch(records, **kw)
        except LambdaCrash as c:
            self.fault(f"lambda-crash:{c}")
            raise RuntimeError(f"injected: {c}") from None
        except Stop:
            raise
        except Exception as exc:
            self.violation("allocator-raised", f"handle_batch raised {type(exc).__name__}: {exc}")
            raise
        finally:
            self.invocations.pop()
            if not nested:
                self.clock_inv.elapsed = 0.0
        if crash is not None:
            # the crash point was never reached (no EC2 call, no write): the process dies at the end
            self.fault("lambda-crash:after the batch")
            raise RuntimeError("injected: died after the batch")
        result: dict[str, Any] = out.batch_item_failures()
        return result

    def maybe_overlap(self, inv: Invocation) -> None:
        """A slow invocation past its lease: a copy of one of its reports (SQS delivers at
        least once) is handled by a second invocation while the first still runs."""
        if len(self.invocations) > 1:
            return
        for node, (owner, until) in list(self.leases.held.items()):
            if owner != inv.owner or self.clock_inv.now() < until:
                continue
            body = next((b for b in inv.bodies if f'"node":"{node}"' in b or f'"instance_id":"{node}"' in b), None)
            if body is None:
                continue
            self.fault("lease-overrun")
            with contextlib.suppress(RuntimeError):
                self._invoke([{"messageId": f"dup-{self.events_run}", "body": body, "attributes": {}}],
                             owner=f"overlap-{self.events_run}")
            return

    def check_lease(self, inv: Invocation, node: str, call: str, iid: str) -> None:
        """The allocator's leases are keyed by instance id (``node`` is the label, for the message)."""
        held = self.leases.held.get(iid)
        if held is None or held[0] != inv.owner:
            self.violation("lease", f"invocation {inv.owner} called {call} on {node} ({iid}) without holding its "
                           f"lease (held by {held[0] if held else 'nobody'})")
        elif self.clock_inv.now() > held[1]:
            self.violation("lease", f"invocation {inv.owner} called {call} on {node} ({iid}) "
                           f"{self.clock_inv.now() - held[1]:.0f}s after its lease expired")

    def check_release(self, node: str, kw: dict[str, Any]) -> None:
        """EC2 is about to take addresses back from a node: no pod there may hold one, and
        the (running) agent must still have each one quarantined, i.e. on offer."""
        a = self.agents.get(node)
        if a is None or a.gone:
            return
        ips = set(kw.get("PrivateIpAddresses") or [])
        prefixes = list(kw.get("Ipv4Prefixes") or [])
        for cid, ip in a.rt.up.items():
            if ip in ips or (prefixes and checks._in_prefix(ip, prefixes)):
                self.violation("released-in-use", f"the allocator unassigns {ip} from {node} while pod {cid} holds it")
        if not a.alive:
            return
        for e in a.ds.enis():
            for ip, addr in e.addrs.items():
                hit = ip in ips or (addr.prefix is not None and addr.prefix in prefixes)
                if hit and addr.quarantined_at is None:
                    self.violation("released-not-offered", f"the allocator unassigns {addr.prefix or ip} from "
                                   f"{node}, which its agent no longer offers (taken back into the pool)")

    def esm_tick(self) -> None:
        self.esm.tick(self.clock_inv.now())

    # --- pods and the runtime
    def pod_up(self, agent: SimAgent, cid: str, ip: str) -> None:
        self.version += 1
        checks.pod_up(self, agent, cid, ip)

    def maybe_terminate_now(self, node: str) -> None:
        if node in self.arm_terminate:
            self.arm_terminate.discard(node)
            self.terminate(node)

    def terminate(self, node: str) -> None:
        a = self.agents.get(node)
        if a is None or a.gone:
            return
        self.fault("terminate")
        self.emu.terminate_instance(a.iid)
        a.gone = True
        a.alive = False
        self.terminated[a.iid] = self.now()

    # --- the schedule
    def apply(self, ev: Event) -> None:
        k, x = ev.kind, ev.args
        a = self.agents.get(x.get("node", ""))
        if k in ("pods-add", "churn"):
            if a is None or a.gone:
                return
            self.add_pods(a, x["n"], "p")
            if k == "churn":
                self._delete(a, max(1, x["n"] - 1), oldest=False)
        elif k == "pods-del":
            if a is not None and not a.gone:
                self._delete(a, x["n"])
        elif k == "sqs-delay":
            self._window(k, x["max_s"], x["dur"])
        elif k == "sqs-duplicate":
            self._window(k, (x["rate"], x["copies"]), x["dur"])
        elif k == "imds-lag":
            if a is not None:
                a.imds.lag = x["lag"]
                self.fault("imds-lag")
                self.loop.call_later(x["dur"], lambda a=a: setattr(a.imds, "lag", 0.0))
        elif k == "agent-kill":
            if a is None or a.gone or not a.alive:
                return
            if x["point"] == "idle":
                a.die("idle")
            else:
                a.kill_point = x["point"]
                if x["point"] == "mid-checkpoint":
                    a.cp.armed = True
                self.loop.call_later(30, lambda a=a: a.die("late") if a.kill_point else None)
            self.loop.call_later(x["down"] + (0 if x["point"] == "idle" else 30), lambda a=a: self._restart(a))
        elif k in ("lambda-crash", "slow-invocation"):
            self._window(k, x["rate"], x["dur"])
        elif k == "throttle-storm":
            actions = [*MUTATING_ENI_ACTIONS, *(DESCRIBE_ACTIONS if x["describe"] else ())]
            for act in actions:
                load = spec_for(act, {}).refill_per_s * (1 + x["rate"] / 5)
                self.emu.set_background_load(act, load)
                self.loop.call_later(x["dur"], lambda act=act: self.emu.set_background_load(act, 0.0))
            self.fault("throttle-storm")
        elif k == "foreign-load":
            act = x["action"]
            self.emu.set_background_load(act, spec_for(act, {}).refill_per_s * x["rate"] / 2)
            self.loop.call_later(x["dur"], lambda: self.emu.set_background_load(act, 0.0))
            self.fault("foreign-load")
        elif k == "subnet-exhausted":
            self.emu.set_subnet_exhausted(self.subnet, True)
            self.loop.call_later(x["dur"], lambda: self.emu.set_subnet_exhausted(self.subnet, False))
            self.fault(k)
        elif k == "fragmentation":
            self._fragment(x["n"])
        elif k == "attach-failure":
            self.emu.fail_rate("AttachNetworkInterface", "InternalError", x["rate"])
            self.loop.call_later(x["dur"], lambda: self.emu.fail_rate("AttachNetworkInterface", "InternalError", 0))
            self.fault(k)
        elif k == "terminate":
            if a is not None and not a.gone:
                self.arm_terminate.add(a.name)
                self.loop.call_later(10, lambda a=a: self.terminate(a.name))
        elif k == "replace-node":
            if a is not None and not a.gone:
                itype = a.itype
                self.terminate(a.name)
                self.fault("replace-node")
                if x.get("race"):
                    self._replace_racing(a.name, itype)
                else:
                    self.loop.call_later(x["gap"], lambda n=a.name, t=itype: self._join_later(n, t))
        elif k == "cni-overlap":
            self._overlap(a)
        elif k == "cni-interrupted":
            if a is not None and a.alive and not a.gone:
                a.rt.started += 1
                cid = f"{a.name}-lost{a.rt.started}"
                with a.guard():
                    if a.cni_call("ADD", cid).get("ok"):
                        self.fault("cni-interrupted")
        elif k in HOSTILE_KINDS:
            self._hostile_node(k, x)
        elif k == "cni-gc":
            self._gc(a)
        elif k == "cni-hostile":
            self._hostile(a, x["variant"])
        elif k in ("ddb-unprocessed",):
            self._window(k, x["rate"], x["dur"])
        elif k in ("queue-delete-failure", "reconcile-race"):
            self._window(k, True, x["dur"])
        else:
            raise ValueError(f"unknown event kind {k}")

    def add_pods(self, a: SimAgent, n: int, tag: str) -> None:
        for _ in range(n):
            a.rt.started += 1
            cid = f"{a.name}-{tag}{a.rt.started}"
            a.rt.adding[cid] = None
            a.rt.asked[cid] = self.now()

    def delete_pods(self, a: SimAgent, n: int) -> None:
        self._delete(a, n)

    def _hostile_node(self, k: str, x: dict[str, Any]) -> None:
        """Issue 12's hostile nodes (:mod:`sim.dst.hostile`); ``node`` "" is the outsider."""
        sender = self.agents.get(x.get("node", ""))
        if sender is not None and sender.gone:
            return
        if k == "churner":
            try:
                c = hostile.Churner(self, x["itype"], x["period"], self.now() + x["dur"])
            except Ec2Error:  # the subnet is full: the rogue instance launches later
                self.fault("churner:no-room")
                left = {**x, "dur": x["dur"] - 10.0}
                if left["dur"] > 0:
                    self.loop.call_later(10.0, lambda: self._hostile_node(k, left))
                return
            self.churners.append(c)
            self.fault("churner")
            c.step()
            return
        if k == "name-spray":
            if sender is not None:
                hostile.name_spray(self, sender, x["n"])
            return
        victim = self.agents.get(x["victim"])
        if victim is None:
            return
        if k == "forged-release":
            hostile.forged_release(self, sender, victim, x["identity"])
        else:
            hostile.seq_poison(self, sender, victim, x["identity"])
        if x.get("repeat", 0) > 0:
            again = {**x, "repeat": x["repeat"] - 1}
            self.loop.call_later(7.0, lambda: self._hostile_node(k, again))

    def _join_later(self, name: str, itype: str) -> None:
        """The replacement instance launches (its auto scaling group retries while the subnet is full)."""
        try:
            self.join(name, itype)
        except Ec2Error:
            self.loop.call_later(10.0, lambda: self._join_later(name, itype))

    def _replace_racing(self, name: str, itype: str) -> None:
        """A scheduled reconcile reads the ledger just before the new instance that reuses
        the name has its first report served: the serve lands while the reconciler is
        between its read and its clean-up."""
        self.fault("replace-node:racing-reconcile")
        inner = self.reconciler_ec2

        def during_describe() -> None:
            try:
                a = self.join(name, itype)
            except Ec2Error:
                self.loop.call_later(10.0, lambda: self._join_later(name, itype))
                return
            a.periodic()
            self.esm_tick()

        inner.once = during_describe
        self._reconcile()

    def _window(self, kind: str, value: Any, dur: float) -> None:
        self.active[kind] = value
        self.fault(kind + ":window")

        def end() -> None:
            if self.active.get(kind) is value:
                del self.active[kind]

        self.loop.call_later(dur, end)

    def _delete(self, a: SimAgent, n: int, oldest: bool = True) -> None:
        rt = a.rt
        for cid in (sorted(rt.up) if oldest else sorted(rt.up, reverse=True))[:n]:
            del rt.up[cid]
            self.version += 1
            rt.deleting[cid] = None
        for cid in list(rt.adding)[: max(0, n - len(rt.up))]:
            del rt.adding[cid]
            rt.asked.pop(cid, None)
            rt.deleting[cid] = None

    def _restart(self, a: SimAgent) -> None:
        if a.gone or a.alive:
            return
        a.boot()

    def _fragment(self, n: int) -> None:
        """Foreign ENIs holding addresses scattered over the subnet: /28 prefixes get scarce."""
        net = ipaddress.IPv4Network(SUBNET_CIDR)
        r = self.rng("frag")
        c = self.emu.client()
        taken = {ip for e in self.emu.enis.values() for ip in [e.primary_ip, *e.secondary]}
        hosts = [str(h) for h in net.hosts()][4:-1]
        picks = [h for h in r.sample(hosts, min(n, len(hosts))) if h not in taken]
        for ip in picks:
            try:
                c.create_network_interface(SubnetId=self.subnet, PrivateIpAddress=ip)
            except ClientError:
                continue
            self.fault("fragmentation")

    def _overlap(self, a: SimAgent | None) -> None:
        """A second ADD for a container whose first ADD already returned; its wiring fails."""
        if a is None or not a.alive or a.gone or not a.rt.up:
            return
        cid = sorted(a.rt.up)[-1]
        a.pods.fail.add(cid)
        self.fault("cni-overlap")
        with a.guard():
            a.cni_call("ADD", cid)
        a.pods.fail.discard(cid)

    def _plugin(self, a: SimAgent, environ: dict[str, str], stdin: str) -> tuple[int, str]:
        """The real CNI plugin over the real socket server of the agent."""
        if self.sockdir is None:
            self.sockdir = tempfile.mkdtemp(prefix="warmpool-dst-")
        path = os.path.join(self.sockdir, f"{a.name}.sock")
        server = CniSocketServer(path, a.cni)
        t = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        t.start()
        env = {"CNI_PATH": "/opt/cni/bin", cni_plugin.SOCKET_ENV: path, **environ}
        try:
            try:
                return cni_plugin.run(env, stdin)
            except Exception as exc:
                self.violation("cni-plugin-crashed", f"{a.name}: plugin {environ.get('CNI_COMMAND')} raised "
                               f"{type(exc).__name__}: {exc}")
                raise
        finally:
            server.shutdown()
            server.server_close()
            t.join()
            if self.violations:
                raise Stop()

    def _conf(self, a: SimAgent, **extra: Any) -> dict[str, Any]:
        return {"cniVersion": "1.0.0", "name": "warmpool", "type": "warmpool", **extra}

    def _gc(self, a: SimAgent | None, again: bool = False) -> None:
        """CNI GC from the runtime, with the attachments it knows. The agent leaves alone
        attachments younger than ``gc_min_age_s`` (the runtime may have listed before an ADD
        was answered) and ones with an operation in flight (none here: the runtime waits for
        the GC's answer). So: every attachment the runtime does not list that was made at
        least ``gc_min_age_s`` before the GC must be released by it. Runtimes call GC again
        later; here, if young unlisted attachments were left, once they are old enough."""
        if a is None or a.gone:
            return
        if not a.alive:
            if again:
                self.loop.call_later(10.0, lambda: self._gc(a, again=True))
            return
        rt = a.rt
        valid = [{"containerID": c, "ifname": "eth0"} for c in [*rt.up, *rt.adding, *rt.deleting]]
        conf = self._conf(a, cniVersion="1.1.0", **{"cni.dev/valid-attachments": valid})
        self.fault("cni-gc:again" if again else "cni-gc")
        started = self.now()
        code, _ = self._plugin(a, {"CNI_COMMAND": "GC"}, json.dumps(conf))
        if code != 0:
            return  # refused (e.g. an old runtime's version): nothing to check
        known_ids = {v["containerID"] for v in valid}
        leaked, young = [], []
        for p in a.ds.pods():
            if p.container_id in known_ids:
                continue
            made = rt.made.get(p.container_id)
            if made is not None and started - made < GC_MIN_AGE_S:
                young.append(made)
            else:
                leaked.append(p.container_id)
        if leaked:
            self.violation("cni-gc-leak", f"{a.name}: CNI GC succeeded, yet addresses stay held by containers "
                           f"the runtime does not know, made {GC_MIN_AGE_S:g}s+ before: {sorted(leaked)}")
        if young:
            self.loop.call_at(min(young) + GC_MIN_AGE_S + 1.0, lambda: self._gc(a, again=True))

    def _hostile(self, a: SimAgent | None, variant: str, tries: int = 0) -> None:
        if a is None or not a.alive or a.gone:
            return
        if not tries:
            self.fault(f"cni-hostile:{variant}")
        env = {"CNI_COMMAND": "ADD", "CNI_CONTAINERID": f"hostile-{variant}", "CNI_IFNAME": "eth0",
               "CNI_NETNS": f"/var/run/netns/hostile-{variant}"}
        conf = self._conf(a)
        if variant == "oversized":
            conf["padding"] = "x" * ((1 << 20) + (1 << 19))  # 1.5 MiB: more than a socket buffer past the limit
        elif variant == "host-netns":
            env["CNI_NETNS"] = HOST_NETNS[0]
        else:
            env["CNI_NETNS"], env["CNI_IFNAME"] = HOST_NETNS[1], HOST_IFNAMES[1]
        code, out = self._plugin(a, env, json.dumps(conf))
        if code and '"code": 11' in out and tries < 20:  # no address yet: the runtime tries again
            self.loop.call_later(5.0, lambda: self._hostile(a, variant, tries + 1))
            return
        held = a.ds.lookup(env["CNI_CONTAINERID"], env["CNI_IFNAME"])
        if code and held is not None:
            self.violation("cni-refused-held", f"{a.name}: ADD {env['CNI_CONTAINERID']} was refused (exit {code}), "
                           f"yet {held.ip} stays held for it")
        if variant == "oversized":
            try:
                err = json.loads(out)
            except ValueError:
                err = None
            if code == 0 or not isinstance(err, dict) or "code" not in err:
                self.violation("cni-oversized", f"{a.name}: a {len(json.dumps(conf))}-byte config got exit {code}, "
                               f"output {out[:200]!r} instead of a CNI error")

    # --- the run
    def run(self) -> Outcome:
        end = T0 + SPAN_S + QUIET_S
        for ev in self.plan.events:
            self.loop.call_at(T0 + ev.at, lambda ev=ev: self.apply(ev))
        self.loop.every(ESM_EVERY_S, self.esm_tick, start=T0 + 0.5)
        self.loop.every(RECONCILE_EVERY_S, self._reconcile, start=T0 + RECONCILE_EVERY_S)
        try:
            self.loop.run_until(end, stop=self._after)
            checks.at_end(self)
        except Stop:
            pass
        finally:
            if self.sockdir is not None:
                with contextlib.suppress(OSError):
                    for f in os.listdir(self.sockdir):
                        os.unlink(os.path.join(self.sockdir, f))
                    os.rmdir(self.sockdir)
        return Outcome(self.plan.seed, len(self.plan.events), self.faults, self.violations, self.now() - T0)

    def _after(self) -> bool:
        """After every event of the loop: IMDS sees what changed, then every invariant."""
        self.events_run += 1
        for a in self.agents.values():
            if not a.gone:
                a.imds.observe()
        checks.after_event(self)
        return False

    def _reconcile(self) -> None:
        try:
            self.reconciler.run()
        except Stop:
            raise
        except Exception as exc:  # a failed run is retried by the next schedule (as EventBridge does)
            self.fault(f"reconcile-error:{type(exc).__name__}")
