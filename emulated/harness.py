"""One in-memory allocator world: the one wiring of the allocate and reconcile
logic outside production.

:func:`build` makes a cluster's reports queue and DLQ (on the fast SQS), its
:class:`functions.settings.Settings` and its :class:`warmpool.ports.Ports`
(the emulated EC2, that SQS, the memory stores, a clock); the world then makes
the :class:`functions.allocator.Allocator` and the
:class:`functions.reconciler.Reconciler` on those ports, any of them replaced
(a client that injects faults, a clock of its own). The bench's ``warmpool``
strategy, the deterministic simulation and the tests' ``World`` all build here,
as ``functions.allocate.build`` does from ``functions.aws.ports`` in production.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any

from emulated.ec2 import Ec2Emulator
from emulated.memstores import MemBuckets, MemLeases, MemLedger
from emulated.sqs import FastSqs
from functions.allocator import Allocator
from functions.mapping import Mapper, serial_map
from functions.reconciler import Reconciler
from functions.release_book import LocalReleaseBooks
from functions.settings import Settings
from functions.telemetry import Tally
from warmpool import names
from warmpool.clock import Clock
from warmpool.ports import BucketStore, Ec2Api, FlipStore, LeaseStore, Ledger, Ports, ReleaseBookStore, SqsApi


def reports_queues(
    client: Any, cluster: str, *, visibility_s: int | None = None, max_receive: int | None = None
) -> tuple[str, str]:
    """The cluster's reports queue and its DLQ (URLs); with ``max_receive`` a
    record received that often goes to the DLQ, as the stack's redrive policy says."""
    dlq = client.create_queue(QueueName=names.reports_dlq(cluster))["QueueUrl"]
    attrs: dict[str, str] = {}
    if visibility_s is not None:
        attrs["VisibilityTimeout"] = str(visibility_s)
    if max_receive is not None:
        arn = client.get_queue_attributes(QueueUrl=dlq, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        attrs["RedrivePolicy"] = json.dumps({"deadLetterTargetArn": arn, "maxReceiveCount": max_receive})
    reports = client.create_queue(QueueName=names.reports_queue(cluster), Attributes=attrs)["QueueUrl"]
    return str(reports), str(dlq)


@dataclass
class AllocatorWorld:
    """One cluster's allocator side: its queues, settings and ports."""

    cluster: str
    emu: Ec2Emulator
    sqs: FastSqs
    reports_url: str
    dlq_url: str
    settings: Settings
    ports: Ports
    """What the allocator and the reconciler share unless told otherwise."""

    def allocator(
        self, *, mapper: Mapper[Any, Any] | None = None, tally: Tally | None = None, **ports: Any
    ) -> Allocator:
        """The allocator on this world's ports, any of them replaced (``ec2=``, ``sqs=``, ``clock=``...)."""
        return Allocator(replace(self.ports, **ports), self.settings, mapper=mapper or serial_map, tally=tally)

    def reconciler(self, *, tally: Tally | None = None, **ports: Any) -> Reconciler:
        """The reconciler on this world's ports, any of them replaced."""
        return Reconciler(replace(self.ports, **ports), self.settings, tally=tally)


def build(
    cluster: str,
    *,
    emu: Ec2Emulator,
    sqs: FastSqs,
    clock: Clock,
    certificates: str,
    ec2: Ec2Api | None = None,
    sqs_client: SqsApi | None = None,
    buckets: BucketStore | None = None,
    shared_buckets: Any = None,
    ledger: Ledger | None = None,
    leases: LeaseStore | None = None,
    flips: FlipStore | None = None,
    release_books: ReleaseBookStore | None = None,
    visibility_s: int | None = None,
    max_receive: int | None = None,
    **settings: Any,
) -> AllocatorWorld:
    """A cluster's allocator world on ``emu`` and ``sqs``: its queues made, its
    settings (``settings`` adds to or overrides the defaults: the cluster's
    queues and prefix, the emulator's account and region, the signer's
    ``certificates``), its ports (``emu.client()``, a new SQS client, memory
    stores, ``clock``; buckets shared with other clusters of the account through
    ``shared_buckets``; no shared flip store unless ``flips``; one release book store for every allocator
    built here, as production's DynamoDB table is one, unless ``release_books``)."""
    client = sqs.client()
    reports_url, dlq_url = reports_queues(client, cluster, visibility_s=visibility_s, max_receive=max_receive)
    s = Settings(
        **{
            "cluster": cluster,
            "reports_queue_url": reports_url,
            "dlq_url": dlq_url,
            "result_queue_prefix": names.result_queue_prefix(cluster),
            "ledger_table": names.ledger_table(cluster),
            "account": emu.owner,
            "region": emu.config.region,
            "identity_certificates": certificates,
            **settings,
        }
    )
    ports = Ports(
        ec2=ec2 if ec2 is not None else emu.client(),
        sqs=sqs_client if sqs_client is not None else sqs.client(),
        buckets=buckets
        if buckets is not None
        else MemBuckets(s.bucket_spec, s.account, s.region, shared=shared_buckets),
        ledger=ledger if ledger is not None else MemLedger(),
        leases=leases if leases is not None else MemLeases(),
        clock=clock,
        flips=flips,
        release_books=release_books if release_books is not None else LocalReleaseBooks(),
    )
    return AllocatorWorld(cluster, emu, sqs, reports_url, dlq_url, s, ports)
