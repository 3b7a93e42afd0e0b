"""Names two or more parts share: resources, environment variables, tags, metrics.

One place, so the CDK stack, ``warmpool local up``, the functions and the
agent cannot drift apart. An environment variable only one part reads is
defined where it is read (``node_agent/config.py``, ``functions/settings.py``);
docs/design.md lists every one.
"""

from __future__ import annotations

# --- resources ---------------------------------------------------------------


def reports_queue(cluster: str) -> str:
    return f"warmpool-{cluster}-reports"


def reports_dlq(cluster: str) -> str:
    return f"warmpool-{cluster}-reports-dlq"


def result_queue_prefix(cluster: str) -> str:
    """The default prefix of the cluster's result queues (what the stack sets
    ``WARMPOOL_RESULT_QUEUE_PREFIX`` to)."""
    return f"warmpool-{cluster}-result-"


def result_queue_name(prefix: str, instance_id: str) -> str:
    """The one rule for an instance's result queue name: ``{prefix}{instance_id}``.

    ``prefix`` is a queue-name prefix (``warmpool-C-result-``) or a queue-URL
    prefix (``https://sqs.../123456789012/warmpool-C-result-``), whose last
    path segment is the name prefix. The allocator, the reconciler, the agent
    and the stack's IAM patterns (``instance_id="*"``) all name queues here."""
    return (prefix + instance_id).rsplit("/", 1)[-1]


def result_queue(cluster: str, instance_id: str) -> str:
    """An instance's result queue under the cluster's default prefix."""
    return result_queue_name(result_queue_prefix(cluster), instance_id)


def ledger_table(cluster: str) -> str:
    return f"warmpool-{cluster}-ledger"


BUCKETS_TABLE = "warmpool-token-buckets"
"""One per account and region, shared by every cluster's stack."""

# DynamoDB key schemas (strings): ledger pk+sk, buckets pk; TTL attribute.
LEDGER_PK = "pk"
LEDGER_SK = "sk"
LEDGER_TTL = "expires_at"
BUCKETS_PK = "pk"

ALLOCATE_HANDLER = "functions.allocate.handler"
RECONCILE_HANDLER = "functions.reconcile.handler"

# --- function settings (environment of the Lambda functions) -----------------
ENV_CLUSTER = "WARMPOOL_CLUSTER"
ENV_REPORTS_QUEUE_URL = "WARMPOOL_REPORTS_QUEUE_URL"
ENV_DLQ_URL = "WARMPOOL_DLQ_URL"
ENV_RESULT_QUEUE_PREFIX = "WARMPOOL_RESULT_QUEUE_PREFIX"
ENV_LEDGER_TABLE = "WARMPOOL_LEDGER_TABLE"
ENV_BUCKETS_TABLE = "WARMPOOL_BUCKETS_TABLE"
ENV_BUDGET_FRACTION = "WARMPOOL_BUDGET_FRACTION"
ENV_ALLOWED_SUBNETS = "WARMPOOL_ALLOWED_SUBNETS"  # comma-separated subnet ids; empty = discovered (warmpool/subnets.py)
ENV_SUBNET_DISCOVERY = "WARMPOOL_ENABLE_SUBNET_DISCOVERY"
ENV_CUSTOM_NETWORK = "WARMPOOL_CUSTOM_NETWORK"
"""The allocator's custom-networking map (JSON: zone -> subnets and security groups for new ENIs)."""
AGENT_ENV_CUSTOM_NETWORKING = "AWS_VPC_K8S_CNI_CUSTOM_NETWORK_CFG"
"""The agent's switch, the VPC CNI's name and meaning: pods in the map's subnets, never on the primary ENI."""
ENV_SUBNET_TAG = "WARMPOOL_SUBNET_TAG"  # KEY=VALUE: the subnets so tagged (the stack's subnet_tag)
"""``true`` (the default): pod subnets found by the VPC CNI's tags (``warmpool/subnets.py``);
``false``: as before discovery, those tagged for the cluster, else every subnet of the nodes' VPC."""
ENV_SECURITY_GROUPS = "WARMPOOL_SECURITY_GROUPS"  # comma-separated; empty = the node's primary ENI's
ENV_IDENTITY_MODE = "WARMPOOL_IDENTITY_MODE"  # "none" | "sender-id"
ENV_NAMED_PLACEMENT = "WARMPOOL_NAMED_PLACEMENT"
ENV_MULTI_CARD = "WARMPOOL_MULTI_CARD"
"""``true``: ENIs on every network card of multi-card types (new ones on cards above 0 once card 0
is full), each node's ceiling counting them; the allocator's and the agents' (their pool's
ceiling), set alike. Off by default, as the VPC CNI's multi-NIC support is (issue 24)."""
ENV_SCARCE_FREE = "WARMPOOL_SCARCE_FREE"
"""Fair sharing (docs/allocator.md, "Scarce addresses shared fairly"): a zone whose candidate pod
subnets have fewer free addresses than this, for a node, is scarce (lean nodes: until it has more
than twice this). 0 turns fair sharing off."""
SCARCE_FREE_DEFAULT = 64
AGENT_ENV_LEAN_HOLD_S = "WARMPOOL_LEAN_HOLD_S"
"""The agent's side of fair sharing: how long a result saying ``scarce`` keeps it lean (renewed by
each; default 180 s, three heartbeats). 0: off on that node: ``lean`` is left out of its reports
(for an allocator from before the field), so it is never told ``scarce``."""
LEAN_HOLD_DEFAULT_S = 180.0
LEAN_HOLD_MAX_S = 3600.0
"""The longest ``WARMPOOL_LEAN_HOLD_S`` the agent accepts (the stack's ``lean_hold_s``, the chart's value)."""
SCARCE_FREE_MAX = 1_000_000
"""The largest ``WARMPOOL_SCARCE_FREE`` the functions accept (the stack's ``scarce_free``)."""
ENV_MAX_PODS = "WARMPOOL_MAX_PODS"  # the kubelet's --max-pods on every node; 0/unset = the VPC CNI formula per type
MAX_PODS_OVERRIDE = 1000
ENV_GC_AGE_S = "WARMPOOL_GC_AGE_S"
ENV_ALLOCATE_TIMEOUT_S = "WARMPOOL_ALLOCATE_TIMEOUT_S"
"""The allocate function's timeout; the allocator derives its lease TTL from it."""
ENV_ENDPOINT_URL = "WARMPOOL_AWS_ENDPOINT_URL"  # local stack only
ENV_IDENTITY_CERTIFICATES = "WARMPOOL_IDENTITY_CERTIFICATES"  # PEM: who signs instance identity documents

# --- agent settings (besides the VPC CNI variables) --------------------------
AGENT_ENV_REPORTS_QUEUE_URL = "WARMPOOL_REPORTS_QUEUE_URL"
AGENT_ENV_RESULT_QUEUE_PREFIX = "WARMPOOL_RESULT_QUEUE_PREFIX"
AGENT_ENV_SOCKET = "WARMPOOL_SOCKET"
AGENT_ENV_STATE_DIR = "WARMPOOL_STATE_DIR"
AGENT_ENV_HEARTBEAT_S = "WARMPOOL_REPORT_HEARTBEAT_S"
AGENT_ENV_METRICS_ADDR = "WARMPOOL_METRICS_ADDR"
DEFAULT_SOCKET = "/run/warmpool/agent.sock"
DEFAULT_STATE_DIR = "/var/lib/warmpool"
DEFAULT_METRICS_ADDR = "127.0.0.1:61680"

# --- tags ---------------------------------------------------------------------


def cluster_tag_key(cluster: str) -> str:
    """Instances of cluster ``C`` carry ``kubernetes.io/cluster/C`` = owned|shared."""
    return f"kubernetes.io/cluster/{cluster}"


TAG_SUBNET_ROLE = "kubernetes.io/role/cni"
"""On a subnet, as the VPC CNI reads it (subnet discovery): ``1`` (any value but ``0``) a pod
subnet, ``0`` never one (the node's own subnet included)."""
TAG_SUBNET_CLUSTER_PREFIX = "cni.networking.k8s.aws/cluster/"
"""On a subnet, ``cni.networking.k8s.aws/cluster/C`` (any value): the subnet is for cluster ``C``
(and the others it names) only; a subnet without such a key is for every cluster."""


def subnet_cluster_tag_key(cluster: str) -> str:
    """The key that scopes a subnet to cluster ``C`` (the VPC CNI's, not ``kubernetes.io/cluster/C``)."""
    return f"{TAG_SUBNET_CLUSTER_PREFIX}{cluster}"


TAG_CLUSTER_NAME = "cluster.k8s.amazonaws.com/name"
TAG_INSTANCE_ID = "node.k8s.amazonaws.com/instance_id"
TAG_CREATED_AT = "node.k8s.amazonaws.com/createdAt"
TAG_MANAGED = "warmpool.io/managed"
TAG_GC_MARK = "warmpool.io/gc-marked-at"
TAG_NO_MANAGE = "node.k8s.amazonaws.com/no_manage"
"""An ENI tagged ``true`` belongs to another tool: never touched (the VPC CNI skips it too)."""
TAG_PRIMARY_ENI_OF = "warmpool.io/primary-eni-of"
"""On a node's primary ENI (device 0, made by EC2 with the instance): the cluster whose
pods may hold its secondary addresses. Set by the node's launch template or by the
allocator at first contact with a verified node; IAM lets warmpool (un)assign addresses
on an untagged-by-warmpool ENI only when it carries this tag."""

# --- metrics (CloudWatch EMF namespace and names) ----------------------------
METRICS_NAMESPACE = "warmpool"
M_REPORTS_RECEIVED = "ReportsReceived"
M_REPORTS_INVALID = "ReportsInvalid"
M_REPORTS_STALE = "ReportsStale"
M_REPORTS_COALESCED = "ReportsCoalesced"
M_REPORTS_REJECTED = "ReportsRejected"
M_NODES_SERVED = "NodesServed"
M_NODES_DEFERRED = "NodesDeferred"
M_NODES_IN_DEFICIT = "NodesInDeficit"
M_EC2_CALLS = "EC2Calls"  # dimension Action
M_EC2_THROTTLES = "EC2Throttles"  # dimension Action
M_EC2_ERRORS = "EC2Errors"  # dimension Action
M_TOKENS_TAKEN = "TokensTaken"
M_SUBNET_READS_DEFERRED = "SubnetReadsDeferred"
M_PLACEMENT_READS_DEFERRED = "PlacementReadsDeferred"
M_PLACEMENT_NAMED = "PlacementsNamed"
M_PLACEMENT_TAKEN = "PlacementsFoundTaken"
M_PLACEMENT_NO_BLOCK = "PrefixSubnetsWithoutBlock"
M_SUBNETS_BLOCKLESS = "PrefixSubnetsRemembered"
M_BLOCKLESS_AVOIDED = "PrefixAsksAvoided"
M_TOKENS_WAITED_S = "TokensWaitedSeconds"
M_ADDRESSES_ALLOCATED = "AddressesAllocated"
M_ADDRESSES_RELEASED = "AddressesReleased"
M_ENIS_CREATED = "EnisCreated"
M_ENIS_DELETED = "EnisDeleted"
M_ALLOCATION_LATENCY_MS = "AllocationLatencyMs"
M_GC_DELETIONS = "GcDeletions"
M_LEDGER_DRIFT = "LedgerDrift"
M_TOKENS_FORFEITED = "TokensForfeited"
"""Tokens taken for a node that was then not served (lease lost, deadline, re-read throttled)."""
M_REPORTS_FENCED = "ReportsFenced"
"""Reports of a process from before the instance's last restore check, dropped (their epoch)."""
M_SEQ_FLOORS_SAID = "SeqFloorsSaid"
"""Stale reports below the instance's ledger seq answered ``seq-floor`` (docs/design.md, "Seq")."""
M_RESTORES_CHECKED = "RestoresChecked"
"""Reports of a restored checkpoint answered whether it is the node's newest state (dimension
``current``: ``true``/``false``)."""
M_OFFERS_EXPIRED = "ReleaseOffersExpired"
M_OFFERS_UNDATED = "ReleaseOffersUndated"
M_LEDGER_UNREAD = "LedgerRowsUnread"
M_DESCRIBE_THROTTLED = "DescribeThrottledBatches"  # dimension Action
M_IDENTITY_UNVERIFIED = "ReportsIdentityUnverified"
M_RESULT_QUEUES_CREATED = "ResultQueuesCreated"
M_FLIPS_UNSHARED = "FlipHistoriesUnshared"
M_NODES_AT_POD_CEILING = "NodesAtPodCeiling"
"""Reports with pods waiting from a node already at its max-pods ceiling (agent and allocator disagree)."""
"""Flip histories the shared store could not read or write (that container damps on what it saw)."""
M_FAIR_SHARE_DEFERRED = "FairShareDeferred"
"""Reports deferred because their instance spent its fair share of a bucket (mutating or Describe)."""
M_REPORTS_QUIET = "ReportsQuiet"
"""Reports that cannot lead to an EC2 call, recorded without a Describe round."""
M_NODES_DAMPED = "NodesDamped"
M_RELEASES_HELD = "ReleasesHeld"
"""Unassign/Delete calls not made: offer younger than the release delay, ENI
younger than the minimum age, or the instance damped."""
M_ENI_DELETE_DEFERRED = "EniDeleteLeftToGc"
M_RELEASES_REPEATED = "ReleasesRepeated"
"""``released``/``deleted`` actions said again from the release book (the report still listed them)."""
M_UNASSIGN_SPLIT_UNPAID = "UnassignSplitsUnpaid"
"""Unassigns refused as "not assigned" for one of several keys, whose key-by-key calls the
bucket could not pay: all kept booked and unsaid, for the next report."""
M_GRANTS_REPEATED = "GrantsRepeated"
"""``assigned`` actions said again from the release book's ``given`` entries (EC2 gave the
instance addresses in answer to the allocator's calls; the report does not name them yet)."""
M_HANDBACKS_REFUSED = "HandBacksRefused"
"""Offered addresses not handed back (nor unassigned again) because the release book says
EC2 already took them, whatever Describe showed."""
M_RELEASE_BOOK_UNREAD = "ReleaseBooksUnread"
"""Release books not read or written (DynamoDB error, conflict): those nodes' releases and
hand-backs wait."""
M_PRIMARY_ENIS_TAGGED = "PrimaryEnisTagged"
M_RESULTS_SENT = "ResultsSent"
M_RESULT_QUEUE_MISSING = "ResultQueueMissing"
M_RESULT_ACTIONS_DROPPED = "ResultActionsDropped"
"""Actions left out of a result because it would exceed ``messages.MAX_ACTIONS``
(logged; the agent still sees EC2's truth through IMDS)."""
M_DLQ_SENT = "ReportsToDlq"  # dimension reason
M_QUEUE_DELETE_FAILED = "ResultQueueDeleteFailed"
M_ORPHAN_QUEUES_DELETED = "OrphanResultQueuesDeleted"
M_SUBNET_FREE = "SubnetFreeAddresses"  # dimension subnet
"""Free addresses of each subnet the allocator read (its cached count), once per invocation that
read them (a gauge: graph its Minimum)."""
M_SCARCE_SAID = "ScarceSaid"
"""Results that said ``scarce`` (replies to quiet reports included)."""
