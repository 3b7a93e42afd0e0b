"""Regenerate ``warmpool/limits_table.txt`` from ``DescribeInstanceTypes`` on a real account.

    AWS_PROFILE=... python scripts/gen_instance_limits.py --region us-east-1 > warmpool/limits_table.txt

Reads every instance type the region offers (paginated, read-only, about ten
calls) and writes the same columns as the checked-in table (one row per type,
sorted; the columns are described in ``warmpool/limits_data.py``, which reads the
file), with exact vCPUs (``VCpuInfo.DefaultVCpus``). ``--merge`` keeps types the
region does not offer from the current table, so running it in a few regions
builds the union, as the VPC CNI's generator does (write it to another file
first: the shell empties the target before the table is read). Then set ``SOURCE`` in
``warmpool/limits_data.py`` to the regions read and update the digest pinned in
``tests/unit/test_max_pods.py``.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any


def row(item: dict[str, Any]) -> str:
    net = item["NetworkInfo"]
    cards = net.get("NetworkCards") or []
    default = int(net.get("DefaultNetworkCardIndex", 0) or 0)
    enis = int(net["MaximumNetworkInterfaces"])
    for card in cards:  # per-card maximum of the default card, as the VPC CNI's table records
        if int(card.get("NetworkCardIndex", 0)) == default and card.get("MaximumNetworkInterfaces"):
            enis = int(card["MaximumNetworkInterfaces"])
    vcpus = (item.get("VCpuInfo") or {}).get("DefaultVCpus")
    return " ".join(
        [
            str(item["InstanceType"]),
            str(enis),
            str(int(net["Ipv4AddressesPerInterface"])),
            str(int(net.get("MaximumNetworkCards") or len(cards) or 1)),
            str(item.get("Hypervisor") or "unknown"),
            "true" if item.get("BareMetal") else "false",
            str(vcpus) if vcpus else "-",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--region", action="append", required=True, help="repeatable")
    p.add_argument("--merge", action="store_true", help="keep rows of the current table the regions lack")
    args = p.parse_args(argv)
    import boto3

    rows: dict[str, str] = {}
    if args.merge:
        from warmpool.limits_data import TABLE

        rows = {line.split()[0]: line for line in TABLE.splitlines() if line.strip()}
    for region in args.region:
        ec2 = boto3.client("ec2", region_name=region)
        for page in ec2.get_paginator("describe_instance_types").paginate():
            for item in page["InstanceTypes"]:
                rows[item["InstanceType"]] = row(item)
    sys.stdout.write("".join(rows[k] + "\n" for k in sorted(rows)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
