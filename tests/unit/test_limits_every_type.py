"""Every instance type of the limits table, many network cards included (issue 21, defect 11).

An interface on card 16 or above, or more than 32 ENIs, made every report invalid, and the
planner counted the interfaces of every card against the default card's ENI limit: a
p5.48xlarge (32 cards of 2 ENIs, an EFA interface on each) was never served. The contract
(docs/design.md, "Contract additions"): ``enis[].network_card`` up to the type's card
count, ``enis`` up to the type's ENI count. Table-driven over ``warmpool/limits_table.txt``.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

from warmpool.calls import CreateEni
from warmpool.limits import InstanceLimits, parse_table
from warmpool.limits_data import read_table
from warmpool.messages import MessageError, PoolReport, parse_report
from warmpool.planner import Eni, Inventory, node_max_pods, plan_node
from warmpool.subnets import Subnet

TABLE = parse_table(read_table())
TYPES = sorted(TABLE)
CLUSTER = "demo"
SUBNET = Subnet("subnet-0a", "us-east-1a", "10.0.0.0/16", 60_000)


def _eni_id(*parts: object) -> str:
    return "eni-" + hashlib.sha256(repr(parts).encode()).hexdigest()[:17]


def _address(n: int) -> str:
    return f"10.0.{n // 250}.{n % 250 + 4}"


def _layout(lim: InstanceLimits) -> list[tuple[int, int]]:
    """(card, device index) of a node with every card full: device 0.. on card 0, and on the
    other cards from device 1 (as AWS's examples attach EFA interfaces there)."""
    out = [(0, d) for d in range(lim.max_enis)]
    for card in range(1, lim.network_cards):
        out += [(card, d + 1) for d in range(lim.max_enis)]
    return out


def _report(itype: str, slots: list[tuple[int, int]], **extra: Any) -> dict[str, Any]:
    enis = [
        {
            "eni_id": _eni_id(itype, card, dev),
            "device_index": dev,
            "network_card": card,
            "subnet_id": SUBNET.subnet_id,
            "primary_ip": _address(i),
        }
        for i, (card, dev) in enumerate(slots)
    ]
    return {
        "schema": "warmpool.report/v1",
        "cluster": CLUSTER,
        "node": "n1",
        "instance_id": "i-0123456789abcdef0",
        "instance_type": itype,
        "availability_zone": "us-east-1a",
        "seq": 1,
        "sent_at": 1_700_000_000.0,
        "enis": enis,
        **extra,
    }


def test_the_table_has_the_many_card_types() -> None:
    assert len(TYPES) > 1000
    assert (TABLE["p5.48xlarge"].network_cards, TABLE["p5.48xlarge"].total_enis) == (32, 64)
    assert sum(1 for t in TABLE.values() if t.network_cards > 1) >= 30


def _full_report_problem(itype: str) -> str:
    lim = TABLE[itype]
    try:
        report = parse_report(_report(itype, _layout(lim)))
    except MessageError as err:
        return str(err)
    if len(report.enis) != lim.total_enis or max(e.network_card for e in report.enis) != lim.network_cards - 1:
        return "not every card reported"
    return ""


def test_a_report_of_a_node_with_every_card_full_is_valid_for_every_type() -> None:
    problems = {t: p for t in TYPES if (p := _full_report_problem(t))}
    assert problems == {}


def _refused(body: dict[str, Any], pattern: str) -> bool:
    try:
        parse_report(body)
    except MessageError as err:
        return re.search(pattern, str(err)) is not None
    return False


def test_a_report_past_the_types_cards_or_enis_is_invalid_for_every_type() -> None:
    beyond_card = [t for t in TYPES if not _refused(_report(t, [(0, 0), (TABLE[t].network_cards, 1)]), r"network.card")]
    more_enis = [
        t
        for t in TYPES
        if not _refused(_report(t, [*_layout(TABLE[t]), (0, TABLE[t].max_enis)]), r"ENIs >|at most \d+ items")
    ]
    assert (beyond_card, more_enis) == ([], [])


def _inventory(report: PoolReport) -> Inventory:
    """EC2's view: the node's primary ENI (this cluster's) and another tool's interface on
    every other card (EFA on a p5.48xlarge), which warmpool may not touch."""
    enis = tuple(
        Eni(
            e.eni_id,
            e.device_index,
            e.network_card,
            e.subnet_id,
            e.primary_ip,
            assignable=(e.network_card, e.device_index) == (0, 0),
            lifecycle=False,
        )
        for e in report.enis
    )
    return Inventory(report.instance_id, report.instance_type, report.availability_zone, enis)


def _planner_problem(itype: str) -> str:
    lim = TABLE[itype]
    slots = [(0, 0)] + [(card, 1) for card in range(1, lim.network_cards)]
    report = PoolReport.model_validate(
        _report(itype, slots, targets={"warm_ip": 100_000, "warm_eni": 0}, pending_demand=5)
    )
    plan = plan_node(report, _inventory(report), lim, [SUBNET], cluster=CLUSTER, max_pods=node_max_pods(report, lim))
    created = [c for c in plan.calls if isinstance(c, CreateEni)]
    # The primary ENI is filled first; then one new ENI per free slot of the default card.
    got = sorted((c.network_card, c.device_index) for c in created)
    want = [(0, d) for d in range(1, lim.max_enis)]
    return "" if got == want else f"created {got}, want {want} ({'; '.join(plan.notes)})"


def test_the_planner_fills_the_default_card_whatever_the_other_cards_hold_for_every_type() -> None:
    problems = {t: p for t in TYPES if (p := _planner_problem(t))}
    assert problems == {}


def test_p5_48xlarge_with_an_efa_interface_on_each_of_its_32_cards() -> None:
    assert _full_report_problem("p5.48xlarge") == ""
    assert _planner_problem("p5.48xlarge") == ""
