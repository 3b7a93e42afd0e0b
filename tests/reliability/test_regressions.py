"""Regression tests for the bugs the reliability work found (one test per fix;
docs/reliability.md lists them)."""

from __future__ import annotations

import json
import socket
import threading
from pathlib import Path

import pytest

from node_agent import cni
from node_agent.cniserver import CniService, CniSocketServer
from node_agent.datastore import Datastore
from warmpool.clock import RealClock
from warmpool.messages import MessageError, parse_report, parse_result

DEEP = "[" * 100_000  # 100 KB: under the 256 KiB message cap, far past the interpreter's stack
ENV = {"CNI_COMMAND": "ADD", "CNI_CONTAINERID": "c1", "CNI_IFNAME": "eth0", "CNI_NETNS": "/run/netns/x"}


@pytest.mark.parametrize("parse", [parse_report, parse_result])
def test_deeply_nested_json_is_a_message_error_not_a_recursion_error(parse) -> None:  # type: ignore[no-untyped-def]
    # Was: RecursionError escaped parse_report, failing the allocator's whole batch
    # (a poison pill redelivered until the DLQ) and, in parse_result, the agent's loop.
    with pytest.raises(MessageError) as info:
        parse(DEEP)
    assert info.value.reason == "not-json"


def test_cni_plugin_answers_deep_nesting_with_a_decode_error() -> None:
    # Was: a traceback (RecursionError) instead of a CNI error JSON.
    code, out = cni.run(ENV, DEEP)
    assert code == 1 and json.loads(out)["code"] == cni.E_DECODE


@pytest.mark.parametrize("value", ["nan", "inf", "-1", "0", "1e300"])
def test_cni_plugin_rejects_an_unusable_timeout_with_code_4(value: str) -> None:
    # Was: socket.settimeout raised ValueError/OverflowError: a traceback, no CNI error.
    code, out = cni.run({**ENV, cni.TIMEOUT_ENV: value}, '{"cniVersion":"1.0.0"}')
    assert code == 1 and json.loads(out)["code"] == cni.E_INVALID_ENV


class _Liar:
    """A socket answering with a non-integer error code."""

    def __init__(self, path: str, reply: bytes) -> None:
        self.srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.srv.bind(path)
        self.srv.listen(1)
        self.reply = reply
        self.t = threading.Thread(target=self._serve, daemon=True)
        self.t.start()

    def _serve(self) -> None:
        conn, _ = self.srv.accept()
        conn.recv(65536)
        conn.sendall(self.reply)
        conn.close()
        self.srv.close()


def test_cni_plugin_survives_a_non_integer_error_code_from_the_socket(tmp_path: Path) -> None:
    # Was: int("x") raised ValueError: a traceback.
    path = str(tmp_path / "s.sock")
    _Liar(path, b'{"ok":false,"code":"x","msg":"m"}\n')
    code, out = cni.run({**ENV, cni.SOCKET_ENV: path}, '{"cniVersion":"1.0.0"}')
    assert code == 1 and json.loads(out)["code"] == cni.E_IO


class _NoPods:
    def setup(self, *a: object) -> None:
        raise AssertionError("nothing may be wired")

    def teardown(self, *a: object) -> None:
        raise AssertionError("nothing may be torn down")

    def check(self, *a: object) -> list[str]:
        raise AssertionError("nothing may be checked")


def test_agent_socket_answers_deep_nesting_with_a_decode_error(tmp_path: Path) -> None:
    # Was: RecursionError killed the request's thread; the plugin got no answer.
    srv = CniSocketServer(str(tmp_path / "a.sock"), CniService(Datastore(), _NoPods(), clock=RealClock()))  # type: ignore[arg-type]
    srv.serve_in_thread()
    try:
        with socket.socket(socket.AF_UNIX) as s:
            s.settimeout(10)
            s.connect(str(tmp_path / "a.sock"))
            s.sendall(DEEP.encode() + b"\n")
            reply = json.loads(s.makefile().readline())
        assert reply["ok"] is False and reply["code"] == 6
    finally:
        srv.shutdown()
        srv.server_close()


class _Recorder:
    def __init__(self) -> None:
        self.wired: list[str] = []

    def setup(self, netns: str, ifname: str, container_id: str, ip: str, table: int, mtu: int) -> object:
        from node_agent.hostnet import PodNet

        self.wired.append(ip)
        return PodNet("eni0", "02:00:00:00:00:01", "02:00:00:00:00:02", 2)

    def teardown(self, *a: object) -> None:
        pass

    def check(self, *a: object) -> list[str]:
        return []


@pytest.mark.parametrize(
    "config", [True, [1], "x", {"prevResult": 5}, {"prevResult": {"routes": [1]}}, {"prevResult": {"interfaces": 3}}]
)
def test_agent_rejects_a_bad_config_before_assigning_or_wiring(config: object) -> None:
    # Was: the address was assigned and the pod wired, then building the result
    # raised (AttributeError/TypeError): the plugin got "agent error" for a pod left half-made.
    from node_agent.records import EniInfo

    ds = Datastore()
    ds.add_eni(EniInfo("eni-a", 0, "02:00:00:00:00:00", "10.0.0.10", "subnet-a", "10.0.0.0/24"), 0.0)
    ds.add_addresses("eni-a", ["10.0.0.11"])
    pods = _Recorder()
    reply = CniService(ds, pods, clock=RealClock()).handle(  # type: ignore[arg-type]
        {"command": "ADD", "container_id": "c", "ifname": "eth0", "netns": "/x", "config": config}
    )
    assert reply["ok"] is False and reply["code"] == 6
    assert ds.pods() == [] and pods.wired == []
