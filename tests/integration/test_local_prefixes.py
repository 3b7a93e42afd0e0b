"""Prefix delegation that does not fragment (issue 24, docs/allocator.md "Prefix placement that does
not fragment") through the local stack: the stack's ``named_placement`` (``local up
--named-placement``), agents in prefix mode with the stack's agent environment, another caller
breaking every /28 of a subnet through the stack's EC2 endpoint. No call fails with
InsufficientCidrBlocks: prefixes come from a subnet with whole /28s; where none has one the node
falls back to addresses, and goes back to prefixes once whole /28s are free again, taking them from
a subnet CIDR reservation of type ``prefix``, while another node's addresses are packed into the
/28s already broken."""

from __future__ import annotations

import ipaddress
import time
from pathlib import Path
from typing import Any

from emulated.local import LocalStack
from tests.helpers.local_nodes import FAST_STACK, Node, agents_stopped_at_exit, launch, run_until

# every subnet and placement read is fresh within a second: a /28 freed is seen at once
CACHES = (("WARMPOOL_SUBNET_CACHE_TTL_S", "1"), ("WARMPOOL_PLACEMENT_CACHE_TTL_S", "1"))
INSUFFICIENT = "InsufficientCidrBlocks"
PREFIX_NODE = {"ENABLE_PREFIX_DELEGATION": "true", "WARM_PREFIX_TARGET": "1", "WARM_ENI_TARGET": "0"}


def _break_blocks(ec2: Any, subnet: str, cidr: str, blocks: range) -> list[str]:
    """Another caller's ENIs (not the cluster's) holding one named address in each of ``blocks``
    (/28s of ``cidr``, by number): those /28s can take no prefix. Returns the ENIs' ids."""
    net = ipaddress.IPv4Network(cidr)
    names = [str(net.network_address + 16 * b + 8) for b in blocks]
    enis = []
    for at in range(0, len(names), 40):
        chunk = names[at : at + 40]
        spec = [{"PrivateIpAddress": ip, "Primary": k == 0} for k, ip in enumerate(chunk)]
        eni = ec2.create_network_interface(SubnetId=subnet, PrivateIpAddresses=spec)["NetworkInterface"]
        enis.append(str(eni["NetworkInterfaceId"]))
    return enis


def _refused(stack: LocalStack, code: str) -> int:
    """Calls emulated EC2 refused with ``code``, any action."""
    return sum(codes.get(code, 0) for codes in stack.ec2.error_codes().values())


def _want_pods(node: Node, count: int) -> bool:
    for j in range(count):
        if f"pod-{j}" not in node.pods:
            node.add(f"pod-{j}")
    return len(node.pods) >= count


def _prefix_subnets(stack: LocalStack) -> set[str]:
    return {e.subnet_id for e in stack.ec2.enis.values() if e.prefixes}


def _fragmented_zone(tmp_path: Path, named: bool) -> tuple[int, set[str], set[str], int]:
    """A /22 with every /28 broken (955 free addresses, no prefix) and a /24 left whole, in one zone;
    a node in the /22 in prefix mode wants 20 pods. (calls refused InsufficientCidrBlocks, subnets
    prefixes came from, {whole /24}, pods served)."""
    zone = (("us-east-1a", "10.0.0.0/22"), ("us-east-1a", "10.0.8.0/24"))
    with (
        LocalStack(cluster="frag", subnets=zone, named_placement=named, extra_env=CACHES, **FAST_STACK) as s,
        agents_stopped_at_exit() as nodes,
    ):
        frag, whole = s.subnet_ids
        node = launch(s, "m5.xlarge", tmp_path / str(named), subnet=frag, **PREFIX_NODE)
        nodes.append(node)
        _break_blocks(s.client("ec2"), frag, "10.0.0.0/22", range(1, 64))
        assert s.ec2.subnets[frag].pool.free_blocks() == 0 and s.ec2.subnets[frag].pool.free > 900
        run_until(nodes, lambda: _want_pods(node, 20), timeout=25)
        time.sleep(1)
        return (
            _refused(s, INSUFFICIENT),
            _prefix_subnets(s),
            {whole},
            len(node.pods),
        )


def test_a_fragmented_subnet_is_left_for_one_with_whole_blocks_before_any_call_fails(tmp_path: Path) -> None:
    refused, where, whole, served = _fragmented_zone(tmp_path, named=True)
    assert refused == 0
    assert where == whole  # every prefix from the subnet with whole /28s
    assert served == 20
    # By count (the stack's named_placement off) the same run asks EC2 for a prefix in the
    # fragmented subnet, which has the most free addresses, and is refused.
    by_count = _fragmented_zone(tmp_path, named=False)
    assert by_count[0] >= 1, by_count


def test_a_node_back_from_addresses_takes_prefixes_from_a_prefix_reservation(tmp_path: Path) -> None:
    """The upper half of the subnet is a ``prefix`` CIDR reservation from the start, and another
    caller breaks every /28 (naming addresses, which a reservation allows). A node in prefix mode
    falls back to addresses, with no call refused; once the other caller frees the reserved half,
    the node goes back to prefixes, taken there. A node in address mode meanwhile gets its
    addresses in /28s already broken: the whole ones stay whole, and no single address of either
    node is ever in the reservation."""
    zone = (("us-east-1a", "10.0.0.0/24"),)
    reserved = ipaddress.IPv4Network("10.0.0.128/25")
    with (
        LocalStack(cluster="resv", subnets=zone, named_placement=True, extra_env=CACHES, **FAST_STACK) as s,
        agents_stopped_at_exit() as nodes,
    ):
        (sid,) = s.subnet_ids
        ec2 = s.client("ec2")
        ec2.create_subnet_cidr_reservation(SubnetId=sid, Cidr=str(reserved), ReservationType="prefix")
        pd = launch(s, "m5.xlarge", tmp_path, **PREFIX_NODE)
        ips = launch(s, "m5.xlarge", tmp_path, WARM_IP_TARGET="2", WARM_ENI_TARGET="0")
        nodes += [pd, ips]
        pool = s.ec2.subnets[sid].pool
        _break_blocks(ec2, sid, "10.0.0.0/24", range(1, 8))
        upper = _break_blocks(ec2, sid, "10.0.0.0/24", range(8, 16))
        assert pool.free_blocks() == 0

        def singles() -> list[ipaddress.IPv4Address]:
            return [ipaddress.IPv4Address(a) for n in nodes for e in n.enis() for a in [e.primary_ip, *e.secondary]]

        # No /28 anywhere: the prefix node falls back to addresses, with no call refused.
        assert run_until(nodes, lambda: _want_pods(pd, 3), timeout=25), pd.pods
        assert not any(e.prefixes for e in pd.enis())
        assert _refused(s, INSUFFICIENT) == 0
        # The other caller gives the reserved half up: seven whole /28s (the eighth holds the
        # subnet's broadcast address), reserved for prefixes.
        for eni in upper:
            ec2.delete_network_interface(NetworkInterfaceId=eni)
        assert pool.free_blocks() == 7
        time.sleep(1.2)  # the allocator's subnet and placement reads (1 s here) expire
        # More pods than the fallback's addresses hold, and the other node grows too.
        assert run_until(nodes, lambda: _want_pods(pd, 24) and _want_pods(ips, 10), timeout=30), (pd.pods, ips.pods)
        prefixes = [ipaddress.IPv4Network(p) for e in pd.enis() for p in e.prefixes]
        assert prefixes, "the node did not go back to prefixes"
        assert all(p.subnet_of(reserved) for p in prefixes), prefixes
        assert pool.free_blocks() == 7 - len(prefixes)  # the other node's addresses broke no /28
        assert not [a for a in singles() if a in reserved], singles()
        assert _refused(s, INSUFFICIENT) == 0
