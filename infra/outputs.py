"""Stack output names, and the snake_case keys ``warmpool local up`` prints for the same values."""

from __future__ import annotations

# snake_case key (as printed by `warmpool local up`) -> CloudFormation output id
OUTPUTS: dict[str, str] = {
    "region": "Region",
    "cluster": "Cluster",
    "reports_queue_url": "ReportsQueueUrl",
    "result_queue_prefix": "ResultQueuePrefix",
    "ledger_table": "LedgerTable",
    "buckets_table": "BucketsTable",
    "dlq_url": "DlqUrl",
    "agent_role_arn": "AgentRoleArn",
    "agent_identity": "AgentIdentity",
    "agent_namespace": "AgentNamespace",
    "agent_service_account": "AgentServiceAccount",
    "dashboard_name": "DashboardName",
    "alarm_topic_arn": "AlarmTopicArn",
}

# With -c eks_cluster=NAME only (the node half installed by the stack): what went where.
INSTALL_OUTPUTS: dict[str, str] = {
    "eks_cluster": "EksCluster",
    "agent_image_uri": "AgentImageUri",
    "installed_objects": "InstalledObjects",
}
