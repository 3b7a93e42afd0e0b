"""Hostile nodes in the whole-system simulation (issue 12).

Two actors send reports the allocator must not trust:

* a **compromised node**: one of the seed's nodes, whose agent keeps running
  honestly, but whose instance also sends crafted reports over its own SQS
  client, signed with its *own* valid instance identity (what a node's
  credentials and IMDS give an attacker on it);
* an **outsider**: a sender with no valid identity (none at all, or another
  instance's document signed by a key the allocator does not trust).

Kinds (each a seeded event, :mod:`sim.dst.schedule`):

* ``forged-release``: a report *for another instance* offering away every
  address that instance's agent last reported (``assigned`` 0, offers dated
  past the release delay), a seq a little ahead of the victim's;
* ``seq-poison``: a seq far ahead (``2^62``) for the sender's own instance, or
  ``SEQ_AHEAD_LIMIT / 2`` ahead (under the limit: only the identity stops it)
  for another's;
* ``name-spray``: the sender's own last report (valid identity) under many
  node names;
* ``churner``: the node's pods alternate between filling its whole capacity
  and none (its real agent fills and offers everything back, as fast as its
  timing lets it).

Every crafted report is remembered (instance, seq): the allocator acting on
one (a ledger row at that seq, a result in reply to it) is the violation
``forged-served``; see :mod:`sim.dst.checks` for ``seq-poisoned`` and
``ledger-rows``.
"""

from __future__ import annotations

import functools
import json
from typing import TYPE_CHECKING, Any

from sim.iid import IdentitySigner
from warmpool.messages import PoolReport, ReleaseOffer, parse_report

if TYPE_CHECKING:
    from sim.dst.world import SimAgent, World

SEQ_AHEAD_LIMIT = 2**20
"""The allocator's bound (functions/allocator.py); kept here so a mutation test can lift it there."""
TOP_SEQ = 2**62


@functools.cache
def _rogue_signer() -> IdentitySigner:
    """A key the allocator does not trust (an outsider's forgery of a document)."""
    return IdentitySigner()


def _base(w: World, victim: SimAgent) -> PoolReport | None:
    body = w.last_report.get(victim.iid)
    return parse_report(body) if body is not None else None


def _identity(w: World, sender: SimAgent | None, about: SimAgent, how: str) -> Any:
    if how == "own" and sender is not None:
        return w.signer_imds.identity(sender.iid)
    if how == "bad-signature":
        return _rogue_signer().identity(w.signer_imds.identity_document(about.iid))
    return None  # "none"


def _send(w: World, sender: SimAgent | None, report: PoolReport, kind: str) -> None:
    w.forged.add((report.instance_id, report.seq))
    body = report.to_json()
    client = sender.sqs if sender is not None else w.outsider_sqs
    client.send_message(QueueUrl=w.reports_url, MessageBody=body)
    w.forged_bodies.add(body)
    w.fault(kind)


def forged_release(w: World, sender: SimAgent | None, victim: SimAgent, how: str) -> None:
    base = _base(w, victim)
    if base is None or victim.gone:
        return
    now = w.now()
    offers = [ReleaseOffer(eni_id=e.eni_id, ips=list(e.ips), prefixes=list(e.prefixes), quarantined_at=now - 30)
              for e in base.enis if e.ips or e.prefixes]
    if not offers:
        return
    enis = [e.model_copy(update={"assigned": 0}) for e in base.enis]
    rep = base.model_copy(update={
        "seq": max(base.seq, victim.last_seq()) + 1000, "sent_at": now, "enis": enis, "assigned_ips": 0,
        "pending_demand": 0, "release": offers, "identity": _identity(w, sender, victim, how)})
    _send(w, sender, rep, f"forged-release:{how}")


def seq_poison(w: World, sender: SimAgent | None, victim: SimAgent, how: str) -> None:
    base = _base(w, victim)
    if base is None or victim.gone:
        return
    own = sender is victim
    seq = TOP_SEQ if own else max(base.seq, int(w.now() * 1000)) + SEQ_AHEAD_LIMIT // 2
    rep = base.model_copy(update={"seq": seq, "sent_at": w.now(),
                                  "identity": _identity(w, sender, victim, how)})
    _send(w, sender, rep, "seq-poison:" + ("own" if own else how))


def name_spray(w: World, sender: SimAgent, n: int, tries: int = 0) -> None:
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


def churn_step(w: World, a: SimAgent, until: float, period: float, fill: bool) -> None:
    """Fill the node's whole capacity with pods, then delete them all, every ``period`` s."""
    if a.gone or w.now() >= until:
        return
    if fill:
        cap = a.ctl.limits.capacity(w.plan.prefix_mode, None) if a.alive else 0
        want = max(0, cap - len(a.rt.up) - len(a.rt.adding) - 2)
        for _ in range(want):
            a.rt.started += 1
            a.rt.adding[f"{a.name}-c{a.rt.started}"] = None
        w.fault("churner:fill")
    else:
        w.delete_pods(a, len(a.rt.up) + len(a.rt.adding))
        w.fault("churner:empty")
    w.loop.call_later(period, lambda: churn_step(w, a, until, period, not fill))


def forged_detail(body: str) -> str:
    try:
        d = json.loads(body)
    except ValueError:
        return body[:80]
    return f"{d.get('node')}/{d.get('instance_id')} seq {d.get('seq')}"
