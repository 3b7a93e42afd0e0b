"""`warmpool local up`: the stack in-process (LocalStack) and as a subprocess,
used through boto3 and the AWS CLI like any AWS endpoint."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from emulated.local import LocalStack
from tests.helpers.local_stack import report_for
from warmpool import names

ROOT = Path(__file__).resolve().parents[2]


class Allocate:
    """A stand-in allocate handler: records bodies, fails the ones named 'fail'."""

    def __init__(self) -> None:
        self.bodies: list[str] = []
        self.env_cluster: str | None = None
        self.got = threading.Event()

    def __call__(self, event: dict[str, Any], ctx: Any) -> dict[str, Any]:
        self.env_cluster = os.environ.get(names.ENV_CLUSTER)
        self.bodies += [r["body"] for r in event["Records"]]
        self.got.set()
        return {
            "batchItemFailures": [{"itemIdentifier": r["messageId"]} for r in event["Records"] if r["body"] == "fail"]
        }


@pytest.fixture(scope="module")
def stack() -> Iterator[tuple[LocalStack, Allocate]]:
    h = Allocate()
    s = LocalStack(
        cluster="t1",
        allocate_handler=h,
        reconcile_handler=lambda e, c: None,
        batching_window_s=0,
        batch_size=10,
        reconcile_every_s=3600,
    )
    s.start()
    yield s, h
    s.stop()


def get_json(url: str, data: Any = None, method: str | None = None) -> Any:
    req = urllib.request.Request(url, data=None if data is None else json.dumps(data).encode(), method=method)
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read())


def test_outputs_name_the_cdk_resources(stack: tuple[LocalStack, Allocate]) -> None:
    s, _ = stack
    o = s.outputs
    for k in (
        "endpoint",
        "region",
        "cluster",
        "reports_queue_url",
        "result_queue_prefix",
        "ledger_table",
        "buckets_table",
        "imds_base",
    ):
        assert o[k], k
    assert o["endpoint"].startswith("http://127.0.0.1:")
    assert o["reports_queue_url"].endswith("/" + names.reports_queue("t1"))
    assert o["result_queue_prefix"] == names.result_queue_prefix("t1")
    assert o["ledger_table"] == names.ledger_table("t1")
    assert o["buckets_table"] == names.BUCKETS_TABLE
    assert o["functions"] == {"allocate": True, "reconcile": True}


def test_reports_queue_matches_the_stack(stack: tuple[LocalStack, Allocate]) -> None:
    s, _ = stack
    sqs = s.client("sqs")
    a = sqs.get_queue_attributes(QueueUrl=s.outputs["reports_queue_url"], AttributeNames=["All"])["Attributes"]
    assert a["VisibilityTimeout"] == "180"
    policy = json.loads(a["RedrivePolicy"])
    assert policy["maxReceiveCount"] == 5
    assert policy["deadLetterTargetArn"].endswith(":" + names.reports_dlq("t1"))


def test_tables_match_the_stack(stack: tuple[LocalStack, Allocate]) -> None:
    s, _ = stack
    ddb = s.client("dynamodb")
    ledger = ddb.describe_table(TableName=s.outputs["ledger_table"])["Table"]
    assert {k["AttributeName"]: k["KeyType"] for k in ledger["KeySchema"]} == {"pk": "HASH", "sk": "RANGE"}
    ttl = ddb.describe_time_to_live(TableName=s.outputs["ledger_table"])["TimeToLiveDescription"]
    assert ttl["AttributeName"] == names.LEDGER_TTL
    buckets = ddb.describe_table(TableName=s.outputs["buckets_table"])["Table"]
    assert [k["AttributeName"] for k in buckets["KeySchema"]] == ["pk"]


def test_dynamodb_conditional_put(stack: tuple[LocalStack, Allocate]) -> None:
    s, _ = stack
    ddb = s.client("dynamodb")
    item = {"pk": {"S": "AssignPrivateIpAddresses"}, "tokens": {"N": "80"}}
    ddb.put_item(TableName=s.outputs["buckets_table"], Item=item, ConditionExpression="attribute_not_exists(pk)")
    with pytest.raises(ClientError) as e:
        ddb.put_item(TableName=s.outputs["buckets_table"], Item=item, ConditionExpression="attribute_not_exists(pk)")
    assert e.value.response["Error"]["Code"] == "ConditionalCheckFailedException"


def test_allocate_runs_behind_the_event_source_mapping(stack: tuple[LocalStack, Allocate]) -> None:
    s, h = stack
    sqs = s.client("sqs")
    url = s.outputs["reports_queue_url"]
    sqs.send_message_batch(QueueUrl=url, Entries=[{"Id": "a", "MessageBody": "ok"}, {"Id": "b", "MessageBody": "fail"}])
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not ({"ok", "fail"} <= set(h.bodies) and s.allocate.stats.deleted >= 1):
        h.got.wait(0.2)
        h.got.clear()
    assert {"ok", "fail"} <= set(h.bodies)
    assert h.env_cluster == "t1"
    assert s.allocate.stats.deleted >= 1
    assert s.allocate.stats.failed_items >= 1
    # the failed one stays in flight until the 180 s visibility timeout
    a = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["ApproximateNumberOfMessagesNotVisible"])
    assert a["Attributes"]["ApproximateNumberOfMessagesNotVisible"] == "1"
    stats = get_json(s.outputs["stats_url"])
    assert stats["lambda"]["allocate"]["invocations"] >= 1
    assert stats["sqs"]["SendMessageBatch"]["calls"] >= 1


def test_ec2_and_imds(stack: tuple[LocalStack, Allocate]) -> None:
    s, _ = stack
    ec2 = s.client("ec2")
    subnets = {x["SubnetId"] for x in ec2.describe_subnets()["Subnets"]}
    assert set(s.outputs["subnet_ids"]) <= subnets
    iid = ec2.run_instances(
        ImageId="ami-12345678", InstanceType="m5.large", MinCount=1, MaxCount=1, SubnetId=s.outputs["subnet_ids"][0]
    )["Instances"][0]["InstanceId"]
    base = f"{s.outputs['imds_base']}/{iid}"
    tok = urllib.request.urlopen(
        urllib.request.Request(
            base + "/latest/api/token", method="PUT", headers={"X-aws-ec2-metadata-token-ttl-seconds": "60"}
        ),
        timeout=5,
    ).read()
    got = urllib.request.urlopen(
        urllib.request.Request(
            base + "/latest/meta-data/instance-id", headers={"X-aws-ec2-metadata-token": tok.decode()}
        ),
        timeout=5,
    ).read()
    assert got.decode() == iid
    stats = get_json(s.outputs["stats_url"])
    assert stats["ec2"]["RunInstances"] == {"calls": 1, "throttled": 0, "errors": 0}


def test_fault_injection_endpoint(stack: tuple[LocalStack, Allocate]) -> None:
    s, _ = stack
    ec2 = s.client("ec2")
    r = get_json(
        s.outputs["faults_url"], {"action": "DescribeVpcs", "code": "UnauthorizedOperation", "count": 1}, method="POST"
    )
    assert r == {"ok": True, "applied": ["fail_next"]}
    with pytest.raises(ClientError) as e:
        ec2.describe_vpcs()
    assert e.value.response["Error"]["Code"] == "UnauthorizedOperation"
    ec2.describe_vpcs()
    assert get_json(s.outputs["stats_url"])["ec2"]["DescribeVpcs"]["errors"] == 1
    r = get_json(
        s.outputs["faults_url"],
        [{"background_load": {"AssignPrivateIpAddresses": 2.0}}, {"clear": True}],
        method="POST",
    )
    assert r["applied"] == ["background_load", "cleared"]
    with pytest.raises(urllib.error.HTTPError) as bad:
        get_json(s.outputs["faults_url"], {"nonsense": 1}, method="POST")
    assert bad.value.code == 400


@pytest.mark.skipif(shutil.which("aws") is None, reason="no aws CLI")
def test_the_aws_cli_works_against_the_endpoint(stack: tuple[LocalStack, Allocate]) -> None:
    s, _ = stack
    env = {**os.environ, "AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "x", "AWS_DEFAULT_REGION": "us-east-1"}
    env.pop("AWS_ENDPOINT_URL", None)
    out = subprocess.run(
        ["aws", "--endpoint-url", s.outputs["endpoint"], "sqs", "list-queues", "--queue-name-prefix", "warmpool-t1-"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert names.reports_queue("t1") in out.stdout


def test_local_up_subprocess_prints_outputs_and_stops_on_sigterm(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    p = subprocess.Popen(
        [sys.executable, "-m", "emulated.local", "up", "--port", "0", "--cluster", "sub", "--no-functions"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert p.stdout is not None
        line = p.stdout.readline()
        out = json.loads(line)
        assert out["cluster"] == "sub"
        sqs = boto3.client(
            "sqs",
            endpoint_url=out["endpoint"],
            region_name=out["region"],
            aws_access_key_id="x",
            aws_secret_access_key="x",
        )
        sqs.send_message(QueueUrl=out["reports_queue_url"], MessageBody="hello")
        [m] = sqs.receive_message(QueueUrl=out["reports_queue_url"])["Messages"]
        assert m["Body"] == "hello"
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=15) == 0
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def _secondaries(stack: LocalStack, instance_id: str) -> dict[str, set[str]]:
    return {
        e.id: set(e.secondary)
        for e in stack.ec2.enis.values()
        if e.attachment and e.attachment.instance_id == instance_id
    }


def test_a_forged_report_through_local_up_is_refused_to_the_dlq_and_changes_nothing() -> None:
    """Issue 12 end to end (real allocate handler behind the event-source
    mapping, identities from the emulated IMDS over HTTP): a node reporting for
    another instance, offering its addresses back, changes nothing."""
    from functions import allocate
    from node_agent.identity import fetch_identity
    from node_agent.imds import ImdsClient

    allocate._allocator = None
    try:
        with LocalStack(cluster="fgt", batch_size=10, batching_window_s=0, reconcile_every_s=3600) as s:
            out = s.outputs
            sid = out["subnet_ids"][0]
            tags = {names.cluster_tag_key("fgt"): "owned"}
            victim = s.ec2.run_instance("m5.large", subnet_id=sid, tags=tags)
            forger = s.ec2.run_instance("m5.large", subnet_id=sid, tags=tags)
            sqs = s.client("sqs")
            mine = fetch_identity(ImdsClient(f"{out['imds_base']}/{victim}"))
            theirs = fetch_identity(ImdsClient(f"{out['imds_base']}/{forger}"))
            # The victim's genuine report: served, and its result queue created by the allocator.
            sqs.send_message(
                QueueUrl=out["reports_queue_url"],
                MessageBody=report_for(s, victim, 1, mine, targets={"warm_ip": 5}, pending_demand=5),
            )
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and sum(len(v) for v in _secondaries(s, victim).values()) < 5:
                time.sleep(0.1)
            # Let the genuine report's allocation finish (a second ENI may still be attaching)
            # before taking the snapshot the forged report must not change.
            held, still = _secondaries(s, victim), time.monotonic()
            while time.monotonic() < deadline + 10 and time.monotonic() - still < 2.0:
                time.sleep(0.2)
                now_held = _secondaries(s, victim)
                if now_held != held:
                    held, still = now_held, time.monotonic()
            offered = [{"eni_id": k, "ips": sorted(v), "quarantined_at": time.time()} for k, v in held.items() if v]
            assert offered, held
            # The forger: the victim's instance id, the victim's addresses offered, its own identity.
            forged = report_for(s, victim, 2, theirs, release=offered, assigned_ips=0)
            sqs.send_message(QueueUrl=out["reports_queue_url"], MessageBody=forged)
            reasons: list[str] = []
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and not reasons:
                msgs = sqs.receive_message(
                    QueueUrl=out["dlq_url"], MessageAttributeNames=["All"], WaitTimeSeconds=1
                ).get("Messages", [])
                reasons += [m["MessageAttributes"]["reason"]["StringValue"] for m in msgs]
            assert reasons == ["identity-instance-mismatch"]
            time.sleep(0.5)
            assert _secondaries(s, victim) == held
            assert sqs.get_queue_url(QueueName=names.result_queue("fgt", victim))["QueueUrl"]  # made by the allocator
    finally:
        allocate._allocator = None


def test_a_second_stack_in_one_process_cold_starts_its_functions() -> None:
    """The allocate handler keeps its allocator across invocations (a warm container).
    A later stack in the same process (tests, the demo after a test) must not reuse
    one bound to the first stack's endpoint, which is gone: its reports would never
    be served (seen as the runtime tier's empty warm pool after other tests)."""
    from functions import allocate

    with LocalStack(cluster="cs1", batch_size=10, batching_window_s=0, reconcile_every_s=3600):
        old = allocate.allocator(None)  # warm, bound to this stack
        assert old is allocate.allocator(None)
    with LocalStack(cluster="cs2", batch_size=10, batching_window_s=0, reconcile_every_s=3600) as s2:
        fresh = allocate.allocator(None)
        assert fresh is not old and fresh.cluster == "cs2"
        # and its EC2 client speaks to this stack, not the first one's closed port
        assert fresh.ec2.api.meta.endpoint_url == s2.outputs["endpoint"]  # type: ignore[attr-defined]
        assert s2.outputs["cluster"] == "cs2"
    allocate.cold_start()


def _enis_of(stack: LocalStack, instance_id: str) -> dict[str, str]:
    """The instance's ENIs other than the primary, by id: their subnets."""
    return {
        e.id: e.subnet_id
        for e in stack.ec2.enis.values()
        if e.attachment and e.attachment.instance_id == instance_id and e.attachment.device_index > 0
    }


def _wait_for(cond: Any, seconds: float = 20.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.1)
    return bool(cond())


def test_a_subnet_made_later_and_tagged_for_pods_is_used_without_a_restart() -> None:
    """Issue 24: the local stack discovers pod subnets by the VPC CNI's tags, as the CDK stack
    with subnet discovery. A subnet created in its VPC after `local up`, tagged
    kubernetes.io/role/cni=1, takes the next new ENI once the subnet cache expires; the node's
    own subnet tagged 0 takes none. Same stack, same warm allocator: no restart."""
    from functions import allocate
    from node_agent.identity import fetch_identity
    from node_agent.imds import ImdsClient

    allocate._allocator = None
    try:
        with LocalStack(
            cluster="disc",
            batch_size=10,
            batching_window_s=0,
            reconcile_every_s=3600,
            extra_env=(("WARMPOOL_SUBNET_CACHE_TTL_S", "1"),),
        ) as s:
            out = s.outputs
            own = out["subnet_ids"][0]
            iid = s.ec2.run_instance("m5.large", subnet_id=own, tags={names.cluster_tag_key("disc"): "owned"})
            ident = fetch_identity(ImdsClient(f"{out['imds_base']}/{iid}"))
            sqs, ec2 = s.client("sqs"), s.client("ec2")

            def ask(seq: int, warm_ip: int) -> None:
                body = report_for(s, iid, seq, ident, targets={"warm_ip": warm_ip, "warm_eni": 0})
                sqs.send_message(QueueUrl=out["reports_queue_url"], MessageBody=body)

            # Before: nothing tagged for pods, so the subnets tagged for the cluster (the node's own).
            ask(1, 12)  # an m5.large's primary ENI holds 9: a new ENI for the rest
            assert _wait_for(lambda: len(_enis_of(s, iid)) == 1), _enis_of(s, iid)
            assert set(_enis_of(s, iid).values()) == {own}
            # A subnet made later in the stack's VPC and zone, tagged for pods, through the API;
            # the node's own subnet tagged never to be one.
            zone = s.ec2.subnets[own].az
            made = ec2.create_subnet(
                VpcId=out["vpc_id"],
                CidrBlock="10.0.192.0/20",
                AvailabilityZone=zone,
                TagSpecifications=[{"ResourceType": "subnet", "Tags": [{"Key": names.TAG_SUBNET_ROLE, "Value": "1"}]}],
            )["Subnet"]["SubnetId"]
            ec2.create_tags(Resources=[own], Tags=[{"Key": names.TAG_SUBNET_ROLE, "Value": "0"}])
            time.sleep(1.2)  # the subnet cache (1 s here) expires: the next read sees the tags
            ask(2, 22)  # the first new ENI's free slots, then another ENI
            assert _wait_for(lambda: len(_enis_of(s, iid)) == 2), _enis_of(s, iid)
            new = [sid for sid in _enis_of(s, iid).values() if sid != own]
            assert new == [made]
            assert allocate._allocator is not None  # the same warm container served both
    finally:
        allocate._allocator = None
