"""Helpers for the agent's tests: throw-away network namespaces that look like
a node (ENIs as veth links with the right MACs), and a tiny IMDSv2 server.

Used by the integration, reliability and perf tests; not part of the agent.
"""

from __future__ import annotations

import json
import subprocess
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def sh(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(args), check=check, capture_output=True, text=True)


def netns_available() -> str:
    """'' if ``ip netns add`` works here, else why not."""
    name = f"wpprobe{uuid.uuid4().hex[:6]}"
    try:
        r = sh("ip", "netns", "add", name, check=False)
    except FileNotFoundError:
        return "the ip command (iproute2) is not installed"
    if r.returncode != 0:
        return f"ip netns add failed: {r.stderr.strip()}"
    sh("ip", "netns", "del", name, check=False)
    return ""


@contextmanager
def netns(prefix: str = "wpt") -> Iterator[str]:
    """A named namespace, deleted (with everything in it) on exit."""
    name = f"{prefix}{uuid.uuid4().hex[:8]}"
    sh("ip", "netns", "add", name)
    try:
        sh("ip", "-n", name, "link", "set", "lo", "up")
        yield name
    finally:
        sh("ip", "netns", "del", name, check=False)


def add_fake_eni(ns: str, name: str, mac: str) -> None:
    """An 'ENI' in node namespace ``ns``: a veth whose end ``name`` has ``mac`` (the peer stays down)."""
    sh("ip", "-n", ns, "link", "add", name, "address", mac, "type", "veth", "peer", "name", f"{name}p")


def ip_json(ns: str, *args: str) -> list[dict[str, Any]]:
    """``ip -n NS -j ARGS`` parsed; [] when the object does not exist."""
    r = sh("ip", "-n", ns, "-j", *args, check=False)
    if r.returncode != 0:
        if "does not exist" in r.stderr or "Cannot find" in r.stderr:
            return []
        raise RuntimeError(f"ip -n {ns} {' '.join(args)}: {r.stderr.strip()}")
    return json.loads(r.stdout) if r.stdout.strip() else []


# --- IMDSv2 -------------------------------------------------------------------------------


@dataclass
class FakeEni:
    eni_id: str
    mac: str
    device_index: int
    primary_ip: str
    subnet_id: str
    subnet_cidr: str
    ips: list[str] = field(default_factory=list)
    prefixes: list[str] = field(default_factory=list)
    network_card: int = 0
    vpc_cidrs: list[str] = field(default_factory=lambda: ["10.0.0.0/16"])


@dataclass
class FakeInstance:
    instance_id: str
    instance_type: str
    availability_zone: str
    enis: list[FakeEni]
    identity_document: str = ""
    """Served at ``/latest/dynamic/instance-identity/document``; a plain (unsigned) one by default."""
    identity_signature: str = "dW5zaWduZWQ="
    """Base64, as IMDS serves it; by default not a valid signature (no allocator here verifies)."""

    def dynamic(self) -> dict[str, str]:
        doc = self.identity_document or json.dumps(
            {
                "instanceId": self.instance_id,
                "instanceType": self.instance_type,
                "availabilityZone": self.availability_zone,
                "region": self.availability_zone[:-1],
                "accountId": "000000000000",
            },
            indent=2,
        )
        return {"instance-identity/document": doc, "instance-identity/signature": self.identity_signature}

    def tree(self) -> dict[str, str]:
        t = {
            "instance-id": self.instance_id,
            "instance-type": self.instance_type,
            "placement/availability-zone": self.availability_zone,
            "mac": self.enis[0].mac,
            "network/interfaces/macs/": "\n".join(f"{e.mac}/" for e in self.enis),
        }
        for e in self.enis:
            base = f"network/interfaces/macs/{e.mac}/"
            t[base + "device-number"] = str(e.device_index)
            t[base + "network-card"] = str(e.network_card)
            t[base + "interface-id"] = e.eni_id
            t[base + "local-ipv4s"] = "\n".join([e.primary_ip, *e.ips])
            t[base + "subnet-id"] = e.subnet_id
            t[base + "subnet-ipv4-cidr-block"] = e.subnet_cidr
            t[base + "vpc-ipv4-cidr-block"] = e.vpc_cidrs[0]
            t[base + "vpc-ipv4-cidr-blocks"] = "\n".join(e.vpc_cidrs)
            if e.prefixes:
                t[base + "ipv4-prefix"] = "\n".join(e.prefixes)
        return t


class FakeImdsServer:
    """IMDSv2 for any number of instances at ``{base}/{instance_id}/latest/...``
    (the same layout as ``emulated.imds``). ``base`` is the value for
    ``AWS_EC2_METADATA_SERVICE_ENDPOINT`` of one instance: ``url_for(id)``."""

    def __init__(self) -> None:
        self.instances: dict[str, FakeInstance] = {}
        self.lock = threading.Lock()
        self.requests = 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a: object) -> None:
                pass

            def _split(self) -> tuple[FakeInstance | None, str]:
                parts = self.path.lstrip("/").split("/", 1)
                inst = outer.instances.get(parts[0])
                return inst, "/" + (parts[1] if len(parts) > 1 else "")

            def do_PUT(self) -> None:
                inst, rest = self._split()
                if inst is None or rest != "/latest/api/token":
                    self.send_error(404)
                    return
                body = b"token-" + inst.instance_id.encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                with outer.lock:
                    outer.requests += 1
                    inst, rest = self._split()
                    if inst is None:
                        self.send_error(404)
                        return
                    if self.headers.get("X-aws-ec2-metadata-token") != "token-" + inst.instance_id:
                        self.send_error(401)
                        return
                    if rest.startswith("/latest/dynamic/"):
                        value = inst.dynamic().get(rest.removeprefix("/latest/dynamic/"))
                    else:
                        value = inst.tree().get(rest.removeprefix("/latest/meta-data/"))
                if value is None:
                    self.send_error(404)
                    return
                body = value.encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> FakeImdsServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    @property
    def base(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def url_for(self, instance_id: str) -> str:
        return f"{self.base}/{instance_id}"
