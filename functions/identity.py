"""Verify the signed instance identity a report carries (issue 12).

A report's ``identity`` holds the instance identity document and its
signature exactly as IMDS served them (``/latest/dynamic/instance-identity/
document`` and ``.../signature``). The signature is RSA PKCS#1 v1.5 over the
SHA-256 of the document's bytes, checked against the region's AWS RSA
certificate (a stack setting: ``WARMPOOL_IDENTITY_CERTIFICATES``, default in
``infra/certs/``); the same check as ``openssl dgst -sha256 -verify key
-signature sig document``.

What a verified identity proves: AWS signed that document for that instance
(id, account, region, AZ, type). What it does not prove: that the sender is
that instance *now* (the document has no nonce or expiry, so anyone who ever
read it can replay it) or that the rest of the report is true. See
``docs/security.md``.

Pure functions over parsed inputs, no I/O: parse the certificates once at cold
start (:meth:`TrustedKeys.from_pem`), then :func:`verify_report_identity` per
report and :func:`instance_cluster_problem` on EC2's view of the instance.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from functions.reasons import Rejection
from warmpool import names
from warmpool.messages import PoolReport, SignedIdentity

# Rejection reasons: short, stable, used as the DLQ reason and a metric dimension.
MISSING = "identity-missing"
BAD_BASE64 = "identity-signature-not-base64"
BAD_SIGNATURE = "identity-signature-invalid"
NOT_JSON = "identity-document-not-json"
INCOMPLETE = "identity-document-incomplete"
WRONG_INSTANCE = "identity-instance-mismatch"
WRONG_ACCOUNT = "identity-account-mismatch"
WRONG_REGION = "identity-region-mismatch"
WRONG_AZ = "identity-az-mismatch"
WRONG_TYPE = "identity-instance-type-mismatch"

# Cluster membership, from EC2's DescribeInstances view of the instance.
INSTANCE_NOT_FOUND = Rejection.INSTANCE_NOT_FOUND
INSTANCE_NOT_RUNNING = Rejection.INSTANCE_NOT_RUNNING
INSTANCE_NOT_IN_CLUSTER = Rejection.FOREIGN_INSTANCE

_DOCUMENT_FIELDS = {
    "instance_id": "instanceId",
    "account_id": "accountId",
    "region": "region",
    "availability_zone": "availabilityZone",
    "instance_type": "instanceType",
}
_PEM_BEGIN = "-----BEGIN CERTIFICATE-----"
_PEM_END = "-----END CERTIFICATE-----"


class IdentityConfigError(ValueError):
    """The trusted certificates cannot be used (a deployment error, not a bad report)."""


@dataclass(frozen=True)
class VerifiedIdentity:
    """The document's fields, once its signature and every match have been checked."""

    instance_id: str
    account_id: str
    region: str
    availability_zone: str
    instance_type: str


@dataclass(frozen=True)
class IdentityRejected:
    """Why a report's identity was refused; ``reason`` is one of this module's constants."""

    reason: str
    detail: str = ""


@dataclass(frozen=True)
class TrustedKeys:
    """The RSA public keys of the trusted certificates (several during a rotation)."""

    keys: tuple[rsa.RSAPublicKey, ...]

    @classmethod
    def from_pem(cls, pem: str) -> TrustedKeys:
        """Every certificate in ``pem`` (concatenated PEM blocks); each must hold an RSA key.

        Certificate validity dates are not enforced: AWS renews these
        certificates with the same key, and the key is what signs documents."""
        blocks = pem_blocks(pem)
        if not blocks:
            raise IdentityConfigError("no PEM certificate found in the identity certificate setting")
        keys: list[rsa.RSAPublicKey] = []
        for i, block in enumerate(blocks, 1):
            try:
                cert = x509.load_pem_x509_certificate(block.encode("ascii"))
            except (ValueError, UnicodeEncodeError) as err:
                raise IdentityConfigError(f"identity certificate #{i} is not a valid PEM certificate: {err}") from None
            key = cert.public_key()
            if not isinstance(key, rsa.RSAPublicKey):
                raise IdentityConfigError(
                    f"identity certificate #{i} holds a {type(key).__name__}, not an RSA key "
                    "(use the region's RSA certificate, not the DSA or RSA-2048 one)"
                )
            keys.append(key)
        return cls(tuple(keys))


def pem_blocks(pem: str) -> list[str]:
    out: list[str] = []
    rest = pem
    while True:
        start = rest.find(_PEM_BEGIN)
        if start < 0:
            return out
        end = rest.find(_PEM_END, start)
        if end < 0:
            raise IdentityConfigError("identity certificate setting has a BEGIN CERTIFICATE without its END")
        out.append(rest[start : end + len(_PEM_END)] + "\n")
        rest = rest[end + len(_PEM_END) :]


def decode_signature(signature: str) -> bytes | None:
    """The signature's bytes (IMDS serves base64, possibly wrapped over lines), or None."""
    compact = "".join(signature.split())
    if not compact:
        return None
    try:
        return base64.b64decode(compact, validate=True)
    except (binascii.Error, ValueError):
        return None


def signature_valid(document: bytes, signature: bytes, trusted: TrustedKeys) -> bool:
    """RSA PKCS#1 v1.5 with SHA-256 over ``document``, by any trusted key."""
    for key in trusted.keys:
        try:
            key.verify(signature, document, padding.PKCS1v15(), hashes.SHA256())
        except InvalidSignature:
            continue
        return True
    return False


def verify_identity(
    identity: SignedIdentity | None,
    trusted: TrustedKeys,
    *,
    account: str,
    region: str,
    instance_id: str,
    availability_zone: str,
    instance_type: str,
) -> VerifiedIdentity | IdentityRejected:
    """Check the signature first, then that the signed document names this
    instance, account, region, AZ and instance type. The first failure wins."""
    if identity is None:
        return IdentityRejected(MISSING, "the report carries no signed instance identity")
    sig = decode_signature(identity.signature)
    if sig is None:
        return IdentityRejected(BAD_BASE64, "the signature is not base64")
    raw = identity.document.encode("utf-8")
    if not signature_valid(raw, sig, trusted):
        return IdentityRejected(BAD_SIGNATURE, "no trusted certificate verifies the document's signature")
    try:
        doc = json.loads(raw)
    except ValueError:
        return IdentityRejected(NOT_JSON, "the signed document is not JSON")
    if not isinstance(doc, dict):
        return IdentityRejected(NOT_JSON, "the signed document is not a JSON object")
    values: dict[str, str] = {}
    for field, key in _DOCUMENT_FIELDS.items():
        v = doc.get(key)
        if not isinstance(v, str) or not v:
            return IdentityRejected(INCOMPLETE, f"the signed document has no {key}")
        values[field] = v
    got = VerifiedIdentity(**values)
    for reason, signed, claimed in (
        (WRONG_INSTANCE, got.instance_id, instance_id),
        (WRONG_ACCOUNT, got.account_id, account),
        (WRONG_REGION, got.region, region),
        (WRONG_AZ, got.availability_zone, availability_zone),
        (WRONG_TYPE, got.instance_type, instance_type),
    ):
        if signed != claimed:
            return IdentityRejected(reason, f"signed {signed!r}, expected {claimed!r}")
    return got


def verify_report_identity(
    report: PoolReport, trusted: TrustedKeys, *, account: str, region: str
) -> VerifiedIdentity | IdentityRejected:
    """:func:`verify_identity` for a report: its ``identity`` against its own
    ``instance_id``, ``availability_zone`` and ``instance_type``, and the
    allocator's ``account`` and ``region``."""
    return verify_identity(
        report.identity,
        trusted,
        account=account,
        region=region,
        instance_id=report.instance_id,
        availability_zone=report.availability_zone,
        instance_type=report.instance_type,
    )


def instance_cluster_problem(instances: Sequence[Mapping[str, Any]], instance_id: str, cluster: str) -> str:
    """ "" when EC2 shows ``instance_id`` running and tagged ``kubernetes.io/cluster/<cluster>``
    = owned|shared, else the reason (``instance-not-found``, ``foreign-instance``,
    ``instance-not-running``).

    ``instances`` are DescribeInstances' instance dicts (``Reservations[].Instances[]``,
    boto3 shape); only the one with ``InstanceId == instance_id`` counts."""
    item = next((i for i in instances if i.get("InstanceId") == instance_id), None)
    if item is None:
        return INSTANCE_NOT_FOUND
    tags = {t.get("Key"): t.get("Value") for t in item.get("Tags") or () if isinstance(t, Mapping)}
    if tags.get(names.cluster_tag_key(cluster)) not in ("owned", "shared"):
        return INSTANCE_NOT_IN_CLUSTER
    state = item.get("State") or {}
    if not isinstance(state, Mapping) or state.get("Name") != "running":
        return INSTANCE_NOT_RUNNING
    return ""


def describe_instances_items(response: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The instance dicts of a DescribeInstances response, flattened."""
    return [i for r in response.get("Reservations") or () for i in r.get("Instances") or ()]
