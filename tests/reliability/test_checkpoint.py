"""The agent's checkpoint truncated or corrupted: a clear error, never a silent
double assignment, never a traceback. Truncation at every byte, hypothesis
mutations of a real snapshot, and the agent's own start-up (a rebuild; the
real-namespace version is tests/integration/test_agent_rebuild.py)."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import boto3
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from moto import mock_aws

from node_agent.agent import Agent
from node_agent.checkpoint import CheckpointError, FileCheckpoint
from node_agent.config import load
from node_agent.controller import PoolController
from node_agent.datastore import Datastore
from node_agent.imds import ImdsClient
from node_agent.records import EniInfo, NodeIdentity
from tests.helpers.fakenode import FakeEni, FakeImdsServer, FakeInstance
from warmpool.clock import RealClock
from warmpool.limits import known
from warmpool.pool import PoolConfig

PRIMARY = EniInfo("eni-0000000000000000a", 0, "0a:00:00:00:00:0a", "10.0.0.10", "subnet-a", "10.0.0.0/24")
SECOND = EniInfo("eni-0000000000000000b", 1, "0a:00:00:00:00:0b", "10.0.0.20", "subnet-a", "10.0.0.0/24")
ID = NodeIdentity("demo", "node-1", "i-0123456789abcdef0", "m5.large", "us-east-1a")


_GOOD: list[bytes] = []


def snapshot(path: Path) -> bytes:
    if _GOOD:
        path.write_bytes(_GOOD[0])
        return _GOOD[0]
    ds = Datastore(checkpoint=FileCheckpoint(str(path)))
    ds.add_eni(PRIMARY, 0.0)
    ds.add_eni(SECOND, 0.0)
    ds.add_addresses(PRIMARY.eni_id, [f"10.0.0.{i}" for i in range(11, 16)])
    ds.add_addresses(SECOND.eni_id, prefixes=["10.0.0.32/28"])
    for i in range(7):
        ds.assign(f"c{i}", "eth0", f"/run/netns/p{i}", 1.0)
    ds.release("c3", "eth0", 2.0)
    ds.quarantine(PRIMARY.eni_id, ["10.0.0.15"], [], 3.0)
    ds.set_meta("last_seq", 42)
    # A released address and a deleted ENI IMDS may still list, and a claim waiting for IMDS.
    ds.mark_gone(4.0, 124.0, 41, released=["10.0.0.14", "10.0.0.48/28"], deleted=["eni-0000000000000000c"])
    ds.set_parked(
        [
            {
                "action": {"kind": "assigned", "eni_id": SECOND.eni_id, "ips": ["10.0.0.29"], "prefixes": []},
                "first": 4.0,
                "seq": 42,
            }
        ]
    )
    _GOOD.append(path.read_bytes())
    return _GOOD[0]


def consistent(ds: Datastore) -> None:
    """A restored datastore never holds an address twice, and every address is one."""
    pods = ds.pods()
    ips = [p.ip for p in pods]
    assert len(ips) == len(set(ips)), ips
    seen: set[str] = set()
    for e in ds.enis():
        for ip in e.addrs:
            assert ip not in seen, ip
            seen.add(ip)
    for p in pods:
        assert p.ip in seen


def restore(path: Path) -> Datastore | CheckpointError:
    ds = Datastore(checkpoint=FileCheckpoint(str(path)))
    try:
        ds.restore()
    except CheckpointError as exc:
        assert str(exc), "the error must say what is wrong"
        assert ds.enis() == [] and ds.pods() == [], "nothing half-restored"
        return exc
    consistent(ds)
    # The controller reads the parked claims back: a damaged one is dropped, never a traceback.
    ctl = PoolController(ID, known("m5.large"), PoolConfig(warm_ip=1), ds)
    ctl.resync(10.0)
    return ds


def test_truncated_at_every_byte(tmp_path: Path) -> None:
    good = snapshot(tmp_path / "cp.json")
    assert isinstance(restore(tmp_path / "cp.json"), Datastore)
    errors = 0
    for n in range(len(good)):
        (tmp_path / "cp.json").write_bytes(good[:n])
        out = restore(tmp_path / "cp.json")
        errors += isinstance(out, CheckpointError)
    assert errors >= len(good) - 1  # only the empty file may read as "no checkpoint"... or not at all


def _mutate(obj: Any, path: list[Any], value: Any) -> Any:
    if not path:
        return value
    head, rest = path[0], path[1:]
    if isinstance(obj, dict) and obj:
        key = list(obj)[head % len(obj)]
        return {**obj, key: _mutate(obj[key], rest, value)}
    if isinstance(obj, list) and obj:
        i = head % len(obj)
        return [*obj[:i], _mutate(obj[i], rest, value), *obj[i + 1 :]]
    return value


json_leaf = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20)
json_value = st.recursive(
    json_leaf, lambda k: st.lists(k, max_size=3) | st.dictionaries(st.text(max_size=8), k, max_size=3), max_leaves=8
)


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(path=st.lists(st.integers(0, 50), min_size=1, max_size=6), value=json_value)
def test_mutated_snapshots_restore_consistently_or_fail_clearly(tmp_path: Path, path: list[int], value: Any) -> None:
    good = json.loads(snapshot(tmp_path / "m.json"))
    (tmp_path / "m.json").write_text(json.dumps(_mutate(good, path, value)))
    restore(tmp_path / "m.json")


@settings(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(raw=st.binary(max_size=400))
def test_random_bytes_fail_clearly(tmp_path: Path, raw: bytes) -> None:
    (tmp_path / "r.json").write_bytes(raw)
    restore(tmp_path / "r.json")


@pytest.mark.parametrize("damage", ["truncated", "garbage", "wrong-version", "bad-address"])
def test_agent_rebuilds_from_a_damaged_checkpoint_with_a_clear_error_and_hands_out_nothing_twice(
    tmp_path: Path, damage: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Was: the agent refused to start (exit 1, no CNI socket). Now it starts and rebuilds:
    the error names the file and the damage, the file is kept aside, and since the pod
    network here is ``recorded`` (no kernel wiring to read) every address the old
    checkpoint may have handed out is held: still nothing can be given out twice."""
    state = tmp_path / "state"
    state.mkdir()
    good = snapshot(state / "checkpoint.json")
    bad = {
        "truncated": good[: len(good) // 2],
        "garbage": b"\x00\xff" * 50,
        "wrong-version": good.replace(b'"version":1', b'"version":7'),
        "bad-address": good.replace(b"10.0.0.11", b"10.0.0.999"),
    }[damage]
    assert bad != good
    (state / "checkpoint.json").write_bytes(bad)
    iid = "i-0123456789abcdef0"
    ips = [f"10.0.0.{i}" for i in range(11, 16)]
    with mock_aws(), FakeImdsServer() as imds:
        imds.instances[iid] = FakeInstance(
            iid,
            "m5.large",
            "us-east-1a",
            [FakeEni(PRIMARY.eni_id, PRIMARY.mac, 0, PRIMARY.primary_ip, "subnet-a", "10.0.0.0/24", ips=ips)],
        )
        sqs = boto3.client("sqs", region_name="us-east-1")
        env = {
            "CLUSTER_NAME": "demo",
            "WARMPOOL_REPORTS_QUEUE_URL": sqs.create_queue(QueueName="r")["QueueUrl"],
            "WARMPOOL_STATE_DIR": str(state),
            "WARMPOOL_SOCKET": str(tmp_path / "a.sock"),
            "WARMPOOL_METRICS_ADDR": "127.0.0.1:0",
            "WARMPOOL_MANAGE_HOST_NETWORK": "false",
            "WARMPOOL_POD_NETWORK": "recorded",
            "WARMPOOL_ADD_WAIT_S": "0",
        }
        agent = Agent(load(env), sqs, ImdsClient(imds.url_for(iid)), poll_wait_s=1, serve_http=False, clock=RealClock())
        try:
            with caplog.at_level(logging.INFO, logger="warmpool.agent"):
                agent.start()
            errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
            assert any(str(state / "checkpoint.json") in m and "damaged" in m for m in errors), errors
            kept = [p for p in state.iterdir() if p.name.startswith("checkpoint.json.corrupt-")]
            assert [p.read_bytes() for p in kept] == [bad], "the evidence is kept for the operator"
            assert json.loads((state / "checkpoint.json").read_bytes())["version"] == 2, "a rebuilt checkpoint"
            # every attached address may belong to a pod the old checkpoint knew: none is handed out
            assert sorted(h.ip for h in agent.ds.recovered_holders()) == ips
            reply = agent.cni.handle(
                {"command": "ADD", "container_id": "new", "ifname": "eth0", "netns": "/x", "config": {}}
            )
            assert reply["ok"] is False and reply["code"] == 11, reply
            assert agent.counters["checkpoint_rebuilds_damaged"] == 1
            assert agent.counters["recovered_holders"] == len(ips)
        finally:
            agent.stop()
