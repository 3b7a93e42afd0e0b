"""The schedule's events (:mod:`simulation.schedule`) applied to a seed's world: pods
coming and going, the fault windows the world's stand-ins read (``w.active``), agents
killed and restarted, instances terminated and replaced, EC2 faults, issue 12's
hostile nodes, and the runtime's CNI calls that go through the real plugin (GC and
hostile input), each with the check of what it must leave behind.
"""

from __future__ import annotations

import errno
import functools
import ipaddress
import json
import os
import tempfile
import threading
from collections.abc import Callable
from dataclasses import replace
from typing import Any, Protocol

from botocore.exceptions import ClientError

from emulated.ec2.config import AmbiguousOutcome
from emulated.ec2.errors import Ec2Error
from node_agent import cni as cni_plugin
from node_agent.cniserver import CniSocketServer
from simulation import hostile, subnets
from simulation import kinds as k
from simulation.base import (
    AGENT_CONFIG,
    ANOTHER_TOOL,
    DESCRIBE_ACTIONS,
    GC_MIN_AGE_S,
    HOST_IFNAMES,
    HOST_NETNS,
    SUBNET_CIDR,
    AgentKilled,
    Stop,
)
from simulation.clients import ReconcilerEc2
from simulation.hostile import Churner, HostileWorld
from simulation.kinds import Event
from simulation.node import SimAgent
from warmpool.buckets import MUTATING_ENI_ACTIONS, spec_for
from warmpool.limits import KNOWN_TYPES


class EventsWorld(HostileWorld, subnets.SubnetsWorld, Protocol):
    """What the schedule's events reach of the seed's world (and, through them, the
    hostile actors; :class:`simulation.world.SimWorld` satisfies it)."""

    @property
    def agents(self) -> dict[str, SimAgent]: ...

    @property
    def active(self) -> dict[str, Any]:
        """The fault windows now open: kind -> its value."""
        ...

    @property
    def arm_terminate(self) -> set[str]: ...

    @property
    def churners(self) -> list[Churner]: ...

    @property
    def reconciler_ec2(self) -> ReconcilerEc2: ...

    @property
    def violations(self) -> list[tuple[str, str]]: ...

    sockdir: str | None
    """Where the nodes' CNI sockets are, once one is made."""

    version: int

    def join(self, name: str, itype: str, efa_only: tuple[tuple[int, int], ...] = ()) -> SimAgent: ...

    def terminate(self, node: str) -> None: ...

    def reconcile(self) -> None: ...

    def esm_tick(self) -> None: ...


def apply(w: EventsWorld, ev: Event) -> None:
    """Apply one event: its kind's handler from :data:`HANDLERS`."""
    handler = HANDLERS.get(type(ev))
    if handler is None:
        raise ValueError(f"unknown event kind {ev.kind}")
    handler(w, ev)


def _live(w: EventsWorld, node: str) -> SimAgent | None:
    """The node's agent, unless it is not there or its instance is gone."""
    a = w.agents.get(node)
    return None if a is None or a.gone else a


def _on_pods_add(w: EventsWorld, ev: k.PodsAdd) -> None:
    if (a := _live(w, ev.node)) is not None:
        _add_pods(w, a, ev.n, "p")


def _on_churn(w: EventsWorld, ev: k.Churn) -> None:
    if (a := _live(w, ev.node)) is not None:
        _add_pods(w, a, ev.n, "p")
        _delete(w, a, max(1, ev.n - 1), oldest=False)


def _on_pods_del(w: EventsWorld, ev: k.PodsDel) -> None:
    if (a := _live(w, ev.node)) is not None:
        _delete(w, a, ev.n)


def _on_sqs_delay(w: EventsWorld, ev: k.SqsDelay) -> None:
    _window(w, ev.kind, ev.max_s, ev.dur)


def _on_sqs_duplicate(w: EventsWorld, ev: k.SqsDuplicate) -> None:
    _window(w, ev.kind, (ev.rate, ev.copies), ev.dur)


def _on_rate_window(w: EventsWorld, ev: k.LambdaCrash | k.SlowInvocation | k.DdbUnprocessed) -> None:
    _window(w, ev.kind, ev.rate, ev.dur)


def _on_flag_window(w: EventsWorld, ev: k.QueueDeleteFailure | k.ReconcileRace) -> None:
    _window(w, ev.kind, True, ev.dur)


def _imds_window(w: EventsWorld, node: str, attr: str, value: float, dur: float, kind: str) -> None:
    """Set one of a node's IMDS fault knobs for ``dur`` seconds, then back to 0."""
    a = w.agents.get(node)
    if a is not None:
        setattr(a.imds, attr, value)
        w.fault(kind)
        w.loop.call_later(dur, functools.partial(setattr, a.imds, attr, 0.0))


def _on_imds_lag(w: EventsWorld, ev: k.ImdsLag) -> None:
    _imds_window(w, ev.node, "lag", ev.lag, ev.dur, ev.kind)


def _on_agent_kill(w: EventsWorld, ev: k.AgentKill) -> None:
    a = _live(w, ev.node)
    if a is None or not a.alive:
        return
    if ev.point == "idle":
        a.die("idle")
    else:
        a.kill_point = ev.point
        if ev.point == "mid-checkpoint":
            a.cp.armed = True
        w.loop.call_later(30, functools.partial(_die_late, a))
    w.loop.call_later(ev.down + (0 if ev.point == "idle" else 30), functools.partial(_restart, w, a))


def _on_throttle_storm(w: EventsWorld, ev: k.ThrottleStorm) -> None:
    actions = [*MUTATING_ENI_ACTIONS, *(DESCRIBE_ACTIONS if ev.describe else ())]
    for act in actions:
        load = spec_for(act, {}).refill_per_s * (1 + ev.rate / 5)
        w.emu.set_background_load(act, load)
        w.loop.call_later(ev.dur, functools.partial(w.emu.set_background_load, act, 0.0))
    w.fault("throttle-storm")


def _on_foreign_load(w: EventsWorld, ev: k.ForeignLoad) -> None:
    act = ev.action
    w.emu.set_background_load(act, spec_for(act, {}).refill_per_s * ev.rate / 2)
    w.loop.call_later(ev.dur, lambda: w.emu.set_background_load(act, 0.0))
    w.fault("foreign-load")


def _on_subnet_exhausted(w: EventsWorld, ev: k.SubnetExhausted) -> None:
    w.emu.set_subnet_exhausted(w.subnet, exhausted=True)
    w.loop.call_later(ev.dur, lambda: w.emu.set_subnet_exhausted(w.subnet, exhausted=False))
    w.fault(ev.kind)


def _on_fragmentation(w: EventsWorld, ev: k.Fragmentation) -> None:
    _fragment(w, ev.n)


def _on_attach_failure(w: EventsWorld, ev: k.AttachFailure) -> None:
    w.emu.fail_rate("AttachNetworkInterface", "InternalError", ev.rate)
    w.loop.call_later(ev.dur, lambda: w.emu.fail_rate("AttachNetworkInterface", "InternalError", 0))
    w.fault(ev.kind)


def _on_terminate(w: EventsWorld, ev: k.Terminate) -> None:
    if (a := _live(w, ev.node)) is not None:
        w.arm_terminate.add(a.name)
        w.loop.call_later(10, functools.partial(w.terminate, a.name))


def _on_replace_node(w: EventsWorld, ev: k.ReplaceNode) -> None:
    if (a := _live(w, ev.node)) is None:
        return
    itype, efa = a.itype, a.efa_only
    w.terminate(a.name)
    w.fault("replace-node")
    if ev.race:
        _replace_racing(w, a.name, itype, efa)
    else:
        w.loop.call_later(ev.gap, functools.partial(_join_later, w, a.name, itype, efa))


def _on_cni_overlap(w: EventsWorld, ev: k.CniOverlap) -> None:
    _overlap(w, w.agents.get(ev.node))


def _on_cni_interrupted(w: EventsWorld, ev: k.CniInterrupted) -> None:
    """An ADD the agent answered whose answer the runtime lost. The same-sandbox runtime forgets
    the sandbox (no DEL: only a CNI GC clears it). containerd takes the lost answer for a failed
    ADD: ``RunPodSandbox`` DELs it at once and removes its namespace, even if that DEL fails
    (``sandbox_run.go``: a sandbox with no CNI result is not kept; seed 6341: without it the model
    kept a namespace containerd would have removed, with no GC to clear it)."""
    a = _live(w, ev.node)
    if a is not None and a.alive:
        a.rt.started += 1
        cid = f"{a.name}-lost{a.rt.started}"
        with a.guard():
            if a.cni_call("ADD", cid).get("ok"):
                w.fault("cni-interrupted")
                if a.rt.containerd:
                    if not a.cni_call("DEL", cid).get("ok"):
                        a.pods.namespace_gone(cid)
                        w.fault("containerd:del-dropped")
                    w.fault("cni-interrupted:containerd-del")


def _on_cni_gc(w: EventsWorld, ev: k.CniGc) -> None:
    _gc(w, w.agents.get(ev.node))


def _on_agent_bursts(w: EventsWorld, ev: k.AgentBursts) -> None:
    """Set at the world's start (:attr:`simulation.world.SimWorld.agent_timing`): counted only."""
    w.fault("agent-bursts")


def _on_launch_pool(w: EventsWorld, ev: k.LaunchPool) -> None:
    """Set at the world's start (:meth:`simulation.world.SimWorld.join`): counted only."""
    w.fault("launch-pool")


def _on_cni_readd(w: EventsWorld, ev: k.CniReadd, tries: int = 0) -> None:
    """One attachment made twice between two GCs (review 6, F1): the runtime DELs a running
    attachment old enough for a GC to take it, ADDs the same sandbox again at once, and runs a
    GC with the list it took before that ADD was answered. The agent must date the attachment
    from the new ADD (dated from the first, the GC tore down the running pod and freed its
    address: ``cni-gc-freed-running``)."""
    a = _live(w, ev.node)
    if a is None or not a.alive:
        return
    rt = a.rt
    old = sorted(c for c in rt.up if w.now() - rt.made.get(c, w.now()) >= GC_MIN_AGE_S)
    if not old:  # none old enough yet: the runtime's retry comes later (pods come and go)
        if tries < READD_TRIES:
            w.loop.call_later(READD_WAIT_S, lambda: _on_cni_readd(w, ev, tries + 1))
        else:
            w.fault("cni-readd:none-old")
        return
    cid = old[0]
    # The runtime tears the sandbox's network down with the DEL: from the call on, the pod holds
    # no address (as ``_delete`` models it). A DEL not answered ok (an error, or the agent killed
    # in it: its teardown may be done, seed 1760) is retried by the runtime, then the ADD.
    rt.up.pop(cid, None)
    w.version += 1
    deleted = False
    got: dict[str, Any] = {}
    with a.guard():
        deleted = bool(a.cni_call("DEL", cid).get("ok"))
        if deleted:
            got = a.cni_call("ADD", cid)
    if not deleted:
        w.fault("cni-readd:del-failed")
        rt.deleting[cid] = None
        rt.adding[cid] = None
        return
    if not a.alive:
        rt.adding[cid] = None
        return
    if not got.get("ok"):
        rt.adding[cid] = None  # no address yet (or the write failed): the runtime retries it
        w.fault("cni-readd:add-failed")
        return
    ip = got["result"]["ips"][0]["address"].split("/")[0]
    rt.up[cid] = ip
    a.w.pod_up(a, cid, ip)
    w.fault("cni-readd")
    _gc(w, a, unlisted=frozenset({cid}))


READD_TRIES = 12
READD_WAIT_S = 20.0
"""``cni-readd`` on a node running no attachment old enough looks again this often, this many times."""


PREFIX_CHANGED = "wpod"
"""The veth prefix ``prefix-changed`` switches a node's agent to (and back: the default, ``eni``)."""


def _on_host_wiring(w: EventsWorld, ev: k.HostWiring) -> None:
    """Issue 21: the host's pod wiring changed under the agent (:meth:`SimPods.disturb`), then the
    start that reads it (``ev.then``; a changed prefix takes effect at the next start, so one
    always follows it)."""
    if (a := _live(w, ev.node)) is None:
        return
    done = a.pods.disturb(ev.variant, ev.pick)
    w.fault(f"{ev.kind}:{done}")
    then = "restart" if ev.variant == "prefix-changed" and ev.then == "none" else ev.then
    if then == "none":
        return

    def restart() -> None:
        if a.gone or not a.alive:
            return
        a.die(f"{ev.kind}:{then}")
        if ev.variant == "prefix-changed":
            a.veth_prefix = PREFIX_CHANGED if a.veth_prefix != PREFIX_CHANGED else AGENT_CONFIG.veth_prefix
        if then == "checkpoint-lost":
            a.cp.lose()
        elif then == "old-copy":
            w.fault(f"{ev.kind}:old-copy:{a.cp.damage_parsing('old-copy', ev.pick)}")
        w.loop.call_later(ev.down, functools.partial(_restart, w, a))

    w.loop.call_later(ev.delay, restart)


ADD_CUT_ARMED_S = 60.0
"""An ``add-cut`` kills the agent in the first ADD that reaches set-up this long after it (the
runtime's ADDs wait while no address is free); none did: counted ``add-cut:no-set-up``."""


def _on_add_cut(w: EventsWorld, ev: k.AddCut) -> None:
    """The agent killed in the middle of an ADD, between the pod's veth pair and its route
    (:meth:`simulation.node.SimPods.setup`), the assignment on disk or not (``ev.written``:
    :meth:`simulation.node.SimDisk.lose_last_write`), the pod's interface with its address or not
    (``ev.addressed``); it starts again ``ev.down`` s later. The ADD
    fails (its caller sees the socket close): the runtime keeps it and retries it once the agent is
    back (:meth:`simulation.node.SimAgent.runtime_calls`), with no DEL between. A node whose
    runtime makes no ADD gets one pod started (the ADD the runtime is about to make)."""
    a = _live(w, ev.node)
    if a is None or not a.alive:
        w.fault("add-cut:agent-down")
        return
    if not a.rt.adding:
        _add_pods(w, a, 1, "p")
        w.fault("add-cut:pod-started")

    def cut(cid: str, ifname: str) -> None:
        w.fault(f"{ev.kind}:{'written' if ev.written else 'unwritten'}")
        if ev.addressed:
            w.fault(f"{ev.kind}:addressed")
        if not ev.written:
            w.fault(f"{ev.kind}:unwritten:{a.cp.lose_last_write(cid, ifname)}")
        w.loop.call_later(ev.down, functools.partial(_restart, w, a))
        raise AgentKilled("add-cut: in an ADD, after the pod's veth pair, before its route and rule")

    a.pods.cut, a.pods.cut_addressed = cut, ev.addressed

    def disarm() -> None:
        if a.pods.cut is cut:
            a.pods.cut = None
            w.fault(f"{ev.kind}:no-set-up")

    w.loop.call_later(ADD_CUT_ARMED_S, disarm)


def _on_cni_hostile(w: EventsWorld, ev: k.CniHostile) -> None:
    _hostile(w, w.agents.get(ev.node), ev.variant)


def _add_pods(w: EventsWorld, a: SimAgent, n: int, tag: str) -> None:
    for _ in range(n):
        a.rt.started += 1
        cid = f"{a.name}-{tag}{a.rt.started}"
        a.rt.adding[cid] = None
        a.rt.asked[cid] = w.now()


def _on_churner(w: EventsWorld, ev: k.ChurnerLaunch) -> None:
    """Issue 12's rogue instance (:class:`simulation.hostile.Churner`)."""
    try:
        c = hostile.Churner(w, ev.itype, ev.period, w.now() + ev.dur)
    except Ec2Error:  # the subnet is full: the rogue instance launches later
        w.fault("churner:no-room")
        left = replace(ev, dur=ev.dur - 10.0)
        if left.dur > 0:
            w.loop.call_later(10.0, lambda: _on_churner(w, left))
        return
    w.churners.append(c)
    w.fault("churner")
    c.step()


def _on_name_spray(w: EventsWorld, ev: k.NameSpray) -> None:
    if (sender := _live(w, ev.node)) is not None:
        hostile.name_spray(w, sender, ev.n)


def _on_result_theft(w: EventsWorld, ev: k.ResultTheft) -> None:
    thief, victim = w.agents.get(ev.node), w.agents.get(ev.victim)
    if thief is not None and thief.gone:
        return
    if thief is not None and victim is not None:
        w.fault("result-theft")
        hostile.result_theft(w, thief, victim, w.now() + ev.dur)


def _on_crafted_report(w: EventsWorld, ev: k.ForgedRelease | k.SeqPoison) -> None:
    """Issue 12's crafted reports (:mod:`simulation.hostile`); ``node`` "" is the outsider."""
    sender = w.agents.get(ev.node)
    if sender is not None and sender.gone:
        return
    victim = w.agents.get(ev.victim)
    if victim is None:
        return
    if isinstance(ev, k.ForgedRelease):
        hostile.forged_release(w, sender, victim, ev.identity)
    else:
        hostile.seq_poison(w, sender, victim, ev.identity)
    if ev.repeat > 0:
        again = replace(ev, repeat=ev.repeat - 1)
        w.loop.call_later(7.0, lambda: _on_crafted_report(w, again))


def _on_tag_lookup_failure(w: EventsWorld, ev: k.TagLookupFailure) -> None:
    """Issue 21: a DaemonSet rollout whose restarted agents' tag look-ups are throttled."""
    for i, node in enumerate(ev.nodes.split(",")):
        w.loop.call_later(i * ev.gap, functools.partial(_rollout_restart, w, node, ev.dur))
    w.fault(ev.kind)


def _on_clock_skew(w: EventsWorld, ev: k.ClockSkew) -> None:
    if (a := _live(w, ev.node)) is not None:
        a.skew = ev.skew
        w.fault(f"clock-skew:{'ahead' if ev.skew > 0 else 'behind'}")


def _on_checkpoint_write_error(w: EventsWorld, ev: k.CheckpointWriteError) -> None:
    if (a := _live(w, ev.node)) is None:
        return
    a.cp.write_errno = getattr(errno, ev.errno)
    w.fault(f"{ev.kind}:{ev.errno}")

    def healed() -> None:
        a.cp.write_errno = None
        if a.cp.refused:
            w.fault("checkpoint-write-error:writes-refused", a.cp.refused)
        if not a.gone:  # then a restart (a node reboot, a rollout): the disk's file is read back
            a.die("restart after write errors")
            a.boot()

    w.loop.call_later(ev.dur, healed)


def _on_checkpoint_damaged(w: EventsWorld, ev: k.CheckpointLost | k.CheckpointTruncated | k.CheckpointCorrupt) -> None:
    """The file damaged while the agent is down (a crash, a node reboot), then its start."""
    if (a := _live(w, ev.node)) is None:
        return
    a.die(ev.kind)
    if isinstance(ev, k.CheckpointLost):
        a.cp.lose()
    elif isinstance(ev, k.CheckpointTruncated):
        a.cp.truncate(ev.keep)
    else:
        a.cp.zero_fill(ev.start, ev.n)
    w.fault(ev.kind)
    w.loop.call_later(ev.down, functools.partial(_restart, w, a))


def _on_checkpoint_damaged_parses(w: EventsWorld, ev: k.CheckpointDamagedParses) -> None:
    """The file damaged so that it still parses and validates while the agent is down, then
    its start (which must refuse it and rebuild: docs/safety.md row 12)."""
    if (a := _live(w, ev.node)) is None:
        return
    a.die(ev.kind)
    w.fault(f"{ev.kind}:{a.cp.damage_parsing(ev.variant, ev.pick)}")
    w.loop.call_later(ev.down, functools.partial(_restart, w, a))


# --- issue 21's harsh world ------------------------------------------------------------


def _on_describe_stale(w: EventsWorld, ev: k.DescribeStale) -> None:
    w.emu.set_describe_lag(0.0, ev.lag_s)
    w.fault(ev.kind)
    w.loop.call_later(ev.dur, lambda: w.emu.set_describe_lag(0.0, 0.0))


def _on_instance_unlisted(w: EventsWorld, ev: k.InstanceUnlisted) -> None:
    if (a := _live(w, ev.node)) is None:
        return
    if ev.replace:
        itype, efa = a.itype, a.efa_only
        w.terminate(a.name)
        try:
            a = w.join(a.name, itype, efa)
        except Ec2Error:
            w.fault("instance-unlisted:no-room")
            w.loop.call_later(10.0, functools.partial(_join_later, w, ev.node, itype, efa))
            return
    w.emu.unlist_instance(a.iid, w.now() + ev.dur)
    w.fault(f"{ev.kind}:{'new' if ev.replace else 'first'}")


def _on_slow_ops(w: EventsWorld, ev: k.SlowDetach | k.SlowAttach) -> None:
    field = "detach_delay_s" if isinstance(ev, k.SlowDetach) else "attach_delay_s"
    before = getattr(w.emu.config, field)
    setattr(w.emu.config, field, ev.delay_s)
    w.fault(ev.kind)
    w.loop.call_later(ev.dur, functools.partial(setattr, w.emu.config, field, before))


def _on_stuck_detach(w: EventsWorld, ev: k.StuckDetach) -> None:
    w.emu.set_stuck_detach(ev.rate)
    w.fault(ev.kind)
    w.loop.call_later(ev.dur, functools.partial(w.emu.set_stuck_detach, 0.0))


def _on_imds_torn(w: EventsWorld, ev: k.ImdsTorn) -> None:
    _imds_window(w, ev.node, "torn_span", ev.span, ev.dur, ev.kind)
    if ev.no_card:
        _imds_window(w, ev.node, "no_card", 0.5, ev.dur, "imds-torn:no-card-window")


def _on_imds_regress(w: EventsWorld, ev: k.ImdsRegress) -> None:
    _imds_window(w, ev.node, "regress_s", ev.back_s, ev.dur, ev.kind)


def _on_stale_churn(w: EventsWorld, ev: k.StaleChurn) -> None:
    """Its steps on the live node running the most pods now (the one with addresses from before
    the window for the churn to free; the first by name of equals)."""
    live = [a for a in w.agents.values() if not a.gone]
    if not live:
        return
    node = min(live, key=lambda a: (-len(a.rt.up), a.name)).name
    w.fault(ev.kind)
    for s, n in ev.steps:
        w.loop.call_later(s, functools.partial(_churn_step, w, node, n))


def _churn_step(w: EventsWorld, node: str, n: int) -> None:
    """One step of ``stale-churn``: ``n`` pods created, or the ``-n`` oldest deleted."""
    if (a := _live(w, node)) is None:
        return
    if n > 0:
        _add_pods(w, a, n, "s")
    else:
        _delete(w, a, -n)
    w.fault("stale-churn:pods", abs(n))


def _on_lambda_clock_skew(w: EventsWorld, ev: k.LambdaClockSkew) -> None:
    """The containers' offsets, open for ``dur`` s (``SimWorld._invoke`` puts each invocation in one)."""
    _window(w, ev.kind, ev.offsets(), ev.dur)


def _on_ec2_ambiguous(w: EventsWorld, ev: k.Ec2Ambiguous) -> None:
    how = AmbiguousOutcome(ev.how)
    for act in MUTATING_ENI_ACTIONS:
        w.emu.set_ambiguous(act, how, ev.rate)
        w.loop.call_later(ev.dur, functools.partial(w.emu.set_ambiguous, act, how, 0.0))
    w.fault(f"{ev.kind}:{ev.how}")


def _on_instance_type(w: EventsWorld, ev: k.InstanceType) -> None:
    if (a := _live(w, ev.node)) is None:
        return
    w.terminate(a.name)
    w.fault(f"{ev.kind}:{'multi-card' if KNOWN_TYPES[ev.itype].network_cards > 1 else 'one-card'}")
    efa = ev.efa_only_slots()
    if efa:
        w.fault("instance-type:efa-only", len(efa))
    then = functools.partial(_another_tools_eni, w, ev) if ev.foreign else None
    w.loop.call_later(ev.gap, functools.partial(_join_later, w, a.name, ev.itype, efa, then))


FOREIGN_ADDRESSES = 4
"""Secondary addresses of another tool's ENI (``instance-type``'s ``foreign``)."""


def _another_tools_eni(w: EventsWorld, ev: k.InstanceType, a: SimAgent) -> None:
    """Another tool attaches an ordinary ENI (untagged: nothing says ``no_manage``) with
    :data:`FOREIGN_ADDRESSES` addresses of its own, at the first free device of network card 1 of
    the node's new instance, as the EFA guide attaches one ("the next unused network card index");
    its description, :data:`simulation.base.ANOTHER_TOOL`, is how the checks know it (a pod given
    one of its addresses is ``two-holders``). Its calls are EC2 calls like any caller's: one
    refused (throttled, an injected failure) is counted and the world goes on without it. Then,
    for ``no_card_s``, the node's IMDS reads miss ``network-card`` leaves (docs/safety.md row 29)."""
    c = w.emu.client()
    inst = w.emu.instances[a.iid]
    dev = next(d for d in range(len(inst.slots) + 1) if (1, d) not in inst.slots)
    try:
        eni = c.create_network_interface(
            SubnetId=w.subnet, SecondaryPrivateIpAddressCount=FOREIGN_ADDRESSES, Description=ANOTHER_TOOL
        )["NetworkInterface"]["NetworkInterfaceId"]
        c.attach_network_interface(NetworkInterfaceId=eni, InstanceId=a.iid, DeviceIndex=dev, NetworkCardIndex=1)
    except ClientError as err:
        w.fault(f"instance-type:foreign-refused:{err.response['Error']['Code']}")
        return
    w.fault("instance-type:foreign")
    if ev.no_card_s > 0:
        _imds_window(w, a.name, "no_card", 1.0, ev.no_card_s, "instance-type:no-card-window")


def _on_report_flood(w: EventsWorld, ev: k.ReportFlood, until: float | None = None) -> None:
    end = w.now() + ev.dur if until is None else until
    a = _live(w, ev.node)
    if a is None or w.now() >= end:
        return
    if a.alive:
        if ev.hostile:
            body = w.last_report.get(a.iid)
            if body is not None:
                for _ in range(ev.n):
                    a.sqs.send_message(QueueUrl=w.reports_url, MessageBody=body)
                w.fault("report-flood:copies", ev.n)
        else:
            for _ in range(ev.n):
                a.ctl.retry_soon()
                a.periodic()
            w.fault("report-flood:fresh", ev.n)
    w.loop.call_later(ev.period, lambda: _on_report_flood(w, ev, end))


HANDLERS: dict[type[Event], Callable[[EventsWorld, Any], None]] = {
    k.PodsAdd: _on_pods_add,
    k.PodsDel: _on_pods_del,
    k.Churn: _on_churn,
    k.SqsDelay: _on_sqs_delay,
    k.SqsDuplicate: _on_sqs_duplicate,
    k.ImdsLag: _on_imds_lag,
    k.AgentKill: _on_agent_kill,
    k.LambdaCrash: _on_rate_window,
    k.SlowInvocation: _on_rate_window,
    k.ThrottleStorm: _on_throttle_storm,
    k.ForeignLoad: _on_foreign_load,
    k.SubnetExhausted: _on_subnet_exhausted,
    k.Fragmentation: _on_fragmentation,
    k.AttachFailure: _on_attach_failure,
    k.Terminate: _on_terminate,
    k.ReplaceNode: _on_replace_node,
    k.CniOverlap: _on_cni_overlap,
    k.CniInterrupted: _on_cni_interrupted,
    k.CniGc: _on_cni_gc,
    k.CniHostile: _on_cni_hostile,
    k.DdbUnprocessed: _on_rate_window,
    k.QueueDeleteFailure: _on_flag_window,
    k.ReconcileRace: _on_flag_window,
    k.ForgedRelease: _on_crafted_report,
    k.SeqPoison: _on_crafted_report,
    k.NameSpray: _on_name_spray,
    k.ChurnerLaunch: _on_churner,
    k.ResultTheft: _on_result_theft,
    k.CheckpointLost: _on_checkpoint_damaged,
    k.CheckpointTruncated: _on_checkpoint_damaged,
    k.CheckpointCorrupt: _on_checkpoint_damaged,
    k.CheckpointDamagedParses: _on_checkpoint_damaged_parses,
    k.CheckpointWriteError: _on_checkpoint_write_error,
    k.TagLookupFailure: _on_tag_lookup_failure,
    k.ClockSkew: _on_clock_skew,
    k.CniReadd: _on_cni_readd,
    k.HostWiring: _on_host_wiring,
    k.AddCut: _on_add_cut,
    k.DescribeStale: _on_describe_stale,
    k.InstanceUnlisted: _on_instance_unlisted,
    k.SlowDetach: _on_slow_ops,
    k.StuckDetach: _on_stuck_detach,
    k.SlowAttach: _on_slow_ops,
    k.ImdsLagLong: _on_imds_lag,
    k.ImdsTorn: _on_imds_torn,
    k.Ec2Ambiguous: _on_ec2_ambiguous,
    k.InstanceType: _on_instance_type,
    k.ReportFlood: _on_report_flood,
    k.ImdsRegress: _on_imds_regress,
    k.LambdaClockSkew: _on_lambda_clock_skew,
    k.StaleChurn: _on_stale_churn,
    k.MultiSubnet: subnets.on_multi_subnet,
    k.Fragmented: subnets.on_fragmented,
    k.CustomNetworking: subnets.on_custom_networking,
    k.AgentBursts: _on_agent_bursts,
    k.LaunchPool: _on_launch_pool,
}
"""Each event type -> what applying it does (every type of :data:`simulation.kinds.EVENT_TYPES`)."""


def _rollout_restart(w: EventsWorld, node: str, dur: float) -> None:
    """One agent of a DaemonSet rollout: stopped and started again, its tag look-up throttled."""
    a = w.agents.get(node)
    if a is None or a.gone:
        return
    a.lookup_fails_until = w.now() + dur
    a.die("rollout")
    a.boot()
    w.fault("tag-lookup-failure:restart")


def _join_later(
    w: EventsWorld,
    name: str,
    itype: str,
    efa_only: tuple[tuple[int, int], ...] = (),
    then: Callable[[SimAgent], None] | None = None,
) -> None:
    """The replacement instance launches (its auto scaling group retries while the subnet is full),
    with EFA-only interfaces at ``efa_only`` (its launch template's); ``then`` is called with its
    agent once it runs."""
    try:
        a = w.join(name, itype, efa_only)
    except Ec2Error:
        w.loop.call_later(10.0, lambda: _join_later(w, name, itype, efa_only, then))
        return
    if then is not None:
        then(a)


def _replace_racing(w: EventsWorld, name: str, itype: str, efa_only: tuple[tuple[int, int], ...] = ()) -> None:
    """A scheduled reconcile reads the ledger just before the new instance that reuses
    the name has its first report served: the serve lands while the reconciler is
    between its read and its clean-up."""
    w.fault("replace-node:racing-reconcile")
    inner = w.reconciler_ec2

    def during_describe() -> None:
        try:
            a = w.join(name, itype, efa_only)
        except Ec2Error:
            w.loop.call_later(10.0, lambda: _join_later(w, name, itype, efa_only))
            return
        a.periodic()
        w.esm_tick()

    inner.once = during_describe
    w.reconcile()


def _window(w: EventsWorld, kind: str, value: Any, dur: float) -> None:
    w.active[kind] = value
    w.fault(kind + ":window")

    def end() -> None:
        if w.active.get(kind) is value:
            del w.active[kind]

    w.loop.call_later(dur, end)


def _delete(w: EventsWorld, a: SimAgent, n: int, *, oldest: bool = True) -> None:
    rt = a.rt
    for cid in (sorted(rt.up) if oldest else sorted(rt.up, reverse=True))[:n]:
        del rt.up[cid]
        w.version += 1
        rt.deleting[cid] = None
    for cid in list(rt.adding)[: max(0, n - len(rt.up))]:
        del rt.adding[cid]
        rt.asked.pop(cid, None)
        rt.failing.pop(cid, None)
        if rt.not_before.pop(cid, None) is None:  # a sandbox kubelet has not made yet has no DEL
            rt.deleting[cid] = None


def _die_late(a: SimAgent) -> None:
    """A kill point armed but never reached: the agent dies anyway."""
    if a.kill_point:
        a.die("late")


def _restart(w: EventsWorld, a: SimAgent) -> None:
    if a.gone or a.alive:
        return
    a.boot()


def _fragment(w: EventsWorld, n: int) -> None:
    """Foreign ENIs holding addresses scattered over the subnet: /28 prefixes get scarce."""
    net = ipaddress.IPv4Network(SUBNET_CIDR)
    r = w.rng("frag")
    c = w.emu.client()
    taken = {ip for e in w.emu.enis.values() for ip in [e.primary_ip, *e.secondary]}
    hosts = [str(h) for h in net.hosts()][4:-1]
    picks = [h for h in r.sample(hosts, min(n, len(hosts))) if h not in taken]
    for ip in picks:
        try:
            c.create_network_interface(SubnetId=w.subnet, PrivateIpAddress=ip)
        except ClientError:
            continue
        w.fault("fragmentation")


def overlap_stage(w: EventsWorld, a: SimAgent) -> str:
    """Where a ``cni-overlap`` ADD's set-up fails (``SimPods.fail``), drawn apart from the plan:
    the plans, and so every seed's events, stay as they were before the stage was drawn."""
    return w.rng(f"overlap-{a.name}").choice(("early", "addressed"))


def _overlap(w: EventsWorld, a: SimAgent | None) -> None:
    """A second ADD for a container whose first ADD already returned (the CNI spec forbids it
    without a DEL between), whose set-up fails: before it looks at anything, or once the pod's
    interface has the new address (``SimPods.fail``)."""
    if a is None or not a.alive or a.gone or not a.rt.up:
        return
    cid = sorted(a.rt.up)[-1]
    stage = overlap_stage(w, a)
    a.pods.fail[cid] = stage
    w.fault(f"cni-overlap:{stage}")
    with a.guard():
        a.cni_call("ADD", cid)
    a.pods.fail.pop(cid, None)


def _plugin(w: EventsWorld, a: SimAgent, environ: dict[str, str], stdin: str) -> tuple[int, str]:
    """The real CNI plugin over the real socket server of the agent."""
    if w.sockdir is None:
        w.sockdir = tempfile.mkdtemp(prefix="warmpool-dst-")
    path = os.path.join(w.sockdir, f"{a.name}.sock")
    server = CniSocketServer(path, a.cni)
    t = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    t.start()
    env = {"CNI_PATH": "/opt/cni/bin", cni_plugin.SOCKET_ENV: path, **environ}
    try:
        try:
            return cni_plugin.run(env, stdin)
        except Exception as exc:
            w.violation(
                "cni-plugin-crashed",
                f"{a.name}: plugin {environ.get('CNI_COMMAND')} raised {type(exc).__name__}: {exc}",
            )
            raise
    finally:
        server.shutdown()
        server.server_close()
        t.join()
        if w.violations:
            raise Stop()


def _conf(w: EventsWorld, a: SimAgent, **extra: Any) -> dict[str, Any]:
    return {"cniVersion": "1.0.0", "name": "warmpool", "type": "warmpool", **extra}


GC_RETRY_S = 30.0
"""A GC that failed with an I/O error (code 5: a teardown, or the checkpoint write of its
releases) comes again this much later: runtimes run GC on a timer, so a failed one is
followed by another (CRI-O's periodic GC); at most ``GC_RETRIES`` times."""
GC_RETRIES = 20


def _gc(
    w: EventsWorld, a: SimAgent | None, *, again: bool = False, tries: int = 0, unlisted: frozenset[str] = frozenset()
) -> None:
    """CNI GC from the runtime, with the attachments it knows. The agent leaves alone
    attachments younger than ``gc_min_age_s`` (the runtime may have listed before an ADD
    was answered) and ones with an operation in flight (none here: the runtime waits for
    the GC's answer). So: every attachment the runtime does not list that was made at
    least ``gc_min_age_s`` before the GC must be released by it (made: the ADD after which
    the agent held its address, answered or not, ``Runtime.made``). Runtimes call GC again
    later; here, if young unlisted attachments were left, once they are old enough, and
    after a GC that failed with code 5 (``GC_RETRY_S``).

    ``unlisted``: attachments the runtime runs that its list lacks (taken before their ADD was
    answered: ``cni-readd``). Nor may a GC take the address of an attachment the runtime runs
    that its list names, or that its ADD made less than ``gc_min_age_s`` before
    (``cni-gc-freed-running``)."""
    if a is None or a.gone:
        return
    if a.rt.containerd:
        # containerd sends no CNI GC (docs/safety.md: "containerd's order, no CNI GC"; review 28,
        # M2): what a GC would clear stays for the agent's own reaping
        w.fault("containerd:no-gc")
        return
    if not a.alive:
        if again or tries:
            w.loop.call_later(10.0, lambda: _gc(w, a, again=again, tries=tries))
        return
    rt = a.rt
    valid = [{"containerID": c, "ifname": "eth0"} for c in [*rt.up, *rt.adding, *rt.deleting] if c not in unlisted]
    conf = _conf(w, a, cniVersion="1.1.0", **{"cni.dev/valid-attachments": valid})
    w.fault("cni-gc:retried" if tries else "cni-gc:again" if again else "cni-gc")
    started = w.now()
    running = {c: ip for c, ip in rt.up.items() if a.ds.lookup(c, "eth0") is not None}
    code, out = _plugin(w, a, {"CNI_COMMAND": "GC"}, json.dumps(conf))
    known_ids = {v["containerID"] for v in valid}
    freed = [
        c
        for c in running
        if c in rt.up
        and a.ds.lookup(c, "eth0") is None
        and (c in known_ids or started - rt.made.get(c, started) < GC_MIN_AGE_S)
    ]
    if freed:
        w.violation(
            "cni-gc-freed-running",
            f"{a.name}: CNI GC freed the address of running attachments the runtime listed or made "
            f"less than {GC_MIN_AGE_S:g}s before: {[(c, running[c]) for c in sorted(freed)]}",
        )
    if code != 0:
        if _cni_code(out) == cni_plugin.E_IO and tries < GC_RETRIES:
            w.loop.call_later(GC_RETRY_S, lambda: _gc(w, a, again=again, tries=tries + 1))
        return  # refused (e.g. an old runtime's version), or failed: nothing to check
    w.fault("cni-gc:checked")
    leaked, young = [], []
    for p in a.ds.pods():
        if p.container_id in known_ids:
            continue
        made = rt.made.get(p.container_id)
        if made is not None and started - made < GC_MIN_AGE_S:
            young.append(made)
        elif started - a.started_at < GC_MIN_AGE_S and (made is None or made <= a.started_at):
            young.append(a.started_at)  # made by the agent's process before: aged from this one's start
        else:
            leaked.append(p.container_id)
    if leaked:
        w.violation(
            "cni-gc-leak",
            f"{a.name}: CNI GC succeeded, yet addresses stay held by containers "
            f"the runtime does not know, made {GC_MIN_AGE_S:g}s+ before: {sorted(leaked)}",
        )
    if young:
        w.loop.call_at(min(young) + GC_MIN_AGE_S + 1.0, lambda: _gc(w, a, again=True))


def _cni_code(out: str) -> int | None:
    """The CNI error code of a plugin's error output (None if it is not one)."""
    try:
        err = json.loads(out)
    except ValueError:
        return None
    code = err.get("code") if isinstance(err, dict) else None
    return code if isinstance(code, int) else None


def _hostile(w: EventsWorld, a: SimAgent | None, variant: str, tries: int = 0) -> None:
    if a is None or not a.alive or a.gone:
        return
    if not tries:
        w.fault(f"cni-hostile:{variant}")
    env = {
        "CNI_COMMAND": "ADD",
        "CNI_CONTAINERID": f"hostile-{variant}",
        "CNI_IFNAME": "eth0",
        "CNI_NETNS": f"/var/run/netns/hostile-{variant}",
    }
    conf = _conf(w, a)
    if variant == "oversized":
        conf["padding"] = "x" * ((1 << 20) + (1 << 19))  # 1.5 MiB: more than a socket buffer past the limit
    elif variant == "host-netns":
        env["CNI_NETNS"] = HOST_NETNS[0]
    else:
        env["CNI_NETNS"], env["CNI_IFNAME"] = HOST_NETNS[1], HOST_IFNAMES[1]
    code, out = _plugin(w, a, env, json.dumps(conf))
    if code and '"code": 11' in out and tries < 20:  # no address yet: the runtime tries again
        w.loop.call_later(5.0, lambda: _hostile(w, a, variant, tries + 1))
        return
    held = a.ds.lookup(env["CNI_CONTAINERID"], env["CNI_IFNAME"])
    if code and held is not None:
        w.violation(
            "cni-refused-held",
            f"{a.name}: ADD {env['CNI_CONTAINERID']} was refused (exit {code}), yet {held.ip} stays held for it",
        )
    if variant == "oversized":
        try:
            err = json.loads(out)
        except ValueError:
            err = None
        if code == 0 or not isinstance(err, dict) or "code" not in err:
            w.violation(
                "cni-oversized",
                f"{a.name}: a {len(json.dumps(conf))}-byte config got exit {code}, "
                f"output {out[:200]!r} instead of a CNI error",
            )
