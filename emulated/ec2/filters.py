"""Which resources a Describe* call selects: EC2's filters and its pages.

Filter names map to getters (a resource -> the values the filter sees); ``tag:<key>``
and ``tag-key`` work on every resource with tags. A value with ``*`` or ``?`` is
a wildcard; an unknown filter name is ``InvalidParameterValue``, as in EC2.
``MaxResults``/``NextToken`` paginate over the selected list.
"""

from __future__ import annotations

import base64
import fnmatch
import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from .errors import Ec2Error
from .state import STATE_CODES

Getter = Callable[[Any], Iterable[str]]


def filter_values(filters: list[Mapping[str, Any]] | None) -> list[tuple[str, list[str]]]:
    """boto3's ``Filters`` as ``(name, values)`` pairs."""
    out = []
    for f in filters or []:
        out.append((str(f.get("Name", "")), [str(v) for v in f.get("Values") or []]))
    return out


def matches(
    obj: Any,
    filters: list[tuple[str, list[str]]],
    getters: Mapping[str, Getter],
    tags: Callable[[Any], dict[str, str]],
) -> bool:
    """Whether ``obj`` passes every filter (the values of one filter are alternatives)."""
    for name, values in filters:
        if name.startswith("tag:"):
            v = tags(obj).get(name[4:])
            have: Iterable[str] = [] if v is None else [v]
        elif name == "tag-key":
            have = tags(obj).keys()
        else:
            g = getters.get(name)
            if g is None:
                raise Ec2Error("InvalidParameterValue", f"The filter '{name}' is invalid")
            have = g(obj)
        if not any(value_match(h, values) for h in have):
            return False
    return True


def value_match(have: str, wanted: list[str]) -> bool:
    # An exact value first (``in`` runs in C: a filter of 100 instance ids, as the
    # allocator's chunks, is checked once per resource), then the wildcards.
    return have in wanted or any(("*" in w or "?" in w) and fnmatch.fnmatchcase(have, w) for w in wanted)


def check_filters(filters: list[tuple[str, list[str]]], getters: Mapping[str, Getter]) -> None:
    """Refuse an unknown filter name even when there is nothing to match it against."""
    for name, _ in filters:
        if not (name.startswith("tag:") or name == "tag-key" or name in getters):
            raise Ec2Error("InvalidParameterValue", f"The filter '{name}' is invalid")


ENI_FILTERS: dict[str, Getter] = {
    "network-interface-id": lambda e: [e.id],
    "attachment.instance-id": lambda e: [e.attachment.instance_id] if e.attachment else [],
    "attachment.attachment-id": lambda e: [e.attachment.id] if e.attachment else [],
    "attachment.status": lambda e: [e.attachment.status] if e.attachment else [],
    "attachment.device-index": lambda e: [str(e.attachment.device_index)] if e.attachment else [],
    "attachment.delete-on-termination": lambda e: (
        [str(e.attachment.delete_on_termination).lower()] if e.attachment else []
    ),
    "status": lambda e: [e.status],
    "subnet-id": lambda e: [e.subnet_id],
    "availability-zone": lambda e: [e.az],
    "vpc-id": lambda e: [e.vpc_id],
    "mac-address": lambda e: [e.mac],
    "description": lambda e: [e.description],
    "interface-type": lambda e: [e.interface_type],
    "private-ip-address": lambda e: [ip for ip in (e.primary_ip, *e.secondary) if ip],
    "addresses.private-ip-address": lambda e: [ip for ip in (e.primary_ip, *e.secondary) if ip],
    "ipv4-prefix": lambda e: list(e.prefixes),
    "requester-managed": lambda e: ["false"],
    "owner-id": lambda e: [],  # the account id: describe.py fills it per emulator
    "group-id": lambda e: list(e.groups),
}

INSTANCE_FILTERS: dict[str, Getter] = {
    "instance-id": lambda i: [i.id],
    "instance-state-name": lambda i: [i.state],
    "instance-state-code": lambda i: [str(STATE_CODES[i.state])],
    "instance-type": lambda i: [i.instance_type],
    "subnet-id": lambda i: [i.subnet_id],
    "vpc-id": lambda i: [i.vpc_id],
    "availability-zone": lambda i: [i.az],
    "placement-availability-zone": lambda i: [i.az],
    "reservation-id": lambda i: [i.reservation_id],
    "image-id": lambda i: [i.image_id],
}

SUBNET_FILTERS: dict[str, Getter] = {
    "subnet-id": lambda s: [s.id],
    "vpc-id": lambda s: [s.vpc_id],
    "availability-zone": lambda s: [s.az],
    "cidr-block": lambda s: [s.cidr],
    "cidr": lambda s: [s.cidr],
    "state": lambda s: ["available"],
}

VPC_FILTERS: dict[str, Getter] = {
    "vpc-id": lambda v: [v.id],
    "cidr": lambda v: [v.cidr],
    "cidr-block-association.cidr-block": lambda v: [v.cidr],
    "state": lambda v: ["available"],
    "is-default": lambda v: ["false"],
}


def tags_of(o: Any) -> dict[str, str]:
    """The tags of a VPC, subnet, instance or ENI."""
    tags: dict[str, str] = o.tags
    return tags


def paginate(
    items: list[Any], p: Mapping[str, Any], lo: int = 5, hi: int = 1000, ids_key: str | None = None
) -> tuple[list[Any], str | None]:
    """The page of ``items`` that ``MaxResults`` (``lo``..``hi``) and ``NextToken`` ask for, and the next token."""
    max_results = p.get("MaxResults")
    token = p.get("NextToken")
    if max_results is not None and ids_key and p.get(ids_key):
        raise Ec2Error(
            "InvalidParameterCombination",
            f"The parameter {ids_key} cannot be used with the parameter maxResults",
        )
    start = 0
    if token:
        try:
            start = int(json.loads(base64.urlsafe_b64decode(str(token).encode()))["o"])
        except (ValueError, KeyError, TypeError):
            raise Ec2Error("InvalidParameterValue", f"Invalid value '{token}' for nextToken") from None
    if max_results is None:
        return items[start:], None
    n = int(max_results)
    if not lo <= n <= hi:
        raise Ec2Error(
            "InvalidParameterValue",
            f"Value ( {n} ) for parameter maxResults is invalid. Expecting a value between {lo} and {hi}.",
        )
    end = start + n
    nxt = None
    if end < len(items):
        nxt = base64.urlsafe_b64encode(json.dumps({"o": end}).encode()).decode()
    return items[start:end], nxt
