"""Seed 183: what the check's P1 rule (review 26) reads as single addresses placed beside a whole /28.

``simulation.subnets.check_call`` notes a node the allocator gives single addresses while a /28
is whole in the call's subnet, and ``simulation.checks.holds_all_it_can`` then does not excuse the
node's waiting pods. Seed 183 (prefix mode, custom networking, a fragmented world with named
placement, a c8g.medium whose one pod ENI has three slots) was judged ``not-settled`` for two
readings that judged no choice the allocator had:

* a Create of a /28 names its ENI's primary address (``Primary: True``) under named placement;
  that was read as a single address beside the /28 it asked for (every ENI has a primary,
  whatever the mode; the same Create by count names nothing and was not noted);
* a /28 whole in EC2 only because the allocator had released it (an Unassign, or the Detach of
  its ENI) within named placement's hold is one no container may name
  (docs/allocator.md, "Prefix placement that does not fragment", step 5): the singles the node
  got beside it were the only addresses to be had. By count (no named placement) EC2 would place
  a /28 there, and such singles are still noted.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from emulated.clock import VirtualClock
from emulated.ec2 import Ec2Config, Ec2Emulator
from simulation import kinds as k
from simulation import subnets
from simulation.subnets import PodNets

HOLD_S = 300.0


class _World(SimpleNamespace):
    """What ``check_call`` reaches: the emulator, the pod subnets, the time, the verdicts."""

    def now(self) -> float:
        return float(self.clock.now())

    def fault(self, name: str) -> None:
        self.faults.append(name)

    def violation(self, name: str, detail: str) -> None:
        self.violations.append((name, detail))


def _world(named: bool = True) -> tuple[_World, str, str]:
    """A /26 whose only whole /28s are .16/28 (another node's) and .32/28 (on ``eni``)."""
    clock = VirtualClock(1_700_000_000.0)
    emu = Ec2Emulator(clock, Ec2Config(attach_delay_s=0.0, detach_delay_s=0.0), seed=183)
    sid = emu.add_subnet(cidr="10.0.32.0/26")
    ec2 = emu.client()
    ec2.create_network_interface(SubnetId=sid, Ipv4Prefixes=[{"Ipv4Prefix": "10.0.32.16/28"}])
    eni = ec2.create_network_interface(SubnetId=sid, Ipv4Prefixes=[{"Ipv4Prefix": "10.0.32.32/28"}])
    nets = PodNets(main=sid, pod={sid}, named_placement=named, hold_s=HOLD_S if named else 0.0)
    w = _World(clock=clock, emu=emu, nets=nets, faults=[], violations=[])
    return w, sid, eni["NetworkInterface"]["NetworkInterfaceId"]


def _call(w: _World, name: str, **kw: Any) -> None:
    subnets.check_call(w, "n0", name, kw)  # type: ignore[arg-type]
    getattr(w.emu.client(), name)(**kw)


def _release_then_single(named: bool, after_s: float) -> set[str]:
    """The allocator unassigns the /28 on ``eni`` and, ``after_s`` later, asks a single there."""
    w, _, eni = _world(named)
    _call(w, "unassign_private_ip_addresses", NetworkInterfaceId=eni, Ipv4Prefixes=["10.0.32.32/28"])
    assert w.emu.subnets[w.nets.main].pool.free_blocks() == 1  # whole again in EC2
    w.clock.advance(after_s)
    _call(w, "assign_private_ip_addresses", NetworkInterfaceId=eni, PrivateIpAddresses=["10.0.32.8"])
    assert not w.violations
    held = w.faults.count("subnet-world:singles-beside-held-28")
    assert held == (1 if not w.nets.singles_beside_28 else 0)  # counted when excused, only then
    return set(w.nets.singles_beside_28)


def test_a_create_naming_only_its_primary_beside_a_whole_28_places_no_single() -> None:
    w, sid, eni = _world()
    _call(w, "unassign_private_ip_addresses", NetworkInterfaceId=eni, Ipv4Prefixes=["10.0.32.32/28"])
    w.clock.advance(HOLD_S + 1)  # .32/28 whole and nameable again
    primary = [{"PrivateIpAddress": "10.0.32.12", "Primary": True}]
    _call(w, "create_network_interface", SubnetId=sid, PrivateIpAddresses=primary, Ipv4Prefixes=[])
    assert w.nets.singles_beside_28 == set()


def test_a_create_naming_a_secondary_beside_a_whole_28_places_a_single() -> None:
    w, sid, eni = _world()
    _call(w, "unassign_private_ip_addresses", NetworkInterfaceId=eni, Ipv4Prefixes=["10.0.32.32/28"])
    w.clock.advance(HOLD_S + 1)
    named = [{"PrivateIpAddress": "10.0.32.12", "Primary": True}, {"PrivateIpAddress": "10.0.32.13", "Primary": False}]
    _call(w, "create_network_interface", SubnetId=sid, PrivateIpAddresses=named)
    assert w.nets.singles_beside_28 == {"n0"}


def test_singles_beside_a_28_the_allocator_released_within_the_hold_are_not_noted() -> None:
    assert _release_then_single(named=True, after_s=4.0) == set()


def test_singles_beside_a_released_28_past_the_hold_are_noted() -> None:
    assert _release_then_single(named=True, after_s=HOLD_S) == {"n0"}


def test_by_count_singles_beside_a_released_28_are_noted_at_once() -> None:
    # no named placement: an Assign of a /28 by count would have got that very block
    assert _release_then_single(named=False, after_s=4.0) == {"n0"}


def test_a_28_freed_by_detaching_its_eni_is_held_too() -> None:
    """The allocator's DeleteEni: a Detach (held from here), then a Delete (the GC's, maybe)."""
    w, sid, eni = _world()
    ec2 = w.emu.client()
    iid = w.emu.run_instance("c8g.medium", subnet_id=sid)
    ec2.attach_network_interface(NetworkInterfaceId=eni, InstanceId=iid, DeviceIndex=1)
    w.emu.settle()
    att = w.emu.enis[eni].attachment
    assert att is not None
    _call(w, "detach_network_interface", AttachmentId=att.id)
    w.emu.settle()
    ec2.delete_network_interface(NetworkInterfaceId=eni)
    assert w.emu.subnets[sid].pool.free_blocks() == 1
    single = [{"PrivateIpAddress": "10.0.32.12", "Primary": True}, {"PrivateIpAddress": "10.0.32.13", "Primary": False}]
    w.clock.advance(50.0)
    _call(w, "create_network_interface", SubnetId=sid, PrivateIpAddresses=single)
    assert w.nets.singles_beside_28 == set()
    w.clock.advance(HOLD_S)
    _call(
        w,
        "create_network_interface",
        SubnetId=sid,
        PrivateIpAddresses=[
            {"PrivateIpAddress": "10.0.32.14", "Primary": True},
            {"PrivateIpAddress": "10.0.32.15", "Primary": False},
        ],
    )
    assert w.nets.singles_beside_28 == {"n0"}


def test_the_check_s_hold_is_short_of_the_allocator_s_by_the_widest_clock_gap() -> None:
    skew = k.LambdaClockSkew(at=0.0, dur=60.0, skews="40,-25")
    assert subnets.hold_for_check(300.0, [skew]) == 235.0
    assert subnets.hold_for_check(300.0, [k.LambdaClockSkew(at=0.0, dur=60.0, skews="30,20")]) == 270.0
    assert subnets.hold_for_check(300.0, []) == 300.0
