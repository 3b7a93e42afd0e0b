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
from typing import Any, Protocol

from botocore.exceptions import ClientError

from emulated.ec2.errors import Ec2Error
from node_agent import cni as cni_plugin
from node_agent.cniserver import CniSocketServer
from simulation import hostile
from simulation.base import DESCRIBE_ACTIONS, GC_MIN_AGE_S, HOST_IFNAMES, HOST_NETNS, SUBNET_CIDR, Stop
from simulation.clients import ReconcilerEc2
from simulation.hostile import Churner, HostileWorld
from simulation.node import SimAgent
from simulation.schedule import AGENT_KINDS, HOSTILE_KINDS, Event
from warmpool.buckets import MUTATING_ENI_ACTIONS, spec_for


class EventsWorld(HostileWorld, Protocol):
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

    def join(self, name: str, itype: str) -> SimAgent: ...

    def terminate(self, node: str) -> None: ...

    def reconcile(self) -> None: ...

    def esm_tick(self) -> None: ...


def apply(w: EventsWorld, ev: Event) -> None:
    k, x = ev.kind, ev.args
    a = w.agents.get(x.get("node", ""))
    if k in ("pods-add", "churn"):
        if a is None or a.gone:
            return
        _add_pods(w, a, x["n"], "p")
        if k == "churn":
            _delete(w, a, max(1, x["n"] - 1), oldest=False)
    elif k == "pods-del":
        if a is not None and not a.gone:
            _delete(w, a, x["n"])
    elif k == "sqs-delay":
        _window(w, k, x["max_s"], x["dur"])
    elif k == "sqs-duplicate":
        _window(w, k, (x["rate"], x["copies"]), x["dur"])
    elif k == "imds-lag":
        if a is not None:
            a.imds.lag = x["lag"]
            w.fault("imds-lag")
            w.loop.call_later(x["dur"], functools.partial(setattr, a.imds, "lag", 0.0))
    elif k == "agent-kill":
        if a is None or a.gone or not a.alive:
            return
        if x["point"] == "idle":
            a.die("idle")
        else:
            a.kill_point = x["point"]
            if x["point"] == "mid-checkpoint":
                a.cp.armed = True
            w.loop.call_later(30, functools.partial(_die_late, a))
        w.loop.call_later(x["down"] + (0 if x["point"] == "idle" else 30), functools.partial(_restart, w, a))
    elif k in ("lambda-crash", "slow-invocation"):
        _window(w, k, x["rate"], x["dur"])
    elif k == "throttle-storm":
        actions = [*MUTATING_ENI_ACTIONS, *(DESCRIBE_ACTIONS if x["describe"] else ())]
        for act in actions:
            load = spec_for(act, {}).refill_per_s * (1 + x["rate"] / 5)
            w.emu.set_background_load(act, load)
            w.loop.call_later(x["dur"], functools.partial(w.emu.set_background_load, act, 0.0))
        w.fault("throttle-storm")
    elif k == "foreign-load":
        act = x["action"]
        w.emu.set_background_load(act, spec_for(act, {}).refill_per_s * x["rate"] / 2)
        w.loop.call_later(x["dur"], lambda: w.emu.set_background_load(act, 0.0))
        w.fault("foreign-load")
    elif k == "subnet-exhausted":
        w.emu.set_subnet_exhausted(w.subnet, True)
        w.loop.call_later(x["dur"], lambda: w.emu.set_subnet_exhausted(w.subnet, False))
        w.fault(k)
    elif k == "fragmentation":
        _fragment(w, x["n"])
    elif k == "attach-failure":
        w.emu.fail_rate("AttachNetworkInterface", "InternalError", x["rate"])
        w.loop.call_later(x["dur"], lambda: w.emu.fail_rate("AttachNetworkInterface", "InternalError", 0))
        w.fault(k)
    elif k == "terminate":
        if a is not None and not a.gone:
            w.arm_terminate.add(a.name)
            w.loop.call_later(10, functools.partial(w.terminate, a.name))
    elif k == "replace-node":
        if a is not None and not a.gone:
            itype = a.itype
            w.terminate(a.name)
            w.fault("replace-node")
            if x.get("race"):
                _replace_racing(w, a.name, itype)
            else:
                w.loop.call_later(x["gap"], functools.partial(_join_later, w, a.name, itype))
    elif k == "cni-overlap":
        _overlap(w, a)
    elif k == "cni-interrupted":
        if a is not None and a.alive and not a.gone:
            a.rt.started += 1
            cid = f"{a.name}-lost{a.rt.started}"
            with a.guard():
                if a.cni_call("ADD", cid).get("ok"):
                    w.fault("cni-interrupted")
    elif k in HOSTILE_KINDS:
        _hostile_node(w, k, x)
    elif k in AGENT_KINDS:
        _agent_fault(w, k, x)
    elif k == "cni-gc":
        _gc(w, a)
    elif k == "cni-hostile":
        _hostile(w, a, x["variant"])
    elif k in ("ddb-unprocessed",):
        _window(w, k, x["rate"], x["dur"])
    elif k in ("queue-delete-failure", "reconcile-race"):
        _window(w, k, True, x["dur"])
    else:
        raise ValueError(f"unknown event kind {k}")


def _add_pods(w: EventsWorld, a: SimAgent, n: int, tag: str) -> None:
    for _ in range(n):
        a.rt.started += 1
        cid = f"{a.name}-{tag}{a.rt.started}"
        a.rt.adding[cid] = None
        a.rt.asked[cid] = w.now()


def _hostile_node(w: EventsWorld, k: str, x: dict[str, Any]) -> None:
    """Issue 12's hostile nodes (:mod:`simulation.hostile`); ``node`` "" is the outsider."""
    sender = w.agents.get(x.get("node", ""))
    if sender is not None and sender.gone:
        return
    if k == "churner":
        try:
            c = hostile.Churner(w, x["itype"], x["period"], w.now() + x["dur"])
        except Ec2Error:  # the subnet is full: the rogue instance launches later
            w.fault("churner:no-room")
            left = {**x, "dur": x["dur"] - 10.0}
            if left["dur"] > 0:
                w.loop.call_later(10.0, lambda: _hostile_node(w, k, left))
            return
        w.churners.append(c)
        w.fault("churner")
        c.step()
        return
    if k == "name-spray":
        if sender is not None:
            hostile.name_spray(w, sender, x["n"])
        return
    if k == "result-theft":
        thief, victim = sender, w.agents.get(x["victim"])
        if thief is not None and victim is not None:
            w.fault("result-theft")
            hostile.result_theft(w, thief, victim, w.now() + x["dur"])
        return
    victim = w.agents.get(x["victim"])
    if victim is None:
        return
    if k == "forged-release":
        hostile.forged_release(w, sender, victim, x["identity"])
    else:
        hostile.seq_poison(w, sender, victim, x["identity"])
    if x.get("repeat", 0) > 0:
        again = {**x, "repeat": x["repeat"] - 1}
        w.loop.call_later(7.0, lambda: _hostile_node(w, k, again))


def _agent_fault(w: EventsWorld, k: str, x: dict[str, Any]) -> None:
    """Issue 21's faults of a node's agent and host (:func:`simulation.schedule._agent_faults`)."""
    if k == "tag-lookup-failure":
        for i, node in enumerate(x["nodes"].split(",")):
            w.loop.call_later(i * x["gap"], functools.partial(_rollout_restart, w, node, x["dur"]))
        w.fault(k)
        return
    a = w.agents.get(x["node"])
    if a is None or a.gone:
        return
    if k == "clock-skew":
        a.skew = x["skew"]
        w.fault(f"clock-skew:{'ahead' if x['skew'] > 0 else 'behind'}")
        return
    if k == "checkpoint-write-error":
        a.cp.write_errno = getattr(errno, x["errno"])
        w.fault(f"{k}:{x['errno']}")

        def healed() -> None:
            a.cp.write_errno = None
            if a.cp.refused:
                w.fault("checkpoint-write-error:writes-refused", a.cp.refused)
            if not a.gone:  # then a restart (a node reboot, a rollout): the disk's file is read back
                a.die("restart after write errors")
                a.boot()

        w.loop.call_later(x["dur"], healed)
        return
    # the file damaged while the agent is down (a crash, a node reboot), then its start
    a.die(k)
    if k == "checkpoint-lost":
        a.cp.lose()
    elif k == "checkpoint-truncated":
        a.cp.truncate(x["keep"])
    else:
        a.cp.zero_fill(x["start"], x["n"])
    w.fault(k)
    w.loop.call_later(x["down"], functools.partial(_restart, w, a))


def _rollout_restart(w: EventsWorld, node: str, dur: float) -> None:
    """One agent of a DaemonSet rollout: stopped and started again, its tag look-up throttled."""
    a = w.agents.get(node)
    if a is None or a.gone:
        return
    a.lookup_fails_until = w.now() + dur
    a.die("rollout")
    a.boot()
    w.fault("tag-lookup-failure:restart")


def _join_later(w: EventsWorld, name: str, itype: str) -> None:
    """The replacement instance launches (its auto scaling group retries while the subnet is full)."""
    try:
        w.join(name, itype)
    except Ec2Error:
        w.loop.call_later(10.0, lambda: _join_later(w, name, itype))


def _replace_racing(w: EventsWorld, name: str, itype: str) -> None:
    """A scheduled reconcile reads the ledger just before the new instance that reuses
    the name has its first report served: the serve lands while the reconciler is
    between its read and its clean-up."""
    w.fault("replace-node:racing-reconcile")
    inner = w.reconciler_ec2

    def during_describe() -> None:
        try:
            a = w.join(name, itype)
        except Ec2Error:
            w.loop.call_later(10.0, lambda: _join_later(w, name, itype))
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


def _delete(w: EventsWorld, a: SimAgent, n: int, oldest: bool = True) -> None:
    rt = a.rt
    for cid in (sorted(rt.up) if oldest else sorted(rt.up, reverse=True))[:n]:
        del rt.up[cid]
        w.version += 1
        rt.deleting[cid] = None
    for cid in list(rt.adding)[: max(0, n - len(rt.up))]:
        del rt.adding[cid]
        rt.asked.pop(cid, None)
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


def _overlap(w: EventsWorld, a: SimAgent | None) -> None:
    """A second ADD for a container whose first ADD already returned; its wiring fails."""
    if a is None or not a.alive or a.gone or not a.rt.up:
        return
    cid = sorted(a.rt.up)[-1]
    a.pods.fail.add(cid)
    w.fault("cni-overlap")
    with a.guard():
        a.cni_call("ADD", cid)
    a.pods.fail.discard(cid)


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


def _gc(w: EventsWorld, a: SimAgent | None, again: bool = False) -> None:
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
            w.loop.call_later(10.0, lambda: _gc(w, a, again=True))
        return
    rt = a.rt
    valid = [{"containerID": c, "ifname": "eth0"} for c in [*rt.up, *rt.adding, *rt.deleting]]
    conf = _conf(w, a, cniVersion="1.1.0", **{"cni.dev/valid-attachments": valid})
    w.fault("cni-gc:again" if again else "cni-gc")
    started = w.now()
    code, _ = _plugin(w, a, {"CNI_COMMAND": "GC"}, json.dumps(conf))
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
        w.violation(
            "cni-gc-leak",
            f"{a.name}: CNI GC succeeded, yet addresses stay held by containers "
            f"the runtime does not know, made {GC_MIN_AGE_S:g}s+ before: {sorted(leaked)}",
        )
    if young:
        w.loop.call_at(min(young) + GC_MIN_AGE_S + 1.0, lambda: _gc(w, a, again=True))


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
