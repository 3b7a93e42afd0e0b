"""A valid report, as the wire carries it, for the message tests to spoil."""

from __future__ import annotations


def report(**kw) -> dict:
    base = {
        "schema": "warmpool.report/v1",
        "cluster": "demo",
        "node": "ip-10-0-0-5.ec2.internal",
        "instance_id": "i-0123456789abcdef0",
        "instance_type": "m5.large",
        "availability_zone": "us-east-1a",
        "seq": 7,
        "sent_at": 1_700_000_000.5,
        "mode": "secondary-ip",
        "targets": {"warm_ip": 1, "minimum_ip": 0, "warm_eni": 1, "warm_prefix": 0, "max_eni": 0},
        "enis": [
            {
                "eni_id": "eni-0a1b2c3d4e5f60718",
                "device_index": 0,
                "network_card": 0,
                "subnet_id": "subnet-0abc",
                "primary_ip": "10.0.0.5",
                "ips": ["10.0.0.6", "10.0.0.7"],
                "prefixes": [],
                "assigned": 1,
            }
        ],
        "assigned_ips": 1,
        "pending_demand": 0,
        "release": [],
    }
    base.update(kw)
    return base
