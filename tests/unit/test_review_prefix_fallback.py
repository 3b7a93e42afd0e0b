"""Hostile review of 0e02c32 (prefix fallback: InsufficientCidrBlocks by count re-plans without the
subnet before falling back to single addresses). Each test asserts the behaviour a fixed allocator
must have; F1-F3 are fixed (``PlanExecutor._replan``: the fallback to singles brings back every
subnet left for want of a /28 when the re-plan is short, asks no /28, follows a refusal for room,
or ``MAX_BLOCKLESS_SUBNETS`` subnets were left); F4 is fixed by the container's memory of subnets
refused a /28 by count (``PlanExecutor.avoid_blockless``, ``BLOCKLESS_MEMORY_S``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from emulated.ec2 import Ec2Config
from emulated.ec2.authz import Principal
from functions.execute import BLOCKLESS_MEMORY_S, _Replan
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


def _by_count(instance_type: str, subnet_cidrs: tuple[str, ...], nodes: int = 1) -> ReliabilityCluster:
    """``nodes`` nodes in prefix mode (``WARM_IP_TARGET=2``), EC2 placing what is asked by count."""
    return ReliabilityCluster(
        nodes,
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
    single addresses cannot (t3.small: 9 slots), is planned singles: stuck short while the /28 is free.
    n0 is an m5.large (27 single slots) whose singles meet its need, so it does not ask the subnet for
    fewer /28s itself (S4 below) and leaves the one whole /28 whole."""
    c = _small("m5.large")
    (main,) = c.w.subnets
    _one_block_left(c, main)
    c.scale("n0", 20)  # asks 2 /28s by count: refused, remembered, singles (22)
    c.settle(max_s=60)
    assert _refused(c) == 1
    assert [(len(e.secondary), len(e.prefixes)) for e in _node_enis(c, "n0")] == [(9, 0), (9, 0), (4, 0)]
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
    c = _by_count("t3.small", ("10.0.0.0/22", "10.0.8.0/23", "10.0.16.0/26"))
    main, second, third = c.w.subnets
    _fragment(c, main)
    _fragment(c, second)
    assert c.w.emu.subnets[third].pool.free_blocks() == 2
    c.settle(max_s=30)  # the warm ask: main and second refused, remembered; singles
    c.scale("n0", 10)
    c.settle(max_s=120)
    assert len(c.nodes["n0"].ds.pods()) == 10, f"{len(c.nodes['n0'].ds.pods())} of 10 pods, third untouched"


# --- a second hostile review of the memory (75b67cc + 99af94f): S2-S3 failed on 99af94f, fixed
# (``remembered_since`` before each call; ``_remember_blockless`` takes the count of a live entry
# only); S1 is left so (K1 needs it); S4 is open; K1-K5 each fail with one piece of the memory
# reverted ---


def _counts(ex: Any) -> dict[str, int]:
    """The remembered subnets and the fewest /28s refused in each."""
    return {sid: r.prefixes for sid, r in ex.known_blockless().items()}


def _small(first: str = "t3.small") -> ReliabilityCluster:
    """One node (n0, a ``first``) in one /24, prefix mode, by count."""
    return ReliabilityCluster(
        1,
        instance_type=first,  # t3.small: 9 single slots, singles cannot meet a need of 10
        pool=PoolConfig(warm_ip=2, prefix_mode=True),
        subnet_cidrs=("10.0.0.0/24",),
        named_placement=False,
    )


def _one_address_in_every_block(c: ReliabilityCluster, subnet: str) -> None:
    """Another holder takes one address of every aligned /28 but the first (EC2's): 0 whole."""
    pool = c.w.emu.subnets[subnet].pool
    for b in range(1, 16):
        assert pool.take_ip(f"10.0.0.{16 * b + 8}")
    assert pool.free_blocks() == 0 and pool.free >= 200


# --- S1: keep-first pays a refused call and then fills the slots with singles all the same ---


@pytest.mark.xfail(
    strict=True,
    reason="S1 left so: the kept first plan's refused call is what K1 needs (a /28 made whole by a release "
    "the node's own singles hide from the free count); taken at its word, the memory would fill n1's slots "
    "with singles for good",
)
def test_s1_keep_first_in_a_subnet_still_without_a_whole_28_makes_no_refused_call() -> None:
    """The docs (step 7) and ``avoid_blockless`` say the kept first plan costs "one refused call, not the
    node's slots filled with singles it keeps". In a subnet that really has no whole /28 (what the memory
    says), the kept ask is refused and ``_replan`` then fills every slot with singles: the same 9 singles
    as without the rule, plus a refused call (and PrefixAsksAvoided counts an ask that was made)."""
    c = _small()
    (main,) = c.w.subnets
    _one_address_in_every_block(c, main)
    c.scale("n0", 1)
    c.settle(max_s=60)
    assert _refused(c) == 1 and _counts(c.w.alloc.executor) == {main: 1}
    c.add_node("n1", "t3.small")
    c.scale("n1", 10)
    c.settle(max_s=100)
    shape = [(len(e.secondary), len(e.prefixes)) for e in _node_enis(c, "n1")]
    assert shape == [(3, 0), (3, 0), (3, 0)]  # the slots are filled with singles either way
    avoided = c.w.tally.get("PrefixAsksAvoided")
    assert _refused(c) == 1, f"{_refused(c)} refused: the remembered subnet was asked again ({avoided} counted avoided)"


# --- S2: one batch, several nodes: one refused call per node, not per container ---


def test_s2_nodes_planned_in_one_batch_pay_one_refused_call_not_one_each() -> None:
    """Docs: "a fragmented subnet costs one refused call per container and period". Every plan of a
    batch is made before any call, and ``run`` makes the plan it was given: the memory written by the
    first node's refusal is not read before the others' calls (3 nodes, 3 refusals in one batch)."""
    c = _by_count("m5.large", ("10.0.0.0/22", "10.0.8.0/24"), nodes=3)
    main, _second = c.w.subnets
    _fragment(c, main)
    c.settle(max_s=60)
    assert all(len(n.ds.pods()) == 0 for n in c.nodes.values())
    assert _refused(c) == 1, f"{_refused(c)} refused calls for one subnet in one container and period"


# --- S3: the count kept is the minimum with an entry already past its period ---


def test_s3_an_expired_entry_does_not_lower_the_count_of_a_new_refusal() -> None:
    """``_remember_blockless`` takes ``min(asked, had.prefixes)`` with whatever entry is in the dict, also
    one past ``BLOCKLESS_MEMORY_S`` (or one a fresh read would forget) that ``known_blockless`` has not
    purged yet (the plan was made before it expired, the refusal came after). A refusal of 2 then
    denies asks of 1 for a new period: R1 again."""
    c = _small()
    (main,) = c.w.subnets
    ex = c.w.alloc.executor
    c.w.alloc.ec2.subnets()  # a fresh read
    ex._remember_blockless(_Replan("x", exclude=main, refresh=False, fallback="secondary-ip", prefixes=1))
    c.clock.advance(BLOCKLESS_MEMORY_S + 1)
    ex._remember_blockless(_Replan("x", exclude=main, refresh=False, fallback="secondary-ip", prefixes=2))
    assert _counts(ex) == {main: 2}


# --- S4: the count is known, the same invocation does not use it: pods wait beside a whole /28 ---


# Fixed (was a strict xfail of the second review, S4): PlanExecutor._replan asks for fewer (_capped).
def test_s4_a_node_refused_two_28s_with_one_whole_gets_the_one_not_only_singles() -> None:
    """n0 (t3.small, 9 slots) asks 2 /28s where one is whole: refused. Singles alone (9) leave it short
    for good (its slots full), so the re-plan asks the refused subnet for one /28 fewer than it refused
    (one): granted. Its next growth asks 1 where none is whole: refused, remembered as 1, singles in the
    slots left. 24 of 30 pods (16 + 8), where it had 9 beside a whole /28 before."""
    c = _small()
    (main,) = c.w.subnets
    pool = c.w.emu.subnets[main].pool
    for b in range(1, 14):
        assert pool.take_ip(f"10.0.0.{16 * b + 8}")
    assert pool.free_blocks() == 1
    c.scale("n0", 30)
    c.settle(max_s=300)
    assert pool.free_blocks() == 0 and _prefixes_held(c, "n0") == 1
    assert len(c.nodes["n0"].ds.pods()) == 24
    assert _refused(c) == 2
    assert _counts(c.w.alloc.executor) == {main: 1}


def test_s4_the_cut_ask_is_made_once_a_run() -> None:
    """Refused 3 with none whole: the cut ask (2) is refused too, and the run then gives singles, not a
    third refused call (one cut a run): two refused calls where one was made before the cut (its cost when
    none is whole). The singles fill n0's slots, so nothing is asked after."""
    c = _small()
    (main,) = c.w.subnets
    _one_address_in_every_block(c, main)
    c.scale("n0", 40)
    c.settle(max_s=5)
    assert _refused(c) == 2 and _counts(c.w.alloc.executor) == {main: 2}
    assert len(c.nodes["n0"].ds.pods()) == 9 and _prefixes_held(c, "n0") == 0
    c.settle(max_s=200)
    assert _refused(c) == 2
    assert len(c.nodes["n0"].ds.pods()) == 9 and _prefixes_held(c, "n0") == 0


def test_s4_a_plan_made_from_the_memory_asks_fewer_without_a_refused_call() -> None:
    """The memory says "fewer than 2" (n0, whose singles meet its need, was refused 2). n1 (t3.small)
    needs 2 and its singles cannot serve it: ``avoid_blockless`` cuts its ask to 1 before any call
    (keeping the first plan would pay a refused call, then ``_replan`` would cut it)."""
    c = _small("m5.large")
    (main,) = c.w.subnets
    _one_block_left(c, main)
    c.scale("n0", 20)
    c.settle(max_s=60)
    assert _refused(c) == 1 and _counts(c.w.alloc.executor) == {main: 2}
    c.add_node("n1", "t3.small")
    asked = _prefix_counts_asked(c)
    c.scale("n1", 20)
    c.settle(max_s=30)
    assert _prefixes_held(c, "n1") == 1
    assert asked[:1] == [1], f"n1's asks by count: {asked}"  # not 2 (refused), then 1
    assert 2 not in asked


def _prefix_counts_asked(c: ReliabilityCluster) -> list[int]:
    """The ``Ipv4PrefixCount`` of every Assign asked from now on, in order (refused ones too)."""
    emu = c.w.emu
    orig = emu.dispatch
    out: list[int] = []

    def dispatch(action: str, params: Mapping[str, Any], principal: Principal | None = None) -> dict[str, Any]:
        if action == "AssignPrivateIpAddresses" and params.get("Ipv4PrefixCount"):
            out.append(int(params["Ipv4PrefixCount"]))
        return orig(action, params, principal)

    setattr(emu, "dispatch", dispatch)  # noqa: B010 (mypy: no assignment to a method)
    return out


# --- K1-K5: pass on 99af94f, each fails with one piece of the fix reverted ---


def test_k1_keep_first_gets_the_28_made_whole_without_16_more_free() -> None:
    """Kills "no keep-first rule" (``return singles``): every earlier test passes with it. The subnet is
    remembered (an ask of 1 refused); one address goes, a /28 is whole (free +1: not forgotten). n1
    (singles give 9 of its 10) asks it and gets it; without the rule it waits at 9 for the period."""
    c = _small()
    (main,) = c.w.subnets
    _one_address_in_every_block(c, main)
    c.scale("n0", 1)
    c.settle(max_s=60)
    assert _counts(c.w.alloc.executor) == {main: 1}
    c.w.emu.subnets[main].pool.release_ip("10.0.0.232")
    assert c.w.emu.subnets[main].pool.free_blocks() == 1
    c.add_node("n1", "t3.small")
    c.scale("n1", 10)
    c.settle(max_s=100)
    assert len(c.nodes["n1"].ds.pods()) == 10


def test_k2_the_count_rule_lets_a_node_singles_could_serve_ask_the_last_28() -> None:
    """Kills "any by-count ask of a remembered subnet is avoided" and "the refused count not passed"
    (``prefixes=`` dropped from the Assign's _Replan): R1's test passes with either (keep-first covers
    it). Here n1's singles meet its need, so keep-first does not apply: only the count gives it the /28.
    n0's singles meet its own need too (an m5.large), so it does not ask for fewer itself (S4)."""
    c = _small("m5.large")
    (main,) = c.w.subnets
    pool = c.w.emu.subnets[main].pool
    for b in range(1, 14):
        assert pool.take_ip(f"10.0.0.{16 * b + 8}")
    assert pool.free_blocks() == 1
    c.scale("n0", 20)  # an ask of 2: refused
    c.settle(max_s=60)
    assert _counts(c.w.alloc.executor) == {main: 2}
    c.add_node("n1", "t3.small")
    c.scale("n1", 4)
    c.settle(max_s=100)
    assert len(c.nodes["n1"].ds.pods()) == 4
    assert _prefixes_held(c, "n1") == 1, "n1 took singles beside the whole /28"


def test_k3_a_free_rise_of_16_forgets_before_the_period() -> None:
    """Kills "no early forgetting" (the ``sub.free >= b.free + PREFIX_SIZE`` clause): the committed test
    settles for up to 300 s after the release, so the period alone passes it."""
    c = _by_count("m5.large", ("10.0.0.0/22",))
    (main,) = c.w.subnets
    others = _fragment(c, main)
    c.scale("n0", 4)
    c.settle(max_s=60)
    t0 = c.clock.now()
    assert _refused(c) == 1 and _prefixes_held(c, "n0") == 0
    ec2 = c.w.emu.client()
    for eni_id in others:
        ec2.delete_network_interface(NetworkInterfaceId=eni_id)
    c.run(40)
    c.scale("n0", 12)  # singles could serve it: no keep-first
    c.settle(max_s=60)
    assert c.clock.now() - t0 < BLOCKLESS_MEMORY_S
    assert _prefixes_held(c, "n0") > 0, "still avoided within the period after 16+ addresses came back"


def test_k4_a_remembered_own_subnet_gives_singles_on_the_own_eni_not_a_new_eni_elsewhere() -> None:
    """Kills "the ``not _asks_prefixes(plan)`` clause dropped": without the remembered subnet the planner's
    own fallback puts singles on a new ENI in a nearly full subnet (F2), now in the memory's phase."""
    c = _by_count("m5.large", ("10.0.0.0/24", "10.0.16.0/27"))
    main, small = c.w.subnets
    _fragment(c, main)
    c.w.emu.client().create_network_interface(SubnetId=small, SecondaryPrivateIpAddressCount=12)
    c.scale("n0", 2)
    c.settle(max_s=60)
    assert _counts(c.w.alloc.executor) == {main: 1}
    assert [len(e.secondary) for e in _node_enis(c, "n0")] == [9]  # the primary ENI full of singles
    c.scale("n0", 12)  # a new ENI: by count in main (remembered), or singles on a new ENI in either
    c.settle(max_s=60)
    assert len(c.nodes["n0"].ds.pods()) == 12
    assert {e.subnet_id for e in _node_enis(c, "n0")} == {main}
    assert c.w.emu.subnets[small].pool.free == 14


def test_k5_a_later_larger_refusal_keeps_the_smaller_count() -> None:
    """Kills "no min with the entry held" in ``_remember_blockless``."""
    c = _small()
    (main,) = c.w.subnets
    ex = c.w.alloc.executor
    c.w.alloc.ec2.subnets()
    ex._remember_blockless(_Replan("x", exclude=main, refresh=False, fallback="secondary-ip", prefixes=1))
    c.clock.advance(10)
    ex._remember_blockless(_Replan("x", exclude=main, refresh=False, fallback="secondary-ip", prefixes=2))
    assert _counts(ex) == {main: 1}


def test_a_refusal_with_whole_28s_free_costs_singles_for_the_period_only() -> None:
    """docs/safety.md row 31: nothing promises ``InsufficientCidrBlocks`` comes only when too few
    /28s are whole. One such refusal in a subnet of whole /28s: the node takes singles while it is
    remembered (its pods served all the same), and asks /28s again once the period is over."""
    c = _by_count("m5.large", ("10.0.0.0/22",))
    (main,) = c.w.subnets
    assert c.w.emu.subnets[main].pool.free_blocks() > 10
    c.w.emu.fail_next("AssignPrivateIpAddresses", "InsufficientCidrBlocks")
    c.scale("n0", 4)
    c.settle(max_s=200)
    assert len(c.nodes["n0"].ds.pods()) == 4
    assert _refused(c) == 1 and _prefixes_held(c, "n0") == 0  # remembered: singles
    c.run(BLOCKLESS_MEMORY_S + 10)
    c.scale("n0", 20)
    c.settle(max_s=200)
    assert len(c.nodes["n0"].ds.pods()) == 20
    assert _prefixes_held(c, "n0") > 0, "the node stayed on singles after the period"
    assert _refused(c) == 1
