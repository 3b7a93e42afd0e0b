"""Hostile nodes in the whole-system simulation (issue 12).

Two actors send reports the allocator must not trust:

* a **compromised node**: one of the seed's nodes, whose agent keeps running
  honestly, but whose instance also sends crafted reports over its own SQS
  client, signed with its *own* valid instance identity (what a node's
  credentials and IMDS give an attacker on it);
* an **outsider**: a sender with no valid identity (none at all, or another
  instance's document signed by a key the allocator does not trust).

Kinds (each a seeded event, :mod:`simulation.schedule`):

* ``forged-release``: a report *for another instance* offering away every
  address that instance's agent last reported (``assigned`` 0, offers dated
  past the release delay), a seq a little ahead of the victim's;
* ``seq-poison``: a seq far ahead (``2^62``) for the sender's own instance, or
  ``SEQ_AHEAD_LIMIT / 2`` ahead (under the limit: only the identity stops it)
  for another's;
* ``name-spray``: the sender's own last report (valid identity) under many
  node names;
* ``churner``: a rogue instance of the cluster (valid identity, no agent)
  whose reports flip between "fill everything" and "release everything"
  (:class:`Churner`);
* ``result-theft``: the compromised node drains another node's result queue
  for a while (an agent's role may receive and delete on every result queue of
  the cluster: SQS cannot tell one node's credentials from another's under Pod
  Identity or IRSA). The victim never sees those results; what the allocator
  did is in EC2 all the same, and the victim must learn it from IMDS.

Every crafted report is remembered (instance, seq): the allocator acting on
one (a ledger row at that seq, a result in reply to it) is the violation
``forged-served``; see :mod:`simulation.checks` for ``seq-poisoned`` and
``ledger-rows``.
"""

from __future__ import annotations

import functools
import json
from typing import Any, Protocol

from emulated.iid import IdentitySigner
from emulated.imds import Imds
from emulated.sqs import FastSqsClient
from functions.settings import Settings
from simulation.base import CLUSTER
from simulation.node import SimAgent
from simulation.view import WorldView
from warmpool import names
from warmpool.limits import known
from warmpool.messages import MAX_TARGET, EniReport, PoolReport, ReleaseOffer, Targets, parse_report

SEQ_AHEAD_LIMIT = 2**20
"""Half of it ahead is under the allocator's bound (``functions/intake.py``, 2^47 since L1) and
past what any honest row here reaches (``simulation.checks``): kept here so a mutation test can
lift the allocator's refusal without moving the crafted seq."""
TOP_SEQ = 2**62


class HostileWorld(WorldView, Protocol):
    """What the hostile actors reach of the seed's world
    (:class:`simulation.world.SimWorld` satisfies it)."""

    @property
    def outsider_sqs(self) -> FastSqsClient:
        """A sender with no instance behind it."""
        ...

    @property
    def signer_imds(self) -> Imds: ...

    @property
    def settings(self) -> Settings: ...

    @property
    def subnet(self) -> str: ...

    @property
    def reports_url(self) -> str: ...

    @property
    def last_report(self) -> dict[str, str]: ...

    @property
    def forged(self) -> set[tuple[str, int]]:
        """(instance, seq) of every crafted report."""
        ...

    @property
    def crafted_bodies(self) -> set[str]: ...

    @property
    def sprayed(self) -> set[str]: ...

    def ledger_row(self, a: SimAgent) -> dict[str, Any] | None: ...


@functools.cache
def _rogue_signer() -> IdentitySigner:
    """A key the allocator does not trust (an outsider's forgery of a document)."""
    return IdentitySigner()


def _base(w: HostileWorld, victim: SimAgent) -> PoolReport | None:
    body = w.last_report.get(victim.iid)
    return parse_report(body) if body is not None else None


def _identity(w: HostileWorld, sender: SimAgent | None, about: SimAgent, how: str) -> Any:
    if how == "own" and sender is not None:
        return w.signer_imds.identity(sender.iid)
    if how == "bad-signature":
        return _rogue_signer().identity(w.signer_imds.identity_document(about.iid))
    return None  # "none"


def _send(w: HostileWorld, sender: SimAgent | None, report: PoolReport, kind: str) -> None:
    w.forged.add((report.instance_id, report.seq))
    body = report.to_json()
    client = sender.sqs if sender is not None else w.outsider_sqs
    client.send_message(QueueUrl=w.reports_url, MessageBody=body)
    w.crafted_bodies.add(body)
    w.fault(kind)


def forged_release(w: HostileWorld, sender: SimAgent | None, victim: SimAgent, how: str) -> None:
    base = _base(w, victim)
    if base is None or victim.gone:
        return
    now = w.now()
    offers = [
        ReleaseOffer(eni_id=e.eni_id, ips=list(e.ips), prefixes=list(e.prefixes), quarantined_at=now - 30)
        for e in base.enis
        if e.ips or e.prefixes
    ]
    if not offers:
        return
    enis = [e.model_copy(update={"assigned": 0}) for e in base.enis]
    rep = base.model_copy(
        update={
            "seq": max(base.seq, victim.last_seq()) + 1000,
            "sent_at": now,
            "enis": enis,
            "assigned_ips": 0,
            "pending_demand": 0,
            "release": offers,
            "identity": _identity(w, sender, victim, how),
        }
    )
    _send(w, sender, rep, f"forged-release:{how}")


def seq_poison(w: HostileWorld, sender: SimAgent | None, victim: SimAgent, how: str) -> None:
    base = _base(w, victim)
    if base is None or victim.gone:
        return
    own = sender is victim
    seq = TOP_SEQ if own else max(base.seq, int(w.now() * 1000)) + SEQ_AHEAD_LIMIT // 2
    rep = base.model_copy(update={"seq": seq, "sent_at": w.now(), "identity": _identity(w, sender, victim, how)})
    _send(w, sender, rep, "seq-poison:" + ("own" if own else how))


def name_spray(w: HostileWorld, sender: SimAgent, n: int, tries: int = 0) -> None:
    """The sender's last report, already served (its seq is the ledger's), under ``n`` names
    (so that, keyed by instance, each copy is stale: the sender harms no one, itself included)."""
    base = _base(w, sender)
    row = w.ledger_row(sender)
    if base is None or row is None or int(row["last_seq"]) != base.seq:
        if tries < 20 and not sender.gone:
            w.loop.call_later(3.0, lambda: name_spray(w, sender, n, tries + 1))
        return
    ident = w.signer_imds.identity(sender.iid)
    for i in range(n):
        rep = base.model_copy(update={"node": f"spray-{sender.name}-{i}", "identity": ident})
        w.sprayed.add(rep.node)
        sender.sqs.send_message(QueueUrl=w.reports_url, MessageBody=rep.to_json())
    w.fault("name-spray", n)


class Churner:
    """A rogue instance of the cluster (its own valid identity, no agent, no pods) whose reports
    flip every ``period`` s between "fill everything" (every address in use, pods waiting for its
    whole capacity) and "release everything" (none in use, every secondary address and prefix
    offered back, dated past the allocator's release delay): issue 12's churning node. It reads
    its ENIs from EC2, as a compromised host reads IMDS."""

    def __init__(self, w: HostileWorld, itype: str, period: float, until: float) -> None:
        self.w, self.period, self.until = w, period, until
        self.iid = w.emu.run_instance(
            itype, subnet_id=w.subnet, tags={names.cluster_tag_key(CLUSTER): "owned", "Name": "churner"}
        )
        self.itype = itype
        self.sqs = w.sqs.client(sender_id=f"AROAEXAMPLE:{self.iid}")
        self.fill = True
        self.sent = 0

    def step(self) -> None:
        w = self.w
        now = w.now()
        if now >= self.until or w.emu.instances[self.iid].state != "running":
            return
        enis = []
        offers = []
        for _dev, eid in sorted(w.emu.instances[self.iid].slots.items()):
            e = w.emu.enis[eid]
            if e.attachment is None:
                continue
            used = len(e.secondary) + 16 * len(e.prefixes)
            enis.append(
                EniReport(
                    eni_id=e.id,
                    device_index=e.attachment.device_index,
                    network_card=e.attachment.card,
                    subnet_id=e.subnet_id,
                    primary_ip=e.primary_ip,
                    ips=list(e.secondary),
                    prefixes=list(e.prefixes),
                    assigned=used if self.fill else 0,
                )
            )
            if not self.fill and (e.secondary or e.prefixes):
                offers.append(
                    ReleaseOffer(eni_id=e.id, ips=list(e.secondary), prefixes=list(e.prefixes), quarantined_at=now - 30)
                )
        cap = known(self.itype).capacity(prefix_mode=w.plan.prefix_mode, max_eni=None)
        rep = PoolReport(
            cluster=w.settings.cluster,
            node="churner",
            instance_id=self.iid,
            instance_type=self.itype,
            availability_zone="us-east-1a",
            seq=int(now * 1000),
            sent_at=now,
            mode="prefix" if w.plan.prefix_mode else "secondary-ip",
            targets=Targets(warm_ip=0, minimum_ip=0, warm_eni=0),
            enis=enis,
            assigned_ips=sum(e.assigned for e in enis),
            pending_demand=min(cap, MAX_TARGET) if self.fill else 0,
            release=offers,
            identity=w.signer_imds.identity(self.iid),
        )
        body = rep.to_json()
        w.crafted_bodies.add(body)
        self.sqs.send_message(QueueUrl=w.reports_url, MessageBody=body)
        self.sent += 1
        w.fault("churner:" + ("fill" if self.fill else "release"))
        self.fill = not self.fill
        w.loop.call_later(self.period, self.step)


def result_theft(w: HostileWorld, thief: SimAgent, victim: SimAgent, until: float, every: float = 0.5) -> None:
    """Receive and delete whatever the victim's result queue holds, every ``every`` s until
    ``until`` (the thief polls faster than the victim's agent, so most results go to it)."""
    if w.now() >= until or thief.gone or victim.gone:
        return
    try:
        msgs = thief.sqs.receive_message(QueueUrl=victim.result_url, MaxNumberOfMessages=10, VisibilityTimeout=60).get(
            "Messages", []
        )
    except Exception:  # the queue is gone (the victim terminated): nothing more to take
        return
    for m in msgs:
        thief.sqs.delete_message(QueueUrl=victim.result_url, ReceiptHandle=m["ReceiptHandle"])
    if msgs:
        w.fault("result-theft:taken", len(msgs))
    w.loop.call_later(every, lambda: result_theft(w, thief, victim, until, every))


def forged_detail(body: str) -> str:
    try:
        d = json.loads(body)
    except ValueError:
        return body[:80]
    return f"{d.get('node')}/{d.get('instance_id')} seq {d.get('seq')}"
