"""The Helm chart ``charts/warmpool``: generated from the manifests' one source, linted and
rendered by a real ``helm`` (built from the Go module proxy by ``e2e/build-helm.sh``,
cached under ``~/.cache/warmpool-e2e``), rendering the objects ``infra.manifests`` does,
and refusing bad values by its schema."""

from __future__ import annotations

import copy
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from infra import chart, manifests

ROOT = Path(__file__).resolve().parents[2]
# The first use builds helm from source (minutes on a shared machine); then it is cached.
pytestmark = [pytest.mark.timeout(1800), pytest.mark.slow]

VALUES: dict[str, Any] = {
    "cluster": "demo",
    "region": "eu-west-1",
    "reportsQueueUrl": "https://sqs.eu-west-1.amazonaws.com/123456789012/warmpool-demo-reports",
    "resultQueuePrefix": "warmpool-demo-result-",
    "image": {"repository": "123456789012.dkr.ecr.eu-west-1.amazonaws.com/warmpool-agent", "tag": "0.1.0"},
}
CASES: dict[str, dict[str, Any]] = {
    "defaults": VALUES,
    "irsa-and-vpc-cni-settings": {
        **VALUES,
        "agentNamespace": "warmpool",
        "agentServiceAccount": "agent",
        "agentIdentity": "irsa",
        "agentRoleArn": "arn:aws:iam::123456789012:role/warmpool-demo-AgentRole",
        "image": {"repository": VALUES["image"]["repository"], "digest": "sha256:" + "ab" * 32},
        "dnsPolicy": "Default",
        "updateStrategy": {"maxUnavailable": 1},
        "env": {
            "WARM_IP_TARGET": "5",
            "MINIMUM_IP_TARGET": 10,
            "WARM_ENI_TARGET": "",
            "ENABLE_PREFIX_DELEGATION": True,
            "WARM_PREFIX_TARGET": "1",
            "AWS_VPC_K8S_CNI_EXTERNALSNAT": "true",
            "AWS_VPC_K8S_CNI_EXCLUDE_SNAT_CIDRS": "10.1.0.0/16,192.168.0.0/24",
            "WARMPOOL_LEAN_HOLD_S": 90,
        },
    },
}


@pytest.fixture(scope="module")
def helm() -> str:
    built = subprocess.run(
        ["nice", "-n", "10", str(ROOT / "e2e" / "build-helm.sh")], capture_output=True, text=True, check=False
    )
    assert built.returncode == 0, built.stderr[-3000:]
    return built.stdout.strip().splitlines()[-1]


def _template(helm: str, values: dict[str, Any], tmp: Path) -> subprocess.CompletedProcess[str]:
    path = tmp / "values.yaml"
    path.write_text(yaml.safe_dump(values))
    return subprocess.run(
        [helm, "template", "warmpool", str(chart.CHART_DIR), "-f", str(path)], capture_output=True, text=True
    )


@pytest.fixture
def tmp(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path


def test_the_chart_on_disk_is_what_the_generator_makes() -> None:
    assert chart.differences() == []


def test_a_change_to_the_source_is_caught_as_out_of_step(tmp_path: Path) -> None:
    chart.write(tmp_path)
    assert chart.differences(tmp_path) == []
    (tmp_path / "templates" / "daemonset.yaml").write_text("# edited by hand\n")
    (tmp_path / "templates" / "extra.yaml").write_text("kind: ConfigMap\n")
    assert chart.differences(tmp_path) == ["templates/daemonset.yaml", "templates/extra.yaml"]
    assert chart.main(["--check", "--chart-dir", str(tmp_path)]) == 1


def test_every_placeholder_has_a_value_and_every_value_a_placeholder() -> None:
    assert manifests.placeholders_used() == set(manifests.PLACEHOLDERS)


def test_values_are_named_after_the_vpc_cni_settings() -> None:
    env = chart.schema()["properties"]["env"]["properties"]
    for name in (
        "WARM_IP_TARGET",
        "MINIMUM_IP_TARGET",
        "WARM_ENI_TARGET",
        "WARM_PREFIX_TARGET",
        "ENABLE_PREFIX_DELEGATION",
        "AWS_VPC_K8S_CNI_EXTERNALSNAT",
        "MAX_ENI",
        "AWS_VPC_ENI_MTU",
    ):
        assert name in env and name in yaml.safe_load(chart.values_yaml())["env"]


def test_helm_lint_passes(helm: str, tmp: Path) -> None:
    path = tmp / "values.yaml"
    path.write_text(yaml.safe_dump(VALUES))
    lint = subprocess.run([helm, "lint", str(chart.CHART_DIR), "-f", str(path)], capture_output=True, text=True)
    assert lint.returncode == 0, lint.stdout + lint.stderr
    assert "1 chart(s) linted, 0 chart(s) failed" in lint.stdout


@pytest.mark.parametrize("case", sorted(CASES))
def test_helm_template_renders_the_objects_the_cdk_path_renders(helm: str, tmp: Path, case: str) -> None:
    values = CASES[case]
    out = _template(helm, values, tmp)
    assert out.returncode == 0, out.stderr
    by_helm = [d for d in yaml.safe_load_all(out.stdout) if d]
    by_python = manifests.render(values)
    key = lambda d: (d["kind"], d["metadata"]["name"])  # noqa: E731
    assert sorted(by_helm, key=key) == sorted(by_python, key=key)
    version = str(kubernetes_validate.latest_version())
    for doc in by_helm:
        kubernetes_validate.validate(doc, version, strict=True)


def test_the_values_reach_the_objects(helm: str, tmp: Path) -> None:
    values = CASES["irsa-and-vpc-cni-settings"]
    docs = {d["kind"] + "/" + d["metadata"]["name"]: d for d in yaml.safe_load_all(_template(helm, values, tmp).stdout)}
    sa = docs["ServiceAccount/agent"]
    assert sa["metadata"]["namespace"] == "warmpool"
    assert sa["metadata"]["annotations"] == {manifests.IRSA_ANNOTATION: values["agentRoleArn"]}
    config = docs["ConfigMap/warmpool-config"]["data"]
    assert config["WARM_IP_TARGET"] == "5" and config["MINIMUM_IP_TARGET"] == "10"
    assert config["ENABLE_PREFIX_DELEGATION"] == "true" and config["WARM_ENI_TARGET"] == ""
    assert config["WARMPOOL_REPORTS_QUEUE_URL"] == values["reportsQueueUrl"]
    assert config["WARMPOOL_LEAN_HOLD_S"] == "90"  # fair sharing's hold (issue 24), as the agent reads it
    pod = docs["DaemonSet/warmpool-agent"]["spec"]
    assert pod["updateStrategy"]["rollingUpdate"]["maxUnavailable"] == 1
    assert pod["template"]["spec"]["dnsPolicy"] == "Default"
    assert pod["template"]["spec"]["containers"][0]["image"] == f"{values['image']['repository']}@sha256:{'ab' * 32}"


def _with(path: str, value: Any) -> dict[str, Any]:
    values = copy.deepcopy(VALUES)
    node = values
    *parents, last = path.split(".")
    for p in parents:
        node = node.setdefault(p, {})
    if value is None:
        node.pop(last, None)
    else:
        node[last] = value
    return values


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        ("env.WARM_IP_TARGET", "five", "WARM_IP_TARGET"),
        ("env.WARM_IP_TARGET", -1, "WARM_IP_TARGET"),
        ("env.ENABLE_PREFIX_DELEGATION", "yes", "ENABLE_PREFIX_DELEGATION"),
        ("env.WARM_IP_TARGETT", "5", "WARM_IP_TARGETT"),
        ("env.AWS_VPC_K8S_CNI_RANDOMIZESNAT", "random", "AWS_VPC_K8S_CNI_RANDOMIZESNAT"),
        ("env.AWS_VPC_K8S_CNI_EXCLUDE_SNAT_CIDRS", "10.0.0.0", "AWS_VPC_K8S_CNI_EXCLUDE_SNAT_CIDRS"),
        ("env.WARMPOOL_LEAN_HOLD_S", "3601", "WARMPOOL_LEAN_HOLD_S"),
        ("env.WARMPOOL_LEAN_HOLD_S", 3601, "WARMPOOL_LEAN_HOLD_S"),
        ("env.WARMPOOL_LEAN_HOLD_S", -1, "WARMPOOL_LEAN_HOLD_S"),
        ("env.WARMPOOL_LEAN_HOLD_S", "3 minutes", "WARMPOOL_LEAN_HOLD_S"),
        ("cluster", None, "cluster"),
        ("reportsQueueUrl", "warmpool-demo-reports", "reportsQueueUrl"),
        ("image.tag", None, "image"),
        ("agentIdentity", "irsa", "agentRoleArn"),
        ("agentIdentity", "kiam", "agentIdentity"),
        ("dnsPolicy", "ClusterFirstWithHostNetwork", "dnsPolicy"),
        ("updateStrategy.maxUnavailable", 0, "maxUnavailable"),
        ("imagee", {"tag": "x"}, "imagee"),
    ],
)
def test_bad_values_are_refused_by_the_schema_naming_the_value(
    helm: str, tmp: Path, path: str, value: Any, message: str
) -> None:
    out = _template(helm, _with(path, value), tmp)
    assert out.returncode != 0, out.stdout[:500]
    assert "values don't meet the specifications of the schema" in out.stderr, out.stderr
    assert message in out.stderr, out.stderr


@pytest.mark.parametrize("maximum", [0, 5, 9, 10, 180, 3600, 10_000])
def test_a_bounded_count_accepts_exactly_0_to_its_maximum(maximum: int) -> None:
    import re

    pattern = re.compile(chart.up_to(maximum))
    assert [n for n in range(2 * maximum + 12) if pattern.match(str(n))] == list(range(maximum + 1))
    assert pattern.match("0" + str(maximum))  # leading zeros, as the agent parses them
    for bad in ("", "-1", "1.5", "1e3", " 1"):
        assert not pattern.match(bad), bad


def test_the_lean_hold_value_is_bounded_as_the_agent_bounds_it() -> None:
    from node_agent.config import ConfigError, load
    from warmpool import names

    spec = chart.schema()["properties"]["env"]["properties"][names.AGENT_ENV_LEAN_HOLD_S]
    assert spec["maximum"] == names.LEAN_HOLD_MAX_S
    assert load({"CLUSTER_NAME": "c", names.AGENT_ENV_LEAN_HOLD_S: str(spec["maximum"])}).timing.lean_hold_s == 3600
    with pytest.raises(ConfigError):
        load({"CLUSTER_NAME": "c", names.AGENT_ENV_LEAN_HOLD_S: str(spec["maximum"] + 1)})
