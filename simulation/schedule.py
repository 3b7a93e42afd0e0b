"""The schedule a seed draws: one list of timed events (pods, faults, CNI
calls), plus a few world settings fixed for the whole run.

Everything random in a run is drawn here, from ``random.Random(seed)``, or
later from per-purpose generators seeded with ``(seed, purpose)``; so a seed
and the indices of the events kept (``keep``) replay a run exactly, which is
what the shrinker relies on.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

INSTANCE_TYPES = ("m5.large", "t3.medium", "c5.xlarge", "m5.xlarge")
SPAN_S = 420.0
"""Events are drawn in [0, SPAN_S); the run then goes quiet."""
QUIET_S = 480.0
"""After the last event: long enough for a release delay, the GC age and two reconciles."""

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
    "checkpoint-write-error",
    "tag-lookup-failure",
    "clock-skew",
)
"""Every kind of fault the schedule can hold."""
EVENT_KINDS = ("pods-add", "pods-del", "churn", *FAULT_KINDS)
HOSTILE_KINDS = ("forged-release", "seq-poison", "name-spray", "churner", "result-theft")
"""Issue 12's hostile nodes (:mod:`simulation.hostile`): drawn from their own generator, so a
seed's other events are those it drew before they existed."""
AGENT_KINDS = (
    "checkpoint-lost",
    "checkpoint-truncated",
    "checkpoint-corrupt",
    "checkpoint-write-error",
    "tag-lookup-failure",
    "clock-skew",
)
"""Issue 21's faults of a node's agent and host (:func:`_agent_faults`), each drawn from a
generator of its own: a seed's other events are those it drew before they existed."""
IDENTITIES = ("own", "none", "bad-signature")
"""How a crafted report for another instance is signed: the sender's own valid identity, none,
or the victim's document under a key the allocator does not trust."""


@dataclass(frozen=True)
class Event:
    at: float
    kind: str
    args: dict[str, Any] = field(default_factory=dict)

    def describe(self) -> str:
        inner = ", ".join(f"{k}={v}" for k, v in sorted(self.args.items()))
        return f"t={self.at:.1f} {self.kind}({inner})"


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
        ev.append(Event(t, "pods-add", {"node": node, "n": rng.randint(1, 12)}))
        if rng.random() < 0.7:
            ev.append(
                Event(
                    round(min(SPAN_S, t + rng.uniform(5, 200)), 1), "pods-del", {"node": node, "n": rng.randint(1, 10)}
                )
            )
    for _ in range(rng.randint(0, 6)):
        ev.append(Event(at(), "churn", {"node": rng.choice(names), "n": rng.randint(1, 4)}))

    def window(kind: str, **args: Any) -> None:
        t = at()
        ev.append(Event(t, kind, {"dur": round(rng.uniform(20, 180), 1), **args}))

    # faults: each kind with some probability, a few of them more than once
    if rng.random() < 0.5:
        window("sqs-delay", max_s=rng.choice((5, 20, 60, 120)))
    if rng.random() < 0.5:
        window("sqs-duplicate", rate=rng.choice((0.2, 0.5, 1.0)), copies=rng.choice((2, 3)))
    for node in names:
        if rng.random() < 0.6:
            ev.append(
                Event(
                    at(),
                    "imds-lag",
                    {"node": node, "lag": round(rng.uniform(0, 120), 1), "dur": round(rng.uniform(30, 240), 1)},
                )
            )
    for _ in range(rng.choice((0, 0, 1, 2, 3))):
        ev.append(
            Event(
                at(),
                "agent-kill",
                {
                    "node": rng.choice(names),
                    "point": rng.choice(("idle", "after-receive", "mid-apply", "after-apply", "mid-checkpoint")),
                    "down": round(rng.uniform(0.5, 30), 1),
                },
            )
        )
    if rng.random() < 0.4:
        window("lambda-crash", rate=rng.choice((0.1, 0.3, 0.6)))
    if rng.random() < 0.2:
        window("slow-invocation", rate=rng.choice((0.3, 1.0)))
    if rng.random() < 0.3:
        window("throttle-storm", rate=rng.choice((2.0, 5.0, 10.0)), describe=rng.random() < 0.6)
    if rng.random() < 0.25:
        window(
            "foreign-load",
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
        window("subnet-exhausted")
    if rng.random() < 0.15:
        ev.append(Event(at(), "fragmentation", {"n": rng.randint(5, 40)}))
    if rng.random() < 0.25:
        window("attach-failure", rate=rng.choice((0.3, 1.0)))
    if rng.random() < 0.12:
        ev.append(Event(at(), "terminate", {"node": rng.choice(names)}))
    if rng.random() < 0.12:
        ev.append(
            Event(
                at(),
                "replace-node",
                {"node": rng.choice(names), "gap": round(rng.uniform(0, 60), 1), "race": rng.random() < 0.5},
            )
        )
    for _ in range(rng.choice((0, 0, 1, 2))):
        ev.append(Event(at(), "cni-overlap", {"node": rng.choice(names)}))
    if rng.random() < 0.1:
        node = rng.choice(names)
        t = at()
        ev.append(Event(t, "cni-interrupted", {"node": node}))
        ev.append(Event(round(min(SPAN_S, t + rng.uniform(5, 60)), 1), "cni-gc", {"node": node}))
    if rng.random() < 0.06:
        ev.append(
            Event(
                at(),
                "cni-hostile",
                {"node": rng.choice(names), "variant": rng.choice(("oversized", "host-netns", "host-ifname"))},
            )
        )
    if rng.random() < 0.15:
        window("ddb-unprocessed", rate=rng.choice((0.5, 1.0)))
    if rng.random() < 0.15:
        window("queue-delete-failure")
    if rng.random() < 0.15:
        window("reconcile-race")
    ev += _hostile(seed, names)
    ev += _agent_faults(seed, names)
    ev.sort(key=lambda e: (e.at, e.kind))
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
            Event(
                at(),
                "forged-release",
                {
                    "node": "" if how != "own" else sender,
                    "victim": victim,
                    "identity": how,
                    "repeat": rng.randint(0, 3),
                },
            )
        )
    if rng.random() < 0.2:
        sender, victim = pair()
        own = rng.random() < 0.5
        how = "own" if own else rng.choice(IDENTITIES)
        ev.append(
            Event(
                at(),
                "seq-poison",
                {
                    "node": sender if how == "own" else "",
                    "victim": sender if own else victim,
                    "identity": how,
                    "repeat": rng.randint(0, 2),
                },
            )
        )
    if rng.random() < 0.15:
        ev.append(Event(at(), "name-spray", {"node": rng.choice(names), "n": rng.randint(10, 60)}))
    if rng.random() < 0.1:
        ev.append(
            Event(
                round(rng.uniform(0, SPAN_S / 2), 1),
                "churner",
                {
                    "itype": rng.choice(INSTANCE_TYPES),
                    "dur": round(rng.uniform(60, 300), 1),
                    "period": rng.choice((2.0, 5.0, 10.0)),
                },
            )
        )
    # Drawn last (and from its own generator), so the kinds above are what they were before it.
    theft = random.Random(f"dst/{seed}/result-theft")
    if theft.random() < 0.15:
        thief = theft.choice(names)
        ev.append(
            Event(
                round(theft.uniform(20, SPAN_S / 2), 1),
                "result-theft",
                {
                    "node": thief,
                    "victim": theft.choice([n for n in names if n != thief]),
                    "dur": round(theft.uniform(30, 240), 1),
                },
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
            Event(
                round(r.uniform(30, SPAN_S), 1),
                "checkpoint-lost",
                {"node": r.choice(names), "down": round(r.uniform(1, 30), 1)},
            )
        )
    r = gen("checkpoint-truncated")
    if r.random() < 0.15:
        ev.append(
            Event(
                round(r.uniform(30, SPAN_S), 1),
                "checkpoint-truncated",
                {"node": r.choice(names), "down": round(r.uniform(1, 30), 1), "keep": round(r.uniform(0, 0.99), 2)},
            )
        )
    r = gen("checkpoint-corrupt")
    if r.random() < 0.15:
        ev.append(
            Event(
                round(r.uniform(30, SPAN_S), 1),
                "checkpoint-corrupt",
                {
                    "node": r.choice(names),
                    "down": round(r.uniform(1, 30), 1),
                    "start": round(r.uniform(0, 0.95), 2),
                    "n": r.choice((1, 16, 512, 4096)),
                },
            )
        )
    r = gen("checkpoint-write-error")
    if r.random() < 0.15:
        ev.append(
            Event(
                round(r.uniform(10, SPAN_S), 1),
                "checkpoint-write-error",
                {
                    "node": r.choice(names),
                    "dur": round(r.uniform(5, 120), 1),
                    "errno": r.choice(("ENOSPC", "EIO")),
                },
            )
        )
    r = gen("tag-lookup-failure")
    if r.random() < 0.15:
        rollout = r.sample(names, r.randint(1, len(names)))
        ev.append(
            Event(
                round(r.uniform(30, SPAN_S), 1),
                "tag-lookup-failure",
                {
                    "nodes": ",".join(rollout),
                    "gap": round(r.uniform(0, 20), 1),
                    "dur": round(r.uniform(5, 180), 1),
                },
            )
        )
    r = gen("clock-skew")
    if r.random() < 0.2:
        ev.append(
            Event(
                round(r.uniform(0, SPAN_S / 2), 1),
                "clock-skew",
                {"node": r.choice(names), "skew": round(r.choice((-1, 1)) * r.uniform(10, 300), 1)},
            )
        )
    return ev
