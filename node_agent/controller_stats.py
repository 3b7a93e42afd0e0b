"""The pool controller's counters, typed: one field each (a misspelt counter is a type
error, not a new key). The agent's ``/metrics`` reads them (``node_agent/agent.py``)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field


@dataclass
class ControllerStats:
    # reports
    reports_sent: int = 0
    reports_invalid: int = 0
    """Reports not sent: they failed the wire model's own checks."""
    report_enis_skipped: int = 0
    """ENIs left out of a report (the datastore held them inconsistent; repaired)."""
    identity_unavailable: int = 0
    """Reports not sent: no signed identity document to carry."""
    lean_entered: int = 0
    """Times the node went lean (a result said ``scarce`` while it was not)."""
    # results
    results_applied: int = 0
    results_rejected: int = 0
    results_failed: int = 0
    """``failed`` actions received."""
    actions: Counter[str] = field(default_factory=Counter)
    """Result actions applied, by kind (``attached``, ``assigned``, ...)."""
    resync_on_empty_result: int = 0
    # ENIs
    enis_attached: int = 0
    enis_replaced: int = 0
    enis_deleted: int = 0
    deleted_in_use: int = 0
    """``deleted`` for an ENI whose addresses pods still held."""
    enis_unmanaged: int = 0
    # addresses
    addresses_added: int = 0
    addresses_released: int = 0
    addresses_reclaimed: int = 0
    released_in_use: int = 0
    held_offers_taken: int = 0
    """Of ``released_in_use``: unassigned by EC2 while a start's hold of every address held them,
    taken while on offer (``node_agent.datastore.HELD_OFFERS``): most likely the offer answered
    (review 24, H1: not told apart from a pod the hold stands for carrying one)."""
    released_without_result: int = 0
    stale_releases: int = 0
    stale_claims: int = 0
    handbacks_superseded: int = 0
    quarantined: int = 0
    unquarantined: int = 0
    quarantined_after_rebuild: int = 0
    held_not_in_imds: int = 0
    take_back_postponed: int = 0
    whole_eni_offers_renewed: int = 0
    offers_renewed: int = 0
    offers_dated_for_waiting_pods: int = 0
    verify_dropped: int = 0
    imds_incomplete: int = 0
    """IMDS reads not used: they showed an interface the agent knows has IPv4 addresses
    without them (``PoolController._read``)."""
    # the node and the checkpoint
    datastore_repairs: int = 0
    checkpoint_write_errors: int = 0
    seq_floors_taken: int = 0
    """``seq-floor`` answers that moved this agent's seq up (``PoolController._take_seq_floor``)."""
    seq_floors_refused: int = 0
    """``seq-floor`` answers refused: too near the seq schema's top (``SEQ_TOP_HEADROOM_MS``)."""
    restores_current: int = 0
    """Restored checkpoints the allocator said were the node's newest state."""
    restores_stale: int = 0
    """Restored checkpoints the allocator said were not (or never answered for in time): what
    they had free was offered back as of unknown origin."""
    first_starts_confirmed: int = 0
    """Starts without a checkpoint the allocator confirmed as the instance's first: what the node
    booted with became its pool (``PoolController._adopt_first_start``)."""
    first_starts_unconfirmed: int = 0
    """Starts without a checkpoint that asked and were not confirmed (or got no answer in time)."""
    host_errors: int = 0
