"""Hostile input through the allocator (rejected, counted, zero EC2 mutating
calls) and the agent's local surfaces (unix socket 0600 root-owned in a
directory others cannot write; HTTP bound to 127.0.0.1 only)."""

from __future__ import annotations

import json
import os
import stat
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from functions import allocator
from node_agent import http as web
from node_agent.cniserver import CniService, CniSocketServer
from node_agent.config import load
from node_agent.datastore import Datastore
from tests.helpers.allocate_world import AllocatorWorld
from warmpool.clock import RealClock
from warmpool.limits import known
from warmpool.messages import MAX_MESSAGE_BYTES


def _mutating(w: AllocatorWorld) -> int:
    return w.mutating_calls()


def _reasons(w: AllocatorWorld) -> Counter[str]:
    return Counter(m["MessageAttributes"]["reason"]["StringValue"] for m in w.queued(w.dlq_url))


def _base(w: AllocatorWorld) -> dict[str, Any]:
    return json.loads(w.report("n1", warm_ip=2).to_json())


def test_every_kind_of_hostile_report_is_rejected_counted_and_costs_no_ec2_call() -> None:
    w = AllocatorWorld()
    w.add_node("n1")
    w.add_node("n2")
    foreign = w.add_node("x", cluster_tag=None)
    r = _base(w)
    other_eni = w.enis("n2")[0]
    hostile = {
        "oversized": "x" * (MAX_MESSAGE_BYTES + 1),
        "unknown-schema": json.dumps({**r, "schema": "warmpool.report/v2"}),
        "foreign-cluster": json.dumps({**r, "cluster": "prod"}),
        "instance-not-found": json.dumps(
            {
                **r,
                "instance_id": "i-0badbadbadbadbad0",
                "node": "ghost",
                "identity": w.signed("i-0badbadbadbadbad0", r["instance_type"]),
                # sent longer ago than an unlisted instance's grace: refused, not waited for
                # (a young one waits: tests/integration/test_allocate_rejects.py)
                "sent_at": r["sent_at"] - allocator.UNLISTED_GRACE_S - 1,
            }
        ),
        "foreign-instance": json.dumps(
            {**r, "instance_id": foreign, "node": "x", "identity": w.signed(foreign, r["instance_type"])}
        ),
        "identity-instance-mismatch": json.dumps({**r, "instance_id": w.nodes["n2"], "node": "n2"}),
        "identity-missing": json.dumps({k: v for k, v in r.items() if k != "identity"}),
        "foreign-eni": json.dumps(
            {
                **r,
                "enis": [
                    *r["enis"],
                    {
                        "eni_id": other_eni.id,
                        "device_index": 1,
                        "subnet_id": other_eni.subnet_id,
                        "primary_ip": other_eni.primary_ip,
                        "ips": [],
                        "prefixes": [],
                        "assigned": 0,
                    },
                ],
            }
        ),
        "negative-target": json.dumps({**r, "targets": {**r["targets"], "warm_ip": -5}}),
        "absurd-target": json.dumps({**r, "targets": {**r["targets"], "warm_ip": 10**9}}),
        "negative-seq": json.dumps({**r, "seq": -1}),
        "unknown-field": json.dumps({**r, "run_as": "root"}),
        "not-an-object": "[1, 2, 3]",
        "not-json": "\x00\xff",
        "deep": "[" * 100_000,
    }
    out = w.deliver(list(hostile.values()))
    assert out.failed_message_ids == [] and out.served == 0
    assert out.invalid + out.rejected == len(hostile)
    assert _mutating(w) == 0
    reasons = _reasons(w)
    assert sum(reasons.values()) == len(hostile)
    assert {
        "oversized",
        "unknown-schema",
        "foreign-cluster",
        "instance-not-found",
        "foreign-instance",
        "foreign-eni",
        "invalid",
        "not-an-object",
        "not-json",
        "identity-instance-mismatch",
        "identity-missing",
    } <= set(reasons), reasons
    assert w.tally.get("ReportsInvalid") + w.tally.get("ReportsRejected") == len(hostile)


def test_a_large_but_legal_target_is_capped_by_the_instance_limits() -> None:
    w = AllocatorWorld()
    w.add_node("n1", "m5.large")
    w.deliver([w.report("n1", warm_ip=100_000, pending=100_000)])
    w.drain()
    assert w.addresses("n1") == known("m5.large").capacity(prefix_mode=False)


def test_a_node_spoofing_another_node_in_sender_id_mode_is_rejected_without_a_call() -> None:
    w = AllocatorWorld(identity_mode="sender-id")
    w.add_node("n1")
    victim = w.add_node("n2")
    spoof = w.report("n2", warm_ip=30)
    out = w.alloc.handle_batch(w.records([spoof], sender=f"AROAEXAMPLE:{w.nodes['n1']}"))
    assert out.rejected == 1 and _mutating(w) == 0
    assert _reasons(w) == Counter({"sender-mismatch": 1}) and w.addresses("n2") == 0 and victim


EXAMPLES = {"allocator": 0}


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(
    field=st.sampled_from(
        [
            "cluster",
            "node",
            "instance_id",
            "instance_type",
            "seq",
            "mode",
            "targets",
            "enis",
            "assigned_ips",
            "pending_demand",
            "release",
            "schema",
            "sent_at",
        ]
    ),
    value=st.none()
    | st.integers()
    | st.floats()
    | st.text(max_size=30)
    | st.lists(st.integers(), max_size=3)
    | st.dictionaries(st.text(max_size=5), st.integers(), max_size=3),
)
def test_fuzzed_fields_through_the_allocator_never_crash_and_never_mutate_unless_valid(field: str, value: Any) -> None:
    EXAMPLES["allocator"] += 1
    w = AllocatorWorld()
    w.add_node("n1")
    r = json.loads(w.report("n1").to_json())  # targets 0: a valid report needs no call at all
    r[field] = value
    out = w.deliver([json.dumps(r)])
    assert out.failed_message_ids == []
    assert out.invalid + out.rejected + out.served + out.noop + out.stale + out.deferred + out.failed >= 1
    if out.invalid + out.rejected:
        assert _mutating(w) == 0


# --- local surfaces ------------------------------------------------------------------------


def test_cni_socket_is_0600_root_owned_in_a_directory_others_cannot_write(tmp_path: Path) -> None:
    path = tmp_path / "run" / "warmpool" / "agent.sock"
    srv = CniSocketServer(str(path), CniService(Datastore(), None, clock=RealClock()))  # type: ignore[arg-type]
    try:
        st_sock = os.stat(path)
        assert stat.S_ISSOCK(st_sock.st_mode)
        assert stat.S_IMODE(st_sock.st_mode) == 0o600
        assert st_sock.st_uid == os.geteuid()
        st_dir = os.stat(path.parent)
        assert stat.S_IMODE(st_dir.st_mode) & 0o022 == 0, oct(st_dir.st_mode)
        assert st_dir.st_uid == os.geteuid()
        if os.geteuid() == 0:
            assert st_sock.st_uid == 0
    finally:
        srv.server_close()


def test_cni_socket_replaces_a_planted_file_and_stays_private(tmp_path: Path) -> None:
    path = tmp_path / "agent.sock"
    path.write_text("planted")
    os.chmod(path, 0o666)
    srv = CniSocketServer(str(path), CniService(Datastore(), None, clock=RealClock()))  # type: ignore[arg-type]
    try:
        assert stat.S_ISSOCK(os.stat(path).st_mode) and stat.S_IMODE(os.stat(path).st_mode) == 0o600
    finally:
        srv.server_close()


def test_introspection_defaults_to_loopback_and_binds_only_there() -> None:
    cfg = load({"CLUSTER_NAME": "demo", "WARMPOOL_REPORTS_QUEUE_URL": "http://q"})
    host, _ = cfg.metrics_host_port
    assert host == "127.0.0.1"
    srv = web.HttpServer(
        host, 0, metrics=web.Metrics(), views={"/v1/pods": list}, healthy=lambda: (True, ""), ready=lambda: (True, "")
    )
    srv.serve_in_thread()
    try:
        h, port = srv.address
        assert h == "127.0.0.1"
        assert urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/pods", timeout=5).status == 200
        import socket

        addrs = {a[4][0] for a in socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET)}
        for a in addrs - {"127.0.0.1", "127.0.1.1"}:
            with pytest.raises(OSError):
                socket.create_connection((str(a), port), timeout=2).close()
    finally:
        srv.close()


def test_config_view_shows_no_secrets() -> None:
    cfg = load(
        {
            "CLUSTER_NAME": "demo",
            "WARMPOOL_REPORTS_QUEUE_URL": "http://q",
            "AWS_SECRET_ACCESS_KEY": "sekrit",
            "AWS_SESSION_TOKEN": "tok",
            "AWS_ACCESS_KEY_ID": "AKIAX",
        }
    )
    text = json.dumps(cfg.public(), default=str)
    assert "sekrit" not in text and 'tok"' not in text and "AKIAX" not in text
