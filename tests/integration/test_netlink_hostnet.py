"""The netlink adapter and host set-up in real network namespaces: a "node"
namespace whose ENIs are veth links with the right MACs, and pod namespaces."""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import pytest

from node_agent.hostnet import (
    PodRefused,
    SetupLeft,
    host_veth_name,
    pod_addresses,
    setup_eni,
    setup_left,
    setup_pod,
    teardown_eni,
    teardown_pod,
)
from node_agent.netlink import Exists, Netlink, NetlinkNotFound, Route, Rule
from node_agent.records import EniInfo
from tests.helpers.fakenode import add_fake_eni, ip_json, netns, netns_available, sh

pytestmark = pytest.mark.netns

_why = netns_available()
if _why:
    pytest.skip(f"network namespaces unavailable: {_why}", allow_module_level=True)

ENI1 = EniInfo("eni-0000000000000001", 1, "0a:11:22:33:44:01", "10.0.1.20", "subnet-a", "10.0.1.0/24")


@pytest.fixture
def node() -> Iterator[str]:
    with netns("wpnode") as ns:
        sh("ip", "-n", ns, "link", "add", "eth0", "type", "veth", "peer", "name", "eth0p")
        sh("ip", "-n", ns, "addr", "add", "10.0.0.10/24", "dev", "eth0")
        sh("ip", "-n", ns, "link", "set", "eth0", "up")
        sh("ip", "-n", ns, "link", "set", "eth0p", "up")
        sh("ip", "-n", ns, "route", "add", "default", "via", "10.0.0.1")
        add_fake_eni(ns, "eth1", ENI1.mac)
        yield ns


@pytest.fixture
def pod() -> Iterator[str]:
    with netns("wppod") as ns:
        yield ns


def test_errors_are_classified_once(node: str) -> None:
    with Netlink.open(node) as nl:
        eth1 = nl.link_by_mac(ENI1.mac)
        assert eth1 is not None and eth1.name == "eth1"
        nl.addr_add(eth1.index, "10.9.9.9/32")
        with pytest.raises(Exists):
            nl.addr_add(eth1.index, "10.9.9.9/32")
        nl.addr_del(eth1.index, "10.9.9.9/32")
        with pytest.raises(NetlinkNotFound):
            nl.addr_del(eth1.index, "10.9.9.9/32")
        with pytest.raises(NetlinkNotFound):
            nl.rule_del(Rule(priority=777, table=77, src="10.9.9.9/32"))
    with pytest.raises(NetlinkNotFound):
        Netlink.open("/run/netns/does-not-exist-wp")


def test_eni_setup_matches_the_vpc_cni_layout_and_is_idempotent(node: str) -> None:
    with Netlink.open(node) as nl:
        assert setup_eni(nl, ENI1, 9001) > 0
        assert setup_eni(nl, ENI1, 9001) == 0  # second run changes nothing
    link = ip_json(node, "link", "show", "eth1")[0]
    assert link["mtu"] == 9001 and "UP" in link["flags"]
    addrs = [
        a["local"] + "/" + str(a["prefixlen"]) for a in ip_json(node, "-4", "addr", "show", "eth1")[0]["addr_info"]
    ]
    assert addrs == ["10.0.1.20/24"]
    table2 = ip_json(node, "-4", "route", "show", "table", "2")
    assert {(r["dst"], r.get("gateway"), r["dev"]) for r in table2} == {
        ("10.0.1.1", None, "eth1"),
        ("default", "10.0.1.1", "eth1"),
    }
    main = ip_json(node, "-4", "route", "show", "table", "main")
    assert not [r for r in main if r.get("dev") == "eth1"]  # no connected route in main
    rules = ip_json(node, "-4", "rule", "show")
    assert {"priority": 1536, "src": "10.0.1.20", "table": "2"}.items() <= next(
        r for r in rules if r.get("src") == "10.0.1.20"
    ).items()
    with Netlink.open(node) as nl:
        teardown_eni(nl, ENI1)
        assert teardown_eni(nl, ENI1) == 0
    assert ip_json(node, "-4", "route", "show", "table", "2") == []
    assert not [r for r in ip_json(node, "-4", "rule", "show") if r.get("src") == "10.0.1.20"]


def test_eni_setup_reports_a_missing_link_as_lookup_error(node: str) -> None:
    other = EniInfo("eni-0000000000000009", 3, "0a:99:99:99:99:99", "10.0.1.99", "subnet-a", "10.0.1.0/24")
    with Netlink.open(node) as nl, pytest.raises(LookupError):
        setup_eni(nl, other, 9001)


def test_eni_setup_repairs_drift(node: str) -> None:
    with Netlink.open(node) as nl:
        setup_eni(nl, ENI1, 9001)
    sh("ip", "-n", node, "route", "del", "default", "table", "2")
    sh("ip", "-n", node, "route", "add", "10.7.0.0/16", "dev", "eth1", "table", "2")
    sh("ip", "-n", node, "link", "set", "eth1", "mtu", "1500")
    with Netlink.open(node) as nl:
        assert setup_eni(nl, ENI1, 9001) == 3
        assert setup_eni(nl, ENI1, 9001) == 0
    assert {r["dst"] for r in ip_json(node, "-4", "route", "show", "table", "2")} == {"10.0.1.1", "default"}


def test_pod_setup_wires_veth_address_routes_neighbour_and_rules(node: str, pod: str) -> None:
    with Netlink.open(node) as nl:
        setup_eni(nl, ENI1, 9001)
        net = setup_pod(nl, f"/run/netns/{pod}", "eth0", "c0ffee", "10.0.1.21", ENI1.route_table, 9001)
        again = setup_pod(nl, f"/run/netns/{pod}", "eth0", "c0ffee", "10.0.1.21", ENI1.route_table, 9001)
        assert again == net
    host_name = host_veth_name("c0ffee", "eth0")
    assert net.host_veth == host_name and len(host_name) <= 15
    assert [a["local"] for a in ip_json(pod, "-4", "addr", "show", "eth0")[0]["addr_info"]] == ["10.0.1.21"]
    assert ip_json(pod, "-4", "addr", "show", "eth0")[0]["addr_info"][0]["prefixlen"] == 32
    routes = {(r["dst"], r.get("gateway")) for r in ip_json(pod, "-4", "route", "show")}
    assert routes == {("default", "169.254.1.1"), ("169.254.1.1", None)}
    neigh = ip_json(pod, "neigh", "show", "dev", "eth0")
    assert neigh == [{"dst": "169.254.1.1", "lladdr": net.host_mac, "state": ["PERMANENT"]}]
    host_routes = [r for r in ip_json(node, "-4", "route", "show") if r.get("dev") == host_name]
    assert [(r["dst"], r.get("scope")) for r in host_routes] == [("10.0.1.21", "link")]
    rules = ip_json(node, "-4", "rule", "show")
    assert any(r["priority"] == 512 and r.get("dst") == "10.0.1.21" and r["table"] == "main" for r in rules)
    assert any(r["priority"] == 1536 and r.get("src") == "10.0.1.21" and r["table"] == "2" for r in rules)
    if shutil.which("ping"):  # traffic flows: pod -> 169.254.1.1 (host veth) -> node address, and back
        assert sh("ip", "netns", "exec", pod, "ping", "-c1", "-W2", "10.0.0.10", check=False).returncode == 0
    with Netlink.open(node) as nl:
        teardown_pod(nl, "c0ffee", "eth0", "10.0.1.21")
        teardown_pod(nl, "c0ffee", "eth0", "10.0.1.21")
    assert ip_json(pod, "link", "show", "eth0") == []
    assert not [r for r in ip_json(node, "-4", "rule", "show") if "10.0.1.21" in (r.get("src"), r.get("dst"))]


def test_pod_on_primary_eni_gets_no_from_rule(node: str, pod: str) -> None:
    with Netlink.open(node) as nl:
        setup_pod(nl, pod, "eth0", "abc", "10.0.0.31", 254, 9001)
    rules = [r for r in ip_json(node, "-4", "rule", "show") if "10.0.0.31" in (r.get("src"), r.get("dst"))]
    assert [r["priority"] for r in rules] == [512]


def test_half_made_pod_is_rebuilt(node: str, pod: str) -> None:
    with Netlink.open(node) as nl:
        setup_pod(nl, pod, "eth0", "abc", "10.0.1.22", 2, 9001)
        sh("ip", "-n", pod, "link", "del", "eth0")
        setup_pod(nl, pod, "eth0", "abc", "10.0.1.22", 2, 9001)
    assert ip_json(pod, "-4", "addr", "show", "eth0")[0]["addr_info"][0]["local"] == "10.0.1.22"


def test_pod_addresses_reads_the_peer_of_the_attachment_s_own_veth(node: str, pod: str) -> None:
    """What a retried ADD reads (``CniService._known_again``): the pod side of this prefix's veth
    of the attachment, with its address, with none, and no pair at all."""
    with Netlink.open(node) as nl:
        assert pod_addresses(nl, pod, "eth0", "abc") is None  # no veth yet
        setup_pod(nl, pod, "eth0", "abc", "10.0.1.23", 2, 9001)
        sh("ip", "-n", node, "route", "flush", "dev", host_veth_name("abc", "eth0"))  # the route gone
        assert pod_addresses(nl, pod, "eth0", "abc") == ["10.0.1.23"]
        assert pod_addresses(nl, pod, "eth0", "abc", "wp") is None  # another prefix's name: no such veth
        assert pod_addresses(nl, pod, "eth0", "other") is None  # another attachment's name
        sh("ip", "-n", pod, "addr", "flush", "dev", "eth0")  # an ADD cut before the address
        assert pod_addresses(nl, pod, "eth0", "abc") == []
        sh("ip", "-n", pod, "link", "del", "eth0")  # the pair goes together
        assert pod_addresses(nl, pod, "eth0", "abc") is None


def test_routes_in_other_tables_are_left_alone(node: str) -> None:
    with Netlink.open(node) as nl:
        eth0 = nl.link_by_name("eth0")
        assert eth0 is not None
        keep = Route(dst="10.50.0.0/16", table=100, oif=eth0.index, gateway="10.0.0.1")
        nl.route_replace(keep)
        setup_eni(nl, ENI1, 9001)
        assert keep in nl.routes(100)


class _RouteFails:
    """The node's netlink handle whose ``ensure_routes`` fails (the kernel refusing the pod's
    ``/32`` route: ENOBUFS), after the pod's interface took its address."""

    def __init__(self, nl: Netlink) -> None:
        self._nl = nl

    def __getattr__(self, name: str) -> object:
        return getattr(self._nl, name)

    def ensure_routes(self, *a: object, **k: object) -> int:
        raise OSError(105, "No buffer space available")


def test_a_failed_pod_setup_says_what_it_left(node: str, pod: str) -> None:
    """``setup_left``: whether the set-up made the attachment's veth pair (a failed ADD tears down
    only such a pair, the simulation's seed 14955) and whether the pod's interface may carry the
    new address."""
    with Netlink.open(node) as nl:
        with pytest.raises(OSError) as got:
            setup_pod(_RouteFails(nl), pod, "eth0", "abc", "10.0.1.24", 2, 9001)  # type: ignore[arg-type]
        assert setup_left(got.value) == SetupLeft(made_pair=True, addressed=True)
        teardown_pod(nl, "abc", "eth0", "10.0.1.24")
        setup_pod(nl, pod, "eth0", "abc", "10.0.1.24", 2, 9001)  # the running pod's pair
        with pytest.raises(OSError) as got:  # its second ADD, with another address
            setup_pod(_RouteFails(nl), pod, "eth0", "abc", "10.0.1.25", 2, 9001)  # type: ignore[arg-type]
        assert setup_left(got.value) == SetupLeft(made_pair=False, addressed=True)
        assert pod_addresses(nl, pod, "eth0", "abc") == ["10.0.1.25"], "the pair kept, carrying the new address"
        with pytest.raises(NetlinkNotFound) as gone:  # the pod's namespace cannot be opened
            setup_pod(nl, "/run/netns/does-not-exist-wp", "eth0", "abc", "10.0.1.26", 2, 9001)
        assert setup_left(gone.value) == SetupLeft(made_pair=False, addressed=False)
    host_end = host_veth_name("half", "eth0")
    sh("ip", "-n", node, "link", "add", host_end, "type", "veth", "peer", "name", "halfpeer")  # a host end only
    with Netlink.open(node) as nl:
        with pytest.raises(OSError) as got:
            setup_pod(_RouteFails(nl), pod, "eth1", "half", "10.0.1.27", 2, 9001)  # type: ignore[arg-type]
        assert setup_left(got.value) == SetupLeft(made_pair=True, addressed=True), "a half-made pair is made again"


def test_teardown_removes_the_attachment_s_veth_under_another_prefix_too(node: str, pod: str) -> None:
    """The veth prefix changed across a restart: a DEL or GC under the new prefix still removes the
    attachment's veth of the old one (the simulation's seed 6659), and no other attachment's."""
    with Netlink.open(node) as nl:
        setup_pod(nl, pod, "eth0", "abc", "10.0.1.28", 2, 9001)
        setup_pod(nl, pod, "eth1", "other", "10.0.1.29", 2, 9001)
        teardown_pod(nl, "abc", "eth0", "10.0.1.28", "wpod")
        names = {link.name for link in nl.links()}
    assert host_veth_name("abc", "eth0") not in names, "the old prefix's veth of the attachment stays"
    assert host_veth_name("other", "eth1") in names, "another attachment's veth went"
    assert ip_json(pod, "link", "show", "eth0") == []


def test_the_start_reads_what_a_listed_pod_s_interface_carries(node: str, pod: str) -> None:
    """A checkpoint copy listing pod abc with an address its interface no longer carries (the
    attachment ADDed again since with another one, the host's routes flushed: the simulation's
    seed 1001262) disagrees with the host, read through the kernel; a pod carrying the listed
    address, or one whose namespace is gone, does not."""
    from node_agent.agent import carried_disagreements
    from node_agent.cniserver import NetlinkPods
    from node_agent.datastore import Datastore

    ds = Datastore()
    ds.add_eni(ENI1, 0.0)
    ds.add_addresses(ENI1.eni_id, ["10.0.1.30", "10.0.1.31"])
    path = f"/run/netns/{pod}"
    assert ds.assign("abc", "eth0", path, 1.0) is not None  # the copy: abc holds 10.0.1.30
    pods = NetlinkPods(host_netns=f"/run/netns/{node}")
    with Netlink.open(node) as nl:
        setup_pod(nl, pod, "eth0", "abc", "10.0.1.30", 2, 9001)
        assert carried_disagreements(ds, pods) == []
        setup_pod(nl, pod, "eth0", "abc", "10.0.1.31", 2, 9001)  # the attachment ADDed again
        sh("ip", "-n", node, "route", "flush", "dev", host_veth_name("abc", "eth0"))
    assert carried_disagreements(ds, pods) == ["abc/eth0 carries 10.0.1.31 but the checkpoint has it holding 10.0.1.30"]
    sh("ip", "-n", pod, "link", "del", "eth0")  # the pod gone: no word
    assert carried_disagreements(ds, pods) == []


def test_the_start_reads_what_a_recovered_holder_s_veth_s_peer_carries(node: str, pod: str) -> None:
    """Review 31, A2, read through the kernel: a copy's recovered holder of 10.0.1.30 named after
    pod abc's veth (no namespace named) is read by the veth's peer, found among the namespaces
    pinned in /run/netns (``NetlinkPods.peers_carried``); agreeing, then carrying another address
    once the attachment was ADDed again (its route flushed), then gone. A veth of the attachment's
    name whose peer is in the node's own namespace is found nowhere (no word)."""
    from node_agent.agent import carried_disagreements
    from node_agent.cniserver import NetlinkPods
    from node_agent.datastore import Datastore

    ds = Datastore()
    ds.add_eni(ENI1, 0.0)
    ds.add_addresses(ENI1.eni_id, ["10.0.1.30", "10.0.1.31", "10.0.1.32"])
    veth, trap = host_veth_name("abc", "eth0"), host_veth_name("trap", "eth0")
    ds.recover({"10.0.1.30": veth, "10.0.1.32": trap}, 1.0)  # the copy: held by veth name
    pods = NetlinkPods(host_netns=f"/run/netns/{node}")
    with Netlink.open(node) as nl:
        setup_pod(nl, pod, "eth0", "abc", "10.0.1.30", 2, 9001)
    sh("ip", "-n", node, "link", "add", trap, "type", "veth", "peer", "name", "eth0t")
    sh("ip", "-n", node, "addr", "add", "10.0.1.33/32", "dev", "eth0t")
    assert pods.peers_carried([veth, trap]) == {veth: ["10.0.1.30"]}
    assert carried_disagreements(ds, pods, pods.host_wiring(), "eni") == []
    with Netlink.open(node) as nl:
        setup_pod(nl, pod, "eth0", "abc", "10.0.1.31", 2, 9001)  # the attachment ADDed again
    sh("ip", "-n", node, "route", "flush", "dev", veth)
    assert carried_disagreements(ds, pods, pods.host_wiring(), "eni") == [
        f"the peer of veth {veth} carries 10.0.1.31 but the checkpoint has it holding 10.0.1.30"
    ]
    sh("ip", "-n", pod, "link", "del", "eth0")  # the pod's pair gone: no word
    assert pods.peers_carried([veth, trap]) == {}
    assert carried_disagreements(ds, pods, pods.host_wiring(), "eni") == []


def test_carried_under_reads_the_peer_of_the_attachment_s_veth_of_an_earlier_prefix(node: str, pod: str) -> None:
    """What a retried ADD reads after ``WARMPOOL_VETH_PREFIX`` changed across a restart
    (``NetlinkPods.carried_under``, ``CniService._known_empty_elsewhere``: the simulation's seed
    1014045): the agent now names veths ``wp…``, the attachments were made under ``old``. A running
    pod's interface gives its address; a cut ADD's (the pair made, the agent killed before the
    address) gives none; a veth of that name whose peer is not the pod's interface, or no veth of
    that prefix, gives no word. The node's own ``eth0`` (10.0.0.10) and the host ends carry
    nothing of the pods', so a read of the wrong side or the wrong link shows."""
    from node_agent.cniserver import NetlinkPods

    pods = NetlinkPods(host_netns=f"/run/netns/{node}", veth_prefix="wp")
    running = f"/run/netns/{pod}"
    with netns("wpcut") as cut_ns, netns("wptrap") as trap_ns:
        cut, trap = f"/run/netns/{cut_ns}", f"/run/netns/{trap_ns}"
        with Netlink.open(node) as nl:
            setup_pod(nl, running, "eth0", "abc", "10.0.1.40", 2, 9001, "old")  # a running pod
            nl.veth_add(host_veth_name("cut", "eth0", "old"), "eth0", cut, 9001)  # a cut ADD's pair, nothing more
            # pod trap's eth0 is the peer of another attachment's veth, carrying an address, while
            # a veth named as trap's under "old" is paired with a link in the node's namespace
            setup_pod(nl, trap, "eth0", "other", "10.0.1.41", 2, 9001, "old")
        trap_veth = host_veth_name("trap", "eth0", "old")
        sh("ip", "-n", node, "link", "add", trap_veth, "type", "veth", "peer", "name", "eth0t")
        assert pods.carried_under(running, "eth0", "abc", "old") == ["10.0.1.40"]
        assert pods.carried(running, "eth0", "abc") is None, "this prefix's veth of abc is not there"
        assert pods.carried_under(running, "eth0", "abc", "wp") is None
        assert pods.carried_under(running, "eth0", "abc", "eni") is None, "the default prefix's: no such veth"
        assert pods.carried_under(running, "eth0", "other", "old") is None, "another attachment's veth"
        assert pods.carried_under(cut, "eth0", "cut", "old") == [], "a cut ADD's pod carries nothing"
        assert pods.carried_under(cut, "eth0", "cut", "wp") is None
        assert pods.carried_under(trap, "eth0", "trap", "old") is None, "the pod's eth0 is not that veth's peer"
        assert pods.carried_under(trap, "eth0", "other", "old") == ["10.0.1.41"]
        sh("ip", "-n", pod, "addr", "flush", "dev", "eth0")
        assert pods.carried_under(running, "eth0", "abc", "old") == []
        sh("ip", "-n", pod, "link", "del", "eth0")  # the pair goes together
        assert pods.carried_under(running, "eth0", "abc", "old") is None
        assert pods.carried_under(f"/run/netns/{node}", "eth0", "abc", "old") is None, "the node's namespace: no word"


def _cut_under(node: str, pod: str, cid: str, prefix: str) -> str:
    """What an ADD of ``cid`` cut after its veth pair (made under ``prefix``, both ends up) and
    before the pod's address leaves on the host: the pair alone. The host end's name."""
    old = host_veth_name(cid, "eth0", prefix)
    with Netlink.open(node) as nl:
        nl.veth_add(old, "eth0", pod, 9001)
    sh("ip", "-n", node, "link", "set", old, "up")
    sh("ip", "-n", pod, "link", "set", "eth0", "up")
    return old


def test_a_cut_add_s_pair_of_an_earlier_prefix_is_made_again_under_this_one(node: str, pod: str) -> None:
    """The simulation's seeds 1018783 and 1014045: an ADD cut after its pair under ``old``, the
    agent restarted with ``wp``, the runtime retrying the ADD with no DEL. The retried ADD's set-up
    replaces that pair (before: refused at every retry, the pod's ``eth0`` another veth's peer)."""
    old = _cut_under(node, pod, "abc", "old")
    with Netlink.open(node) as nl:
        net = setup_pod(nl, pod, "eth0", "abc", "10.0.1.42", 2, 9001, "wp")
        assert pod_addresses(nl, pod, "eth0", "abc", "wp") == ["10.0.1.42"]
        names = {link.name for link in nl.links()}
    assert net.host_veth == host_veth_name("abc", "eth0", "wp") in names and old not in names
    routes = {(r["dst"], r.get("gateway")) for r in ip_json(pod, "-4", "route", "show")}
    assert routes == {("default", "169.254.1.1"), ("169.254.1.1", None)}
    assert [(r["dst"], r["dev"]) for r in ip_json(node, "-4", "route", "show") if r["dst"] == "10.0.1.42"] == [
        ("10.0.1.42", net.host_veth)
    ]


def _refused_untouched(node: str, pod: str, old: str) -> None:
    with Netlink.open(node) as nl:
        with pytest.raises(PodRefused) as got:
            setup_pod(nl, pod, "eth0", "abc", "10.0.1.43", 2, 9001, "wp")
        assert setup_left(got.value) == SetupLeft(made_pair=False, addressed=False)
        names = {link.name for link in nl.links()}
    assert old in names and host_veth_name("abc", "eth0", "wp") not in names, "the pair was touched"
    carried = [a["local"] for i in ip_json(pod, "-4", "addr", "show", "eth0") for a in i["addr_info"]]
    assert "10.0.1.43" not in carried, "the refused set-up addressed the pod"


@pytest.mark.parametrize("trace", ["address", "pod-route", "neighbour", "host-route", "enslaved"])
def test_a_pair_of_an_earlier_prefix_with_a_trace_of_a_wired_pod_is_refused_untouched(
    node: str, pod: str, trace: str
) -> None:
    """Anything of a wired pod on the pair (a running pod's, review 27 M1; seeds 6439, 14955):
    refused before anything changes, whichever one trace is left."""
    old = _cut_under(node, pod, "abc", "old")
    if trace == "address":  # the host's route flushed, the pod running on
        sh("ip", "-n", pod, "addr", "add", "10.0.1.44/32", "dev", "eth0")
    if trace == "pod-route":
        sh("ip", "-n", pod, "route", "add", "169.254.1.1", "dev", "eth0", "scope", "link")
    if trace == "neighbour":
        sh("ip", "-n", pod, "neigh", "replace", "169.254.1.1", "lladdr", "02:00:00:00:00:01", "dev", "eth0")
    if trace == "host-route":
        sh("ip", "-n", node, "route", "add", "10.0.1.44/32", "dev", old, "scope", "link")
    if trace == "enslaved":  # the pod's interface a port of a bridge (a VM's binding)
        sh("ip", "-n", pod, "link", "add", "br0", "type", "bridge")
        sh("ip", "-n", pod, "link", "set", "eth0", "master", "br0")
    _refused_untouched(node, pod, old)


def test_a_bare_pair_of_another_attachment_or_a_running_pod_of_an_earlier_prefix_is_refused(
    node: str, pod: str
) -> None:
    """The pod's ``eth0`` the peer of a bare veth named after another attachment, or of a running
    pod's pair of an earlier prefix: not this attachment's cut pair, refused untouched."""
    other = _cut_under(node, pod, "other", "old")
    _refused_untouched(node, pod, other)
    sh("ip", "-n", node, "link", "del", other)
    with Netlink.open(node) as nl:
        setup_pod(nl, pod, "eth0", "abc", "10.0.1.45", 2, 9001, "old")  # running under the earlier prefix
    _refused_untouched(node, pod, host_veth_name("abc", "eth0", "old"))
    with Netlink.open(node) as nl:
        assert pod_addresses(nl, pod, "eth0", "abc", "old") == ["10.0.1.45"], "the running pod's address"
