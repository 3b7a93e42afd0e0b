"""The agent's settings, read once from the environment at start.

The VPC CNI variables keep the VPC CNI's meaning (docs/design.md, "Configuration"); warmpool's
own settings are ``WARMPOOL_*``. An invalid value stops the agent with an
error naming the variable, before anything is touched.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from node_agent.kubelet_config import DEFAULT_CONFIG_FILES, DEFAULT_FLAG_FILES
from warmpool import names
from warmpool.messages import (
    IMDS_LAG_BOUND_S,
    MIN_RELEASE_TIMEOUT_S,
    OFFER_MAX_AGE_CEILING_S,
    RELEASE_TIMEOUT_MARGIN_S,
)
from warmpool.pool import PoolConfig

ENV_NODE_NAME = "MY_NODE_NAME"
"""Same variable as the VPC CNI's DaemonSet (downward API ``spec.nodeName``)."""
ENV_CLUSTER_NAME = "CLUSTER_NAME"
ENV_RELEASE_DELAY_S = "WARMPOOL_RELEASE_DELAY_S"
ENV_BURST_WINDOW_S = "WARMPOOL_BURST_WINDOW_S"
ENV_RELEASE_TIMEOUT_S = "WARMPOOL_RELEASE_TIMEOUT_S"
ENV_RESYNC_S = "WARMPOOL_RESYNC_S"
ENV_ADD_WAIT_S = "WARMPOOL_ADD_WAIT_S"
ENV_PENDING_TTL_S = "WARMPOOL_PENDING_TTL_S"
ENV_RETRY_S = "WARMPOOL_REPORT_RETRY_S"
ENV_MANAGE_HOST = "WARMPOOL_MANAGE_HOST_NETWORK"
ENV_HOST_NETNS = "WARMPOOL_HOST_NETNS"
ENV_VETH_PREFIX = "WARMPOOL_VETH_PREFIX"
ENV_POD_NETWORK = "WARMPOOL_POD_NETWORK"
ENV_RECOVERY_GRACE_S = "WARMPOOL_RECOVERY_GRACE_S"
ENV_ADOPT_LAUNCH_POOL = "WARMPOOL_ADOPT_LAUNCH_POOL"
ENV_AWS_REGION = "AWS_REGION"
ENV_ENDPOINT = "WARMPOOL_AWS_ENDPOINT_URL"
ENV_KUBELET_CONFIG = "WARMPOOL_KUBELET_CONFIG"
ENV_KUBELET_FLAGS = "WARMPOOL_KUBELET_FLAGS"


class ConfigError(ValueError):
    """A setting is invalid; the message names the variable."""


def _int(env: Mapping[str, str], name: str, default: int, lo: int = 0, hi: int = 1_000_000) -> int:
    raw = env.get(name, "").strip()
    if raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"{name}={raw!r}: not an integer") from None
    if not lo <= value <= hi:
        raise ConfigError(f"{name}={value}: must be between {lo} and {hi}")
    return value


def _float(env: Mapping[str, str], name: str, default: float, lo: float = 0.0, hi: float = 86_400.0) -> float:
    raw = env.get(name, "").strip()
    if raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{name}={raw!r}: not a number") from None
    if not lo <= value <= hi:
        raise ConfigError(f"{name}={value}: must be between {lo} and {hi}")
    return value


def _bool(env: Mapping[str, str], name: str, *, default: bool) -> bool:
    raw = env.get(name, "").strip().lower()
    if raw == "":
        return default
    if raw in ("1", "true", "yes", "on"):
        return True
    if raw in ("0", "false", "no", "off"):
        return False
    raise ConfigError(f"{name}={raw!r}: expected true or false")


def _choice(env: Mapping[str, str], name: str, choices: tuple[str, ...], default: str) -> str:
    raw = env.get(name, "").strip().lower()
    if raw == "":
        return default
    if raw not in choices:
        raise ConfigError(f"{name}={raw!r}: expected one of {', '.join(choices)}")
    return raw


def _paths(env: Mapping[str, str], name: str, default: tuple[str, ...]) -> tuple[str, ...]:
    """Comma-separated absolute paths; unset or empty: ``default``; ``none``: no path at all."""
    raw = env.get(name, "").strip()
    if raw == "":
        return default
    if raw.lower() == "none":
        return ()
    out = tuple(p.strip() for p in raw.split(",") if p.strip())
    for p in out:
        if not p.startswith("/"):
            raise ConfigError(f"{name}: {p!r} is not an absolute path (or set {name}=none)")
    return out


def _release_timeout(env: Mapping[str, str]) -> float:
    """The agent takes an offered address back after this long; the allocator acts
    on an offer at most ``OFFER_MAX_AGE_CEILING_S`` after its quarantine time. Shorter
    than the ceiling plus the margin (clock skew, the EC2 call in flight), the agent
    could give a pod an address EC2 is about to unassign: two holders for one address.
    The IMDS lag bound is added because the take-back trusts IMDS's listing, which is
    only proof once it is newer than the allocator's last chance to unassign."""
    value = _float(env, ENV_RELEASE_TIMEOUT_S, 240.0, lo=1.0)
    if value < MIN_RELEASE_TIMEOUT_S:
        raise ConfigError(
            f"{ENV_RELEASE_TIMEOUT_S}={value:g}: must be at least {MIN_RELEASE_TIMEOUT_S:g} "
            f"(the allocator's release-offer age ceiling {OFFER_MAX_AGE_CEILING_S:g} s "
            f"+ margin {RELEASE_TIMEOUT_MARGIN_S:g} s + IMDS lag bound {IMDS_LAG_BOUND_S:g} s), "
            f"or an offered address could be given "
            f"to a pod while EC2 unassigns it"
        )
    return value


def _recovery_grace(env: Mapping[str, str], release_timeout_s: float) -> float:
    """After a rebuild that held every address, they return to the pool after this long
    (0: never). Shorter than the release timeout, an address a report of the previous
    process offered could return while that offer may still be acted on: refused."""
    value = _float(env, ENV_RECOVERY_GRACE_S, 0.0, hi=30 * 86_400.0)
    if 0 < value < release_timeout_s:
        raise ConfigError(
            f"{ENV_RECOVERY_GRACE_S}={value:g}: must be 0 (never) or at least the release timeout "
            f"{release_timeout_s:g} s ({ENV_RELEASE_TIMEOUT_S}), or an address an earlier report offered "
            f"could be given to a pod while EC2 unassigns it"
        )
    return value


@dataclass(frozen=True)
class Timing:
    """The controller's clocks (seconds). Defaults follow the VPC CNI where it has one."""

    cooldown_s: float = 30.0
    """``IP_COOLDOWN_PERIOD``: a freed address waits this long before reuse."""
    release_delay_s: float = 60.0
    """Surplus must persist this long before it is quarantined (hysteresis in time)."""
    release_timeout_s: float = 120.0
    """Quarantined addresses return to the pool if no ``released`` result comes in this time."""
    heartbeat_s: float = 60.0
    """A report goes out at least this often."""
    retry_s: float = 5.0
    """While short or with pods waiting, re-report this often if nothing comes back."""
    pending_ttl_s: float = 120.0
    """An unmet ADD stops counting as demand after this long without a retry."""
    eni_min_age_s: float = 60.0
    """An ENI younger than this is never offered for deletion (VPC CNI: one minute)."""
    burst_window_s: float = 30.0
    """``WARMPOOL_BURST_WINDOW_S``: two pods given addresses within this long make a burst. A report
    sent during one says ``burst`` (a top-up fills the ENI it touches), and surplus is not
    released until a burst has been over for ``release_delay_s``; 0: off."""
    lean_hold_s: float = names.LEAN_HOLD_DEFAULT_S
    """``WARMPOOL_LEAN_HOLD_S``: a result saying ``scarce`` keeps the node lean this long (renewed
    by each, on the monotonic clock); 0: fair sharing off here (``lean`` never reported)."""


@dataclass(frozen=True)
class AgentConfig:
    cluster: str
    node_name: str
    pool: PoolConfig
    timing: Timing
    mtu: int = 9001
    reports_queue_url: str = ""
    result_queue_prefix: str = ""
    socket_path: str = names.DEFAULT_SOCKET
    state_dir: str = names.DEFAULT_STATE_DIR
    metrics_addr: str = names.DEFAULT_METRICS_ADDR
    resync_s: float = 60.0
    add_wait_s: float = 10.0
    manage_host_network: bool = True
    host_netns: str = ""
    """Named netns holding the node's ENIs (tests); empty = the agent's own namespace."""
    veth_prefix: str = "eni"
    pod_network: str = "netlink"
    """``netlink`` wires pods in the kernel; ``recorded`` only records (no namespaces)."""
    recovery_grace_s: float = 0.0
    """After a checkpoint rebuild that could not read the host (``recorded``), every address
    is held until this long has passed; 0 = never released on its own (the node asks the
    allocator for fresh addresses instead): the conservative default."""
    adopt_launch_pool: bool = False
    """``WARMPOOL_ADOPT_LAUNCH_POOL``: at a start with no checkpoint and nothing routed to a pod
    on the host, ask the allocator to confirm the instance's first start and, confirmed, use what
    the node booted with (a launch template's addresses or /28s; docs/safety.md, row 30). Off by
    default: only for nodes that boot into warmpool (never moved in place from another CNI, whose
    releases no release book records) under a stack whose ledger table is kept (docs/deploy.md)."""
    region: str = "us-east-1"
    endpoint_url: str = ""
    extra: dict[str, str] = field(default_factory=dict)
    hostnet: HostNetSettings = field(default_factory=lambda: HostNetSettings())
    """Node-level networking (SNAT, NodePort return path, kernel settings, pod MTU)."""
    kubelet_config: tuple[str, ...] = DEFAULT_CONFIG_FILES
    """``WARMPOOL_KUBELET_CONFIG``: the kubelet's config file, the first of these that exists
    (its ``.d`` drop-ins with it); () = not read (:mod:`node_agent.kubelet_config`)."""
    kubelet_flags: tuple[str, ...] = DEFAULT_FLAG_FILES
    """``WARMPOOL_KUBELET_FLAGS``: files, or directories of ``*.conf``, holding the kubelet's flags."""

    @property
    def checkpoint_path(self) -> str:
        return f"{self.state_dir.rstrip('/')}/checkpoint.json"

    @property
    def metrics_host_port(self) -> tuple[str, int]:
        host, _, port = self.metrics_addr.rpartition(":")
        return host or "127.0.0.1", int(port)

    def public(self) -> dict[str, object]:
        """What ``/v1/config`` shows."""
        return {
            "cluster": self.cluster,
            "node": self.node_name,
            "targets": {
                "WARM_IP_TARGET": self.pool.warm_ip,
                "MINIMUM_IP_TARGET": self.pool.minimum_ip,
                "WARM_ENI_TARGET": self.pool.warm_eni,
                "WARM_PREFIX_TARGET": self.pool.warm_prefix,
                "MAX_ENI": self.pool.max_eni,
                "ENABLE_PREFIX_DELEGATION": self.pool.prefix_mode,
                names.AGENT_ENV_CUSTOM_NETWORKING: self.pool.custom_networking,
                names.ENV_MULTI_CARD: self.pool.multi_card,
            },
            "AWS_VPC_ENI_MTU": self.mtu,
            "IP_COOLDOWN_PERIOD": self.timing.cooldown_s,
            "timing": self.timing.__dict__,
            "reports_queue_url": self.reports_queue_url,
            "result_queue_prefix": self.result_queue_prefix,
            "socket": self.socket_path,
            "state_dir": self.state_dir,
            "metrics_addr": self.metrics_addr,
            "add_wait_s": self.add_wait_s,
            "manage_host_network": self.manage_host_network,
            "pod_network": self.pod_network,
            "recovery_grace_s": self.recovery_grace_s,
            ENV_ADOPT_LAUNCH_POOL: self.adopt_launch_pool,
            ENV_KUBELET_CONFIG: list(self.kubelet_config),
            ENV_KUBELET_FLAGS: list(self.kubelet_flags),
            **self.hostnet.public(),
        }


def load(env: Mapping[str, str]) -> AgentConfig:
    """Read and check every setting; :class:`ConfigError` names the first bad variable."""
    cluster = (env.get(ENV_CLUSTER_NAME) or env.get(names.ENV_CLUSTER) or "").strip()
    if not cluster:
        raise ConfigError(f"{ENV_CLUSTER_NAME} (or {names.ENV_CLUSTER}) must be set")
    pool = PoolConfig(
        warm_ip=_int(env, "WARM_IP_TARGET", 0),
        minimum_ip=_int(env, "MINIMUM_IP_TARGET", 0),
        warm_eni=_int(env, "WARM_ENI_TARGET", 1, hi=64),
        warm_prefix=_int(env, "WARM_PREFIX_TARGET", 0),
        max_eni=_int(env, "MAX_ENI", 0, hi=32),
        prefix_mode=_bool(env, "ENABLE_PREFIX_DELEGATION", default=False),
        max_pods=_int(env, names.ENV_MAX_PODS, 0, hi=names.MAX_PODS_OVERRIDE),
        custom_networking=_bool(env, names.AGENT_ENV_CUSTOM_NETWORKING, default=False),
        multi_card=_bool(env, names.ENV_MULTI_CARD, default=False),
    )
    heartbeat = _float(env, names.AGENT_ENV_HEARTBEAT_S, 60.0, lo=1.0)
    timing = Timing(
        cooldown_s=_float(env, "IP_COOLDOWN_PERIOD", 30.0),
        release_delay_s=_float(env, ENV_RELEASE_DELAY_S, 60.0),
        release_timeout_s=_release_timeout(env),
        heartbeat_s=heartbeat,
        retry_s=_float(env, ENV_RETRY_S, 5.0, lo=0.1),
        pending_ttl_s=_float(env, ENV_PENDING_TTL_S, 120.0, lo=1.0),
        burst_window_s=_float(env, ENV_BURST_WINDOW_S, 30.0, hi=600.0),
        lean_hold_s=_float(env, names.AGENT_ENV_LEAN_HOLD_S, names.LEAN_HOLD_DEFAULT_S, hi=names.LEAN_HOLD_MAX_S),
    )
    metrics_addr = env.get(names.AGENT_ENV_METRICS_ADDR, names.DEFAULT_METRICS_ADDR).strip()
    _host, sep, port = metrics_addr.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ConfigError(f"{names.AGENT_ENV_METRICS_ADDR}={metrics_addr!r}: expected HOST:PORT")
    return AgentConfig(
        cluster=cluster,
        node_name=env.get(ENV_NODE_NAME, "").strip(),
        pool=pool,
        timing=timing,
        mtu=_int(env, "AWS_VPC_ENI_MTU", 9001, lo=576, hi=9001),
        reports_queue_url=env.get(names.AGENT_ENV_REPORTS_QUEUE_URL, "").strip(),
        result_queue_prefix=env.get(names.AGENT_ENV_RESULT_QUEUE_PREFIX, "").strip()
        or names.result_queue_prefix(cluster),
        socket_path=env.get(names.AGENT_ENV_SOCKET, "").strip() or names.DEFAULT_SOCKET,
        state_dir=env.get(names.AGENT_ENV_STATE_DIR, "").strip() or names.DEFAULT_STATE_DIR,
        metrics_addr=metrics_addr,
        resync_s=_float(env, ENV_RESYNC_S, 60.0, lo=1.0),
        add_wait_s=_float(env, ENV_ADD_WAIT_S, 10.0, hi=600.0),
        manage_host_network=_bool(env, ENV_MANAGE_HOST, default=True),
        host_netns=env.get(ENV_HOST_NETNS, "").strip(),
        veth_prefix=_veth_prefix(env),
        pod_network=_choice(env, ENV_POD_NETWORK, ("netlink", "recorded"), "netlink"),
        recovery_grace_s=_recovery_grace(env, timing.release_timeout_s),
        adopt_launch_pool=_bool(env, ENV_ADOPT_LAUNCH_POOL, default=False),
        region=(env.get(ENV_AWS_REGION) or env.get("AWS_DEFAULT_REGION") or "us-east-1").strip(),
        endpoint_url=env.get(ENV_ENDPOINT, "").strip(),
        hostnet=load_hostnet(env),
        kubelet_config=_paths(env, ENV_KUBELET_CONFIG, DEFAULT_CONFIG_FILES),
        kubelet_flags=_paths(env, ENV_KUBELET_FLAGS, DEFAULT_FLAG_FILES),
    )


VETH_PREFIX_MAX = 7
"""The longest veth prefix: a pod's host veth is the prefix and the attachment's digest cut at 15
characters, and the agent tells one attachment's veth from another's by at least 8 hex digits
(``node_agent.hostnet.VETH_DIGEST_MIN``). A longer prefix leaves fewer, and attachments share a
veth name and a recovered holder (review 28, V1: at 15 characters every one of them)."""


def _veth_prefix(env: Mapping[str, str]) -> str:
    ours, vpc_cni = env.get(ENV_VETH_PREFIX, "").strip(), env.get(ENV_CNI_VETH_PREFIX, "").strip()
    name = ENV_VETH_PREFIX if ours else ENV_CNI_VETH_PREFIX
    prefix = ours or vpc_cni or "eni"
    if len(prefix) > VETH_PREFIX_MAX or any(c in "/:\x00" or c.isspace() or not c.isascii() for c in prefix):
        raise ConfigError(
            f"{name}={prefix!r}: a veth prefix is 1 to {VETH_PREFIX_MAX} characters valid in an interface name"
        )
    return prefix


# --- node-level host networking (the VPC CNI's host settings) --------------------------------

ENV_EXTERNAL_SNAT = "AWS_VPC_K8S_CNI_EXTERNALSNAT"
ENV_EXCLUDE_SNAT_CIDRS = "AWS_VPC_K8S_CNI_EXCLUDE_SNAT_CIDRS"
ENV_RANDOMIZE_SNAT = "AWS_VPC_K8S_CNI_RANDOMIZESNAT"
ENV_NODE_PORT_SUPPORT = "AWS_VPC_CNI_NODE_PORT_SUPPORT"
ENV_CONNMARK = "AWS_VPC_K8S_CNI_CONNMARK"
ENV_CONFIGURE_RPFILTER = "AWS_VPC_K8S_CNI_CONFIGURE_RPFILTER"
ENV_POD_MTU = "POD_MTU"
ENV_CNI_VETH_PREFIX = "AWS_VPC_K8S_CNI_VETHPREFIX"
ENV_SKIP_UNMANAGED = "WARMPOOL_SKIP_UNMANAGED_ENIS"
RANDOMIZE_SNAT = ("prng", "hashrandom", "none")
DEFAULT_CONNMARK = 0x80


@dataclass(frozen=True)
class HostNetSettings:
    """What the VPC CNI's ``aws-node`` does on the node besides ENIs and pods (docs/agent.md, "Node networking")."""

    external_snat: bool = False
    """``AWS_VPC_K8S_CNI_EXTERNALSNAT``: true = no SNAT on the node (a NAT gateway does it)."""
    exclude_snat_cidrs: tuple[str, ...] = ()
    """``AWS_VPC_K8S_CNI_EXCLUDE_SNAT_CIDRS``: more destinations left un-SNATed (as the VPC's own CIDRs)."""
    randomize_snat: str = "prng"
    """``AWS_VPC_K8S_CNI_RANDOMIZESNAT``: ``prng`` (fully random ports), ``hashrandom``, ``none``."""
    node_port_support: bool = True
    """``AWS_VPC_CNI_NODE_PORT_SUPPORT``: mark connections arriving on the primary ENI so replies leave by it."""
    connmark: int = DEFAULT_CONNMARK
    """``AWS_VPC_K8S_CNI_CONNMARK``: the connection/packet mark bit used by both of the above."""
    configure_rp_filter: bool = True
    """``AWS_VPC_K8S_CNI_CONFIGURE_RPFILTER``: set loose ``rp_filter`` (2) on the primary ENI."""
    pod_mtu: int = 9001
    """``POD_MTU`` (default: ``AWS_VPC_ENI_MTU``): MTU of both ends of every pod veth."""
    eni_mtu: int = 9001
    """``AWS_VPC_ENI_MTU`` again, for the primary ENI (secondary ENIs get it through the controller)."""
    skip_unmanaged_enis: bool = True
    """``WARMPOOL_SKIP_UNMANAGED_ENIS``: look up ENI tags and leave ``node.k8s.amazonaws.com/no_manage=true`` alone."""

    def public(self) -> dict[str, object]:
        return {
            ENV_EXTERNAL_SNAT: self.external_snat,
            ENV_EXCLUDE_SNAT_CIDRS: list(self.exclude_snat_cidrs),
            ENV_RANDOMIZE_SNAT: self.randomize_snat,
            ENV_NODE_PORT_SUPPORT: self.node_port_support,
            ENV_CONNMARK: hex(self.connmark),
            ENV_CONFIGURE_RPFILTER: self.configure_rp_filter,
            ENV_POD_MTU: self.pod_mtu,
            "skip_unmanaged_enis": self.skip_unmanaged_enis,
        }


def _cidrs(env: Mapping[str, str], name: str) -> tuple[str, ...]:
    import ipaddress

    out: list[str] = []
    for item in env.get(name, "").split(","):
        item = item.strip()
        if not item:
            continue
        try:
            out.append(str(ipaddress.IPv4Network(item, strict=False)))
        except ValueError:
            raise ConfigError(f"{name}: {item!r} is not an IPv4 CIDR") from None
    return tuple(out)


def _mark(env: Mapping[str, str], name: str, default: int) -> int:
    raw = env.get(name, "").strip()
    if raw == "":
        return default
    try:
        value = int(raw, 0)
    except ValueError:
        raise ConfigError(f"{name}={raw!r}: not an integer (decimal or 0x…)") from None
    if not 0 < value <= 0xFFFFFFFF:
        raise ConfigError(f"{name}={raw}: must be between 1 and 0xffffffff")
    return value


def load_hostnet(env: Mapping[str, str]) -> HostNetSettings:
    """The node-level networking settings; :class:`ConfigError` names the first bad variable."""
    eni_mtu = _int(env, "AWS_VPC_ENI_MTU", 9001, lo=576, hi=9001)
    external = _bool(env, ENV_EXTERNAL_SNAT, default=False)
    return HostNetSettings(
        external_snat=external,
        exclude_snat_cidrs=_cidrs(env, ENV_EXCLUDE_SNAT_CIDRS),
        randomize_snat=_choice(env, ENV_RANDOMIZE_SNAT, RANDOMIZE_SNAT, "prng"),
        node_port_support=_bool(env, ENV_NODE_PORT_SUPPORT, default=True),
        connmark=_mark(env, ENV_CONNMARK, DEFAULT_CONNMARK),
        configure_rp_filter=_bool(env, ENV_CONFIGURE_RPFILTER, default=True),
        pod_mtu=_int(env, ENV_POD_MTU, eni_mtu, lo=576, hi=9001),
        eni_mtu=eni_mtu,
        skip_unmanaged_enis=_bool(env, ENV_SKIP_UNMANAGED, default=True),
    )
