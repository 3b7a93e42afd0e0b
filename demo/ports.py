"""What the demo's helpers need of it: the pod runtimes (:mod:`demo.cni`,
:mod:`demo.containerd`) and the options' agent hook (:mod:`demo.options`) take
these narrow views, which :class:`demo.run.Demo` and :class:`demo.run.Node` satisfy,
so none of them imports :mod:`demo.run`.
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Protocol


class PodNode(Protocol):
    """A demo node as a pod runtime sees it."""

    @property
    def k(self) -> int:
        """The node's index."""
        ...

    @property
    def ns(self) -> str:
        """The node's network namespace."""
        ...

    @property
    def socket(self) -> str:
        """The agent's CNI socket."""
        ...


class AgentNode(Protocol):
    """A demo node as the agent hook (``DemoOptions.agent_wrap``) sees it."""

    @property
    def name(self) -> str: ...

    @property
    def metrics_port(self) -> int: ...

    socket: str
    """The agent's CNI socket; the hook may change it."""


class CniHost(Protocol):
    """What :mod:`demo.cni` needs of the demo."""

    @property
    def mode(self) -> str:
        """``netns`` or ``plain``."""
        ...

    @property
    def cni_plugin(self) -> str: ...

    def tracked(self, p: subprocess.Popen[bytes]) -> AbstractContextManager[None]: ...


class ContainerdHost(Protocol):
    """What :mod:`demo.containerd` needs of the demo."""

    @property
    def mode(self) -> str: ...

    @property
    def cni_plugin(self) -> str: ...

    @property
    def run_dir(self) -> Path: ...

    @property
    def nodes(self) -> Sequence[PodNode]: ...

    node_rt: dict[int, Any]
    """Node index -> :class:`demo.runtime_containerd.NodeRuntime`."""

    def say(self, text: str) -> None: ...
