"""The demo's options (``warmpool demo``'s flags, the runtime tests' set-up) and its interrupt."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from demo.ports import AgentNode

AgentWrap = Callable[[AgentNode, list[str], dict[str, str]], tuple[list[str], dict[str, str]]]
"""(node, argv, env) -> (argv, env) of the agent process; may change ``node.socket``."""


class Interrupted(Exception):
    """SIGINT/SIGTERM arrived: stop, tear down, exit 130."""


@dataclass
class DemoOptions:
    nodes: int = 3
    pods_per_node: int = 10
    json_out: str | None = None
    instance_type: str = "m5.large"
    keep_per_node: int = 2
    """Pods left on each node after the scale-down."""
    attach_delay_s: float = 1.0
    api_latency_s: float = 0.05
    cni_parallel: int = 6
    """CNI invocations in flight at once (each is a process start)."""
    scale_out_timeout_s: float = 120.0
    settle_timeout_s: float = 45.0
    netns: bool | None = None
    """None: use namespaces when possible; False: never."""
    agent_env: dict[str, str] = field(default_factory=dict)
    cluster: str = "demo"
    live: bool = True
    runtime: str = "auto"
    """Who makes the pods in netns mode: ``containerd`` (CRI sandboxes), ``netns`` (bare
    namespaces), or ``auto`` (containerd when it is installed and works here)."""
    agent_wrap: AgentWrap | None = None
    """Starts each agent differently (the runtime tests: under the DaemonSet's privileges)."""
