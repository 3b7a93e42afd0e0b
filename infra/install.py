"""The node half, installed by the stack into an existing EKS cluster (``-c eks_cluster=NAME``).

The agent image is a CDK image asset built from ``infra/docker/agent.Dockerfile`` and
pushed to the bootstrap's ECR repository; the ServiceAccount, ConfigMaps and DaemonSet
are :func:`infra.manifests.render` of the stack's own values (queue URL, result queue
prefix, region, the image's URI: tokens CloudFormation fills in), applied through the
cluster's kubectl handler (``KubernetesManifest`` on the imported cluster). The agent's
credentials come from the stack's Pod Identity association (or the IRSA annotation).
The agent needs no Kubernetes API access: the objects bind no RBAC role and its
ServiceAccount mounts no token.
"""

from __future__ import annotations

from typing import Any

from aws_cdk import Aws, CfnOutput
from aws_cdk import aws_ecr_assets as ecr_assets
from aws_cdk import aws_eks as eks
from aws_cdk import aws_iam as iam
from constructs import Construct

from infra import manifests
from infra.asset import AGENT_DOCKERFILE, stage_agent_image_context
from infra.config import StackConfig
from infra.outputs import INSTALL_OUTPUTS

PLATFORMS = {"linux/amd64": ecr_assets.Platform.LINUX_AMD64, "linux/arm64": ecr_assets.Platform.LINUX_ARM64}


def object_names(documents: list[dict[str, Any]]) -> str:
    """``Kind namespace/name`` of each object, comma-separated (the InstalledObjects output)."""
    return ", ".join(f"{d['kind']} {d['metadata'].get('namespace', '')}/{d['metadata']['name']}" for d in documents)


class NodeInstall(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: StackConfig,
        reports_queue_url: str,
        result_queue_prefix: str,
        agent_role: iam.IRole,
    ) -> None:
        super().__init__(scope, construct_id)
        cfg = config
        assert cfg.eks_cluster is not None and cfg.kubectl_role_arn is not None
        self.image = ecr_assets.DockerImageAsset(
            self,
            "AgentImage",
            directory=str(stage_agent_image_context()),
            file=AGENT_DOCKERFILE,
            platform=PLATFORMS[cfg.agent_image_platform],
        )
        self.cluster = eks.Cluster.from_cluster_attributes(
            self,
            "Cluster",
            cluster_name=cfg.eks_cluster,
            kubectl_role_arn=cfg.kubectl_role_arn,
            kubectl_layer=_kubectl_layer(self),
        )
        self.values: dict[str, Any] = {
            "cluster": cfg.cluster,
            "region": Aws.REGION,
            "reportsQueueUrl": reports_queue_url,
            "resultQueuePrefix": result_queue_prefix,
            "agentNamespace": cfg.agent_namespace,
            "agentServiceAccount": cfg.agent_service_account,
            "agentIdentity": cfg.agent_identity,
            "agentRoleArn": agent_role.role_arn,
            "image": {"repository": self.image.repository.repository_uri, "tag": self.image.image_tag},
            "env": {**cfg.agent_env_from_context(), **cfg.agent_settings},
        }
        self.documents = manifests.render(self.values)
        self.manifest = eks.KubernetesManifest(
            self, "AgentObjects", cluster=self.cluster, manifest=self.documents, overwrite=True
        )
        outputs = {
            "eks_cluster": cfg.eks_cluster,
            "agent_image_uri": self.image.image_uri,
            "installed_objects": object_names(self.documents),
        }
        assert outputs.keys() == INSTALL_OUTPUTS.keys()
        for key, output_id in INSTALL_OUTPUTS.items():
            CfnOutput(scope, output_id, value=outputs[key], description=key)


def _kubectl_layer(scope: Construct) -> Any:
    """kubectl, helm and the AWS CLI for the handler (``aws-cdk.lambda-layer-kubectl-v33``)."""
    from aws_cdk.lambda_layer_kubectl_v33 import KubectlV33Layer

    return KubectlV33Layer(scope, "KubectlLayer")
