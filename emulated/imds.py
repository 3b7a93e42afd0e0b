"""Emulated instance metadata service (IMDSv2), one per emulated instance.

Every instance's IMDS lives under its own base path, ``/{instance_id}``, so one
server stands in for all of them: an agent gets
``AWS_EC2_METADATA_SERVICE_ENDPOINT={imds_base}/{instance_id}`` and its SDK
appends ``/latest/...`` as usual.

- ``PUT /{id}/latest/api/token`` with ``X-aws-ec2-metadata-token-ttl-seconds``
  (1–21600) returns a token; a GET needs it in ``X-aws-ec2-metadata-token``
  (401 without it, or once it has expired on the emulator's clock).
- ``GET /{id}/latest/meta-data/<path>`` serves the tree from
  :meth:`emulated.ec2.Ec2Emulator.instance_metadata` (so an attach shows up only
  after the attach delay). Directories list their entries, one a line,
  subdirectories with a trailing ``/``; unknown paths are 404.
- ``GET /{id}/latest/dynamic/instance-identity/document`` and ``.../signature``:
  the instance identity document (IMDS's JSON layout, the instance's id,
  account, region, AZ, type, primary address, launch time) and its base64
  RSA-SHA256 signature by the test key of :class:`emulated.iid.IdentitySigner`,
  whose certificate ``warmpool local up`` hands to the functions. The document
  of an instance is the same bytes every time, as on EC2.

Faults for the reliability suite: :meth:`Imds.set_faults` (a delay before every
answer, slept in the server thread; failing the next N requests, or all of
them, with a status).
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from emulated.iid import IdentitySigner, document_for
from warmpool.messages import SignedIdentity

if TYPE_CHECKING:
    from emulated.ec2 import Ec2Emulator
    from emulated.ec2.http import Server

TOKEN_HEADER = "X-aws-ec2-metadata-token"
TTL_HEADER = "X-aws-ec2-metadata-token-ttl-seconds"
MAX_TTL_S = 21600

StartResponse = Callable[[str, list[tuple[str, str]]], Any]
REASONS = {
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    500: "Internal Server Error",
    503: "Service Unavailable",
}


class Imds:
    """A WSGI app serving every emulated instance's IMDSv2 under ``/{instance_id}``."""

    def __init__(
        self, emu: Ec2Emulator, sleep: Callable[[float], None] = time.sleep, signer: IdentitySigner | None = None
    ) -> None:
        self.emu = emu
        self.signer = signer or IdentitySigner()
        self._documents: dict[str, str] = {}
        self._sleep = sleep
        self._tokens: dict[str, tuple[str, float]] = {}  # token -> (instance id, expires at)
        self._lock = threading.Lock()
        self.delay_s = 0.0
        self.fail_status: int | None = None
        self.fail_remaining = 0
        self.requests = 0

    # --- faults -----------------------------------------------------------

    def set_faults(self, delay_s: float = 0.0, fail_status: int | None = None, fail_next: int | None = None) -> None:
        """``delay_s`` before every answer; ``fail_status`` for the next ``fail_next``
        requests (``None``: every request until cleared). No arguments: all clear."""
        with self._lock:
            self.delay_s = delay_s
            self.fail_status = fail_status
            self.fail_remaining = -1 if fail_next is None else fail_next

    def _fault(self) -> int | None:
        with self._lock:
            if self.fail_status is None or self.fail_remaining == 0:
                return None
            if self.fail_remaining > 0:
                self.fail_remaining -= 1
            return self.fail_status

    # --- serving ----------------------------------------------------------

    def answer(self, method: str, path: str, headers: dict[str, str]) -> tuple[int, str]:
        """One request: (status, text body). ``headers`` keys are case-insensitive (any case)."""
        h = {k.lower(): v for k, v in headers.items()}
        with self._lock:
            self.requests += 1
        parts = [p for p in path.split("/") if p]
        if len(parts) < 2 or parts[1] != "latest":
            return 404, "Not Found"
        iid, rest = parts[0], parts[2:]
        if iid not in self.emu.instances or self.emu.instances[iid].state == "terminated":
            return 404, "Not Found"
        if rest == ["api", "token"]:
            if method != "PUT":
                return 405, "Method Not Allowed"
            if "x-forwarded-for" in h:
                return 403, "Forbidden"
            try:
                ttl = int(h.get(TTL_HEADER.lower(), ""))
            except ValueError:
                return 400, "Bad Request"
            if not 1 <= ttl <= MAX_TTL_S:
                return 400, "Bad Request"
            new_token = "AQAEA" + secrets.token_urlsafe(40)
            with self._lock:
                self._tokens[new_token] = (iid, self.emu.clock.now() + ttl)
            return 200, new_token
        if method not in ("GET", "HEAD"):
            return 405, "Method Not Allowed"
        token = h.get(TOKEN_HEADER.lower())
        with self._lock:
            held = self._tokens.get(token or "")
        if held is None or held[0] != iid or held[1] <= self.emu.clock.now():
            return 401, "Unauthorized"
        if not rest or rest[0] not in ("meta-data", "dynamic"):
            return 404, "Not Found"
        node: Any
        if rest[0] == "dynamic":
            document = self.identity_document(iid)
            node = {"instance-identity": {"document": document, "signature": self.signer.sign(document)}}
        else:
            node = self.emu.instance_metadata(iid)
        for seg in rest[1:]:
            if not isinstance(node, dict) or seg not in node:
                return 404, "Not Found"
            node = node[seg]
        if isinstance(node, dict):
            return 200, "\n".join(f"{k}/" if isinstance(v, dict) else k for k, v in node.items())
        return 200, str(node)

    def identity_document(self, instance_id: str) -> str:
        """The instance's identity document, built once and then served byte for byte."""
        with self._lock:
            cached = self._documents.get(instance_id)
        if cached is not None:
            return cached
        inst = self.emu.instances[instance_id]
        primary = self.emu.enis.get(inst.primary_eni)
        launched = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(inst.launch_time))
        document = document_for(
            {
                "accountId": self.emu.owner,
                "availabilityZone": inst.az,
                "imageId": inst.image_id,
                "instanceId": inst.id,
                "instanceType": inst.instance_type,
                "pendingTime": launched,
                "privateIp": primary.primary_ip if primary is not None else "",
                "region": self.emu.config.region,
            }
        )
        with self._lock:
            return self._documents.setdefault(instance_id, document)

    def identity(self, instance_id: str) -> SignedIdentity:
        """What an agent on ``instance_id`` reads from ``.../dynamic/instance-identity/``,
        without HTTP (in-process agents of the bench and the simulation)."""
        return self.signer.identity(self.identity_document(instance_id))

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        if self.delay_s > 0:
            self._sleep(self.delay_s)
        status = self._fault()
        if status is not None:
            body = REASONS.get(status, "Error")
        else:
            headers = {k[5:].replace("_", "-"): v for k, v in environ.items() if k.startswith("HTTP_")}
            status, body = self.answer(environ.get("REQUEST_METHOD", "GET"), environ.get("PATH_INFO", ""), headers)
        payload = body.encode()
        start_response(
            f"{status} {REASONS.get(status, 'Error')}",
            [("Content-Type", "text/plain"), ("Content-Length", str(len(payload)))],
        )
        return [payload]


class ImdsBySource:
    """IMDS as an instance reaches it at ``169.254.169.254``, with no instance in the path: the
    instance is the one whose address the request comes from (``instance_of``; None answers 404).
    The e2e tier's nodes share one DaemonSet and so one configuration: each node's network
    translates ``169.254.169.254:80`` to this server, as EC2 answers each instance its own."""

    def __init__(self, imds: Imds, instance_of: Callable[[str], str | None]) -> None:
        self.imds = imds
        self.instance_of = instance_of

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        iid = self.instance_of(str(environ.get("REMOTE_ADDR", "")))
        if iid is None:
            start_response("404 Not Found", [("Content-Type", "text/plain"), ("Content-Length", "9")])
            return [b"Not Found"]
        return self.imds({**environ, "PATH_INFO": f"/{iid}{environ.get('PATH_INFO', '')}"}, start_response)


def make_app(emu: Ec2Emulator, signer: IdentitySigner | None = None) -> Imds:
    """The IMDS WSGI app for every instance of ``emu`` (mount it under any prefix,
    passing the rest of the path as ``PATH_INFO``); identity documents are signed
    by ``signer`` (a fresh test key when None)."""
    return Imds(emu, signer=signer)


def serve(emu: Ec2Emulator, host: str = "127.0.0.1", port: int = 0, app: Imds | None = None) -> Server:
    """Serve IMDS in a background thread; an instance's endpoint is ``f"{server.url}/{instance_id}"``."""
    from emulated.ec2.http import Server

    return Server(app or make_app(emu), host, port)
