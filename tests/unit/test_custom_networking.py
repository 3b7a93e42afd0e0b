"""Custom networking (issue 24): pods in per-zone subnets and security groups, never on the node's
primary ENI. The selection as a table of cases, the planner, the ceiling, the allocator's setting,
the adapter's read of the map's subnets, and the agent leaving its primary ENI out of the pool."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from functions.settings import Settings
from node_agent.config import load
from node_agent.controller import PoolController
from node_agent.datastore import Datastore
from tests.helpers.controller import ID, PRIMARY, SECOND, TIMING, FakeImds, one
from tests.helpers.subnets import SubnetApi, adapter, item
from warmpool import names
from warmpool.calls import AssignAddresses, CreateEni, TagPrimaryEni
from warmpool.limits import known, max_pods, pod_ceiling
from warmpool.messages import EniReport, PoolReport, Targets
from warmpool.planner import Eni, Inventory, node_max_pods, plan_node, quiet
from warmpool.pool import PoolConfig
from warmpool.subnets import CustomNetwork, Subnet, SubnetRule, ZoneNetwork, node_subnets

C = "prod"
AZ, OTHER_AZ = "us-east-1a", "us-east-1b"
VPC = "vpc-1"
OWN = "subnet-own"
IID = "i-0123456789abcdef0"
MAP = CustomNetwork(
    {
        AZ: ZoneNetwork(("subnet-pods-a1", "subnet-pods-a2"), ("sg-pods",)),
        OTHER_AZ: ZoneNetwork(("subnet-pods-b",)),
    }
)


def s(sid: str, free: int = 1000, az: str = AZ) -> Subnet:
    return Subnet(sid, az, "10.0.0.0/24", free, VPC, {names.cluster_tag_key(C): "shared"})


WORLD = [
    s(OWN, 5000),
    s("subnet-pods-a1", 300),
    s("subnet-pods-a2", 800),
    s("subnet-pods-b", 900, OTHER_AZ),
    s("subnet-other", 2000),
]

CASES = [
    # (custom node, zone, rule, expected ids, expected rule, why)
    (
        True,
        AZ,
        SubnetRule.DISCOVER,
        ["subnet-pods-a1", "subnet-pods-a2"],
        SubnetRule.LISTED,
        "its zone's, listed",
    ),
    (True, OTHER_AZ, SubnetRule.LISTED, ["subnet-pods-b"], SubnetRule.LISTED, "the other zone's entry"),
    (True, "us-east-1c", SubnetRule.DISCOVER, [], SubnetRule.LISTED, "a zone the map lacks: none (no ENIConfig)"),
    (
        False,
        AZ,
        SubnetRule.DISCOVER,
        [OWN, "subnet-other"],
        SubnetRule.DISCOVER,
        "other nodes never use the map's subnets",
    ),
]


@pytest.mark.parametrize(("custom", "zone", "rule", "ids", "out_rule", "why"), CASES, ids=[c[-1] for c in CASES])
def test_a_nodes_subnets_follow_the_map(
    custom: bool, zone: str, rule: SubnetRule, ids: list[str], out_rule: SubnetRule, why: str
) -> None:
    got, got_rule = node_subnets(WORLD, zone, rule, MAP, custom_node=custom)
    assert sorted(x.subnet_id for x in got) == sorted(ids), why
    assert got_rule is out_rule, why


def test_without_a_map_every_subnet_is_there() -> None:
    got, rule = node_subnets(WORLD, AZ, SubnetRule.DISCOVER, CustomNetwork(), custom_node=False)
    assert got == tuple(WORLD) and rule is SubnetRule.DISCOVER


# --- the planner ---------------------------------------------------------------------------------

PRIMARY_ENI = Eni("eni-00000001", 0, 0, OWN, "10.0.0.4", ("10.0.0.5",))


def _report(custom: bool, *, warm_ip: int = 5, assigned: int = 1) -> PoolReport:
    return PoolReport(
        cluster=C,
        node="n1",
        instance_id=IID,
        instance_type="m5.large",
        availability_zone=AZ,
        seq=3,
        sent_at=0,
        targets=Targets(warm_ip=warm_ip, warm_eni=0),
        enis=[
            EniReport(
                eni_id=PRIMARY_ENI.eni_id,
                device_index=0,
                subnet_id=OWN,
                primary_ip=PRIMARY_ENI.primary_ip,
                ips=list(PRIMARY_ENI.ips),
                assigned=assigned,
            )
        ]
        if not custom
        else [],
        assigned_ips=assigned if not custom else 0,
        custom_networking=True if custom else None,
    )


def _plan(custom: bool, enis: tuple[Eni, ...] = (PRIMARY_ENI,), **kw: Any) -> Any:
    inv = Inventory(IID, "m5.large", AZ, enis, vpc_id=VPC)
    report = _report(custom, **kw)
    lim = known("m5.large")
    return plan_node(
        report,
        inv,
        lim,
        WORLD,
        cluster=C,
        subnet_rule=SubnetRule.LISTED,
        custom=MAP,
        max_pods=node_max_pods(report, lim),
    )


def test_a_custom_node_gets_a_new_eni_in_its_zones_roomiest_subnet_never_an_address_on_its_primary() -> None:
    p = _plan(True)
    assert not [c for c in p.calls if isinstance(c, AssignAddresses)]
    created = [c for c in p.calls if isinstance(c, CreateEni)]
    assert [c.subnet_id for c in created] == ["subnet-pods-a2"] and created[0].device_index == 1
    plain = _plan(False)  # the same node without custom networking fills its primary first
    assert [c.eni_id for c in plain.calls if isinstance(c, AssignAddresses)] == [PRIMARY_ENI.eni_id]
    assert all(c.subnet_id not in MAP.subnet_ids() for c in plain.calls if isinstance(c, CreateEni))


def test_a_custom_nodes_untagged_primary_is_not_claimed() -> None:
    untagged = Eni("eni-00000001", 0, 0, OWN, "10.0.0.4", (), assignable=False, claim_primary=True)
    assert not [c for c in _plan(True, (untagged,)).calls if isinstance(c, TagPrimaryEni)]
    assert [c for c in _plan(False, (untagged,)).calls if isinstance(c, TagPrimaryEni)]


def test_a_custom_node_in_a_zone_the_map_lacks_gets_nothing_and_says_so() -> None:
    inv = Inventory(IID, "m5.large", "us-east-1c", (PRIMARY_ENI,), vpc_id=VPC)
    r = _report(True).model_copy(update={"availability_zone": "us-east-1c"})
    p = plan_node(r, inv, known("m5.large"), WORLD, cluster=C, custom=MAP)
    assert p.calls == () and p.unmet > 0 and "no allowed subnet in the AZ has room" in p.notes


def test_a_custom_nodes_existing_pod_eni_is_filled_before_a_new_one() -> None:
    pods = Eni("eni-00000002", 1, 0, "subnet-pods-a1", "10.1.0.4", ("10.1.0.5",))
    p = _plan(True, (PRIMARY_ENI, pods), warm_ip=3)
    assert [(type(c).__name__, getattr(c, "eni_id", "")) for c in p.calls] == [("AssignAddresses", pods.eni_id)]


def test_the_ceiling_counts_one_eni_fewer() -> None:
    lim = known("m5.large")  # 3 ENIs x 10 addresses: 29 pods, 20 with custom networking
    assert max_pods(lim, prefix=False) == 29
    assert max_pods(lim, prefix=False, custom_networking=True) == 20
    assert pod_ceiling(lim, prefix=False, custom_networking=True) == 20
    assert node_max_pods(_report(True), lim) == 20 and node_max_pods(_report(False), lim) == 29
    assert lim.capacity(prefix_mode=False, custom_networking=True) == 18


def test_the_report_carries_the_flag_only_when_set() -> None:
    assert '"custom_networking"' not in _report(False).to_json()
    back = PoolReport.model_validate_json(_report(True).to_json())
    assert back.custom_networking is True
    with pytest.raises(ValidationError):
        PoolReport.model_validate({**_report(False).model_dump(by_alias=True), "custom_networking": False})


# --- the allocator's setting and reads -----------------------------------------------------------


def test_the_map_is_read_from_json_and_bad_ones_are_refused_naming_the_zone() -> None:
    ok = Settings(cluster=C, custom_network='{"us-east-1a": {"subnets": ["subnet-1"], "security_groups": ["sg-1"]}}')
    assert ok.custom.zones[AZ] == ZoneNetwork(("subnet-1",), ("sg-1",)) and ok.custom.groups(OTHER_AZ) == ()
    assert Settings(cluster=C).custom.zones == {} and Settings(cluster=C, custom_network="").custom.zones == {}
    for bad, says in [
        ('{"a": {"subnets": []}}', "'a'] names no subnet"),
        ('{"a": {"subnets": ["x"]}}', "lists x"),
        ('{"a": {"subnets": ["subnet-1"], "security_groups": ["g"]}}', "lists g"),
        ('{"a": {"subnets": ["subnet-1"]}, "b": {"subnets": ["subnet-1"]}}', "lists a subnet twice: subnet-1"),
        ('{"a": {"subnet": ["subnet-1"]}}', "has subnet: only subnets and security_groups"),
        ("{not json", "WARMPOOL_CUSTOM_NETWORK"),
    ]:
        with pytest.raises(ValidationError) as e:
            Settings(cluster=C, custom_network=bad)
        assert says in str(e.value), (bad, str(e.value))


def test_the_maps_subnets_are_read_by_id_besides_the_pod_subnets() -> None:
    api = SubnetApi([item("subnet-a"), item("subnet-pods"), item("subnet-t", role="1")])
    ec2, _, pay, _ = adapter(api, allowed_subnets="subnet-a", custom_network={AZ: {"subnets": ["subnet-pods"]}})
    assert set(ec2.subnets([VPC])) == {"subnet-a", "subnet-pods"}
    assert [r["Filters"] for r in api.requests] == [
        [{"Name": "subnet-id", "Values": ["subnet-a"]}],
        [{"Name": "subnet-id", "Values": ["subnet-pods"]}],
    ]
    assert pay.paid == [{"DescribeSubnets": 1}] * 2
    # already among those the rule read (discovery reads the whole VPC): no second call
    api2 = SubnetApi([item("subnet-a"), item("subnet-pods")])
    ec2b, _, _, _ = adapter(api2, custom_network={AZ: {"subnets": ["subnet-pods"]}})
    assert set(ec2b.subnets([VPC])) == {"subnet-a", "subnet-pods"} and len(api2.requests) == 1


# --- the agent -----------------------------------------------------------------------------------


def test_the_agents_switch_is_the_vpc_cnis_name() -> None:
    base = {"CLUSTER_NAME": "demo", "WARMPOOL_REPORTS_QUEUE_URL": "http://q", "MY_NODE_NAME": "n1"}
    assert load({**base, names.AGENT_ENV_CUSTOM_NETWORKING: "true"}).pool.custom_networking is True
    assert load(base).pool.custom_networking is False
    targets = load({**base, names.AGENT_ENV_CUSTOM_NETWORKING: "true"}).public()["targets"]
    assert isinstance(targets, dict) and targets[names.AGENT_ENV_CUSTOM_NETWORKING] is True


def _agent(custom: bool, *, pod_on_primary: bool = False) -> tuple[Datastore, PoolController, FakeImds]:
    imds = FakeImds()
    imds.add(PRIMARY, ["10.0.0.11", "10.0.0.12"])
    imds.add(SECOND, ["10.0.0.21"])
    ds = Datastore(cooldown_s=TIMING.cooldown_s)
    ds.add_eni(PRIMARY, 0.0)
    ds.add_addresses(PRIMARY.eni_id, ["10.0.0.11", "10.0.0.12"])
    if pod_on_primary:
        assert ds.assign("old-pod", "eth0", "ns", 0.0) is not None
    ctl = PoolController(
        ID, known("m5.large"), PoolConfig(warm_ip=1, custom_networking=custom), ds, TIMING, metadata=imds
    )
    return ds, ctl, imds


def test_a_custom_agent_hands_out_no_address_of_its_primary_eni_and_reports_it_not() -> None:
    ds, ctl, _ = _agent(True)
    ctl.resync(0.0)
    r = one(ctl.tick(0.0))
    assert r.custom_networking is True
    assert [e.eni_id for e in r.enis] == [SECOND.eni_id]
    got = ds.assign("pod-1", "eth0", "ns", 1.0)
    assert got is not None and got.ip == "10.0.0.21"
    assert ds.assign("pod-2", "eth0", "ns", 1.1) is None  # the primary's .11/.12 are not the pool's
    ds2, ctl2, _ = _agent(False)
    ctl2.resync(0.0)
    one(ctl2.tick(0.0))
    assert {ds2.assign(f"p{i}", "eth0", "ns", 1.0).ip for i in range(3)} == {  # type: ignore[union-attr]
        "10.0.0.11",
        "10.0.0.12",
        "10.0.0.21",
    }


def test_a_pod_already_on_the_primary_keeps_its_address_when_custom_networking_is_turned_on() -> None:
    ds, ctl, _ = _agent(True, pod_on_primary=True)
    held = {a.ip for e in ds.enis() for a in e.addrs.values() if a.in_use}
    ctl.resync(0.0)
    r = one(ctl.tick(0.0))
    assert r.assigned_ips == 1
    assert {a.ip for e in ds.enis() for a in e.addrs.values() if a.in_use} == held
    got = ds.assign("pod-1", "eth0", "ns", 1.0)
    assert got is not None and got.ip == "10.0.0.21"
    assert ds.assign("pod-2", "eth0", "ns", 1.1) is None


# --- pods left on the primary ENI (the switch turned on under running pods) ----------------------

PRIMARY_NINE = Eni("eni-00000001", 0, 0, OWN, "10.0.0.4", tuple(f"10.0.0.{i}" for i in range(5, 14)))
POD_ENI = Eni("eni-00000002", 1, 0, "subnet-pods-a1", "10.1.0.4", tuple(f"10.1.0.{i}" for i in range(5, 10)))


def _held_report(on_pod_eni: int, *, on_primary: int = 5, warm_ip: int = 3) -> PoolReport:
    """A custom node whose primary still holds ``on_primary`` pods from before the switch (the
    agent reports it, held) and whose pod ENI has five addresses, ``on_pod_eni`` of them used."""
    return _report(True, warm_ip=warm_ip).model_copy(
        update={
            "enis": [
                EniReport(
                    eni_id=e.eni_id,
                    device_index=e.device_index,
                    subnet_id=e.subnet_id.replace("-pods-", "-"),  # as the report's pattern allows
                    primary_ip=e.primary_ip,
                    ips=list(e.ips),
                    assigned=n,
                )
                for e, n in ((PRIMARY_NINE, on_primary), (POD_ENI, on_pod_eni))
            ],
            "assigned_ips": on_primary + on_pod_eni,
        }
    )


def test_pods_left_on_the_primary_do_not_count_against_the_pool() -> None:
    """Three free on the pod ENI meet WARM_IP_TARGET=3: nothing to do. Counting the primary's
    five pods against the pool's five addresses, the plan asked for five more, which the agent
    (whose own count holds the primary apart) then offered back, again and again."""
    lim = known("m5.large")
    inv = Inventory(IID, "m5.large", AZ, (PRIMARY_NINE, POD_ENI), vpc_id=VPC)
    met = _held_report(on_pod_eni=2)
    p = plan_node(met, inv, lim, WORLD, cluster=C, custom=MAP, max_pods=node_max_pods(met, lim))
    assert p.calls == (), p.calls
    short = _held_report(on_pod_eni=4)  # one free: two short
    p = plan_node(short, inv, lim, WORLD, cluster=C, custom=MAP, max_pods=node_max_pods(short, lim))
    assigned = [c for c in p.calls if isinstance(c, AssignAddresses)]
    assert [(c.eni_id, c.ips or len(c.at_ips)) for c in assigned] == [(POD_ENI.eni_id, 2)], p.calls


def test_a_custom_report_is_not_quiet_on_its_primarys_free_addresses() -> None:
    """The allocator skips the Describe round for a report whose own numbers meet its targets.
    The primary's four free addresses are not the pool's: a full pod ENI is short, not quiet."""
    lim = known("m5.large")
    assert not quiet(_held_report(on_pod_eni=5), lim)
    assert quiet(_held_report(on_pod_eni=2), lim)
    plain = _held_report(on_pod_eni=5).model_copy(update={"custom_networking": None})
    assert quiet(plain, lim)  # without the switch the primary's free addresses are the pool's
