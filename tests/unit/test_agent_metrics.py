"""The agent's Prometheus counters read typed counters, never names taken apart again."""

from __future__ import annotations

from pathlib import Path

from emulated.clock import VirtualClock
from tests.helpers.agent_world import MemorySqs, WiredPods, make_agent
from tests.helpers.controller import PRIMARY, FakeImds


def test_a_cni_failure_is_labelled_with_its_whole_command(tmp_path: Path) -> None:
    """A command holding ``:`` (the plugin passes on whatever it was given) once split
    into a wrong command and reason label."""
    imds = FakeImds()
    imds.add(PRIMARY, ["10.0.0.11", "10.0.0.12"])
    clock = VirtualClock(1_000_000.0)
    agent = make_agent(tmp_path / "state", imds, MemorySqs(VirtualClock(1_000_000.0)), clock, WiredPods())
    try:
        assert agent.cni.handle({"command": "ADD:X"})["ok"] is False
        text = "\n".join(agent._metric_lines())
    finally:
        agent.stop()
    assert 'warmpool_cni_failures_total{command="ADD:X",reason="bad-command"} 1' in text
