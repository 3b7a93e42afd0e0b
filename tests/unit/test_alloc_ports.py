"""The allocator's ports and wiring: a typed production wiring, an executor
with its own clock, results that never silently lose actions, message text cut
to what the models allow."""

from __future__ import annotations

import dataclasses
import logging
from types import SimpleNamespace
from typing import Any

import pytest

from emulated.clock import VirtualClock
from functions import allocate, aws
from functions.ec2 import Ec2
from functions.execute import NodeJob, PlanExecutor
from functions.result_queues import ResultQueues
from functions.settings import Settings
from functions.stores import DynamoFlips
from functions.telemetry import Tally
from warmpool import names
from warmpool.calls import AssignAddresses
from warmpool.messages import (
    FAILED_CODE_MAX,
    FAILED_MESSAGE_MAX,
    MAX_ACTIONS,
    Action,
    AllocationResult,
    Assigned,
    Deferred,
    Failed,
)
from warmpool.ports import Ports


class Untouchable:
    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"touched: {name}")


def _settings() -> Settings:
    return Settings(
        cluster="demo",
        reports_queue_url="http://q",
        dlq_url="http://d",
        result_queue_prefix="warmpool-demo-result-",
        ledger_table="t",
        region="us-east-1",
        identity_verification="off",
    )


def test_production_wiring_is_a_frozen_typed_record() -> None:
    s = _settings()
    aws.reset()
    try:
        p = aws.ports(s)
        assert isinstance(p, Ports)
        assert p.ec2 is aws.client("ec2", s) and p.sqs is aws.client("sqs", s)
        with pytest.raises(dataclasses.FrozenInstanceError):
            p.clock = p.clock  # type: ignore[misc]
        alloc = allocate.build(s)
        assert isinstance(alloc.ec2, Ec2) and alloc.ec2.api is p.ec2
        assert alloc.executor.clock is alloc.clock and alloc.settings is s
        # issue 12: the deployed allocator shares its flip histories across containers
        assert isinstance(p.flips, DynamoFlips) and isinstance(alloc.flips, DynamoFlips)
    finally:
        aws.reset()


def test_the_executor_reads_its_own_clock_not_the_ec2_adapters() -> None:
    """Past the stop time, the node is deferred before any call; the time
    comes from the executor's clock (the EC2 port has none)."""
    ex = PlanExecutor(Untouchable(), Untouchable(), _settings(), Tally(), VirtualClock(100.0))  # type: ignore[arg-type]
    plan = SimpleNamespace(calls=(AssignAddresses("eni-00000001", ips=2),), unmet=0)
    job = NodeJob(SimpleNamespace(node="n1", seq=7), SimpleNamespace(instance_id="i-1"), None, plan)  # type: ignore[arg-type]
    out = ex.run(job, stop_at=50.0)
    assert (out.status, out.reason, out.calls) == ("deferred", "invocation deadline", 0)


def _assigned(i: int) -> Assigned:
    return Assigned(eni_id=f"eni-{i:08x}", ips=[f"10.0.{i // 250}.{i % 250 + 1}"])


def test_a_result_carries_every_action_that_fits() -> None:
    tally = Tally()
    d = ResultQueues(Untouchable(), _settings(), tally)  # type: ignore[arg-type]
    actions = [_assigned(i) for i in range(MAX_ACTIONS)]
    assert d.fit(actions, "n1", 1) == actions
    assert tally.get(names.M_RESULT_ACTIONS_DROPPED) == 0


class Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def test_actions_over_the_limit_are_counted_and_the_closing_deferred_kept() -> None:
    tally = Tally()
    d = ResultQueues(Untouchable(), _settings(), tally)  # type: ignore[arg-type]
    actions: list[Action] = [
        *[_assigned(i) for i in range(MAX_ACTIONS + 6)],
        Deferred(retry_after_s=5, reason="tokens"),
    ]
    seen = Records()
    logging.getLogger("functions.result_queues").addHandler(seen)
    try:
        kept = d.fit(actions, "n1", 1)
    finally:
        logging.getLogger("functions.result_queues").removeHandler(seen)
    assert len(kept) == MAX_ACTIONS and kept[-1] == actions[-1] and kept[:-1] == actions[: MAX_ACTIONS - 1]
    assert tally.get(names.M_RESULT_ACTIONS_DROPPED) == 7
    assert any("some left out" in r.getMessage() for r in seen.records)
    AllocationResult(cluster="demo", node="n1", instance_id="i-0123456789abcdef0", in_reply_to=1, actions=kept)


def test_failed_and_deferred_text_is_cut_to_the_models_limits() -> None:
    f = Failed.clipped("x" * 300, "y" * 3000)
    assert (len(f.code), len(f.message)) == (FAILED_CODE_MAX, FAILED_MESSAGE_MAX)
    assert Deferred.clipped(3, "z" * 999).reason == "z" * Deferred.model_fields["reason"].metadata[0].max_length


def test_the_emulated_lambda_context_dates_its_log_stream_by_its_clock() -> None:
    from emulated.lambda_runtime import make_context

    ctx = make_context("allocate", VirtualClock(86_400.0 * 3), 30)
    assert ctx.log_stream_name.startswith("1970/01/04/[$LATEST]")
