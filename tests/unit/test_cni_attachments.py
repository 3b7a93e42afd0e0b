"""One attachment, one holder: CNI operations for one (container, interface) are
serialised, and an ADD's clean-up never gives back an address another ADD
returned (issue 11, defect 3). No kernel: the pod network is a recorder."""

from __future__ import annotations

import threading
import time
from typing import Any

from emulated.clock import VirtualClock
from node_agent.cniserver import CniService
from node_agent.hostnet import PodNet
from node_agent.netlink import NetlinkFailure
from tests.helpers.cni import CONF, ScriptedPods
from tests.helpers.cni import add_request as _add
from tests.helpers.cni import cni_datastore as _ds


def test_overlapping_adds_for_one_container_are_serialised_and_the_second_failure_keeps_the_address() -> None:
    # Was: the second ADD ran while the first was wiring, got the same address,
    # failed, and its clean-up released the address the first ADD then returned.
    ds = _ds()
    pods = ScriptedPods(["block", "fail"])
    svc = CniService(ds, pods, clock=VirtualClock(5.0))
    replies: dict[str, dict[str, Any]] = {}

    def run(tag: str) -> None:
        replies[tag] = svc.handle(_add())

    first = threading.Thread(target=run, args=("first",))
    first.start()
    assert pods.entered.wait(10)
    second = threading.Thread(target=run, args=("second",))
    second.start()
    deadline = time.monotonic() + 0.5  # room for the second ADD to reach set-up if nothing stops it
    while time.monotonic() < deadline and len(pods.setups) < 2:
        time.sleep(0.01)
    pods.go.set()
    first.join(10)
    second.join(10)
    assert pods.most_inside == 1, "two set-ups of one attachment ran at once"
    assert replies["first"]["ok"], replies
    ip = replies["first"]["result"]["ips"][0]["address"].removesuffix("/32")
    assert replies["second"]["ok"] is False and replies["second"]["code"] == 5
    held = ds.lookup("c1", "eth0")
    assert held is not None and held.ip == ip, "the address the first ADD returned was given back"
    assert pods.teardowns == [], "the working pod's wiring was torn down"
    # after the cooldown no other pod gets it
    later = CniService(ds, ScriptedPods([]), clock=VirtualClock(500.0))
    others = [later.handle(_add(f"other{i}")) for i in range(2)]
    assert all(r["ok"] for r in others)
    assert ip not in {r["result"]["ips"][0]["address"].removesuffix("/32") for r in others}


def test_a_failed_repeat_add_never_releases_the_address_a_finished_add_returned() -> None:
    ds = _ds()
    pods = ScriptedPods(["ok", "fail"])
    svc = CniService(ds, pods, clock=VirtualClock(5.0))
    ok = svc.handle(_add())
    assert ok["ok"]
    ip = ok["result"]["ips"][0]["address"].removesuffix("/32")
    failed = svc.handle(_add())  # the runtime's retry, whose wiring fails
    assert failed["ok"] is False and failed["code"] == 5
    held = ds.lookup("c1", "eth0")
    assert held is not None and held.ip == ip
    assert pods.teardowns == []
    assert ds.counts(5.0).cooldown == 0
    # the runtime's DEL for the failed ADD is what gives it back
    assert svc.handle({"command": "DEL", "container_id": "c1", "ifname": "eth0", "config": CONF})["ok"]
    assert ds.lookup("c1", "eth0") is None and ds.counts(5.0).cooldown == 1


def test_a_failed_first_add_still_gives_back_the_address_it_took() -> None:
    ds = _ds()
    pods = ScriptedPods(["fail"])
    svc = CniService(ds, pods, clock=VirtualClock(5.0))
    failed = svc.handle(_add())
    assert failed["ok"] is False and failed["code"] == 5
    assert ds.lookup("c1", "eth0") is None
    assert len(pods.teardowns) == 1 and ds.counts(5.0).cooldown == 1


def test_different_attachments_are_not_serialised() -> None:
    ds = _ds()
    pods = ScriptedPods(["block", "ok"])
    svc = CniService(ds, pods, clock=VirtualClock(5.0))
    first = threading.Thread(target=svc.handle, args=(_add("c1"),))
    first.start()
    assert pods.entered.wait(10)
    # another interface of the same container, while the first is still wiring
    assert svc.handle(_add("c1", "net1"))["ok"]
    assert pods.most_inside == 2
    pods.go.set()
    first.join(10)
    assert {p.ifname for p in ds.pods()} == {"eth0", "net1"}


def test_an_operation_waiting_too_long_for_its_attachment_is_told_to_try_again() -> None:
    ds = _ds()
    pods = ScriptedPods(["block"])
    svc = CniService(ds, pods, clock=VirtualClock(5.0), busy_wait_s=0.2)
    first = threading.Thread(target=svc.handle, args=(_add(),))
    first.start()
    assert pods.entered.wait(10)
    reply = svc.handle({"command": "DEL", "container_id": "c1", "ifname": "eth0", "config": CONF})
    assert reply["ok"] is False and reply["code"] == 11 and "in progress" in reply["msg"]
    pods.go.set()
    first.join(10)
    assert ds.lookup("c1", "eth0") is not None
    assert svc._attachments == {}, "the per-attachment locks are not kept once idle"


class FlakyPods:
    """Wiring that fails now and then and takes a little time, so operations overlap."""

    def __init__(self, seed: int) -> None:
        import random

        self.rng = random.Random(seed)
        self.lock = threading.Lock()
        self.wired: dict[tuple[str, str], str] = {}
        self.doubles: list[str] = []

    def setup(self, netns: str, ifname: str, container_id: str, ip: str, table: int, mtu: int) -> PodNet:
        with self.lock:
            fail = self.rng.random() < 0.3
            pause = self.rng.random() * 0.002
        time.sleep(pause)
        if fail:
            raise NetlinkFailure(16, "busy")
        with self.lock:
            key = (container_id, ifname)
            self.doubles += [f"{ip}: {k} and {key}" for k, v in self.wired.items() if v == ip and k != key]
            self.wired[key] = ip
        return PodNet("eni0", "02:00:00:00:00:01", "02:00:00:00:00:02", 2)

    def teardown(self, container_id: str, ifname: str, ip: str | None) -> None:
        with self.lock:
            self.wired.pop((container_id, ifname), None)

    def check(self, netns: str, ifname: str, container_id: str, ip: str, table: int) -> list[str]:
        return []

    def host_wiring(self) -> None:
        return None


STORM_KEYS = [("c1", "eth0"), ("c2", "eth0"), ("c1", "net1")]


def _storm(svc: CniService, seed: int) -> None:
    import random

    rng = random.Random(seed)
    for _ in range(60):
        cid, ifname = rng.choice(STORM_KEYS)
        op = rng.random()
        if op < 0.6:
            svc.handle(_add(cid, ifname))
        elif op < 0.9:
            svc.handle({"command": "DEL", "container_id": cid, "ifname": ifname, "config": CONF})
        else:
            valid = [{"containerID": c, "ifname": i} for c, i in STORM_KEYS if rng.random() < 0.5]
            svc.handle({"command": "GC", "config": {**CONF, "cniVersion": "1.1.0", "cni.dev/valid-attachments": valid}})


def test_concurrent_add_del_gc_storm_never_leaves_an_address_and_its_wiring_apart() -> None:
    """Threads hammer a few attachments with ADD (retried, as a runtime does), DEL and GC.
    No cooldown, so a released address is handed out again at once. Never two pods wired
    with one address; quiescent afterwards, every address held has its pod's wiring and
    every wiring its address."""
    for seed in range(8):
        ds = _ds(4)
        ds.cooldown_s = 0.0
        pods = FlakyPods(seed)
        svc = CniService(ds, pods, clock=VirtualClock(1000.0), gc_min_age_s=0.0)
        threads = [threading.Thread(target=_storm, args=(svc, seed * 100 + n)) for n in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert pods.doubles == [], f"seed {seed}: one address wired to two pods: {pods.doubles[:3]}"
        held = {(p.container_id, p.ifname): p.ip for p in ds.pods()}
        assert len(set(held.values())) == len(held), held
        assert held == pods.wired, f"seed {seed}: datastore {held} vs wiring {pods.wired}"
