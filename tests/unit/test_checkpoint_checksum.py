"""A damaged checkpoint that still parses and validates is not trusted (docs/safety.md row 12).

The checkpoint carries the SHA-256 of its canonical JSON (``node_agent.checkpoint.checksum``):
a file whose content does not match is refused like a corrupt one, and the agent rebuilds
from IMDS and the host's pod wiring. A file without a checksum (written by an agent before
it) is read as before; every restored checkpoint, with a checksum or not, must then agree
with the host's pod wiring (``node_agent.agent.restore_checked``), or the agent rebuilds."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from emulated.clock import VirtualClock
from node_agent.agent import restore_checked, wiring_disagreements
from node_agent.checkpoint import CHECKSUM_KEY, CheckpointError, FileCheckpoint, checksum
from node_agent.datastore import Datastore
from node_agent.hostnet import HostWiring, host_veth_name
from node_agent.records import Assignment
from tests.helpers.agent_world import MemorySqs, WiredPods, make_agent
from tests.helpers.controller import PRIMARY, FakeImds
from tests.helpers.restore import written

IPS = ["10.0.0.11", "10.0.0.12", "10.0.0.13", "10.0.0.14"]
FIXTURES = Path(__file__).resolve().parent / "fixtures"


def wiring_of(pods: dict[tuple[str, str], str]) -> HostWiring:
    return HostWiring({ip: host_veth_name(cid, ifname) for (cid, ifname), ip in pods.items()}, [])


class HostPods:
    """The pod network's host_wiring, as given (None: it cannot tell)."""

    def __init__(self, wiring: HostWiring | None) -> None:
        self.wiring = wiring

    def host_wiring(self) -> HostWiring | None:
        return self.wiring


def test_a_written_checkpoint_carries_its_checksum_and_loads(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint.json"
    pods = written(path)
    data = json.loads(path.read_text())
    assert data[CHECKSUM_KEY] == checksum(data) and data[CHECKSUM_KEY].startswith("sha256:")
    ds = Datastore(checkpoint=FileCheckpoint(str(path)))
    assert ds.restore()
    assert {(p.container_id, p.ifname): p.ip for p in ds.pods()} == pods
    assert ds.meta["last_seq"] == 9
    assert not ds.restored_unchecksummed


def _drop_pod(data: dict[str, Any]) -> None:
    data["enis"][0]["addrs"] = [a for a in data["enis"][0]["addrs"] if a.get("container_id") != "c2"]


def _move_pod(data: dict[str, Any]) -> None:
    (entry,) = [a for a in data["enis"][0]["addrs"] if a.get("container_id") == "c2"]
    entry["ip"] = "10.0.0.14"  # another address of the pool, free


def _older_seq(data: dict[str, Any]) -> None:
    data["meta"]["last_seq"] = 8


def _cut_at_a_boundary(data: dict[str, Any]) -> None:
    data["enis"][0]["addrs"] = data["enis"][0]["addrs"][:1]


@pytest.mark.parametrize(
    "damage",
    [_drop_pod, _move_pod, _older_seq, _cut_at_a_boundary],
    ids=["a pod's entry dropped", "a pod's address moved", "an older seq", "cut at a JSON boundary"],
)
def test_damage_that_still_parses_is_refused(tmp_path: Path, damage: Callable[[dict[str, Any]], None]) -> None:
    path = tmp_path / "checkpoint.json"
    written(path)
    data = json.loads(path.read_text())
    damage(data)
    path.write_text(json.dumps(data, separators=(",", ":")))
    with pytest.raises(CheckpointError, match="checksum mismatch"):
        Datastore(checkpoint=FileCheckpoint(str(path))).restore()


def test_one_byte_flipped_in_the_body_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint.json"
    pods = written(path)
    text = path.read_text()
    ip = pods[("c2", "eth0")]
    at = text.index(f'"ip":"{ip}"') + len('"ip":"10.0.0.1')  # the address's last digit
    flipped = text[:at] + ("9" if text[at] != "9" else "8") + text[at + 1 :]
    path.write_text(flipped)
    json.loads(flipped)  # still JSON, and a valid address
    with pytest.raises(CheckpointError, match="checksum mismatch"):
        Datastore(checkpoint=FileCheckpoint(str(path))).restore()


@pytest.mark.parametrize("value", [None, 0, "", "sha256:" + "0" * 64])
def test_a_checksum_that_is_not_the_contents_is_refused(tmp_path: Path, value: Any) -> None:
    path = tmp_path / "checkpoint.json"
    written(path)
    data = json.loads(path.read_text())
    path.write_text(json.dumps({**data, CHECKSUM_KEY: value}))
    with pytest.raises(CheckpointError, match="checksum mismatch"):
        Datastore(checkpoint=FileCheckpoint(str(path))).restore()


# --- a file without a checksum (an older agent's), and the host's pod wiring ---------------


def _fixture_pods(data: dict[str, Any]) -> dict[tuple[str, str], str]:
    return {
        (a["container_id"], a["ifname"]): a["ip"] for e in data["enis"] for a in e["addrs"] if a.get("container_id")
    }


def test_an_older_agents_file_loads_when_the_host_agrees_and_is_refused_when_not(tmp_path: Path) -> None:
    """Documented in docs/agent.md: no checksum is read as before (a DaemonSet update keeps
    its state: tests/unit/test_checkpoint_upgrade.py), but it must agree with the host."""
    path = tmp_path / "checkpoint.json"
    original = json.loads((FIXTURES / "checkpoint-v1.json").read_text())
    assert CHECKSUM_KEY not in original
    path.write_text(json.dumps(original))
    pods = _fixture_pods(original)
    ds = Datastore(checkpoint=FileCheckpoint(str(path)))
    assert restore_checked(ds, HostPods(wiring_of(pods)), "eni") == (True, None)
    assert {(p.container_id, p.ifname): p.ip for p in ds.pods()} == pods
    assert ds.restored_unchecksummed
    ds.set_meta("last_seq", 42)  # the next write adds the checksum
    assert json.loads(path.read_text())[CHECKSUM_KEY] == checksum(json.loads(path.read_text()))
    path.write_text(json.dumps(original))
    # the same old file with one pod's entry lost: nothing in the file says so, the host does
    (lost,) = [k for k in pods if k[0] == "pod-a"]
    for e in original["enis"]:
        e["addrs"] = [a for a in e["addrs"] if (a.get("container_id"), a.get("ifname")) != lost]
    path.write_text(json.dumps(original))
    ds = Datastore(checkpoint=FileCheckpoint(str(path)))
    assert ds.restore()  # it parses, validates, and has no checksum to refuse it
    ds = Datastore(checkpoint=FileCheckpoint(str(path)))
    restored, damaged = restore_checked(ds, HostPods(wiring_of(pods)), "eni")
    assert not restored and damaged is not None
    assert f"{pods[lost]} is wired to {host_veth_name(*lost)} but the checkpoint has it free" in str(damaged)
    assert ds.pods() == [] and ds.enis() == [], "nothing of the refused checkpoint is kept"


def test_a_restored_checkpoint_must_hold_every_wired_address_for_its_veth(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint.json"
    pods = written(path)
    ds = Datastore(checkpoint=FileCheckpoint(str(path)))
    assert ds.restore()
    assert wiring_disagreements(ds, wiring_of(pods), "eni") == []
    assert wiring_disagreements(ds, HostWiring({}, []), "eni") == []  # pods not wired (yet): held, fine
    # the host wired c2 at an address the checkpoint gives c3, and one it has free
    c2 = host_veth_name("c2", "eth0")
    swapped = wiring_of({**pods, ("c2", "eth0"): pods[("c3", "eth0")], ("c3", "eth0"): pods[("c2", "eth0")]})
    assert len(wiring_disagreements(ds, swapped, "eni")) == 2
    assert wiring_disagreements(ds, HostWiring({"10.0.0.14": c2}, []), "eni") == [
        f"10.0.0.14 is wired to {c2} but the checkpoint has it free"
    ]
    # a recovered holder of that veth's name (a rebuild's) accounts for it
    ds.recover({"10.0.0.14": c2}, 3.0)
    assert wiring_disagreements(ds, HostWiring({"10.0.0.14": c2}, []), "eni") == []
    # the whole read: refused on the host's word, restored as before where the host cannot tell
    restored, damaged = restore_checked(Datastore(checkpoint=FileCheckpoint(str(path))), HostPods(swapped), "eni")
    assert not restored and isinstance(damaged, CheckpointError)
    assert restore_checked(Datastore(checkpoint=FileCheckpoint(str(path))), HostPods(None), "eni") == (True, None)
    assert restore_checked(Datastore(checkpoint=FileCheckpoint(str(path))), None, "eni") == (True, None)
    assert restore_checked(Datastore(checkpoint=FileCheckpoint(str(tmp_path / "no.json"))), None, "eni") == (
        False,
        None,
    )


# --- the whole agent: a refused checkpoint is rebuilt from the host ------------------------


@pytest.mark.parametrize("old_agents", [False, True], ids=["checksummed", "an older agent's (no checksum)"])
def test_an_agent_restarted_on_a_checkpoint_that_lost_a_running_pod_rebuilds_and_keeps_its_address(
    tmp_path: Path, old_agents: bool
) -> None:
    imds = FakeImds()
    imds.add(PRIMARY, IPS)
    clock = VirtualClock(1_000_000.0)
    sqs, pods, state = MemorySqs(VirtualClock(1_000_000.0)), WiredPods(), tmp_path / "state"
    agent = make_agent(state, imds, sqs, clock, pods)
    try:
        ds = agent.ds
        for ip in IPS:
            ds.reclaim(PRIMARY.eni_id, [ip])
        got = {}
        for cid in ("c1", "c2"):
            reply = agent.cni.handle(
                {
                    "command": "ADD",
                    "container_id": cid,
                    "ifname": "eth0",
                    "netns": f"/var/run/netns/{cid}",
                    "config": {"cniVersion": "1.0.0", "name": "warmpool", "type": "warmpool-cni"},
                }
            )
            assert reply["ok"], reply
            got[cid] = reply["result"]["ips"][0]["address"].removesuffix("/32")
    finally:
        agent.stop()
    path = state / "checkpoint.json"
    data = json.loads(path.read_text())
    for e in data["enis"]:  # c1's entry lost (the file still parses and validates)
        e["addrs"] = [a for a in e["addrs"] if a.get("container_id") != "c1"]
    if old_agents:
        del data[CHECKSUM_KEY]
    path.write_text(json.dumps(data))

    agent = make_agent(state, imds, sqs, clock, pods)
    try:
        assert agent.counters["checkpoint_rebuilds_damaged"] == 1
        assert agent.ds.lookup_recovered(host_veth_name("c1", "eth0")) == Assignment(got["c1"], PRIMARY.eni_id)
        assert list(state.glob("checkpoint.json.corrupt-*")), "the refused file is kept for the operator"
        held = [p.ip for p in agent.ds.pods()] + [h.ip for h in agent.ds.recovered_holders()]
        assert sorted(held) == sorted(got.values()), "every running pod's address held, once"
    finally:
        agent.stop()


def test_a_restored_pod_the_host_wires_nowhere_is_released_at_the_start(tmp_path: Path) -> None:
    """Simulation seed 3619: an earlier copy of the checkpoint restored lists a pod deleted since
    (its DEL answered by the process whose writes were lost). It passes the wiring check (no
    running pod is missing from it), and no runtime sends that DEL again (nor does containerd
    call CNI GC): kept, the pod held its address for good. Released at the start, as a DEL
    would (cooldown; the restore check then decides what the free addresses are); the pods
    the host wires keep theirs. Without ``now`` (or without wiring to read) nothing changes."""
    path = tmp_path / "checkpoint.json"
    pods = written(path)
    gone = ("c2", "eth0")
    running = {k: ip for k, ip in pods.items() if k != gone}
    ds = Datastore(checkpoint=FileCheckpoint(str(path)))
    assert restore_checked(ds, HostPods(wiring_of(running)), "eni", now=50.0) == (True, None)
    assert {(p.container_id, p.ifname): p.ip for p in ds.pods()} == running
    freed = next(a for e in ds.enis() for a in e.addrs.values() if a.ip == pods[gone])
    assert not freed.in_use and freed.freed_at == 50.0
    # written: a restart reads it released
    again = Datastore(checkpoint=FileCheckpoint(str(path)))
    assert again.restore() and {(p.container_id, p.ifname) for p in again.pods()} == set(running)
    # no ``now``, or no wiring to read: kept, as before
    path2 = tmp_path / "checkpoint2.json"
    pods2 = written(path2)
    ds = Datastore(checkpoint=FileCheckpoint(str(path2)))
    assert restore_checked(ds, HostPods(wiring_of({k: v for k, v in pods2.items() if k != gone})), "eni") == (
        True,
        None,
    )
    assert len(ds.pods()) == 3
    ds = Datastore(checkpoint=FileCheckpoint(str(path2)))
    assert restore_checked(ds, HostPods(None), "eni", now=50.0) == (True, None)
    assert len(ds.pods()) == 3
