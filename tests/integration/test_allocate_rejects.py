"""Reports that must not be acted on: invalid, foreign, mis-signed. Plus buckets shared by two clusters."""

from __future__ import annotations

import json

from moto import mock_aws

from emulated.clock import VirtualClock
from emulated.ec2 import Ec2Config, Ec2Emulator
from emulated.iid import document_for
from emulated.sqs import FastSqs
from functions import allocator
from functions.allocator import Record
from tests.helpers.allocate_world import AllocatorWorld, moto_dynamo
from warmpool import names


def _dlq(w: AllocatorWorld) -> list[tuple[str, str]]:
    return [(m["MessageAttributes"]["reason"]["StringValue"], m["Body"]) for m in w.queued(w.dlq_url)]


def test_invalid_records_go_to_the_dlq_at_once_and_the_rest_is_served() -> None:
    w = AllocatorWorld()
    w.add_node("n1")
    good = w.report("n1", warm_ip=2)
    bad_schema = json.dumps({**json.loads(good.to_json()), "schema": "warmpool.report/v9"})
    out = w.deliver(["not json", bad_schema, good])
    assert out.invalid == 2 and out.served == 1 and out.failed_message_ids == []
    assert sorted(r for r, _ in _dlq(w)) == ["not-json", "unknown-schema"]
    assert w.addresses("n1") == 2


def test_report_for_an_instance_outside_the_cluster_is_rejected_without_any_call() -> None:
    w = AllocatorWorld()
    w.add_node("mine")
    w.add_node("stranger", cluster_tag=None)
    w.add_node("other", cluster_tag=None)
    w.emu.instances[w.nodes["other"]].tags[names.cluster_tag_key("someone-else")] = "owned"
    out = w.deliver([w.report("stranger", warm_ip=5), w.report("other", warm_ip=5), w.report("mine", warm_ip=1)])
    assert out.rejected == 2 and out.served == 1
    assert sorted(r for r, _ in _dlq(w)) == ["foreign-instance", "foreign-instance"]
    assert w.addresses("stranger") == 0 and w.addresses("other") == 0
    assert w.ec2_stats()["AssignPrivateIpAddresses"]["calls"] == 1


def test_report_naming_an_unknown_instance_or_another_cluster_is_rejected() -> None:
    w = AllocatorWorld()
    w.add_node("n1")
    r = json.loads(w.report("n1").to_json())
    ghost_doc = document_for(
        {
            "instanceId": "i-00000000deadbeef0",
            "accountId": w.emu.owner,
            "region": "us-east-1",
            "availabilityZone": "us-east-1a",
            "instanceType": r["instance_type"],
        }
    )
    ghost = json.dumps(
        {
            **r,
            "node": "ghost",
            "instance_id": "i-00000000deadbeef0",
            "identity": w.imds.signer.identity(ghost_doc).model_dump(),
        }
    )
    other = json.dumps({**r, "cluster": "prod"})
    out = w.deliver([ghost, other])
    # An instance DescribeInstances does not show may be new (Describe is eventually
    # consistent): its report waits, re-sent, for UNLISTED_GRACE_S after it was sent.
    assert out.rejected == 1 and out.deferred == 1
    assert sorted(x for x, _ in _dlq(w)) == ["foreign-cluster"]
    w.clock.advance(allocator.UNLISTED_GRACE_S + 1)
    assert w.deliver([ghost]).rejected == 1
    assert [x for x, _ in _dlq(w)] == ["instance-not-found"]


def test_report_claiming_an_eni_of_another_instance_is_rejected() -> None:
    w = AllocatorWorld()
    w.add_node("n1")
    w.add_node("n2")
    r2 = w.report("n2")
    stolen = r2.enis[0].model_dump()
    stolen["device_index"] = 1
    r1 = json.loads(w.report("n1").to_json())
    r1["enis"].append(stolen)
    r1["targets"]["warm_ip"] = 3
    out = w.deliver([json.dumps(r1)])
    assert out.rejected == 1
    assert [x for x, _ in _dlq(w)] == ["foreign-eni"]


def test_sender_id_must_match_the_instance_in_sender_id_mode() -> None:
    w = AllocatorWorld(identity_mode="sender-id")
    w.add_node("n1")
    w.add_node("n2")
    recs = w.records([w.report("n1", warm_ip=1)], sender=f"AROAEXAMPLE:{w.nodes['n2']}")
    recs += [
        Record(message_id="m-ok", body=w.report("n2", warm_ip=1).to_json(), sender_id=f"AROAEXAMPLE:{w.nodes['n2']}")
    ]
    out = w.alloc.handle_batch(recs)
    assert out.rejected == 1 and out.served == 1
    assert [x for x, _ in _dlq(w)] == ["sender-mismatch"]
    assert w.addresses("n1") == 0 and w.addresses("n2") == 1


def test_token_buckets_are_shared_by_two_clusters_on_dynamodb() -> None:
    with mock_aws():
        db = moto_dynamo()
        clock = VirtualClock(1_700_000_000.0)
        emu = Ec2Emulator(clock, Ec2Config())
        vpc = emu.add_vpc("10.0.0.0/16")
        emu.add_subnet(az="us-east-1a", cidr="10.0.0.0/17", vpc_id=vpc)
        sqs = FastSqs(clock)
        blue = AllocatorWorld("blue", emu=emu, sqs=sqs, clock=clock, dynamo=db)
        green = AllocatorWorld("green", emu=emu, sqs=sqs, clock=clock, dynamo=db)
        for i in range(50):
            blue.add_node(f"b{i}")
            green.add_node(f"g{i}")
        # Assign budget: 100 x 0.8 = 80 tokens for the account and region.
        b = blue.deliver([blue.report(f"b{i}", warm_ip=3) for i in range(50)])
        g = green.deliver([green.report(f"g{i}", warm_ip=3) for i in range(50)])
        assert b.served == 50 and g.served == 30 and g.deferred == 20
        blue.drain()
        green.drain()
        assert emu.stats()["ec2"]["AssignPrivateIpAddresses"] == {"calls": 100, "throttled": 0, "errors": 0}
        assert all(green.addresses(f"g{i}") == 3 for i in range(50))
