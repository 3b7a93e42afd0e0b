"""Dashboard and alarms, built on the metric names of ``warmpool.names``."""

from __future__ import annotations

import json
import re
from typing import Any

from infra.observability import EC2_ACTIONS
from tests.helpers.cdk_synth import Synthesized
from tests.helpers.metric_dimensions import dimension_set, emitted_dimensions
from warmpool import names


def _body(s: Synthesized) -> dict[str, Any]:
    dashboard = s.one("AWS::CloudWatch::Dashboard")["Properties"]
    assert dashboard["DashboardName"] == "warmpool-demo"
    return json.loads(dashboard["DashboardBody"])


def _widget(body: dict[str, Any], title: str) -> dict[str, Any]:
    found = [w for w in body["widgets"] if w.get("properties", {}).get("title") == title]
    assert len(found) == 1, title
    return found[0]["properties"]


def test_dashboard_graphs_every_signal_the_issue_lists(default: Synthesized) -> None:
    body = _body(default)
    text = json.dumps(body)
    for metric in (
        names.M_EC2_CALLS,
        names.M_EC2_THROTTLES,
        names.M_TOKENS_WAITED_S,
        names.M_NODES_IN_DEFICIT,
        names.M_NODES_DEFERRED,
        names.M_ALLOCATION_LATENCY_MS,
        names.M_REPORTS_RECEIVED,
        "ApproximateNumberOfMessagesVisible",
        "ApproximateAgeOfOldestMessage",
        "Errors",
        "Duration",
        "ConcurrentExecutions",
    ):
        assert f'"{metric}"' in text or f'MetricName=\\"{metric}\\"' in text, metric


def test_per_action_graphs_search_the_clusters_dimension(default: Synthesized) -> None:
    calls = _widget(_body(default), "EC2 calls per action")
    (expr,) = calls["metrics"]
    search = expr[0]["expression"]
    assert search.startswith("SEARCH('{warmpool,Action,cluster}")
    assert 'MetricName="EC2Calls"' in search and 'cluster="demo"' in search


def test_latency_graph_shows_p50_and_p99(default: Synthesized) -> None:
    latency = _widget(_body(default), "Allocation latency (ms)")
    searches = [m[0]["expression"] for m in latency["metrics"]]
    assert [s.rsplit(",", 2)[1].strip(" '") for s in searches] == ["p50", "p99"]
    # this cluster's series under the functions' dimension set (was: any series in the namespace)
    assert all('MetricName="AllocationLatencyMs"' in s and "{warmpool,cluster,service}" in s for s in searches)
    assert all('cluster="demo"' in s for s in searches)


def _alarms(s: Synthesized) -> dict[str, dict[str, Any]]:
    return {k: v["Properties"] for k, v in s.resources("AWS::CloudWatch::Alarm").items()}


def test_every_alarm_notifies_the_topic(default: Synthesized) -> None:
    topic = "${" + next(iter(default.resources("AWS::SNS::Topic"))) + "}"
    alarms = _alarms(default)
    assert len(alarms) == 5
    for alarm in alarms.values():
        assert alarm["AlarmActions"] == [topic] and alarm["OKActions"] == [topic]
        assert alarm["TreatMissingData"] == "notBreaching"
        assert alarm["AlarmDescription"]


def test_dlq_not_empty_alarm(default: Synthesized) -> None:
    dlq = default.logical_id("AWS::SQS::Queue", lambda r: r["Properties"]["QueueName"] == "warmpool-demo-reports-dlq")
    (alarm,) = [a for k, a in _alarms(default).items() if k.startswith("ObservabilityDlqNotEmpty")]
    assert alarm["MetricName"] == "ApproximateNumberOfMessagesVisible"
    assert alarm["Dimensions"] == [{"Name": "QueueName", "Value": "${" + dlq + ".QueueName}"}]
    assert alarm["Threshold"] == 0 and alarm["ComparisonOperator"] == "GreaterThanThreshold"


def test_throttle_alarm_sums_every_action(default: Synthesized) -> None:
    (alarm,) = [a for k, a in _alarms(default).items() if k.startswith("ObservabilityEc2Throttles")]
    (expression,) = [m for m in alarm["Metrics"] if "Expression" in m]
    assert expression["Expression"] == "SUM(METRICS())" and expression["ReturnData"] is True
    metrics = [m for m in alarm["Metrics"] if "MetricStat" in m]
    actions = {d["Value"] for m in metrics for d in m["MetricStat"]["Metric"]["Dimensions"] if d["Name"] == "Action"}
    assert actions == set(EC2_ACTIONS)
    assert all(m["MetricStat"]["Metric"]["MetricName"] == names.M_EC2_THROTTLES for m in metrics)
    assert all(m["ReturnData"] is False for m in metrics)


def test_old_messages_and_function_error_alarms(default: Synthesized) -> None:
    alarms = _alarms(default)
    (old,) = [a for k, a in alarms.items() if k.startswith("ObservabilityOldReports")]
    assert old["MetricName"] == "ApproximateAgeOfOldestMessage" and old["Threshold"] == 300
    errors = [a for k, a in alarms.items() if "Errors" in k and "Ec2" not in k]
    assert len(errors) == 2
    assert all(a["MetricName"] == "Errors" and a["Namespace"] == "AWS/Lambda" for a in errors)


def test_alarm_topic_is_encrypted_with_a_rotating_key_cloudwatch_may_use(default: Synthesized) -> None:
    topic = default.one("AWS::SNS::Topic")["Properties"]
    key_id = next(iter(default.resources("AWS::KMS::Key")))
    assert topic["KmsMasterKeyId"] == "${" + key_id + ".Arn}"
    key = default.resolved["Resources"][key_id]["Properties"]
    assert key["EnableKeyRotation"] is True
    statements = key["KeyPolicy"]["Statement"]
    cloudwatch = [st for st in statements if st.get("Principal") == {"Service": "cloudwatch.amazonaws.com"}]
    assert len(cloudwatch) == 1 and set(cloudwatch[0]["Action"]) == {"kms:Decrypt", "kms:GenerateDataKey*"}
    policy = default.one("AWS::SNS::TopicPolicy")["Properties"]["PolicyDocument"]["Statement"]
    assert any(
        st["Effect"] == "Deny" and st["Condition"] == {"Bool": {"aws:SecureTransport": "false"}} for st in policy
    )


_SEARCH = re.compile(
    r"SEARCH\('\{(?P<schema>[^}]*)\} MetricName=\"(?P<metric>[^\"]+)\" cluster=\"(?P<cluster>[^\"]+)\"'"
)


def test_every_graph_searches_its_metrics_emitted_dimension_set_for_this_cluster(default: Synthesized) -> None:
    """Two clusters in one account: each dashboard reads its own cluster's series, under the
    exact dimension set the functions emit (tests/unit/test_metric_dimensions.py pins it)."""
    emitted = emitted_dimensions()
    text = json.dumps(_body(default))
    searches = re.findall(r"SEARCH\([^)]*\)", text.replace('\\"', '"'))
    assert searches
    graphed = set()
    for search in searches:
        m = _SEARCH.match(search)
        assert m, f"a search without the cluster's filter: {search}"
        namespace, *dims = m["schema"].split(",")
        assert namespace == names.METRICS_NAMESPACE and m["cluster"] == "demo", search
        assert frozenset(dims) == dimension_set(m["metric"], emitted), search
        graphed.add(m["metric"])
    assert graphed <= set(emitted), graphed - set(emitted)  # nothing graphed that no code emits


def test_every_alarm_on_a_warmpool_metric_names_its_emitted_dimension_set(default: Synthesized) -> None:
    emitted = emitted_dimensions()
    seen = 0
    for alarm in _alarms(default).values():
        for query in alarm.get("Metrics", []):
            stat = query.get("MetricStat")
            if not stat or stat["Metric"].get("Namespace") != names.METRICS_NAMESPACE:
                continue
            metric = stat["Metric"]
            dims = {d["Name"]: d["Value"] for d in metric["Dimensions"]}
            assert frozenset(dims) == dimension_set(metric["MetricName"], emitted)
            assert dims["cluster"] == "demo"
            seen += 1
    assert seen == len(EC2_ACTIONS)


def test_free_addresses_per_subnet_are_graphed_as_their_minimum(default: Synthesized) -> None:
    # fair sharing (docs/allocator.md, "Scarce addresses shared fairly"): a zone running low
    text = json.dumps(_widget(_body(default), "Free addresses per subnet"))
    assert f'MetricName=\\"{names.M_SUBNET_FREE}\\"' in text, text
    assert "{warmpool,cluster,subnet}" in text and "Minimum" in text, text
    assert dimension_set(names.M_SUBNET_FREE, emitted_dimensions()) == frozenset({"cluster", "subnet"})
