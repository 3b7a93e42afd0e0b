"""The IAM evaluator the policy tests rely on, checked against IAM's documented semantics."""

from __future__ import annotations

from typing import Any

import pytest

from tests.helpers.iam_eval import UnsupportedOperator, condition_holds, evaluate


def st(
    effect: str = "Allow", action: Any = "ec2:AssignPrivateIpAddresses", resource: Any = "*", **condition: Any
) -> dict[str, Any]:
    out: dict[str, Any] = {"Effect": effect, "Action": action, "Resource": resource}
    if condition:
        out["Condition"] = condition
    return out


@pytest.mark.parametrize(
    ("operator", "policy", "context", "holds"),
    [
        ("StringEquals", {"k": "v"}, {"k": "v"}, True),
        ("StringEquals", {"k": "v"}, {"k": "V"}, False),  # values are case-sensitive
        ("StringEquals", {"K": "v"}, {"k": "v"}, True),  # key names are not
        ("StringEquals", {"k": ["a", "v"]}, {"k": "v"}, True),  # values OR
        ("StringEquals", {"k": "v", "j": "w"}, {"k": "v"}, False),  # keys AND; absent key fails
        ("StringEquals", {"k": "v"}, {}, False),
        ("StringNotEquals", {"k": "v"}, {}, True),  # negated: absent key holds
        ("StringNotEquals", {"k": "v"}, {"k": "v"}, False),
        ("StringEqualsIgnoreCase", {"k": "true"}, {"k": "TRUE"}, True),
        ("StringEqualsIfExists", {"k": "v"}, {}, True),
        ("StringEqualsIfExists", {"k": "v"}, {"k": "x"}, False),
        ("StringLike", {"k": "warmpool-*-result-?"}, {"k": "warmpool-demo-result-1"}, True),
        ("StringLike", {"k": "a*"}, {"k": "ba"}, False),
        ("StringLike", {"k": "a[b]"}, {"k": "ab"}, False),  # no character classes in IAM
        ("ArnEquals", {"k": "arn:aws:ec2:r:a:subnet/s-1"}, {"k": "arn:aws:ec2:r:a:subnet/s-1"}, True),
        ("Null", {"k": "true"}, {}, True),
        ("Null", {"k": "true"}, {"k": "v"}, False),
        ("Null", {"k": "false"}, {"k": "v"}, True),
        ("Null", {"k": "false"}, {}, False),
        ("ForAllValues:StringEquals", {"aws:TagKeys": ["a", "b"]}, {"aws:TagKeys": ["a"]}, True),
        ("ForAllValues:StringEquals", {"aws:TagKeys": ["a"]}, {"aws:TagKeys": ["a", "c"]}, False),
        ("ForAllValues:StringEquals", {"aws:TagKeys": ["a"]}, {}, True),  # vacuous: the known pitfall
        ("ForAnyValue:StringEquals", {"aws:TagKeys": ["a"]}, {"aws:TagKeys": ["c", "a"]}, True),
        ("ForAnyValue:StringEquals", {"aws:TagKeys": ["a"]}, {}, False),
    ],
)
def test_condition_operators(operator: str, policy: dict[str, Any], context: dict[str, Any], holds: bool) -> None:
    assert condition_holds(operator, policy, context) is holds


def test_unmodelled_operators_fail_loudly() -> None:
    with pytest.raises(UnsupportedOperator):
        condition_holds("NumericLessThan", {"k": "1"}, {"k": "0"})
    with pytest.raises(UnsupportedOperator):
        condition_holds("StringEquals", {"aws:TagKeys": "a"}, {"aws:TagKeys": ["a", "b"]})


def test_explicit_deny_wins_over_any_allow() -> None:
    allow, deny = st(), st("Deny")
    assert evaluate([allow], "ec2:AssignPrivateIpAddresses", "arn:x", {}) == "Allow"
    assert evaluate([allow, deny], "ec2:AssignPrivateIpAddresses", "arn:x", {}) == "Deny"
    assert evaluate([], "ec2:AssignPrivateIpAddresses", "arn:x", {}) == "ImplicitDeny"


def test_action_and_resource_matching() -> None:
    s = st(action=["ec2:Describe*"], resource="arn:aws:ec2:*:*:network-interface/*")
    assert evaluate([s], "EC2:DescribeInstances", "arn:aws:ec2:r:a:network-interface/eni-1", {}) == "Allow"
    assert evaluate([s], "ec2:DeleteNetworkInterface", "arn:aws:ec2:r:a:network-interface/eni-1", {}) == (
        "ImplicitDeny"
    )
    assert evaluate([s], "ec2:DescribeInstances", "arn:aws:ec2:r:a:instance/i-1", {}) == "ImplicitDeny"


def test_a_deny_whose_condition_fails_does_not_deny() -> None:
    deny = st("Deny", StringEquals={"aws:ResourceTag/no_manage": "true"})
    assert evaluate([st(), deny], "ec2:AssignPrivateIpAddresses", "arn:x", {}) == "Allow"
    assert evaluate([st(), deny], "ec2:AssignPrivateIpAddresses", "arn:x", {"aws:ResourceTag/no_manage": "true"}) == (
        "Deny"
    )
