#!/usr/bin/env python3
"""warmpool-cni: the CNI plugin (spec 1.0.0; GC and STATUS from 1.1.0), a thin shim in front of the agent.

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

Whatever happens it answers as the spec says: a result (or nothing) and exit 0,
or an error JSON with a spec code and exit 1, never a traceback. The network
configuration on stdin is limited to :data:`MAX_CONFIG_BYTES` and the request
to the agent to :data:`MAX_REQUEST_BYTES` (the agent enforces the same limit);
the whole exchange with the agent is bounded by ``WARMPOOL_CNI_TIMEOUT_S``.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from typing import Any

CNI_VERSION = "1.0.0"
SUPPORTED_VERSIONS = ["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"]
DEFAULT_SOCKET = "/run/warmpool/agent.sock"
SOCKET_ENV = "WARMPOOL_SOCKET"
TIMEOUT_ENV = "WARMPOOL_CNI_TIMEOUT_S"
DEFAULT_TIMEOUT_S = 60.0
MAX_CONFIG_BYTES = 1 << 20
"""Largest network configuration accepted on stdin (1 MiB)."""
MAX_REQUEST_BYTES = MAX_CONFIG_BYTES + (64 << 10)
"""Largest request line to the agent: the configuration plus the CNI_* values."""
MAX_REPLY_BYTES = 2 * MAX_REQUEST_BYTES
"""Largest answer read from the agent (a result repeats the prevResult it was given)."""
VALID_ATTACHMENTS = "cni.dev/valid-attachments"

# CNI spec error codes
E_INCOMPATIBLE_VERSION = 1
E_UNSUPPORTED_FIELD = 2
E_UNKNOWN_CONTAINER = 3
E_INVALID_ENV = 4
E_IO = 5
E_DECODE = 6
E_INVALID_CONFIG = 7
E_TRY_AGAIN_LATER = 11
E_NOT_AVAILABLE = 50
E_CHECK_FAILED = 100
"""Ours (the spec leaves 100 and up to plugins): CHECK found the pod's wiring wrong."""


class CniError(Exception):
    def __init__(self, code: int, msg: str, details: str = "") -> None:
        super().__init__(msg)
        self.code, self.msg, self.details = code, msg, details

    def to_json(self, version: str = CNI_VERSION) -> dict[str, Any]:
        return {"cniVersion": version, "code": self.code, "msg": self.msg, "details": self.details}


def _env(environ: dict[str, str], name: str, *, required: bool = True) -> str:
    value = environ.get(name, "")
    if required and not value:
        raise CniError(E_INVALID_ENV, f"{name} is not set")
    return value


def version_at_least(version: str, floor: str) -> bool:
    """``version`` >= ``floor`` for dotted numeric versions; False if it is not one."""
    try:
        have = [int(x) for x in version.split(".")]
        want = [int(x) for x in floor.split(".")]
    except ValueError:
        return False
    return have >= want


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
        raise CniError(
            E_INCOMPATIBLE_VERSION,
            f"cniVersion {version} is not supported",
            f"supported: {', '.join(SUPPORTED_VERSIONS)}",
        )
    if command in ("GC", "STATUS") and not version_at_least(version, "1.1.0"):
        # as the reference library's skel does: these verbs exist from spec 1.1.0
        raise CniError(
            E_INCOMPATIBLE_VERSION,
            f"config version does not allow {command}",
            f"cniVersion {version}; {command} needs 1.1.0",
        )
    req: dict[str, Any] = {"command": command, "config": conf}
    if command in ("ADD", "DEL", "CHECK"):
        req["container_id"] = _env(environ, "CNI_CONTAINERID")
        req["ifname"] = _env(environ, "CNI_IFNAME")
        req["netns"] = _env(environ, "CNI_NETNS", required=command != "DEL")
        req["args"] = environ.get("CNI_ARGS", "")
    return req


def call_agent(path: str, req: dict[str, Any], timeout: float) -> dict[str, Any]:
    """One request, one JSON line each way, over the agent's unix socket; all within ``timeout``."""
    try:  # as UTF-8 (non-ASCII text stays as long as it was on stdin), escaped only if it cannot be
        data = json.dumps(req, separators=(",", ":"), ensure_ascii=False).encode("utf-8") + b"\n"
    except UnicodeEncodeError:  # lone surrogates from \u escapes
        data = json.dumps(req, separators=(",", ":")).encode() + b"\n"
    if len(data) > MAX_REQUEST_BYTES:
        raise CniError(
            E_INVALID_CONFIG,
            "request to the warmpool agent is too large",
            f"{len(data)} bytes; the limit is {MAX_REQUEST_BYTES}",
        )
    deadline = time.monotonic() + timeout
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)

    def left() -> float:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError
        return remaining

    chunks: list[bytes] = []
    size = 0
    try:
        try:
            s.settimeout(left())
            s.connect(path)
        except OSError as exc:
            raise CniError(
                E_TRY_AGAIN_LATER, "warmpool agent is not reachable", f"{path}: {exc.strerror or exc}"
            ) from None
        try:
            s.settimeout(left())
            s.sendall(data)
        except TimeoutError:
            raise CniError(
                E_TRY_AGAIN_LATER, "warmpool agent did not take the request in time", f"{timeout:g}s"
            ) from None
        except OSError:
            pass  # it stopped reading (it may have answered why): read what it said
        while True:
            try:
                s.settimeout(left())
                b = s.recv(65536)
            except TimeoutError:
                raise CniError(E_TRY_AGAIN_LATER, "warmpool agent did not answer in time", f"{timeout:g}s") from None
            except OSError as exc:
                if chunks:
                    break
                raise CniError(E_IO, "warmpool agent closed the connection", str(exc.strerror or exc)) from None
            if not b:
                break
            chunks.append(b)
            size += len(b)
            if size > MAX_REPLY_BYTES:
                raise CniError(E_IO, "warmpool agent sent an answer that is too large", f"over {MAX_REPLY_BYTES} bytes")
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
    """Exit code and stdout for one invocation. Never raises."""
    version = CNI_VERSION
    try:
        if len(stdin) > MAX_CONFIG_BYTES or len(stdin.encode("utf-8", "surrogatepass")) > MAX_CONFIG_BYTES:
            raise CniError(
                E_INVALID_CONFIG, "network configuration is too large", f"more than {MAX_CONFIG_BYTES} bytes on stdin"
            )
        try:
            conf_version = json.loads(stdin).get("cniVersion") if stdin.strip() else None
            if isinstance(conf_version, str) and conf_version in SUPPORTED_VERSIONS:
                version = conf_version
        except (ValueError, AttributeError, RecursionError):
            pass
        return _run(environ, stdin, version)
    except CniError as err:
        return 1, json.dumps(err.to_json(version))
    except Exception as exc:  # a bug must still reach the runtime as a CNI error, not a traceback
        bug = CniError(E_IO, "warmpool-cni failed", f"{type(exc).__name__}: {exc}"[:500])
        return 1, json.dumps(bug.to_json(version))


def _run(environ: dict[str, str], stdin: str, version: str) -> tuple[int, str]:
    command = environ.get("CNI_COMMAND", "")
    if command == "VERSION":
        return 0, json.dumps({"cniVersion": version, "supportedVersions": SUPPORTED_VERSIONS})
    if command not in ("ADD", "DEL", "CHECK", "GC", "STATUS"):
        raise CniError(E_INVALID_ENV, f"CNI_COMMAND {command!r} is not supported")
    req = build_request(environ, stdin)
    conf = req["config"]
    path = conf.get("socket") or environ.get(SOCKET_ENV) or DEFAULT_SOCKET
    try:
        timeout = float(environ.get(TIMEOUT_ENV) or DEFAULT_TIMEOUT_S)
    except ValueError:
        raise CniError(E_INVALID_ENV, f"{TIMEOUT_ENV} is not a number") from None
    if not 0 < timeout < 86400:  # also NaN and inf: socket.settimeout would raise
        raise CniError(E_INVALID_ENV, f"{TIMEOUT_ENV} must be a number of seconds in (0, 86400)")
    try:
        reply = call_agent(str(path), req, timeout)
    except CniError as err:
        if command == "STATUS" and err.code == E_TRY_AGAIN_LATER:
            raise CniError(E_NOT_AVAILABLE, err.msg, err.details) from None
        raise
    if reply.get("ok"):
        result = reply.get("result")
        return 0, json.dumps(result) if result is not None else ""
    code = reply.get("code", E_IO)
    raise CniError(
        code if isinstance(code, int) and not isinstance(code, bool) else E_IO,
        str(reply.get("msg", "failed")),
        str(reply.get("details", "")),
    )


def read_stdin(stream: Any) -> tuple[str | None, CniError | None]:
    """The network configuration from the runtime, read as bytes and at most one byte over the limit."""
    raw = stream.read(MAX_CONFIG_BYTES + 1)
    if len(raw) > MAX_CONFIG_BYTES:
        return None, CniError(
            E_INVALID_CONFIG, "network configuration is too large", f"more than {MAX_CONFIG_BYTES} bytes on stdin"
        )
    try:
        return raw.decode("utf-8"), None
    except UnicodeDecodeError as exc:
        return None, CniError(E_DECODE, "network configuration is not valid UTF-8", str(exc))


def main() -> None:
    try:
        stdin, err = read_stdin(sys.stdin.buffer) if not sys.stdin.isatty() else ("", None)
        if err is not None or stdin is None:
            code, out = 1, json.dumps((err or CniError(E_IO, "no input")).to_json())
        else:
            code, out = run(dict(os.environ), stdin)
    except Exception as exc:  # reading stdin failed: still a CNI error, never a traceback
        code, out = (
            1,
            json.dumps(
                CniError(E_IO, "warmpool-cni could not read its input", f"{type(exc).__name__}: {exc}"[:500]).to_json()
            ),
        )
    try:
        if out:
            sys.stdout.write(out + "\n")
        sys.stdout.flush()
    except OSError:
        pass  # nobody is reading our answer
    sys.exit(code)


if __name__ == "__main__":
    main()
