"""Review 14, R1: a running pod whose ``/32`` route *and* pod rule are gone, its veth left, is held
by no start path but the restore of a checkpoint that names it under this very prefix.

Both can go while the pod runs: a veth set down loses its IPv4 routes (review 7's F1), and
systemd-networkd, with ``ManageForeignRoutes`` and ``ManageForeignRoutingPolicyRules`` on (the
default), drops routes and rules it did not configure when it (re)configures a link, an ENI
attached for instance (aws/amazon-vpc-cni-k8s#1600: a pod's rules gone after an ENI was attached;
awslabs/amazon-eks-ami#1738: "routing rules/routes from vpc-cni been flushed"). The veth pair stays,
and with it the pod's address in its namespace (review 13 held a pod whose route alone went, S1,
for the same reason: the pod runs on).

* After a lost or damaged checkpoint, the rebuild holds only what ``_routed_pods`` reads (routes,
  and rules while a veth has no route): nothing names the address, IMDS lists it, and it is held
  as offered, of unknown origin; the allocator unassigns it from under the pod.
* On the node's own checkpoint, after the veth prefix changed across the restart (reviews 10, 12:
  a setting ``WARMPOOL_VETH_PREFIX`` documents), ``release_unwired`` looks for the pod's veth under
  the new prefix only, finds no route, no rule and no such veth, and releases the running pod's
  address into the pool.

``unwired_pods`` keeps a pod for its veth alone (``host_veth_name`` in ``wiring.links``), so the
restore path already counts a bare veth as a running pod; ``hold_wired`` and the rebuild do not."""

from __future__ import annotations

from pathlib import Path

from tests.helpers.first_start import Node, pod_on_fresh_address
from tests.helpers.kernel_pods import KernelPods, answered_start, offers_and_adds


def _flushed(tmp_path: Path) -> tuple[Node, KernelPods, str]:
    """pod1 on a fresh address, then its route and pod rule gone; it runs on (its veth pair, and
    the address in its namespace)."""
    n = Node(tmp_path, adopt_launch_pool=False)
    host = n.pods = KernelPods()
    x = pod_on_fresh_address(n)
    n.step(30)
    host.flush_routes()
    host.flush_rules()
    return n, host, x


def _why(x: str, offered: set[str], host: KernelPods) -> str:
    went = "offered back as of unknown origin" if x in offered else "given to another pod"
    return f"{x}: pod1 runs (its veth is on the host); it was {went} (namespaces carrying it: {host.holders(x)})"


def test_a_rebuild_holds_the_address_of_a_pod_whose_route_and_rule_went(tmp_path: Path) -> None:
    n, host, x = _flushed(tmp_path)
    try:
        n.lose_checkpoint()
        offered, others = offers_and_adds(n, n.start(), 8)
        assert x not in offered and x not in others, _why(x, offered, host)
    finally:
        n.stop()


def test_a_changed_prefix_does_not_release_a_running_pod_whose_route_and_rule_went(tmp_path: Path) -> None:
    n, host, x = _flushed(tmp_path)
    try:
        host.reader = "wp"  # an ordinary restart, its checkpoint intact and current, under another prefix
        offered, others = offers_and_adds(n, answered_start(n, True, WARMPOOL_VETH_PREFIX="wp"), 8)
        assert x not in offered and x not in others, _why(x, offered, host)
    finally:
        n.stop()


def test_on_the_same_prefix_the_restore_keeps_it(tmp_path: Path) -> None:
    """The contrast (passes): the same host, the prefix unchanged: the pod's veth keeps it."""
    n, host, x = _flushed(tmp_path)
    try:
        offered, others = offers_and_adds(n, answered_start(n, True), 8)
        assert x not in offered and x not in others, _why(x, offered, host)
    finally:
        n.stop()
