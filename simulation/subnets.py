"""Issue 24's subnet worlds: pod subnets found by tag, fragmented ones, custom networking.

A seed whose schedule holds ``multi-subnet``, ``fragmented`` or ``custom-networking``
(:func:`simulation.schedule._subnet_worlds`) runs the stack configured as a cluster with such
subnets would run it: pod subnets by discovery (the stack's ``subnet_discovery``, no subnet ids:
the allocator's ``WARMPOOL_ENABLE_SUBNET_DISCOVERY`` and the IAM statement
``CreateEniInDiscoveredSubnets``), with the ``custom_network`` map when drawn (the allocator's
``WARMPOOL_CUSTOM_NETWORK``, the agents' ``AWS_VPC_K8S_CNI_CUSTOM_NETWORK_CFG``, and the IAM
statement ``CreateEniInCustomNetworkSubnets``: the snapshot ``iam_policies_discover-custom.json``)
and ``named_placement`` when drawn. :func:`build` makes the subnets before the nodes join; the
event at its ``at`` does what changes later (a subnet tagged during the run).

What the world knows of its subnets (:class:`PodNets`) is written here, from how it made
them, not read from the product's rule (``warmpool/subnets.py``), and the checks judge the
allocator's calls by it (docs/allocator.md, "Pod subnets"):

* ``eni-subnet``: a new ENI of an ordinary node goes in a candidate pod subnet of its zone
  (one tagged ``kubernetes.io/role/cni=1``, or its own subnet unless tagged ``=0``; a subnet
  tagged later only once tagged), never in a subnet tagged ``=0`` nor in one the custom map
  names; a new ENI of a custom-networking node goes only in its zone's mapped subnets;
* ``custom-primary-used``: the allocator never assigns an address to a custom-networking
  node's primary ENI, and no pod there holds one of its addresses.
"""

from __future__ import annotations

import ipaddress
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from emulated.ec2 import Ec2Emulator
from simulation import kinds as k
from simulation.kinds import Event
from simulation.view import WorldView
from warmpool import names

ZONE = "us-east-1a"
ROLE_1 = {names.TAG_SUBNET_ROLE: "1"}
GROUP = "sg-0123456789abcdef0"
"""The custom map's security group, when drawn (emulated EC2 does not model groups beyond
their ids; the stack's policy allows any group of the VPC, no ``security_group_ids`` being set)."""
PER_FOREIGN_ENI = 10
"""Foreign addresses per foreign ENI breaking /28s."""
MAX_SECONDARIES = 49
"""Secondary addresses per foreign ENI crowding a subnet (EC2 takes up to 50 per ENI)."""


@dataclass
class PodNets:
    """The world's pod subnets, as it made them."""

    main: str
    """The nodes' own subnet."""
    variant: str | None = None
    """The stack variant the world runs (its policy snapshot, :mod:`infra.policy_snapshot`);
    ``None``: the default configuration (one subnet, by id)."""
    pod: set[str] = field(default_factory=set)
    """Where an ordinary node's new ENIs may go now (grows as a subnet gets tagged)."""
    excluded: set[str] = field(default_factory=set)
    """Tagged ``kubernetes.io/role/cni=0``."""
    custom: tuple[str, ...] = ()
    """The custom-networking map's subnets of the zone."""
    groups: tuple[str, ...] = ()
    custom_nodes: frozenset[str] = frozenset()
    """The nodes (by name) whose agents run with custom networking."""
    late: str | None = None
    """A subnet tagged ``kubernetes.io/role/cni=1`` only at its event (untagged until then)."""
    named_placement: bool = False
    singles_beside_28: set[str] = field(default_factory=set)
    """The nodes the allocator gave single addresses while a /28 was whole in the subnet the call
    used (:func:`check_call`): in prefix mode such a node may hold singles where a /28 would have
    gone, and ``simulation.checks.holds_all_it_can`` does not excuse its waiting pods (review 26,
    P1). With named placement a /28 whole only because the allocator released part of it within
    the hold (:attr:`released`) is not counted: no container may name it yet."""
    hold_s: float = 0.0
    """Named placement's release hold (the allocator's ``placement_release_hold_s``) less the
    widest gap between two allocator containers' clocks the plan draws (``lambda-clock-skew``),
    so that a block counted held is one no container may name; 0: nothing is counted held."""
    released: dict[str, dict[str, float]] = field(default_factory=dict)
    """Per subnet, each address and /28 the allocator released (an Unassign, or the Detach of its
    ENI: what docs/allocator.md, "Prefix placement that does not fragment", step 5, holds) and the
    world's time of the call."""

    def settings(self) -> dict[str, Any]:
        """The allocator's settings the stack variant changes (the rest: the defaults)."""
        out: dict[str, Any] = {}
        if self.custom:
            zone: dict[str, list[str]] = {"subnets": list(self.custom)}
            if self.groups:
                zone["security_groups"] = list(self.groups)
            out["custom_network"] = {ZONE: zone}
        if self.named_placement:
            out["named_placement"] = True
        return out

    def candidates(self, custom_node: bool) -> set[str]:
        """The subnets a node's new ENI may go in now."""
        return set(self.custom) if custom_node else set(self.pod)


SUBNET_EVENTS = (k.MultiSubnet, k.Fragmented, k.CustomNetworking)


def build(emu: Ec2Emulator, vpc: str, main: str, seed: int, events: Sequence[Event]) -> PodNets:
    """The subnets of the plan's subnet worlds, made before the nodes join (a plan without them:
    the nodes' subnet alone, the default configuration)."""
    nets = PodNets(main=main, pod={main})
    got = {type(e): e for e in events if isinstance(e, SUBNET_EVENTS)}
    if not got:
        return nets
    nets.variant = "discover"
    client = emu.client()

    def subnet(third: int, plen: int, tags: dict[str, str]) -> str:
        return emu.add_subnet(az=ZONE, cidr=f"10.0.{third}.0/{plen}", vpc_id=vpc, tags=tags)

    ms = got.get(k.MultiSubnet)
    if isinstance(ms, k.MultiSubnet):
        for i, plen in enumerate(_sizes(ms.sizes)):
            nets.pod.add(subnet(8 + i, plen, dict(ROLE_1)))
        if ms.excluded == "own":
            client.create_tags(Resources=[main], Tags=[{"Key": names.TAG_SUBNET_ROLE, "Value": "0"}])
            nets.pod.discard(main)
            nets.excluded.add(main)
        elif ms.excluded == "extra":
            nets.excluded.add(subnet(12, 24, {names.TAG_SUBNET_ROLE: "0"}))
        if ms.late:
            nets.late = subnet(13, 25, {})
        if ms.main_free:
            _crowd(emu, main, emu.subnets[main].pool.available - ms.main_free)
    fr = got.get(k.Fragmented)
    if isinstance(fr, k.Fragmented):
        second = subnet(16, fr.second, dict(ROLE_1))
        nets.pod.add(second)
        reserved = None
        if fr.reservation:
            reserved = list(ipaddress.IPv4Network(emu.subnets[second].cidr).subnets(prefixlen_diff=1))[1]
            client.create_subnet_cidr_reservation(SubnetId=second, Cidr=str(reserved), ReservationType="prefix")
        rng = random.Random(f"{seed}/fragmented")
        _break_blocks(emu, main, fr.broken, rng)
        _break_blocks(emu, second, fr.second_broken, rng, skip=reserved)
        nets.named_placement = fr.named
    cn = got.get(k.CustomNetworking)
    if isinstance(cn, k.CustomNetworking):
        nets.custom = tuple(
            subnet(32 + i, plen, dict(ROLE_1) if cn.tagged else {}) for i, plen in enumerate(_sizes(cn.sizes))
        )
        nets.groups = (GROUP,) if cn.groups else ()
        nets.custom_nodes = frozenset(cn.nodes.split(","))
        nets.variant = "discover-custom"
    return nets


def hold_for_check(hold_s: float, events: Sequence[Event]) -> float:
    """:attr:`PodNets.hold_s`: the allocator's hold less the widest gap between two of its
    containers' clocks the plan draws (a container behind the one that wrote a release reads it
    held for that much less)."""
    offsets = [0.0]
    for e in events:
        if isinstance(e, k.LambdaClockSkew):
            offsets += e.offsets()
    return max(0.0, hold_s - (max(offsets) - min(offsets)))


def _sizes(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def _in_use(emu: Ec2Emulator, subnet_id: str) -> set[str]:
    out: set[str] = set()
    for e in emu.enis.values():
        if e.subnet_id == subnet_id:
            out.update([e.primary_ip, *e.secondary])
            for p in e.prefixes:
                out.update(str(h) for h in ipaddress.IPv4Network(p))
    return out


def _break_blocks(
    emu: Ec2Emulator,
    subnet_id: str,
    fraction: float,
    rng: random.Random,
    skip: ipaddress.IPv4Network | None = None,
) -> None:
    """Foreign addresses (on foreign ENIs, named) in ``fraction`` of the subnet's /28s, one in
    each, so no prefix fits there (``skip``: a range left whole, a prefix reservation's)."""
    net = ipaddress.IPv4Network(emu.subnets[subnet_id].cidr)
    edge = {net.network_address + i for i in range(4)} | {net.broadcast_address}  # AWS reserves them
    taken = _in_use(emu, subnet_id)
    picks: list[str] = []
    for block in net.subnets(new_prefix=28):
        if (skip is not None and block.subnet_of(skip)) or rng.random() >= fraction:
            continue
        hosts = [str(h) for h in block if h not in edge and str(h) not in taken]
        if hosts:
            picks.append(rng.choice(hosts))
    _foreign(emu, subnet_id, picks)


def _foreign(emu: Ec2Emulator, subnet_id: str, ips: Iterable[str]) -> None:
    client = emu.client()
    left = list(ips)
    while left:
        chunk, left = left[:PER_FOREIGN_ENI], left[PER_FOREIGN_ENI:]
        client.create_network_interface(
            SubnetId=subnet_id,
            PrivateIpAddresses=[{"PrivateIpAddress": ip, "Primary": i == 0} for i, ip in enumerate(chunk)],
        )


def _crowd(emu: Ec2Emulator, subnet_id: str, n: int) -> None:
    """Foreign ENIs holding ``n`` addresses of the subnet (by count: where EC2 puts them)."""
    client = emu.client()
    while n > 0:
        k_sec = min(n - 1, MAX_SECONDARIES)
        client.create_network_interface(SubnetId=subnet_id, SecondaryPrivateIpAddressCount=k_sec)
        n -= 1 + k_sec


# --- the events (at their ``at``) -----------------------------------------------------------


class SubnetsWorld(WorldView, Protocol):
    """What the subnet worlds reach of the seed's world (:class:`simulation.world.SimWorld`)."""

    @property
    def nets(self) -> PodNets: ...


def on_multi_subnet(w: SubnetsWorld, ev: k.MultiSubnet) -> None:
    w.fault(f"{ev.kind}:{len(_sizes(ev.sizes))}-tagged" + (f",{ev.excluded}=0" if ev.excluded else ""))
    late = w.nets.late
    if ev.late and late is not None:
        w.emu.client().create_tags(Resources=[late], Tags=[{"Key": names.TAG_SUBNET_ROLE, "Value": "1"}])
        w.nets.pod.add(late)
        w.fault(f"{ev.kind}:tagged-late")


def on_fragmented(w: SubnetsWorld, ev: k.Fragmented) -> None:
    w.fault(ev.kind)
    if ev.reservation:
        w.fault(f"{ev.kind}:prefix-reservation")
    if ev.named:
        w.fault(f"{ev.kind}:named-placement")


def on_custom_networking(w: SubnetsWorld, ev: k.CustomNetworking) -> None:
    w.fault(f"{ev.kind}:{'every node' if len(w.nets.custom_nodes) == len(w.plan.nodes) else 'some nodes'}")


# --- the checks -----------------------------------------------------------------------------


def check_call(w: SubnetsWorld, node: str | None, name: str, kw: dict[str, Any], at: float | None = None) -> None:
    """Before one of the allocator's EC2 calls for ``node`` (None: an instance without an agent
    here, e.g. a rogue one: an ordinary node): ``eni-subnet`` and ``custom-primary-used``.
    ``at``: the world's time at the call (the running invocation's point; None: ``w.now()``)."""
    nets = w.nets
    custom = node is not None and node in nets.custom_nodes
    _note_released(w, name, kw, at)
    _note_singles(w, node, name, kw, at)
    if name == "create_network_interface":
        sid = str(kw.get("SubnetId", ""))
        if nets.variant is not None:  # how often each subnet is used (the faults' counts)
            where = "own" if sid == nets.main else "mapped" if sid in nets.custom else "other"
            w.fault(f"subnet-world:eni-in-{where}{'-named' if kw.get('PrivateIpAddresses') else ''}")
        if sid not in nets.candidates(custom):
            why = (
                "tagged kubernetes.io/role/cni=0"
                if sid in nets.excluded
                else "in the custom-networking map"
                if sid in nets.custom
                else "not a candidate"
            )
            w.violation(
                "eni-subnet",
                f"the allocator creates an ENI for {node or 'an instance'} "
                f"({'custom networking' if custom else 'ordinary'}) in {sid} ({why}); "
                f"its candidates: {sorted(nets.candidates(custom))}",
            )
    elif name == "assign_private_ip_addresses" and custom:
        e = w.emu.enis.get(str(kw.get("NetworkInterfaceId", "")))
        att = e.attachment if e is not None else None
        if att is not None and att.card == 0 and att.device_index == 0:  # the primary's slot
            w.violation(
                "custom-primary-used",
                f"the allocator assigns to {e.id if e else '?'}, the primary ENI of {node}, a custom-networking node",
            )


def _asks_singles(name: str, kw: dict[str, Any]) -> bool:
    """Whether the call asks single secondary addresses: a count, or named ones. A Create's
    primary address (named, ``Primary``, under named placement) is no single: every ENI has one,
    whatever the mode (seed 183: a Create of a /28 naming its primary was read as singles)."""
    if kw.get("SecondaryPrivateIpAddressCount"):
        return True
    named = kw.get("PrivateIpAddresses") or []
    if name == "create_network_interface":
        return any(isinstance(x, dict) and not x.get("Primary") for x in named)
    return bool(named)


def _note_released(w: SubnetsWorld, name: str, kw: dict[str, Any], at: float | None) -> None:
    """What the allocator releases (an Unassign, or a Detach of its ENI), by subnet and time."""
    nets = w.nets
    if not nets.named_placement:
        return
    if name == "unassign_private_ip_addresses":
        e = w.emu.enis.get(str(kw.get("NetworkInterfaceId", "")))
        keys = [*(kw.get("PrivateIpAddresses") or []), *(kw.get("Ipv4Prefixes") or [])]
    elif name == "detach_network_interface":
        att = str(kw.get("AttachmentId", ""))
        e = next((x for x in w.emu.enis.values() if x.attachment is not None and x.attachment.id == att), None)
        keys = [e.primary_ip, *e.secondary, *e.prefixes] if e is not None else []
    else:
        return
    if e is None:
        return
    when = w.now() if at is None else at
    mine = nets.released.setdefault(e.subnet_id, {})
    for key in keys:
        mine[str(key)] = when


def _nameable_blocks(w: SubnetsWorld, subnet_id: str, at: float) -> int:
    """Wholly free /28s of the subnet that named placement may name at ``at``: none of whose
    addresses the allocator released within the hold (:attr:`PodNets.hold_s`)."""
    subnet = w.emu.subnets[subnet_id]
    whole = subnet.pool.free_blocks()
    nets = w.nets
    if whole <= 0 or not nets.named_placement or nets.hold_s <= 0:
        return whole
    held: set[ipaddress.IPv4Network] = set()
    for key, when in nets.released.get(subnet_id, {}).items():
        if at - when >= nets.hold_s:
            continue
        net = ipaddress.IPv4Network(key if "/" in key else f"{key}/32")
        held.add(net if net.prefixlen <= 28 else net.supernet(new_prefix=28))
    pool = subnet.pool
    blocked = sum(1 for b in held if all(pool.is_free(str(h)) for h in b))
    return max(0, whole - blocked)


def _note_singles(w: SubnetsWorld, node: str | None, name: str, kw: dict[str, Any], at: float | None = None) -> None:
    """A call for single addresses (an Assign, or a Create with secondaries) while a /28 is
    whole in the subnet it uses, and (named placement) may be named: the node is noted
    (:attr:`PodNets.singles_beside_28`)."""
    if node is None or not _asks_singles(name, kw):
        return
    if name == "create_network_interface":
        sid = str(kw.get("SubnetId", ""))
    elif name == "assign_private_ip_addresses":
        e = w.emu.enis.get(str(kw.get("NetworkInterfaceId", "")))
        sid = e.subnet_id if e is not None else ""
    else:
        return
    if sid not in w.emu.subnets or w.emu.subnets[sid].pool.free_blocks() <= 0:
        return
    if _nameable_blocks(w, sid, w.now() if at is None else at) > 0:
        w.nets.singles_beside_28.add(node)
    else:
        w.fault("subnet-world:singles-beside-held-28")  # whole in EC2, held from naming


def note_outcome(w: SubnetsWorld, name: str, code: str | None, scarce: bool = False) -> None:
    """Count, in a subnet world, what its subnets made of the allocator's calls and results:
    a call EC2 refused for room (``InsufficientCidrBlocks``, ``InsufficientFreeAddressesInSubnet``),
    a result that said ``scarce`` (fair sharing)."""
    if w.nets.variant is None:
        return
    if code in ("InsufficientCidrBlocks", "InsufficientFreeAddressesInSubnet"):
        w.fault(f"subnet-world:{name}:{code}")
    if scarce:
        w.fault("subnet-world:scarce-said")


def room(w: SubnetsWorld, node: str) -> int | None:
    """Free addresses now in the subnets the node's new ENIs may go in (``None``: the default
    world, whose checks are as they were)."""
    nets = w.nets
    if nets.variant is None:
        return None
    return sum(w.emu.subnets[s].pool.available for s in nets.candidates(node in nets.custom_nodes))


def whole_blocks(w: SubnetsWorld, node: str) -> int | None:
    """Wholly free /28s now in the node's candidate subnets (``None``: the default world)."""
    nets = w.nets
    if nets.variant is None:
        return None
    return sum(w.emu.subnets[s].pool.free_blocks() for s in nets.candidates(node in nets.custom_nodes))


def check_pods(w: SubnetsWorld, live: Iterable[Any]) -> None:
    """No pod of a custom-networking node holds an address of its primary ENI."""
    nets = w.nets
    if not nets.custom_nodes:
        return
    for a in live:
        if a.name not in nets.custom_nodes or not a.rt.up:
            continue
        inst = w.emu.instances.get(a.iid)
        primary = w.emu.enis.get(inst.primary_eni) if inst is not None else None
        if primary is None:
            continue
        mine = {primary.primary_ip, *primary.secondary}
        for cid, ip in a.rt.up.items():
            if ip in mine:
                w.violation("custom-primary-used", f"{a.name}/{cid} holds {ip} of its primary ENI {primary.id}")
