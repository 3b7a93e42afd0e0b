"""One ``cdk deploy`` for both halves (``-c eks_cluster=NAME``): the synthesized template
holds the agent image asset, the Pod Identity association and the node half's objects
with the stack's own values; without ``eks_cluster`` the template is what it was."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra import manifests
from infra.config import StackConfigError, config_from_context
from infra.outputs import INSTALL_OUTPUTS, OUTPUTS
from tests.helpers.cdk_synth import BASE_CONTEXT, KUBECTL_ROLE_ARN, Synthesized
from tests.runtime import manifest as runtime_manifest
from warmpool import names

FIXTURES = Path(__file__).resolve().parent / "fixtures"
MANIFEST_TYPE = "Custom::AWSCDK-EKS-KubernetesResource"
INSTALL_TYPES = {MANIFEST_TYPE, "AWS::CloudFormation::Stack", "AWS::Lambda::LayerVersion"}


@pytest.fixture(scope="module")
def eks(synth_variant: Callable[[str], Synthesized]) -> Synthesized:
    return synth_variant("eks")


@pytest.fixture(scope="module")
def eks_irsa(synth_variant: Callable[[str], Synthesized]) -> Synthesized:
    return synth_variant("eks_irsa")


def _objects(s: Synthesized) -> list[dict[str, Any]]:
    """The applied objects, less the label CDK adds to each so that a later deploy prunes
    an object this one no longer has (``aws.cdk.eks/prune-<hash>``, one per object)."""
    (res,) = s.resources(MANIFEST_TYPE).values()
    manifest = res["Properties"]["Manifest"]
    assert isinstance(manifest, str), manifest  # every token flattened by resolve()
    docs = list(json.loads(manifest))
    for doc in docs:
        labels = doc["metadata"]["labels"]
        (prune,) = [k for k in labels if k.startswith("aws.cdk.eks/prune-")]
        del labels[prune]
    return docs


def _by_kind(docs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    (found,) = [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    return found


def _docker_asset(s: Synthesized) -> tuple[str, dict[str, Any]]:
    assets = json.loads((s.template_path.parent / f"{s.stack_name}.assets.json").read_text())
    ((asset_id, asset),) = assets["dockerImages"].items()
    return asset_id, asset


def test_without_eks_cluster_the_template_is_todays(default: Synthesized) -> None:
    """The logical ids and types of the serverless half, pinned from the template before
    the install existed (``tests/infra/fixtures/default-resources.json``), and its outputs."""
    pinned = json.loads((FIXTURES / "default-resources.json").read_text())
    assert {k: v["Type"] for k, v in default.template["Resources"].items()} == pinned["resources"]
    assert sorted(default.template["Outputs"]) == pinned["outputs"] == sorted(OUTPUTS.values())
    assert (
        not (default.template_path.parent / f"{default.stack_name}.assets.json").read_text().count('dockerImages": {"')
    )


def test_eks_cluster_only_adds_the_install(default: Synthesized, eks: Synthesized) -> None:
    """Every resource and output of the serverless half is unchanged; what is added is the install."""
    base, full = default.resolved, eks.resolved
    for logical_id, res in base["Resources"].items():
        assert full["Resources"][logical_id] == res, logical_id
    added = {k: v["Type"] for k, v in full["Resources"].items() if k not in base["Resources"]}
    assert set(added.values()) <= INSTALL_TYPES, added
    assert MANIFEST_TYPE in added.values()
    assert set(full["Outputs"]) - set(base["Outputs"]) == set(INSTALL_OUTPUTS.values())
    for key in base["Outputs"]:
        assert full["Outputs"][key] == base["Outputs"][key]


def test_the_image_is_the_asset_built_from_the_repos_dockerfile(eks: Synthesized) -> None:
    asset_id, asset = _docker_asset(eks)
    source = asset["source"]
    assert source["dockerFile"] == "infra/docker/agent.Dockerfile" and source["platform"] == "linux/amd64"
    staged = eks.template_path.parent / source["directory"]
    root = Path(__file__).resolve().parents[2]
    assert (staged / source["dockerFile"]).read_text() == (root / "infra/docker/agent.Dockerfile").read_text()
    for path in ("pyproject.toml", "warmpool/__init__.py", "node_agent/agent.py", "infra/docker/install-cni.sh"):
        assert (staged / path).is_file(), path
    assert not (staged / "tests").exists() and not (staged / ".venv").exists()
    (destination,) = asset["destinations"].values()
    pod = _by_kind(_objects(eks), "DaemonSet")["spec"]["template"]["spec"]
    image = f"{destination['repositoryName']}:{destination['imageTag']}"
    for container in pod["containers"] + pod["initContainers"]:
        assert container["image"].endswith("/" + image), container["image"]
        assert container["image"].startswith("${AWS::AccountId}.dkr.ecr.${AWS::Region}.")
    assert destination["imageTag"] == asset_id


def test_arm64_nodes_get_an_arm64_image(eks_irsa: Synthesized) -> None:
    assert _docker_asset(eks_irsa)[1]["source"]["platform"] == "linux/arm64"


def test_the_objects_are_the_charts_with_the_stacks_values(eks: Synthesized) -> None:
    docs = _objects(eks)
    config = _by_kind(docs, "ConfigMap", "warmpool-config")["data"]
    reports_ref = config["WARMPOOL_REPORTS_QUEUE_URL"]
    assert reports_ref == eks.resolved["Outputs"]["ReportsQueueUrl"]["Value"]
    assert config["AWS_REGION"] == "${AWS::Region}" and config["CLUSTER_NAME"] == "demo"
    assert config["WARMPOOL_RESULT_QUEUE_PREFIX"] == "warmpool-demo-result-"
    assert config["WARM_IP_TARGET"] == "5"  # agent_settings
    _, asset = _docker_asset(eks)
    (destination,) = asset["destinations"].values()
    image = _by_kind(docs, "DaemonSet")["spec"]["template"]["spec"]["containers"][0]["image"]
    values = {
        "cluster": "demo",
        "region": "${AWS::Region}",
        "reportsQueueUrl": reports_ref,
        "resultQueuePrefix": "warmpool-demo-result-",
        "agentRoleArn": eks.resolved["Outputs"]["AgentRoleArn"]["Value"],
        "image": {"repository": image.rsplit(":", 1)[0], "tag": destination["imageTag"]},
        "env": {"WARM_IP_TARGET": "5", "ENABLE_PREFIX_DELEGATION": "false"},
    }
    assert docs == manifests.render(values)  # what `helm template` renders for these values
    assert [d["kind"] for d in docs] == ["ServiceAccount", "ConfigMap", "ConfigMap", "DaemonSet"]
    assert "annotations" not in _by_kind(docs, "ServiceAccount")["metadata"]  # Pod Identity


def test_the_agent_runs_with_the_privileges_the_runtime_tier_tests(eks: Synthesized, tmp_path: Path) -> None:
    daemonset = tmp_path / "daemonset.yaml"
    daemonset.write_text(yaml.safe_dump(_by_kind(_objects(eks), "DaemonSet")))
    assert runtime_manifest.load(daemonset) == runtime_manifest.load()
    pod = _by_kind(_objects(eks), "DaemonSet")["spec"]["template"]["spec"]
    source = manifests.templates()[-1]["spec"]["template"]["spec"]
    assert pod["containers"][0]["securityContext"] == source["containers"][0]["securityContext"]
    assert pod["initContainers"][0]["securityContext"] == source["initContainers"][0]["securityContext"]
    assert pod["hostNetwork"] is True and pod["automountServiceAccountToken"] is False


def test_pod_identity_binds_the_agents_service_account_in_the_named_cluster(eks: Synthesized) -> None:
    assoc = eks.one("AWS::EKS::PodIdentityAssociation")["Properties"]
    assert assoc["ClusterName"] == "demo"
    assert (assoc["Namespace"], assoc["ServiceAccount"]) == ("kube-system", "warmpool-agent")
    assert assoc["RoleArn"] == eks.resolved["Outputs"]["AgentRoleArn"]["Value"]
    sa = _by_kind(_objects(eks), "ServiceAccount")
    assert (sa["metadata"]["namespace"], sa["metadata"]["name"]) == ("kube-system", "warmpool-agent")


def test_irsa_annotates_the_service_account_and_makes_no_association(eks_irsa: Synthesized) -> None:
    assert eks_irsa.resources("AWS::EKS::PodIdentityAssociation") == {}
    sa = _by_kind(_objects(eks_irsa), "ServiceAccount")
    role = eks_irsa.resolved["Outputs"]["AgentRoleArn"]["Value"]
    assert sa["metadata"]["annotations"] == {manifests.IRSA_ANNOTATION: role}


def test_the_manifests_are_applied_through_the_named_kubectl_role(eks: Synthesized) -> None:
    (res,) = eks.resources(MANIFEST_TYPE).values()
    props = res["Properties"]
    assert props["ClusterName"] == "demo" and props["RoleArn"] == KUBECTL_ROLE_ARN
    assert props["Overwrite"] is True


def test_outputs_say_what_was_installed_where(eks: Synthesized) -> None:
    outputs = eks.resolved["Outputs"]
    assert outputs["EksCluster"]["Value"] == "demo"
    assert (
        outputs["AgentImageUri"]["Value"]
        == (_by_kind(_objects(eks), "DaemonSet")["spec"]["template"]["spec"]["containers"][0]["image"])
    )
    assert outputs["InstalledObjects"]["Value"] == (
        "ServiceAccount kube-system/warmpool-agent, ConfigMap kube-system/warmpool-config, "
        "ConfigMap kube-system/warmpool-cni, DaemonSet kube-system/warmpool-agent"
    )


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"eks_cluster": "demo"}, "kubectl_role_arn"),
        ({"kubectl_role_arn": KUBECTL_ROLE_ARN}, "only with eks_cluster"),
        ({"eks_cluster": "demo", "kubectl_role_arn": "warmpool-kubectl"}, "kubectl_role_arn: an IAM role ARN"),
        (
            {"eks_cluster": "demo", "kubectl_role_arn": KUBECTL_ROLE_ARN, "agent_settings": '{"WARM_IP_TARGT": "5"}'},
            "agent_settings: unknown settings WARM_IP_TARGT",
        ),
        ({"eks_cluster": "demo cluster", "kubectl_role_arn": KUBECTL_ROLE_ARN}, "eks_cluster: an EKS cluster name"),
        ({"lean_hold_s": "60"}, "lean_hold_s apply only with eks_cluster"),
        ({"eks_cluster": "demo", "kubectl_role_arn": KUBECTL_ROLE_ARN, "lean_hold_s": "3601"}, "lean_hold_s"),
        ({"eks_cluster": "demo", "kubectl_role_arn": KUBECTL_ROLE_ARN, "lean_hold_s": "-1"}, "lean_hold_s"),
        ({"eks_cluster": "demo", "kubectl_role_arn": KUBECTL_ROLE_ARN, "lean_hold_s": "soon"}, "lean_hold_s"),
    ],
)
def test_bad_install_context_is_refused_by_name(extra: dict[str, Any], message: str) -> None:
    with pytest.raises(StackConfigError, match=message):
        config_from_context({**BASE_CONTEXT, **extra})


def test_lean_hold_s_reaches_the_agents_configmap(eks: Synthesized, eks_irsa: Synthesized) -> None:
    """Fair sharing on the nodes (issue 24): ``-c lean_hold_s=N`` is the agents'
    WARMPOOL_LEAN_HOLD_S; unset, the chart's default (180), which the agent reads as its own."""
    from node_agent.config import load

    set_ = _by_kind(_objects(eks_irsa), "ConfigMap", "warmpool-config")["data"]
    assert set_[names.AGENT_ENV_LEAN_HOLD_S] == "120"
    assert load({**set_, "MY_NODE_NAME": "n"}).timing.lean_hold_s == 120.0
    unset = _by_kind(_objects(eks), "ConfigMap", "warmpool-config")["data"]
    assert unset[names.AGENT_ENV_LEAN_HOLD_S] == "180"
    assert load({**unset, "MY_NODE_NAME": "n"}).timing.lean_hold_s == names.LEAN_HOLD_DEFAULT_S


def test_agent_settings_win_over_lean_hold_s() -> None:
    cfg = config_from_context(
        {
            **BASE_CONTEXT,
            "eks_cluster": "demo",
            "kubectl_role_arn": KUBECTL_ROLE_ARN,
            "lean_hold_s": "60",
            "agent_settings": '{"WARMPOOL_LEAN_HOLD_S": "0"}',
        }
    )
    assert {**cfg.agent_env_from_context(), **cfg.agent_settings}[names.AGENT_ENV_LEAN_HOLD_S] == "0"
    assert cfg.agent_env_from_context()[names.AGENT_ENV_LEAN_HOLD_S] == "60"
