"""Wire messages: strict validation, clear reasons, JSON round-trip."""

from __future__ import annotations

import json

import pytest

from tests.helpers.messages import report
from warmpool.messages import (
    MAX_MESSAGE_BYTES,
    AllocationResult,
    Assigned,
    Attached,
    Deferred,
    EniReport,
    MessageError,
    PoolReport,
    ReleaseOffer,
    Targets,
    parse_report,
    parse_result,
)


def test_report_round_trip():
    r = parse_report(json.dumps(report()))
    assert r.seq == 7 and r.enis[0].ips == ["10.0.0.6", "10.0.0.7"]
    assert parse_report(r.to_json()) == r
    assert json.loads(r.to_json())["schema"] == "warmpool.report/v1"


def test_result_round_trip_with_every_action():
    res = AllocationResult(
        cluster="demo",
        node="n1",
        instance_id="i-0123456789abcdef0",
        in_reply_to=7,
        actions=[
            Assigned(eni_id="eni-0a1b2c3d4e5f60718", ips=["10.0.0.9"]),
            Attached(
                eni_id="eni-0a1b2c3d4e5f60719",
                device_index=1,
                mac="02:00:00:00:00:01",
                subnet_id="subnet-0abc",
                subnet_cidr="10.0.0.0/24",
                primary_ip="10.0.0.20",
                ips=["10.0.0.21"],
            ),
            Deferred(retry_after_s=2.5, reason="tokens"),
        ],
    )
    back = parse_result(res.to_json())
    assert back == res
    assert [a.kind for a in back.actions] == ["assigned", "attached", "deferred"]


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        ("not json", "not-json"),
        ("[1, 2]", "not-an-object"),
        (json.dumps(report(schema="warmpool.report/v2")), "unknown-schema"),
        (json.dumps({k: v for k, v in report().items() if k != "schema"}), "unknown-schema"),
        (json.dumps(report(seq=-1)), "invalid"),
        (json.dumps(report(instance_id="i-xyz")), "invalid"),
        (json.dumps(report(extra_field=1)), "invalid"),
        (json.dumps(report(targets={"warm_ip": -3})), "invalid"),
        (json.dumps(report(targets={"warm_ip": 10**9})), "invalid"),
        (json.dumps(report(mode="ipv6")), "invalid"),
        (json.dumps(report(enis=[{**report()["enis"][0], "primary_ip": "10.0.0.300"}])), "invalid"),
        (json.dumps(report(enis=[{**report()["enis"][0], "prefixes": ["10.0.0.0/24"]}])), "invalid"),
        (json.dumps(report(enis=report()["enis"] * 2)), "invalid"),
        (json.dumps(report(release=[{"eni_id": "eni-0ffffffffffffffff", "ips": ["10.0.0.6"]}])), "invalid"),
        (json.dumps(report(node="x" * 500)), "invalid"),
        ("{" + " " * MAX_MESSAGE_BYTES + "}", "oversized"),
    ],
)
def test_invalid_reports_are_rejected_with_a_reason(raw, reason):
    with pytest.raises(MessageError) as exc:
        parse_report(raw)
    assert exc.value.reason == reason


def test_invalid_reason_names_the_field():
    with pytest.raises(MessageError) as exc:
        parse_report(json.dumps(report(seq="x")))
    assert "seq" in str(exc.value)


def test_result_schema_is_checked():
    with pytest.raises(MessageError) as exc:
        parse_result(json.dumps({"schema": "warmpool.report/v1"}))
    assert exc.value.reason == "unknown-schema"


def test_models_build_directly():
    r = PoolReport(
        cluster="c",
        node="n",
        instance_id="i-0123456789abcdef0",
        instance_type="t3.medium",
        availability_zone="eu-west-1b",
        seq=1,
        sent_at=0,
        targets=Targets(warm_ip=2),
        enis=[EniReport(eni_id="eni-01234567", device_index=0, subnet_id="subnet-1", primary_ip="10.1.0.4")],
        release=[ReleaseOffer(eni_id="eni-01234567")],
    )
    assert r.schema_ == "warmpool.report/v1"
