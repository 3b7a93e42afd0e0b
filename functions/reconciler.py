"""The scheduled backstop of the event-driven path.

* **Two-phase GC** of detached ENIs warmpool created for the cluster: a run
  marks them (``warmpool.io/gc-marked-at``); a later run deletes those marked
  longer than ``gc_age_s`` ago. A marked ENI found attached again is unmarked.
* **DeleteOnTermination** set on our attached ENIs that lack it (a crash
  between attach and modify).

Every one of these calls is made only on an ENI the allocator itself may
attach, detach and delete (:func:`warmpool.eni_scope.lifecycle_permitted`:
warmpool's own tags for this cluster, no ``no_manage``): the cluster tag alone
is not enough, the VPC CNI puts it on its ENIs too. The Describe filter (the
cluster tag) only narrows what is read.
* **Terminated nodes**: their result queues, then their ledger entries go
  (the entry only if still the one read: same instance and seq). Entries are
  keyed by instance id.
* **Orphaned result queues**: every queue under the cluster's result prefix
  (``ListQueues`` by prefix) whose instance EC2 does not show in the cluster
  (gone, terminated, or never ours) is deleted, whatever the ledger says.

An instance *missing* from DescribeInstances is not proof that it is gone: the
EC2 API is eventually consistent and a new instance may be missing at first
("Eventual consistency in the Amazon EC2 API"), while a terminated one is still
listed, as ``terminated``, for a while after ("recently terminated instances might
appear in the returned results", DescribeInstances). So a node is retired at once
only when EC2 lists it ``shutting-down``/``terminated`` or without the cluster's
tag; a missing one only once it has been seen alive (its row served, or its queue
made) at least :data:`ABSENT_GRACE_S` before: an instance alive at ``t`` and gone
later is listed as terminated until about an hour after its end, so a read missing
it sooner is the lag, not the end. Keeping a queue of a truly gone instance a
while longer costs a queue; deleting a live one's costs its results.
* **Drift** between the ledger and EC2, as metrics.
* **Expired leases** (a crashed invocation's) are deleted.

Mutating calls are paid from the same token buckets as the allocator; what the
buckets cannot pay for now waits for the next run.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import ClientError

from functions.ec2 import Ec2
from functions.errors import AwsError, InUse, NotFound
from functions.result_queues import ResultQueues
from functions.settings import Settings
from functions.telemetry import Tally
from warmpool import names
from warmpool.eni_scope import lifecycle_permitted
from warmpool.facts import EniFacts, NodeFacts
from warmpool.limits import is_primary_slot
from warmpool.ports import Ec2Port, Ports

log = logging.getLogger(__name__)

ABSENT_GRACE_S = 3600.0
"""How long after an instance was last seen alive (its ledger row served, its result queue
created) a DescribeInstances missing it may retire it: DescribeInstances lists recently
terminated instances, as ``terminated``, for up to about an hour (see the module doc)."""
GONE_STATES = ("terminated", "shutting-down")


@dataclass
class ReconcileOutcome:
    marked: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    unmarked: list[str] = field(default_factory=list)
    fixed_delete_on_termination: list[str] = field(default_factory=list)
    forgotten_nodes: list[str] = field(default_factory=list)
    queues_deleted: list[str] = field(default_factory=list)
    orphan_queues_deleted: list[str] = field(default_factory=list)
    """Instances whose result queue went although the ledger had no entry for them."""
    absent_kept: list[str] = field(default_factory=list)
    """Instances missing from DescribeInstances yet seen alive within :data:`ABSENT_GRACE_S`:
    their result queue and ledger entry kept (the missing may be Describe's lag)."""
    queue_delete_failed: list[str] = field(default_factory=list)
    """Instances whose result queue could not be deleted: their entry stays, the next run retries."""
    leases_swept: int = 0
    drift: dict[str, int] = field(default_factory=dict)
    postponed: int = 0


class Reconciler:
    def __init__(self, ports: Ports, settings: Settings, *, tally: Tally | None = None) -> None:
        self.settings = settings
        self.clock = ports.clock
        self.sqs = ports.sqs
        self.buckets = ports.buckets
        self.ledger = ports.ledger
        self.leases = ports.leases
        self.tally = tally if tally is not None else Tally()
        self.ec2: Ec2Port = Ec2(ports.ec2, settings, self.clock, self.tally)
        self.queues = ResultQueues(ports.sqs, settings, self.tally)

    @property
    def cluster(self) -> str:
        return self.settings.cluster

    def run(self) -> ReconcileOutcome:
        out = ReconcileOutcome()
        now = self.clock.now()
        enis = self.ec2.describe_cluster_enis(self.cluster)
        self._gc(enis, now, out)
        entries = self.ledger.entries(self.cluster)
        listed = self.ec2.describe_cluster_instances(self.cluster)
        described = self._nodes(entries, enis, listed, out)
        self._orphan_queues(out, {**listed, **described})
        out.leases_swept = self.leases.sweep(self.cluster, now)
        self.tally.add(names.M_GC_DELETIONS, len(out.deleted))
        for kind, n in out.drift.items():
            self.tally.add(names.M_LEDGER_DRIFT, n, kind=kind)
        log.info(
            "reconciled",
            extra={
                "marked": len(out.marked),
                "deleted": len(out.deleted),
                "forgotten": len(out.forgotten_nodes),
                "leases_swept": out.leases_swept,
                "drift": out.drift,
                "postponed": out.postponed,
            },
        )
        return out

    # --- ENIs ------------------------------------------------------------------

    def _pay(self, wants: list[tuple[str, str]]) -> list[tuple[str, str]]:
        """(action, eni) pairs the buckets pay for now, in order; the rest wait."""
        if not wants:
            return []
        waits = self.buckets.take_batch([{a: 1} for a, _ in wants], self.clock.now())
        paid = [w for w, t in zip(wants, waits, strict=True) if t == 0]
        return paid

    def _gc(self, enis: list[EniFacts], now: float, out: ReconcileOutcome) -> None:
        wants: list[tuple[str, str]] = []
        for e in enis:
            if not lifecycle_permitted(e.tags, self.cluster):
                continue  # the VPC CNI's, another tool's (no_manage) or another cluster's: never touched
            mark = e.tags.get(names.TAG_GC_MARK, "")
            if e.instance_id:
                if mark:
                    wants.append(("CreateTags:unmark", e.eni.eni_id))
                elif (
                    not e.delete_on_termination
                    and e.attachment_id
                    and e.eni.device_index >= 0
                    and not is_primary_slot(e.eni.network_card, e.eni.device_index)
                ):
                    wants.append(("ModifyNetworkInterfaceAttribute", e.eni.eni_id))
                continue
            if e.status != "available":
                continue  # detaching: next run
            if not mark:
                wants.append(("CreateTags", e.eni.eni_id))
            elif now - _float(mark, now) >= self.settings.gc_age_s:
                wants.append(("DeleteNetworkInterface", e.eni.eni_id))
        by_id = {e.eni.eni_id: e for e in enis}
        paid = self._pay([(a.split(":")[0], i) for a, i in wants])
        out.postponed += len(wants) - len(paid)
        paid_set = set(paid)
        for action, eni_id in wants:
            if (action.split(":")[0], eni_id) not in paid_set:
                continue
            e = by_id[eni_id]
            try:
                if action == "CreateTags":
                    self.ec2.create_tags([eni_id], {names.TAG_GC_MARK: f"{now:.0f}"})
                    out.marked.append(eni_id)
                elif action == "CreateTags:unmark":
                    self.ec2.create_tags([eni_id], {names.TAG_GC_MARK: ""})
                    out.unmarked.append(eni_id)
                elif action == "ModifyNetworkInterfaceAttribute":
                    self.ec2.set_delete_on_termination(eni_id, e.attachment_id)
                    out.fixed_delete_on_termination.append(eni_id)
                else:
                    self.ec2.delete_eni(eni_id)
                    out.deleted.append(eni_id)
            except (NotFound, InUse):
                continue
            except AwsError as err:
                log.warning("reconcile call failed", extra={"eni_id": eni_id, "action": action, "error": str(err)})

    # --- nodes -----------------------------------------------------------------

    def _nodes(
        self,
        entries: dict[str, dict[str, Any]],
        enis: list[EniFacts],
        listed: Mapping[str, NodeFacts],
        out: ReconcileOutcome,
    ) -> dict[str, NodeFacts | None]:
        """Retire the ledger's gone nodes; answers what this run read of each instance
        asked about (None: not shown), for :meth:`_orphan_queues` not to ask again.

        ``listed``: the instances tagged for the cluster (pages of 1,000); only the ledger's
        instances not among them are described by id (the few gone or untagged): the same
        facts as describing every one by id, a call per 1,000 instances instead of two per
        100. Only state and tags are read: DescribeInstances alone, not the instances' ENIs."""
        # Entries are keyed by instance id (rows written before that carry it in the outcome).
        iids = {k: str(e.get("instance_id") or k) for k, e in entries.items()}
        asked = {i for i in iids.values() if i.startswith("i-")}
        rest = asked - set(listed)
        facts = {i: listed[i] for i in asked if i in listed}
        facts.update(self.ec2.describe_instances(rest) if rest else {})
        tag = names.cluster_tag_key(self.cluster)
        alive = {i for i, f in facts.items() if f.state not in GONE_STATES and f.tags.get(tag) in ("owned", "shared")}
        gone = [n for n, i in iids.items() if i not in alive]
        now = self.clock.now()
        for n in gone:
            if iids[n] not in facts and now - _float(str(entries[n].get("updated_at", "")), 0.0) < ABSENT_GRACE_S:
                out.absent_kept.append(iids[n])  # missing once, served lately: Describe's lag, not its end
        # Drift: the ledger names nodes EC2 no longer runs; EC2 shows our ENIs on
        # instances the ledger does not know; our ENIs tagged for another instance.
        known = set(iids.values())
        attached_unknown = {e.instance_id for e in enis if e.instance_id and e.instance_id not in known}
        mislabelled = [
            e for e in enis if e.instance_id and e.tags.get(names.TAG_INSTANCE_ID) not in ("", None, e.instance_id)
        ]
        out.drift = {
            "ledger-without-instance": len(gone),
            "instance-without-ledger": len(attached_unknown),
            "eni-instance-tag-mismatch": len(mislabelled),
        }
        kept = set(out.absent_kept)
        for node in gone:
            if iids[node] not in kept:
                self._retire(node, iids[node], int(entries[node].get("last_seq", -1)), out)
        return {i: facts.get(i) for i in asked}

    def _orphan_queues(self, out: ReconcileOutcome, described: Mapping[str, NodeFacts | None] | None = None) -> None:
        """Delete result queues whose instance is not a live instance of the
        cluster, whether or not the ledger knows them (a queue without an
        entry is otherwise never cleaned up). An instance ``described`` earlier in
        this run is not described again (one DescribeInstances a pass per instance:
        at 100,000 nodes a second round was another 1,000 calls)."""
        try:
            by_instance = self.queues.listed()
        except AwsError as err:
            log.warning("result queues not listed; next run retries", extra={"error": str(err)})
            return
        done = set(out.queues_deleted) | set(out.queue_delete_failed) | set(out.absent_kept)
        candidates = {i: u for i, u in by_instance.items() if i and i not in done}
        if not candidates:
            return
        known = described or {}
        try:
            read = self.ec2.describe_instances(sorted(i for i in candidates if i.startswith("i-") and i not in known))
        except AwsError as err:
            log.warning("instances of result queues not described; next run retries", extra={"error": str(err)})
            return
        facts = {**{i: f for i, f in known.items() if f is not None}, **read}
        tag = names.cluster_tag_key(self.cluster)
        for iid, url in sorted(candidates.items()):
            f = facts.get(iid)
            if f is not None and f.state not in GONE_STATES and f.tags.get(tag) in ("owned", "shared"):
                continue
            if f is None and self._made_lately(iid, url):
                out.absent_kept.append(iid)
                continue
            try:
                if not self.queues.delete(iid, url):
                    continue
            except AwsError as problem:
                out.queue_delete_failed.append(iid)
                self.tally.add(names.M_QUEUE_DELETE_FAILED)
                log.warning("orphaned result queue not deleted", extra={"instance_id": iid, "error": str(problem)})
                continue
            out.orphan_queues_deleted.append(iid)
            out.queues_deleted.append(iid)
        if out.orphan_queues_deleted:
            self.tally.add(names.M_ORPHAN_QUEUES_DELETED, len(out.orphan_queues_deleted))
            log.info("orphaned result queues deleted", extra={"instances": out.orphan_queues_deleted})

    def _made_lately(self, instance_id: str, url: str) -> bool:
        """Whether the instance's result queue was created less than :data:`ABSENT_GRACE_S` ago
        (the allocator makes it at the instance's first report: it was alive then); unknown
        (the attribute unread) counts as lately: the next run looks again."""
        try:
            attrs = self.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["CreatedTimestamp"])
        except ClientError as err:  # keep the queue: the next run reads again
            log.warning("result queue age not read; kept", extra={"instance_id": instance_id, "error": str(err)})
            return True
        created = _float(str(attrs.get("Attributes", {}).get("CreatedTimestamp", "")), -1.0)
        return created < 0 or self.clock.now() - created < ABSENT_GRACE_S

    def _retire(self, node: str, instance_id: str, last_seq: int, out: ReconcileOutcome) -> None:
        """A terminated node's result queue, then its ledger entry.

        In that order: the entry is what tells a later run the queue exists,
        so it goes only after the queue did (a failed delete is retried next
        run, never orphaned). The forget is conditional on the entry read
        (instance and seq): a node name reused meanwhile by a new instance, or
        a node served since, keeps its entry."""
        try:
            if self.queues.delete(instance_id):
                out.queues_deleted.append(instance_id)
        except AwsError as err:
            out.queue_delete_failed.append(instance_id)
            self.tally.add(names.M_QUEUE_DELETE_FAILED)
            log.warning(
                "result queue not deleted; entry kept for the next run",
                extra={"node": node, "instance_id": instance_id, "error": str(err)},
            )
            return
        try:
            forgot = self.ledger.forget(self.cluster, node, instance_id=instance_id, last_seq=last_seq)
        except AwsError as err:
            log.warning(
                "ledger entry not forgotten; next run retries",
                extra={"node": node, "instance_id": instance_id, "error": str(err)},
            )
            return
        if forgot:
            out.forgotten_nodes.append(node)
        else:
            log.info(
                "ledger entry changed since read (name reused or served); kept",
                extra={"node": node, "instance_id": instance_id, "last_seq": last_seq},
            )


def _float(s: str, default: float) -> float:
    try:
        return float(s)
    except ValueError:
        return default
