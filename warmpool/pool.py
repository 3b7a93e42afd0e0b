"""Pool math: how many addresses a node is short of, or may give back.

The VPC CNI's target semantics (docs/design.md, "Outside facts") in both modes, exactly, with
two additions: CNI ADDs waiting for an address count as demand (surge), and
the max-pods ceiling caps every target. The agent (when to report, what to
quarantine) and the allocator (what to allocate, what release to accept) both
call :func:`compute`; there is no second copy of these rules.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from warmpool.limits import PREFIX_SIZE, InstanceLimits, is_primary_slot
from warmpool.messages import EniReport, PoolReport


@dataclass(frozen=True)
class PoolConfig:
    """The targets a node runs with (0 = unset), as the VPC CNI reads them."""

    warm_ip: int = 0
    minimum_ip: int = 0
    warm_eni: int = 1
    warm_prefix: int = 0
    max_eni: int = 0
    """0 = the instance type's limit."""
    prefix_mode: bool = False
    max_pods: int = 0
    """0 = the formula's ceiling (every slot of every usable ENI)."""
    kubelet_max_pods: int = 0
    """The node's kubelet's configured ``maxPods`` as the agent read it (0 = not known). The agent
    reports it and lowers ``max_pods`` to it (:func:`warmpool.limits.pod_ceiling`), as the allocator does."""
    custom_networking: bool = False
    """Pods never use the primary ENI (``AWS_VPC_K8S_CNI_CUSTOM_NETWORK_CFG``): one ENI fewer for pods."""
    multi_card: bool = False
    """ENIs on every network card of the type count (``WARMPOOL_MULTI_CARD``, issue 24); off: the
    default card's alone, as the VPC CNI's formulas count them."""
    lean: bool = False
    """Fair sharing (docs/allocator.md, "Scarce addresses shared fairly"): the node's zone is short
    of free addresses. The warm targets (``WARM_IP_TARGET``, ``WARM_PREFIX_TARGET``,
    ``WARM_ENI_TARGET``) are suspended: the pool keeps ``MINIMUM_IP_TARGET`` addresses in all (0
    when unset), more only for pods that wait, and every free address or free /28 above that floor
    is surplus. Read from the report (``PoolReport.lean``) by the allocator, set by the agent while
    told ``scarce``: both sides compute with the same flag."""

    def __post_init__(self) -> None:
        for name in ("warm_ip", "minimum_ip", "warm_eni", "warm_prefix", "max_eni", "max_pods", "kubelet_max_pods"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")

    @property
    def ip_targets(self) -> bool:
        """``WARM_IP_TARGET``/``MINIMUM_IP_TARGET`` rule when either is set."""
        return self.warm_ip > 0 or self.minimum_ip > 0

    @classmethod
    def from_report(cls, report: PoolReport) -> PoolConfig:
        t = report.targets
        return cls(
            warm_ip=t.warm_ip,
            minimum_ip=t.minimum_ip,
            warm_eni=t.warm_eni,
            warm_prefix=t.warm_prefix,
            max_eni=t.max_eni,
            prefix_mode=report.mode == "prefix",
            custom_networking=bool(report.custom_networking),
            lean=bool(report.lean),
        )


@dataclass(frozen=True)
class PoolState:
    """A node's pool in addresses (prefix mode: 16 per /28 held)."""

    total: int
    assigned: int
    pending: int = 0
    enis: int = 1
    free_prefixes: int = 0
    free_singles: int = 0
    """Prefix mode: free single addresses (not in a /28), the fallback on ``InsufficientCidrBlocks``."""

    @property
    def available(self) -> int:
        """Free addresses once waiting pods are served (negative = starved)."""
        return self.total - self.assigned - self.pending

    @classmethod
    def from_report(cls, report: PoolReport) -> PoolState:
        """The pool as the report states it. A custom-networking node's primary ENI, reported
        while pods it had before keep their addresses on it, is not the pool's: only those
        pods count (in ``total`` and ``assigned`` alike, as the agent's own counts hold a held
        ENI), never its free addresses."""
        enis = [e for e in report.enis if not (report.custom_networking and _primary(e))]
        held = sum(e.assigned for e in report.enis if report.custom_networking and _primary(e))
        total = held + sum(len(e.ips) + PREFIX_SIZE * len(e.prefixes) for e in enis)
        free_prefixes = sum(
            max(0, len(e.prefixes) - math.ceil(max(0, e.assigned - len(e.ips)) / PREFIX_SIZE)) for e in enis
        )
        return cls(
            total=total,
            assigned=report.assigned_ips,
            pending=report.pending_demand,
            enis=len(enis),
            free_prefixes=free_prefixes,
            free_singles=sum(max(0, len(e.ips) - e.assigned) for e in enis),
        )


def _primary(e: EniReport) -> bool:
    """The node's primary ENI (device 0 on the first network card; device 0 of another card is not)."""
    return is_primary_slot(e.network_card, e.device_index)


@dataclass(frozen=True)
class PoolDelta:
    """What the pool needs. ``*_units`` are addresses, or /28s in prefix mode."""

    short: int
    short_units: int
    whole_enis: bool
    over: int
    over_units: int
    over_enis: int
    over_singles: int = 0
    """Prefix mode: free single addresses that may go besides ``over_units`` /28s (in ``over``)."""

    @property
    def low(self) -> bool:
        return self.short_units > 0

    @property
    def high(self) -> bool:
        return self.over_units > 0 or self.over_enis > 0 or self.over_singles > 0


def ceiling(cfg: PoolConfig, limits: InstanceLimits) -> int:
    """Most addresses the node may hold for pods: its slots, capped by max pods."""
    cap = limits.capacity(
        prefix_mode=cfg.prefix_mode,
        max_eni=cfg.max_eni,
        custom_networking=cfg.custom_networking,
        multi_card=cfg.multi_card,
    )
    return min(cap, cfg.max_pods) if cfg.max_pods > 0 else cap


def compute(cfg: PoolConfig, state: PoolState, limits: InstanceLimits) -> PoolDelta:
    """The VPC CNI target semantics plus surge and the max-pods ceiling."""
    unit = PREFIX_SIZE if cfg.prefix_mode else 1
    per_eni = limits.slots_per_eni * unit
    available = state.available
    whole_enis = False
    over = 0
    over_units = 0
    over_enis = 0
    over_singles = 0

    # Prefix mode: single addresses (the fallback when no /28 was free) go back too, as far as
    # the pool still meets its target without them (else the next report would ask again).
    if cfg.lean:
        # The warm targets suspended: the ip-targets rule with WARM_IP_TARGET 0, whatever mode
        # the targets pick otherwise. Pods that wait still make the node short; what is free
        # above MINIMUM_IP_TARGET in all is surplus (single addresses, free /28s).
        cfg = replace(cfg, warm_ip=0, warm_prefix=0, warm_eni=0)
    if cfg.lean or cfg.ip_targets:
        short = max(cfg.warm_ip - available, 0)
        short = max(short, cfg.minimum_ip - state.total)
        over = max(available - cfg.warm_ip, 0)
        over = max(min(over, state.total - cfg.minimum_ip), 0)
        over_units = over if not cfg.prefix_mode else min(state.free_prefixes, over // PREFIX_SIZE)
        if cfg.prefix_mode:
            over_singles = max(0, min(state.free_singles, over - PREFIX_SIZE * over_units))
    elif cfg.prefix_mode and cfg.warm_prefix > 0:
        short = max(PREFIX_SIZE * cfg.warm_prefix - available, 0)
        over_units = max(state.free_prefixes - cfg.warm_prefix, 0)
        spare = available - PREFIX_SIZE * (cfg.warm_prefix + over_units)
        over_singles = max(0, min(state.free_singles, spare))
        over = over_units * PREFIX_SIZE + over_singles
    else:
        whole_enis = True
        target = per_eni * cfg.warm_eni
        short = max(target - available, 0) if cfg.warm_eni > 0 else max(1 - available, 0)
        keep = target if cfg.warm_eni > 0 else 1  # WARM_ENI_TARGET=0 is low at 0 free
        if available >= keep + per_eni and state.enis > 1:
            # Only whole surplus ENIs go, and never the primary one.
            over_enis = min((available - keep) // per_eni, state.enis - 1)
            over = over_enis * per_eni
            over_units = 0

    if state.pending > 0:
        over = over_units = over_enis = over_singles = 0
    short = max(0, min(short, ceiling(cfg, limits) - state.total))
    short_units = math.ceil(short / unit)
    return PoolDelta(
        short=short,
        short_units=short_units,
        whole_enis=whole_enis,
        over=over,
        over_units=over_units,
        over_enis=over_enis,
        over_singles=over_singles,
    )
