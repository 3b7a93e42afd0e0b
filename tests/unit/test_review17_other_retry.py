"""Review 17, D1': ``HANDED_OFF_BY`` guards only the attachment whose release made the ``unrouted``
holder; another attachment's DEL sent again, whose cached result names the same address, still
frees it while the running pod carries it.

The fifteenth review's D1 setting, with one more DEL whose answer was lost: an older copy names
``old`` as X's holder; ``old`` was DELeted (its answer lost), ``q`` got X and was DELeted (its
answer lost too: libcni keeps ``q``'s cached ADD result, naming X, until a DEL succeeds as far as
the runtime saw), then ``run`` got X and its ``/32`` route went. Restored, ``old``'s record is
doubtful; ``old``'s retried DEL hands X to ``unrouted`` and ``HANDED_OFF_BY`` names ``old``. Then
``q``'s retried DEL: no record of ``q``, ``prevResult`` names X, X held by ``unrouted``,
``handed_off_by(X)`` is ``old``, not ``q``: ``CniService._unrouted_of`` returns X (no check that
``q``'s veth is on the host, as ``_readded_of`` and ``_doubted_of`` make), and ``_delete`` tears down
X's rules and releases X: the next pod gets X while ``run`` carries it."""

from __future__ import annotations

from pathlib import Path

from tests.helpers.agent_world import cni
from tests.helpers.first_start import Node, add_until
from tests.helpers.kernel_pods import KernelPods, answered_start, copy_then_deleted, offers_and_adds

X = "10.0.0.50"


def test_another_attachments_retried_del_does_not_free_the_running_pods_address(tmp_path: Path) -> None:
    n = Node(tmp_path, adopt_launch_pool=False)
    host = n.pods = KernelPods()
    backup = tmp_path / "backup"
    try:
        agent = copy_then_deleted(n, backup, X)  # the older copy: "old" holds X; old's DEL answer lost
        assert add_until(n, agent, "q") == X
        assert cni(agent, "DEL", "q", prev_ip=X)["ok"]  # carried out; the runtime never got the answer
        assert add_until(n, agent, "run") == X
        n.step(30)
        host.flush_routes()  # run's veth and pod rule stay; its /32 route went
        agent = answered_start(n, True, backup)
        assert cni(agent, "DEL", "old", prev_ip=X)["ok"]  # the runtime's retry: X to 'unrouted' (O1)
        assert agent.ds.recovered_holder(X) == "unrouted", "setup: O1's hand-off"
        assert cni(agent, "DEL", "q", prev_ip=X)["ok"]  # q's retry: its veth long gone
        offered, others = offers_and_adds(n, agent)
        assert X not in offered and X not in others, (
            f"{X}: 'run' carries it; q's retried DEL freed the unrouted holder old's release made"
            f" (namespaces carrying it: {host.holders(X)}; new pods: {others})"
        )
    finally:
        n.stop()
