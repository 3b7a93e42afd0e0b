"""An address IMDS no longer lists, kept for its holder (a pod, or a start's ``?`` or ``unrouted``
hold) and never handed out, counts in the agent's use but not in its pool, in its counts and in
its report alike. The allocator counts a node's pool from EC2 and its use from the report: counted
in the agent's pool too, such an address (EC2 took it) was a surplus the allocator did not see,
and every offer of it was taken back, each release delay, for as long as the hold lasted (the
simulation's seeds 1000042 and 1007089, ``not-settled``); counted in neither (the first fix), an
address IMDS only lags on was free to the allocator and a waiting pod was not served (review 31,
B1: ``tests/unit/test_review31_unlisted_lag.py``). The hold itself is untouched: the address stays
held, never offered, never given."""

from __future__ import annotations

from node_agent.datastore import Datastore
from node_agent.records import EniInfo, NodeIdentity
from node_agent.report import build_report
from warmpool.limits import known
from warmpool.planner import Eni, Inventory, inventory_state
from warmpool.pool import PoolConfig, PoolState, compute

PRIMARY = EniInfo("eni-00000000", 0, "0a:00:00:00:00:00", "10.0.0.4", "subnet-a", "10.0.0.0/24")
IDENT = NodeIdentity("c1", "n0", "i-0123456789abcdef0", "c5.xlarge", "us-east-1a")
POOL = PoolConfig(warm_ip=1, minimum_ip=2)


def _node() -> Datastore:
    """Seed 1000042's n0 at its end, its start's holds by ``unrouted`` (the seed's are ``?``, 1007089's
    ``unrouted``): a pod on .8, holds on .9 (EC2 took it) and .10, .22 and
    .23 free; IMDS lists .8, .10, .22, .23."""
    ds = Datastore(cooldown_s=30.0, pending_ttl_s=60.0)
    ds.add_eni(PRIMARY, 0.0)
    ds.add_addresses(PRIMARY.eni_id, ["10.0.0.8", "10.0.0.9", "10.0.0.10", "10.0.0.22", "10.0.0.23"])
    assert ds.assign("pod", "eth0", "ns", 1.0) == ("10.0.0.8", PRIMARY.eni_id)
    ds.recover({"10.0.0.9": "unrouted", "10.0.0.10": "unrouted"}, 2.0)
    notes = ds.reconcile([(PRIMARY, ["10.0.0.8", "10.0.0.10", "10.0.0.22", "10.0.0.23"], [])], 3.0)
    assert any("10.0.0.9" in n and "alarm" in n for n in notes)
    assert ds.unlisted() == ["10.0.0.9"]
    return ds


def test_the_agent_counts_no_address_imds_no_longer_lists() -> None:
    ds = _node()
    c = ds.counts(100.0)
    assert (c.total, c.assigned, c.available) == (4, 3, 1)
    # still held: never offered, never given
    assert sorted(ip for _, ip in ds.releasable_ips(100.0)) == ["10.0.0.22", "10.0.0.23"]
    assert {h.ip for h in ds.recovered_holders()} == {"10.0.0.9", "10.0.0.10"}
    assert ds.assign("a", "eth0", "ns", 100.0) is not None
    assert ds.assign("b", "eth0", "ns", 100.0) is not None
    assert ds.assign("c", "eth0", "ns", 100.0) is None  # not .9


def test_the_report_and_ec2_agree_with_the_agent_on_the_surplus() -> None:
    ds = _node()
    r = build_report(IDENT, POOL, ds, {}, seq=1, now=100.0, signed=None, skipped=lambda *_: None)
    (e,) = r.enis
    assert "10.0.0.9" not in e.ips and e.assigned == 3 and r.assigned_ips == 3
    limits = known("c5.xlarge")
    c = ds.counts(100.0)
    agent = compute(POOL, PoolState(c.total, c.assigned, c.pending, c.enis, c.free_prefixes, c.free_singles), limits)
    ec2 = Inventory(
        IDENT.instance_id,
        "c5.xlarge",
        "us-east-1a",
        (Eni(PRIMARY.eni_id, 0, 0, "subnet-a", "10.0.0.4", ("10.0.0.8", "10.0.0.10", "10.0.0.22", "10.0.0.23")),),
    )
    allocator = compute(POOL, inventory_state(r, ec2), limits)
    reported = compute(POOL, PoolState.from_report(r), limits)
    assert agent.over_units == allocator.over_units == reported.over_units == 0
    assert not allocator.low and not agent.low
