"""The emulated SQS event-source mapping and schedules (emulated.esm), in virtual time
over the fast SQS, plus one real-time run and one run over moto's SQS."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import boto3
import pytest

from emulated.clock import VirtualClock
from emulated.esm import EsmConfig, EventSourceMapping, Schedule, ThreadedRunner
from emulated.sqs import FastSqs
from tests.helpers.esm import stuck_invocation
from warmpool.clock import RealClock

T0 = 1_700_000_000.0


class Recorder:
    """A handler that records what it was given and fails what it is told to."""

    def __init__(self, fail: set[str] | None = None, raise_: bool = False, response: Any = None) -> None:
        self.calls: list[tuple[dict[str, Any], Any]] = []
        self.fail = fail or set()
        self.raise_ = raise_
        self.response = response

    def __call__(self, event: dict[str, Any], context: Any) -> Any:
        self.calls.append((event, context))
        if self.raise_:
            raise RuntimeError("boom")
        if self.response is not None:
            return self.response
        return {
            "batchItemFailures": [
                {"itemIdentifier": r["messageId"]} for r in event["Records"] if r["body"] in self.fail
            ]
        }

    def bodies(self, i: int) -> list[str]:
        return [r["body"] for r in self.calls[i][0]["Records"]]


@pytest.fixture
def env() -> tuple[FastSqs, Any, VirtualClock, str, str]:
    clock = VirtualClock(T0)
    sqs = FastSqs(clock)
    c = sqs.client()
    dlq = c.create_queue(QueueName="reports-dlq")["QueueUrl"]
    arn = c.get_queue_attributes(QueueUrl=dlq, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    url = c.create_queue(
        QueueName="reports",
        Attributes={
            "VisibilityTimeout": "180",
            "RedrivePolicy": json.dumps({"deadLetterTargetArn": arn, "maxReceiveCount": 5}),
        },
    )["QueueUrl"]
    return sqs, c, clock, url, dlq


def send(c: Any, url: str, *bodies: str) -> None:
    for b in bodies:
        c.send_message(QueueUrl=url, MessageBody=b)


def esm(c: Any, url: str, h: Any, clock: VirtualClock, **kw: Any) -> EventSourceMapping:
    duration = kw.pop("duration", lambda batch, out: 1.0)
    return EventSourceMapping(
        c, url, h, EsmConfig(function_name="allocate", function_timeout_s=30, **kw), clock, duration=duration
    )


def test_success_deletes_the_batch(env: Any) -> None:
    sqs, c, clock, url, _ = env
    send(c, url, "a", "b", "c")
    h = Recorder()
    m = esm(c, url, h, clock)
    assert m.tick() == 1
    assert sorted(h.bodies(0)) == ["a", "b", "c"]
    assert sqs.depth(url) == 3  # deleted when the invocation completes, 1 s later
    clock.advance(1)
    m.tick()
    assert sqs.depth(url) == 0
    assert m.stats.deleted == 3


def test_event_and_context_are_lambda_shaped(env: Any) -> None:
    _, c, clock, url, _ = env
    c.send_message(
        QueueUrl=url, MessageBody="x", MessageAttributes={"node": {"DataType": "String", "StringValue": "n1"}}
    )
    h = Recorder()
    esm(c, url, h, clock).tick()
    event, ctx = h.calls[0]
    [r] = event["Records"]
    assert set(r) >= {
        "messageId",
        "receiptHandle",
        "body",
        "attributes",
        "messageAttributes",
        "md5OfBody",
        "eventSource",
        "eventSourceARN",
        "awsRegion",
    }
    assert r["eventSource"] == "aws:sqs"
    assert r["eventSourceARN"] == "arn:aws:sqs:us-east-1:123456789012:reports"
    assert r["awsRegion"] == "us-east-1"
    assert set(r["attributes"]) == {
        "ApproximateReceiveCount",
        "SentTimestamp",
        "SenderId",
        "ApproximateFirstReceiveTimestamp",
    }
    assert r["messageAttributes"]["node"]["stringValue"] == "n1"
    assert r["messageAttributes"]["node"]["dataType"] == "String"
    assert ctx.function_name == "allocate"
    assert ctx.invoked_function_arn == "arn:aws:lambda:us-east-1:123456789012:function:allocate"
    assert ctx.memory_limit_in_mb == 512
    assert ctx.aws_request_id
    assert ctx.get_remaining_time_in_millis() == 30_000


def test_partial_batch_failure_retries_only_the_failed(env: Any) -> None:
    sqs, c, clock, url, _ = env
    send(c, url, "ok1", "bad", "ok2")
    h = Recorder(fail={"bad"})
    m = esm(c, url, h, clock)
    m.tick()
    clock.advance(1)
    m.tick()
    assert sqs.depth(url) == 1
    assert m.stats.failed_items == 1
    clock.advance(178)  # visibility timeout (180 s from receive) not over yet
    m.tick()
    assert len(h.calls) == 1
    clock.advance(1)
    m.tick()
    assert h.bodies(1) == ["bad"]
    assert h.calls[1][0]["Records"][0]["attributes"]["ApproximateReceiveCount"] == "2"


def test_raising_handler_fails_the_whole_batch(env: Any) -> None:
    sqs, c, clock, url, _ = env
    send(c, url, "a", "b")
    h = Recorder(raise_=True)
    m = esm(c, url, h, clock)
    m.tick()
    clock.advance(1)
    m.tick()
    assert sqs.depth(url) == 2
    assert m.stats.errors == 1
    assert m.stats.deleted == 0
    clock.advance(180)
    m.tick()
    assert sorted(h.bodies(1)) == ["a", "b"]


def test_unknown_item_identifier_fails_the_whole_batch(env: Any) -> None:
    sqs, c, clock, url, _ = env
    send(c, url, "a", "b")
    m = esm(
        c,
        url,
        Recorder(response={"batchItemFailures": [{"itemIdentifier": "not-in-batch"}]}),
        clock,
        duration=lambda b, o: 0.0,
    )
    m.tick()
    assert sqs.depth(url) == 2
    assert m.stats.errors == 1


def test_without_report_batch_item_failures_the_response_is_ignored(env: Any) -> None:
    sqs, c, clock, url, _ = env
    send(c, url, "a", "bad")
    m = esm(c, url, Recorder(fail={"bad"}), clock, report_batch_item_failures=False, duration=lambda b, o: 0.0)
    m.tick()
    assert sqs.depth(url) == 0


def test_redrive_to_the_dlq_after_max_receive_count(env: Any) -> None:
    sqs, c, clock, url, dlq = env
    send(c, url, "poison", "fine")
    h = Recorder(fail={"poison"})
    m = esm(c, url, h, clock)
    poison_counts: list[str] = []
    for _ in range(8):
        m.tick()
        clock.advance(181)
    m.tick()
    for event, _ctx in h.calls:
        poison_counts += [r["attributes"]["ApproximateReceiveCount"] for r in event["Records"] if r["body"] == "poison"]
    assert poison_counts == ["1", "2", "3", "4", "5"]
    assert sqs.depth(url) == 0
    [d] = c.receive_message(QueueUrl=dlq)["Messages"]
    assert d["Body"] == "poison"


def test_batching_window_waits_for_a_full_batch_or_the_window(env: Any) -> None:
    _, c, clock, url, _ = env
    h = Recorder()
    m = esm(c, url, h, clock, batch_size=100, batching_window_s=5, duration=lambda b, o: 0.0)
    send(c, url, *[f"m{i}" for i in range(30)])
    assert m.tick() == 0
    assert m.next_wakeup() == T0 + 5
    clock.advance(4.9)
    assert m.tick() == 0
    clock.advance(0.1)
    assert m.tick() == 1
    assert len(h.calls[0][0]["Records"]) == 30
    send(c, url, *[f"n{i}" for i in range(100)])
    assert m.tick() == 1  # a full batch goes at once
    assert len(h.calls[1][0]["Records"]) == 100


def test_batch_size_caps_each_invocation(env: Any) -> None:
    _, c, clock, url, _ = env
    h = Recorder()
    m = esm(c, url, h, clock, batch_size=4, duration=lambda b, o: 0.0)
    send(c, url, *[str(i) for i in range(10)])
    m.tick()
    assert [len(e["Records"]) for e, _ in h.calls] == [4, 4, 2]


def test_maximum_concurrency_limits_invocations_in_flight(env: Any) -> None:
    _, c, clock, url, _ = env
    h = Recorder()
    m = esm(c, url, h, clock, batch_size=1, maximum_concurrency=2, duration=lambda b, o: 10.0)
    send(c, url, *[str(i) for i in range(5)])
    assert m.tick() == 2
    assert m.in_flight == 2
    clock.advance(5)
    assert m.tick() == 0
    assert m.next_wakeup() == T0 + 10
    clock.advance(5)
    assert m.tick() == 2
    clock.advance(10)
    assert m.tick() == 1
    assert m.stats.max_in_flight == 2
    assert m.stats.concurrency_waits >= 1


def test_an_invocation_past_its_timeout_fails_the_batch(env: Any) -> None:
    sqs, c, clock, url, _ = env
    send(c, url, "slow")
    m = esm(c, url, Recorder(), clock, duration=lambda b, o: 31.0)
    m.tick()
    clock.advance(30)
    m.tick()
    assert m.stats.timeouts == 1
    assert sqs.depth(url) == 1


def test_queue_visibility_below_function_timeout_is_refused(env: Any) -> None:
    _, c, clock, _, _ = env
    short = c.create_queue(QueueName="short", Attributes={"VisibilityTimeout": "10"})["QueueUrl"]
    with pytest.raises(ValueError, match="less than Function timeout"):
        esm(c, short, Recorder(), clock)


def test_config_limits_are_lambdas() -> None:
    with pytest.raises(ValueError):
        EsmConfig(function_name="f", maximum_concurrency=1)
    with pytest.raises(ValueError):
        EsmConfig(function_name="f", batch_size=11)  # > 10 needs a window
    EsmConfig(function_name="f", batch_size=10_000, batching_window_s=1)


def test_schedule_fires_once_per_period() -> None:
    clock = VirtualClock(T0)
    seen: list[dict[str, Any]] = []
    s = Schedule(60, lambda e, c: seen.append(e), name="reconcile", function_name="reconcile", clock=clock)
    assert s.tick() == 0
    clock.advance(60)
    assert s.tick() == 1
    assert s.tick() == 0
    clock.advance(150)  # late: fires once, next period realigned
    assert s.tick() == 1
    assert s.next_at == T0 + 240
    assert seen[0]["detail-type"] == "Scheduled Event"
    assert seen[0]["source"] == "aws.events"
    assert seen[0]["resources"] == ["arn:aws:events:us-east-1:123456789012:rule/reconcile"]


def test_schedule_counts_errors_and_keeps_going() -> None:
    clock = VirtualClock(T0)

    def boom(e: Any, c: Any) -> None:
        raise RuntimeError("x")

    s = Schedule(10, boom, clock=clock, fire_at_start=True)
    s.tick()
    clock.advance(10)
    s.tick()
    assert s.stats() == {"invocations": 2, "errors": 2}


def test_real_time_runner_drains_the_queue_with_threads() -> None:
    sqs = FastSqs(RealClock())
    c = sqs.client()
    url = c.create_queue(QueueName="q", Attributes={"VisibilityTimeout": "30"})["QueueUrl"]
    done = threading.Event()
    seen: list[str] = []
    lock = threading.Lock()

    def handler(event: dict[str, Any], ctx: Any) -> dict[str, Any]:
        with lock:
            seen.extend(r["body"] for r in event["Records"])
            if len(seen) >= 25:
                done.set()
        return {"batchItemFailures": []}

    m = EventSourceMapping(
        c, url, handler, EsmConfig(function_name="f", batch_size=5, maximum_concurrency=3), sqs.clock
    )
    ticked = threading.Event()
    sched = Schedule(0.05, lambda e, ctx: ticked.set(), clock=sqs.clock)
    with ThreadedRunner([m], [sched], poll_wait_s=1):
        for i in range(25):
            c.send_message(QueueUrl=url, MessageBody=str(i))
        assert done.wait(10)
        assert ticked.wait(5)
    # stop() waited for the workers: every invocation has settled
    assert sorted(seen, key=int) == [str(i) for i in range(25)]
    assert m.stats.deleted == 25
    assert sqs.depth(url) == 0
    assert m.stats.max_in_flight <= 3


def test_a_stopped_runner_started_again_invokes_again() -> None:
    """The local stack's pause_functions/resume_functions: nothing is invoked while stopped,
    and what was sent meanwhile is served once started again."""
    sqs = FastSqs(RealClock())
    c = sqs.client()
    url = c.create_queue(QueueName="q", Attributes={"VisibilityTimeout": "30"})["QueueUrl"]
    got = threading.Event()
    m = EventSourceMapping(c, url, lambda e, ctx: got.set(), EsmConfig(function_name="f"), sqs.clock)
    runner = ThreadedRunner([m], poll_wait_s=1)
    runner.start()
    runner.stop()
    c.send_message(QueueUrl=url, MessageBody="while stopped")
    assert not got.wait(1.5)
    runner.start()
    try:
        assert got.wait(10)
    finally:
        runner.stop()


@pytest.fixture
def moto_sqs(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Any, VirtualClock]]:
    from moto import mock_aws
    from moto.sqs import models as moto_sqs_models

    clock = VirtualClock(T0)
    monkeypatch.setattr(moto_sqs_models, "unix_time", lambda *a: clock.now())
    monkeypatch.setattr(moto_sqs_models, "unix_time_millis", lambda *a: clock.now() * 1000.0)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    with mock_aws():
        yield boto3.client("sqs", region_name="us-east-1"), clock


def test_the_same_core_drives_a_boto3_client(moto_sqs: tuple[Any, VirtualClock]) -> None:
    c, clock = moto_sqs
    url = c.create_queue(QueueName="q", Attributes={"VisibilityTimeout": "60"})["QueueUrl"]
    send(c, url, "ok", "bad")
    h = Recorder(fail={"bad"})
    m = esm(c, url, h, clock, duration=lambda b, o: 0.0)
    m.tick()
    assert m.stats.deleted == 1
    clock.advance(61)
    m.tick()
    assert h.bodies(1) == ["bad"]
    assert h.calls[1][0]["Records"][0]["attributes"]["ApproximateReceiveCount"] == "2"


def test_stop_returns_while_an_invocation_never_does_and_its_batch_is_not_deleted() -> None:
    """``warmpool local up`` stopped on SIGTERM within its test's minute in CI, except once: a
    stop waited on the invocations in flight for as long as they took. Now it waits
    ``drain_s`` and leaves one still running to its own (daemon) thread; its batch stays
    in flight, as when Lambda stops an environment mid-invocation."""
    stuck = stuck_invocation("f")
    try:
        stopper = threading.Thread(target=stuck.runner.stop, kwargs={"drain_s": 1.0}, daemon=True)
        stopper.start()
        stopper.join(30)
        assert not stopper.is_alive(), "stop() waited on an invocation that never returns"
        assert stuck.mapping.stats.deleted == 0 and stuck.sqs.depth(stuck.url) == 1
        left = [t for t in threading.enumerate() if t.name.startswith("lambda-f-")]
        assert left, "the invocation was not left running"
    finally:
        stuck.release.set()
