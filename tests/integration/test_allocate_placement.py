"""Named placement in the allocator (issue 24, ``WARMPOOL_NAMED_PLACEMENT``): in a subnet EC2
has fragmented (singles scattered over every /28), prefix mode makes no call known to fail,
moves to a subnet with a whole /28, falls back to singles only when none has one, and singles
are packed into broken blocks. The real allocator and agent logic in a closed loop on the
emulated EC2 with ``single_placement="scattered"``, in virtual time."""

from __future__ import annotations

from typing import Any

from emulated.ec2 import Ec2Config
from emulated.ec2.cidr import SubnetPool
from tests.helpers.reliability_cluster import ReliabilityCluster
from warmpool.pool import PoolConfig

SCATTERED = Ec2Config(single_placement="scattered", placement_seed=5)


def _fragment(c: ReliabilityCluster, subnet: str, keep_whole: int = 0) -> SubnetPool:
    """Another caller's ENIs take single addresses, placed by EC2 anywhere, until at most
    ``keep_whole`` aligned /28s of the subnet are whole."""
    ec2 = c.w.emu.client()
    pool = c.w.emu.subnets[subnet].pool
    while pool.free_blocks() > keep_whole:
        ec2.create_network_interface(SubnetId=subnet, SecondaryPrivateIpAddressCount=min(8, pool.free - 1))
    return pool


def _errors(c: ReliabilityCluster, action: str) -> int:
    return int(c.w.ec2_stats().get(action, {}).get("errors", 0))


def _cluster(named: bool, subnets: tuple[str, ...], **kw: Any) -> ReliabilityCluster:
    return ReliabilityCluster(
        2,
        instance_type="m5.xlarge",
        pool=PoolConfig(warm_prefix=1, prefix_mode=True),
        subnet_cidrs=subnets,
        ec2_config=SCATTERED,
        named_placement=named,
        **kw,
    )


def test_prefix_mode_leaves_a_fragmented_subnet_for_one_with_whole_blocks() -> None:
    results = {}
    for named in (False, True):
        c = _cluster(named, ("10.0.0.0/22", "10.0.8.0/24"))
        frag = _fragment(c, c.w.subnets[0])
        assert frag.free > 500  # plenty of addresses, no /28
        for n in c.nodes:
            c.scale(n, 20)
        c.settle()
        c.check()
        enis = [e for e in c.w.emu.enis.values() if e.prefixes]
        results[named] = (_errors(c, "AssignPrivateIpAddresses"), {e.subnet_id for e in enis})
    (errors_off, _), (errors_on, where_on) = results[False], results[True]
    assert errors_off >= 1  # by count: InsufficientCidrBlocks in the fragmented subnet first
    assert errors_on == 0  # named: no call known to fail was made
    assert where_on == {c.w.subnets[1]}  # the prefixes came from the subnet with whole blocks


def test_prefix_mode_falls_back_to_singles_without_a_failed_call_when_no_subnet_has_a_block() -> None:
    c = _cluster(True, ("10.0.0.0/22",))
    _fragment(c, c.w.subnets[0])
    for n in c.nodes:
        c.scale(n, 12)
    c.settle()
    c.check()
    assert _errors(c, "AssignPrivateIpAddresses") == 0 and _errors(c, "CreateNetworkInterface") == 0
    assert all(not e.prefixes for e in c.w.emu.enis.values())
    assert c.w.alloc.tally.get("PrefixSubnetsWithoutBlock") >= 1


def test_named_singles_keep_whole_blocks_that_ec2_would_break() -> None:
    """Secondary-IP mode in a subnet EC2 scatters singles in: by count, new ENIs' addresses
    break most whole blocks; named (Create and Assign), they go into the blocks already broken."""
    whole = {}
    for named in (False, True):
        c = ReliabilityCluster(
            3,
            instance_type="m5.xlarge",
            pool=PoolConfig(warm_ip=4),
            subnet_cidrs=("10.0.0.0/23",),
            ec2_config=SCATTERED,
            named_placement=named,
        )
        pool = _fragment(c, c.w.subnets[0], keep_whole=20)
        before = pool.free_blocks()
        for n in c.nodes:
            c.scale(n, 25)
        c.settle()
        c.check()
        whole[named] = (before, pool.free_blocks())
    assert whole[True][1] == whole[True][0]  # new ENIs' addresses too are named into broken blocks
    assert whole[False][1] < whole[True][0] // 2


class TakesANamedAddressFirst:
    """Another caller takes the first address a named Assign asks for, between the allocator's
    read of the subnet and its call."""

    def __init__(self, inner: Any, emu: Any, subnet: str) -> None:
        self.inner, self.emu, self.subnet, self.done = inner, emu, subnet, 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def assign_private_ip_addresses(self, **kw: Any) -> Any:
        named = kw.get("PrivateIpAddresses")
        if named and not self.done:
            self.done += 1
            other = self.emu.client().create_network_interface(SubnetId=self.subnet)["NetworkInterface"]
            self.emu.client().assign_private_ip_addresses(
                NetworkInterfaceId=other["NetworkInterfaceId"], PrivateIpAddresses=[named[0]]
            )
        return self.inner.assign_private_ip_addresses(**kw)


def test_a_named_address_taken_since_the_read_is_asked_for_by_count() -> None:
    c = ReliabilityCluster(2, pool=PoolConfig(warm_ip=3), ec2_config=SCATTERED, named_placement=True)
    wrapped = TakesANamedAddressFirst(c.w.ec2_client, c.w.emu, c.w.subnets[0])
    c.w.alloc.ec2.api = wrapped  # type: ignore[attr-defined]
    c.w.alloc.executor.ec2 = c.w.alloc.ec2
    for n in c.nodes:
        c.scale(n, 4)
    c.settle()
    c.check()
    assert wrapped.done == 1
    assert c.w.alloc.tally.get("PlacementsFoundTaken") == 1
    assert c.w.ec2_stats()["AssignPrivateIpAddresses"]["errors"] == 1  # the one refused, then by count


def test_a_resent_create_names_the_same_addresses_for_its_client_token() -> None:
    from warmpool.calls import CreateEni

    c = ReliabilityCluster(1, pool=PoolConfig(warm_ip=3), ec2_config=SCATTERED, named_placement=True)
    ex = c.w.alloc.executor
    assert c.w.subnets[0] in c.w.alloc.ec2.subnets([c.w.vpc])
    call = CreateEni(c.w.subnets[0], 1, 0, ips=3, prefixes=0, client_token="tok-1")
    first = ex._named_create(call)
    assert len(first.at_ips) == 4
    c.w.alloc.ec2.note_placed(c.w.subnets[0], list(first.at_ips), [])  # as after the call
    assert ex._named_create(call) == first  # the same parameters: EC2 answers with the same ENI
    other = ex._named_create(CreateEni(c.w.subnets[0], 1, 0, ips=3, prefixes=0, client_token="tok-2"))
    assert not set(other.at_ips) & set(first.at_ips)
