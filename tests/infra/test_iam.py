"""IAM: the actions and, above all, the conditions that keep each principal to its cluster."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.helpers.cdk_synth import Synthesized
from warmpool import names
from warmpool.calls import CALLS

P = "arn:${AWS::Partition}:ec2:${AWS::Region}:${AWS::AccountId}"
VPC = f"{P}:vpc/vpc-0123456789abcdef0"
ENI = f"{P}:network-interface/*"
SUBNETS = [f"{P}:subnet/subnet-0123456789abcdef0", f"{P}:subnet/subnet-0123456789abcdef1"]


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def _statements_of_role(s: Synthesized, role_prefix: str) -> list[dict[str, Any]]:
    return s.role_statements(role_prefix)


DENY_SIDS = {
    "NeverTouchNoManageEnis",
    "DenyEniAttributesWarmpoolNeverSets",
    "GcNeverTouchesNoManageEnis",
    "RepairSetsNoOtherEniAttribute",
}


def test_no_service_wide_wildcards_anywhere(synthesized: dict[str, Synthesized]) -> None:
    for s in synthesized.values():
        for _, st in s.statements():
            # the only Deny statements are the guards of tests/infra/test_iam_least_privilege.py
            assert st["Effect"] == "Allow" or st.get("Sid") in DENY_SIDS, st
            for action in _list(st["Action"]):
                assert not action.endswith(":*") and action != "*", action


def test_create_eni_requires_the_cluster_tags_the_vpc_and_an_allowed_subnet(default: Synthesized) -> None:
    st = default.statement("CreateClusterTaggedEni")
    assert st["Action"] == "ec2:CreateNetworkInterface" and st["Resource"] == ENI
    cond = st["Condition"]
    assert cond["StringEquals"] == {
        f"aws:RequestTag/{names.TAG_CLUSTER_NAME}": "demo",
        f"aws:RequestTag/{names.TAG_MANAGED}": "true",
        "ec2:Vpc": VPC,
    }
    assert cond["ArnEquals"] == {"ec2:Subnet": SUBNETS}
    assert set(cond["ForAllValues:StringEquals"]["aws:TagKeys"]) == {
        names.TAG_CLUSTER_NAME,
        names.TAG_INSTANCE_ID,
        names.TAG_CREATED_AT,
        names.TAG_MANAGED,
    }
    subnets = default.statement("CreateEniInAllowedSubnets")
    assert subnets["Action"] == "ec2:CreateNetworkInterface" and subnets["Resource"] == SUBNETS
    groups = default.statement("CreateEniWithClusterVpcGroups")
    assert groups["Resource"] == f"{P}:security-group/*"
    assert groups["Condition"] == {"StringEquals": {"ec2:Vpc": VPC}}


def test_subnets_by_tag_and_fixed_security_groups(synthesized: dict[str, Synthesized]) -> None:
    s = synthesized["irsa"]
    st = s.statement("CreateEniInTaggedSubnets")
    assert st["Resource"] == f"{P}:subnet/*"
    assert st["Condition"]["StringEquals"]["aws:ResourceTag/warmpool.io/pods"] == "true"
    assert "ec2:Vpc" in st["Condition"]["StringEquals"]
    assert "ArnEquals" not in s.statement("CreateClusterTaggedEni")["Condition"]
    # the fixed group, and (this variant has custom networking) the custom zone's: the whole
    # list is asserted in test_custom_networks_subnets_and_groups_are_allowed_by_id
    assert f"{P}:security-group/sg-0123456789abcdef0" in _list(s.statement("CreateEniWithClusterVpcGroups")["Resource"])


def test_custom_networks_subnets_and_groups_are_allowed_by_id(synthesized: dict[str, Synthesized]) -> None:
    """Issue 24: the custom-networking map's subnets get a statement of their own, by ARN, and
    its groups join the fixed ones; the functions are told the map as they parse it; the
    default stack has neither."""
    s = synthesized["irsa"]
    st = s.statement("CreateEniInCustomNetworkSubnets")
    assert st["Action"] == "ec2:CreateNetworkInterface"
    assert st["Resource"] == f"{P}:subnet/subnet-0123456789abcdefc"
    assert sorted(_list(s.statement("CreateEniWithClusterVpcGroups")["Resource"])) == [
        f"{P}:security-group/sg-0123456789abcdef0",
        f"{P}:security-group/sg-0123456789abcdefc",
    ]
    from functions.settings import Settings

    env = s.allocate_env()[names.ENV_CUSTOM_NETWORK]
    zones = Settings(WARMPOOL_CLUSTER="second", WARMPOOL_CUSTOM_NETWORK=env).custom.zones
    assert zones["eu-west-1a"].subnets == ("subnet-0123456789abcdefc",)
    assert zones["eu-west-1a"].security_groups == ("sg-0123456789abcdefc",)
    default = synthesized["default"]
    assert not [st for _, st in default.statements() if st.get("Sid") == "CreateEniInCustomNetworkSubnets"]
    assert json.loads(default.allocate_env()[names.ENV_CUSTOM_NETWORK]) == {}


def test_discovered_subnets_are_any_of_the_vpc_but_those_tagged_never(synthesized: dict[str, Synthesized]) -> None:
    """Issue 24: with subnet_discovery the allocator may create ENIs in any subnet of the VPC
    its rule picks (the node's own one untagged included), never in one tagged
    kubernetes.io/role/cni=0; the functions are told to discover."""
    s = synthesized["discovery"]
    st = s.statement("CreateEniInDiscoveredSubnets")
    assert st["Action"] == "ec2:CreateNetworkInterface" and st["Resource"] == f"{P}:subnet/*"
    assert st["Condition"] == {
        "StringEquals": {"ec2:Vpc": VPC},
        "StringNotEquals": {f"aws:ResourceTag/{names.TAG_SUBNET_ROLE}": "0"},
    }
    assert "ArnEquals" not in s.statement("CreateClusterTaggedEni")["Condition"]
    env = next(
        r["Properties"]["Environment"]["Variables"]
        for r in s.resources("AWS::Lambda::Function").values()
        if r["Properties"].get("Handler") == names.ALLOCATE_HANDLER
    )
    assert env[names.ENV_SUBNET_DISCOVERY] == "true" and env[names.ENV_ALLOWED_SUBNETS] == ""
    default = next(
        r["Properties"]["Environment"]["Variables"]
        for r in synthesized["default"].resources("AWS::Lambda::Function").values()
        if r["Properties"].get("Handler") == names.ALLOCATE_HANDLER
    )
    assert default[names.ENV_SUBNET_DISCOVERY] == "false"  # a list is given: it wins anyway
    assert env[names.ENV_SUBNET_TAG] == "" and default[names.ENV_SUBNET_TAG] == ""


def test_the_subnet_tag_iam_allows_is_the_one_the_functions_read(synthesized: dict[str, Synthesized]) -> None:
    # subnet_tag bounds CreateNetworkInterface by the tag in IAM, and the functions are told
    # the same tag (before, they were not, and placed ENIs where IAM refused them).
    s = synthesized["irsa"]
    env = next(
        r["Properties"]["Environment"]["Variables"]
        for r in s.resources("AWS::Lambda::Function").values()
        if r["Properties"].get("Handler") == names.ALLOCATE_HANDLER
    )
    assert env[names.ENV_SUBNET_TAG] == "warmpool.io/pods=true"
    assert env[names.ENV_SUBNET_DISCOVERY] == "false" and env[names.ENV_ALLOWED_SUBNETS] == ""
    st = s.statement("CreateEniInTaggedSubnets")
    assert st["Condition"]["StringEquals"]["aws:ResourceTag/warmpool.io/pods"] == "true"


@pytest.mark.parametrize("variant", ["default", "irsa", "discovery"])
def test_named_placement_reads_cidr_reservations_and_nothing_else(
    synthesized: dict[str, Synthesized], variant: str
) -> None:
    """Review1 P4: the usage read includes GetSubnetCidrReservations; the allocate role may make
    that read (on "*", as the Describe calls: a resource scope EC2 may not evaluate for this
    action would refuse it), and the statement grants no other action."""
    st = synthesized[variant].statement("ReadSubnetCidrReservations")
    assert st["Action"] == "ec2:GetSubnetCidrReservations" and st["Resource"] == "*"
    assert "Condition" not in st


def test_tags_only_at_creation(default: Synthesized) -> None:
    st = default.statement("TagOnlyWhileCreatingEni")
    assert st["Action"] == "ec2:CreateTags" and st["Resource"] == ENI
    assert st["Condition"]["StringEquals"]["ec2:CreateAction"] == "CreateNetworkInterface"
    assert st["Condition"]["StringEquals"][f"aws:RequestTag/{names.TAG_CLUSTER_NAME}"] == "demo"


def test_mutations_only_on_enis_warmpool_created(default: Synthesized) -> None:
    st = default.statement("MutateWarmpoolCreatedEni")
    assert set(st["Action"]) == {
        "ec2:AssignPrivateIpAddresses",
        "ec2:UnassignPrivateIpAddresses",
        "ec2:AttachNetworkInterface",
        "ec2:DetachNetworkInterface",
        "ec2:ModifyNetworkInterfaceAttribute",
        "ec2:DeleteNetworkInterface",
    }
    assert st["Resource"] == ENI
    assert st["Condition"] == {
        "StringEquals": {
            f"aws:ResourceTag/{names.TAG_CLUSTER_NAME}": "demo",
            f"aws:ResourceTag/{names.TAG_MANAGED}": "true",
        }
    }


def test_primary_enis_only_get_addresses_once_tagged_for_the_cluster_in_the_vpc(default: Synthesized) -> None:
    st = default.statement("AssignOnClusterPrimaryEni")
    assert set(st["Action"]) == {"ec2:AssignPrivateIpAddresses", "ec2:UnassignPrivateIpAddresses"}
    assert st["Condition"] == {"StringEquals": {f"aws:ResourceTag/{names.TAG_PRIMARY_ENI_OF}": "demo", "ec2:Vpc": VPC}}


def test_attach_only_to_instances_of_the_cluster(default: Synthesized) -> None:
    st = default.statement("AttachOnlyToClusterInstances")
    assert st["Resource"] == f"{P}:instance/*"
    assert "ec2:AttachNetworkInterface" in st["Action"] and "ec2:DetachNetworkInterface" in st["Action"]
    assert st["Condition"] == {"StringEquals": {"ec2:ResourceTag/kubernetes.io/cluster/demo": ["owned", "shared"]}}


def test_reads_are_the_only_unscoped_ec2_access(default: Synthesized) -> None:
    """Only reads on "*": the Describe calls, and the one Get named placement makes."""
    reads = ("ec2:Describe", "ec2:GetSubnetCidrReservations", "sqs:ListQueues")
    for _, st in default.statements():
        if st["Resource"] == "*":
            assert all(a.startswith(reads) for a in _list(st["Action"])), st


def test_reconcile_marks_and_deletes_only_cluster_enis(default: Synthesized) -> None:
    mark = default.statement("GcMarkClusterTaggedEni")
    # The reconciler clears its mark by writing it empty (functions/reconciler.py): it never calls DeleteTags.
    assert mark["Action"] == "ec2:CreateTags"
    ours = {f"aws:ResourceTag/{names.TAG_CLUSTER_NAME}": "demo", f"aws:ResourceTag/{names.TAG_MANAGED}": "true"}
    assert mark["Condition"]["StringEquals"] == ours
    assert mark["Condition"]["ForAllValues:StringEquals"] == {"aws:TagKeys": [names.TAG_GC_MARK]}
    delete = default.statement("GcDeleteClusterTaggedEni")
    assert delete["Action"] == "ec2:DeleteNetworkInterface"
    assert delete["Condition"] == {"StringEquals": ours}
    reconcile = _statements_of_role(default, "ReconcileRole")
    assert not any("ec2:CreateNetworkInterface" in _list(st["Action"]) for st in reconcile)
    assert not any("ec2:AttachNetworkInterface" in _list(st["Action"]) for st in reconcile)


def test_reconcile_repairs_delete_on_termination_with_the_allocators_scope(default: Synthesized) -> None:
    """Issue 21, defect 7: the role lacked ModifyNetworkInterfaceAttribute."""
    ours = {f"aws:ResourceTag/{names.TAG_CLUSTER_NAME}": "demo", f"aws:ResourceTag/{names.TAG_MANAGED}": "true"}
    repair = default.statement("RepairDeleteOnTermination")
    assert repair["Action"] == "ec2:ModifyNetworkInterfaceAttribute" and repair["Resource"] == ENI
    assert repair["Condition"] == {"StringEquals": ours}
    instance = default.statement("RepairOnlyOnClusterInstances")
    assert instance["Resource"] == f"{P}:instance/*"
    assert instance["Condition"] == {
        "StringEquals": {"ec2:ResourceTag/kubernetes.io/cluster/demo": ["owned", "shared"]}
    }
    deny = default.statement("RepairSetsNoOtherEniAttribute")
    assert deny["Effect"] == "Deny" and deny["Action"] == "ec2:ModifyNetworkInterfaceAttribute"
    guard = default.statement("GcNeverTouchesNoManageEnis")
    assert "ec2:ModifyNetworkInterfaceAttribute" in guard["Action"]


def test_functions_reach_only_their_own_cluster_queues(default: Synthesized) -> None:
    result = "arn:${AWS::Partition}:sqs:${AWS::Region}:${AWS::AccountId}:warmpool-demo-result-*"
    send = default.statement("SendToClusterResultQueues")
    assert send["Resource"] == result and "sqs:SendMessage" in send["Action"]
    assert "sqs:CreateQueue" not in send["Action"] and "sqs:DeleteQueue" not in send["Action"]
    cleanup = default.statement("CleanUpClusterResultQueues")
    assert cleanup["Resource"] == result and "sqs:DeleteQueue" in cleanup["Action"]
    sqs_resources = {
        r
        for _, st in default.statements()
        for a in _list(st["Action"])
        if a.startswith("sqs:")
        for r in _list(st["Resource"])
    }
    reports = default.logical_id("AWS::SQS::Queue", lambda r: r["Properties"]["QueueName"] == "warmpool-demo-reports")
    dlq = default.logical_id("AWS::SQS::Queue", lambda r: r["Properties"]["QueueName"] == "warmpool-demo-reports-dlq")
    assert sqs_resources == {result, "*", "${" + reports + ".Arn}", "${" + dlq + ".Arn}"}


def test_functions_write_only_their_own_logs(default: Synthesized) -> None:
    for role in ("AllocateRole", "ReconcileRole"):
        logs = [st for st in _statements_of_role(default, role) if st.get("Sid") == "WriteOwnLogs"]
        assert len(logs) == 1 and logs[0]["Resource"].startswith("${" + role.removesuffix("Role") + "Logs")
    attached = [
        a for r in default.resources("AWS::IAM::Role").values() for a in r["Properties"].get("ManagedPolicyArns", [])
    ]
    assert not any(":iam::aws:policy/" in str(a) for a in attached)  # no AWS managed policy anywhere


def _agent_policy(s: Synthesized) -> dict[str, Any]:
    return s.one("AWS::IAM::ManagedPolicy")["Properties"]


def test_agent_sends_reports_and_reads_only_result_queues_under_its_prefix(default: Synthesized) -> None:
    policy = _agent_policy(default)
    by_sid = {st["Sid"]: st for st in policy["PolicyDocument"]["Statement"]}
    assert set(by_sid) == {"SendPoolReports", "ReceiveFromResultQueues", "DescribeOwnEnis"}
    # The one EC2 permission: reading ENIs (no_manage tags, as ipamd does); nothing that changes EC2.
    assert by_sid["DescribeOwnEnis"]["Action"] == "ec2:DescribeNetworkInterfaces"
    reports = default.logical_id("AWS::SQS::Queue", lambda r: r["Properties"]["QueueName"] == "warmpool-demo-reports")
    assert by_sid["SendPoolReports"]["Resource"] == "${" + reports + ".Arn}"
    assert "sqs:ReceiveMessage" not in by_sid["SendPoolReports"]["Action"]
    own = by_sid["ReceiveFromResultQueues"]
    assert own["Resource"] == "arn:${AWS::Partition}:sqs:${AWS::Region}:${AWS::AccountId}:warmpool-demo-result-*"
    assert {"sqs:ReceiveMessage", "sqs:DeleteMessage"} <= set(own["Action"])
    assert "sqs:CreateQueue" not in own["Action"]  # the allocator creates a verified node's queue (issue 12)
    assert "sqs:DeleteQueue" not in own["Action"] and "sqs:SendMessage" not in own["Action"]
    # Nothing the agent never calls: no way to rewrite another node's queue policy.
    assert not {"sqs:SetQueueAttributes", "sqs:TagQueue", "sqs:ChangeMessageVisibility"} & set(own["Action"])


def test_pod_identity_trust_is_scoped_to_the_agent_service_account(default: Synthesized) -> None:
    role = default.one("AWS::IAM::Role", lambda r: "pods.eks.amazonaws.com" in str(r))["Properties"]
    (st,) = role["AssumeRolePolicyDocument"]["Statement"]
    assert st["Principal"] == {"Service": "pods.eks.amazonaws.com"}
    assert set(st["Action"]) == {"sts:AssumeRole", "sts:TagSession"}
    assert st["Condition"]["StringEquals"] == {
        "aws:SourceAccount": "${AWS::AccountId}",
        "aws:RequestTag/eks-cluster-name": "demo",
        "aws:RequestTag/kubernetes-namespace": "kube-system",
        "aws:RequestTag/kubernetes-service-account": "warmpool-agent",
    }
    assoc = default.one("AWS::EKS::PodIdentityAssociation")["Properties"]
    assert (assoc["ClusterName"], assoc["Namespace"], assoc["ServiceAccount"]) == (
        "demo",
        "kube-system",
        "warmpool-agent",
    )
    assert role["MaxSessionDuration"] == 3600


def test_irsa_trust_is_bound_to_the_service_account_subject(synthesized: dict[str, Synthesized]) -> None:
    s = synthesized["irsa"]
    issuer = "oidc.eks.eu-west-1.amazonaws.com/id/ABC123"
    role = s.one("AWS::IAM::Role", lambda r: "Federated" in str(r))["Properties"]
    (st,) = role["AssumeRolePolicyDocument"]["Statement"]
    assert st["Action"] == "sts:AssumeRoleWithWebIdentity"
    assert st["Principal"] == {"Federated": f"arn:aws:iam::123456789012:oidc-provider/{issuer}"}
    assert st["Condition"] == {
        "StringEquals": {
            f"{issuer}:sub": "system:serviceaccount:kube-system:warmpool-agent",
            f"{issuer}:aud": "sts.amazonaws.com",
        }
    }
    assert not s.resources("AWS::EKS::PodIdentityAssociation")


def test_node_role_option_attaches_the_agent_policy_to_the_nodes_role(
    synthesized: dict[str, Synthesized],
) -> None:
    s = synthesized["node_role"]
    policy = _agent_policy(s)
    assert policy["Roles"] == ["eks-node-role"]
    assert len(s.resources("AWS::IAM::Role")) == 2  # only the two function roles
    assert (
        s.resolved["Outputs"]["AgentRoleArn"]["Value"]
        == "arn:${AWS::Partition}:iam::${AWS::AccountId}:role/eks-node-role"
    )


def test_the_allocate_role_allows_every_action_of_every_planned_call(default: Synthesized) -> None:
    """The IAM half of warmpool/calls.py (tests/unit/test_calls_registry.py holds the rest)."""
    allowed = {
        a for st in default.role_statements("AllocateRole") if st["Effect"] == "Allow" for a in _list(st["Action"])
    }
    for kind, spec in CALLS.items():
        assert set(spec.iam) <= allowed, (kind.__name__, set(spec.iam) - allowed)
