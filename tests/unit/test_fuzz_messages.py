"""Hostile input for the wire parsers: whatever arrives, the parser either
returns a valid model or raises MessageError with a reason. Never another
exception, never a half-valid model."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.helpers.messages import report
from warmpool.messages import MessageError, PoolReport, parse_report, parse_result

json_leaf = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=30)
json_value = st.recursive(
    json_leaf,
    lambda kids: st.lists(kids, max_size=5) | st.dictionaries(st.text(max_size=12), kids, max_size=5),
    max_leaves=30,
)
FIELDS = list(report().keys())


def _check(parse, raw) -> None:
    try:
        out = parse(raw)
    except MessageError as exc:
        assert exc.reason in {"oversized", "not-json", "not-an-object", "unknown-schema", "invalid"}
        return
    # Anything accepted must round-trip exactly.
    assert parse(out.to_json()) == out


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(raw=st.binary(max_size=300) | st.text(max_size=300))
def test_random_bytes_never_crash(raw):
    _check(parse_report, raw)
    _check(parse_result, raw)


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(value=json_value)
def test_random_json_never_crashes(value):
    _check(parse_report, json.dumps(value))
    _check(parse_result, json.dumps(value))


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(field=st.sampled_from(FIELDS), value=json_value)
def test_one_field_replaced_in_a_valid_report(field, value):
    raw = report()
    raw[field] = value
    _check(parse_report, json.dumps(raw))


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(
    field=st.sampled_from(["eni_id", "device_index", "subnet_id", "primary_ip", "ips", "prefixes", "assigned"]),
    value=json_value,
)
def test_one_eni_field_replaced(field, value):
    raw = report()
    raw["enis"][0][field] = value
    _check(parse_report, json.dumps(raw))


@given(
    warm_ip=st.integers(-(2**40), 2**40),
    seq=st.integers(-(2**70), 2**70),
    pending=st.integers(-(2**40), 2**40),
)
def test_absurd_numbers_are_rejected_not_acted_on(warm_ip, seq, pending):
    raw = report(seq=seq, pending_demand=pending)
    raw["targets"]["warm_ip"] = warm_ip
    try:
        r = parse_report(json.dumps(raw))
    except MessageError:
        return
    assert isinstance(r, PoolReport)
    assert 0 <= r.targets.warm_ip <= 100_000 and r.seq >= 0 and 0 <= r.pending_demand <= 100_000
