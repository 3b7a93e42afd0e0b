"""IAM in the simulation (issue 21, section 2): the allocator's, the reconciler's and the agents'
EC2 calls are authorized as their roles, from the committed snapshot of the synthesized
policies (``simulation/iam_policies.json``), and a refused call is the violation ``iam-denied``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from emulated.lambda_runtime import LambdaCrash
from simulation.runner import plan_for, run_plan
from simulation.schedule import SUBNET_KINDS

pytestmark = pytest.mark.sim


def _recording(w: Any) -> None:
    for role in w.roles.values():
        role.record = True


def _crash_before_modify(w: Any) -> None:
    """The allocator's first ModifyNetworkInterfaceAttribute (DeleteOnTermination of an ENI it
    just attached) never happens: the invocation dies first, and the reconciler must repair it."""
    inner = w.alloc_ec2.inner
    done: list[dict[str, Any]] = []

    class Dies:
        def __getattr__(self, name: str) -> Callable[..., Any]:
            fn: Callable[..., Any] = getattr(inner, name)
            if name != "modify_network_interface_attribute" or done:
                return fn

            def call(**kw: Any) -> Any:
                done.append(kw)
                raise LambdaCrash("crashed between attach and modify")

            return call

    w.alloc_ec2.inner = Dies()


def _without(role: str, sid: str) -> Callable[[Any], None]:
    """The snapshot's ``role`` without its statement ``sid`` (a permission the stack forgot)."""

    def mutate(w: Any) -> None:
        p = w.roles[role]
        kept = [st for st in p.statements if st.get("Sid") != sid]
        assert len(kept) == len(p.statements) - 1, sid
        p.statements = kept

    return mutate


def _allowed(w: Any, role: str) -> set[str]:
    return {a for a, _, d in w.roles[role].decisions if d == "Allow"}


def test_every_role_calls_ec2_as_the_stack_made_it() -> None:
    """The functions' and the agents' EC2 clients carry their roles; a seed's calls are decided by
    the snapshot's statements (the world's VPC and subnet are the ones they name) and none is refused.
    The default configuration's: seed 3 without issue 24's subnet worlds (it draws custom
    networking, whose stack variant names no subnet by id: ``test_subnet_worlds.py``)."""
    violations, (_, w) = run_plan(plan_for(3, without=frozenset(SUBNET_KINDS)), _recording)
    assert violations == [] and w.emu.denials == []
    assert w.alloc_ec2.inner.principal is w.roles["allocate"]
    assert w.reconciler_ec2.inner.principal is w.roles["reconcile"]
    assert all(a.ec2.inner.principal is w.roles["agent"] for a in w.agents.values())
    assert {
        "ec2:CreateNetworkInterface",
        "ec2:AttachNetworkInterface",
        "ec2:ModifyNetworkInterfaceAttribute",
        "ec2:AssignPrivateIpAddresses",
        "ec2:CreateTags",
    } <= _allowed(w, "allocate")
    assert "ec2:DescribeNetworkInterfaces" in _allowed(w, "reconcile") & _allowed(w, "agent")
    vpc = w.emu.subnets[w.subnet].vpc_id
    text = str(w.roles["allocate"].statements)
    assert f"vpc/{vpc}" in text and f"subnet/{w.subnet}" in text and "${" not in text


def test_a_permission_missing_from_the_stack_is_iam_denied() -> None:
    """Issue 21, defect 7, seen by the simulation: the reconciler's DeleteOnTermination repair needs
    ``ec2:ModifyNetworkInterfaceAttribute`` (``RepairDeleteOnTermination``). With it the repair is
    allowed and the seed passes; without it the repair is refused, and the seed says so."""

    def crash_recorded(w: Any) -> None:
        _recording(w)
        _crash_before_modify(w)

    violations, (_, w) = run_plan(plan_for(0), crash_recorded)
    assert violations == []
    assert "ec2:ModifyNetworkInterfaceAttribute" in _allowed(w, "reconcile"), "the seed made no repair"

    def crash_unpermitted(w: Any) -> None:
        _crash_before_modify(w)
        _without("reconcile", "RepairDeleteOnTermination")(w)

    violations, (_, w) = run_plan(plan_for(0), crash_unpermitted)
    assert [v[0] for v in violations] == ["iam-denied"], violations
    assert "the reconciler: modify_network_interface_attribute refused" in violations[0][1]
    assert [(d.principal, d.action) for d in w.emu.denials] == [("reconcile", "ec2:ModifyNetworkInterfaceAttribute")]
