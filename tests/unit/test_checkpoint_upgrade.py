"""A DaemonSet rolling update: the new agent restores the old one's checkpoint, and every
running pod keeps its address.

The files under ``tests/unit/fixtures/`` were written by the agent of this change
(``node_agent/checkpoint.py`` format versions 1 and 2, made by :func:`_written_by_today`
below and saved once); they stay as they are when the format grows, so a later agent is
always tested against what an earlier one left on a node. Version 1 is the plain
format; version 2 is written only while recovered holders exist (an agent that reads
only version 1 must refuse it rather than drop those holders).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from node_agent.checkpoint import (
    CHECKPOINT_VERSION,
    CHECKSUM_KEY,
    RECOVERED_CHECKPOINT_VERSION,
    FileCheckpoint,
    checksum,
)
from node_agent.datastore import Datastore
from node_agent.records import EniInfo

FIXTURES = Path(__file__).resolve().parent / "fixtures"
PRIMARY = EniInfo("eni-0a00000000000000a", 0, "0a:00:00:00:00:0a", "10.0.0.10", "subnet-0a", "10.0.0.0/24")
SECOND = EniInfo("eni-0b00000000000000b", 1, "0a:00:00:00:00:0b", "10.0.0.20", "subnet-0a", "10.0.0.0/24")
PODS = {("pod-a", "eth0"), ("pod-b", "eth0"), ("pod-c", "eth0"), ("pod-c", "net1")}


def _written_by_today(*, recovered: bool) -> dict[str, Any]:
    """How the fixtures were made (kept to say so; the tests read the files, never this)."""
    ds = Datastore(checkpoint=None)
    ds.add_eni(PRIMARY, 100.0)
    ds.add_eni(SECOND, 110.0)
    ds.add_addresses(PRIMARY.eni_id, ["10.0.0.11", "10.0.0.12", "10.0.0.13"])
    ds.add_addresses(SECOND.eni_id, ["10.0.0.21", "10.0.0.22"], ["10.0.0.48/28"])
    for n, (cid, ifname) in enumerate(sorted(PODS)):
        assert ds.assign(cid, ifname, f"/var/run/netns/cni-{cid}", 200.0 + n, network="warmpool")
    ds.assign("gone", "eth0", "/var/run/netns/cni-gone", 210.0)
    ds.release("gone", "eth0", 220.0)  # cooling down at the update
    ds.set_meta("last_seq", 41)
    if recovered:
        ds.recover({"10.0.0.22": "eni1234567890a"}, 230.0)
    return ds.snapshot()


def _fixture(version: int) -> Path:
    return FIXTURES / f"checkpoint-v{version}.json"


def _old_agents_pods(data: dict[str, Any]) -> dict[tuple[str, str], str]:
    return {
        (a["container_id"], a["ifname"]): a["ip"] for e in data["enis"] for a in e["addrs"] if a.get("container_id")
    }


@pytest.mark.parametrize("version", [CHECKPOINT_VERSION, RECOVERED_CHECKPOINT_VERSION])
def test_the_fixture_is_of_the_version_it_is_named_for(version: int) -> None:
    data = json.loads(_fixture(version).read_text())
    assert data["version"] == version
    assert set(_old_agents_pods(data)) == PODS


@pytest.mark.parametrize("version", [CHECKPOINT_VERSION, RECOVERED_CHECKPOINT_VERSION])
def test_the_new_agent_keeps_every_running_pods_address(tmp_path: Path, version: int) -> None:
    # the old agent's state directory, as the DaemonSet's hostPath keeps it across the update
    path = tmp_path / "checkpoint.json"
    path.write_text(_fixture(version).read_text())
    old = _old_agents_pods(json.loads(path.read_text()))
    new = Datastore(checkpoint=FileCheckpoint(str(path)))
    assert new.restore()
    for (cid, ifname), ip in old.items():
        held = new.lookup(cid, ifname)
        assert held is not None and held.ip == ip, (cid, ifname)
        again = new.assign(cid, ifname, "/var/run/netns/retried", 300.0)  # the runtime retries an ADD
        assert again is not None and again.ip == ip
    assert new.meta["last_seq"] == 41  # its reports go on from the old agent's sequence
    # a pod started after the update gets an address no running pod holds, nor a cooling one
    fresh = new.assign("pod-new", "eth0", "/var/run/netns/cni-new", 300.0)
    assert fresh is not None and fresh.ip not in old.values() and fresh.ip != "10.0.0.14"
    if version == RECOVERED_CHECKPOINT_VERSION:
        assert fresh.ip != "10.0.0.22"  # a recovered holder's address is not handed out


@pytest.mark.parametrize("version", [CHECKPOINT_VERSION, RECOVERED_CHECKPOINT_VERSION])
def test_the_new_agent_writes_back_what_it_read(tmp_path: Path, version: int) -> None:
    """Nothing of the old agent's state is dropped by a restore and the next write (a
    rollback to the old image then finds the same file)."""
    path = tmp_path / "checkpoint.json"
    original = json.loads(_fixture(version).read_text())
    path.write_text(json.dumps(original))
    new = Datastore(checkpoint=FileCheckpoint(str(path)))
    assert new.restore()
    new.set_meta("last_seq", 41)  # a write, with nothing changed
    written = json.loads(path.read_text())
    # ... but the checksum this agent adds (an older agent ignores it: a rollback reads the file)
    assert written.pop(CHECKSUM_KEY) == checksum(original)
    assert written == original
