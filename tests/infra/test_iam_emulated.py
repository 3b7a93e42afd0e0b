"""The allocator's and the reconciler's real EC2 calls, authorized against the policies the
CDK app synthesizes (issue 21, section 2 "IAM"): emulated EC2 is given each function's role
(``tests/helpers/iam_policies.py``) and refuses what the role may not do with
``UnauthorizedOperation``, as EC2 does. The stack is synthesized once per session (the
``default`` fixture, shared with the other infra tests)."""

from __future__ import annotations

from typing import Any

import pytest

from emulated.ec2 import Ec2Emulator
from emulated.ec2.authz import requests
from tests.helpers.allocate_world import AllocatorWorld
from tests.helpers.cdk_synth import Synthesized
from tests.helpers.iam_policies import PolicyPrincipal, principals, stack_network
from warmpool import names

WARMPOOL = {names.TAG_CLUSTER_NAME: "demo", names.TAG_MANAGED: "true"}
VPC_CNI = {names.TAG_CLUSTER_NAME: "demo", names.TAG_INSTANCE_ID: "i-0123456789abcdef0"}
NO_MANAGE = {names.TAG_CLUSTER_NAME: "demo", names.TAG_NO_MANAGE: "true"}


class Stack:
    """An AllocatorWorld whose allocator and reconciler call EC2 as their synthesized roles."""

    def __init__(self, synthesized: Synthesized, **settings: Any) -> None:
        from emulated.clock import VirtualClock
        from tests.helpers.allocate_world import T0

        clock = VirtualClock(T0)
        emu = Ec2Emulator(clock)
        stack_network(emu)
        self.roles = principals(synthesized, emu)
        self.w = AllocatorWorld(emu=emu, clock=clock, **settings)
        self.w.ec2_client = emu.client(principal=self.roles["allocate"])
        self.w.alloc = self.w.allocator(ec2=self.w.ec2_client)
        self.reconciler = self.w.reconciler(ec2=emu.client(principal=self.roles["reconcile"]))

    @property
    def emu(self) -> Ec2Emulator:
        return self.w.emu

    def detached_eni(self, tags: dict[str, str]) -> str:
        """An ENI made by someone else (the administrator: no principal)."""
        resp = self.emu.client().create_network_interface(
            SubnetId=self.w.subnets[0],
            TagSpecifications=[
                {"ResourceType": "network-interface", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}
            ],
        )
        return str(resp["NetworkInterface"]["NetworkInterfaceId"])

    def attached_eni(self, node: str, tags: dict[str, str], device_index: int) -> str:
        eni = self.detached_eni(tags)
        self.emu.client().attach_network_interface(
            InstanceId=self.w.nodes[node], NetworkInterfaceId=eni, DeviceIndex=device_index
        )
        return eni

    def denied(self) -> list[str]:
        return [f"{d.principal}: {d.action} on {d.resource} ({d.decision})" for d in self.emu.denials]


def _decided(role: PolicyPrincipal, action: str) -> int:
    return sum(1 for a, _, d in role.decisions if a == f"ec2:{action}" and d == "Allow")


def test_the_allocator_scales_a_node_up_and_down_within_its_role(default: Synthesized) -> None:
    """First contact (tag the primary ENI), fill it, create, attach and mark new ENIs, then
    release: unassign, detach, delete. Every call is authorized; none is refused."""
    s = Stack(default)
    w = s.w
    w.add_node("n1")
    w.deliver([w.report("n1", warm_ip=2, pending=40)])
    assert w.addresses("n1") == 42 and s.denied() == []
    primary, second = w.enis("n1")
    assert primary.tags.get(names.TAG_PRIMARY_ENI_OF) == "demo"
    assert second.attachment.delete_on_termination
    w.pods["n1"] = 20
    offer = [
        {"eni_id": primary.id, "ips": list(primary.secondary[-5:])},
        {"eni_id": second.id, "ips": list(second.secondary)},
    ]
    report = w.report("n1", warm_ip=2, release=offer)
    w.clock.advance(w.settings.min_eni_age_s)
    w.deliver([report])
    assert len(w.enis("n1")) == 1 and w.addresses("n1") == 24
    assert s.denied() == []
    role = s.roles["allocate"]
    for action in (
        "CreateTags",
        "AssignPrivateIpAddresses",
        "CreateNetworkInterface",
        "AttachNetworkInterface",
        "ModifyNetworkInterfaceAttribute",
        "UnassignPrivateIpAddresses",
        "DetachNetworkInterface",
        "DeleteNetworkInterface",
    ):
        assert _decided(role, action) > 0, f"the flow made no authorized {action}"


def test_the_allocator_in_prefix_mode_within_its_role(default: Synthesized) -> None:
    s = Stack(default)
    s.w.add_node("n1")
    s.w.deliver([s.w.report("n1", mode="prefix", warm_ip=5, pending=20)])
    assert s.w.addresses("n1") >= 25 and s.denied() == []


def test_the_allocator_leaves_enis_outside_its_scope_alone(default: Synthesized) -> None:
    """A node with a VPC CNI ENI and a ``no_manage`` ENI attached: they are neither filled nor
    drained, and no call on them is even attempted."""
    s = Stack(default)
    w = s.w
    w.add_node("n1", "m5.4xlarge")
    theirs = [s.attached_eni("n1", VPC_CNI, 1), s.attached_eni("n1", NO_MANAGE, 2)]
    w.deliver([w.report("n1", warm_ip=2, pending=40)])
    assert s.denied() == []
    assert all(not s.emu.enis[e].secondary for e in theirs)
    assert w.addresses("n1") >= 42


def test_the_reconciler_collects_and_repairs_within_its_role(default: Synthesized) -> None:
    """Mark, then delete a leaked warmpool ENI; clear the mark of one attached again; set the
    DeleteOnTermination an allocator that died between attach and modify left unset.
    Issue 21, defect 7: the repair was refused (the role had no ModifyNetworkInterfaceAttribute)."""
    s = Stack(default, gc_age_s=300)
    s.w.add_node("n1")
    leaked = s.detached_eni(WARMPOOL)
    marked = s.detached_eni({**WARMPOOL, names.TAG_GC_MARK: "1"})
    s.emu.client().attach_network_interface(InstanceId=s.w.nodes["n1"], NetworkInterfaceId=marked, DeviceIndex=1)
    unmarked_dot = s.attached_eni("n1", WARMPOOL, 2)  # attached, DeleteOnTermination never set
    first = s.reconciler.run()
    assert s.denied() == []
    assert first.marked == [leaked] and first.unmarked == [marked]
    assert first.fixed_delete_on_termination == [unmarked_dot]
    attachment = s.emu.enis[unmarked_dot].attachment
    assert attachment is not None and attachment.delete_on_termination
    s.w.clock.advance(301)
    assert s.reconciler.run().deleted == [leaked] and s.denied() == []


@pytest.mark.parametrize(
    ("kind", "tags"),
    [("vpc-cni", VPC_CNI), ("no-manage", NO_MANAGE), ("no-manage-on-ours", {**WARMPOOL, names.TAG_NO_MANAGE: "true"})],
)
def test_the_reconciler_makes_no_call_its_role_refuses(default: Synthesized, kind: str, tags: dict[str, str]) -> None:
    """Issue 21, defect 6 seen through IAM: the GC marked and deleted detached ENIs and
    repaired attached ones on the cluster tag alone; in the stack each such call is refused
    (and, before it, paid for from the shared token buckets) on every run."""
    s = Stack(default, gc_age_s=300)
    s.w.add_node("n1")
    detached = s.detached_eni(tags)
    attached = s.attached_eni("n1", tags, 1)
    for _ in range(2):
        s.reconciler.run()
        s.w.clock.advance(301)
    assert s.denied() == [], kind
    assert detached in s.emu.enis and attached in s.emu.enis


def test_a_refused_call_fails_as_ec2_fails_it_and_changes_nothing(default: Synthesized) -> None:
    """The reconciler's role may not delete an ENI it did not create: ``UnauthorizedOperation``
    (HTTP 403) through both ways in, the ENI untouched, the refusal recorded."""
    from botocore.exceptions import ClientError

    s = Stack(default)
    eni = s.detached_eni(VPC_CNI)
    role = s.roles["reconcile"]
    for client in (s.emu.client(principal=role), s.emu.boto3_client(principal=role)):
        with pytest.raises(ClientError) as caught:
            client.delete_network_interface(NetworkInterfaceId=eni)
        err = caught.value.response
        assert err["Error"]["Code"] == "UnauthorizedOperation"
        assert err["ResponseMetadata"]["HTTPStatusCode"] == 403
    assert eni in s.emu.enis and len(s.emu.denials) == 2
    # the administrator (no principal) is not checked
    s.emu.client().delete_network_interface(NetworkInterfaceId=eni)


def test_a_multi_resource_call_needs_every_resource(default: Synthesized) -> None:
    """Attach authorizes the ENI and the instance: the allocator's role may attach its own
    ENI only to an instance of the cluster."""
    s = Stack(default)
    outsider = s.w.add_node("x", cluster_tag=None)
    eni = s.detached_eni({**WARMPOOL, names.TAG_INSTANCE_ID: outsider})
    reqs = requests(s.emu, "AttachNetworkInterface", {"NetworkInterfaceId": eni, "InstanceId": outsider})
    assert [r.resource.split(":")[-1].split("/")[0] for r in reqs] == ["network-interface", "instance"]
    from botocore.exceptions import ClientError

    with pytest.raises(ClientError, match="UnauthorizedOperation"):
        s.w.ec2_client.attach_network_interface(InstanceId=outsider, NetworkInterfaceId=eni, DeviceIndex=1)
    assert s.emu.enis[eni].attachment is None
