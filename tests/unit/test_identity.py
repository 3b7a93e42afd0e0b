"""Signed node identity: the allocator's verification (functions/identity.py) with real RSA keys."""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import dsa

from emulated.iid import IdentitySigner, document_for
from functions import identity as ident
from functions.identity import IdentityConfigError, IdentityRejected, TrustedKeys, VerifiedIdentity
from warmpool.messages import PoolReport, SignedIdentity

ACCOUNT = "123456789012"
REGION = "us-east-1"
IID = "i-0123456789abcdef0"
FIELDS: dict[str, Any] = {
    "accountId": ACCOUNT,
    "availabilityZone": "us-east-1a",
    "instanceId": IID,
    "instanceType": "m5.large",
    "region": REGION,
    "privateIp": "10.0.0.10",
}


@pytest.fixture(scope="module")
def signer() -> IdentitySigner:
    return IdentitySigner()


@pytest.fixture(scope="module")
def other_signer() -> IdentitySigner:
    return IdentitySigner()


@pytest.fixture(scope="module")
def trusted(signer: IdentitySigner) -> TrustedKeys:
    return TrustedKeys.from_pem(signer.certificate_pem)


def _identity(signer: IdentitySigner, **fields: Any) -> SignedIdentity:
    doc = document_for({**FIELDS, **fields})
    return SignedIdentity(document=doc, signature=signer.sign(doc))


def _report(identity: SignedIdentity | None, **over: Any) -> PoolReport:
    base: dict[str, Any] = {
        "cluster": "demo",
        "node": "node-a",
        "instance_id": IID,
        "instance_type": "m5.large",
        "availability_zone": "us-east-1a",
        "seq": 1,
        "sent_at": 1.0,
    }
    base.update(over)
    return PoolReport(**base, identity=identity)


def _verify(report: PoolReport, trusted: TrustedKeys) -> VerifiedIdentity | IdentityRejected:
    return ident.verify_report_identity(report, trusted, account=ACCOUNT, region=REGION)


def _reason(result: VerifiedIdentity | IdentityRejected) -> str:
    assert isinstance(result, IdentityRejected), result
    return result.reason


def test_a_genuine_identity_yields_the_signed_fields(signer: IdentitySigner, trusted: TrustedKeys) -> None:
    got = _verify(_report(_identity(signer)), trusted)
    assert got == VerifiedIdentity(IID, ACCOUNT, REGION, "us-east-1a", "m5.large")


def test_a_report_without_identity_is_refused(trusted: TrustedKeys) -> None:
    assert _reason(_verify(_report(None), trusted)) == ident.MISSING


@pytest.mark.parametrize("signature", ["not base64!!", "QUJD=x", "", "   \n"])
def test_a_signature_that_is_not_base64_is_refused(
    signer: IdentitySigner, trusted: TrustedKeys, signature: str
) -> None:
    good = _identity(signer)
    bad = SignedIdentity(document=good.document, signature=signature)
    assert _reason(_verify(_report(bad), trusted)) == ident.BAD_BASE64


def test_a_signature_wrapped_over_lines_as_imds_serves_it_verifies(
    signer: IdentitySigner, trusted: TrustedKeys
) -> None:
    good = _identity(signer)
    assert "\n" in good.signature  # emulated.iid wraps at 64 columns, as IMDS does
    unwrapped = SignedIdentity(document=good.document, signature=good.signature.replace("\n", ""))
    assert isinstance(_verify(_report(unwrapped), trusted), VerifiedIdentity)


def test_a_document_signed_by_another_key_is_refused(other_signer: IdentitySigner, trusted: TrustedKeys) -> None:
    assert _reason(_verify(_report(_identity(other_signer)), trusted)) == ident.BAD_SIGNATURE


@pytest.mark.parametrize(
    "tamper",
    [
        lambda d: d.replace(IID, "i-0fedcba9876543210"),  # claim another instance
        lambda d: d.replace('"m5.large"', '"m5.4xlarge"'),
        lambda d: d + "\n",  # one byte more: the document must be exactly as served
        lambda d: d.replace("  ", " ", 1),  # reformatting changes the bytes
        lambda d: json.dumps(json.loads(d)),  # same JSON, other bytes
    ],
)
def test_any_change_to_the_signed_bytes_is_refused(signer: IdentitySigner, trusted: TrustedKeys, tamper: Any) -> None:
    good = _identity(signer)
    forged = SignedIdentity(document=tamper(good.document), signature=good.signature)
    assert forged.document != good.document
    assert _reason(_verify(_report(forged), trusted)) == ident.BAD_SIGNATURE


def test_a_signature_of_another_document_is_refused(signer: IdentitySigner, trusted: TrustedKeys) -> None:
    mine, theirs = _identity(signer), _identity(signer, instanceId="i-0fedcba9876543210")
    swapped = SignedIdentity(document=theirs.document, signature=mine.signature)
    assert _reason(_verify(_report(swapped, instance_id="i-0fedcba9876543210"), trusted)) == ident.BAD_SIGNATURE


def test_a_truncated_signature_is_refused(signer: IdentitySigner, trusted: TrustedKeys) -> None:
    good = _identity(signer)
    raw = base64.b64decode("".join(good.signature.split()))
    short = SignedIdentity(document=good.document, signature=base64.b64encode(raw[:-1]).decode())
    assert _reason(_verify(_report(short), trusted)) == ident.BAD_SIGNATURE


def test_a_genuine_document_replayed_for_another_instance_is_refused(
    signer: IdentitySigner, trusted: TrustedKeys
) -> None:
    """A node holding its own valid identity cannot report for another instance."""
    result = _verify(_report(_identity(signer), instance_id="i-0fedcba9876543210"), trusted)
    assert _reason(result) == ident.WRONG_INSTANCE
    assert isinstance(result, IdentityRejected) and IID in result.detail


@pytest.mark.parametrize(
    ("field", "value", "reason"),
    [
        ("accountId", "210987654321", ident.WRONG_ACCOUNT),
        ("region", "eu-west-1", ident.WRONG_REGION),
    ],
)
def test_a_document_of_another_account_or_region_is_refused(
    signer: IdentitySigner, trusted: TrustedKeys, field: str, value: str, reason: str
) -> None:
    assert _reason(_verify(_report(_identity(signer, **{field: value})), trusted)) == reason


@pytest.mark.parametrize(
    ("over", "reason"),
    [
        ({"availability_zone": "us-east-1b"}, ident.WRONG_AZ),
        ({"instance_type": "m5.4xlarge"}, ident.WRONG_TYPE),
    ],
)
def test_a_report_whose_az_or_type_differ_from_the_document_is_refused(
    signer: IdentitySigner, trusted: TrustedKeys, over: dict[str, str], reason: str
) -> None:
    assert _reason(_verify(_report(_identity(signer), **over), trusted)) == reason


@pytest.mark.parametrize("document", ["not json at all", "[1, 2, 3]", '"a string"'])
def test_a_signed_document_that_is_not_a_json_object_is_refused(
    signer: IdentitySigner, trusted: TrustedKeys, document: str
) -> None:
    signed = SignedIdentity(document=document, signature=signer.sign(document))
    assert _reason(_verify(_report(signed), trusted)) == ident.NOT_JSON


@pytest.mark.parametrize("missing", ["instanceId", "accountId", "region", "availabilityZone", "instanceType"])
def test_a_signed_document_missing_a_field_is_refused(
    signer: IdentitySigner, trusted: TrustedKeys, missing: str
) -> None:
    doc = json.loads(document_for(FIELDS))
    del doc[missing]
    text = json.dumps(doc)
    assert _reason(_verify(_report(SignedIdentity(document=text, signature=signer.sign(text))), trusted)) == (
        ident.INCOMPLETE
    )


def test_the_signature_is_checked_before_the_document_is_read(
    other_signer: IdentitySigner, trusted: TrustedKeys
) -> None:
    """An unsigned document naming another account is a signature failure, not an account mismatch."""
    assert _reason(_verify(_report(_identity(other_signer, accountId="999999999999")), trusted)) == (
        ident.BAD_SIGNATURE
    )


def test_any_of_several_trusted_certificates_verifies(signer: IdentitySigner, other_signer: IdentitySigner) -> None:
    both = TrustedKeys.from_pem("# rotation\n" + other_signer.certificate_pem + "\n" + signer.certificate_pem)
    assert len(both.keys) == 2
    assert isinstance(_verify(_report(_identity(signer)), both), VerifiedIdentity)
    assert isinstance(_verify(_report(_identity(other_signer)), both), VerifiedIdentity)


def test_certificate_settings_that_cannot_verify_anything_are_refused() -> None:
    with pytest.raises(IdentityConfigError, match="no PEM certificate"):
        TrustedKeys.from_pem("")
    with pytest.raises(IdentityConfigError, match="without its END"):
        TrustedKeys.from_pem("-----BEGIN CERTIFICATE-----\nMIIB\n")
    with pytest.raises(IdentityConfigError, match="not a valid PEM"):
        TrustedKeys.from_pem("-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydA==\n-----END CERTIFICATE-----\n")


def test_a_dsa_certificate_is_refused_with_the_right_hint() -> None:
    import datetime as dt

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.x509.oid import NameOID

    key = dsa.generate_private_key(key_size=1024)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "dsa")])
    start = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(start)
        .not_valid_after(start + dt.timedelta(days=1))
        .sign(key, hashes.SHA256())
    )
    with pytest.raises(IdentityConfigError, match="not an RSA key"):
        TrustedKeys.from_pem(cert.public_bytes(serialization.Encoding.PEM).decode())


DEFAULT_PEM = Path(__file__).resolve().parents[2] / "infra" / "certs" / "aws-instance-identity-rsa.pem"
# SHA-256 of the DER SubjectPublicKeyInfo of AWS's RSA identity key for most commercial regions:
# the same key as the 2014 "other regions" certificate (modulus 0x87bd18df...), renewed in 2024.
AWS_KEY_SHA256 = "8a61ba393a4aa067e73b9b5e75851ea4345aa5e6dab02538e8c1acd435b1f93f"


def test_the_shipped_default_is_awss_1024_bit_rsa_identity_key() -> None:
    keys = TrustedKeys.from_pem(DEFAULT_PEM.read_text())
    (key,) = keys.keys
    assert key.key_size == 1024
    assert hex(key.public_numbers().n).startswith("0x87bd18dfff4912b69276e3c921b4868df2a9")
    der = key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    assert hashlib.sha256(der).hexdigest() == AWS_KEY_SHA256
    # and it verifies nothing our test key signed
    doc = document_for(FIELDS)
    assert not ident.signature_valid(doc.encode(), base64.b64decode(IdentitySigner().sign(doc).replace("\n", "")), keys)


def _described(iid: str, tags: dict[str, str], state: str = "running") -> dict[str, Any]:
    return {"InstanceId": iid, "State": {"Name": state}, "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}


@pytest.mark.parametrize(
    ("instances", "problem"),
    [
        ([_described(IID, {"kubernetes.io/cluster/demo": "owned"})], ""),
        ([_described(IID, {"kubernetes.io/cluster/demo": "shared"})], ""),
        ([], ident.INSTANCE_NOT_FOUND),
        ([_described("i-0fedcba9876543210", {"kubernetes.io/cluster/demo": "owned"})], ident.INSTANCE_NOT_FOUND),
        ([_described(IID, {"kubernetes.io/cluster/other": "owned"})], ident.INSTANCE_NOT_IN_CLUSTER),
        ([_described(IID, {"kubernetes.io/cluster/demo": "yes"})], ident.INSTANCE_NOT_IN_CLUSTER),
        ([_described(IID, {})], ident.INSTANCE_NOT_IN_CLUSTER),
        ([_described(IID, {"kubernetes.io/cluster/demo": "owned"}, "stopped")], ident.INSTANCE_NOT_RUNNING),
        ([_described(IID, {"kubernetes.io/cluster/demo": "owned"}, "terminated")], ident.INSTANCE_NOT_RUNNING),
    ],
)
def test_cluster_membership_comes_from_ec2s_tags(instances: list[dict[str, Any]], problem: str) -> None:
    assert ident.instance_cluster_problem(instances, IID, "demo") == problem


def test_describe_instances_items_flattens_reservations() -> None:
    resp = {"Reservations": [{"Instances": [{"InstanceId": "i-1"}, {"InstanceId": "i-2"}]}, {"Instances": []}]}
    assert [i["InstanceId"] for i in ident.describe_instances_items(resp)] == ["i-1", "i-2"]
