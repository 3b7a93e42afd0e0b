"""Seed 1016434 (stop 50's sweep of seeds 1010000-1019999 on 543bc61; failing on 40850b2 too):
``agent-double`` at 475.0 s. Shrunk: ``warmpool sim --seed 1016434 --keep 0,1,3,24,28,29``.
n1-p3 got 10.0.0.9 at 45.5 s; its veth was set down at 320.7 s (its route gone, its pod rule
left) and n1's agent restarted at 348.0 s on a copy from before n1-p3, which held
10.0.0.9 by ``unrouted`` (its pod rule with no route, beside n1-p3's routeless veth) and was
answered "not current" (handled as lost). n1-p3's DEL at 421.5 s found no record and no holder
of its veth's name: it tore the veth down and passed no address, so 10.0.0.9's pod rule stayed.
At 423.5 s the start's hold ended (every pod it stood for DELeted) and 10.0.0.9 was offered,
unassigned (437.5 s) and given to n2 (456.0 s); at 475.0 s n1's agent restarted on a copy from
between n1-p3's ADD and 348 s, listing n1-p3 holding 10.0.0.9, and the rule was a trace of the
pod by the restore's reading (``agent.unwired_pods``): the record was kept, 10.0.0.9 in two
datastores (never handed out on n1: IMDS did not list it there). Fixed: a DEL that finds no
record and no holder of its veth's name reads its pod's interface before the teardown, and when
it carries one address held by ``unrouted`` for that veth with no route, removes that address's
pod rules with the pod (``CniService._unrouted_carried``;
``tests/unit/test_del_unrouted_carried_rules.py``). At 475.0 s nothing of n1-p3 is on the host
and its record is released."""

from __future__ import annotations

import pytest

from node_agent.cniserver import CniService
from simulation.runner import run_seed

pytestmark = [pytest.mark.sim, pytest.mark.usefixtures("pods_named")]  # drawn in stop 50: every runtime named its pods

SHRUNK = [0, 1, 3, 24, 28, 29]


def test_seed_1016434_keeps_one_holder_per_address() -> None:
    r = run_seed(1016434, SHRUNK, shrink=False)
    assert not r.violations, r.violations


def test_without_the_read_of_the_pods_interface_the_older_copy_gives_two_holders(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(CniService, "_unrouted_carried", lambda self, cid, ifname, netns, holder: set())
    r = run_seed(1016434, SHRUNK, shrink=False)
    assert [v["invariant"] for v in r.violations] == ["agent-double"], r.violations
