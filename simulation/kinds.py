"""The schedule's events, one frozen dataclass per kind (:mod:`simulation.schedule` draws
them, :mod:`simulation.events` applies each through its dispatch table).

Every event has its time ``at`` and its ``kind`` (the name the command line and the
replay use); its other fields are the kind's arguments, ``args`` lists them by name.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, ClassVar


@dataclass(frozen=True)
class Event:
    at: float
    kind: ClassVar[str] = ""

    @property
    def args(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "at"}

    def summary(self) -> str:
        inner = ", ".join(f"{k}={v}" for k, v in sorted(self.args.items()))
        return f"t={self.at:.1f} {self.kind}({inner})"


@dataclass(frozen=True)
class NodeEvent(Event):
    """An event of one of the seed's nodes (``node``: its name)."""

    node: str


@dataclass(frozen=True)
class Window(Event):
    """A fault open for ``dur`` seconds."""

    dur: float


# --- pods -----------------------------------------------------------------------------


@dataclass(frozen=True)
class PodsAdd(NodeEvent):
    kind: ClassVar[str] = "pods-add"
    n: int


@dataclass(frozen=True)
class PodsDel(NodeEvent):
    kind: ClassVar[str] = "pods-del"
    n: int


@dataclass(frozen=True)
class Churn(NodeEvent):
    kind: ClassVar[str] = "churn"
    n: int


# --- the world's faults ---------------------------------------------------------------


@dataclass(frozen=True)
class SqsDelay(Window):
    kind: ClassVar[str] = "sqs-delay"
    max_s: float


@dataclass(frozen=True)
class SqsDuplicate(Window):
    kind: ClassVar[str] = "sqs-duplicate"
    rate: float
    copies: int


@dataclass(frozen=True)
class ImdsLag(NodeEvent):
    kind: ClassVar[str] = "imds-lag"
    lag: float
    dur: float


@dataclass(frozen=True)
class AgentKill(NodeEvent):
    kind: ClassVar[str] = "agent-kill"
    point: str
    down: float


@dataclass(frozen=True)
class LambdaCrash(Window):
    kind: ClassVar[str] = "lambda-crash"
    rate: float


@dataclass(frozen=True)
class SlowInvocation(Window):
    kind: ClassVar[str] = "slow-invocation"
    rate: float


@dataclass(frozen=True)
class ThrottleStorm(Window):
    kind: ClassVar[str] = "throttle-storm"
    rate: float
    describe: bool
    """Describe calls are throttled too."""


@dataclass(frozen=True)
class ForeignLoad(Window):
    kind: ClassVar[str] = "foreign-load"
    action: str
    rate: float


@dataclass(frozen=True)
class SubnetExhausted(Window):
    kind: ClassVar[str] = "subnet-exhausted"


@dataclass(frozen=True)
class Fragmentation(Event):
    kind: ClassVar[str] = "fragmentation"
    n: int


@dataclass(frozen=True)
class AttachFailure(Window):
    kind: ClassVar[str] = "attach-failure"
    rate: float


@dataclass(frozen=True)
class Terminate(NodeEvent):
    kind: ClassVar[str] = "terminate"


@dataclass(frozen=True)
class ReplaceNode(NodeEvent):
    kind: ClassVar[str] = "replace-node"
    gap: float
    race: bool


@dataclass(frozen=True)
class CniOverlap(NodeEvent):
    kind: ClassVar[str] = "cni-overlap"


@dataclass(frozen=True)
class CniInterrupted(NodeEvent):
    kind: ClassVar[str] = "cni-interrupted"


@dataclass(frozen=True)
class CniGc(NodeEvent):
    kind: ClassVar[str] = "cni-gc"


@dataclass(frozen=True)
class CniHostile(NodeEvent):
    kind: ClassVar[str] = "cni-hostile"
    variant: str


@dataclass(frozen=True)
class DdbUnprocessed(Window):
    kind: ClassVar[str] = "ddb-unprocessed"
    rate: float


@dataclass(frozen=True)
class QueueDeleteFailure(Window):
    kind: ClassVar[str] = "queue-delete-failure"


@dataclass(frozen=True)
class ReconcileRace(Window):
    kind: ClassVar[str] = "reconcile-race"


# --- issue 12's hostile nodes (``node`` "": the outsider) ------------------------------


@dataclass(frozen=True)
class ForgedRelease(NodeEvent):
    kind: ClassVar[str] = "forged-release"
    victim: str
    identity: str
    repeat: int


@dataclass(frozen=True)
class SeqPoison(NodeEvent):
    kind: ClassVar[str] = "seq-poison"
    victim: str
    identity: str
    repeat: int


@dataclass(frozen=True)
class NameSpray(NodeEvent):
    kind: ClassVar[str] = "name-spray"
    n: int


@dataclass(frozen=True)
class ChurnerLaunch(Event):
    """A rogue instance launching and terminating ENIs every ``period`` s for ``dur`` s."""

    kind: ClassVar[str] = "churner"
    itype: str
    dur: float
    period: float


@dataclass(frozen=True)
class ResultTheft(NodeEvent):
    kind: ClassVar[str] = "result-theft"
    victim: str
    dur: float


# --- issue 21's faults of a node's agent and host -------------------------------------


@dataclass(frozen=True)
class CheckpointLost(NodeEvent):
    kind: ClassVar[str] = "checkpoint-lost"
    down: float


@dataclass(frozen=True)
class CheckpointTruncated(NodeEvent):
    kind: ClassVar[str] = "checkpoint-truncated"
    down: float
    keep: float


@dataclass(frozen=True)
class CheckpointCorrupt(NodeEvent):
    kind: ClassVar[str] = "checkpoint-corrupt"
    down: float
    start: float
    n: int


@dataclass(frozen=True)
class CheckpointDamagedParses(NodeEvent):
    """The agent dies and its checkpoint file is damaged so that it still parses and validates
    (``variant``): ``drop-pod`` (a pod's entry gone), ``move-pod`` (a pod's address changed
    to a free one of its ENI), ``old-copy`` (an earlier save, as a backup restores it);
    ``pick`` (0-1) chooses which pod or save. It starts again ``down`` seconds later."""

    kind: ClassVar[str] = "checkpoint-damaged-parses"
    down: float
    variant: str
    pick: float


@dataclass(frozen=True)
class CheckpointWriteError(NodeEvent):
    kind: ClassVar[str] = "checkpoint-write-error"
    dur: float
    errno: str


@dataclass(frozen=True)
class TagLookupFailure(Event):
    kind: ClassVar[str] = "tag-lookup-failure"
    nodes: str
    gap: float
    dur: float


@dataclass(frozen=True)
class ClockSkew(NodeEvent):
    kind: ClassVar[str] = "clock-skew"
    skew: float


@dataclass(frozen=True)
class CniReadd(NodeEvent):
    """The runtime DELs one of the node's running attachments made at least the GC's minimum age
    before and ADDs it again at once (the same sandbox retried), then runs a GC whose list it
    took before that ADD was answered (so the list lacks it): between two GCs, one attachment
    made twice (review of the multi-card change and 42ff263, F1)."""

    kind: ClassVar[str] = "cni-readd"


@dataclass(frozen=True)
class HostWiring(NodeEvent):
    """The host's pod wiring changes under the agent (``variant``: :meth:`simulation.node.SimPods.disturb`),
    then, ``delay`` s later, the agent's process ends (``then``: ``restart``), its checkpoint too
    (``checkpoint-lost``), or an older copy of it is what the disk holds (``old-copy``), and it
    starts again ``down`` s after that; ``none``: it runs on. ``pick`` (0-1) chooses the pod or the
    older copy."""

    kind: ClassVar[str] = "host-wiring"
    variant: str
    then: str
    delay: float
    down: float
    pick: float


@dataclass(frozen=True)
class AddCut(NodeEvent):
    """The node's agent killed in the middle of a CNI ADD (kill -9, an OOM kill): in the pod's
    set-up, after its veth pair is made and before its ``/32`` route and pod rule
    (:meth:`simulation.node.SimPods.setup`), the next ADD that reaches set-up within
    :data:`simulation.events.ADD_CUT_ARMED_S` (one pod started on the node if its runtime makes
    none). With ``written``, the datastore's assignment is on disk, as the agent orders it
    (``Datastore.assign`` writes before ``setup_pod``); without, the disk lacks that write (a disk
    that lost its last write). With ``addressed``, the pod's interface already carries the address
    (``setup_pod`` sets it before the host's route). The ADD fails; the agent starts again ``down``
    s later and the runtime retries the ADD of the same container, with no DEL between."""

    kind: ClassVar[str] = "add-cut"
    written: bool
    down: float
    addressed: bool = False


# --- issue 21's harsh world: what AWS does not promise (docs/emulated-ec2.md) ------------


@dataclass(frozen=True)
class DescribeStale(Window):
    """DescribeNetworkInterfaces and DescribeInstances answer from a moment up to ``lag_s`` ago."""

    kind: ClassVar[str] = "describe-stale"
    lag_s: float


@dataclass(frozen=True)
class InstanceUnlisted(NodeEvent):
    """The node's instance (a new one if ``replace``) is missing from DescribeInstances for ``dur`` s."""

    kind: ClassVar[str] = "instance-unlisted"
    dur: float
    replace: bool


@dataclass(frozen=True)
class SlowDetach(Window):
    """Every detach takes ``delay_s`` (the ENI ``detaching`` in Describe and IMDS meanwhile)."""

    kind: ClassVar[str] = "slow-detach"
    delay_s: float


@dataclass(frozen=True)
class StuckDetach(Window):
    """A detach answered success leaves the ENI attached (``rate``) until a retry or a force."""

    kind: ClassVar[str] = "stuck-detach"
    rate: float


@dataclass(frozen=True)
class SlowAttach(Window):
    """Every attach takes ``delay_s`` before the ENI shows attached and appears in IMDS."""

    kind: ClassVar[str] = "slow-attach"
    delay_s: float


@dataclass(frozen=True)
class ImdsLagLong(ImdsLag):
    """IMDS lag with no bound the code may assume (up to minutes past 120 s)."""

    kind: ClassVar[str] = "imds-lag-long"


@dataclass(frozen=True)
class ImdsTorn(NodeEvent):
    """Each IMDS leaf read on its own: an ENI's addresses from a moment up to ``span`` s apart
    from the ENI list's; with ``no_card``, half the reads also miss the ``network-card`` leaf of
    some interfaces, never of all (docs/safety.md row 29)."""

    kind: ClassVar[str] = "imds-torn"
    dur: float
    span: float
    no_card: bool = False


@dataclass(frozen=True)
class Ec2Ambiguous(Window):
    """Mutating ENI calls take effect and lose their answer (``rate``): ``how`` ``InternalError``
    or ``sdk-retry`` (a dropped connection the SDK retries)."""

    kind: ClassVar[str] = "ec2-ambiguous"
    rate: float
    how: str


@dataclass(frozen=True)
class InstanceType(NodeEvent):
    """The node's instance replaced by one of ``itype`` (any the limits table knows); with
    ``efa``, launched as p5.48xlarge, trn1 and trn2 are for EFA: an EFA-only interface (no IP
    address, so no ``local-ipv4s`` in IMDS) at device 0 of every network card above 0.

    With ``foreign``, another tool (an SR-IOV network's, an EFA with ENA's) attaches an ordinary
    ENI with addresses of its own, untagged, at the first free device of network card 1 once the
    new instance runs: never the pool's without ``WARMPOOL_MULTI_CARD`` (docs/safety.md rows 26
    and 29). For ``no_card_s`` seconds from then every IMDS read of the node misses the
    ``network-card`` leaf of some interfaces, never of all, as ``imds-torn``'s ``no_card`` does in
    half its reads (the world where a missing leaf can put an interface on the wrong card)."""

    kind: ClassVar[str] = "instance-type"
    itype: str
    gap: float
    efa: bool = False
    foreign: bool = False
    no_card_s: float = 0.0

    def efa_only_slots(self) -> tuple[tuple[int, int], ...]:
        """The ``(network card, device index)`` of each EFA-only interface it launches with."""
        if not self.efa:
            return ()
        from warmpool.limits import KNOWN_TYPES

        return tuple((card, 0) for card in range(1, KNOWN_TYPES[self.itype].network_cards))


@dataclass(frozen=True)
class ReportFlood(NodeEvent):
    """The node sends ``n`` valid reports every ``period`` s for ``dur`` s: fresh ones from its
    agent (honest) or copies of its last signed one (``hostile``)."""

    kind: ClassVar[str] = "report-flood"
    n: int
    period: float
    dur: float
    hostile: bool


@dataclass(frozen=True)
class ImdsRegress(NodeEvent):
    """For ``dur`` s each IMDS read of the node answers from a moment drawn up to ``back_s``
    before the newest it would show: older than one already served (replicas at different lags)."""

    kind: ClassVar[str] = "imds-regress"
    dur: float
    back_s: float


@dataclass(frozen=True)
class LambdaClockSkew(Window):
    """For ``dur`` s each allocator invocation runs in one of the containers whose clocks are
    off the world's by ``skews`` (comma list of seconds, either sign): leases, offer ages, the
    release delay, every reading of its clock."""

    kind: ClassVar[str] = "lambda-clock-skew"
    skews: str

    def offsets(self) -> list[float]:
        return [float(x) for x in self.skews.split(",")]


@dataclass(frozen=True)
class StaleChurn(Event):
    """Pods churning in a ``describe-stale`` window, from when it opens (``at``, the window's): on
    the node running the most pods then, each of ``steps``, ``(s, n)``, ``s`` seconds later,
    creates ``n`` pods (``n`` > 0) or deletes the ``-n`` oldest, as ``pods-del`` does (a burst, old
    pods deleted, pods created again). The world where a plan's Describe misses a grant made in the
    window while the node offers back addresses it held from before it (docs/safety.md, the ninth
    review's R1)."""

    kind: ClassVar[str] = "stale-churn"
    steps: tuple[tuple[float, int], ...]


# --- issue 25's bursts ------------------------------------------------------------------


@dataclass(frozen=True)
class AgentBursts(Event):
    """Every agent runs with ``WARMPOOL_BURST_WINDOW_S`` = ``window`` (its default, 30 s) from the
    start; a seed without this event runs its agents with bursts off (the world before them)."""

    kind: ClassVar[str] = "agent-bursts"
    window: float


# --- issue 25's launch pools ------------------------------------------------------------


@dataclass(frozen=True)
class LaunchPool(Event):
    """Every node the seed launches (at the start, and every replacement) boots with ``units``
    on its primary ENI, as a launch template's ``SecondaryPrivateIpAddressCount`` (addresses) or, in
    prefix mode, ``Ipv4PrefixCount`` (/28s) gives them (capped by the type's slots); a seed without
    this event launches its nodes with none (the world before launch pools)."""

    kind: ClassVar[str] = "launch-pool"
    units: int


# --- issue 24's subnet worlds (simulation/subnets.py sets them up) ----------------------


@dataclass(frozen=True)
class MultiSubnet(Event):
    """Pod subnets found by discovery: besides the nodes' own, subnets in their zone tagged
    ``kubernetes.io/role/cni=1`` of the prefix lengths ``sizes`` (comma list, the first small
    enough to fill); ``excluded``: ``own`` (the nodes' subnet tagged ``=0``), ``extra`` (another
    subnet, a large one, tagged ``=0``) or none; ``late``: one more subnet, untagged until ``at``;
    ``main_free`` above 0: foreign ENIs hold all but that many of the nodes' subnet's addresses."""

    kind: ClassVar[str] = "multi-subnet"
    sizes: str
    excluded: str
    late: bool
    main_free: int


@dataclass(frozen=True)
class Fragmented(Event):
    """The nodes' subnet with ``broken`` (a fraction) of its /28s broken by a foreign address, and a
    second pod subnet (tagged ``kubernetes.io/role/cni=1``, prefix length ``second``) with
    ``second_broken`` of its own; ``reservation``: half of the second one under a ``prefix``
    subnet CIDR reservation; ``named``: the stack's ``named_placement``."""

    kind: ClassVar[str] = "fragmented"
    broken: float
    second: int
    second_broken: float
    reservation: bool
    named: bool


@dataclass(frozen=True)
class CustomNetworking(Event):
    """The allocator's custom-networking map gives the nodes' zone subnets of the prefix lengths
    ``sizes`` (comma list; ``groups``: and a security group), and the agents of ``nodes`` (comma
    list) run with ``AWS_VPC_K8S_CNI_CUSTOM_NETWORK_CFG``; ``tagged``: the mapped subnets also
    carry ``kubernetes.io/role/cni=1`` (discovery must still leave them to the custom nodes)."""

    kind: ClassVar[str] = "custom-networking"
    sizes: str
    nodes: str
    tagged: bool
    groups: bool


EVENT_TYPES: dict[str, type[Event]] = {
    c.kind: c
    for c in (
        PodsAdd,
        PodsDel,
        Churn,
        SqsDelay,
        SqsDuplicate,
        ImdsLag,
        AgentKill,
        LambdaCrash,
        SlowInvocation,
        ThrottleStorm,
        ForeignLoad,
        SubnetExhausted,
        Fragmentation,
        AttachFailure,
        Terminate,
        ReplaceNode,
        CniOverlap,
        CniInterrupted,
        CniGc,
        CniHostile,
        DdbUnprocessed,
        QueueDeleteFailure,
        ReconcileRace,
        ForgedRelease,
        SeqPoison,
        NameSpray,
        ChurnerLaunch,
        ResultTheft,
        CheckpointLost,
        CheckpointTruncated,
        CheckpointCorrupt,
        CheckpointDamagedParses,
        CheckpointWriteError,
        TagLookupFailure,
        ClockSkew,
        CniReadd,
        DescribeStale,
        InstanceUnlisted,
        SlowDetach,
        StuckDetach,
        SlowAttach,
        ImdsLagLong,
        ImdsTorn,
        Ec2Ambiguous,
        InstanceType,
        ReportFlood,
        ImdsRegress,
        LambdaClockSkew,
        StaleChurn,
        MultiSubnet,
        Fragmented,
        CustomNetworking,
        AgentBursts,
        LaunchPool,
        HostWiring,
        AddCut,
    )
}
"""Each kind's name -> its event type."""


def make_event(at: float, kind: str, args: dict[str, Any]) -> Event:
    """The event of ``kind`` at ``at`` with ``args`` (its fields by name)."""
    return EVENT_TYPES[kind](at=at, **args)
