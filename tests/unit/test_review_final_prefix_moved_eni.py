"""Review (final): a /28 the allocator unassigned from ENI A (its ``released`` lost, so A's copy
stays quarantined, unlisted) and EC2 then assigned to ENI B of the same node (seed 6069's state).

``Datastore.add_addresses`` skips every member of the /28 for B (each is still in ``_ip_eni``,
A's), and once A's stale copy goes (take-back / late ``released``), no later reconcile adds them:
``add_addresses`` ``continue``s on a prefix B already lists. B keeps a /28 with no member for good:
never handed out, never offered (offers.quarantined after 6069), so never released, and counted
as a *free prefix* (Counts.free_prefixes), so in prefix mode the agent believes its warm /28 is
there and asks for none while pods find no address."""

from __future__ import annotations

from node_agent.datastore import Datastore
from node_agent.records import EniInfo

A = EniInfo("eni-a", 1, "0a:00:00:00:00:01", "10.0.0.20", "subnet-a", "10.0.0.0/24")
B = EniInfo("eni-b", 2, "0a:00:00:00:00:02", "10.0.0.30", "subnet-a", "10.0.0.0/24")
P = "10.0.1.224/28"


def test_prefix_moved_to_another_eni_gets_its_members_back() -> None:
    ds = Datastore(cooldown_s=0)
    ds.reconcile([(A, [], [P]), (B, [], [])], 0.0)
    assert ds.quarantine("eni-a", [], [P], 1.0) == 16
    # EC2 unassigned P from A (released lost) and assigned it to B; IMDS shows so
    ds.reconcile([(A, [], []), (B, [], [P])], 2.0)
    # A's stale copy goes (late ``released`` / take-back: EC2 took it)
    ds.remove_addresses("eni-a", [], [P])
    ds.reconcile([(A, [], []), (B, [], [P])], 3.0)
    b = next(e for e in ds.enis() if e.info.eni_id == "eni-b")
    c = ds.counts(4.0)
    # B's /28 is EC2's on B and no pod holds it: its 16 addresses are the pool's
    assert len(b.by_prefix().get(P, [])) == 16, (b.prefixes, b.by_prefix(), c)
    assert c.total == 16 and c.free_prefixes == 1
