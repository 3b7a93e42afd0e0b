"""The Describe* handlers and the IMDS view: how the emulated state reads back.

Each handler selects with :mod:`.filters` and renders with the resources'
``render`` methods (:mod:`.state`), in boto3's shapes. :func:`instance_metadata`
is the IMDS tree of one instance (served by :mod:`emulated.imds`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from warmpool.limits import InstanceLimits

from .errors import Ec2Error, not_found
from .filters import (
    ENI_FILTERS,
    INSTANCE_FILTERS,
    SUBNET_FILTERS,
    VPC_FILTERS,
    Getter,
    check_filters,
    filter_values,
    matches,
    paginate,
    tags_of,
)
from .registry import DescribeState, Handler, id_list
from .state import STATE_CODES, EmulatedEni, Instance, tag_list, ts

T = TypeVar("T")


def named(store: Mapping[str, T], ids: list[str], kind: str) -> list[T]:
    """The resources ``ids`` name, in order, each once; the first that does not exist is NotFound."""
    for i in ids:
        if i not in store:
            raise not_found(kind, i)
    return [store[i] for i in dict.fromkeys(ids)]


def describe_enis(emu: DescribeState, p: dict[str, Any]) -> dict[str, Any]:
    filters = filter_values(p.get("Filters"))
    getters = {**ENI_FILTERS, "owner-id": lambda e: [emu.owner]}
    check_filters(filters, getters)
    ids = id_list(p, "NetworkInterfaceIds")
    cands: Iterable[EmulatedEni]
    if ids:
        cands = named(emu.enis, ids, "NetworkInterface")
    else:
        by_inst = next((v for n, v in filters if n == "attachment.instance-id"), None)
        if by_inst is not None:
            found: list[EmulatedEni] = []
            for iid in by_inst:
                inst = emu.instances.get(iid)
                if inst is not None:
                    found.extend(emu.enis[e] for _, e in sorted(inst.slots.items()))
            cands = found
        else:
            cands = emu.enis.values()
    items = [e for e in cands if not filters or matches(e, filters, getters, tags_of)]
    page, nxt = paginate(items, p, ids_key="NetworkInterfaceIds")
    out: dict[str, Any] = {"NetworkInterfaces": [e.render(emu.owner) for e in page]}
    if nxt:
        out["NextToken"] = nxt
    return out


def render_instance(emu: DescribeState, inst: Instance) -> dict[str, Any]:
    primary = emu.enis.get(inst.primary_eni)
    nics = [emu.enis[e].render_for_instance(emu.owner) for _, e in sorted(inst.slots.items())]
    d: dict[str, Any] = {
        "AmiLaunchIndex": 0,
        "ImageId": inst.image_id,
        "InstanceId": inst.id,
        "InstanceType": inst.instance_type,
        "LaunchTime": ts(inst.launch_time),
        "Placement": {"AvailabilityZone": inst.az, "GroupName": "", "Tenancy": "default"},
        "State": {"Code": STATE_CODES[inst.state], "Name": inst.state},
        "Architecture": "x86_64",
        "Hypervisor": "xen",
        "VirtualizationType": "hvm",
        "RootDeviceType": "ebs",
        "NetworkInterfaces": nics,
        "Tags": tag_list(inst.tags),
    }
    if inst.state != "terminated":
        d["SubnetId"] = inst.subnet_id
        d["VpcId"] = inst.vpc_id
        if primary is not None:
            d["PrivateIpAddress"] = primary.primary_ip
            d["PrivateDnsName"] = "ip-" + primary.primary_ip.replace(".", "-") + ".ec2.internal"
    return d


def reservation(emu: DescribeState, rid: str, insts: list[dict[str, Any]]) -> dict[str, Any]:
    return {"ReservationId": rid, "OwnerId": emu.owner, "Groups": [], "Instances": insts}


def describe_instances(emu: DescribeState, p: dict[str, Any]) -> dict[str, Any]:
    filters = filter_values(p.get("Filters"))
    check_filters(filters, INSTANCE_FILTERS)
    ids = id_list(p, "InstanceIds")
    now = emu.clock.now()
    by_id = None if ids else next((v for n, v in filters if n == "instance-id"), None)
    # Only the instances asked for, when named or filtered by id (not a pass over all of them per call).
    asked = emu.instances.keys() if not ids and not by_id else (ids or by_id or ())
    listed = {k: emu.instances[k] for k in asked if k in emu.instances and emu.unlisted.get(k, now) <= now}
    cands: Iterable[Instance]
    if ids:
        cands = named(listed, ids, "Instance")
    else:
        cands = [listed[i] for i in by_id if i in listed] if by_id else listed.values()
    items = [i for i in cands if not filters or matches(i, filters, INSTANCE_FILTERS, tags_of)]
    page, nxt = paginate(items, p, ids_key="InstanceIds")
    # One reservation per instance launch group, in order of first appearance.
    groups: dict[str, list[dict[str, Any]]] = {}
    for inst in page:
        groups.setdefault(inst.reservation_id, []).append(render_instance(emu, inst))
    out: dict[str, Any] = {"Reservations": [reservation(emu, r, v) for r, v in groups.items()]}
    if nxt:
        out["NextToken"] = nxt
    return out


def _describe_store(
    emu: DescribeState,
    p: dict[str, Any],
    store: dict[str, Any],
    spec: Any,
    ids_key: str,
    kind: str,
    result_key: str,
    render: Callable[[Any], dict[str, Any]],
) -> dict[str, Any]:
    """Describe* over one id-keyed store: ids (each must exist), filters, pages."""
    filters = filter_values(p.get("Filters"))
    check_filters(filters, spec)
    ids = id_list(p, ids_key)
    cands = named(store, ids, kind) if ids else list(store.values())
    items = [x for x in cands if matches(x, filters, spec, tags_of)]
    page, nxt = paginate(items, p, ids_key=ids_key)
    out: dict[str, Any] = {result_key: [render(x) for x in page]}
    if nxt:
        out["NextToken"] = nxt
    return out


def describe_subnets(emu: DescribeState, p: dict[str, Any]) -> dict[str, Any]:
    return _describe_store(
        emu,
        p,
        emu.subnets,
        SUBNET_FILTERS,
        "SubnetIds",
        "Subnet",
        "Subnets",
        lambda s: s.render(emu.owner, emu.config.region),
    )


def describe_vpcs(emu: DescribeState, p: dict[str, Any]) -> dict[str, Any]:
    return _describe_store(emu, p, emu.vpcs, VPC_FILTERS, "VpcIds", "Vpc", "Vpcs", lambda v: v.render(emu.owner))


def render_type(lim: InstanceLimits) -> dict[str, Any]:
    """As DescribeInstanceTypes answers: ``max_enis`` on each card, their sum the instance's maximum."""
    per_card = lim.max_enis
    return {
        "InstanceType": lim.instance_type,
        "CurrentGeneration": True,
        "Hypervisor": "nitro" if lim.prefix_capable else "xen",
        "NetworkInfo": {
            "MaximumNetworkInterfaces": lim.total_enis,
            "MaximumNetworkCards": lim.network_cards,
            "DefaultNetworkCardIndex": 0,
            "NetworkCards": [
                {"NetworkCardIndex": i, "MaximumNetworkInterfaces": per_card} for i in range(lim.network_cards)
            ],
            "Ipv4AddressesPerInterface": lim.ipv4_per_eni,
            "Ipv6AddressesPerInterface": lim.ipv4_per_eni,
            "Ipv6Supported": True,
            "EnaSupport": "required" if lim.prefix_capable else "unsupported",
        },
    }


def describe_instance_types(emu: DescribeState, p: dict[str, Any]) -> dict[str, Any]:
    filters = filter_values(p.get("Filters"))
    getters: dict[str, Getter] = {
        "instance-type": lambda t: [t.instance_type],
        "hypervisor": lambda t: ["nitro" if t.prefix_capable else "xen"],
    }
    check_filters(filters, getters)
    names = id_list(p, "InstanceTypes")
    for n in names:
        if n not in emu._types:
            raise Ec2Error("InvalidInstanceType", f"The following supplied instance types do not exist: [{n}]")
    cands = [emu._types[n] for n in dict.fromkeys(names)] if names else list(emu._types.values())
    items = [t for t in cands if matches(t, filters, getters, lambda _t: {})]
    page, nxt = paginate(items, p, lo=5, hi=100)
    out: dict[str, Any] = {"InstanceTypes": [render_type(t) for t in page]}
    if nxt:
        out["NextToken"] = nxt
    return out


def instance_metadata(emu: DescribeState, inst: Instance) -> dict[str, Any]:
    """The IMDS ``meta-data`` tree of ``inst`` now: dicts are directories,
    strings are leaves. ENIs appear only once their attach is visible."""
    primary = emu.enis.get(inst.primary_eni, None)
    macs: dict[str, Any] = {}
    for (card, dev), eid in sorted(inst.slots.items()):
        eni = emu.enis[eid]
        att = eni.attachment
        if att is None or att.status == "attaching":
            continue
        subnet = emu.subnets[eni.subnet_id]
        d: dict[str, Any] = {
            "device-number": str(dev),
            "network-card": str(card),
            "interface-id": eni.id,
            # IMDS answers 404 for an EFA-only interface's (it has no IP address at all)
            **({"local-ipv4s": "\n".join([eni.primary_ip, *eni.secondary])} if eni.primary_ip else {}),
            "mac": eni.mac,
            "owner-id": emu.owner,
            "security-group-ids": "\n".join(eni.groups),
            "subnet-id": eni.subnet_id,
            "subnet-ipv4-cidr-block": subnet.cidr,
            "vpc-id": eni.vpc_id,
            "vpc-ipv4-cidr-block": emu.vpcs[eni.vpc_id].cidr,
            "vpc-ipv4-cidr-blocks": emu.vpcs[eni.vpc_id].cidr,
        }
        if eni.prefixes:
            d["ipv4-prefix"] = "\n".join(eni.prefixes)
        macs[eni.mac] = d
    md: dict[str, Any] = {
        "ami-id": inst.image_id,
        "instance-id": inst.id,
        "instance-type": inst.instance_type,
        "local-ipv4": primary.primary_ip if primary else "",
        "mac": primary.mac if primary else "",
        "placement": {"availability-zone": inst.az, "region": emu.config.region},
        "network": {"interfaces": {"macs": macs}},
    }
    return md


HANDLERS: dict[str, Handler[DescribeState]] = {
    "DescribeNetworkInterfaces": describe_enis,
    "DescribeInstances": describe_instances,
    "DescribeSubnets": describe_subnets,
    "DescribeVpcs": describe_vpcs,
    "DescribeInstanceTypes": describe_instance_types,
}
