"""A cut ADD's veth pair under an earlier prefix, retried with no DEL (the simulation's seeds
1018783 and 1014045): the agent was killed in an ADD after its pod's veth pair, before the pod's
address, then started with another ``WARMPOOL_VETH_PREFIX``; the runtime retries the ADD of the
same attachment and never DELs it. ``hostnet.setup_pod`` refused every retry: the pod's ``eth0``
is the peer of the earlier prefix's veth, not of this prefix's, and a set-up never removes another
prefix's pair (a running pod's, after the prefix changed: review 27, M1; seeds 6439, 14955). The
pod waited for good.

Now the set-up removes that pair and makes it again under this prefix when it is as a cut ADD
leaves it (``hostnet.cut_pair_of_another_prefix``): the attachment's veth (its name under another
prefix), the pod's interface its peer, neither enslaved, the pod's side with no IPv4 address, no
neighbour entry and no route in main, the host no route through the host end. Anything of a wired
pod on it keeps the refusal, untouched. The tests marked so fail without the change; the others
hold before and after (the refusal kept). The same in real namespaces:
``tests/integration/test_netlink_hostnet.py``."""

from __future__ import annotations

import pytest

from node_agent.hostnet import (
    GATEWAY,
    PodRefused,
    SetupLeft,
    host_veth_name,
    pod_addresses,
    setup_left,
    setup_pod,
)
from node_agent.netlink import MAIN_TABLE, RT_SCOPE_LINK, Route
from simulation.node import SimPods
from tests.helpers.fake_kernel import FakeKernel, FakeNetlink, install

POD = "/var/run/netns/p2"
IP = "10.0.1.42"


def _cut(kernel: FakeKernel, cid: str = "p2", prefix: str = "old") -> FakeNetlink:
    """The node's namespace after an ADD of ``cid`` cut after its pair (under ``prefix``, both ends
    set up) and before the pod's address."""
    kernel.namespace(POD)
    node, pod = kernel.open(""), kernel.open(POD)
    name = host_veth_name(cid, "eth0", prefix)
    node.veth_add(name, "eth0", POD, 9001)
    for nl, link_name in ((node, name), (pod, "eth0")):
        link = nl.link_by_name(link_name)
        assert link is not None
        nl.link_set(link.index, up=True)
    return node


def _eth0(kernel: FakeKernel) -> int:
    link = kernel.open(POD).link_by_name("eth0")
    assert link is not None
    return link.index


def test_the_retried_add_replaces_a_cut_add_s_pair_of_an_earlier_prefix(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fails without the change (PodRefused)."""
    kernel = install(monkeypatch)
    node = _cut(kernel)
    net = setup_pod(node, POD, "eth0", "p2", IP, 2, 9001, "wp")
    names = {link.name for link in node.links()}
    assert host_veth_name("p2", "eth0", "old") not in names, "the cut pair stays beside the new one"
    assert net.host_veth == host_veth_name("p2", "eth0", "wp") in names
    assert pod_addresses(node, POD, "eth0", "p2", "wp") == [IP]
    pod = kernel.open(POD)
    assert {(r.dst, r.gateway) for r in pod.routes(MAIN_TABLE)} == {(f"{GATEWAY}/32", None), ("default", GATEWAY)}
    assert [r.dst for r in node.routes(MAIN_TABLE)] == [f"{IP}/32"]


def test_a_set_up_failing_after_it_replaced_the_cut_pair_says_it_made_the_pair(monkeypatch: pytest.MonkeyPatch) -> None:
    """The failed ADD may tear down what this set-up left (the pair it made), as after any pair it
    made. Fails without the change (refused: nothing made)."""
    kernel = install(monkeypatch)
    _cut(kernel)

    class RouteFails(FakeNetlink):
        def route_replace(self, r: Route) -> None:
            raise OSError(105, "No buffer space available")

    with pytest.raises(OSError) as got:
        setup_pod(RouteFails(kernel, ""), POD, "eth0", "p2", IP, 2, 9001, "wp")
    assert setup_left(got.value) == SetupLeft(made_pair=True, addressed=True)


TRACES = ["address", "pod-route", "neighbour", "host-route", "pod-side-enslaved", "host-side-enslaved"]


@pytest.mark.parametrize("trace", TRACES)
def test_a_pair_of_an_earlier_prefix_with_any_trace_of_a_wired_pod_is_refused_untouched(
    monkeypatch: pytest.MonkeyPatch, trace: str
) -> None:
    """Any one thing a set-up past the pair's making puts there (or a device the pod's side or the
    host side is a port of) keeps the refusal: a running pod's pair stays as it was."""
    kernel = install(monkeypatch)
    node = _cut(kernel)
    pod, eth0 = kernel.open(POD), _eth0(kernel)
    old = node.link_by_name(host_veth_name("p2", "eth0", "old"))
    assert old is not None
    if trace == "address":  # the host's route flushed, the pod running on
        pod.addr_add(eth0, "10.0.1.44/32")
    if trace == "pod-route":
        pod.route_replace(Route(dst=f"{GATEWAY}/32", table=MAIN_TABLE, oif=eth0, scope=RT_SCOPE_LINK))
    if trace == "neighbour":
        pod.neigh_replace(eth0, GATEWAY, old.mac)
    if trace == "host-route":
        node.route_replace(Route(dst="10.0.1.44/32", table=MAIN_TABLE, oif=old.index, scope=RT_SCOPE_LINK))
    if trace == "pod-side-enslaved":
        kernel.set_master(POD, eth0, kernel.add_link(POD, "br0", "bridge").index)
    if trace == "host-side-enslaved":
        kernel.set_master("", old.index, kernel.add_link("", "br0", "bridge").index)
    before = (sorted(node.links(), key=lambda lk: lk.index), sorted(pod.links(), key=lambda lk: lk.index))
    with pytest.raises(PodRefused) as got:
        setup_pod(node, POD, "eth0", "p2", IP, 2, 9001, "wp")
    assert setup_left(got.value) == SetupLeft(made_pair=False, addressed=False)
    after = (sorted(node.links(), key=lambda lk: lk.index), sorted(pod.links(), key=lambda lk: lk.index))
    assert after == before, "the refused set-up changed the links"
    assert IP not in " ".join(pod.addrs(eth0)), "the refused set-up addressed the pod"


def test_a_running_pod_s_pair_of_an_earlier_prefix_is_refused_untouched(monkeypatch: pytest.MonkeyPatch) -> None:
    """Review 27 M1, seeds 6439 and 14955: a second ADD of a running pod after the prefix changed,
    its host routes flushed or not."""
    kernel = install(monkeypatch)
    node = kernel.open("")
    kernel.namespace(POD)
    setup_pod(node, POD, "eth0", "p2", "10.0.1.45", 2, 9001, "old")
    for flushed in (False, True):
        if flushed:
            node.space.routes.clear()
        with pytest.raises(PodRefused):
            setup_pod(node, POD, "eth0", "p2", IP, 2, 9001, "wp")
        assert pod_addresses(node, POD, "eth0", "p2", "old") == ["10.0.1.45"]
        assert node.link_by_name(host_veth_name("p2", "eth0", "wp")) is None


def test_a_bare_pair_named_after_another_attachment_is_refused_untouched(monkeypatch: pytest.MonkeyPatch) -> None:
    """The pod's ``eth0`` the peer of a bare veth named after another attachment (another container
    or interface) under an earlier prefix: not this attachment's, left alone."""
    kernel = install(monkeypatch)
    node = _cut(kernel, cid="other")
    with pytest.raises(PodRefused):
        setup_pod(node, POD, "eth0", "p2", IP, 2, 9001, "wp")
    assert node.link_by_name(host_veth_name("other", "eth0", "old")) is not None


class _World:
    def now(self) -> float:
        return 0.0

    def note_carried(self, node: str, key: tuple[str, str], ip: str) -> None:
        pass


def _sim_cut(addressed: bool) -> tuple[SimPods, str]:
    """The simulation's model after an ADD of p2 cut after its pair under ``eni`` (its pod's side
    carrying the address if ``addressed``), the agent now running with ``wpod``."""
    pods = SimPods(_World(), "n1")  # type: ignore[arg-type]
    old = host_veth_name("p2", "eth0", pods.prefix)
    pods.veth_of[("p2", "eth0")] = old
    pods.half_made.add(old)
    if addressed:
        pods.wired[("p2", "eth0")] = "10.0.0.40"
    pods.prefix = "wpod"
    return pods, old


def test_the_simulation_s_model_replaces_a_cut_pair_of_an_earlier_prefix_as_setup_pod_does() -> None:
    """Fails without the change (the model refused, as setup_pod did)."""
    pods, old = _sim_cut(addressed=False)
    net = pods.setup(POD, "eth0", "p2", "10.0.0.41", 254, 9001)
    assert net.host_veth == host_veth_name("p2", "eth0", "wpod") == pods.veth_of[("p2", "eth0")]
    assert pods.wired[("p2", "eth0")] == "10.0.0.41" and pods.routes["10.0.0.41"] == net.host_veth
    assert old not in pods.half_made


def test_the_simulation_s_model_refuses_a_pair_of_an_earlier_prefix_carrying_an_address() -> None:
    pods, old = _sim_cut(addressed=True)
    with pytest.raises(PodRefused):
        pods.setup(POD, "eth0", "p2", "10.0.0.41", 254, 9001)
    assert pods.veth_of[("p2", "eth0")] == old and pods.wired[("p2", "eth0")] == "10.0.0.40"
