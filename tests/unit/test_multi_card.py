"""ENIs on every network card (issue 24, ``WARMPOOL_MULTI_CARD``): where the planner puts a new
ENI, what the ceilings count, and device 0 of a card above 0 never taken for the primary ENI."""

from __future__ import annotations

from dataclasses import replace

import pytest

from node_agent.controller import PoolController
from node_agent.datastore import Datastore
from node_agent.records import EniInfo, NodeIdentity
from tests.helpers.controller import TIMING, FakeImds, RecordingHost, one, result
from warmpool.calls import CreateEni, DeleteEni
from warmpool.eni_scope import permissions
from warmpool.limits import KNOWN_TYPES, is_primary_slot, known, max_pods, pod_ceiling
from warmpool.messages import EniReport, PoolReport, ReleaseOffer, Targets
from warmpool.planner import Eni, Inventory, client_token, new_eni_slot, node_max_pods, plan_node, quiet
from warmpool.pool import PoolConfig, PoolState, ceiling
from warmpool.subnets import Subnet

IID = "i-0123456789abcdef0"
AZ = "us-east-1a"
SUBNETS = [Subnet("subnet-a", AZ, "10.0.0.0/16", 60_000)]

# --- where a new ENI goes -------------------------------------------------------------------

FULL_P5 = {(c, d) for c in range(32) for d in range(2)}

SLOT_CASES = [
    # (type, used slots, multi_card, MAX_ENI, expected slot)
    ("m5.large", {(0, 0)}, False, 0, (0, 1)),
    ("m5.large", {(0, 0)}, True, 0, (0, 1)),
    ("m5.large", {(0, 0), (0, 1), (0, 2)}, False, 0, None),
    ("m5.large", {(0, 0), (0, 1), (0, 2)}, True, 0, None),  # one card: nothing else to use
    ("p5.48xlarge", {(0, 0)}, True, 0, (0, 1)),  # the default card first
    ("p5.48xlarge", {(0, 0), (0, 1)}, False, 0, None),  # off: never a card above 0
    ("p5.48xlarge", {(0, 0), (0, 1)}, True, 0, (1, 0)),  # device 0 of card 1
    ("p5.48xlarge", {(0, 0), (0, 1), (1, 0)}, True, 0, (1, 1)),
    ("p5.48xlarge", {(0, 0), (0, 1), (1, 0), (1, 1)}, True, 0, (2, 0)),
    ("p5.48xlarge", {(0, 0), (0, 1), (1, 0), (2, 0)}, True, 0, (1, 1)),  # lowest card with room
    ("p5.48xlarge", {(0, 0), (0, 1), (1, 1)}, True, 0, (1, 0)),  # an EFA at device 1: 0 is free
    ("p5.48xlarge", FULL_P5 - {(31, 1)}, True, 0, (31, 1)),
    ("p5.48xlarge", FULL_P5, True, 0, None),
    ("p5.48xlarge", {(0, 0), (0, 1)}, True, 2, None),  # MAX_ENI counts every card's ENIs
    ("p5.48xlarge", {(0, 0), (0, 1)}, True, 3, (1, 0)),
    ("p5.48xlarge", {(0, 0)}, False, 1, None),
    ("p4d.24xlarge", {(0, i) for i in range(15)}, False, 0, None),
    ("p4d.24xlarge", {(0, i) for i in range(15)}, True, 0, (1, 0)),
    ("p4d.24xlarge", {(0, i) for i in range(15)} | {(1, i) for i in range(14)}, True, 0, (1, 14)),
    ("trn1.32xlarge", {(0, i) for i in range(5)} | {(1, i) for i in range(5)}, True, 0, (2, 0)),
]


@pytest.mark.parametrize(("itype", "used", "multi", "max_eni", "want"), SLOT_CASES)
def test_new_eni_slot(
    itype: str, used: set[tuple[int, int]], multi: bool, max_eni: int, want: tuple[int, int] | None
) -> None:
    assert new_eni_slot(used, known(itype), multi_card=multi, max_eni=max_eni) == want


@pytest.mark.parametrize("itype", sorted(t for t, lim in KNOWN_TYPES.items() if lim.network_cards == 1)[:200:7])
def test_single_card_types_are_unaffected(itype: str) -> None:
    lim = known(itype)
    used = {(0, d) for d in range(lim.max_enis - 1)}
    assert new_eni_slot(used, lim, multi_card=True) == new_eni_slot(used, lim) == (0, lim.max_enis - 1)
    for prefix in (False, True):
        assert pod_ceiling(lim, prefix=prefix, multi_card=True) == pod_ceiling(lim, prefix=prefix)


# --- ceilings -------------------------------------------------------------------------------

CEILING_CASES = [
    # (type, prefix, custom networking, multi_card, expected max pods (the published table's formula))
    ("m5.large", False, False, False, 29),
    ("m5.large", False, False, True, 29),
    ("p5.48xlarge", False, False, False, 2 * 49 + 2),
    ("p5.48xlarge", False, False, True, 64 * 49 + 2),
    ("p5.48xlarge", False, True, True, 63 * 49 + 2),
    ("p5.48xlarge", True, False, True, 250),  # prefix mode: the calculator's cap (192 vCPUs)
    ("p4d.24xlarge", False, False, False, 15 * 49 + 2),
    ("p4d.24xlarge", False, False, True, 60 * 49 + 2),
    ("trn1.32xlarge", False, False, True, 40 * 49 + 2),
]


@pytest.mark.parametrize(("itype", "prefix", "custom", "multi", "want"), CEILING_CASES)
def test_max_pods_counts_other_cards_only_when_on(
    itype: str, prefix: bool, custom: bool, multi: bool, want: int
) -> None:
    lim = known(itype)
    assert max_pods(lim, prefix=prefix, custom_networking=custom, multi_card=multi) == want
    assert pod_ceiling(lim, prefix=prefix, custom_networking=custom, multi_card=multi) == want


@pytest.mark.parametrize(
    ("itype", "multi", "want"),
    [("p5.48xlarge", False, 2 * 49), ("p5.48xlarge", True, 64 * 49), ("m5.large", True, 3 * 9)],
)
def test_pool_ceiling_counts_other_cards_only_when_on(itype: str, multi: bool, want: int) -> None:
    assert ceiling(PoolConfig(multi_card=multi), known(itype)) == want
    assert ceiling(PoolConfig(multi_card=multi, prefix_mode=True), known(itype)) == want * 16


# --- plans ----------------------------------------------------------------------------------


def _eni(card: int, dev: int, n_ips: int, **kw: object) -> Eni:
    i = card * 100 + dev
    ips = tuple(f"10.0.{i}.{10 + k}" for k in range(n_ips))
    return Eni(f"eni-{i:08x}", dev, card, "subnet-a", f"10.0.{i}.4", ips, **kw)  # type: ignore[arg-type]


def _report(
    enis: list[Eni], itype: str, *, assigned: int = 0, release: list[ReleaseOffer] | None = None, **kw: object
) -> tuple[PoolReport, Inventory]:
    left = assigned
    reps = []
    for e in enis:
        here = min(left, len(e.ips))
        left -= here
        reps.append(
            EniReport(
                eni_id=e.eni_id,
                device_index=e.device_index,
                network_card=e.network_card,
                subnet_id=e.subnet_id,
                primary_ip=e.primary_ip,
                ips=list(e.ips),
                assigned=here,
            )
        )
    targets = Targets(**{k: v for k, v in kw.items() if k in ("warm_ip", "warm_eni", "minimum_ip")})  # type: ignore[arg-type]
    extra = {k: v for k, v in kw.items() if k not in ("warm_ip", "warm_eni", "minimum_ip")}
    r = PoolReport(
        cluster="demo",
        node="n1",
        instance_id=IID,
        instance_type=itype,
        availability_zone=AZ,
        seq=7,
        sent_at=0,
        targets=targets,
        enis=reps,
        assigned_ips=assigned,
        release=release or [],
        **extra,  # type: ignore[arg-type]
    )
    return r, Inventory(IID, itype, AZ, tuple(enis))


def _creates(itype: str, *, multi: bool, warm_ip: int) -> list[tuple[int, int]]:
    enis = [_eni(0, 0, 49), _eni(0, 1, 49)]
    # the agent's report says it wires cards above 0 when its setting is on (as the allocator's)
    r, inv = _report(enis, itype, assigned=98, warm_ip=warm_ip, warm_eni=0, multi_card=True if multi else None)
    lim = known(itype)
    p = plan_node(
        r, inv, lim, SUBNETS, cluster="demo", max_pods=node_max_pods(r, lim, multi_card=multi), multi_card=multi
    )
    return [(c.network_card, c.device_index) for c in p.calls if isinstance(c, CreateEni)]


@pytest.mark.parametrize(
    ("multi", "warm_ip", "want"),
    [
        (False, 10, []),
        (True, 10, [(1, 0)]),
        (True, 49 * 3, [(1, 0), (1, 1), (2, 0)]),
        (True, 49 * 5, [(1, 0), (1, 1), (2, 0), (2, 1), (3, 0)]),
    ],
)
def test_p5_fills_card_0_then_card_1_then_card_2(multi: bool, warm_ip: int, want: list[tuple[int, int]]) -> None:
    assert _creates("p5.48xlarge", multi=multi, warm_ip=warm_ip) == want


def test_create_on_another_card_carries_the_card_and_its_own_token() -> None:
    r, inv = _report(
        [_eni(0, 0, 49), _eni(0, 1, 49)], "p5.48xlarge", assigned=98, warm_ip=5, warm_eni=0, multi_card=True
    )
    p = plan_node(r, inv, known("p5.48xlarge"), SUBNETS, cluster="demo", multi_card=True)
    (c,) = [c for c in p.calls if isinstance(c, CreateEni)]
    assert (c.network_card, c.device_index) == (1, 0)
    assert c.client_token == client_token("demo", IID, 7, 1, 0) != client_token("demo", IID, 7, 0, 0)


def test_off_a_full_default_card_is_the_nodes_ceiling() -> None:
    r, inv = _report([_eni(0, 0, 49), _eni(0, 1, 49)], "p5.48xlarge", assigned=98, warm_ip=5, warm_eni=0)
    p = plan_node(r, inv, known("p5.48xlarge"), SUBNETS, cluster="demo", max_pods=10_000)
    assert p.calls == () and p.delta.short == 0  # the ceiling (card 0's ENIs alone) caps the need itself


def test_quiet_holds_a_full_default_card_only_when_off() -> None:
    r, _ = _report([_eni(0, 0, 49), _eni(0, 1, 49)], "p5.48xlarge", assigned=98, warm_ip=5, warm_eni=0, multi_card=True)
    lim = known("p5.48xlarge")
    assert quiet(r, lim, node_max_pods(r, lim))
    assert not quiet(r, lim, node_max_pods(r, lim, multi_card=True), multi_card=True)


# --- device 0 of a card above 0 is not the primary ENI ---------------------------------------


@pytest.mark.parametrize(
    ("card", "dev", "primary"), [(0, 0, True), (0, 1, False), (1, 0, False), (1, 1, False), (31, 0, False)]
)
def test_only_device_0_of_card_0_is_the_primary_slot(card: int, dev: int, primary: bool) -> None:
    assert is_primary_slot(card, dev) is primary
    info = EniInfo("eni-1", dev, "0a:00:00:00:00:09", "10.0.9.4", "subnet-a", "10.0.0.0/16", network_card=card)
    assert info.primary is primary


@pytest.mark.parametrize(
    ("card", "dev", "table"), [(0, 0, 254), (0, 1, 2), (0, 14, 15), (1, 0, 10100), (1, 1, 10101), (31, 1, 13101)]
)
def test_route_tables_of_other_cards_never_collide_with_card_0(card: int, dev: int, table: int) -> None:
    info = EniInfo("eni-1", dev, "0a:00:00:00:00:09", "10.0.9.4", "subnet-a", "10.0.0.0/16", network_card=card)
    assert info.route_table == table


def test_an_untagged_device_0_of_card_1_is_never_claimed_as_the_primary() -> None:
    assert permissions({}, "demo", in_cluster_vpc=True, device_index=0, network_card=0).tag_as_primary
    p = permissions({}, "demo", in_cluster_vpc=True, device_index=0, network_card=1)
    assert not p.tag_as_primary and not p.assign and not p.lifecycle


def test_the_nodes_own_subnet_is_its_primarys_not_device_0_of_card_1() -> None:
    other = replace(_eni(1, 0, 0), subnet_id="subnet-other")
    inv = Inventory(IID, "p5.48xlarge", AZ, (other, _eni(0, 0, 0)))
    assert inv.own_subnet == "subnet-a"


def test_an_empty_device_0_of_card_1_is_deleted_like_any_other_eni() -> None:
    e0, e1 = _eni(0, 0, 49), _eni(1, 0, 3)
    offer = ReleaseOffer(eni_id=e1.eni_id, ips=list(e1.ips))
    r, inv = _report([e0, e1], "p5.48xlarge", assigned=2, warm_ip=1, release=[offer])
    assert plan_node(r, inv, known("p5.48xlarge"), SUBNETS, cluster="demo", multi_card=True).calls == (
        DeleteEni(e1.eni_id),
    )


def test_custom_networking_leaves_out_the_primary_alone_not_device_0_of_card_1() -> None:
    e0, e1 = _eni(0, 0, 10), _eni(1, 0, 10)
    r, _ = _report([e0, e1], "p5.48xlarge", assigned=0, warm_ip=1, custom_networking=True)
    state = PoolState.from_report(r)
    assert (state.total, state.enis) == (10, 1)  # device 0 of card 1 is the pool's; the primary is not


def _p5_controller(host: RecordingHost, imds: FakeImds) -> tuple[Datastore, PoolController]:
    ident = NodeIdentity("demo", "node-1", IID, "p5.48xlarge", AZ)
    primary = EniInfo("eni-00000000", 0, "0a:00:00:00:00:00", "10.0.0.10", "subnet-a", "10.0.0.0/24")
    imds.enis = {}
    imds.add(primary)
    imds.identity = lambda: ident  # type: ignore[method-assign]
    ds = Datastore(cooldown_s=TIMING.cooldown_s)
    ds.add_eni(primary, 0.0)
    ctl = PoolController(
        ident, known("p5.48xlarge"), PoolConfig(warm_ip=2, multi_card=True), ds, TIMING, host=host, metadata=imds
    )
    return ds, ctl


def test_the_agent_sets_up_device_0_of_card_1_before_handing_out_its_addresses() -> None:
    imds, host = FakeImds(), RecordingHost()
    ds, ctl = _p5_controller(host, imds)
    r = one(ctl.tick(0.0))
    card1 = EniInfo("eni-00000101", 0, "0a:00:00:00:01:00", "10.0.1.4", "subnet-a", "10.0.1.0/24", network_card=1)
    imds.add(card1, ["10.0.1.11", "10.0.1.12"])
    host.missing.add(card1.mac)
    attached = {
        "kind": "attached",
        "eni_id": card1.eni_id,
        "device_index": 0,
        "network_card": 1,
        "mac": card1.mac,
        "subnet_id": "subnet-a",
        "subnet_cidr": "10.0.1.0/24",
        "primary_ip": card1.primary_ip,
        "ips": ["10.0.1.11", "10.0.1.12"],
    }
    ctl.apply_result(result(r.seq, attached), 1.0)
    assert ds.counts(1.0).total == 2
    assert ds.assign("c1", "eth0", "ns", 1.0) is None  # not set up yet: not the primary, whose link is there
    host.missing.clear()
    ctl.tick(2.0)
    assert host.calls == [("setup", card1.eni_id)]
    assert ds.assign("c1", "eth0", "ns", 2.0) == ("10.0.1.11", card1.eni_id)
    again = one(ctl.tick(200.0))
    assert [(e.network_card, e.device_index) for e in again.enis] == [(0, 0), (1, 0)]
