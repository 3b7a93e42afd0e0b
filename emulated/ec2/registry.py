"""How an action reaches the code that serves it, and what every handler shares.

A handler is ``(emulator, params) -> response`` for one EC2 action; each
handler module (:mod:`.describe`, :mod:`.enis`, :mod:`.resources`) ends with a
``HANDLERS`` table, and :mod:`.emulator` serves the union of those tables
after counting, fault injection and throttling. A handler module sees the
emulator through the protocol here that lists what it reaches
(:class:`DescribeState`, :class:`EniState`, :class:`ResourceState`), and the
ways in (:mod:`.client`, :mod:`.hooks`, :mod:`.http`) through
:class:`Dispatcher`; :class:`~.emulator.Ec2Emulator` satisfies them all, and
none of these modules imports it. The helpers here read boto3's
keyword arguments the way EC2 does (missing parameters, id lists, tag
specifications, counts, ClientToken fingerprints) and build the errors more
than one module raises.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from typing import Any, Protocol, TypeVar

from warmpool.clock import Clock
from warmpool.limits import KNOWN_TYPES, InstanceLimits

from .config import Ec2Config
from .errors import Ec2Error
from .state import EmulatedEni, EmulatedSubnet, Instance, Vpc

S = TypeVar("S")

Handler = Callable[[S, dict[str, Any]], dict[str, Any]]
"""Serves one action over the emulator's state ``S``: boto3's keyword arguments in,
boto3's answer out (raises :class:`Ec2Error`)."""


class Ec2View(Protocol):
    """What every handler module reads of the emulator."""

    @property
    def config(self) -> Ec2Config: ...

    @property
    def owner(self) -> str:
        """The account id resources are rendered with."""
        ...

    @property
    def subnets(self) -> dict[str, EmulatedSubnet]: ...

    @property
    def enis(self) -> dict[str, EmulatedEni]: ...


class DescribeState(Ec2View, Protocol):
    """What :mod:`.describe` reads of the emulator."""

    @property
    def vpcs(self) -> dict[str, Vpc]: ...

    @property
    def instances(self) -> dict[str, Instance]: ...

    @property
    def _types(self) -> dict[str, InstanceLimits]: ...

    @property
    def clock(self) -> Clock: ...

    @property
    def unlisted(self) -> dict[str, float]:
        """Instances DescribeInstances leaves out: id -> when it starts to show them."""
        ...


class EniState(Ec2View, Protocol):
    """What :mod:`.enis` reaches of the emulator."""

    @property
    def clock(self) -> Clock: ...

    @property
    def _attachments(self) -> dict[str, str]:
        """Attachment id -> ENI id."""
        ...

    @property
    def _ip_owner(self) -> dict[str, str]:
        """Address or prefix -> ENI id."""
        ...

    @property
    def _tokens(self) -> dict[str, tuple[str, dict[str, Any]]]:
        """ClientToken -> (fingerprint, response)."""
        ...

    @property
    def stuck_detach_rate(self) -> float: ...

    @property
    def stuck(self) -> set[str]: ...

    def stuck_draw(self) -> float:
        """A draw of the stuck-detach fault's own generator."""
        ...

    def _id(self, prefix: str) -> str: ...

    def _mac(self) -> str: ...

    def _subnet(self, sid: str) -> EmulatedSubnet: ...

    def _instance(self, iid: str) -> Instance: ...

    def _eni(self, eid: str) -> EmulatedEni: ...

    def _eni_limit(self, eni: EmulatedEni) -> tuple[int, InstanceLimits | None]: ...

    def _schedule(self, at: float, kind: str, eni_id: str, att_id: str) -> None: ...

    def _fire_attach(self, eni: EmulatedEni) -> None: ...

    def _finish_detach(self, eni: EmulatedEni) -> None: ...


class ResourceState(DescribeState, EniState, Protocol):
    """What :mod:`.resources` reaches of the emulator (it calls into :mod:`.describe` and :mod:`.enis`)."""

    @property
    def _run_tokens(self) -> dict[str, tuple[str, dict[str, Any]]]: ...

    def add_vpc(self, cidr: str = ..., vpc_id: str | None = None, tags: Mapping[str, str] | None = None) -> str: ...


MAX_IPV4_PER_ENI = max(t.ipv4_per_eni for t in KNOWN_TYPES.values())
"""Cap on addresses of an ENI that is not attached (no instance type to limit it yet)."""


def req(p: Mapping[str, Any], key: str) -> Any:
    """A required parameter (``MissingParameter`` when absent or empty)."""
    v = p.get(key)
    if v is None or v == "":
        raise Ec2Error("MissingParameter", f"The request must contain the parameter {key}")
    return v


def id_list(p: Mapping[str, Any], key: str) -> list[str]:
    """An id-list parameter (a lone string counts as a list of one)."""
    v = p.get(key) or []
    return [v] if isinstance(v, str) else list(v)


def tags_for(p: Mapping[str, Any], resource_type: str) -> dict[str, str]:
    """The tags ``TagSpecifications`` gives ``resource_type``."""
    out: dict[str, str] = {}
    for spec in p.get("TagSpecifications") or []:
        if spec.get("ResourceType") == resource_type:
            for t in spec.get("Tags") or []:
                out[str(t["Key"])] = str(t.get("Value", ""))
    return out


def count(p: Mapping[str, Any], key: str) -> int:
    """A non-negative count parameter (0 when absent)."""
    v = p.get(key)
    if v is None:
        return 0
    n = int(v)
    if n < 0:
        raise Ec2Error("InvalidParameterValue", f"Value ({n}) for parameter {key} is invalid.")
    return n


def fingerprint(p: Mapping[str, Any]) -> str:
    """What a ClientToken's first request asked for (the token and DryRun left out)."""
    body = {k: v for k, v in p.items() if k not in ("ClientToken", "DryRun")}
    return hashlib.sha256(json.dumps(body, sort_keys=True, default=str).encode()).hexdigest()


def insufficient_addresses() -> Ec2Error:
    return Ec2Error(
        "InsufficientFreeAddressesInSubnet",
        "The specified subnet does not have enough free addresses to satisfy the request.",
    )


def insufficient_cidr() -> Ec2Error:
    return Ec2Error(
        "InsufficientCidrBlocks",
        "The specified subnet does not have enough free cidr blocks to satisfy the request.",
    )
