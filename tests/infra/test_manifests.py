"""Kubernetes manifests: rendered from stack outputs, validated offline against current schemas."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from infra import manifests
from infra import render_manifests as rm
from warmpool import names

IMAGE = "123456789012.dkr.ecr.eu-west-1.amazonaws.com/warmpool-agent:0.1.0"
CFN_OUTPUTS = {
    "Region": "eu-west-1",
    "Cluster": "demo",
    "ReportsQueueUrl": "https://sqs.eu-west-1.amazonaws.com/123456789012/warmpool-demo-reports",
    "ResultQueuePrefix": "warmpool-demo-result-",
    "LedgerTable": "warmpool-demo-ledger",
    "BucketsTable": "warmpool-token-buckets",
    "DlqUrl": "https://sqs.eu-west-1.amazonaws.com/123456789012/warmpool-demo-reports-dlq",
    "AgentRoleArn": "arn:aws:iam::123456789012:role/warmpool-demo-AgentRole",
    "AgentIdentity": "pod-identity",
    "AgentNamespace": "kube-system",
    "AgentServiceAccount": "warmpool-agent",
    "DashboardName": "warmpool-demo",
    "AlarmTopicArn": "arn:aws:sns:eu-west-1:123456789012:warmpool-demo-AlarmTopic",
}


def _latest_schema_version() -> str:
    return str(kubernetes_validate.latest_version())


def _by_kind(docs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    assert len(found) == 1
    return found[0]


@pytest.fixture(scope="module")
def docs() -> list[dict[str, Any]]:
    return rm.render(rm.load_outputs({"warmpool-demo": CFN_OUTPUTS}), image=IMAGE)


def test_schemas_are_of_a_current_release() -> None:
    major, minor = (int(p) for p in _latest_schema_version().split(".")[:2])
    assert (major, minor) >= (1, 33)


def test_rendered_manifests_validate_strictly(docs: list[dict[str, Any]]) -> None:
    version = _latest_schema_version()
    assert {d["kind"] for d in docs} == {"ServiceAccount", "ConfigMap", "DaemonSet"}
    for doc in docs:
        kubernetes_validate.validate(doc, version, strict=True)


def test_irsa_outputs_annotate_the_service_account_and_still_validate() -> None:
    docs = rm.render(rm.load_outputs({**CFN_OUTPUTS, "AgentIdentity": "irsa"}), image=IMAGE)
    sa = _by_kind(docs, "ServiceAccount")
    assert sa["metadata"]["annotations"] == {rm.IRSA_ANNOTATION: CFN_OUTPUTS["AgentRoleArn"]}
    kubernetes_validate.validate(sa, _latest_schema_version(), strict=True)


def test_pod_identity_needs_no_annotation(docs: list[dict[str, Any]]) -> None:
    assert "annotations" not in _by_kind(docs, "ServiceAccount")["metadata"]


def test_daemonset_host_network_capabilities_and_mounts(docs: list[dict[str, Any]]) -> None:
    pod = _by_kind(docs, "DaemonSet")["spec"]["template"]["spec"]
    assert pod["hostNetwork"] is True and pod["dnsPolicy"] == "Default"
    assert pod["serviceAccountName"] == "warmpool-agent"
    assert pod["priorityClassName"] == "system-node-critical"
    assert pod["nodeSelector"]["warmpool.io/enabled"] == "true"
    (agent,) = pod["containers"]
    assert agent["image"] == IMAGE
    assert "NET_ADMIN" in agent["securityContext"]["capabilities"]["add"]
    assert agent["securityContext"]["allowPrivilegeEscalation"] is False
    host_paths = {v["name"]: v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v}
    mounts = {m["mountPath"]: m for m in agent["volumeMounts"]}
    for path in (
        "/opt/cni/bin",
        "/etc/cni/net.d",
        "/var/run/netns",
        names.DEFAULT_STATE_DIR,
        "/run/warmpool",
    ):
        assert path in mounts, path
        # the netns directory by its real path: /var/run is a symlink on the host
        assert host_paths[mounts[path]["name"]] == ("/run/netns" if path == "/var/run/netns" else path)
    assert mounts["/var/run/netns"]["mountPropagation"] == "HostToContainer"
    assert agent["resources"]["requests"] and agent["resources"]["limits"]["memory"]


def test_the_agent_reads_the_kubelets_config_directories_read_only(docs: list[dict[str, Any]]) -> None:
    """Issue 24: the kubelet's own maxPods. Only the directories the agent's defaults name, at the
    same paths, read-only, and no other part of the host's /etc."""
    from node_agent.kubelet_config import DEFAULT_CONFIG_FILES, DEFAULT_FLAG_FILES

    pod = _by_kind(docs, "DaemonSet")["spec"]["template"]["spec"]
    (agent,) = pod["containers"]
    volumes = {v["name"]: v["hostPath"] for v in pod["volumes"] if "hostPath" in v}
    etc = {m["mountPath"]: m for m in agent["volumeMounts"] if m["mountPath"].startswith("/etc/")}
    wanted = {str(Path(p).parent) for p in DEFAULT_CONFIG_FILES} | set(DEFAULT_FLAG_FILES)
    assert wanted == {"/etc/kubernetes/kubelet", "/etc/systemd/system/kubelet.service.d"}
    assert set(etc) == wanted | {"/etc/cni/net.d"}
    for path in wanted | {"/etc/cni/net.d"}:
        assert etc[path]["readOnly"] is True, path
        assert volumes[etc[path]["name"]] == {"path": path, "type": "DirectoryOrCreate"}


def test_agent_environment_matches_the_shared_names(docs: list[dict[str, Any]]) -> None:
    pod = _by_kind(docs, "DaemonSet")["spec"]["template"]["spec"]
    (agent,) = pod["containers"]
    env = {e["name"]: e.get("value") for e in agent["env"]}
    assert env[names.AGENT_ENV_SOCKET] == names.DEFAULT_SOCKET
    assert env[names.AGENT_ENV_STATE_DIR] == names.DEFAULT_STATE_DIR
    assert env[names.AGENT_ENV_METRICS_ADDR] == names.DEFAULT_METRICS_ADDR
    assert agent["envFrom"] == [{"configMapRef": {"name": "warmpool-config"}}]
    config = _by_kind(docs, "ConfigMap", "warmpool-config")["data"]
    assert config[names.AGENT_ENV_REPORTS_QUEUE_URL] == CFN_OUTPUTS["ReportsQueueUrl"]
    assert config[names.AGENT_ENV_RESULT_QUEUE_PREFIX] == CFN_OUTPUTS["ResultQueuePrefix"]
    assert config["CLUSTER_NAME"] == "demo" and config["AWS_REGION"] == "eu-west-1"
    for key in (
        "WARM_IP_TARGET",
        "MINIMUM_IP_TARGET",
        "WARM_ENI_TARGET",
        "WARM_PREFIX_TARGET",
        "MAX_ENI",
        "ENABLE_PREFIX_DELEGATION",
        "AWS_VPC_ENI_MTU",
        "IP_COOLDOWN_PERIOD",
    ):
        assert key in config and isinstance(config[key], str)


def test_probes_hit_the_agents_loopback_health_endpoints(docs: list[dict[str, Any]]) -> None:
    (agent,) = _by_kind(docs, "DaemonSet")["spec"]["template"]["spec"]["containers"]
    host, port = names.DEFAULT_METRICS_ADDR.split(":")
    assert agent["livenessProbe"]["httpGet"] == {"host": host, "path": "/healthz", "port": int(port)}
    assert agent["readinessProbe"]["httpGet"] == {"host": host, "path": "/readyz", "port": int(port)}


def test_init_container_installs_the_plugin_and_conflist(docs: list[dict[str, Any]]) -> None:
    pod = _by_kind(docs, "DaemonSet")["spec"]["template"]["spec"]
    (init,) = pod["initContainers"]
    assert init["image"] == IMAGE and init["command"] == ["/opt/warmpool/install-cni.sh"]
    mounts = {m["mountPath"] for m in init["volumeMounts"]}
    assert {"/host/opt/cni/bin", "/host/etc/cni/net.d", "/etc/warmpool-cni"} <= mounts
    conflists = _by_kind(docs, "ConfigMap", "warmpool-cni")["data"]
    (name,) = conflists
    assert name.endswith(".conflist") and name < "10-aws.conflist"  # sorts before aws-node's
    conf = json.loads(conflists[name])
    assert conf["cniVersion"] == "1.0.0" and conf["plugins"][0]["type"] == "warmpool-cni"
    assert conf["plugins"][0]["socket"] == names.DEFAULT_SOCKET


def test_only_the_init_container_is_privileged_and_it_reads_the_node_settings(docs: list[dict[str, Any]]) -> None:
    # /proc/sys is read-only in an unprivileged container: the init container
    # (privileged, runs once) writes ip_forward and rp_filter; the agent is not
    # privileged and only checks them (/readyz). It reads the same ConfigMap, so
    # AWS_VPC_K8S_CNI_CONFIGURE_RPFILTER / AWS_VPC_CNI_NODE_PORT_SUPPORT reach it.
    pod = _by_kind(docs, "DaemonSet")["spec"]["template"]["spec"]
    (init,) = pod["initContainers"]
    assert init["securityContext"]["privileged"] is True
    assert {"configMapRef": {"name": "warmpool-config"}} in init["envFrom"]
    for c in pod["containers"]:
        assert not c["securityContext"].get("privileged", False), c["name"]


@pytest.mark.parametrize(
    "document",
    [
        {"warmpool-demo": CFN_OUTPUTS},  # cdk deploy --outputs-file
        {
            "Stacks": [
                {
                    "StackName": "warmpool-demo",
                    "Outputs": [{"OutputKey": k, "OutputValue": v} for k, v in CFN_OUTPUTS.items()],
                }
            ]
        },
        {
            "endpoint": "http://127.0.0.1:4566",
            "region": "eu-west-1",
            "cluster": "demo",  # warmpool local up
            "reports_queue_url": CFN_OUTPUTS["ReportsQueueUrl"],
            "result_queue_prefix": "warmpool-demo-result-",
            "ledger_table": "warmpool-demo-ledger",
            "buckets_table": "warmpool-token-buckets",
        },
    ],
)
def test_every_outputs_format_is_understood(document: dict[str, Any]) -> None:
    outputs = rm.load_outputs(document)
    assert outputs["cluster"] == "demo" and outputs["reports_queue_url"] == CFN_OUTPUTS["ReportsQueueUrl"]


def test_ambiguous_or_incomplete_outputs_are_refused() -> None:
    with pytest.raises(rm.RenderError, match="--stack"):
        rm.load_outputs({"a": CFN_OUTPUTS, "b": CFN_OUTPUTS})
    with pytest.raises(rm.RenderError, match="reports_queue_url"):
        rm.render({"cluster": "demo", "region": "eu-west-1", "result_queue_prefix": "x"}, image=IMAGE)
    with pytest.raises(rm.RenderError, match="--image"):
        rm.render(rm.load_outputs(CFN_OUTPUTS), image="warmpool-agent")
    with pytest.raises(rm.RenderError, match="agent_role_arn"):
        rm.render({**rm.load_outputs(CFN_OUTPUTS), "agent_identity": "irsa", "agent_role_arn": ""}, image=IMAGE)


def test_command_line_writes_one_applyable_file(tmp_path: Path) -> None:
    outputs = tmp_path / "cdk-outputs.json"
    outputs.write_text(json.dumps({"warmpool-demo": CFN_OUTPUTS}))
    code = rm.main(["--outputs", str(outputs), "--image", IMAGE, "--out-dir", str(tmp_path / "out")])
    assert code == 0
    docs = list(yaml.safe_load_all((tmp_path / "out" / "warmpool.yaml").read_text()))
    assert [d["kind"] for d in docs] == ["ServiceAccount", "ConfigMap", "ConfigMap", "DaemonSet"]
    assert rm.main(["--outputs", str(tmp_path / "missing.json"), "--image", IMAGE]) == 2


def test_templates_use_only_placeholders_the_renderer_fills() -> None:
    known = set(manifests.PLACEHOLDERS)  # the renderer fills exactly these (infra/manifests.py)
    assert {"CLUSTER", "REGION", "REPORTS_QUEUE_URL", "RESULT_QUEUE_PREFIX", "IMAGE", "DNS_POLICY"} <= known
    for name in rm.TEMPLATES:
        used = set(re.findall(r"\$\{([A-Z0-9_]+)\}", (rm.K8S_DIR / name).read_text()))
        assert used <= known, name
    docs = rm.render(rm.load_outputs(CFN_OUTPUTS), image=IMAGE)
    assert "${" not in json.dumps(docs)  # nothing left unfilled


def test_strict_validation_would_catch_a_misspelt_field(docs: list[dict[str, Any]]) -> None:
    broken = json.loads(json.dumps(_by_kind(docs, "DaemonSet")))
    broken["spec"]["template"]["spec"]["hostNetwrok"] = True
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, _latest_schema_version(), strict=True)


def test_the_node_uninstall_pod_is_filled_the_same_by_the_move_script_and_by_python() -> None:
    # scripts/move-node.sh fills k8s/node-uninstall-pod.yaml with sed, the e2e tier with
    # manifests.node_uninstall_pod: both fill every placeholder the file has, and no other.
    text = (manifests.K8S_DIR / manifests.NODE_UNINSTALL_POD).read_text()
    assert set(manifests.PLACEHOLDER_RE.findall(text)) == {"IMAGE", "NODE_NAME", "NAMESPACE"}
    script = (Path(__file__).resolve().parents[2] / "scripts" / "move-node.sh").read_text()
    assert set(re.findall(r"s\|\\\$\{([A-Z_]+)\}\|", script)) == {"IMAGE", "NODE_NAME", "NAMESPACE"}
    pod = manifests.node_uninstall_pod(image="repo/agent@sha256:" + "0" * 64, node="ip-10-0-0-9", namespace="ns1")
    assert "${" not in json.dumps(pod)
    assert (pod["metadata"]["namespace"], pod["spec"]["nodeName"]) == ("ns1", "ip-10-0-0-9")
    (c,) = pod["spec"]["containers"]
    assert c["image"] == "repo/agent@sha256:" + "0" * 64
    assert "warmpool-agent uninstall" in c["command"][-1] and "05-warmpool.conflist" in c["command"][-1]
    kubernetes_validate.validate(pod, "1.30", strict=True)
