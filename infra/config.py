"""The stack's settings, read from CDK context and validated before any construct exists.

Every value comes from ``cdk.json`` (``context``) or ``-c key=value`` on the command
line. Command-line values arrive as strings, so lists accept ``a,b`` or a JSON list,
booleans accept ``true``/``false`` and numbers are parsed here. A bad value stops
synth with one message naming every offending key and what it accepts.
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, field_validator, model_validator

from warmpool import names

MAX_CLUSTER_LEN = 80 - len(names.result_queue("", "i-" + "0" * 17))
"""The longest instance id (i- + 17 hex) must still fit SQS's 80-character queue
names in the cluster's result queue name (``warmpool.names.result_queue``): 44."""

AgentIdentity = Literal["pod-identity", "irsa", "node-role"]

DEFAULT_IDENTITY_CERTIFICATE_FILE = Path(__file__).resolve().parent / "certs" / "aws-instance-identity-rsa.pem"
"""AWS's RSA certificate for instance identity signatures in most commercial regions
(the file says where it comes from)."""
MAX_IDENTITY_PEM_CHARS = 2_800
"""Lambda allows 4 KB for a function's whole environment; the certificate(s) of one
region may take this much of it (one 1024-bit RSA certificate is ~1.2 KB)."""
_REGION_RE = re.compile(r"[a-z]{2}(-[a-z]+)+-\d")


def _certificate_blocks(text: str) -> str:
    """``text`` is PEM or a path to a PEM file; returns only the certificate blocks,
    each one checked to hold an RSA key (what signs ``.../signature``)."""
    from functions.identity import IdentityConfigError, TrustedKeys, pem_blocks

    if "-----BEGIN" not in text:
        path = Path(text.strip()).expanduser()
        if not path.is_file():
            raise ValueError(f"neither PEM text nor a readable file: {text.strip()!r}")
        text = path.read_text()
    try:
        TrustedKeys.from_pem(text)
        blocks = "".join(pem_blocks(text))
    except IdentityConfigError as err:
        raise ValueError(str(err)) from None
    if len(blocks) > MAX_IDENTITY_PEM_CHARS:
        raise ValueError(
            f"{len(blocks)} characters of PEM; at most {MAX_IDENTITY_PEM_CHARS} fit in the functions' "
            "environment (Lambda's 4 KB limit)"
        )
    return blocks


def default_identity_certificate() -> str:
    return _certificate_blocks(DEFAULT_IDENTITY_CERTIFICATE_FILE.read_text())


CONTEXT_KEYS = (
    "cluster",
    "vpc_id",
    "subnet_ids",
    "subnet_tag",
    "subnet_discovery",
    "security_group_ids",
    "create_buckets_table",
    "budget_fraction",
    "batch_size",
    "batching_window_s",
    "max_concurrency",
    "allocate_timeout_s",
    "allocate_memory_mb",
    "reconcile_timeout_s",
    "reconcile_every_min",
    "gc_age_s",
    "agent_identity",
    "agent_namespace",
    "agent_service_account",
    "oidc_provider_arn",
    "node_role_name",
    "create_pod_identity_association",
    "python_version",
    "powertools_layer_version",
    "alarm_email",
    "log_retention_days",
    "stack_name",
    "identity_certificate",
    "identity_certificates_by_region",
    "primary_eni_tagging",
    "max_pods",
    "named_placement",
    "multi_card",
    "scarce_free",
    "lean_hold_s",
    "eks_cluster",
    "kubectl_role_arn",
    "agent_image_platform",
    "agent_settings",
    "custom_network",
    "prefix_reservations",
)


class StackConfigError(ValueError):
    """Context values the stack cannot be built from; the message lists each problem."""


def _split_list(value: Any) -> Any:
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            return json.loads(text)
        return [part.strip() for part in text.split(",") if part.strip()]
    return value


_SUBNET_ID = r"subnet-[0-9a-f]{8}([0-9a-f]{9})?"
_GROUP_ID = r"sg-[0-9a-f]{8}([0-9a-f]{9})?"


class CustomZone(BaseModel):
    """One zone of ``custom_network``: an ``ENIConfig``'s subnet(s) and security groups."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    subnets: tuple[str, ...] = Field(min_length=1)
    security_groups: tuple[str, ...] = ()

    @field_validator("subnets")
    @classmethod
    def _subnet_ids(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        bad = [s for s in value if not re.fullmatch(_SUBNET_ID, s)]
        if bad:
            raise ValueError(f"not subnet ids: {', '.join(bad)}")
        return value

    @field_validator("security_groups")
    @classmethod
    def _group_ids(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        bad = [s for s in value if not re.fullmatch(_GROUP_ID, s)]
        if bad:
            raise ValueError(f"not security group ids: {', '.join(bad)}")
        return value


PREFIX_LEN = 28
"""EC2's IPv4 prefix delegation hands out /28s: a ``prefix`` reservation narrower than this holds none."""


def _reservation_list(value: Any) -> Any:
    """``prefix_reservations`` from the command line: a JSON list of objects, or
    ``SUBNET=CIDR`` pairs separated by commas."""
    if not isinstance(value, str):
        return value
    text = value.strip()
    if text.startswith("["):
        return json.loads(text)
    entries = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        if part.count("=") != 1:
            raise ValueError(f"{part!r} is not SUBNET=CIDR (e.g. subnet-0123456789abcdef0=10.0.32.0/24)")
        subnet_id, cidr = (x.strip() for x in part.split("="))
        entries.append({"subnet_id": subnet_id, "cidr": cidr})
    return entries


class PrefixReservation(BaseModel):
    """One entry of ``prefix_reservations``: a CIDR of a pod subnet that EC2 keeps for /28 prefixes
    (an ``AWS::EC2::SubnetCidrReservation`` of type ``prefix``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    subnet_id: str
    cidr: str

    @field_validator("subnet_id")
    @classmethod
    def _subnet_id(cls, value: str) -> str:
        if not re.fullmatch(_SUBNET_ID, value):
            raise ValueError(f"not a subnet id: {value!r} (subnet- and 8 or 17 hex digits)")
        return value

    @field_validator("cidr")
    @classmethod
    def _cidr(cls, value: str) -> str:
        """The network in EC2's spelling (``10.0.32.0/24``), so the template holds what EC2 reads back."""
        text = value.strip()
        if "/" not in text:
            raise ValueError(f"{value!r} has no prefix length: write the network as ADDRESS/LENGTH")
        try:
            network = ipaddress.ip_network(text, strict=False)
        except ValueError:
            raise ValueError(f"{value!r} is not an IPv4 CIDR") from None
        if network.version != 4:
            raise ValueError(f"{value!r} is not an IPv4 CIDR (warmpool delegates IPv4 prefixes only)")
        if ipaddress.ip_interface(text).ip != network.network_address:
            raise ValueError(f"{value!r} is not a network address: host bits are set (the network is {network})")
        if network.prefixlen > PREFIX_LEN:
            raise ValueError(
                f"{network} is narrower than a /{PREFIX_LEN}: a prefix reservation holds whole /{PREFIX_LEN} prefixes"
            )
        return str(network)

    @property
    def network(self) -> ipaddress.IPv4Network:
        return ipaddress.IPv4Network(self.cidr)


class StackConfig(BaseModel):
    """Validated settings of one cluster's warmpool stack."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    cluster: str = Field(description="Kubernetes cluster name (EKS cluster name for Pod Identity)")
    vpc_id: str = Field(description="VPC the cluster's nodes and pod ENIs live in")
    subnet_ids: tuple[str, ...] = Field(default=(), description="subnets pod ENIs may be created in")
    subnet_tag: str | None = Field(
        default=None, description="KEY=VALUE tag that marks subnets pod ENIs may be created in"
    )
    subnet_discovery: bool | None = Field(
        default=None,
        description="pod subnets found by the VPC CNI's kubernetes.io/role/cni tags; on unless subnet_ids or "
        "subnet_tag name them (false with neither is refused)",
    )
    security_group_ids: tuple[str, ...] = Field(
        default=(), description="security groups for pod ENIs; empty = those of the node's primary ENI"
    )
    custom_network: dict[str, CustomZone] = Field(
        default_factory=dict,
        description='custom networking: JSON {"ZONE": {"subnets": [...], "security_groups": [...]}}, an ENIConfig '
        "per zone; nodes whose agents set AWS_VPC_K8S_CNI_CUSTOM_NETWORK_CFG get pod ENIs there (docs/deploy.md)",
    )
    prefix_reservations: Annotated[tuple[PrefixReservation, ...], BeforeValidator(_reservation_list)] = Field(
        default=(),
        description="subnet CIDR reservations of type prefix the stack creates, where EC2 (and named placement) "
        'puts /28 prefixes and never single addresses: SUBNET=CIDR,... or JSON [{"subnet_id": ..., "cidr": ...}]',
    )
    create_buckets_table: bool = Field(
        description="true in the first warmpool stack of an account+region; false imports the shared table"
    )
    budget_fraction: float = Field(default=0.8, gt=0, le=1)
    batch_size: int = Field(default=100, ge=1, le=10_000)
    batching_window_s: int = Field(default=1, ge=0, le=300)
    max_concurrency: int = Field(default=5, ge=2, le=1000)
    allocate_timeout_s: int = Field(default=30, ge=5, le=900)
    allocate_memory_mb: int = Field(default=512, ge=128, le=10_240)
    reconcile_timeout_s: int = Field(default=120, ge=10, le=900)
    reconcile_every_min: int = Field(default=1, ge=1, le=60)
    gc_age_s: int = Field(default=300, ge=60, le=86_400)
    named_placement: bool = Field(
        default=False,
        description="name the addresses and /28 prefixes of each EC2 call so whole /28s stay free "
        "(prefix delegation in fragmented subnets; docs/allocator.md): WARMPOOL_NAMED_PLACEMENT",
    )
    multi_card: bool = Field(
        default=False,
        description="ENIs on the network cards above 0 of multi-card types (p5.48xlarge: 32 cards) once card 0 "
        "is full, the pool ceiling counting them (docs/allocator.md): WARMPOOL_MULTI_CARD, the allocator's and "
        "(with eks_cluster, unless agent_settings says otherwise) the agents'",
    )
    scarce_free: int = Field(
        default=names.SCARCE_FREE_DEFAULT,
        ge=0,
        le=names.SCARCE_FREE_MAX,
        description="fair sharing of scarce addresses (docs/allocator.md): a node's zone is scarce when its "
        "candidate pod subnets have fewer free addresses in all than this; 0: off. The allocator's "
        "WARMPOOL_SCARCE_FREE",
    )
    lean_hold_s: int | None = Field(
        default=None,
        ge=0,
        le=int(names.LEAN_HOLD_MAX_S),
        description="with eks_cluster: seconds a result saying scarce keeps a node lean (the agents' "
        "WARMPOOL_LEAN_HOLD_S, unless agent_settings names it; 0: fair sharing off on the nodes); unset: "
        "the agents' default, 180",
    )
    max_pods: int = Field(
        default=0,
        ge=0,
        le=names.MAX_PODS_OVERRIDE,
        description="the kubelets' --max-pods when custom; 0 = the VPC CNI formula per instance type. No node "
        "is given more addresses than this, whatever it reports (set WARMPOOL_MAX_PODS on the agents too)",
    )
    agent_identity: AgentIdentity = "pod-identity"
    agent_namespace: str = "kube-system"
    agent_service_account: str = "warmpool-agent"
    oidc_provider_arn: str | None = None
    node_role_name: str | None = None
    create_pod_identity_association: bool = True
    python_version: Literal["3.12", "3.13"] = "3.13"
    powertools_layer_version: int = Field(default=27, ge=1)
    alarm_email: str | None = None
    log_retention_days: Literal[1, 3, 7, 14, 30, 90, 180, 365] = 30
    stack_name: str | None = None
    identity_certificate: str = Field(
        default_factory=default_identity_certificate,
        description="PEM (or a PEM file) of the RSA certificate(s) that sign instance identity documents; "
        "default: AWS's for most commercial regions",
    )
    primary_eni_tagging: Literal["allocator", "launch-template"] = Field(
        default="allocator",
        description="who tags each node's primary ENI warmpool.io/primary-eni-of=<cluster> so the allocator "
        "may (un)assign its addresses: the allocator at first contact (needs a narrow ec2:CreateTags), or "
        "the nodes' launch template (no CreateTags on existing ENIs at all)",
    )
    identity_certificates_by_region: dict[str, str] = Field(
        default_factory=dict,
        description="JSON object region -> PEM or PEM file, for regions with their own AWS certificate",
    )
    eks_cluster: str | None = Field(
        default=None,
        description="an existing EKS cluster to install the node half into (image, Pod Identity, manifests); "
        "unset: the serverless half only",
    )
    kubectl_role_arn: str | None = Field(
        default=None,
        description="with eks_cluster: an IAM role CloudFormation's kubectl handler assumes, allowed to apply "
        "objects in the cluster (an access entry or aws-auth mapping)",
    )
    agent_image_platform: Literal["linux/amd64", "linux/arm64"] = Field(
        default="linux/amd64", description="with eks_cluster: the agent image asset's platform (the nodes')"
    )
    agent_settings: dict[str, str] = Field(
        default_factory=dict,
        description="with eks_cluster: JSON object of the agents' VPC CNI-named settings (WARM_IP_TARGET, ...)",
    )

    @field_validator("agent_settings", mode="before")
    @classmethod
    def _settings_json(cls, value: Any) -> Any:
        if isinstance(value, str):
            return json.loads(value) if value.strip() else {}
        if isinstance(value, dict):
            return {k: (str(v).lower() if isinstance(v, bool) else str(v)) for k, v in value.items()}
        return value

    @field_validator("agent_settings", mode="after")
    @classmethod
    def _settings(cls, value: dict[str, str]) -> dict[str, str]:
        from infra.manifests import POOL_SETTING_NAMES

        unknown = sorted(set(value) - set(POOL_SETTING_NAMES))
        if unknown:
            raise ValueError(f"unknown settings {', '.join(unknown)} (known: {', '.join(POOL_SETTING_NAMES)})")
        return value

    @field_validator("eks_cluster")
    @classmethod
    def _eks_cluster(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"[0-9A-Za-z][A-Za-z0-9\-_]{0,99}", value):
            raise ValueError("an EKS cluster name (letters, digits, '-' and '_', at most 100)")
        return value

    @field_validator("kubectl_role_arn")
    @classmethod
    def _kubectl_role(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"arn:aws[a-z-]*:iam::\d{12}:role/.+", value):
            raise ValueError("an IAM role ARN, arn:aws:iam::<account>:role/<name>")
        return value

    @field_validator("identity_certificate", mode="after")
    @classmethod
    def _identity_certificate(cls, value: str) -> str:
        return _certificate_blocks(value)

    @field_validator("identity_certificates_by_region", mode="before")
    @classmethod
    def _by_region_json(cls, value: Any) -> Any:
        if isinstance(value, str):
            return json.loads(value) if value.strip() else {}
        return value

    @field_validator("identity_certificates_by_region", mode="after")
    @classmethod
    def _by_region(cls, value: dict[str, str]) -> dict[str, str]:
        bad = [r for r in value if not _REGION_RE.fullmatch(r)]
        if bad:
            raise ValueError(f"not AWS region names: {', '.join(sorted(bad))}")
        return {region: _certificate_blocks(pem) for region, pem in sorted(value.items())}

    def identity_certificate_for(self, region: str) -> str:
        """The PEM the functions trust in ``region``: its override, else the default."""
        return self.identity_certificates_by_region.get(region, self.identity_certificate)

    @field_validator("custom_network", mode="before")
    @classmethod
    def _custom_json(cls, value: Any) -> Any:
        if isinstance(value, str):
            return json.loads(value) if value.strip() else {}
        return value

    @field_validator("custom_network", mode="after")
    @classmethod
    def _custom_once(cls, value: dict[str, CustomZone]) -> dict[str, CustomZone]:
        ids = [s for z in value.values() for s in z.subnets]
        twice = sorted({s for s in ids if ids.count(s) > 1})
        if twice:
            raise ValueError(f"lists a subnet twice: {', '.join(twice)}")
        return value

    @field_validator("prefix_reservations", mode="after")
    @classmethod
    def _reservations_apart(cls, value: tuple[PrefixReservation, ...]) -> tuple[PrefixReservation, ...]:
        """No two entries share an address: EC2 refuses a reservation overlapping another in its
        subnet, and the subnets of a VPC never overlap, so two overlapping entries in different
        subnets put one outside its subnet."""
        problems = []
        for i, a in enumerate(value):
            for b in value[i + 1 :]:
                if a.network.overlaps(b.network):
                    if a == b:
                        problems.append(f"lists {a.subnet_id}={a.cidr} twice")
                    else:
                        problems.append(f"{a.subnet_id}={a.cidr} overlaps {b.subnet_id}={b.cidr}")
        if problems:
            raise ValueError("; ".join(problems))
        return value

    @property
    def custom_subnet_ids(self) -> tuple[str, ...]:
        return tuple(sorted({s for z in self.custom_network.values() for s in z.subnets}))

    @property
    def custom_group_ids(self) -> tuple[str, ...]:
        return tuple(sorted({g for z in self.custom_network.values() for g in z.security_groups}))

    def custom_network_env(self) -> str:
        """``WARMPOOL_CUSTOM_NETWORK`` as the functions read it (:class:`functions.settings.Settings`)."""
        return json.dumps(
            {
                zone: {"subnets": list(z.subnets), "security_groups": list(z.security_groups)}
                for zone, z in sorted(self.custom_network.items())
            },
            separators=(",", ":"),
        )

    @field_validator("subnet_ids", "security_group_ids", mode="before")
    @classmethod
    def _lists(cls, value: Any) -> Any:
        return _split_list(value)

    @field_validator("cluster")
    @classmethod
    def _cluster(cls, value: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_-]*", value):
            raise ValueError("letters, digits, '-' and '_' only, starting with a letter or digit")
        if len(value) > MAX_CLUSTER_LEN:
            raise ValueError(f"at most {MAX_CLUSTER_LEN} characters (SQS queue names are at most 80)")
        return value

    @field_validator("vpc_id")
    @classmethod
    def _vpc(cls, value: str) -> str:
        if not re.fullmatch(r"vpc-[0-9a-f]{8}([0-9a-f]{9})?", value):
            raise ValueError("a VPC id such as vpc-0123456789abcdef0")
        return value

    @field_validator("subnet_ids")
    @classmethod
    def _subnets(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        bad = [s for s in value if not re.fullmatch(r"subnet-[0-9a-f]{8}([0-9a-f]{9})?", s)]
        if bad:
            raise ValueError(f"not subnet ids: {', '.join(bad)}")
        if len(set(value)) != len(value):
            raise ValueError("lists a subnet twice")
        return value

    @field_validator("security_group_ids")
    @classmethod
    def _groups(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        bad = [s for s in value if not re.fullmatch(r"sg-[0-9a-f]{8}([0-9a-f]{9})?", s)]
        if bad:
            raise ValueError(f"not security group ids: {', '.join(bad)}")
        return value

    @field_validator("subnet_tag")
    @classmethod
    def _subnet_tag(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"[^=\s]+=[^=]*", value):
            raise ValueError("KEY=VALUE, e.g. warmpool.io/pods=true")
        return value

    @field_validator("oidc_provider_arn")
    @classmethod
    def _oidc(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"arn:aws[a-z-]*:iam::\d{12}:oidc-provider/.+", value):
            raise ValueError("an IAM OIDC provider ARN, arn:aws:iam::<account>:oidc-provider/<issuer host/path>")
        return value

    @field_validator("agent_namespace", "agent_service_account")
    @classmethod
    def _k8s_name(cls, value: str) -> str:
        if not re.fullmatch(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", value):
            raise ValueError("a Kubernetes DNS label (lower case letters, digits, '-')")
        return value

    @model_validator(mode="after")
    def _combinations(self) -> StackConfig:
        if not self.subnet_ids and self.subnet_tag is None and self.subnet_discovery is False:
            raise ValueError(
                "subnet_discovery=false: set subnet_ids or subnet_tag, pod ENIs are created only in allowed subnets"
            )
        if self.subnet_discovery and (self.subnet_ids or self.subnet_tag is not None):
            raise ValueError("subnet_discovery=true takes neither subnet_ids nor subnet_tag: they name the subnets")
        if self.subnet_ids:
            # With a list the stack knows its pod subnets (subnet_ids and custom_network's); by tag or
            # by discovery it does not at synth time, and EC2 refuses a CIDR outside its subnet at deploy.
            pod_subnets = {*self.subnet_ids, *self.custom_subnet_ids}
            outside = sorted({r.subnet_id for r in self.prefix_reservations} - pod_subnets)
            if outside:
                raise ValueError(
                    f"prefix_reservations: {', '.join(outside)} not among the stack's pod subnets "
                    "(subnet_ids and custom_network's subnets)"
                )
        if self.batch_size > 10 and self.batching_window_s < 1:
            raise ValueError("batch_size above 10 needs batching_window_s >= 1 (an SQS event source rule)")
        if self.visibility_timeout_s > 43_200:
            raise ValueError("6 x allocate_timeout_s exceeds SQS's 12-hour visibility timeout")
        if self.agent_identity == "irsa" and self.oidc_provider_arn is None:
            raise ValueError("agent_identity=irsa needs oidc_provider_arn (the cluster's IAM OIDC provider)")
        if self.agent_identity == "node-role" and self.node_role_name is None:
            raise ValueError("agent_identity=node-role needs node_role_name (the nodes' instance role)")
        if self.eks_cluster is not None and self.kubectl_role_arn is None:
            raise ValueError(
                "eks_cluster needs kubectl_role_arn (a role allowed to apply objects in the cluster: "
                "aws eks create-access-entry ... --principal-arn <role> and the AmazonEKSClusterAdminPolicy)"
            )
        if self.eks_cluster is None and (
            self.kubectl_role_arn is not None or self.agent_settings or self.lean_hold_s is not None
        ):
            raise ValueError(
                "kubectl_role_arn, agent_settings and lean_hold_s apply only with eks_cluster "
                "(with the Helm chart: env.WARMPOOL_LEAN_HOLD_S)"
            )
        return self

    # --- derived values ---------------------------------------------------------

    @property
    def visibility_timeout_s(self) -> int:
        """Six function timeouts, as AWS recommends for SQS event sources."""
        return 6 * self.allocate_timeout_s

    @property
    def identity_mode(self) -> str:
        """What the allocator may trust about a report's sender (``names.ENV_IDENTITY_MODE``).

        With the node role, SQS records the instance-profile session (``...:i-0abc``) as
        the message's SenderId, so the allocator can bind each report to its instance.
        """
        return "sender-id" if self.agent_identity == "node-role" else "none"

    @property
    def oidc_issuer(self) -> str:
        assert self.oidc_provider_arn is not None
        return self.oidc_provider_arn.split(":oidc-provider/", 1)[1]

    @property
    def discovers_subnets(self) -> bool:
        """Pod subnets by the VPC CNI's tags: the default, unless ``subnet_ids`` or ``subnet_tag`` name them."""
        return bool(self.subnet_discovery) or (
            self.subnet_discovery is None and not self.subnet_ids and self.subnet_tag is None
        )

    def agent_env_from_context(self) -> dict[str, str]:
        """The agents' settings the stack's own context keys give (``agent_settings`` wins over them)."""
        env = {names.ENV_MULTI_CARD: "true" if self.multi_card else "false"}
        if self.lean_hold_s is not None:
            env[names.AGENT_ENV_LEAN_HOLD_S] = str(self.lean_hold_s)
        return env

    @property
    def subnet_tag_pair(self) -> tuple[str, str] | None:
        if self.subnet_tag is None:
            return None
        key, value = self.subnet_tag.split("=", 1)
        return key, value

    @property
    def pod_identity_cluster(self) -> str:
        """The EKS cluster the Pod Identity association is made in."""
        return self.eks_cluster or self.cluster

    @property
    def resolved_stack_name(self) -> str:
        return self.stack_name or f"warmpool-{self.cluster}"


def _parse_bool(value: Any) -> Any:
    if isinstance(value, str) and value.strip().lower() in {"true", "false"}:
        return value.strip().lower() == "true"
    return value


def config_from_context(get: Mapping[str, Any]) -> StackConfig:
    """Build the config from a mapping of context values (missing keys absent or None).

    Raises ``StackConfigError`` listing every problem at once, each as ``key: reason``.
    """
    raw: dict[str, Any] = {}
    for key in CONTEXT_KEYS:
        value = get.get(key)
        if value is None or value == "":
            continue
        raw[key] = _parse_bool(value)
    try:
        return StackConfig.model_validate(raw)
    except ValidationError as err:
        lines = []
        for problem in err.errors():
            where = ".".join(str(p) for p in problem["loc"]) or "context"
            message = problem["msg"].removeprefix("Value error, ")
            named = re.match(r"(\w+): ", message)
            if where == "context" and named is not None and named.group(1) in CONTEXT_KEYS:
                where, message = named.group(1), message[named.end() :]  # a combination's message names its key
            if problem["type"] == "missing" and len(problem["loc"]) > 1:
                message = "required"  # a field inside a key's value: the key is passed whole
            elif problem["type"] == "missing":
                field = StackConfig.model_fields.get(where)
                hint = f" ({field.description})" if field is not None and field.description else ""
                message = f"required, pass -c {where}=...{hint}"
            lines.append(f"  {where}: {message}")
        raise StackConfigError("warmpool stack context is invalid:\n" + "\n".join(lines)) from None
