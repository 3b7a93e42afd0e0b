"""IAM statements for the allocator, the reconciler and the node agent.

Least privilege, using the condition keys EC2 and SQS evaluate (the Service
Authorization Reference lists, for Assign/UnassignPrivateIpAddresses on a
``network-interface``: ``aws:ResourceTag``, ``ec2:ResourceTag``, ``ec2:Vpc``,
``ec2:Subnet``, ``ec2:AvailabilityZone``, ``ec2:NetworkInterfaceID``,
``ec2:Region``, ``ec2:ManagedResourceOperator``; nothing names the instance an
ENI is attached to, so "the primary ENI of a cluster instance" is expressed by a
tag on that ENI):

- Mutating calls on ENIs only when the ENI carries both tags warmpool creates it
  with (``cluster.k8s.amazonaws.com/name = <cluster>`` and
  ``warmpool.io/managed = true``); a node's primary ENI only gets addresses
  (un)assigned, and only once tagged ``warmpool.io/primary-eni-of = <cluster>``
  (by the node's launch template, or by the allocator at first contact: a
  CreateTags that may add that one tag, in the VPC, to an ENI warmpool did not
  create).
- Never anything on an ENI tagged ``node.k8s.amazonaws.com/no_manage = true``
  (an explicit Deny, as the VPC CNI leaves such ENIs alone).
- ModifyNetworkInterfaceAttribute only on ENIs warmpool created, and denied for
  the attributes warmpool never sets (``ec2:Attribute``).
- CreateNetworkInterface only with that tag (and ``warmpool.io/managed``) in the
  request (``aws:RequestTag``), only in the allowed subnets (``ec2:Subnet`` on the
  new ENI plus the subnet resources themselves) and only in the cluster's VPC.
- Attach/Detach only to instances tagged ``kubernetes.io/cluster/<name>``
  (``ec2:ResourceTag`` on the instance resource).
- Tags only at creation (``ec2:CreateAction``), except the GC mark, whose key is
  the only one reconcile may add or remove (``aws:TagKeys``).
- Reconcile's DeleteOnTermination repair: ModifyNetworkInterfaceAttribute with
  the allocator's scope (ENIs warmpool created, instances of the cluster, the
  attachment only, never a ``no_manage`` ENI).

Every statement is a plain function of the config and the stack's ARN parts, so
tests can read them without synthesizing.
"""

from __future__ import annotations

from dataclasses import dataclass

from aws_cdk import aws_iam as iam

from infra.config import StackConfig
from warmpool import names

EC2_DESCRIBE = [
    "ec2:DescribeInstances",
    "ec2:DescribeInstanceTypes",
    "ec2:DescribeNetworkInterfaces",
    "ec2:DescribeSubnets",
    "ec2:DescribeSecurityGroups",
]


@dataclass(frozen=True)
class Arns:
    """ARN parts of the stack (tokens at synth time)."""

    partition: str
    region: str
    account: str

    def ec2(self, resource: str) -> str:
        return f"arn:{self.partition}:ec2:{self.region}:{self.account}:{resource}"

    def sqs(self, name: str) -> str:
        return f"arn:{self.partition}:sqs:{self.region}:{self.account}:{name}"

    def result_queues(self, cluster: str) -> str:
        return self.sqs(f"{names.result_queue_prefix(cluster)}*")


ENI_MUTATIONS = [
    "ec2:AssignPrivateIpAddresses",
    "ec2:UnassignPrivateIpAddresses",
    "ec2:AttachNetworkInterface",
    "ec2:DetachNetworkInterface",
    "ec2:ModifyNetworkInterfaceAttribute",
    "ec2:DeleteNetworkInterface",
]
ADDRESS_CALLS = ["ec2:AssignPrivateIpAddresses", "ec2:UnassignPrivateIpAddresses"]
ENI_ATTRIBUTES_NEVER_SET = [
    # ModifyNetworkInterfaceAttribute parameters other than Attachment (the only one
    # warmpool sets: DeleteOnTermination), in the API's and the attribute-name spelling.
    "SourceDestCheck",
    "Groups",
    "GroupSet",
    "Description",
    "EnaSrdSpecification",
    "EnaQueueCount",
    "AssociatePublicIpAddress",
    "AssociatedSubnetIds",
    "ConnectionTrackingSpecification",
]


def _warmpool_eni(cfg: StackConfig) -> dict[str, dict[str, str]]:
    """An ENI warmpool created: CreateNetworkInterface is allowed only with both tags."""
    return {
        "StringEquals": {
            f"aws:ResourceTag/{names.TAG_CLUSTER_NAME}": cfg.cluster,
            f"aws:ResourceTag/{names.TAG_MANAGED}": "true",
        }
    }


def _not_managed_by_us() -> dict[str, dict[str, str]]:
    return {"StringEqualsIgnoreCase": {f"aws:ResourceTag/{names.TAG_NO_MANAGE}": "true"}}


def deny_unmanaged_enis(sid: str, actions: list[str], arns: Arns) -> iam.PolicyStatement:
    """Whatever else allows: nothing on an ENI another tool marked ``no_manage``."""
    return iam.PolicyStatement(
        sid=sid,
        effect=iam.Effect.DENY,
        actions=actions,
        resources=[arns.ec2("network-interface/*")],
        conditions=_not_managed_by_us(),
    )


def deny_attributes_never_set(sid: str, arns: Arns) -> iam.PolicyStatement:
    """ModifyNetworkInterfaceAttribute may change the attachment (DeleteOnTermination) only."""
    return iam.PolicyStatement(
        sid=sid,
        effect=iam.Effect.DENY,
        actions=["ec2:ModifyNetworkInterfaceAttribute"],
        resources=[arns.ec2("network-interface/*")],
        conditions={"StringEqualsIgnoreCase": {"ec2:Attribute": ENI_ATTRIBUTES_NEVER_SET}},
    )


def _cluster_instance(cfg: StackConfig) -> dict[str, dict[str, list[str]]]:
    return {"StringEquals": {f"ec2:ResourceTag/{names.cluster_tag_key(cfg.cluster)}": ["owned", "shared"]}}


def describe(sid: str) -> iam.PolicyStatement:
    return iam.PolicyStatement(sid=sid, actions=EC2_DESCRIBE, resources=["*"])


def allocator_ec2(cfg: StackConfig, arns: Arns) -> list[iam.PolicyStatement]:
    eni = arns.ec2("network-interface/*")
    instance = arns.ec2("instance/*")
    vpc_arn = arns.ec2(f"vpc/{cfg.vpc_id}")
    create_eni_conditions: dict[str, dict[str, object]] = {
        "StringEquals": {
            f"aws:RequestTag/{names.TAG_CLUSTER_NAME}": cfg.cluster,
            f"aws:RequestTag/{names.TAG_MANAGED}": "true",
            "ec2:Vpc": vpc_arn,
        },
        "ForAllValues:StringEquals": {
            "aws:TagKeys": [
                names.TAG_CLUSTER_NAME,
                names.TAG_INSTANCE_ID,
                names.TAG_CREATED_AT,
                names.TAG_MANAGED,
            ]
        },
    }
    if cfg.subnet_ids:
        allowed = [*cfg.subnet_ids, *(s for s in cfg.custom_subnet_ids if s not in cfg.subnet_ids)]
        create_eni_conditions["ArnEquals"] = {"ec2:Subnet": [arns.ec2(f"subnet/{s}") for s in allowed]}
        subnet_statement = iam.PolicyStatement(
            sid="CreateEniInAllowedSubnets",
            actions=["ec2:CreateNetworkInterface"],
            resources=[arns.ec2(f"subnet/{s}") for s in cfg.subnet_ids],
        )
    elif cfg.discovers_subnets:
        # What IAM can say of the discovery rule (warmpool/subnets.py): a subnet of the VPC not
        # tagged kubernetes.io/role/cni=0 (a key the subnet lacks passes StringNotEquals).
        subnet_statement = iam.PolicyStatement(
            sid="CreateEniInDiscoveredSubnets",
            actions=["ec2:CreateNetworkInterface"],
            resources=[arns.ec2("subnet/*")],
            conditions={
                "StringEquals": {"ec2:Vpc": vpc_arn},
                "StringNotEquals": {f"aws:ResourceTag/{names.TAG_SUBNET_ROLE}": "0"},
            },
        )
    else:
        tag = cfg.subnet_tag_pair
        assert tag is not None
        subnet_statement = iam.PolicyStatement(
            sid="CreateEniInTaggedSubnets",
            actions=["ec2:CreateNetworkInterface"],
            resources=[arns.ec2("subnet/*")],
            conditions={"StringEquals": {f"aws:ResourceTag/{tag[0]}": tag[1], "ec2:Vpc": vpc_arn}},
        )
    # Custom networking's subnets, by id: its nodes' ENIs go only there (warmpool/subnets.py).
    custom_statements = (
        [
            iam.PolicyStatement(
                sid="CreateEniInCustomNetworkSubnets",
                actions=["ec2:CreateNetworkInterface"],
                resources=[arns.ec2(f"subnet/{s}") for s in cfg.custom_subnet_ids],
            )
        ]
        if cfg.custom_subnet_ids
        else []
    )
    if cfg.security_group_ids:
        groups = [*cfg.security_group_ids, *(g for g in cfg.custom_group_ids if g not in cfg.security_group_ids)]
        group_resources = [arns.ec2(f"security-group/{g}") for g in groups]
    else:
        group_resources = [arns.ec2("security-group/*")]
    return [
        describe("DescribeForPlanning"),
        iam.PolicyStatement(
            # Named placement reads a subnet's CIDR reservations (functions/ec2.py::subnet_usage),
            # so that it never names a reserved address. A read; granted on "*" as the Describe
            # calls are: that EC2 authorizes it per subnet resource is not something this project
            # could confirm, and a scope EC2 does not evaluate would refuse the read (placement
            # would then go by count).
            sid="ReadSubnetCidrReservations",
            actions=["ec2:GetSubnetCidrReservations"],
            resources=["*"],
        ),
        iam.PolicyStatement(
            sid="CreateClusterTaggedEni",
            actions=["ec2:CreateNetworkInterface"],
            resources=[eni],
            conditions=create_eni_conditions,
        ),
        subnet_statement,
        *custom_statements,
        iam.PolicyStatement(
            sid="CreateEniWithClusterVpcGroups",
            actions=["ec2:CreateNetworkInterface"],
            resources=group_resources,
            conditions={"StringEquals": {"ec2:Vpc": vpc_arn}},
        ),
        iam.PolicyStatement(
            sid="TagOnlyWhileCreatingEni",
            actions=["ec2:CreateTags"],
            resources=[eni],
            conditions={
                "StringEquals": {
                    "ec2:CreateAction": "CreateNetworkInterface",
                    f"aws:RequestTag/{names.TAG_CLUSTER_NAME}": cfg.cluster,
                }
            },
        ),
        iam.PolicyStatement(
            sid="MutateWarmpoolCreatedEni",
            actions=ENI_MUTATIONS,
            resources=[eni],
            conditions=_warmpool_eni(cfg),
        ),
        # A node's primary ENI (device 0) was made by EC2 with the instance, yet in
        # secondary-IP mode it holds pod addresses too (as with the VPC CNI). Only
        # address (un)assignment, only in the cluster's VPC, and only once the ENI is
        # tagged as the primary ENI of a node of this cluster.
        iam.PolicyStatement(
            sid="AssignOnClusterPrimaryEni",
            actions=ADDRESS_CALLS,
            resources=[eni],
            conditions={
                "StringEquals": {
                    f"aws:ResourceTag/{names.TAG_PRIMARY_ENI_OF}": cfg.cluster,
                    "ec2:Vpc": vpc_arn,
                }
            },
        ),
        *(
            [
                # First contact with a verified node: the allocator tags its primary ENI
                # (only that one tag key, only this cluster as value, only in the VPC, never
                # on an ENI warmpool or the VPC CNI created for a cluster).
                iam.PolicyStatement(
                    sid="TagPrimaryEniAtFirstContact",
                    actions=["ec2:CreateTags"],
                    resources=[eni],
                    conditions={
                        "StringEquals": {
                            f"aws:RequestTag/{names.TAG_PRIMARY_ENI_OF}": cfg.cluster,
                            "ec2:Vpc": vpc_arn,
                        },
                        "ForAllValues:StringEquals": {"aws:TagKeys": [names.TAG_PRIMARY_ENI_OF]},
                        "Null": {
                            f"aws:ResourceTag/{names.TAG_MANAGED}": "true",
                            f"aws:ResourceTag/{names.TAG_CLUSTER_NAME}": "true",
                        },
                    },
                )
            ]
            if cfg.primary_eni_tagging == "allocator"
            else []
        ),
        deny_unmanaged_enis("NeverTouchNoManageEnis", [*ENI_MUTATIONS, "ec2:CreateTags"], arns),
        deny_attributes_never_set("DenyEniAttributesWarmpoolNeverSets", arns),
        iam.PolicyStatement(
            sid="AttachOnlyToClusterInstances",
            actions=[
                "ec2:AttachNetworkInterface",
                "ec2:DetachNetworkInterface",
                "ec2:ModifyNetworkInterfaceAttribute",
            ],
            resources=[instance],
            conditions=_cluster_instance(cfg),
        ),
    ]


def reconciler_ec2(cfg: StackConfig, arns: Arns) -> list[iam.PolicyStatement]:
    eni = arns.ec2("network-interface/*")
    return [
        describe("DescribeForReconcile"),
        iam.PolicyStatement(
            sid="GcMarkClusterTaggedEni",
            actions=["ec2:CreateTags"],  # the mark is cleared by writing it empty: no DeleteTags
            resources=[eni],
            conditions={
                **_warmpool_eni(cfg),
                "ForAllValues:StringEquals": {"aws:TagKeys": [names.TAG_GC_MARK]},
            },
        ),
        iam.PolicyStatement(
            sid="GcDeleteClusterTaggedEni",
            actions=["ec2:DeleteNetworkInterface"],
            resources=[eni],
            conditions=_warmpool_eni(cfg),
        ),
        # The DeleteOnTermination repair (an allocator that died between attach and
        # modify): the attachment of an ENI warmpool created, attached to an instance of
        # the cluster, and no other attribute (the same scope as the allocator's).
        iam.PolicyStatement(
            sid="RepairDeleteOnTermination",
            actions=["ec2:ModifyNetworkInterfaceAttribute"],
            resources=[eni],
            conditions=_warmpool_eni(cfg),
        ),
        iam.PolicyStatement(
            sid="RepairOnlyOnClusterInstances",
            actions=["ec2:ModifyNetworkInterfaceAttribute"],
            resources=[arns.ec2("instance/*")],
            conditions=_cluster_instance(cfg),
        ),
        deny_attributes_never_set("RepairSetsNoOtherEniAttribute", arns),
        deny_unmanaged_enis(
            "GcNeverTouchesNoManageEnis",
            ["ec2:CreateTags", "ec2:DeleteTags", "ec2:DeleteNetworkInterface", "ec2:ModifyNetworkInterfaceAttribute"],
            arns,
        ),
    ]


def allocator_result_queues(cfg: StackConfig, arns: Arns) -> list[iam.PolicyStatement]:
    return [
        iam.PolicyStatement(
            sid="SendToClusterResultQueues",
            actions=["sqs:SendMessage", "sqs:GetQueueUrl", "sqs:GetQueueAttributes"],
            resources=[arns.result_queues(cfg.cluster)],
        ),
        # Result queues are created by the allocator, once per instance whose signed
        # identity it verified and which EC2 shows tagged for the cluster (issue 12):
        # their number is bounded by the cluster's instances, and the reconciler deletes
        # those whose instance is gone. Agents cannot create queues.
        iam.PolicyStatement(
            sid="CreateResultQueueForVerifiedNode",
            actions=["sqs:CreateQueue", "sqs:TagQueue"],
            resources=[arns.result_queues(cfg.cluster)],
        ),
    ]


def reconciler_result_queues(cfg: StackConfig, arns: Arns) -> list[iam.PolicyStatement]:
    return [
        iam.PolicyStatement(
            sid="CleanUpClusterResultQueues",
            actions=["sqs:DeleteQueue", "sqs:GetQueueUrl", "sqs:GetQueueAttributes", "sqs:ListQueueTags"],
            resources=[arns.result_queues(cfg.cluster)],
        ),
        # ListQueues has no resource type; the function filters by the cluster's prefix.
        iam.PolicyStatement(sid="ListQueuesByPrefix", actions=["sqs:ListQueues"], resources=["*"]),
    ]


def agent(cfg: StackConfig, arns: Arns, reports_queue_arn: str) -> list[iam.PolicyStatement]:
    return [
        iam.PolicyStatement(
            sid="SendPoolReports",
            actions=["sqs:SendMessage", "sqs:GetQueueUrl", "sqs:GetQueueAttributes"],
            resources=[reports_queue_arn],
        ),
        iam.PolicyStatement(
            sid="ReceiveFromResultQueues",
            actions=[
                # Reading only: no CreateQueue (the allocator creates a node's queue
                # after verifying it, so a node cannot create queues without bound), no
                # SetQueueAttributes or TagQueue (no rewriting another node's queue).
                "sqs:GetQueueUrl",
                "sqs:GetQueueAttributes",
                "sqs:ReceiveMessage",
                "sqs:DeleteMessage",
            ],
            resources=[arns.result_queues(cfg.cluster)],
        ),
        iam.PolicyStatement(
            # The agent learns which of its ENIs carry node.k8s.amazonaws.com/no_manage
            # (node_agent/unmanaged.py), as ipamd does: one filtered Describe at start and
            # when an unknown ENI appears. Describe* supports no resource-level scoping.
            sid="DescribeOwnEnis",
            actions=["ec2:DescribeNetworkInterfaces"],
            resources=["*"],
        ),
    ]


def pod_identity_principal(cfg: StackConfig, account: str) -> iam.IPrincipal:
    """EKS Pod Identity: only this cluster's agent service account may assume the role.

    Pod Identity passes session tags naming the cluster, namespace and service
    account, so the trust policy can check them (and needs ``sts:TagSession``).
    """
    return (
        iam.ServicePrincipal("pods.eks.amazonaws.com")
        .with_session_tags()
        .with_conditions(
            {
                "StringEquals": {
                    "aws:SourceAccount": account,
                    "aws:RequestTag/eks-cluster-name": cfg.cluster,
                    "aws:RequestTag/kubernetes-namespace": cfg.agent_namespace,
                    "aws:RequestTag/kubernetes-service-account": cfg.agent_service_account,
                }
            }
        )
    )


def irsa_principal(cfg: StackConfig) -> iam.IPrincipal:
    """IRSA: web identity from the cluster's OIDC provider, for the agent's service account only."""
    issuer = cfg.oidc_issuer
    return iam.FederatedPrincipal(
        cfg.oidc_provider_arn or "",
        conditions={
            "StringEquals": {
                f"{issuer}:sub": f"system:serviceaccount:{cfg.agent_namespace}:{cfg.agent_service_account}",
                f"{issuer}:aud": "sts.amazonaws.com",
            }
        },
        assume_role_action="sts:AssumeRoleWithWebIdentity",
    )
