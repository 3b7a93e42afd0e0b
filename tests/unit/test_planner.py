"""Planner: the fewest EC2 calls, as data. Tables plus property tests."""

from __future__ import annotations

import hashlib

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.helpers.planner import AZ, IID, eni, plan, rep
from warmpool.calls import AssignAddresses, CreateEni, DeleteEni, Reclaim, UnassignAddresses
from warmpool.limits import known, max_pods
from warmpool.messages import PoolReport, ReleaseOffer, Targets
from warmpool.planner import Eni, client_token, node_max_pods
from warmpool.scheduling import coalesce, priority_key
from warmpool.subnets import Subnet


def test_primary_eni_with_room_one_assign():
    r, inv = rep([eni(0, 2)], assigned={0: 2}, warm_ip=5)
    p = plan(r, inv)
    assert p.kind == "allocate"
    assert p.calls == (AssignAddresses("eni-00000000", ips=5),)
    assert p.mutating_calls == 1 and p.unmet == 0


def test_surge_fills_the_eni_it_touches_but_not_new_enis():
    # 3 pods wait: the primary's 7 free slots cost one call whatever the count.
    r, inv = rep([eni(0, 2)], assigned={0: 2}, pending=3, warm_ip=1)
    assert plan(r, inv).calls == (AssignAddresses("eni-00000000", ips=7),)
    # A new ENI is created with what is short, not filled.
    r, inv = rep([eni(0, 9)], assigned={0: 9}, pending=3, warm_ip=1)
    (create,) = plan(r, inv).calls
    assert isinstance(create, CreateEni) and create.ips == 4


def test_surge_never_fills_into_a_tight_subnet():
    r, inv = rep([eni(0, 2)], assigned={0: 2}, pending=3, warm_ip=1)
    p = plan(r, inv, subnets=[Subnet("subnet-a", AZ, "10.0.0.0/24", 8)])
    assert p.calls == (AssignAddresses("eni-00000000", ips=4),)


def test_no_surge_in_prefix_mode():
    r, inv = rep([eni(0, 0)], mode="prefix", warm_ip=1, pending=3)
    assert plan(r, inv).calls == (AssignAddresses("eni-00000000", prefixes=1),)


def test_enis_full_creates_one_eni_with_addresses():
    r, inv = rep([eni(0, 9)], assigned={0: 9}, pending=5, warm_ip=1)
    p = plan(r, inv)
    assert len(p.calls) == 1
    c = p.calls[0]
    assert isinstance(c, CreateEni)
    assert (c.ips, c.device_index, c.subnet_id) == (6, 1, "subnet-b")  # most free in the AZ
    assert c.client_token == client_token("demo", IID, 5, 0, 1)
    assert p.tokens() == {
        "CreateNetworkInterface": 1,
        "AttachNetworkInterface": 1,
        "ModifyNetworkInterfaceAttribute": 1,
    }


def test_mixed_assign_and_create_in_one_plan():
    r, inv = rep([eni(0, 7)], assigned={0: 7}, pending=10, warm_ip=1)
    p = plan(r, inv)
    assert p.calls[0] == AssignAddresses("eni-00000000", ips=2)
    assert isinstance(p.calls[1], CreateEni) and p.calls[1].ips == 9
    assert p.units_planned == 11


def test_fills_eni_with_most_room_first():
    r, inv = rep([eni(0, 8), eni(1, 2)], assigned={0: 8, 1: 2}, pending=6, warm_ip=1)
    p = plan(r, inv)
    assert p.calls == (AssignAddresses("eni-00000001", ips=7),)


def test_instance_at_its_eni_limit_is_unmet():
    r, inv = rep([eni(0, 9), eni(1, 9), eni(2, 9)], assigned={0: 9, 1: 9, 2: 9}, pending=4, warm_ip=1)
    p = plan(r, inv)
    assert p.calls == () and p.kind == "none" and p.unmet == 0  # ceiling caps the short itself
    assert p.delta.short == 0


def test_max_eni_caps_new_enis():
    r, inv = rep([eni(0, 9)], assigned={0: 9}, pending=4, warm_ip=1, max_eni=1)
    assert plan(r, inv).calls == ()


def test_subnet_full_means_unmet_with_a_note():
    r, inv = rep([eni(0, 9)], assigned={0: 9}, pending=4, warm_ip=1)
    p = plan(r, inv, subnets=[Subnet("subnet-a", AZ, "10.0.0.0/28", 2)])
    assert p.calls == () and p.unmet == 5
    assert "no allowed subnet" in p.notes[0]


def test_excluded_subnet_is_skipped():
    r, inv = rep([eni(0, 9)], assigned={0: 9}, pending=4, warm_ip=1)
    p = plan(r, inv, exclude_subnets=frozenset({"subnet-b"}))
    assert isinstance(p.calls[0], CreateEni) and p.calls[0].subnet_id == "subnet-a"


def test_warm_eni_fills_whole_enis():
    r, inv = rep([eni(0, 0)])
    p = plan(r, inv)
    assert p.calls == (AssignAddresses("eni-00000000", ips=9),)


def test_prefix_mode_and_fallback_to_addresses():
    r, inv = rep([eni(0, 0)], mode="prefix", warm_ip=5, pending=20)
    p = plan(r, inv)
    assert p.mode == "prefix"
    assert p.calls == (AssignAddresses("eni-00000000", prefixes=2),)
    fb = plan(r, inv, force_mode="secondary-ip")
    assert fb.mode == "secondary-ip"
    # 25 addresses short: fill the ENI, then two new ENIs with addresses
    assert fb.calls[0] == AssignAddresses("eni-00000000", ips=9)
    assert [(c.ips, c.prefixes) for c in fb.calls[1:] if isinstance(c, CreateEni)] == [(9, 0), (7, 0)]


def test_prefix_mode_on_non_nitro_uses_addresses():
    r, inv = rep([eni(0, 0)], itype="m4.large", mode="prefix", warm_ip=2)
    p = plan(r, inv, itype="m4.large")
    assert p.calls == (AssignAddresses("eni-00000000", ips=2),)


def test_release_unassigns_grouped_per_eni():
    e0 = eni(0, 9)
    r, inv = rep([e0], assigned={0: 2}, warm_ip=2, release=[ReleaseOffer(eni_id=e0.eni_id, ips=list(e0.ips[4:]))])
    p = plan(r, inv)
    assert p.kind == "release"
    assert p.calls == (UnassignAddresses(e0.eni_id, e0.ips[4:]),)


def test_release_is_trimmed_to_what_targets_allow():
    e0 = eni(0, 9)
    r, inv = rep([e0], assigned={0: 2}, warm_ip=5, release=[ReleaseOffer(eni_id=e0.eni_id, ips=list(e0.ips[2:]))])
    p = plan(r, inv)
    # 7 free, warm 5 -> only 2 may go; the 5 the targets need are taken back
    # (no EC2 call), so the agent does not wait for its quarantine to expire.
    assert p.calls == (Reclaim(e0.eni_id, e0.ips[2:7]), UnassignAddresses(e0.eni_id, e0.ips[7:9]))
    assert p.mutating_calls == 1 and p.kind == "release"


def test_release_that_empties_an_eni_deletes_it():
    e0, e1 = eni(0, 9), eni(1, 3)
    r, inv = rep([e0, e1], assigned={0: 2}, warm_ip=1, release=[ReleaseOffer(eni_id=e1.eni_id, ips=list(e1.ips))])
    assert plan(r, inv).calls == (DeleteEni(e1.eni_id),)


def test_release_ignores_addresses_ec2_does_not_show():
    e0 = eni(0, 9)
    r, inv = rep([e0], warm_ip=1, release=[ReleaseOffer(eni_id=e0.eni_id, ips=["10.0.0.250"])])
    assert plan(r, inv).calls == ()


def test_warm_eni_release_only_whole_enis():
    e0, e1, e2 = eni(0, 9), eni(1, 9), eni(2, 9)
    r, inv = rep(
        [e0, e1, e2],
        assigned={0: 1},
        release=[
            ReleaseOffer(eni_id=e2.eni_id, ips=list(e2.ips)),
            ReleaseOffer(eni_id=e0.eni_id, ips=list(e0.ips[5:])),
        ],
    )
    assert plan(r, inv).calls == (DeleteEni(e2.eni_id),)


def test_client_token_is_deterministic_and_short():
    t = client_token("demo", IID, 5, 0, 1)
    assert t == client_token("demo", IID, 5, 0, 1) != client_token("demo", IID, 6, 0, 1)
    assert len(t) <= 64 and t.isascii()


# --- scheduling ---------------------------------------------------------------


def iid_of(node: str) -> str:
    """One instance per node label."""
    return "i-" + hashlib.sha256(node.encode()).hexdigest()[:17]


def mk(node: str, seq: int, pending=0, warm_ip=1, instance_id: str | None = None) -> PoolReport:
    return PoolReport(
        cluster="demo",
        node=node,
        instance_id=instance_id or iid_of(node),
        instance_type="m5.large",
        availability_zone=AZ,
        seq=seq,
        sent_at=0,
        targets=Targets(warm_ip=warm_ip),
        pending_demand=pending,
    )


def test_coalesce_newest_wins_and_stale_dropped():
    rs = [mk("a", 1), mk("a", 3), mk("b", 2), mk("a", 2), mk("b", 2), mk("c", 4)]
    c = coalesce(rs, {iid_of("c"): 4, iid_of("b"): 1})
    assert [(r.node, r.seq) for r in c.keep] == [("a", 3), ("b", 2)]
    assert [(r.node, r.seq) for r in c.stale] == [("c", 4)]
    assert sorted((r.node, r.seq) for r in c.superseded) == [("a", 1), ("a", 2), ("b", 2)]


def test_coalesce_keys_by_instance_not_by_the_node_label():
    """Issue 12: one instance under many names is one node (newest wins); a
    name shared by two instances does not make one stale for the other."""
    one = IID
    sprayed = [mk(f"name-{i}", i + 1, instance_id=one) for i in range(50)]
    c = coalesce(sprayed, {})
    assert [(r.node, r.seq) for r in c.keep] == [("name-49", 50)] and len(c.superseded) == 49
    victim, forger = mk("a", 5), mk("a", 10**9, instance_id=iid_of("f"))
    c = coalesce([victim, forger], {iid_of("f"): 10**9 - 1})
    assert c.keep == (victim, forger)


def test_priority_starved_then_deficit_then_release():
    from warmpool.pool import PoolDelta

    low = PoolDelta(5, 5, False, 0, 0, 0)
    big = PoolDelta(9, 9, False, 0, 0, 0)
    keys = {
        "starved": priority_key(mk("s", 1, pending=2), low),
        "big": priority_key(mk("b", 1), big),
        "small": priority_key(mk("m", 1), low),
        "idle": priority_key(mk("i", 1), PoolDelta(0, 0, False, 0, 0, 0)),
    }
    assert sorted(keys, key=keys.__getitem__) == ["starved", "big", "small", "idle"]


# --- properties -----------------------------------------------------------------

ITYPES = ["t3.medium", "m5.large", "m5.4xlarge", "m4.large"]


@st.composite
def scenario(draw):
    itype = draw(st.sampled_from(ITYPES))
    lim = known(itype)
    n_enis = draw(st.integers(1, lim.max_enis))
    prefix = draw(st.booleans()) and lim.prefix_capable
    enis = []
    for i in range(n_enis):
        if prefix:
            k = draw(st.integers(0, lim.slots_per_eni))
            pf = tuple(f"10.{i}.{j}.0/28" for j in range(k))
            enis.append(Eni(f"eni-{i:08x}", i, 0, "subnet-a", f"10.0.{i}.4", (), pf))
        else:
            enis.append(eni(i, draw(st.integers(0, lim.slots_per_eni))))
    total = sum(e.addresses for e in enis)
    assigned = draw(st.integers(0, total))
    per = {}
    left = assigned
    for e in enis:
        take = min(left, e.addresses)
        per[e.device_index] = take
        left -= take
    release = []
    if draw(st.booleans()):
        e = draw(st.sampled_from(enis))
        release = [ReleaseOffer(eni_id=e.eni_id, ips=list(e.ips[per[e.device_index] :]), prefixes=[])]
    r, inv = rep(
        enis,
        assigned=per,
        pending=draw(st.integers(0, 40)),
        itype=itype,
        mode="prefix" if prefix else "secondary-ip",
        release=release,
        warm_ip=draw(st.integers(0, 20)),
        minimum_ip=draw(st.integers(0, 40)),
        warm_eni=draw(st.integers(0, 2)),
        warm_prefix=draw(st.integers(0, 2)),
        max_eni=draw(st.integers(0, lim.max_enis)),
    )
    return r, inv, itype


@settings(deadline=None)
@given(s=scenario(), free=st.integers(0, 300))
def test_plan_never_exceeds_instance_limits(s, free):
    r, inv, itype = s
    lim = known(itype)
    p = plan(r, inv, itype=itype, subnets=[Subnet("subnet-a", AZ, "10.0.0.0/16", free)])
    slots = {e.eni_id: e.used_slots for e in inv.enis}
    new = 0
    devices = {e.device_index for e in inv.enis}
    for c in p.calls:
        if isinstance(c, AssignAddresses):
            slots[c.eni_id] += c.ips + c.prefixes
        elif isinstance(c, CreateEni):
            new += 1
            assert c.ips + c.prefixes <= lim.slots_per_eni
            assert c.device_index not in devices
            devices.add(c.device_index)
    assert all(v <= lim.slots_per_eni for v in slots.values())
    assert len(inv.enis) + new <= max(len(inv.enis), lim.enis(r.targets.max_eni))
    kinds = {type(c) for c in p.calls}
    assert not (kinds & {AssignAddresses, CreateEni} and kinds & {UnassignAddresses, DeleteEni})


@settings(deadline=None)
@given(s=scenario())
def test_never_plans_for_a_stale_report(s):
    r, _inv, _ = s
    assert coalesce([r], {r.instance_id: r.seq}).keep == ()
    assert coalesce([r], {r.instance_id: r.seq + 1}).keep == ()
    assert coalesce([r], {r.instance_id: r.seq - 1}).keep == (r,)


def test_offered_addresses_are_taken_back_without_ec2_calls_when_pods_wait():
    # The agent quarantined 5 addresses and offers them; then 3 pods arrive.
    e0 = eni(0, 9)
    offer = ReleaseOffer(eni_id=e0.eni_id, ips=list(e0.ips[4:]))
    r, inv = rep([e0], assigned={0: 4}, pending=3, warm_ip=1, release=[offer])
    p = plan(r, inv)
    assert p.kind == "allocate"
    assert p.calls == (Reclaim(e0.eni_id, e0.ips[4:]),)
    assert p.mutating_calls == 0


def test_reclaim_then_allocate_what_is_still_short():
    e0 = eni(0, 9)
    offer = ReleaseOffer(eni_id=e0.eni_id, ips=list(e0.ips[7:]))
    r, inv = rep([e0], assigned={0: 7}, pending=5, warm_ip=1, release=[offer])
    p = plan(r, inv)
    assert p.calls[0] == Reclaim(e0.eni_id, e0.ips[7:])
    assert isinstance(p.calls[1], CreateEni) and p.calls[1].ips == 4
    kinds = {type(c) for c in p.calls}
    assert not kinds & {UnassignAddresses, DeleteEni}


def test_offers_ec2_no_longer_shows_are_not_reclaimed():
    e0 = eni(0, 4)
    offer = ReleaseOffer(eni_id=e0.eni_id, ips=["10.0.0.200"])  # already unassigned in EC2
    r, inv = rep([e0], assigned={0: 4}, pending=2, warm_ip=1, release=[offer])
    p = plan(r, inv)
    assert not any(isinstance(c, Reclaim) for c in p.calls)


def test_prefix_fallback_on_a_node_that_already_holds_prefixes():
    # Primary holds 2 /28s (32 addresses > the 27 single-address capacity),
    # all in use; InsufficientCidrBlocks -> the fallback must still plan
    # single addresses on the free slots.
    pf = ("10.0.1.0/28", "10.0.1.16/28")
    e0 = Eni("eni-00000000", 0, 0, "subnet-a", "10.0.0.4", (), pf)
    r, inv = rep([e0], assigned={0: 32}, pending=3, mode="prefix", warm_prefix=1, warm_eni=0)
    fb = plan(r, inv, force_mode="secondary-ip")
    assert fb.kind == "allocate" and fb.units_planned >= 19
    assert fb.calls[0] == AssignAddresses("eni-00000000", ips=7)


BIG = [Subnet("subnet-a", AZ, "10.0.0.0/20", 4000), Subnet("subnet-b", AZ, "10.0.16.0/20", 4000)]


def _held_after(p, start: int = 0) -> int:
    """/28s the node holds once the plan's calls are made."""
    return start + sum(c.prefixes for c in p.calls if isinstance(c, AssignAddresses | CreateEni))


def test_a_node_asking_for_its_whole_prefix_capacity_gets_its_max_pods_only():
    """Issue 12, finding D: the report's own numbers (pending pods, assigned) never take a
    node past what its kubelet can run. c5.xlarge in prefix mode: 110 pods by the VPC CNI's
    formula, so 7 /28s (112 addresses), not its 56 slots' 896 addresses."""
    r, inv = rep([eni(0, 0)], mode="prefix", itype="c5.xlarge", pending=896, warm_eni=0)
    lim = known("c5.xlarge")
    assert lim.capacity(prefix_mode=True, max_eni=None) == 896
    uncapped = plan(r, inv, itype="c5.xlarge", subnets=BIG)
    assert _held_after(uncapped) == 56
    ceiling = node_max_pods(r, lim)
    assert ceiling == max_pods(lim, prefix=True) == 110
    capped = plan(r, inv, itype="c5.xlarge", subnets=BIG, max_pods=ceiling)
    assert _held_after(capped) == 7
    # already at the ceiling: nothing more, however much it says is waiting
    r2, inv2 = rep(
        [eni(0, 0, prefixes=tuple(f"10.0.{i}.0/28" for i in range(7)))],
        mode="prefix",
        itype="c5.xlarge",
        pending=896,
        assigned={0: 112},
        warm_eni=0,
    )
    assert plan(r2, inv2, itype="c5.xlarge", subnets=BIG, max_pods=ceiling).calls == ()


def test_the_clusters_max_pods_overrides_the_formula_and_max_eni_lowers_it():
    r, _ = rep([eni(0, 0)], mode="prefix", itype="c5.xlarge", pending=896)
    lim = known("c5.xlarge")
    assert node_max_pods(r, lim, override=250) == 250
    r1, _ = rep([eni(0, 0)], mode="prefix", itype="c5.xlarge", pending=896, max_eni=1)
    assert node_max_pods(r1, lim) == max_pods(lim, prefix=True, max_eni=1) == 110
    r2, _ = rep([eni(0, 0)], itype="t3.medium", pending=50)
    assert node_max_pods(r2, known("t3.medium")) == 17  # secondary addresses: 3 x (6 - 1) + 2
