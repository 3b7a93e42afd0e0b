"""Identity verification cost: reports verified per second on one core.

Run: ``.venv/bin/python tests/perf/identity_verify.py``. Signs 2,000 documents
(one per instance) with a 1024-bit test key, like AWS's regional RSA keys, then
verifies each report's identity (base64, RSA PKCS#1 v1.5/SHA-256, JSON, field
checks) several times and prints the median, with 1 and 3 trusted certificates
(a rotation: the matching key last, the worst case).
"""

from __future__ import annotations

import statistics
import time

from emulated.iid import IdentitySigner, document_for
from functions.identity import TrustedKeys, VerifiedIdentity, verify_report_identity
from warmpool.messages import PoolReport, SignedIdentity


def reports(signer: IdentitySigner, n: int) -> list[PoolReport]:
    out = []
    for i in range(n):
        iid = f"i-{i:017x}"
        doc = document_for(
            {
                "accountId": "123456789012",
                "availabilityZone": "us-east-1a",
                "instanceId": iid,
                "instanceType": "m5.large",
                "region": "us-east-1",
            }
        )
        out.append(
            PoolReport(
                cluster="demo",
                node=f"n{i}",
                instance_id=iid,
                instance_type="m5.large",
                availability_zone="us-east-1a",
                seq=1,
                sent_at=1.0,
                identity=SignedIdentity(document=doc, signature=signer.sign(doc)),
            )
        )
    return out


def main() -> None:
    signer = IdentitySigner()
    batch = reports(signer, 2000)
    for extra in (0, 2):
        pems = [IdentitySigner().certificate_pem for _ in range(extra)] + [signer.certificate_pem]
        trusted = TrustedKeys.from_pem("".join(pems))
        rates = []
        for _ in range(5):
            t0 = time.perf_counter()
            ok = sum(
                isinstance(
                    verify_report_identity(r, trusted, account="123456789012", region="us-east-1"), VerifiedIdentity
                )
                for r in batch
            )
            rates.append(len(batch) / (time.perf_counter() - t0))
            assert ok == len(batch)
        print(
            f"identity verify, {len(pems)} trusted cert(s): median {statistics.median(rates):,.0f} reports/s "
            f"({1e6 / statistics.median(rates):.0f} us each; min {min(rates):,.0f}, max {max(rates):,.0f}) "
            f"over {len(rates)} runs of {len(batch)} reports"
        )


if __name__ == "__main__":
    main()
