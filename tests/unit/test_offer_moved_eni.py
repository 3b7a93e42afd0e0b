"""An address the agent holds quarantined on one ENI that IMDS lists on another of the node's
ENIs (EC2 gave it there, in an answer the agent never got) moves to that ENI, held as offered, of
unknown origin (``PoolController._moved_offers``). Before, it stayed on the first ENI's record
until that offer's release timeout, unknown on the ENI EC2 has it on, and an offer dated anew at
every join kept that timeout away (the simulation's seed 1060384, ``address-leaked``)."""

from __future__ import annotations

from node_agent.checkpoint import MemoryCheckpoint
from node_agent.controller import AttachedEni, PoolController
from node_agent.datastore import Datastore
from tests.helpers.agent_findings import POOL
from tests.helpers.controller import ID, PRIMARY, SECOND, TIMING, FakeImds
from warmpool.limits import known

X, Y, P = "10.0.0.40", "10.0.0.41", "10.0.0.50"
T0 = 1000.0


def _offered_on_second() -> tuple[FakeImds, Datastore, PoolController]:
    imds = FakeImds()
    imds.add(SECOND, [X, Y])
    ds = Datastore(cooldown_s=0.0, pending_ttl_s=TIMING.pending_ttl_s, checkpoint=MemoryCheckpoint())
    ctl = PoolController(ID, known("m5.large"), POOL, ds, TIMING, metadata=imds)
    ctl.start(T0, checkpoint_lost=True)  # every free address held as offered, of unknown origin
    assert sorted(ds.quarantined()[SECOND.eni_id][0]) == [X, Y]
    return imds, ds, ctl


def _where(ds: Datastore, ip: str) -> list[str]:
    return [e.info.eni_id for e in ds.enis() if ip in e.addrs]


def test_an_offered_address_imds_lists_on_another_eni_moves_there_still_held_as_offered() -> None:
    imds, ds, ctl = _offered_on_second()
    # EC2 took X from the second ENI and gave it to the primary; the agent got neither answer
    imds.enis[SECOND.eni_id] = AttachedEni(SECOND, [Y], [])
    imds.enis[PRIMARY.eni_id] = AttachedEni(PRIMARY, [X], [])
    ctl.resync(T0 + 5)
    assert _where(ds, X) == [PRIMARY.eni_id], "known on the ENI EC2 has it on, and only there"
    assert X in ds.quarantined()[PRIMARY.eni_id][0], "held as offered, never the pool's"
    assert Y in ds.quarantined()[SECOND.eni_id][0], "an offer IMDS still lists there stays"
    report = ctl.tick(T0 + 6)
    assert all(X not in e.ips for r in report for e in r.enis), "never reported as the pool's"
    assert all(o.unknown for r in report for o in r.release if X in o.ips), "of unknown origin"


def test_nothing_moves_on_a_read_listing_it_on_neither_eni_or_for_an_address_a_pod_holds() -> None:
    imds, ds, ctl = _offered_on_second()
    imds.enis[SECOND.eni_id] = AttachedEni(SECOND, [Y], [])  # X on no ENI of the read
    ctl.resync(T0 + 5)
    assert _where(ds, X) == [SECOND.eni_id], "kept quarantined where it was: the offer's answer decides"
    # a pod's address listed on another ENI (seed 1023538's case) stays with its record
    imds2 = FakeImds()
    imds2.add(SECOND, [P])
    ds2 = Datastore(cooldown_s=0.0, pending_ttl_s=TIMING.pending_ttl_s, checkpoint=MemoryCheckpoint())
    ctl2 = PoolController(ID, known("m5.large"), POOL, ds2, TIMING, metadata=imds2)
    ctl2.start(T0)
    assert ds2.assign("pod", "eth0", "/var/run/netns/pod", T0 + 1) is not None
    imds2.enis[SECOND.eni_id] = AttachedEni(SECOND, [], [])
    imds2.enis[PRIMARY.eni_id] = AttachedEni(PRIMARY, [P], [])
    ctl2.resync(T0 + 5)
    assert _where(ds2, P) == [SECOND.eni_id]
