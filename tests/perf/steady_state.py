"""The allocator at 100,000 nodes: steady state (issue 25).

    .venv/bin/python tests/perf/steady_state.py [--nodes 1000 10000 100000] [--reports 3000]
                                                [--churn 0.25] [--json OUT] [--profile OUT]

Per cluster size N (each in its own process):

* **Build** N nodes' EC2 state in the emulator, as a cluster in steady state has it: mixed
  instance types, each with its primary ENI and, where the pool needs it, one ENI warmpool
  created (its tags, DeleteOnTermination), the pool already allocated (pods plus
  ``WARM_IP_TARGET`` addresses), a ledger row and a result queue per instance, the primary
  ENIs tagged. Set-up only: made on the emulator and the memory stores directly, uncounted.
* **Sample** ``--reports`` reports of the cluster's steady stream through the real
  :class:`functions.allocator.Allocator` on the memory stores: each node's heartbeat every
  ``heartbeat_s`` (``node_agent.config.Timing``, 60 s) at a random phase, plus four reports per
  pod replaced (``--churn``: the fraction of a node's pods replaced an hour; :data:`CHURN_KINDS`):
  its stop, its start, the surplus address offered and that offer repeated once the
  allocator's release delay passed. The N nodes' stream is sampled for the first
  ``--reports`` of its reports (a window of about ``reports / rate`` virtual seconds: the same
  number of reports at every N, so per-report
  costs compare across N); reports are batched as the event-source mapping does (up to the
  stack's ``batch_size``, at most ``batching_window_s`` apart) and served one batch after
  the other in virtual time. The node's state follows EC2 after every batch.
* **Count** per report: the allocator's CPU (process time inside ``handle_batch``), calls at
  the store ports (a counting proxy on each: DynamoDB in production), SQS and EC2 calls; per
  batch: the token-bucket items touched (the account's few bucket items every invocation
  reads and writes).
* **Reconcile** once at N: CPU and the EC2 Describe calls and pages of its full pass.
* **Derived** at N: batches a second, and the invocations that must run at once to keep up
  (``warmpool_cli/cost.py``'s duration model: ``INVOKE_BASE_MS`` + ``PER_REPORT_MS`` a report)
  against the stack's ``max_concurrency``; the hottest bucket item's writes a second.

EC2 throttling is off in the emulator (the allocator still pays its own token buckets);
the seconds of a Describe bucket's refill a pass needs are in the output
(``describe_s_at_refill``). Results: docs/bench.md, "The allocator at 100,000 nodes".
"""

from __future__ import annotations

import argparse
import cProfile
import json
import math
import random
import resource
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from emulated import harness
from emulated.clock import VirtualClock
from emulated.ec2 import Ec2Config, Ec2Emulator
from emulated.iid import IdentitySigner
from emulated.imds import Imds
from emulated.memstores import MemFlips
from emulated.sqs import FastSqs
from functions.allocator import Record
from functions.reasons import NodeStatus
from infra.config import StackConfig
from node_agent.config import Timing
from tests.helpers.allocate_world import eni_reports
from warmpool import names
from warmpool.buckets import DEFAULT_SPECS
from warmpool.limits import KNOWN_TYPES
from warmpool.messages import PoolReport
from warmpool.planner import quiet
from warmpool_cli.cost import INVOKE_BASE_MS, PER_REPORT_MS

T0 = 1_700_000_000.0
CLUSTER = "steady"
WARM_IP = 5
MIX = (  # (instance type, pods): each pool is pods + WARM_IP secondaries; the bigger two need a second ENI
    ("m5.large", 3),
    ("m5.xlarge", 7),
    ("r5.xlarge", 7),
    ("c5.2xlarge", 20),
    ("m5.4xlarge", 30),
)
CHURN_KINDS = ("start", "stop", "offer", "release")
"""Reports per pod replaced: its stop and its start, the surplus address's offer and the
offer repeated once the allocator's release delay passed (the agent's retry)."""
OFFER_AGE_S = 15.0
SUBNET_NODES = 2_000
"""Nodes per /16 pod subnet (about 40,000 addresses of its 65,536)."""


class Counting:
    """Counts every public method call on ``inner`` into ``calls`` as ``"<label>.<method>"``
    and the process time spent in them into ``cpu[label]`` (when given);
    ``on_call(method, args, kwargs)``, if given, sees each call first."""

    def __init__(
        self,
        inner: Any,
        label: str,
        calls: Counter[str],
        on_call: Callable[[str, tuple[Any, ...], dict[str, Any]], None] | None = None,
        cpu: dict[str, float] | None = None,
    ) -> None:
        self._inner = inner
        self._label = label
        self._calls = calls
        self._on_call = on_call
        self._cpu = cpu

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if name.startswith("_") or not callable(attr):
            return attr

        def call(*a: Any, **kw: Any) -> Any:
            self._calls[f"{self._label}.{name}"] += 1
            if self._on_call is not None:
                self._on_call(name, a, kw)
            if self._cpu is None:
                return attr(*a, **kw)
            t = time.process_time()
            try:
                return attr(*a, **kw)
            finally:
                self._cpu[self._label] = self._cpu.get(self._label, 0.0) + time.process_time() - t

        return call


class BucketItems:
    """Which token-bucket items (one per EC2 action in the account and region) each call reads
    and writes: every one of them is a single DynamoDB item every invocation shares."""

    def __init__(self) -> None:
        self.reads: Counter[str] = Counter()
        self.writes: Counter[str] = Counter()

    def __call__(self, method: str, a: tuple[Any, ...], kw: dict[str, Any]) -> None:
        if method == "take_batch":
            requests: Iterable[Mapping[str, float]] = a[0] if a else kw["requests"]
            for action in {x for r in requests for x in r}:
                self.reads[action] += 1
                self.writes[action] += 1  # the conditional write (when anything changed)
        elif method in ("try_take", "throttled"):
            action = a[0] if a else kw["action"]
            self.reads[action] += 1
            self.writes[action] += 1
        elif method == "load":
            self.reads[a[0] if a else kw["action"]] += 1


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class Cluster:
    """N nodes in steady state on the emulator and the memory stores, and their reports."""

    def __init__(self, n: int, seed: int = 1) -> None:
        self.n = n
        self.rng = random.Random(seed)
        self.clock = VirtualClock(T0)
        self.emu = Ec2Emulator(self.clock, Ec2Config(throttling=False))
        self.sqs = FastSqs(self.clock)
        self.imds = Imds(self.emu, signer=IdentitySigner())
        vpc = self.emu.add_vpc("10.0.0.0/8")
        tag = {names.cluster_tag_key(CLUSTER): "shared"}
        self.subnets = [
            self.emu.add_subnet(az="us-east-1a", cidr=f"10.{k + 1}.0.0/16", vpc_id=vpc, tags=tag)
            for k in range(math.ceil(n / SUBNET_NODES))
        ]
        self.calls: Counter[str] = Counter()
        self.items = BucketItems()
        self.world = harness.build(
            CLUSTER,
            emu=self.emu,
            sqs=self.sqs,
            clock=self.clock,
            certificates=self.imds.signer.certificate_pem,
            flips=MemFlips(),
        )
        p = self.world.ports
        self.ledger = p.ledger
        self.stores: dict[str, Any] = {
            "ledger": p.ledger,
            "leases": p.leases,
            "buckets": p.buckets,
            "release_books": p.release_books,
            "flips": p.flips,
        }
        self.nodes: list[str] = []  # instance ids
        self.pods: dict[str, int] = {}
        self.seq: dict[str, int] = {}
        self.identity: dict[str, dict[str, Any]] = {}
        self.offers: dict[str, dict[str, Any]] = {}
        """The release offer each node repeats until EC2 no longer shows the address."""

    # --- build -----------------------------------------------------------------

    def build(self) -> None:
        """The cluster's EC2 state, ledger rows and result queues (set-up: nothing counted)."""
        client = self.emu.client()
        sqs = self.sqs.client()
        ctag = names.cluster_tag_key(CLUSTER)
        for i in range(self.n):
            itype, pods = MIX[i % len(MIX)]
            subnet = self.subnets[i // SUBNET_NODES]
            iid = self.emu.run_instance(itype, subnet_id=subnet, tags={ctag: "owned"})
            lim = KNOWN_TYPES[itype]
            want = pods + WARM_IP
            primary = self.emu.instances[iid].primary_eni
            self.emu.enis[primary].tags[names.TAG_PRIMARY_ENI_OF] = CLUSTER
            on_primary = min(want, lim.ipv4_per_eni - 1)
            client.assign_private_ip_addresses(NetworkInterfaceId=primary, SecondaryPrivateIpAddressCount=on_primary)
            if want > on_primary:
                tags = {
                    names.TAG_CLUSTER_NAME: CLUSTER,
                    names.TAG_INSTANCE_ID: iid,
                    names.TAG_CREATED_AT: "2023-11-14T22:13:20Z",
                    names.TAG_MANAGED: "true",
                }
                made = client.create_network_interface(
                    SubnetId=subnet,
                    SecondaryPrivateIpAddressCount=want - on_primary,
                    TagSpecifications=[
                        {"ResourceType": "network-interface", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}
                    ],
                )["NetworkInterface"]["NetworkInterfaceId"]
                att = client.attach_network_interface(
                    InstanceId=iid, NetworkInterfaceId=made, DeviceIndex=1, NetworkCardIndex=0
                )["AttachmentId"]
                client.modify_network_interface_attribute(
                    NetworkInterfaceId=made, Attachment={"AttachmentId": att, "DeleteOnTermination": True}
                )
            self.nodes.append(iid)
            self.pods[iid] = pods
            self.seq[iid] = int(T0 * 1000)
            self.ledger.record(CLUSTER, iid, self.seq[iid], {"instance_id": iid}, T0)
            sqs.create_queue(QueueName=names.result_queue(CLUSTER, iid))
        self.emu.settle()
        self.emu.reset_stats()

    # --- reports ---------------------------------------------------------------

    def node_name(self, iid: str) -> str:
        return "ip-" + iid[2:]

    def report(self, iid: str, now: float) -> str:
        """What the node's agent reports now: EC2's ENIs, its pods spread over them, its offer
        while EC2 still shows the address."""
        inst = self.emu.instances[iid]
        offer = self.offers.get(iid)
        if offer is not None and offer["ips"][0] not in self.emu.enis[offer["eni_id"]].secondary:
            offer = self.offers.pop(iid)  # released: the agent had its result
            offer = None
        self.seq[iid] = max(self.seq[iid] + 1, int(now * 1000))
        enis = eni_reports((self.emu.enis[e] for _, e in sorted(inst.slots.items())), self.pods[iid])
        if iid not in self.identity:
            self.identity[iid] = self.imds.identity(iid).model_dump()
        body = {
            "schema": "warmpool.report/v1",
            "cluster": CLUSTER,
            "node": self.node_name(iid),
            "instance_id": iid,
            "instance_type": inst.instance_type,
            "availability_zone": "us-east-1a",
            "seq": self.seq[iid],
            "sent_at": now,
            "mode": "secondary-ip",
            "targets": {"warm_ip": WARM_IP, "minimum_ip": 0, "warm_eni": 0},
            "enis": enis,
            "assigned_ips": self.pods[iid],
            "pending_demand": 0,
            "release": [offer] if offer is not None else [],
            "identity": self.identity[iid],
        }
        return json.dumps(body)

    def offer(self, iid: str, quarantined_at: float) -> None:
        """A pod stopped a release delay ago: its address, surplus since, is offered back
        (the node's last free address), unless the node already has an offer out."""
        if iid in self.offers or self.pods[iid] == 0:
            return
        self.pods[iid] -= 1
        assigned = self.pods[iid]
        for _, eid in sorted(self.emu.instances[iid].slots.items()):
            e = self.emu.enis[eid]
            if assigned < len(e.secondary):
                self.offers[iid] = {"eni_id": e.id, "ips": [e.secondary[-1]], "quarantined_at": quarantined_at}
            assigned = max(0, assigned - len(e.secondary))

    def stream(self, reports: int, heartbeat_s: float, churn: float) -> tuple[list[tuple[float, str, str]], float]:
        """The first ``reports`` events of the cluster's steady stream: (time, kind, instance),
        kind ``heartbeat``, ``start``, ``stop``, ``offer`` (a surplus address quarantined and
        offered; the allocator holds it ``release_delay_s``) or ``release`` (an offer made
        :data:`OFFER_AGE_S` ago, repeated: unassigned); and the window they span (virtual s)."""
        pods_avg = sum(p for _, p in MIX) / len(MIX)
        per_node_s = 1 / heartbeat_s + len(CHURN_KINDS) * churn * pods_avg / 3600
        rate = self.n * per_node_s
        window = 1.2 * reports / rate  # long enough for ``reports`` of them; cut at the last one
        events: list[tuple[float, str, str]] = []
        for iid in self.nodes:
            phase = self.rng.uniform(0, heartbeat_s)
            t = phase
            while t < window:
                events.append((t, "heartbeat", iid))
                t += heartbeat_s
        churn_rate = self.n * churn * pods_avg / 3600
        for kind in CHURN_KINDS:
            t = self.rng.expovariate(churn_rate)
            while t < window:
                events.append((t, kind, self.nodes[self.rng.randrange(self.n)]))
                t += self.rng.expovariate(churn_rate)
        events.sort()
        events = events[:reports]
        return events, events[-1][0] if events else 0.0


def batches(events: list[tuple[float, str, str]], size: int, window_s: float) -> list[list[tuple[float, str, str]]]:
    """Events grouped as the SQS event-source mapping does: up to ``size`` records, the batch
    closing ``window_s`` after its first record at the latest."""
    out: list[list[tuple[float, str, str]]] = []
    cur: list[tuple[float, str, str]] = []
    for ev in events:
        if cur and (len(cur) >= size or ev[0] > cur[0][0] + window_s):
            out.append(cur)
            cur = []
        cur.append(ev)
    if cur:
        out.append(cur)
    return out


def run_one(n: int, reports: int, churn: float, seed: int = 1, profile: str | None = None) -> dict[str, Any]:
    stack = StackConfig.model_fields
    batch_size = int(stack["batch_size"].default)
    window_s = float(stack["batching_window_s"].default)
    concurrency = int(stack["max_concurrency"].default)
    heartbeat_s = Timing().heartbeat_s
    prof = cProfile.Profile() if profile else None

    t = time.perf_counter()
    c = Cluster(n, seed)
    if prof:
        prof.enable()
    c.build()
    build_s = time.perf_counter() - t
    rss_built = _rss_mb()
    for name, inner in c.stores.items():
        c.stores[name] = Counting(inner, name, c.calls, on_call=c.items if name == "buckets" else None)
    emulated: dict[str, float] = {}  # CPU inside the emulated EC2 and SQS (not the product's)
    sqs_client = Counting(c.sqs.client(), "sqs", c.calls, cpu=emulated)
    ec2_client = Counting(c.emu.client(), "ec2", c.calls, cpu=emulated)
    alloc = c.world.allocator(ec2=ec2_client, sqs=sqs_client, **c.stores)
    reconciler = c.world.reconciler(ec2=ec2_client, sqs=sqs_client, **c.stores)
    for iid in c.nodes[: min(len(MIX), n)]:  # every type's steady report is quiet (no EC2 call owed)
        r = PoolReport.model_validate_json(c.report(iid, T0))
        assert quiet(r, KNOWN_TYPES[r.instance_type]), r.instance_type

    events, window = c.stream(reports, heartbeat_s, churn)
    groups = batches(events, batch_size, window_s)
    kinds = Counter(k for _, k, _ in events)
    cpu = 0.0
    wall = 0.0
    outcome: Counter[str] = Counter()
    deferred: Counter[str] = Counter()
    bucket_calls_per_batch: list[int] = []
    c.emu.reset_stats()
    c.calls.clear()
    for bi, group in enumerate(groups):
        records = []
        for j, (at, kind, iid) in enumerate(group):
            c.clock.set(max(c.clock.now(), T0 + at))
            if kind == "start":
                c.pods[iid] += 1
            elif kind == "stop":
                c.pods[iid] = max(0, c.pods[iid] - 1)
            elif kind in ("offer", "release"):
                c.offer(iid, T0 + at - (OFFER_AGE_S if kind == "release" else 0.0))
            records.append(Record(f"m-{bi}-{j}", c.report(iid, T0 + at), sender_id=""))
        closed = group[-1][0] if len(group) >= batch_size else group[0][0] + window_s
        c.clock.set(max(c.clock.now(), T0 + closed))
        before = sum(v for k, v in c.calls.items() if k.startswith("buckets."))
        t_cpu, t_wall = time.process_time(), time.perf_counter()
        out = alloc.handle_batch(records)
        cpu += time.process_time() - t_cpu
        wall += time.perf_counter() - t_wall
        bucket_calls_per_batch.append(sum(v for k, v in c.calls.items() if k.startswith("buckets.")) - before)
        for k in ("invalid", "rejected", "stale", "superseded", "served", "deferred", "failed", "noop"):
            outcome[k] += getattr(out, k)
        for res in out.nodes.values():
            if res.status == NodeStatus.DEFERRED:
                deferred[res.reason or "?"] += 1
        c.emu.settle()
    alloc_calls = Counter(c.calls)
    alloc_emulated = sum(emulated.values())
    emulated.clear()
    ec2_stats = {a: v["calls"] for a, v in c.emu.stats()["ec2"].items() if v["calls"]}
    items_reads, items_writes = Counter(c.items.reads), Counter(c.items.writes)
    dynamo = sum(getattr(c.stores[s]._inner, "calls", 0) for s in ("ledger", "leases", "buckets")) - n  # build rows
    dynamo += sum(v for k, v in alloc_calls.items() if k.split(".")[0] in ("release_books", "flips"))

    # --- the reconciler's one pass ------------------------------------------------
    c.emu.reset_stats()
    c.calls.clear()
    t_cpu, t_wall = time.process_time(), time.perf_counter()
    rec = reconciler.run()
    rec_cpu = time.process_time() - t_cpu
    rec_wall = time.perf_counter() - t_wall
    rec_ec2 = {a: v["calls"] for a, v in c.emu.stats()["ec2"].items() if v["calls"]}
    rec_calls = Counter(c.calls)
    rec_emulated = sum(emulated.values())
    if prof:
        prof.disable()
        prof.dump_stats(profile)  # type: ignore[arg-type]

    nb = len(groups)
    store_calls = sum(v for k, v in alloc_calls.items() if k.split(".")[0] in c.stores)
    sqs_sends = sum(v for k, v in alloc_calls.items() if k in ("sqs.send_message", "sqs.send_message_batch"))
    ec2_calls = sum(ec2_stats.values())
    hottest = max(items_writes.values(), default=0)
    pods_avg = sum(p for _, p in MIX) / len(MIX)
    reports_per_node_h = 3600 / heartbeat_s + len(CHURN_KINDS) * churn * pods_avg
    rate = n * reports_per_node_h / 3600
    per_batch_cpu = cpu / nb
    describe_pass = sum(v for a, v in rec_ec2.items() if a.startswith("Describe"))
    describe_spec = DEFAULT_SPECS["DescribeInstances"]
    return {
        "nodes": n,
        "enis": len(c.emu.enis),
        "build_s": round(build_s, 1),
        "rss_mb_built": round(rss_built),
        "sample": {
            "reports": len(events),
            "by_kind": dict(kinds),
            "window_virtual_s": round(window, 2),
            "batches": nb,
            "reports_per_batch": round(len(events) / nb, 1),
            "outcome": dict(outcome),
            "deferred_by_reason": dict(deferred),
        },
        "stack": {"batch_size": batch_size, "batching_window_s": window_s, "max_concurrency": concurrency},
        "heartbeat_s": heartbeat_s,
        "cluster_reports_per_s": round(rate, 1),
        "allocator_cpu_ms_per_report": round(cpu / len(events) * 1000, 3),
        "allocator_cpu_ms_per_report_outside_emulators": round((cpu - alloc_emulated) / len(events) * 1000, 3),
        "allocator_wall_ms_per_report": round(wall / len(events) * 1000, 3),
        "allocator_cpu_ms_per_batch": round(per_batch_cpu * 1000, 2),
        "reports_per_cpu_s": round(len(events) / cpu, 1),
        "batches_per_s_at_n": round(rate / (len(events) / nb), 2),
        "concurrency_needed_at_n": round(
            rate / (len(events) / nb) * (INVOKE_BASE_MS + PER_REPORT_MS * len(events) / nb) / 1000, 1
        ),
        "cpu_s_per_s_at_n": round(rate * cpu / len(events), 3),
        "store_calls_per_report": round(store_calls / len(events), 3),
        "store_calls": {k: v for k, v in sorted(alloc_calls.items()) if k.split(".")[0] in c.stores},
        "dynamodb_requests_per_report": round(dynamo / len(events), 3),
        "sqs_sends_per_report": round(sqs_sends / len(events), 3),
        "sqs_calls": {k: v for k, v in sorted(alloc_calls.items()) if k.startswith("sqs.")},
        "ec2_calls_per_report": round(ec2_calls / len(events), 4),
        "ec2_calls": ec2_stats,
        "bucket_port_calls_per_batch": round(sum(bucket_calls_per_batch) / nb, 2),
        "bucket_item_reads": dict(items_reads),
        "bucket_item_writes": dict(items_writes),
        "hottest_bucket_item_writes_per_batch": round(hottest / nb, 2),
        "hottest_bucket_item_writes_per_s_at_n": round(hottest / nb * rate / (len(events) / nb), 1),
        "sqs_messages_per_node_per_hour": {
            "reports_sent": round(reports_per_node_h, 1),
            "results_sent": round(reports_per_node_h * sqs_sends / len(events), 2),
        },
        "reconcile": {
            "cpu_s": round(rec_cpu, 2),
            "cpu_s_outside_emulators": round(rec_cpu - rec_emulated, 2),
            "wall_s": round(rec_wall, 2),
            "ec2_calls": rec_ec2,
            "describe_calls": describe_pass,
            "describe_calls_per_1000_nodes": round(describe_pass / n * 1000, 1),
            "describe_s_at_refill": round(
                max(0, describe_pass - describe_spec.capacity) / describe_spec.refill_per_s, 1
            ),
            "store_calls": {k: v for k, v in sorted(rec_calls.items()) if k.split(".")[0] in c.stores},
            "sqs_calls": {k: v for k, v in sorted(rec_calls.items()) if k.startswith("sqs.")},
            "forgotten": len(rec.forgotten_nodes),
            "queues_deleted": len(rec.queues_deleted),
        },
        "rss_mb_peak": round(_rss_mb()),
    }


TABLE = (
    ("nodes", lambda r: f"{r['nodes']:,}"),
    ("reports (batches)", lambda r: f"{r['sample']['reports']:,} ({r['sample']['batches']})"),
    ("window s", lambda r: f"{r['sample']['window_virtual_s']}"),
    (
        "CPU ms/report (outside emulators)",
        lambda r: f"{r['allocator_cpu_ms_per_report']} ({r['allocator_cpu_ms_per_report_outside_emulators']})",
    ),
    ("reports/CPU-s", lambda r: f"{r['reports_per_cpu_s']:,}"),
    ("store calls/report", lambda r: f"{r['store_calls_per_report']}"),
    ("DynamoDB req/report", lambda r: f"{r['dynamodb_requests_per_report']}"),
    ("SQS sends/report", lambda r: f"{r['sqs_sends_per_report']}"),
    ("EC2 calls/report", lambda r: f"{r['ec2_calls_per_report']}"),
    ("hottest bucket item writes/batch", lambda r: f"{r['hottest_bucket_item_writes_per_batch']}"),
    ("batches/s at N", lambda r: f"{r['batches_per_s_at_n']}"),
    ("invocations at once needed", lambda r: f"{r['concurrency_needed_at_n']}"),
    ("reconcile Describe calls", lambda r: f"{r['reconcile']['describe_calls']:,}"),
    (
        "reconcile CPU s (outside emulators)",
        lambda r: f"{r['reconcile']['cpu_s']} ({r['reconcile']['cpu_s_outside_emulators']})",
    ),
    ("build s", lambda r: f"{r['build_s']}"),
    ("peak RSS MB", lambda r: f"{r['rss_mb_peak']:,}"),
)


def table(rows: list[dict[str, Any]]) -> str:
    head = "| " + " | ".join(h for h, _ in TABLE) + " |"
    sep = "|" + "---|" * len(TABLE)
    return "\n".join([head, sep, *("| " + " | ".join(f(r) for _, f in TABLE) + " |" for r in rows)])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, nargs="+", default=[1_000, 10_000, 100_000])
    ap.add_argument("--reports", type=int, default=3_000, help="reports sampled at every size")
    ap.add_argument("--churn", type=float, default=0.25, help="fraction of a node's pods replaced an hour")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", metavar="OUT", help="write every size's figures here")
    ap.add_argument("--profile", metavar="OUT", help="cProfile of build, sample and pass (one size only)")
    ap.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one or (args.profile and len(args.nodes) == 1):
        print(json.dumps(run_one(args.nodes[0], args.reports, args.churn, args.seed, args.profile)))
        return
    rows = []
    for n in args.nodes:
        cmd = [sys.executable, __file__, "--one", "--nodes", str(n), "--reports", str(args.reports)]
        cmd += ["--churn", str(args.churn), "--seed", str(args.seed)]
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        rows.append(json.loads(out.strip().splitlines()[-1]))
        print(f"{n:,} nodes done", file=sys.stderr)
    print(table(rows))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
