"""Hostile review of 0e02c32 (prefix fallback: InsufficientCidrBlocks by count re-plans without the
subnet before falling back to single addresses). Each test asserts the behaviour a fixed allocator
must have; F1-F3 are fixed (``PlanExecutor._replan``: the fallback to singles brings back every
subnet left for want of a /28 when the re-plan is short, asks no /28, follows a refusal for room,
or ``MAX_BLOCKLESS_SUBNETS`` subnets were left); F4 is fixed by the container's memory of subnets
refused a /28 by count (``PlanExecutor.avoid_blockless``, ``BLOCKLESS_MEMORY_S``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from emulated.ec2 import Ec2Config
from emulated.ec2.authz import Principal
from functions.execute import BLOCKLESS_MEMORY_S
from tests.helpers.reliability_cluster import ReliabilityCluster
from warmpool.pool import PoolConfig

SCATTERED = Ec2Config(single_placement="scattered", placement_seed=5)


def _fragment(c: ReliabilityCluster, subnet: str) -> list[str]:
    """Another caller's ENIs take scattered single addresses until no aligned /28 is whole: their ids."""
    ec2 = c.w.emu.client()
    pool = c.w.emu.subnets[subnet].pool
    made: list[str] = []
    while pool.free_blocks() > 0:
        resp = ec2.create_network_interface(SubnetId=subnet, SecondaryPrivateIpAddressCount=min(8, pool.free - 1))
        made.append(resp["NetworkInterface"]["NetworkInterfaceId"])
    assert pool.free >= 40
    return made


def _by_count(instance_type: str, subnet_cidrs: tuple[str, ...]) -> ReliabilityCluster:
    """One node in prefix mode (``WARM_IP_TARGET=2``), EC2 placing what is asked by count."""
    return ReliabilityCluster(
        1,
        instance_type=instance_type,
        pool=PoolConfig(warm_ip=2, prefix_mode=True),
        subnet_cidrs=subnet_cidrs,
        ec2_config=SCATTERED,
        named_placement=False,
    )


def _stats(c: ReliabilityCluster, name: str) -> dict[str, int]:
    return c.w.ec2_stats().get(name, {})


def _refused(c: ReliabilityCluster) -> int:
    return _stats(c, "AssignPrivateIpAddresses").get("errors", 0) + _stats(c, "CreateNetworkInterface").get("errors", 0)


# Fixed (was a strict xfail of the review, F1): PlanExecutor._replan falls back to singles.
def test_four_fragmented_candidates_still_fall_back_to_singles() -> None:
    c = _by_count("m5.xlarge", ("10.0.0.0/24", "10.0.1.0/24", "10.0.2.0/24", "10.0.3.0/24"))  # 4 ENIs of 15 addresses
    for s in c.w.subnets:
        _fragment(c, s)
    c.scale("n0", 10)
    c.settle(max_s=300)
    node = c.nodes["n0"]
    got = len(node.ds.pods())
    refused = _refused(c)
    assert got == 10, f"{got} of 10 pods hold an address; {refused} refused prefix calls"
    # one invocation: two subnets refused (MAX_BLOCKLESS_SUBNETS), then singles
    assert refused <= 2, f"{refused} refused prefix calls"


def _node_enis(c: ReliabilityCluster, name: str) -> list[Any]:
    iid = c.nodes[name].instance_id
    return [e for e in c.w.emu.enis.values() if e.attachment is not None and e.attachment.instance_id == iid]


# Fixed (was a strict xfail of the review, F2): PlanExecutor._replan falls back to singles.
def test_singles_go_on_the_nodes_own_eni_not_on_a_new_eni_in_a_nearly_full_subnet() -> None:
    c = _by_count("m5.large", ("10.0.0.0/24", "10.0.16.0/27"))
    main, small = c.w.subnets
    _fragment(c, main)  # the node's subnet: ~40+ free addresses, no whole /28
    c.w.emu.client().create_network_interface(SubnetId=small, SecondaryPrivateIpAddressCount=12)
    assert c.w.emu.subnets[small].pool.free == 14  # room for a singles ENI, not for a /28
    c.scale("n0", 6)
    c.settle(max_s=120)
    assert len(c.nodes["n0"].ds.pods()) == 6
    enis = _node_enis(c, "n0")
    # before 0e02c32: six singles on the primary ENI (main subnet); B untouched, no Create
    assert [e.subnet_id for e in enis] == [main], [(e.subnet_id, len(e.secondary)) for e in enis]
    assert c.w.emu.subnets[small].pool.free == 14


# Fixed (was a strict xfail of the review, F3): PlanExecutor._replan falls back to singles.
def test_a_subnet_refused_for_room_after_one_left_for_a_28_still_falls_back_in_the_same_invocation() -> None:
    c = _by_count("m5.large", ("10.0.0.0/24", "10.0.8.0/24"))
    main, _second = c.w.subnets
    _fragment(c, main)
    # the other subnet's Create refused for room (its cached count stale: another caller took it)
    c.w.emu.fail_next("CreateNetworkInterface", "InsufficientFreeAddressesInSubnet")
    c.scale("n0", 6)
    c.step()
    c.step()  # the report served, its result applied
    assert len(c.nodes["n0"].ds.pods()) == 6, "the invocation gave nothing beside a subnet with free singles"


# Fixed (was a strict xfail of the review, F4): PlanExecutor.avoid_blockless remembers the subnet.
def test_a_subnet_known_without_a_whole_28_is_not_asked_again_on_every_growth() -> None:
    c = _by_count("m5.large", ("10.0.0.0/22", "10.0.8.0/24"))
    main, _second = c.w.subnets
    _fragment(c, main)
    for pods in (4, 20, 36, 52, 68):
        c.scale("n0", pods)
        c.settle(max_s=200)
        assert len(c.nodes["n0"].ds.pods()) == pods
    assert _refused(c) <= 2, f"{_refused(c)} refused prefix calls for 5 growth steps"


def _prefixes_held(c: ReliabilityCluster, name: str) -> int:
    return sum(len(e.prefixes) for e in _node_enis(c, name))


def test_a_remembered_subnet_is_forgotten_when_a_28_is_free_again_and_the_node_goes_back_to_prefixes() -> None:
    c = _by_count("m5.large", ("10.0.0.0/22",))
    (main,) = c.w.subnets
    others = _fragment(c, main)
    c.scale("n0", 4)
    c.settle(max_s=200)
    assert len(c.nodes["n0"].ds.pods()) == 4
    assert _refused(c) == 1 and _prefixes_held(c, "n0") == 0  # refused once, singles
    c.scale("n0", 12)
    c.settle(max_s=200)
    assert _refused(c) == 1 and _prefixes_held(c, "n0") == 0  # remembered: singles, no second refusal
    ec2 = c.w.emu.client()
    for eni_id in others:  # the other caller goes: whole /28s again
        ec2.delete_network_interface(NetworkInterfaceId=eni_id)
    c.run(40)  # past the subnet cache's 30 s: the read shows the freed addresses
    c.scale("n0", 30)
    c.settle(max_s=300)
    assert len(c.nodes["n0"].ds.pods()) == 30
    assert _prefixes_held(c, "n0") > 0, "the node stayed on single addresses with whole /28s free"
    assert _refused(c) == 1


def test_a_remembered_subnet_is_asked_again_after_the_memory_and_refused_once_more() -> None:
    c = _by_count("m5.large", ("10.0.0.0/22",))
    (main,) = c.w.subnets
    _fragment(c, main)
    c.scale("n0", 4)
    c.settle(max_s=200)
    assert _refused(c) == 1
    c.run(BLOCKLESS_MEMORY_S + 10)
    c.scale("n0", 20)
    c.settle(max_s=200)
    assert len(c.nodes["n0"].ds.pods()) == 20
    assert _refused(c) == 2, "the memory never ran out: a subnet with whole /28s again would never be asked"


# --- a hostile review of the memory (75b67cc): R1-R3 each failed on 75b67cc, fixed in
# PlanExecutor.avoid_blockless and _remember_blockless ---


def _one_block_left(c: ReliabilityCluster, subnet: str) -> None:
    """Another holder takes one address in every aligned /28 of the /24 but 10.0.0.224/28 (EC2's
    packed placement then hands singles out from the bottom, so the whole one stays whole)."""
    pool = c.w.emu.subnets[subnet].pool
    for b in range(1, 14):
        assert pool.take_ip(f"10.0.0.{16 * b + 8}")
    assert pool.free_blocks() == 1 and pool.free >= 150


def test_a_refused_two_28_ask_does_not_deny_another_node_the_one_28_left() -> None:
    """A 2-/28 ask by count is refused when one whole /28 is left (EC2 refuses the whole call): the
    memory then says the subnet has no /28 at all, and another node whose need one /28 meets, and
    single addresses cannot (t3.small: 9 slots), is planned singles: stuck short while the /28 is free."""
    c = ReliabilityCluster(
        1,
        instance_type="t3.small",
        pool=PoolConfig(warm_ip=2, prefix_mode=True),
        subnet_cidrs=("10.0.0.0/24",),
        named_placement=False,
    )
    (main,) = c.w.subnets
    _one_block_left(c, main)
    c.scale("n0", 30)  # asks 2 /28s by count: refused, remembered, singles (9)
    c.settle(max_s=60)
    assert _refused(c) == 1
    assert c.w.emu.subnets[main].pool.free_blocks() == 1  # the block is still whole
    c.add_node("n1", "t3.small")  # a node that joins within BLOCKLESS_MEMORY_S
    c.scale("n1", 10)  # one /28 meets it (12 with the warm 2); singles give 9 at most
    c.settle(max_s=400)  # beyond BLOCKLESS_MEMORY_S too
    got = len(c.nodes["n1"].ds.pods())
    shape = [(len(e.secondary), len(e.prefixes)) for e in _node_enis(c, "n1")]
    assert got == 10, f"n1: {got} of 10 pods; ENIs (singles, prefixes) {shape}; the /28 left whole: " + str(
        c.w.emu.subnets[main].pool.free_blocks()
    )


def _slow_prefix_asks(c: ReliabilityCluster, seconds: float) -> None:
    """Each Assign of /28s by count answers ``seconds`` after it is asked (a long invocation: a big
    batch, token waits, EC2 latency): the subnets read at the batch's start are older than
    ``WARMPOOL_SUBNET_CACHE_TTL_S`` (30 s) when the refusal comes."""
    emu = c.w.emu
    orig = emu.dispatch

    def dispatch(action: str, params: Mapping[str, Any], principal: Principal | None = None) -> dict[str, Any]:
        if action == "AssignPrivateIpAddresses" and params.get("Ipv4PrefixCount"):
            c.clock.advance(seconds)
        return orig(action, params, principal)

    setattr(emu, "dispatch", dispatch)  # noqa: B010 (mypy: no assignment to a method)


def test_a_refusal_after_the_subnet_cache_aged_is_still_remembered() -> None:
    """``_remember_blockless`` reads ``known_subnets()``, empty once the cache is older than its TTL:
    the free count is recorded as 0, so the next fresh read (>= 16 free in any subnet refused "for
    want of a whole /28") forgets it at once, and every growth report is refused again (F4 back)."""
    c = _by_count("m5.large", ("10.0.0.0/22", "10.0.8.0/24"))
    main, _second = c.w.subnets
    _fragment(c, main)
    _slow_prefix_asks(c, 31.0)
    for pods in (4, 20, 36, 52, 68):
        c.scale("n0", pods)
        c.settle(max_s=200)
        assert len(c.nodes["n0"].ds.pods()) == pods
    assert _refused(c) <= 2, f"{_refused(c)} refused prefix calls for 5 growth steps"


# --- mutations of 75b67cc the tests above did not see (the review, R4) ---


def test_while_remembered_the_node_still_gets_its_pods_in_singles() -> None:
    """Kills the mutation "avoid_blockless never falls back to singles" (returns the plan without the
    remembered subnet, unmet, no call): the committed test checks only refusals and prefixes in this
    phase, and passes while n0 waits at 9 of 12 pods for 200 s."""
    c = _by_count("m5.large", ("10.0.0.0/22",))
    (main,) = c.w.subnets
    _fragment(c, main)
    c.scale("n0", 4)
    c.settle(max_s=200)
    c.scale("n0", 12)
    c.settle(max_s=60)
    assert _refused(c) == 1
    assert len(c.nodes["n0"].ds.pods()) == 12


def test_a_replan_after_a_refusal_avoids_a_subnet_remembered_before() -> None:
    """Kills the mutation "``PlanExecutor._plan`` does not go through avoid_blockless" (only the
    allocator's first plans avoid): the node's own subnet refuses its /28 (not remembered yet); the
    re-plan's new ENI would go to the other subnet, remembered by an earlier refusal: no second call."""
    c = _by_count("m5.large", ("10.0.0.0/22", "10.0.8.0/24"))
    main, second = c.w.subnets
    _fragment(c, main)
    _fragment(c, second)
    c.settle(max_s=30)  # the warm ask: the node's subnet refused, then the other: both remembered
    ex = c.w.alloc.executor
    assert set(ex.known_blockless()) == {main, second}
    before = _refused(c)
    ex._blockless.pop(main)  # the node's own subnet forgotten (as a container that never saw it refused)
    c.scale("n0", 20)
    c.settle(max_s=60)
    assert len(c.nodes["n0"].ds.pods()) == 20
    assert _refused(c) == before + 1, f"{_refused(c) - before} refused: the re-plan asked the remembered subnet"


def test_two_remembered_subnets_do_not_force_singles_while_a_third_has_whole_28s() -> None:
    """``avoid_blockless`` forces singles once MAX_BLOCKLESS_SUBNETS remembered subnets were left, as
    ``_replan`` does after two refused calls; but leaving a remembered subnet costs no call and no
    re-plan. A t3.small (9 single slots) needing 12 stays at 9 although the third subnet has two
    whole /28s. (Before 75b67cc the same: two refusals, then singles; the memory could end it.)"""
    c = ReliabilityCluster(
        1,
        instance_type="t3.small",
        pool=PoolConfig(warm_ip=2, prefix_mode=True),
        subnet_cidrs=("10.0.0.0/22", "10.0.8.0/23", "10.0.16.0/26"),
        named_placement=False,
        ec2_config=SCATTERED,
    )
    main, second, third = c.w.subnets
    _fragment(c, main)
    _fragment(c, second)
    assert c.w.emu.subnets[third].pool.free_blocks() == 2
    c.settle(max_s=30)  # the warm ask: main and second refused, remembered; singles
    c.scale("n0", 10)
    c.settle(max_s=120)
    assert len(c.nodes["n0"].ds.pods()) == 10, f"{len(c.nodes['n0'].ds.pods())} of 10 pods, third untouched"
