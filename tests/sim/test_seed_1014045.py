"""Seed 1014045 (n1 a t3.medium whose runtime retries a failed ADD with no DEL): n1 ended holding
every free address (``?``) for a pod veth with no route, though no running pod could carry one
(``hold-unfounded``). n1's agent was killed in pod n1-p1's ADD after its veth pair, before its
address (``add-cut``, unwritten); a ``host-wiring`` restart then changed ``WARMPOOL_VETH_PREFIX``.
The start held every free address for n1-p1's veth (the earlier prefix's name, no route), and
n1-p1's retried ADD read its pod's interface only as the peer of this prefix's veth: never
learning that it carried nothing, it left the hold standing, and its set-up was refused (the pod's
``eth0`` is the earlier prefix's veth's peer), so no DEL came. Now the ADD reads that veth's peer
too (``CniService._known_empty_elsewhere``): nothing there, the veth leaves the hold's reason and
the hold ends (``tests/unit/test_half_made_other_prefix.py``).

Then, in the shrunk plan, n1-p1 waited for good, its set-up refused at every retry
(``hostnet.setup_pod`` made no second pair beside another prefix's: review 27, M1), on a runtime that
never DELs it (``not-settled``, hidden before behind ``hold-unfounded``). Fixed with seed 1018783's
cause: the set-up replaces a pair of another prefix that is as a cut ADD leaves it
(``hostnet.cut_pair_of_another_prefix``; ``tests/unit/test_cut_pair_other_prefix.py``), and the
pod starts."""

from __future__ import annotations

import pytest

from simulation.runner import plan_for, run_plan

pytestmark = [pytest.mark.sim, pytest.mark.usefixtures("pods_named")]  # drawn in stop 50: every runtime named its pods

SHRUNK = [4, 14, 29, 30]


@pytest.mark.parametrize("keep", [SHRUNK, None], ids=["shrunk", "whole"])
def test_seed_1014045_a_cut_add_under_an_earlier_prefix_ends_the_start_s_hold(keep: list[int] | None) -> None:
    violations, (out, _w) = run_plan(plan_for(1014045, keep))
    assert out.faults.get("host-wiring:prefix-changed") == 1 and out.faults.get("add-cut:unwritten") == 1, "setup"
    assert not [v for v in violations if v[0] == "hold-unfounded"], violations
    if keep is None:
        assert not violations, violations


def test_seed_1014045_shrunk_the_pod_cut_under_an_earlier_prefix_starts() -> None:
    violations, (_out, w) = run_plan(plan_for(1014045, SHRUNK))
    assert not violations, violations
    a = w.agents["n1"]
    assert "n1-p1" in a.rt.up and not a.rt.adding
