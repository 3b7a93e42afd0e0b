"""A small evaluator of IAM identity-policy statements, for the operators warmpool's
policies use, so tests can ask "would this request be allowed?" of the synthesized
template instead of string-matching it.

Semantics follow the IAM policy evaluation logic for one principal's identity
policies (no SCPs, boundaries or resource policies): an explicit Deny wins, else
any Allow, else the implicit deny. Within a statement, Action and Resource must
match (``*`` and ``?`` wildcards, actions case-insensitive), and every condition
operator block must hold; within a block every key must hold; a key holds when
any of its policy values matches (OR). Condition key names are case-insensitive;
values are case-sensitive except for the ``IgnoreCase`` operators.

A key absent from the request context: fails every positive operator, satisfies
the negated ones (``StringNotEquals``...), satisfies ``...IfExists``, fails
``ForAnyValue:`` and satisfies ``ForAllValues:`` (the documented pitfall).
``Null: true`` holds when the key is absent, ``Null: false`` when present.

Context values are ``str`` or ``list[str]`` (multivalued keys such as ``aws:TagKeys``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

Decision = Literal["Allow", "Deny", "ImplicitDeny"]
ContextValue = str | list[str]


class UnsupportedOperator(ValueError):
    """The policy uses an operator this evaluator does not model (so a test cannot pass by accident)."""


def _glob(pattern: str, value: str, *, ignore_case: bool = False) -> bool:
    """IAM wildcards: ``*`` any run, ``?`` one character; nothing else is special."""
    regex = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.fullmatch(regex, value, re.IGNORECASE | re.DOTALL if ignore_case else re.DOTALL) is not None


_STRING_OPS: dict[str, tuple[Callable[[str, str], bool], bool]] = {
    # name -> (match(policy_value, request_value), negated)
    "StringEquals": (lambda p, v: p == v, False),
    "StringNotEquals": (lambda p, v: p == v, True),
    "StringEqualsIgnoreCase": (lambda p, v: p.lower() == v.lower(), False),
    "StringNotEqualsIgnoreCase": (lambda p, v: p.lower() == v.lower(), True),
    "StringLike": (lambda p, v: _glob(p, v), False),
    "StringNotLike": (lambda p, v: _glob(p, v), True),
    "ArnEquals": (lambda p, v: p == v, False),
    "ArnNotEquals": (lambda p, v: p == v, True),
    "ArnLike": (lambda p, v: _glob(p, v), False),
    "ArnNotLike": (lambda p, v: _glob(p, v), True),
    "Bool": (lambda p, v: p.lower() == v.lower(), False),
}


def _values(x: Any) -> list[str]:
    return [str(v) for v in (x if isinstance(x, list) else [x])]


def condition_holds(operator: str, key_values: Mapping[str, Any], context: Mapping[str, ContextValue]) -> bool:
    """One operator block, e.g. ``("StringEquals", {"aws:ResourceTag/k": "v"})``."""
    ctx = {k.lower(): v for k, v in context.items()}
    for key, policy_value in key_values.items():
        policy_values = _values(policy_value)
        present = key.lower() in ctx
        request = _values(ctx[key.lower()]) if present else []
        if operator == "Null":
            if len(policy_values) != 1 or policy_values[0].lower() not in ("true", "false"):
                raise UnsupportedOperator(f"Null takes true or false, got {policy_value!r}")
            if (policy_values[0].lower() == "true") == present:
                return False
            continue
        qualifier, _, base = operator.rpartition(":")
        if_exists = base.endswith("IfExists")
        base = base.removesuffix("IfExists")
        if base not in _STRING_OPS or qualifier not in ("", "ForAnyValue", "ForAllValues"):
            raise UnsupportedOperator(operator)
        match, negated = _STRING_OPS[base]

        def one(
            v: str,
            match: Callable[[str, str], bool] = match,
            negated: bool = negated,
            policy_values: list[str] = policy_values,
        ) -> bool:
            hit = any(match(p, v) for p in policy_values)
            return not hit if negated else hit

        if qualifier == "ForAllValues":
            ok = all(one(v) for v in request)  # vacuously true when absent or empty
        elif qualifier == "ForAnyValue":
            ok = any(one(v) for v in request)  # false when absent
        elif not present:
            ok = if_exists or negated
        else:
            if len(request) != 1:
                raise UnsupportedOperator(f"{operator} on multivalued key {key}: use ForAnyValue/ForAllValues")
            ok = one(request[0])
        if not ok:
            return False
    return True


def statement_applies(st: Mapping[str, Any], action: str, resource: str, context: Mapping[str, ContextValue]) -> bool:
    if "NotAction" in st or "NotResource" in st:
        raise UnsupportedOperator("NotAction/NotResource")
    if not any(_glob(a, action, ignore_case=True) for a in _values(st["Action"])):
        return False
    if not any(_glob(r, resource) for r in _values(st["Resource"])):
        return False
    return all(condition_holds(op, kv, context) for op, kv in (st.get("Condition") or {}).items())


def evaluate(
    statements: Iterable[Mapping[str, Any]], action: str, resource: str, context: Mapping[str, ContextValue]
) -> Decision:
    allowed = False
    for st in statements:
        if statement_applies(st, action, resource, context):
            if st["Effect"] == "Deny":
                return "Deny"
            allowed = True
    return "Allow" if allowed else "ImplicitDeny"


def matching_sids(
    statements: Iterable[Mapping[str, Any]], action: str, resource: str, context: Mapping[str, ContextValue]
) -> list[str]:
    """Which statements apply (for readable failures)."""
    return [str(st.get("Sid")) for st in statements if statement_applies(st, action, resource, context)]


# --- request contexts as EC2 builds them -------------------------------------------


@dataclass(frozen=True)
class IamEni:
    """An ENI as IAM sees it: its id, VPC/subnet ARNs and tags."""

    eni_id: str
    vpc_arn: str
    subnet_arn: str
    tags: Mapping[str, str] = field(default_factory=dict)
    region: str = "us-east-1"
    account: str = "123456789012"

    @property
    def arn(self) -> str:
        return f"arn:aws:ec2:{self.region}:{self.account}:network-interface/{self.eni_id}"

    def context(self, **extra: ContextValue) -> dict[str, ContextValue]:
        """What EC2 puts in the request context for a call on this ENI (plus ``extra``)."""
        ctx: dict[str, ContextValue] = {
            "ec2:Vpc": self.vpc_arn,
            "ec2:Subnet": self.subnet_arn,
            "ec2:NetworkInterfaceID": self.eni_id,
            "ec2:Region": self.region,
        }
        for k, v in self.tags.items():
            ctx[f"aws:ResourceTag/{k}"] = v
            ctx[f"ec2:ResourceTag/{k}"] = v
        ctx.update(extra)
        return ctx

    def tagging(self, tags: Mapping[str, str]) -> dict[str, ContextValue]:
        """The context of ``CreateTags`` adding ``tags`` to this existing ENI."""
        extra: dict[str, ContextValue] = {f"aws:RequestTag/{k}": v for k, v in tags.items()}
        extra["aws:TagKeys"] = list(tags)
        return self.context(**extra)


def concretize(value: Any, substitutions: Mapping[str, str]) -> Any:
    """Replace ``${AWS::Partition}``-style placeholders of a resolved template."""
    if isinstance(value, str):
        for k, v in substitutions.items():
            value = value.replace(k, v)
        return value
    if isinstance(value, list):
        return [concretize(v, substitutions) for v in value]
    if isinstance(value, dict):
        return {k: concretize(v, substitutions) for k, v in value.items()}
    return value


def decisions(
    statements: Sequence[Mapping[str, Any]], action: str, resources: Sequence[tuple[str, Mapping[str, ContextValue]]]
) -> list[Decision]:
    """Each resource of a multi-resource call (Attach: the ENI and the instance) is authorized on its own."""
    return [evaluate(statements, action, arn, ctx) for arn, ctx in resources]
