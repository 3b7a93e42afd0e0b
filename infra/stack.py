"""One cluster's warmpool: queues, tables, functions, IAM, dashboard, alarms, outputs.

This module only assembles constructs; the decisions live in ``config`` (what is
allowed), ``policies`` (who may do what) and ``observability`` (what is watched).
"""

from __future__ import annotations

import re

from aws_cdk import Aws, CfnCondition, CfnOutput, Duration, Fn, RemovalPolicy, Stack, Token
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks as eks
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_lambda_event_sources as sources
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subscriptions
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from infra import nag, policies
from infra.asset import stage_lambda_code
from infra.config import StackConfig
from infra.install import NodeInstall
from infra.observability import Observability
from infra.outputs import OUTPUTS
from warmpool import names

POWERTOOLS_ACCOUNT = "017000801446"


def powertools_layer_arn(python_version: str, layer_version: int) -> str:
    """The public Powertools for AWS Lambda (Python) v3 layer, arm64, in the stack's own region."""
    runtime = "python" + python_version.replace(".", "")
    return (
        f"arn:{Aws.PARTITION}:lambda:{Aws.REGION}:{POWERTOOLS_ACCOUNT}:layer:"
        f"AWSLambdaPowertoolsPythonV3-{runtime}-arm64:{layer_version}"
    )


def reservation_id(subnet_id: str, cidr: str) -> str:
    """A prefix reservation's construct id, from what it reserves (not its place in the list), so
    reordering ``prefix_reservations`` replaces nothing: ``PrefixReservation<subnet hex><cidr>``."""
    return "PrefixReservation" + subnet_id.removeprefix("subnet-") + re.sub(r"[./]", "x", cidr)


RETENTION = {
    1: logs.RetentionDays.ONE_DAY,
    3: logs.RetentionDays.THREE_DAYS,
    7: logs.RetentionDays.ONE_WEEK,
    14: logs.RetentionDays.TWO_WEEKS,
    30: logs.RetentionDays.ONE_MONTH,
    90: logs.RetentionDays.THREE_MONTHS,
    180: logs.RetentionDays.SIX_MONTHS,
    365: logs.RetentionDays.ONE_YEAR,
}
RUNTIMES = {"3.12": lambda_.Runtime.PYTHON_3_12, "3.13": lambda_.Runtime.PYTHON_3_13}


class WarmpoolStack(Stack):
    def __init__(self, scope: Construct, construct_id: str, *, config: StackConfig, **kwargs: object) -> None:
        super().__init__(scope, construct_id, **kwargs)  # type: ignore[arg-type]
        cfg = config
        self.config = cfg
        arns = policies.Arns(partition=Aws.PARTITION, region=Aws.REGION, account=Aws.ACCOUNT_ID)

        # --- queues -----------------------------------------------------------------
        self.dlq = sqs.Queue(
            self,
            "ReportsDlq",
            queue_name=names.reports_dlq(cfg.cluster),
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            enforce_ssl=True,
            retention_period=Duration.days(14),
        )
        self.reports = sqs.Queue(
            self,
            "Reports",
            queue_name=names.reports_queue(cfg.cluster),
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            enforce_ssl=True,
            visibility_timeout=Duration.seconds(cfg.visibility_timeout_s),
            retention_period=Duration.hours(1),
            dead_letter_queue=sqs.DeadLetterQueue(queue=self.dlq, max_receive_count=5),
        )

        # --- tables -----------------------------------------------------------------
        self.ledger = dynamodb.Table(
            self,
            "Ledger",
            table_name=names.ledger_table(cfg.cluster),
            partition_key=dynamodb.Attribute(name=names.LEDGER_PK, type=dynamodb.AttributeType.STRING),
            sort_key=dynamodb.Attribute(name=names.LEDGER_SK, type=dynamodb.AttributeType.STRING),
            time_to_live_attribute=names.LEDGER_TTL,
            billing_mode=dynamodb.BillingMode.PAY_PER_REQUEST,
            point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(
                point_in_time_recovery_enabled=True
            ),
            # EC2 is the truth: the ledger rebuilds itself, so uninstall removes it.
            removal_policy=RemovalPolicy.DESTROY,
        )
        self.buckets: dynamodb.ITable
        if cfg.create_buckets_table:
            self.buckets = dynamodb.Table(
                self,
                "TokenBuckets",
                table_name=names.BUCKETS_TABLE,
                partition_key=dynamodb.Attribute(name=names.BUCKETS_PK, type=dynamodb.AttributeType.STRING),
                billing_mode=dynamodb.BillingMode.PAY_PER_REQUEST,
                point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(
                    point_in_time_recovery_enabled=True
                ),
                # Shared by every cluster of the account and region: never removed with one stack.
                removal_policy=RemovalPolicy.RETAIN,
            )
        else:
            self.buckets = dynamodb.Table.from_table_name(self, "TokenBuckets", names.BUCKETS_TABLE)

        # --- prefix reservations (-c prefix_reservations=SUBNET=CIDR,...) ------------------
        self.prefix_reservations = [
            ec2.CfnSubnetCidrReservation(
                self,
                reservation_id(r.subnet_id, r.cidr),
                subnet_id=r.subnet_id,
                cidr=r.cidr,
                reservation_type="prefix",
                description=f"warmpool {cfg.cluster}: /28 prefixes for pod ENIs",
            )
            for r in cfg.prefix_reservations
        ]

        # --- functions --------------------------------------------------------------
        code = lambda_.Code.from_asset(str(stage_lambda_code()))
        layer = lambda_.LayerVersion.from_layer_version_arn(
            self, "Powertools", powertools_layer_arn(cfg.python_version, cfg.powertools_layer_version)
        )
        environment = {
            names.ENV_CLUSTER: cfg.cluster,
            names.ENV_REPORTS_QUEUE_URL: self.reports.queue_url,
            names.ENV_DLQ_URL: self.dlq.queue_url,
            names.ENV_RESULT_QUEUE_PREFIX: names.result_queue_prefix(cfg.cluster),
            names.ENV_LEDGER_TABLE: self.ledger.table_name,
            names.ENV_BUCKETS_TABLE: names.BUCKETS_TABLE,
            names.ENV_BUDGET_FRACTION: str(cfg.budget_fraction),
            names.ENV_ALLOWED_SUBNETS: ",".join(cfg.subnet_ids),
            names.ENV_SUBNET_DISCOVERY: "true" if cfg.discovers_subnets else "false",
            names.ENV_SUBNET_TAG: cfg.subnet_tag or "",
            names.ENV_SECURITY_GROUPS: ",".join(cfg.security_group_ids),
            names.ENV_CUSTOM_NETWORK: cfg.custom_network_env(),
            names.ENV_IDENTITY_MODE: cfg.identity_mode,
            names.ENV_GC_AGE_S: str(cfg.gc_age_s),
            names.ENV_MAX_PODS: str(cfg.max_pods),
            names.ENV_NAMED_PLACEMENT: "true" if cfg.named_placement else "false",
            names.ENV_MULTI_CARD: "true" if cfg.multi_card else "false",
            names.ENV_SCARCE_FREE: str(cfg.scarce_free),
            names.ENV_IDENTITY_CERTIFICATES: self._identity_certificates(),
            "WARMPOOL_ACCOUNT": Aws.ACCOUNT_ID,
            "POWERTOOLS_METRICS_NAMESPACE": names.METRICS_NAMESPACE,
            # The allocator derives its lease TTL from this (a lease must outlive the invocation).
            names.ENV_ALLOCATE_TIMEOUT_S: str(cfg.allocate_timeout_s),
        }
        self.allocate = self._function(
            "Allocate",
            handler=names.ALLOCATE_HANDLER,
            timeout_s=cfg.allocate_timeout_s,
            memory_mb=cfg.allocate_memory_mb,
            code=code,
            layer=layer,
            environment=environment,
        )
        self.reconcile = self._function(
            "Reconcile",
            handler=names.RECONCILE_HANDLER,
            timeout_s=cfg.reconcile_timeout_s,
            memory_mb=256,
            code=code,
            layer=layer,
            environment=environment,
        )
        self.allocate.add_event_source(
            sources.SqsEventSource(
                self.reports,
                batch_size=cfg.batch_size,
                max_batching_window=Duration.seconds(cfg.batching_window_s) if cfg.batching_window_s else None,
                max_concurrency=cfg.max_concurrency,
                report_batch_item_failures=True,
            )
        )
        self.schedule = events.Rule(
            self,
            "ReconcileSchedule",
            description=f"warmpool reconcile for cluster {cfg.cluster}",
            schedule=events.Schedule.rate(Duration.minutes(cfg.reconcile_every_min)),
            targets=[
                targets.LambdaFunction(
                    self.reconcile, retry_attempts=0, max_event_age=Duration.minutes(cfg.reconcile_every_min)
                )
            ],
        )

        # --- function permissions -----------------------------------------------------
        for statement in policies.allocator_ec2(cfg, arns):
            self.allocate.add_to_role_policy(statement)
        for statement in policies.allocator_result_queues(cfg, arns):
            self.allocate.add_to_role_policy(statement)
        self.reports.grant_send_messages(self.allocate)  # deferrals are re-sent with a delay
        self.dlq.grant_send_messages(self.allocate)  # invalid reports go to the DLQ at once
        for statement in policies.reconciler_ec2(cfg, arns):
            self.reconcile.add_to_role_policy(statement)
        for statement in policies.reconciler_result_queues(cfg, arns):
            self.reconcile.add_to_role_policy(statement)
        for fn in (self.allocate, self.reconcile):
            self.ledger.grant_read_write_data(fn)
            self.buckets.grant_read_write_data(fn)

        # --- agent identity -----------------------------------------------------------
        self.agent_policy = iam.ManagedPolicy(
            self,
            "AgentPolicy",
            description=f"warmpool agent of cluster {cfg.cluster}: send reports, own its result queue",
            statements=policies.agent(cfg, arns, self.reports.queue_arn),
        )
        self.agent_role: iam.IRole
        if cfg.agent_identity == "node-role":
            assert cfg.node_role_name is not None
            self.agent_role = iam.Role.from_role_name(self, "NodeRole", cfg.node_role_name)
            self.agent_policy.attach_to_role(self.agent_role)
        else:
            if cfg.agent_identity == "pod-identity":
                assumed_by: iam.IPrincipal = policies.pod_identity_principal(cfg, Aws.ACCOUNT_ID)
            else:
                assumed_by = policies.irsa_principal(cfg)
            role = iam.Role(
                self,
                "AgentRole",
                assumed_by=assumed_by,
                description=f"warmpool agent of cluster {cfg.cluster} ({cfg.agent_identity})",
                managed_policies=[self.agent_policy],
                max_session_duration=Duration.hours(1),
            )
            if cfg.agent_identity == "pod-identity" and cfg.create_pod_identity_association:
                eks.CfnPodIdentityAssociation(
                    self,
                    "AgentPodIdentity",
                    cluster_name=cfg.pod_identity_cluster,
                    namespace=cfg.agent_namespace,
                    service_account=cfg.agent_service_account,
                    role_arn=role.role_arn,
                )
            self.agent_role = role

        # --- alarms and dashboard ---------------------------------------------------------
        topic_key = kms.Key(
            self,
            "AlarmTopicKey",
            description=f"warmpool alarm topic of cluster {cfg.cluster}",
            enable_key_rotation=True,
            removal_policy=RemovalPolicy.DESTROY,
            pending_window=Duration.days(7),
        )
        topic_key.add_to_resource_policy(
            iam.PolicyStatement(
                sid="CloudWatchAlarmsPublish",
                actions=["kms:Decrypt", "kms:GenerateDataKey*"],
                principals=[iam.ServicePrincipal("cloudwatch.amazonaws.com")],
                resources=["*"],
                conditions={"StringEquals": {"aws:SourceAccount": Aws.ACCOUNT_ID}},
            )
        )
        self.topic = sns.Topic(
            self,
            "AlarmTopic",
            display_name=f"warmpool {cfg.cluster} alarms",
            master_key=topic_key,
            enforce_ssl=True,
        )
        if cfg.alarm_email:
            self.topic.add_subscription(subscriptions.EmailSubscription(cfg.alarm_email))
        self.observability = Observability(
            self,
            "Observability",
            cluster=cfg.cluster,
            reports=self.reports,
            dlq=self.dlq,
            allocate=self.allocate,
            reconcile=self.reconcile,
            topic=self.topic,
        )

        # --- outputs --------------------------------------------------------------------
        values = {
            "region": Aws.REGION,
            "cluster": cfg.cluster,
            "reports_queue_url": self.reports.queue_url,
            "result_queue_prefix": names.result_queue_prefix(cfg.cluster),
            "ledger_table": self.ledger.table_name,
            "buckets_table": names.BUCKETS_TABLE,
            "dlq_url": self.dlq.queue_url,
            "agent_role_arn": self.agent_role.role_arn,
            "agent_identity": cfg.agent_identity,
            "agent_namespace": cfg.agent_namespace,
            "agent_service_account": cfg.agent_service_account,
            "dashboard_name": self.observability.dashboard_name,
            "alarm_topic_arn": self.topic.topic_arn,
        }
        assert values.keys() == OUTPUTS.keys()
        for key, output_id in OUTPUTS.items():
            CfnOutput(self, output_id, value=values[key], description=key)

        # --- the node half, into an existing EKS cluster (-c eks_cluster=NAME) --------------
        self.install: NodeInstall | None = None
        if cfg.eks_cluster is not None:
            self.install = NodeInstall(
                self,
                "NodeInstall",
                config=cfg,
                reports_queue_url=self.reports.queue_url,
                result_queue_prefix=names.result_queue_prefix(cfg.cluster),
                agent_role=self.agent_role,
            )

        self._acknowledge_nag_findings()

    def _identity_certificates(self) -> str:
        """The PEM the functions verify identity documents with, for the region the
        stack lands in: picked at synth when the region is known, else by a
        condition on ``AWS::Region`` per overridden region."""
        cfg = self.config
        if not Token.is_unresolved(self.region):
            return cfg.identity_certificate_for(self.region)
        value: str = cfg.identity_certificate
        for region, pem in reversed(sorted(cfg.identity_certificates_by_region.items())):
            condition = CfnCondition(
                self,
                "IdentityCertificateIn" + "".join(part.capitalize() for part in region.split("-")),
                expression=Fn.condition_equals(Aws.REGION, region),
            )
            value = Token.as_string(Fn.condition_if(condition.logical_id, pem, value))
        return value

    def _function(
        self,
        construct_id: str,
        *,
        handler: str,
        timeout_s: int,
        memory_mb: int,
        code: lambda_.Code,
        layer: lambda_.ILayerVersion,
        environment: dict[str, str],
    ) -> lambda_.Function:
        """A function with its own role and log group (no AWS managed policy, bounded retention)."""
        cfg = self.config
        log_group = logs.LogGroup(
            self,
            f"{construct_id}Logs",
            retention=RETENTION[cfg.log_retention_days],
            removal_policy=RemovalPolicy.DESTROY,
        )
        role = iam.Role(
            self,
            f"{construct_id}Role",
            assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
            description=f"warmpool {construct_id.lower()} function of cluster {cfg.cluster}",
        )
        role.add_to_policy(
            iam.PolicyStatement(
                sid="WriteOwnLogs",
                actions=["logs:CreateLogStream", "logs:PutLogEvents"],
                resources=[log_group.log_group_arn],
            )
        )
        function = lambda_.Function(
            self,
            construct_id,
            description=f"warmpool {construct_id.lower()} for cluster {cfg.cluster}",
            runtime=RUNTIMES[cfg.python_version],
            architecture=lambda_.Architecture.ARM_64,
            handler=handler,
            code=code,
            layers=[layer],
            timeout=Duration.seconds(timeout_s),
            memory_size=memory_mb,
            environment=environment,
            role=role,
            log_group=log_group,
            logging_format=lambda_.LoggingFormat.JSON,
        )
        # The role is already a dependency through Fn::GetAtt; an explicit DependsOn on it
        # as well is what cfn-lint's W3005 reports.
        cfn_function = function.node.default_child
        assert isinstance(cfn_function, lambda_.CfnFunction)
        default_policy = role.node.find_child("DefaultPolicy").node.default_child
        assert isinstance(default_policy, iam.CfnPolicy)
        cfn_function.add_override("DependsOn", [self.get_logical_id(default_policy)])
        return function

    def _acknowledge_nag_findings(self) -> None:
        """Every cdk-nag finding this stack keeps on purpose, each with its reason."""
        cfg = self.config
        self.nag_acknowledgements = nag.acknowledgements(
            cfg.cluster,
            wildcard_groups=not cfg.security_group_ids,
            tagged_subnets=not cfg.subnet_ids,
        )
        for child in self.node.children:
            if child.node.id.endswith("-KubectlProvider"):  # with eks_cluster: CDK's handler, in a nested stack
                self.nag_acknowledgements += nag.kubectl_provider_acknowledgements(child.node.id)
        nag.acknowledge(self, self.nag_acknowledgements)


__all__ = ["WarmpoolStack", "powertools_layer_arn", "reservation_id"]
