"""Hostile review of the first-start adoption (launch-adopt, 0b9996c..7c461cb): the agent's side.
Each test is a finding, strict xfail while open (docs/agent.md, "A first start asks the
allocator"; docs/safety.md, row 30)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from node_agent.hostnet import HostWiring
from tests.helpers.agent_world import cni_add as _add
from tests.helpers.agent_world import give
from tests.helpers.controller import PRIMARY
from tests.helpers.first_start import IPS, Node, started_node
from tests.helpers.first_start import answer as _answer
from warmpool.messages import PoolReport


def _reports(node: Node) -> list[PoolReport]:
    return list(node.sqs.reports())


@pytest.fixture
def node(tmp_path: Path) -> Any:
    yield from started_node(tmp_path)


@pytest.mark.xfail(strict=True, reason="F4 open: the ask is decided on the first IMDS read alone")
def test_a_launch_pool_imds_shows_after_the_first_read_is_still_asked_about(node: Node) -> None:
    """F4, cost. `PoolController.start` asks only when its first resync learnt something of
    unknown origin. When that read lags the launch (IMDS shows the launch template's addresses a
    moment later: row 4, no freshness promised), the start never asks: the addresses IMDS shows at
    the next read are held as offered, of unknown origin, and the allocator unassigns them and
    grants fresh ones: the Unassign and Assign (and the pods' extra wait) the change removed."""
    ips = node.imds.enis[PRIMARY.eni_id].ips
    saved = list(ips)
    ips.clear()  # the first read: the primary without its launch addresses yet
    node.start()
    ips.extend(saved)
    for _ in range(12):  # past the next resync (60 s)
        node.step(10)
    reports = _reports(node)
    assert any(r.release for r in reports), "the launch addresses were learnt and offered"
    assert any(r.first_start for r in reports), "never asked: the launch pool is unassigned and replaced"


class _OtherPrefixPods:
    """A host whose only pod is wired through a veth of another prefix (WARMPOOL_VETH_PREFIX
    changed across the restart, review F2 of aa51bac; or another CNI's pod left running): its /32
    route is in ``routed``, its pod rule in ``stale``, nothing in ``pods``."""

    def __init__(self, inner: Any, ip: str) -> None:
        self._inner = inner
        self.ip = ip

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def host_wiring(self) -> HostWiring:
        return HostWiring({}, [self.ip], routed=frozenset({self.ip}), links=frozenset({"lxc1234", "eth0"}))


# Fixed (was a strict xfail of the review, F3): Agent._rebuild asks only with nothing routed.
def test_a_host_routing_an_address_to_a_pod_is_not_a_first_start(node: Node) -> None:
    """F3, two holders on one node (when the allocator confirms: F1's conditions). `Agent._rebuild`
    asks when ``wiring.pods`` is empty, but that map holds only /32 routes through veths named with
    this agent's prefix; ``routed`` and ``stale`` (which `unwired_pods` counts as a running pod)
    are ignored. Confirmed, the routed address is adopted free and a new pod gets it while the
    running pod still uses it."""
    busy = IPS[0]
    node.pods = _OtherPrefixPods(node.pods, busy)  # type: ignore[assignment]
    agent = node.start()
    report = node.step()
    assert report is not None
    if report.first_start:
        give(agent, _answer(report, confirmed=True))
        node.step()
        got = [_add(agent, f"p{i}") for i in range(len(IPS))]
        assert busy not in got, f"{busy} (routed to a running pod) handed to a new pod"
    assert not report.first_start, "a host with a pod's /32 route asked to adopt everything IMDS shows"
