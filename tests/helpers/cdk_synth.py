"""The stack variants the infra tests synthesize, and the synthesized template
with helpers to find resources and policy statements in it."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from emulated.iid import IdentitySigner
from infra.policy_snapshot import resolve

os.environ.setdefault("JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION", "1")
os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "14,16,18,20,22")  # Node's major versions
os.environ.setdefault("JSII_SILENCE_WARNING_UNTESTED_NODE_VERSION", "1")

CDK_JSON = Path(__file__).resolve().parents[2] / "cdk.json"

# Stands in for a region's own AWS certificate (any RSA certificate will do here).
OTHER_REGION_CERTIFICATE = IdentitySigner(common_name="ap-east-1 stand-in").certificate_pem

KUBECTL_ROLE_ARN = "arn:aws:iam::123456789012:role/warmpool-kubectl"
BASE_CONTEXT: dict[str, Any] = {
    "cluster": "demo",
    "vpc_id": "vpc-0123456789abcdef0",
    "subnet_ids": "subnet-0123456789abcdef0,subnet-0123456789abcdef1",
    "create_buckets_table": "true",
}

VARIANTS: dict[str, dict[str, Any]] = {
    # first cluster of the account: creates the shared buckets table, Pod Identity
    "default": {},
    # second cluster: imports the buckets table; IRSA; subnets by tag; fixed security groups
    "irsa": {
        "cluster": "second",
        "subnet_ids": None,
        "subnet_tag": "warmpool.io/pods=true",
        "security_group_ids": "sg-0123456789abcdef0",
        # custom networking (issue 24): one zone's pods in a subnet and group of their own
        "custom_network": '{"eu-west-1a": {"subnets": ["subnet-0123456789abcdefc"], '
        '"security_groups": ["sg-0123456789abcdefc"]}}',
        "create_buckets_table": "false",
        "agent_identity": "irsa",
        "oidc_provider_arn": "arn:aws:iam::123456789012:oidc-provider/oidc.eks.eu-west-1.amazonaws.com/id/ABC123",
        "batch_size": "10",
        "batching_window_s": "0",
        "max_concurrency": "2",
        "allocate_timeout_s": "60",
        # a region with its own AWS certificate (chosen at deploy time by AWS::Region)
        "identity_certificates_by_region": {"ap-east-1": OTHER_REGION_CERTIFICATE},
    },
    # pod subnets discovered by the VPC CNI's tags (issue 24): no list, no tag of its own
    # ... with named placement (issue 24: prefixes that do not fragment)
    "discovery": {
        "cluster": "disc",
        "subnet_ids": None,
        "subnet_discovery": "true",
        "create_buckets_table": "false",
        "named_placement": "true",
        # fair sharing's threshold (issue 24): the allocator's WARMPOOL_SCARCE_FREE
        "scarce_free": "16",
    },
    # both halves: the node half installed into an existing EKS cluster (Pod Identity)
    "eks": {
        "eks_cluster": "demo",
        "kubectl_role_arn": KUBECTL_ROLE_ARN,
        "agent_settings": '{"WARM_IP_TARGET": "5", "ENABLE_PREFIX_DELEGATION": "false"}',
    },
    # both halves, IRSA for the agent (clusters without the Pod Identity agent), arm64 nodes
    "eks_irsa": {
        "cluster": "fourth",
        "create_buckets_table": "false",
        "eks_cluster": "prod-eks",
        "kubectl_role_arn": KUBECTL_ROLE_ARN,
        "agent_identity": "irsa",
        "oidc_provider_arn": "arn:aws:iam::123456789012:oidc-provider/oidc.eks.eu-west-1.amazonaws.com/id/ABC123",
        "agent_image_platform": "linux/arm64",
        # fair sharing on the nodes (issue 24): the agents' WARMPOOL_LEAN_HOLD_S
        "lean_hold_s": "120",
    },
    # SenderId binding through the nodes' instance role
    "node_role": {
        "cluster": "third",
        "create_buckets_table": "false",
        "agent_identity": "node-role",
        "node_role_name": "eks-node-role",
    },
}


@dataclass
class Synthesized:
    name: str
    stack_name: str
    template: dict[str, Any]  # raw
    resolved: dict[str, Any]  # intrinsics flattened
    template_path: Path
    nag_report: dict[str, Any]
    acknowledgements: list[Any]
    asset_dirs: list[Path] = field(default_factory=list)

    def resources(self, type_: str) -> dict[str, dict[str, Any]]:
        return {k: v for k, v in self.resolved["Resources"].items() if v["Type"] == type_}

    def one(self, type_: str, predicate: Callable[[dict[str, Any]], bool] = lambda r: True) -> dict[str, Any]:
        found = [r for r in self.resources(type_).values() if predicate(r)]
        assert len(found) == 1, f"{len(found)} {type_} match"
        return found[0]

    def logical_id(self, type_: str, predicate: Callable[[dict[str, Any]], bool]) -> str:
        found = [k for k, r in self.resources(type_).items() if predicate(r)]
        assert len(found) == 1, f"{len(found)} {type_} match"
        return found[0]

    def statements(self) -> list[tuple[str, dict[str, Any]]]:
        """Every identity-policy statement, with the logical id of the policy holding it."""
        out = []
        for logical_id, res in self.resolved["Resources"].items():
            if res["Type"] in ("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy"):
                for st in res["Properties"]["PolicyDocument"]["Statement"]:
                    out.append((logical_id, st))
        return out

    def role_statements(self, role_prefix: str) -> list[dict[str, Any]]:
        """The statements of the inline policies attached to the role whose logical id
        starts with ``role_prefix`` (``AllocateRole``, ``ReconcileRole``)."""
        out: list[dict[str, Any]] = []
        for res in self.resolved["Resources"].values():
            if res["Type"] == "AWS::IAM::Policy" and res["Properties"]["Roles"][0].startswith("${" + role_prefix):
                out += res["Properties"]["PolicyDocument"]["Statement"]
        return out

    def allocate_env(self) -> dict[str, str]:
        """The allocate function's environment variables."""
        from warmpool import names

        return next(
            r["Properties"]["Environment"]["Variables"]
            for r in self.resources("AWS::Lambda::Function").values()
            if r["Properties"].get("Handler") == names.ALLOCATE_HANDLER
        )

    def statement(self, sid: str) -> dict[str, Any]:
        found = [st for _, st in self.statements() if st.get("Sid") == sid]
        assert len(found) == 1, f"{len(found)} statements with Sid {sid}"
        return found[0]


def _synth(name: str, overrides: dict[str, Any], outdir: Path) -> Synthesized:
    from aws_cdk import App

    from infra.app import build
    from infra.config import config_from_context

    context = {**BASE_CONTEXT, **overrides}
    config = config_from_context(context)
    # the feature flags of cdk.json, so tests synthesize what `npx cdk synth` does
    flags = {k: v for k, v in json.loads(CDK_JSON.read_text())["context"].items() if k.startswith("@")}
    app = App(outdir=str(outdir), context=flags)
    stack = build(app, config)
    app.synth()
    template_path = outdir / f"{stack.stack_name}.template.json"
    template = json.loads(template_path.read_text())
    report = json.loads((outdir / "validation-report.json").read_text())
    return Synthesized(
        name=name,
        stack_name=stack.stack_name,
        template=template,
        resolved=resolve(template),
        template_path=template_path,
        nag_report=report,
        acknowledgements=list(stack.nag_acknowledgements),
        asset_dirs=sorted(p for p in outdir.iterdir() if p.is_dir() and p.name.startswith("asset.")),
    )
