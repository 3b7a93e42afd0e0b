"""Every planned call has every entry of the plug-in point (warmpool/calls.py;
docs/design.md, "Adding an EC2 call"): its cost, its executor, its port methods and their
adapter, an emulator handler for each EC2 action it makes, and a boto3-shaped client method
for it. The IAM half (the allocate role allows each call's actions) is tests/infra/test_iam.py."""

from __future__ import annotations

import inspect
import typing

import pytest

from emulated.ec2 import Ec2Emulator
from emulated.ec2.authz import DESCRIBED
from emulated.ec2.client import FastEc2Client
from functions.ec2 import Ec2
from functions.execute import EXECUTORS
from warmpool.buckets import DEFAULT_SPECS, MUTATING_ACTIONS
from warmpool.calls import CALLS, Call, CallSpec
from warmpool.ports import Ec2Api, Ec2Port

ALL = sorted(CALLS.items(), key=lambda kv: kv[0].__name__)


def _snake(action: str) -> str:
    return "".join("_" + c.lower() if c.isupper() else c for c in action).lstrip("_")


def test_the_table_holds_every_call_of_the_union_and_nothing_else() -> None:
    assert set(CALLS) == set(typing.get_args(Call))


def test_every_call_has_an_executor_and_nothing_else_does() -> None:
    assert set(EXECUTORS) == set(CALLS)


def test_each_executor_is_written_for_its_own_call() -> None:
    for kind, run in EXECUTORS.items():
        hints = typing.get_type_hints(run)
        assert hints["call"] is kind, (kind.__name__, run.__name__)


@pytest.mark.parametrize(("kind", "spec"), ALL, ids=[k.__name__ for k, _ in ALL])
def test_each_port_method_is_on_the_port_and_the_adapter(kind: type, spec: CallSpec) -> None:
    for method in spec.port:
        assert callable(getattr(Ec2Port, method, None)), method
        assert callable(getattr(Ec2, method, None)), method


@pytest.mark.parametrize(("kind", "spec"), ALL, ids=[k.__name__ for k, _ in ALL])
def test_each_ec2_action_is_served_priced_and_modelled(kind: type, spec: CallSpec) -> None:
    served = set(Ec2Emulator.actions())
    for action in spec.ec2:
        assert action in served, f"{kind.__name__}: the emulator has no handler for {action}"
        assert action in MUTATING_ACTIONS and action in DEFAULT_SPECS, action
        assert action in DESCRIBED, f"{action}: the emulator's IAM model does not know its resources"
        assert f"ec2:{action}" in spec.iam, action
    assert sum(spec.cost.values()) == len(spec.ec2)


@pytest.mark.parametrize(("kind", "spec"), ALL, ids=[k.__name__ for k, _ in ALL])
def test_each_iam_action_has_a_client_method_and_a_handler(kind: type, spec: CallSpec) -> None:
    served = set(Ec2Emulator.actions())
    for iam in spec.iam:
        service, _, action = iam.partition(":")
        assert service == "ec2" and action in served, iam
        method = _snake(action)
        assert callable(getattr(Ec2Api, method, None)), method
        assert method in vars(FastEc2Client), method


def test_the_adapter_names_each_action_it_calls_by_its_client_method() -> None:
    """The adapter's method for a port call makes the actions the table says (its source
    names the action and the matching client method)."""
    for kind, spec in CALLS.items():
        source = "".join(inspect.getsource(getattr(Ec2, m)) for m in spec.port)
        for action in spec.ec2:
            assert f'"{action}"' in source and f"self.api.{_snake(action)}" in source, (kind.__name__, action)
