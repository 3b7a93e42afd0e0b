"""The kubelet's pod-network calls on containerd's CRI socket (``runtime.v1``):
RunPodSandbox, PodSandboxStatus, StopPodSandbox, RemovePodSandbox (and Version,
ListPodSandbox) over gRPC, with the few protobuf messages encoded by hand (field
numbers from ``k8s.io/cri-api/pkg/apis/runtime/v1/api.proto``), so no generated
code is needed.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass


def _varint(n: int) -> bytes:
    out = bytearray()
    n &= (1 << 64) - 1
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _field(num: int, value: bytes | str | int | bool) -> bytes:
    if isinstance(value, bool | int):
        return _varint(num << 3) + _varint(int(value))
    raw = value.encode() if isinstance(value, str) else value
    return _varint(num << 3 | 2) + _varint(len(raw)) + raw


def _decode(buf: bytes) -> dict[int, list[bytes | int]]:
    """One protobuf message level: field number -> values (bytes for length-delimited, int for varint)."""
    out: dict[int, list[bytes | int]] = {}
    i = 0

    def varint() -> int:
        nonlocal i
        shift = result = 0
        while True:
            b = buf[i]
            i += 1
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result
            shift += 7

    while i < len(buf):
        key = varint()
        num, wt = key >> 3, key & 7
        if wt == 0:
            out.setdefault(num, []).append(varint())
        elif wt == 2:
            n = varint()
            out.setdefault(num, []).append(buf[i : i + n])
            i += n
        elif wt == 1:
            i += 8
        elif wt == 5:
            i += 4
        else:
            raise ValueError(f"protobuf wire type {wt} not supported")
    return out


def _str(msg: dict[int, list[bytes | int]], num: int) -> str:
    v = msg.get(num, [b""])[0]
    return v.decode() if isinstance(v, bytes) else str(v)


@dataclass(frozen=True)
class PortMapping:
    container_port: int
    host_port: int
    protocol: str = "TCP"
    host_ip: str = ""


@dataclass(frozen=True)
class SandboxStatus:
    id: str
    ready: bool
    ip: str
    netns: str
    """The sandbox's network namespace path (from the verbose info), '' if not reported."""


class CriError(Exception):
    """A CRI call failed; ``details`` is the runtime's message (what the kubelet would show)."""

    def __init__(self, method: str, code: str, details: str) -> None:
        super().__init__(f"{method}: {code}: {details}")
        self.method, self.code, self.details = method, code, details


class CriClient:
    """The kubelet's pod-network calls on containerd's CRI socket (``runtime.v1``)."""

    SERVICE = "/runtime.v1.RuntimeService/"

    def __init__(self, socket_path: str, timeout_s: float = 120.0) -> None:
        import grpc  # only the runtime tier and the demo's containerd mode need it

        self._grpc = grpc
        self.channel = grpc.insecure_channel(f"unix://{socket_path}")
        self.timeout_s = timeout_s

    def close(self) -> None:
        self.channel.close()

    def _call(self, method: str, request: bytes, timeout_s: float | None = None) -> dict[int, list[bytes | int]]:
        fn = self.channel.unary_unary(self.SERVICE + method)
        try:
            raw = fn(request, timeout=timeout_s or self.timeout_s)
        except self._grpc.RpcError as e:
            code = e.code().name if hasattr(e, "code") else "UNKNOWN"
            details = e.details() if hasattr(e, "details") else str(e)
            raise CriError(method, str(code), str(details)) from None
        return _decode(raw)

    def version(self) -> str:
        m = self._call("Version", _field(1, "v1"), timeout_s=10)
        return f"{_str(m, 2)} {_str(m, 3)} (CRI {_str(m, 4)})"

    def wait_ready(self, timeout_s: float = 30.0) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                self.version()
                return
            except CriError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)  # the harness waiting for a daemon

    def run_pod_sandbox(
        self, name: str, uid: str, namespace: str = "default", ports: Sequence[PortMapping] = (), attempt: int = 0
    ) -> str:
        meta = _field(1, name) + _field(2, uid) + _field(3, namespace) + _field(4, attempt)
        config = _field(1, meta) + _field(2, name[:63])
        for p in ports:
            proto = {"TCP": 0, "UDP": 1, "SCTP": 2}[p.protocol.upper()]
            pm = _field(1, proto) + _field(2, p.container_port) + _field(3, p.host_port)
            if p.host_ip:
                pm += _field(4, p.host_ip)
            config += _field(5, pm)
        m = self._call("RunPodSandbox", _field(1, config))
        return _str(m, 1)

    def pod_sandbox_status(self, sandbox_id: str) -> SandboxStatus:
        m = self._call("PodSandboxStatus", _field(1, sandbox_id) + _field(2, True), timeout_s=30)
        st = _decode(m[1][0]) if 1 in m and isinstance(m[1][0], bytes) else {}
        net_raw = st.get(5, [b""])[0]
        net = _decode(net_raw) if isinstance(net_raw, bytes) else {}
        netns = ""
        for entry in m.get(2, []):  # map<string,string> info: entries of {1: key, 2: value}
            if not isinstance(entry, bytes):
                continue
            kv = _decode(entry)
            if _str(kv, 1) == "info":
                with contextlib.suppress(ValueError):
                    info = json.loads(_str(kv, 2))
                    for ns in info.get("runtimeSpec", {}).get("linux", {}).get("namespaces") or []:
                        if ns.get("type") == "network":
                            netns = str(ns.get("path", ""))
        state = st.get(3, [0])[0]
        return SandboxStatus(_str(st, 1), state == 0, _str(net, 1), netns)

    def stop_pod_sandbox(self, sandbox_id: str) -> None:
        self._call("StopPodSandbox", _field(1, sandbox_id))

    def remove_pod_sandbox(self, sandbox_id: str) -> None:
        self._call("RemovePodSandbox", _field(1, sandbox_id))

    def list_pod_sandbox_ids(self) -> list[str]:
        m = self._call("ListPodSandbox", b"", timeout_s=30)
        return [_str(_decode(x), 1) for x in m.get(1, []) if isinstance(x, bytes)]
