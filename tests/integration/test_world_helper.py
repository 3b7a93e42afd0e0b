"""The allocator tests' world (tests/helpers/allocate_world.py) shows what EC2 shows."""

from __future__ import annotations

from tests.helpers.allocate_world import AllocatorWorld


def test_world_reports_what_ec2_shows() -> None:
    w = AllocatorWorld()
    w.add_node("n1")
    r = w.report("n1")
    assert r.instance_id == w.nodes["n1"] and len(r.enis) == 1 and r.enis[0].device_index == 0
