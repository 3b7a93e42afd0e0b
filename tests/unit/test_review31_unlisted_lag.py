"""Review 31, B1: an address IMDS no longer lists is counted neither in the agent's pool nor in its
use since the fix of seeds 1000042/1007089 (``Counts.of``, ``build_report``). That is right when EC2
took the address (the fix's case). When IMDS only lags or answers from an older state (docs/safety.md
rows 4 and 6: a grant handed to pods before IMDS lists it, a regressed read) EC2 still shows the
address on the ENI: the allocator counts it in the pool (EC2's) and not in use (the report's), so it
sees a free address the node does not have. Pods that wait on a node with ``WARM_IP_TARGET`` (or a
node planned lean) are then not served until IMDS lists the addresses again; before the fix both
sides counted them in use and the allocator granted at once."""

from __future__ import annotations

from node_agent.datastore import Datastore
from node_agent.records import EniInfo, NodeIdentity
from node_agent.report import build_report
from warmpool.limits import known
from warmpool.planner import Eni, Inventory, inventory_state
from warmpool.pool import PoolConfig, PoolState, compute

PRIMARY = EniInfo("eni-00000000", 0, "0a:00:00:00:00:00", "10.0.0.4", "subnet-a", "10.0.0.0/24")
IDENT = NodeIdentity("c1", "n0", "i-0123456789abcdef0", "c5.xlarge", "us-east-1a")
POOL = PoolConfig(warm_ip=1)
ON_ENI = ("10.0.0.8", "10.0.0.9", "10.0.0.10")


def test_a_waiting_pod_is_served_while_imds_lags_on_addresses_pods_use() -> None:
    ds = Datastore(cooldown_s=30.0, pending_ttl_s=60.0)
    ds.add_eni(PRIMARY, 0.0)
    ds.add_addresses(PRIMARY.eni_id, list(ON_ENI))
    for cid in ("a", "b", "c"):  # .9 and .10 granted and handed out on EC2's word
        assert ds.assign(cid, "eth0", "ns", 1.0) is not None
    assert ds.assign("d", "eth0", "ns", 2.0) is None  # pod d waits
    ds.reconcile([(PRIMARY, ["10.0.0.8"], [])], 3.0)  # IMDS lags behind the grant of .9 and .10
    assert ds.unlisted() == ["10.0.0.10", "10.0.0.9"]
    c = ds.counts(4.0)
    limits = known("c5.xlarge")
    agent = compute(POOL, PoolState(c.total, c.assigned, c.pending, c.enis, c.free_prefixes, c.free_singles), limits)
    assert agent.low and c.pending == 1, "setup: the node has no free address and a pod waits"
    r = build_report(IDENT, POOL, ds, {}, seq=1, now=4.0, signed=None, skipped=lambda *_: None)
    ec2 = Inventory(
        IDENT.instance_id,
        "c5.xlarge",
        "us-east-1a",
        (Eni(PRIMARY.eni_id, 0, 0, "subnet-a", "10.0.0.4", ON_ENI),),  # EC2 still has all three
    )
    state = inventory_state(r, ec2)
    allocator = compute(POOL, state, limits)
    assert allocator.low, (
        f"pod d waits and the node has no free address, yet the allocator sees {state.total - state.assigned}"
        f" free ({state}): nothing is granted until IMDS lists .9 and .10 again"
    )
