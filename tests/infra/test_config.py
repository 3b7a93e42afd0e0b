"""Context validation: bad values stop synth with one message naming each key."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from infra.config import StackConfigError, config_from_context

GOOD = {
    "cluster": "demo",
    "vpc_id": "vpc-0123456789abcdef0",
    "subnet_ids": "subnet-0123456789abcdef0",
    "create_buckets_table": "true",
}


def problems(**overrides: object) -> str:
    with pytest.raises(StackConfigError) as err:
        config_from_context({**GOOD, **overrides})
    return str(err.value)


def test_command_line_strings_are_parsed() -> None:
    cfg = config_from_context(
        {
            **GOOD,
            "subnet_ids": "subnet-0123456789abcdef0, subnet-0123456789abcdef1",
            "batch_size": "500",
            "budget_fraction": "0.5",
            "create_buckets_table": "false",
        }
    )
    assert cfg.subnet_ids == ("subnet-0123456789abcdef0", "subnet-0123456789abcdef1")
    assert cfg.batch_size == 500 and cfg.budget_fraction == 0.5 and cfg.create_buckets_table is False


def test_json_lists_and_native_values_are_accepted() -> None:
    cfg = config_from_context({**GOOD, "subnet_ids": '["subnet-0123456789abcdef0"]', "create_buckets_table": True})
    assert cfg.subnet_ids == ("subnet-0123456789abcdef0",) and cfg.create_buckets_table is True


def test_defaults() -> None:
    cfg = config_from_context(GOOD)
    assert (cfg.budget_fraction, cfg.batch_size, cfg.batching_window_s, cfg.max_concurrency) == (
        0.8,
        100,
        1,
        5,
    )
    assert cfg.agent_identity == "pod-identity" and cfg.identity_mode == "none"
    assert cfg.visibility_timeout_s == 6 * cfg.allocate_timeout_s
    assert cfg.resolved_stack_name == "warmpool-demo"


def test_missing_required_keys_are_named_with_how_to_pass_them() -> None:
    with pytest.raises(StackConfigError) as err:
        config_from_context({})
    text = str(err.value)
    for key in ("cluster", "vpc_id", "create_buckets_table"):
        assert f"{key}: required, pass -c {key}=..." in text


def test_the_shared_table_choice_must_be_explicit() -> None:
    context = dict(GOOD)
    del context["create_buckets_table"]
    with pytest.raises(StackConfigError, match="create_buckets_table: required"):
        config_from_context(context)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"cluster": "bad name"}, "cluster: letters, digits"),
        ({"cluster": "x" * 45}, "at most 44 characters"),
        ({"vpc_id": "vpc-xyz"}, "vpc_id: a VPC id"),
        ({"subnet_ids": "subnet-12"}, "not subnet ids: subnet-12"),
        ({"subnet_ids": "subnet-0123456789abcdef0,subnet-0123456789abcdef0"}, "lists a subnet twice"),
        ({"subnet_ids": None, "subnet_discovery": "false"}, "subnet_discovery=false: set subnet_ids or subnet_tag"),
        ({"subnet_discovery": "true"}, "subnet_discovery=true takes neither subnet_ids nor subnet_tag"),
        ({"subnet_ids": None, "subnet_discovery": "maybe"}, "subnet_discovery"),
        ({"subnet_ids": None, "subnet_tag": "novalue"}, "subnet_tag: KEY=VALUE"),
        ({"security_group_ids": "sg-1"}, "not security group ids"),
        ({"budget_fraction": "0"}, "budget_fraction"),
        ({"budget_fraction": "1.5"}, "budget_fraction"),
        ({"batch_size": "20000"}, "batch_size"),
        ({"batch_size": "50", "batching_window_s": "0"}, "batching_window_s >= 1"),
        ({"batching_window_s": "301"}, "batching_window_s"),
        ({"max_concurrency": "1"}, "max_concurrency"),
        ({"allocate_timeout_s": "1000"}, "allocate_timeout_s"),
        ({"agent_identity": "magic"}, "agent_identity"),
        ({"agent_identity": "irsa"}, "needs oidc_provider_arn"),
        ({"agent_identity": "irsa", "oidc_provider_arn": "arn:aws:iam::1:role/x"}, "oidc_provider_arn"),
        ({"agent_identity": "node-role"}, "needs node_role_name"),
        ({"agent_namespace": "Kube_System"}, "agent_namespace: a Kubernetes DNS label"),
        ({"python_version": "3.9"}, "python_version"),
        ({"log_retention_days": "2"}, "log_retention_days"),
        ({"create_buckets_table": "maybe"}, "create_buckets_table"),
        ({"scarce_free": "-1"}, "scarce_free: Input should be greater than or equal to 0"),
        ({"scarce_free": "1000001"}, "scarce_free: Input should be less than or equal to 1000000"),
        ({"scarce_free": "many"}, "scarce_free"),
        ({"lean_hold_s": "60"}, "lean_hold_s apply only with eks_cluster"),
    ],
)
def test_bad_values_are_rejected_with_the_key_named(overrides: dict[str, object], message: str) -> None:
    assert message in problems(**overrides)


def test_every_problem_is_reported_at_once() -> None:
    text = problems(vpc_id="nope", batch_size="0", cluster="bad name")
    assert "vpc_id" in text and "batch_size" in text and "cluster" in text


def test_node_role_turns_on_sender_id_binding() -> None:
    cfg = config_from_context({**GOOD, "agent_identity": "node-role", "node_role_name": "nodes"})
    assert cfg.identity_mode == "sender-id"


def test_cdk_json_context_is_a_valid_example() -> None:
    context = json.loads((Path(__file__).resolve().parents[2] / "cdk.json").read_text())["context"]
    cfg = config_from_context(context)
    assert cfg.cluster == "demo" and cfg.create_buckets_table is True


def test_app_exits_with_the_message_on_bad_context(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import infra.app as app_module

    class FakeNode:
        def try_get_context(self, key: str) -> object:
            return {"cluster": "bad name"}.get(key)

    class FakeApp:
        node = FakeNode()

    monkeypatch.setattr(app_module, "App", FakeApp)
    with pytest.raises(SystemExit) as exit_info:
        app_module.main()
    assert exit_info.value.code == 2
    assert "cluster: letters, digits" in capsys.readouterr().err


def test_pod_subnets_are_discovered_by_tag_unless_the_context_names_them() -> None:
    # Issue 24: discovery by the VPC CNI's tags is the default; a list or a tag names the subnets.
    base = {k: v for k, v in GOOD.items() if k not in ("subnet_ids", "subnet_tag")}
    assert config_from_context(base).discovers_subnets
    assert config_from_context({**base, "subnet_discovery": "true"}).discovers_subnets
    assert not config_from_context({**base, "subnet_ids": "subnet-0123456789abcdef0"}).discovers_subnets
    assert not config_from_context({**base, "subnet_tag": "warmpool.io/pods=true"}).discovers_subnets


def test_fair_sharing_context_defaults_and_values() -> None:
    cfg = config_from_context(GOOD)
    assert cfg.scarce_free == 64 and cfg.lean_hold_s is None
    assert cfg.agent_env_from_context() == {"WARMPOOL_MULTI_CARD": "false"}  # the agents' own default
    assert config_from_context({**GOOD, "scarce_free": "0"}).scarce_free == 0  # off


# --- prefix reservations (issue 24) -------------------------------------------------

SUBNET_A, SUBNET_B = "subnet-0123456789abcdef0", "subnet-0123456789abcdef1"


def test_prefix_reservations_are_read_from_pairs_or_json() -> None:
    pairs = config_from_context(
        {
            **GOOD,
            "subnet_ids": f"{SUBNET_A},{SUBNET_B}",
            "prefix_reservations": f"{SUBNET_A}=10.0.32.0/24, {SUBNET_B}=10.0.48.0/28",
        }
    )
    as_json = config_from_context(
        {
            **GOOD,
            "subnet_ids": f"{SUBNET_A},{SUBNET_B}",
            "prefix_reservations": json.dumps(
                [{"subnet_id": SUBNET_A, "cidr": "10.0.32.0/24"}, {"subnet_id": SUBNET_B, "cidr": "10.0.48.0/28"}]
            ),
        }
    )
    assert pairs.prefix_reservations == as_json.prefix_reservations
    assert [(r.subnet_id, r.cidr) for r in pairs.prefix_reservations] == [
        (SUBNET_A, "10.0.32.0/24"),
        (SUBNET_B, "10.0.48.0/28"),
    ]
    assert config_from_context(GOOD).prefix_reservations == ()


def test_a_prefix_reservation_is_written_as_ec2_reads_it_back() -> None:
    # CloudFormation's Cidr is create-only: a netmask spelling would differ from what EC2 returns.
    cfg = config_from_context({**GOOD, "prefix_reservations": f"{SUBNET_A}=10.0.32.0/255.255.255.0"})
    assert cfg.prefix_reservations[0].cidr == "10.0.32.0/24"


def test_prefix_reservations_in_subnets_found_by_tag_are_not_checked_at_synth() -> None:
    # By tag or by discovery the stack does not know its subnets at synth: any subnet id is taken.
    for subnets in ({"subnet_tag": "warmpool.io/pods=true"}, {"subnet_discovery": "true"}):
        cfg = config_from_context(
            {**GOOD, "subnet_ids": None, **subnets, "prefix_reservations": "subnet-0fedcba9876543210=10.1.0.0/20"}
        )
        assert cfg.prefix_reservations[0].subnet_id == "subnet-0fedcba9876543210"


def test_a_prefix_reservation_in_a_custom_network_subnet_is_in_a_pod_subnet() -> None:
    custom = json.dumps({"eu-west-1a": {"subnets": [SUBNET_B]}})
    cfg = config_from_context({**GOOD, "custom_network": custom, "prefix_reservations": f"{SUBNET_B}=100.64.0.0/20"})
    assert cfg.prefix_reservations[0].subnet_id == SUBNET_B


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (f"{SUBNET_A}=fd00:1::/64", "prefix_reservations.0.cidr: 'fd00:1::/64' is not an IPv4 CIDR"),
        (f"{SUBNET_A}=10.0.32.300/24", "prefix_reservations.0.cidr: '10.0.32.300/24' is not an IPv4 CIDR"),
        (f"{SUBNET_A}=10.0.32.0", "prefix_reservations.0.cidr: '10.0.32.0' has no prefix length"),
        (
            f"{SUBNET_A}=10.0.32.16/24",
            "prefix_reservations.0.cidr: '10.0.32.16/24' is not a network address: host bits are set "
            "(the network is 10.0.32.0/24)",
        ),
        (f"{SUBNET_A}=10.0.32.0/29", "prefix_reservations.0.cidr: 10.0.32.0/29 is narrower than a /28"),
        (f"{SUBNET_A}=10.0.32.0/32", "prefix_reservations.0.cidr: 10.0.32.0/32 is narrower than a /28"),
        ("subnet-12=10.0.32.0/24", "prefix_reservations.0.subnet_id: not a subnet id: 'subnet-12'"),
        ("subnet-0123456789ABCDEF0=10.0.32.0/24", "prefix_reservations.0.subnet_id: not a subnet id"),
        ("sg-0123456789abcdef0=10.0.32.0/24", "prefix_reservations.0.subnet_id: not a subnet id"),
        (SUBNET_A, f"prefix_reservations: '{SUBNET_A}' is not SUBNET=CIDR"),
        (f"{SUBNET_A}=10.0.32.0/24=x", "is not SUBNET=CIDR"),
        (
            "subnet-0123456789abcdef9=10.0.32.0/24",
            "prefix_reservations: subnet-0123456789abcdef9 not among the stack's pod subnets",
        ),
        (
            f"{SUBNET_A}=10.0.32.0/24,{SUBNET_A}=10.0.32.0/24",
            f"prefix_reservations: lists {SUBNET_A}=10.0.32.0/24 twice",
        ),
        (
            f"{SUBNET_A}=10.0.32.0/24,{SUBNET_A}=10.0.32.128/25",
            f"prefix_reservations: {SUBNET_A}=10.0.32.0/24 overlaps {SUBNET_A}=10.0.32.128/25",
        ),
        # Subnets of a VPC never overlap: the same range in two of them is outside one of them.
        (
            f"{SUBNET_A}=10.0.32.0/28,{SUBNET_B}=10.0.32.0/28",
            f"prefix_reservations: {SUBNET_A}=10.0.32.0/28 overlaps {SUBNET_B}=10.0.32.0/28",
        ),
        (json.dumps([{"subnet_id": SUBNET_A}]), "prefix_reservations.0.cidr: required"),
        (
            json.dumps([{"subnet_id": SUBNET_A, "cidr": "10.0.32.0/24", "type": "explicit"}]),
            "prefix_reservations.0.type",
        ),
    ],
)
def test_bad_prefix_reservations_are_refused_with_the_key_named(value: str, message: str) -> None:
    text = problems(subnet_ids=f"{SUBNET_A},{SUBNET_B}", prefix_reservations=value)
    assert message in text, text


def test_a_missing_field_inside_a_value_is_not_told_to_be_passed_with_c() -> None:
    text = problems(prefix_reservations=json.dumps([{"cidr": "10.0.32.0/24"}]))
    assert "prefix_reservations.0.subnet_id: required" in text and "pass -c prefix_reservations.0" not in text
