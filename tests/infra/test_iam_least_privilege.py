"""Least privilege that holds (issue 12): the synthesized policies, EVALUATED against the
ENIs and queues warmpool must touch and those it must not (tests/helpers/iam_eval.py)."""

from __future__ import annotations

from typing import Any

import pytest

from infra import policies
from infra.config import config_from_context
from tests.helpers.cdk_synth import BASE_CONTEXT, Synthesized
from tests.helpers.iam_eval import ContextValue, IamEni, concretize, evaluate, matching_sids
from warmpool import names

REGION, ACCOUNT = "us-east-1", "123456789012"
SUBS = {"${AWS::Partition}": "aws", "${AWS::Region}": REGION, "${AWS::AccountId}": ACCOUNT}
VPC = f"arn:aws:ec2:{REGION}:{ACCOUNT}:vpc/vpc-0123456789abcdef0"
OTHER_VPC = f"arn:aws:ec2:{REGION}:{ACCOUNT}:vpc/vpc-0fedcba9876543210"
SUBNET = f"arn:aws:ec2:{REGION}:{ACCOUNT}:subnet/subnet-0123456789abcdef0"
CLUSTER = "demo"

WARMPOOL_TAGS = {
    names.TAG_CLUSTER_NAME: CLUSTER,
    names.TAG_MANAGED: "true",
    names.TAG_INSTANCE_ID: "i-0123456789abcdef0",
    names.TAG_CREATED_AT: "2026-01-01T00:00:00Z",
}
ENIS = {
    # what warmpool must be able to change
    "warmpool": IamEni("eni-warmpool", VPC, SUBNET, WARMPOOL_TAGS),
    "primary": IamEni("eni-primary", VPC, SUBNET, {names.TAG_PRIMARY_ENI_OF: CLUSTER}),
    # what it must not
    "primary-untagged": IamEni("eni-primary-untagged", VPC, SUBNET, {}),
    "no-manage": IamEni("eni-nomanage", VPC, SUBNET, {names.TAG_NO_MANAGE: "true"}),
    "no-manage-but-ours": IamEni("eni-nomanage-ours", VPC, SUBNET, {**WARMPOOL_TAGS, names.TAG_NO_MANAGE: "true"}),
    "no-manage-primary": IamEni(
        "eni-nomanage-primary", VPC, SUBNET, {names.TAG_PRIMARY_ENI_OF: CLUSTER, names.TAG_NO_MANAGE: "True"}
    ),
    "vpc-cni": IamEni("eni-vpccni", VPC, SUBNET, {names.TAG_CLUSTER_NAME: CLUSTER}),
    "other-cluster": IamEni("eni-other", VPC, SUBNET, {**WARMPOOL_TAGS, names.TAG_CLUSTER_NAME: "other"}),
    "other-cluster-primary": IamEni("eni-other-primary", VPC, SUBNET, {names.TAG_PRIMARY_ENI_OF: "other"}),
    "primary-other-vpc": IamEni("eni-primary-vpc2", OTHER_VPC, SUBNET, {names.TAG_PRIMARY_ENI_OF: CLUSTER}),
    "untagged-other-vpc": IamEni("eni-untagged-vpc2", OTHER_VPC, SUBNET, {}),
}
ASSIGN = ["ec2:AssignPrivateIpAddresses", "ec2:UnassignPrivateIpAddresses"]
LIFECYCLE = ["ec2:AttachNetworkInterface", "ec2:DetachNetworkInterface", "ec2:DeleteNetworkInterface"]
MODIFY = "ec2:ModifyNetworkInterfaceAttribute"


def _role_statements(s: Synthesized, role_prefix: str) -> list[dict[str, Any]]:
    statements: list[dict[str, Any]] = concretize(s.role_statements(role_prefix), SUBS)
    return statements


@pytest.fixture(scope="module")
def allocator(default: Synthesized) -> list[dict[str, Any]]:
    return _role_statements(default, "AllocateRole")


@pytest.fixture(scope="module")
def reconciler(default: Synthesized) -> list[dict[str, Any]]:
    return _role_statements(default, "ReconcileRole")


@pytest.fixture(scope="module")
def agent(default: Synthesized) -> list[dict[str, Any]]:
    policy = default.one("AWS::IAM::ManagedPolicy")["Properties"]["PolicyDocument"]["Statement"]
    reports = default.logical_id("AWS::SQS::Queue", lambda r: r["Properties"]["QueueName"] == "warmpool-demo-reports")
    statements: list[dict[str, Any]] = concretize(
        policy, {**SUBS, "${" + reports + ".Arn}": _queue("warmpool-demo-reports")}
    )
    return statements


def _queue(name: str) -> str:
    return f"arn:aws:sqs:{REGION}:{ACCOUNT}:{name}"


def _decide(statements: list[dict[str, Any]], action: str, eni: str, **extra: ContextValue) -> str:
    e = ENIS[eni]
    return evaluate(statements, action, e.arn, e.context(**extra))


def _explain(statements: list[dict[str, Any]], action: str, eni: str) -> str:
    e = ENIS[eni]
    return f"{action} on {eni}: {matching_sids(statements, action, e.arn, e.context())}"


# --- what warmpool must be able to do ------------------------------------------------


@pytest.mark.parametrize("action", [*ASSIGN, *LIFECYCLE, MODIFY])
def test_the_allocator_may_change_enis_it_created(allocator: list[dict[str, Any]], action: str) -> None:
    assert _decide(allocator, action, "warmpool") == "Allow", _explain(allocator, action, "warmpool")


@pytest.mark.parametrize("action", ASSIGN)
def test_the_allocator_may_fill_and_drain_a_cluster_nodes_primary_eni(
    allocator: list[dict[str, Any]], action: str
) -> None:
    assert _decide(allocator, action, "primary") == "Allow"


def test_the_allocator_may_mark_an_untagged_primary_eni_at_first_contact(allocator: list[dict[str, Any]]) -> None:
    e = ENIS["primary-untagged"]
    ctx = e.tagging({names.TAG_PRIMARY_ENI_OF: CLUSTER})
    assert evaluate(allocator, "ec2:CreateTags", e.arn, ctx) == "Allow"


def test_setting_delete_on_termination_is_allowed(allocator: list[dict[str, Any]]) -> None:
    assert _decide(allocator, MODIFY, "warmpool", **{"ec2:Attribute": "Attachment"}) == "Allow"


def test_the_reconciler_may_mark_and_delete_enis_warmpool_created(reconciler: list[dict[str, Any]]) -> None:
    e = ENIS["warmpool"]
    assert evaluate(reconciler, "ec2:DeleteNetworkInterface", e.arn, e.context()) == "Allow"
    mark = e.tagging({names.TAG_GC_MARK: "1700000000"})
    assert evaluate(reconciler, "ec2:CreateTags", e.arn, mark) == "Allow"


INSTANCE = f"arn:aws:ec2:{REGION}:{ACCOUNT}:instance/i-0123456789abcdef0"
CLUSTER_INSTANCE = {"ec2:ResourceTag/kubernetes.io/cluster/demo": "owned", "ec2:Region": REGION}


def test_the_reconciler_may_repair_delete_on_termination_on_enis_warmpool_created(
    reconciler: list[dict[str, Any]],
) -> None:
    """Issue 21, defect 7: the repair's ModifyNetworkInterfaceAttribute was never granted, so
    it failed on every run. Both resources of the call (the ENI and its instance) are allowed."""
    e = ENIS["warmpool"]
    assert evaluate(reconciler, MODIFY, e.arn, e.context(**{"ec2:Attribute": "Attachment"})) == "Allow"
    assert evaluate(reconciler, MODIFY, INSTANCE, CLUSTER_INSTANCE) == "Allow"
    assert evaluate(reconciler, MODIFY, INSTANCE, {"ec2:ResourceTag/kubernetes.io/cluster/other": "owned"}) != "Allow"


@pytest.mark.parametrize("eni", ["vpc-cni", "primary", "no-manage", "no-manage-but-ours", "other-cluster"])
def test_the_reconciler_modifies_only_enis_warmpool_created(reconciler: list[dict[str, Any]], eni: str) -> None:
    assert _decide(reconciler, MODIFY, eni, **{"ec2:Attribute": "Attachment"}) != "Allow", eni


@pytest.mark.parametrize("attribute", ["SourceDestCheck", "Groups", "groupSet", "Description"])
def test_the_reconciler_changes_no_other_eni_attribute(reconciler: list[dict[str, Any]], attribute: str) -> None:
    assert _decide(reconciler, MODIFY, "warmpool", **{"ec2:Attribute": attribute}) == "Deny"


@pytest.mark.parametrize("eni", sorted(ENIS))
def test_the_reconcilers_ownership_rule_is_the_one_iam_enforces(reconciler: list[dict[str, Any]], eni: str) -> None:
    """``eni_scope.lifecycle_permitted`` (what the reconciler marks, deletes and repairs) is
    exactly what its role may do, ENI by ENI."""
    from warmpool.eni_scope import lifecycle_permitted

    e = ENIS[eni]
    allowed = [
        evaluate(reconciler, "ec2:DeleteNetworkInterface", e.arn, e.context()),
        evaluate(reconciler, "ec2:CreateTags", e.arn, e.tagging({names.TAG_GC_MARK: "1"})),
        evaluate(reconciler, MODIFY, e.arn, e.context(**{"ec2:Attribute": "Attachment"})),
    ]
    assert lifecycle_permitted(e.tags, CLUSTER) == all(d == "Allow" for d in allowed), (eni, allowed)


# --- what it must not ------------------------------------------------------------------


@pytest.mark.parametrize("eni", ["no-manage", "no-manage-but-ours", "no-manage-primary"])
@pytest.mark.parametrize("action", [*ASSIGN, *LIFECYCLE, MODIFY])
def test_nothing_on_an_eni_tagged_no_manage_is_allowed_even_with_our_tags(
    allocator: list[dict[str, Any]], action: str, eni: str
) -> None:
    assert _decide(allocator, action, eni) != "Allow", _explain(allocator, action, eni)


@pytest.mark.parametrize("eni", ["no-manage-but-ours", "no-manage-primary"])
def test_the_no_manage_tag_is_an_explicit_deny_not_just_a_missing_allow(
    allocator: list[dict[str, Any]], eni: str
) -> None:
    """It must win over any Allow someone adds later (their tags would otherwise allow it)."""
    assert _decide(allocator, "ec2:AssignPrivateIpAddresses", eni) == "Deny"


def test_no_manage_enis_cannot_be_claimed_by_tagging(allocator: list[dict[str, Any]]) -> None:
    e = ENIS["no-manage"]
    assert evaluate(allocator, "ec2:CreateTags", e.arn, e.tagging({names.TAG_PRIMARY_ENI_OF: CLUSTER})) == "Deny"


@pytest.mark.parametrize(
    "eni", ["primary-untagged", "vpc-cni", "other-cluster", "other-cluster-primary", "primary-other-vpc"]
)
@pytest.mark.parametrize("action", ASSIGN)
def test_no_addresses_on_enis_that_are_neither_ours_nor_a_cluster_primary(
    allocator: list[dict[str, Any]], action: str, eni: str
) -> None:
    assert _decide(allocator, action, eni) != "Allow", _explain(allocator, action, eni)


@pytest.mark.parametrize("action", [*LIFECYCLE, MODIFY])
@pytest.mark.parametrize("eni", ["primary", "vpc-cni", "other-cluster", "primary-untagged"])
def test_attach_detach_modify_delete_only_on_enis_warmpool_created(
    allocator: list[dict[str, Any]], action: str, eni: str
) -> None:
    assert _decide(allocator, action, eni) != "Allow", _explain(allocator, action, eni)


@pytest.mark.parametrize(
    ("eni", "tags"),
    [
        ("primary-untagged", {names.TAG_PRIMARY_ENI_OF: "other"}),  # another cluster's value
        ("primary-untagged", {names.TAG_CLUSTER_NAME: CLUSTER}),  # making it look warmpool's
        ("primary-untagged", {names.TAG_MANAGED: "true"}),
        ("primary-untagged", {names.TAG_PRIMARY_ENI_OF: CLUSTER, names.TAG_MANAGED: "true"}),  # extra key
        ("primary-untagged", {names.TAG_NO_MANAGE: "false"}),  # unmarking another tool's ENI
        ("untagged-other-vpc", {names.TAG_PRIMARY_ENI_OF: CLUSTER}),  # outside the VPC
        ("vpc-cni", {names.TAG_PRIMARY_ENI_OF: CLUSTER}),  # a VPC CNI secondary ENI is no primary
        ("other-cluster", {names.TAG_PRIMARY_ENI_OF: CLUSTER}),
    ],
)
def test_first_contact_tagging_cannot_claim_other_enis(
    allocator: list[dict[str, Any]], eni: str, tags: dict[str, str]
) -> None:
    e = ENIS[eni]
    assert evaluate(allocator, "ec2:CreateTags", e.arn, e.tagging(tags)) != "Allow"


@pytest.mark.parametrize("attribute", ["SourceDestCheck", "Groups", "groupSet", "Description"])
def test_modify_cannot_change_what_warmpool_never_sets(allocator: list[dict[str, Any]], attribute: str) -> None:
    assert _decide(allocator, MODIFY, "warmpool", **{"ec2:Attribute": attribute}) == "Deny"


@pytest.mark.parametrize("eni", ["vpc-cni", "primary", "no-manage-but-ours", "other-cluster"])
def test_the_reconciler_deletes_only_enis_warmpool_created(reconciler: list[dict[str, Any]], eni: str) -> None:
    e = ENIS[eni]
    assert evaluate(reconciler, "ec2:DeleteNetworkInterface", e.arn, e.context()) != "Allow"
    assert evaluate(reconciler, "ec2:CreateTags", e.arn, e.tagging({names.TAG_GC_MARK: "1"})) != "Allow"


# --- result queues: creation bounded ------------------------------------------------------


RESULT_Q = _queue("warmpool-demo-result-i-0123456789abcdef0")


def test_agents_cannot_create_queues_but_read_their_results(agent: list[dict[str, Any]]) -> None:
    assert evaluate(agent, "sqs:CreateQueue", RESULT_Q, {}) == "ImplicitDeny"
    assert evaluate(agent, "sqs:CreateQueue", _queue("anything"), {}) == "ImplicitDeny"
    for action in ("sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:GetQueueUrl"):
        assert evaluate(agent, action, RESULT_Q, {}) == "Allow", action
    for action in ("sqs:SendMessage", "sqs:DeleteQueue", "sqs:SetQueueAttributes", "sqs:TagQueue"):
        assert evaluate(agent, action, RESULT_Q, {}) == "ImplicitDeny", action
    assert evaluate(agent, "sqs:SendMessage", _queue("warmpool-demo-reports"), {}) == "Allow"
    assert evaluate(agent, "sqs:ReceiveMessage", _queue("warmpool-demo-reports"), {}) == "ImplicitDeny"


def test_only_the_allocator_creates_result_queues_and_only_under_its_clusters_prefix(
    allocator: list[dict[str, Any]], reconciler: list[dict[str, Any]]
) -> None:
    assert evaluate(allocator, "sqs:CreateQueue", RESULT_Q, {}) == "Allow"
    assert evaluate(allocator, "sqs:CreateQueue", _queue("warmpool-other-result-i-0123456789abcdef0"), {}) == (
        "ImplicitDeny"
    )
    assert evaluate(allocator, "sqs:CreateQueue", _queue("warmpool-demo-reports-2"), {}) == "ImplicitDeny"
    assert evaluate(reconciler, "sqs:CreateQueue", RESULT_Q, {}) == "ImplicitDeny"
    assert evaluate(reconciler, "sqs:DeleteQueue", RESULT_Q, {}) == "Allow"


# --- the launch-template alternative: no CreateTags on existing ENIs at all ---------------------


def test_with_launch_template_tagging_the_allocator_cannot_tag_existing_enis() -> None:
    cfg = config_from_context({**BASE_CONTEXT, "primary_eni_tagging": "launch-template"})
    arns = policies.Arns(partition="aws", region=REGION, account=ACCOUNT)
    statements = [s.to_json() for s in policies.allocator_ec2(cfg, arns)]
    e = ENIS["primary-untagged"]
    assert evaluate(statements, "ec2:CreateTags", e.arn, e.tagging({names.TAG_PRIMARY_ENI_OF: CLUSTER})) == (
        "ImplicitDeny"
    )
    assert evaluate(statements, "ec2:AssignPrivateIpAddresses", ENIS["primary"].arn, ENIS["primary"].context()) == (
        "Allow"
    )
    assert "TagPrimaryEniAtFirstContact" not in {s.get("Sid") for s in statements}


# --- the allocator's own decisions agree with IAM, ENI by ENI ------------------------------

DEVICE_INDEX = {"warmpool": 1, "vpc-cni": 1, "other-cluster": 1, "no-manage": 2, "no-manage-but-ours": 1}


@pytest.mark.parametrize("eni", sorted(ENIS))
def test_functions_eni_scope_never_plans_a_call_iam_refuses(allocator: list[dict[str, Any]], eni: str) -> None:
    from warmpool.eni_scope import permissions, primary_eni_tag

    e = ENIS[eni]
    got = permissions(e.tags, CLUSTER, in_cluster_vpc=e.vpc_arn == VPC, device_index=DEVICE_INDEX.get(eni, 0))
    assert got.assign == all(_decide(allocator, a, eni) == "Allow" for a in ASSIGN), eni
    assert got.lifecycle == all(_decide(allocator, a, eni) == "Allow" for a in [*LIFECYCLE, MODIFY]), eni
    tag = primary_eni_tag(CLUSTER)
    if got.tag_as_primary:  # IAM allows more (any such ENI of the VPC); the code tags only device 0
        assert evaluate(allocator, "ec2:CreateTags", e.arn, e.tagging(tag)) == "Allow", eni
        after = IamEni(e.eni_id, e.vpc_arn, e.subnet_arn, {**e.tags, **tag})
        assert evaluate(allocator, "ec2:AssignPrivateIpAddresses", after.arn, after.context()) == "Allow"
    if evaluate(allocator, "ec2:CreateTags", e.arn, e.tagging(tag)) != "Allow":
        assert not got.tag_as_primary, eni


def test_only_device_zero_is_claimed_as_a_primary_eni() -> None:
    from warmpool.eni_scope import permissions

    assert permissions({}, CLUSTER, in_cluster_vpc=True, device_index=0).tag_as_primary
    assert not permissions({}, CLUSTER, in_cluster_vpc=True, device_index=1).tag_as_primary
    assert not permissions({}, CLUSTER, in_cluster_vpc=True, device_index=-1).tag_as_primary
    assert not permissions({}, CLUSTER, in_cluster_vpc=False, device_index=0).tag_as_primary
