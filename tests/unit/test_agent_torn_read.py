"""A read that omits a whole ENI (torn/lagging list; fix 3 says this happens) marks every
released key of that ENI 'seen absent'; the next lagging read lists it again -> taken free."""

from node_agent.checkpoint import MemoryCheckpoint
from tests.helpers.agent_findings import X, holders, released_x
from tests.helpers.controller import PRIMARY, FakeImds


def test_a_read_that_leaves_out_an_eni_is_no_proof_its_released_address_is_gone() -> None:
    """Hostile review (issue 21): one IMDS read whose interface list omits a held ENI marked the
    ENI's released address "seen absent"; the next, still lagging, read listed it, and it went
    to a pod while EC2 had it on another instance. Only a read listing every held ENI counts."""
    imds = FakeImds()
    cp = MemoryCheckpoint()
    t0 = 1000.0
    ds, ctl = released_x(cp, imds, t0)  # X released by EC2 (now another node's); IMDS lags, lists X
    ds.assign("p-old", "eth0", "ns", t0 + 63)  # a pod on .11 so the ENI is held if omitted
    saved = imds.enis.pop(PRIMARY.eni_id)  # one torn read: interface list omits the ENI
    ctl.resync(t0 + 70)
    assert not ds.seen_absent(X), "a read that left the ENI out counted as proof X is gone"
    imds.enis[PRIMARY.eni_id] = saved  # IMDS still lagging: lists X again
    for dt in range(130, 400, 60):
        ctl.resync(t0 + dt)
        ctl.tick(t0 + dt)
    for i in range(3):
        ds.assign(f"p{i}", "eth0", "ns", t0 + 400)
    assert X not in holders(ds), f"released X handed to a pod: {holders(ds)}"
