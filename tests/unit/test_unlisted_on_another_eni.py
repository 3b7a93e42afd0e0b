"""An address a record holds on one ENI that IMDS now lists on another ENI of the node (the
simulation's seed 1023538): an older copy restored after its pod was DELeted, the address
unassigned and assigned again by EC2 to the node's other ENI, where a pod the copy lacks carries
it; the start keeps the record (``doubtful_records``: the host routes the address through another
pod's veth). IMDS no longer lists it on the record's ENI, so it is kept for its holder and never
handed out (``Datastore.unlisted``); but EC2 has it on the node, and the allocator counts it in the
node's pool (EC2's) and in use (the report's). Counted in the agent's use and not in its pool (as an
address EC2 may have taken, ``Counts.of``), the agent was short by one for good and the allocator,
rightly, granted nothing (``not-settled``). It now counts in both: the agent and the allocator
agree. The hold is untouched: never offered, never given."""

from __future__ import annotations

from node_agent.datastore import Datastore
from node_agent.records import EniInfo, NodeIdentity
from node_agent.report import build_report
from warmpool.limits import known
from warmpool.planner import Eni, Inventory, inventory_state
from warmpool.pool import PoolConfig, PoolState, compute

A = EniInfo("eni-0000000a", 0, "0a:00:00:00:00:0a", "10.0.0.4", "subnet-a", "10.0.0.0/24")
B = EniInfo("eni-0000000b", 1, "0a:00:00:00:00:0b", "10.0.0.5", "subnet-a", "10.0.0.0/24")
IDENT = NodeIdentity("c1", "n0", "i-0123456789abcdef0", "c5.xlarge", "us-east-1a")
POOL = PoolConfig(warm_ip=2)


def _node() -> Datastore:
    """Pods on .8 and .9 (A); an old copy's record of a DELeted pod holds .10 on A, which EC2 has
    since moved to B (IMDS: A .8 .9, B .10 .20 .21)."""
    ds = Datastore(cooldown_s=30.0, pending_ttl_s=60.0)
    ds.add_eni(A, 0.0)
    ds.add_addresses(A.eni_id, ["10.0.0.8", "10.0.0.9", "10.0.0.10"])
    for cid in ("a", "b", "old"):
        assert ds.assign(cid, "eth0", "ns-" + cid, 1.0) is not None
    assert {p.container_id: p.ip for p in ds.pods()}["old"] == "10.0.0.10"
    notes = ds.reconcile([(A, ["10.0.0.8", "10.0.0.9"], []), (B, ["10.0.0.10", "10.0.0.20", "10.0.0.21"], [])], 2.0)
    assert any("10.0.0.10" in n and "alarm" in n for n in notes)
    assert ds.unlisted() == ["10.0.0.10"]
    return ds


def _agent_and_allocator(ds: Datastore, now: float) -> tuple[PoolState, PoolState]:
    c = ds.counts(now)
    agent = PoolState(c.total, c.assigned, c.pending, c.enis, c.free_prefixes, c.free_singles)
    r = build_report(IDENT, POOL, ds, {}, seq=1, now=now, signed=None, skipped=lambda *_: None)
    ec2 = Inventory(
        IDENT.instance_id,
        "c5.xlarge",
        "us-east-1a",
        (
            Eni(A.eni_id, 0, 0, "subnet-a", A.primary_ip, ("10.0.0.8", "10.0.0.9")),
            Eni(B.eni_id, 1, 0, "subnet-a", B.primary_ip, ("10.0.0.10", "10.0.0.20", "10.0.0.21")),
        ),
    )
    return agent, inventory_state(r, ec2)


def test_the_agent_and_the_allocator_agree_on_an_address_moved_to_another_eni() -> None:
    ds = _node()
    agent, allocator = _agent_and_allocator(ds, 100.0)
    limits = known("c5.xlarge")
    assert (allocator.total, allocator.assigned) == (5, 3)
    assert (agent.total, agent.assigned) == (allocator.total, allocator.assigned), (agent, allocator)
    assert compute(POOL, agent, limits) == compute(POOL, allocator, limits)
    assert not compute(POOL, agent, limits).low


def test_the_moved_address_stays_held_never_offered_never_given() -> None:
    ds = _node()
    assert sorted(ip for _, ip in ds.releasable_ips(100.0)) == ["10.0.0.20", "10.0.0.21"]
    assert ds.assign("c", "eth0", "ns-c", 100.0) is not None
    assert ds.assign("d", "eth0", "ns-d", 100.0) is not None
    assert ds.assign("e", "eth0", "ns-e", 100.0) is None  # not .10
    assert {p.container_id: p.ip for p in ds.pods()}["old"] == "10.0.0.10"


def test_an_address_imds_lists_on_no_eni_still_counts_in_use_only() -> None:
    """What seeds 1000042 and 1007089 need, unchanged: gone from every ENI, EC2 may have taken it."""
    ds = _node()
    ds.reconcile([(A, ["10.0.0.8", "10.0.0.9"], []), (B, ["10.0.0.20", "10.0.0.21"], [])], 3.0)
    assert ds.unlisted() == ["10.0.0.10"]
    c = ds.counts(100.0)
    assert (c.total, c.assigned, c.available) == (4, 3, 1)
