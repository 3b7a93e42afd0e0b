"""cdk-nag AwsSolutions findings the stack keeps on purpose, each with its reason.

cdk-nag v3 reports through CDK's policy-validation plugins; each finding kept here
is acknowledged on the construct it belongs to (``Validations.of(c).acknowledge``).
Anything not listed fails ``cdk synth``.
"""

from __future__ import annotations

from dataclasses import dataclass

from aws_cdk import Acknowledgment, Validations
from constructs import IConstruct

from warmpool import names

ENI = "Resource::arn:<AWS::Partition>:ec2:<AWS::Region>:<AWS::AccountId>:network-interface/*"
INSTANCE = "Resource::arn:<AWS::Partition>:ec2:<AWS::Region>:<AWS::AccountId>:instance/*"
GROUP = "Resource::arn:<AWS::Partition>:ec2:<AWS::Region>:<AWS::AccountId>:security-group/*"
SUBNET = "Resource::arn:<AWS::Partition>:ec2:<AWS::Region>:<AWS::AccountId>:subnet/*"


def result_queues(cluster: str) -> str:
    return f"Resource::arn:<AWS::Partition>:sqs:<AWS::Region>:<AWS::AccountId>:{names.result_queue(cluster, '*')}"


@dataclass(frozen=True)
class Acknowledgement:
    construct_path: str  # relative to the stack
    rule: str
    reason: str

    @property
    def finding_id(self) -> str:
        return f"AwsSolutions::{self.rule}"


REASON_DESCRIBE = (
    "EC2 Describe* calls support no resource-level permissions; the functions only read "
    "ENIs, instances, instance types, subnets and security groups."
)
REASON_ENI = (
    "ENI ids are unknown before creation; every statement on network-interface/* is bound by "
    "aws:ResourceTag/cluster.k8s.amazonaws.com/name, aws:RequestTag (create) or ec2:Vpc conditions."
)
REASON_INSTANCE = (
    "Nodes come and go; attach/detach is bound to instances tagged kubernetes.io/cluster/<name> "
    "(owned|shared) by an ec2:ResourceTag condition."
)
REASON_INSTANCE_REPAIR = (
    "The DeleteOnTermination repair modifies attachments on instances tagged kubernetes.io/cluster/<name> "
    "(owned|shared) only, by an ec2:ResourceTag condition; nodes come and go."
)
REASON_GROUP = (
    "No security_group_ids configured: pod ENIs take the node's primary ENI groups, bound to the "
    "cluster's VPC by an ec2:Vpc condition."
)
REASON_SUBNET = (
    "Subnets are chosen by tag (subnet_tag, or subnet_discovery's kubernetes.io/role/cni): bound by "
    "aws:ResourceTag and ec2:Vpc conditions; GetSubnetCidrReservations, a read, on any subnet (named "
    "placement reads the reservations of the subnets it names addresses in)."
)
REASON_RESULT = (
    "One result queue per node, named warmpool-<cluster>-result-<instance-id>: the wildcard is "
    "the cluster's own prefix, never another cluster's."
)
REASON_LIST_QUEUES = "sqs:ListQueues has no resource type; reconcile lists by the cluster's prefix."
REASON_RUNTIME = (
    "Pinned to a Python runtime the public Powertools v3 arm64 layer is published for (python_version "
    "context, 3.12 or 3.13); the code is pure Python and moves with the layer."
)


def acknowledgements(cluster: str, *, wildcard_groups: bool, tagged_subnets: bool) -> list[Acknowledgement]:
    acks = [
        Acknowledgement("AllocateRole", "AwsSolutions-IAM5[Resource::*]", REASON_DESCRIBE),
        Acknowledgement("ReconcileRole", "AwsSolutions-IAM5[Resource::*]", REASON_DESCRIBE + " " + REASON_LIST_QUEUES),
        Acknowledgement("AllocateRole", f"AwsSolutions-IAM5[{ENI}]", REASON_ENI),
        Acknowledgement("ReconcileRole", f"AwsSolutions-IAM5[{ENI}]", REASON_ENI),
        Acknowledgement("AllocateRole", f"AwsSolutions-IAM5[{INSTANCE}]", REASON_INSTANCE),
        Acknowledgement("ReconcileRole", f"AwsSolutions-IAM5[{INSTANCE}]", REASON_INSTANCE_REPAIR),
        Acknowledgement("AllocateRole", f"AwsSolutions-IAM5[{result_queues(cluster)}]", REASON_RESULT),
        Acknowledgement("ReconcileRole", f"AwsSolutions-IAM5[{result_queues(cluster)}]", REASON_RESULT),
        Acknowledgement("AgentPolicy", f"AwsSolutions-IAM5[{result_queues(cluster)}]", REASON_RESULT),
        Acknowledgement(
            "AgentPolicy",
            "AwsSolutions-IAM5[Resource::*]",
            "DescribeNetworkInterfaces supports no resource-level permissions; the agent reads only its "
            "own instance's ENIs (filtered by attachment.instance-id) to learn which carry no_manage.",
        ),
        Acknowledgement("Allocate", "AwsSolutions-L1", REASON_RUNTIME),
        Acknowledgement("Reconcile", "AwsSolutions-L1", REASON_RUNTIME),
    ]
    if wildcard_groups:
        acks.append(Acknowledgement("AllocateRole", f"AwsSolutions-IAM5[{GROUP}]", REASON_GROUP))
    if tagged_subnets:
        acks.append(Acknowledgement("AllocateRole", f"AwsSolutions-IAM5[{SUBNET}]", REASON_SUBNET))
    return acks


REASON_KUBECTL = (
    "aws-cdk-lib's own kubectl handler for the imported EKS cluster (eks_cluster): CDK builds its nested stack, "
    "roles and runtime; it runs only at deploy time, assuming kubectl_role_arn to apply the agent's objects."
)
KUBECTL_FINDINGS = (
    "AwsSolutions-L1",
    "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole]",
    "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/AmazonEC2ContainerRegistryPullOnly]",
    'AwsSolutions-IAM4[Policy::{"Fn::If":["HandlerHasEcrPublic195AF58A",{"Fn::Join":["",["arn:",{"Ref":'
    '"AWS::Partition"},":iam::aws:policy/AmazonElasticContainerRegistryPublicReadOnly"]]},{"Ref":"AWS::NoValue"}]}]',
    "AwsSolutions-IAM5[Resource::<Handler886CB40B.Arn>:*]",
)


def kubectl_provider_acknowledgements(construct_path: str) -> list[Acknowledgement]:
    """The findings on CDK's kubectl provider (a nested stack at ``construct_path``)."""
    return [Acknowledgement(construct_path, rule, REASON_KUBECTL) for rule in KUBECTL_FINDINGS]


def acknowledge(stack: IConstruct, acks: list[Acknowledgement]) -> None:
    for ack in acks:
        target = stack.node.find_child(ack.construct_path)
        Validations.of(target).acknowledge(Acknowledgment(id=ack.finding_id, reason=ack.reason))
