"""Set-up and tag handlers: VPCs, subnets and instances made through the API,
and tags on any of them or on an ENI.

The same state the direct set-up methods of :class:`~emulated.ec2.emulator.Ec2Emulator`
build (``add_vpc``, ``add_subnet``, ``run_instance``), reached as boto3 calls
(RunInstances with ClientToken idempotency, TerminateInstances, CreateVpc,
CreateSubnet, CreateTags, DeleteTags), and subnet CIDR reservations
(CreateSubnetCidrReservation, GetSubnetCidrReservations, DeleteSubnetCidrReservation;
what they do to assignment: :mod:`.cidr`).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping, Sequence
from typing import Any

from warmpool.limits import InstanceLimits, known

from .cidr import CidrReservation, SubnetPool
from .describe import render_instance, reservation
from .enis import delete_eni, new_efa_only_eni, new_eni
from .errors import Ec2Error, not_found
from .filters import paginate
from .registry import Handler, ResourceState, fingerprint, id_list, insufficient_addresses, req, tags_for
from .state import STATE_CODES, Attachment, EmulatedSubnet, Instance


def new_subnet(emu: ResourceState, vpc_id: str, cidr: str, az: str, subnet_id: str | None, tags: dict[str, str]) -> str:
    vpc = emu.vpcs.get(vpc_id)
    if vpc is None:
        raise not_found("Vpc", vpc_id)
    try:
        net = ipaddress.IPv4Network(cidr, strict=True)
    except ValueError as e:
        raise Ec2Error("InvalidParameterValue", f"Value ({cidr}) for parameter cidrBlock is invalid. {e}") from None
    if not net.subnet_of(ipaddress.IPv4Network(vpc.cidr)) or not 16 <= net.prefixlen <= 28:
        raise Ec2Error("InvalidSubnet.Range", f"The CIDR '{cidr}' is invalid.")
    for s in emu.subnets.values():
        if s.vpc_id == vpc_id and net.overlaps(s.pool.network):
            raise Ec2Error("InvalidSubnet.Conflict", f"The CIDR '{cidr}' conflicts with another subnet")
    sid = subnet_id or emu._id("subnet")
    if sid in emu.subnets:
        raise Ec2Error("InvalidParameterValue", f"subnet {sid} already exists")
    emu.subnets[sid] = EmulatedSubnet(
        sid, vpc_id, az, cidr, SubnetPool(cidr, emu.config.single_placement, emu.config.placement_seed), tags
    )
    return sid


def limits_of(emu: ResourceState, instance_type: str) -> InstanceLimits:
    lim = emu._types.get(instance_type)
    if lim is None:
        try:
            lim = known(instance_type)
        except KeyError:
            raise Ec2Error("InvalidParameterValue", f"Invalid value '{instance_type}' for InstanceType.") from None
    return lim


def launch_instance(
    emu: ResourceState,
    instance_type: str,
    subnet_id: str,
    tags: dict[str, str],
    instance_id: str | None,
    private_ip: str | None,
    reservation_id: str,
    image_id: str,
    secondary_count: int = 0,
    prefix_count: int = 0,
    efa_only: Sequence[tuple[int, int]] = (),
    eni_tags: Mapping[str, str] | None = None,
) -> str:
    """One instance and its primary ENI, which holds ``secondary_count`` secondary addresses and
    ``prefix_count`` /28 prefixes from the start (RunInstances' ``NetworkInterfaces[0]``
    ``SecondaryPrivateIpAddressCount`` / ``Ipv4PrefixCount``, as a launch template sets them) and
    ``eni_tags`` (RunInstances' or a launch template's ``TagSpecifications`` for
    ``network-interface``: every interface made at launch gets them)."""
    lim = limits_of(emu, instance_type)
    if secondary_count + prefix_count > lim.ipv4_per_eni - 1:
        raise Ec2Error(
            "PrivateIpAddressLimitExceeded",
            f"Number of private addresses will exceed limit for instance type {instance_type}",
        )
    if prefix_count and not lim.prefix_capable:
        raise Ec2Error("InvalidParameterValue", f"Instance type {instance_type} does not support IPv4 prefixes")
    subnet = emu._subnet(subnet_id)
    now = emu.clock.now()
    iid = instance_id or emu._id("i")
    eni = new_eni(emu, subnet, private_ip, secondary_count, [], prefix_count, [], f"Primary network interface of {iid}")
    eni.tags.update(eni_tags or {})
    inst = Instance(
        iid,
        instance_type,
        lim,
        subnet.id,
        subnet.vpc_id,
        subnet.az,
        now,
        reservation_id,
        image_id,
        eni.id,
        tags,
    )
    emu.instances[iid] = inst
    att = Attachment(emu._id("eni-attach"), iid, 0, 0, now, now, True, "attached")
    eni.attachment = att
    emu._attachments[att.id] = eni.id
    inst.slots[(0, 0)] = eni.id
    for card, dev in efa_only:
        # Launched with the instance (a launch template's EFA-only interfaces), attached at once
        # and deleted with it: no IP address, so IMDS serves no local-ipv4s for it.
        if (card, dev) == (0, 0) or not 0 <= card < lim.network_cards or (card, dev) in inst.slots:
            raise Ec2Error("InvalidParameterValue", f"Invalid EFA-only interface slot card {card} device {dev}")
        efa = new_efa_only_eni(emu, subnet, f"EFA-only interface of {iid}")
        efa.tags.update(eni_tags or {})
        att = Attachment(emu._id("eni-attach"), iid, dev, card, now, now, True, "attached")
        efa.attachment = att
        emu._attachments[att.id] = efa.id
        inst.slots[(card, dev)] = efa.id
    return iid


def terminate(emu: ResourceState, instance_id: str) -> str:
    inst = emu._instance(instance_id)
    prev = inst.state
    if prev == "terminated":
        return prev
    for eni_id in list(inst.slots.values()):
        eni = emu.enis[eni_id]
        att = eni.attachment
        assert att is not None
        emu._finish_detach(eni)
        if att.delete_on_termination:
            delete_eni(emu, eni)
    inst.state = "terminated"
    return prev


def _taggable(emu: ResourceState, rid: str) -> Any:
    for prefix, table, kind in (
        ("eni-", emu.enis, "NetworkInterface"),
        ("i-", emu.instances, "Instance"),
        ("subnet-", emu.subnets, "Subnet"),
        ("vpc-", emu.vpcs, "Vpc"),
    ):
        if rid.startswith(prefix) and not (prefix == "eni-" and rid.startswith("eni-attach-")):
            obj = table.get(rid)
            if obj is None:
                raise not_found(kind, rid)
            return obj
    if rid in emu.subnets:
        return emu.subnets[rid]
    raise Ec2Error("InvalidID", f"The ID '{rid}' is not valid")


def create_tags(emu: ResourceState, p: dict[str, Any]) -> dict[str, Any]:
    objs = [_taggable(emu, r) for r in id_list(p, "Resources")]
    if not objs:
        raise Ec2Error("MissingParameter", "The request must contain the parameter resourceIdSet")
    tags = [(str(t["Key"]), str(t.get("Value", ""))) for t in req(p, "Tags")]
    for o in objs:
        for k, v in tags:
            o.tags[k] = v
    return {}


def delete_tags(emu: ResourceState, p: dict[str, Any]) -> dict[str, Any]:
    """EC2's DeleteTags: a tag given without a value goes whatever its value; with one
    (even empty), only when the value matches. Keys the resource lacks are ignored."""
    objs = [_taggable(emu, r) for r in id_list(p, "Resources")]
    if not objs:
        raise Ec2Error("MissingParameter", "The request must contain the parameter resourceIdSet")
    given = p.get("Tags")
    for o in objs:
        if not given:  # no tags named: every tag of the resource
            o.tags.clear()
            continue
        for t in given:
            key = str(t["Key"])
            if key in o.tags and ("Value" not in t or o.tags[key] == str(t["Value"])):
                del o.tags[key]
    return {}


def run_instances(emu: ResourceState, p: dict[str, Any]) -> dict[str, Any]:
    token = p.get("ClientToken")
    if token and token in emu._run_tokens:
        fp, resp = emu._run_tokens[token]
        if fp != fingerprint(p):
            raise Ec2Error("IdempotentParameterMismatch", f"The client token '{token}' was used with other parameters.")
        return dict(resp)
    itype = str(p.get("InstanceType") or "m5.large")
    limits_of(emu, itype)
    n = int(req(p, "MinCount"))
    m = int(req(p, "MaxCount"))
    if not 1 <= n <= m:
        raise Ec2Error("InvalidParameterValue", "MinCount must be between 1 and MaxCount")
    sid = p.get("SubnetId")
    nic0: dict[str, Any] = next((x for x in p.get("NetworkInterfaces") or [] if int(x.get("DeviceIndex", 0)) == 0), {})
    if not sid:
        sid = nic0.get("SubnetId")
    if not sid:
        if not emu.subnets:
            raise Ec2Error("MissingInput", "No subnets found for the default VPC. Please specify a subnet.")
        sid = next(iter(emu.subnets))
    subnet = emu._subnet(str(sid))
    k = min(m, subnet.pool.available)
    if k < n:
        raise insufficient_addresses()
    rid = emu._id("r")
    tags = tags_for(p, "instance")
    made = [
        launch_instance(
            emu,
            itype,
            subnet.id,
            dict(tags),
            None,
            p.get("PrivateIpAddress") if n == 1 else None,
            rid,
            str(p.get("ImageId") or "ami-00000000000000000"),
            int(nic0.get("SecondaryPrivateIpAddressCount") or 0),
            int(nic0.get("Ipv4PrefixCount") or 0),
            eni_tags=tags_for(p, "network-interface"),
        )
        for _ in range(k)
    ]
    out = reservation(emu, rid, [render_instance(emu, emu.instances[i]) for i in made])
    if token:
        emu._run_tokens[token] = (fingerprint(p), out)
    return out


def terminate_instances(emu: ResourceState, p: dict[str, Any]) -> dict[str, Any]:
    ids = id_list(p, "InstanceIds")
    if not ids:
        raise Ec2Error("MissingParameter", "The request must contain the parameter InstanceId")
    for i in ids:
        emu._instance(i)
    out = []
    for i in ids:
        prev = terminate(emu, i)
        out.append(
            {
                "InstanceId": i,
                "CurrentState": {"Code": 48, "Name": "terminated"},
                "PreviousState": {"Code": STATE_CODES[prev], "Name": prev},
            }
        )
    return {"TerminatingInstances": out}


def create_vpc(emu: ResourceState, p: dict[str, Any]) -> dict[str, Any]:
    cidr = str(req(p, "CidrBlock"))
    try:
        net = ipaddress.IPv4Network(cidr, strict=True)
    except ValueError:
        raise Ec2Error("InvalidParameterValue", f"Value ({cidr}) for parameter cidrBlock is invalid.") from None
    if not 16 <= net.prefixlen <= 28:
        raise Ec2Error("InvalidVpc.Range", f"The CIDR '{cidr}' is invalid.")
    vid = emu.add_vpc(cidr, tags=tags_for(p, "vpc"))
    return {"Vpc": emu.vpcs[vid].render(emu.owner)}


def create_subnet(emu: ResourceState, p: dict[str, Any]) -> dict[str, Any]:
    sid = new_subnet(
        emu,
        str(req(p, "VpcId")),
        str(req(p, "CidrBlock")),
        str(p.get("AvailabilityZone") or f"{emu.config.region}a"),
        None,
        tags_for(p, "subnet"),
    )
    return {"Subnet": emu.subnets[sid].render(emu.owner, emu.config.region)}


def _render_reservation(emu: ResourceState, subnet_id: str, r: CidrReservation) -> dict[str, Any]:
    out: dict[str, Any] = {
        "SubnetCidrReservationId": r.id,
        "SubnetId": subnet_id,
        "Cidr": r.cidr,
        "ReservationType": r.type,
        "OwnerId": emu.owner,
        "Tags": [{"Key": k, "Value": v} for k, v in r.tags.items()],
    }
    if r.description:
        out["Description"] = r.description
    return out


def create_subnet_cidr_reservation(emu: ResourceState, p: dict[str, Any]) -> dict[str, Any]:
    sid = str(req(p, "SubnetId"))
    sub = emu._subnet(sid)
    cidr, rtype = str(req(p, "Cidr")), str(req(p, "ReservationType"))
    try:
        r = sub.pool.reserve(
            emu._id("scr"), cidr, rtype, str(p.get("Description") or ""), tags_for(p, "subnet-cidr-reservation")
        )
    except ValueError as e:
        raise Ec2Error("InvalidParameterValue", str(e)) from None
    return {"SubnetCidrReservation": _render_reservation(emu, sid, r)}


def get_subnet_cidr_reservations(emu: ResourceState, p: dict[str, Any]) -> dict[str, Any]:
    sid = str(req(p, "SubnetId"))
    sub = emu._subnet(sid)
    wanted = {str(f.get("Name")): [str(v) for v in f.get("Values") or []] for f in p.get("Filters") or []}
    unknown = set(wanted) - {"reservationType", "subnet-id", "cidr"}
    if unknown:
        raise Ec2Error("InvalidParameterValue", f"The filter '{sorted(unknown)[0]}' is invalid")
    items = [
        r
        for r in sub.pool.reservations.values()
        if all(
            v in vals
            for name, vals in wanted.items()
            for v in [{"reservationType": r.type, "subnet-id": sid, "cidr": r.cidr}[name]]
        )
    ]
    page, nxt = paginate(items, p)
    out: dict[str, Any] = {
        "SubnetIpv4CidrReservations": [_render_reservation(emu, sid, r) for r in page],
        "SubnetIpv6CidrReservations": [],
    }
    if nxt:
        out["NextToken"] = nxt
    return out


def delete_subnet_cidr_reservation(emu: ResourceState, p: dict[str, Any]) -> dict[str, Any]:
    rid = str(req(p, "SubnetCidrReservationId"))
    for sid, sub in emu.subnets.items():
        r = sub.pool.unreserve(rid)
        if r is not None:
            return {"DeletedSubnetCidrReservation": _render_reservation(emu, sid, r)}
    raise Ec2Error("InvalidSubnetCidrReservationID.NotFound", f"The subnet-cidr-reservation ID '{rid}' does not exist")


HANDLERS: dict[str, Handler[ResourceState]] = {
    "CreateTags": create_tags,
    "DeleteTags": delete_tags,
    "RunInstances": run_instances,
    "TerminateInstances": terminate_instances,
    "CreateVpc": create_vpc,
    "CreateSubnet": create_subnet,
    "CreateSubnetCidrReservation": create_subnet_cidr_reservation,
    "GetSubnetCidrReservations": get_subnet_cidr_reservations,
    "DeleteSubnetCidrReservation": delete_subnet_cidr_reservation,
}
