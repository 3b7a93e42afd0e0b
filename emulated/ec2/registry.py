"""How an action reaches the code that serves it, and what every handler shares.

A handler is ``(emulator, params) -> response`` for one EC2 action; each
handler module (:mod:`.describe`, :mod:`.enis`, :mod:`.resources`) ends with a
``HANDLERS`` table, and :mod:`.emulator` serves the union of those tables
after counting, fault injection and throttling. The helpers here read boto3's
keyword arguments the way EC2 does (missing parameters, id lists, tag
specifications, counts, ClientToken fingerprints) and build the errors more
than one module raises.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from warmpool.limits import KNOWN_TYPES

from .errors import Ec2Error

if TYPE_CHECKING:
    from .emulator import Ec2Emulator

Handler = Callable[["Ec2Emulator", dict[str, Any]], dict[str, Any]]
"""Serves one action: boto3's keyword arguments in, boto3's answer out (raises :class:`Ec2Error`)."""

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
