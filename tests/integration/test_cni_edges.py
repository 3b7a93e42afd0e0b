"""CNI edge cases (issue 11, defect 5): oversize input, silent or slow peers on the
socket, GC against the runtime's valid attachments, STATUS, and interface names
and namespaces that are not a pod's. The plugin runs as a real process (as a
runtime runs it); the agent side is the real socket server over a recorder."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from emulated.clock import VirtualClock
from node_agent import cni
from node_agent.cniserver import CniService, CniSocketServer
from node_agent.datastore import Datastore
from node_agent.hostnet import PodNet, ifname_problem, netns_problem
from node_agent.records import EniInfo

ENI = EniInfo("eni-a", 0, "02:00:00:00:00:00", "10.0.0.10", "subnet-a", "10.0.0.0/24")
CONF = {"cniVersion": "1.0.0", "name": "warmpool", "type": "warmpool-cni"}
CONF11 = {**CONF, "cniVersion": "1.1.0"}
PLUGIN = Path(cni.__file__)


class Pods:
    def __init__(self) -> None:
        self.wired: dict[tuple[str, str], str] = {}
        self.torn: list[tuple[str, str, str | None]] = []

    def setup(self, netns: str, ifname: str, container_id: str, ip: str, table: int, mtu: int) -> PodNet:
        self.wired[(container_id, ifname)] = ip
        return PodNet("eni0", "02:00:00:00:00:01", "02:00:00:00:00:02", 2)

    def teardown(self, container_id: str, ifname: str, ip: str | None) -> None:
        self.wired.pop((container_id, ifname), None)
        self.torn.append((container_id, ifname, ip))

    def check(self, netns: str, ifname: str, container_id: str, ip: str, table: int) -> list[str]:
        return []

    def host_wiring(self) -> None:
        return None


def _ds(n: int = 4) -> Datastore:
    ds = Datastore(cooldown_s=30.0)
    ds.add_eni(ENI, 0.0)
    ds.add_addresses(ENI.eni_id, [f"10.0.0.{11 + i}" for i in range(n)])
    return ds


def _add(cid: str, ifname: str = "eth0", netns: str = "/run/netns/p") -> dict[str, Any]:
    return {"command": "ADD", "container_id": cid, "ifname": ifname, "netns": netns, "config": CONF}


def _gc(valid: list[tuple[str, str]], **extra: Any) -> dict[str, Any]:
    conf = {**CONF11, cni.VALID_ATTACHMENTS: [{"containerID": c, "ifname": i} for c, i in valid], **extra}
    return {"command": "GC", "config": conf}


def plugin(env: dict[str, str], stdin: bytes, timeout: float = 30) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-S", str(PLUGIN)],
        input=stdin,
        capture_output=True,
        timeout=timeout,
        env={"PATH": "/usr/bin:/bin", "CNI_PATH": "/opt/cni/bin", **env},
    )


def _cni_error(p: subprocess.CompletedProcess[bytes]) -> dict[str, Any]:
    assert p.returncode == 1 and b"Traceback" not in p.stderr, p.stderr.decode()[-2000:]
    err = json.loads(p.stdout)
    assert set(err) == {"cniVersion", "code", "msg", "details"}, err
    return err


class Agent:
    def __init__(self, path: str, svc: CniService, server: CniSocketServer) -> None:
        self.path, self.svc, self.server = path, svc, server


@pytest.fixture
def agent(tmp_path: Path) -> Iterator[Agent]:
    ds = _ds()
    svc = CniService(ds, Pods(), clock=VirtualClock(1000.0))
    path = str(tmp_path / "agent.sock")
    server = CniSocketServer(path, svc, read_timeout_s=1.0)
    server.serve_in_thread()
    try:
        yield Agent(path, svc, server)
    finally:
        server.shutdown()
        server.server_close()


def _env(agent_path: str, command: str = "ADD", cid: str = "c1", **more: str) -> dict[str, str]:
    return {
        "CNI_COMMAND": command,
        "CNI_CONTAINERID": cid,
        "CNI_IFNAME": "eth0",
        "CNI_NETNS": "/run/netns/p",
        "WARMPOOL_SOCKET": agent_path,
        **more,
    }


# --- (a) oversize configuration ------------------------------------------------------------


def test_a_config_over_1_mib_is_a_cni_error_not_a_broken_pipe_traceback(agent: Agent) -> None:
    # Was: the agent stopped reading at 1 MiB and the plugin died in sendall with a BrokenPipe traceback.
    big = json.dumps({**CONF, "pad": "x" * (3 << 20)}).encode()
    err = _cni_error(plugin(_env(agent.path), big))
    assert err["code"] == cni.E_INVALID_CONFIG and "too large" in err["msg"]
    assert agent.svc.ds.pods() == []


def test_a_config_just_under_the_limit_is_served(agent: Agent) -> None:
    pad = cni.MAX_CONFIG_BYTES - len(json.dumps({**CONF, "pad": ""}).encode()) - 10
    conf = json.dumps({**CONF, "pad": "x" * pad}).encode()
    assert cni.MAX_CONFIG_BYTES - 20 < len(conf) <= cni.MAX_CONFIG_BYTES
    p = plugin(_env(agent.path), conf)
    assert p.returncode == 0, p.stdout + p.stderr
    assert json.loads(p.stdout)["ips"][0]["address"] == "10.0.0.11/32"


def test_stdin_that_is_not_utf8_is_a_decode_error(agent: Agent) -> None:
    err = _cni_error(plugin(_env(agent.path), b'{"cniVersion":"1.0.0","name":"\xff\xfe"}'))
    assert err["code"] == cni.E_DECODE


def test_non_ascii_text_and_lone_surrogate_escapes_reach_the_agent(agent: Agent) -> None:
    for extra in ('"ネットワーク"', '"\\udc80"'):
        conf = ('{"cniVersion":"1.0.0","name":"warmpool","type":"warmpool-cni","note":' + extra + "}").encode()
        p = plugin(_env(agent.path, cid=f"c{len(extra)}"), conf)
        assert p.returncode == 0, p.stdout + p.stderr


def test_the_agent_refuses_an_oversize_request_line_with_a_cni_error(agent: Agent) -> None:
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(10)
        s.connect(agent.path)
        try:
            s.sendall(b'{"command":"ADD","pad":"' + b"x" * (cni.MAX_REQUEST_BYTES + 10) + b'"}\n')
        except OSError:
            pass  # it stopped reading: its answer is still there to read
        reply = json.loads(s.makefile("rb").readline())
    assert reply["ok"] is False and reply["code"] == cni.E_INVALID_CONFIG and "too large" in reply["msg"]


# --- (b) timeouts on both sides ----------------------------------------------------------------


def test_the_agent_answers_a_silent_client_within_its_read_timeout(agent: Agent) -> None:
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(10)
        s.connect(agent.path)
        reply = json.loads(s.makefile("rb").readline())  # sends nothing at all
    assert reply["ok"] is False and reply["code"] == cni.E_IO and "not received in time" in reply["msg"]


def test_the_agent_bounds_the_whole_request_not_each_read(agent: Agent) -> None:
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(10)
        s.connect(agent.path)
        started = time.monotonic()
        reply: dict[str, Any] = {}
        s.setblocking(False)
        while not reply and time.monotonic() - started < 8:  # a byte every 0.1 s: each read is quick
            try:
                s.send(b" ")
            except OSError:
                pass
            time.sleep(0.1)
            try:
                data = s.recv(65536)
            except BlockingIOError:
                continue
            reply = json.loads(data)
    assert reply and reply["code"] == cni.E_IO and "not received in time" in reply["msg"]


def _fake_agent(path: str, behaviour: str, stop: threading.Event) -> threading.Thread:
    """'silent': accepts, never reads nor answers; 'drip': reads, then answers one byte every 0.2 s."""
    srv = socket.socket(socket.AF_UNIX)
    srv.bind(path)
    srv.listen(4)
    srv.settimeout(0.2)

    def run() -> None:
        conns = []
        try:
            while not stop.is_set():
                try:
                    c, _ = srv.accept()
                except TimeoutError:
                    continue
                conns.append(c)
                if behaviour == "drip":
                    c.settimeout(5)
                    c.recv(1 << 20)
                    while not stop.is_set():
                        try:
                            c.send(b" ")
                        except OSError:
                            break
                        time.sleep(0.2)
        finally:
            for c in conns:
                c.close()
            srv.close()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def test_the_plugin_gives_up_on_an_agent_that_never_reads_with_a_cni_error(tmp_path: Path) -> None:
    # Was: sendall timed out with an uncaught TimeoutError: a traceback, no CNI error.
    path, stop = str(tmp_path / "silent.sock"), threading.Event()
    t = _fake_agent(path, "silent", stop)
    try:
        big = json.dumps({**CONF, "pad": "x" * (900 << 10)}).encode()  # more than the socket buffer holds
        err = _cni_error(plugin(_env(path, WARMPOOL_CNI_TIMEOUT_S="1"), big, timeout=20))
        assert err["code"] == cni.E_TRY_AGAIN_LATER and "in time" in err["msg"]
    finally:
        stop.set()
        t.join(5)


def test_the_plugin_bounds_the_whole_exchange_not_each_read(tmp_path: Path) -> None:
    # Was: each recv had the timeout, so an agent answering a byte at a time held the runtime forever.
    path, stop = str(tmp_path / "drip.sock"), threading.Event()
    t = _fake_agent(path, "drip", stop)
    try:
        err = _cni_error(plugin(_env(path, WARMPOOL_CNI_TIMEOUT_S="1"), json.dumps(CONF).encode(), timeout=15))
        assert err["code"] == cni.E_TRY_AGAIN_LATER and "did not answer in time" in err["msg"]
    finally:
        stop.set()
        t.join(5)


# --- (c) GC and STATUS ---------------------------------------------------------------------------


def test_gc_releases_every_unlisted_attachment_and_never_a_listed_one() -> None:
    ds, pods = _ds(5), Pods()
    clock = VirtualClock(0.0)
    svc = CniService(ds, pods, clock=clock, gc_min_age_s=60.0)
    for cid in ("keep", "leak1", "leak2"):
        assert svc.handle(_add(cid))["ok"]
    clock.set(30.0)
    assert svc.handle(_add("young"))["ok"]
    held = {p.container_id: p.ip for p in ds.pods()}
    clock.set(80.0)
    reply = svc.handle(_gc([("keep", "eth0"), ("gone-already", "eth0")]))
    assert reply == {"ok": True}
    assert {p.container_id for p in ds.pods()} == {"keep", "young"}  # young: its ADD may not be listed yet
    assert sorted(c for c, _, _ in pods.torn) == ["leak1", "leak2"]
    assert ds.counts(80.0).cooldown == 2 and svc.stats.gc_released == 2  # into cooldown, not to another pod
    new = svc.handle(_add("new0"))["result"]["ips"][0]["address"].removesuffix("/32")
    assert new not in (held["leak1"], held["leak2"])
    # a second GC changes nothing more; a listed attachment on another interface is its own key
    assert svc.handle(_gc([("keep", "eth0"), ("young", "eth0"), ("new0", "eth0")])) == {"ok": True}
    assert {p.container_id for p in ds.pods()} == {"keep", "young", "new0"}


def test_gc_leaves_an_attachment_with_an_operation_in_flight_alone() -> None:
    ds, gate, entered = _ds(), threading.Event(), threading.Event()

    class Slow(Pods):
        def setup(self, netns: str, ifname: str, container_id: str, ip: str, table: int, mtu: int) -> PodNet:
            entered.set()
            assert gate.wait(10)
            return super().setup(netns, ifname, container_id, ip, table, mtu)

    svc = CniService(ds, Slow(), clock=VirtualClock(1000.0), gc_min_age_s=0.0)
    t = threading.Thread(target=svc.handle, args=(_add("inflight"),))
    t.start()
    assert entered.wait(10)
    assert svc.handle(_gc([])) == {"ok": True}
    gate.set()
    t.join(10)
    assert [p.container_id for p in ds.pods()] == ["inflight"]


def test_gc_that_does_not_say_what_is_valid_releases_nothing() -> None:
    ds, pods = _ds(), Pods()
    svc = CniService(ds, pods, clock=VirtualClock(1000.0), gc_min_age_s=0.0)
    assert svc.handle(_add("c1"))["ok"]
    for conf, code in [
        (CONF11, 7),
        ({**CONF11, cni.VALID_ATTACHMENTS: "c1"}, 7),
        ({**CONF11, cni.VALID_ATTACHMENTS: [{"containerID": "c1"}]}, 7),
        ({**CONF, cni.VALID_ATTACHMENTS: []}, 1),
        ([], 6),
    ]:
        reply = svc.handle({"command": "GC", "config": conf})
        assert reply["ok"] is False and reply["code"] == code, (conf, reply)
    assert [p.container_id for p in ds.pods()] == ["c1"] and pods.torn == []


def test_gc_through_the_plugin_recovers_an_address_leaked_by_an_interrupted_add(agent: Agent) -> None:
    # An ADD recorded its address, then the runtime never heard back (plugin killed) and never sent DEL.
    assert agent.svc.handle(_add("interrupted"))["ok"]
    assert agent.svc.handle(_add("alive"))["ok"]
    agent.svc.gc_min_age_s = 0.0
    conf = {**CONF11, cni.VALID_ATTACHMENTS: [{"containerID": "alive", "ifname": "eth0"}]}
    p = plugin({"CNI_COMMAND": "GC", "WARMPOOL_SOCKET": agent.path}, json.dumps(conf).encode())
    assert p.returncode == 0 and p.stdout.strip() == b"", p.stdout + p.stderr
    assert [r.container_id for r in agent.svc.ds.pods()] == ["alive"]
    assert agent.svc.ds.counts(1000.0).cooldown == 1


def test_gc_and_status_need_spec_1_1(agent: Agent) -> None:
    for command in ("GC", "STATUS"):
        err = _cni_error(plugin({"CNI_COMMAND": command, "WARMPOOL_SOCKET": agent.path}, json.dumps(CONF).encode()))
        assert err["code"] == cni.E_INCOMPATIBLE_VERSION and command in err["msg"]


def test_status_is_ready_with_a_ready_eni_and_50_otherwise(agent: Agent, tmp_path: Path) -> None:
    conf = json.dumps(CONF11).encode()
    p = plugin({"CNI_COMMAND": "STATUS", "WARMPOOL_SOCKET": agent.path}, conf)
    assert p.returncode == 0 and p.stdout.strip() == b"", p.stdout + p.stderr
    agent.svc.ds.set_ready(ENI.eni_id, ready=False)
    err = _cni_error(plugin({"CNI_COMMAND": "STATUS", "WARMPOOL_SOCKET": agent.path}, conf))
    assert err["code"] == 50 and "ENI" in err["details"]
    err = _cni_error(plugin({"CNI_COMMAND": "STATUS", "WARMPOOL_SOCKET": str(tmp_path / "nobody.sock")}, conf))
    assert err["code"] == 50 and "not reachable" in err["msg"]


# --- (d) interface names and namespaces --------------------------------------------------------


@pytest.mark.parametrize("ifname", ["x" * 16, "eth/0", "eth 0", ".", "..", "a:b", "eth\t0", "é" * 8, "a\x00b"])
def test_an_invalid_interface_name_is_refused_before_anything_is_taken(ifname: str) -> None:
    ds, pods = _ds(), Pods()
    svc = CniService(ds, pods, clock=VirtualClock(1.0))
    reply = svc.handle(_add("c1", ifname))
    assert reply["ok"] is False and reply["code"] == cni.E_INVALID_ENV and "CNI_IFNAME" in reply["msg"], reply
    assert ds.pods() == [] and pods.wired == {} and ds.counts(1.0).pending == 0
    check = svc.handle({**_add("c1", ifname), "command": "CHECK"})
    assert check["ok"] is False and check["code"] == cni.E_INVALID_ENV


def test_valid_interface_names_pass() -> None:
    for name in ("eth0", "net1", "x" * 15, "a.b-c_d", "é" * 7):
        assert ifname_problem(name) is None, name


def test_a_namespace_check_refusal_takes_and_wires_nothing() -> None:
    ds = _ds()

    class Guarded(Pods):
        def check_netns(self, netns: str) -> str | None:
            return netns_problem(netns)

    pods = Guarded()
    svc = CniService(ds, pods, clock=VirtualClock(1.0))
    for netns in ("/proc/self/ns/net", "/proc/1/ns/net", "/nonexistent/netns", "/etc/hostname"):
        reply = svc.handle(_add("c1", "eth0", netns))
        assert reply["ok"] is False and reply["code"] == cni.E_INVALID_ENV and "CNI_NETNS" in reply["msg"], reply
    assert ds.pods() == [] and pods.wired == {}


def test_netns_problem_names_the_host_and_agent_namespaces() -> None:
    assert "agent's own" in (netns_problem("/proc/self/ns/net") or "")
    assert "not a namespace" in (netns_problem("/etc/hostname") or "")
    assert "No such file" in (netns_problem("/nonexistent/ns") or "")
    assert "not a network namespace" in (netns_problem("/proc/self/ns/mnt") or "")
    if os.path.exists("/proc/1/ns/net") and os.access("/proc/1/ns/net", os.R_OK):
        assert netns_problem("/proc/1/ns/net") is not None
