"""Where a warmpool run's mutating calls go: each call EC2 accepted, by action and cause
(``calls_by_cause`` of the bench's JSON; ``warmpool bench --random N --why``, docs/bench.md,
"Where the calls go").

The warmpool strategy tells :class:`CallCauses` what is calling: an allocator invocation
(with its batch's reports) or a reconciler run. Each accepted mutating call is then put
under ``"<Action>: <cause>"`` from what the call names (an ENI, an instance, a created
ENI's instance tag) and the report of that instance the batch answered (the newest, as the
allocator coalesces them):

* ``CreateTags`` by the allocator: the first-contact tag of primary ENIs, ``one node`` (a
  call naming one ENI) or ``batched`` (several);
* a grow (``AssignPrivateIpAddresses``, ``CreateNetworkInterface``, ``AttachNetworkInterface``,
  ``ModifyNetworkInterfaceAttribute``): ``join-time pool`` (the report had no pod assigned and
  none waiting: the targets at 0 pods), ``burst`` (the report carried ``burst``), ``pods
  waiting`` (``pending_demand`` > 0), else ``warm top-up`` (pods there, none waiting: the
  targets ask for more); an assign says ``on a created ENI`` when it is not on the primary;
* ``UnassignPrivateIpAddresses``, ``DetachNetworkInterface``, ``DeleteNetworkInterface`` of
  addresses or an ENI the report offered back: ``give-back after pod deletes`` when a pod of
  the node was deleted before the call, else ``give-back of an over-fill`` (a burst's surplus,
  a top-up that overshot); a delete of an ENI whose attach never succeeded: ``failed attach
  cleanup``; any other: ``not offered``;
* the reconciler's calls: ``reconciler, GC mark`` (``CreateTags`` of a detached ENI's mark),
  ``reconciler, GC delete`` (its ``DeleteNetworkInterface`` ``gc_age_s`` later), ``reconciler,
  GC unmark``, ``reconciler, DeleteOnTermination``, else ``reconciler``;
* a call whose batch record was received more than once (the batch failed and was retried):
  ``retried batch``, whatever it did.

What cannot be placed is ``unattributed`` (no context, or an instance not in the batch).
Every accepted mutating call gets exactly one key, so the counts add up to the run's
``mutating_calls`` (``tests/unit/test_call_causes.py``).
"""

from __future__ import annotations

import contextlib
import json
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from warmpool import names
from warmpool.limits import is_primary_slot

UNATTRIBUTED = "unattributed"

GROW = frozenset(
    {
        "AssignPrivateIpAddresses",
        "CreateNetworkInterface",
        "AttachNetworkInterface",
        "ModifyNetworkInterfaceAttribute",
    }
)
RELEASE = frozenset({"UnassignPrivateIpAddresses", "DetachNetworkInterface", "DeleteNetworkInterface"})


@dataclass(frozen=True)
class _Seen:
    """What the cause of a call needs from a report."""

    assigned: int
    pending: int
    burst: bool
    offered: frozenset[str]
    """ENIs the report offers addresses of (or the whole ENI) back."""
    retried: bool


def _seen(body: str, retried: bool) -> tuple[str, int, _Seen] | None:
    """(instance id, seq, what counts) of a report body; None if it does not read as one."""
    try:
        r = json.loads(body)
        return (
            str(r["instance_id"]),
            int(r.get("seq", 0)),
            _Seen(
                assigned=int(r.get("assigned_ips", 0)),
                pending=int(r.get("pending_demand", 0)),
                burst=r.get("burst") is not None,
                offered=frozenset(str(o["eni_id"]) for o in r.get("release") or ()),
                retried=retried,
            ),
        )
    except (ValueError, KeyError, TypeError):
        return None


class CallCauses:
    """Counts a warmpool run's accepted mutating calls by ``"<Action>: <cause>"``.

    ``emu``: the run's emulated EC2 (which ENI is whose); ``deleted_before``: whether a pod of
    the node on this instance was deleted before now."""

    def __init__(self, emu: Any, deleted_before: Any) -> None:
        self._emu = emu
        self._deleted_before = deleted_before
        self.counts: Counter[str] = Counter()
        self._source: str | None = None
        self._reports: dict[str, tuple[int, _Seen]] = {}
        self._instance_of: dict[str, str] = {}  # ENI -> instance (learnt from creates and attaches)
        self._attachment: dict[str, str] = {}  # attachment id -> ENI
        self._attached: set[str] = set()

    # --- what is calling --------------------------------------------------------------

    @contextlib.contextmanager
    def allocator(self, records: Sequence[Mapping[str, Any]]) -> Iterator[None]:
        """An allocator invocation on these SQS records (their bodies are reports)."""
        self._reports = {}
        for rec in records:
            attrs = rec.get("attributes") or {}
            seen = _seen(str(rec.get("body", "")), int(attrs.get("ApproximateReceiveCount", "1")) > 1)
            if seen is None:
                continue
            iid, seq, s = seen
            if iid not in self._reports or seq >= self._reports[iid][0]:
                self._reports[iid] = (seq, s)
        self._source = "allocator"
        try:
            yield
        finally:
            self._source, self._reports = None, {}

    @contextlib.contextmanager
    def reconciler(self) -> Iterator[None]:
        self._source = "reconciler"
        try:
            yield
        finally:
            self._source = None

    # --- each accepted call -----------------------------------------------------------

    def accepted(self, action: str, kwargs: Mapping[str, Any], response: Mapping[str, Any]) -> None:
        """A mutating call EC2 accepted (the recorder calls this once per such call)."""
        self._learn(action, kwargs, response)
        self.counts[f"{action}: {self._cause(action, kwargs)}"] += 1

    def _learn(self, action: str, kwargs: Mapping[str, Any], response: Mapping[str, Any]) -> None:
        if action == "CreateNetworkInterface":
            eni = str((response.get("NetworkInterface") or {}).get("NetworkInterfaceId", ""))
            for spec in kwargs.get("TagSpecifications") or ():
                for tag in spec.get("Tags") or ():
                    if tag.get("Key") == names.TAG_INSTANCE_ID and eni:
                        self._instance_of[eni] = str(tag.get("Value"))
        elif action == "AttachNetworkInterface":
            eni = str(kwargs.get("NetworkInterfaceId", ""))
            self._instance_of[eni] = str(kwargs.get("InstanceId", ""))
            self._attachment[str(response.get("AttachmentId", ""))] = eni
            self._attached.add(eni)

    def _eni_of(self, action: str, kwargs: Mapping[str, Any]) -> str:
        if action == "DetachNetworkInterface":
            return self._attachment.get(str(kwargs.get("AttachmentId", "")), "")
        return str(kwargs.get("NetworkInterfaceId", ""))

    def _instance(self, action: str, kwargs: Mapping[str, Any]) -> str:
        if action == "AttachNetworkInterface":
            return str(kwargs.get("InstanceId", ""))
        if action == "CreateNetworkInterface":
            for spec in kwargs.get("TagSpecifications") or ():
                for tag in spec.get("Tags") or ():
                    if tag.get("Key") == names.TAG_INSTANCE_ID:
                        return str(tag.get("Value"))
            return ""
        eni = self._eni_of(action, kwargs)
        got = self._instance_of.get(eni)
        if got is None:
            e = self._emu.enis.get(eni)
            got = e.attachment.instance_id if e is not None and e.attachment is not None else ""
        return got

    def _primary(self, eni: str) -> bool:
        e = self._emu.enis.get(eni)
        a = e.attachment if e is not None else None
        return a is not None and is_primary_slot(a.card, a.device_index)

    def _cause(self, action: str, kwargs: Mapping[str, Any]) -> str:
        if self._source == "reconciler":
            return self._reconciler(action, kwargs)
        if self._source != "allocator":
            return UNATTRIBUTED
        if action == "CreateTags":
            return (
                "first-contact tag, batched"
                if len(kwargs.get("Resources") or ()) > 1
                else "first-contact tag, one node"
            )
        iid = self._instance(action, kwargs)
        got = self._reports.get(iid)
        if got is None:
            return UNATTRIBUTED
        seen = got[1]
        if seen.retried:
            return "retried batch"
        eni = self._eni_of(action, kwargs)
        if action in GROW:
            cause = self._grow(seen)
            if action == "AssignPrivateIpAddresses" and not self._primary(eni):
                cause += ", on a created ENI"
            return cause
        if action in RELEASE:
            if action == "DeleteNetworkInterface" and eni in self._instance_of and eni not in self._attached:
                return "failed attach cleanup"
            if eni not in seen.offered:
                return "not offered"
            return "give-back after pod deletes" if self._deleted_before(iid) else "give-back of an over-fill"
        return UNATTRIBUTED

    @staticmethod
    def _reconciler(action: str, kwargs: Mapping[str, Any]) -> str:
        if action == "CreateTags":
            marks = [t.get("Value") for t in kwargs.get("Tags") or () if t.get("Key") == names.TAG_GC_MARK]
            if marks:
                return "reconciler, GC mark" if marks[0] else "reconciler, GC unmark"
        if action == "DeleteNetworkInterface":
            return "reconciler, GC delete"
        if action == "ModifyNetworkInterfaceAttribute":
            return "reconciler, DeleteOnTermination"
        return "reconciler"

    @staticmethod
    def _grow(seen: _Seen) -> str:
        if seen.assigned == 0 and seen.pending == 0:
            return "join-time pool"
        if seen.burst:
            return "burst"
        return "pods waiting" if seen.pending > 0 else "warm top-up"


# --- the table over many runs (``warmpool bench --random N --why``) ----------------------


@dataclass(frozen=True)
class RunCalls:
    """One run's calls by cause, with what the online bound counts per action."""

    nodes: int
    causes: Mapping[str, int]
    online: Mapping[str, int]
    """The online bound's fewest calls per action (``online_lower_bound.calls_by_action``)."""


def _median(xs: list[float]) -> float:
    s = sorted(xs)
    n = len(s)
    if not n:
        return 0.0
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


def why_table(runs: Sequence[RunCalls], title: str) -> str:
    """Per EC2 action, the calls made against the online bound's; under each, its causes: the
    sum over the runs, per node, and the median over the runs of the calls per node."""
    nodes = sum(r.nodes for r in runs)
    made: Counter[str] = Counter()
    bound: Counter[str] = Counter()
    for r in runs:
        made.update(r.causes)
        bound.update(r.online)
    actions = sorted({k.split(": ", 1)[0] for k in made} | set(bound))
    total = sum(made.values())
    head = f"{'action / cause':<58}{'sum':>7}{'/node':>8}{'median':>8}{'online':>8}{'above':>7}"
    lines = [f"{title}: {len(runs)} scenarios, {nodes} nodes, {total} calls, online bound {sum(bound.values())}"]
    lines += [head, "-" * len(head)]

    def per_node_median(pick: Any) -> float:
        return _median([sum(v for k, v in r.causes.items() if pick(k)) / r.nodes for r in runs if r.nodes])

    for a in actions:
        mine = {k: v for k, v in made.items() if k.split(": ", 1)[0] == a}
        n = sum(mine.values())
        med = per_node_median(lambda k, a=a: k.split(": ", 1)[0] == a)
        lines.append(f"{a:<58}{n:>7}{n / max(nodes, 1):>8.2f}{med:>8.2f}{bound[a]:>8}{n - bound[a]:>7}")
        for k, v in sorted(mine.items(), key=lambda kv: -kv[1]):
            med = per_node_median(lambda x, k=k: x == k)
            lines.append(f"  {k.split(': ', 1)[1]:<56}{v:>7}{v / max(nodes, 1):>8.2f}{med:>8.2f}")
    lines.append(
        f"{'all':<58}{total:>7}{total / max(nodes, 1):>8.2f}"
        f"{per_node_median(lambda k: True):>8.2f}{sum(bound.values()):>8}{total - sum(bound.values()):>7}"
    )
    return "\n".join(lines)
