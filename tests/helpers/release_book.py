"""One node's report and EC2's facts, by ENI and the addresses and /28 prefixes on each (a key with
``/`` is a prefix): n1, i-0123456789abcdef0, m5.large in us-east-1a, every ENI in subnet-a
(tests/unit/test_release_book.py and the settle review)."""

from __future__ import annotations

from typing import Any

from warmpool import names
from warmpool.facts import EniFacts, NodeFacts
from warmpool.messages import PoolReport
from warmpool.planner import Eni


def report(seq: int, enis: dict[str, list[str]], offers: dict[str, list[str]] | None = None) -> PoolReport:
    def split(keys: list[str]) -> dict[str, Any]:
        return {"ips": [k for k in keys if "/" not in k], "prefixes": [k for k in keys if "/" in k]}

    return PoolReport.model_validate(
        {
            "schema": "warmpool.report/v1",
            "cluster": "demo",
            "node": "n1",
            "instance_id": "i-0123456789abcdef0",
            "instance_type": "m5.large",
            "availability_zone": "us-east-1a",
            "seq": seq,
            "sent_at": 1.0,
            "mode": "secondary-ip",
            "targets": {"warm_ip": 1},
            "enis": [
                {
                    "eni_id": e,
                    "device_index": i,
                    "network_card": 0,
                    "subnet_id": "subnet-a",
                    "primary_ip": f"10.0.0.{100 + i}",
                    **split(keys),
                    "assigned": 0,
                }
                for i, (e, keys) in enumerate(enis.items())
            ],
            "assigned_ips": 0,
            "pending_demand": 0,
            "release": [{"eni_id": e, **split(k), "quarantined_at": 1.0} for e, k in (offers or {}).items()],
        }
    )


def facts(enis: dict[str, list[str]]) -> NodeFacts:
    return NodeFacts(
        "i-0123456789abcdef0",
        "m5.large",
        "us-east-1a",
        "running",
        "vpc-1",
        {},
        tuple(
            EniFacts(
                Eni(
                    e,
                    i,
                    0,
                    "subnet-a",
                    f"10.0.0.{100 + i}",
                    tuple(k for k in keys if "/" not in k),
                    tuple(k for k in keys if "/" in k),
                ),
                "i-0123456789abcdef0",
                f"att-{i}",
                "02:00:00:00:00:0" + str(i),
                True,
                "in-use",
                {names.TAG_CLUSTER_NAME: "demo", names.TAG_MANAGED: "true"},
            )
            for i, (e, keys) in enumerate(enis.items())
        ),
    )
