"""Hostile review (review1) of the checkpoint integrity change (checksum + wiring check) and of
named placement. Each test is a strict xfail: it fails on the current code for the finding
named in its reason, and turns the suite red once the finding is fixed (then drop the mark)."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from emulated.clock import VirtualClock
from tests.helpers.agent_world import MemorySqs, WiredPods, make_agent
from tests.helpers.agent_world import cni_add as _add
from tests.helpers.controller import PRIMARY, FakeImds

IPS = ["10.0.0.11", "10.0.0.12", "10.0.0.13", "10.0.0.14"]


# --- finding C1: an earlier valid copy that lacks an in-flight offer ---------------------------


# review1 C1, fixed: a restored checkpoint waits for the allocator's word that it is the node's
# newest state (PoolReport.restored_from, RestoreChecked); until then no free address goes to a
# pod, and "not current" sends the agent the lost-checkpoint way (tests/unit/test_restore_check.py).
def test_an_earlier_valid_copy_without_an_inflight_offer_does_not_hand_the_offered_address_out(
    tmp_path: Path,
) -> None:
    from tests.helpers.agent_world import give
    from warmpool.messages import AllocationResult, RestoreChecked

    imds = FakeImds()
    imds.add(PRIMARY, IPS)
    clock = VirtualClock(1_000_000.0)
    sqs, pods, state = MemorySqs(VirtualClock(1_000_000.0)), WiredPods(), tmp_path / "state"
    agent = make_agent(state, imds, sqs, clock, pods)
    path = state / "checkpoint.json"
    backup = tmp_path / "checkpoint.backup.json"
    try:
        ds = agent.ds
        for ip in IPS:
            ds.reclaim(PRIMARY.eni_id, [ip])
        assert _add(agent, "c1") is not None  # one running pod, wired
        shutil.copyfile(path, backup)  # the backup (a valid, checksummed file of this agent)
        backup_seq = int(json.loads(backup.read_text())["meta"]["last_seq"])
        offered = next(a.ip for e in ds.enis() for a in e.addrs.values() if not a.in_use)
        # the pool offers it back: quarantined (on disk) and reported; EC2's unassign is pending
        assert ds.quarantine(PRIMARY.eni_id, [offered], [], clock.now()) == 1
        assert offered in json.dumps(json.loads(path.read_text())["enis"])
        clock.advance(2)
        agent.run_once()  # the report offering it, which the allocator serves (ledger past the copy)
    finally:
        agent.stop()
    shutil.copyfile(backup, path)  # the node's state restored from the backup
    clock.advance(5)
    agent = make_agent(state, imds, sqs, clock, pods)
    try:
        rebuilt = agent.counters["checkpoint_rebuilds_damaged"]
        assert not rebuilt  # the copy passes every check the node can make
        agent.run_once()
        asked = sqs.reports()[-1]
        assert asked.restored_from == backup_seq, asked.restored_from
        # before the allocator's word: nothing free goes to a pod
        assert [_add(agent, f"w{i}") for i in range(len(IPS))] == [None] * len(IPS)
        # the allocator has recorded the offering report: not current
        give(
            agent,
            AllocationResult(
                cluster=asked.cluster,
                node=asked.node,
                instance_id=asked.instance_id,
                in_reply_to=asked.seq,
                actions=[RestoreChecked(restored_from=backup_seq, wait=asked.restore_wait, current=False, epoch=1)],
            ),
        )
        clock.advance(2)
        agent.run_once()
        got = [_add(agent, f"n{i}") for i in range(len(IPS))]
        assert offered not in got, (
            f"restored={not rebuilt}: a new pod got {offered}, offered and awaiting EC2's unassign"
        )
        last = sqs.reports()[-1]
        assert last.restored_from is None
        unknown = {ip for o in last.release if o.unknown for ip in o.ips}
        assert offered in unknown, last.release
    finally:
        agent.stop()


# --- finding P1: a named Create refused with InvalidIPAddress.InUse is not "taken" ---------------


class TakesANamedCreateAddressFirst:
    """Another caller takes the primary address a named CreateNetworkInterface asks for, between
    the allocator's read of the subnet and its call (as TakesANamedAddressFirst does for Assign)."""

    def __init__(self, inner: Any, emu: Any, subnet: str) -> None:
        self.inner, self.emu, self.subnet, self.done = inner, emu, subnet, 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def create_network_interface(self, **kw: Any) -> Any:
        named = kw.get("PrivateIpAddresses")
        if named and not self.done:
            self.done += 1
            self.emu.client().create_network_interface(
                SubnetId=self.subnet, PrivateIpAddress=named[0]["PrivateIpAddress"]
            )
        return self.inner.create_network_interface(**kw)


# review1 P1, fixed: functions/errors.py maps InvalidIPAddress.InUse to AddressTaken for
# CreateNetworkInterface too (before, only for AssignPrivateIpAddresses: the named Create failed
# and the by-count fallback never ran).
def test_a_named_create_whose_address_was_taken_since_the_read_is_asked_for_by_count() -> None:
    from emulated.ec2 import Ec2Config
    from tests.helpers.reliability_cluster import ReliabilityCluster
    from warmpool.pool import PoolConfig

    c = ReliabilityCluster(
        1,
        pool=PoolConfig(warm_ip=3),
        ec2_config=Ec2Config(single_placement="scattered", placement_seed=5),
        named_placement=True,
    )
    wrapped = TakesANamedCreateAddressFirst(c.w.ec2_client, c.w.emu, c.w.subnets[0])
    c.w.alloc.ec2.api = wrapped  # type: ignore[attr-defined]
    c.w.alloc.executor.ec2 = c.w.alloc.ec2
    for n in c.nodes:
        c.scale(n, 14)  # past the primary ENI's addresses: a CreateNetworkInterface
    c.settle()
    c.check()
    assert wrapped.done == 1
    assert c.w.alloc.tally.get("PlacementsFoundTaken") == 1, "the refused named Create was not retried by count"


# --- finding P2: named placement names an address its owner has not yet let go --------------------


class Recorder:
    """The allocator's EC2 client, recording each Unassign and each named address asked for."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.unassigned: dict[str, str] = {}  # address -> ENI it was unassigned from
        self.named: list[tuple[str, str]] = []  # (ENI or subnet, address) asked for by name

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def unassign_private_ip_addresses(self, **kw: Any) -> Any:
        out = self.inner.unassign_private_ip_addresses(**kw)
        for ip in kw.get("PrivateIpAddresses", []) or []:
            self.unassigned[ip] = kw["NetworkInterfaceId"]
        return out

    def assign_private_ip_addresses(self, **kw: Any) -> Any:
        self.named += [(kw["NetworkInterfaceId"], ip) for ip in kw.get("PrivateIpAddresses", []) or []]
        return self.inner.assign_private_ip_addresses(**kw)

    def create_network_interface(self, **kw: Any) -> Any:
        self.named += [(kw["SubnetId"], a["PrivateIpAddress"]) for a in kw.get("PrivateIpAddresses", []) or []]
        return self.inner.create_network_interface(**kw)


# review1 P2, fixed: before each Unassign (and each Detach of a DeleteEni) the executor records the
# keys released in their subnet (PlacementRecords.hold, shared by every container); the usage read
# leaves out every key released within WARMPOOL_PLACEMENT_RELEASE_HOLD_S (functions/execute.py::_held).
def test_named_placement_does_not_name_an_address_whose_release_its_owner_has_not_applied() -> None:
    from emulated.ec2 import Ec2Config

    # EC2 scattering singles (as the placement merge models AWS): by count, n1 gets none of n0's
    # just-unassigned addresses in this run (0 of 7); named, it gets 7 of 7
    from tests.helpers.reliability_cluster import TIMING, ReliabilityCluster
    from warmpool.pool import PoolConfig

    scattered = Ec2Config(single_placement="scattered", placement_seed=5)
    # Bursts off (WARMPOOL_BURST_WINDOW_S=0): the scale-down below comes seconds after n0's eight
    # pods, within the burst's window, and a burst holds back its count for a window more, so n0's
    # surplus would go in two offers; this case needs it offered whole, as when it was written.
    no_bursts = dataclasses.replace(TIMING, burst_window_s=0.0)
    c = ReliabilityCluster(2, pool=PoolConfig(warm_ip=1), named_placement=True, ec2_config=scattered, timing=no_bursts)
    rec = Recorder(c.w.ec2_client)
    c.w.alloc.ec2.api = rec  # type: ignore[attr-defined]
    c.w.alloc.executor.ec2 = c.w.alloc.ec2
    n0, n1 = c.nodes["n0"], c.nodes["n1"]
    c.scale("n0", 8)
    c.scale("n1", 1)
    c.settle()
    held_back = {"n0"}
    deliver = c._results

    def results(n: Any, now: float) -> None:  # n0's answers are late (SQS delivery, a busy agent)
        if n.name not in held_back:
            deliver(n, now)

    c._results = results  # type: ignore[method-assign]
    c.scale("n0", 0)  # surplus: offered after the release delay, then unassigned by the allocator
    c.run(80)
    assert rec.unassigned, "the allocator unassigned n0's surplus"
    still_n0 = {a.ip for e in n0.ds.enis() for a in e.addrs.values()}  # n0's agent still lists them
    pending = set(rec.unassigned) & still_n0
    assert pending, "n0 has not applied its 'released' yet"
    rec.named.clear()
    c.scale("n1", 8)  # n1 grows: named Assigns in the same subnet
    c.run(40)
    named = {ip for _, ip in rec.named}
    assert named, "n1 was given addresses by name"
    assert not named & pending, f"named for n1 while n0 still has them (awaiting 'released'): {sorted(named & pending)}"
    _ = n1


# --- finding P3: a re-sent Create in another container names other addresses: a second ENI -------


class ThrottlesFirstAttach:
    """AttachNetworkInterface throttled once (the report is re-sent with the same seq so that the
    same ClientToken finds the ENI made: functions/execute.py::_create); the re-sent report is
    served by another container (``forget`` drops what this one remembers)."""

    def __init__(self, inner: Any, forget: Any) -> None:
        self.inner, self.forget, self.done = inner, forget, 0
        self.creates: list[dict[str, Any]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def create_network_interface(self, **kw: Any) -> Any:
        self.creates.append(kw)
        return self.inner.create_network_interface(**kw)

    def attach_network_interface(self, **kw: Any) -> Any:
        from botocore.exceptions import ClientError

        if not self.done:
            self.done += 1
            self.forget()
            raise ClientError(
                {"Error": {"Code": "RequestLimitExceeded", "Message": "slow down"}}, "AttachNetworkInterface"
            )
        return self.inner.attach_network_interface(**kw)


# review1 P3, fixed: each named Create's parameters are recorded by ClientToken in the shared store
# before it is sent (PlacementRecords.put_create); a re-sent Create, in any container, sends them again.
def test_a_resent_create_in_another_container_finds_the_eni_the_first_made() -> None:
    from tests.helpers.reliability_cluster import ReliabilityCluster
    from warmpool.pool import PoolConfig

    c = ReliabilityCluster(1, pool=PoolConfig(warm_ip=3), named_placement=True)
    ex = c.w.alloc.executor

    def other_container() -> None:
        ex._created_names.clear()
        c.w.alloc.ec2.forget_usage(c.w.subnets[0])

    wrapped = ThrottlesFirstAttach(c.w.ec2_client, other_container)
    c.w.alloc.ec2.api = wrapped  # type: ignore[attr-defined]
    ex.ec2 = c.w.alloc.ec2
    c.scale("n0", 14)  # past the primary ENI: one CreateNetworkInterface
    c.settle()
    c.check()
    assert wrapped.done == 1
    tokens = {str(kw.get("ClientToken")) for kw in wrapped.creates}
    # by count (WARMPOOL_NAMED_PLACEMENT off) the same run makes 2 Creates with one token, one ENI
    assert len(tokens) == 1, f"a second ClientToken (a second ENI, the first left for GC): {sorted(tokens)}"


# --- finding C2: a failed read of the host's wiring now fails every start ------------------------


def test_a_failed_wiring_read_at_start_does_not_stop_the_agent(tmp_path: Path) -> None:
    from node_agent.netlink import NetlinkFailure

    class FlakyWiring(WiredPods):
        def __init__(self) -> None:
            super().__init__()
            self.fail = 0

        def host_wiring(self) -> Any:
            if self.fail:
                self.fail -= 1
                raise NetlinkFailure("netlink dump failed: ENOBUFS")
            return super().host_wiring()

    imds = FakeImds()
    imds.add(PRIMARY, IPS)
    clock = VirtualClock(1_000_000.0)
    sqs, pods, state = MemorySqs(VirtualClock(1_000_000.0)), FlakyWiring(), tmp_path / "state"
    agent = make_agent(state, imds, sqs, clock, pods)
    try:
        for ip in IPS:
            agent.ds.reclaim(PRIMARY.eni_id, [ip])
        first = _add(agent, "c1")
        assert first is not None
    finally:
        agent.stop()
    pods.fail = 1  # one transient failure of the read at the next start
    started = None
    try:
        started = make_agent(state, imds, sqs, clock, pods)
        # read again, the checkpoint was checked and restored: c1 keeps its address
        assert _add(started, "c1") == first
    except OSError as exc:
        raise AssertionError(f"the agent did not start: {exc!r}") from None
    finally:
        if started is not None:
            started.stop()
    # a read that keeps failing stops the start, saying why (its restart reads again)
    from node_agent.agent import WIRING_READ_TRIES

    pods.fail = WIRING_READ_TRIES
    with pytest.raises(OSError, match=r"cannot read the host's pod wiring \(3 tries, the last: netlink dump failed"):
        make_agent(state, imds, sqs, clock, pods).stop()


# --- finding P4: named placement ignores the subnet's CIDR reservations ---------------------------


class WithExplicitReservation:
    """The emulator's client, plus the subnet's CIDR reservations as EC2 answers them
    (GetSubnetCidrReservations): an operator's explicit reservation of 10.0.0.0/27."""

    def __init__(self, inner: Any, subnet: str) -> None:
        self.inner, self.subnet = inner, subnet

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def get_subnet_cidr_reservations(self, **kw: Any) -> Any:
        res = {
            "SubnetCidrReservationId": "scr-0123456789abcdef0",
            "SubnetId": self.subnet,
            "Cidr": "10.0.0.0/27",
            "ReservationType": "explicit",
            "OwnerId": "123456789012",
        }
        return {"SubnetIpv4CidrReservations": [res], "SubnetIpv6CidrReservations": []}


# review1 P4, fixed: the usage read includes GetSubnetCidrReservations (functions/ec2.py::subnet_usage):
# explicit reservations are never named, prefix ones take prefixes only (warmpool/placement.py).
def test_named_placement_never_names_an_address_in_an_explicit_cidr_reservation() -> None:
    import ipaddress

    from emulated.ec2 import Ec2Config, Ec2Emulator
    from functions.ec2 import Ec2
    from functions.settings import Settings
    from functions.telemetry import Tally
    from warmpool.placement import place

    clock = VirtualClock(1000.0)
    emu = Ec2Emulator(clock, Ec2Config())
    sid = emu.add_subnet(cidr="10.0.0.0/24", subnet_id="subnet-a")
    api = WithExplicitReservation(emu.client(), sid)
    ec2 = Ec2(
        api,  # type: ignore[arg-type]
        Settings(cluster="demo", allowed_subnets=(sid,), named_placement=True),
        clock,
        Tally(),
        pay=lambda cost: 0.0,
    )
    ec2.subnets()
    usage = ec2.subnet_usage(sid)
    assert usage is not None
    named = place(usage, 5, 0).ips
    reserved = ipaddress.ip_network("10.0.0.0/27")
    inside = [ip for ip in named if ipaddress.ip_address(ip) in reserved]
    assert not inside, f"named inside the explicit reservation 10.0.0.0/27: {inside}"
