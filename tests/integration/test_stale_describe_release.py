"""Issue 21, defect 3: a stale Describe plus reordered results.

Report N offers addresses X; the allocator unassigns them. Report N+1, sent before
N's answer arrived and still offering X (pods now wait), is planned from a
Describe that still shows X on the ENI (EC2's API is eventually consistent, with
no documented bound), so X is handed back. The agent receives N+1's answer first,
then N's ``released``. Before the fix it took X back into its pool and then dropped
N's ``released`` as stale: pods held addresses EC2 had given away.

The real allocator and the real pool controller, against the emulated EC2 with its
opt-in Describe lag (``Ec2Config.describe_lag_*``); IMDS lags too (the agent checks
claims against it, so only a lagging IMDS lets a hand-back through).
"""

from __future__ import annotations

from emulated.ec2 import Ec2Config
from node_agent.config import Timing
from tests.helpers.allocate_world import AllocatorWorld
from tests.helpers.world_agent import lagging_imds, world_agent
from warmpool.messages import AllocationResult, PoolReport, Released
from warmpool.pool import PoolConfig

LAG_S = 40.0
"""How far behind Describe is: more than the time between reports N and N+1 being served."""
TIMING = Timing(cooldown_s=0.0, release_delay_s=5.0, release_timeout_s=120.0, heartbeat_s=600.0, retry_s=5.0)


def _later(w: AllocatorWorld, s: float) -> float:
    w.clock.advance(s)
    return w.clock.now()


def _serve(w: AllocatorWorld, reports: list[PoolReport], node: str) -> list[AllocationResult]:
    w.deliver(reports)
    return w.results(node)


def _on_node(w: AllocatorWorld, node: str) -> set[str]:
    """What EC2 (the truth, not a Describe) has on the node's ENIs."""
    return {ip for e in w.enis(node) for ip in e.secondary}


def test_a_hand_back_planned_from_a_stale_describe_never_outlives_the_release() -> None:
    w = AllocatorWorld(ec2_config=Ec2Config(describe_lag_min_s=LAG_S, describe_lag_max_s=LAG_S))
    w.add_node("n1", "m5.large")
    w.add_node("n2", "m5.large")
    w.tag_primary("n1")
    w.tag_primary("n2")
    primary = w.enis("n1")[0].id
    w.emu.client().assign_private_ip_addresses(NetworkInterfaceId=primary, SecondaryPrivateIpAddressCount=4)
    w.clock.advance(LAG_S + 1)  # Describe shows the node as it is now
    # IMDS stays at the state from before the release for the whole test.
    ds, ctl = world_agent(w, "n1", lagging_imds(w, "n1", 10_000.0), TIMING, PoolConfig(warm_ip=1))
    now = w.clock.now()
    ctl.start(now)
    for r in _serve(w, ctl.tick(now), "n1"):
        ctl.apply_result(r, now)

    # Three of the four addresses are surplus (WARM_IP_TARGET=1): quarantined after the
    # release delay and offered in report N.
    ctl.tick(_later(w, 1.0))
    report_n = ctl.tick(_later(w, TIMING.release_delay_s + 1))
    assert len(report_n) == 1 and report_n[0].release, report_n
    offered = set(report_n[0].release[0].ips)
    assert len(offered) == 3
    # Pods take the last free address, and one more waits: report N+1 (still offering X).
    t = _later(w, 1.0)
    assert ds.assign("p0", "eth0", "ns", t) is not None
    assert ds.assign("p1", "eth0", "ns", t) is None
    report_n1 = ctl.tick(t)
    assert len(report_n1) == 1 and report_n1[0].pending_demand == 1
    assert set(report_n1[0].release[0].ips) == offered

    # The allocator serves N once the offer is old enough to act on: X unassigned.
    w.clock.advance(11.0)
    answer_n = _serve(w, report_n, "n1")
    assert any(isinstance(a, Released) for r in answer_n for a in r.actions), answer_n
    assert not offered & _on_node(w, "n1")
    # EC2 gives them to another node.
    other = w.enis("n2")[0].id
    w.emu.client().assign_private_ip_addresses(NetworkInterfaceId=other, PrivateIpAddresses=sorted(offered))
    # Then N+1, from a Describe still showing X on n1's ENI.
    w.clock.advance(1.0)
    answer_n1 = _serve(w, report_n1, "n1")

    # Results arrive in the other order: N+1's first, then N's.
    t = _later(w, 1.0)
    for r in [*answer_n1, *answer_n]:
        ctl.apply_result(r, t)
    # Pods on n1 take whatever the agent's pool holds.
    for i in range(2, 12):
        ds.assign(f"p{i}", "eth0", "ns", t)
    held = {p.ip for p in ds.pods()}
    elsewhere = _on_node(w, "n2")
    assert not held & elsewhere, f"pods on n1 hold {sorted(held & elsewhere)}, which EC2 assigned to n2"
    assert held <= _on_node(w, "n1"), f"pods on n1 hold {sorted(held - _on_node(w, 'n1'))}, not n1's in EC2"
