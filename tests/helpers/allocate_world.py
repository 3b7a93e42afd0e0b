"""A small world for the allocator's integration tests: the emulated EC2, the
fast SQS, in-memory (or moto DynamoDB) stores, a virtual clock, and agents
that report what EC2 shows them. Used by the allocator's integration, reliability
and perf tests."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import Any

import boto3

from emulated import harness
from emulated.clock import VirtualClock
from emulated.ec2 import Ec2Config, Ec2Emulator
from emulated.iid import IdentitySigner, document_for
from emulated.imds import Imds
from emulated.memstores import MemFlips
from emulated.sqs import FastSqs
from functions.allocator import Allocator, BatchOutcome, Record
from functions.reconciler import Reconciler
from functions.stores import DynamoBuckets, DynamoFlips, DynamoLeases, DynamoLedger, DynamoReleaseBooks, create_tables
from functions.telemetry import Tally
from warmpool import names
from warmpool.buckets import MUTATING_ENI_ACTIONS
from warmpool.messages import AllocationResult, PoolReport, parse_result

T0 = 1_700_000_000.0
_SIGNER = IdentitySigner()
"""One test key for every world (making one costs a few ms)."""
MUTATING = (*MUTATING_ENI_ACTIONS, "CreateTags")


class AllocatorWorld:
    def __init__(
        self,
        cluster: str = "demo",
        *,
        subnet_cidrs: Sequence[str] = ("10.0.0.0/18",),
        ec2_config: Ec2Config | None = None,
        dynamo: Any = None,
        boto: bool = False,
        mapper: Any = None,
        shared_buckets: Any = None,
        emu: Ec2Emulator | None = None,
        sqs: FastSqs | None = None,
        clock: VirtualClock | None = None,
        **settings: Any,
    ) -> None:
        self.cluster = cluster
        self.clock = clock or VirtualClock(T0)
        self.emu = emu or Ec2Emulator(self.clock, ec2_config or Ec2Config())
        if emu is None:
            self.vpc = self.emu.add_vpc("10.0.0.0/16")
            # the cluster's pod subnets, tagged for it as the local stack's are (the node's own
            # subnet alone is used when nothing in the zone is tagged: warmpool/subnets.py)
            self.subnets = [
                self.emu.add_subnet(
                    az="us-east-1a", cidr=c, vpc_id=self.vpc, tags={names.cluster_tag_key(cluster): "shared"}
                )
                for c in subnet_cidrs
            ]
        else:
            self.subnets = sorted(self.emu.subnets)
        self.sqs = sqs or FastSqs(self.clock)
        self.imds = Imds(self.emu, signer=_SIGNER)
        """Signs each instance's identity document, as AWS does; the allocator trusts its certificate."""
        stores: dict[str, Any] = {"flips": MemFlips()}
        if dynamo is not None:
            table = settings.get("ledger_table", names.ledger_table(cluster))
            buckets_table = settings.get("buckets_table", names.BUCKETS_TABLE)
            existing = set(dynamo.list_tables()["TableNames"])
            create_tables(dynamo, table, buckets_table if buckets_table not in existing else f"unused-{cluster}")
            stores = {
                "ledger": DynamoLedger(dynamo, table),
                "leases": DynamoLeases(dynamo, table),
                "flips": DynamoFlips(dynamo, table),
                "release_books": DynamoReleaseBooks(dynamo, table),
            }
        self.harness = harness.build(
            cluster,
            emu=self.emu,
            sqs=self.sqs,
            clock=self.clock,
            certificates=_SIGNER.certificate_pem,
            ec2=self.emu.boto3_client(region_name="us-east-1") if boto else self.emu.client(),
            shared_buckets=shared_buckets,
            **stores,
            **settings,
        )
        self.settings = self.harness.settings
        self.reports_url = self.harness.reports_url
        self.dlq_url = self.harness.dlq_url
        if dynamo is not None:
            s = self.settings
            self.harness.ports = replace(
                self.harness.ports,
                buckets=DynamoBuckets(dynamo, s.buckets_table, s.bucket_spec, s.account, s.region),
            )
        p = self.harness.ports
        self.buckets: Any = p.buckets
        self.ledger: Any = p.ledger
        self.leases: Any = p.leases
        self.flips: Any = p.flips
        self.books: Any = p.release_books
        self.ec2_client = p.ec2
        self.tally = Tally()
        self.alloc = self.allocator(mapper=mapper)
        self.nodes: dict[str, str] = {}  # node -> instance id
        self.pods: dict[str, int] = {}
        self.seq: dict[str, int] = {}

    def _ports(self, **ports: Any) -> dict[str, Any]:
        """This world's ports as its attributes now hold them (a test may swap one), any replaced."""
        mine = {"ec2": self.ec2_client, "buckets": self.buckets, "ledger": self.ledger, "leases": self.leases}
        return {**mine, "flips": self.flips, "release_books": self.books, **ports}

    def allocator(self, mapper: Any = None, **ports: Any) -> Allocator:
        """An allocator on this world's ports (any replaced: ``ec2=``...), counting into ``tally``."""
        return self.harness.allocator(mapper=mapper, tally=self.tally, **self._ports(**ports))

    def reconciler(self, **ports: Any) -> Reconciler:
        """The reconciler on this world's ports (any replaced: ``sqs=``, ``ledger=``...)."""
        return self.harness.reconciler(tally=self.tally, **self._ports(**ports))

    # --- nodes ---------------------------------------------------------------

    def add_node(
        self, name: str, instance_type: str = "m5.4xlarge", *, cluster_tag: str | None = "owned", queue: bool = True
    ) -> str:
        tags = {names.cluster_tag_key(self.cluster): cluster_tag} if cluster_tag else {}
        iid = self.emu.run_instance(instance_type, subnet_id=self.subnets[0], tags=tags)
        self.nodes[name] = iid
        self.pods[name] = 0
        self.seq[name] = 0
        if queue:
            self.sqs.client().create_queue(QueueName=names.result_queue(self.cluster, iid))
        return iid

    def signed(self, instance_id: str, instance_type: str, az: str = "us-east-1a") -> dict[str, str]:
        """A genuinely signed identity for any instance id (also one EC2 does not know)."""
        doc = document_for(
            {
                "instanceId": instance_id,
                "accountId": self.emu.owner,
                "region": self.emu.config.region,
                "availabilityZone": az,
                "instanceType": instance_type,
            }
        )
        return self.imds.signer.identity(doc).model_dump()

    def tag_primary(self, node: str) -> None:
        """Tag the node's primary ENI for the cluster (``primary_eni_tagging=launch-template``)."""
        primary = self.enis(node)[0].id
        self.emu.client().create_tags(
            Resources=[primary], Tags=[{"Key": names.TAG_PRIMARY_ENI_OF, "Value": self.cluster}]
        )

    def enis(self, node: str) -> list[Any]:
        iid = self.nodes[node]
        return sorted(
            (e for e in self.emu.enis.values() if e.attachment and e.attachment.instance_id == iid),
            key=lambda e: e.attachment.device_index,
        )

    def addresses(self, node: str) -> int:
        return sum(len(e.secondary) + 16 * len(e.prefixes) for e in self.enis(node))

    def report(
        self,
        node: str,
        *,
        seq: int | None = None,
        pending: int = 0,
        warm_ip: int = 0,
        minimum_ip: int = 0,
        warm_eni: int = 1,
        mode: str = "secondary-ip",
        release: Iterable[dict[str, Any]] = (),
        assigned: int | None = None,
        extra: dict[str, Any] | None = None,
    ) -> PoolReport:
        """What the node's agent would report now (EC2's ENIs; pods spread over them)."""
        if seq is None:
            self.seq[node] += 1
            seq = self.seq[node]
        enis = eni_reports(self.enis(node), self.pods[node] if assigned is None else assigned)
        body: dict[str, Any] = {
            "schema": "warmpool.report/v1",
            "cluster": self.cluster,
            "node": node,
            "instance_id": self.nodes[node],
            "instance_type": self.emu.instances[self.nodes[node]].instance_type,
            "availability_zone": "us-east-1a",
            "seq": seq,
            "sent_at": self.clock.now(),
            "mode": mode,
            "targets": {"warm_ip": warm_ip, "minimum_ip": minimum_ip, "warm_eni": warm_eni},
            "enis": enis,
            "assigned_ips": self.pods[node] if assigned is None else assigned,
            # Offers are dated at the report unless the test dates them (or
            # passes ``quarantined_at: None``, as agents before the field did).
            "pending_demand": pending,
            "release": [{"quarantined_at": self.clock.now(), **o} for o in release],
            "identity": self.imds.identity(self.nodes[node]).model_dump(),
        }
        body.update(extra or {})
        return PoolReport.model_validate(body)

    # --- delivery ------------------------------------------------------------

    @staticmethod
    def records(reports: Iterable[PoolReport | str], sender: str = "") -> list[Record]:
        out = []
        for i, r in enumerate(reports):
            body = r if isinstance(r, str) else r.to_json()
            out.append(Record(message_id=f"m-{i}", body=body, sender_id=sender))
        return out

    def deliver(self, reports: Iterable[PoolReport | str], alloc: Allocator | None = None) -> BatchOutcome:
        return (alloc or self.alloc).handle_batch(self.records(reports))

    def results(self, node: str) -> list[AllocationResult]:
        c = self.sqs.client()
        url = c.get_queue_url(QueueName=names.result_queue(self.cluster, self.nodes[node]))["QueueUrl"]
        out: list[AllocationResult] = []
        while True:
            msgs = c.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", [])
            if not msgs:
                return out
            for m in msgs:
                out.append(parse_result(m["Body"]))
                c.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])

    def queued(self, url: str, *, wait_s: float = 0.0) -> list[dict[str, Any]]:
        """Receive (and delete) everything visible in a queue after ``wait_s``."""
        if wait_s:
            self.clock.advance(wait_s)
        c = self.sqs.client()
        out: list[dict[str, Any]] = []
        while True:
            msgs = c.receive_message(QueueUrl=url, MaxNumberOfMessages=10, MessageAttributeNames=["All"]).get(
                "Messages", []
            )
            if not msgs:
                return out
            for m in msgs:
                out.append(m)
                c.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])

    def drain(self, max_rounds: int = 200, alloc: Allocator | None = None) -> list[BatchOutcome]:
        """Serve the reports queue (deferred reports) until it is empty, in virtual time."""
        c = self.sqs.client()
        outs = []
        for _ in range(max_rounds):
            msgs = []
            while True:
                got = c.receive_message(QueueUrl=self.reports_url, MaxNumberOfMessages=10).get("Messages", [])
                if not got:
                    break
                msgs.extend(got)
            if msgs:
                recs = [Record(m["MessageId"], m["Body"]) for m in msgs]
                outs.append((alloc or self.alloc).handle_batch(recs))
                for m in msgs:
                    c.delete_message(QueueUrl=self.reports_url, ReceiptHandle=m["ReceiptHandle"])
                continue
            at = self.sqs.next_visible_at(self.reports_url)
            if at is None:
                return outs
            self.clock.set(max(at, self.clock.now()))
        raise AssertionError("reports queue never drained")

    # --- EC2 figures ---------------------------------------------------------

    def ec2_stats(self) -> dict[str, dict[str, int]]:
        return self.emu.stats()["ec2"]

    def mutating_calls(self) -> int:
        return sum(v["calls"] for a, v in self.ec2_stats().items() if a in MUTATING)

    def throttled(self) -> int:
        return sum(v["throttled"] for v in self.ec2_stats().values())

    def all_addresses(self) -> list[str]:
        """Every secondary address and prefix attached anywhere (duplicates would show twice)."""
        out: list[str] = []
        for e in self.emu.enis.values():
            out.extend(e.secondary)
            out.extend(e.prefixes)
        return out

    def detached_enis(self) -> list[str]:
        return [e.id for e in self.emu.enis.values() if e.attachment is None]


def eni_reports(enis: Iterable[Any], pods: int) -> list[dict[str, Any]]:
    """The report's ``enis`` for an instance's attached emulated ENIs (in device order), its
    ``pods`` spread over them in that order."""
    out = []
    left = pods
    for e in enis:
        here = min(len(e.secondary) + 16 * len(e.prefixes), left)
        left -= here
        out.append(
            {
                "eni_id": e.id,
                "device_index": e.attachment.device_index,
                "network_card": e.attachment.card,
                "subnet_id": e.subnet_id,
                "primary_ip": e.primary_ip,
                "ips": list(e.secondary),
                "prefixes": list(e.prefixes),
                "assigned": here,
            }
        )
    return out


def moto_dynamo() -> Any:
    return boto3.client("dynamodb", region_name="us-east-1")


def dumps(obj: Any) -> str:
    return json.dumps(obj)
