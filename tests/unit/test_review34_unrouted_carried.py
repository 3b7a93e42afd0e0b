"""The thirty-fourth review (hostile, of b1a9661: a DEL that finds no record reads its pod's
interface and removes the rules of the one ``unrouted`` address it carries,
``CniService._unrouted_carried``).

Findings (each asserting what should hold; N1 and N2 fixed after the review: ``teardown_pod``
removes an address's rules before the pair, ``_delete`` the carried address's before the pod's,
and ``_unrouted_carried`` reads the attachment's veths of earlier prefixes the hold reason names;
N3 open, a strict xfail):

* **N1** (the seed's double again, by a DEL that failed half-way): the DEL tears the veth down
  *before* it removes the address's rules; a rule removal that fails (a netlink error, or the
  agent killed between the two) answers the DEL failed, and the runtime's retried DEL has nothing
  to read any more (the pair went with the first try), so the rule stays, the hold ends with the
  retried DEL, and a copy from before the start, restored later, keeps the record of the DELeted
  pod for an address given away: seed 1016434's ``agent-double`` by another road.
* **N2** (the same double after a veth prefix change): the DEL reads and matches only this
  prefix's veth (``_in_reason`` of this prefix's name, ``PodNetwork.carried`` of this prefix's
  pair); a pod wired under the prefix the agent had before the restart (``WARMPOOL_VETH_PREFIX``
  changed) is read as nothing, its rule stays, and the older copy's record is kept as in the seed.
* **N3** (a running pod's rules removed, a hostile pod): a pod with ``CAP_NET_ADMIN`` in its own
  namespace puts another routeless running pod's address on its own interface; its ordinary DEL
  (no spec-breaking second ADD, unlike review 22's R2) removes that running pod's pod rules (its
  ``from <ip>`` rule: the pod's egress through its ENI's table).

Pinned as sound (passing): after a DEL removed the rule of the address it carried, another
routeless pod running, neither a rebuild (checkpoint lost) nor a restart on the copy from before
the pods lets the address go (the removed rule was not the only evidence: the running pod's
routeless veth holds every address).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from node_agent.netlink import NetlinkFailure
from node_agent.records import UNROUTED_HOLDER
from tests.helpers.agent_world import cni
from tests.helpers.first_start import Node, add_until, grant_more
from tests.helpers.kernel_pods import KernelPods, answered_start, offered_within, offers_and_adds

X, Y = "10.0.0.50", "10.0.0.51"


class RuleRemovalFails(KernelPods):
    """:class:`KernelPods` whose next ``fail`` teardowns *with an address* fail before they remove
    anything (as ``teardown_pod``'s rule removal failing with ENOBUFS, or the agent killed between
    the veth's removal and the rules'); teardowns of the veth alone work."""

    def __init__(self, made_with: str = "eni") -> None:
        super().__init__(made_with)
        self.fail = 0

    def teardown(self, container_id: str, ifname: str, ip: str | None) -> None:
        if ip and self.fail > 0:
            self.fail -= 1
            raise NetlinkFailure(105, "rule del: No buffer space available")
        super().teardown(container_id, ifname, ip)


def _unrouted_after_an_older_copy(
    tmp_path: Path, pods: list[str], host: KernelPods, **env: str
) -> tuple[Node, KernelPods, Path]:
    """As tests/unit/test_del_unrouted_carried_rules.py: ``pods`` ADDed (X, then Y) after a copy
    with none of them; a copy listing them (returned); every veth's route flushed; the agent
    started (with ``env``) on the first copy, answered not current: X held by ``unrouted``."""
    n = Node(tmp_path, adopt_launch_pool=False)
    n.pods = host
    before, after = tmp_path / "before", tmp_path / "after"
    agent = n.start()
    assert n.step() is not None
    shutil.copytree(n.state, before)
    grant_more(n, agent, [X, Y][: len(pods)])
    for cid, ip in zip(pods, [X, Y], strict=False):
        assert add_until(n, agent, cid) == ip
    n.step(30)
    shutil.copytree(n.state, after)
    host.flush_routes()
    if "WARMPOOL_VETH_PREFIX" in env:
        host.reader = host.made_with = env["WARMPOOL_VETH_PREFIX"]  # the setting changed across the restart
    agent = answered_start(n, current=False, backup=before, **env)
    assert agent.ds.recovered_holder(X) == UNROUTED_HOLDER, "setup: X held by its rule with no route"
    assert agent.ds.lookup(pods[0], "eth0") is None, "setup: the copy lacks the pod"
    return n, host, after


def test_n1_a_del_retried_after_its_rule_removal_failed_still_removes_the_rule(tmp_path: Path) -> None:
    host = RuleRemovalFails()
    n, _, after = _unrouted_after_an_older_copy(tmp_path, ["pod1"], host)
    try:
        host.fail = 1
        first = cni(n.agent, "DEL", "pod1")
        assert not first["ok"], "setup: the first DEL's rule removal failed"
        # fixed: the rules go before the pair, so the failed first try leaves the pair to be read again
        assert host.holders(X) == [("pod1", "eth0")], "the pair went with the failed first try"
        assert cni(n.agent, "DEL", "pod1")["ok"], "setup: the runtime's retried DEL"
        assert X in offered_within(n, 6), "setup: the hold ends with pod1's DEL"
        agent = answered_start(n, current=False, backup=after)  # a copy listing pod1 holding X
        kept = agent.ds.lookup("pod1", "eth0")
        left = X in host.rules
        assert kept is None, f"the copy's record of DELeted pod1 holding {kept.ip} was kept (rule left: {left})"
    finally:
        n.stop()


def test_n2_the_del_of_a_pod_of_the_prefix_before_the_restart_removes_its_rule(tmp_path: Path) -> None:
    n, host, after = _unrouted_after_an_older_copy(tmp_path, ["pod1"], KernelPods(), WARMPOOL_VETH_PREFIX="wp")
    try:
        assert cni(n.agent, "DEL", "pod1")["ok"]
        assert host.holders(X) == [], "setup: pod1's DEL removed its veth of the earlier prefix"
        assert X in offered_within(n, 6), "setup: the hold ends with pod1's DEL"
        agent = answered_start(n, current=False, backup=after, WARMPOOL_VETH_PREFIX="wp")
        kept = agent.ds.lookup("pod1", "eth0")
        left = X in host.rules
        assert kept is None, f"the copy's record of DELeted pod1 holding {kept.ip} was kept (rule left: {left})"
    finally:
        n.stop()


@pytest.mark.xfail(
    strict=True,
    reason="review 34, N3 (open): a pod with CAP_NET_ADMIN that carries another routeless running pod's address "
    "has that pod's rules removed by its own DEL",
)
def test_n3_a_del_removes_no_rule_of_an_address_another_running_pod_carries(tmp_path: Path) -> None:
    n, host, _ = _unrouted_after_an_older_copy(tmp_path, ["pod1", "pod2"], KernelPods())
    try:
        assert n.agent.ds.recovered_holder(Y) == UNROUTED_HOLDER, "setup: Y held by its rule with no route"
        host.wired[("pod1", "eth0")] = Y  # pod1 (CAP_NET_ADMIN) swaps its X for pod2's Y
        assert cni(n.agent, "DEL", "pod1")["ok"]
        assert host.holders(Y) == [("pod2", "eth0")], "setup: pod2 runs on, carrying Y"
        assert Y in host.rules, "pod1's DEL removed the pod rule of Y, which running pod2 carries"
    finally:
        n.stop()


def test_sound_a_rebuild_after_the_del_holds_the_address_while_another_routeless_pod_runs(tmp_path: Path) -> None:
    """pod1's DEL removed X's rule (its own); pod2 (routeless, Y) runs on; the checkpoint is lost.
    The rebuild holds every address for pod2's routeless veth: X is neither offered nor given
    (nothing carries it now, but the hold is what the host shows), and no address pod2 carries is."""
    n, host, _ = _unrouted_after_an_older_copy(tmp_path, ["pod1", "pod2"], KernelPods())
    try:
        assert cni(n.agent, "DEL", "pod1")["ok"]
        assert X not in host.rules and Y in host.rules
        n.lose_checkpoint()
        agent = n.start()
        offered, others = offers_and_adds(n, agent, 4)
        assert host.holders(Y) == [("pod2", "eth0")], "setup: pod2 carries Y"
        assert Y not in offered and Y not in others, f"{Y}: pod2 carries it (new pods: {others})"
    finally:
        n.stop()


def test_sound_an_older_copy_after_the_del_lets_go_of_nothing_a_running_pod_carries(tmp_path: Path) -> None:
    """pod1's DEL removed X's rule; pod2 runs on; the agent restarts on the copy from before both
    pods: pod2's routeless veth, named by no record, holds every address again."""
    n, host, _ = _unrouted_after_an_older_copy(tmp_path, ["pod1", "pod2"], KernelPods())
    try:
        assert cni(n.agent, "DEL", "pod1")["ok"]
        agent = answered_start(n, current=False, backup=n.state.parent / "before")
        offered, others = offers_and_adds(n, agent, 4)
        assert host.holders(Y) == [("pod2", "eth0")], "setup: pod2 carries Y"
        assert Y not in offered and Y not in others, f"{Y}: pod2 carries it (new pods: {others})"
    finally:
        n.stop()
