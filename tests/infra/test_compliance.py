"""cdk-nag AwsSolutions with every kept finding acknowledged for a reason; cfn-lint clean."""

from __future__ import annotations

import pytest
from cfnlint.api import ManualArgs, lint_file

from tests.helpers.cdk_synth import VARIANTS, Synthesized


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_cdk_nag_finds_nothing_unacknowledged(synthesized: dict[str, Synthesized], variant: str) -> None:
    (report,) = synthesized[variant].nag_report["pluginReports"]
    assert report["pluginName"] == "AwsSolutions"
    assert report["violations"] == [], report["violations"]
    assert report["conclusion"] == "success"


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_every_acknowledgement_has_a_reason_and_is_used(synthesized: dict[str, Synthesized], variant: str) -> None:
    s = synthesized[variant]
    (report,) = s.nag_report["pluginReports"]
    suppressed = report["suppressedViolations"]
    assert all(len(v["reason"]) > 40 for v in suppressed)
    used = {(v["acknowledgedAt"].split("/", 1)[1], v["acknowledgedId"]) for v in suppressed}
    declared = {(a.construct_path, a.finding_id) for a in s.acknowledgements}
    assert used == declared
    # only wildcard-resource and runtime findings are ever acknowledged, and AWS managed
    # policies only on aws-cdk-lib's own kubectl handler (eks_cluster), never on warmpool's roles
    ours = [v for v in suppressed if not v["acknowledgedAt"].endswith("-KubectlProvider")]
    assert {v["ruleName"].split("[")[0] for v in ours} <= {"AwsSolutions-IAM5", "AwsSolutions-L1"}
    assert {v["ruleName"].split("[")[0] for v in suppressed} <= {
        "AwsSolutions-IAM5",
        "AwsSolutions-L1",
        "AwsSolutions-IAM4",
    }
    assert not any("Action::" in v["ruleName"] for v in suppressed)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_cfn_lint_passes(synthesized: dict[str, Synthesized], variant: str) -> None:
    matches = lint_file(synthesized[variant].template_path, config=ManualArgs(regions=["us-east-1", "eu-west-1"]))
    assert [str(m) for m in matches] == []
