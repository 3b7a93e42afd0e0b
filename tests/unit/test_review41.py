"""Hostile review 41 of 4313d62..cac2c26, read as one: the unlisted clock (rule 1:
``PoolController._note_unlisted``, ``_due_unlisted``, ``_take_back``'s second loop, ``_drop_gone``),
another ENI's primary address kept out of the pool (rule 2: ``build_report``, ``Datastore._pick``,
and of two ENIs with one primary the one the last read listed), and the start's check of recovered
holders' veth peers (rule 3: ``agent.holder_disagreements``, ``_next_add_takes``), against each other
and the older machinery.

Finding (a strict xfail until fixed after the review, passing since: `Datastore._unusable` keeps
another ENI's primary out of the counts and the offers as out of `_pick`):

* Q1 (cost, low): rule 2 stops at ``_pick`` and the report. ``Counts.of`` (the agent's own sizing,
  ``PoolController.delta``) and the surplus choice (``offers.releasable_ips``) still count another
  ENI's primary address, recorded free on the first ENI (seed 1100805's shape: a read that still
  lists it there), as a free address of the pool. With one address kept warm the agent then sees a
  surplus and offers the only address a pod can get, keeping the one no pod may have: the next pod
  waits for the allocator's round trip (a hand-back) though the node "had" a warm address. For as
  long as a read lists the address on the first ENI; the allocator counts from EC2 and answers the
  waiting pod, so bounded (a stale ENI record whose primary EC2 gave the node as a secondary is the
  longer-lived variant: the allocator then counts that address free too).

Attacks that failed (passing pins):

* rule 1 against a recovered holder: an offered address whose unlisted clock started and that a
  holder then took (a start's hold) is never dropped when the clock ends, nor marked released;
* rule 2 and the allocator: an offer naming another ENI's primary address (the agent offers it on
  the first ENI, from ``releasable_ips``) is never unassigned nor handed back: ``_plan_release`` and
  ``_offers_ec2_shows`` keep an offer to what EC2 shows among each ENI's secondary addresses;
* rule 2 with rule 1 and the stamp's timeout: an ENI EC2 deleted (the ``deleted`` result lost), kept
  unseen for its offer, whose primary address EC2 then granted the node on the primary ENI: a pod
  waiting for it gets it once the offer's timeout drops the deleted ENI (bounded: within two release
  timeouts here, reports going out meanwhile with the waiting pod);
* rule 3 against the ADD: the "first" of several held addresses is the same under string order for
  the check (``min``) and the ADD (``lookup_recovered``), so ``10.0.0.100`` before ``10.0.0.99`` is
  judged as the ADD takes it;
* rule 3 with rule 1 and the rebuild: a copy the holder check refuses while an offered address is
  mid-drop (unassigned by EC2, the ``released`` lost, its unlisted clock running) is rebuilt, which
  forgets the offer, its clock and the released filter; a read from before the unassign listing the
  address again, inside the rebuild's window and ten minutes after, never frees it (row 6's rule for
  a loss holds it as offered, of unknown origin), while fresh grants reach the waiting pods.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from node_agent.agent import holder_disagreements
from node_agent.checkpoint import MemoryCheckpoint
from node_agent.controller import PoolController
from node_agent.datastore import Datastore
from node_agent.hostnet import HostWiring, host_veth_name
from node_agent.records import EniInfo
from tests.helpers.agent_findings import POOL
from tests.helpers.agent_world import cni_add
from tests.helpers.controller import ID, PRIMARY, SECOND, TIMING, FakeImds
from tests.helpers.first_start import IPS, Node, grant_more, pod_on_fresh_address
from tests.helpers.kernel_pods import KernelPods
from warmpool.calls import Reclaim, UnassignAddresses
from warmpool.limits import known
from warmpool.messages import PoolReport, ReleaseOffer
from warmpool.planner import Eni, Inventory, plan_node
from warmpool.subnets import Subnet

T0 = 1000.0
TR = 1_000_000.0  # the report's time: its offer an hour old
X = SECOND.primary_ip  # 10.0.0.20: SECOND's primary address
Y, S1 = "10.0.0.11", "10.0.0.40"


def _controller(imds: FakeImds) -> tuple[Datastore, PoolController]:
    ds = Datastore(cooldown_s=0.0, pending_ttl_s=TIMING.pending_ttl_s, checkpoint=MemoryCheckpoint())
    ctl = PoolController(ID, known("m5.large"), POOL, ds, TIMING, metadata=imds)
    ctl.start(T0)
    for e in ds.enis():
        ds.set_ready(e.info.eni_id, ready=True)
    return ds, ctl


def _assignable(ds: Datastore, now: float) -> list[str]:
    got = [ds.assign(f"probe{i}", "eth0", f"/var/run/netns/probe{i}", now) for i in range(10)]
    for i in range(10):
        ds.release(f"probe{i}", "eth0", now)
    return sorted(a.ip for a in got if a is not None)


# --- Q1: another ENI's primary counted free ------------------------------------------------------


def test_another_enis_primary_recorded_free_never_makes_the_last_usable_address_surplus() -> None:
    # A read that still lists X on the primary ENI (it lags there) beside SECOND, whose primary X
    # is now: seed 1100805's shape, with X free rather than held. Listed after Y: the newest.
    imds = FakeImds()
    imds.add(PRIMARY, [Y, X])
    imds.add(SECOND, [S1])
    ds, ctl = _controller(imds)
    assert ds.assign("pod0", "eth0", "/var/run/netns/pod0", T0 + 1) is not None, "setup: a pod"
    assert X not in _assignable(ds, T0 + 2), "setup: rule 2 keeps X from pods"
    t = T0 + 2
    for _ in range(6):  # past the release delay
        t += TIMING.release_delay_s / 2
        ctl.resync(t)
        ctl.tick(t + 0.5)
    free = _assignable(ds, t + 1)
    # POOL keeps one address warm: the node must still have one a pod can get.
    assert len(free) >= POOL.warm_ip, (
        f"addresses a pod can get: {free}; offered: {ds.quarantined()};"
        f" the agent counts {ds.counts(t + 1).available} available"
    )


# --- pins ----------------------------------------------------------------------------------------


def test_the_unlisted_clock_never_drops_an_address_a_holder_took_since() -> None:
    imds = FakeImds()
    imds.add(SECOND, [S1, "10.0.0.41"])
    ds, ctl = _controller(imds)
    assert ds.quarantine(SECOND.eni_id, [S1], [], T0 + 1) == 1
    ctl.tick(T0 + 2)
    imds.enis[SECOND.eni_id] = imds.enis[SECOND.eni_id].__class__(SECOND, ["10.0.0.41"], [])
    ctl.resync(T0 + 10)  # the clock starts
    assert (SECOND.eni_id, S1) in ctl._unlisted_since, "setup: the unlisted clock runs"
    veth = host_veth_name("podh", "eth0", "eni")
    ds.recover({S1: veth}, T0 + 20)  # a holder takes it (a start's hold of a routed veth)
    for k in range(1, 12):
        ctl.resync(T0 + 10 + 30 * k)
        ctl.tick(T0 + 11 + 30 * k)
    assert ds.eni_of(S1) is not None and ds.recovered_holder(S1) == veth, "the holder's address was dropped"
    assert S1 not in ds.recently_gone(T0 + 400)[0], "the holder's address was said released"


def _offer_report(offer_ip: str) -> PoolReport:
    return PoolReport.model_validate(
        {
            "cluster": ID.cluster,
            "node": ID.node,
            "instance_id": ID.instance_id,
            "instance_type": ID.instance_type,
            "availability_zone": ID.availability_zone,
            "seq": 5,
            "sent_at": TR,
            "mode": "secondary-ip",
            "targets": {"warm_ip": 0, "minimum_ip": 0, "warm_eni": 0, "warm_prefix": 0, "max_eni": 0},
            "enis": [
                {
                    "eni_id": PRIMARY.eni_id,
                    "device_index": 0,
                    "network_card": 0,
                    "subnet_id": "subnet-a",
                    "primary_ip": PRIMARY.primary_ip,
                    "ips": [],
                    "prefixes": [],
                    "assigned": 0,
                },
                {
                    "eni_id": SECOND.eni_id,
                    "device_index": 1,
                    "network_card": 0,
                    "subnet_id": "subnet-a",
                    "primary_ip": SECOND.primary_ip,
                    "ips": [S1],
                    "prefixes": [],
                    "assigned": 1,
                },
            ],
            "assigned_ips": 1,
            "pending_demand": 0,
            "release": [ReleaseOffer(eni_id=PRIMARY.eni_id, ips=[offer_ip, Y], quarantined_at=TR - 3600).model_dump()],
        }
    )


@pytest.mark.parametrize("unknown", [False, True])
def test_the_allocator_never_unassigns_nor_hands_back_another_enis_primary_an_offer_names(unknown: bool) -> None:
    report = _offer_report(X)
    if unknown:
        report = report.model_copy(update={"release": [report.release[0].model_copy(update={"unknown": True})]})
    inv = Inventory(
        ID.instance_id,
        ID.instance_type,
        ID.availability_zone,
        (
            Eni(PRIMARY.eni_id, 0, 0, "subnet-a", PRIMARY.primary_ip, (Y,)),
            Eni(SECOND.eni_id, 1, 0, "subnet-a", SECOND.primary_ip, (S1,)),
        ),
    )
    subnets = [Subnet("subnet-a", ID.availability_zone, "10.0.0.0/24", 200)]
    for pending in (0, 3):
        r = report.model_copy(update={"pending_demand": pending})
        plan = plan_node(r, inv, known("m5.large"), subnets, cluster=ID.cluster)
        named = [ip for c in plan.calls if isinstance(c, UnassignAddresses | Reclaim) for ip in c.ips]
        assert X not in named, (pending, plan.calls)
        assert plan.calls or pending == 0, "setup: something is planned"


THIRD = EniInfo("eni-00000002", 2, "0a:00:00:00:00:02", "10.0.0.30", "subnet-a", "10.0.0.0/24")


def test_a_deleted_enis_primary_granted_to_the_node_reaches_a_waiting_pod() -> None:
    imds = FakeImds()
    imds.add(PRIMARY, [Y])
    imds.add(SECOND, [S1, "10.0.0.41"])
    ds, ctl = _controller(imds)
    assert ds.quarantine(SECOND.eni_id, [S1, "10.0.0.41"], [], T0 + 1) == 2
    assert ctl.tick(T0 + 2), "setup: SECOND offered whole"
    # EC2 deleted SECOND (the result lost) and granted the node its old primary on the primary ENI.
    del imds.enis[SECOND.eni_id]
    imds.enis[PRIMARY.eni_id] = imds.enis[PRIMARY.eni_id].__class__(PRIMARY, [Y, X], [])
    ctl.resync(T0 + 5)
    assert ds.assign("pod0", "eth0", "/var/run/netns/pod0", T0 + 6) is not None
    assert ds.assign("pod1", "eth0", "/var/run/netns/pod1", T0 + 7) is None, "setup: X kept from pods"
    got = None
    t = T0 + 7
    reports: list[PoolReport] = []
    while got is None and t < T0 + 7 + 3 * TIMING.release_timeout_s:
        t += 15
        ctl.resync(t)
        reports += ctl.tick(t + 0.5)
        got = ds.assign("pod1", "eth0", "/var/run/netns/pod1", t + 1)
    assert got is not None and got.ip == X, f"pod1 still waits at {t - T0:.0f} s"
    assert t - T0 <= 2 * TIMING.release_timeout_s, t - T0
    assert any(r.pending_demand for r in reports), "the waiting pod was never reported"


def test_the_check_and_the_add_agree_on_the_first_of_several_in_string_order() -> None:
    ds = Datastore()
    ds.add_eni(PRIMARY, 0.0)
    ds.add_addresses(PRIMARY.eni_id, ["10.0.0.99", "10.0.0.100"])
    veth = host_veth_name("pod1", "eth0", "eni")
    ds.recover({"10.0.0.99": veth, "10.0.0.100": veth}, 1.0)
    wiring = HostWiring(pods={}, stale=[], links=frozenset({veth}), veths=frozenset({veth}))
    first = ds.lookup_recovered(veth)
    assert first is not None
    other = ({"10.0.0.99", "10.0.0.100"} - {first.ip}).pop()

    class Peers:
        def __init__(self, has: str) -> None:
            self.has = has

        def peers_carried(self, veths: object) -> dict[str, list[str]]:
            return {veth: [self.has]}

    assert holder_disagreements(ds, Peers(first.ip), wiring, "eni") == []
    assert len(holder_disagreements(ds, Peers(other), wiring, "eni")) == 1
    took = ds.assign("pod1", "eth0", "/var/run/netns/pod1", 2.0, holder=veth)
    assert took is not None and took.ip == first.ip


def test_a_copy_the_holder_check_refuses_mid_drop_never_frees_the_unassigned_offer(tmp_path: Path) -> None:
    """Rule 3 with rule 1 and the rebuild: the copy holds pod1's address for its veth (a rebuild's
    holder) and has Q offered, unassigned by EC2 since (the ``released`` lost, Q's unlisted clock
    running). pod1 gives itself another address: the next start refuses the copy and rebuilds,
    forgetting the copy's offer and its clock. A read answering from before the unassign then lists
    Q again, inside the window and long after it: never free (docs/safety.md row 6: after a loss an
    address IMDS alone shows is held as offered, of unknown origin, at any time)."""
    n = Node(tmp_path, adopt_launch_pool=False)
    host = n.pods = KernelPods()
    q = IPS[0]
    try:
        mine = pod_on_fresh_address(n)
        n.lose_checkpoint()
        agent = n.start()
        n.step()
        veth = host.veth_of[("pod1", "eth0")]
        assert (mine, veth) in {(h.ip, h.holder) for h in agent.ds.recovered_holders()}, "setup: a holder"
        offered = {ip for ips, _ in agent.ds.quarantined(capped=False).values() for ip in ips}
        assert q in offered, f"setup: {q} offered ({offered})"
        n.imds.enis[PRIMARY.eni_id] = n.imds.enis[PRIMARY.eni_id].__class__(
            PRIMARY, [ip for ip in n.imds.enis[PRIMARY.eni_id].ips if ip != q], []
        )
        for _ in range(4):
            n.step(30)
        host.wired[("pod1", "eth0")] = "10.0.0.77"  # the pod gave itself another address
        n.stop()
        agent = n.start()
        n.step()
        assert agent.counters["checkpoint_rebuilds_damaged"] == 1, "setup: the holder check refused the copy"
        n.imds.add(PRIMARY, [q])  # a read from before the unassign
        got: list[str] = []
        for k in range(40):
            n.step(30)
            if k in (2, 20):  # the allocator grants the node fresh addresses (its pods wait)
                grant_more(n, agent, [f"10.0.0.{60 + k}"])
            ip = cni_add(agent, f"new{k}")
            if ip is not None:
                got.append(ip)
        assert got, "setup: pods get addresses"
        assert agent.ds.eni_of(q) is not None, "setup: the regressed read's Q is known to the agent"
        assert q not in got, f"a pod got {q}, which EC2 unassigned: {got}"
        assert (
            agent.ds.eni_of(q) is None
            or agent.ds.recovered_holder(q) is not None
            or q in {ip for ips, _ in agent.ds.quarantined(capped=False).values() for ip in ips}
        )
    finally:
        n.stop()
