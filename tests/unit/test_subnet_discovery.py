"""Subnet discovery by the VPC CNI's tags: the rule as a table of cases, the planner placing
new ENIs by it, the typed setting, and the adapter's cached, paid DescribeSubnets."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from functions.ec2 import SubnetsUnpaid
from functions.settings import Settings
from tests.helpers.subnets import AZ, ROLE, VPC, C, SubnetApi, adapter, item, t
from warmpool import names
from warmpool.calls import AssignAddresses, CreateEni
from warmpool.limits import known
from warmpool.messages import EniReport, PoolReport, Targets
from warmpool.planner import Eni, Inventory, plan_node
from warmpool.subnets import Site, Subnet, SubnetRule, Verdict, pod_subnets, verdict

OTHER_AZ = "us-east-1b"
OTHER_VPC = "vpc-2"
OWN = "subnet-own"
SITE = Site(C, AZ, VPC, OWN)


def s(sid: str, free: int = 100, az: str = AZ, vpc: str = VPC, **kw: str) -> Subnet:
    return Subnet(sid, az, "10.0.0.0/24", free, vpc, t(**kw))


# --- one subnet's verdict ----------------------------------------------------------------------

VERDICTS = [
    # (subnet, verdict, why)
    (s("subnet-x", role="1"), Verdict.TAGGED, "role=1: a pod subnet"),
    (s("subnet-x", role=""), Verdict.TAGGED, "the VPC CNI takes any value but 0"),
    (s("subnet-x", role="0"), Verdict.EXCLUDED, "role=0: never"),
    (s(OWN, role="0"), Verdict.EXCLUDED, "role=0 excludes the node's own subnet too"),
    (s(OWN), Verdict.OWN, "the node's own subnet, untagged, is kept"),
    (s(OWN, scope_other="1"), Verdict.OWN, "kept whatever its cluster keys, as the VPC CNI keeps it"),
    (s(OWN, role="1", scope_other="1"), Verdict.EXCLUDED, "tagged: the cluster scope applies"),
    (s("subnet-x"), Verdict.UNTAGGED, "untagged: only when nothing is tagged"),
    (s("subnet-x", role="1", scope_prod=""), Verdict.TAGGED, "scoped to this cluster"),
    (s("subnet-x", role="1", scope_prod="", scope_other=""), Verdict.TAGGED, "scoped to two, this one of them"),
    (s("subnet-x", role="1", scope_other="owned"), Verdict.EXCLUDED, "scoped to another cluster only"),
    (s("subnet-x", scope_other="owned"), Verdict.EXCLUDED, "untagged and another cluster's"),
    (
        Subnet("subnet-x", AZ, "10.0.0.0/24", 100, VPC, {ROLE: "1", names.cluster_tag_key("other"): "owned"}),
        Verdict.TAGGED,
        "the kubernetes.io/cluster/ key does not scope",
    ),
]


@pytest.mark.parametrize(("subnet", "expected", "why"), VERDICTS, ids=[w for *_, w in VERDICTS])
def test_a_subnets_tags_decide_what_it_is_for_the_node(subnet: Subnet, expected: Verdict, why: str) -> None:
    assert verdict(subnet, SITE) is expected, why


def test_a_cluster_without_a_name_checks_no_scope() -> None:
    assert verdict(s("subnet-x", role="1", scope_other=""), Site("", AZ, VPC, OWN)) is Verdict.TAGGED


# --- a node's candidates -----------------------------------------------------------------------

CASES = [
    # (subnets, expected ids, why)
    ([s(OWN), s("subnet-t", role="1"), s("subnet-u")], ["subnet-own", "subnet-t"], "tagged and own; not untagged"),
    ([s(OWN, role="0"), s("subnet-t", role="1")], ["subnet-t"], "own tagged 0: pods elsewhere only"),
    ([s(OWN), s("subnet-u"), s("subnet-v")], ["subnet-own"], "nothing tagged: the node's own alone"),
    ([s(OWN), s("subnet-k", kcluster="shared")], ["subnet-k"], "nothing tagged: the cluster's, as before"),
    ([s(OWN, role="0"), s("subnet-u")], [], "fallback keeps the exclusions, takes no untagged one"),
    ([s(OWN, role="0"), s("subnet-k", kcluster="owned")], ["subnet-k"], "fallback: the cluster's, own excluded"),
    ([s(OWN), s("subnet-o", role="0")], ["subnet-own"], "a 0 tag is no candidate: fall back"),
    ([s(OWN), s("subnet-t", role="1", scope_other="")], ["subnet-own"], "the other cluster's: not tagged here"),
    ([s(OWN), s("subnet-u", scope_other="")], ["subnet-own"], "untagged but the other cluster's"),
    ([s(OWN), s("subnet-t", role="1", az=OTHER_AZ)], ["subnet-own"], "another zone's tagged subnet"),
    ([s(OWN), s("subnet-t", role="1", vpc=OTHER_VPC)], ["subnet-own"], "another VPC's tagged subnet"),
    ([s(OWN, role="0")], [], "only the node's subnet, tagged 0: none"),
    ([], [], "no subnets"),
]


@pytest.mark.parametrize(("subnets", "expected", "why"), CASES, ids=[w for *_, w in CASES])
def test_discovery_picks_the_nodes_candidates(subnets: list[Subnet], expected: list[str], why: str) -> None:
    assert [x.subnet_id for x in pod_subnets(subnets, SITE, SubnetRule.DISCOVER)] == expected, why


def test_a_listed_set_is_used_as_given_in_the_nodes_zone_tags_unread() -> None:
    given = [s(OWN), s("subnet-o", role="0"), s("subnet-x", scope_other=""), s("subnet-z", az=OTHER_AZ)]
    assert [x.subnet_id for x in pod_subnets(given, SITE, SubnetRule.LISTED)] == [OWN, "subnet-o", "subnet-x"]


def test_a_subnet_without_a_known_vpc_is_not_refused_for_it() -> None:
    assert pod_subnets([s("subnet-t", vpc="", role="1")], SITE, SubnetRule.DISCOVER)[0].subnet_id == "subnet-t"


# --- the planner places new ENIs by the rule --------------------------------------------------

IID = "i-0123456789abcdef0"
PRIMARY = Eni("eni-00000001", 0, 0, OWN, "10.0.0.4", tuple(f"10.0.0.{10 + i}" for i in range(9)))


def _report() -> PoolReport:
    return PoolReport(
        cluster=C,
        node="n1",
        instance_id=IID,
        instance_type="m5.large",
        availability_zone=AZ,
        seq=3,
        sent_at=0,
        targets=Targets(warm_ip=5, warm_eni=0),
        enis=[
            EniReport(
                eni_id=PRIMARY.eni_id,
                device_index=0,
                subnet_id=OWN,
                primary_ip=PRIMARY.primary_ip,
                ips=list(PRIMARY.ips),
                assigned=9,
            )
        ],
        assigned_ips=9,
    )


def _created(subnets: list[Subnet], rule: SubnetRule) -> list[str]:
    inv = Inventory(IID, "m5.large", AZ, (PRIMARY,), vpc_id=VPC)
    p = plan_node(_report(), inv, known("m5.large"), subnets, cluster=C, subnet_rule=rule)
    return [c.subnet_id for c in p.calls if isinstance(c, CreateEni)]


def test_the_new_eni_goes_to_the_tagged_subnet_not_a_bigger_untagged_one() -> None:
    world = [s(OWN, free=50), s("subnet-t", free=500, role="1"), s("subnet-u", free=5000)]
    assert _created(world, SubnetRule.DISCOVER) == ["subnet-t"]
    assert _created(world, SubnetRule.LISTED) == ["subnet-u"]  # what the rule changes


def test_the_nodes_own_subnet_stays_a_candidate_with_most_room() -> None:
    assert _created([s(OWN, free=900), s("subnet-t", free=500, role="1")], SubnetRule.DISCOVER) == [OWN]


def test_a_zero_tag_keeps_new_enis_out_of_the_nodes_own_subnet() -> None:
    assert _created([s(OWN, free=900, role="0"), s("subnet-t", free=50, role="1")], SubnetRule.DISCOVER) == ["subnet-t"]


def test_no_candidate_means_no_new_eni_and_says_so() -> None:
    inv = Inventory(IID, "m5.large", AZ, (PRIMARY,), vpc_id=VPC)
    p = plan_node(_report(), inv, known("m5.large"), [s(OWN, role="0")], cluster=C, subnet_rule=SubnetRule.DISCOVER)
    assert not [c for c in p.calls if isinstance(c, CreateEni)]
    assert p.unmet > 0 and "no allowed subnet in the AZ has room" in p.notes


# An Assign on an ENI asks no more than its subnet has free (the cached count): EC2 refuses
# one that asks for more (InsufficientFreeAddressesInSubnet). The nodes' own subnet full, the
# rest goes to a new ENI in a candidate subnet (scenarios/two-subnets-unequal.yaml: 244
# refused Assigns before, a p99 time to IP of 94 s).
SPARSE = Eni("eni-00000001", 0, 0, OWN, "10.0.0.4", ("10.0.0.10", "10.0.0.11"))
ROOM_CASES = [
    # (own subnet's free addresses, tagged subnet's, expected calls as (kind, subnet, addresses), why)
    (100, 500, [("assign", OWN, 5)], "room in the own subnet: the primary ENI takes all 5"),
    (3, 500, [("assign", OWN, 3), ("create", "subnet-t", 2)], "3 left there: 3 on the primary, 2 on a new ENI"),
    (0, 500, [("create", "subnet-t", 5)], "the own subnet full: no Assign on the primary at all"),
    (0, 0, [], "no room anywhere: no call EC2 would refuse"),
]


@pytest.mark.parametrize(("own_free", "tagged_free", "expected", "why"), ROOM_CASES)
def test_an_assign_asks_no_more_than_its_subnet_has(
    own_free: int, tagged_free: int, expected: list[tuple[str, str, int]], why: str
) -> None:
    report = _report().model_copy(
        update={
            "enis": [_report().enis[0].model_copy(update={"ips": list(SPARSE.ips), "assigned": 2})],
            "assigned_ips": 2,
        }
    )
    inv = Inventory(IID, "m5.large", AZ, (SPARSE,), vpc_id=VPC)
    world = [s(OWN, free=own_free), s("subnet-t", free=tagged_free, role="1")]
    p = plan_node(report, inv, known("m5.large"), world, cluster=C, subnet_rule=SubnetRule.DISCOVER)
    got = [
        ("create", c.subnet_id, c.ips) if isinstance(c, CreateEni) else ("assign", OWN, c.ips)
        for c in p.calls
        if isinstance(c, CreateEni | AssignAddresses)
    ]
    assert got == expected, why


# --- the setting -------------------------------------------------------------------------------


def test_discovery_is_on_by_default_and_an_explicit_list_wins() -> None:
    assert Settings(cluster=C).subnet_rule is SubnetRule.DISCOVER
    assert Settings(cluster=C, subnet_discovery=False).subnet_rule is SubnetRule.LISTED
    assert Settings(cluster=C, allowed_subnets="subnet-a").subnet_rule is SubnetRule.LISTED


def test_the_environment_turns_discovery_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(names.ENV_CLUSTER, C)
    monkeypatch.setenv("WARMPOOL_IDENTITY_VERIFICATION", "off")
    monkeypatch.setenv(names.ENV_SUBNET_DISCOVERY, "false")
    assert Settings.from_env().subnet_discovery is False


@pytest.mark.parametrize(
    ("field", "value", "named"),
    [
        (names.ENV_SUBNET_DISCOVERY, "maybe", names.ENV_SUBNET_DISCOVERY),
        (names.ENV_ALLOWED_SUBNETS, "subnet-a,sg-0123", "sg-0123"),
        (names.ENV_ALLOWED_SUBNETS, "subnet-a,subnet-a", "twice"),
        (names.ENV_SUBNET_TAG, "novalue", names.ENV_SUBNET_TAG),
        (names.ENV_SUBNET_TAG, "=x", names.ENV_SUBNET_TAG),
        ("WARMPOOL_SUBNET_CACHE_TTL_S", "-1", "WARMPOOL_SUBNET_CACHE_TTL_S"),
        ("WARMPOOL_SUBNET_CACHE_TTL_S", "86400", "WARMPOOL_SUBNET_CACHE_TTL_S"),
    ],
)
def test_a_bad_subnet_setting_is_refused_naming_it(
    monkeypatch: pytest.MonkeyPatch, field: str, value: str, named: str
) -> None:
    monkeypatch.setenv(names.ENV_CLUSTER, C)
    monkeypatch.setenv("WARMPOOL_IDENTITY_VERIFICATION", "off")
    monkeypatch.setenv(field, value)
    with pytest.raises(ValidationError) as e:
        Settings.from_env()
    assert named in str(e.value)


# --- the adapter: one paid, cached DescribeSubnets (tests/helpers/subnets.py) ---------------------


def test_discovery_reads_the_nodes_vpcs_once_with_tags_and_pays_for_it() -> None:
    api = SubnetApi([item("subnet-t", role="1"), item(OWN), item("subnet-far", vpc=OTHER_VPC, role="1")])
    ec2, _, pay, _ = adapter(api)
    got = ec2.subnets([VPC])
    assert set(got) == {"subnet-t", OWN}
    assert got["subnet-t"].tags == {ROLE: "1"} and got["subnet-t"].vpc_id == VPC
    assert api.requests == [{"Filters": [{"Name": "vpc-id", "Values": [VPC]}], "MaxResults": 1000}]
    assert pay.paid == [{"DescribeSubnets": 1}]


def test_every_page_is_paid_for() -> None:
    api = SubnetApi([item(f"subnet-{i:04d}") for i in range(2500)])
    ec2, _, pay, _ = adapter(api)
    assert len(ec2.subnets([VPC])) == 2500
    assert len(api.requests) == 3 and pay.paid == [{"DescribeSubnets": 1}] * 3


def test_a_subnet_tagged_later_is_seen_after_the_cache_ttl_without_a_restart() -> None:
    api = SubnetApi([item(OWN)])
    ec2, clock, _, _ = adapter(api)
    assert set(ec2.subnets([VPC])) == {OWN}
    api.items.append(item("subnet-new", role="1"))
    clock.advance(29)
    assert set(ec2.subnets([VPC])) == {OWN} and len(api.requests) == 1  # cached
    clock.advance(2)
    got = ec2.subnets([VPC])
    assert got["subnet-new"].tags == {ROLE: "1"} and len(api.requests) == 2


def test_a_refresh_the_bucket_cannot_pay_keeps_the_subnets_read_before() -> None:
    api = SubnetApi([item(OWN)])
    ec2, clock, pay, tally = adapter(api)
    ec2.subnets([VPC])
    api.items.append(item("subnet-new", role="1"))
    clock.advance(31)
    pay.wait = 2.0
    assert set(ec2.subnets([VPC])) == {OWN} and len(api.requests) == 1
    assert tally.get(names.M_SUBNET_READS_DEFERRED) == 1
    pay.wait = 0.0
    assert "subnet-new" in ec2.subnets([VPC])  # tried again at the next use


def test_no_subnets_read_and_no_token_says_how_long_to_wait() -> None:
    ec2, _, pay, _ = adapter(SubnetApi([item(OWN)]))
    pay.wait = 3.5
    with pytest.raises(SubnetsUnpaid) as e:
        ec2.subnets([VPC])
    assert e.value.wait == 3.5


def test_an_explicit_list_is_read_by_id_and_wins() -> None:
    api = SubnetApi([item("subnet-a"), item("subnet-t", role="1")])
    ec2, _, _, _ = adapter(api, allowed_subnets="subnet-a")
    assert set(ec2.subnets([VPC])) == {"subnet-a"}
    assert api.requests[0]["Filters"] == [{"Name": "subnet-id", "Values": ["subnet-a"]}]


def test_the_stacks_subnet_tag_reads_the_subnets_so_tagged_alone() -> None:
    # The stack's subnet_tag, which its IAM statement allows: before, it never reached the
    # functions, which placed ENIs by the cluster tag or in any subnet of the VPC.
    api = SubnetApi(
        [
            item("subnet-p", **{"warmpool.io/pods": "true"}),
            item("subnet-t", role="1"),
            item("subnet-k", kcluster="owned"),
        ]
    )
    ec2, _, pay, _ = adapter(api, subnet_tag="warmpool.io/pods=true")
    assert set(ec2.subnets([VPC])) == {"subnet-p"}
    assert api.requests[0]["Filters"] == [{"Name": "tag:warmpool.io/pods", "Values": ["true"]}]
    assert pay.paid == [{"DescribeSubnets": 1}]
    assert Settings(cluster=C, subnet_tag="warmpool.io/pods=true").subnet_rule is SubnetRule.LISTED  # type: ignore[call-arg]


def test_discovery_off_reads_as_before_the_clusters_tagged_else_the_vpc() -> None:
    api = SubnetApi([item("subnet-u"), item("subnet-t", role="1")])
    ec2, _, _, _ = adapter(api, subnet_discovery=False)
    assert set(ec2.subnets([VPC])) == {"subnet-u", "subnet-t"}
    assert [r["Filters"][0]["Name"] for r in api.requests] == ["tag-key", "vpc-id"]
    api2 = SubnetApi([item("subnet-u"), item("subnet-k", kcluster="owned")])
    ec2b, _, _, _ = adapter(api2, subnet_discovery=False)
    assert set(ec2b.subnets([VPC])) == {"subnet-k"}


def test_spending_keeps_the_tags() -> None:
    ec2, _, _, _ = adapter(SubnetApi([item("subnet-t", role="1")]))
    ec2.subnets([VPC])
    ec2.spend_subnet("subnet-t", 50)
    got = ec2.subnets([VPC])["subnet-t"]
    assert got.free == 150 and got.tags == {ROLE: "1"}
