"""Every metric carries its cluster: the dimension sets the functions emit, pinned.

A CloudWatch metric is its namespace, name and full dimension set, so the dashboard's
searches and the alarms (infra/observability.py) find a series only under the exact set
it was emitted with. Powertools adds ``service`` to a single metric when
``POWERTOOLS_SERVICE_NAME`` is set: the sets must not depend on it.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from functions.observability import flush, powertools
from functions.telemetry import Tally
from tests.helpers.metric_dimensions import dimension_set, emitted_dimensions
from warmpool import names


def _emf_blobs(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{") and '"_aws"' in line]


def _sets(blobs: list[dict[str, Any]]) -> dict[str, tuple[frozenset[str], dict[str, str]]]:
    out: dict[str, tuple[frozenset[str], dict[str, str]]] = {}
    for blob in blobs:
        (directive,) = blob["_aws"]["CloudWatchMetrics"]
        assert directive["Namespace"] == names.METRICS_NAMESPACE
        (dims,) = directive["Dimensions"]
        for m in directive["Metrics"]:
            out[m["Name"]] = (frozenset(dims), {d: blob[d] for d in dims})
    return out


def test_the_scan_finds_every_kind_of_metric() -> None:
    emitted = emitted_dimensions()
    assert emitted[names.M_EC2_CALLS] == {"Action"}
    assert emitted[names.M_REPORTS_REJECTED] == {"reason"}
    assert emitted[names.M_LEDGER_DRIFT] == {"kind"}
    assert emitted[names.M_REPORTS_RECEIVED] == set()
    assert names.M_ALLOCATION_LATENCY_MS in emitted  # observed, not added
    assert len(emitted) > 30


@pytest.mark.parametrize("service_env", [None, "warmpool-demo"], ids=["no POWERTOOLS_SERVICE_NAME", "with it"])
def test_every_metric_is_emitted_under_its_clusters_pinned_dimension_set(
    service_env: str | None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    if service_env is None:
        monkeypatch.delenv("POWERTOOLS_SERVICE_NAME", raising=False)
    else:
        monkeypatch.setenv("POWERTOOLS_SERVICE_NAME", service_env)
    emitted = emitted_dimensions()
    tally = Tally()
    for name, dims in emitted.items():
        if name == names.M_ALLOCATION_LATENCY_MS:
            tally.observe(name, 12.0)
        else:
            tally.add(name, 1, **{d: "x" for d in dims})
    _logger, _tracer, metrics = powertools("allocate")
    metrics.clear_metrics()
    capsys.readouterr()
    try:
        flush(tally, metrics, "prod-1")
        metrics.flush_metrics()
    finally:
        metrics.clear_metrics()
    got = _sets(_emf_blobs(capsys.readouterr().out))
    assert set(got) == set(emitted)
    for name in emitted:
        got_dims, values = got[name]
        assert got_dims == dimension_set(name, emitted), name
        assert values["cluster"] == "prod-1", name
        if "service" in got_dims:
            assert values["service"] == "allocate", name
