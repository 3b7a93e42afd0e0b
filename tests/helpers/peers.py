"""The start's read of recovered holders' veth peers (``PodNetwork.peers_carried``), faked, and a
datastore with one agent veth to hold for (tests/unit/test_review31_carried.py and the reviews
after it)."""

from __future__ import annotations

import errno
from typing import Any

from node_agent.datastore import Datastore
from node_agent.hostnet import HostWiring, host_veth_name
from tests.helpers.controller import PRIMARY


class FixedPeers:
    """A pod network whose peer reads answer from ``peers`` (veth -> what its peer carries; a veth
    not there: its peer was found in no namespace) and fail ``fail`` times first."""

    def __init__(self, peers: dict[str, list[str]], fail: int = 0) -> None:
        self.peers = peers
        self.fail = fail
        self.asked: list[list[str]] = []

    def peers_carried(self, veths: Any) -> dict[str, list[str]]:
        self.asked.append(sorted(veths))
        if self.fail:
            self.fail -= 1
            raise OSError(errno.EINTR, "link dump interrupted (NLM_F_DUMP_INTR) 10 times running")
        return {v: has for v, has in self.peers.items() if v in veths}


def one_veth(ips: list[str]) -> tuple[Datastore, str, HostWiring]:
    """A datastore with ``ips`` free on the primary ENI, pod1's veth (prefix ``eni``) and a host
    wiring that has that veth and nothing else."""
    ds = Datastore()
    ds.add_eni(PRIMARY, 0.0)
    ds.add_addresses(PRIMARY.eni_id, ips)
    veth = host_veth_name("pod1", "eth0", "eni")
    wiring = HostWiring(pods={}, stale=[], links=frozenset({veth}), veths=frozenset({veth}))
    return ds, veth, wiring
