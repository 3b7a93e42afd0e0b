"""Hostile review 39 of three changes: review 31's A2 fix (the start's read of what the peer of each
recovered holder's veth carries: ``node_agent.agent.holder_disagreements``), 569137c (another ENI's
primary address is never reported as the pool's nor handed to a pod) and 109dc98 + 7841536 (the
unlisted clock: ``PoolController._unlisted_since``, the second loop of ``_take_back``).

Findings (strict xfails until fixed after the review, passing since: H1 by the start refusing a
veth held for several addresses with no record, P1 by the report leaving out the older of two ENIs
with one primary address, as of two in one slot):

* H1 (two holders): a restored copy giving one veth two recovered holders, X and Z, is taken when
  the veth's peer carries Z, "one of the addresses the copy gives that veth"; but the attachment's
  next ADD takes the holder ``Datastore.lookup_recovered`` finds first (the lowest address, X), not
  the one the pod carries. The lost history that makes X another node's: the attachment was DELed
  (both holders let go, offered back as of unknown origin, unassigned by the allocator), X went to
  another node, EC2 gave Z back to this node in a later grant (a subnet with few free addresses) and
  the attachment's re-ADD got Z.
* P1 (stall): two ENIs with one primary address make every report invalid (``address ... listed
  twice``), and the invalid report's resync keeps the older one: an ENI the allocator deleted while
  wholly offered (the ``deleted`` result lost) is kept for its offer until the take-back drops it, and
  EC2 may give its primary address to the node's next ENI (a subnet with few free addresses), in
  another device slot when Describe still showed the old one attached. 569137c left it out of the
  single addresses, not out of the primaries: no report at all goes out for a release timeout,
  pending pods waiting with it; and for as long as they last when a rebuild's holds (seed
  1100805's shape, a stale read showing the deleted ENI) keep the old ENI.

Attacks that failed (passing pins, after the findings): one holder per veth reads as before;
recorded mode and a copy without an agent veth's holder never read the peers (no refusal, no
loop); a primary recorded inside another ENI's /28 is never a pod's and leaves the report valid;
the unlisted clock's new drops: the single dropped while a /28 holding it is listed keeps a pod that
got it from the learnt /28 when ``released`` is said again for the single, a wholly offered /28
re-granted while IMDS lags is never free before IMDS lists it (then held as offered), a failed
write of ``mark_gone`` leaves the address offered (a later take-back drops it), and loose members
of a /28 a pod holds are never dropped by the clock."""

from __future__ import annotations

import shutil
from pathlib import Path

from node_agent.agent import carried_disagreements, holder_disagreements
from node_agent.checkpoint import MemoryCheckpoint
from node_agent.cniserver import RecordedPods
from node_agent.controller import AttachedEni, PoolController
from node_agent.datastore import Datastore
from node_agent.records import EniInfo
from node_agent.report import build_report
from tests.helpers.agent_findings import POOL
from tests.helpers.agent_world import cni_add
from tests.helpers.controller import ID, PRIMARY, SECOND, TIMING, FakeImds, result
from tests.helpers.first_start import Node, grant_more, pod_on_fresh_address
from tests.helpers.kernel_pods import KernelPods
from tests.helpers.peers import FixedPeers, one_veth
from warmpool.limits import known
from warmpool.pool import PoolConfig

X, Z = "10.0.0.50", "10.0.0.51"
T0 = 1000.0


# --- H1: two holders for one veth ----------------------------------------------------------------


def test_a_veth_with_two_holders_whose_peer_carries_the_one_its_add_does_not_take_is_refused(tmp_path: Path) -> None:
    n = Node(tmp_path, adopt_launch_pool=False)
    host = n.pods = KernelPods()
    try:
        assert pod_on_fresh_address(n) == X
        grant_more(n, n.agent, [Z])
        veth = host.veth_of[("pod1", "eth0")]
        host.routes[Z] = veth  # a second /32 route through pod1's veth
        n.lose_checkpoint()
        agent = n.start()
        n.step()
        assert sorted((h.ip, h.holder) for h in agent.ds.recovered_holders()) == [(X, veth), (Z, veth)], "setup"
        n.step(30)
        backup = tmp_path / "copy"
        shutil.copytree(n.state, backup)  # the copy: both held for pod1's veth
        # Since (the writes lost): pod1 DELed (both let go, offered back, unassigned), X given to
        # another node, Z granted to this node again and pod1's re-ADD got it; routes and rules flushed.
        host.wired[("pod1", "eth0")] = Z
        eni = n.imds.enis[PRIMARY.eni_id]
        n.imds.enis[PRIMARY.eni_id] = eni._replace(ips=[ip for ip in eni.ips if ip != X])
        host.flush_routes()
        host.flush_rules()
        n.stop()
        shutil.rmtree(n.state)
        shutil.copytree(backup, n.state)
        agent = n.start()
        n.step()
        taken = agent.counters["checkpoint_rebuilds_damaged"] == 0
        again = cni_add(agent, "pod1")
        assert not taken or again != X, (
            f"the copy was taken (pod1's peer carries {Z}, one of its veth's holders) and pod1's next ADD"
            f" got {again}, which EC2 gave to another node"
        )
    finally:
        n.stop()


def test_one_holder_per_veth_still_reads_as_before() -> None:
    """The guard beside H1: one holder whose peer carries it passes, another address disagrees."""
    ds, veth, wiring = one_veth([X, Z])
    ds.recover({X: veth}, 1.0)
    assert carried_disagreements(ds, FixedPeers({veth: [X]}), wiring, "eni") == []
    assert len(carried_disagreements(ds, FixedPeers({veth: [Z]}), wiring, "eni")) == 1


def test_recorded_mode_and_a_copy_without_holders_never_read_the_peers() -> None:
    """``WARMPOOL_POD_NETWORK=recorded`` (no ``peers_carried``) and a copy with no holder of an
    agent veth never refuse (no start loop, no rebuild from the new check)."""
    ds, veth, wiring = one_veth([X, Z])

    class Refuses:
        def peers_carried(self, veths: object) -> dict[str, list[str]]:
            raise AssertionError("read with no holder to read")

    assert holder_disagreements(ds, Refuses(), wiring, "eni") == []
    ds.recover({X: veth, Z: "unknown"}, 1.0)
    assert holder_disagreements(ds, RecordedPods(), wiring, "eni") == []


# --- P1: two ENIs with one primary address -------------------------------------------------------

THIRD = EniInfo("eni-00000002", 2, "0a:00:00:00:00:02", SECOND.primary_ip, "subnet-a", "10.0.0.0/24")


def _node(pool: PoolConfig = POOL) -> tuple[FakeImds, Datastore, PoolController]:
    imds = FakeImds()
    imds.add(PRIMARY, ["10.0.0.11"])
    imds.add(SECOND, ["10.0.0.40", "10.0.0.41"])
    ds = Datastore(cooldown_s=0.0, pending_ttl_s=TIMING.pending_ttl_s, checkpoint=MemoryCheckpoint())
    ctl = PoolController(ID, known("m5.large"), pool, ds, TIMING, metadata=imds)
    ctl.start(T0)
    ds.set_ready(SECOND.eni_id, ready=True)
    return imds, ds, ctl


def test_a_deleted_enis_primary_on_the_next_eni_never_stops_the_reports() -> None:
    imds, ds, ctl = _node()
    assert ds.quarantine(SECOND.eni_id, ["10.0.0.40", "10.0.0.41"], [], T0 + 1) == 2
    assert ctl.tick(T0 + 2), "setup: the offer reported"
    # The allocator deleted SECOND (the ``deleted`` result lost) and attached THIRD, in slot 2 (a
    # Describe that still showed SECOND in slot 1), whose primary EC2 drew from SECOND's old one.
    del imds.enis[SECOND.eni_id]
    imds.add(THIRD, ["10.0.0.70", "10.0.0.71"])
    sent = []
    for t in (T0 + 30, T0 + 31, T0 + 60, T0 + 61, T0 + 90, T0 + 91):
        ctl.resync(t)
        sent += ctl.tick(t + 0.5)
    assert sent, f"no report for 90 s: {ctl.stats.reports_invalid} invalid ({SECOND.primary_ip} listed twice)"


def test_a_deleted_enis_primary_on_the_next_eni_with_the_old_one_held_never_stops_the_reports() -> None:
    """Seed 1100805's rebuild (every address a stale read showed held, ``?``), here on an ENI EC2
    had deleted: kept for the holds, every report is invalid once the next ENI has its primary."""
    imds, ds, ctl = _node()
    ds.hold_unknown({"10.0.0.40", "10.0.0.41"}, T0 + 1)
    assert ctl.tick(T0 + 2), "setup: reported"
    del imds.enis[SECOND.eni_id]
    imds.add(THIRD, ["10.0.0.70", "10.0.0.71"])
    sent = []
    for i in range(1, 21):
        ctl.resync(T0 + 30 * i)
        sent += ctl.tick(T0 + 30 * i + 1)
    assert sent, f"no report for ten minutes: {ctl.stats.reports_invalid} invalid ({SECOND.primary_ip} listed twice)"


def test_a_primary_recorded_inside_another_enis_28_is_never_a_pods_and_the_report_is_valid() -> None:
    """569137c with a /28: the new ENI's primary recorded as a member of a /28 on the first ENI (a
    stale read) is never handed to a pod, and the report (which checks primaries and singles, not
    prefixes) stays valid."""
    first = EniInfo("eni-0000000000000000a", 0, "02:00:00:00:00:0a", "10.0.0.5", "subnet-a", "10.0.0.0/23")
    new = EniInfo("eni-0000000000000000b", 1, "02:00:00:00:00:0b", "10.0.0.19", "subnet-a", "10.0.0.0/23")
    ds = Datastore(cooldown_s=0.0, pending_ttl_s=60.0)
    ds.add_eni(first, 0.0)
    ds.add_addresses(first.eni_id, [], ["10.0.0.16/28"])
    ds.add_eni(new, 1.0)
    got = [ds.assign(f"pod{i}", "eth0", f"ns{i}", 2.0) for i in range(20)]
    ips = [a.ip for a in got if a is not None]
    assert new.primary_ip not in ips and len(ips) == 15, ips
    r = build_report(ID, PoolConfig(warm_ip=2), ds, {}, seq=1, now=3.0, signed=None, skipped=lambda *_: None)
    assert [e.primary_ip for e in r.enis] == [first.primary_ip, new.primary_ip]


# --- the unlisted clock: attacks that failed -----------------------------------------------------

P28 = "10.0.0.32/28"
M = "10.0.0.40"  # a member of P28


def _where(ds: Datastore, ip: str) -> list[str]:
    return [e.info.eni_id for e in ds.enis() if ip in e.addrs]


def _ten_minutes(imds: FakeImds, ctl: PoolController, ds: Datastore, start: float, check: object) -> float:
    t = start
    for _ in range(20):
        t += 30
        ctl._date_anew(SECOND.eni_id, t, "an address joined the offer")
        ctl.resync(t)
        ctl.tick(t + 1)
        check(t + 2)  # type: ignore[operator]
    return t


def test_a_released_said_again_for_the_dropped_single_never_takes_it_from_the_learnt_28() -> None:
    """The single M dropped while SECOND lists a /28 holding it (review 38's F1 reading: EC2 gave
    it back inside the /28), the /28 learnt, M given to a pod; the allocator's release book then
    says M ``released`` again (an Unassign of the young single offer EC2 answered "not assigned")
    replying to the newest report: the pod keeps M, the /28 stays whole."""
    imds = FakeImds()
    imds.add(SECOND, [M, "10.0.0.60"])
    ds = Datastore(cooldown_s=0.0, pending_ttl_s=TIMING.pending_ttl_s, checkpoint=MemoryCheckpoint())
    ctl = PoolController(ID, known("m5.large"), POOL, ds, TIMING, metadata=imds)
    ctl.start(T0)
    ds.set_ready(SECOND.eni_id, ready=True)
    assert ds.quarantine(SECOND.eni_id, [M], [], T0 + 1) == 1
    ctl.tick(T0 + 2)
    imds.enis[SECOND.eni_id] = AttachedEni(SECOND, ["10.0.0.60"], [P28])
    t = _ten_minutes(imds, ctl, ds, T0, lambda _t: None)
    e = next(e for e in ds.enis() if e.info.eni_id == SECOND.eni_id)
    assert e.prefixes == [P28] and e.addrs[M].prefix == P28 and e.addrs[M].quarantined_at is None, "setup"
    got = [ds.assign(f"pod{i}", "eth0", f"/var/run/netns/pod{i}", t + 3) for i in range(16)]
    assert M in [a.ip for a in got if a is not None], "setup: M went to a pod"
    ctl.apply_result(result(ctl.last_seq, {"kind": "released", "eni_id": SECOND.eni_id, "ips": [M]}), t + 4)
    ctl.resync(t + 30)
    ctl.tick(t + 31)
    e = next(e for e in ds.enis() if e.info.eni_id == SECOND.eni_id)
    assert e.prefixes == [P28] and e.addrs[M].in_use


def test_a_wholly_offered_28_re_granted_while_imds_lags_is_never_free_before_imds_lists_it() -> None:
    """A /28 wholly offered, unassigned by EC2 (``released`` lost) and granted again to SECOND
    replying to the newest report while IMDS lags behind both (lists it nowhere for ten minutes):
    the clock drops it; none of its members goes to a pod while IMDS does not list it, and once it
    does the /28 is held as offered (the allocator's answer decides), never free on the drop's
    word."""
    imds = FakeImds()
    imds.add(SECOND, ["10.0.0.60"], [P28])
    ds = Datastore(cooldown_s=0.0, pending_ttl_s=TIMING.pending_ttl_s, checkpoint=MemoryCheckpoint())
    ctl = PoolController(ID, known("m5.large"), POOL, ds, TIMING, metadata=imds)
    ctl.start(T0)
    ds.set_ready(SECOND.eni_id, ready=True)
    assert ds.quarantine(SECOND.eni_id, [], [P28], T0 + 1) == 16
    ctl.tick(T0 + 2)
    imds.enis[SECOND.eni_id] = AttachedEni(SECOND, ["10.0.0.60"], [])
    ctl.resync(T0 + 10)
    ctl.tick(T0 + 11)
    grant = {"kind": "assigned", "eni_id": SECOND.eni_id, "prefixes": [P28]}
    ctl.apply_result(result(ctl.last_seq, grant), T0 + 20)

    def no_member_free(now: float) -> None:
        got = [ds.assign(f"pod{i}", "eth0", f"/var/run/netns/pod{i}", now) for i in range(20)]
        assert not [a.ip for a in got if a is not None and a.ip != "10.0.0.60"], "a member went to a pod"
        for i in range(20):
            ds.release(f"pod{i}", "eth0", now)

    t = _ten_minutes(imds, ctl, ds, T0 + 20, no_member_free)
    assert _where(ds, M) == [], "setup: dropped by the clock"
    imds.enis[SECOND.eni_id] = AttachedEni(SECOND, ["10.0.0.60"], [P28])
    for dt in (30, 60, 90):
        ctl.resync(t + dt)
        ctl.tick(t + dt + 1)
        no_member_free(t + dt + 2)
    e = next(e for e in ds.enis() if e.info.eni_id == SECOND.eni_id)
    assert e.addrs[M].quarantined_at is not None


def test_a_failed_write_between_the_drops_two_writes_leaves_the_address_offered_never_free() -> None:
    """The checkpoint write of ``mark_gone`` fails: the take-back stops there, M stays recorded,
    offered, and unlisted; no pod gets it, and a later take-back drops it."""
    imds = FakeImds()
    imds.add(SECOND, [M, "10.0.0.60"])
    cp = MemoryCheckpoint()
    ds = Datastore(cooldown_s=0.0, pending_ttl_s=TIMING.pending_ttl_s, checkpoint=cp)
    ctl = PoolController(ID, known("m5.large"), POOL, ds, TIMING, metadata=imds)
    ctl.start(T0)
    ds.set_ready(SECOND.eni_id, ready=True)
    assert ds.quarantine(SECOND.eni_id, [M], [], T0 + 1) == 1
    ctl.tick(T0 + 2)
    imds.enis[SECOND.eni_id] = AttachedEni(SECOND, ["10.0.0.60"], [])
    ctl.resync(T0 + 10)
    for t in (T0 + 40, T0 + 70, T0 + 100):
        ctl._date_anew(SECOND.eni_id, t, "an address joined the offer")
        ctl.resync(t)
        ctl.tick(t + 1)
    real_save = cp.save

    def failing(*a: object, **k: object) -> None:
        raise OSError("disk full")

    cp.save = failing  # type: ignore[method-assign]
    ctl.tick(T0 + 131)
    cp.save = real_save  # type: ignore[method-assign]
    assert ctl.stats.checkpoint_write_errors >= 1, "setup: the drop's write failed"
    assert _where(ds, M) == [SECOND.eni_id] and M in ds.quarantined()[SECOND.eni_id][0], "setup: not removed"
    got = [ds.assign(f"pod{i}", "eth0", f"/var/run/netns/pod{i}", T0 + 132) for i in range(5)]
    assert M not in [a.ip for a in got if a is not None]
    for i in range(5):
        ds.release(f"pod{i}", "eth0", T0 + 133)
    for t in (T0 + 160, T0 + 190, T0 + 220, T0 + 250, T0 + 280, T0 + 310):
        ctl.resync(t)
        ctl.tick(t + 1)
    assert _where(ds, M) == [], "never dropped after the failed write"


def test_loose_members_of_a_28_a_pod_holds_are_never_dropped_by_the_clock() -> None:
    """A /28 on SECOND, a pod on one member, the others quarantined loose (in no offer: no allocator
    can have unassigned the /28 under a pod); ten minutes of reads without the /28 (a lag) drop none
    of them and give none to a pod."""
    imds = FakeImds()
    imds.add(SECOND, [], [P28])
    ds = Datastore(cooldown_s=0.0, pending_ttl_s=TIMING.pending_ttl_s, checkpoint=MemoryCheckpoint())
    ctl = PoolController(ID, known("m5.large"), POOL, ds, TIMING, metadata=imds)
    ctl.start(T0)
    ds.set_ready(SECOND.eni_id, ready=True)
    pod = ds.assign("pod0", "eth0", "/var/run/netns/pod0", T0 + 1)
    assert pod is not None and pod.ip != M
    others = [f"10.0.0.{k}" for k in range(32, 48) if f"10.0.0.{k}" != pod.ip]
    assert ds.quarantine(SECOND.eni_id, others, [], T0 + 2) == 15
    assert ds.quarantined() == {}, "setup: loose, in no offer"
    ctl.tick(T0 + 3)
    imds.enis[SECOND.eni_id] = AttachedEni(SECOND, [], [])

    def none_to_a_pod(now: float) -> None:
        got = ds.assign("pod1", "eth0", "/var/run/netns/pod1", now)
        assert got is None, f"{got} went to a pod"
        ds.release("pod1", "eth0", now)

    _ten_minutes(imds, ctl, ds, T0, none_to_a_pod)
    e = next(e for e in ds.enis() if e.info.eni_id == SECOND.eni_id)
    assert sorted(e.addrs) == sorted([pod.ip, *others]) and e.prefixes == [P28]
    assert ctl.stats.released_without_result == 0
