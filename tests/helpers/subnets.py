"""A DescribeSubnets stand-in and the allocator's EC2 adapter on it (tests/unit/test_subnet_discovery.py
and tests/unit/test_custom_networking.py): subnets as EC2 lists them, tagged by the VPC CNI's keys,
and an adapter that pays for its reads (:class:`Payer`, tests/unit/test_placement_adapter.py's too)."""

from __future__ import annotations

from typing import Any

from emulated.clock import VirtualClock
from functions.ec2 import Ec2
from functions.settings import Settings
from functions.telemetry import Tally
from warmpool import names

C = "prod"
AZ = "us-east-1a"
VPC = "vpc-1"
ROLE, SCOPE = names.TAG_SUBNET_ROLE, names.subnet_cluster_tag_key


def t(**kw: str) -> dict[str, str]:
    """Tags with the keys spelled as in EC2: ``role`` and ``scope_<cluster>``, ``kcluster``."""
    out = {}
    for k, v in kw.items():
        if k == "role":
            out[ROLE] = v
        elif k.startswith("scope_"):
            out[SCOPE(k.removeprefix("scope_"))] = v
        elif k == "kcluster":
            out[names.cluster_tag_key(C)] = v
        else:
            out[k] = v
    return out


class SubnetApi:
    """DescribeSubnets only, as EC2 answers it: filters ANDed, values ORed, pages of MaxResults."""

    def __init__(self, items: list[dict[str, Any]]) -> None:
        self.items = items
        self.requests: list[dict[str, Any]] = []

    def describe_subnets(self, **kw: Any) -> dict[str, Any]:
        self.requests.append(kw)
        sel = []
        for i in self.items:
            keep = True
            for f in kw.get("Filters", []):
                name, values = f["Name"], f["Values"]
                if name == "vpc-id":
                    keep &= i["VpcId"] in values
                elif name == "subnet-id":
                    keep &= i["SubnetId"] in values
                elif name == "tag-key":
                    keep &= any(tg["Key"] in values for tg in i.get("Tags", []))
                elif name.startswith("tag:"):
                    keep &= any(tg["Key"] == name[4:] and tg["Value"] in values for tg in i.get("Tags", []))
                else:
                    raise AssertionError(name)
            if keep:
                sel.append(i)
        start = int(kw.get("NextToken") or 0)
        size = int(kw.get("MaxResults") or len(sel) or 1)
        page: dict[str, Any] = {"Subnets": sel[start : start + size]}
        if start + size < len(sel):
            page["NextToken"] = str(start + size)
        return page


def item(sid: str, vpc: str = VPC, **tags: str) -> dict[str, Any]:
    return {
        "SubnetId": sid,
        "VpcId": vpc,
        "AvailabilityZone": AZ,
        "CidrBlock": "10.0.0.0/24",
        "AvailableIpAddressCount": 200,
        "Tags": [{"Key": k, "Value": v} for k, v in t(**tags).items()],
    }


class Payer:
    def __init__(self) -> None:
        self.wait = 0.0
        self.paid: list[dict[str, int]] = []

    def __call__(self, cost: Any) -> float:
        if self.wait > 0:
            return self.wait
        self.paid.append(dict(cost))
        return 0.0


def adapter(api: SubnetApi, **settings: Any) -> tuple[Ec2, VirtualClock, Payer, Tally]:
    clock, pay, tally = VirtualClock(1000.0), Payer(), Tally()
    ec2 = Ec2(api, Settings(cluster=C, subnet_cache_ttl_s=30, **settings), clock, tally, pay=pay)  # type: ignore[arg-type]
    return ec2, clock, pay, tally
