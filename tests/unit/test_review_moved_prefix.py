"""Seed 6069's root cause: a /28 IMDS lists on one ENI while another ENI's record holds its
addresses.

The allocator answered an offer of unknown origin (eni B's /28 P, held as offered after n1's
new instance learnt it from IMDS alone) with an Unassign of P from B and, in the same plan, an
Assign of a fresh /28 to the primary ENI A: EC2 gave P back (the lowest free block). The result
was delayed (SQS), so the next resync read P on A and not on B. ``Datastore.reconcile`` added P
to A first: ``add_addresses`` appended it to ``A.prefixes`` but skipped its 16 addresses (every
one already in ``_ip_eni``, B's, offered and kept quarantined by ``_keep_offered``). A then
listed a /28 with no address under it: ``offers.quarantined`` offered it (``all(())``) and
``offers.quarantined_since`` raised on it (main's dd80f81 stops the offer).

The state is wrong beyond the offer: the checkpoint written from it loads the ENIs in order
and A's P, first, takes the 16 addresses as new, free ones; B's entry then finds none of its
addresses, so what it said of them (a pod holding one, quarantine) is dropped. A restart turns
an address a pod holds into a free one another pod gets: two holders. A prefix is recorded on
an ENI only with every one of its addresses (``Datastore.add_addresses``), and a checkpoint
written before that loads each such prefix on the ENI whose entry says something of its
addresses (``Datastore._load``)."""

from __future__ import annotations

from node_agent import offers
from node_agent.checkpoint import MemoryCheckpoint, checksum
from node_agent.datastore import Datastore
from node_agent.records import EniInfo
from tests.helpers.controller import PRIMARY, SECOND

PFX = "10.0.0.224/28"
HOSTS = [f"10.0.0.{224 + i}" for i in range(16)]


def attached(on: EniInfo) -> list[tuple[EniInfo, list[str], list[str]]]:
    """An IMDS read listing both ENIs, with P on ``on`` only."""
    return [(e, [], [PFX] if e == on else []) for e in (PRIMARY, SECOND)]


def datastore(cp: MemoryCheckpoint | None = None) -> Datastore:
    ds = Datastore(cooldown_s=0.0, checkpoint=cp)
    ds.reconcile(attached(SECOND), 0.0)
    return ds


def whole(ds: Datastore) -> None:
    """Every prefix an ENI record lists has its 16 addresses under it, on that ENI."""
    for e in ds.enis():
        members = e.by_prefix()
        for p in e.prefixes:
            assert len(members.get(p, [])) == 16, f"{e.info.eni_id} lists {p} with {len(members.get(p, []))} addresses"


def test_a_prefix_moved_to_another_eni_is_not_listed_without_its_addresses() -> None:
    ds = datastore()
    assert ds.quarantine(SECOND.eni_id, [], [PFX], 10.0) == 16  # offered
    ds.reconcile(attached(PRIMARY), 20.0)  # EC2 moved it (Unassign, Assign); the result is late
    whole(ds)
    assert ds.quarantined() == {SECOND.eni_id: ([], [PFX])}
    assert ds.quarantined_since() == {SECOND.eni_id: 10.0}
    assert ds.counts(20.0).free_prefixes == 0
    # the release result comes: B's P goes; the next read lists P on A, whole and new
    assert len(ds.remove_addresses(SECOND.eni_id, [], [PFX])) == 16
    ds.reconcile(attached(PRIMARY), 30.0)
    whole(ds)
    assert [e.prefixes for e in ds.enis()] == [[PFX], []]


def test_a_restart_never_frees_an_address_a_pod_holds_under_a_prefix_listed_on_another_eni() -> None:
    cp = MemoryCheckpoint()
    ds = datastore(cp)
    got = ds.assign("pod-a", "eth0", "ns", 5.0)
    assert got is not None and got.ip in HOSTS and got.eni_id == SECOND.eni_id
    ds.reconcile(attached(PRIMARY), 20.0)  # a read from another state (row 6), or EC2 moved P
    after = Datastore(cooldown_s=0.0, checkpoint=cp)
    assert after.restore()
    assert after.lookup("pod-a", "eth0") == got
    whole(after)
    taken = [after.assign(f"pod-{i}", "eth0", "ns", 40.0) for i in range(16)]
    assert got.ip not in [t.ip for t in taken if t is not None], "two pods hold one address"


def test_an_older_checkpoint_listing_a_prefix_on_two_enis_loads_it_where_its_addresses_are() -> None:
    # what an agent before the fix wrote: P on A (no address under it) and on B (a pod on one)
    cp = MemoryCheckpoint()
    ds = datastore(cp)
    got = ds.assign("pod-a", "eth0", "ns", 5.0)
    assert got is not None
    ds.quarantine(SECOND.eni_id, [], [PFX], 10.0)
    data = cp.load()
    assert data is not None
    for entry in data["enis"]:
        if entry["info"]["eni_id"] == PRIMARY.eni_id:
            entry["prefixes"] = [PFX]
    data["checksum"] = checksum(data)
    after = Datastore(cooldown_s=0.0, checkpoint=MemoryCheckpoint(data))
    assert after.restore()
    assert after.lookup("pod-a", "eth0") == got
    whole(after)
    assert offers.quarantined(after.enis()) == {}  # a pod holds one of P's addresses: no offer
    assert sum(a.quarantined_at is not None for e in after.enis() for a in e.addrs.values()) == 15
    assert after.assign("pod-b", "eth0", "ns", 40.0) is None  # the rest is quarantined
