"""Review 10, finding A1: WARMPOOL_POD_NETWORK=recorded with a *missing* checkpoint (the state
directory lost, not a damaged file) takes the "empty" start, not the rebuild that holds every
address (`Agent._rebuild`: `damaged is None and (wiring is None or not wiring.pods)`). Nothing
can read the pods in that mode (docs/agent.md: "every attached address is held (holder ?)"), so a
running pod's address is quarantined as an offer of unknown origin and reported: the allocator
unassigns what EC2 shows of such an offer, and EC2 gives it to another node while the pod runs."""

from __future__ import annotations

from pathlib import Path

from node_agent.cniserver import RecordedPods
from tests.helpers.controller import PRIMARY
from tests.helpers.first_start import Node, pod_on_fresh_address


def _offered(report) -> set[str]:
    return {ip for o in report.release for ip in o.ips}


def test_a_lost_checkpoint_in_recorded_mode_never_offers_a_running_pods_address(tmp_path: Path) -> None:
    n = Node(tmp_path, adopt_launch_pool=False)
    n.pods = RecordedPods("eni")  # type: ignore[assignment]
    try:
        got = pod_on_fresh_address(n, WARMPOOL_POD_NETWORK="recorded")
        # the node's state directory is lost (a new disk, a hostPath wiped); the pod runs on
        n.lose_checkpoint()
        n.start(WARMPOOL_POD_NETWORK="recorded")
        offered: set[str] = set()
        for _ in range(5):
            r = n.step(30)
            if r is not None:
                offered |= _offered(r)
        assert got not in offered, (
            f"{got}, held by a running pod, offered back after a lost checkpoint in recorded mode"
            " (the allocator unassigns offers of unknown origin: another node gets it)"
        )
    finally:
        n.stop()


def test_a_recorded_rebuild_holds_addresses_of_an_eni_its_first_read_lacked() -> None:
    """The damaged-checkpoint rebuild in recorded mode holds (``hold_all``) only what its first
    IMDS read lists. A read that lacks a secondary ENI the pods use (IMDS lagging, or a read from
    another state: rows 4-6; the very reads the rest of the design never trusts to prove anything
    gone) leaves that ENI to the next resync, whose addresses are then held as offers of unknown
    origin and reported: the allocator unassigns them while the pods on them run."""
    from node_agent.checkpoint import MemoryCheckpoint
    from node_agent.controller import PoolController
    from node_agent.datastore import Datastore
    from tests.helpers.agent_findings import POOL
    from tests.helpers.controller import ID, SECOND, TIMING, FakeImds
    from warmpool.limits import known

    imds = FakeImds()
    imds.add(PRIMARY, ["10.0.0.11"])
    t = 5000.0
    ds = Datastore(cooldown_s=0.0, pending_ttl_s=TIMING.pending_ttl_s, checkpoint=MemoryCheckpoint())
    ctl = PoolController(ID, known("m5.large"), POOL, ds, TIMING, metadata=imds)
    with ds.batch():  # node_agent/agent.py::_rebuild, damaged, WARMPOOL_POD_NETWORK=recorded
        ctl.start(t, checkpoint_lost=True)
        ds.hold_all(t)
        ds.set_meta("held_all_at", t)
    # the next read lists SECOND, on whose addresses the runtime's pods run
    imds.add(SECOND, ["10.0.0.21", "10.0.0.22"])
    ctl.resync(t + 60)
    offered: set[str] = set()
    for k in range(1, 6):
        for r in ctl.tick(t + 60 + 10 * k):
            offered |= _offered(r)
    assert not offered & {"10.0.0.21", "10.0.0.22"}, (
        f"{sorted(offered)}: addresses pods may hold (recorded mode cannot tell) offered after the rebuild"
    )
