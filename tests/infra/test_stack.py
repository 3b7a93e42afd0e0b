"""Every resource of the stack and the settings that matter, read from the synthesized template."""

from __future__ import annotations

from typing import Any

import pytest
from cfnlint.api import ManualArgs, lint_file

from infra.outputs import OUTPUTS
from tests.helpers.cdk_synth import Synthesized, _synth
from warmpool import names


def _queue(s: Synthesized, name: str) -> dict[str, Any]:
    return s.one("AWS::SQS::Queue", lambda r: r["Properties"]["QueueName"] == name)["Properties"]


def _queue_id(s: Synthesized, name: str) -> str:
    return s.logical_id("AWS::SQS::Queue", lambda r: r["Properties"]["QueueName"] == name)


def _function(s: Synthesized, handler: str) -> dict[str, Any]:
    return s.one("AWS::Lambda::Function", lambda r: r["Properties"]["Handler"] == handler)["Properties"]


def _function_id(s: Synthesized, handler: str) -> str:
    return s.logical_id("AWS::Lambda::Function", lambda r: r["Properties"]["Handler"] == handler)


# --- queues ----------------------------------------------------------------------


def test_reports_queue_is_encrypted_with_a_dlq_after_five_receives(default: Synthesized) -> None:
    reports = _queue(default, names.reports_queue("demo"))
    dlq_id = _queue_id(default, names.reports_dlq("demo"))
    assert reports["SqsManagedSseEnabled"] is True
    assert reports["RedrivePolicy"] == {"deadLetterTargetArn": "${" + dlq_id + ".Arn}", "maxReceiveCount": 5}
    assert _queue(default, names.reports_dlq("demo"))["SqsManagedSseEnabled"] is True
    assert _queue(default, names.reports_dlq("demo"))["MessageRetentionPeriod"] == 14 * 86400


def test_visibility_timeout_is_six_allocate_timeouts(synthesized: dict[str, Synthesized]) -> None:
    for s, timeout in ((synthesized["default"], 30), (synthesized["irsa"], 60)):
        cluster = s.resolved["Outputs"]["Cluster"]["Value"]
        assert _queue(s, names.reports_queue(cluster))["VisibilityTimeout"] == 6 * timeout
        assert _function(s, names.ALLOCATE_HANDLER)["Timeout"] == timeout


def test_queues_refuse_unencrypted_transport(default: Synthesized) -> None:
    policies = default.resources("AWS::SQS::QueuePolicy")
    assert len(policies) == 2
    for policy in policies.values():
        (statement,) = policy["Properties"]["PolicyDocument"]["Statement"]
        assert statement["Effect"] == "Deny"
        assert statement["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}


def test_event_source_mapping_batches_and_reports_item_failures(synthesized: dict[str, Synthesized]) -> None:
    default = synthesized["default"]
    esm = default.one("AWS::Lambda::EventSourceMapping")["Properties"]
    assert esm["EventSourceArn"] == "${" + _queue_id(default, names.reports_queue("demo")) + ".Arn}"
    assert esm["FunctionName"] == "${" + _function_id(default, names.ALLOCATE_HANDLER) + "}"
    assert esm["BatchSize"] == 100
    assert esm["MaximumBatchingWindowInSeconds"] == 1
    assert esm["ScalingConfig"] == {"MaximumConcurrency": 5}
    assert esm["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    small = synthesized["irsa"].one("AWS::Lambda::EventSourceMapping")["Properties"]
    assert small["BatchSize"] == 10 and "MaximumBatchingWindowInSeconds" not in small
    assert small["ScalingConfig"] == {"MaximumConcurrency": 2}


# --- functions -------------------------------------------------------------------


def test_functions_are_arm64_python_with_the_powertools_layer(default: Synthesized) -> None:
    for handler in (names.ALLOCATE_HANDLER, names.RECONCILE_HANDLER):
        fn = _function(default, handler)
        assert fn["Architectures"] == ["arm64"]
        assert fn["Runtime"] == "python3.13"
        assert fn["LoggingConfig"]["LogFormat"] == "JSON"
        assert fn["Layers"] == [
            "arn:${AWS::Partition}:lambda:${AWS::Region}:017000801446:layer:"
            "AWSLambdaPowertoolsPythonV3-python313-arm64:27"
        ]
        assert fn["Code"]["S3Key"].endswith(".zip")


def test_function_environment_uses_the_shared_names(synthesized: dict[str, Synthesized]) -> None:
    default = synthesized["default"]
    env = _function(default, names.ALLOCATE_HANDLER)["Environment"]["Variables"]
    assert env[names.ENV_CLUSTER] == "demo"
    assert env[names.ENV_REPORTS_QUEUE_URL] == "${" + _queue_id(default, names.reports_queue("demo")) + "}"
    assert env[names.ENV_DLQ_URL] == "${" + _queue_id(default, names.reports_dlq("demo")) + "}"
    assert env[names.ENV_RESULT_QUEUE_PREFIX] == "warmpool-demo-result-"
    assert env[names.ENV_BUCKETS_TABLE] == names.BUCKETS_TABLE
    assert env[names.ENV_BUDGET_FRACTION] == "0.8"
    assert env[names.ENV_ALLOWED_SUBNETS] == "subnet-0123456789abcdef0,subnet-0123456789abcdef1"
    assert env[names.ENV_SECURITY_GROUPS] == ""
    assert env[names.ENV_IDENTITY_MODE] == "none"
    assert env[names.ENV_GC_AGE_S] == "300"
    assert env[names.ENV_MAX_PODS] == "0"  # the VPC CNI formula per type (issue 12, finding D)
    assert env[names.ENV_NAMED_PLACEMENT] == "false"  # off unless the stack is told (issue 24)
    # The lease TTL is derived from the function timeout, which the allocator must know.
    assert env["WARMPOOL_ALLOCATE_TIMEOUT_S"] == str(_function(default, names.ALLOCATE_HANDLER)["Timeout"])
    assert env["WARMPOOL_ACCOUNT"] == "${AWS::AccountId}"
    assert env["POWERTOOLS_METRICS_NAMESPACE"] == names.METRICS_NAMESPACE
    assert names.ENV_ENDPOINT_URL not in env  # local stack only
    assert _function(default, names.RECONCILE_HANDLER)["Environment"]["Variables"] == env
    sender = _function(synthesized["node_role"], names.ALLOCATE_HANDLER)["Environment"]["Variables"]
    assert sender[names.ENV_IDENTITY_MODE] == "sender-id"
    groups = _function(synthesized["irsa"], names.ALLOCATE_HANDLER)["Environment"]["Variables"]
    assert groups[names.ENV_SECURITY_GROUPS] == "sg-0123456789abcdef0" and groups[names.ENV_ALLOWED_SUBNETS] == ""


def test_functions_log_to_their_own_groups_with_retention(default: Synthesized) -> None:
    groups = default.resources("AWS::Logs::LogGroup")
    assert len(groups) == 2
    assert all(g["Properties"]["RetentionInDays"] == 30 for g in groups.values())
    for handler in (names.ALLOCATE_HANDLER, names.RECONCILE_HANDLER):
        group_ref = _function(default, handler)["LoggingConfig"]["LogGroup"]
        assert group_ref.removeprefix("${").removesuffix("}") in groups


def test_reconcile_runs_on_a_schedule(default: Synthesized) -> None:
    rule = default.one("AWS::Events::Rule")["Properties"]
    assert rule["ScheduleExpression"] == "rate(1 minute)"
    assert rule["State"] == "ENABLED"
    (target,) = rule["Targets"]
    assert target["Arn"] == "${" + _function_id(default, names.RECONCILE_HANDLER) + ".Arn}"
    assert target["RetryPolicy"]["MaximumRetryAttempts"] == 0
    permission = default.one("AWS::Lambda::Permission")["Properties"]
    assert permission["Principal"] == "events.amazonaws.com"


# --- tables ----------------------------------------------------------------------


def test_ledger_table_keys_ttl_and_point_in_time_recovery(default: Synthesized) -> None:
    ledger = default.one("AWS::DynamoDB::Table", lambda r: r["Properties"]["TableName"] == "warmpool-demo-ledger")
    props = ledger["Properties"]
    assert props["KeySchema"] == [
        {"AttributeName": names.LEDGER_PK, "KeyType": "HASH"},
        {"AttributeName": names.LEDGER_SK, "KeyType": "RANGE"},
    ]
    assert {"AttributeName": names.LEDGER_SK, "AttributeType": "S"} in props["AttributeDefinitions"]
    assert props["TimeToLiveSpecification"] == {"AttributeName": names.LEDGER_TTL, "Enabled": True}
    assert props["PointInTimeRecoverySpecification"] == {"PointInTimeRecoveryEnabled": True}
    assert props["BillingMode"] == "PAY_PER_REQUEST"
    assert ledger["DeletionPolicy"] == "Delete"


def test_first_stack_creates_the_shared_buckets_table_and_keeps_it(default: Synthesized) -> None:
    table = default.one("AWS::DynamoDB::Table", lambda r: r["Properties"]["TableName"] == names.BUCKETS_TABLE)
    assert table["Properties"]["KeySchema"] == [{"AttributeName": names.BUCKETS_PK, "KeyType": "HASH"}]
    assert table["Properties"]["PointInTimeRecoverySpecification"] == {"PointInTimeRecoveryEnabled": True}
    assert table["DeletionPolicy"] == "Retain" and table["UpdateReplacePolicy"] == "Retain"


def test_later_stacks_import_the_buckets_table_by_name(synthesized: dict[str, Synthesized]) -> None:
    s = synthesized["irsa"]
    tables = [r["Properties"]["TableName"] for r in s.resources("AWS::DynamoDB::Table").values()]
    assert tables == ["warmpool-second-ledger"]
    arn = f"arn:${{AWS::Partition}}:dynamodb:${{AWS::Region}}:${{AWS::AccountId}}:table/{names.BUCKETS_TABLE}"
    granted = [
        st
        for _, st in s.statements()
        if arn in (st["Resource"] if isinstance(st["Resource"], list) else [st["Resource"]])
    ]
    assert len(granted) == 2  # allocate and reconcile
    assert all("dynamodb:UpdateItem" in st["Action"] for st in granted)


# --- outputs ---------------------------------------------------------------------


def test_outputs_hold_everything_agents_and_local_up_share(default: Synthesized) -> None:
    outputs = default.resolved["Outputs"]
    assert set(OUTPUTS.values()) <= set(outputs)
    assert outputs["Region"]["Value"] == "${AWS::Region}"
    assert outputs["Cluster"]["Value"] == "demo"
    assert outputs["ResultQueuePrefix"]["Value"] == names.result_queue_prefix("demo")
    assert outputs["BucketsTable"]["Value"] == names.BUCKETS_TABLE
    assert outputs["ReportsQueueUrl"]["Value"] == "${" + _queue_id(default, names.reports_queue("demo")) + "}"
    assert outputs["DlqUrl"]["Value"] == "${" + _queue_id(default, names.reports_dlq("demo")) + "}"
    assert outputs["DashboardName"]["Value"] == "warmpool-demo"
    assert outputs["AgentIdentity"]["Value"] == "pod-identity"
    # the snake_case keys match what `warmpool local up` prints
    assert {
        "region",
        "cluster",
        "reports_queue_url",
        "result_queue_prefix",
        "ledger_table",
        "buckets_table",
    } <= set(OUTPUTS)


def test_resource_inventory(default: Synthesized) -> None:
    counts: dict[str, int] = {}
    for res in default.resolved["Resources"].values():
        counts[res["Type"]] = counts.get(res["Type"], 0) + 1
    assert counts == {
        "AWS::SQS::Queue": 2,
        "AWS::SQS::QueuePolicy": 2,
        "AWS::DynamoDB::Table": 2,
        "AWS::Logs::LogGroup": 2,
        "AWS::IAM::Role": 3,
        "AWS::IAM::Policy": 2,
        "AWS::IAM::ManagedPolicy": 1,
        "AWS::Lambda::Function": 2,
        "AWS::Lambda::EventSourceMapping": 1,
        "AWS::Lambda::Permission": 1,
        "AWS::Events::Rule": 1,
        "AWS::EKS::PodIdentityAssociation": 1,
        "AWS::KMS::Key": 1,
        "AWS::SNS::Topic": 1,
        "AWS::SNS::TopicPolicy": 1,
        "AWS::CloudWatch::Dashboard": 1,
        "AWS::CloudWatch::Alarm": 5,
    }


def test_named_placement_is_the_stacks_to_turn_on(synthesized: dict[str, Synthesized]) -> None:
    """Issue 24: ``-c named_placement=true`` names the addresses and /28s of every EC2 call
    (functions/settings.py::Settings.named_placement), in both functions; off by default."""
    on = synthesized["discovery"]
    env = _function(on, names.ALLOCATE_HANDLER)["Environment"]["Variables"]
    assert env[names.ENV_NAMED_PLACEMENT] == "true"
    assert _function(on, names.RECONCILE_HANDLER)["Environment"]["Variables"][names.ENV_NAMED_PLACEMENT] == "true"
    from functions.settings import Settings

    assert Settings.model_validate({**env, names.ENV_CLUSTER: "disc"}).named_placement is True
    for variant in ("default", "irsa"):
        off = _function(synthesized[variant], names.ALLOCATE_HANDLER)["Environment"]["Variables"]
        assert off[names.ENV_NAMED_PLACEMENT] == "false"


def test_scarce_free_is_the_stacks_to_set(synthesized: dict[str, Synthesized]) -> None:
    """Fair sharing's threshold (issue 24): ``-c scarce_free=N`` is both functions'
    WARMPOOL_SCARCE_FREE; unset, the allocator's default (64) is written out."""
    from functions.settings import Settings

    set_ = synthesized["discovery"]
    env = _function(set_, names.ALLOCATE_HANDLER)["Environment"]["Variables"]
    assert env[names.ENV_SCARCE_FREE] == "16"
    assert _function(set_, names.RECONCILE_HANDLER)["Environment"]["Variables"][names.ENV_SCARCE_FREE] == "16"
    assert Settings.model_validate({**env, names.ENV_CLUSTER: "disc"}).scarce_free == 16
    default = _function(synthesized["default"], names.ALLOCATE_HANDLER)["Environment"]["Variables"]
    assert default[names.ENV_SCARCE_FREE] == str(names.SCARCE_FREE_DEFAULT)


# --- prefix reservations (issue 24) ------------------------------------------------

RESERVATIONS_CONTEXT = {
    # the default stack (BASE_CONTEXT) with a reservation in each of its two listed subnets, in
    # the command line's SUBNET=CIDR form
    "prefix_reservations": "subnet-0123456789abcdef0=10.0.32.0/24, subnet-0123456789abcdef1=10.0.48.0/28",
}
"""Not one of the shared VARIANTS: those are linted for eu-west-1 too, where CloudFormation has no
AWS::EC2::SubnetCidrReservation (test_subnet_cidr_reservations_are_not_in_every_region)."""


@pytest.fixture(scope="module")
def reserved(tmp_path_factory: pytest.TempPathFactory) -> Synthesized:
    return _synth("reservations", RESERVATIONS_CONTEXT, tmp_path_factory.mktemp("cdk-reservations"))


def test_prefix_reservations_are_the_stacks_to_create(reserved: Synthesized, default: Synthesized) -> None:
    """Issue 24: ``-c prefix_reservations=SUBNET=CIDR,...`` makes one AWS::EC2::SubnetCidrReservation
    of type ``prefix`` per entry, keyed by what it reserves; without the key, none."""
    from infra.stack import reservation_id

    made = reserved.resources("AWS::EC2::SubnetCidrReservation")
    assert {k: r["Properties"] for k, r in made.items()} == {
        reservation_id("subnet-0123456789abcdef0", "10.0.32.0/24"): {
            "SubnetId": "subnet-0123456789abcdef0",
            "Cidr": "10.0.32.0/24",
            "ReservationType": "prefix",
            "Description": "warmpool demo: /28 prefixes for pod ENIs",
        },
        reservation_id("subnet-0123456789abcdef1", "10.0.48.0/28"): {
            "SubnetId": "subnet-0123456789abcdef1",
            "Cidr": "10.0.48.0/28",
            "ReservationType": "prefix",
            "Description": "warmpool demo: /28 prefixes for pod ENIs",
        },
    }
    assert all("DependsOn" not in r and "DeletionPolicy" not in r for r in made.values())
    assert default.resources("AWS::EC2::SubnetCidrReservation") == {}


def test_a_reservations_logical_id_follows_what_it_reserves() -> None:
    from infra.stack import reservation_id

    a = reservation_id("subnet-0123456789abcdef0", "10.0.32.0/24")
    assert a == "PrefixReservation0123456789abcdef010x0x32x0x24" and a.isalnum()
    others = {
        reservation_id("subnet-0123456789abcdef0", "10.0.32.0/25"),
        reservation_id("subnet-0123456789abcdef1", "10.0.32.0/24"),
    }
    assert a not in others and len(others) == 2


def test_reservations_need_no_iam_of_the_functions(reserved: Synthesized, default: Synthesized) -> None:
    """CloudFormation makes the reservations with the deploy's credentials; the allocator only reads
    them (``ReadSubnetCidrReservations``, already granted), so its roles are the default stack's."""
    assert reserved.statement("ReadSubnetCidrReservations")["Action"] == "ec2:GetSubnetCidrReservations"
    for role in ("AllocateRole", "ReconcileRole"):
        assert reserved.role_statements(role) == default.role_statements(role)
    assert not any(
        "SubnetCidrReservation" in str(st.get("Action")) and "Get" not in str(st.get("Action"))
        for _, st in reserved.statements()
    )


def test_a_stack_with_reservations_passes_nag_and_cfn_lint_where_the_type_exists(reserved: Synthesized) -> None:
    (report,) = reserved.nag_report["pluginReports"]
    assert report["violations"] == [] and report["conclusion"] == "success"
    matches = lint_file(reserved.template_path, config=ManualArgs(regions=["us-east-1", "us-west-2"]))
    assert [str(m) for m in matches] == []


def test_subnet_cidr_reservations_are_not_in_every_region(reserved: Synthesized) -> None:
    """What docs/deploy.md says about regions: in cfn-lint's copy of CloudFormation's registry the
    type is missing from eu-west-1 (among others), so a deploy there is refused. When this fails,
    CloudFormation has it in more regions: update the docs' sentence."""
    matches = lint_file(reserved.template_path, config=ManualArgs(regions=["eu-west-1"]))
    assert {m.rule.id for m in matches} == {"E3006"} and len(matches) == 2
    assert all("AWS::EC2::SubnetCidrReservation" in m.message for m in matches)
