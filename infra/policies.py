"""IAM statements for the allocator, the reconciler and the node agent.

Least privilege, using the condition keys EC2 and SQS evaluate:

- Mutating calls on ENIs only when the ENI carries the cluster's VPC CNI tag
  (``aws:ResourceTag/cluster.k8s.amazonaws.com/name``).
- CreateNetworkInterface only with that tag (and ``warmpool.io/managed``) in the
  request (``aws:RequestTag``), only in the allowed subnets (``ec2:Subnet`` on the
  new ENI plus the subnet resources themselves) and only in the cluster's VPC.
- Attach/Detach only to instances tagged ``kubernetes.io/cluster/<name>``
  (``ec2:ResourceTag`` on the instance resource).
- Tags only at creation (``ec2:CreateAction``), except the GC mark, whose key is
  the only one reconcile may add or remove (``aws:TagKeys``).

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


def _cluster_eni(cfg: StackConfig) -> dict[str, dict[str, str]]:
    return {"StringEquals": {f"aws:ResourceTag/{names.TAG_CLUSTER_NAME}": cfg.cluster}}


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
        create_eni_conditions["ArnEquals"] = {"ec2:Subnet": [arns.ec2(f"subnet/{s}") for s in cfg.subnet_ids]}
        subnet_statement = iam.PolicyStatement(
            sid="CreateEniInAllowedSubnets",
            actions=["ec2:CreateNetworkInterface"],
            resources=[arns.ec2(f"subnet/{s}") for s in cfg.subnet_ids],
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
    if cfg.security_group_ids:
        group_resources = [arns.ec2(f"security-group/{g}") for g in cfg.security_group_ids]
    else:
        group_resources = [arns.ec2("security-group/*")]
    return [
        describe("DescribeForPlanning"),
        iam.PolicyStatement(
            sid="CreateClusterTaggedEni",
            actions=["ec2:CreateNetworkInterface"],
            resources=[eni],
            conditions=create_eni_conditions,
        ),
        subnet_statement,
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
            sid="MutateClusterTaggedEni",
            actions=[
                "ec2:AssignPrivateIpAddresses",
                "ec2:UnassignPrivateIpAddresses",
                "ec2:AttachNetworkInterface",
                "ec2:DetachNetworkInterface",
                "ec2:ModifyNetworkInterfaceAttribute",
                "ec2:DeleteNetworkInterface",
            ],
            resources=[eni],
            conditions=_cluster_eni(cfg),
        ),
        # A node's primary ENI (device 0) was made by EC2 with the instance and
        # carries no cluster tag, yet in secondary-IP mode it holds pod addresses
        # too (as with the VPC CNI). Only address (un)assignment is allowed there,
        # and only inside the cluster's VPC.
        iam.PolicyStatement(
            sid="AssignOnPrimaryEniInClusterVpc",
            actions=["ec2:AssignPrivateIpAddresses", "ec2:UnassignPrivateIpAddresses"],
            resources=[eni],
            conditions={"StringEquals": {"ec2:Vpc": vpc_arn}},
        ),
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
            actions=["ec2:CreateTags", "ec2:DeleteTags"],
            resources=[eni],
            conditions={
                **_cluster_eni(cfg),
                "ForAllValues:StringEquals": {"aws:TagKeys": [names.TAG_GC_MARK]},
            },
        ),
        iam.PolicyStatement(
            sid="GcDeleteClusterTaggedEni",
            actions=["ec2:DeleteNetworkInterface"],
            resources=[eni],
            conditions=_cluster_eni(cfg),
        ),
    ]


def allocator_result_queues(cfg: StackConfig, arns: Arns) -> iam.PolicyStatement:
    return iam.PolicyStatement(
        sid="SendToClusterResultQueues",
        actions=["sqs:SendMessage", "sqs:GetQueueUrl", "sqs:GetQueueAttributes"],
        resources=[arns.result_queues(cfg.cluster)],
    )


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
            sid="OwnResultQueueUnderClusterPrefix",
            actions=[
                # Exactly what node_agent/agent.py calls: no SetQueueAttributes
                # or TagQueue, so one node cannot rewrite another's queue policy.
                "sqs:CreateQueue",
                "sqs:GetQueueUrl",
                "sqs:GetQueueAttributes",
                "sqs:ReceiveMessage",
                "sqs:DeleteMessage",
            ],
            resources=[arns.result_queues(cfg.cluster)],
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
