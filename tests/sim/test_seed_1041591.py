"""Seed 1041591 (stop 51's sweep of seeds 1040000-1044999 on 1df6757: no violation, yet one node
sent no report from 295.9 s to 705.9 s). After a lost checkpoint ``eni-1359…``'s 49 addresses were
held as offered (their origin unknown); EC2 unassigned them and assigned 49 others, and the old
ones stayed quarantined for their offer's answer beside the new ones, also held as offered: an
offer of 98 addresses, more than a report's offer may name (``MAX_IPS_PER_ENI``, 64), made every
report the agent built invalid (``ReleaseOffer``), and it sent none while the answer it waited for
could only come to a report. Now an ENI's offer names at most that many, the longest quarantined
first (``node_agent.offers.quarantined``; tests/unit/test_offer_within_limits.py)."""

from __future__ import annotations

from typing import Any

import pytest

import node_agent.controller
from simulation.runner import plan_for, run_plan

pytestmark = [pytest.mark.sim, pytest.mark.usefixtures("pods_named")]  # drawn with every runtime naming its pods


def test_seed_1041591_every_report_the_agents_build_is_valid(monkeypatch: pytest.MonkeyPatch) -> None:
    invalid: list[str] = []
    error = node_agent.controller.log.error

    def seen(msg: str, *args: Any, **kw: Any) -> None:
        if msg.startswith("cannot build a valid report"):
            invalid.append(str(args[0])[:200] if args else msg)
        error(msg, *args, **kw)

    monkeypatch.setattr(node_agent.controller.log, "error", seen)
    violations, (out, _w) = run_plan(plan_for(1041591, None))
    assert out.faults.get("host-wiring:old-copy:old-copy") == 1, "setup"
    assert not violations, violations
    assert not invalid, f"{len(invalid)} reports not sent: {invalid[0]}"
