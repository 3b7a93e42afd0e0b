"""ENI operations: addresses and prefixes carved from the subnet, and the
handlers that create, address, attach, detach, modify and delete interfaces.

The rules are EC2's: per-instance ENI limits by network card, per-ENI address
limits by instance type (an unattached ENI is capped by the largest type),
/28 prefixes carved without overlap, subnet exhaustion, ClientToken
idempotency on CreateNetworkInterface, and the primary ENI never detaching.
Delays come from :class:`~emulated.ec2.emulator.Ec2Config`; the emulator applies them.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from typing import Any

from .errors import Ec2Error, not_found
from .registry import (
    MAX_IPV4_PER_ENI,
    EniState,
    Handler,
    count,
    fingerprint,
    insufficient_addresses,
    insufficient_cidr,
    req,
    tags_for,
)
from .state import Attachment, EmulatedEni, EmulatedSubnet


def new_eni(
    emu: EniState,
    subnet: EmulatedSubnet,
    primary: str | None,
    n_secondary: int,
    secondary: list[str],
    n_prefixes: int,
    prefixes: list[str],
    description: str,
) -> EmulatedEni:
    specific = ([primary] if primary else []) + secondary
    taken, taken_prefixes = carve(subnet, specific, (0 if primary else 1) + n_secondary, prefixes, n_prefixes)
    if primary is None:
        primary = taken[len(specific)]
    eni = EmulatedEni(
        emu._id("eni"),
        subnet.id,
        subnet.vpc_id,
        subnet.az,
        emu._mac(),
        primary,
        emu.clock.now(),
        secondary=[ip for ip in taken if ip != primary],
        prefixes=taken_prefixes,
        description=description,
    )
    emu.enis[eni.id] = eni
    for a in taken:
        emu._ip_owner[a] = eni.id
    for pfx in taken_prefixes:
        emu._ip_owner[pfx] = eni.id
    return eni


def carve(
    subnet: EmulatedSubnet,
    ips: list[str],
    n_ips: int,
    prefixes: list[str],
    n_prefixes: int,
    before: Callable[[str], None] | None = None,
) -> tuple[list[str], list[str]]:
    """Take ``ips`` and ``n_ips`` more addresses, ``prefixes`` and ``n_prefixes``
    more /28s from the subnet, all or none: (addresses, prefixes) in that order.
    ``before(ip)`` runs ahead of taking each of ``ips`` (an error it raises undoes the rest too)."""
    pool = subnet.pool
    taken: list[str] = []
    taken_prefixes: list[str] = []
    try:
        for ip in ips:
            if before is not None:
                before(ip)
            take_specific_ip(subnet, ip)
            taken.append(ip)
        got = pool.take_ips(n_ips)
        if got is None:
            raise insufficient_addresses()
        taken.extend(got)
        for pfx in prefixes:
            take_specific_prefix(subnet, pfx)
            taken_prefixes.append(pfx)
        gotp = pool.take_prefixes(n_prefixes)
        if gotp is None:
            raise insufficient_cidr()
        taken_prefixes.extend(gotp)
    except Ec2Error:
        for ip in taken:
            pool.release_ip(ip)
        for pfx in taken_prefixes:
            pool.release_prefix(pfx)
        raise
    return taken, taken_prefixes


def take_specific_ip(subnet: EmulatedSubnet, ip: str) -> None:
    pool = subnet.pool
    if pool.offset(ip) is None:
        raise Ec2Error("InvalidParameterValue", f"Address {ip} does not fall within the subnet's address range")
    if pool.exhausted:
        raise insufficient_addresses()
    if not pool.take_ip(ip):
        raise Ec2Error("InvalidIPAddress.InUse", f"The specified address {ip} is already in use.")


def take_specific_prefix(subnet: EmulatedSubnet, prefix: str) -> None:
    try:
        net = ipaddress.IPv4Network(prefix, strict=True)
    except ValueError:
        raise Ec2Error("InvalidParameterValue", f"Invalid IPv4 prefix {prefix}") from None
    if net.prefixlen != 28 or not net.subnet_of(subnet.pool.network):
        raise Ec2Error("InvalidParameterValue", f"Prefix {prefix} is not a /28 of subnet {subnet.id}")
    if not subnet.pool.take_prefix(prefix):
        raise (
            insufficient_cidr()
            if subnet.pool.exhausted
            else Ec2Error("InvalidParameterValue", f"Prefix {prefix} overlaps addresses in use")
        )


def new_efa_only_eni(emu: EniState, subnet: EmulatedSubnet, description: str) -> EmulatedEni:
    """An EFA-only interface in ``subnet``: no IP address at all (``interface_type`` ``efa-only``)."""
    eni = EmulatedEni(
        emu._id("eni"),
        subnet.id,
        subnet.vpc_id,
        subnet.az,
        emu._mac(),
        "",
        emu.clock.now(),
        description=description,
        interface_type="efa-only",
    )
    emu.enis[eni.id] = eni
    return eni


def delete_eni(emu: EniState, eni: EmulatedEni) -> None:
    pool = emu.subnets[eni.subnet_id].pool
    for ip in [eni.primary_ip, *eni.secondary] if eni.primary_ip else eni.secondary:
        pool.release_ip(ip)
        emu._ip_owner.pop(ip, None)
    for pfx in eni.prefixes:
        pool.release_prefix(pfx)
        emu._ip_owner.pop(pfx, None)
    del emu.enis[eni.id]


def create_eni(emu: EniState, p: dict[str, Any]) -> dict[str, Any]:
    token = p.get("ClientToken")
    fp = ""
    if token:
        if len(token) > 64:
            raise Ec2Error("InvalidParameterValue", "ClientToken must be at most 64 ASCII characters")
        fp = fingerprint(p)
        seen = emu._tokens.get(token)
        if seen is not None:
            if seen[0] != fp:
                raise Ec2Error(
                    "IdempotentParameterMismatch",
                    f"The client token '{token}' has already been used with different parameters.",
                )
            return {"NetworkInterface": _copy_eni_view(seen[1]["NetworkInterface"]), "ClientToken": token}
    subnet = emu._subnet(req(p, "SubnetId"))
    primary = p.get("PrivateIpAddress")
    secondary: list[str] = []
    for entry in p.get("PrivateIpAddresses") or []:
        ip = entry["PrivateIpAddress"]
        if entry.get("Primary"):
            if primary and primary != ip:
                raise Ec2Error("InvalidParameterCombination", "Two primary private IP addresses specified")
            primary = ip
        else:
            secondary.append(ip)
    n_sec = count(p, "SecondaryPrivateIpAddressCount")
    prefixes = [x["Ipv4Prefix"] for x in p.get("Ipv4Prefixes") or []]
    n_pref = count(p, "Ipv4PrefixCount")
    if n_sec and secondary:
        raise Ec2Error(
            "InvalidParameterCombination",
            "SecondaryPrivateIpAddressCount cannot be used with secondary PrivateIpAddresses",
        )
    if n_pref and prefixes:
        raise Ec2Error("InvalidParameterCombination", "Ipv4PrefixCount cannot be used with Ipv4Prefixes")
    slots = 1 + n_sec + len(secondary) + n_pref + len(prefixes)
    if slots > MAX_IPV4_PER_ENI:
        raise Ec2Error("PrivateIpAddressLimitExceeded", "Number of private addresses will exceed limit.")
    if p.get("InterfaceType") == "efa-only":
        # "If you specify efa-only, do not assign any IP addresses to the network interface.
        # EFA-only network interfaces do not support IP addresses." (CreateNetworkInterface)
        if primary or secondary or n_sec or prefixes or n_pref:
            raise Ec2Error("InvalidParameterCombination", "EFA-only network interfaces do not support IP addresses.")
        eni = new_efa_only_eni(emu, subnet, str(p.get("Description") or ""))
    else:
        eni = new_eni(emu, subnet, primary, n_sec, secondary, n_pref, prefixes, str(p.get("Description") or ""))
    eni.groups = list(p.get("Groups") or [])
    eni.tags = tags_for(p, "network-interface")
    if p.get("InterfaceType"):
        eni.interface_type = str(p["InterfaceType"])
    out: dict[str, Any] = {"NetworkInterface": eni.render(emu.owner)}
    if token:
        out["ClientToken"] = token
        emu._tokens[token] = (
            fp,
            {"NetworkInterface": _copy_eni_view(out["NetworkInterface"]), "ClientToken": token},
        )
    return out


def _copy_eni_view(view: dict[str, Any]) -> dict[str, Any]:
    """A deep copy of a rendered ENI (datetimes kept)."""
    out: dict[str, Any] = {}
    for k, v in view.items():
        if isinstance(v, dict):
            out[k] = dict(v)
        elif isinstance(v, list):
            out[k] = [dict(x) if isinstance(x, dict) else x for x in v]
        else:
            out[k] = v
    return out


def assign(emu: EniState, p: dict[str, Any]) -> dict[str, Any]:
    eni = emu._eni(req(p, "NetworkInterfaceId"))
    if eni.efa_only:
        raise Ec2Error("InvalidParameterValue", f"EFA-only network interface {eni.id} does not support IP addresses.")
    ips = list(p.get("PrivateIpAddresses") or [])
    n_ips = count(p, "SecondaryPrivateIpAddressCount")
    prefixes = [str(x) for x in p.get("Ipv4Prefixes") or []]
    n_pref = count(p, "Ipv4PrefixCount")
    if ips and n_ips:
        raise Ec2Error(
            "InvalidParameterCombination",
            "PrivateIpAddresses and SecondaryPrivateIpAddressCount cannot be used together",
        )
    if prefixes and n_pref:
        raise Ec2Error("InvalidParameterCombination", "Ipv4Prefixes and Ipv4PrefixCount cannot be used together")
    if not (ips or n_ips or prefixes or n_pref):
        raise Ec2Error(
            "MissingParameter",
            "Either PrivateIpAddresses, SecondaryPrivateIpAddressCount, Ipv4Prefixes or Ipv4PrefixCount "
            "must be specified",
        )
    limit, lim = emu._eni_limit(eni)
    if (prefixes or n_pref) and lim is not None and not lim.prefix_capable:
        raise Ec2Error(
            "InvalidParameterValue",
            f"Prefix delegation is not supported for instance type {lim.instance_type}",
        )
    subnet = emu.subnets[eni.subnet_id]
    reassigned = [ip for ip in ips if emu._ip_owner.get(ip) not in (None, eni.id)]
    if reassigned and not p.get("AllowReassignment"):
        raise Ec2Error("InvalidIPAddress.InUse", f"The specified address {reassigned[0]} is already in use.")
    ips = [ip for ip in ips if emu._ip_owner.get(ip) != eni.id]
    if eni.slots_used + len(ips) + n_ips + len(prefixes) + n_pref > limit:
        raise Ec2Error("PrivateIpAddressLimitExceeded", "Number of private addresses will exceed limit.")
    pool = subnet.pool

    def move_here(ip: str) -> None:
        owner_id = emu._ip_owner.get(ip)
        if owner_id is not None:  # AllowReassignment: move it here
            other = emu.enis[owner_id]
            if ip == other.primary_ip:
                raise Ec2Error("InvalidIPAddress.InUse", f"The specified address {ip} is a primary address.")
            other.secondary.remove(ip)
            pool.release_ip(ip)

    new_ips, new_prefixes = carve(subnet, ips, n_ips, prefixes, n_pref, before=move_here)
    eni.secondary.extend(new_ips)
    eni.prefixes.extend(new_prefixes)
    for a in (*new_ips, *new_prefixes):
        emu._ip_owner[a] = eni.id
    return {
        "NetworkInterfaceId": eni.id,
        "AssignedPrivateIpAddresses": [{"PrivateIpAddress": ip} for ip in new_ips],
        "AssignedIpv4Prefixes": [{"Ipv4Prefix": x} for x in new_prefixes],
    }


def unassign(emu: EniState, p: dict[str, Any]) -> dict[str, Any]:
    eni = emu._eni(req(p, "NetworkInterfaceId"))
    ips = list(dict.fromkeys(p.get("PrivateIpAddresses") or []))
    prefixes = list(dict.fromkeys(p.get("Ipv4Prefixes") or []))
    if not (ips or prefixes):
        raise Ec2Error("MissingParameter", "Either PrivateIpAddresses or Ipv4Prefixes must be specified")
    if ips and prefixes:
        raise Ec2Error("InvalidParameterCombination", "PrivateIpAddresses and Ipv4Prefixes cannot be used together")
    have = set(eni.secondary)
    bad = [ip for ip in ips if ip not in have]
    if bad:
        raise Ec2Error(
            "InvalidParameterValue", f"Some of the specified addresses are not assigned to interface {eni.id}"
        )
    havep = set(eni.prefixes)
    if any(x not in havep for x in prefixes):
        raise Ec2Error("InvalidParameterValue", f"Some of the specified prefixes are not assigned to {eni.id}")
    pool = emu.subnets[eni.subnet_id].pool
    drop = set(ips)
    eni.secondary = [ip for ip in eni.secondary if ip not in drop]
    for ip in ips:
        pool.release_ip(ip)
        emu._ip_owner.pop(ip, None)
    dropp = set(prefixes)
    eni.prefixes = [x for x in eni.prefixes if x not in dropp]
    for x in prefixes:
        pool.release_prefix(x)
        emu._ip_owner.pop(x, None)
    return {}


def attach(emu: EniState, p: dict[str, Any]) -> dict[str, Any]:
    eni = emu._eni(req(p, "NetworkInterfaceId"))
    inst = emu._instance(req(p, "InstanceId"))
    if p.get("DeviceIndex") is None:
        raise Ec2Error("MissingParameter", "The request must contain the parameter DeviceIndex")
    dev = int(p["DeviceIndex"])
    card = int(p.get("NetworkCardIndex") or 0)
    if inst.state != "running":
        raise Ec2Error(
            "IncorrectInstanceState", f"The instance '{inst.id}' is not in a valid state for this operation."
        )
    if eni.attachment is not None:
        raise Ec2Error("InvalidNetworkInterface.InUse", f"Interface: [{eni.id}] in use.")
    if eni.az != inst.az or eni.vpc_id != inst.vpc_id:
        raise Ec2Error(
            "InvalidParameterCombination",
            "You may not attach a network interface to an instance if they are not in the same availability zone",
        )
    lim = inst.limits
    if not 0 <= card < lim.network_cards:
        raise Ec2Error("InvalidParameterValue", f"Invalid value '{card}' for networkCardIndex.")
    if dev < 0:
        raise Ec2Error("InvalidParameterValue", f"Invalid value '{dev}' for deviceIndex.")
    on_card = sum(1 for c, _ in inst.slots if c == card)
    if on_card >= lim.max_enis:  # each network card takes max_enis (limits table: the default card's)
        raise Ec2Error(
            "AttachmentLimitExceeded",
            f"Interface count {on_card + 1} exceeds the limit for {inst.instance_type} on network card {card}",
        )
    if (card, dev) in inst.slots:
        raise Ec2Error(
            "InvalidParameterValue",
            f"Instance '{inst.id}' already has an interface attached at device index '{dev}'.",
        )
    if eni.slots_used > lim.ipv4_per_eni:
        raise Ec2Error(
            "PrivateIpAddressLimitExceeded",
            f"Interface {eni.id} has more addresses than {inst.instance_type} allows per interface.",
        )
    now = emu.clock.now()
    delay = emu.config.attach_delay_s
    att = Attachment(
        emu._id("eni-attach"),
        inst.id,
        dev,
        card,
        now,
        now + delay,
        False,
        "attached" if delay <= 0 else "attaching",
    )
    eni.attachment = att
    inst.slots[(card, dev)] = eni.id
    emu._attachments[att.id] = eni.id
    if delay > 0:
        emu._schedule(now + delay, "attach", eni.id, att.id)
    else:
        emu._fire_attach(eni)
    return {"AttachmentId": att.id, "NetworkCardIndex": card}


def _eni_by_attachment(emu: EniState, att_id: str) -> EmulatedEni:
    eid = emu._attachments.get(att_id)
    if eid is None:
        raise not_found("Attachment", att_id)
    return emu.enis[eid]


def detach(emu: EniState, p: dict[str, Any]) -> dict[str, Any]:
    eni = _eni_by_attachment(emu, req(p, "AttachmentId"))
    att = eni.attachment
    assert att is not None
    if att.device_index == 0 and att.card == 0:
        raise Ec2Error(
            "OperationNotPermitted",
            "The network interface at device index 0 and networkCard index 0 cannot be detached.",
        )
    if att.status == "detaching":
        return {}
    if att.id in emu.stuck or p.get("Force"):
        emu.stuck.discard(att.id)
    elif emu.stuck_detach_rate > 0 and emu.stuck_draw() < emu.stuck_detach_rate:
        emu.stuck.add(att.id)  # answered, yet the ENI stays in-use and attached
        return {}
    delay = emu.config.detach_delay_s
    if delay > 0:
        att.status = "detaching"
        emu._schedule(emu.clock.now() + delay, "detach", eni.id, att.id)
    else:
        emu._finish_detach(eni)
    return {}


def delete(emu: EniState, p: dict[str, Any]) -> dict[str, Any]:
    eni = emu._eni(req(p, "NetworkInterfaceId"))
    if eni.attachment is not None:
        raise Ec2Error("InvalidNetworkInterface.InUse", f"The network interface '{eni.id}' is currently in use.")
    delete_eni(emu, eni)
    return {}


def modify(emu: EniState, p: dict[str, Any]) -> dict[str, Any]:
    eni = emu._eni(req(p, "NetworkInterfaceId"))
    att = p.get("Attachment")
    if att:
        aid = req(att, "AttachmentId")
        if eni.attachment is None or eni.attachment.id != aid:
            raise not_found("Attachment", aid)
        if att.get("DeleteOnTermination") is not None:
            eni.attachment.delete_on_termination = bool(att["DeleteOnTermination"])
    if p.get("Description") is not None:
        eni.description = str(p["Description"].get("Value", ""))
    if p.get("SourceDestCheck") is not None:
        eni.source_dest_check = bool(p["SourceDestCheck"].get("Value"))
    if p.get("Groups"):
        eni.groups = list(p["Groups"])
    return {}


HANDLERS: dict[str, Handler[EniState]] = {
    "CreateNetworkInterface": create_eni,
    "AssignPrivateIpAddresses": assign,
    "UnassignPrivateIpAddresses": unassign,
    "AttachNetworkInterface": attach,
    "DetachNetworkInterface": detach,
    "DeleteNetworkInterface": delete,
    "ModifyNetworkInterfaceAttribute": modify,
}
