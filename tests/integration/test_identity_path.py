"""The signed-identity path end to end: emulated IMDS signs, the agent fetches over
HTTP with its own IMDS client, the functions' settings carry the certificate that
verifies it (``warmpool local up``), and a replayed identity is refused."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest

from emulated.clock import VirtualClock
from emulated.ec2 import Ec2Config, Ec2Emulator
from emulated.iid import IdentitySigner
from emulated.imds import make_app, serve
from emulated.local import LocalStack
from functions.identity import (
    WRONG_INSTANCE,
    IdentityRejected,
    TrustedKeys,
    VerifiedIdentity,
    verify_report_identity,
)
from functions.settings import Settings
from node_agent.identity import CachedIdentity, IdentityUnavailable, fetch_identity
from node_agent.imds import ImdsClient, ImdsError
from warmpool import names
from warmpool.messages import PoolReport, SignedIdentity


def _report(instance_id: str, instance_type: str, az: str, identity: SignedIdentity | None) -> PoolReport:
    return PoolReport(
        cluster="demo",
        node="n",
        instance_id=instance_id,
        instance_type=instance_type,
        availability_zone=az,
        seq=1,
        sent_at=1.0,
        identity=identity,
    )


@pytest.fixture
def imds() -> Iterator[tuple[Ec2Emulator, IdentitySigner, str, str]]:
    emu = Ec2Emulator(VirtualClock(1000.0), Ec2Config(region="eu-west-1", account_id="111122223333"))
    sid = emu.add_subnet(az="eu-west-1b", cidr="10.1.0.0/24")
    iid = emu.run_instance("m5.xlarge", subnet_id=sid)
    signer = IdentitySigner()
    with serve(emu, app=make_app(emu, signer)) as srv:
        yield emu, signer, srv.url, iid


def test_the_agent_fetches_an_identity_the_allocator_verifies(
    imds: tuple[Ec2Emulator, IdentitySigner, str, str],
) -> None:
    emu, signer, url, iid = imds
    identity = fetch_identity(ImdsClient(f"{url}/{iid}"))
    doc = json.loads(identity.document)
    assert (doc["instanceId"], doc["accountId"], doc["region"]) == (iid, "111122223333", "eu-west-1")
    assert doc["privateIp"] == emu.enis[emu.instances[iid].primary_eni].primary_ip
    got = verify_report_identity(
        _report(iid, "m5.xlarge", "eu-west-1b", identity),
        TrustedKeys.from_pem(signer.certificate_pem),
        account="111122223333",
        region="eu-west-1",
    )
    assert got == VerifiedIdentity(iid, "111122223333", "eu-west-1", "eu-west-1b", "m5.xlarge")


def test_in_process_agents_get_the_identity_imds_serves(
    imds: tuple[Ec2Emulator, IdentitySigner, str, str],
) -> None:
    emu, signer, url, iid = imds
    app_identity = make_app(emu, signer).identity(iid)
    served = fetch_identity(ImdsClient(f"{url}/{iid}"))
    assert app_identity.document == served.document  # same bytes; signatures are deterministic (PKCS#1 v1.5)
    assert app_identity.signature == served.signature


def test_imds_serves_the_same_document_bytes_every_time_and_needs_a_token(
    imds: tuple[Ec2Emulator, IdentitySigner, str, str],
) -> None:
    _, _, url, iid = imds
    client = ImdsClient(f"{url}/{iid}")
    first, second = fetch_identity(client), fetch_identity(client)
    assert first.document == second.document
    listing = client.get("instance-identity/", tree="dynamic")
    assert listing is not None and set(listing.split()) == {"document", "signature"}
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(f"{url}/{iid}/latest/dynamic/instance-identity/document", timeout=5)
    assert err.value.code == 401


def test_no_identity_is_an_error_never_an_empty_identity(
    imds: tuple[Ec2Emulator, IdentitySigner, str, str],
) -> None:
    _, _, url, _ = imds
    unknown = ImdsClient(f"{url}/i-00000000000000000", attempts=1)
    with pytest.raises(IdentityUnavailable):  # IMDS answers 404 for an instance it does not know
        CachedIdentity(unknown).get()
    down = ImdsClient("http://127.0.0.1:9", timeout_s=0.5, attempts=1)
    with pytest.raises(ImdsError):
        CachedIdentity(down).get()

    class Missing:
        def get(self, path: str, missing_ok: bool = False, tree: str = "meta-data") -> str | None:
            return None

    with pytest.raises(IdentityUnavailable):
        fetch_identity(Missing())


def test_local_up_hands_the_functions_the_certificate_of_its_imds() -> None:
    with LocalStack(cluster="idt", run_functions=False) as stack:
        out = stack.outputs
        sid = out["subnet_ids"][0]
        tags = {names.cluster_tag_key("idt"): "owned"}
        victim = stack.ec2.run_instance("m5.large", subnet_id=sid, tags=tags)
        forger = stack.ec2.run_instance("m5.large", subnet_id=sid, tags=tags)
        az = stack.ec2.instances[victim].az
        settings = Settings.model_validate(stack.function_env())
        trusted = TrustedKeys.from_pem(settings.identity_certificates)

        own = fetch_identity(ImdsClient(f"{out['imds_base']}/{forger}"))
        ok = verify_report_identity(
            _report(forger, "m5.large", az, own), trusted, account=settings.account, region=settings.region
        )
        assert isinstance(ok, VerifiedIdentity) and ok.instance_id == forger

        # The forger reports for the victim, carrying its own (genuine) identity: refused.
        forged = verify_report_identity(
            _report(victim, "m5.large", az, own), trusted, account=settings.account, region=settings.region
        )
        assert isinstance(forged, IdentityRejected) and forged.reason == WRONG_INSTANCE
