"""Seed 1014045 (stop 50's sweep of seeds 1010000-1019999 on 543bc61; failing on 108dfc0 too):
``hold-unfounded`` at 1070.2 s, open. Shrunk: ``warmpool sim --seed 1014045 --keep 4,14,29,30``.
n1's runtime retries a failed ADD of the same sandbox with no DEL (the variant the CNI spec
forbids). The agent was killed in n1-p1's ADD after its veth pair, before any address (``add-cut``);
the start held every free address for that veth, and the retried ADD, reading the veth's empty
peer, ended the hold (``CniService._known_again``). After a restart with a changed veth prefix
(``host-wiring``, ``prefix-changed``) the start held every free address for the old prefix's
veth again; the retried ADD computes its veth under the new prefix, never reads the old pair's
peer, and is refused beside it for good (review 27's M1: a set-up never removes another prefix's
pair), so the hold never ends: every free address of n1 held for a pod that has none. Traced by a
helper, with a fix on branch ``s4045`` not merged in stop 50 (docs/reliability.md, "Stop 50")."""

from __future__ import annotations

import pytest

from simulation.runner import run_seed

pytestmark = pytest.mark.sim

SHRUNK = [4, 14, 29, 30]


@pytest.mark.xfail(strict=True, reason="open: a start's hold for an old-prefix veth of a cut ADD never ends")
def test_seed_1014045_ends_every_hold() -> None:
    r = run_seed(1014045, SHRUNK, shrink=False)
    assert not r.violations, r.violations
