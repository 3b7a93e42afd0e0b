"""IMDSv2 client (stdlib only): PUT a session token, then GET with it.

The endpoint follows the AWS SDK convention: ``AWS_EC2_METADATA_SERVICE_ENDPOINT``
when set, which may carry a path prefix (``http://host:port/i-0abc`` in the
local stack, one prefix per instance), else ``http://169.254.169.254``.
"""

from __future__ import annotations

import threading
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from node_agent.controller import AttachedEni
from node_agent.records import EniInfo

ENV_ENDPOINT = "AWS_EC2_METADATA_SERVICE_ENDPOINT"
DEFAULT_ENDPOINT = "http://169.254.169.254"
TOKEN_TTL_S = 21600


class ImdsError(RuntimeError):
    pass


@dataclass(frozen=True)
class Identity:
    instance_id: str
    instance_type: str
    availability_zone: str
    mac: str


class ImdsClient:
    """Implements :class:`node_agent.controller.MetadataView`."""

    def __init__(self, endpoint: str = DEFAULT_ENDPOINT, timeout_s: float = 2.0, attempts: int = 3) -> None:
        self.base = endpoint.rstrip("/")
        self.timeout_s = timeout_s
        self.attempts = attempts
        self._token = ""
        self._token_expires = 0.0
        self._lock = threading.Lock()

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> ImdsClient:
        return cls(env.get(ENV_ENDPOINT, "").strip() or DEFAULT_ENDPOINT)

    def _token_now(self, *, refresh: bool = False) -> str:
        with self._lock:
            if refresh or not self._token or time.monotonic() >= self._token_expires:
                req = urllib.request.Request(
                    f"{self.base}/latest/api/token",
                    method="PUT",
                    headers={"X-aws-ec2-metadata-token-ttl-seconds": str(TOKEN_TTL_S)},
                )
                with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                    self._token = resp.read().decode()
                self._token_expires = time.monotonic() + TOKEN_TTL_S - 60
            return self._token

    def get(self, path: str, *, missing_ok: bool = False, tree: str = "meta-data") -> str | None:
        """``GET /latest/<tree>/<path>`` (``tree`` ``meta-data`` or ``dynamic``), the body
        exactly as served; None if 404 and ``missing_ok``."""
        url = f"{self.base}/latest/{tree}/{path.lstrip('/')}"
        last: Exception | None = None
        for attempt in range(self.attempts):
            try:
                token = self._token_now(refresh=attempt > 0 and isinstance(last, urllib.error.HTTPError))
                req = urllib.request.Request(url, headers={"X-aws-ec2-metadata-token": token})
                with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                    return str(resp.read().decode())
            except urllib.error.HTTPError as exc:
                if exc.code == 404:
                    if missing_ok:
                        return None
                    raise ImdsError(f"IMDS {path}: not found") from None
                last = exc
            except (urllib.error.URLError, OSError) as exc:
                last = exc
        raise ImdsError(f"IMDS {path}: {last}")

    def identity(self) -> Identity:
        return Identity(
            instance_id=self._req("instance-id"),
            instance_type=self._req("instance-type"),
            availability_zone=self._req("placement/availability-zone"),
            mac=self._req("mac").lower(),
        )

    def _req(self, path: str) -> str:
        v = self.get(path)
        assert v is not None
        return v.strip()

    def network_tree(self) -> dict[str, Any]:
        """The part of the ``meta-data`` tree :func:`parse_interfaces` reads, fetched leaf by leaf:
        ``{"network": {"interfaces": {"macs": {mac: {leaf: value}}}}}``. A required leaf
        missing raises :class:`ImdsError`; ``ipv4-prefix`` and ``network-card`` may be absent.
        So may ``local-ipv4s``: IMDS answers 404 for it on an EFA-only interface (no IP address
        at all; nodeadm's ``getNetworkCardDetail``, ``nodeadm/internal/api/status.go`` in
        awslabs/amazon-eks-ami, says so and skips it), and the leaf is then left out, its
        subnet leaves optional too: :func:`parse_interfaces` marks the interface ``no_ipv4``."""
        macs: dict[str, dict[str, str]] = {}
        for m in self._req("network/interfaces/macs/").split():
            mac = m.strip().rstrip("/").lower()
            if not mac:
                continue
            base = f"network/interfaces/macs/{mac}/"
            leaves: dict[str, str] = {}
            ipv4s = self.get(base + "local-ipv4s", missing_ok=True)
            if ipv4s is not None:
                leaves["local-ipv4s"] = ipv4s
            for optional in ("ipv4-prefix", "network-card"):
                value = self.get(base + optional, missing_ok=True)
                if value is not None:
                    leaves[optional] = value
            for required in ("interface-id", "device-number"):
                leaves[required] = self._req(base + required)
            for subnet in ("subnet-id", "subnet-ipv4-cidr-block"):
                if ipv4s is not None:
                    leaves[subnet] = self._req(base + subnet)
                elif (value := self.get(base + subnet, missing_ok=True)) is not None:
                    leaves[subnet] = value
            macs[mac] = leaves
        return {"network": {"interfaces": {"macs": macs}}}

    def interfaces(self) -> list[AttachedEni]:
        """Every ENI attached now, with its secondary addresses and prefixes."""
        return parse_interfaces(self.network_tree())


def _lines(value: str) -> list[str]:
    return value.split()  # whitespace-separated; no empty items


def _leaf(leaves: Mapping[str, str], mac: str, name: str) -> str:
    value = leaves.get(name)
    if value is None:
        raise ImdsError(f"IMDS network/interfaces/macs/{mac}/{name}: not found")
    return value.strip()


def parse_interfaces(tree: Mapping[str, Any]) -> list[AttachedEni]:
    """The ENIs in an IMDS ``meta-data`` tree (directories as dicts, leaves as strings,
    as :meth:`ImdsClient.network_tree` fetches it and the EC2 emulator's
    ``instance_metadata`` returns it), by network card and device index.

    Per MAC under ``network/interfaces/macs/``: the first of ``local-ipv4s`` is the primary
    address, the rest are secondary; ``ipv4-prefix`` (absent: none) lists the prefixes;
    ``network-card`` absent or not a number means card 0. A required leaf missing raises
    :class:`ImdsError`.

    ``local-ipv4s`` absent (or empty) is an interface with no IPv4 address, as IMDS shows an
    EFA-only one (p5, p5en and trn2 attach one per network card): the VPC CNI's
    ``getENIMetadata`` (``pkg/awsutils/awsutils.go``, called by ``GetAttachedENIs``) reads
    such a MAC as EFA-only and leaves it out of its pool. It is returned marked ``no_ipv4``,
    with no address, no prefix and no primary address, its subnet leaves optional; the
    controller never uses it, and fails a read that shows so an ENI it knows has addresses
    (:meth:`node_agent.controller.PoolController._read`). Prefixes listed on such an
    interface are no EFA-only one's (it has no IP address at all): a tree torn between
    moments, :class:`ImdsError`.
    """
    macs: Mapping[str, Mapping[str, str]] = tree.get("network", {}).get("interfaces", {}).get("macs", {})
    out = []
    carded = [("network-card" in leaves) for leaves in macs.values()]
    if any(carded) and not all(carded):
        # a multi-card type lists every interface's card: a tree without one is torn, and read as
        # card 0 it would take another tool's interface of a card above 0 into the pool (review final)
        raise ImdsError("IMDS network/interfaces/macs: network-card listed for some interfaces only")
    for raw_mac, leaves in macs.items():
        mac = raw_mac.strip().rstrip("/").lower()
        local = _lines(leaves.get("local-ipv4s", ""))
        prefixes = _lines(leaves.get("ipv4-prefix", ""))
        card = leaves.get("network-card", "").strip()
        if not local and prefixes:
            raise ImdsError(f"IMDS network/interfaces/macs/{mac}: prefixes {prefixes} but no local-ipv4s")
        info = EniInfo(
            eni_id=_leaf(leaves, mac, "interface-id"),
            device_index=int(_leaf(leaves, mac, "device-number")),
            network_card=int(card) if card.isdigit() else 0,
            mac=mac,
            primary_ip=local[0] if local else "",
            subnet_id=_leaf(leaves, mac, "subnet-id") if local else leaves.get("subnet-id", "").strip(),
            subnet_cidr=(
                _leaf(leaves, mac, "subnet-ipv4-cidr-block")
                if local
                else leaves.get("subnet-ipv4-cidr-block", "").strip()
            ),
        )
        out.append(AttachedEni(info, local[1:], prefixes, no_ipv4=not local))
    out.sort(key=lambda a: (a.info.network_card, a.info.device_index))
    return out
