"""The planner's test world (tests/unit/test_planner.py and the tests that plan one node the same
way): a node's ENIs and report, and ``plan_node`` on them for the demo cluster."""

from __future__ import annotations

import ipaddress

from warmpool.limits import known
from warmpool.messages import EniReport, PoolReport, Targets
from warmpool.planner import Eni, Inventory, plan_node
from warmpool.subnets import Subnet

IID = "i-0123456789abcdef0"
AZ = "us-east-1a"
SUBNETS = [
    Subnet("subnet-a", AZ, "10.0.0.0/24", 200),
    Subnet("subnet-b", AZ, "10.0.1.0/24", 250),
    Subnet("subnet-z", "us-east-1b", "10.0.2.0/24", 250),
]


def addrs(base: str, n: int) -> tuple[str, ...]:
    start = ipaddress.IPv4Address(base)
    return tuple(str(start + i) for i in range(n))


def eni(i: int, n_ips: int, subnet: str = "subnet-a", prefixes: tuple[str, ...] = ()) -> Eni:
    return Eni(f"eni-{i:08x}", i, 0, subnet, f"10.0.{i}.4", addrs(f"10.0.{i}.10", n_ips), prefixes)


def rep(
    enis: list[Eni],
    *,
    assigned: dict[int, int] | None = None,
    pending=0,
    seq=5,
    itype="m5.large",
    mode="secondary-ip",
    release=(),
    **targets,
) -> tuple[PoolReport, Inventory]:
    assigned = assigned or {}
    r = PoolReport(
        cluster="demo",
        node="n1",
        instance_id=IID,
        instance_type=itype,
        availability_zone=AZ,
        seq=seq,
        sent_at=0,
        mode=mode,
        targets=Targets(**targets),
        enis=[
            EniReport(
                eni_id=e.eni_id,
                device_index=e.device_index,
                subnet_id=e.subnet_id,
                primary_ip=e.primary_ip,
                ips=list(e.ips),
                prefixes=list(e.prefixes),
                assigned=assigned.get(e.device_index, 0),
            )
            for e in enis
        ],
        assigned_ips=sum(assigned.values()),
        pending_demand=pending,
        release=list(release),
    )
    return r, Inventory(IID, itype, AZ, tuple(enis))


def plan(r, inv, itype="m5.large", subnets=SUBNETS, **kw):
    return plan_node(r, inv, known(itype), subnets, cluster="demo", **kw)
