"""Checkpoint rebuild in the datastore and the CNI service: addresses found wired
on the host are held by recovered holders (keyed by host veth name) that a later
DEL, CHECK or repeated ADD of the same pod finds again; nothing is ever handed
out twice. No I/O: the host's wiring is given as data."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from emulated.clock import VirtualClock
from node_agent.checkpoint import (
    CHECKPOINT_VERSION,
    RECOVERED_CHECKPOINT_VERSION,
    CheckpointError,
    FileCheckpoint,
    MemoryCheckpoint,
)
from node_agent.cniserver import CniService
from node_agent.datastore import Datastore
from node_agent.hostnet import HostWiring, PodNet, host_veth_name
from node_agent.records import UNKNOWN_HOLDER, EniInfo

PRIMARY = EniInfo("eni-00000000", 0, "0a:00:00:00:00:00", "10.0.0.10", "subnet-a", "10.0.0.0/24")
SECOND = EniInfo("eni-00000001", 1, "0a:00:00:00:00:01", "10.0.1.10", "subnet-a", "10.0.1.0/24")
IPS = [f"10.0.0.{i}" for i in range(11, 15)]


def veth(cid: str, ifname: str = "eth0") -> str:
    return host_veth_name(cid, ifname)


def attached(ds: Datastore, now: float = 0.0) -> None:
    ds.reconcile([(PRIMARY, IPS, []), (SECOND, [], ["10.0.1.16/28"])], now)


def held_ips(ds: Datastore) -> list[str]:
    """Every address held by anyone (pods and recovered holders); a duplicate is a double assignment."""
    out = [p.ip for p in ds.pods()] + [h.ip for h in ds.recovered_holders()]
    return sorted(out)


def test_recovered_addresses_are_held_and_never_handed_out() -> None:
    ds = Datastore(cooldown_s=30.0)
    attached(ds)
    notes = ds.recover({"10.0.0.11": veth("old1"), "10.0.1.17": veth("old2")}, 1.0)
    assert len(notes) == 2
    c = ds.counts(1.0)
    assert (c.assigned, c.recovered) == (2, 2)
    got = [ds.assign(f"new{i}", "eth0", "ns", 2.0) for i in range(4 + 16 - 2)]
    ips = [a.ip for a in got if a is not None]
    assert "10.0.0.11" not in ips and "10.0.1.17" not in ips
    assert len(ips) == len(set(ips)) == 18
    assert ds.assign("one-too-many", "eth0", "ns", 2.0) is None
    assert ds.pods() and all(p.container_id.startswith("new") for p in ds.pods()), "holders are not pods"
    assert {h.holder for h in ds.recovered_holders()} == {veth("old1"), veth("old2")}


def test_recovered_holders_are_never_quarantined_or_released() -> None:
    ds = Datastore(cooldown_s=0.0)
    attached(ds)
    ds.recover({ip: veth(f"old{i}") for i, ip in enumerate(IPS)}, 0.0)
    ds.recover({f"10.0.1.{i}": veth(f"p{i}") for i in range(16, 32)}, 0.0)
    assert ds.releasable_ips(100.0) == [] and ds.releasable_prefixes(100.0) == []
    assert ds.releasable_enis(1000.0, 60.0) == []
    assert ds.quarantine(PRIMARY.eni_id, IPS, [], 1.0) == 0
    assert not ds.remove_eni(SECOND.eni_id)


def test_del_by_veth_name_frees_the_address_into_cooldown() -> None:
    ds = Datastore(cooldown_s=30.0)
    attached(ds)
    ds.recover({"10.0.0.11": veth("old1")}, 0.0)
    assert ds.lookup_recovered(veth("old1")) == ("10.0.0.11", PRIMARY.eni_id)
    assert ds.release_recovered(veth("old1"), 10.0) == [("10.0.0.11", PRIMARY.eni_id)]
    assert ds.release_recovered(veth("old1"), 11.0) == []  # idempotent
    assert ds.lookup_recovered(veth("old1")) is None
    c = ds.counts(11.0)
    assert (c.assigned, c.recovered, c.cooldown) == (0, 0, 1)
    for i in range(3):  # the other three first; 10.0.0.11 only after its cooldown
        a = ds.assign(f"n{i}", "eth0", "ns", 12.0)
        assert a is not None and a.ip != "10.0.0.11"
    free = [ds.assign(f"m{i}", "eth0", "ns", 12.0) for i in range(16)]
    assert all(a is None or a.ip != "10.0.0.11" for a in free)
    ds2 = Datastore(cooldown_s=30.0)
    attached(ds2)
    ds2.recover({"10.0.0.11": veth("old1")}, 0.0)
    ds2.release_recovered(veth("old1"), 10.0)
    for ip in IPS[1:]:
        ds2.recover({ip: veth("busy" + ip)}, 10.0)
    ds2.recover({f"10.0.1.{i}": veth(f"p{i}") for i in range(16, 32)}, 10.0)
    assert ds2.assign("x", "eth0", "ns", 39.0) is None
    assert ds2.assign("x", "eth0", "ns", 40.0) == ("10.0.0.11", PRIMARY.eni_id)


def test_repeated_add_of_a_recovered_pod_gets_its_own_address_back() -> None:
    ds = Datastore()
    attached(ds)
    ds.recover({"10.0.0.13": veth("old1")}, 0.0)
    assert ds.assign("other", "eth0", "ns", 1.0, veth("other")) == ("10.0.0.11", PRIMARY.eni_id)
    a = ds.assign("old1", "eth0", "/run/netns/x", 2.0, veth("old1"))
    assert a == ("10.0.0.13", PRIMARY.eni_id)
    assert ds.lookup("old1", "eth0") == a and ds.recovered_holders() == []
    assert ds.assign("old1", "eth0", "/run/netns/x", 3.0, veth("old1")) == a
    c = ds.counts(3.0)
    assert (c.assigned, c.recovered) == (2, 0)


def test_holders_for_addresses_imds_does_not_show_yet_are_kept_until_it_does() -> None:
    ds = Datastore()
    ds.recover({"10.0.0.12": veth("early")}, 0.0)
    assert ds.recovered_holders()[0].eni_id == ""
    assert ds.lookup_recovered(veth("early")) is None
    attached(ds, 5.0)  # IMDS catches up
    assert ds.lookup_recovered(veth("early")) == ("10.0.0.12", PRIMARY.eni_id)
    got = {a.ip for a in (ds.assign(f"n{i}", "eth0", "ns", 6.0) for i in range(4)) if a}
    assert "10.0.0.12" not in got


def test_hold_all_keeps_every_attached_address_until_released() -> None:
    ds = Datastore(cooldown_s=0.0)
    attached(ds)
    assert ds.hold_all(0.0) == 4 + 16
    assert ds.assign("new", "eth0", "ns", 1.0, veth("new")) is None
    assert ds.lookup_recovered(UNKNOWN_HOLDER) is not None
    assert len(ds.release_recovered(UNKNOWN_HOLDER, 2.0)) == 20
    assert ds.assign("new", "eth0", "ns", 3.0) is not None


def test_checkpoint_keeps_recovered_holders_and_an_old_reader_refuses_it(tmp_path: Path) -> None:
    store = MemoryCheckpoint()
    ds = Datastore(checkpoint=store)
    attached(ds)
    ds.assign("pod", "eth0", "ns", 0.5)
    ds.recover({"10.0.0.12": veth("old1"), "10.0.9.9": veth("unattached")}, 1.0)
    assert store.data is not None and store.data["version"] == RECOVERED_CHECKPOINT_VERSION
    again = Datastore(checkpoint=MemoryCheckpoint(store.data))
    assert again.restore()
    assert sorted(h.ip for h in again.recovered_holders()) == ["10.0.0.12", "10.0.9.9"]
    assert again.lookup("pod", "eth0") == ("10.0.0.11", PRIMARY.eni_id)
    assert held_ips(again) == held_ips(ds)
    # once the last holder is gone the checkpoint is plain version 1 again
    ds.release_recovered(veth("old1"), 2.0)
    ds.release_recovered(veth("unattached"), 2.0)
    assert store.data["version"] == CHECKPOINT_VERSION and "recovered" not in store.data
    # a broken recovered map is a clear error, with nothing half-restored
    bad = json.loads(json.dumps(again.snapshot()))
    bad["recovered"] = {"10.0.0.12": ["", 1.0]}
    broken = Datastore(checkpoint=MemoryCheckpoint(bad))
    with pytest.raises(CheckpointError):
        broken.restore()
    assert broken.enis() == [] and broken.recovered_holders() == []


def test_batch_writes_one_checkpoint_at_the_end_and_none_if_it_fails() -> None:
    store = MemoryCheckpoint()
    ds = Datastore(checkpoint=store)
    with pytest.raises(RuntimeError), ds.batch():
        attached(ds)
        raise RuntimeError("IMDS went away")
    assert store.saves == 0 and store.data is None
    with ds.batch():
        attached(ds)
        ds.recover({"10.0.0.11": veth("old")}, 0.0)
    assert store.saves == 1 and store.data is not None and "recovered" in store.data


def test_keep_aside_keeps_the_newest_few_and_leaves_the_file_in_place(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint.json"
    cp = FileCheckpoint(str(path))
    for t in range(5):
        path.write_bytes(b"bad %d" % t)
        aside = cp.keep_aside(1000.0 + t, keep=3)
        assert Path(aside).read_bytes() == b"bad %d" % t and path.exists()
    path.write_bytes(b"bad again")
    assert cp.keep_aside(1004.0, keep=3).endswith(".corrupt-1004-1")  # same second
    kept = sorted(p.name for p in tmp_path.iterdir() if ".corrupt-" in p.name)
    assert kept == ["checkpoint.json.corrupt-1003", "checkpoint.json.corrupt-1004", "checkpoint.json.corrupt-1004-1"]


# --- the CNI service -------------------------------------------------------------------------


class Pods:
    def __init__(self) -> None:
        self.wired: dict[tuple[str, str], str] = {}
        self.torn_down: list[tuple[str, str, str | None]] = []

    def setup(self, netns: str, ifname: str, container_id: str, ip: str, table: int, mtu: int) -> PodNet:
        self.wired[(container_id, ifname)] = ip
        return PodNet(host_veth_name(container_id, ifname), "02:00:00:00:00:01", "02:00:00:00:00:02", 2)

    def teardown(self, container_id: str, ifname: str, ip: str | None) -> None:
        self.torn_down.append((container_id, ifname, ip))
        self.wired.pop((container_id, ifname), None)

    def check(self, netns: str, ifname: str, container_id: str, ip: str, table: int) -> list[str]:
        return [] if self.wired.get((container_id, ifname)) == ip else [f"{ip} not wired"]

    def host_wiring(self) -> HostWiring:
        return HostWiring({ip: host_veth_name(c, i) for (c, i), ip in self.wired.items()}, [])


def req(command: str, cid: str, ifname: str = "eth0") -> dict[str, Any]:
    return {"command": command, "container_id": cid, "ifname": ifname, "netns": f"/run/netns/{cid}", "config": {}}


def test_cni_del_check_and_add_find_recovered_pods_by_veth_name() -> None:
    pods = Pods()
    ds = Datastore(cooldown_s=30.0)
    attached(ds)
    svc = CniService(ds, pods, clock=VirtualClock(1.0))
    for cid in ("a", "b", "c"):
        assert svc.handle(req("ADD", cid))["ok"]
    before = dict(pods.wired)
    # the checkpoint is lost: a new datastore, rebuilt from "IMDS" and the host
    ds2 = Datastore(cooldown_s=30.0)
    ds2.recover(pods.host_wiring().pods, 2.0)
    attached(ds2, 2.0)
    svc2 = CniService(ds2, pods, clock=VirtualClock(3.0))
    assert svc2.handle(req("CHECK", "a"))["ok"]
    assert svc2.handle(req("CHECK", "zz"))["code"] == 3
    new = svc2.handle(req("ADD", "d"))
    assert new["ok"] and new["result"]["ips"][0]["address"] not in {f"{ip}/32" for ip in before.values()}
    again = svc2.handle(req("ADD", "b"))
    assert again["result"]["ips"][0]["address"] == f"{before[('b', 'eth0')]}/32"
    assert svc2.handle(req("DEL", "c"))["ok"]
    assert pods.torn_down[-1] == ("c", "eth0", before[("c", "eth0")]), "the wiring goes with the address"
    assert ds2.lookup_recovered(host_veth_name("c", "eth0")) is None
    c = ds2.counts(3.0)
    assert (c.assigned, c.recovered, c.cooldown) == (3, 1, 1)  # d, b; a still recovered; c in cooldown
    assert svc2.handle(req("DEL", "c"))["ok"]  # idempotent


host_ops = st.lists(
    st.tuples(
        st.sampled_from(["ADD", "DEL", "CHECK", "LOSE"]),
        st.sampled_from(["p0", "p1", "p2", "p3", "p4"]),
        st.sampled_from(["eth0", "net1"]),
    ),
    max_size=40,
)


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=host_ops)
def test_no_sequence_of_adds_dels_and_lost_checkpoints_assigns_an_address_twice(
    ops: list[tuple[str, str, str]],
) -> None:
    """The host is the truth ("wired"); the checkpoint is lost at any point ("LOSE")
    and rebuilt from the host; an address is never held by two pods."""
    pods = Pods()
    clock = VirtualClock(0.0)
    ds = Datastore(cooldown_s=2.0)
    attached(ds)
    svc = CniService(ds, pods, clock=clock)
    for op, cid, ifname in ops:
        clock.advance(1.0)
        if op == "LOSE":
            ds = Datastore(cooldown_s=2.0)
            with ds.batch():
                ds.recover(pods.host_wiring().pods, clock.now())
                attached(ds, clock.now())
            svc = CniService(ds, pods, clock=clock)
        else:
            reply = svc.handle(req(op, cid, ifname))
            if op == "CHECK":
                assert reply["ok"] == ((cid, ifname) in pods.wired)
        wired = list(pods.wired.values())
        assert len(wired) == len(set(wired)), f"an address wired to two pods: {pods.wired}"
        held = held_ips(ds)
        assert len(held) == len(set(held))
        assert sorted(wired) == held, "every wired pod's address is held, and nothing else"
