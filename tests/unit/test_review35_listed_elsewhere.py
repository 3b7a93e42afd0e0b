"""Review 35 of the seed 1023538 change (an address a record holds that IMDS lists on another of the
node's ENIs than its record's counts in the agent's pool as well as in use: ``Datastore.reconcile``'s
``_listed_elsewhere``, ``Counts.of``).

Finding (asserting what should hold; fixed after the review: only an ENI the pool counts, not one
kept held, makes a moved address count in the agent's pool):

* **L1** (cost: the agent and the allocator disagree for as long as the record lasts): "another of
  the node's ENIs" is any ENI of the resync's read the agent keeps, a *held* one included: an ENI
  tagged ``no_manage`` (or a card above 0 without ``WARMPOOL_MULTI_CARD``, or the primary under
  custom networking) the datastore keeps, held, for the pods on it (``Controller._usable``). Its
  addresses are not the pool's: the allocator counts none of them (``inventory_state`` counts only
  ``usable`` ENIs, and its pods' use as ``outside``). An address EC2 moved there (the record's pod
  DELeted since, as in the seed; another tool on that ENI got it) is now counted by the agent in its
  pool, while the allocator, which counts it in use on the record's ENI (the report), does not count
  it in the pool: the agent sees one address more free than the allocator does. Before the change
  both counted it in use only, and agreed.

Sound (passing): a listed-elsewhere address is never in a report's ``ips`` or ``prefixes``, never
releasable, never handed out, in secondary-address mode and for a ``/28`` member EC2 moved with
its prefix; its record's release makes it count nowhere.
"""

from __future__ import annotations

import ipaddress

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
MOVED = "10.0.0.10"


def _states(ds: Datastore, ec2: Inventory, now: float) -> tuple[PoolState, PoolState]:
    c = ds.counts(now)
    agent = PoolState(c.total, c.assigned, c.pending, c.enis, c.free_prefixes, c.free_singles)
    r = build_report(IDENT, POOL, ds, {}, seq=1, now=now, signed=None, skipped=lambda *_: None)
    return agent, inventory_state(r, ec2)


def _moved_to_a_held_eni() -> Datastore:
    """Pods on .8 and .9 (A, managed), an old copy's record of a DELeted pod on .10 (A), .20 and .21
    free (A); B is tagged ``no_manage`` and kept, held, for its pod on .30. EC2 has moved .10 to B
    (IMDS: A .8 .9 .20 .21; B .30 .10)."""
    ds = Datastore(cooldown_s=30.0, pending_ttl_s=60.0)
    ds.add_eni(A, 0.0)
    ds.add_addresses(A.eni_id, ["10.0.0.8", "10.0.0.9", MOVED])
    for cid in ("a", "b", "old"):
        assert ds.assign(cid, "eth0", "ns-" + cid, 1.0) is not None
    ds.add_eni(B, 0.0)
    ds.add_addresses(B.eni_id, ["10.0.0.30"])
    assert ds.assign("u", "eth0", "ns-u", 1.0) == ("10.0.0.30", B.eni_id)
    ds.add_addresses(A.eni_id, ["10.0.0.20", "10.0.0.21"])
    assert {p.container_id: p.ip for p in ds.pods()}["old"] == MOVED
    ds.reconcile(
        [(A, ["10.0.0.8", "10.0.0.9", "10.0.0.20", "10.0.0.21"], []), (B, ["10.0.0.30", MOVED], [])],
        2.0,
        held=[B.eni_id],
    )
    assert ds.unlisted() == [MOVED]
    return ds


EC2_HELD_B = Inventory(
    IDENT.instance_id,
    "c5.xlarge",
    "us-east-1a",
    (
        Eni(A.eni_id, 0, 0, "subnet-a", A.primary_ip, ("10.0.0.8", "10.0.0.9", "10.0.0.20", "10.0.0.21")),
        Eni(B.eni_id, 1, 0, "subnet-a", B.primary_ip, ("10.0.0.30", MOVED), assignable=False),
    ),
)


def test_l1_an_address_moved_to_a_held_eni_the_agent_and_the_allocator_agree() -> None:
    ds = _moved_to_a_held_eni()
    agent, allocator = _states(ds, EC2_HELD_B, 100.0)
    # the allocator: A's four addresses in the pool, A's three records in use (B's pod is outside)
    assert (allocator.total, allocator.assigned) == (4, 3)
    assert agent.total - agent.assigned - agent.pending == allocator.available, (agent, allocator)
    limits = known("c5.xlarge")
    assert compute(POOL, agent, limits) == compute(POOL, allocator, limits)


def test_l1_the_address_moved_to_a_held_eni_stays_held() -> None:
    ds = _moved_to_a_held_eni()
    assert sorted(ip for _, ip in ds.releasable_ips(100.0)) == ["10.0.0.20", "10.0.0.21"]
    r = build_report(IDENT, POOL, ds, {}, seq=1, now=100.0, signed=None, skipped=lambda *_: None)
    assert all(MOVED not in e.ips for e in r.enis)
    assert ds.assign("c", "eth0", "ns-c", 100.0) is not None
    assert ds.assign("d", "eth0", "ns-d", 100.0) is not None
    assert ds.assign("e", "eth0", "ns-e", 100.0) is None
    assert {p.container_id: p.ip for p in ds.pods()}["old"] == MOVED


P = "10.0.0.32/28"
MEMBER = "10.0.0.33"


def _prefix_moved() -> Datastore:
    """Prefix mode: a record on A holds .33 of A's /28 .32; EC2 moved that /28 to B (IMDS: A lists
    the /28 .64, B the /28 .32)."""
    ds = Datastore(cooldown_s=30.0, pending_ttl_s=60.0)
    ds.add_eni(A, 0.0)
    ds.add_addresses(A.eni_id, prefixes=[P])
    assert ds.assign("old", "eth0", "ns-old", 1.0) == ("10.0.0.32", A.eni_id)
    assert ds.assign("old2", "eth0", "ns-old2", 1.0) == (MEMBER, A.eni_id)
    ds.release("old", "eth0", 1.5)
    ds.add_eni(B, 0.0)
    ds.reconcile([(A, [], ["10.0.0.64/28"]), (B, [], [P])], 2.0)
    assert MEMBER in ds.unlisted()
    return ds


def test_a_moved_prefix_member_is_counted_once_and_nothing_of_its_prefix_is_free() -> None:
    ds = _prefix_moved()
    c = ds.counts(100.0)
    # A's new /28 (16) and the held member; the moved /28's other members count nowhere
    assert (c.total, c.assigned) == (17, 1)
    free = {ip for _, ip in ds.releasable_ips(100.0)}
    assert not free & {str(i) for i in ipaddress.IPv4Network(P)}
    r = build_report(IDENT, POOL, ds, {}, seq=1, now=100.0, signed=None, skipped=lambda *_: None)
    assert all(P not in e.prefixes and MEMBER not in e.ips for e in r.enis)
    got = set()
    for k in range(20):
        a = ds.assign(f"p{k}", "eth0", f"ns-p{k}", 100.0)
        if a is None:
            break
        got.add(a[0])
    assert not got & {str(i) for i in ipaddress.IPv4Network(P)}, "a moved /28 member handed out"


def test_the_records_release_ends_its_count() -> None:
    ds = _moved_to_a_held_eni()
    before = ds.counts(100.0)
    ds.release("old", "eth0", 100.0)
    after = ds.counts(100.0)
    # on a held ENI the moved address counts in use only, as the allocator counts it (L1, fixed):
    # its record's release takes it out of use and leaves the pool as it was
    assert (after.total, after.assigned) == (before.total, before.assigned - 1)
    assert MOVED not in {ip for _, ip in ds.releasable_ips(200.0)}
