"""The schedule a seed draws: one list of timed events (pods, faults, CNI
calls), plus a few world settings fixed for the whole run.

Everything random in a run is drawn here, from ``random.Random(seed)``, or
later from per-purpose generators seeded with ``(seed, purpose)``; so a seed
and the indices of the events kept (``keep``) replay a run exactly, which is
what the shrinker relies on.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from simulation import kinds as k
from simulation.kinds import Event
from warmpool.limits import KNOWN_TYPES

INSTANCE_TYPES = ("m5.large", "t3.medium", "c5.xlarge", "m5.xlarge")
SPAN_S = 420.0
"""Events are drawn in [0, SPAN_S); the run then goes quiet."""
QUIET_S = 480.0
"""After the last event: long enough for a release delay, the GC age and two reconciles."""


def quiet_from(events: Sequence[Event]) -> float:
    """When the world goes quiet: the span's end, or the end of the last fault still open then
    (a window drawn late may run minutes past the span: ``imds-lag-long`` up to 600 s). The run
    goes on :data:`QUIET_S` past this, so the checks at its end always follow a whole quiet
    period (seed 1072: an IMDS lag of 579 s closing 7 s before a fixed end left no time to
    settle)."""
    return max([SPAN_S, *(ev.at + float(getattr(ev, "dur", 0.0)) for ev in events)])


FAULT_KINDS = (
    "sqs-delay",
    "sqs-duplicate",
    "imds-lag",
    "agent-kill",
    "lambda-crash",
    "slow-invocation",
    "throttle-storm",
    "foreign-load",
    "subnet-exhausted",
    "fragmentation",
    "attach-failure",
    "terminate",
    "replace-node",
    "cni-overlap",
    "cni-interrupted",
    "cni-gc",
    "cni-hostile",
    "ddb-unprocessed",
    "queue-delete-failure",
    "reconcile-race",
    "forged-release",
    "seq-poison",
    "name-spray",
    "churner",
    "result-theft",
    # issue 21: the agent's disk, its tag look-up, its clock (:func:`_agent_faults`)
    "checkpoint-lost",
    "checkpoint-truncated",
    "checkpoint-corrupt",
    "checkpoint-damaged-parses",
    "checkpoint-write-error",
    "tag-lookup-failure",
    "clock-skew",
    "cni-readd",
    # issue 21: the world as AWS documents it, no kinder (:func:`_world_faults`)
    "describe-stale",
    "instance-unlisted",
    "slow-detach",
    "stuck-detach",
    "slow-attach",
    "imds-lag-long",
    "imds-torn",
    "ec2-ambiguous",
    "instance-type",
    "report-flood",
    "imds-regress",
    "lambda-clock-skew",
    "stale-churn",
    # issue 24: the pod subnets' worlds (:func:`_subnet_worlds`)
    "multi-subnet",
    "fragmented",
    "custom-networking",
    # issue 25: the agents' bursts (:func:`_bursts`)
    "agent-bursts",
    # issue 25: nodes that boot with a launch template's addresses (:func:`_launch_pools`)
    "launch-pool",
    # issue 21: the host's pod wiring changed under the agent (:func:`_host_wiring`)
    "host-wiring",
    # the agent killed in an ADD, between the pod's veth and its route (:func:`_add_cut`)
    "add-cut",
)
"""Every kind of fault the schedule can hold."""
EVENT_KINDS = ("pods-add", "pods-del", "churn", *FAULT_KINDS)
assert set(EVENT_KINDS) == set(k.EVENT_TYPES), "every kind has its event type (simulation.kinds)"
HOSTILE_KINDS = ("forged-release", "seq-poison", "name-spray", "churner", "result-theft")
"""Issue 12's hostile nodes (:mod:`simulation.hostile`): drawn from their own generator, so a
seed's other events are those it drew before they existed."""
AGENT_KINDS = (
    "checkpoint-lost",
    "checkpoint-truncated",
    "checkpoint-corrupt",
    "checkpoint-damaged-parses",
    "checkpoint-write-error",
    "tag-lookup-failure",
    "clock-skew",
)
"""Issue 21's faults of a node's agent and host (:func:`_agent_faults`), each drawn from a
generator of its own: a seed's other events are those it drew before they existed."""
WORLD_KINDS = (
    "describe-stale",
    "instance-unlisted",
    "slow-detach",
    "stuck-detach",
    "slow-attach",
    "imds-lag-long",
    "imds-torn",
    "ec2-ambiguous",
    "instance-type",
    "report-flood",
    "imds-regress",
    "lambda-clock-skew",
    "stale-churn",
)
"""Issue 21's harsh world (:func:`_world_faults`): EC2 and IMDS as AWS documents them, past
every bound the code assumes; each kind from a generator of its own, drawn after every other
(``stale-churn``, added later, listed last: :func:`_stale_churn`)."""
SUBNET_KINDS = ("multi-subnet", "fragmented", "custom-networking")
"""Issue 24's subnet worlds (:func:`_subnet_worlds`, set up by :mod:`simulation.subnets`): each
from a generator of its own, drawn after every other kind and put at the end of the event list,
so leaving them out gives a seed the schedule (and the one-subnet world) it drew before they
existed, and every other event keeps its index (``--keep`` lists pinned before still replay)."""
BURST_KINDS = ("agent-bursts",)
"""Issue 25's bursts (:func:`_bursts`): drawn last and listed last, so leaving them out gives a
seed its agents as they were before bursts existed (window 0), every other event at its index."""
LAUNCH_KINDS = ("launch-pool",)
"""Issue 25's launch pools (:func:`_launch_pools`): drawn from their own generator after every
other kind and listed last, so leaving them out gives a seed the world it drew before them (nodes
launched with no secondary address), every other event at its index."""
HOST_WIRING_VARIANTS = ("routes-flushed", "rules-flushed", "all-flushed", "veth-down", "foreign-veth", "prefix-changed")
"""How ``host-wiring`` changes the host (:meth:`simulation.node.SimPods.disturb`)."""
HOST_WIRING_THEN = ("none", "restart", "checkpoint-lost", "old-copy")
"""What follows a ``host-wiring`` change (:func:`simulation.events._on_host_wiring`)."""
HOST_KINDS = ("host-wiring",)
"""Issue 21's host wiring (:func:`_host_wiring`): drawn from its own generator and listed after
every other event, so leaving it out gives a seed the run it drew before it existed."""
CUT_KINDS = ("add-cut",)
"""The agent killed in an ADD between the pod's veth and its route (:func:`_add_cut`): drawn from its
own generator and listed after every other event (host-wiring's too), so leaving it out gives a
seed the run it drew before it existed."""
LATE_KINDS = ("cni-readd",)
"""Kinds added after the shrunk replays the tests and docs name (:func:`_late_kinds`): each from a
generator of its own, listed after every other event of the schedule."""
DAMAGE_VARIANTS = ("drop-pod", "move-pod", "old-copy")
"""How ``checkpoint-damaged-parses`` damages the file (:meth:`simulation.node.SimDisk.damage_parsing`)."""
ALL_TYPES = tuple(sorted(KNOWN_TYPES))
MULTI_CARD_TYPES = tuple(t for t in ALL_TYPES if KNOWN_TYPES[t].network_cards > 1)
IDENTITIES = ("own", "none", "bad-signature")
"""How a crafted report for another instance is signed: the sender's own valid identity, none,
or the victim's document under a key the allocator does not trust."""


@dataclass(frozen=True)
class SeedPlan:
    """What a seed draws: world settings and the event list."""

    seed: int
    nodes: tuple[tuple[str, str], ...]  # (name, instance type)
    prefix_mode: bool
    warm_ip: int
    minimum_ip: int
    quota_fraction: float
    """The account's real EC2 bucket sizes relative to what warmpool is told (< 1: below)."""
    events: tuple[Event, ...]

    def kept(self, keep: list[int] | None) -> SeedPlan:
        if keep is None:
            return self
        evs = tuple(self.events[i] for i in keep if 0 <= i < len(self.events))
        return SeedPlan(
            self.seed, self.nodes, self.prefix_mode, self.warm_ip, self.minimum_ip, self.quota_fraction, evs
        )


def draw(seed: int) -> SeedPlan:
    rng = random.Random(f"dst/{seed}")
    n_nodes = rng.choice((2, 3, 3, 4))
    nodes = tuple((f"n{i}", rng.choice(INSTANCE_TYPES)) for i in range(n_nodes))
    prefix_mode = rng.random() < 0.25
    warm_ip = rng.choice((1, 2, 3))
    minimum_ip = rng.choice((0, 0, 2))
    quota_fraction = 1.0 if rng.random() < 0.7 else rng.choice((0.3, 0.5))
    names = [n for n, _ in nodes]
    ev: list[Event] = []

    def at() -> float:
        return round(rng.uniform(0, SPAN_S), 1)

    # pods: bursts and churn
    for _ in range(rng.randint(2, 5)):
        t = at()
        node = rng.choice(names)
        ev.append(k.PodsAdd(at=t, node=node, n=rng.randint(1, 12)))
        if rng.random() < 0.7:
            ev.append(k.PodsDel(at=round(min(SPAN_S, t + rng.uniform(5, 200)), 1), node=node, n=rng.randint(1, 10)))
    for _ in range(rng.randint(0, 6)):
        ev.append(k.Churn(at=at(), node=rng.choice(names), n=rng.randint(1, 4)))

    def window(kind: type[k.Window], **args: Any) -> None:
        t = at()
        ev.append(kind(at=t, dur=round(rng.uniform(20, 180), 1), **args))

    # faults: each kind with some probability, a few of them more than once
    if rng.random() < 0.5:
        window(k.SqsDelay, max_s=rng.choice((5, 20, 60, 120)))
    if rng.random() < 0.5:
        window(k.SqsDuplicate, rate=rng.choice((0.2, 0.5, 1.0)), copies=rng.choice((2, 3)))
    for node in names:
        if rng.random() < 0.6:
            ev.append(
                k.ImdsLag(at=at(), node=node, lag=round(rng.uniform(0, 120), 1), dur=round(rng.uniform(30, 240), 1))
            )
    for _ in range(rng.choice((0, 0, 1, 2, 3))):
        ev.append(
            k.AgentKill(
                at=at(),
                node=rng.choice(names),
                point=rng.choice(("idle", "after-receive", "mid-apply", "after-apply", "mid-checkpoint")),
                down=round(rng.uniform(0.5, 30), 1),
            )
        )
    if rng.random() < 0.4:
        window(k.LambdaCrash, rate=rng.choice((0.1, 0.3, 0.6)))
    if rng.random() < 0.2:
        window(k.SlowInvocation, rate=rng.choice((0.3, 1.0)))
    if rng.random() < 0.3:
        window(k.ThrottleStorm, rate=rng.choice((2.0, 5.0, 10.0)), describe=rng.random() < 0.6)
    if rng.random() < 0.25:
        window(
            k.ForeignLoad,
            action=rng.choice(
                (
                    "AssignPrivateIpAddresses",
                    "UnassignPrivateIpAddresses",
                    "DescribeInstances",
                    "CreateNetworkInterface",
                )
            ),
            rate=rng.choice((1.0, 3.0)),
        )
    if rng.random() < 0.15:
        window(k.SubnetExhausted)
    if rng.random() < 0.15:
        ev.append(k.Fragmentation(at=at(), n=rng.randint(5, 40)))
    if rng.random() < 0.25:
        window(k.AttachFailure, rate=rng.choice((0.3, 1.0)))
    if rng.random() < 0.12:
        ev.append(k.Terminate(at=at(), node=rng.choice(names)))
    if rng.random() < 0.12:
        ev.append(
            k.ReplaceNode(at=at(), node=rng.choice(names), gap=round(rng.uniform(0, 60), 1), race=rng.random() < 0.5)
        )
    for _ in range(rng.choice((0, 0, 1, 2))):
        ev.append(k.CniOverlap(at=at(), node=rng.choice(names)))
    if rng.random() < 0.1:
        node = rng.choice(names)
        t = at()
        ev.append(k.CniInterrupted(at=t, node=node))
        ev.append(k.CniGc(at=round(min(SPAN_S, t + rng.uniform(5, 60)), 1), node=node))
    if rng.random() < 0.06:
        ev.append(
            k.CniHostile(
                at=at(), node=rng.choice(names), variant=rng.choice(("oversized", "host-netns", "host-ifname"))
            )
        )
    if rng.random() < 0.15:
        window(k.DdbUnprocessed, rate=rng.choice((0.5, 1.0)))
    if rng.random() < 0.15:
        window(k.QueueDeleteFailure)
    if rng.random() < 0.15:
        window(k.ReconcileRace)
    ev += _hostile(seed, names)
    ev += _agent_faults(seed, names)
    ev += _world_faults(seed, names)
    ev.sort(key=lambda e: (e.at, e.kind))
    # Kinds added after the shrunk replays the tests and docs name (``--keep`` indices): listed
    # after the others, each in time order, so every earlier event keeps its index.
    ev += sorted(_late_kinds(seed, names), key=lambda e: (e.at, e.kind))
    # Last: every earlier event keeps its index, so a pinned ``--keep`` replays the one-subnet
    # world it was found in (the world reads them wherever they are in the list)
    ev += sorted(_subnet_worlds(seed, names, prefix_mode), key=lambda e: (e.at, e.kind))
    ev += _bursts(seed)
    ev += _launch_pools(seed, prefix_mode)
    # Added after the shrunk replays the tests and docs name: listed last, so each earlier event
    # keeps its ``--keep`` index (a replay keeping none of it runs as before)
    ev += _stale_churn(seed, ev)
    # Added after that: listed last, for the same reason
    ev += _host_wiring(seed, names)
    # Added after that: listed last, for the same reason
    ev += _add_cut(seed, names)
    return SeedPlan(seed, nodes, prefix_mode, warm_ip, minimum_ip, quota_fraction, tuple(ev))


def _hostile(seed: int, names: list[str]) -> list[Event]:
    """Hostile nodes: a compromised node (``node``: one of the seed's, with its own valid
    identity) or the outsider (``node`` "": no valid identity)."""
    rng = random.Random(f"dst/{seed}/hostile")
    ev: list[Event] = []

    def at() -> float:
        return round(rng.uniform(20, SPAN_S), 1)

    def pair() -> tuple[str, str]:
        sender = rng.choice(names)
        return sender, rng.choice([n for n in names if n != sender])

    if rng.random() < 0.25:
        sender, victim = pair()
        how = rng.choice(IDENTITIES)
        ev.append(
            k.ForgedRelease(
                at=at(), node="" if how != "own" else sender, victim=victim, identity=how, repeat=rng.randint(0, 3)
            )
        )
    if rng.random() < 0.2:
        sender, victim = pair()
        own = rng.random() < 0.5
        how = "own" if own else rng.choice(IDENTITIES)
        ev.append(
            k.SeqPoison(
                at=at(),
                node=sender if how == "own" else "",
                victim=sender if own else victim,
                identity=how,
                repeat=rng.randint(0, 2),
            )
        )
    if rng.random() < 0.15:
        ev.append(k.NameSpray(at=at(), node=rng.choice(names), n=rng.randint(10, 60)))
    if rng.random() < 0.1:
        ev.append(
            k.ChurnerLaunch(
                at=round(rng.uniform(0, SPAN_S / 2), 1),
                itype=rng.choice(INSTANCE_TYPES),
                dur=round(rng.uniform(60, 300), 1),
                period=rng.choice((2.0, 5.0, 10.0)),
            )
        )
    # Drawn last (and from its own generator), so the kinds above are what they were before it.
    theft = random.Random(f"dst/{seed}/result-theft")
    if theft.random() < 0.15:
        thief = theft.choice(names)
        ev.append(
            k.ResultTheft(
                at=round(theft.uniform(20, SPAN_S / 2), 1),
                node=thief,
                victim=theft.choice([n for n in names if n != thief]),
                dur=round(theft.uniform(30, 240), 1),
            )
        )
    return ev


def _agent_faults(seed: int, names: list[str]) -> list[Event]:
    """Issue 21: what Linux and AWS do not promise a node's agent. Each kind from a generator
    of its own (``dst/<seed>/<kind>``), so adding one changes no other event of a seed.

    * ``checkpoint-lost`` / ``-truncated`` / ``-corrupt``: the agent dies, its checkpoint
      file is gone (the state directory lost), cut short (``keep``: the fraction left) or
      has a run of zeroed bytes (``start``, ``n``: blocks a crash lost), and it starts
      again ``down`` seconds later: the production rebuild from the host's pod wiring runs;
    * ``checkpoint-damaged-parses``: the agent dies and its checkpoint is damaged so that it
      still parses and validates (``variant``, :data:`DAMAGE_VARIANTS`: a pod's entry dropped,
      a pod's address moved to a free one of its ENI, an earlier save restored as from a
      backup; ``pick`` chooses which), then starts ``down`` seconds later: the checkpoint's
      checksum, or its check against the host's pod wiring, must refuse it (docs/safety.md row 12);
    * ``checkpoint-write-error``: for ``dur`` seconds every checkpoint write fails
      (``errno`` ENOSPC or EIO); the agent restarts when it ends;
    * ``tag-lookup-failure``: a DaemonSet rollout restarts ``nodes`` one after the other
      (``gap`` seconds apart), and each restarted agent's tag look-up (its own EC2
      Describe) is throttled for ``dur`` seconds after its start;
    * ``clock-skew``: the node's clock steps ``skew`` seconds off the allocator's (either
      sign) and stays so.
    """
    ev: list[Event] = []

    def gen(kind: str) -> random.Random:
        return random.Random(f"dst/{seed}/{kind}")

    r = gen("checkpoint-lost")
    if r.random() < 0.15:
        ev.append(
            k.CheckpointLost(at=round(r.uniform(30, SPAN_S), 1), node=r.choice(names), down=round(r.uniform(1, 30), 1))
        )
    r = gen("checkpoint-truncated")
    if r.random() < 0.15:
        ev.append(
            k.CheckpointTruncated(
                at=round(r.uniform(30, SPAN_S), 1),
                node=r.choice(names),
                down=round(r.uniform(1, 30), 1),
                keep=round(r.uniform(0, 0.99), 2),
            )
        )
    r = gen("checkpoint-corrupt")
    if r.random() < 0.15:
        ev.append(
            k.CheckpointCorrupt(
                at=round(r.uniform(30, SPAN_S), 1),
                node=r.choice(names),
                down=round(r.uniform(1, 30), 1),
                start=round(r.uniform(0, 0.95), 2),
                n=r.choice((1, 16, 512, 4096)),
            )
        )
    r = gen("checkpoint-damaged-parses")
    if r.random() < 0.15:
        ev.append(
            k.CheckpointDamagedParses(
                at=round(r.uniform(30, SPAN_S), 1),
                node=r.choice(names),
                down=round(r.uniform(1, 30), 1),
                variant=r.choice(DAMAGE_VARIANTS),
                pick=round(r.random(), 3),
            )
        )
    r = gen("checkpoint-write-error")
    if r.random() < 0.15:
        ev.append(
            k.CheckpointWriteError(
                at=round(r.uniform(10, SPAN_S), 1),
                node=r.choice(names),
                dur=round(r.uniform(5, 120), 1),
                errno=r.choice(("ENOSPC", "EIO")),
            )
        )
    r = gen("tag-lookup-failure")
    if r.random() < 0.15:
        rollout = r.sample(names, r.randint(1, len(names)))
        ev.append(
            k.TagLookupFailure(
                at=round(r.uniform(30, SPAN_S), 1),
                nodes=",".join(rollout),
                gap=round(r.uniform(0, 20), 1),
                dur=round(r.uniform(5, 180), 1),
            )
        )
    r = gen("clock-skew")
    if r.random() < 0.2:
        ev.append(
            k.ClockSkew(
                at=round(r.uniform(0, SPAN_S / 2), 1),
                node=r.choice(names),
                skew=round(r.choice((-1, 1)) * r.uniform(10, 300), 1),
            )
        )
    return ev


def _bursts(seed: int) -> list[Event]:
    """``agent-bursts`` (four seeds in five, from its own generator): the agents run with the
    production default ``WARMPOOL_BURST_WINDOW_S`` of 30 s; the other seeds with bursts off."""
    r = random.Random(f"dst/{seed}/agent-bursts")
    return [k.AgentBursts(at=0.0, window=30.0)] if r.random() < 0.8 else []


def _launch_pools(seed: int, prefix_mode: bool) -> list[Event]:
    """``launch-pool`` (one seed in two, from its own generator): every node boots with 1-2 /28s
    (prefix mode) or 2-6 addresses on its primary ENI, a launch template's; the agent's first
    start asks the allocator to confirm it and adopts them (docs/safety.md, row 30)."""
    r = random.Random(f"dst/{seed}/launch-pool")
    if r.random() >= 0.5:
        return []
    return [k.LaunchPool(at=0.0, units=r.randint(1, 2) if prefix_mode else r.randint(2, 6))]


def _late_kinds(seed: int, names: list[str]) -> list[Event]:
    """Kinds added once shrunk replays were recorded, each from a generator of its own
    (``dst/<seed>/<kind>``) like :func:`_agent_faults`, and listed after every other event
    (:func:`draw`), so a seed's other events keep their indices as well as their draws:

    * ``cni-readd``: the node's runtime DELs a running attachment at least the GC's minimum age
      old, ADDs it again at once, and runs a GC whose list it took before that ADD was answered
      (one attachment made twice between two GCs: review 6, F1).
    """
    ev: list[Event] = []
    r = random.Random(f"dst/{seed}/cni-readd")
    if r.random() < 0.15:
        ev.append(k.CniReadd(at=round(r.uniform(90, SPAN_S), 1), node=r.choice(names)))
    return ev


def _host_wiring(seed: int, names: list[str]) -> list[Event]:
    """``host-wiring`` (two seeds in five, from its own generator ``dst/<seed>/host-wiring``):
    one to three times, a node's pod wiring changes under its agent (routes or rules flushed by a
    network manager, a veth set down, another CNI's pod, the veth prefix changed for the next
    start), most often followed by a start that reads it: the process restarted on its intact
    checkpoint, on none, or on an older copy (docs/safety.md, the host-wiring rows; the
    fourteenth to seventeenth reviews found their defects in these states by hand)."""
    r = random.Random(f"dst/{seed}/host-wiring")
    if r.random() >= 0.4:
        return []
    ev: list[Event] = []
    for _ in range(r.randint(1, 3)):
        ev.append(
            k.HostWiring(
                at=round(r.uniform(30, SPAN_S), 1),
                node=r.choice(names),
                variant=r.choice(HOST_WIRING_VARIANTS),
                then=r.choice(HOST_WIRING_THEN[1:]) if r.random() < 0.8 else "none",
                delay=round(r.uniform(0, 90), 1),
                down=round(r.uniform(1, 30), 1),
                pick=round(r.random(), 3),
            )
        )
    return sorted(ev, key=lambda e: (e.at, e.kind))


def _add_cut(seed: int, names: list[str]) -> list[Event]:
    """``add-cut`` (one seed in four, from its own generator ``dst/<seed>/add-cut``): once or twice
    from 30 s on, a node's agent is killed in the middle of an ADD, after the pod's veth pair is made
    and before its ``/32`` route and pod rule, with the assignment on disk (``written``, as the agent
    orders it) or not (half each), the pod's interface with its address or not (``addressed``, half
    each, from a generator of its own: ``dst/<seed>/add-cut/addressed``); it starts again 0.5-30 s
    later (as ``agent-kill``'s restarts) and the runtime retries that ADD, the same container, with
    no DEL between (the integration test ``test_kill_9_mid_add_loses_and_doubles_nothing``'s
    deadlock: the start held every free address for the routeless veth, and only the pod's DEL
    lifted it, until the retried ADD read what the pod's interface carries:
    ``CniService._known_again``)."""
    r = random.Random(f"dst/{seed}/add-cut")
    if r.random() >= 0.25:
        return []
    # whether the pod's interface has its address yet, from a generator of its own (added later)
    addr = random.Random(f"dst/{seed}/add-cut/addressed")
    ev: list[Event] = [
        k.AddCut(
            at=round(r.uniform(30, SPAN_S), 1),
            node=r.choice(names),
            written=r.random() < 0.5,
            down=round(r.uniform(0.5, 30), 1),
            addressed=addr.random() < 0.5,
        )
        for _ in range(r.choice((1, 1, 2)))
    ]
    return sorted(ev, key=lambda e: (e.at, e.kind))


def _stale_churn(seed: int, events: Sequence[Event]) -> list[Event]:
    """``stale-churn``, from a generator of its own (``dst/<seed>/stale-churn``), in every
    ``describe-stale`` window long enough for the agent to offer addresses back inside it (150 s)
    whose lag reaches past the agent's release delay (60 s: a shorter lag never hides a grant made
    before the node had a surplus to offer). In the window's first 30 s a burst of 4-12 pods;
    then, until the window closes, 20-60 s after each burst the oldest pods deleted (2 up to as
    many as the burst; the seed's own pods before the churn's, whose addresses are often from
    before the window: the agent offers them back once its release delay is over) and 60-120 s
    after that pods created again (1 up to as many as were deleted: the node short again about
    when its offers are out). A plan's Describe then may miss a grant made in the window while the
    report offers addresses Describe shows: the plan hands offers back, its Assign is refused (the
    ENI is fuller than the read shows), and a re-plan on a fresher read finds the node no longer
    short (docs/safety.md, the ninth review's R1). The node is the one running the most pods when
    the window opens (``simulation.events._on_stale_churn``)."""
    stale = next((e for e in events if isinstance(e, k.DescribeStale)), None)
    if stale is None or stale.lag_s < 120.0 or stale.dur < 150.0:
        return []
    r = random.Random(f"dst/{seed}/stale-churn")
    t, burst = round(r.uniform(0, 30), 1), r.randint(4, 12)
    steps = [(t, burst)]
    while True:
        t, gone = round(t + r.uniform(20, 60), 1), r.randint(2, max(2, burst))
        if t >= stale.dur:
            break
        steps.append((t, -gone))
        t, burst = round(t + r.uniform(60, 120), 1), r.randint(1, gone)
        if t >= stale.dur:
            break
        steps.append((t, burst))
    return [k.StaleChurn(at=stale.at, steps=tuple(steps))]


def _world_faults(seed: int, names: list[str]) -> list[Event]:
    """Issue 21's harsh world, each kind from a generator of its own (``dst/<seed>/<kind>``),
    drawn after every other kind, so a seed's other events are those it drew before:

    * ``describe-stale``: for ``dur`` s, each DescribeNetworkInterfaces and DescribeInstances
      answers from a moment drawn up to ``lag_s`` (seconds to minutes) ago; in a window of at
      least 150 s lagging up to 2 or 5 min, the pods of the busiest node churn (``stale-churn``,
      drawn and listed after every other kind: :func:`_stale_churn`);
    * ``instance-unlisted``: the node's instance (a new one replacing it, if ``replace``) is
      missing from DescribeInstances for ``dur`` s;
    * ``slow-detach`` / ``slow-attach``: each detach takes ``delay_s`` (minutes), each attach
      ``delay_s`` (tens of seconds); ``stuck-detach``: a detach answered success leaves the ENI
      attached (``rate``) until its next detach;
    * ``imds-lag-long``: IMDS lag up to 10 min; ``imds-torn``: each ENI's address leaves read
      at a moment up to ``span`` s apart from the ENI list, and in half of them (``no_card``,
      its own generator) half the reads miss the ``network-card`` leaf of some interfaces, never
      of all (safety.md row 29);
    * ``ec2-ambiguous``: mutating ENI calls take effect and lose their answer (``rate``);
    * ``instance-type``: the node replaced by an instance of any type of the limits table
      (multi-card ones, such as p5.48xlarge's 32 cards, one draw in three); a multi-card one
      half the time (``efa``, its own generator) with an EFA-only interface at device 0 of every
      card above 0, as p5.48xlarge and trn2 are launched for EFA (no IP address: IMDS serves no
      ``local-ipv4s`` for it; review of the multi-card change, F4); and three multi-card ones
      in four (``foreign``, a generator of its own) with another tool's ordinary ENI, untagged
      and with addresses, on card 1, every IMDS read of the node missing the ``network-card``
      leaf of some interfaces for 60-180 s from then (``no_card_s``: the draw made likelier where
      a missing leaf can put an interface on the wrong card; safety.md row 29);
    * ``report-flood``: a node sending ``n`` valid reports every ``period`` s;
    * ``imds-regress``: for ``dur`` s each IMDS read of one node answers from a moment drawn
      up to ``back_s`` (30 s, 2 or 5 min) before the newest it would show, so a read may show
      an older state than one already served (safety.md row 6);
    * ``lambda-clock-skew``: for ``dur`` s each allocator invocation runs in one of 2-4
      containers whose clocks are off the world's by ``skews`` (each 5-90 s, either sign:
      pairs of them past the lease's 30 s margin; safety.md row 11).
    """
    ev: list[Event] = []

    def gen(kind: str) -> random.Random:
        return random.Random(f"dst/{seed}/{kind}")

    r = gen("describe-stale")
    if r.random() < 0.25:
        ev.append(
            k.DescribeStale(
                at=round(r.uniform(0, SPAN_S), 1),
                dur=round(r.uniform(20, 300), 1),
                lag_s=r.choice((5.0, 30.0, 120.0, 300.0)),
            )
        )
    r = gen("instance-unlisted")
    if r.random() < 0.2:
        replace = r.random() < 0.5
        ev.append(
            k.InstanceUnlisted(
                at=round(r.uniform(20, SPAN_S), 1) if replace else 0.0,
                node=r.choice(names),
                dur=round(r.uniform(10, 600), 1),
                replace=replace,
            )
        )
    r = gen("slow-detach")
    if r.random() < 0.2:
        ev.append(
            k.SlowDetach(
                at=round(r.uniform(0, SPAN_S), 1),
                dur=round(r.uniform(30, 240), 1),
                delay_s=round(r.uniform(60, 600), 1),
            )
        )
    r = gen("stuck-detach")
    if r.random() < 0.2:
        ev.append(
            k.StuckDetach(
                at=round(r.uniform(0, SPAN_S), 1), dur=round(r.uniform(30, 240), 1), rate=r.choice((0.3, 1.0))
            )
        )
    r = gen("slow-attach")
    if r.random() < 0.2:
        ev.append(
            k.SlowAttach(
                at=round(r.uniform(0, SPAN_S), 1), dur=round(r.uniform(30, 240), 1), delay_s=round(r.uniform(10, 60), 1)
            )
        )
    r = gen("imds-lag-long")
    if r.random() < 0.25:
        ev.append(
            k.ImdsLagLong(
                at=round(r.uniform(0, SPAN_S), 1),
                node=r.choice(names),
                lag=round(r.uniform(120, 600), 1),
                dur=round(r.uniform(120, 600), 1),
            )
        )
    r = gen("imds-torn")
    if r.random() < 0.2:
        ev.append(
            k.ImdsTorn(
                at=round(r.uniform(0, SPAN_S), 1),
                node=r.choice(names),
                dur=round(r.uniform(30, 300), 1),
                span=r.choice((2.0, 10.0, 60.0)),
                # missing network-card leaves from a generator of their own: the draws above are what they were
                no_card=gen("imds-torn/no-card").random() < 0.5,
            )
        )
    r = gen("ec2-ambiguous")
    if r.random() < 0.25:
        ev.append(
            k.Ec2Ambiguous(
                at=round(r.uniform(0, SPAN_S), 1),
                dur=round(r.uniform(20, 180), 1),
                rate=r.choice((0.2, 0.5, 1.0)),
                how=r.choice(("InternalError", "sdk-retry")),
            )
        )
    r = gen("instance-type")
    if r.random() < 0.2:
        at, node = round(r.uniform(0, SPAN_S / 2), 1), r.choice(names)
        itype = r.choice(MULTI_CARD_TYPES if r.random() < 1 / 3 else ALL_TYPES)
        gap = round(r.uniform(0, 30), 1)
        # EFA-only interfaces from a generator of their own: the draws above are what they were
        efa = KNOWN_TYPES[itype].network_cards > 1 and gen("instance-type/efa").random() < 0.5
        # another tool's ENI on card 1, and reads missing network-card leaves, from a generator of
        # their own too
        other = gen("instance-type/foreign")
        foreign = KNOWN_TYPES[itype].network_cards > 1 and other.random() < 0.75
        no_card_s = round(other.uniform(60, 180), 1) if foreign else 0.0
        ev.append(k.InstanceType(at=at, node=node, itype=itype, gap=gap, efa=efa, foreign=foreign, no_card_s=no_card_s))
    r = gen("report-flood")
    if r.random() < 0.15:
        ev.append(
            k.ReportFlood(
                at=round(r.uniform(0, SPAN_S), 1),
                node=r.choice(names),
                n=r.randint(5, 50),
                period=r.choice((1.0, 5.0)),
                dur=round(r.uniform(30, 240), 1),
                hostile=r.random() < 0.5,
            )
        )
    r = gen("imds-regress")
    if r.random() < 0.08:
        ev.append(
            k.ImdsRegress(
                at=round(r.uniform(0, SPAN_S), 1),
                node=r.choice(names),
                dur=round(r.uniform(60, 300), 1),
                back_s=r.choice((30.0, 120.0, 300.0)),
            )
        )
    r = gen("lambda-clock-skew")
    if r.random() < 0.08:
        skews = [round(r.choice((-1, 1)) * r.uniform(5, 90), 1) for _ in range(r.randint(2, 4))]
        ev.append(
            k.LambdaClockSkew(
                at=round(r.uniform(0, SPAN_S), 1),
                dur=round(r.uniform(60, 300), 1),
                skews=",".join(map(str, skews)),
            )
        )
    return ev


def _subnet_worlds(seed: int, names: list[str], prefix_mode: bool) -> list[Event]:
    """Issue 24's pod subnets, each world from a generator of its own (``dst/<seed>/<kind>``),
    drawn after every other kind; the world is set up at the start (:mod:`simulation.subnets`),
    the event at ``at`` is what changes later:

    * ``multi-subnet``: discovery by tag over 1-2 more subnets of the zone tagged
      ``kubernetes.io/role/cni=1`` (the first a /26-/28, small enough to fill; the second a
      /24-/26), sometimes the nodes' own subnet or a large other one tagged ``=0``, sometimes one
      more subnet tagged only at ``at`` (30 s to half the span), and in half of the others the
      nodes' subnet held by foreign ENIs but for 24 or 64 addresses (the zone short: fair sharing);
    * ``fragmented``: 60-100 % of the nodes' subnet's /28s broken by foreign addresses, a second
      pod subnet (/24-/26) with 0, 30 or 70 % of its own broken, half of it under a ``prefix``
      CIDR reservation in 40 % of them, and named placement on in half (prefix mode: one seed in
      three; secondary-address mode: one in fifteen);
    * ``custom-networking``: the allocator's map gives the zone one or two subnets (/24-/28),
      with a security group in half, and every node's agent (or, in 40 %, some of them) runs
      with custom networking; in half the mapped subnets are tagged for discovery too.
    """
    ev: list[Event] = []

    def gen(kind: str) -> random.Random:
        return random.Random(f"dst/{seed}/{kind}")

    r = gen("multi-subnet")
    if r.random() < 0.2:
        sizes = [r.choice((26, 27, 28))] + ([r.choice((24, 25, 26))] if r.random() < 0.6 else [])
        excluded = r.choice(("", "", "own", "extra"))
        late = r.random() < 0.3
        main_free = r.choice((0, 0, 24, 64)) if excluded != "own" else 0
        ev.append(
            k.MultiSubnet(
                at=round(r.uniform(30, SPAN_S / 2), 1) if late else 0.0,
                sizes=",".join(map(str, sizes)),
                excluded=excluded,
                late=late,
                main_free=main_free,
            )
        )
    r = gen("fragmented")
    if r.random() < (1 / 3 if prefix_mode else 1 / 15):
        ev.append(
            k.Fragmented(
                at=0.0,
                broken=round(r.uniform(0.6, 1.0), 2),
                second=r.choice((24, 25, 26)),
                second_broken=r.choice((0.0, 0.3, 0.7)),
                reservation=r.random() < 0.4,
                named=r.random() < 0.5,
            )
        )
    r = gen("custom-networking")
    if r.random() < 0.15:
        sizes = [r.choice((24, 25, 26, 27))] + ([r.choice((25, 26, 27, 28))] if r.random() < 0.5 else [])
        custom = names if r.random() < 0.6 or len(names) < 2 else r.sample(names, r.randint(1, len(names) - 1))
        ev.append(
            k.CustomNetworking(
                at=0.0,
                sizes=",".join(map(str, sizes)),
                nodes=",".join(sorted(custom)),
                tagged=r.random() < 0.5,
                groups=r.random() < 0.5,
            )
        )
    return ev
