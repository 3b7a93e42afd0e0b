"""scenarios/nearly-full-zone.yaml end to end (issue 24, "Scarce addresses shared fairly"): one
small subnet, idle nodes holding their warm targets, then busy nodes' pods. With fair sharing
(the allocator's default ``WARMPOOL_SCARCE_FREE``) every busy pod gets an address, from what the
idle nodes offered back above their floor; with it off (``scarce_free: 0``) some never do. The
production agent and allocator run in the bench world, so this goes through the real release
path (quarantine, offer, unassign) and never makes two holders."""

from __future__ import annotations

from pathlib import Path

from bench.lower_bound import lower_bound
from bench.runner import strategy_class
from bench.scenario import Scenario, load_scenario
from bench.workload import expand
from bench.world import BenchWorld

ROOT = Path(__file__).resolve().parents[2]
MINIMUM_IP_TARGET = 4


def _scenario(scarce_free: int | None) -> Scenario:
    scenario = load_scenario(ROOT / "scenarios" / "nearly-full-zone.yaml")
    if scarce_free is None:
        return scenario
    assert scenario.cluster is not None
    cluster = scenario.cluster.model_copy(update={"scarce_free": scarce_free})
    return scenario.model_copy(update={"cluster": cluster})


def _run(scarce_free: int | None) -> BenchWorld:
    scenario = _scenario(scarce_free)
    expanded = expand(scenario)
    lower_bound(scenario, expanded)
    world = BenchWorld(scenario, expanded, "warmpool")
    strat = strategy_class("warmpool")(world)
    strat.start()
    world.run(busy=strat.busy)
    return world


def _ready(world: BenchWorld, group: str) -> tuple[int, int]:
    book = world.book
    pods = [p for p in book.created if world.nodes[book.node_of[p]].spec.group == group]
    return sum(1 for p in pods if p in book.ready_at), len(pods)


def test_busy_pods_are_all_served_with_fair_sharing_and_not_without() -> None:
    on = _run(None)
    assert on.book.duplicates == 0
    ready, wanted = _ready(on, "busy")
    assert ready == wanted == 48, (ready, wanted)
    assert _ready(on, "idle")[0] == _ready(on, "idle")[1] == 14
    # the idle nodes gave back what they held above the floor, and kept the floor
    for node in on.nodes.values():
        if node.spec.group != "idle":
            continue
        held = sum(
            len(e.secondary)
            for e in on.emu.enis.values()
            if e.attachment and e.attachment.instance_id == node.instance_id
        )
        assert MINIMUM_IP_TARGET <= held < 10, (node.instance_id, held)

    off = _run(0)
    assert off.book.duplicates == 0
    ready_off, wanted_off = _ready(off, "busy")
    assert ready_off < wanted_off == 48, (ready_off, wanted_off)
