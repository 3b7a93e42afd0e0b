"""Unit tests of the allocator's pure parts: token allotment, error mapping, settings, telemetry."""

from __future__ import annotations

import json
import math

import pytest
from botocore.exceptions import ClientError

from emulated.iid import IdentitySigner
from functions.errors import (
    AddressLimit,
    AwsError,
    ConditionFailed,
    NoCidrBlocks,
    QueueMissing,
    SubnetFull,
    Throttled,
    TokenMismatch,
    classify,
)
from functions.identity import IdentityConfigError
from functions.intake import sender_matches, trusted_keys
from functions.result_queues import ResultQueues
from functions.settings import Settings
from functions.telemetry import Tally
from warmpool import names
from warmpool.buckets import BucketSpec, BucketState, allot

SPEC = BucketSpec(capacity=10, refill_per_s=2)


def spec_of(_: str) -> BucketSpec:
    return SPEC


@pytest.mark.parametrize(
    ("tokens", "requests", "waits"),
    [
        (10, [{"A": 4}, {"A": 4}, {"A": 4}], [0, 0, 1.0]),
        (10, [{"A": 12}, {"A": 2}], [math.inf, 0]),
        (0, [{"A": 1}, {"A": 1}], [0.5, 1.0]),  # staggered, not all at once
        (10, [{"A": 5, "B": 11}, {"A": 5}], [math.inf, 0]),
        (3, [{"A": 4}, {"A": 2}, {"A": 2}], [1.5, 0, 2.5]),  # a later small one is still served
        (10, [{"A": 0}], [0]),
    ],
)
def test_allot_grants_in_order_and_queues_the_rest(tokens: float, requests: list, waits: list) -> None:
    states = {a: BucketState(tokens=tokens, updated_at=0.0) for a in "AB"}
    _, got = allot(states, spec_of, requests, 0.0)
    assert got == pytest.approx(waits)


def test_allot_never_leaves_a_bucket_below_zero_and_reports_only_changes() -> None:
    changed, _ = allot({"A": BucketState(tokens=5, updated_at=0)}, spec_of, [{"A": 3}, {"A": 3}], 0.0)
    assert changed["A"].tokens == pytest.approx(2)
    changed, _ = allot({"A": BucketState(tokens=5, updated_at=0)}, spec_of, [{"A": 6}], 0.0)
    assert changed == {}


def test_allot_refills_and_keeps_the_aimd_factor() -> None:
    st = BucketState(tokens=0, updated_at=0, rate_factor=0.5)
    changed, waits = allot({"A": st}, spec_of, [{"A": 1}], 2.0)
    assert waits == [0.0] and changed["A"].rate_factor > 0.5


def _ce(code: str) -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": "m"}}, "Op")


@pytest.mark.parametrize(
    ("code", "cls"),
    [
        ("RequestLimitExceeded", Throttled),
        ("InsufficientFreeAddressesInSubnet", SubnetFull),
        ("InsufficientCidrBlocks", NoCidrBlocks),
        ("PrivateIpAddressLimitExceeded", AddressLimit),
        ("IdempotentParameterMismatch", TokenMismatch),
        ("ConditionalCheckFailedException", ConditionFailed),
        ("AWS.SimpleQueueService.NonExistentQueue", QueueMissing),
        ("SomethingNew", AwsError),
    ],
)
def test_errors_are_classified_by_code(code: str, cls: type) -> None:
    err = classify(_ce(code), "Act")
    assert type(err) is cls and err.code == code and err.action == "Act"


def test_settings_from_env_reads_names_py_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(names.ENV_CLUSTER, "c1")
    monkeypatch.setenv(names.ENV_ALLOWED_SUBNETS, "subnet-a, subnet-b")
    monkeypatch.setenv(names.ENV_BUDGET_FRACTION, "0.5")
    monkeypatch.setenv(names.ENV_IDENTITY_CERTIFICATES, IdentitySigner().certificate_pem)
    s = Settings.from_env()
    assert s.cluster == "c1" and s.allowed_subnets == ("subnet-a", "subnet-b")
    assert s.bucket_spec("AttachNetworkInterface") == BucketSpec(capacity=25, refill_per_s=2.5)
    assert Settings(cluster="x").allowed_subnets == ()  # direct construction never reads the env


def test_identity_verification_is_required_unless_turned_off_explicitly(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail-closed: no certificate with verification required stops the cold
    start (from the environment, and when building the allocator)."""
    monkeypatch.setenv(names.ENV_CLUSTER, "c1")
    monkeypatch.delenv(names.ENV_IDENTITY_CERTIFICATES, raising=False)
    with pytest.raises(ValueError, match="WARMPOOL_IDENTITY_CERTIFICATES is empty"):
        Settings.from_env()
    with pytest.raises(IdentityConfigError, match="no identity certificate"):
        trusted_keys(Settings(cluster="c1"))
    monkeypatch.setenv(names.ENV_IDENTITY_CERTIFICATES, "not a certificate")
    with pytest.raises(IdentityConfigError, match="no PEM certificate"):
        trusted_keys(Settings.from_env())
    monkeypatch.setenv("WARMPOOL_IDENTITY_VERIFICATION", "off")
    monkeypatch.delenv(names.ENV_IDENTITY_CERTIFICATES)
    assert trusted_keys(Settings.from_env()) is None  # explicit, logged
    assert Settings(cluster="c1").identity_verification == "required"  # the default


def test_result_queue_naming_accepts_a_name_or_a_url_prefix() -> None:
    s = ResultQueues(object(), Settings(cluster="c"), Tally())  # type: ignore[arg-type]  # naming calls nothing
    assert s.name("i-0abc") == "warmpool-c-result-i-0abc" == names.result_queue("c", "i-0abc")
    url = "http://localhost:4566/000000000000/warmpool-c-result-"
    u = ResultQueues(object(), Settings(cluster="c", result_queue_prefix=url), Tally())  # type: ignore[arg-type]  # naming calls nothing
    assert u.name("i-1") == "warmpool-c-result-i-1" == names.result_queue_name(url, "i-1")
    assert names.result_queue("c", "*") == "warmpool-c-result-*"  # the stack's IAM pattern


def test_sender_id_is_the_session_name() -> None:
    assert sender_matches("AROAEXAMPLE:i-0123456789abcdef0", "i-0123456789abcdef0")
    assert not sender_matches("AROAEXAMPLE:i-0aaaaaaaaaaaaaaaa", "i-0123456789abcdef0")
    assert not sender_matches("", "i-0123456789abcdef0")


def test_tally_counts_per_dimension_and_drains() -> None:
    t = Tally()
    t.add("EC2Calls", Action="A")
    t.add("EC2Calls", 2, Action="B")
    t.observe("Latency", 5.0)
    assert t.get("EC2Calls") == 3 and t.get("EC2Calls", Action="B") == 2
    d = t.drain()
    assert d.get("EC2Calls") == 3 and d.samples("Latency") == [5.0] and t.get("EC2Calls") == 0


def test_the_tls_only_queue_policy_names_the_queue_in_every_partition() -> None:
    """The hostile review's finding 7: in the isolated regions the policy named an ``aws``
    ARN, so its deny matched nothing."""
    from functions.result_queues import partition_of, secure_transport_policy
    from functions.settings import Settings

    for region, partition in (
        ("us-east-1", "aws"),
        ("cn-north-1", "aws-cn"),
        ("us-gov-west-1", "aws-us-gov"),
        ("us-iso-east-1", "aws-iso"),
        ("us-isob-east-1", "aws-iso-b"),
        ("eu-isoe-west-1", "aws-iso-e"),
        ("us-isof-south-1", "aws-iso-f"),
    ):
        assert partition_of(region) == partition
        s = Settings(cluster="c", region=region, reports_queue_url=f"https://sqs.{region}.x/123456789012/r")
        doc = json.loads(secure_transport_policy(s, "q") or "{}")
        assert doc["Statement"][0]["Resource"] == f"arn:{partition}:sqs:{region}:123456789012:q"
    assert secure_transport_policy(Settings(cluster="c", reports_queue_url=""), "q") is None
