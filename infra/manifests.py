"""The node half's Kubernetes objects, from one source for every way of installing them.

``k8s/{serviceaccount,configmap,daemonset}.yaml`` are the objects, with ``${NAME}``
placeholders where a value goes. :data:`PLACEHOLDERS` says which value fills each one,
by its path in the Helm chart's values. Three consumers read them:

* :func:`render` fills them from a values mapping (the chart's ``values.yaml`` layout,
  defaults from :data:`DEFAULTS`): ``infra.render_manifests`` (stack outputs -> one
  YAML file) and the CDK stack (``-c eks_cluster=...``: the same objects, the values
  being the stack's own tokens, applied through ``KubernetesManifest``);
* ``infra.chart`` generates ``charts/warmpool/`` from them (each placeholder becomes the
  Helm expression of its value), so ``helm template`` renders what :func:`render` does;
* the runtime tier (``tests/runtime/manifest.py``) reads the DaemonSet's
  ``securityContext`` and mounts as they are (no placeholder there).

The pool settings (:data:`POOL_SETTINGS`) are the ConfigMap's, under the VPC CNI's
names and meanings; each is a value ``env.<NAME>`` of the chart.
"""

from __future__ import annotations

import copy
import enum
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from warmpool import names

K8S_DIR = Path(__file__).resolve().parents[1] / "k8s"
TEMPLATES = ("serviceaccount.yaml", "configmap.yaml", "daemonset.yaml")
IRSA_ANNOTATION = "eks.amazonaws.com/role-arn"
PLACEHOLDER_RE = re.compile(r"\$\{([A-Z0-9_]+)\}")


class ManifestError(ValueError):
    """Values the objects cannot be rendered from; the message names the value."""


class Kind(enum.Enum):
    """What a pool setting accepts (as the agent parses it: ``node_agent/config.py``)."""

    COUNT_OR_UNSET = "count-or-unset"
    COUNT = "count"
    BOOL = "bool"
    CIDRS = "cidrs"
    RANDOMIZE = "randomize"


@dataclass(frozen=True)
class PoolSetting:
    name: str
    default: str
    kind: Kind
    description: str
    maximum: int | None = None
    """The largest value the agent accepts (a count; None: no bound)."""


POOL_SETTINGS: tuple[PoolSetting, ...] = (
    PoolSetting("WARM_ENI_TARGET", "1", Kind.COUNT_OR_UNSET, "free ENIs' worth of addresses kept attached"),
    PoolSetting("WARM_IP_TARGET", "", Kind.COUNT_OR_UNSET, "free addresses kept on the node (unset: by ENI)"),
    PoolSetting("MINIMUM_IP_TARGET", "", Kind.COUNT_OR_UNSET, "addresses the node holds at least, used or not"),
    PoolSetting("WARM_PREFIX_TARGET", "", Kind.COUNT_OR_UNSET, "free /28 prefixes kept (prefix delegation)"),
    PoolSetting("MAX_ENI", "", Kind.COUNT_OR_UNSET, "at most this many ENIs per node (unset: the type's limit)"),
    PoolSetting("ENABLE_PREFIX_DELEGATION", "false", Kind.BOOL, "assign /28 prefixes instead of addresses"),
    PoolSetting(
        "AWS_VPC_K8S_CNI_CUSTOM_NETWORK_CFG",
        "false",
        Kind.BOOL,
        "pods in the stack's custom_network subnets, never on the primary ENI",
    ),
    PoolSetting(
        "WARMPOOL_MULTI_CARD",
        "false",
        Kind.BOOL,
        "ENIs on every network card of multi-card types (as the stack's multi_card)",
    ),
    PoolSetting(
        "WARMPOOL_LEAN_HOLD_S",
        str(int(names.LEAN_HOLD_DEFAULT_S)),
        Kind.COUNT,
        "seconds a result saying scarce keeps the node lean (fair sharing); 0: off on the node",
        maximum=int(names.LEAN_HOLD_MAX_S),
    ),
    PoolSetting(
        "WARMPOOL_BURST_WINDOW_S",
        "30",
        Kind.COUNT,
        "two pods given addresses this close are a burst (a top-up fills its ENI); 0: off",
        maximum=600,
    ),
    PoolSetting(
        "WARMPOOL_ADOPT_LAUNCH_POOL",
        "false",
        Kind.BOOL,
        "use what a node boots with once the allocator confirms its first start (not on nodes moved from another CNI)",
    ),
    PoolSetting("AWS_VPC_ENI_MTU", "9001", Kind.COUNT, "MTU of the ENIs and (unless POD_MTU) of pod veths"),
    PoolSetting("IP_COOLDOWN_PERIOD", "30", Kind.COUNT, "seconds a freed address rests before reuse"),
    PoolSetting("AWS_VPC_K8S_CNI_EXTERNALSNAT", "false", Kind.BOOL, "true: no SNAT on the node (NAT gateway)"),
    PoolSetting("AWS_VPC_K8S_CNI_EXCLUDE_SNAT_CIDRS", "", Kind.CIDRS, "more destinations left un-SNATed (a,b)"),
    PoolSetting("AWS_VPC_K8S_CNI_RANDOMIZESNAT", "prng", Kind.RANDOMIZE, "SNAT source port choice"),
    PoolSetting("AWS_VPC_CNI_NODE_PORT_SUPPORT", "true", Kind.BOOL, "replies to NodePort traffic leave by eth0"),
    PoolSetting("AWS_VPC_K8S_CNI_CONFIGURE_RPFILTER", "true", Kind.BOOL, "loose rp_filter on the primary ENI"),
    PoolSetting("WARMPOOL_REPORT_HEARTBEAT_S", "60", Kind.COUNT, "seconds between reports of a quiet node"),
)
POOL_SETTING_NAMES = tuple(s.name for s in POOL_SETTINGS)

DNS_POLICIES = ("ClusterFirstWithHostNet", "Default", "ClusterFirst", "None")
AGENT_IDENTITIES = ("pod-identity", "irsa", "node-role")

DEFAULTS: dict[str, Any] = {
    "cluster": "",
    "region": "",
    "reportsQueueUrl": "",
    "resultQueuePrefix": "",
    "agentNamespace": "kube-system",
    "agentServiceAccount": "warmpool-agent",
    "agentIdentity": "pod-identity",
    "agentRoleArn": "",
    "image": {"repository": "", "tag": "", "digest": "", "pullPolicy": "IfNotPresent"},
    # "Default": the node's resolver. Never the cluster DNS by default: its pods get their
    # addresses from this agent, so ClusterFirstWithHostNet deadlocks a cold node
    # (tests/e2e/test_cold_start.py).
    "dnsPolicy": "Default",
    "updateStrategy": {"maxUnavailable": "10%"},
    "env": {s.name: s.default for s in POOL_SETTINGS},
}
"""The chart's ``values.yaml``: the stack's outputs (empty: required), then the rest."""


@dataclass(frozen=True)
class Placeholder:
    path: tuple[str, ...]
    """The value's path in the chart's values (``("image", "repository")``)."""
    helm: str
    """The Helm expression of the same value (rendered through ``toJson``)."""


def _value(*path: str) -> Placeholder:
    return Placeholder(path, ".Values." + ".".join(path))


PLACEHOLDERS: dict[str, Placeholder] = {
    "CLUSTER": _value("cluster"),
    "REGION": _value("region"),
    "REPORTS_QUEUE_URL": _value("reportsQueueUrl"),
    "RESULT_QUEUE_PREFIX": _value("resultQueuePrefix"),
    "NAMESPACE": _value("agentNamespace"),
    "SERVICE_ACCOUNT": _value("agentServiceAccount"),
    "IMAGE": Placeholder(("image",), 'include "warmpool.image" .'),
    "IMAGE_PULL_POLICY": _value("image", "pullPolicy"),
    "DNS_POLICY": _value("dnsPolicy"),
    "MAX_UNAVAILABLE": _value("updateStrategy", "maxUnavailable"),
    **{s.name: Placeholder(("env", s.name), f"(toString .Values.env.{s.name})") for s in POOL_SETTINGS},
}
"""Every ``${NAME}`` of the templates, and the value that fills it."""


def templates() -> list[dict[str, Any]]:
    """The objects of ``k8s/*.yaml`` with their placeholders unfilled, in install order."""
    documents: list[dict[str, Any]] = []
    for name in TEMPLATES:
        documents.extend(doc for doc in yaml.safe_load_all((K8S_DIR / name).read_text()) if doc)
    return documents


def merged(values: Mapping[str, Any]) -> dict[str, Any]:
    """``values`` over :data:`DEFAULTS`, as Helm merges a user's values over ``values.yaml``."""

    def merge(base: Any, over: Any) -> Any:
        if isinstance(base, dict) and isinstance(over, Mapping):
            out = dict(base)
            for k, v in over.items():
                out[k] = merge(base.get(k), v) if k in base else v
            return out
        return over

    return dict(merge(copy.deepcopy(DEFAULTS), values))


def _setting_text(value: Any) -> str:
    """A pool setting as Helm's ``toString`` gives it (booleans lower case)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _lookup(values: Mapping[str, Any], ph: Placeholder) -> Any:
    if ph.path == ("image",):
        return image_reference(values["image"])
    node: Any = values
    for part in ph.path:
        node = node[part]
    if ph.path[0] == "env":
        return _setting_text(node)
    return node


def image_reference(image: Mapping[str, Any]) -> str:
    """``repository@digest`` when a digest is set, else ``repository:tag`` (``warmpool.image``)."""
    if image.get("digest"):
        return f"{image['repository']}@{image['digest']}"
    return f"{image['repository']}:{image['tag']}"


def _fill(node: Any, values: Mapping[str, Any]) -> Any:
    if isinstance(node, dict):
        return {k: _fill(v, values) for k, v in node.items()}
    if isinstance(node, list):
        return [_fill(v, values) for v in node]
    if isinstance(node, str):
        whole = PLACEHOLDER_RE.fullmatch(node)
        if whole:  # the value as it is (an int stays an int: maxUnavailable)
            return _lookup(values, PLACEHOLDERS[whole.group(1)])
        return PLACEHOLDER_RE.sub(lambda m: str(_lookup(values, PLACEHOLDERS[m.group(1)])), node)
    return node


def render(values: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The objects for ``values`` (the chart's layout, merged over :data:`DEFAULTS`).

    Values may be CDK tokens (strings): nothing here looks inside them. With
    ``agentIdentity: irsa`` the ServiceAccount carries the role ARN annotation.
    """
    full = merged(values)
    unknown = sorted(set(full["env"]) - set(POOL_SETTING_NAMES))
    if unknown:
        raise ManifestError(f"env: unknown settings {', '.join(unknown)} (known: {', '.join(POOL_SETTING_NAMES)})")
    if full["agentIdentity"] not in AGENT_IDENTITIES:
        raise ManifestError(f"agentIdentity: {full['agentIdentity']!r}, expected one of {', '.join(AGENT_IDENTITIES)}")
    documents = [_fill(doc, full) for doc in templates()]
    if full["agentIdentity"] == "irsa":
        if not full["agentRoleArn"]:
            raise ManifestError("agentIdentity is irsa but agentRoleArn is empty")
        for doc in documents:
            if doc["kind"] == "ServiceAccount":
                doc["metadata"]["annotations"] = {IRSA_ANNOTATION: full["agentRoleArn"]}
    return documents


def placeholders_used() -> set[str]:
    return {m for name in TEMPLATES for m in PLACEHOLDER_RE.findall((K8S_DIR / name).read_text())}


NODE_UNINSTALL_POD = "node-uninstall-pod.yaml"
"""The node's own uninstall as a one-off pod (docs/deploy.md section 7, step 4), apart from
the install's objects: ``scripts/move-node.sh`` fills it with ``sed``, the e2e tier with
:func:`node_uninstall_pod`."""


def node_uninstall_pod(*, image: str, node: str, namespace: str = "kube-system") -> dict[str, Any]:
    """``k8s/node-uninstall-pod.yaml`` for one node, its three placeholders filled."""
    fill = {"IMAGE": image, "NODE_NAME": node, "NAMESPACE": namespace}
    text = PLACEHOLDER_RE.sub(lambda m: fill[m.group(1)], (K8S_DIR / NODE_UNINSTALL_POD).read_text())
    doc: dict[str, Any] = yaml.safe_load(text)
    return doc
