"""Reports for an instance of the local stack (``warmpool local up``), as its agent would send them."""

from __future__ import annotations

import json
import time
from typing import Any

from emulated.local import LocalStack


def report_for(stack: LocalStack, instance_id: str, seq: int, identity: Any, **extra: Any) -> str:
    ec2 = stack.client("ec2")
    inst = stack.ec2.instances[instance_id]
    enis = ec2.describe_network_interfaces(Filters=[{"Name": "attachment.instance-id", "Values": [instance_id]}])[
        "NetworkInterfaces"
    ]
    body = {
        "schema": "warmpool.report/v1",
        "cluster": stack.options.cluster,
        "node": "victim",
        "instance_id": instance_id,
        "instance_type": inst.instance_type,
        "availability_zone": inst.az,
        "seq": seq,
        "sent_at": time.time(),
        "targets": {"warm_ip": 0, "warm_eni": 0},
        "enis": [
            {
                "eni_id": e["NetworkInterfaceId"],
                "device_index": e["Attachment"]["DeviceIndex"],
                "subnet_id": e["SubnetId"],
                "primary_ip": e["PrivateIpAddress"],
                "ips": [a["PrivateIpAddress"] for a in e["PrivateIpAddresses"] if not a["Primary"]],
            }
            for e in enis
        ],
        "identity": identity.model_dump(),
    }
    body.update(extra)
    return json.dumps(body)
