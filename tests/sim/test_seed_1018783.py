"""Seed 1018783 (``warmpool sim --seed 1018783``, shrunk to ``--keep 6,9,21,22``; the same on
108dfc0, and with ``simulation.node.NAMES_PODS`` off): ``not-settled``, one pod of n2 waits at the
end. n2 is a t3.medium in prefix mode whose runtime retries a failed ADD of the same sandbox with
no DEL between (``Runtime.containerd`` False: the hostile variant the CNI spec forbids).

- 248.1 s: ``add-cut`` kills n2's agent in the ADD of n2-p2, after the pod's veth pair
  (``eni9a820c0fa496``, prefix ``eni``) and before its route (the pod's side carries no address,
  the checkpoint not written).
- 268.5 s: the restarted agent holds the 15 free members of n2's /28 for that routeless veth; the
  runtime's retried ADD finds the veth carrying no address and ends the hold, and the 15 are
  quarantined as of unknown origin (270.5 s). The /28 has a member in use, so nothing is offered:
  the allocator counts 15 free, plans nothing for ``pending_demand`` 1 (empty answers every 6 s),
  and the ADD waits for the release timeout (without the next event, served at 512.5 s).
- 377.2 s: ``host-wiring``'s ``prefix-changed`` (``wpod``); at 456 s the agent starts on an older
  copy of its checkpoint (not current: handled as lost), holds the 15 again for the ``eni…``
  veth, and the allocator grants a /28 (461.5 s).
- 462.5 s to the end: every retried ADD of n2-p2 takes an address and is refused by its set-up
  ("interface eth0 already exists in /var/run/netns/n2-p2 and is not this pod's veth (veth of
  eni9a820c0fa496)"): the pod's ``eth0`` is the peer of the old prefix's pair, which
  ``hostnet.setup_pod`` never removes (a running pod's second ADD must not break it: review 27,
  M1; seeds 6439, 14955). Only a DEL (``teardown_pod`` removes the attachment's veth under any
  prefix) would clear it, and this runtime never sends one. A refused ADD is no pending demand, and
  the node holds a free /28: no capacity, scarcity or allocator cause.

Fixed: the retried ADD's set-up removes a pair of the attachment under another prefix when it is
as a cut ADD leaves it (the pod's side carrying no address, no neighbour entry, no route; no host
route through the host end: ``hostnet.cut_pair_of_another_prefix``) and makes it again under the
agent's prefix; a pair with any trace of a wired pod is still refused, untouched
(``tests/unit/test_cut_pair_other_prefix.py``). Both runs failed before; a runtime that DELs a
failed ADD (containerd's way) served the pod before too, pinned below."""

from __future__ import annotations

import pytest

import simulation.node
from node_agent.hostnet import host_veth_name
from simulation.runner import plan_for, run_plan

pytestmark = [pytest.mark.sim, pytest.mark.usefixtures("pods_named")]  # drawn in stop 50: every runtime named its pods

SHRUNK = [6, 9, 21, 22]


@pytest.mark.parametrize("keep", [SHRUNK, None], ids=["shrunk", "whole"])
def test_seed_1018783_a_cut_add_retried_after_a_prefix_change_is_served(keep: list[int] | None) -> None:
    violations, (_out, w) = run_plan(plan_for(1018783, keep))
    assert not violations, violations
    assert not w.agents["n2"].rt.adding


def test_seed_1018783_the_pod_runs_on_a_pair_of_the_agent_s_prefix_the_cut_one_gone() -> None:
    """What the fix does in the shrunk plan: on the same-sandbox-retry runtime, n2-p2 (its ADD cut
    under ``eni``, the agent now ``wpod``) runs on a pair of the agent's prefix carrying the address
    the runtime believes it holds, routed to it; the cut ``eni…`` pair is gone."""
    violations, (_out, w) = run_plan(plan_for(1018783, SHRUNK))
    assert not violations, violations
    assert w.faults.get("host-wiring:prefix-changed") and w.faults.get("add-cut:pod-started")
    a = w.agents["n2"]
    assert not a.rt.containerd and "n2-p2" in a.rt.up
    veth = a.pods.veth_of[("n2-p2", "eth0")]
    assert veth == host_veth_name("n2-p2", "eth0", a.pods.prefix) != host_veth_name("n2-p2", "eth0", "eni")
    ip = a.rt.up["n2-p2"]
    assert a.pods.wired[("n2-p2", "eth0")] == ip and a.pods.routes[ip] == veth
    assert not a.pods.half_made


def test_seed_1018783_a_runtime_that_dels_a_failed_add_serves_the_pod(monkeypatch: pytest.MonkeyPatch) -> None:
    """containerd's way: each failed ADD DELeted (the cut one's pair with it) and the pod's next
    sandbox ADDed after kubelet's back-off; the same events, and the pod runs."""
    monkeypatch.setattr(simulation.node, "FORCE_CONTAINERD", True)
    violations, (_out, w) = run_plan(plan_for(1018783, SHRUNK))
    assert not violations, violations
    a = w.agents["n2"]
    assert not a.rt.adding and len(a.rt.up) == 2
    assert w.faults.get("host-wiring:prefix-changed") and w.faults.get("add-cut:pod-started")
