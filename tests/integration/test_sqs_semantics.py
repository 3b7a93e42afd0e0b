"""One SQS semantic suite, two backends: moto's SQS and ``emulated.sqs.FastSqs``.

Every test taking the ``sqs`` fixture runs against both, so the fast queue the
bench uses is shown to behave like the one everyone trusts. Time is virtual in
both: moto's SQS clock functions are patched to read the same kind of clock.
Where AWS and moto differ, the test pins AWS behaviour and runs on the fast
backend only (``fast`` fixture), with the difference named in its docstring.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from emulated.clock import VirtualClock
from emulated.sqs import MAX_MESSAGE_BYTES, FastSqs, md5_of_attributes
from warmpool.clock import RealClock

T0 = 1_700_000_000.0


@dataclass
class Backend:
    name: str
    client: Any
    advance: Callable[[float], None]


@pytest.fixture(params=["fast", "moto"])
def sqs(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[Backend]:
    clock = VirtualClock(T0)
    if request.param == "fast":
        yield Backend("fast", FastSqs(clock).client(), clock.advance)
        return
    from moto import mock_aws
    from moto.sqs import models as moto_sqs

    monkeypatch.setattr(moto_sqs, "unix_time", lambda *a: clock.now())
    monkeypatch.setattr(moto_sqs, "unix_time_millis", lambda *a: clock.now() * 1000.0)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    with mock_aws():
        yield Backend("moto", boto3.client("sqs", region_name="us-east-1"), clock.advance)


@pytest.fixture
def fast() -> tuple[Any, VirtualClock]:
    clock = VirtualClock(T0)
    return FastSqs(clock).client(), clock


def code(err: pytest.ExceptionInfo[ClientError]) -> str:
    return str(err.value.response["Error"]["Code"])


def qurl(b: Backend, name: str = "q", **attrs: Any) -> str:
    return str(b.client.create_queue(QueueName=name, Attributes={k: str(v) for k, v in attrs.items()})["QueueUrl"])


def recv(b: Backend, url: str, n: int = 10, **kw: Any) -> list[dict[str, Any]]:
    return list(
        b.client.receive_message(QueueUrl=url, MaxNumberOfMessages=n, MessageSystemAttributeNames=["All"], **kw).get(
            "Messages", []
        )
    )


def counts(b: Backend, url: str) -> tuple[int, int, int]:
    a = b.client.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    return (
        int(a["ApproximateNumberOfMessages"]),
        int(a["ApproximateNumberOfMessagesNotVisible"]),
        int(a["ApproximateNumberOfMessagesDelayed"]),
    )


# --- queues --------------------------------------------------------------------


def test_create_queue_is_idempotent_with_same_attributes(sqs: Backend) -> None:
    u1 = qurl(sqs, VisibilityTimeout=60)
    assert qurl(sqs, VisibilityTimeout=60) == u1
    assert sqs.client.get_queue_url(QueueName="q")["QueueUrl"] == u1


def test_create_queue_with_other_attributes_is_refused(sqs: Backend) -> None:
    qurl(sqs, VisibilityTimeout=60)
    with pytest.raises(ClientError) as e:
        qurl(sqs, VisibilityTimeout=61)
    assert code(e) == "QueueAlreadyExists"


def test_unknown_queue_is_nonexistent_queue(sqs: Backend) -> None:
    with pytest.raises(sqs.client.exceptions.QueueDoesNotExist) as e:
        sqs.client.get_queue_url(QueueName="nope")
    assert code(e) == "AWS.SimpleQueueService.NonExistentQueue"
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400


def test_deleted_queue_is_gone(sqs: Backend) -> None:
    url = qurl(sqs)
    sqs.client.delete_queue(QueueUrl=url)
    with pytest.raises(ClientError) as e:
        sqs.client.send_message(QueueUrl=url, MessageBody="x")
    assert code(e) == "AWS.SimpleQueueService.NonExistentQueue"


def test_list_queues_by_prefix(sqs: Backend) -> None:
    a = qurl(sqs, "warmpool-a-result-i-1")
    b = qurl(sqs, "warmpool-a-result-i-2")
    qurl(sqs, "other")
    assert sorted(sqs.client.list_queues(QueueNamePrefix="warmpool-a-result-")["QueueUrls"]) == [a, b]
    assert "QueueUrls" not in sqs.client.list_queues(QueueNamePrefix="zzz")


def test_queue_attributes_defaults_and_arn(sqs: Backend) -> None:
    url = qurl(sqs)
    a = sqs.client.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert a["VisibilityTimeout"] == "30"
    assert a["DelaySeconds"] == "0"
    assert a["MessageRetentionPeriod"] == "345600"
    assert a["MaximumMessageSize"] == str(MAX_MESSAGE_BYTES)
    assert a["QueueArn"] == "arn:aws:sqs:us-east-1:123456789012:q"
    one = sqs.client.get_queue_attributes(QueueUrl=url, AttributeNames=["VisibilityTimeout"])["Attributes"]
    assert one == {"VisibilityTimeout": "30"}


# --- send / receive / delete ------------------------------------------------------


def test_round_trip_with_system_attributes(sqs: Backend) -> None:
    url = qurl(sqs)
    sent = sqs.client.send_message(QueueUrl=url, MessageBody="hello")
    assert sent["MD5OfMessageBody"] == "5d41402abc4b2a76b9719d911017c592"
    sqs.advance(2)
    [m] = recv(sqs, url)
    assert m["MessageId"] == sent["MessageId"]
    assert m["Body"] == "hello"
    assert m["MD5OfBody"] == sent["MD5OfMessageBody"]
    a = m["Attributes"]
    assert a["ApproximateReceiveCount"] == "1"
    assert a["SentTimestamp"] == str(int(T0 * 1000))
    assert int(a["ApproximateFirstReceiveTimestamp"]) == int((T0 + 2) * 1000)
    assert a["SenderId"]
    sqs.client.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
    sqs.advance(60)
    assert recv(sqs, url) == []
    assert counts(sqs, url) == (0, 0, 0)


def test_message_attributes_round_trip_with_md5(sqs: Backend) -> None:
    url = qurl(sqs)
    attrs = {
        "node": {"DataType": "String", "StringValue": "ip-10-0-0-1"},
        "seq": {"DataType": "Number", "StringValue": "42"},
    }
    sent = sqs.client.send_message(QueueUrl=url, MessageBody="x", MessageAttributes=attrs)
    assert sent["MD5OfMessageAttributes"] == md5_of_attributes(attrs)
    [m] = recv(sqs, url, MessageAttributeNames=["All"])
    assert m["MessageAttributes"] == attrs
    assert m["MD5OfMessageAttributes"] == md5_of_attributes(attrs)


def test_received_message_is_invisible_until_the_timeout(sqs: Backend) -> None:
    url = qurl(sqs, VisibilityTimeout=30)
    sqs.client.send_message(QueueUrl=url, MessageBody="x")
    assert len(recv(sqs, url)) == 1
    assert counts(sqs, url) == (0, 1, 0)
    sqs.advance(29)
    assert recv(sqs, url) == []
    sqs.advance(2)
    [m] = recv(sqs, url)
    assert m["Attributes"]["ApproximateReceiveCount"] == "2"


def test_receive_visibility_timeout_overrides_the_queue(sqs: Backend) -> None:
    url = qurl(sqs, VisibilityTimeout=300)
    sqs.client.send_message(QueueUrl=url, MessageBody="x")
    assert len(recv(sqs, url, VisibilityTimeout=5)) == 1
    sqs.advance(6)
    assert len(recv(sqs, url)) == 1


def test_change_visibility_to_zero_makes_it_visible_now(sqs: Backend) -> None:
    url = qurl(sqs)
    sqs.client.send_message(QueueUrl=url, MessageBody="x")
    [m] = recv(sqs, url)
    sqs.client.change_message_visibility(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"], VisibilityTimeout=0)
    sqs.advance(0.01)  # moto counts a message visible only strictly after visible_at
    [m2] = recv(sqs, url)
    assert m2["MessageId"] == m["MessageId"]
    assert m2["ReceiptHandle"] != m["ReceiptHandle"]


def test_change_visibility_extends_the_timeout(sqs: Backend) -> None:
    url = qurl(sqs, VisibilityTimeout=10)
    sqs.client.send_message(QueueUrl=url, MessageBody="x")
    [m] = recv(sqs, url)
    sqs.advance(5)
    sqs.client.change_message_visibility(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"], VisibilityTimeout=60)
    sqs.advance(30)
    assert recv(sqs, url) == []
    sqs.advance(31)
    assert len(recv(sqs, url)) == 1


def test_delay_seconds_per_message_and_per_queue(sqs: Backend) -> None:
    url = qurl(sqs, DelaySeconds=10)
    sqs.client.send_message(QueueUrl=url, MessageBody="queue-delay")
    sqs.client.send_message(QueueUrl=url, MessageBody="own-delay", DelaySeconds=100)
    sqs.client.send_message(QueueUrl=url, MessageBody="no-delay", DelaySeconds=0)
    assert counts(sqs, url) == (1, 0, 2)
    assert [m["Body"] for m in recv(sqs, url, VisibilityTimeout=3600)] == ["no-delay"]
    sqs.advance(11)
    assert [m["Body"] for m in recv(sqs, url, VisibilityTimeout=3600)] == ["queue-delay"]
    sqs.advance(90)
    assert [m["Body"] for m in recv(sqs, url, VisibilityTimeout=3600)] == ["own-delay"]


def test_delay_over_900_is_invalid(sqs: Backend) -> None:
    url = qurl(sqs)
    with pytest.raises(ClientError) as e:
        sqs.client.send_message(QueueUrl=url, MessageBody="x", DelaySeconds=901)
    assert code(e) == "InvalidParameterValue"
    sqs.client.send_message(QueueUrl=url, MessageBody="x", DelaySeconds=900)


def test_message_size_limit_is_one_mib(sqs: Backend) -> None:
    url = qurl(sqs)
    sqs.client.send_message(QueueUrl=url, MessageBody="x" * MAX_MESSAGE_BYTES)
    with pytest.raises(ClientError) as e:
        sqs.client.send_message(QueueUrl=url, MessageBody="x" * (MAX_MESSAGE_BYTES + 1))
    assert code(e) == "InvalidParameterValue"


def test_receive_at_most_ten(sqs: Backend) -> None:
    url = qurl(sqs)
    for i in range(15):
        sqs.client.send_message(QueueUrl=url, MessageBody=str(i))
    with pytest.raises(ClientError) as e:
        recv(sqs, url, n=11)
    assert code(e) == "InvalidParameterValue"
    got = recv(sqs, url, n=10) + recv(sqs, url, n=10)
    assert sorted(int(m["Body"]) for m in got) == list(range(15))


def test_delete_with_a_made_up_handle_is_invalid(sqs: Backend) -> None:
    url = qurl(sqs)
    with pytest.raises(sqs.client.exceptions.ReceiptHandleIsInvalid) as e:
        sqs.client.delete_message(QueueUrl=url, ReceiptHandle="not-a-handle")
    assert code(e) == "ReceiptHandleIsInvalid"


def test_deleting_twice_with_the_same_handle_succeeds(sqs: Backend) -> None:
    url = qurl(sqs)
    sqs.client.send_message(QueueUrl=url, MessageBody="x")
    [m] = recv(sqs, url)
    sqs.client.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
    sqs.client.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])


# --- batches -----------------------------------------------------------------------


def test_send_batch_of_eleven_is_refused(sqs: Backend) -> None:
    url = qurl(sqs)
    with pytest.raises(sqs.client.exceptions.TooManyEntriesInBatchRequest) as e:
        sqs.client.send_message_batch(QueueUrl=url, Entries=[{"Id": str(i), "MessageBody": "x"} for i in range(11)])
    assert code(e) == "AWS.SimpleQueueService.TooManyEntriesInBatchRequest"
    assert counts(sqs, url) == (0, 0, 0)


def test_send_batch_ids_must_be_distinct(sqs: Backend) -> None:
    url = qurl(sqs)
    with pytest.raises(ClientError) as e:
        sqs.client.send_message_batch(QueueUrl=url, Entries=[{"Id": "a", "MessageBody": "x"}] * 2)
    assert code(e).endswith("BatchEntryIdsNotDistinct")


def test_send_batch_total_size_limit(sqs: Backend) -> None:
    url = qurl(sqs)
    half = "x" * (MAX_MESSAGE_BYTES // 2 + 1)
    with pytest.raises(ClientError) as e:
        sqs.client.send_message_batch(
            QueueUrl=url, Entries=[{"Id": "a", "MessageBody": half}, {"Id": "b", "MessageBody": half}]
        )
    assert code(e).endswith("BatchRequestTooLong")


def test_send_batch_reports_per_entry_results(sqs: Backend) -> None:
    url = qurl(sqs)
    r = sqs.client.send_message_batch(
        QueueUrl=url, Entries=[{"Id": f"e{i}", "MessageBody": f"m{i}"} for i in range(10)]
    )
    assert sorted(s["Id"] for s in r["Successful"]) == sorted(f"e{i}" for i in range(10))
    assert r.get("Failed", []) == []
    assert counts(sqs, url) == (10, 0, 0)


def test_delete_batch_reports_bad_handles_per_entry(sqs: Backend) -> None:
    url = qurl(sqs)
    for i in range(3):
        sqs.client.send_message(QueueUrl=url, MessageBody=str(i))
    ms = recv(sqs, url)
    entries = [{"Id": f"d{i}", "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(ms)]
    entries.append({"Id": "bad", "ReceiptHandle": "not-a-handle"})
    r = sqs.client.delete_message_batch(QueueUrl=url, Entries=entries)
    assert sorted(s["Id"] for s in r["Successful"]) == ["d0", "d1", "d2"]
    [f] = r["Failed"]
    assert f["Id"] == "bad"
    assert f["Code"] == "ReceiptHandleIsInvalid"
    assert f["SenderFault"] is True
    assert counts(sqs, url) == (0, 0, 0)


def test_delete_batch_of_eleven_is_refused(sqs: Backend) -> None:
    if sqs.name == "moto":
        pytest.xfail("moto 5.2 accepts DeleteMessageBatch with 11 entries; AWS refuses more than 10")
    url = qurl(sqs)
    with pytest.raises(ClientError) as e:
        sqs.client.delete_message_batch(
            QueueUrl=url, Entries=[{"Id": str(i), "ReceiptHandle": f"h{i}"} for i in range(11)]
        )
    assert code(e) == "AWS.SimpleQueueService.TooManyEntriesInBatchRequest"


# --- redrive -----------------------------------------------------------------------


def test_redrive_to_the_dlq_after_max_receive_count(sqs: Backend) -> None:
    dlq = qurl(sqs, "q-dlq")
    dlq_arn = sqs.client.get_queue_attributes(QueueUrl=dlq, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    url = qurl(
        sqs,
        "q",
        VisibilityTimeout=10,
        RedrivePolicy=json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": 2}),
    )
    sent = sqs.client.send_message(QueueUrl=url, MessageBody="poison")
    for n in (1, 2):
        [m] = recv(sqs, url)
        assert m["Attributes"]["ApproximateReceiveCount"] == str(n)
        sqs.advance(11)
    assert recv(sqs, url) == []
    [d] = recv(sqs, dlq)
    assert d["MessageId"] == sent["MessageId"]
    assert d["Body"] == "poison"
    assert counts(sqs, url) == (0, 0, 0)


# --- fast backend only: AWS behaviour moto does not have --------------------------


def test_stale_receipt_handle_is_expired_not_silently_deleted(fast: tuple[Any, VirtualClock]) -> None:
    """AWS (standard queues, knowledge-center 'sqs-receipt-handle-error'): an older
    handle may answer InvalidParameterValue 'The receipt handle has expired'.
    We always do, so at-least-once effects show up in tests. moto deletes."""
    c, clock = fast
    url = c.create_queue(QueueName="q", Attributes={"VisibilityTimeout": "5"})["QueueUrl"]
    c.send_message(QueueUrl=url, MessageBody="x")
    old = c.receive_message(QueueUrl=url)["Messages"][0]["ReceiptHandle"]
    clock.advance(6)
    new = c.receive_message(QueueUrl=url)["Messages"][0]["ReceiptHandle"]
    with pytest.raises(ClientError) as e:
        c.delete_message(QueueUrl=url, ReceiptHandle=old)
    assert code(e) == "InvalidParameterValue"
    c.delete_message(QueueUrl=url, ReceiptHandle=new)
    assert c.backend.depth(url) == 0


def test_change_visibility_of_a_deleted_message_is_invalid_parameter(fast: tuple[Any, VirtualClock]) -> None:
    """AWS: InvalidParameterValue ('Message does not exist or is not available for
    visibility timeout change'); moto says ReceiptHandleIsInvalid."""
    c, _ = fast
    url = c.create_queue(QueueName="q")["QueueUrl"]
    c.send_message(QueueUrl=url, MessageBody="x")
    h = c.receive_message(QueueUrl=url)["Messages"][0]["ReceiptHandle"]
    c.delete_message(QueueUrl=url, ReceiptHandle=h)
    with pytest.raises(ClientError) as e:
        c.change_message_visibility(QueueUrl=url, ReceiptHandle=h, VisibilityTimeout=10)
    assert code(e) == "InvalidParameterValue"


def test_dlq_message_names_its_source(fast: tuple[Any, VirtualClock]) -> None:
    c, _ = fast
    dlq = c.create_queue(QueueName="d")["QueueUrl"]
    arn = c.get_queue_attributes(QueueUrl=dlq, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    url = c.create_queue(
        QueueName="q",
        Attributes={"RedrivePolicy": json.dumps({"deadLetterTargetArn": arn, "maxReceiveCount": 1})},
    )["QueueUrl"]
    c.send_message(QueueUrl=url, MessageBody="x")
    c.receive_message(QueueUrl=url, VisibilityTimeout=0)
    assert "Messages" not in c.receive_message(QueueUrl=url)
    [d] = c.receive_message(QueueUrl=dlq, MessageSystemAttributeNames=["All"])["Messages"]
    assert d["Attributes"]["DeadLetterQueueSourceArn"] == "arn:aws:sqs:us-east-1:123456789012:q"


def test_redrive_policy_must_name_an_existing_queue(fast: tuple[Any, VirtualClock]) -> None:
    c, _ = fast
    with pytest.raises(ClientError) as e:
        c.create_queue(
            QueueName="q",
            Attributes={
                "RedrivePolicy": json.dumps(
                    {"deadLetterTargetArn": "arn:aws:sqs:us-east-1:123456789012:nope", "maxReceiveCount": 5}
                )
            },
        )
    assert code(e) == "InvalidParameterValue"


def test_retention_period_drops_old_messages(fast: tuple[Any, VirtualClock]) -> None:
    c, clock = fast
    url = c.create_queue(QueueName="q", Attributes={"MessageRetentionPeriod": "60"})["QueueUrl"]
    c.send_message(QueueUrl=url, MessageBody="x")
    clock.advance(61)
    assert "Messages" not in c.receive_message(QueueUrl=url)
    assert c.backend.depth(url) == 0


def test_each_client_view_has_its_own_sender_id(fast: tuple[Any, VirtualClock]) -> None:
    c, _ = fast
    node = c.backend.client(sender_id="AROAEXAMPLE:i-0abc")
    url = c.create_queue(QueueName="q")["QueueUrl"]
    node.send_message(QueueUrl=url, MessageBody="x")
    [m] = c.receive_message(QueueUrl=url, AttributeNames=["SenderId"])["Messages"]
    assert m["Attributes"] == {"SenderId": "AROAEXAMPLE:i-0abc"}


def test_long_poll_in_virtual_time_returns_at_once(fast: tuple[Any, VirtualClock]) -> None:
    c, clock = fast
    url = c.create_queue(QueueName="q")["QueueUrl"]
    t = time.monotonic()
    assert c.receive_message(QueueUrl=url, WaitTimeSeconds=20) == {}
    assert time.monotonic() - t < 0.5
    assert clock.now() == T0


def test_long_poll_with_a_real_clock_wakes_on_send() -> None:
    c = FastSqs(RealClock()).client()
    url = c.create_queue(QueueName="q")["QueueUrl"]
    got: list[dict[str, Any]] = []
    t = threading.Thread(target=lambda: got.append(c.receive_message(QueueUrl=url, WaitTimeSeconds=10)))
    t.start()
    started = time.monotonic()
    threading.Timer(0.1, lambda: c.send_message(QueueUrl=url, MessageBody="x")).start()
    t.join(5)
    assert not t.is_alive()
    assert time.monotonic() - started < 2
    assert got[0]["Messages"][0]["Body"] == "x"


def test_long_poll_with_a_real_clock_wakes_when_a_delay_ends() -> None:
    c = FastSqs(RealClock()).client()
    url = c.create_queue(QueueName="q")["QueueUrl"]
    c.send_message(QueueUrl=url, MessageBody="x", DelaySeconds=1)
    started = time.monotonic()
    r = c.receive_message(QueueUrl=url, WaitTimeSeconds=5)
    assert 0.9 < time.monotonic() - started < 3
    assert r["Messages"][0]["Body"] == "x"


def test_empty_batch_is_refused_with_the_aws_code(fast: tuple[Any, VirtualClock]) -> None:
    c, _ = fast
    url = c.create_queue(QueueName="q")["QueueUrl"]
    with pytest.raises(c.exceptions.EmptyBatchRequest) as e:
        c.send_message_batch(QueueUrl=url, Entries=[])
    assert code(e) == "AWS.SimpleQueueService.EmptyBatchRequest"


def test_receive_with_zero_visibility_never_returns_a_message_twice(fast: tuple[Any, VirtualClock]) -> None:
    c, _ = fast
    url = c.create_queue(QueueName="q")["QueueUrl"]
    c.send_message(QueueUrl=url, MessageBody="x")
    assert len(c.receive_message(QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=0)["Messages"]) == 1
    assert len(c.receive_message(QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=0)["Messages"]) == 1
