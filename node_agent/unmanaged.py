"""ENIs the agent must leave alone: tagged ``node.k8s.amazonaws.com/no_manage=true``.

IMDS shows every attached ENI but none of its tags, so the VPC CNI learns the
tag from EC2: ipamd describes the instance's ENIs (``DescribeAllENIs`` in
``pkg/awsutils/awsutils.go``, a ``DescribeNetworkInterfaces`` filtered by
``attachment.instance-id``, reading each ``TagSet``) and drops the tagged ones
(``setUnmanagedENIs`` / ``filterUnmanagedENIs`` in ``pkg/ipamd/ipamd.go``). A
tag on the primary ENI is ignored there (the node's own interface is always
managed; ``TestIPAMContext_filterUnmanagedENIs`` "Primary ENI unmanaged"), and
only the value ``true`` counts.

warmpool does the same through :class:`SkipUnmanaged`, a wrapper around the
agent's metadata port that marks each ENI it returns (``AttachedEni.managed``):
True, False (tagged), or None while its tags could not be read. The controller
never sets up, uses or reports an ENI it does not already hold unless it is
managed; one it holds whose tags cannot be read, or that was tagged after it
took it, is kept for the pods on it with nothing new handed out from it
(:meth:`node_agent.controller.PoolController.resync`). A failed look-up is never
read as "no ENIs": that dropped the pods of every secondary ENI at a start
where Describe was throttled, and the next resync brought the ENI back with
every address free.

To keep EC2 reads rare (they share the account's rate limits with everything
else): one filtered ``DescribeNetworkInterfaces`` classifies every ENI of the
instance, made when an ENI the agent has not classified appears and every
:data:`TAG_REFRESH_S` (so a tag added later is seen). An ENI the describe does
not list is *unknown*, not managed (ipamd reads a missing entry as untagged,
but Describe is eventually consistent and may not list an ENI attached a moment
ago): it is not used until a later look-up lists it, retried with the backoff
below; one classified before keeps its class. A failed look-up keeps
what earlier ones found and is retried with exponential backoff and jitter
(:data:`BACKOFF_S` doubling up to :data:`BACKOFF_MAX_S`), never on every IMDS
read: many agents restarting at once (a DaemonSet rollout) are exactly when
Describe throttles.
"""

from __future__ import annotations

import logging
import random
import threading
from typing import Any, Protocol

from node_agent.controller import AttachedEni
from warmpool.clock import Clock, RealClock

log = logging.getLogger("warmpool.agent.unmanaged")

NO_MANAGE_TAG = "node.k8s.amazonaws.com/no_manage"
TAG_REFRESH_S = 600.0
"""How often every ENI's tags are read again (a ``no_manage`` tag added later is seen within it)."""
BACKOFF_S = 2.0
"""Wait after the first failed look-up; doubled after each further failure (with jitter)."""
BACKOFF_MAX_S = 120.0


class Ec2Reader(Protocol):
    def describe_network_interfaces(self, **kwargs: Any) -> dict[str, Any]: ...


class MetadataPort(Protocol):
    def identity(self) -> Any: ...
    def interfaces(self) -> list[AttachedEni]: ...


class SkipUnmanaged:
    """A metadata port that marks unmanaged ENIs (see the module docstring)."""

    def __init__(
        self,
        inner: MetadataPort,
        ec2: Ec2Reader,
        instance_id: str = "",
        *,
        clock: Clock | None = None,
        refresh_s: float = TAG_REFRESH_S,
        rng: random.Random | None = None,
    ) -> None:
        self.inner = inner
        self.ec2 = ec2
        self.instance_id = instance_id
        self.clock = clock or RealClock()
        self.refresh_s = refresh_s
        self._rng = rng or random.Random()
        self._tagged: dict[str, bool] = {}
        """ENI id -> tagged no_manage, as the last successful look-up found it."""
        self._checked_at: float | None = None
        self._retry_at = float("-inf")
        self._failures = 0
        self._lock = threading.Lock()
        self.describe_calls = 0
        self.describe_errors = 0
        self.describe_unlisted = 0
        """Look-ups that did not list an attached ENI (it stays unknown, retried)."""

    def identity(self) -> Any:
        return self.inner.identity()

    def __getattr__(self, name: str) -> Any:
        """Everything else the metadata port offers, unchanged."""
        return getattr(self.inner, name)

    @property
    def unmanaged(self) -> list[str]:
        with self._lock:
            return sorted(k for k, v in self._tagged.items() if v)

    def _describe(self) -> dict[str, bool]:
        """Every ENI attached to the instance -> tagged no_manage (one paginated call)."""
        if not self.instance_id:
            self.instance_id = str(self.inner.identity().instance_id)
        self.describe_calls += 1
        found: dict[str, bool] = {}
        kwargs: dict[str, Any] = {"Filters": [{"Name": "attachment.instance-id", "Values": [self.instance_id]}]}
        while True:
            resp = self.ec2.describe_network_interfaces(**kwargs)
            for ni in resp.get("NetworkInterfaces", []):
                tags = {t.get("Key"): t.get("Value") for t in ni.get("TagSet", []) or []}
                found[str(ni["NetworkInterfaceId"])] = str(tags.get(NO_MANAGE_TAG, "")).lower() == "true"
            token = resp.get("NextToken")
            if not token:
                return found
            kwargs["NextToken"] = token

    def _lookup(self, eni_ids: list[str], now: float) -> None:
        try:
            found = self._describe()
        except Exception as exc:  # keep what is known; retried after the backoff
            self.describe_errors += 1
            with self._lock:
                self._failures += 1
                wait = min(BACKOFF_MAX_S, BACKOFF_S * 2 ** (self._failures - 1)) * (0.5 + 0.5 * self._rng.random())
                self._retry_at = now + wait
            log.warning(
                "could not read the tags of %s (%s): ENIs not yet classified are not used, those in use are "
                "kept for their pods; retrying in %.0fs",
                ", ".join(eni_ids),
                exc,
                wait,
            )
            return
        with self._lock:
            before = dict(self._tagged)
            # An ENI the describe did not list is unknown, not managed: Describe is eventually
            # consistent and may not show an ENI attached a moment ago (or its tags). One
            # classified before keeps its class; one never classified stays unknown (not
            # used) and is looked up again after the backoff. ENIs no longer attached are
            # forgotten.
            self._tagged = {i: found[i] if i in found else before[i] for i in eni_ids if i in found or i in before}
            missing = sorted(i for i in eni_ids if i not in self._tagged)
            self._checked_at = now
            if missing:
                self._failures += 1
                wait = min(BACKOFF_MAX_S, BACKOFF_S * 2 ** (self._failures - 1)) * (0.5 + 0.5 * self._rng.random())
                self._retry_at = now + wait
            else:
                self._failures, self._retry_at = 0, float("-inf")
        if missing:
            self.describe_unlisted += 1
            log.warning(
                "%s attached but not in DescribeNetworkInterfaces yet: not used until its tags are read; "
                "retrying in %.0fs",
                ", ".join(missing),
                wait,
            )
        for eni_id in sorted(self._tagged):
            if self._tagged[eni_id] and not before.get(eni_id, False):
                log.info("%s is tagged %s=true: left alone (not set up, not used, not reported)", eni_id, NO_MANAGE_TAG)

    def interfaces(self) -> list[AttachedEni]:
        enis = self.inner.interfaces()
        now = self.clock.now()
        # An interface IMDS shows no IPv4 address of (an EFA-only one) is never used: its tags
        # are not looked up (no Describe for it, no back-off while Describe does not list it).
        ids = [e.info.eni_id for e in enis if not _primary(e) and not e.no_ipv4]
        with self._lock:
            unknown = [i for i in ids if i not in self._tagged]
            due = self._checked_at is not None and now - self._checked_at >= self.refresh_s
            allowed = now >= self._retry_at
        if ids and (unknown or due) and allowed:
            self._lookup(ids, now)
        with self._lock:
            tagged = dict(self._tagged)
        return [e._replace(managed=True if _primary(e) else _managed(tagged.get(e.info.eni_id))) for e in enis]


def _managed(tagged: bool | None) -> bool | None:
    return None if tagged is None else not tagged


def _primary(e: AttachedEni) -> bool:
    """The instance's own interface (card 0, device 0): never left alone, whatever its tags."""
    return e.info.device_index == 0 and e.info.network_card == 0
