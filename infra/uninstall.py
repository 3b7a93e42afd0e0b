"""The last pass of an uninstall: what warmpool left in EC2 and SQS, found and removed.

    .venv/bin/python -m infra.uninstall --cluster prod               # print the plan (JSON)
    .venv/bin/python -m infra.uninstall --cluster prod --apply       # carry it out, then measure

With ``--instance-id`` it does the same for one node only (moving one node back to
``aws-node``: ``scripts/move-node.sh``). Run it after the agents are gone (``kubectl
delete`` of the DaemonSet, or ``helm uninstall``) and while the nodes that ran warmpool are cordoned and drained, before
``aws-node`` returns to them (docs/deploy.md, "Uninstall"), and before ``cdk destroy``
(the reports queue it checks goes with the stack). It removes, for one cluster:

* every ENI warmpool created (tags ``warmpool.io/managed`` and
  ``cluster.k8s.amazonaws.com/name=<cluster>``): detached if attached, then deleted;
* on each primary ENI tagged ``warmpool.io/primary-eni-of=<cluster>``: the secondary
  addresses and prefixes (warmpool's, the node being drained and no CNI running on it),
  then the tag;
* the per-node result queues ``warmpool-<cluster>-result-*``.

It refuses to act while the reports queue still holds reports (an allocator working
on one could attach an ENI after this pass), and ends by measuring what is left
(:func:`leftovers`); the exit status is 0 only when nothing is.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from warmpool import names

MAX_WAIT_S = 120.0


class UninstallError(RuntimeError):
    pass


@dataclass
class Plan:
    detach: list[tuple[str, str]] = field(default_factory=list)
    """(ENI id, attachment id) of warmpool's attached ENIs."""
    delete_enis: list[str] = field(default_factory=list)
    unassign: dict[str, tuple[list[str], list[str]]] = field(default_factory=dict)
    """Primary ENI id -> (secondary addresses, prefixes)."""
    untag: list[str] = field(default_factory=list)
    delete_queues: list[str] = field(default_factory=list)

    def empty(self) -> bool:
        return not (self.detach or self.delete_enis or self.unassign or self.untag or self.delete_queues)


def _tags(eni: dict[str, Any]) -> dict[str, str]:
    return {t["Key"]: t["Value"] for t in eni.get("TagSet", [])}


def is_warmpool_eni(eni: dict[str, Any], cluster: str) -> bool:
    tags = _tags(eni)
    return tags.get(names.TAG_CLUSTER_NAME) == cluster and names.TAG_MANAGED in tags


def is_tagged_primary(eni: dict[str, Any], cluster: str) -> bool:
    return _tags(eni).get(names.TAG_PRIMARY_ENI_OF) == cluster


def plan(cluster: str, enis: list[dict[str, Any]], queue_urls: list[str], *, instance_id: str | None = None) -> Plan:
    """What to remove, from ``DescribeNetworkInterfaces`` and ``ListQueues`` answers (pure);
    with ``instance_id``, only what is that instance's (one node moved back to aws-node)."""
    out = Plan()
    for eni in enis:
        if instance_id is not None and (eni.get("Attachment") or {}).get("InstanceId") != instance_id:
            continue
        eni_id = eni["NetworkInterfaceId"]
        if is_warmpool_eni(eni, cluster):
            att = eni.get("Attachment") or {}
            if att.get("AttachmentId") and att.get("Status") in ("attaching", "attached"):
                out.detach.append((eni_id, att["AttachmentId"]))
            out.delete_enis.append(eni_id)
        elif is_tagged_primary(eni, cluster):
            ips = [a["PrivateIpAddress"] for a in eni.get("PrivateIpAddresses", []) if not a.get("Primary")]
            prefixes = [p["Ipv4Prefix"] for p in eni.get("Ipv4Prefixes", [])]
            if ips or prefixes:
                out.unassign[eni_id] = (ips, prefixes)
            out.untag.append(eni_id)
    prefix = names.result_queue_prefix(cluster)
    own = names.result_queue(cluster, instance_id) if instance_id is not None else None
    out.delete_queues = sorted(
        u for u in queue_urls if (n := u.rsplit("/", 1)[-1]).startswith(prefix) and (own is None or n == own)
    )
    return out


def _all_enis(ec2: Any, vpc_id: str | None) -> list[dict[str, Any]]:
    filters = [{"Name": "vpc-id", "Values": [vpc_id]}] if vpc_id else []
    out: list[dict[str, Any]] = []
    token: str | None = None
    while True:
        kw: dict[str, Any] = {"Filters": filters} if filters else {}
        if token:
            kw["NextToken"] = token
        page = ec2.describe_network_interfaces(**kw)
        out += page["NetworkInterfaces"]
        token = page.get("NextToken")
        if not token:
            return out


def _result_queues(sqs: Any, cluster: str) -> list[str]:
    urls: list[str] = []
    token: str | None = None
    while True:
        kw: dict[str, Any] = {"QueueNamePrefix": names.result_queue_prefix(cluster), "MaxResults": 1000}
        if token:
            kw["NextToken"] = token
        page = sqs.list_queues(**kw)
        urls += page.get("QueueUrls", [])
        token = page.get("NextToken")
        if not token:
            return urls


def reports_in_flight(sqs: Any, cluster: str) -> int | None:
    """Reports waiting or being worked on; None when the reports queue is gone."""
    try:
        url = sqs.get_queue_url(QueueName=names.reports_queue(cluster))["QueueUrl"]
    except Exception as err:  # botocore's QueueDoesNotExist: the stack is already destroyed
        if "NonExistentQueue" in str(err) or "QueueDoesNotExist" in str(err):
            return None
        raise
    attrs = sqs.get_queue_attributes(
        QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
    )["Attributes"]
    return int(attrs["ApproximateNumberOfMessages"]) + int(attrs["ApproximateNumberOfMessagesNotVisible"])


def leftovers(
    ec2: Any, sqs: Any, cluster: str, *, vpc_id: str | None = None, instance_id: str | None = None
) -> dict[str, int]:
    """What of warmpool is still in EC2 and SQS for ``cluster`` (all zero after the last pass)."""
    enis = _all_enis(ec2, vpc_id)
    p = plan(cluster, enis, _result_queues(sqs, cluster), instance_id=instance_id)
    return {
        "warmpool_enis": len(p.delete_enis),
        "tagged_primary_enis": len(p.untag),
        "secondary_addresses_on_tagged_primaries": sum(len(ips) + len(pf) for ips, pf in p.unassign.values()),
        "result_queues": len(p.delete_queues),
    }


def apply(
    ec2: Any,
    sqs: Any,
    p: Plan,
    *,
    sleep: Callable[[float], None] = time.sleep,
    monotonic: Callable[[], float] = time.monotonic,
    max_wait_s: float = MAX_WAIT_S,
) -> None:
    """Carry out ``p``: detach, wait for each ENI to be available, delete; unassign, untag; delete queues."""
    for _eni_id, attachment_id in p.detach:
        ec2.detach_network_interface(AttachmentId=attachment_id, Force=False)
    waiting = {eni_id for eni_id, _ in p.detach}
    deadline = monotonic() + max_wait_s
    while waiting:
        found = ec2.describe_network_interfaces(NetworkInterfaceIds=sorted(waiting))["NetworkInterfaces"]
        waiting -= {e["NetworkInterfaceId"] for e in found if e["Status"] == "available"}
        if waiting and monotonic() > deadline:
            raise UninstallError(f"still attached after {max_wait_s:.0f} s: {', '.join(sorted(waiting))}")
        if waiting:
            sleep(1.0)
    for eni_id in p.delete_enis:
        ec2.delete_network_interface(NetworkInterfaceId=eni_id)
    for eni_id, (ips, prefixes) in p.unassign.items():
        kw: dict[str, Any] = {"NetworkInterfaceId": eni_id}
        if ips:
            kw["PrivateIpAddresses"] = ips
        if prefixes:
            kw["Ipv4Prefixes"] = prefixes
        ec2.unassign_private_ip_addresses(**kw)
    for eni_id in p.untag:
        ec2.delete_tags(Resources=[eni_id], Tags=[{"Key": names.TAG_PRIMARY_ENI_OF}])
    for url in p.delete_queues:
        sqs.delete_queue(QueueUrl=url)


def last_pass(
    ec2: Any, sqs: Any, cluster: str, *, vpc_id: str | None = None, instance_id: str | None = None, execute: bool
) -> dict[str, Any]:
    """Plan (and with ``execute`` carry out) the last pass; returns the plan and what is left."""
    in_flight = reports_in_flight(sqs, cluster)
    if execute and in_flight:
        raise UninstallError(
            f"{in_flight} report(s) still in {names.reports_queue(cluster)}: stop the agents first "
            "(kubectl delete / helm uninstall) and retry once the queue is empty"
        )
    p = plan(cluster, _all_enis(ec2, vpc_id), _result_queues(sqs, cluster), instance_id=instance_id)
    out: dict[str, Any] = {"cluster": cluster, "instance_id": instance_id, "plan": asdict(p), "applied": False}
    if execute:
        apply(ec2, sqs, p)
        out["applied"] = True
    out["left"] = leftovers(ec2, sqs, cluster, vpc_id=vpc_id, instance_id=instance_id)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cluster", required=True, help="the stack's Cluster output")
    parser.add_argument("--vpc-id", help="look only at ENIs of this VPC (default: every ENI of the region)")
    parser.add_argument(
        "--instance-id", help="only this instance's ENIs, addresses and result queue (one node back to aws-node)"
    )
    parser.add_argument("--region", help="AWS region (default: the SDK's)")
    parser.add_argument("--endpoint-url", help="an AWS endpoint (the local stack's, say)")
    parser.add_argument("--apply", action="store_true", help="carry the plan out (default: print it only)")
    args = parser.parse_args(argv)
    import boto3

    kw = {k: v for k, v in (("region_name", args.region), ("endpoint_url", args.endpoint_url)) if v}
    try:
        out = last_pass(
            boto3.client("ec2", **kw),
            boto3.client("sqs", **kw),
            args.cluster,
            vpc_id=args.vpc_id,
            instance_id=args.instance_id,
            execute=args.apply,
        )
    except UninstallError as err:
        print(f"uninstall: {err}", file=sys.stderr)
        return 2
    print(json.dumps(out, indent=2))
    return 0 if not args.apply or not any(out["left"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
