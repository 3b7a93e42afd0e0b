"""The checkpoint's format (node_agent.checkpoint.CheckpointFile): what restore accepts and refuses."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from node_agent.checkpoint import CHECKSUM_KEY, CheckpointError, MemoryCheckpoint, checksum, parse
from node_agent.datastore import Datastore
from node_agent.records import EniInfo

PRIMARY = EniInfo("eni-00000000", 0, "0a:00:00:00:00:00", "10.0.0.10", "subnet-a", "10.0.0.0/24")


def _good() -> dict[str, Any]:
    ds = Datastore(checkpoint=MemoryCheckpoint())
    ds.add_eni(PRIMARY, 0.0)
    ds.add_addresses(PRIMARY.eni_id, ["10.0.0.11", "10.0.0.12"], ["10.0.0.32/28"])
    ds.assign("c1", "eth0", "ns", 1.0)
    ds.release("c1", "eth0", 2.0)
    ds.assign("c2", "eth0", "ns", 3.0)
    ds.set_meta("last_seq", 7)
    ds.mark_gone(4.0, 124.0, 6, released=["10.0.0.14"], deleted=["eni-0000000c"])
    ds.recover({"10.0.0.99": "eniabc"}, 5.0)
    return ds.snapshot()


def _restored(data: dict[str, Any]) -> Datastore:
    ds = Datastore(checkpoint=MemoryCheckpoint(copy.deepcopy(data)))
    assert ds.restore()
    return ds


def test_a_snapshot_restores_to_the_same_snapshot() -> None:
    good = _good()
    assert _restored(good).snapshot() == good


def _set(data: dict[str, Any], path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    """``data`` with ``value`` at ``path``, as an agent would have written it (its checksum
    made again, so that what is checked is the value; a changed byte alone is refused by
    the checksum: tests/unit/test_checkpoint_checksum.py)."""
    out = copy.deepcopy(data)
    target = out
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    if CHECKSUM_KEY in out:
        out[CHECKSUM_KEY] = checksum(out)
    return out


@pytest.mark.parametrize(
    ("path", "value"),
    [
        # Numbers or booleans where an address is expected: the old hand-written checks took
        # them (ipaddress reads an int as an address) and keyed addresses by int.
        (("enis", 0, "ips", 0), 0),
        (("enis", 0, "ips", 1), True),
        (("enis", 0, "prefixes", 0), 3),
        # An empty string or object where a list is expected: iterated as if it were one.
        (("enis", 0, "addrs"), ""),
        (("enis", 0, "addrs"), {}),
        (("enis",), {}),
        # A time too large for a float: a raw OverflowError, not a refusal.
        (("enis", 0, "added_at"), 10**400),
        (("recovered", "10.0.0.99", 1), 10**400),
        (("recent", "released", "10.0.0.14", 0), 10**400),
    ],
)
def test_malformed_values_the_old_checks_let_through_are_refused(path: tuple[Any, ...], value: Any) -> None:
    bad = _set(_good(), path, value)
    ds = Datastore(checkpoint=MemoryCheckpoint(bad))
    with pytest.raises(CheckpointError, match="corrupt checkpoint"):
        ds.restore()
    assert ds.enis() == [] and ds.pods() == [] and ds.meta == {}


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (("meta", "last_seq"), -1),
        (("meta", "last_seq"), True),
        (("meta", "last_seq"), 1.0),
        (("meta", "last_seq"), None),
        (("enis", 0, "info", "subnet_cidr"), "not-a-subnet"),
        (("enis", 0, "info", "device_index"), -1),
        (("enis", 0, "info", "mac"), 5),
        (("enis", 0, "info", "extra"), "x"),
        (("enis", 0, "added_at"), "soon"),
        (("enis", 0, "addrs", 0, "assigned_at"), None),
        (("enis", 0, "addrs", 0, "freed_at"), -1.0),
        (("enis", 0, "addrs", 0, "container_id"), 5),
        (("recovered", "10.0.0.99"), ["", 1.0]),
        (("recovered", "10.0.0.99"), ["h", None]),
        (("recent", "released", "10.0.0.14"), [float("nan"), 1]),
        (("recent", "deleted"), {"vol-1": [5.0, 1]}),
        (("parked",), [1]),
        (("meta",), []),
    ],
)
def test_malformed_values_are_refused(path: tuple[Any, ...], value: Any) -> None:
    with pytest.raises(CheckpointError, match="corrupt checkpoint"):
        parse(_set(_good(), path, value))


def test_lenient_where_the_agent_always_was() -> None:
    good = _good()
    # added_at has always been read with float(); ready with bool(); unknown keys are ignored
    ds = _restored(_set(_set(_set(good, ("enis", 0, "added_at"), "1.5"), ("enis", 0, "ready"), 0), ("x",), 1))
    (eni,) = ds.enis()
    assert eni.added_at == 1.5 and eni.ready is False
    # an address entry for an address the ENI does not have is skipped; NaN times read as before
    extra = {"ip": "10.9.9.9", "container_id": "ghost", "assigned_at": 1.0}
    ds = _restored(_set(good, ("enis", 0, "addrs"), [*good["enis"][0]["addrs"], extra]))
    assert "ghost" not in {p.container_id for p in ds.pods()}
    assert _restored(_set(good, ("recovered", "10.0.0.99", 1), float("nan"))).recovered_holders()


def test_version_refused_before_anything_else() -> None:
    with pytest.raises(CheckpointError, match="version 3"):
        parse({**_good(), "version": 3, "enis": "junk"})
