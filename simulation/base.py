"""What every part of a seed's world shares: its fixed settings (the production
agent's and functions' defaults where they have one) and the exceptions that
stop a part of it (an agent killed, the run stopped; an invocation's crash is
:class:`emulated.lambda_runtime.LambdaCrash`, shared with the bench).
"""

from __future__ import annotations

from node_agent.config import ENV_ADOPT_LAUNCH_POOL, ENV_CLUSTER_NAME
from node_agent.config import load as load_agent_config

T0 = 1_700_000_000.0
CLUSTER = "dst"
SUBNET_CIDR = "10.0.0.0/23"
AGENT_CONFIG = load_agent_config({ENV_CLUSTER_NAME: CLUSTER, ENV_ADOPT_LAUNCH_POOL: "true"})
"""A production agent's settings (defaults, checked as the agent checks them at start:
release timeout >= MIN_RELEASE_TIMEOUT_S, ...), with ``WARMPOOL_ADOPT_LAUNCH_POOL`` on (off by
default): every start without a checkpoint or a pod on the host asks about a first start, so the
seeds draw the ask after every checkpoint loss, not only on nodes with a ``launch-pool``."""
TIMING = AGENT_CONFIG.timing  # cooldown 30 s, release delay 60 s, release timeout 120 s
GC_MIN_AGE_S = 60.0
"""The agent's CniService default (node_agent/agent.py does not change it)."""
GC_AGE_S = 120.0
RECONCILE_EVERY_S = 60.0
AGENT_EVERY_S = 2.0
RESYNC_S = AGENT_CONFIG.resync_s
ESM_EVERY_S = 1.0
ESM_BATCH_SIZE = 10
ESM_CONCURRENCY = 2
INTAKE_PASS = ESM_BATCH_SIZE * ESM_CONCURRENCY
"""Messages the event source mapping takes in one pass (ESM_EVERY_S)."""
OVERRUN_LIMIT_S = 1800.0
"""How long past the schedule's quiet period a run goes on for a backlog to drain
(:meth:`simulation.world.SimWorld.run`)."""
FUNCTION_TIMEOUT_S = 300
REPORTS_VISIBILITY_S = 300
HOST_NETNS = ("/proc/1/ns/net", "/proc/self/ns/net")
"""The paths by which a CNI call could name the host's network namespace (the agent runs
with host networking: its own namespace is the host's, and the node's is its own)."""
HOST_IFNAMES = ("eth0", "ens5", "lo")
HOST_NS_ID = (4, 4026531840)
"""(device, inode) of the host's network namespace (nsfs)."""
POD_NETNS_DIR = "/var/run/netns/"
DESCRIBE_ACTIONS = ("DescribeInstances", "DescribeNetworkInterfaces")
ANOTHER_TOOL = "another tool's interface"
"""The description of an ENI another tool attached to a node (``instance-type``'s ``foreign``):
its addresses are that tool's, never a pod's (``two-holders``), never the agent's to know."""


class AgentKilled(BaseException):
    """kill -9 of the agent process (nothing in the agent may catch it)."""


class Stop(BaseException):
    """A violation was found: stop the run."""
