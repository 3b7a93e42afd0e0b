"""The EC2 policy statements the CDK app synthesizes for the allocator's, the reconciler's and
the agent's roles, written as a snapshot the simulation authorizes its EC2 calls with
(``simulation/iam_policies.json``; :mod:`emulated.iam`).

The simulation does not run the CDK per seed (node, ~15 s): it reads this file. The stack is
synthesized with :data:`SIMULATION_CONTEXT`: the default configuration (the ``default`` variant
of the infra tests: subnets by id, Pod Identity, the allocator tags primary ENIs at first
contact) for the simulation's cluster, VPC and subnet. The intrinsic functions are flattened
(``${AWS::Partition}``, ``${AWS::Region}``, ``${AWS::AccountId}`` left as placeholders, which the
simulation fills with the emulator's account and region at load).

    python -m infra.policy_snapshot                # rewrite simulation/iam_policies*.json
    python -m infra.policy_snapshot --check        # exit 1 when a file differs from a fresh synth

Besides the default configuration, the stack variants the simulation's subnet worlds run with
(:data:`VARIANTS`, issue 24: pod subnets by discovery, and discovery with custom networking),
each in a file of its own (:func:`snapshot_path`).

``tests/infra/test_policy_snapshot.py`` runs the check, so the snapshot cannot go stale silently.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CDK_JSON = ROOT / "cdk.json"
SNAPSHOT = ROOT / "simulation" / "iam_policies.json"

SIMULATION_CONTEXT: dict[str, Any] = {
    "cluster": "dst",
    "vpc_id": "vpc-0123456789abcdef0",
    "subnet_ids": "subnet-0123456789abcdef0",
    "create_buckets_table": "true",
}
"""The stack's settings for the simulation's world (``simulation.base.CLUSTER``; the simulation
makes its VPC and its subnet with these ids); everything else is the default configuration."""

CUSTOM_SUBNET_IDS = ("subnet-0123456789abcdef1", "subnet-0123456789abcdef2")
"""The custom-networking variant's mapped subnets (the simulation renames them to its world's)."""
VARIANTS: dict[str, dict[str, Any]] = {
    # Pod subnets found by the VPC CNI's tags (``subnet_discovery``; no subnet ids): the
    # simulation's multi-subnet and fragmented worlds (simulation/subnets.py).
    "discover": {
        "cluster": "dst",
        "vpc_id": "vpc-0123456789abcdef0",
        "subnet_discovery": "true",
        "create_buckets_table": "true",
    },
    # The same with custom networking: one zone's ENIConfig with two subnets (a world that maps
    # one names the other nowhere). No fixed security groups: the policy allows the VPC's.
    "discover-custom": {
        "cluster": "dst",
        "vpc_id": "vpc-0123456789abcdef0",
        "subnet_discovery": "true",
        "create_buckets_table": "true",
        "custom_network": json.dumps({"us-east-1a": {"subnets": list(CUSTOM_SUBNET_IDS)}}),
    },
}
"""Other stack configurations the simulation draws, by name (:func:`snapshot_path`)."""


def snapshot_path(variant: str | None = None) -> Path:
    """Where a variant's snapshot is (``None``: the default configuration's, :data:`SNAPSHOT`)."""
    return SNAPSHOT if variant is None else SNAPSHOT.with_name(f"iam_policies_{variant}.json")


ROLES = {"allocate": "AllocateRole", "reconcile": "ReconcileRole", "agent": "AgentPolicy"}
"""Each role, by the prefix of the logical id of its role (the functions' inline policies) or of
its managed policy (the agent's)."""
PSEUDO = ("${AWS::Partition}", "${AWS::Region}", "${AWS::AccountId}")


def resolve(value: Any) -> Any:
    """Flatten intrinsic functions to readable strings: ``${AWS::Partition}``, ``${Logical.Attr}``
    (a ``Fn::Sub`` of a plain string is its string)."""
    if isinstance(value, list):
        return [resolve(v) for v in value]
    if isinstance(value, dict):
        if set(value) == {"Fn::Join"}:
            sep, parts = value["Fn::Join"]
            return sep.join(str(resolve(p)) for p in parts)
        if set(value) == {"Ref"}:
            return "${" + value["Ref"] + "}"
        if set(value) == {"Fn::Sub"} and isinstance(value["Fn::Sub"], str):  # its ${...} read as they are
            return value["Fn::Sub"]
        if set(value) == {"Fn::GetAtt"}:
            return "${" + ".".join(value["Fn::GetAtt"]) + "}"
        return {k: resolve(v) for k, v in value.items()}
    return value


def synth(context: dict[str, Any], outdir: Path) -> dict[str, Any]:
    """The stack's template for ``context``, with cdk.json's feature flags (as ``npx cdk synth``),
    environment-agnostic (no CDK_DEFAULT_ACCOUNT/REGION), intrinsics flattened."""
    os.environ.setdefault("JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION", "1")
    os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "14,16,18,20,22")
    os.environ.setdefault("JSII_SILENCE_WARNING_UNTESTED_NODE_VERSION", "1")
    from aws_cdk import App

    from infra.app import build
    from infra.config import config_from_context

    saved = {k: os.environ.pop(k) for k in ("CDK_DEFAULT_ACCOUNT", "CDK_DEFAULT_REGION") if k in os.environ}
    try:
        flags = {k: v for k, v in json.loads(CDK_JSON.read_text())["context"].items() if k.startswith("@")}
        app = App(outdir=str(outdir), context=flags)
        stack = build(app, config_from_context(context))
        app.synth()
    finally:
        os.environ.update(saved)
    template: dict[str, Any] = json.loads((outdir / f"{stack.stack_name}.template.json").read_text())
    resolved: dict[str, Any] = resolve(template)
    return resolved


def _is_ec2(statement: dict[str, Any]) -> bool:
    actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
    return any(a == "*" or a.lower().startswith("ec2:") for a in actions)


def role_ec2_statements(resolved: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """Each role's statements that name an EC2 action, in template order."""
    out: dict[str, list[dict[str, Any]]] = {role: [] for role in ROLES}
    for logical_id, res in resolved["Resources"].items():
        if res["Type"] == "AWS::IAM::Policy":
            owners = [r for r in ROLES.items() if res["Properties"]["Roles"][0].startswith("${" + r[1])]
        elif res["Type"] == "AWS::IAM::ManagedPolicy":
            owners = [r for r in ROLES.items() if logical_id.startswith(r[1])]
        else:
            continue
        for role, _ in owners:
            out[role] += [st for st in res["Properties"]["PolicyDocument"]["Statement"] if _is_ec2(st)]
    return out


def snapshot(context: dict[str, Any] | None = None) -> dict[str, Any]:
    """A fresh synth's snapshot (what :data:`SNAPSHOT` should hold)."""
    context = dict(SIMULATION_CONTEXT if context is None else context)
    with tempfile.TemporaryDirectory(prefix="warmpool-policy-snapshot-") as tmp:
        roles = role_ec2_statements(synth(context, Path(tmp)))
    text = json.dumps(roles)
    for token in PSEUDO:
        text = text.replace(token, "")
    if "${" in text:
        raise ValueError("an EC2 statement names a stack resource: the snapshot cannot stand for it")
    if not all(roles.values()):
        raise ValueError(f"a role has no EC2 statement: {sorted(r for r, s in roles.items() if not s)}")
    return {
        "_": "generated by `python -m infra.policy_snapshot`: do not edit (tests/infra/test_policy_snapshot.py)",
        "context": context,
        "roles": roles,
    }


def render(data: dict[str, Any]) -> str:
    return json.dumps(data, indent=1, sort_keys=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--out", type=Path, default=None, help="write (or check) the default configuration's only, here"
    )
    parser.add_argument("--check", action="store_true", help="compare with the files instead of writing them")
    args = parser.parse_args(argv)
    todo: list[tuple[Path, dict[str, Any] | None]] = (
        [(args.out, None)] if args.out is not None else [(snapshot_path(), None)]
    )
    if args.out is None:
        todo += [(snapshot_path(v), ctx) for v, ctx in VARIANTS.items()]
    stale = 0
    for path, context in todo:
        fresh = render(snapshot(context))
        if not args.check:
            path.write_text(fresh)
        elif (path.read_text() if path.exists() else "") != fresh:
            print(f"{path} differs from a fresh synth: run `python -m infra.policy_snapshot`", file=sys.stderr)
            stale += 1
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
