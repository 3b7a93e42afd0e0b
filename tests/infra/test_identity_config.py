"""The identity certificate as a stack setting: default, overrides, validation, and
what reaches the functions' environment."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from emulated.iid import IdentitySigner
from functions.identity import TrustedKeys
from infra.config import DEFAULT_IDENTITY_CERTIFICATE_FILE, StackConfigError, config_from_context
from tests.helpers.cdk_synth import OTHER_REGION_CERTIFICATE, Synthesized
from warmpool import names

GOOD = {
    "cluster": "demo",
    "vpc_id": "vpc-0123456789abcdef0",
    "subnet_ids": "subnet-0123456789abcdef0",
    "create_buckets_table": "true",
}
BEGIN = "-----BEGIN CERTIFICATE-----"


def _default_blocks() -> str:
    text = DEFAULT_IDENTITY_CERTIFICATE_FILE.read_text()
    return text[text.index(BEGIN) :]


def test_the_default_is_awss_commercial_certificate_without_its_comments() -> None:
    cfg = config_from_context(GOOD)
    assert cfg.identity_certificate == _default_blocks()
    assert "#" not in cfg.identity_certificate
    assert cfg.identity_certificate_for("us-east-1") == cfg.identity_certificate
    assert len(TrustedKeys.from_pem(cfg.identity_certificate).keys) == 1


def test_a_certificate_may_be_given_as_pem_or_as_a_file(tmp_path: Path) -> None:
    pem = IdentitySigner().certificate_pem
    assert config_from_context({**GOOD, "identity_certificate": pem}).identity_certificate == pem
    f = tmp_path / "mine.pem"
    f.write_text("# comment\n" + pem)
    assert config_from_context({**GOOD, "identity_certificate": str(f)}).identity_certificate == pem


def test_per_region_overrides_replace_the_default_only_in_their_region(tmp_path: Path) -> None:
    pem = IdentitySigner().certificate_pem
    f = tmp_path / "ap.pem"
    f.write_text(pem)
    cfg = config_from_context({**GOOD, "identity_certificates_by_region": f'{{"ap-east-1": "{f}"}}'})
    assert cfg.identity_certificate_for("ap-east-1") == pem
    assert cfg.identity_certificate_for("eu-west-1") == _default_blocks()


def _problems(**overrides: Any) -> str:
    with pytest.raises(StackConfigError) as err:
        config_from_context({**GOOD, **overrides})
    return str(err.value)


def test_unusable_certificates_stop_synth_with_the_key_named(tmp_path: Path) -> None:
    assert "identity_certificate: neither PEM text nor a readable file" in _problems(
        identity_certificate=str(tmp_path / "missing.pem")
    )
    assert "not a valid PEM certificate" in _problems(
        identity_certificate=f"{BEGIN}\nbm90IGEgY2VydA==\n-----END CERTIFICATE-----\n"
    )
    assert "not AWS region names: Mars" in _problems(
        identity_certificates_by_region={"Mars": IdentitySigner().certificate_pem}
    )
    too_many = "".join(IdentitySigner().certificate_pem for _ in range(4))
    assert "Lambda's 4 KB limit" in _problems(identity_certificate=too_many)


def _env(s: Synthesized, fn: str) -> dict[str, Any]:
    found = [
        r["Properties"]["Environment"]["Variables"]
        for k, r in s.resources("AWS::Lambda::Function").items()
        if k.startswith(fn)
    ]
    assert len(found) == 1
    env: dict[str, Any] = found[0]
    return env


def test_both_functions_get_the_default_certificate(default: Synthesized) -> None:
    for fn in ("Allocate", "Reconcile"):
        assert _env(default, fn)[names.ENV_IDENTITY_CERTIFICATES] == _default_blocks()


def test_an_overridden_region_is_chosen_by_aws_region_at_deploy_time(synthesized: dict[str, Synthesized]) -> None:
    s = synthesized["irsa"]
    value = _env(s, "Allocate")[names.ENV_IDENTITY_CERTIFICATES]
    assert set(value) == {"Fn::If"}
    condition, in_region, elsewhere = value["Fn::If"]
    assert in_region == OTHER_REGION_CERTIFICATE and elsewhere == _default_blocks()
    assert s.resolved["Conditions"][condition] == {"Fn::Equals": ["${AWS::Region}", "ap-east-1"]}
