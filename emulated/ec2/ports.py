"""What the ways in (:mod:`.client`, :mod:`.hooks`, :mod:`.http`) reach of the emulator."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from warmpool.clock import Clock

from .authz import Principal
from .config import Ec2Config


class Dispatcher(Protocol):
    """What the ways in (:mod:`.client`, :mod:`.hooks`, :mod:`.http`) reach of the emulator."""

    @property
    def clock(self) -> Clock: ...

    @property
    def config(self) -> Ec2Config: ...

    def dispatch(
        self, action: str, params: Mapping[str, Any], principal: Principal | None = None
    ) -> dict[str, Any]: ...

    def latency_for(self, action: str) -> float: ...

    @staticmethod
    def actions() -> list[str]: ...
