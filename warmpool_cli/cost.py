"""``warmpool cost --nodes N``: the monthly AWS bill of warmpool's serverless
part (docs/bench.md, "What warmpool costs to run").

A model, not a measurement of a bill: request counts follow the wiring
(docs/design.md) and the figures the bench and the allocator's perf script
measure (:data:`MEASURED`); prices are the public us-east-1 list prices of
:data:`PRICES` (their date in :data:`PRICES_AS_OF`). Free tiers are left out
(an account's other workloads use them). Only the core is imported.

Per node, every month (730 h):

* reports: one per ``--report-every`` seconds (the agent's heartbeat) plus one
  per pod event (a pod started or stopped changes the pool's deficit), each a
  ``SendMessage``; the event-source mapping reads them ten per
  ``ReceiveMessage`` and deletes them ten per ``DeleteMessageBatch``, and its
  pollers' empty long polls cost ``ESM_POLLERS`` × 3 requests a minute;
* results: one ``SendMessage`` to the node's queue per pod-event report (a quiet
  report, the heartbeat of a pool that meets its targets, is recorded without a reply:
  ``Allocator._record_quiet``), read by the agent's 20 s long polls (3 ``ReceiveMessage``
  a minute whether or not a result waits) and one ``DeleteMessage`` each;
* allocate invocations: reports arrive at λ per second; with a 1 s batching
  window each of the mapping's pollers invokes at most once a second, so
  invocations are ``min(λ, max(λ / batch, pollers))`` a second; each lasts
  ``INVOKE_BASE_MS`` plus ``PER_REPORT_MS`` a report, at the allocate
  function's memory;
* reconcile: once a minute, ``RECONCILE_BASE_MS`` plus a paged
  ``DescribeNetworkInterfaces`` over every ENI and a paged ``DescribeInstances`` of the
  cluster's instances by tag (1,000 a page each);
* DynamoDB: the measured calls per report, each at least one request unit,
  transactional writes two per item; the bucket table once per invocation;
* CloudWatch: the custom metrics (names × dimensions, per cluster), the alarms
  (one per metric they read), and the invocations' log lines (EMF blobs).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from warmpool import names

HOURS_PER_MONTH = 730.0
PRICES_AS_OF = "2026-12-01 (AWS list prices, us-east-1; DynamoDB on-demand as cut on 2024-11-01)"
PRICES: dict[str, float] = {
    "lambda_request": 0.20 / 1e6,
    "lambda_gb_s": 0.0000166667,  # x86, first pricing tier
    "sqs_request": 0.40 / 1e6,  # standard queue, per 64 KB chunk
    "dynamodb_wru": 0.625 / 1e6,  # on-demand write request unit
    "dynamodb_rru": 0.125 / 1e6,  # on-demand read request unit
    "cloudwatch_metric_month": 0.30,  # first 10,000 custom metrics
    "cloudwatch_alarm_metric_month": 0.10,  # standard resolution, per metric an alarm reads
    "cloudwatch_logs_gb": 0.50,  # ingestion
}

MEASURED: dict[str, float] = {
    # tests/perf/allocate_throughput.py (500 reports from 200 nodes, 627 records handled, DynamoDB
    # stores on moto): put_item 400, update_item 200, delete_item 200 -> 1.28 single-item writes a
    # record; batch_get_item 374 (0.6 a record, several keys each); transact_write_items 66 (the
    # bucket items, 2 an invocation).
    "dynamodb_writes_per_report": 1.28,
    # The same run on 2026-12-02, with the release book's given entries (every Assign and Create
    # the allocator makes records what it gave, docs/allocator.md): put_item 767 (+367) for 7,127
    # addresses given out, 0.0515 writes an address; none settled within the run (no agent
    # answers there), and each settles later with one more write: 0.103 an address in all.
    "dynamodb_given_writes_per_address": 0.103,
    "dynamodb_bucket_transactions_per_invocation": 2.0,
    # tests/perf/allocate_throughput.py, in-memory stores: 0.20 s per 1,000 reports of allocator CPU.
    "allocator_cpu_ms_per_report": 0.20,
}
"""Figures the repository's perf scripts print (docs/bench.md quotes the runs)."""

READS_PER_REPORT = 3.0
BUCKET_ITEMS = 3
"""Bucket items a batch reads and writes (the actions its plans call; assumed)."""
ESM_POLLERS = 5
"""The SQS event-source mapping's minimum pollers (AWS Lambda, SQS scaling behaviour)."""
AGENT_POLLS_PER_MIN = 3.0
"""The agent long-polls its result queue with ``WaitTimeSeconds=20`` (node_agent/agent.py ``POLL_WAIT_S``)."""
ALLOCATE_MEMORY_MB = 512  # infra/config.py allocate_memory_mb default
RECONCILE_MEMORY_MB = 256  # infra/stack.py
BATCH_SIZE = 100  # infra/config.py batch_size default
INVOKE_BASE_MS = 150.0
"""Per invocation: the bucket table read and conditional write, the ledger's batch read,
the deletes — a few DynamoDB and SQS round trips (assumed 10–30 ms each)."""
PER_REPORT_MS = 3.0
"""Per report: the ledger write and the result's SendMessage on the allocator's 8 worker
threads (about 20 ms each, 8 in parallel), plus the measured allocator CPU."""
RECONCILE_BASE_MS = 500.0
DESCRIBE_PAGE_MS = 300.0
ENIS_PER_NODE = 2.0
LOG_BYTES_PER_INVOCATION = 3000
"""START/END/REPORT lines (about 300 bytes) and the EMF metric blob (about 2.5 KB)."""
DIMENSIONED_METRICS = (names.M_EC2_CALLS, names.M_EC2_THROTTLES, names.M_EC2_ERRORS)
"""Metrics with one series per EC2 action (TokensAvailable is not emitted, so not billed)."""
EC2_ACTIONS_IN_METRICS = 12
"""EC2 actions the allocator and reconciler call (each an ``Action`` dimension value)."""
ALARMS_SINGLE = 4
"""DlqNotEmpty, OldReports, AllocateErrors, ReconcileErrors (infra/observability.py)."""
ALARM_EC2_THROTTLES_METRICS = 10
"""The Ec2Throttles alarm sums the throttles of each EC2 action it names (infra/observability.py ``EC2_ACTIONS``)."""


@dataclass(frozen=True)
class Workload:
    nodes: int
    pods_per_node: float = 30.0
    churn_per_hour: float = 0.25
    """Fraction of a node's pods replaced every hour (each replacement: a stop and a start)."""
    report_every_s: float = 60.0


def _metric_count() -> int:
    every = [v for k, v in vars(names).items() if k.startswith("M_") and isinstance(v, str)]
    plain = len(set(every) - set(DIMENSIONED_METRICS))
    return plain + len(DIMENSIONED_METRICS) * EC2_ACTIONS_IN_METRICS


def estimate(w: Workload) -> dict[str, Any]:
    """``{nodes, monthly_usd, by_service: {service: usd}, assumptions: {...}, usage: {...}}``."""
    seconds = HOURS_PER_MONTH * 3600
    events_per_node_h = 2 * w.churn_per_hour * w.pods_per_node
    reports_per_node_h = 3600 / w.report_every_s + events_per_node_h
    reports = w.nodes * reports_per_node_h * HOURS_PER_MONTH
    rate = reports / seconds
    invocations_per_s = min(rate, max(rate / BATCH_SIZE, float(ESM_POLLERS)))
    invocations = invocations_per_s * seconds
    reports_per_invocation = reports / invocations if invocations else 0.0
    allocate_ms = INVOKE_BASE_MS + reports_per_invocation * (PER_REPORT_MS + MEASURED["allocator_cpu_ms_per_report"])
    reconciles = HOURS_PER_MONTH * 60
    pages = max(1, math.ceil(w.nodes * ENIS_PER_NODE / 1000)) + max(1, math.ceil(w.nodes / 1000))
    reconcile_ms = RECONCILE_BASE_MS + pages * DESCRIBE_PAGE_MS
    gb_s = invocations * allocate_ms / 1000 * ALLOCATE_MEMORY_MB / 1024 + reconciles * reconcile_ms / 1000 * (
        RECONCILE_MEMORY_MB / 1024
    )
    lambda_usd = (invocations + reconciles) * PRICES["lambda_request"] + gb_s * PRICES["lambda_gb_s"]

    minutes = HOURS_PER_MONTH * 60
    # tests/perf/steady_state.py at the same churn measured 10-12 results a node an hour against
    # the 15 pod-event reports this counts (docs/bench.md, "The allocator at 100,000 nodes").
    results = w.nodes * events_per_node_h * HOURS_PER_MONTH
    sqs_requests = (
        reports  # SendMessage of each report
        + 2 * reports / 10  # the mapping's ReceiveMessage and DeleteMessageBatch, ten at a time
        + ESM_POLLERS * 3 * minutes  # the mapping's empty long polls (20 s)
        + results  # a result per pod-event report; quiet heartbeats get none
        + w.nodes * AGENT_POLLS_PER_MIN * minutes  # the agents' long polls
        + results  # DeleteMessage of each result
    )
    sqs_usd = sqs_requests * PRICES["sqs_request"]

    # Writes: the measured single-item writes a record, the bucket transactions (BUCKET_ITEMS
    # items each, two write units an item), and the release book's given entries (written when an
    # address is given out, again when it settles: each pod start uses one address). Reads:
    # READS_PER_REPORT items a record (ledger row, flip history, release book) by BatchGetItem,
    # eventually consistent or not: one unit each.
    starts = w.nodes * w.churn_per_hour * w.pods_per_node * HOURS_PER_MONTH
    given_writes = starts * MEASURED["dynamodb_given_writes_per_address"]
    writes = (
        reports * MEASURED["dynamodb_writes_per_report"]
        + invocations * MEASURED["dynamodb_bucket_transactions_per_invocation"] * BUCKET_ITEMS * 2
        + given_writes
    )
    reads = reports * READS_PER_REPORT + invocations * BUCKET_ITEMS
    dynamo_usd = writes * PRICES["dynamodb_wru"] + reads * PRICES["dynamodb_rru"]

    metrics = _metric_count()
    alarm_metrics = ALARMS_SINGLE + ALARM_EC2_THROTTLES_METRICS
    logs_gb = (invocations + reconciles) * LOG_BYTES_PER_INVOCATION / 1e9
    cw_usd = (
        metrics * PRICES["cloudwatch_metric_month"]
        + alarm_metrics * PRICES["cloudwatch_alarm_metric_month"]
        + logs_gb * PRICES["cloudwatch_logs_gb"]
    )
    by_service = {
        "lambda": round(lambda_usd, 2),
        "sqs": round(sqs_usd, 2),
        "dynamodb": round(dynamo_usd, 2),
        "cloudwatch": round(cw_usd, 2),
    }
    return {
        "nodes": w.nodes,
        "monthly_usd": round(sum(by_service.values()), 2),
        "by_service": by_service,
        "usage": {
            "reports": round(reports),
            "results": round(results),
            "allocate_invocations": round(invocations),
            "reports_per_invocation": round(reports_per_invocation, 1),
            "lambda_gb_s": round(gb_s),
            "sqs_requests": round(sqs_requests),
            "dynamodb_write_units": round(writes),
            "dynamodb_given_entry_write_units": round(given_writes),
            "dynamodb_read_units": round(reads),
            "cloudwatch_metrics": metrics,
            "cloudwatch_alarm_metrics": alarm_metrics,
            "cloudwatch_logs_gb": round(logs_gb, 2),
        },
        "assumptions": {
            **asdict(w),
            "prices_as_of": PRICES_AS_OF,
            "prices": PRICES,
            "measured": MEASURED,
            "esm_pollers": ESM_POLLERS,
            "batch_size": BATCH_SIZE,
            "allocate_memory_mb": ALLOCATE_MEMORY_MB,
            "invoke_base_ms": INVOKE_BASE_MS,
            "per_report_ms": PER_REPORT_MS,
            "enis_per_node": ENIS_PER_NODE,
            "free_tiers": "not applied",
        },
    }


def _positive(kind: type, what: str) -> Any:
    def parse(text: str) -> Any:
        try:
            v = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{what}: not a number: {text!r}") from None
        if not v > 0 or (isinstance(v, float) and not math.isfinite(v)):
            raise argparse.ArgumentTypeError(f"{what}: must be > 0")
        return v

    return parse


def _non_negative(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--churn: not a number: {text!r}") from None
    if not (v >= 0 and math.isfinite(v)):
        raise argparse.ArgumentTypeError("--churn: must be >= 0")
    return v


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="warmpool cost", description="The monthly AWS bill of warmpool's serverless part.")
    p.add_argument("--nodes", type=_positive(int, "--nodes"), required=True, help="nodes in the cluster")
    p.add_argument("--pods-per-node", type=_positive(float, "--pods-per-node"), default=30.0, help="pods a node (30)")
    p.add_argument("--churn", type=_non_negative, default=0.25, help="fraction of the pods replaced every hour (0.25)")
    p.add_argument(
        "--report-every", type=_positive(float, "--report-every"), default=60.0, help="agent heartbeat, seconds (60)"
    )
    p.add_argument("--json", metavar="OUT", help="write {nodes, monthly_usd, by_service, assumptions} here")
    return p


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    out = estimate(
        Workload(
            nodes=args.nodes,
            pods_per_node=args.pods_per_node,
            churn_per_hour=args.churn,
            report_every_s=args.report_every,
        )
    )
    when = PRICES_AS_OF[:10]
    print(f"warmpool cost for {out['nodes']:,} nodes: ${out['monthly_usd']:,.2f} a month (prices of {when})")
    for service, usd in out["by_service"].items():
        print(f"  {service:<11} ${usd:>10,.2f}")
    u = out["usage"]
    print(
        f"  reports {u['reports']:,} a month, {u['allocate_invocations']:,} allocate invocations "
        f"({u['reports_per_invocation']} reports each), {u['sqs_requests']:,} SQS requests"
    )
    if args.json:
        try:
            Path(args.json).write_text(json.dumps(out, indent=2) + "\n")
        except OSError as exc:
            print(f"warmpool cost: cannot write {args.json}: {exc.strerror}", file=sys.stderr)
            return 2
    return 0
