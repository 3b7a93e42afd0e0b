"""Hostile input for the CNI plugin: whatever the runtime (or anyone) puts in
stdin and the environment, ``node_agent.cni`` answers a CNI error JSON with a
spec code (or a valid result), never a traceback; malformed requests never
reach the agent. Plus the agent side of the socket fed arbitrary requests."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from emulated.clock import VirtualClock
from node_agent import cni
from node_agent.cniserver import CniService
from node_agent.datastore import Datastore
from node_agent.hostnet import PodNet
from node_agent.records import EniInfo

SPEC_CODES = {1, 2, 3, 4, 5, 6, 7, 11, 50, 100}
CNI_VARS = [
    "CNI_COMMAND",
    "CNI_CONTAINERID",
    "CNI_NETNS",
    "CNI_IFNAME",
    "CNI_ARGS",
    "CNI_PATH",
    cni.SOCKET_ENV,
    cni.TIMEOUT_ENV,
]
COMMANDS = st.sampled_from(["ADD", "DEL", "CHECK", "VERSION", "GC", "STATUS", "", "add", "ADD\x00", "BOGUS"])

json_leaf = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20)
json_value = st.recursive(
    json_leaf, lambda k: st.lists(k, max_size=4) | st.dictionaries(st.text(max_size=10), k, max_size=4), max_leaves=20
)
conf = st.fixed_dictionaries(
    {},
    optional={
        "cniVersion": st.sampled_from(["1.1.0", "1.0.0", "0.4.0", "0.3.1", "0.2.0", "9.9.9", ""]) | json_leaf,
        cni.VALID_ATTACHMENTS: json_value,
        "name": json_leaf,
        "type": json_leaf,
        "socket": json_leaf | st.just("/nonexistent/agent.sock"),
        "prevResult": json_value,
        "dns": json_value,
    },
)
stdin = (
    conf.map(json.dumps)
    | json_value.map(json.dumps)
    | st.text(max_size=200)
    | st.sampled_from(["", "{", "[" * 5000, "{}" * 3, "\x00", "null", '{"cniVersion": NaN}'])
)
env_text = st.text(max_size=40) | st.sampled_from(["", "nan", "-1", "1e999", "/run/netns/x", "eth0"])
environ = st.fixed_dictionaries(
    {"CNI_COMMAND": COMMANDS}, optional={k: env_text for k in CNI_VARS if k != "CNI_COMMAND"}
)

EXAMPLES = {"plugin": 0, "agent": 0}


class Spy:
    """Stands in for the agent: records whether anything was sent."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    def __call__(self, path: str, req: dict[str, Any], timeout: float) -> dict[str, Any]:
        self.calls.append(req)
        return {"ok": False, "code": 11, "msg": "spy"}


def _well_formed(env: dict[str, str], raw: str) -> bool:
    """What a request must look like before the plugin may forward it."""
    try:
        c = json.loads(raw) if raw.strip() else {}
    except (ValueError, RecursionError):
        return False
    if not isinstance(c, dict) or str(c.get("cniVersion", "1.0.0")) not in cni.SUPPORTED_VERSIONS:
        return False
    cmd = env.get("CNI_COMMAND")
    if cmd in ("GC", "STATUS"):
        return str(c.get("cniVersion")) == "1.1.0"
    need = ["CNI_CONTAINERID", "CNI_IFNAME"] + (["CNI_NETNS"] if cmd != "DEL" else [])
    return cmd in ("ADD", "DEL", "CHECK") and all(env.get(k) for k in need)


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(env=environ, raw=stdin)
def test_plugin_never_crashes_and_never_forwards_a_malformed_request(
    env: dict[str, str], raw: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    EXAMPLES["plugin"] += 1
    spy = Spy()
    monkeypatch.setattr(cni, "call_agent", spy)
    code, out = cni.run(env, raw)
    assert code in (0, 1)
    if code == 1:
        err = json.loads(out)
        assert set(err) == {"cniVersion", "code", "msg", "details"} and err["code"] in SPEC_CODES, err
    elif env["CNI_COMMAND"] == "VERSION":
        assert "supportedVersions" in json.loads(out)
    if spy.calls:
        assert _well_formed(env, raw), (env, raw)
        (req,) = spy.calls
        assert req["command"] == env["CNI_COMMAND"]
        json.dumps(req)  # what goes on the wire is plain JSON
    elif _well_formed(env, raw):
        # only a bad timeout may stop a well-formed request before the socket
        assert json.loads(out)["code"] == cni.E_INVALID_ENV


class NoPods:
    def __init__(self) -> None:
        self.set_up: list[str] = []

    def setup(self, netns: str, ifname: str, container_id: str, ip: str, table: int, mtu: int) -> PodNet:
        self.set_up.append(ip)
        return PodNet("eni0", "02:00:00:00:00:01", "02:00:00:00:00:02", 2)

    def teardown(self, container_id: str, ifname: str, ip: str | None) -> None:
        pass

    def check(self, netns: str, ifname: str, container_id: str, ip: str, table: int) -> list[str]:
        return []

    def host_wiring(self) -> None:
        return None


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    req=st.dictionaries(
        st.sampled_from(["command", "container_id", "ifname", "netns", "args", "config"]), json_value, max_size=6
    )
    | st.fixed_dictionaries(
        {"command": COMMANDS},
        optional={"container_id": json_value, "ifname": json_value, "netns": json_value, "config": json_value},
    )
)
def test_agent_side_answers_any_request_and_never_hands_out_two_addresses_to_one_pod(req: dict[str, Any]) -> None:
    EXAMPLES["agent"] += 1
    ds = Datastore()
    ds.add_eni(EniInfo("eni-a", 0, "02:00:00:00:00:00", "10.0.0.10", "subnet-a", "10.0.0.0/24"), 0.0)
    ds.add_addresses("eni-a", ["10.0.0.11", "10.0.0.12"])
    pods = NoPods()
    svc = CniService(ds, pods, clock=VirtualClock(1.0))
    try:
        reply = svc.handle(req)
    except Exception as exc:  # the socket handler turns these into code 5; count them as findings
        pytest.fail(f"{type(exc).__name__}: {exc} for {req!r}")
    assert isinstance(reply, dict) and isinstance(reply.get("ok"), bool)
    if not reply["ok"]:
        assert reply["code"] in SPEC_CODES
    assert len(ds.pods()) <= 1 and len(pods.set_up) <= 1
    json.dumps(reply)
