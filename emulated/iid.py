"""A stand-in for AWS's instance identity signer: a test RSA key and its certificate.

The emulated IMDS (:mod:`emulated.imds`) signs each instance's identity document
with it, as AWS signs real ones (base64 RSA PKCS#1 v1.5 over SHA-256 of the
document's bytes, ``.../signature``), and ``warmpool local up`` hands
:attr:`IdentitySigner.certificate_pem` to the functions
(``WARMPOOL_IDENTITY_CERTIFICATES``), so the allocator's verification runs the
same code locally as in AWS. Never trusted anywhere but the local stack.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
from collections.abc import Mapping
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from cryptography.x509.oid import NameOID

from warmpool.messages import SignedIdentity

DOCUMENT_VERSION = "2017-09-30"


class IdentitySigner:
    """One RSA key with a self-signed certificate (1024 bits like AWS's regional
    RSA certificates, by default; fresh per instance of this class)."""

    def __init__(self, key_bits: int = 1024, common_name: str = "warmpool local instance identity") -> None:
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=key_bits)
        name = x509.Name(
            [
                x509.NameAttribute(NameOID.ORGANIZATION_NAME, "warmpool (test)"),
                x509.NameAttribute(NameOID.COMMON_NAME, common_name),
            ]
        )
        now = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
        cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now)
            .not_valid_after(now + dt.timedelta(days=365 * 50))
            .sign(self.key, hashes.SHA256())
        )
        self.certificate_pem = cert.public_bytes(serialization.Encoding.PEM).decode("ascii")

    def sign(self, document: str) -> str:
        """The base64 signature of ``document``'s UTF-8 bytes, wrapped at 64 columns as IMDS serves it."""
        raw = self.key.sign(document.encode("utf-8"), padding.PKCS1v15(), hashes.SHA256())
        b64 = base64.b64encode(raw).decode("ascii")
        return "\n".join(b64[i : i + 64] for i in range(0, len(b64), 64))

    def identity(self, document: str) -> SignedIdentity:
        """``document`` with its signature, as a report carries them."""
        return SignedIdentity(document=document, signature=self.sign(document))


def document_for(fields: Mapping[str, Any]) -> str:
    """An identity document in IMDS's layout (two-space indent, ``"key" : value``).

    ``fields`` gives at least ``instanceId, accountId, region, availabilityZone,
    instanceType``; ``privateIp, imageId, pendingTime, architecture`` as known."""
    doc: dict[str, Any] = {
        "accountId": fields["accountId"],
        "architecture": fields.get("architecture", "x86_64"),
        "availabilityZone": fields["availabilityZone"],
        "billingProducts": None,
        "devpayProductCodes": None,
        "marketplaceProductCodes": None,
        "imageId": fields.get("imageId", "ami-00000000000000000"),
        "instanceId": fields["instanceId"],
        "instanceType": fields["instanceType"],
        "kernelId": None,
        "pendingTime": fields.get("pendingTime", "2024-01-01T00:00:00Z"),
        "privateIp": fields.get("privateIp", ""),
        "ramdiskId": None,
        "region": fields["region"],
        "version": DOCUMENT_VERSION,
    }
    return json.dumps(doc, indent=2, separators=(",", " : "))
