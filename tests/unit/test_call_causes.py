"""Where warmpool's mutating calls go (``bench/call_causes.py``): every accepted call gets
exactly one cause, so the causes add up to the calls made; each cause follows the report the
call answered."""

from __future__ import annotations

import json
from collections import Counter
from types import SimpleNamespace
from typing import Any

import pytest

from bench.call_causes import UNATTRIBUTED, CallCauses, RunCalls, why_table
from bench.cli import bench_main
from bench.random_scenarios import draw
from bench.runner import run_bench
from bench.scenario import parse_scenario
from emulated.ec2.state import Attachment
from warmpool import names

I1, I2 = "i-0000000000000001", "i-0000000000000002"
PRIMARY, CREATED = "eni-primary1", "eni-created1"


def _emu() -> Any:
    def eni(iid: str, device: int) -> Any:
        return SimpleNamespace(attachment=Attachment(f"att-{iid}-{device}", iid, device, 0, 0.0, 0.0))

    return SimpleNamespace(enis={PRIMARY: eni(I1, 0), CREATED: eni(I1, 1)})


def _record(report: dict[str, Any], receives: int = 1) -> dict[str, Any]:
    body = {"instance_id": I1, "seq": 1, "assigned_ips": 0, "pending_demand": 0, **report}
    return {"body": json.dumps(body), "attributes": {"ApproximateReceiveCount": str(receives)}}


def _cause(
    report: dict[str, Any], action: str, kwargs: dict[str, Any], *, deleted: bool = False, receives: int = 1
) -> str:
    c = CallCauses(_emu(), lambda iid: deleted)
    with c.allocator([_record(report, receives)]):
        c.accepted(action, kwargs, {})
    [(key, n)] = c.counts.items()
    assert n == 1 and key.startswith(f"{action}: ")
    return key.split(": ", 1)[1]


ASSIGN = "AssignPrivateIpAddresses"


@pytest.mark.parametrize(
    ("report", "eni", "cause"),
    [
        ({}, PRIMARY, "join-time pool"),
        ({"assigned_ips": 3, "pending_demand": 2}, PRIMARY, "pods waiting"),
        ({"assigned_ips": 3, "pending_demand": 2, "burst": 4}, PRIMARY, "burst"),
        ({"assigned_ips": 3}, PRIMARY, "warm top-up"),
        ({"assigned_ips": 3}, CREATED, "warm top-up, on a created ENI"),
    ],
)
def test_a_grow_is_put_under_what_its_report_asked_for(report: dict[str, Any], eni: str, cause: str) -> None:
    assert _cause(report, ASSIGN, {"NetworkInterfaceId": eni}) == cause


def test_a_give_back_says_whether_a_pod_of_the_node_was_deleted_before() -> None:
    offer = {"assigned_ips": 3, "release": [{"eni_id": CREATED, "ips": ["10.0.0.9"]}]}
    kw = {"NetworkInterfaceId": CREATED, "PrivateIpAddresses": ["10.0.0.9"]}
    assert _cause(offer, "UnassignPrivateIpAddresses", kw) == "give-back of an over-fill"
    assert _cause(offer, "UnassignPrivateIpAddresses", kw, deleted=True) == "give-back after pod deletes"
    assert _cause({"assigned_ips": 3}, "UnassignPrivateIpAddresses", kw) == "not offered"


def test_a_record_received_again_is_a_retried_batch() -> None:
    assert _cause({}, ASSIGN, {"NetworkInterfaceId": PRIMARY}, receives=2) == "retried batch"


def test_first_contact_tags_say_whether_the_call_tagged_several_nodes() -> None:
    tag = [{"Key": names.TAG_PRIMARY_ENI_OF, "Value": "c"}]
    assert _cause({}, "CreateTags", {"Resources": [PRIMARY], "Tags": tag}) == "first-contact tag, one node"
    assert _cause({}, "CreateTags", {"Resources": [PRIMARY, "eni-x"], "Tags": tag}) == "first-contact tag, batched"


def test_a_created_eni_deleted_without_an_attach_is_a_failed_attach_s_cleanup() -> None:
    c = CallCauses(_emu(), lambda iid: False)
    create = {"SubnetId": "subnet-a", "TagSpecifications": [{"Tags": [{"Key": names.TAG_INSTANCE_ID, "Value": I1}]}]}
    with c.allocator([_record({"assigned_ips": 1, "pending_demand": 5})]):
        c.accepted("CreateNetworkInterface", create, {"NetworkInterface": {"NetworkInterfaceId": "eni-new"}})
        c.accepted("DeleteNetworkInterface", {"NetworkInterfaceId": "eni-new"}, {})
    assert c.counts == Counter(
        {"CreateNetworkInterface: pods waiting": 1, "DeleteNetworkInterface: failed attach cleanup": 1}
    )


def test_the_reconciler_s_calls_and_calls_with_no_context() -> None:
    c = CallCauses(_emu(), lambda iid: False)
    with c.reconciler():
        c.accepted("CreateTags", {"Resources": [CREATED], "Tags": [{"Key": names.TAG_GC_MARK, "Value": "60"}]}, {})
        c.accepted("DeleteNetworkInterface", {"NetworkInterfaceId": CREATED}, {})
    c.accepted(ASSIGN, {"NetworkInterfaceId": PRIMARY}, {})
    with c.allocator([_record({})]):  # an instance the batch has no report of
        c.accepted(ASSIGN, {"NetworkInterfaceId": "eni-unknown"}, {})
    assert c.counts == Counter(
        {
            "CreateTags: reconciler, GC mark": 1,
            "DeleteNetworkInterface: reconciler, GC delete": 1,
            f"{ASSIGN}: {UNATTRIBUTED}": 2,
        }
    )


@pytest.mark.parametrize("index", [2, 3, 5, 16, 31])
def test_the_causes_add_up_to_the_calls_made_on_a_drawn_scenario(index: int) -> None:
    # seed 1: 2 WARM_IP with a scale-down, 3 WARM_IP with Lambda crashes, 5 prefix, 16 WARM_ENI
    # whose scale-down's ENIs the GC deletes, 31 WARM_ENI with duplicate deliveries and an
    # exhausted subnet
    data = draw(1, index)
    result, _ = run_bench(parse_scenario(data, data["name"]), strategies=["warmpool"])
    r = result.strategies["warmpool"]
    assert sum(r.calls_by_cause.values()) == r.mutating_calls > 0
    assert not [k for k in r.calls_by_cause if k.endswith(UNATTRIBUTED)]
    by_action: Counter[str] = Counter()
    for key, n in r.calls_by_cause.items():
        by_action[key.split(": ", 1)[0]] += n
    accepted = {
        a: n - r.ec2_throttled.get(a, 0) - r.ec2_errors.get(a, 0)
        for a, n in r.ec2_calls.items()
        if by_action[a] or not a.startswith(("Describe", "Get"))
    }
    assert dict(by_action) == {a: n for a, n in accepted.items() if n}


def test_the_table_adds_up_and_sets_each_action_against_the_online_bound() -> None:
    runs = [
        RunCalls(2, {f"{ASSIGN}: join-time pool": 2, f"{ASSIGN}: warm top-up": 3, "CreateTags: x": 2}, {ASSIGN: 4}),
        RunCalls(1, {f"{ASSIGN}: join-time pool": 1}, {ASSIGN: 1}),
    ]
    lines = why_table(runs, "t").splitlines()
    assert lines[0] == "t: 2 scenarios, 3 nodes, 8 calls, online bound 5"
    row = {ln.split()[0]: ln.split() for ln in lines[3:] if not ln.startswith(" ")}
    assert row[ASSIGN][1:] == ["6", "2.00", "1.75", "5", "1"]  # median of 2.5 and 1.0 calls a node
    assert row["CreateTags"][1:] == ["2", "0.67", "0.50", "0", "2"]
    assert row["all"][1:] == ["8", "2.67", "2.25", "5", "3"]  # of 3.5 and 1.0


def test_why_is_for_random_runs_only(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        bench_main(["scenarios/burst-200.yaml", "--why"])
    assert exc.value.code == 2
    assert "--why is for --random" in capsys.readouterr().err
