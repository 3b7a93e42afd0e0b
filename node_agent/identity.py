"""The node's signed instance identity, as every report carries it (issue 12).

IMDS serves ``/latest/dynamic/instance-identity/document`` and ``.../signature``
(base64 RSA-SHA256 over the document's bytes); the report carries both exactly
as served, byte for byte, since the allocator verifies the signature over
exactly those bytes (``functions/identity.py``). The document never changes
for an instance, so the agent reads it once and reuses it; it is not a secret
(any process on the node can read it) and not a nonce.
"""

from __future__ import annotations

from typing import Protocol

from warmpool.messages import SignedIdentity

DOCUMENT_PATH = "instance-identity/document"
SIGNATURE_PATH = "instance-identity/signature"


class DynamicMetadata(Protocol):
    """What this module needs of :class:`node_agent.imds.ImdsClient`."""

    def get(self, path: str, *, missing_ok: bool = False, tree: str = "meta-data") -> str | None: ...


class IdentityUnavailable(RuntimeError):
    """IMDS served no identity document or signature (raised, never sent as empty)."""


def fetch_identity(imds: DynamicMetadata) -> SignedIdentity:
    """Read the document and its signature from IMDS and pair them for the report.

    Raises :class:`IdentityUnavailable` when either is missing (404) and lets
    :class:`node_agent.imds.ImdsError` through when IMDS cannot be reached."""
    document = imds.get(DOCUMENT_PATH, missing_ok=True, tree="dynamic")
    signature = imds.get(SIGNATURE_PATH, missing_ok=True, tree="dynamic")
    if not document or not signature:
        raise IdentityUnavailable("IMDS serves no instance identity document or signature")
    try:
        return SignedIdentity(document=document, signature=signature)
    except ValueError as err:  # larger than a report may carry
        raise IdentityUnavailable(f"instance identity does not fit a report: {err}") from None


class CachedIdentity:
    """Fetches once, then serves the same identity (it is fixed for the instance's life).

    A failed fetch is not cached: the next call tries again."""

    def __init__(self, imds: DynamicMetadata) -> None:
        self._imds = imds
        self._identity: SignedIdentity | None = None

    def get(self) -> SignedIdentity:
        if self._identity is None:
            self._identity = fetch_identity(self._imds)
        return self._identity
