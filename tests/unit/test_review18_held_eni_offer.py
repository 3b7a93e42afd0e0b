"""Review 18, H1: the lift (``lift_unfounded_holds``) ends a restore's hold of every address, and hands
what it lets go to ``PoolController.release_unknown_holders``, which quarantines it as of unknown
origin with ``_hold_unknown``; but ``_hold_unknown`` skips a *held* ENI (one whose tags could not be
read at the last resync, one a torn IMDS read left out while pods are on it: ``_usable``,
``Datastore.reconcile``). What the lift lets go there is simply free, neither held nor quarantined.

That loses an offer in flight. The restore's hold (``hold_doubtful``, review 15's Q1) takes offered
addresses too and clears their quarantine (``Datastore.hold_all``); while every address was held
(``HELD_ALL_META``) that did not matter, and before bf0e084 that hold never ended in ``netlink``
mode. Now: an address offered in a report the allocator has (the copy is current), held by ``?`` at
the restart, let go by the lift while its ENI is held, comes back free once the ENI is not held
(on a node whose first start the allocator confirmed nothing learns it as offered again:
``_holds_learnt``), and the next pod gets it while the allocator may unassign it on that offer
(EC2 then gives it to another node: two holders). On a node that is not held at the lift the same
address is offered again as of unknown origin (safe: the contrast below).

Fixed: the lift (and ``recorded`` mode's grace) waits while an ENI holding such an address is held
(``PoolController.holders_on_held_enis``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from node_agent.controller import AttachedEni
from tests.helpers.agent_world import cni, cni_add, give
from tests.helpers.controller import PRIMARY
from tests.helpers.first_start import IPS, Node, add_until, answer
from tests.helpers.kernel_pods import KernelPods, answered_start
from warmpool.messages import AllocationResult, PoolReport, Released


@pytest.fixture
def n(tmp_path: Path) -> Iterator[Node]:
    node = Node(tmp_path)  # WARMPOOL_ADOPT_LAUNCH_POOL=true: its first start is confirmed below
    node.pods = KernelPods()
    try:
        yield node
    finally:
        node.stop()


def _offered_then_restarted(n: Node) -> tuple[Any, PoolReport, str]:
    """A confirmed node; pod1 gets an address, a surplus address Z is offered (its report is the
    allocator's: no answer yet), pod1's route and rule go (it runs on), and the agent restarts on its
    checkpoint, answered current. Returns the agent, the offer's report and Z."""
    agent = n.start()
    first = n.step()
    assert first is not None and first.first_start is True
    give(agent, answer(first, confirmed=True))
    n.step()
    assert agent.controller.stats.first_starts_confirmed == 1, "setup: the first start is confirmed"
    x = add_until(n, agent, "pod1")
    z, offer = None, None
    for _ in range(12):
        r = n.step(30)
        offers = [ip for o in r.release for ip in o.ips if not o.unknown] if r is not None else []
        if offers:
            z, offer = offers[0], r
            break
    assert z is not None and z in IPS and offer is not None, "setup: a surplus address offered (an ordinary offer)"
    assert isinstance(n.pods, KernelPods)
    n.pods.routes.pop(x)  # pod1 runs on: its veth pair, x in its namespace; no route, no rule
    n.pods.rules.discard(x)
    agent = answered_start(n, True)  # its own checkpoint, the allocator says it is current
    return agent, offer, z


def _tags(n: Node, managed: bool | None) -> None:
    eni = n.imds.enis[PRIMARY.eni_id]
    n.imds.enis[PRIMARY.eni_id] = AttachedEni(eni.info, eni.ips, eni.prefixes, managed)


def test_an_offered_address_let_go_while_its_eni_is_held_is_not_given_to_a_pod(n: Node) -> None:
    agent, offer, z = _offered_then_restarted(n)
    assert agent.ds.recovered_holder(z) == "?", "setup: the restore holds every address, Z too (review 15, Q1)"
    _tags(n, None)  # the ENI's tags cannot be read for a while: the resync keeps it, held
    n.step(30)
    n.step(30)
    assert agent.ds.eni(PRIMARY.eni_id) is not None
    assert any(e.held for e in agent.ds.enis()), "setup: the ENI is held"
    assert cni(agent, "DEL", "pod1")["ok"]  # the routeless pod goes: the hold's reason is gone
    n.step(30)
    n.step(30)  # the lift, the ENI held
    _tags(n, True)
    got = []
    for k in range(6):
        n.step(30)
        got.append(cni_add(agent, f"later{k}"))
    # The allocator acted on the offer before the restart (its Unassign done, its answer still in
    # the queue: SQS keeps no order, a receive may miss it); the answer arrives now.
    eni = n.imds.enis[PRIMARY.eni_id]
    n.imds.enis[PRIMARY.eni_id] = eni._replace(ips=[ip for ip in eni.ips if ip != z])
    to = {"cluster": offer.cluster, "node": offer.node, "instance_id": offer.instance_id}
    give(agent, AllocationResult(**to, in_reply_to=offer.seq, actions=[Released(eni_id=PRIMARY.eni_id, ips=[z])]))
    n.step(30)
    assert isinstance(n.pods, KernelPods)
    assert n.pods.holders(z) == [], (
        f"{z}: offered before the restart and unassigned by EC2 on that offer, yet a pod carries it "
        f"({n.pods.holders(z)}): the lift let it go while its ENI was held, and it came back free "
        f"(new pods got {got}); EC2 may give it to another node"
    )


def test_the_same_lift_with_the_eni_not_held_offers_it_as_of_unknown_origin(n: Node) -> None:
    """The contrast (passes): not held at the lift, Z is quarantined as of unknown origin."""
    agent, _offer, z = _offered_then_restarted(n)
    assert agent.ds.recovered_holder(z) == "?"
    assert cni(agent, "DEL", "pod1")["ok"]
    got = []
    for k in range(6):
        n.step(30)
        got.append(cni_add(agent, f"later{k}"))
    assert z not in got
    assert agent.ds.recovered_holder(z) is None, "the hold ended"
