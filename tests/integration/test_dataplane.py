"""Node-level host networking with real packets: two nodes in a routing VPC (source/destination
check included), an internet host beyond a gateway, pods on primary and secondary ENIs.

Each node is set up as the agent does it (``hostnet.setup_eni`` / ``setup_pod`` and
``nodenet.NodeNetworking``); the checks are ``demo.dataplane.run_checks``: ICMP and TCP echo pod
to pod across nodes, egress to the internet host (which reports the source it saw), and a
NodePort-style DNAT to a pod on a secondary ENI answered through the ENI it came in on."""

from __future__ import annotations

import shutil
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field, replace

import pytest

from demo import dataplane as dp
from demo import netns as nx
from node_agent.config import HostNetSettings
from node_agent.hostnet import setup_eni, setup_pod
from node_agent.netlink import Netlink, sysctl_set
from node_agent.nodenet import NodeNetworking, NodeSpec
from node_agent.records import EniInfo
from tests.helpers.fakenode import ip_json, netns_available, sh

pytestmark = pytest.mark.netns

_why = netns_available() or ("" if shutil.which("nft") else "nft (Debian package nftables) is not installed")
if _why:
    pytest.skip(f"data-plane tests need namespaces and nft: {_why}", allow_module_level=True)

VPC = "10.0.0.0/16"
SUBNETS = ("10.0.1.0/24", "10.0.2.0/24")


@dataclass
class Node:
    k: int
    ns: str
    eth0: EniInfo
    eth1: EniInfo
    pods: list[dp.PodEnd] = field(default_factory=list)
    net: NodeNetworking | None = None


@dataclass
class Lab:
    vpc: dp.RoutedVpc
    nodes: list[Node]
    names: list[str]

    def ends(self) -> tuple[list[dp.PodEnd], list[dp.NodeEnd]]:
        pods = [p for n in self.nodes for p in n.pods]
        return pods, [dp.NodeEnd(n.ns, n.eth0.primary_ip) for n in self.nodes]

    def setup_nodes(self, settings: HostNetSettings) -> None:
        for n in self.nodes:
            n.net = NodeNetworking(NodeSpec(n.eth0.mac, n.eth0.primary_ip, (VPC,), settings), n.ns)
            n.net.setup()


def _mac(k: int, d: int) -> str:
    return f"0a:00:00:00:{k:02x}:{d:02x}"


@pytest.fixture
def lab() -> Iterator[Lab]:
    tag = uuid.uuid4().hex[:6]
    vpc = dp.RoutedVpc(vpc_ns=f"wpt{tag}vpc", inet_ns=f"wpt{tag}inet", vpc_cidrs=[VPC])
    names = [vpc.vpc_ns, vpc.inet_ns]
    nodes: list[Node] = []
    try:
        vpc.start()
        for k in range(2):
            ns = f"wpt{tag}n{k}"
            names.append(ns)
            subnet = SUBNETS[k]
            base = subnet.rsplit(".", 1)[0]
            eth0 = EniInfo(f"eni-{k}0", 0, _mac(k, 0), f"{base}.10", "subnet", subnet)
            eth1 = EniInfo(f"eni-{k}1", 1, _mac(k, 1), f"{base}.20", "subnet", subnet)
            vpc.add_node(ns)
            for e in (eth0, eth1):
                vpc.plug(
                    ns,
                    nx.EniLink(e.eni_id, e.mac, e.device_index, e.primary_ip, e.subnet_cidr),
                    configure_primary=e.device_index == 0,
                )
            with Netlink.open(ns) as nl:
                setup_eni(nl, eth1, 9001)  # the agent's ENI set-up
            node = Node(k, ns, eth0, eth1)
            for j, (eni, table) in enumerate(((eth0, 254), (eth1, eth1.route_table))):
                pod_ns = f"wpt{tag}p{k}{j}"
                names.append(pod_ns)
                nx.add_namespace(pod_ns)
                ip = f"{base}.{31 + j}"
                with Netlink.open(ns) as nl:
                    setup_pod(nl, pod_ns, "eth0", f"c{tag}{k}{j}", ip, table, 1500)
                vpc.set_addresses(eni.mac, [p.ip for p in node.pods if p.on_secondary_eni == (j == 1)] + [ip])
                node.pods.append(dp.PodEnd(pod_ns, ip, k, on_secondary_eni=j == 1))
            nodes.append(node)
        yield Lab(vpc, nodes, names)
    finally:
        for name in names:
            nx.delete_namespace(name)


def test_pods_reach_other_nodes_and_egress_is_snatted_to_the_node(lab: Lab) -> None:
    lab.setup_nodes(HostNetSettings())
    pods, nodes = lab.ends()
    res = dp.run_checks(pods, nodes, snat=True, internet_ns=lab.vpc.inet_ns)
    assert res.failures == []
    assert (res.pod_to_pod_ok, res.pod_to_pod_checked) == (True, 4)
    assert (res.egress_ok, res.egress_checked, res.egress_source) == (True, 4, "node")
    assert (res.nodeport_ok, res.nodeport_checked) == (True, 1)


def test_external_snat_leaves_the_pod_address_and_the_vpc_routes_it_back(lab: Lab) -> None:
    lab.setup_nodes(HostNetSettings(external_snat=True))
    pods, nodes = lab.ends()
    res = dp.run_checks(pods, nodes, snat=False, internet_ns=lab.vpc.inet_ns)
    assert res.failures == []
    assert (res.egress_ok, res.egress_source) == (True, "pod")
    assert res.pod_to_pod_ok and res.nodeport_ok
    assert lab.nodes[0].net is not None
    nft = ip_nft(lab.nodes[0].ns)
    assert "snat to" not in nft and "fib daddr type local" in nft  # NodePort marking only


def test_excluded_cidrs_are_not_snatted(lab: Lab) -> None:
    lab.setup_nodes(HostNetSettings(exclude_snat_cidrs=(f"{dp.INTERNET_HOST}/32",)))
    pods, nodes = lab.ends()
    res = dp.run_checks(
        pods, nodes, snat=False, internet_ns=lab.vpc.inet_ns
    )  # the excluded host sees the pods themselves
    assert res.failures == [] and res.egress_source == "pod"


def test_without_the_nodeport_return_path_the_reply_leaves_by_the_wrong_eni_and_is_dropped(lab: Lab) -> None:
    """The negative control: the VPC's source/destination check is real, so the check can fail."""
    lab.setup_nodes(HostNetSettings(node_port_support=False))
    pods, nodes = lab.ends()
    res = dp.run_checks(pods, nodes, snat=True, internet_ns=lab.vpc.inet_ns)
    assert res.nodeport_checked == 1 and not res.nodeport_ok
    assert res.pod_to_pod_ok and res.egress_ok  # everything else still works


def test_egress_without_snat_rules_is_dropped_for_secondary_eni_pods(lab: Lab) -> None:
    """Nothing installed on the nodes (no SNAT, no forwarding): the checks fail, so they test something."""
    for n in lab.nodes:
        sysctl_set(n.ns, "net.ipv4.ip_forward", "1")
    pods, nodes = lab.ends()
    res = dp.run_checks(pods, nodes, snat=True, internet_ns=lab.vpc.inet_ns)
    assert not res.egress_ok and not res.nodeport_ok


def ip_nft(ns: str) -> str:
    return sh("nsenter", f"--net=/run/netns/{ns}", "nft", "list", "table", "ip", "warmpool", check=False).stdout


def _table_handle(ns: str) -> int | None:
    out = sh("nsenter", f"--net=/run/netns/{ns}", "nft", "-j", "list", "table", "ip", "warmpool", check=False)
    if out.returncode != 0:
        return None
    import json

    items = json.loads(out.stdout)["nftables"]
    return next(int(i["table"]["handle"]) for i in items if "table" in i)


def test_rules_are_idempotent_repaired_and_removed_on_uninstall(lab: Lab) -> None:
    node = lab.nodes[0]
    spec = NodeSpec(node.eth0.mac, node.eth0.primary_ip, (VPC,), HostNetSettings())
    net = NodeNetworking(spec, node.ns)
    assert net.setup() > 0
    handle = _table_handle(node.ns)
    assert net.setup() == 0 and _table_handle(node.ns) == handle  # a second run changes nothing
    assert NodeNetworking(spec, node.ns).setup() == 0  # nor does a restarted agent's first run
    assert net.problems() == []
    listing = ip_nft(node.ns)
    assert "snat to 10.0.1.10 fully-random" in listing and 'iifname "eni*"' in listing
    assert any(r.get("priority") == 1024 and r.get("fwmark") == "0x80" for r in ip_json(node.ns, "-4", "rule", "show"))
    # drift: a rule deleted by hand, ip_forward switched off -> reported, then repaired
    sh("nsenter", f"--net=/run/netns/{node.ns}", "nft", "flush", "chain", "ip", "warmpool", "postrouting")
    sysctl_set(node.ns, "net.ipv4.ip_forward", "0")
    problems = net.problems()
    assert any("ip_forward" in p for p in problems) and any("nftables" in p for p in problems)
    assert net.setup() == 2
    assert net.setup() == 0 and net.problems() == []
    # a setting changes: the table is replaced in one transaction
    net2 = NodeNetworking(replace(spec, settings=HostNetSettings(randomize_snat="hashrandom")), node.ns)
    assert net2.setup() == 1
    assert "snat to 10.0.1.10 random" in ip_nft(node.ns) and "fully-random" not in ip_nft(node.ns)
    # uninstall
    assert net2.teardown() == 2
    assert _table_handle(node.ns) is None
    assert not any(r.get("priority") == 1024 for r in ip_json(node.ns, "-4", "rule", "show"))
    assert net2.teardown() == 0


def test_kernel_settings_and_mtus(lab: Lab) -> None:
    node = lab.nodes[1]
    settings = HostNetSettings(eni_mtu=8000, pod_mtu=1400)
    net = NodeNetworking(NodeSpec(node.eth0.mac, node.eth0.primary_ip, (VPC,), settings), node.ns)
    net.setup()
    state = net.public()
    assert state["net.ipv4.ip_forward"] == "1" and state["net.ipv4.conf.eth0.rp_filter"] == "2"
    assert state["primary_mtu"] == 8000
    assert ip_json(node.ns, "link", "show", "eth0")[0]["mtu"] == 8000
    # A new pod namespace: set-up refuses to replace an eth0 it did not make (issue 11, defect 5).
    pod_ns = f"{node.ns}m"
    subprocess.run(["ip", "netns", "add", pod_ns], check=True)
    try:
        with Netlink.open(node.ns) as nl:
            setup_pod(nl, pod_ns, "eth0", "mtu-pod", "10.99.0.7", 254, settings.pod_mtu)
        assert ip_json(pod_ns, "link", "show", "eth0")[0]["mtu"] == 1400
    finally:
        subprocess.run(["ip", "netns", "del", pod_ns], check=False)


def test_unplug_removes_the_vpc_side_link_from_this_vpcs_namespace(lab: Lab) -> None:
    """A RoutedVpc with its own VPC namespace: unplugging an ENI deletes its veth there (the link
    was once deleted by the default VPC namespace's name, so it stayed)."""
    node = lab.nodes[0]
    peer = lab.vpc._plugged[node.ns][node.eth1.mac][0]
    assert ip_json(lab.vpc.vpc_ns, "link", "show", peer) != []
    assert lab.vpc.unplug(node.ns, node.eth1.mac)
    assert ip_json(lab.vpc.vpc_ns, "link", "show", peer) == []
    assert node.eth1.mac not in lab.vpc.macs(node.ns)
