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
agent's metadata port: the controller never sees an unmanaged ENI, so it is
never set up on the host, never used for pods and never put in a report. To
keep EC2 reads rare (they share the account's rate limits with everything
else), each ENI id is looked up once: one filtered ``DescribeNetworkInterfaces``
for all ids not yet classified, at start and when an ENI the agent has not seen
appears. An ENI the describe does not list has no tags: managed (as in ipamd's
tag map). When the describe itself fails, the ENIs it was for are held back (not
used) until a later look-up succeeds, as ipamd does not start without it.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Protocol

from node_agent.controller import AttachedEni

log = logging.getLogger("warmpool.agent.unmanaged")

NO_MANAGE_TAG = "node.k8s.amazonaws.com/no_manage"


class Ec2Reader(Protocol):
    def describe_network_interfaces(self, **kwargs: Any) -> dict[str, Any]: ...


class MetadataPort(Protocol):
    def identity(self) -> Any: ...
    def interfaces(self) -> list[AttachedEni]: ...


class SkipUnmanaged:
    """A metadata port that hides unmanaged ENIs (see the module docstring)."""

    def __init__(self, inner: MetadataPort, ec2: Ec2Reader, instance_id: str = "") -> None:
        self.inner = inner
        self.ec2 = ec2
        self.instance_id = instance_id
        self._unmanaged: set[str] = set()
        self._managed: set[str] = set()
        self._lock = threading.Lock()
        self.describe_calls = 0
        self.describe_errors = 0

    def identity(self) -> Any:
        return self.inner.identity()

    def __getattr__(self, name: str) -> Any:
        """Everything else the metadata port offers, unchanged."""
        return getattr(self.inner, name)

    @property
    def unmanaged(self) -> list[str]:
        with self._lock:
            return sorted(self._unmanaged)

    def _classify(self, eni_ids: list[str]) -> None:
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
                break
            kwargs["NextToken"] = token
        with self._lock:
            for eni_id in eni_ids:
                # An ENI the describe did not list has no tags to read: managed (ipamd's tag map
                # has no entry for it either).
                (self._unmanaged if found.get(eni_id, False) else self._managed).add(eni_id)
        for eni_id in sorted(i for i in eni_ids if found.get(i)):
            log.info("%s is tagged %s=true: left alone (not set up, not used, not reported)", eni_id, NO_MANAGE_TAG)

    def interfaces(self) -> list[AttachedEni]:
        enis = self.inner.interfaces()
        with self._lock:
            unknown = [
                e.info.eni_id for e in enis if not _primary(e) and e.info.eni_id not in self._managed | self._unmanaged
            ]
        if unknown:
            try:
                self._classify(unknown)
            except Exception as exc:  # held back, retried on the next call
                self.describe_errors += 1
                log.warning(
                    "could not read the tags of %s (%s): not used until they can be read", ", ".join(unknown), exc
                )
        with self._lock:
            return [e for e in enis if _primary(e) or e.info.eni_id in self._managed]


def _primary(e: AttachedEni) -> bool:
    """The instance's own interface (card 0, device 0): never left alone, whatever its tags."""
    return e.info.device_index == 0 and e.info.network_card == 0
