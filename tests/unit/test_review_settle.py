"""Review of settle7 (acbf0d2, aa51bac) and steady100k (18df833): findings as tests.

Each finding that fails on the code under review is a strict xfail; each passing test pins
what was checked and found sound."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from functions.fairness import FairShare
from functions.release_book import with_repeats
from functions.releases import hold_releases, offers_held
from functions.settings import Settings
from functions.telemetry import Tally
from node_agent.agent import restore_checked
from node_agent.checkpoint import FileCheckpoint
from node_agent.datastore import Datastore
from node_agent.hostnet import HostWiring, host_veth_name, pod_rules, wired_pods
from node_agent.netlink import MAIN_TABLE, RT_SCOPE_LINK, Link, Route, Rule
from tests.helpers.restore import written
from warmpool.buckets import BucketSpec
from warmpool.calls import UnassignAddresses
from warmpool.clock import Clock
from warmpool.planner import Plan
from warmpool.pool import PoolDelta
from warmpool.ports import FlipState
from warmpool.release_book import ReleaseBook, Taken

IPS = ["10.0.0.11", "10.0.0.12", "10.0.0.13", "10.0.0.14"]


# --- the host's netlink view, as wired_pods reads it ------------------------------------------


@dataclass
class HostNet:
    """The node namespace as ``node_agent.hostnet.wired_pods`` reads it (links, main routes, rules)."""

    link_list: list[Link] = field(default_factory=list)
    route_list: list[Route] = field(default_factory=list)
    rule_list: list[Rule] = field(default_factory=list)

    def links(self) -> list[Link]:
        return list(self.link_list)

    def routes(self, table: int) -> list[Route]:
        return [r for r in self.route_list if r.table == table]

    def rules(self) -> list[Rule]:
        return list(self.rule_list)


class NetPods:
    """``NetlinkPods.host_wiring`` over :class:`HostNet` (the same ``wired_pods`` read)."""

    def __init__(self, net: HostNet, veth_prefix: str = "eni") -> None:
        self.net, self.veth_prefix = net, veth_prefix

    def host_wiring(self) -> HostWiring:
        return wired_pods(self.net, self.veth_prefix)  # type: ignore[arg-type]


def _wired(pods: dict[tuple[str, str], str], *, prefix: str = "eni", no_route: tuple[str, ...] = ()) -> HostNet:
    """Each pod's host veth (up), its ``/32`` route in main (unless its container is in
    ``no_route``) and its pod rules, as ``setup_pod`` leaves them."""
    net = HostNet(link_list=[Link(1, "ens5", "0a:00:00:00:00:00", 9001, True)])
    for n, ((cid, ifname), ip) in enumerate(sorted(pods.items()), start=10):
        name = host_veth_name(cid, ifname, prefix)
        net.link_list.append(Link(n, name, f"ee:00:00:00:00:{n:02x}", 9001, True, "veth"))
        if cid not in no_route:
            net.route_list.append(Route(dst=f"{ip}/32", table=MAIN_TABLE, oif=n, scope=RT_SCOPE_LINK))
        net.rule_list.extend(pod_rules(ip, 2))
    return net


# --- change 2 (aa51bac): release_unwired ------------------------------------------------------


# Fixed (was a strict xfail of the review):
def test_a_restored_pod_whose_veth_is_there_but_route_is_gone_keeps_its_address(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint.json"
    pods = written(path)
    net = _wired(pods, no_route=("c2",))
    wiring = wired_pods(net)  # type: ignore[arg-type]
    c2_ip = pods[("c2", "eth0")]
    assert c2_ip not in wiring.pods and c2_ip in wiring.stale  # the 'stale' reading: "the veth is gone"
    assert any(lk.name == host_veth_name("c2", "eth0") for lk in net.links())  # ...but it is not
    ds = Datastore(cooldown_s=30.0, checkpoint=FileCheckpoint(str(path)))
    assert restore_checked(ds, NetPods(net), "eni", now=50.0) == (True, None)
    # once the cooldown has passed (and the restore check said current), a new pod's ADD
    got = [ds.assign(f"new{i}", "eth0", f"/var/run/netns/new{i}", 200.0) for i in range(2)]
    assert c2_ip not in {a.ip for a in got if a is not None}, "c2 still runs on its address"
    assert ("c2", "eth0") in {(p.container_id, p.ifname) for p in ds.pods()}


# Fixed (was a strict xfail of the review):
def test_a_veth_prefix_change_across_a_restart_does_not_free_running_pods(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint.json"
    pods = written(path)
    net = _wired(pods, prefix="eni")  # wired by the agent before the change
    ds = Datastore(checkpoint=FileCheckpoint(str(path)))
    assert restore_checked(ds, NetPods(net, "wpn"), "wpn", now=50.0) == (True, None)
    held = {(p.container_id, p.ifname): p.ip for p in ds.pods()}
    assert held == pods, "every running pod still holds its address"


def test_a_restored_pod_whose_veth_and_route_are_gone_is_released(tmp_path: Path) -> None:
    """Sound: the case aa51bac is for (an old copy's pod deleted since: no veth, no route) is
    released; the pods the host wires keep theirs; the wiring read happens before the CNI server
    exists (Agent.start builds CniService after restore_checked), so no ADD of this process races
    it."""
    path = tmp_path / "checkpoint.json"
    pods = written(path)
    running = {k: v for k, v in pods.items() if k[0] != "c2"}
    net = _wired(running)
    ds = Datastore(checkpoint=FileCheckpoint(str(path)))
    assert restore_checked(ds, NetPods(net), "eni", now=50.0) == (True, None)
    assert {(p.container_id, p.ifname): p.ip for p in ds.pods()} == running


# --- change 1 (acbf0d2): the repeat's Unassign on another ENI -------------------------------

E1, E2 = "eni-00000001", "eni-00000002"
IID = "i-0123456789abcdef0"


class FixedClock(Clock):
    def __init__(self, t: float) -> None:
        self.t = t

    def now(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.t += seconds


def _report(seq: int, now: float):  # type: ignore[no-untyped-def]
    from tests.helpers.release_book import report

    r = report(seq, {E1: ["10.0.0.6"], E2: []}, {E2: ["10.0.0.11", "10.0.0.12"]})
    return r.model_copy(
        update={"instance_id": IID, "release": [o.model_copy(update={"quarantined_at": now}) for o in r.release]}
    )


# Fixed (was a strict xfail of the review): the release rules' holds reach the repeats
# (functions/releases.py::offers_held, ReleaseBook.repeats(hold=...)), as Allocator._release_rules
# passes them.
def test_the_repeat_unassign_on_another_eni_obeys_the_release_delay() -> None:
    now = 1_000_000.0
    book = ReleaseBook(3, (Taken(E1, "10.0.0.11", 10),))
    r = _report(12, now)  # both addresses offered on E2, quarantined just now
    from tests.helpers.release_book import facts

    f = facts({E1: ["10.0.0.6"], E2: ["10.0.0.11", "10.0.0.12"]})
    delta = PoolDelta(short=0, short_units=0, whole_enis=False, over=1, over_units=1, over_enis=0)
    plan = Plan("n1", IID, 12, "release", (UnassignAddresses(E2, ips=("10.0.0.12",)),), 0, delta)
    settings = Settings(cluster="demo")
    assert settings.release_delay_s > 0
    fair = FairShare(spec_of=lambda a: BucketSpec(capacity=10, refill_per_s=1))
    held = hold_releases(
        r, f, plan, instance_id=IID, fair=fair, clock=FixedClock(now), settings=settings, tally=Tally()
    )
    assert not any(isinstance(c, UnassignAddresses) for c in held.calls)  # the ordinary one: held
    shown = {e.eni.eni_id: (*e.eni.ips, *e.eni.prefixes) for e in f.enis}
    attached = [e.eni.eni_id for e in f.enis]
    hold = offers_held(r, instance_id=IID, fair=fair, clock=FixedClock(now), settings=settings)
    calls = with_repeats(held, book, r, r.to_json(), attached, shown, hold).calls  # as Allocator._release_rules
    assert not any(isinstance(c, UnassignAddresses) for c in calls), calls
    # The booked key is still said released for its own ENI (as before), and once the offer is
    # as old as the release delay the repeat's Unassign is made: later, never more often.
    from warmpool.calls import RepeatRelease

    assert [(c.eni_id, c.ips) for c in calls if isinstance(c, RepeatRelease)] == [(E1, ("10.0.0.11",))]
    later = FixedClock(now + settings.release_delay_s)
    hold = offers_held(r, instance_id=IID, fair=fair, clock=later, settings=settings)
    assert hold == frozenset()
    calls = with_repeats(held, book, r, r.to_json(), attached, shown, hold).calls
    assert [(c.eni_id, c.ips) for c in calls if isinstance(c, UnassignAddresses)] == [(E2, ("10.0.0.11",))]


def test_the_repeat_unassign_on_another_eni_waits_while_the_instance_is_damped() -> None:
    """Damped, the ordinary Unassign of an offer becomes a hand-back; the repeat's Unassign of a
    booked key (never handed back: the book took it) is not made either, until the damping ends."""
    now = 1_000_000.0
    book = ReleaseBook(3, (Taken(E1, "10.0.0.11", 10),))
    r = _report(12, now - 3600.0)  # an old offer: only the damping holds it
    from tests.helpers.release_book import facts

    f = facts({E1: ["10.0.0.6"], E2: ["10.0.0.11", "10.0.0.12"]})
    settings = Settings(cluster="demo")
    fair = FairShare(spec_of=lambda a: BucketSpec(capacity=10, refill_per_s=1))
    fair._flips[IID] = FlipState("release", (), now + 600.0)
    shown = {e.eni.eni_id: (*e.eni.ips, *e.eni.prefixes) for e in f.enis}
    attached = [e.eni.eni_id for e in f.enis]
    plan = Plan("n1", IID, 12, "none", (), 0, PoolDelta(0, 0, False, 0, 0, 0))
    assert offers_held(r, instance_id=IID, fair=fair, clock=FixedClock(now), settings=settings) == {E2}
    hold = offers_held(r, instance_id=IID, fair=fair, clock=FixedClock(now), settings=settings)
    calls = with_repeats(plan, book, r, r.to_json(), attached, shown, hold).calls
    assert not any(isinstance(c, UnassignAddresses) for c in calls), calls
    hold = offers_held(r, instance_id=IID, fair=fair, clock=FixedClock(now + 601.0), settings=settings)
    calls = with_repeats(plan, book, r, r.to_json(), attached, shown, hold).calls
    assert [(c.eni_id, c.ips) for c in calls if isinstance(c, UnassignAddresses)] == [(E2, ("10.0.0.11",))]
