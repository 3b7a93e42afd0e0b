"""IAM for the emulated world: a small evaluator of IAM identity-policy statements (for
the operators warmpool's policies use), and a principal of emulated EC2
(:mod:`emulated.ec2.authz`) that decides with it over one role's statements.

Tests ask it "would this request be allowed?" of the synthesized template instead of
string-matching it (``tests/helpers/iam_policies.py``); the simulation gives the allocator,
the reconciler and the agents the roles of the committed snapshot of the synthesized
statements (``simulation/iam_policies.json``, written by ``python -m infra.policy_snapshot``).

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

import functools
import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

Decision = Literal["Allow", "Deny", "ImplicitDeny"]
ContextValue = str | list[str]


class UnsupportedOperator(ValueError):
    """The policy uses an operator this evaluator does not model (so a test cannot pass by accident)."""


@functools.lru_cache(maxsize=4096)
def _pattern(pattern: str, ignore_case: bool) -> re.Pattern[str]:
    regex = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.compile(regex, re.IGNORECASE | re.DOTALL if ignore_case else re.DOTALL)


def _glob(pattern: str, value: str, *, ignore_case: bool = False) -> bool:
    """IAM wildcards: ``*`` any run, ``?`` one character; nothing else is special."""
    return _pattern(pattern, ignore_case).fullmatch(value) is not None


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


@dataclass
class PolicyPrincipal:
    """One role's identity-policy statements; ``decide`` is IAM's evaluation of them
    (a :class:`emulated.ec2.authz.Principal`)."""

    name: str
    statements: Sequence[Mapping[str, Any]]
    decisions: list[tuple[str, str, str]] = field(default_factory=list)
    """Every request decided: (action, resource, decision)."""
    record: bool = True
    """Keep :attr:`decisions` (a long simulation leaves it off)."""

    def decide(self, action: str, resource: str, context: Mapping[str, ContextValue]) -> str:
        decision = evaluate(self.statements, action, resource, context)
        if self.record:
            self.decisions.append((action, resource, decision))
        return decision


def pseudo_parameters(*, partition: str, region: str, account: str) -> dict[str, str]:
    """The stack's pseudo parameters as the flattened template names them."""
    return {"${AWS::Partition}": partition, "${AWS::Region}": region, "${AWS::AccountId}": account}


def load_snapshot(path: Path) -> dict[str, Any]:
    """A snapshot written by ``python -m infra.policy_snapshot``: ``context`` (the stack's
    settings it was synthesized with) and ``roles`` (role -> its EC2 statements, with the
    stack's pseudo parameters left as placeholders)."""
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def snapshot_principals(
    snapshot: Mapping[str, Any],
    *,
    partition: str,
    region: str,
    account: str,
    ids: Mapping[str, str] | None = None,
    record: bool = True,
) -> dict[str, PolicyPrincipal]:
    """Each role of a snapshot as a principal, its statements concretized for one account and
    region; ``ids`` renames resources the snapshot's context names (its VPC and subnet ids to
    the emulated world's)."""
    subs = {**pseudo_parameters(partition=partition, region=region, account=account), **(ids or {})}
    return {
        role: PolicyPrincipal(role, concretize(statements, subs), record=record)
        for role, statements in snapshot["roles"].items()
    }
