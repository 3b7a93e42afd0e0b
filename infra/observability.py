"""The CloudWatch dashboard and the alarms, built on the metric names in ``warmpool.names``.

The functions emit EMF metrics into namespace ``warmpool`` with Powertools
(``functions/observability.py``: ``flush``), every one with the ``cluster``
dimension, so two clusters in one account each see their own: the per-action ones
(EC2 calls, throttles, errors) with dimensions exactly ``cluster`` and ``Action``, the
per-reason ones (reports rejected, invalid, dead-lettered) ``cluster`` and
``reason``, ledger drift ``cluster`` and ``kind``, the others ``cluster`` and
Powertools' ``service`` (``allocate`` or ``reconcile``). Graphs use SEARCH on
that dimension set and this cluster, so every series shows up without listing it;
alarms cannot use SEARCH, so they name each action.
"""

from __future__ import annotations

from aws_cdk import Duration
from aws_cdk import aws_cloudwatch as cw
from aws_cdk import aws_cloudwatch_actions as cw_actions
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from warmpool import names

# Every EC2 action the allocator and reconciler call that has its own bucket.
EC2_ACTIONS = (
    "AssignPrivateIpAddresses",
    "UnassignPrivateIpAddresses",
    "CreateNetworkInterface",
    "DeleteNetworkInterface",
    "AttachNetworkInterface",
    "DetachNetworkInterface",
    "ModifyNetworkInterfaceAttribute",
    "CreateTags",
    "DescribeNetworkInterfaces",
    "DescribeInstances",
)
OLDEST_MESSAGE_ALARM_S = 300
PERIOD = Duration.minutes(1)


class Observability(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster: str,
        reports: sqs.IQueue,
        dlq: sqs.IQueue,
        allocate: lambda_.IFunction,
        reconcile: lambda_.IFunction,
        topic: sns.ITopic,
    ) -> None:
        super().__init__(scope, construct_id)
        self.cluster = cluster
        self.dashboard_name = f"warmpool-{cluster}"
        self.alarms: list[cw.Alarm] = []

        self.dashboard = cw.Dashboard(
            self,
            "Dashboard",
            dashboard_name=self.dashboard_name,
            default_interval=Duration.hours(3),
        )
        self.dashboard.add_widgets(
            cw.TextWidget(
                markdown=f"# warmpool — cluster `{cluster}`\nEC2 calls and throttles are per action; "
                "tokens are the shared account-wide buckets as this cluster's allocator sees them.",
                width=24,
                height=2,
            )
        )
        self.dashboard.add_widgets(
            self._graph("EC2 calls per action", self._per_action(names.M_EC2_CALLS, "Sum")),
            self._graph("EC2 throttles per action", self._per_action(names.M_EC2_THROTTLES, "Sum")),
            self._graph("EC2 errors per action", self._per_action(names.M_EC2_ERRORS, "Sum")),
        )
        self.dashboard.add_widgets(
            self._graph(
                "Reports refused per reason",
                [
                    self._by(names.M_REPORTS_REJECTED, "reason", "Sum"),
                    self._by(names.M_REPORTS_INVALID, "reason", "Sum"),
                    self._by(names.M_DLQ_SENT, "reason", "Sum"),
                ],
            ),
            self._graph(
                "Tokens taken and waited for",
                [self._metric(names.M_TOKENS_TAKEN, "Sum")],
                right=[self._metric(names.M_TOKENS_WAITED_S, "Sum", label="waited (s)")],
            ),
            self._graph(
                "Nodes in deficit / deferred / served",
                [
                    self._metric(names.M_NODES_IN_DEFICIT, "Maximum"),
                    self._metric(names.M_NODES_DEFERRED, "Sum"),
                    self._metric(names.M_NODES_SERVED, "Sum"),
                ],
            ),
        )
        self.dashboard.add_widgets(
            self._graph(
                "Allocation latency (ms)",
                [
                    self._metric(names.M_ALLOCATION_LATENCY_MS, "p50", label="p50"),
                    self._metric(names.M_ALLOCATION_LATENCY_MS, "p99", label="p99"),
                ],
            ),
            self._graph(
                "Reports per minute",
                [
                    self._metric(names.M_REPORTS_RECEIVED, "Sum"),
                    self._metric(names.M_REPORTS_COALESCED, "Sum"),
                    self._metric(names.M_REPORTS_STALE, "Sum"),
                    self._metric(names.M_REPORTS_QUIET, "Sum"),
                ],
            ),
            self._graph(
                "Addresses and ENIs",
                [
                    self._metric(names.M_ADDRESSES_ALLOCATED, "Sum"),
                    self._metric(names.M_ADDRESSES_RELEASED, "Sum"),
                    self._metric(names.M_ENIS_CREATED, "Sum"),
                    self._metric(names.M_ENIS_DELETED, "Sum"),
                    self._metric(names.M_GC_DELETIONS, "Sum"),
                    self._by(names.M_LEDGER_DRIFT, "kind", "Maximum"),
                ],
            ),
        )
        self.dashboard.add_widgets(
            self._graph(
                "Reports queue depth / DLQ depth",
                [
                    reports.metric_approximate_number_of_messages_visible(period=PERIOD, label="visible"),
                    reports.metric_approximate_number_of_messages_not_visible(period=PERIOD, label="in flight"),
                    dlq.metric_approximate_number_of_messages_visible(period=PERIOD, label="DLQ"),
                ],
            ),
            self._graph(
                "Age of oldest report (s)",
                [reports.metric_approximate_age_of_oldest_message(period=PERIOD, statistic="Maximum")],
            ),
            self._graph(
                "Function errors and throttles",
                [
                    allocate.metric_errors(period=PERIOD, label="allocate errors"),
                    reconcile.metric_errors(period=PERIOD, label="reconcile errors"),
                    allocate.metric_throttles(period=PERIOD, label="allocate throttles"),
                ],
            ),
        )
        self.dashboard.add_widgets(
            self._graph(
                "Function duration (ms)",
                [
                    allocate.metric_duration(period=PERIOD, statistic="p50", label="allocate p50"),
                    allocate.metric_duration(period=PERIOD, statistic="p99", label="allocate p99"),
                    reconcile.metric_duration(period=PERIOD, statistic="p99", label="reconcile p99"),
                ],
            ),
            self._graph(
                "Function concurrency",
                [
                    allocate.metric("ConcurrentExecutions", period=PERIOD, statistic="Maximum", label="allocate"),
                    reconcile.metric("ConcurrentExecutions", period=PERIOD, statistic="Maximum", label="reconcile"),
                ],
            ),
            # Fair sharing (docs/allocator.md, "Scarce addresses shared fairly"): a zone running low.
            self._graph(
                "Free addresses per subnet",
                [self._by(names.M_SUBNET_FREE, "subnet", "Minimum")],
                right=[self._metric(names.M_SCARCE_SAID, "Sum", label="scarce said")],
            ),
        )

        action = cw_actions.SnsAction(topic)
        self._alarm(
            "DlqNotEmpty",
            dlq.metric_approximate_number_of_messages_visible(period=PERIOD, statistic="Maximum"),
            threshold=0,
            description="Reports reached the DLQ (invalid or repeatedly failing): inspect and redrive.",
            action=action,
        )
        self._alarm(
            "Ec2Throttles",
            cw.MathExpression(
                expression="SUM(METRICS())",
                using_metrics={
                    f"m{i}": self._action_metric(names.M_EC2_THROTTLES, a, "Sum", Duration.minutes(5))
                    for i, a in enumerate(EC2_ACTIONS)
                },
                period=Duration.minutes(5),
                label="EC2 throttles, all actions",
            ),
            threshold=0,
            description="EC2 answered RequestLimitExceeded: the budget is shared with more callers than planned.",
            action=action,
        )
        self._alarm(
            "OldReports",
            reports.metric_approximate_age_of_oldest_message(period=PERIOD, statistic="Maximum"),
            threshold=OLDEST_MESSAGE_ALARM_S,
            evaluation_periods=3,
            description="Reports wait in the queue for more than 5 minutes: the allocator is not keeping up.",
            action=action,
        )
        for fn_id, fn in (("Allocate", allocate), ("Reconcile", reconcile)):
            self._alarm(
                f"{fn_id}Errors",
                fn.metric_errors(period=Duration.minutes(5), statistic="Sum"),
                threshold=0,
                description=f"The {fn_id.lower()} function failed invocations.",
                action=action,
            )

    # --- helpers ------------------------------------------------------------------

    def _metric(self, name: str, statistic: str, *, label: str | None = None) -> cw.IMetric:
        """This cluster's series of one metric, one per function (dimension ``service``)."""
        return self._by(name, "service", statistic, label=label)

    def _by(self, name: str, dimension: str, statistic: str, *, label: str | None = None) -> cw.IMetric:
        """This cluster's series of one metric with dimensions ``cluster`` and ``dimension``."""
        search = (
            f'SEARCH(\'{{{names.METRICS_NAMESPACE},cluster,{dimension}}} MetricName="{name}" '
            f"cluster=\"{self.cluster}\"', '{statistic}', 60)"
        )
        return cw.MathExpression(expression=search, label=label or "", period=PERIOD)

    def _action_metric(self, name: str, action: str, statistic: str, period: Duration) -> cw.Metric:
        return cw.Metric(
            namespace=names.METRICS_NAMESPACE,
            metric_name=name,
            dimensions_map={"cluster": self.cluster, "Action": action},
            statistic=statistic,
            period=period,
        )

    def _per_action(self, name: str, statistic: str) -> list[cw.IMetric]:
        search = (
            f'SEARCH(\'{{{names.METRICS_NAMESPACE},Action,cluster}} MetricName="{name}" '
            f"cluster=\"{self.cluster}\"', '{statistic}', 60)"
        )
        return [cw.MathExpression(expression=search, label="", period=PERIOD)]

    @staticmethod
    def _graph(title: str, left: list[cw.IMetric], right: list[cw.IMetric] | None = None) -> cw.GraphWidget:
        return cw.GraphWidget(title=title, left=left, right=right or [], width=8, height=6)

    def _alarm(
        self,
        alarm_id: str,
        metric: cw.IMetric,
        *,
        threshold: float,
        description: str,
        action: cw_actions.SnsAction,
        evaluation_periods: int = 1,
    ) -> None:
        alarm = cw.Alarm(
            self,
            alarm_id,
            metric=metric,
            threshold=threshold,
            evaluation_periods=evaluation_periods,
            comparison_operator=cw.ComparisonOperator.GREATER_THAN_THRESHOLD,
            treat_missing_data=cw.TreatMissingData.NOT_BREACHING,
            alarm_description=description,
        )
        alarm.add_alarm_action(action)
        alarm.add_ok_action(action)
        self.alarms.append(alarm)
