#!/usr/bin/env python3
"""warmpool-cni: the CNI plugin (spec 1.0.0), a thin shim in front of the agent.

The runtime starts a new process for every call, so this file is on every
pod's start-up path: it imports nothing but the standard library (measured:
``import pyroute2`` alone costs ~140 ms, pydantic ~60 ms, a bare interpreter
~10-20 ms) and forwards the request to the agent over its unix socket. The
agent, which already holds netlink and the datastore, records the address and
does the namespace work (the "thick plugin" shape).

Self-contained on purpose: it imports nothing from ``node_agent`` or
``warmpool``, so the init container can copy this one file into
``/opt/cni/bin/warmpool-cni`` (``warmpool-agent install-cni``) and the node's
own ``python3 -S`` runs it.
"""

from __future__ import annotations

import json
import os
import socket
import sys
from typing import Any

CNI_VERSION = "1.0.0"
SUPPORTED_VERSIONS = ["0.3.0", "0.3.1", "0.4.0", "1.0.0"]
DEFAULT_SOCKET = "/run/warmpool/agent.sock"
SOCKET_ENV = "WARMPOOL_SOCKET"
TIMEOUT_ENV = "WARMPOOL_CNI_TIMEOUT_S"
DEFAULT_TIMEOUT_S = 60.0

# CNI spec error codes
E_INCOMPATIBLE_VERSION = 1
E_UNSUPPORTED_FIELD = 2
E_UNKNOWN_CONTAINER = 3
E_INVALID_ENV = 4
E_IO = 5
E_DECODE = 6
E_INVALID_CONFIG = 7
E_TRY_AGAIN_LATER = 11


class CniError(Exception):
    def __init__(self, code: int, msg: str, details: str = "") -> None:
        super().__init__(msg)
        self.code, self.msg, self.details = code, msg, details

    def to_json(self, version: str = CNI_VERSION) -> dict[str, Any]:
        return {"cniVersion": version, "code": self.code, "msg": self.msg, "details": self.details}


def _env(environ: dict[str, str], name: str, required: bool = True) -> str:
    value = environ.get(name, "")
    if required and not value:
        raise CniError(E_INVALID_ENV, f"{name} is not set")
    return value


def build_request(environ: dict[str, str], stdin: str) -> dict[str, Any]:
    """The message sent to the agent, from what the runtime gave us."""
    command = _env(environ, "CNI_COMMAND")
    try:
        conf = json.loads(stdin) if stdin.strip() else {}
    except (ValueError, RecursionError) as exc:  # RecursionError: absurdly deep nesting
        raise CniError(E_DECODE, "network configuration is not valid JSON", str(exc)) from None
    if not isinstance(conf, dict):
        raise CniError(E_DECODE, "network configuration is not a JSON object")
    version = str(conf.get("cniVersion", CNI_VERSION))
    if command != "VERSION" and version not in SUPPORTED_VERSIONS:
        raise CniError(E_INCOMPATIBLE_VERSION, f"cniVersion {version} is not supported",
                       f"supported: {', '.join(SUPPORTED_VERSIONS)}")
    req: dict[str, Any] = {"command": command, "config": conf}
    if command in ("ADD", "DEL", "CHECK"):
        req["container_id"] = _env(environ, "CNI_CONTAINERID")
        req["ifname"] = _env(environ, "CNI_IFNAME")
        req["netns"] = _env(environ, "CNI_NETNS", required=command != "DEL")
        req["args"] = environ.get("CNI_ARGS", "")
    return req


def call_agent(path: str, req: dict[str, Any], timeout: float) -> dict[str, Any]:
    """One request, one JSON line each way, over the agent's unix socket."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    try:
        try:
            s.connect(path)
        except OSError as exc:
            raise CniError(E_TRY_AGAIN_LATER, "warmpool agent is not reachable",
                           f"{path}: {exc.strerror or exc}") from None
        s.sendall(json.dumps(req, separators=(",", ":")).encode() + b"\n")
        chunks = []
        while True:
            try:
                b = s.recv(65536)
            except TimeoutError:
                raise CniError(E_TRY_AGAIN_LATER, "warmpool agent did not answer in time",
                               f"{timeout:.0f}s") from None
            if not b:
                break
            chunks.append(b)
            if b.endswith(b"\n"):
                break
    finally:
        s.close()
    raw = b"".join(chunks)
    if not raw:
        raise CniError(E_TRY_AGAIN_LATER, "warmpool agent closed the connection without an answer")
    try:
        reply = json.loads(raw)
    except ValueError as exc:
        raise CniError(E_IO, "warmpool agent sent an invalid answer", str(exc)) from None
    if not isinstance(reply, dict):
        raise CniError(E_IO, "warmpool agent sent an invalid answer")
    return reply


def run(environ: dict[str, str], stdin: str) -> tuple[int, str]:
    """Exit code and stdout for one invocation."""
    version = CNI_VERSION
    try:
        conf_version = json.loads(stdin).get("cniVersion") if stdin.strip() else None
        if isinstance(conf_version, str) and conf_version in SUPPORTED_VERSIONS:
            version = conf_version
    except (ValueError, AttributeError, RecursionError):
        pass
    try:
        command = environ.get("CNI_COMMAND", "")
        if command == "VERSION":
            return 0, json.dumps({"cniVersion": version, "supportedVersions": SUPPORTED_VERSIONS})
        if command not in ("ADD", "DEL", "CHECK", "GC", "STATUS"):
            raise CniError(E_INVALID_ENV, f"CNI_COMMAND {command!r} is not supported")
        if command in ("GC", "STATUS"):
            return 0, ""
        req = build_request(environ, stdin)
        conf = req["config"]
        path = conf.get("socket") or environ.get(SOCKET_ENV) or DEFAULT_SOCKET
        try:
            timeout = float(environ.get(TIMEOUT_ENV) or DEFAULT_TIMEOUT_S)
        except ValueError:
            raise CniError(E_INVALID_ENV, f"{TIMEOUT_ENV} is not a number") from None
        if not 0 < timeout < 86400:  # also NaN and inf: socket.settimeout would raise
            raise CniError(E_INVALID_ENV, f"{TIMEOUT_ENV} must be a number of seconds in (0, 86400)")
        reply = call_agent(str(path), req, timeout)
        if reply.get("ok"):
            result = reply.get("result")
            return 0, json.dumps(result) if result is not None else ""
        code = reply.get("code", E_IO)
        raise CniError(code if isinstance(code, int) and not isinstance(code, bool) else E_IO,
                       str(reply.get("msg", "failed")), str(reply.get("details", "")))
    except CniError as err:
        return 1, json.dumps(err.to_json(version))


def main() -> None:
    stdin = sys.stdin.read() if not sys.stdin.isatty() else ""
    code, out = run(dict(os.environ), stdin)
    if out:
        sys.stdout.write(out + "\n")
    sys.stdout.flush()
    sys.exit(code)


if __name__ == "__main__":
    main()
