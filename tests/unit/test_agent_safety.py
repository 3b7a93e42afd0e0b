"""The node agent's defects of issue 21 (an outside review, section 3), each as the short
sequence of world events that gave an address two holders, or would have. Virtual time,
no child process: the controller and datastore directly, or the whole
:class:`node_agent.agent.Agent` in-process (tests/helpers/agent_world.py).

1. a failed unmanaged-ENI tag look-up at start is never read as "no ENIs";
2. a lost or damaged checkpoint forgets what was offered: every free address is held as
   offered until the allocator answers a report of the new process (or the take-back);
4. a deleted ENI is never taken back from IMDS, however long it lists it;
5. a checkpoint write that fails keeps the datastore dirty: no ADD answered, report sent
   or result acknowledged until it is written;
and the further checks: a node clock ahead of AWS's, CNI GC of another network, an ENI
tagged ``no_manage`` later, prefix mode's single addresses never released."""

from __future__ import annotations

import errno
from email.utils import formatdate
from pathlib import Path
from typing import Any

import pytest

from emulated.clock import VirtualClock
from node_agent.agent import Agent, AwsClockCheck
from node_agent.checkpoint import CheckpointWriteError, FileCheckpoint, MemoryCheckpoint
from node_agent.cniserver import CniService
from node_agent.controller import PoolController
from node_agent.datastore import Datastore
from node_agent.hostnet import host_veth_name
from node_agent.records import Assignment
from node_agent.unmanaged import NO_MANAGE_TAG, TAG_REFRESH_S, SkipUnmanaged
from tests.helpers.agent_world import MemorySqs, WiredPods, give, make_agent
from tests.helpers.controller import ID, PRIMARY, SECOND, TIMING, FakeImds, RecordingHost, one, result
from warmpool.calls import UnassignAddresses
from warmpool.limits import known
from warmpool.messages import OFFER_MAX_AGE_CEILING_S
from warmpool.planner import Eni as PlannedEni
from warmpool.planner import Inventory, plan_node
from warmpool.pool import PoolConfig

POOL = PoolConfig(warm_ip=1)
CONF = {"cniVersion": "1.0.0", "name": "warmpool", "type": "warmpool-cni"}


def boot(cp: MemoryCheckpoint, metadata: Any, now: float, host: RecordingHost | None = None):  # type: ignore[no-untyped-def]
    """The agent process starts: checkpoint, then IMDS."""
    ds = Datastore(cooldown_s=0.0, pending_ttl_s=TIMING.pending_ttl_s, checkpoint=cp)
    ds.restore()
    ctl = PoolController(ID, known("m5.large"), POOL, ds, TIMING, metadata=metadata, host=host)
    ctl.start(now)
    return ds, ctl


def on_disk(cp: MemoryCheckpoint) -> Datastore:
    ds = Datastore(cooldown_s=0.0, checkpoint=MemoryCheckpoint(cp.data))
    ds.restore()
    return ds


def answer(svc: CniService, req: dict[str, Any]) -> dict[str, Any]:
    """What the plugin gets over the socket: an exception is an "agent error" (cniserver._Handler)."""
    try:
        return svc.handle(req)
    except Exception as exc:
        return {"ok": False, "code": 5, "msg": "agent error", "details": str(exc)}


def add(svc: CniService, cid: str, ifname: str = "eth0", name: str = "warmpool") -> dict[str, Any]:
    req = {"command": "ADD", "container_id": cid, "ifname": ifname, "netns": f"/var/run/netns/{cid}"}
    return answer(svc, {**req, "config": {**CONF, "name": name}})


def address(reply: dict[str, Any]) -> str:
    assert reply["ok"], reply
    return str(reply["result"]["ips"][0]["address"]).removesuffix("/32")


# --- 1. a failed tag look-up at start --------------------------------------------------------


class TagEc2:
    """DescribeNetworkInterfaces filtered by the instance: every ENI with its tags, or throttled."""

    def __init__(self, tags: dict[str, dict[str, str]]) -> None:
        self.tags = tags
        self.fail = 0
        self.calls = 0

    def describe_network_interfaces(self, **kw: Any) -> dict[str, Any]:
        self.calls += 1
        if self.fail:
            self.fail -= 1
            raise RuntimeError("An error occurred (RequestLimitExceeded): Request limit exceeded.")
        return {
            "NetworkInterfaces": [
                {"NetworkInterfaceId": k, "TagSet": [{"Key": a, "Value": b} for a, b in v.items()]}
                for k, v in self.tags.items()
            ]
        }


SECOND_IPS = ["10.0.0.21", "10.0.0.22", "10.0.0.23"]


def test_a_failed_tag_lookup_at_start_keeps_live_pods_and_gives_out_nothing_from_their_eni() -> None:
    # Issue 21 defect 1: a DaemonSet rollout restarts agents at once, Describe throttles, and
    # the look-up fails. Before: every secondary ENI was read as gone, its pods dropped and
    # checkpointed so, and the next resync brought the ENI back with every address free.
    imds = FakeImds()
    imds.add(SECOND, SECOND_IPS)
    ec2 = TagEc2({SECOND.eni_id: {}})
    cp = MemoryCheckpoint()
    ds, _ = boot(cp, SkipUnmanaged(imds, ec2, ID.instance_id), 0.0)
    a = ds.assign("pod-a", "eth0", "ns", 1.0)
    assert a is not None and a.eni_id == SECOND.eni_id  # the primary ENI has no free address

    ec2.fail = 10**6  # throttled for as long as this agent runs
    ds, ctl = boot(cp, SkipUnmanaged(imds, ec2, ID.instance_id), 10.0)
    assert ds.lookup("pod-a", "eth0") == a
    assert on_disk(cp).lookup("pod-a", "eth0") == a, "and the checkpoint still says so"
    for t in (70.0, 130.0, 190.0):
        ctl.resync(t)
        for report in ctl.tick(t):
            assert not report.release, "nothing offered from an ENI whose status is unknown"
        assert ds.lookup("pod-a", "eth0") == a
        assert ds.assign(f"pod-{t}", "eth0", "ns", t) is None, "fail closed: nothing new from it"
    assert on_disk(cp).lookup("pod-a", "eth0") == a

    ec2.fail = 0  # the tags can be read again (here: after another restart)
    ds, _ = boot(cp, SkipUnmanaged(imds, ec2, ID.instance_id), 300.0)
    got = [ds.assign(f"new{i}", "eth0", "ns", 301.0) for i in range(3)]
    ips = [g.ip for g in got if g is not None]
    assert ds.lookup("pod-a", "eth0") == a and a.ip not in ips and len(ips) == 2


def test_an_eni_tagged_no_manage_after_the_first_lookup_is_left_alone_once_its_pods_are_gone() -> None:
    clock = VirtualClock()
    imds = FakeImds()
    imds.add(SECOND, SECOND_IPS)
    ec2 = TagEc2({SECOND.eni_id: {}})
    host = RecordingHost()
    md = SkipUnmanaged(imds, ec2, ID.instance_id, clock=clock)
    ds, ctl = boot(MemoryCheckpoint(), md, 0.0, host=host)
    a = ds.assign("pod-a", "eth0", "ns", 1.0)
    assert a is not None and a.eni_id == SECOND.eni_id
    ec2.tags[SECOND.eni_id] = {NO_MANAGE_TAG: "true"}  # an operator takes the ENI over
    clock.set(TAG_REFRESH_S + 1)
    ctl.resync(clock.now())
    assert ds.lookup("pod-a", "eth0") == a, "the pod keeps its address"
    assert ds.assign("pod-b", "eth0", "ns", clock.now()) is None, "nothing new from it"
    assert ds.releasable_ips(clock.now()) == [] and ds.releasable_enis(clock.now() + 600, 0) == []
    ds.release("pod-a", "eth0", clock.now())
    ctl.resync(clock.now() + 60)
    assert ds.eni(SECOND.eni_id) is None and ("teardown", SECOND.eni_id) in host.calls


# --- 2. a lost or damaged checkpoint forgets offers --------------------------------------------


PRIMARY_IPS = ["10.0.0.11", "10.0.0.12", "10.0.0.13", "10.0.0.14"]


def agent_world(tmp_path: Path, aws_behind_s: float = 0.0, start: float = 1_000_000.0) -> dict[str, Any]:
    """A node launched with no secondary address: the allocator grants ``PRIMARY_IPS`` (:func:`grant`).
    (Before, IMDS listed them at the first start and the allocator handed them back; an address
    learnt from IMDS alone after a start without a checkpoint is now offered as of unknown
    origin, never handed back: docs/safety.md, row 12.)"""
    imds = FakeImds()
    clock = VirtualClock(start)
    return {
        "imds": imds,
        "clock": clock,
        "sqs": MemorySqs(VirtualClock(start - aws_behind_s)),
        "pods": WiredPods(),
        "state": tmp_path / "state",
    }


def grant(agent: Agent, w: dict[str, Any], seq: int, ips: list[str]) -> str:
    """EC2 assigns ``ips`` to the primary ENI (IMDS lists them) and the answer to report ``seq`` says so."""
    w["imds"].add(PRIMARY, [ip for ip in ips if ip not in w["imds"].enis[PRIMARY.eni_id].ips])
    return give(agent, result(seq, {"kind": "assigned", "eni_id": PRIMARY.eni_id, "ips": ips}))


def started(w: dict[str, Any]) -> Agent:
    return make_agent(w["state"], w["imds"], w["sqs"], w["clock"], w["pods"])


def run(agent: Agent, w: dict[str, Any], dt: float) -> None:
    w["clock"].advance(dt)
    w["sqs"].aws_clock.advance(dt)
    agent.run_once()


def test_a_rebuilt_agent_hands_out_no_address_an_earlier_report_may_still_offer(tmp_path: Path) -> None:
    # Issue 21 defect 2. Before: the rebuild recovered pods from the host but not which free
    # addresses were quarantined and offered; they came back free, a new pod got one, and the
    # queued report's offer then got it unassigned (and given to another node).
    w = agent_world(tmp_path)
    sqs: MemorySqs = w["sqs"]
    agent = started(w)
    try:
        run(agent, w, 1.0)
        first = sqs.reports()[-1]
        grant(agent, w, first.seq, PRIMARY_IPS)
        run(agent, w, 1.0)
        ip1 = address(agent.cni.handle({**_add("c1"), "config": CONF}))
        run(agent, w, 61.0)
        run(agent, w, 1.0)
        offer = sqs.reports()[-1]
        offered = offer.release[0].ips
        assert len(offered) == 2 and ip1 not in offered  # surplus quarantined and offered
    finally:
        agent.stop()
    FileCheckpoint(str(w["state"] / "checkpoint.json"))  # the same file...
    (w["state"] / "checkpoint.json").write_text('{"version": 1, "enis": [')  # ...damaged

    agent = started(w)  # rebuilt from IMDS and the host
    try:
        assert agent.ds.lookup_recovered(host_veth_name("c1", "eth0")) == Assignment(ip1, PRIMARY.eni_id)
        reply = agent.cni.handle({**_add("c2"), "config": CONF})
        assert not reply["ok"], "no free address may be handed out right after the rebuild"
        # the allocator acts on the queued report (replying to the previous process's seq):
        # accepted, not refused as "never sent"
        receipt = give(agent, result(offer.seq, {"kind": "released", "eni_id": PRIMARY.eni_id, "ips": offered}))
        run(agent, w, 1.0)
        assert receipt in sqs.deleted
        assert not {ip for e in agent.ds.enis() for ip in e.ips} & set(offered)
        # an old hand-back (replying to the first report) frees nothing
        give(agent, result(first.seq, {"kind": "assigned", "eni_id": PRIMARY.eni_id, "ips": PRIMARY_IPS}))
        run(agent, w, 1.0)
        assert not agent.cni.handle({**_add("c2"), "config": CONF})["ok"]
        # this process's own report offers what is left, dated at its start
        mine = [r for r in sqs.reports() if r.seq > offer.seq and r.release]
        assert mine, "the new process offers what it holds"
        left = [ip for ip in PRIMARY_IPS if ip != ip1 and ip not in offered]
        assert mine[-1].release[0].ips == left
        # learnt from IMDS alone: of unknown origin, never handed back (a hand-back would rest on
        # Describe alone: docs/safety.md, row 12); the allocator unassigns them and grants anew
        assert mine[-1].release[0].unknown
        give(agent, result(mine[-1].seq, {"kind": "assigned", "eni_id": PRIMARY.eni_id, "ips": left}))
        run(agent, w, 1.0)
        assert not agent.cni.handle({**_add("c2"), "config": CONF})["ok"], "a hand-back of them is refused"
        mine = [r for r in sqs.reports() if r.release]
        w["imds"].enis[PRIMARY.eni_id] = w["imds"].enis[PRIMARY.eni_id]._replace(ips=[ip1, "10.0.0.15"])
        released = {"kind": "released", "eni_id": PRIMARY.eni_id, "ips": left}
        fresh = {"kind": "assigned", "eni_id": PRIMARY.eni_id, "ips": ["10.0.0.15"]}
        give(agent, result(mine[-1].seq, released, fresh))
        run(agent, w, 1.0)
        ip2 = address(agent.cni.handle({**_add("c2"), "config": CONF}))
        assert ip2 == "10.0.0.15"
    finally:
        agent.stop()


def _add(cid: str) -> dict[str, Any]:
    return {"command": "ADD", "container_id": cid, "ifname": "eth0", "netns": f"/var/run/netns/{cid}"}


def test_after_a_rebuild_addresses_imds_shows_late_are_held_too_and_the_take_back_applies() -> None:
    imds = FakeImds()
    imds.add(PRIMARY, ["10.0.0.11"])
    ds = Datastore(cooldown_s=0.0, checkpoint=MemoryCheckpoint())
    ctl = PoolController(ID, known("m5.large"), POOL, ds, TIMING, metadata=imds)
    ctl.start(100.0, checkpoint_lost=True)
    assert ds.assign("p1", "eth0", "ns", 100.0) is None
    imds.add(PRIMARY, ["10.0.0.12"])  # IMDS lagged at the start
    ctl.resync(150.0)
    assert ds.assign("p1", "eth0", "ns", 150.0) is None
    # 10.0.0.12 joined the ENI's offer: the whole offer is dated when it did, and its release
    # timeout starts again (review 32, D1: dated at 100, the offer was too old to act on)
    assert ds.quarantined_since() == {PRIMARY.eni_id: 150.0}
    ctl.tick(100.0 + TIMING.release_timeout_s + 1)
    assert ctl.stats.offers_renewed == 0 and ds.quarantined_since() == {PRIMARY.eni_id: 150.0}
    assert ds.assign("p1", "eth0", "ns", 100.0 + TIMING.release_timeout_s + 1) is None
    t = 150.0 + TIMING.release_timeout_s + 1
    report = one(ctl.tick(t))  # no answer came: IMDS still lists both; offered again, dated now
    assert ctl.stats.offers_renewed == 2 and ds.quarantined_since() == {PRIMARY.eni_id: t}
    assert ds.assign("p1", "eth0", "ns", t) is None, "taken back on IMDS's word (docs/safety.md, step 6)"
    # the allocator's answer to the renewed offer decides; it is of unknown origin (learnt from
    # IMDS alone after the loss), so never a hand-back: one is refused ...
    assert report.release[0].unknown
    back = {"kind": "assigned", "eni_id": PRIMARY.eni_id, "ips": ["10.0.0.11", "10.0.0.12"]}
    ctl.apply_result(result(report.seq, back), t + 1)
    assert ds.assign("p1", "eth0", "ns", t + 1) is None, "a hand-back of an offer of unknown origin"
    # ... and the allocator unassigns them and grants a fresh one: that is the pod's
    imds.enis[PRIMARY.eni_id] = imds.enis[PRIMARY.eni_id]._replace(ips=["10.0.0.14"])
    released = {"kind": "released", "eni_id": PRIMARY.eni_id, "ips": ["10.0.0.11", "10.0.0.12"]}
    fresh = {"kind": "assigned", "eni_id": PRIMARY.eni_id, "ips": ["10.0.0.14"]}
    ctl.apply_result(result(report.seq, released, fresh), t + 1)
    assert ds.assign("p1", "eth0", "ns", t + 2) == Assignment("10.0.0.14", PRIMARY.eni_id)
    # the window is over, and a new address IMDS alone shows is still held (a read any time
    # after the loss may answer from before an unassign the lost checkpoint knew of)
    imds.add(PRIMARY, ["10.0.0.13"])
    ctl.resync(t + 3)
    assert ds.assign("p2", "eth0", "ns", t + 3) is None
    assert ds.quarantined_since() == {PRIMARY.eni_id: t + 3}, "offered, dated when it was learnt"


# --- 4. a deleted ENI comes back ---------------------------------------------------------------


def test_a_deleted_eni_imds_lists_for_minutes_is_never_taken_back() -> None:
    # Issue 21 defect 4: ``deleted`` is answered while the ENI is still detaching. Before, the
    # agent ignored it in IMDS for a fixed 120 s: a slow detach (or detach plus IMDS lag)
    # brought it back with every address free, and EC2 reissued them once it was deleted.
    imds = FakeImds()
    imds.add(SECOND, ["10.0.0.21", "10.0.0.22"])
    cp = MemoryCheckpoint()
    t0 = 1000.0
    ds, ctl = boot(cp, imds, t0)
    r = one(ctl.tick(t0))
    ctl.apply_result(
        result(
            r.seq,
            {"kind": "released", "eni_id": SECOND.eni_id, "ips": ["10.0.0.21", "10.0.0.22"]},
            {"kind": "deleted", "eni_id": SECOND.eni_id},
        ),
        t0 + 1,
    )
    for dt in range(30, 900, 30):  # detaching for 15 minutes; a restart in the middle
        t = t0 + dt
        if dt == 450:
            ds, ctl = boot(cp, imds, t)
        ctl.resync(t)
        ctl.tick(t)
        assert ds.eni(SECOND.eni_id) is None, dt
        assert ds.assign(f"pod-{dt}", "eth0", "ns", t) is None
    # a claim from a result older than the deletion is stale; one newer waits for IMDS to show
    # the old attachment gone (a lagging IMDS still lists it from before)
    attached = {
        "kind": "attached",
        "eni_id": SECOND.eni_id,
        "device_index": 1,
        "network_card": 0,
        "mac": SECOND.mac,
        "subnet_id": SECOND.subnet_id,
        "subnet_cidr": SECOND.subnet_cidr,
        "primary_ip": SECOND.primary_ip,
        "ips": ["10.0.0.21"],
    }
    t = t0 + 900
    ctl.apply_result(result(r.seq - 1, attached), t)
    ctl.retry_soon()
    newer = one(ctl.tick(t + 1))
    ctl.apply_result(result(newer.seq, attached), t + 2)
    assert ds.eni(SECOND.eni_id) is None
    # detached at last; attached again to this node (same ENI id: EC2 never reuses one)
    del imds.enis[SECOND.eni_id]
    ctl.resync(t + 10)
    imds.add(SECOND, ["10.0.0.21"])
    ctl.resync(t + 20)
    assert ds.eni(SECOND.eni_id) is None, "IMDS alone never brings it back"
    ctl.tick(t + 21)  # the parked newer claim is checked again: IMDS showed the gap, lists it now
    assert ds.eni(SECOND.eni_id) is not None
    assert ds.assign("pod-x", "eth0", "ns", t + 22) == Assignment("10.0.0.21", SECOND.eni_id)


# --- 5. checkpoint writes that fail ------------------------------------------------------------


class FlakyCheckpoint(MemoryCheckpoint):
    """A checkpoint whose writes fail while ``failing`` (ENOSPC); the last good one stays."""

    def __init__(self) -> None:
        super().__init__()
        self.failing = False

    def save(self, data: dict[str, Any]) -> None:
        if self.failing:
            raise OSError(errno.ENOSPC, "No space left on device")
        super().save(data)


def test_an_add_is_answered_only_once_its_address_is_on_disk() -> None:
    # Issue 21 defect 5. Before: the datastore changed memory, the save raised, the ADD failed;
    # the runtime's retry found the address held in memory and answered success without a
    # write. After a restart the stale checkpoint was restored, CNI GC freed what the running
    # pod held (the old pod's entry) and a new pod got it.
    cp = FlakyCheckpoint()
    ds = Datastore(cooldown_s=0.0, checkpoint=cp)
    ds.add_eni(PRIMARY, 0.0)
    ds.add_addresses(PRIMARY.eni_id, ["10.0.0.11"])
    svc = CniService(ds, WiredPods(), clock=VirtualClock(100.0), gc_min_age_s=0.0)
    up: dict[str, str] = {}  # what the runtime was told
    up["c1"] = address(add(svc, "c1"))
    cp.failing = True
    dels = [answer(svc, {**_add("c1"), "command": "DEL", "config": CONF})["ok"] for _ in range(2)]
    assert dels[-1], "the runtime retries a DEL until it succeeds (at once: docs/agent.md)"
    del up["c1"]
    for _ in range(3):  # the runtime retries the next pod's ADD
        reply = add(svc, "c2")
        if reply["ok"]:
            up["c2"] = address(reply)
    assert "c2" not in up, "no ADD answered while its address cannot be written"
    assert ds.dirty and ds.save_errors >= 3

    # kill -9 now, restart from the disk, GC with what runs, a new pod: never a second holder
    ds2 = on_disk(cp)
    svc2 = CniService(ds2, WiredPods(), clock=VirtualClock(200.0), gc_min_age_s=0.0)
    valid = [{"containerID": c, "ifname": "eth0"} for c in up]
    gc = {"command": "GC", "config": {**CONF, "cniVersion": "1.1.0", "cni.dev/valid-attachments": valid}}
    assert answer(svc2, gc)["ok"]
    for c, ip in up.items():
        assert ds2.lookup(c, "eth0") == Assignment(ip, PRIMARY.eni_id)
    reply = add(svc2, "c3")
    assert not reply["ok"] or address(reply) not in up.values()

    # the disk works again: the retried ADD is answered, and it is on disk
    cp.failing = False
    ip2 = address(add(svc, "c2"))
    assert not ds.dirty and on_disk(cp).lookup("c2", "eth0") == Assignment(ip2, PRIMARY.eni_id)


def test_a_gc_frees_every_stale_attachment_and_is_answered_only_once_its_releases_are_on_disk() -> None:
    # Before: the first release whose write failed ended the GC (the other stale attachments
    # kept their wiring and addresses: the spec has a GC remove as much as it can), and the
    # runtime's next GC, finding them released in memory, was answered success while the disk
    # still said they were held, as a restart would have found them.
    cp = FlakyCheckpoint()
    ds = Datastore(cooldown_s=0.0, checkpoint=cp)
    ds.add_eni(PRIMARY, 0.0)
    ds.add_addresses(PRIMARY.eni_id, ["10.0.0.11", "10.0.0.12", "10.0.0.13"])
    clock = VirtualClock(100.0)
    pods = WiredPods()
    svc = CniService(ds, pods, clock=clock, gc_min_age_s=60.0)
    kept = address(add(svc, "kept"))
    for cid in ("gone1", "gone2"):  # ADDs whose answers the runtime lost: no DEL comes
        address(add(svc, cid))
    valid = [{"containerID": "kept", "ifname": "eth0"}]
    gc = {"command": "GC", "config": {**CONF, "cniVersion": "1.1.0", "cni.dev/valid-attachments": valid}}

    clock.advance(61.0)
    cp.failing = True
    reply = answer(svc, gc)
    assert not reply["ok"] and reply["code"] == 5, reply
    assert ds.lookup("gone1", "eth0") is None and ds.lookup("gone2", "eth0") is None, "every stale one released"
    assert set(pods.wired) == {("kept", "eth0")}, "and torn down"
    assert {p.container_id for p in on_disk(cp).pods()} == {"kept", "gone1", "gone2"}
    for _ in range(2):  # the runtime's next GCs, the disk still refusing: not done until written
        reply = answer(svc, gc)
        assert not reply["ok"] and reply["code"] == 5, reply
    assert ds.dirty

    cp.failing = False
    assert answer(svc, gc)["ok"]
    assert not ds.dirty
    assert {p.container_id for p in on_disk(cp).pods()} == {"kept"}
    assert on_disk(cp).lookup("kept", "eth0") == Assignment(kept, PRIMARY.eni_id)
    assert svc.stats.gc_released == 2


def test_a_gc_keeps_a_young_attachment_whose_add_could_not_be_written() -> None:
    # Seeds 885 and 500161 of `warmpool sim`: an ADD fails with code 5 (its address not on
    # disk) and the runtime forgets it; a GC 16 s later must keep it (it may be an ADD the
    # runtime's list was made before), and a GC once it is 60 s old frees it.
    cp = FlakyCheckpoint()
    ds = Datastore(cooldown_s=0.0, checkpoint=cp)
    ds.add_eni(PRIMARY, 0.0)
    ds.add_addresses(PRIMARY.eni_id, ["10.0.0.11"])
    clock = VirtualClock(186.6)
    svc = CniService(ds, WiredPods(), clock=clock, gc_min_age_s=60.0)
    cp.failing = True
    reply = add(svc, "lost")
    assert not reply["ok"] and reply["code"] == 5, reply
    held = ds.lookup("lost", "eth0")
    assert held is not None, "kept for the runtime's retry or DEL"
    gc = {"command": "GC", "config": {**CONF, "cniVersion": "1.1.0", "cni.dev/valid-attachments": []}}
    cp.failing = False
    clock.advance(16.0)
    assert answer(svc, gc)["ok"]
    assert ds.lookup("lost", "eth0") == held, "younger than gc_min_age_s: left alone"
    clock.advance(45.0)
    assert answer(svc, gc)["ok"]
    assert ds.lookup("lost", "eth0") is None and on_disk(cp).lookup("lost", "eth0") is None


def test_a_failed_write_is_retried_by_flush_and_every_later_change() -> None:
    cp = FlakyCheckpoint()
    ds = Datastore(cooldown_s=0.0, checkpoint=cp)
    ds.add_eni(PRIMARY, 0.0)
    cp.failing = True
    with pytest.raises(CheckpointWriteError):
        ds.add_addresses(PRIMARY.eni_id, ["10.0.0.11"])
    assert ds.dirty and on_disk(cp).counts(0.0).total == 0
    with pytest.raises(CheckpointWriteError):
        ds.flush()
    cp.failing = False
    ds.flush()
    assert not ds.dirty and on_disk(cp).counts(0.0).total == 1


def test_no_report_leaves_while_the_quarantine_it_offers_is_not_on_disk() -> None:
    imds = FakeImds()
    imds.add(PRIMARY, ["10.0.0.11", "10.0.0.12", "10.0.0.13"])
    cp = FlakyCheckpoint()
    _, ctl = boot(cp, imds, 0.0)
    one(ctl.tick(0.0))
    ctl.tick(1.0)
    cp.failing = True
    assert ctl.tick(61.0) == [], "the surplus is quarantined in memory only: no report offers it"
    assert ctl.tick(70.0) == []
    assert ctl.stats.checkpoint_write_errors >= 2
    cp.failing = False
    r = one(ctl.tick(71.0))
    assert r.release and set(r.release[0].ips) <= set(on_disk(cp).quarantined()[PRIMARY.eni_id][0])


def test_a_result_is_not_acknowledged_until_its_effect_is_on_disk(tmp_path: Path, monkeypatch: Any) -> None:
    w = agent_world(tmp_path)
    sqs: MemorySqs = w["sqs"]
    agent = started(w)
    try:
        run(agent, w, 1.0)
        first = sqs.reports()[-1]
        store = agent.ds._store
        assert isinstance(store, FileCheckpoint)
        real_save = store.save

        def full(data: dict[str, Any]) -> None:
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(store, "save", full)
        w["imds"].add(PRIMARY, PRIMARY_IPS[:2])
        handback = result(first.seq, {"kind": "assigned", "eni_id": PRIMARY.eni_id, "ips": PRIMARY_IPS[:2]})
        receipt = give(agent, handback)
        sent = len(sqs.sent)
        run(agent, w, 1.0)
        run(agent, w, 5.0)
        assert receipt not in sqs.deleted, "not on disk: left for SQS to deliver again"
        assert len(sqs.sent) == sent, "no report while the checkpoint cannot be written"
        assert not agent.cni.handle({**_add("c1"), "config": CONF})["ok"]
        monkeypatch.setattr(store, "save", real_save)
        receipt = give(agent, handback)  # SQS delivers it again
        run(agent, w, 1.0)
        assert receipt in sqs.deleted and not agent.ds.dirty
        assert address(agent.cni.handle({**_add("c1"), "config": CONF})) in PRIMARY_IPS[:2]
    finally:
        agent.stop()


# --- and the further checks ----------------------------------------------------------------------


def _surplus_offered(agent: Agent, w: dict[str, Any]) -> int:
    """Run the agent until its surplus (WARM_IP_TARGET=1) is quarantined and offered, at the
    node's ``w["clock"].now()``; the seq of its first report."""
    sqs: MemorySqs = w["sqs"]
    run(agent, w, 1.0)
    first = sqs.reports()[-1]
    grant(agent, w, first.seq, PRIMARY_IPS)
    run(agent, w, 1.0)
    run(agent, w, 61.0)
    return first.seq


def test_a_node_clock_ahead_of_aws_never_makes_an_offer_look_younger(tmp_path: Path) -> None:
    # The allocator ages an offer from its ``quarantined_at`` by its own clock; a node clock
    # 300 s ahead made every offer look 300 s younger, past the agent's take-back.
    w = agent_world(tmp_path, aws_behind_s=300.0)
    sqs: MemorySqs = w["sqs"]
    agent = started(w)
    try:
        first_seq = _surplus_offered(agent, w)
        run(agent, w, 1.0)
        offering = [r for r in sqs.reports() if r.release]
        assert offering and any(r.seq > first_seq for r in offering)
        for r in offering:  # quarantined no later than sent, which was 300 s earlier in AWS's time
            assert all(o.quarantined_at is not None and o.quarantined_at <= r.sent_at - 300.0 for o in r.release)
    finally:
        agent.stop()


def test_a_node_clock_behind_aws_gets_its_offers_dated_in_aws_time(tmp_path: Path) -> None:
    # Seed 20 (``--keep 4,12``: a node clock 172 s behind, pods): offers were dated by the node's
    # clock alone, so the allocator saw every one at least 172 s old, past its 60 s ceiling, and
    # never released the surplus (not-settled: 12 idle addresses never released). The measured
    # offset is used both ways: dated no earlier than AWS's time of the quarantine minus the
    # Date header's rounding, never later than it (never younger than it is).
    w = agent_world(tmp_path, aws_behind_s=-300.0)
    sqs: MemorySqs = w["sqs"]
    agent = started(w)
    try:
        first_seq = _surplus_offered(agent, w)
        quarantined_at = w["clock"].now()  # the node's clock
        run(agent, w, 1.0)
        offering = [r for r in sqs.reports() if r.release and r.seq > first_seq]
        assert offering
        assert sqs.aws_clock is not None
        aws_now = sqs.aws_clock.now()
        for r in offering:
            assert r.sent_at <= aws_now
            for o in r.release:
                assert o.quarantined_at is not None and o.quarantined_at <= r.sent_at
                assert quarantined_at + 300.0 - 2.0 <= o.quarantined_at <= quarantined_at + 300.0
                assert aws_now - o.quarantined_at < OFFER_MAX_AGE_CEILING_S  # the allocator acts on it
    finally:
        agent.stop()


def test_a_clock_step_after_the_sample_moves_the_offset_with_it() -> None:
    # The node's clock 300 s behind, measured; then stepped to the right time (NTP) before the
    # next AWS answer. With the old sample alone, offers quarantined after the step would be
    # dated 300 s later than they were: younger than they are, past the agent's take-back.
    class Wall:  # a clock that can be stepped either way
        t = 9_700.0

        def now(self) -> float:
            return self.t

    aws, node, mono = VirtualClock(10_000.0), Wall(), VirtualClock(50.0)
    check = AwsClockCheck(node, mono.now)
    check.observe({"ResponseMetadata": {"HTTPHeaders": {"date": formatdate(aws.now(), usegmt=True)}}}, node.now())
    assert check.offset() == -300.0 and check.ahead() == 0.0
    aws.advance(5.0)
    mono.advance(5.0)
    node.t += 5.0 + 300.0  # stepped: now right
    assert check.offset() == 0.0
    node.t -= 600.0  # stepped back 600 s: that far behind
    assert check.offset() == -600.0


def test_cni_gc_of_one_network_leaves_another_networks_attachments_alone() -> None:
    # Two warmpool networks under Multus: the runtime's GC for one lists that network's
    # attachments only. Before, GC released the other network's (a running pod's) address.
    ds = Datastore(cooldown_s=0.0)
    ds.add_eni(PRIMARY, 0.0)
    ds.add_addresses(PRIMARY.eni_id, ["10.0.0.11", "10.0.0.12", "10.0.0.13"])
    svc = CniService(ds, WiredPods(), clock=VirtualClock(100.0), gc_min_age_s=0.0)
    eth0 = address(add(svc, "pod", "eth0", name="pods-a"))
    net1 = address(add(svc, "pod", "net1", name="pods-b"))
    gone = address(add(svc, "old", "eth0", name="pods-a"))
    valid = [{"containerID": "pod", "ifname": "eth0"}]
    gc = {**CONF, "name": "pods-a", "cniVersion": "1.1.0", "cni.dev/valid-attachments": valid}
    assert svc.handle({"command": "GC", "config": gc})["ok"]
    assert ds.lookup("pod", "net1") == Assignment(net1, PRIMARY.eni_id)
    assert ds.lookup("pod", "eth0") == Assignment(eth0, PRIMARY.eni_id)
    assert ds.lookup("old", "eth0") is None and svc.stats.gc_released == 1  # its own network's leak
    assert gone not in {eth0, net1}
    # the network is checkpointed with the attachment
    cp = MemoryCheckpoint(ds.snapshot())
    again = Datastore(checkpoint=cp)
    again.restore()
    assert {(p.container_id, p.ifname, p.network) for p in again.pods()} == {
        ("pod", "eth0", "pods-a"),
        ("pod", "net1", "pods-b"),
    }


def test_prefix_mode_fallback_addresses_are_offered_and_released_when_surplus() -> None:
    # In prefix mode the allocator falls back to single addresses when no /28 is free
    # (InsufficientCidrBlocks). Before, only whole free /28s counted as surplus: single
    # addresses stayed on the node for ever, whatever the targets said.
    imds = FakeImds()
    singles = ["10.0.0.11", "10.0.0.12", "10.0.0.13"]
    imds.add(PRIMARY, singles, ["10.0.0.32/28"])
    ds = Datastore(cooldown_s=0.0, checkpoint=MemoryCheckpoint())
    pool = PoolConfig(warm_prefix=1, prefix_mode=True, warm_eni=0)
    ctl = PoolController(ID, known("m5.large"), pool, ds, TIMING, metadata=imds)
    ctl.start(1000.0)
    one(ctl.tick(1000.0))
    ctl.tick(1001.0)
    r = one(ctl.tick(1000.0 + TIMING.release_delay_s + 2))
    # one free /28 meets WARM_PREFIX_TARGET=1 alone: the three single addresses go
    assert [(o.eni_id, sorted(o.ips), o.prefixes) for o in r.release] == [(PRIMARY.eni_id, singles, [])]
    # the allocator's planner (the same pool math) unassigns them
    inv = Inventory(
        ID.instance_id,
        ID.instance_type,
        ID.availability_zone,
        (PlannedEni(PRIMARY.eni_id, 0, 0, "subnet-a", PRIMARY.primary_ip, tuple(singles), ("10.0.0.32/28",)),),
    )
    p = plan_node(r, inv, known("m5.large"), [], cluster=ID.cluster)
    assert p.kind == "release" and p.calls == (UnassignAddresses(PRIMARY.eni_id, tuple(r.release[0].ips)),)
    # never below the target: with 11 pods in the /28 the free singles are all the room left
    ds2 = Datastore(cooldown_s=0.0)
    ctl2 = PoolController(ID, known("m5.large"), pool, ds2, TIMING, metadata=imds)
    ctl2.start(0.0)
    got = [ds2.assign(f"p{i}", "eth0", "ns", 0.0) for i in range(14)]
    for a, i in zip(got, range(14), strict=True):
        assert a is not None
        if a.ip in singles:
            ds2.release(f"p{i}", "eth0", 0.0)
    c = ds2.counts(0.0)
    assert (c.free_singles, c.total - c.assigned) == (3, 8)
    delta = ctl2.delta(0.0)
    assert delta.over_singles == 0 and delta.low


def test_a_gc_ages_attachments_on_the_monotonic_clock_so_a_clock_stepped_back_does_not_keep_stale_ones() -> None:
    # Seeds 1354, 2621, 3229 and 6911 of `warmpool sim`: the node's clock stepped 225 s back
    # after an ADD whose answer the runtime lost; every GC for the next 225 s found the
    # attachment "younger" than gc_min_age_s on the wall clock and left it held.
    ds = Datastore(cooldown_s=0.0)
    ds.add_eni(PRIMARY, 0.0)
    ds.add_addresses(PRIMARY.eni_id, ["10.0.0.11", "10.0.0.12"])
    clock = VirtualClock(100.0)
    svc = CniService(ds, WiredPods(), clock=clock, gc_min_age_s=60.0)
    address(add(svc, "lost"))
    clock.step(-225.0)
    clock.advance(30.0)
    gc = {"command": "GC", "config": {**CONF, "cniVersion": "1.1.0", "cni.dev/valid-attachments": []}}
    assert answer(svc, gc)["ok"]
    assert ds.lookup("lost", "eth0") is not None, "30 s old: left alone"
    clock.advance(31.0)
    assert answer(svc, gc)["ok"]
    assert ds.lookup("lost", "eth0") is None, "61 s old by the monotonic clock: released"
    # and a clock stepped forward does not make a new attachment old
    address(add(svc, "new"))
    clock.step(+3600.0)
    assert answer(svc, gc)["ok"]
    assert ds.lookup("new", "eth0") is not None


def test_a_gc_after_a_restart_ages_an_earlier_processs_attachment_from_the_restart() -> None:
    # The disk's assigned_at is the wall clock's, which may have been stepped since: an
    # attachment the agent's previous process made is at least as old as this process and
    # no older for certain, so it is released once this process is gc_min_age_s old.
    cp = FlakyCheckpoint()
    ds = Datastore(cooldown_s=0.0, checkpoint=cp)
    ds.add_eni(PRIMARY, 0.0)
    ds.add_addresses(PRIMARY.eni_id, ["10.0.0.11"])
    clock = VirtualClock(100.0)
    address(add(CniService(ds, WiredPods(), clock=clock, gc_min_age_s=60.0), "lost"))
    clock.step(+3600.0)  # stepped forward across the restart: the disk's age says an hour
    ds2 = on_disk(cp)
    svc2 = CniService(ds2, WiredPods(), clock=clock, gc_min_age_s=60.0)
    gc = {"command": "GC", "config": {**CONF, "cniVersion": "1.1.0", "cni.dev/valid-attachments": []}}
    clock.advance(5.0)
    assert answer(svc2, gc)["ok"]
    assert ds2.lookup("lost", "eth0") is not None, "this process is 5 s old: left alone"
    clock.advance(56.0)
    assert answer(svc2, gc)["ok"]
    assert ds2.lookup("lost", "eth0") is None
