"""Request contexts for the IAM evaluator, as EC2 builds them (the evaluator itself is
:mod:`emulated.iam`; re-exported here for the tests that import it from this module)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from emulated.iam import (
    ContextValue,
    Decision,
    UnsupportedOperator,
    concretize,
    condition_holds,
    evaluate,
    matching_sids,
    statement_applies,
)

__all__ = [
    "ContextValue",
    "Decision",
    "IamEni",
    "UnsupportedOperator",
    "concretize",
    "condition_holds",
    "decisions",
    "evaluate",
    "matching_sids",
    "statement_applies",
]


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


def decisions(
    statements: Sequence[Mapping[str, Any]], action: str, resources: Sequence[tuple[str, Mapping[str, ContextValue]]]
) -> list[Decision]:
    """Each resource of a multi-resource call (Attach: the ENI and the instance) is authorized on its own."""
    return [evaluate(statements, action, arn, ctx) for arn, ctx in resources]
