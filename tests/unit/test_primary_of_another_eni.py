"""An address the datastore records on one ENI that is another ENI's primary address (the
simulation's seed 1100805): a rebuild after a lost checkpoint held every address a stale IMDS
read showed on the primary ENI, one of them already unassigned by EC2; EC2 then made it the
primary address of the node's new ENI, which a result's claim added before the next resync found
the address gone from the first. An address is on one interface at a time (docs/safety.md row 1):
it is that ENI's. Until the resync, the report listed it twice (as the first ENI's and as the new
one's primary: invalid, no report sent), and a free one could have gone to a pod."""

from __future__ import annotations

from node_agent.datastore import Datastore
from node_agent.records import EniInfo, NodeIdentity
from node_agent.report import build_report
from warmpool.pool import PoolConfig

IDENT = NodeIdentity("c", "n1", "i-0123456789abcdef0", "m5.large", "us-east-1a")
FIRST = EniInfo("eni-0000000000000000a", 0, "02:00:00:00:00:0a", "10.0.0.5", "subnet-a", "10.0.0.0/23")
NEW = EniInfo("eni-0000000000000000b", 1, "02:00:00:00:00:0b", "10.0.0.19", "subnet-a", "10.0.0.0/23")
X = "10.0.0.19"


def _datastore(*, held: bool) -> Datastore:
    ds = Datastore(cooldown_s=0.0, pending_ttl_s=60.0)
    ds.add_eni(FIRST, 0.0)
    ds.add_addresses(FIRST.eni_id, ["10.0.0.18", X])
    if held:
        ds.hold_unknown({X}, 1.0)  # the rebuild's `?` hold (a pod may carry it)
    ds.add_eni(NEW, 2.0)  # the claim's new ENI, primary X
    ds.add_addresses(NEW.eni_id, ["10.0.0.20", "10.0.0.21"])
    return ds


def test_the_report_lists_another_enis_primary_once() -> None:
    for held in (True, False):
        ds = _datastore(held=held)
        r = build_report(IDENT, PoolConfig(warm_ip=2), ds, {}, seq=1, now=3.0, signed=None, skipped=lambda *_: None)
        listed = [a for e in r.enis for a in (e.primary_ip, *e.ips)]
        assert listed.count(X) == 1, (held, listed)
        assert next(e for e in r.enis if e.eni_id == FIRST.eni_id).ips == ["10.0.0.18"]
        if held:
            assert r.assigned_ips == 1, "a held address still counts as assigned (a pod may carry it)"


def test_another_enis_primary_never_goes_to_a_pod() -> None:
    ds = _datastore(held=False)
    got = [ds.assign(f"pod{i}", "eth0", f"ns{i}", 3.0) for i in range(5)]
    ips = [a.ip for a in got if a is not None]
    assert X not in ips, ips
    assert sorted(ips) == ["10.0.0.18", "10.0.0.20", "10.0.0.21"]
