"""The pool controller: decides when to report, what to quarantine and offer
back, and applies the allocator's results to the datastore and the host.

Clock-injected and free of I/O of its own: the agent (or the bench) calls
:meth:`PoolController.tick` with the time and sends the reports it returns;
it hands every result to :meth:`PoolController.apply_result`. The host and
IMDS are reached through two small ports (:class:`HostNetwork`,
:class:`MetadataView`); either may be ``None`` in the bench (results are then
trusted as they come and nothing is set up on a host).

Pool arithmetic is the core's (:func:`warmpool.pool.compute`), never redone here.
"""

from __future__ import annotations

import hashlib
import ipaddress
import logging
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import replace
from typing import NamedTuple, Protocol

from pydantic import ValidationError

from node_agent.checkpoint import CheckpointWriteError
from node_agent.claims import ParkedClaims
from node_agent.config import Timing
from node_agent.controller_stats import ControllerStats
from node_agent.datastore import HELD_OFFERS, UNKNOWN_ON_RELEASE, Datastore
from node_agent.records import UNKNOWN_HOLDER, Addr, Assignment, EniInfo, NodeIdentity
from node_agent.report import build_report
from warmpool import messages
from warmpool.limits import InstanceLimits, pod_ceiling
from warmpool.messages import (
    OFFER_MAX_AGE_CEILING_S,
    Action,
    AllocationResult,
    Assigned,
    Attached,
    Deferred,
    Deleted,
    Failed,
    Fenced,
    PoolReport,
    Released,
    RestoreChecked,
    SeqFloor,
)
from warmpool.pool import PoolConfig, PoolDelta, PoolState, compute

log = logging.getLogger("warmpool.agent.controller")

SEQ_META = "last_seq"
REBUILT_AT_META = "rebuilt_at"
"""When the agent last started without a usable checkpoint (it forgot what it had offered);
None once a process saw the window after it end."""
REBUILT_BOOT_META = "rebuilt_boot"
"""The boot (``/proc/sys/kernel/random/boot_id``) whose monotonic clock ``REBUILT_UNTIL_META`` is read on."""
REBUILT_UNTIL_META = "rebuilt_until_mono"
"""When the window after a checkpoint loss ends, on the monotonic clock of that boot."""
REBUILT_SEQ_META = "rebuilt_seq"
"""The first seq after that start: every report before it was sent by a process whose offers are forgotten."""
HELD_ALL_META = "held_all_at"
"""When a start held every address by the unknown holder: a rebuild with no pod wiring to read
(``WARMPOOL_POD_NETWORK=recorded``), or one that found a pod veth with no route
(``node_agent.agent.hold_doubtful`` after a restore, review 14, R1); None once its grace let them
go (``recorded`` mode only). Meanwhile an address IMDS alone shows later is held so too, not
offered (:meth:`PoolController._hold_unknown`), whatever :meth:`PoolController._holds_learnt`
says (review 15, C1)."""
UNKNOWN_META = "offers_unknown"
"""Addresses and prefixes quarantined on IMDS's word alone after a checkpoint loss (no grant the
agent received names them): offered as of unknown origin (``ReleaseOffer.unknown``), never
taken back by a hand-back (:meth:`PoolController._hold_unknown`)."""
RESTORE_META = "restore_unconfirmed"
"""The ``last_seq`` of a checkpoint restored at a start that the allocator has not yet said is
the node's newest state (:meth:`PoolController.start`): kept until it answers, so a restart
meanwhile asks about that checkpoint again, not about its own later seq."""
RESTORE_WAIT_META = "restore_wait"
"""This start's wait id (``PoolReport.restore_wait``), drawn at every start that waits: only an
answer that echoes it is this wait's (a ``current`` said to another process's report, delivered
again, is not, whatever the seqs: they follow the wall clock, and a copy may hold an earlier id)."""
UNKNOWN_ON_RELEASE_META = UNKNOWN_ON_RELEASE
"""Addresses pods held when a restored checkpoint was found not current: the copy may list a pod
gone since, whose address was offered and unassigned after the copy. Each goes to the offers, as
of unknown origin, when its pod lets it go, never to the pool (``Datastore.release``)."""
SEQ_OFFSET_META = "seq_offset_ms"
"""What the agent adds to its wall clock in ms to number its reports (0 until a ``seq-floor``
answer raised it: :meth:`PoolController._take_seq_floor`)."""
SEQ_FLOOR_GAP_MS = 2**31
"""How far above a ``seq-floor`` answer's floor the agent's seqs go on (24.8 days of ms): above
the seqs the other process may still have queued after its last served report, so that no report
of this agent shares a seq with one of them (its result would be taken as this agent's). SQS keeps
a message at most 14 days (``CreateQueue``'s ``MessageRetentionPeriod``, at most 1,209,600 s);
a margin, not a proof: a report the allocator defers is re-sent as a new message, and a clock
stepped ahead between that process's reports spaces their seqs further. A seq of it above the gap
is served before this agent's next one, if at all, only to be answered with a higher floor.

The gap is added to the wall clock's whole reading, not to the floor alone (review 16): two
processes answered the same floor (the ledger not moved between: the first one's later reports
deferred or still queued when it died) number at ``floor + gap + clock``, so the later one numbers
above every seq the earlier one sent while the node's clock has not gone back between them."""
SEQ_TOP = 2**62
"""The highest seq a report may carry (``PoolReport.seq``)."""
SEQ_TOP_HEADROOM_MS = 2**40
"""What a ``seq-floor`` must leave below :data:`SEQ_TOP` after the agent's first seq above it
(34.8 years of ms): a floor closer to the top is refused (the agent stays stale, nothing
checkpointed), so the clock's pace never takes its seqs past what a report may carry (review 16:
such a floor, taken and checkpointed, left the agent unable to build a report for good)."""
EPOCH_META = "epoch"
"""The fence the allocator's last ``restore-checked`` answer gave (``PoolReport.epoch``)."""
RESTORE_WAIT_S = 60.0
"""How long, on the steady clock, a restored checkpoint waits for the allocator's answer
before it is treated as not current (an allocator from before ``restored_from`` refuses
such reports; a long outage): the lost-checkpoint way is safe whatever the answer."""
FIRST_START_WAIT_S = 300.0
"""How long, on the steady clock, a first start waits for the allocator to confirm it before it
goes on as after a lost checkpoint. Longer than a restored checkpoint's: nothing is handed out
meanwhile either way (what IMDS alone shows is held as offered), and without the confirmation the
node's first pool costs an Unassign and an Assign, which at thousands of joins a minute queue
behind the account's bucket (docs/bench.md, "EKS-scale joins"); the answer's worth does not fade
with the wait (docs/safety.md, row 30). An allocator from before ``first_start`` refuses the
reports (unknown field): the node is served once the wait ends."""
MAX_OFFER_MEMORY = 1024
"""Offers remembered per address before entries no longer quarantined are pruned."""
VERIFY_TIMEOUT_S = 60.0
"""How long a result's claim may wait to show up in IMDS before it is dropped."""
RECENT_S = 120.0
"""Written as the expiry field of granted, released and deleted entries, which an older agent
reads (this one never expires any of them by time: ``node_agent/recent_results.py``)."""

NEXT_DUE_MARGIN_S = 1e-6
"""How much earlier than its exact deadline :meth:`PoolController.next_due` answers."""
OFFER_DATE_KEPT_S = OFFER_MAX_AGE_CEILING_S
"""How long an ENI's offer keeps its date while addresses join it: those quarantined on the ENI
meanwhile are left out of its offer, and join it, the whole offer dated anew, once its date is
this old, nothing older is left on offer, or pods wait (:meth:`PoolController._date_joined_offers`). The
offer's whole window with the allocator (it acts between its release delay and this age):
re-dated at every join, addresses joining less than the release delay apart kept it too young
to act on for as long as they came (review 33, Y1)."""


class AttachedEni(NamedTuple):
    """One ENI as IMDS shows it."""

    info: EniInfo
    ips: list[str]
    """Secondary addresses (the primary excluded)."""
    prefixes: list[str]
    managed: bool | None = True
    """Whether the agent may use it: False when tagged ``no_manage``, None while its tags
    could not be read (:class:`node_agent.unmanaged.SkipUnmanaged`). Either way the
    controller keeps an ENI it already holds for its pods and hands nothing new out from
    it; one it does not hold it leaves alone."""
    no_ipv4: bool = False
    """IMDS shows the interface but no IPv4 address of it (404 for its ``local-ipv4s``,
    :func:`node_agent.imds.parse_interfaces`): an EFA-only interface (p5, p5en, trn2 attach one
    per network card; it has no IP address at all), or an interface IMDS does not show whole
    yet. The controller never uses, counts, reports, sets up or releases one; one it knows has
    addresses makes the read fail (:meth:`PoolController._read`)."""


class IncompleteRead(RuntimeError):
    """An IMDS read that shows an interface the agent knows has IPv4 addresses without them
    (:meth:`PoolController._read`): not used, as a read that failed."""


class MetadataView(Protocol):
    """What is attached to this instance (IMDS in production)."""

    def interfaces(self) -> list[AttachedEni]: ...


class HostNetwork(Protocol):
    """Host set-up of secondary ENIs (the netlink adapter in production)."""

    def setup_eni(self, eni: EniInfo, mtu: int, pods: Collection[str] = ()) -> None:
        """Link up with MTU and primary address, the routes of its table
        (:attr:`EniInfo.route_table`), ``from`` rule; the ``from <ip>`` rule of each pod address
        in ``pods`` that names another table moved to it (:func:`node_agent.hostnet.move_pod_rules`).
        Raises ``LookupError`` when the link is not visible yet (retried later)."""
        ...

    def teardown_eni(self, eni: EniInfo) -> None: ...


class PoolController:
    """See the module docstring. Thread-safety: call from one thread (the agent's loop)."""

    def __init__(
        self,
        identity: NodeIdentity,
        limits: InstanceLimits,
        pool: PoolConfig,
        datastore: Datastore,
        timing: Timing | None = None,
        *,
        host: HostNetwork | None = None,
        metadata: MetadataView | None = None,
        mtu: int = 9001,
        min_report_interval_s: float = 1.0,
        on_event: Callable[[str, str], None] | None = None,
        restart_hold_s: float = 0.0,
        signed_identity: Callable[[], messages.SignedIdentity] | None = None,
        clock_ahead: Callable[[], float] | None = None,
        monotonic: Callable[[], float] | None = None,
        boot_id: str | None = None,
        pods_unseen: bool = False,
    ) -> None:
        self.identity = identity
        self.pods_unseen = pods_unseen
        """Nothing on the host says which addresses pods use (``WARMPOOL_POD_NETWORK=recorded``), so
        no check proved a restored checkpoint lists every running pod: one not known to be current
        holds every address, as a rebuild in that mode does (:meth:`_restore_stale`; review 11, W2)."""
        self.boot_id = boot_id
        """This boot's id (``/proc/sys/kernel/random/boot_id``; None: unknown): ``CLOCK_MONOTONIC``
        is one clock for every process of a boot, so a window the checkpoint says ends at a
        reading of the same boot can be resumed at a restart (:meth:`start`)."""
        self.signed_identity = signed_identity
        """The instance's signed identity document (``node_agent/identity.py::CachedIdentity.get``;
        in-process agents: ``emulated.imds.Imds.identity``). Every report carries it: the
        allocator refuses reports without one."""
        self.limits = limits
        # The allocator's ceiling too (warmpool.planner.node_max_pods): WARMPOOL_MAX_PODS or the
        # formula, lowered to the kubelet's own max pods when the agent read one.
        pool = replace(
            pool,
            max_pods=pod_ceiling(
                limits,
                prefix=pool.prefix_mode,
                max_eni=pool.max_eni,
                override=pool.max_pods,
                kubelet=pool.kubelet_max_pods,
                custom_networking=pool.custom_networking,
                multi_card=pool.multi_card,
            ),
        )
        self.pool = pool
        self.ds = datastore
        self.timing = timing or Timing(cooldown_s=datastore.cooldown_s, pending_ttl_s=datastore.pending_ttl_s)
        self.host = host
        self.metadata = metadata
        self.mtu = mtu
        self.min_report_interval_s = min_report_interval_s
        self._on_event = on_event
        self.stats = ControllerStats()
        self.last_seq: int = int(datastore.meta.get(SEQ_META, -1))
        offset = datastore.meta.get(SEQ_OFFSET_META)
        self._seq_offset_ms: int = offset if isinstance(offset, int) and not isinstance(offset, bool) else 0
        if not 0 <= self._seq_offset_ms <= SEQ_TOP - SEQ_TOP_HEADROOM_MS:
            self._seq_offset_ms = 0  # one no floor this code takes gives (a report could not be built)
        """Added to the wall clock in ms to number reports (:data:`SEQ_OFFSET_META`)."""
        self._offered_upto: dict[str, int] = {}
        """Address or prefix -> the newest report seq that offered it back. A hand-back
        (``assigned`` for a quarantined address) replying to an older report is not taken:
        a newer report still offering it may be answered with its unassign (hostile
        review, finding 1). Reports sent before this start may have offered anything:
        ``last_seq`` at start stands in for what is not recorded."""
        self._seq_at_start: int = self.last_seq
        self._offer_floor: int = self.last_seq
        self._regranted: dict[str, int] = {}
        """Key -> the seq of a result that released it and then claimed it again (:meth:`_note_regranted`)."""
        """Reports up to this seq may have offered any address ``_offered_upto`` does not name
        (sent before this start, or pruned from it)."""
        self._last_sent_at: float | None = None
        self._last_sent_steady = 0.0
        self._last_signature: tuple[object, ...] | None = None
        self._last_pending = 0
        self._retries = 0
        self._not_before = 0.0
        self._surplus_since: float | None = None
        self._unverified = ParkedClaims()
        """Claims waiting for IMDS, by what they claim (several may name one ENI), with their first
        arrival and the ``in_reply_to`` of their result.
        Checkpointed (the result carrying them is acknowledged once applied): a restart re-checks them."""
        self._rechecking = False
        self._listed: set[str] | None = None
        self._read_complete = False
        """Whether the last IMDS read listed every ENI the datastore holds: only such a read is
        evidence that a released address is gone (a torn, lagging or regressed read that leaves
        out an ENI says nothing of that ENI's addresses)."""
        """What the last IMDS read listed (addresses and prefixes); None if it failed."""
        for why in self._unverified.load(self.ds.parked()):
            self._event("verify", f"unreadable parked claim in the checkpoint dropped: {why}")
        self.restart_hold_s = restart_hold_s
        """After a start, quarantined addresses are not taken back for this long: a result the
        previous process received but never applied (a ``released`` one, maybe) comes back
        from SQS only after its visibility timeout."""
        self.monotonic = monotonic
        """A monotonic reading (``CLOCK_MONOTONIC`` in production): every duration that guards
        an offered address (the release timeout of the take-back, the hold after a start, the
        window after a checkpoint loss) is measured on it, so a wall clock stepped forward
        never shortens one. None: the ``now`` passed in is taken as steady (virtual time)."""
        self._hold_until = 0.0
        self._quarantined_seen: dict[tuple[str, str], float] = {}
        """(ENI, address) quarantined -> the monotonic reading when this process first saw it
        quarantined. In memory only: after a restart every offer's release timeout starts
        again at the start (the one reading stored, the window's end, is compared only within
        the boot that took it: :meth:`_window_left`)."""
        self._window_until: float | None = None
        """Monotonic end of the window after a checkpoint loss (:meth:`_forget_offers`)."""
        self._unlisted_since: dict[tuple[str, str], float] = {}
        """(ENI, address) offered, a single address or a member of a /28, that a resync read
        without it on that ENI -> the monotonic reading of the first such resync
        (:meth:`_note_unlisted`; forgotten once it is no longer offered, or when the take-back
        looks at it). The take-back drops it a release timeout later if its own read lacks it
        too, whatever the offer's date (:meth:`_due_unlisted`): an offer dated anew at every
        join restarts the stamps, and an address gone from the ENI stayed held there for as long
        as joins came (the simulation's seed 1060384). A read listing it again in between, or
        lacking the ENI, does not restart the count (review 38, F3: one such read a release
        timeout kept it for good); the take-back's own read decides. In memory only: a start
        counts again."""
        self._joining: dict[str, set[str]] = {}
        """ENI -> addresses and /28s quarantined since its offer was dated, left out of it until
        it is dated anew (:meth:`_date_joined_offers`, :meth:`_offer_joined`). In memory only: a
        start dates anew every offer whose addresses' dates differ (:meth:`_date_mixed_offers`)."""
        self._force = False
        self.clock_ahead = clock_ahead
        """An upper bound of how far this node's clock is ahead of AWS's (seconds; negative: at
        least that far behind; the agent measures it from SQS's answers,
        :class:`node_agent.agent.AwsClockCheck`). Offers are dated that much earlier (later,
        when behind), so a clock ahead never makes an offer look younger to the allocator than
        it is, and a clock behind does not make it look too old to act on. None: the node's
        clock is trusted as it is."""
        rebuilt_at = self.ds.meta.get(REBUILT_AT_META)
        self._rebuilt_at: float | None = float(rebuilt_at) if isinstance(rebuilt_at, int | float) else None
        rebuilt_seq = self.ds.meta.get(REBUILT_SEQ_META)
        self._rebuilt_seq: int = int(rebuilt_seq) if isinstance(rebuilt_seq, int) else -1
        unknown = self.ds.meta.get(UNKNOWN_META)
        self._unknown: set[str] = {k for k in unknown if isinstance(k, str)} if isinstance(unknown, list) else set()
        self._held_for_good: set[str] = set()
        """The held ENIs the last IMDS read showed not the pool's (``no_manage``, custom networking's
        primary, a card above 0 without ``WARMPOOL_MULTI_CARD``), not held for tags it could not
        read: :meth:`holders_on_held_enis` does not wait for them (review 20, H2)."""
        """Quarantined keys of unknown origin (:data:`UNKNOWN_META`), checkpointed."""
        self._restored_from: int | None = None
        """The restored checkpoint's seq the allocator has yet to call current (:meth:`start`)."""
        self._restore_wait: str | None = None
        """This start's wait id (:data:`RESTORE_WAIT_META`)."""
        self._first_start = False
        """The wait is a first start's (:meth:`_await_first_start`), not a restored checkpoint's."""
        epoch = self.ds.meta.get(EPOCH_META)
        valid = isinstance(epoch, int) and not isinstance(epoch, bool) and epoch > 0
        self._epoch: int | None = epoch if valid else None
        """The fence of the last restore check (:data:`EPOCH_META`), sent in every report."""
        self._restore_wait_until = 0.0
        """Steady reading after which an unanswered restore is taken as not current."""
        self._lean_until: float | None = None
        """Steady reading until which the node is lean (docs/agent.md, "Lean while addresses are
        scarce"): set by each result saying ``scarce``, ``Timing.lean_hold_s`` on. In memory only:
        a restart starts not lean (the next scarce answer makes it lean again)."""
        self._scarce_seq = -1
        """The newest report seq a result answered, as far as ``scarce`` goes (:meth:`_note_scarce`)."""

    # --- life cycle -----------------------------------------------------------------

    def start(
        self, now: float, *, checkpoint_lost: bool = False, restored: bool = False, first_start: bool = False
    ) -> list[str]:
        """After the checkpoint is restored: reconcile with IMDS, set up every ENI's host side.

        ``checkpoint_lost``: there was no usable checkpoint (damaged, or missing), so what
        the previous process offered back is forgotten: :meth:`_forget_offers`.
        ``restored``: the datastore holds a checkpoint this start read back, which may be an
        earlier copy of the node's state: its free addresses wait for the allocator's word
        (:meth:`_await_restore_check`). ``first_start`` (with ``checkpoint_lost``): no checkpoint
        and no pod wired on the host; the allocator is asked whether this is the instance's first
        start (:meth:`_await_first_start`)."""
        assert not (checkpoint_lost and restored), "a start restores a checkpoint or has lost it, not both"
        assert checkpoint_lost or not first_start, "only a start without a checkpoint asks about a first start"
        steady = self._steady(now)
        self._hold_until = steady + self.restart_hold_s
        if checkpoint_lost:
            self._end_restore()
            self._forget_offers(now)
        elif restored:
            self._await_restore_check(steady)
            if self.pods_unseen and self.ds.meta.get(HELD_ALL_META) is None:
                # Until the allocator's word, the copy may be older than a running pod (review 11,
                # W2): an address IMDS alone shows may be that pod's, held as after a rebuild in
                # this mode rather than offered, and the grace counts from this start.
                self.ds.set_meta(HELD_ALL_META, now)
        if self._rebuilt_at is not None:
            self._window_until = steady + self._window_left(now, steady)
        notes = self.resync(now) if self.metadata is not None else []
        if first_start and self._unknown:
            # Only with something to adopt: a node that booted with no secondary address has
            # nothing a confirmation would give it, and starts as before (no round trip).
            self._await_first_start(steady)
        for eni in self.ds.enis():
            # With the pods' addresses: a rule the previous agent wrote naming another table (its
            # numbering) is moved to this ENI's (review of the multi-card change, F3).
            self._setup(eni.info, pods=[a.ip for a in eni.addrs.values() if a.in_use])
        self._note_quarantined(now)  # restored offers: their timeout starts again now
        self._date_mixed_offers(now)
        self._force = True
        return notes

    def _await_restore_check(self, steady: float) -> None:
        """A restored checkpoint may be an earlier copy of the node's state (a backup restored, a
        disk that lost its last writes): it passes the checksum and the host's wiring (every
        running pod is in it), yet an address free in it may since have been offered in a later
        report, and be unassigned (or about to be) by the allocator. Nothing on the node can
        tell. So no free address goes to a pod until the allocator, which has every later
        report's trace in its ledger and release book, answers that this checkpoint is current
        (:class:`RestoreChecked`); every report says which one it is (``restored_from``). Not
        current, or no answer within :data:`RESTORE_WAIT_S`: the lost-checkpoint way
        (:meth:`_restore_stale`). Hostile review 1, finding C1 (docs/safety.md, row 12)."""
        asked = self.ds.meta.get(RESTORE_META)
        waiting = isinstance(asked, int) and asked >= 0
        restored_from = asked if isinstance(asked, int) and waiting else max(self.last_seq, 0)
        # A new id at every start, even one that resumes a wait: the answers to an earlier
        # process's reports are not this process's (review 5, V5, V8).
        seed = f"{self.identity.instance_id}|{self.boot_id}|{steady!r}|{self.last_seq}|{restored_from}"
        wait = hashlib.sha256(seed.encode()).hexdigest()[:32]
        with self.ds.batch():
            self.ds.set_meta(RESTORE_META, restored_from)
            self.ds.set_meta(RESTORE_WAIT_META, wait)
        self._restore_wait = wait
        self._restored_from = restored_from
        self._restore_wait_until = steady + RESTORE_WAIT_S
        self.ds.withhold(True)

    def _await_first_start(self, steady: float) -> None:
        """A start with no checkpoint and no pod wired on the host: the instance's first start, or
        a start after a lost checkpoint. Nothing on the node tells them apart, and only the first
        makes what IMDS shows (a launch template's addresses or prefixes) the node's own: after a
        loss, an address IMDS lists may have been offered and unassigned by the process before
        (docs/safety.md, rows 4, 6, 12). So the lost-checkpoint way is taken (:meth:`_forget_offers`:
        everything IMDS alone shows is held as offered, of unknown origin) and every report asks
        the allocator (``first_start``, ``restored_from`` 0) whether it has ever recorded a report
        of the instance or written its release book. Confirmed (:class:`RestoreChecked` current),
        what is held so becomes the pool (:meth:`_adopt_first_start`); not, or no answer within
        :data:`FIRST_START_WAIT_S`, the lost-checkpoint way goes on. Not checkpointed: a restart
        meanwhile restores what this start wrote and asks as any restored checkpoint does (no
        row, or the fence this wait's answer raised: not current, the lost way)."""
        seed = f"first|{self.identity.instance_id}|{self.boot_id}|{steady!r}|{self.last_seq}"
        self._restore_wait = hashlib.sha256(seed.encode()).hexdigest()[:32]
        self._restored_from = 0
        self._first_start = True
        self._restore_wait_until = steady + FIRST_START_WAIT_S

    def _adopt_first_start(self, now: float) -> int:
        """The allocator confirmed this start is the instance's first (docs/safety.md, row 30):
        warmpool never took anything from it, so every address IMDS has shown it is on it, and no
        process before this one offered any. What was held as offered, of unknown origin, goes to
        the pool, and the node runs as one that never lost its checkpoint (addresses IMDS shows
        later are added free, unless a result of this process said released). One write."""
        with self.ds.batch():
            back = 0
            for eni_id, (ips, pfx) in self.ds.quarantined().items():
                mine_ips = [x for x in ips if x in self._unknown]
                mine_pfx = [x for x in pfx if x in self._unknown]
                if mine_ips or mine_pfx:
                    back += self.ds.reclaim(eni_id, mine_ips, mine_pfx)
            self._end_restore()
            self._unknown.clear()
            self._rebuilt_seq = -1
            self._rebuilt_at = None
            self._window_until = None
            for key in (UNKNOWN_META, REBUILT_SEQ_META, REBUILT_AT_META, REBUILT_BOOT_META, REBUILT_UNTIL_META):
                self.ds.set_meta(key, None)
            self._force = True
        self.stats.first_starts_confirmed += 1
        self._event("checkpoint", f"first start confirmed: {back} addresses the node booted with are its pool")
        return back

    def _end_restore(self) -> None:
        """No restore waits for the allocator's answer any more (may raise CheckpointWriteError)."""
        self._restored_from = None
        self._restore_wait = None
        self._first_start = False
        self.ds.withhold(False)
        if self.ds.meta.get(RESTORE_META) is not None or self.ds.meta.get(RESTORE_WAIT_META) is not None:
            with self.ds.batch():
                self.ds.set_meta(RESTORE_META, None)
                self.ds.set_meta(RESTORE_WAIT_META, None)

    def _restore_checked(self, action: RestoreChecked | Fenced, now: float, in_reply_to: int) -> str:
        # The fence first, whatever the answer: the allocator drops reports below the instance's
        # epoch, and an answer that is not (or no longer) awaited still raised it (a late one,
        # after the wait took the lost way). A higher epoch only fences processes before this one.
        if action.epoch > (self._epoch or 0):
            self._epoch = action.epoch
            self.ds.set_meta(EPOCH_META, self._epoch)
            self._force = True
        if isinstance(action, Fenced):
            return f"report {in_reply_to} fenced by a restore check: epoch {self._epoch} from now on"
        if self._restored_from is None or action.restored_from != self._restored_from:
            return f"restore check of {action.restored_from} not awaited: ignored"
        if action.wait != self._restore_wait:
            # An answer to another process's wait, delivered again (reviews of the restore
            # check: R3, V5, V8).
            return f"restore check replying to {in_reply_to} for another wait: ignored"
        if self._first_start:
            if action.current:
                back = self._adopt_first_start(now)
                return f"first start confirmed: {back} addresses the node booted with are its own"
            self._first_start_unconfirmed("the allocator knows the instance")
            return "first start not confirmed: handled as a lost checkpoint"
        if action.current:
            self._end_restore()
            self.stats.restores_current += 1
            return f"restored checkpoint (seq {action.restored_from}) is current: its free addresses are usable"
        self._restore_stale(now, "the allocator has seen later reports")
        return f"restored checkpoint (seq {action.restored_from}) is not current: handled as lost"

    def _wait_over(self, now: float) -> None:
        """A wait for the allocator's word with no answer in time: not current, not confirmed."""
        if self._restored_from is None or self._steady(now) < self._restore_wait_until:
            return
        if self._first_start:
            self._first_start_unconfirmed(f"no answer within {FIRST_START_WAIT_S:g} s")
        else:
            self._restore_stale(now, f"no answer within {RESTORE_WAIT_S:g} s")

    def _first_start_unconfirmed(self, why: str) -> None:
        """Not known to be the instance's first start: the lost-checkpoint way this start took goes
        on (what IMDS alone shows stays offered, of unknown origin)."""
        self._end_restore()
        self._force = True
        self.stats.first_starts_unconfirmed += 1
        self._event("checkpoint", f"first start not confirmed ({why}): handled as a lost checkpoint")

    def _restore_stale(self, now: float, why: str) -> None:
        """The restored checkpoint is not known to be the node's newest state: it is handled as a
        lost one (:meth:`_forget_offers`): every free address and prefix is offered back as of
        unknown origin (the allocator unassigns what EC2 still shows and grants fresh ones), and
        addresses learnt later are held as offered. Pods keep what they hold, and a running pod the
        copy lacks holds its address by the start's :func:`node_agent.agent.hold_wired`; with no
        wiring to read (:attr:`pods_unseen`) every address is held instead. One write."""
        with self.ds.batch():
            self._end_restore()
            self._forget_offers(now)
            if self.pods_unseen:
                # No wiring to read: the copy may be older than a running pod (a backup, a disk
                # that lost its last writes), whose address is free in it. Held, every one, as
                # the rebuild in that mode holds them, and the grace counts from now (review 11,
                # W2: before, offered as of unknown origin once an earlier grace had ended).
                self.ds.hold_all(now)
                self.ds.set_meta(HELD_ALL_META, now)
            self._hold_unknown(set(), now)
            # A pod the copy lists may be gone since (the wiring check proves only that every
            # running pod is in it): whatever pods hold goes to the offers as of unknown origin
            # when they let it go (hostile review of the restore check, R4).
            held = sorted({a.prefix or a.ip for e in self.ds.enis() for a in e.addrs.values() if a.in_use})
            self.ds.set_meta(UNKNOWN_ON_RELEASE_META, held)
            self._force = True
        self.stats.restores_stale += 1
        log.warning("restored checkpoint not current (%s): its free addresses offered back as of unknown origin", why)
        self._event("checkpoint", f"restored checkpoint not current ({why}): handled as lost")

    def _forget_offers(self, now: float) -> None:
        """The checkpoint is lost: any free address may sit in a report the previous process
        sent (still queued, being planned, or re-sent by the allocator) whose offer is young
        enough to be acted on. The rule (docs/agent.md, "Checkpoint lost or damaged"): every
        address that becomes known within ``release_timeout_s`` of this start, from IMDS or
        from a result replying to a report sent before it, is quarantined as offered, of
        unknown origin, dated when it is learnt (:meth:`_hold_unknown`), so no pod gets it until
        a ``released`` result takes it (the allocator unassigns such an offer, never hands it
        back) or, at the release timeout, IMDS no longer lists it (one it still lists is offered
        again). Results replying to the previous process's reports are accepted (they may carry
        ``released``/``deleted``)."""
        first = max(self.last_seq, self._clock_seq(now))
        self.last_seq = self._seq_at_start = self._rebuilt_seq = self._offer_floor = first
        self._rebuilt_at = now
        self._offered_upto.clear()
        # one write: a checkpoint on disk with last_seq but no rebuilt_at is a usable one
        # that opens no window at the next start
        with self.ds.batch():
            self.ds.set_meta(SEQ_META, first)
            self.ds.set_meta(REBUILT_SEQ_META, first)
            self.ds.set_meta(REBUILT_AT_META, now)
            self.ds.set_meta(REBUILT_BOOT_META, self.boot_id)
            self.ds.set_meta(REBUILT_UNTIL_META, self._steady(now) + self.timing.release_timeout_s)

    def _steady(self, now: float) -> float:
        return self.monotonic() if self.monotonic is not None else now

    def _window_left(self, now: float, steady: float) -> float:
        """What is left, at this start, of a window no process saw end (:meth:`start`).

        The wall clock alone cannot say (a step ahead before this start would end it at once: a
        hostile review's finding). Within the boot that opened it, the monotonic clock can, and
        the window lasts until both clocks say it is over (one clock wrong, a step of the wall
        clock or a monotonic reading offset in a time namespace, never ends it early). Another
        boot, or none known: open again in full (later is never unsafe; a restart loop of one
        boot no longer holds it open for ever, a second hostile review's finding, and seed 109's
        not-settled)."""
        timeout = self.timing.release_timeout_s
        assert self._rebuilt_at is not None
        until = self.ds.meta.get(REBUILT_UNTIL_META)
        same_boot = self.boot_id is not None and self.ds.meta.get(REBUILT_BOOT_META) == self.boot_id
        if not same_boot or self.monotonic is None or not isinstance(until, int | float):
            return timeout
        wall_left = self._rebuilt_at + timeout - now
        return min(timeout, max(0.0, float(until) - steady, wall_left))

    def _close_rebuild_window(self, now: float) -> None:
        """The window after a checkpoint loss has ended on this process's steady clock: said in
        the checkpoint, so a restart does not open it again (may raise CheckpointWriteError:
        tried again at the next pass)."""
        if self._rebuilt_at is not None and self._window_until is not None and not self._in_rebuild_window(now):
            self.ds.set_meta(REBUILT_AT_META, None)
            self._rebuilt_at = None

    def _in_rebuild_window(self, now: float) -> bool:
        if self._rebuilt_at is None:
            return False
        if self._window_until is not None:
            return self._steady(now) < self._window_until
        return now < self._rebuilt_at + self.timing.release_timeout_s

    def _known_keys(self) -> set[str]:
        """Addresses and prefixes already held or quarantined as they should be. Not those of a
        held ENI: ``_hold_unknown`` skips it (nothing is offered from an ENI whose tags are
        unknown), so they are learnt only once it is managed again (hostile review of step 6,
        finding 4: before, learnt while held, they came out free inside the window)."""
        return {k for e in self.ds.enis() if not e.held for k in (*e.ips, *e.prefixes)}

    def _holds_learnt(self, now: float) -> bool:
        """Whether an address learnt from IMDS alone is held as offered rather than added free:
        at any time after a checkpoint loss (a first start is one), not only in its window.

        The loss forgot which addresses EC2 unassigned from this node before it (the released
        filter, ``node_agent/recent_results.py``), and IMDS promises neither a bound on its lag
        nor never to answer from an older state (docs/safety.md, rows 4 and 6): a read any time
        later may list one from before its unassign (hostile review of step 6, finding 1: before,
        free once the window was over). Every address the node's pods need reaches it named by a
        grant (the allocator says each of its grants again until the agent has it: the release
        book's ``given`` entries); one IMDS alone shows (addresses the node had before this
        agent, a grant whose answer is late or was lost for good) goes through the offer path
        and the allocator's answer decides (:data:`UNKNOWN_META`)."""
        return self._rebuilt_seq >= 0 or self._in_rebuild_window(now)

    def _granted_keys(self, now: float) -> set[str]:
        """Keys named by a grant the agent received since the loss: EC2's own assignment in reply
        to one of this process's reports (``Datastore.mark_granted``; resync leaves out those
        released since, whatever IMDS lists), or a claim waiting for IMDS that replies to one.
        A claim replying to a report of the process whose offers are forgotten may be the
        hand-back of one of them: never counted."""
        floor = self._rebuilt_seq
        waiting = {
            k
            for action, _, seq in self._unverified.waiting.values()
            if seq >= floor
            for k in (*action.ips, *action.prefixes)
        }
        return waiting | {k for k, seq in self.ds.recently_granted(now).items() if seq >= floor}

    def _relisted(
        self, usable: list[AttachedEni], released: dict[str, int], held: set[str]
    ) -> tuple[set[str], set[str]]:
        """Released keys a read lists (:meth:`resync`): those the datastore does not hold, and
        those a recovered holder names (its address, or a /28 holding it: a pod the host shows
        carries it). Not on an ENI held for its tags: nothing is offered from one, so they stay
        out. A recovered holder's address joins its ENI's record, held by it (before, it stayed
        out: an older copy's filter, the grant that lifted it lost with the later writes, left
        an address EC2 has on the node unknown to the agent for as long as the checkpoint
        lasted, the simulation's seed 1780); it is never the pool's once the pod goes
        (``Datastore._let_go``: offered back as of unknown origin), and a later read keeps it
        listed (not an address IMDS no longer lists)."""
        mine = {k for e in self.ds.enis() for k in (*e.ips, *e.prefixes)}
        pods = {ipaddress.ip_address(h.ip) for h in self.ds.recovered_holders()}

        def under_pod(k: str) -> bool:
            if "/" not in k:
                return ipaddress.ip_address(k) in pods
            return any(ip in ipaddress.ip_network(k, strict=False) for ip in pods)

        awaited = self._awaited_grants()
        listed = {
            k
            for a in usable
            if a.info.eni_id not in held
            for k in (*a.ips, *a.prefixes)
            if k in released and (a.info.eni_id, k) not in awaited
        }
        return {k for k in listed if k not in mine}, {k for k in listed if under_pod(k)}

    def _awaited_grants(self) -> set[tuple[str, str]]:
        """(ENI, key) pairs a waiting claim names as EC2's own assignment (:meth:`_granted_by_ec2`,
        or found so when it came): its wait ends by taking the key on EC2's word if IMDS lists it
        on that ENI (:meth:`_evident`). A resync meanwhile leaves such a key out rather than hold
        it as offered, of unknown origin: offered, the allocator unassigned it and granted afresh,
        EC2 gave the same address again (a subnet with few free ones), the next resync came before
        that grant's wait ended, and so on for ever, the address never used (seed 5365)."""
        out: set[tuple[str, str]] = set()
        for key, (action, _first, seq) in self._unverified.waiting.items():
            grants = self._unverified.grants_of(key)
            for k in (*action.ips, *action.prefixes):
                if k in grants or self._granted_by_ec2(k, seq):
                    out.add((action.eni_id, k))
        return out

    def _unknown_dated(self, now: float) -> float:
        """The date an address of unknown origin learnt ``now`` is offered with: ``now`` (until
        stop 50, the start's inside the rebuild window: :meth:`_hold_unknown`)."""
        return now

    def _hold_unknown(self, before: set[str], now: float) -> None:
        """After a checkpoint loss: quarantine every free address or prefix not in ``before``,
        as of unknown origin (:data:`UNKNOWN_META`), dated ``now``, when it is learnt, inside
        the window (:meth:`_forget_offers`) as after it (:meth:`_holds_learnt`). Dated at the
        start, one IMDS showed later than the allocator's offer age (60 s) after it was too old
        to act on when first offered: the allocator dropped the offer and counted what EC2 shows
        of it as the node's free pool, so its waiting pods got nothing until the offer was
        renewed at the release timeout (the simulation's seeds 1008551 and 183). No rule needs
        the earlier date: an offer of unknown origin is never handed back (the allocator
        unassigns it), and the release timeout that renews it runs on the steady clock from when
        this process saw it quarantined (:meth:`_due`), whatever its date."""
        at = self._unknown_dated(now)
        n = 0
        marked: set[str] = set()
        hold_all = self.ds.meta.get(HELD_ALL_META) is not None
        for e in self.ds.enis():
            if e.held:
                continue
            ips = [ip for ip in e.ips if ip not in before]
            pfx = [p for p in e.prefixes if p not in before]
            if hold_all and (ips or pfx):
                # A rebuild that could not read the pods held every address it saw; one a later
                # read shows first (an ENI the rebuild's read lacked: rows 4-6) may be a running
                # pod's as well: held so too, never offered (review 10, A1).
                self.ds.hold_unknown({*ips, *pfx}, now)
                continue
            if ips or pfx:
                n += self.ds.quarantine(e.info.eni_id, ips, pfx, at)
                q_ips, q_pfx = self.ds.quarantined().get(e.info.eni_id, ([], []))
                marked.update(k for k in (*ips, *pfx) if k in q_ips or k in q_pfx)
        if marked - self._unknown:
            self._unknown |= marked
            self.ds.set_meta(UNKNOWN_META, sorted(self._unknown))
        if n:
            self._note_quarantined(now)
            self.stats.quarantined_after_rebuild += n
            self._event("quarantine", f"{n} addresses held as offered: the checkpoint that knew the offers is lost")

    def holders_on_held_enis(self, holders: Iterable[str]) -> bool:
        """Whether any address of these recovered holders is on an ENI held for a while (its tags
        unknown, or not yet read by this process): released now, :meth:`_hold_unknown` would skip
        it and it would come back free once the ENI is the pool's again, an offer in flight
        forgotten (review 18, H1). The release waits until no such ENI is held. Not for an ENI
        held because it is not the pool's (``no_manage``: held while anything on it is in use, a
        ``?`` holder too, so waiting for it waited for good: review 20, H2); what is let go there
        is never handed out (nothing new is from a held ENI), and the ENI leaves the datastore
        once nothing on it is in use."""
        wanted = set(holders)
        held = {e.info.eni_id for e in self.ds.enis() if e.held and e.info.eni_id not in self._held_for_good}
        return any(h.holder in wanted and h.eni_id in held for h in self.ds.recovered_holders())

    def release_unknown_holders(self, now: float, holders: Iterable[str] = (UNKNOWN_HOLDER,)) -> list[Assignment]:
        """The grace after a rebuild that held every address by :data:`UNKNOWN_HOLDER` has
        passed (``WARMPOOL_RECOVERY_GRACE_S``, ``recorded`` mode): the addresses leave the
        holder, but not for the pool. Their origin is as unknown as at the rebuild (IMDS alone
        showed them, and a read may answer from before an unassign, docs/safety.md row 6), so
        each is quarantined as an offer of unknown origin (:data:`UNKNOWN_META`): the allocator
        unassigns it and grants a fresh one, never hands it back (hostile review of the unknown
        offers, R1: before, freed as ordinary, a pod got one EC2 had unassigned). Returns the
        attached addresses released. May raise CheckpointWriteError: the change then stays in
        memory (offered as unknown, never free) and the datastore's flush writes it later.
        ``holders``: the recovered holders let go so (also those whose reason the host no longer
        shows: :func:`node_agent.agent.lift_unfounded_holds`)."""
        with self.ds.batch():
            freed = [a for holder in holders for a in self.ds.release_recovered(holder, now)]
            if freed:
                by_eni = {e.info.eni_id: e for e in self.ds.enis()}
                keys: set[str] = set()
                for a in freed:
                    eni = by_eni.get(a.eni_id)
                    addr = eni.addrs.get(a.ip) if eni is not None else None
                    if addr is not None:
                        keys.add(addr.prefix or a.ip)
                self._hold_unknown(self._known_keys() - keys, now)
                self._force = True
        return freed

    def resync(self, now: float) -> list[str]:
        """Periodic full reconcile with IMDS (what is attached wins)."""
        if self.metadata is None:
            return []
        # EC2's answer (a result) wins over an IMDS that lags behind it; these
        # filters are checkpointed, so they hold across a restart too.
        released, deleted = self.ds.recently_gone(now)
        interfaces = self._read(now)
        # A deleted ENI is never taken again from IMDS, however long it lists it (ledger.py).
        usable, kept_held = self._usable([a for a in interfaces if a.info.eni_id not in deleted])
        # A released address IMDS lists is never free on its word (a read from before the
        # release, row 6), nor left out for good: EC2 may have assigned it to this node again
        # in an answer the agent never got (an invocation that died after its call, an Assign
        # that took effect and erred), and nothing would say that grant again
        # (``REGRANT_UNSEEN_LEAK`` in tests/sim/test_undocumented_rows.py). It is held as
        # offered, of unknown origin: the allocator's release book says it ``released`` again,
        # or unassigns it again if EC2 still shows it (docs/allocator.md).
        relisted, under_pods = self._relisted(usable, released, kept_held)
        attached = [
            (
                a.info,
                [ip for ip in a.ips if ip not in released or ip in relisted or ip in under_pods],
                [p for p in a.prefixes if p not in released or p in relisted or p in under_pods],
            )
            for a in usable
        ]
        have = {e.info.eni_id: e.info for e in self.ds.enis()}
        # While every address is held (HELD_ALL_META: a rebuild, or a restore with a pod veth
        # the copy cannot name), what IMDS shows first is held too, whatever `_holds_learnt`
        # says: a confirmed first start clears it (review 15, C1).
        learn = self._holds_learnt(now) or self.ds.meta.get(HELD_ALL_META) is not None
        keys = self._known_keys() | self._granted_keys(now) if learn else None
        # One lock over both (a batch): a CNI ADD on the server's thread between the reconcile
        # adding an address and ``_hold_unknown`` quarantining it took it (hostile review of
        # step 6, finding 3).
        with self.ds.batch():
            notes = self.ds.reconcile(
                attached,
                now,
                ready_new=lambda i: self.host is None or (i.device_index == 0 and i.network_card == 0),
                held=kept_held,
            )
            if keys is not None or relisted:
                self._hold_unknown((self._known_keys() if keys is None else keys) - relisted, now)
        kept = {a.info.eni_id for a in usable}
        self._note_unlisted(now, kept)
        for a in interfaces:  # tagged no_manage after we took it, and no pod is left on it: let go
            if a.managed is False and a.info.eni_id in have and a.info.eni_id not in kept:
                self._teardown(have[a.info.eni_id])
                self.stats.enis_unmanaged += 1
                self._event("resync", f"{a.info.eni_id}: tagged no_manage and no pod left on it: left alone now")
        for info, _, _ in attached:
            if info.eni_id not in have:
                self._setup(info)
        offered = {k for q_ips, q_pfx in self.ds.quarantined().values() for k in (*q_ips, *q_pfx)}
        held = [ip for ip in self.ds.unlisted() if ip not in offered]  # offered ones: kept quarantined
        if held:
            self.stats.held_not_in_imds += len(held)
            log.warning("pods hold addresses IMDS no longer lists (kept for them, never handed out): %s", held)
        for n in notes:
            self._event("resync", n)
        return notes

    def _read(self, now: float) -> list[AttachedEni]:
        """One IMDS read, observed (:meth:`_observe`), without the interfaces it shows no IPv4
        address of (``no_ipv4``).

        Such an interface is an EFA-only one (p5, p5en, trn2 attach one per network card, and
        IMDS answers 404 for its ``local-ipv4s``, as the VPC CNI's ``getENIMetadata`` in
        ``pkg/awsutils/awsutils.go`` and nodeadm's ``getNetworkCardDetail`` read it), or an
        interface IMDS does not show whole yet: IMDS documents no consistency, and a new ENI
        may be listed before its addresses are (lag, a torn read). Nothing on the node tells
        the two apart, so neither is taken as "no addresses": the interface is left out of the
        read, exactly as if IMDS did not list it yet, which the agent already survives
        (docs/safety.md, rows 4 and 5): it gets no address of it, so none goes to a pod, none
        is counted, reported or offered, and its absence proves nothing gone (a claim on it
        waits, parked, for a read that shows it whole). Before, any such 404 failed the whole
        read: an agent on an instance with an EFA-only interface never read its ENIs (review of
        the multi-card change, F4).

        An interface the agent knows has IPv4 addresses (one the datastore holds, one a result
        said was deleted, or the primary: an EFA-only interface is none of them, its type never
        changes) shown without them is a read not to act on: left out, the datastore would drop
        its free addresses and a released one would look seen gone. :class:`IncompleteRead` is
        raised instead, as a failed read (what every such 404 did before)."""
        assert self.metadata is not None
        interfaces = self.metadata.interfaces()
        bare = [a for a in interfaces if a.no_ipv4]
        if bare:
            known = {e.info.eni_id for e in self.ds.enis()} | set(self.ds.recently_gone(now)[1])
            for a in bare:
                if a.info.eni_id in known or a.info.primary:
                    self.stats.imds_incomplete += 1
                    raise IncompleteRead(f"IMDS shows {a.info.eni_id} without its IPv4 addresses: read not used")
            interfaces = [a for a in interfaces if not a.no_ipv4]
        self._observe(interfaces)
        return interfaces

    def _observe(self, interfaces: list[AttachedEni]) -> None:
        """Every IMDS read: released addresses and deleted ENIs it no longer lists have been seen gone."""
        read = {a.info.eni_id for a in interfaces}
        self._listed = {k for a in interfaces for k in (*a.ips, *a.prefixes)}
        self._read_complete = all(e.info.eni_id in read for e in self.ds.enis())
        self._note_absent_from_read()
        self.ds.note_enis_absent(read)

    def _note_absent_from_read(self) -> None:
        """Released keys the last read lacks were seen gone, if that read listed every held ENI."""
        if self._listed is not None and self._read_complete:
            self.ds.note_absent(self._listed)

    def _usable(self, interfaces: list[AttachedEni]) -> tuple[list[AttachedEni], set[str]]:
        """The ENIs the agent holds or may take, and which of those it must hand nothing new
        out from (held).

        A managed ENI is usable. One tagged ``no_manage`` (``managed`` False) or whose tags
        could not be read (None) is left alone unless the datastore already has it: then it
        is kept, held, for the pods on it; a failed tag look-up is never read as "gone"
        (dropping the ENI dropped its pods, and the next resync brought it back with every
        address free). A ``no_manage`` one is let go once no pod holds an address on it.

        With custom networking the primary ENI is not managed (its pods, if the node ran
        without it before, keep their addresses; no new one is handed out from it), as the
        VPC CNI's ipamd leaves it out of the pool (``pkg/ipamd/ipamd.go``); without
        ``WARMPOOL_MULTI_CARD`` neither are the ENIs of network cards above 0."""
        have = {e.info.eni_id: e for e in self.ds.enis()}
        usable: list[AttachedEni] = []
        held: set[str] = set()
        for a in interfaces:
            if self.pool.custom_networking and a.info.primary:
                a = a._replace(managed=False)
            if not self.pool.multi_card and a.info.network_card > 0:
                # Without WARMPOOL_MULTI_CARD, cards above 0 are not the pool's, as the VPC CNI
                # leaves them alone without ENABLE_MULTI_NIC: another tool's interface there (an
                # EFA's, an SR-IOV network's) has addresses of its own (review of the multi-card
                # change, F6). Pods already on one (the setting turned off) keep theirs.
                a = a._replace(managed=False)
            if a.managed is True:
                usable.append(a)
                continue
            e = have.get(a.info.eni_id)
            if e is None or (a.managed is False and not any(x.in_use for x in e.addrs.values())):
                continue
            usable.append(a)
            held.add(a.info.eni_id)
        self._held_for_good = {a.info.eni_id for a in usable if a.info.eni_id in held and a.managed is False}
        return usable, held

    # --- the loop ---------------------------------------------------------------------

    @property
    def fair_share(self) -> bool:
        """Fair sharing on for this node (``WARMPOOL_LEAN_HOLD_S`` > 0): reports carry ``lean``."""
        return self.timing.lean_hold_s > 0

    def lean(self, now: float) -> bool:
        """Lean now: told ``scarce`` within the hold. Its warm targets are suspended
        (:attr:`warmpool.pool.PoolConfig.lean`), and its reports say so: the allocator plans the
        same way."""
        return self.fair_share and self._lean_until is not None and self._steady(now) < self._lean_until

    def burst(self, now: float) -> int:
        """Pods arriving in a burst: those this process gave a free address within
        ``Timing.burst_window_s``, when two or more and the node's pool is one a burst sizes
        (single addresses under ``WARM_IP_TARGET`` / ``MINIMUM_IP_TARGET``, not lean); else 0."""
        window = self.timing.burst_window_s
        pool = self.pool
        if window <= 0 or pool.prefix_mode or not pool.ip_targets or self.lean(now):
            return 0
        n = self.ds.arrivals(now, window)
        return n if n >= 2 else 0

    def _release_delta(self, now: float, delta: PoolDelta) -> PoolDelta:
        """What may be released: ``delta``, or while a burst lasts the pool's surplus above its
        targets plus the burst's count (the next pods' addresses). Bounded: a burst holds at
        most its own count beyond the targets, and nothing once it is over."""
        burst = self.burst(now) if delta.high else 0
        if not burst:
            return delta
        return self.delta(now, extra_warm=burst)

    def delta(self, now: float, *, extra_warm: int = 0) -> PoolDelta:
        c = self.ds.counts(now)
        state = PoolState(
            total=c.total,
            assigned=c.assigned,
            pending=c.pending,
            enis=max(c.enis, 1),
            free_prefixes=c.free_prefixes,
            free_singles=c.free_singles,
        )
        pool = replace(self.pool, lean=True) if self.lean(now) else self.pool
        if extra_warm:
            pool = replace(pool, warm_ip=pool.warm_ip + extra_warm)
        return compute(pool, state, self.limits)

    def tick(self, now: float) -> list[PoolReport]:
        """One pass: expire quarantine, retry pending host set-up and verification,
        quarantine surplus that outlasted the release delay, and return the report
        to send now, if any (zero or one). No report while the checkpoint cannot be
        written: one offering an address whose quarantine is not on disk would, after a
        restart, find the address free."""
        try:
            self.ds.flush()
            return self._tick(now)
        except CheckpointWriteError as exc:
            self.stats.checkpoint_write_errors += 1
            self._force = True
            self._event("checkpoint", f"no report while the checkpoint cannot be written: {exc}"[:300])
            return []

    def next_due(self, now: float) -> float:
        """The earliest time at which :meth:`tick` could do anything, given no new event:
        ``now`` or earlier when a tick now would; never later than the next heartbeat.

        An event is anything that reaches the controller or its datastore other than a tick:
        a result applied, a pod's ADD or DEL (or an ADD's retry), :meth:`resync`,
        :meth:`retry_soon`. Until one, a tick is a no-op before this time (same reports,
        same state), so a caller may skip ticks up to it (the bench does,
        ``bench/strategies/warmpool.py``); the production agent does not (it wakes at least
        every second). What it counts: a checkpoint to write again, claims waiting for IMDS
        and ENIs not set up (a tick retries them: due at once), a waiting ADD going stale or a
        DELeted sandbox's pod no longer counted (``Datastore.pending_expires_at``),
        the end of the window after a checkpoint loss, quarantined
        addresses to stamp or whose release timeout ends, addresses left out of an offer
        that join it (:meth:`_offer_joined`), the surplus's release delay, and
        the report's own clocks (the first report, a forced one, the heartbeat, the retry
        backoff, a changed signature, a ``deferred``). Times on the steady clock are
        converted as it stands now to ``now`` (a wall clock stepped later is an event).
        Pure: changes nothing. Returned a hair early (:data:`NEXT_DUE_MARGIN_S`), so float
        rounding never makes it late: a tick at most that early is a no-op."""
        steady = self._steady(now)

        def wall(at: float) -> float:
            return at if self.monotonic is None else now + (at - steady)

        if self.ds.dirty or self._unverified or (self.host is not None and self.ds.not_ready()):
            return now
        at: list[float] = []
        t = self.ds.pending_expires_at()  # recent results never expire by time (recent_results.py)
        if t is not None:
            at.append(t)
        if self._rebuilt_at is not None and self._window_until is not None:
            at.append(wall(self._window_until))
        if self._restored_from is not None:
            at.append(wall(self._restore_wait_until))
        if self.lean(now) and self._lean_until is not None:
            at.append(wall(self._lean_until))  # the warm targets return: the delta changes
        if min(at, default=float("inf")) <= now:
            return now  # nothing below may read a stale entry the tick would expire first
        current = {(e, ip) for e, addrs in self.ds.quarantined_at().items() for ip in addrs}
        if current != self._quarantined_seen.keys():
            return now  # the tick stamps (or forgets) them
        if current:
            first = min(self._quarantined_seen[k] for k in current) + self.timing.release_timeout_s
            at.append(wall(max(first, self._hold_until)))
        if self._unlisted_since and self.metadata is not None:
            first = min(self._unlisted_since.values()) + self.timing.release_timeout_s
            at.append(wall(max(first, self._hold_until)))
        ends = [t for t in (self._offers_apart_at(now), self._joining_ends(now, steady)) if t is not None]
        if ends:
            if min(ends) <= steady:
                return now
            at.append(wall(min(ends)))
        delta = self.delta(now)
        release = self._release_due(now, delta)
        if release is None:
            return now
        at += release
        pending = self.ds.pending(now)
        if pending != self._last_pending or self._last_sent_at is None or steady < self._last_sent_steady:
            return now  # (a steady clock behind the last report is not modelled here: tick)
        at.append(wall(self._report_due_at(delta, pending)))
        return min(at) - NEXT_DUE_MARGIN_S

    def _release_due(self, now: float, delta: PoolDelta) -> list[float] | None:
        """For :meth:`next_due`: when the surplus's release delay ends and when a burst's count
        drops (what it holds back changes); None when a tick now would change the surplus clock."""
        at: list[float] = []
        if self._release_delta(now, delta).high:
            if self._surplus_since is None:
                return None
            at.append(self._surplus_since + self.timing.release_delay_s)
        elif self._surplus_since is not None:
            return None
        if delta.high and self.timing.burst_window_s > 0:
            t = self.ds.arrivals_change_at(now, self.timing.burst_window_s)
            if t is not None:
                at.append(t)
        return at

    def _report_due_at(self, delta: PoolDelta, pending: int) -> float:
        """When :meth:`_report_due` turns true on the steady clock, given no event (for
        :meth:`next_due`: a report was sent, and ``pending`` is what the last tick saw)."""
        last = self._last_sent_steady
        gate = last + self.min_report_interval_s
        if self._force:
            return gate
        at = [last + self.timing.heartbeat_s]
        gate = max(gate, self._not_before)
        signature = self._signature(delta, pending, self._offers())
        if signature != self._last_signature:
            at.append(gate)
        if delta.low or pending > 0 or signature[3] or self._restored_from is not None:
            backoff = min(self.timing.retry_s * (2**self._retries), self.timing.heartbeat_s)
            at.append(max(gate, last + backoff))
        return min(at)

    def _tick(self, now: float) -> list[PoolReport]:
        self._wait_over(now)
        self.ds.recently_gone(now)  # expires old entries
        self._close_rebuild_window(now)
        self._adopt_released_unknown()
        self._forget_known()
        self._note_quarantined(now, from_now=False)
        self._offer_joined(now)
        back = self._take_back(now) if self._steady(now) >= self._hold_until else 0
        if back:
            self.stats.unquarantined += back
            self._event("quarantine", f"{back} addresses back in the pool: no release confirmed in time")
            self._force = True
        for info in self.ds.not_ready():
            self._setup(info)
        if self._unverified:
            self._recheck(now)

        delta = self.delta(now)
        held = self._release_delta(now, delta)
        if held.high:
            if self._surplus_since is None:
                self._surplus_since = now
            elif now - self._surplus_since >= self.timing.release_delay_s:
                if self._quarantine(held, now):
                    self._note_quarantined(now)
                    self._force = True
                    delta = self.delta(now)
                self._surplus_since = None
        else:
            self._surplus_since = None
        self._date_for_waiting_pods(now)

        pending = self.ds.pending(now)
        offers = self._offers()
        signature = self._signature(delta, pending, offers)
        due = self._report_due(now, delta, pending, signature)
        self._last_pending = pending
        if not due:
            return []
        signed: messages.SignedIdentity | None = None
        if self.signed_identity is not None:
            try:
                signed = self.signed_identity()
            except (RuntimeError, OSError, LookupError) as exc:  # IdentityUnavailable, ImdsError, ...
                # IMDS down or no document: no report now (it would be refused), the next tick retries.
                self.stats.identity_unavailable += 1
                self._event("identity", f"no signed identity from IMDS, report postponed: {exc}"[:300])
                return []
        self._repair(now)
        try:
            return [self._report(now, signature, offers, signed)]
        except ValidationError as exc:
            # Never silently: counted, logged, and retried (after a resync) on the next tick.
            self.stats.reports_invalid += 1
            log.error("cannot build a valid report from the datastore: %s", exc)
            self._event("report", f"invalid report not sent: {exc}")
            self._force = True
            if self.metadata is not None:
                try:
                    self.resync(now)
                except Exception as rexc:  # IMDS down: tried again next tick
                    self._event("imds", f"cannot resync after an invalid report: {rexc}")
            return []

    def _repair(self, now: float) -> None:
        """Two ENIs in one device slot (EC2 never has that) make every report invalid, so the
        node would never report again: repair from IMDS (a full resync drops the one it no
        longer lists), loudly; :meth:`_report` leaves out what is left."""
        conflicts = self.ds.slot_conflicts()
        if not conflicts:
            return
        self.stats.datastore_repairs += 1
        log.warning("datastore inconsistent: ENIs sharing a device slot %s; resyncing with IMDS", conflicts)
        self._event("repair", f"ENIs sharing a device slot: {conflicts}; resyncing with IMDS")
        if self.metadata is not None:
            try:
                self.resync(now)
            except Exception as exc:  # IMDS down: the report leaves the extra ENIs out meanwhile
                self._event("imds", f"cannot resync to repair the datastore: {exc}")

    def _adopt_released_unknown(self) -> None:
        """Keys ``Datastore.release`` quarantined instead of freeing (:data:`UNKNOWN_ON_RELEASE_META`)
        are offers of unknown origin (may raise CheckpointWriteError: tried again next pass)."""
        keys = self.ds.released_unknown()
        if not keys:
            return
        # one write: the keys leave the datastore's list only as they join the unknown offers
        # (review 5, V6: a failed write lost them)
        with self.ds.batch():
            self._unknown |= keys
            self.ds.set_meta(UNKNOWN_META, sorted(self._unknown))
            self.ds.clear_released_unknown(keys)

    def _forget_known(self) -> None:
        """Keys of unknown origin no longer quarantined (released, dropped, or granted again) are
        no longer unknown: a later offer of one is an ordinary one (may raise
        CheckpointWriteError: tried again at the next pass)."""
        if not self._unknown:
            return
        offered = {k for ips, pfx in self.ds.quarantined().values() for k in (*ips, *pfx)}
        if self._unknown - offered:
            self._unknown &= offered
            self.ds.set_meta(UNKNOWN_META, sorted(self._unknown))

    def _note_quarantined(self, now: float, *, from_now: bool = True) -> None:
        """Stamp every quarantined address this process has not stamped yet with the steady
        clock's reading, and forget those no longer quarantined. ``from_now``: stamped now
        (the controller quarantined them just now, or they come from the checkpoint of an
        earlier process: its readings and its wall clock are not to be trusted, so their
        timeout starts again). Otherwise (quarantined outside the controller: only tests
        do) aged from their wall-clock date at first sight."""
        steady = self._steady(now)
        current = {(e, ip): since for e, addrs in self.ds.quarantined_at().items() for ip, since in addrs.items()}
        seen = self._quarantined_seen
        for k in [k for k in seen if k not in current]:
            del seen[k]
        for k in [k for k in self._unlisted_since if k not in current]:
            del self._unlisted_since[k]
        new = {k for k in current if k not in seen}
        for k in new:
            seen[k] = steady if from_now else steady - max(0.0, now - current[k])
        if new and len(new) < len(current):
            self._date_joined_offers(new, now)

    def _date_joined_offers(self, new: set[tuple[str, str]], now: float) -> None:
        """Addresses ``new`` (stamped just now by :meth:`_note_quarantined`) joined an ENI's offer
        that already held older ones. A report carries one date per ENI's offer, which must be
        neither before any of its addresses was quarantined (the allocator's release delay counts
        from it) nor later than the agent's stamps allow (the release timeout counts from them).

        An offer dated less than :data:`OFFER_DATE_KEPT_S` ago keeps its date: the addresses that
        joined are left out of it (:attr:`_joining`; quarantined, neither offered nor the pool's)
        until it is that old or nothing older is left on offer, and then join it, the whole offer
        dated anew (:meth:`_offer_joined`). Dated anew at every join, addresses joining less than
        the allocator's release delay apart kept the whole offer too young to act on for as long
        as they came (review 33, Y1). While pods wait, the offer is dated anew at once with them,
        as is an older offer (one the allocator can no longer act on): what EC2 shows of an
        address in no offer the allocator counts as the node's free pool, and dated by its oldest
        address, an address learnt late after a
        checkpoint loss beside an older offer on its ENI was offered too old to act on, what EC2
        shows of it counted as the node's free pool while the node's pods waited, until the offer
        was renewed at the older address's release timeout (review 32, D1; seed 1008551's stall).
        Dated anew, the offer looks younger to the allocator, and the agent holds each of its
        addresses a full release timeout from that date (the steady stamps start again), as at a
        renewal (:meth:`_listed_at_timeout`). Addresses in no offer (members of a /28 not wholly
        quarantined) keep theirs."""
        offers = self.ds.quarantined()
        steady = self._steady(now)
        for eni_id in sorted({e for e, _ in new}):
            ips, prefixes = offers.get(eni_id, ([], []))
            joined = {k for k in (*ips, *prefixes) if any((eni_id, a) in new for a in _members(k))}
            if not joined:
                continue
            waiting = self._joining.get(eni_id, set())
            standing = self._dated(eni_id, [k for k in (*ips, *prefixes) if k not in joined | waiting], now)
            if standing is None and not waiting:
                if all((eni_id, a) in new for k in joined for a in _members(k)):
                    continue  # a new offer, all of it quarantined just now
                # a /28 completed by its last member, its others quarantined before: dated by its
                # oldest, the offer looked older than that member (review 36, C1)
                self._date_anew(eni_id, now, "a /28 completed by its last member")
                continue
            if standing is None or steady - standing >= OFFER_DATE_KEPT_S or self.ds.pending(now) > 0:
                self._date_anew(eni_id, now, "an address joined the offer")
            else:
                self._joining[eni_id] = waiting | joined
                self._event("quarantine", f"{eni_id}: {len(joined)} quarantined, offered once the offer is dated anew")

    def _offer_joined(self, now: float) -> None:
        """The addresses left out of an ENI's offer (:meth:`_date_joined_offers`) join it, the
        whole offer dated anew, once its date is :data:`OFFER_DATE_KEPT_S` old, nothing older is
        left on offer (released, handed back), or pods wait. Forgets those no longer quarantined."""
        if not self._joining:
            return
        offers = self.ds.quarantined()
        steady = self._steady(now)
        for eni_id in sorted(self._joining):
            ips, prefixes = offers.get(eni_id, ([], []))
            waiting = self._joining[eni_id] & {*ips, *prefixes}
            if not waiting:
                del self._joining[eni_id]
                continue
            self._joining[eni_id] = waiting
            standing = self._dated(eni_id, [k for k in (*ips, *prefixes) if k not in waiting], now)
            if standing is None or steady - standing >= OFFER_DATE_KEPT_S or self.ds.pending(now) > 0:
                self._date_anew(eni_id, now, "addresses left out joined the offer")

    def _offers_apart_at(self, now: float) -> float | None:
        """While pods wait, the steady time from which of the report's offers one is
        :data:`OFFER_DATE_KEPT_S` old (the allocator's offer age: it no longer acts on it) while
        another is younger, if no event comes first (:meth:`_date_for_waiting_pods`): at or
        before the steady clock now if they are apart now; None if they never will be so (no
        pod waits, fewer than two offers, or all of them that old)."""
        if self.ds.pending(now) <= 0:
            return None
        dated = [
            d
            for eni_id, (ips, prefixes) in self._offers().items()
            if (d := self._dated(eni_id, [*ips, *prefixes], now)) is not None
        ]
        # aged as the allocator sees them: dated earlier by how far this clock may be ahead
        # (the report's shift; review 42, L1: ignored, split reports went out for that long)
        shift = self.clock_ahead() if self.clock_ahead is not None else 0.0
        if len(dated) < 2 or self._steady(now) - max(dated) + shift >= OFFER_DATE_KEPT_S:
            return None
        return min(dated) + OFFER_DATE_KEPT_S - shift

    def _offers_apart(self, now: float) -> bool:
        at = self._offers_apart_at(now)
        return at is not None and at <= self._steady(now)

    def _date_for_waiting_pods(self, now: float) -> None:
        """While pods wait, offers of one report that the allocator would take apart (one too old
        to act on, another young) are dated anew, together. The allocator counts what EC2 shows
        of an offer too old to act on as the node's free pool: two ENIs' offers renewed at their
        own release timeouts were never young together, the allocator always saw free addresses
        and handed nothing back, and a full node's pod waited for good (the simulation's seed
        1121572). Dated anew together, they age together and are renewed together (each
        address's release timeout starts again from now, as at a renewal: the safe direction);
        a lone offer, or offers all young or all old, are left as they are."""
        if not self._offers_apart(now):
            return
        for eni_id in sorted({*self._offers(), *self._joining}):
            n = self._date_anew(eni_id, now, "pods wait and the offers were apart: one too old to act on")
            self.stats.offers_dated_for_waiting_pods += n
        self._force = True

    def _joining_ends(self, now: float, steady: float) -> float | None:
        """For :meth:`next_due`: the earliest steady time :meth:`_offer_joined` changes anything
        (``steady`` itself if it would now); None if nothing waits to join an offer."""
        if not self._joining:
            return None
        if self.ds.pending(now) > 0:
            return steady
        offers = self.ds.quarantined()
        ends: list[float] = []
        for eni_id, keys in self._joining.items():
            ips, prefixes = offers.get(eni_id, ([], []))
            waiting = keys & {*ips, *prefixes}
            standing = self._dated(eni_id, [k for k in (*ips, *prefixes) if k not in waiting], now)
            if waiting != keys or standing is None:
                return steady
            ends.append(standing + OFFER_DATE_KEPT_S)
        return min(ends)

    def _date_anew(self, eni_id: str, now: float, why: str) -> int:
        """Every address of the ENI's offer, those left out of it included, dated ``now``: the
        stamps first (a failed checkpoint write leaves the dates changed in memory), then the
        datastore's dates (its checkpoint)."""
        ips, prefixes = self.ds.quarantined().get(eni_id, ([], []))
        offered = {a for k in (*ips, *prefixes) for a in _members(k)}
        steady = self._steady(now)
        for k in [k for k in self._quarantined_seen if k[0] == eni_id and k[1] in offered]:
            self._quarantined_seen[k] = steady
        self._joining.pop(eni_id, None)
        n = self.ds.requarantine(eni_id, now, offered)
        self._event("quarantine", f"{eni_id}: {n} offered addresses dated anew: {why}")
        return n

    def _date_mixed_offers(self, now: float) -> None:
        """At a start: an offer whose addresses' checkpointed dates differ (some were left out
        of it, :attr:`_joining`, which no checkpoint keeps) is dated anew, so no address goes out
        dated before it was quarantined."""
        at = self.ds.quarantined_at()
        for eni_id, (ips, prefixes) in sorted(self.ds.quarantined().items()):
            dates = {at.get(eni_id, {}).get(a) for k in (*ips, *prefixes) for a in _members(k)}
            if len(dates - {None}) > 1:
                self._date_anew(eni_id, now, "their dates differed at the start")

    def _dated(self, eni_id: str, keys: Collection[str], now: float) -> float | None:
        """When, on the steady clock, the offer of these addresses and /28s of the ENI counts as
        dated: its oldest stamp, or earlier if its datastore date (what a report says after a
        restart) is older."""
        stamp = self._oldest_stamp(eni_id, keys)
        if stamp is None:
            return None
        at = self.ds.quarantined_at().get(eni_id, {})
        dates = [at[a] for k in keys for a in _members(k) if a in at]
        return min(stamp, self._steady(now) - max(0.0, now - min(dates, default=now)))

    def _oldest_stamp(self, eni_id: str, keys: Iterable[str]) -> float | None:
        """The oldest steady stamp among these offered addresses and /28s of the ENI."""
        seen = self._quarantined_seen
        stamps = [seen[(eni_id, a)] for k in keys for a in _members(k) if (eni_id, a) in seen]
        return min(stamps, default=None)

    def _offers(self) -> dict[str, tuple[list[str], list[str]]]:
        """The offers a report makes now: each ENI's quarantined addresses and whole /28s
        (``Datastore.quarantined``) but those left out until the offer is dated anew
        (:attr:`_joining`)."""
        offers = self.ds.quarantined()
        for eni_id, keys in self._joining.items():
            if eni_id in offers:
                ips, prefixes = offers[eni_id]
                ips, prefixes = [k for k in ips if k not in keys], [k for k in prefixes if k not in keys]
                if ips or prefixes:
                    offers[eni_id] = (ips, prefixes)
                else:
                    del offers[eni_id]
        return offers

    def _offer_stamps(self, offers: dict[str, tuple[list[str], list[str]]]) -> dict[str, float]:
        """Per ENI offered: the oldest steady stamp of its offer's addresses."""
        out: dict[str, float] = {}
        for eni_id, (ips, prefixes) in offers.items():
            t = self._oldest_stamp(eni_id, (*ips, *prefixes))
            if t is not None:
                out[eni_id] = t
        return out

    def _signature(
        self, delta: PoolDelta, pending: int, offers: dict[str, tuple[list[str], list[str]]]
    ) -> tuple[object, ...]:
        """What a report says that, changed, is reported at once and resets the back-off: the
        need, whether pods wait, and the offers' ENIs with their dates. With the ENIs alone, a
        renewal (or an offer dated anew) kept a back-off grown to the heartbeat, and a quiet
        node reported the offer 1 s and 61 s old, renewal after renewal, never inside the
        allocator's window between its release delay and the offer age (review 33, R1)."""
        dated = self._offer_stamps(offers)
        return (delta.short_units, delta.whole_enis, pending > 0, tuple((e, dated.get(e)) for e in sorted(offers)))

    def _due(self, now: float) -> dict[str, list[tuple[str, str | None]]]:
        """Quarantined addresses whose release timeout has passed on the steady clock, counted
        from when this process first saw them quarantined (never from the wall-clock
        ``quarantined_at``, which a forward step ages: a re-pooled address the allocator could
        still unassign)."""
        steady, timeout = self._steady(now), self.timing.release_timeout_s
        due: dict[str, list[tuple[str, str | None]]] = {}
        for eni_id, addrs in self.ds.quarantined_before(float("inf")).items():
            ok = [(ip, p) for ip, p in addrs if steady - self._quarantined_seen.get((eni_id, ip), steady) >= timeout]
            if ok:
                due[eni_id] = ok
        return due

    def _due_unlisted(self, now: float) -> dict[str, list[str]]:
        """Offered addresses a resync read without them on their ENI a whole release timeout ago
        (:attr:`_unlisted_since`), whatever their offer's date: dropped by :meth:`_take_back` if
        its own read lacks them too (a single address not listed as such; a wholly offered /28
        not listed), as if their ``released`` had come. Never taken back (a read that lists one
        leaves it offered)."""
        steady, timeout = self._steady(now), self.timing.release_timeout_s
        due: dict[str, list[str]] = {}
        for (eni_id, ip), since in sorted(self._unlisted_since.items()):
            if steady - since >= timeout:
                due.setdefault(eni_id, []).append(ip)
        return due

    def _note_unlisted(self, now: float, read: set[str]) -> None:
        """After a resync's reconcile of the ENIs ``read``: start the clock of each offered
        address (a single one, or a /28's member) the read did not list on its ENI."""
        steady = self._steady(now)
        unlisted = set(self.ds.unlisted())
        for eni in self.ds.enis():
            if eni.info.eni_id not in read:
                continue
            for a in eni.addrs.values():
                if a.quarantined_at is not None and not a.in_use and a.ip in unlisted:
                    self._unlisted_since.setdefault((eni.info.eni_id, a.ip), steady)

    def _take_back(self, now: float) -> int:
        """Quarantined addresses with no answer within the release timeout (measured on the
        steady clock, :meth:`_due`). One IMDS no longer lists was released and its result is
        late or lost: dropped, as if it had come. One IMDS still lists is never taken back on
        that word: it is offered again, dated now, and the allocator's answer decides (a
        hand-back when pods need it, a release, or its ``released`` said again from its
        release book). IMDS promises no bound on its lag and may answer from an older state
        than one it served (docs/safety.md, rows 4 and 6): a read from before the allocator's
        unassign lists the address, and with the answers to the node's later reports lost,
        taking it back gave a pod an address EC2 had unassigned (``STEP6_REGRESSED_TAKE_BACK``
        in tests/sim/test_undocumented_rows.py; before, it was taken back here when listed,
        on the 120 s lag bound the timeout assumed). So an offer the allocator never answers
        stays quarantined: when pods need addresses, the answer to the node's report (a
        deficit) hands it back. Returns how many came back (only without IMDS: tests)."""
        due = self._due(now)
        due_unlisted = self._due_unlisted(now) if self.metadata is not None else {}
        if not due and not due_unlisted:
            return 0
        if self.metadata is None:
            return sum(self.ds.reclaim(eni_id, [ip for ip, _ in addrs]) for eni_id, addrs in due.items())
        try:
            interfaces = self._read(now)
        except Exception as exc:  # IMDS down: keep them quarantined, retry next tick
            self._event("imds", f"cannot confirm quarantined addresses before taking them back: {exc}")
            return 0
        view = {a.info.eni_id: a for a in interfaces}
        whole = self._whole_eni_offers()
        # every whole quarantined /28, offered now or past the cap of what one offer may name: one
        # an earlier report offered, left out by the cap, is no loose member's (review 36, D1)
        offerable = self.ds.quarantined(capped=False)
        back = 0
        for eni_id, addrs in due.items():
            seen = view.get(eni_id)
            listed = set() if seen is None else {*seen.ips, *seen.prefixes}
            offered_pfx = set(offerable.get(eni_id, ((), ()))[1])
            # Members of a prefix not wholly quarantined (held after a checkpoint loss while
            # a pod holds another member) are in no offer: no allocator can answer them, nor
            # can it have unassigned the prefix since a pod took that member, so these alone
            # go back on IMDS's listing, as before (unless IMDS shows it lags).
            loose = [ip for ip, p in addrs if p is not None and p not in offered_pfx and p in listed]
            keep = [ip for ip, p in addrs if (p or ip) in listed and ip not in loose]
            if keep:
                back += self._listed_at_timeout(eni_id, keep, eni_id in whole, now)
            if loose and not self._imds_lagging(now):
                back += self.ds.reclaim(eni_id, loose)
            elif loose:
                self.stats.take_back_postponed += 1
            gone_ips = [ip for ip, p in addrs if p is None and ip not in listed]
            gone_pfx = sorted({p for _, p in addrs if p is not None and p not in listed})
            if (gone_ips or gone_pfx) and self._read_predates_pods(eni_id, listed, in_read=seen is not None):
                # The read also lacks addresses pods of this ENI hold: it answers from before
                # they were assigned, so its lacking these is no sign the allocator took them.
                # Kept quarantined; a later read decides (dropped, they would be lost to the
                # node for good if EC2 still had them: the read never was evidence).
                self.stats.take_back_postponed += 1
                gone_ips, gone_pfx = [], []
            if gone_ips or gone_pfx:
                self._drop_gone(eni_id, gone_ips, gone_pfx, now)
        left = self.ds.quarantined_before(float("inf"))  # after the drops above
        for eni_id, ips in due_unlisted.items():
            for ip in ips:  # dropped, or its clock starts again at the next resync that lacks it
                self._unlisted_since.pop((eni_id, ip), None)
            seen = view.get(eni_id)
            if seen is None:
                continue  # a read without the ENI: the stamp's timeout decides, as before
            prefix_of = dict(left.get(eni_id, []))
            whole = set(offerable.get(eni_id, ((), ()))[1])
            # As the stamp's timeout reads them: a single address not listed as such (EC2 may
            # have given it back inside a /28, review 38, F1: the /28 is then learnt free, EC2's
            # own), a wholly offered /28 not listed (F2); never a loose member (above).
            gone_ips = [ip for ip in ips if ip in prefix_of and prefix_of[ip] is None and ip not in seen.ips]
            gone_pfx = sorted(
                {p for ip in ips if (p := prefix_of.get(ip)) is not None and p in whole and p not in seen.prefixes}
            )
            if (gone_ips or gone_pfx) and self._read_predates_pods(eni_id, {*seen.ips, *seen.prefixes}, in_read=True):
                self.stats.take_back_postponed += 1
                continue
            if gone_ips or gone_pfx:
                self._drop_gone(eni_id, gone_ips, gone_pfx, now)
        return back

    def _drop_gone(self, eni_id: str, gone_ips: list[str], gone_pfx: list[str], now: float) -> None:
        """Offered addresses and /28s of ``eni_id`` IMDS no longer lists, past their release
        timeout (:meth:`_take_back`)."""
        # EC2 took them (the ``released`` result is late or lost): gone, as if it had
        # come. Its in_reply_to is unknown, so it is taken as the newest report sent:
        # every claim replying to a report up to now is stale for them (a hand-back of
        # an older offer arriving late; before, -1 and a restart, which forgets
        # ``_offered_upto``, let one in on a read from before the unassign, row 6).
        # Only a grant replying to a later report takes them again. An offer of unknown
        # origin is never handed back (docs/allocator.md), so for one a claim replying to
        # the newest report itself is stale too (hostile review of the unknown offers,
        # R3: dated last_seq, such a hand-back met a regressed read and came back free).
        gone = [*gone_ips, *gone_pfx]
        unknown = [k for k in gone if k in self._unknown]
        with self.ds.batch():
            if unknown:
                self.ds.mark_gone(now, now + RECENT_S, self.last_seq + 1, released=unknown)
            ordinary = [k for k in gone if k not in self._unknown]
            if ordinary:
                self.ds.mark_gone(now, now + RECENT_S, self.last_seq, released=ordinary)
        self._note_absent_from_read()
        removed = self.ds.remove_addresses(eni_id, gone_ips, gone_pfx)
        self.stats.released_without_result += len(removed)
        self._event(
            "quarantine",
            f"{eni_id}: {len(removed)} quarantined addresses no longer in IMDS: released (result late or lost)",
        )

    def _read_predates_pods(self, eni_id: str, listed: set[str], *, in_read: bool) -> bool:
        """Whether a read listing ``listed`` for ``eni_id`` lacks an address a pod holds on it,
        or lacks the primary ENI."""
        eni = next((e for e in self.ds.enis() if e.info.eni_id == eni_id), None)
        if eni is None:
            return False
        if not in_read and eni.info.device_index == 0 and eni.info.network_card == 0:
            return True  # a read without the primary ENI (never detached) is torn or from before boot
        return any(a.in_use and a.ip not in listed and (a.prefix or "") not in listed for a in eni.addrs.values())

    def _imds_lagging(self, now: float) -> bool:
        """Signs the last read is behind EC2: it lists what a result released and it has not
        been seen without, or a result's claim waits for it."""
        gone = self.ds.recently_gone(now)[0]
        listed = self._listed or set()
        return bool(self._unverified) or any(k in listed and not self.ds.seen_absent(k) for k in gone)

    def _listed_at_timeout(self, eni_id: str, keep: list[str], whole: bool, now: float) -> int:
        """Due quarantined addresses of ``eni_id`` IMDS still lists (:meth:`_take_back`): offered
        again, every quarantined address of the ENI dated now (an offer carries one date per
        ENI, its oldest), so the allocator's answer decides. Returns how many came back: none."""
        n = self.ds.requarantine(eni_id, now)
        steady = self._steady(now)
        for e, ip in list(self._quarantined_seen):
            if e == eni_id:
                self._quarantined_seen[(e, ip)] = steady
        self._joining.pop(eni_id, None)  # one date for all of them: one offer
        if whole:
            self.stats.whole_eni_offers_renewed += n
        else:
            self.stats.offers_renewed += n
        self._force = True
        self._event("quarantine", f"{eni_id}: {n} offered addresses not answered: offered again, not taken back")
        return 0

    def _whole_eni_offers(self) -> set[str]:
        """Secondary ENIs every address of which is quarantined (offered for deletion)."""
        return {
            e.info.eni_id
            for e in self.ds.enis()
            if not (e.info.device_index == 0 and e.info.network_card == 0)
            and e.addrs
            and all(a.quarantined_at is not None for a in e.addrs.values())
        }

    def _report_due(self, now: float, delta: PoolDelta, pending: int, signature: tuple[object, ...]) -> bool:
        if self._last_sent_at is None:
            return True
        if pending > self._last_pending:
            return True  # a CNI ADD found nothing: report at once
        # Every interval here is on the monotonic clock: a wall clock stepped back would hold
        # the heartbeat and the retries until it caught up again.
        since = self._steady(now) - self._last_sent_steady
        if 0 <= since < self.min_report_interval_s:
            # No other path sends more than one report an interval, a forced one included (it
            # stays forced and goes at the next pass): a loop that forces report after report
            # (a send failing at once, offers changing on every pass) cannot flood the
            # allocator's queue (a wall clock stepped on each pass would not be held).
            return False
        if self._force:
            return True
        if since >= self.timing.heartbeat_s:
            return True
        if self._steady(now) < self._not_before:
            return False
        if signature != self._last_signature and since >= self.min_report_interval_s:
            return True
        if delta.low or pending > 0 or signature[3] or self._restored_from is not None:
            backoff = min(self.timing.retry_s * (2**self._retries), self.timing.heartbeat_s)
            if since >= backoff:
                self._retries += 1
                return True
        return False

    def _report(
        self,
        now: float,
        signature: tuple[object, ...],
        offers: dict[str, tuple[list[str], list[str]]],
        signed: messages.SignedIdentity | None = None,
    ) -> PoolReport:
        seq = max(self.last_seq + 1, self._clock_seq(now))
        self.last_seq = seq
        self.ds.set_meta(SEQ_META, seq)
        shift = self.clock_ahead() if self.clock_ahead is not None else 0.0
        steady = self._steady(now)
        # Only what the offers hold caps their date: a member of a /28 in no offer (after a loss,
        # the free members of a /28 a pod holds one of) dated a /28 learnt later on the ENI from
        # the start, too old for the allocator to act on (review 32, D2; seed 1008551's stall).
        # Nor do addresses left out of the offer (``_joining``).
        steady_since = {e: min(now, now - max(0.0, steady - t)) for e, t in self._offer_stamps(offers).items()}
        report = build_report(
            self.identity,
            self.pool,
            self.ds,
            offers,
            seq=seq,
            now=now,
            signed=signed,
            skipped=self._skipped,
            offer_shift=shift,
            steady_since=steady_since,
            unknown=self._unknown,
            restored_from=self._restored_from,
            restore_wait=self._restore_wait,
            first_start=self._first_start,
            epoch=self._epoch,
            lean=self.lean(now) if self.fair_share else None,
            burst=self.burst(now),
        )
        # An offer naming one key of unknown origin is marked so whole, and the allocator hands
        # none of its keys back (warmpool/planner.py::_split_unknown): every key in it is of
        # unknown origin from now on, for the agent's refusal of a hand-back and the take-back's
        # dating (hostile review 3, F1: an ordinary key beside an unknown one kept the old rule).
        widened = {x for o in report.release if o.unknown for x in (*o.ips, *o.prefixes)} - self._unknown
        if widened:
            self._unknown |= widened
            self.ds.set_meta(UNKNOWN_META, sorted(self._unknown))
        for o in report.release:
            for x in (*o.ips, *o.prefixes):
                self._offered_upto[x] = seq
        if len(self._offered_upto) > 4 * MAX_OFFER_MEMORY:
            quarantined = {x for ips, pfx in self.ds.quarantined().values() for x in (*ips, *pfx)}
            self._offered_upto = {k: v for k, v in self._offered_upto.items() if k in quarantined}
            self._offer_floor = seq
        if signature != self._last_signature:
            self._retries = 0
        self._last_signature = signature
        self._last_sent_at = now
        self._last_sent_steady = self._steady(now)
        self._force = False
        self.stats.reports_sent += 1
        return report

    def _clock_seq(self, now: float) -> int:
        """The seq the wall clock gives: ms since the epoch, moved up by every ``seq-floor``
        taken (:meth:`_take_seq_floor`), so seqs keep a millisecond's spacing above a floor (the
        release book's ``GIVEN_TTL_MS`` reads seqs as ms)."""
        return int(now * 1000) + self._seq_offset_ms

    def _skipped(self, eni_id: str, slot: tuple[int, int]) -> None:
        # Newest first within a slot: an older ENI in a slot another has taken is one whose
        # removal was missed (what :meth:`_repair` could not fix stays out of the report).
        self.stats.report_enis_skipped += 1
        log.warning(
            "%s left out of the report: device slot %s or its primary address taken by another ENI", eni_id, slot
        )

    def _quarantine(self, delta: PoolDelta, now: float) -> int:
        n = 0
        if delta.whole_enis:
            by_id = {e.info.eni_id: e for e in self.ds.enis()}
            for eni_id in self.ds.releasable_enis(now, self.timing.eni_min_age_s)[: delta.over_enis]:
                n += self.ds.quarantine(eni_id, by_id[eni_id].ips, by_id[eni_id].prefixes, now)
        elif self.pool.prefix_mode:
            for eni_id, p in self.ds.releasable_prefixes(now)[: delta.over_units]:
                n += self.ds.quarantine(eni_id, [], [p], now)
            # and single addresses (the fallback when no /28 was free): releasable_ips lists
            # only those (a prefix's addresses are not in an ENI's ``ips``)
            for eni_id, ip in self.ds.releasable_ips(now)[: delta.over_singles]:
                n += self.ds.quarantine(eni_id, [ip], [], now)
        else:
            for eni_id, ip in self.ds.releasable_ips(now)[: delta.over_units]:
                n += self.ds.quarantine(eni_id, [ip], [], now)
        if n:
            self.stats.quarantined += n
            self._event("quarantine", f"{n} surplus addresses quarantined and offered back")
        return n

    def retry_soon(self) -> None:
        """The last report could not be sent: send one on the next tick."""
        self._force = True

    # --- results -----------------------------------------------------------------------

    def apply_result(self, result: AllocationResult, now: float) -> list[str]:
        """Apply one result (already parsed). Returns notes; never raises on a bad action.
        Returns only once its effect is checkpointed: :class:`CheckpointWriteError` otherwise,
        and then the result must not be acknowledged (SQS brings it back; applying a result
        twice is harmless)."""
        ident = self.identity
        if result.instance_id != ident.instance_id or result.node != ident.node or result.cluster != ident.cluster:
            self.stats.results_rejected += 1
            return [f"result for {result.cluster}/{result.node}/{result.instance_id} is not ours: ignored"]
        if result.in_reply_to > self.last_seq:
            self.stats.results_rejected += 1
            return [f"result replies to seq {result.in_reply_to} never sent (last {self.last_seq}): ignored"]
        notes: list[str] = []
        self._note_scarce(bool(result.scarce), now, result.in_reply_to)
        view = self._view(now)
        released_here: set[str] = set()
        gone_later = _gone_later(result.actions)
        for i, action in enumerate(result.actions):
            if isinstance(action, Attached | Assigned):
                action = _without(action, *gone_later[i])
                self._note_regranted(action, released_here, result.in_reply_to)
                notes.extend(self._apply_addresses(action, view, now, result.in_reply_to))
            elif isinstance(action, Released):
                released_here.update((*action.ips, *action.prefixes))
                notes.extend(self._apply_release(action, now, result.in_reply_to))
            elif isinstance(action, Deleted):
                info = self.ds.eni(action.eni_id)
                self.ds.mark_gone(now, now + RECENT_S, result.in_reply_to, deleted=[action.eni_id])
                # A ``?`` hold (a start's hold of every address) names no pod: it only keeps the
                # address from being handed out, and nothing of an ENI EC2 deleted ever is (resync
                # leaves it out however long IMDS lists it). Kept, it would keep the ENI's device
                # slot from the next ENI there, whose addresses the agent would never learn (the
                # simulation's seed 2748: a slow detach under a rebuild's hold). Nor does an
                # ``unrouted`` hold (seed 4712: an older copy's records of pods DELeted from it, held
                # for a routeless veth). Both stay recovered holders, not attached (remove_eni): a
                # pod on the address (an allocator at fault) keeps it when EC2 grants it again
                # (review 21, D1: before, the ``?`` hold went with the ENI).
                if info is not None and self.ds.remove_eni(action.eni_id, unknown_holds=True):
                    self._teardown(info)
                    self.stats.enis_deleted += 1
                    notes.append(f"{action.eni_id}: deleted")
                elif info is not None:
                    # Never yanked from the pods (their network stays as it is), but EC2 has
                    # deleted the ENI: its addresses may be another node's already.
                    self.stats.deleted_in_use += 1
                    log.error("EC2 deleted %s while pods hold its addresses (two holders possible)", action.eni_id)
                    notes.append(f"{action.eni_id}: deleted by EC2 while pods hold its addresses")
            elif isinstance(action, RestoreChecked | Fenced | SeqFloor):
                notes.append(self._on_report_answer(action, now, result.in_reply_to))
            elif isinstance(action, Deferred):
                self._not_before = max(self._not_before, self._steady(now) + action.retry_after_s)
                notes.append(f"deferred {action.retry_after_s:.1f}s: {action.reason}")
            elif isinstance(action, Failed):
                self.stats.results_failed += 1
                self._not_before = max(self._not_before, self._steady(now) + self.timing.retry_s)
                notes.append(f"allocator failed: {action.code}: {action.message}")
            self.stats.actions[action.kind] += 1
        if not result.actions and self.ds.pending(now) > 0 and self.metadata is not None:
            # Pods wait, yet the allocator found nothing to do: EC2 already holds
            # what we need, so a result was lost (e.g. the invocation died after
            # its EC2 calls). Read IMDS now instead of at the next periodic resync.
            self.stats.resync_on_empty_result += 1
            try:
                notes.extend(self.resync(now))
            except Exception as exc:  # IMDS down: the periodic resync tries again
                self._event("imds", f"cannot resync after an empty result: {exc}")
        self._answered(result.actions, now)
        self.ds.flush()
        self.stats.results_applied += 1
        for n in notes:
            self._event("result", n)
        return notes

    def _answered(self, actions: Sequence[Action], now: float) -> None:
        """An answer resets the report back-off, unless it only says what cannot be had (``unmet``:
        a node at its ENI limit, its subnets full) while no pod waits and nothing is on offer: a
        warm target the node does without. Reset, such a node reported every retry interval for
        as long as that lasted (about 450 reports an hour instead of about 60 at the defaults;
        issue 25, ``tests/perf/report_cadence.py``). Reset as before while a pod waits: what frees
        an address happens elsewhere (another node's release, a /28 made whole) and nothing tells
        the node, so its next report is its only way to learn it; kept, the wait grew to the
        heartbeat (review 25, K1). And while an offer is out: the allocator acts on an offer only
        between its release delay and ``OFFER_MAX_AGE_CEILING_S`` after its quarantine, a window
        a back-off grown to the heartbeat can miss at every report (the simulation's seed 7816)."""
        if not (_unmet_only(actions) and not self.ds.quarantined() and self.ds.pending(now) == 0):
            self._retries = 0

    def _on_report_answer(self, action: RestoreChecked | Fenced | SeqFloor, now: float, in_reply_to: int) -> str:
        """An answer about the report itself rather than addresses: its restore check, its
        fence, or its seq below the instance's ledger."""
        if isinstance(action, SeqFloor):
            return self._take_seq_floor(action.floor, now, in_reply_to)
        return self._restore_checked(action, now, in_reply_to)

    def _take_seq_floor(self, floor: int, now: float, in_reply_to: int) -> str:
        """The allocator dropped report ``in_reply_to`` as stale: the instance's ledger holds seq
        ``floor`` (``SeqFloor``). Above every seq this agent sent, it was sent by another process
        of the node (one whose wall clock was ahead of this one's, before a checkpoint loss or
        the copy restored; or the node itself, hostile), and this agent's reports would be stale
        until its clock passed it (docs/safety.md, L1). So its seqs go on from
        :data:`SEQ_FLOOR_GAP_MS` above ``floor`` (above what that process may still have
        queued), at the wall clock's pace (the offset added to it, :meth:`_clock_seq`, one
        write with ``last_seq``), and every seq up to there counts as another process's, as those
        before this start do: a hand-back replying to one is not taken (``_seq_at_start``), a
        claim replying to one is not EC2's own, nor taken when a report of this agent offered
        the address (``_offer_floor``, ``_offered_upto`` raised to it: that process's reports may
        have offered anything), and after a checkpoint loss not a grant since it
        (``_rebuilt_seq``). Results replying to them are accepted, as the previous process's are
        after a loss (they may say ``released``). A floor at or below this agent's seq changes
        nothing (a late or repeated answer, or a report of this agent delivered again behind a
        newer one).

        The gap is added to the whole clock reading (``floor + gap + clock``, review 16): another
        process answered the same floor earlier numbered at its earlier clock, below this one. A
        floor that would leave less than :data:`SEQ_TOP_HEADROOM_MS` below :data:`SEQ_TOP` is
        refused: nothing changes, the agent's reports stay stale until the row goes."""
        if floor <= self.last_seq:
            return f"seq floor {floor} replying to {in_reply_to}: already passed (last {self.last_seq})"
        offset = floor + SEQ_FLOOR_GAP_MS
        above = offset + int(now * 1000)
        if above > SEQ_TOP - SEQ_TOP_HEADROOM_MS:
            self.stats.seq_floors_refused += 1
            log.error("seq floor refused: too near the seq top", extra={"floor": floor, "seq": in_reply_to})
            return f"seq floor {floor} replying to {in_reply_to}: refused, too near the seq top {SEQ_TOP}"
        self.last_seq = above
        self._seq_offset_ms = max(self._seq_offset_ms, offset)
        self._seq_at_start = max(self._seq_at_start, above)
        self._offer_floor = max(self._offer_floor, above)
        self._offered_upto = {k: max(v, above) for k, v in self._offered_upto.items()}
        with self.ds.batch():
            self.ds.set_meta(SEQ_META, above)
            self.ds.set_meta(SEQ_OFFSET_META, self._seq_offset_ms)
            if self._rebuilt_seq >= 0:
                self._rebuilt_seq = max(self._rebuilt_seq, above)
                self.ds.set_meta(REBUILT_SEQ_META, self._rebuilt_seq)
        self._force = True
        self.stats.seq_floors_taken += 1
        return f"report {in_reply_to} stale: the instance's ledger is at seq {floor}; reports go on above it"

    def _note_scarce(self, scarce: bool, now: float, seq: int) -> None:
        """A result said ``scarce``: lean for the hold, renewed by each such answer. What is then
        surplus above ``MINIMUM_IP_TARGET`` goes the usual way (after the release delay,
        quarantined and offered: :meth:`_quarantine`), never taken from a pod. Only the answer
        to the newest report answered so far counts: an older ``scarce`` that SQS delivers late
        or twice, after the answer to a newer report that did not say it, changes nothing
        (review of fair sharing, F2)."""
        if seq < self._scarce_seq:
            return
        self._scarce_seq = seq
        if not scarce or not self.fair_share:
            return
        if not self.lean(now):
            self.stats.lean_entered += 1
            self._event("lean", "zone short of free addresses: warm targets suspended")
        self._lean_until = self._steady(now) + self.timing.lean_hold_s

    def _apply_release(self, action: Released, now: float, seq: int) -> list[str]:
        """EC2 unassigned these (in answer to report ``seq``). Dropped as stale only for an
        address a later *grant* gave us again (an EC2 assignment replying to a later report:
        it post-dates the unassignment); a hand-back of an offered address proves nothing,
        since the allocator may have planned it from a Describe older than the unassignment.
        Free and quarantined addresses leave the pool; one a pod holds stays with the pod
        (never yanked), counted and logged: EC2 may already have given it to another node."""
        notes: list[str] = []
        granted = self.ds.recently_granted(now)
        rel_ips = [k for k in action.ips if granted.get(k, -1) <= seq]
        rel_pfx = [k for k in action.prefixes if granted.get(k, -1) <= seq]
        if len(rel_ips) + len(rel_pfx) < len(action.ips) + len(action.prefixes):
            self.stats.stale_releases += 1
            notes.append(
                f"{action.eni_id}: release from reply to {seq} is older than "
                "the grant that gave some addresses back: ignored for them"
            )
        # Filter first (checkpointed), then remove: a restart between the two
        # finds the addresses still quarantined and ignores IMDS for them.
        self.ds.mark_gone(now, now + RECENT_S, seq, released=[*rel_ips, *rel_pfx])
        self._note_absent_from_read()  # read after the release: what it lacks was seen gone
        removed = self.ds.remove_addresses(action.eni_id, rel_ips, rel_pfx)
        self.stats.addresses_released += len(removed)
        notes.append(f"{action.eni_id}: {len(removed)} addresses released")
        held = self._held_on(action.eni_id, rel_ips, rel_pfx)
        if held:
            self.stats.released_in_use += len(held)
            offered = self._held_offers_in(action.eni_id, held)
            self.stats.held_offers_taken += len(offered)
            why = "while pods hold them (two holders possible)"
            if offered and len(offered) == len(held):
                # seed 1509's class: most likely the earlier offer answered; nothing on the node
                # tells it from an older copy's address handed back since and carried by a pod
                # the hold stands for (review 24, H1), so still the alarm
                why = (
                    "while a start's hold holds them, taken while they were on offer: the offer "
                    "answered, or, if the restored checkpoint was an older copy, a pod the hold "
                    "stands for carries one (two holders possible)"
                )
            log.error("EC2 unassigned %s from %s %s: kept for the pods", held, action.eni_id, why)
            notes.append(f"{action.eni_id}: released by EC2 while pods hold {held}")
        return notes

    def _held_on(self, eni_id: str, ips: list[str], prefixes: list[str]) -> list[str]:
        """Which of these addresses and prefixes pods still hold on ``eni_id``."""
        eni = next((e for e in self.ds.enis() if e.info.eni_id == eni_id), None)
        if eni is None:
            return []
        held = [ip for ip in ips if ip in eni.addrs and eni.addrs[ip].in_use]
        members = eni.by_prefix() if prefixes else {}
        held += [p for p in prefixes if any(a.in_use for a in members.get(p, ()))]
        return held

    def _held_offers_in(self, eni_id: str, keys: list[str]) -> list[str]:
        """Which of these addresses and /28s a start's hold of every address took while on offer
        (:data:`node_agent.datastore.HELD_OFFERS`: held by ``?`` alone, every member of a /28)."""
        eni = next((e for e in self.ds.enis() if e.info.eni_id == eni_id), None)
        if eni is None:
            return []
        noted = set(self.ds.meta.get(HELD_OFFERS) or ())

        def offer_held(a: Addr) -> bool:
            return a.recovered == UNKNOWN_HOLDER and not a.container_id and a.ip in noted

        members = eni.by_prefix()
        out = [k for k in keys if k in eni.addrs and offer_held(eni.addrs[k])]
        return out + [k for k in keys if members.get(k) and all(offer_held(a) for a in members[k])]

    def _view(self, now: float) -> dict[str, AttachedEni] | None:
        self._listed = None
        if self.metadata is None:
            return None
        try:
            interfaces = self._read(now)
        except Exception as exc:  # IMDS down: park everything and retry
            self._event("imds", f"cannot verify against IMDS: {exc}")
            self._listed = None
            return {}
        usable, _ = self._usable(interfaces)
        return {a.info.eni_id: a for a in usable}

    def _note_regranted(self, action: Attached | Assigned, released_here: set[str], seq: int) -> None:
        """Keys this claim names that an earlier action of the same result released: EC2 gave
        them back within one invocation (its Unassign, then an Assign that got them again).
        Never a hand-back: a released key is in the allocator's release book by then, and
        ``functions/execute.py::PlanExecutor._reclaim`` refuses booked keys. In memory only
        (a restart forgets it: the claim then waits for IMDS's evidence)."""
        for k in (*action.ips, *action.prefixes):
            if k in released_here:
                self._regranted[k] = seq
        if len(self._regranted) > 4 * MAX_OFFER_MEMORY:
            self._regranted = dict(list(self._regranted.items())[-MAX_OFFER_MEMORY:])

    def _granted_by_ec2(self, key: str, seq: int) -> bool:
        """An ``assigned``/``attached`` naming ``key`` in reply to report ``seq`` is EC2's own
        assignment, never a hand-back: the allocator hands back only what the report it
        answers offered (``warmpool/planner.py``: ``Reclaim`` is made from ``report.release``),
        and no report from ``seq`` on offered ``key``; or the same result released it first
        (:meth:`_note_regranted`)."""
        return seq > self._offered_upto.get(key, self._offer_floor) or self._regranted.get(key) == seq

    def _evident(
        self,
        ips: list[str],
        prefixes: list[str],
        seen: AttachedEni,
        gone: dict[str, int],
        seq: int,
        *,
        waited: bool,
        seen_claim: Attached | Assigned | None = None,
    ) -> tuple[list[str], list[str]]:
        """The claimed addresses and prefixes IMDS shows as this claim's.

        An address released earlier is listed by a lagging IMDS from before the release
        too: only a listing after IMDS was seen without it is evidence. A claim that waited
        its full time without IMDS showing that gap (IMDS may never sample it: released and
        assigned again within its lag) is taken on EC2's word, if it is EC2's own assignment
        (:meth:`_granted_by_ec2`): before, the address was then never used again while the
        allocator counted it as the node's."""

        grants = self._unverified.grants_of(ParkedClaims.key(seen_claim)) if seen_claim is not None else frozenset()

        def evident(k: str) -> bool:
            return k not in gone or self.ds.seen_absent(k) or (waited and (k in grants or self._granted_by_ec2(k, seq)))

        listed_ips, listed_pfx = set(seen.ips), set(seen.prefixes)
        return [ip for ip in ips if ip in listed_ips and evident(ip)], [
            p for p in prefixes if p in listed_pfx and evident(p)
        ]

    def _apply_addresses(
        self,
        action: Attached | Assigned,
        view: dict[str, AttachedEni] | None,
        now: float,
        seq: int,
        *,
        waited: bool = False,
    ) -> list[str]:
        notes: list[str] = []
        ips, prefixes = self._not_late(action, seq, notes)
        # A claim from a result older than the one that took the address (or deleted the
        # ENI) is stale: SQS redelivered or reordered it, and IMDS may still lag.
        gone_ips, gone_enis = self.ds.recently_gone(now)
        if gone_enis.get(action.eni_id, -1) > seq:
            self.stats.stale_claims += 1
            return [f"{action.eni_id}: claim from reply to {seq} is older than the ENI's deletion: ignored"]
        stale = [k for k in [*ips, *prefixes] if gone_ips.get(k, -1) > seq]
        if stale:
            dropped = set(stale)
            self.stats.stale_claims += 1
            notes.append(f"{action.eni_id}: {len(stale)} claimed addresses were released since: ignored")
            ips = [ip for ip in ips if ip not in dropped]
            prefixes = [p for p in prefixes if p not in dropped]
        if view is not None:
            seen = view.get(action.eni_id)
            if seen is None:
                self._park(action, now, seq)
                return [f"{action.eni_id}: not in IMDS yet; will re-check"]
            if action.eni_id in gone_enis:
                # Deleted before, claimed by a newer result: ours again only once IMDS has been
                # seen without it (the old attachment gone) and lists it now (a new one).
                if not self.ds.eni_seen_absent(action.eni_id):
                    self._park(action, now, seq)
                    return [f"{action.eni_id}: deleted earlier and not yet seen detached in IMDS; will re-check"]
                self.ds.unmark_deleted(action.eni_id)
            ok_ips, ok_pfx = self._evident(ips, prefixes, seen, gone_ips, seq, waited=waited, seen_claim=action)
            # Ours again: the "just released" filter of resync must not drop it.
            self.ds.unmark_released([*ok_ips, *ok_pfx])
            if len(ok_ips) < len(ips) or len(ok_pfx) < len(prefixes):
                self._park(action, now, seq)
                notes.append(f"{action.eni_id}: {len(ips) - len(ok_ips)} addresses not in IMDS yet")
            ips, prefixes = ok_ips, ok_pfx
            info = seen.info
            other = self.ds.pinned_slots(view).get((info.network_card, info.device_index))
            if other is not None and other != info.eni_id:
                # a read from an older state may show a deleted ENI in the slot pods use now
                # (review 10, D1): their ENI is not dropped for it; the claim waits
                self._park(action, now, seq)
                return [*notes, f"{action.eni_id}: in the slot of {other}, which pods hold; will re-check"]
            notes.extend(self._drop_replaced(info, view))
        elif isinstance(action, Attached):
            self.ds.unmark_deleted(action.eni_id)  # no IMDS to ask: the newer result is trusted
            info = EniInfo(
                eni_id=action.eni_id,
                device_index=action.device_index,
                network_card=action.network_card,
                mac=action.mac,
                primary_ip=action.primary_ip,
                subnet_id=action.subnet_id,
                subnet_cidr=action.subnet_cidr,
            )
        else:
            info = self.ds.eni(action.eni_id)  # type: ignore[assignment]
            if info is None:
                return [f"{action.eni_id}: assigned to an unknown ENI: ignored"]
        keys = self._known_keys() if seq < self._rebuilt_seq and self._in_rebuild_window(now) else None
        if self.ds.add_eni(info, now, ready=self.host is None or info.primary):
            self._setup(info)
            self.stats.enis_attached += 1
        offered = {k for q_ips, q_pfx in self.ds.quarantined().values() for k in (*q_ips, *q_pfx)}
        with self.ds.batch():  # one lock: no CNI ADD between the adding and the holding
            n = self.ds.add_addresses(info.eni_id, ips, prefixes)
            # Only a grant of what we did not hold offered is EC2's new assignment (an older
            # ``released`` is stale for it); a hand-back of an offer is no such evidence. Marked
            # before ``_hold_unknown`` and in the same batch: if its one save fails, the result
            # comes again and finds the address held, but the mark is in memory already (a
            # second hostile review of step 6: marked after, the retry left it out).
            self.ds.mark_granted(now, now + RECENT_S, seq, [k for k in (*ips, *prefixes) if k not in offered])
            if keys is not None:  # a claim replying to a report of the process whose offers are forgotten
                self._hold_unknown(keys, now)
        self.stats.addresses_added += n
        notes.append(f"{info.eni_id}: {n} addresses added")
        # A hand-back of an offer of unknown origin is never taken (the allocator never plans
        # one: ``warmpool/planner.py::_split_unknown``); only EC2's own assignment is.
        grants = self._unverified.grants_of(ParkedClaims.key(action))
        fresh_ips = [x for x in ips if self._may_reclaim(x, seq, grants)]
        fresh_pfx = [x for x in prefixes if self._may_reclaim(x, seq, grants)]
        superseded = (len(ips) - len(fresh_ips)) + (len(prefixes) - len(fresh_pfx))
        back = self.ds.reclaim(info.eni_id, fresh_ips, fresh_pfx)
        if superseded:
            # Still quarantined (and offered): the answer to the newer report decides,
            # or the take-back after the release timeout (checked against IMDS).
            self.stats.handbacks_superseded += superseded
            notes.append(
                f"{info.eni_id}: a hand-back replying to seq {seq} is older than a later offer: kept quarantined"
            )
        if back:
            # Our release offer was declined: pods need these again.
            self.stats.addresses_reclaimed += back
            self._surplus_since = None
            notes.append(f"{info.eni_id}: {back} offered addresses taken back")
        return notes

    def _not_late(self, action: Attached | Assigned, seq: int, notes: list[str]) -> tuple[list[str], list[str]]:
        """``action``'s addresses and /28s without those a report newer than ``seq`` offered: a
        claim replying to a report older than the newest that offered the address is outdated
        (that newer report's answer may unassign it): never taken, neither back into the pool
        nor, once released, added again."""
        ips, prefixes = list(action.ips), list(action.prefixes)
        late = {k for k in (*ips, *prefixes) if self._offered_upto.get(k, -1) > seq}
        if late:
            self.stats.handbacks_superseded += len(late)
            notes.append(f"{action.eni_id}: a claim replying to seq {seq} is older than a later offer: not taken")
            ips = [k for k in ips if k not in late]
            prefixes = [k for k in prefixes if k not in late]
        return ips, prefixes

    def _may_reclaim(self, key: str, seq: int, grants: frozenset[str] = frozenset()) -> bool:
        """A claim replying to report ``seq`` takes ``key`` out of quarantine: it replies to the
        newest report that offered it, and, for one of unknown origin, is EC2's own assignment
        (``grants``: the keys a parked claim was found to be EC2's grant of when it came)."""
        if seq < self._offered_upto.get(key, self._seq_at_start):
            return False
        return key not in self._unknown or key in grants or self._granted_by_ec2(key, seq)

    def _drop_replaced(self, info: EniInfo, view: dict[str, AttachedEni]) -> list[str]:
        """An ENI IMDS shows in a device slot our datastore gives to another ENI that IMDS
        no longer lists: that one is gone (its ``deleted`` result was lost). Dropped now,
        before the newcomer is added (two ENIs in one slot make an invalid report),
        rather than at the next resync."""
        notes = []
        for e in self.ds.enis():
            same_slot = (e.info.network_card, e.info.device_index) == (info.network_card, info.device_index)
            if e.info.eni_id != info.eni_id and same_slot and e.info.eni_id not in view:
                for a in e.addrs.values():
                    if a.in_use:
                        notes.append(f"pod {a.container_id or a.recovered}/{a.ifname} lost {a.ip}: ENI detached")
                self.ds.remove_eni(e.info.eni_id, force=True)
                self._teardown(e.info)
                self.stats.enis_replaced += 1
                notes.append(f"{e.info.eni_id}: detached (IMDS shows {info.eni_id} in its slot): removed")
        return notes

    def _park(self, action: Attached | Assigned, now: float, seq: int) -> None:
        grants = frozenset(k for k in (*action.ips, *action.prefixes) if self._granted_by_ec2(k, seq))
        self._unverified.park(action, now, seq, grants)
        if not self._rechecking:
            self._save_parked()

    def _save_parked(self) -> None:
        self.ds.set_parked(self._unverified.encode())

    def _recheck(self, now: float) -> None:
        parked = self._unverified.take()
        view = self._view(now)
        self._rechecking = True  # one checkpoint write for the lot, at the end
        try:
            for key, (action, first, seq) in parked.items():
                if now - first > VERIFY_TIMEOUT_S:
                    # Last look: what IMDS lists is taken (EC2's own assignment on its word),
                    # the rest dropped.
                    self._apply_addresses(action, view, now, seq, waited=True)
                    if self._unverified.discard(key):
                        self.stats.verify_dropped += 1
                        self._event("verify", f"{action.eni_id}: result never confirmed by IMDS: dropped")
                    continue
                self._apply_addresses(action, view, now, seq)
                self._unverified.keep_first(key, first, seq)
        finally:
            self._rechecking = False
            self._save_parked()

    # --- host --------------------------------------------------------------------------

    def _setup(self, info: EniInfo, pods: Collection[str] = ()) -> None:
        if self.host is None:
            return
        if info.device_index == 0 and info.network_card == 0:
            self.ds.set_ready(info.eni_id, ready=True)
            return
        try:
            if pods:
                self.host.setup_eni(info, self.mtu, pods)
            else:
                self.host.setup_eni(info, self.mtu)
        except LookupError as exc:
            self.ds.set_ready(info.eni_id, ready=False)
            self._event("host", f"{info.eni_id}: not ready: {exc}")
            return
        except OSError as exc:
            self.ds.set_ready(info.eni_id, ready=False)
            self.stats.host_errors += 1
            self._event("host", f"{info.eni_id}: set-up failed: {exc}")
            return
        self.ds.set_ready(info.eni_id, ready=True)

    def _teardown(self, info: EniInfo) -> None:
        if self.host is None or info.primary:
            return
        try:
            self.host.teardown_eni(info)
        except OSError as exc:
            self.stats.host_errors += 1
            self._event("host", f"{info.eni_id}: teardown failed: {exc}")

    # --- misc ---------------------------------------------------------------------------

    def _event(self, kind: str, message: str) -> None:
        log.info("%s: %s", kind, message)
        if self._on_event is not None:
            self._on_event(kind, message)


def _members(key: str) -> list[str]:
    """The addresses an offer's key stands for: itself, or every address of a /28."""
    return [str(h) for h in ipaddress.IPv4Network(key)] if "/" in key else [key]


def _unmet_only(actions: Sequence[Action]) -> bool:
    """Whether an answer holds nothing but ``unmet`` failures: the allocator could not provide
    what the report asked for, and did nothing."""
    return bool(actions) and all(isinstance(a, Failed) and a.code == "unmet" for a in actions)


def _gone_later(actions: Sequence[Action]) -> list[tuple[frozenset[str], frozenset[str]]]:
    """For each action of a result, the addresses and /28s a later ``released`` of the same result
    names, and the ENIs a later ``deleted`` names: EC2 took them after that action's call, so its
    ``assigned``/``attached`` must not put them in the pool. ``apply_result`` holds no datastore
    lock across its actions: a CNI ADD on the server's thread between the two took such an address,
    and the ``released`` then kept it for the pod (never yanked) while EC2 had unassigned it (review
    of the one-holder argument, R1; the allocator no longer answers so, this is the agent's own
    guard)."""
    out: list[tuple[frozenset[str], frozenset[str]]] = []
    keys: frozenset[str] = frozenset()
    enis: frozenset[str] = frozenset()
    for action in reversed(actions):
        out.append((keys, enis))
        if isinstance(action, Released):
            keys = keys | {*action.ips, *action.prefixes}
        elif isinstance(action, Deleted):
            enis = enis | {action.eni_id}
    out.reverse()
    return out


def _without(action: Attached | Assigned, keys: frozenset[str], enis: frozenset[str]) -> Attached | Assigned:
    """``action`` without the addresses and /28s of :func:`_gone_later` (all of them on a deleted ENI)."""
    if action.eni_id in enis:
        return action.model_copy(update={"ips": [], "prefixes": []})
    if not keys or not keys.intersection((*action.ips, *action.prefixes)):
        return action
    ips = [ip for ip in action.ips if ip not in keys]
    prefixes = [p for p in action.prefixes if p not in keys]
    return action.model_copy(update={"ips": ips, "prefixes": prefixes})
