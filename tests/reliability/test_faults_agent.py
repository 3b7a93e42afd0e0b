"""The agent's side of the fault suite, in the closed loop (virtual time):
results lost or delivered twice, IMDS failing or lagging, and the agent killed
at every point where its state reaches the checkpoint (during ADDs, while
applying results, while releasing), then restarted from checkpoint + IMDS."""

from __future__ import annotations

from typing import Any

import pytest

from node_agent.checkpoint import MemoryCheckpoint
from tests.helpers.reliability_cluster import ReliabilityCluster


def test_results_lost_or_delivered_twice(request: pytest.FixtureRequest) -> None:
    c = ReliabilityCluster(4, seed=3)
    c.lose_results = 0.3
    c.duplicate_results = 0.3
    for n in c.nodes:
        c.scale(n, 24)
    c.settle(max_s=1200)
    for n in c.nodes:
        c.scale(n, 4)
    c.run(600)  # releases: lost `released` results make quarantine time out and re-offer
    for n in c.nodes:
        c.scale(n, 15)
    c.settle(max_s=1200)
    assert c.faults.injected["result-lost"] > 0 and c.faults.injected["result-duplicated"] > 0
    c.check()
    c.faults.survived(request.node.nodeid)


def test_imds_failing_then_back(request: pytest.FixtureRequest) -> None:
    c = ReliabilityCluster(3)
    for n in c.nodes.values():
        n.imds.failing = True
    c.faults.inject("imds-failing", len(c.nodes))
    for name in c.nodes:
        c.scale(name, 20)
    c.run(90)
    # Nothing unverified is handed out: results are parked until IMDS confirms them.
    for n in c.nodes.values():
        for pod in n.ds.pods():
            assert any(pod.ip in e.secondary for e in c.w.enis(n.name)) or pod.ip in n.imds.live()[0].ips
    for n in c.nodes.values():
        n.imds.failing = False
    c.settle()
    c.check()
    c.faults.survived(request.node.nodeid)


def test_imds_lagging_behind_ec2(request: pytest.FixtureRequest) -> None:
    c = ReliabilityCluster(3)
    for n in c.nodes.values():
        n.imds.frozen = n.imds.live()  # IMDS shows the boot-time state for 2 minutes
    c.faults.inject("imds-slow", len(c.nodes))
    for name in c.nodes:
        c.scale(name, 20)
    c.run(120)
    assert all(len(n.ds.pods()) == 0 for n in c.nodes.values()), "an address was used before IMDS showed it"
    for n in c.nodes.values():
        n.imds.frozen = None
    c.settle()
    c.check()
    c.faults.survived(request.node.nodeid)


class Killed(BaseException):
    """kill -9: the process stops here; only what reached the checkpoint survives."""


class DyingCheckpoint(MemoryCheckpoint):
    """Dies on the n-th save, before (``after=False``) or after the write lands."""

    def __init__(self, inner: MemoryCheckpoint, n: int, after: bool) -> None:
        super().__init__(inner.data)
        self.saves = inner.saves
        self.left, self.after = n, after

    def save(self, data: dict[str, Any]) -> None:
        self.left -= 1
        if self.left == 0 and not self.after:
            raise Killed
        super().save(data)
        if self.left == 0:
            raise Killed


def _kill_at(c: ReliabilityCluster, node: str, n: int, after: bool) -> bool:
    """Arm the node's checkpoint to die on its n-th save; run until it does; restart the agent."""
    nd = c.nodes[node]
    dying = DyingCheckpoint(nd.checkpoint, n, after)
    nd.ds._store = dying
    nd.checkpoint = dying
    for _ in range(400):
        try:
            c.step()
        except Killed:
            c.clock.advance(1)
            c.restart(node)
            c.faults.inject(f"agent-kill-9-{'after' if after else 'before'}-checkpoint")
            return True
    return False


@pytest.mark.slow
@pytest.mark.parametrize("after", [False, True], ids=["before-write", "after-write"])
@pytest.mark.parametrize("phase", ["add", "apply", "release"])
def test_agent_killed_at_every_checkpoint_write_then_restarted(
    phase: str, after: bool, request: pytest.FixtureRequest
) -> None:
    kills = 0
    for n in range(1, 13):
        c = ReliabilityCluster(2)
        if phase == "add":
            c.scale("n0", 8)  # ADDs on an empty pool, then on the addresses that arrive
            c.scale("n1", 8)
        elif phase == "apply":
            c.scale("n0", 25)  # results attach ENIs and add addresses: many writes
            c.scale("n1", 25)
        else:
            for x in c.nodes:
                c.scale(x, 25)
            c.settle()
            c.scale("n0", 2)  # DELs, cooldown, quarantine, `released` results
            c.scale("n1", 2)
        kills += _kill_at(c, "n0", n, after)
        c.settle()
        c.run(400)
        c.check()
        c.faults.survived(f"{request.node.nodeid}[save {n}]")
    assert kills >= 6, kills


def _assert_pool_within_ec2(c: ReliabilityCluster, node: str) -> None:
    """Nothing in the agent's pool that EC2 took from the node (a pod could get it next;
    quarantined addresses are not handed out: their result may still come). By ENI: EC2
    may give the node the same addresses again on a new ENI; set up on the deleted one,
    a pod's traffic would leave through an interface that is gone."""
    n = c.nodes[node]
    on_node = {
        (e.id, ip)
        for e in c.w.emu.enis.values()
        if e.attachment is not None and e.attachment.instance_id == n.instance_id
        for ip in e.secondary
    }
    extra = [
        (e.info.eni_id, ip)
        for e in n.ds.enis()
        for ip, a in e.addrs.items()
        if (e.info.eni_id, ip) not in on_node and a.quarantined_at is None
    ]
    assert not extra, f"{node}'s pool holds addresses EC2 took from the node: {extra[:5]}"


@pytest.mark.parametrize("pool", ["warm-ip", "warm-eni"])
def test_agent_restarted_while_imds_still_lists_what_ec2_took(pool: str, request: pytest.FixtureRequest) -> None:
    """Issue 11, defect 2, in the closed loop: a node scales down, EC2 unassigns its
    surplus (``released``; whole ENIs ``deleted`` in warm-ENI mode) while its IMDS
    still shows the old state; the agent is killed and restarted in that window and
    new pods arrive. No pod may get an address EC2 took from the node."""
    from tests.helpers import invariants as inv
    from warmpool.pool import PoolConfig

    cfg = PoolConfig(warm_ip=2) if pool == "warm-ip" else PoolConfig(warm_eni=1)
    c = ReliabilityCluster(2, pool=cfg)
    for name in c.nodes:
        c.scale(name, 20)
    c.settle()
    n0 = c.nodes["n0"]
    n0.imds.frozen = n0.imds.live()  # IMDS lags from here on
    c.faults.inject("imds-slow")
    c.scale("n0", 2)

    def took() -> int:
        return n0.ctl.stats.addresses_released + n0.ctl.stats.enis_deleted

    for _ in range(400):
        c.step()
        if took():
            break
    assert took(), "EC2 took nothing"
    c.run(3)
    n0 = c.restart("n0")
    c.faults.inject("agent-kill-9-in-imds-lag")
    c.scale("n0", 20)
    c.scale("n1", 25)  # the other node asks for addresses: EC2 may hand it the released ones
    for _ in range(60):  # still inside the lag window
        c.step()
        inv.assert_ok(inv.agent_problems(c.w.emu, {k: (n.instance_id, n.ds) for k, n in c.nodes.items()}))
        _assert_pool_within_ec2(c, "n0")
    n0.imds.frozen = None
    c.settle()
    c.check()
    c.faults.survived(f"{request.node.nodeid}")


IMDS_LAG_S = 115.0
"""IMDS shows a change at most this late (the fault model: 0-120 s)."""


def _step_lagging(c: ReliabilityCluster, node: str, frozen_at: float) -> None:
    if c.clock.now() - frozen_at >= IMDS_LAG_S:
        c.nodes[node].imds.frozen = None
    c.step()


@pytest.mark.slow
@pytest.mark.parametrize("after", [False, True], ids=["before-write", "after-write"])
def test_agent_killed_at_every_checkpoint_write_of_a_release_while_imds_lags(
    after: bool, request: pytest.FixtureRequest
) -> None:
    """Kill -9 at each checkpoint write of the scale-down (quarantine, ``released``,
    ``deleted``) while IMDS still shows the pre-release state (for up to 115 s), restart,
    new pods: no pod ever holds an address EC2 has not attached to its node, and
    nothing EC2 took is back in the pool."""
    from tests.helpers import invariants as inv

    kills = 0
    for n in range(1, 41):  # the scale-down's quarantine and its results come at about the 25th-35th write
        c = ReliabilityCluster(2)
        for x in c.nodes:
            c.scale(x, 25)
        c.settle()
        n0 = c.nodes["n0"]
        n0.imds.frozen = n0.imds.live()
        frozen_at = c.clock.now()
        c.faults.inject("imds-slow")
        c.scale("n0", 2)
        dying = DyingCheckpoint(n0.checkpoint, n, after)
        n0.ds._store = dying
        n0.checkpoint = dying
        for _ in range(400):
            try:
                _step_lagging(c, "n0", frozen_at)
            except Killed:
                c.clock.advance(1)
                c.restart("n0")
                c.faults.inject(f"agent-kill-9-{'after' if after else 'before'}-checkpoint-imds-lagging")
                kills += 1
                break
        c.scale("n0", 25)
        for _ in range(60):
            _step_lagging(c, "n0", frozen_at)
            inv.assert_ok(inv.agent_problems(c.w.emu, {k: (v.instance_id, v.ds) for k, v in c.nodes.items()}))
            _assert_pool_within_ec2(c, "n0")
        c.nodes["n0"].imds.frozen = None
        c.settle()
        c.run(200)
        c.check()
        c.faults.survived(f"{request.node.nodeid}[save {n}]")
    assert kills >= 30, kills
