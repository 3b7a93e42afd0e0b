"""Hostile review of the multi-card merge (8ba7ae9), the Assign cap (6a8b829), custom networking's
held primary (6371d16) and the CNI GC on the monotonic clock (42ff263): where the simulation does
not look (no multi-card type drawn, no netlink, one process per agent).

Each finding still open is a strict xfail; the passing tests pin what was checked and found sound."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from emulated.clock import VirtualClock
from node_agent.cniserver import CniService
from node_agent.datastore import Datastore
from tests.helpers.agent_world import WiredPods
from tests.helpers.controller import PRIMARY

CONF = {"cniVersion": "1.0.0", "name": "warmpool", "type": "warmpool-cni"}


def _answer(svc: CniService, req: dict[str, Any]) -> dict[str, Any]:
    try:
        return svc.handle(req)
    except Exception as exc:  # what the plugin gets over the socket
        return {"ok": False, "code": 5, "msg": "agent error", "details": str(exc)}


def _add(svc: CniService, cid: str, ifname: str = "eth0") -> dict[str, Any]:
    req = {"command": "ADD", "container_id": cid, "ifname": ifname, "netns": f"/var/run/netns/{cid}"}
    return _answer(svc, {**req, "config": dict(CONF)})


def _del(svc: CniService, cid: str, ifname: str = "eth0") -> dict[str, Any]:
    req = {"command": "DEL", "container_id": cid, "ifname": ifname, "netns": f"/var/run/netns/{cid}"}
    return _answer(svc, {**req, "config": dict(CONF)})


def _gc(svc: CniService, valid: list[dict[str, str]]) -> dict[str, Any]:
    return _answer(
        svc, {"command": "GC", "config": {**CONF, "cniVersion": "1.1.0", "cni.dev/valid-attachments": valid}}
    )


# --- F1: the GC's monotonic age of an attachment outlives its DEL ----------------------------


# Fixed (was a strict xfail of the review):
def test_a_gc_leaves_alone_an_attachment_added_again_after_its_del_while_it_is_young() -> None:
    ds = Datastore(cooldown_s=0.0)
    ds.add_eni(PRIMARY, 0.0)
    ds.add_addresses(PRIMARY.eni_id, ["10.0.0.11", "10.0.0.12"])
    clock = VirtualClock(100.0)
    svc = CniService(ds, WiredPods(), clock=clock, gc_min_age_s=60.0)
    assert _add(svc, "sandbox")["ok"]
    clock.advance(5.0)
    assert _del(svc, "sandbox")["ok"]  # e.g. the runtime's DEL after a failed ADD further down the chain
    clock.advance(300.0)
    again = _add(svc, "sandbox")  # the runtime retries the same sandbox: a pod holds the address now
    assert again["ok"]
    # A GC whose attachment list the runtime took before it saw this ADD answered: the reason
    # gc_min_age_s exists. The attachment is 0 s old.
    assert _gc(svc, [])["ok"]
    assert ds.lookup("sandbox", "eth0") is not None, "a 0 s old attachment was torn down and its address freed"


def test_a_gc_leaves_alone_a_young_attachment_of_a_new_container() -> None:
    """Sound: a first ADD is aged from its own time (the 42ff263 contract)."""
    ds = Datastore(cooldown_s=0.0)
    ds.add_eni(PRIMARY, 0.0)
    ds.add_addresses(PRIMARY.eni_id, ["10.0.0.11"])
    clock = VirtualClock(100.0)
    svc = CniService(ds, WiredPods(), clock=clock, gc_min_age_s=60.0)
    clock.advance(600.0)
    assert _add(svc, "fresh")["ok"]
    assert _gc(svc, [])["ok"]
    assert ds.lookup("fresh", "eth0") is not None


# --- F4: an EFA-only interface (no IPv4 address) makes every IMDS read fail ------------------


class _TreeImds:
    """``ImdsClient`` with its HTTP ``get`` served from a dict (None: 404)."""

    def __new__(cls, leaves: dict[str, str]) -> Any:
        from node_agent.imds import ImdsClient, ImdsError

        class Served(ImdsClient):
            def get(self, path: str, *, missing_ok: bool = False, tree: str = "meta-data") -> str | None:
                v = leaves.get(path.lstrip("/"))
                if v is None:
                    if missing_ok:
                        return None
                    raise ImdsError(f"IMDS {path}: not found")
                return v

        return Served("http://127.0.0.1:1")


def _mac_leaves(mac: str, eni: str, card: int, dev: int, ipv4s: str | None, cidr: str) -> dict[str, str]:
    base = f"network/interfaces/macs/{mac}/"
    out = {
        base + "interface-id": eni,
        base + "device-number": str(dev),
        base + "network-card": str(card),
        base + "subnet-id": "subnet-a",
        base + "subnet-ipv4-cidr-block": cidr,
    }
    if ipv4s is not None:
        out[base + "local-ipv4s"] = ipv4s
    return out


# Fixed (was a strict xfail of the review): node_agent/imds.py::parse_interfaces marks it no_ipv4,
# PoolController._read leaves it out.
def test_an_efa_only_interface_on_card_1_does_not_fail_the_read_of_the_others() -> None:
    leaves = {"network/interfaces/macs/": "0a:00:00:00:00:00/\n0a:00:00:00:01:00/\n"}
    leaves |= _mac_leaves("0a:00:00:00:00:00", "eni-00000000", 0, 0, "10.0.0.10\n10.0.0.11", "10.0.0.0/24")
    leaves |= _mac_leaves("0a:00:00:00:01:00", "eni-00000100", 1, 0, None, "10.0.0.0/24")  # EFA-only
    imds = _TreeImds(leaves)
    got = imds.interfaces()
    assert [(a.info.network_card, a.info.device_index) for a in got][:1] == [(0, 0)]
    assert got[0].ips == ["10.0.0.11"]
    assert [(a.info.eni_id, a.no_ipv4, a.ips, a.prefixes) for a in got[1:]] == [("eni-00000100", True, [], [])]


def test_the_emulated_imds_serves_an_efa_only_interface_as_ec2_does_and_the_client_reads_it() -> None:
    """The emulators show EFA-only interfaces (``Ec2Emulator.run_instance(efa_only=...)``,
    ``CreateNetworkInterface`` with ``InterfaceType=efa-only``): no IP address, so IMDS answers
    404 for its ``local-ipv4s``, Describe shows no ``PrivateIpAddress``, and EC2 refuses to
    assign one. The production IMDS client, over the emulated IMDS's own answers, reads it as
    ``no_ipv4``."""
    from emulated.ec2 import Ec2Config, Ec2Emulator
    from emulated.ec2.errors import Ec2Error
    from emulated.imds import Imds
    from node_agent.imds import ImdsClient, ImdsError

    emu = Ec2Emulator(VirtualClock(1000.0), Ec2Config())
    sid = emu.add_subnet(cidr="10.0.0.0/24", subnet_id="subnet-a")
    iid = emu.run_instance("p5.48xlarge", sid, efa_only=[(c, 0) for c in range(1, 32)])
    server = Imds(emu)
    status, token = server.answer("PUT", f"/{iid}/latest/api/token", {"X-aws-ec2-metadata-token-ttl-seconds": "60"})
    assert status == 200

    class Served(ImdsClient):
        def get(self, path: str, *, missing_ok: bool = False, tree: str = "meta-data") -> str | None:
            code, body = server.answer(
                "GET", f"/{iid}/latest/{tree}/{path.lstrip('/')}", {"X-aws-ec2-metadata-token": token}
            )
            if code == 404 and missing_ok:
                return None
            if code != 200:
                raise ImdsError(f"IMDS {path}: {code}")
            return body

    got = Served("http://127.0.0.1:1").interfaces()
    assert len(got) == 32
    assert [(a.info.network_card, a.no_ipv4) for a in got[:2]] == [(0, False), (1, True)]
    assert all(a.no_ipv4 and not a.ips and not a.info.primary_ip for a in got[1:])
    efa = got[1].info
    code, _ = server.answer(
        "GET",
        f"/{iid}/latest/meta-data/network/interfaces/macs/{efa.mac}/local-ipv4s",
        {"X-aws-ec2-metadata-token": token},
    )
    assert code == 404
    ec2 = emu.client()
    (ni,) = ec2.describe_network_interfaces(NetworkInterfaceIds=[efa.eni_id])["NetworkInterfaces"]
    assert ni["InterfaceType"] == "efa-only" and "PrivateIpAddress" not in ni and ni["PrivateIpAddresses"] == []
    with pytest.raises(Ec2Error):
        emu.dispatch(
            "AssignPrivateIpAddresses", {"NetworkInterfaceId": efa.eni_id, "SecondaryPrivateIpAddressCount": 1}
        )
    made = emu.dispatch("CreateNetworkInterface", {"SubnetId": sid, "InterfaceType": "efa-only"})["NetworkInterface"]
    assert made["PrivateIpAddresses"] == [] and made["InterfaceType"] == "efa-only"
    with pytest.raises(Ec2Error):
        emu.dispatch(
            "CreateNetworkInterface",
            {"SubnetId": sid, "InterfaceType": "efa-only", "SecondaryPrivateIpAddressCount": 1},
        )


def _p5_controller(imds: Any) -> tuple[Any, Any]:
    from node_agent.controller import PoolController
    from node_agent.records import NodeIdentity
    from tests.helpers.controller import TIMING
    from warmpool.limits import known
    from warmpool.pool import PoolConfig

    ident = NodeIdentity("demo", "node-1", "i-0123456789abcdef0", "p5.48xlarge", "us-east-1a")
    ds = Datastore(cooldown_s=TIMING.cooldown_s)
    ctl = PoolController(ident, known("p5.48xlarge"), PoolConfig(warm_ip=2, multi_card=True), ds, TIMING, metadata=imds)
    return ds, ctl


def _efa_only(card: int, dev: int = 0) -> Any:
    from node_agent.controller import AttachedEni

    mac = f"0a:00:00:00:{card:02x}:{dev:02x}"
    return AttachedEni(EniInfo(f"eni-efa{card:02d}{dev:02d}", dev, mac, "", network_card=card), [], [], no_ipv4=True)


def test_an_agent_with_efa_only_interfaces_on_every_card_reads_its_enis_and_leaves_them_out() -> None:
    """F4 through the controller: a p5.48xlarge's 31 EFA-only interfaces (device 0 of cards 1-31),
    and one on card 0, are neither taken, counted, reported nor set up; the agent's own ENIs are
    read as usual."""
    from tests.helpers.controller import PRIMARY, SECOND, FakeImds, RecordingHost

    imds = FakeImds()
    imds.add(PRIMARY, ["10.0.0.11", "10.0.0.12"])
    imds.add(SECOND, ["10.0.0.21"])
    for card, dev in [(0, 2), *((c, 0) for c in range(1, 32))]:  # and one on card 0 (p5en's device 1)
        efa = _efa_only(card, dev)
        imds.enis[efa.info.eni_id] = efa
    ds, ctl = _p5_controller(imds)
    host = RecordingHost()
    ctl.host = host
    ctl.start(0.0)
    assert sorted(e.info.eni_id for e in ds.enis()) == [PRIMARY.eni_id, SECOND.eni_id]
    assert {ip for e in ds.enis() for ip in e.addrs} == {"10.0.0.11", "10.0.0.12", "10.0.0.21"}
    assert all(not eni.startswith("eni-efa") for _, eni in host.calls)
    (report,) = ctl.tick(1.0)
    assert [e.eni_id for e in report.enis] == [PRIMARY.eni_id, SECOND.eni_id]
    assert ctl.stats.imds_incomplete == 0


def test_an_eni_the_agent_holds_shown_without_local_ipv4s_fails_the_read_and_changes_nothing() -> None:
    """Fail safe: an ENI the datastore holds had addresses, so it is no EFA-only interface (an
    ENI's type never changes). IMDS showing it without them (lag, a torn read) is a read not to
    act on: left out, its free addresses would be dropped, and a later read would bring them back."""
    import pytest as _pytest

    from node_agent.controller import AttachedEni, IncompleteRead
    from tests.helpers.controller import PRIMARY, SECOND, FakeImds

    imds = FakeImds()
    imds.add(PRIMARY, ["10.0.0.11"])
    imds.add(SECOND, ["10.0.0.21", "10.0.0.22"])
    ds, ctl = _p5_controller(imds)
    ctl.start(0.0)
    got = ds.assign("pod", "eth0", "ns", 1.0)
    assert got is not None
    before = {e.info.eni_id: sorted(e.addrs) for e in ds.enis()}
    imds.enis[SECOND.eni_id] = AttachedEni(
        EniInfo(SECOND.eni_id, 1, SECOND.mac, "", "subnet-a", "10.0.0.0/24"), [], [], no_ipv4=True
    )
    with _pytest.raises(IncompleteRead):
        ctl.resync(100.0)
    assert {e.info.eni_id: sorted(e.addrs) for e in ds.enis()} == before
    assert ctl._take_back(10_000.0) == 0  # the take-back reads it as a failed read too
    # The primary without its addresses: the same.
    imds.enis[SECOND.eni_id] = AttachedEni(SECOND, ["10.0.0.21", "10.0.0.22"], [])
    imds.enis[PRIMARY.eni_id] = AttachedEni(
        EniInfo(PRIMARY.eni_id, 0, PRIMARY.mac, "", "subnet-a", "10.0.0.0/24"), [], [], no_ipv4=True
    )
    with _pytest.raises(IncompleteRead):
        ctl.resync(200.0)
    assert {e.info.eni_id: sorted(e.addrs) for e in ds.enis()} == before


def test_a_new_eni_shown_without_local_ipv4s_waits_like_one_imds_does_not_list_yet() -> None:
    """A new ENI whose ``local-ipv4s`` IMDS does not serve yet looks exactly like an EFA-only one:
    it is left out, so its ``attached`` claim waits, parked, as for an ENI IMDS does not list
    yet; none of its addresses is free until a read shows them."""
    from node_agent.controller import AttachedEni
    from tests.helpers.controller import PRIMARY, SECOND, FakeImds, attached_second, result

    imds = FakeImds()
    imds.add(PRIMARY, ["10.0.0.11"])
    ds, ctl = _p5_controller(imds)
    ctl.start(0.0)
    (r,) = ctl.tick(1.0)
    imds.enis[SECOND.eni_id] = AttachedEni(
        EniInfo(SECOND.eni_id, 1, SECOND.mac, "", "subnet-a", "10.0.0.0/24"), [], [], no_ipv4=True
    )
    ctl.apply_result(result(r.seq, attached_second(["10.0.0.21", "10.0.0.22"])), 5.0)
    assert ds.eni(SECOND.eni_id) is None
    assert ctl._unverified  # parked: "not in IMDS yet"
    ctl.resync(10.0)
    assert ds.eni(SECOND.eni_id) is None
    assert ctl.stats.imds_incomplete == 0  # an ENI the agent does not hold yet: no failed read
    imds.enis[SECOND.eni_id] = AttachedEni(SECOND, ["10.0.0.21", "10.0.0.22"], [])
    ctl.tick(20.0)  # the parked claim is checked again: IMDS shows it whole now
    assert ds.eni(SECOND.eni_id) is not None
    assert not ctl._unverified


# --- a host in memory, for the ENI and pod set-up of hostnet ---------------------------------

from node_agent import hostnet  # noqa: E402
from node_agent.netlink import MAIN_TABLE, RT_SCOPE_LINK, Link, Netlink, Route, Rule  # noqa: E402
from node_agent.records import EniInfo  # noqa: E402


@dataclass
class FakeNet(Netlink):
    """The node namespace's links, addresses, routes and rules, in memory (what
    :func:`node_agent.hostnet.setup_eni` and :func:`node_agent.hostnet.wired_pods` read and change)."""

    link_list: list[Link] = field(default_factory=list)
    addr_map: dict[int, set[str]] = field(default_factory=dict)
    route_list: list[Route] = field(default_factory=list)
    rule_list: list[Rule] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.ipr = None  # type: ignore[assignment]
        self.netns = ""

    def links(self) -> list[Link]:
        return list(self.link_list)

    def link_set(self, index: int, *, mtu: int | None = None, up: bool | None = None) -> None:
        self.link_list = [
            Link(
                lk.index,
                lk.name,
                lk.mac,
                mtu if mtu is not None else lk.mtu,
                lk.up if up is None else up,
                lk.kind,
                lk.peer,
            )
            if lk.index == index
            else lk
            for lk in self.link_list
        ]

    def addrs(self, index: int) -> list[str]:
        return sorted(self.addr_map.get(index, set()))

    def addr_add(self, index: int, cidr: str) -> None:
        self.addr_map.setdefault(index, set()).add(cidr)

    def addr_del(self, index: int, cidr: str) -> None:
        self.addr_map.get(index, set()).discard(cidr)

    def routes(self, table: int) -> list[Route]:
        return [r for r in self.route_list if r.table == table]

    def route_replace(self, r: Route) -> None:
        self.route_list = [x for x in self.route_list if (x.table, x.dst) != (r.table, r.dst)] + [r]

    def route_del(self, r: Route) -> None:
        self.route_list = [x for x in self.route_list if x != r]

    def rules(self) -> list[Rule]:
        return list(self.rule_list)

    def rule_add(self, r: Rule) -> None:
        self.rule_list.append(r)

    def rule_del(self, r: Rule) -> None:
        self.rule_list.remove(r)


def _p5_host() -> tuple[FakeNet, dict[str, EniInfo]]:
    """A p5.48xlarge's node namespace: the primary (card 0), card 0's device 1, card 1's devices
    0 and 1, each set up; a pod on card 1 device 1 and one on card 0 device 1."""
    enis = {
        "c0d1": EniInfo("eni-c0d1", 1, "0a:00:00:00:00:01", "10.0.1.4", "subnet-a", "10.0.0.0/16", network_card=0),
        "c1d0": EniInfo("eni-c1d0", 0, "0a:00:00:00:01:00", "10.0.2.4", "subnet-a", "10.0.0.0/16", network_card=1),
        "c1d1": EniInfo("eni-c1d1", 1, "0a:00:00:00:01:01", "10.0.3.4", "subnet-a", "10.0.0.0/16", network_card=1),
    }
    net = FakeNet(
        link_list=[
            Link(1, "ens5", "0a:00:00:00:00:00", 9001, True),
            Link(2, "ens6", enis["c0d1"].mac, 9001, True),
            Link(3, "ens7", enis["c1d0"].mac, 9001, True),
            Link(4, "ens8", enis["c1d1"].mac, 9001, True),
            Link(10, "eni-pod-on-c1d1", "ee:00:00:00:00:10", 9001, True, "veth"),
            Link(11, "eni-pod-on-c0d1", "ee:00:00:00:00:11", 9001, True, "veth"),
        ],
        route_list=[
            Route(dst="default", table=MAIN_TABLE, oif=1, gateway="10.0.0.1"),
            Route(dst="10.0.3.20/32", table=MAIN_TABLE, oif=10, scope=RT_SCOPE_LINK),
            Route(dst="10.0.1.20/32", table=MAIN_TABLE, oif=11, scope=RT_SCOPE_LINK),
        ],
    )
    return net, enis


def _pod_rules_on(net: FakeNet, ip: str, table: int) -> None:
    for r in hostnet.pod_rules(ip, table):
        net.ensure_rule(r)


def _egress_link(net: FakeNet, ip: str) -> int | None:
    """The link a pod's packets leave by: its ``from <ip>`` rule's table's default route."""
    table = next(
        (r.table for r in net.rules() if r.src == f"{ip}/32" and r.priority == hostnet.FROM_POD_PRIORITY), MAIN_TABLE
    )
    return next((r.oif for r in net.routes(table) if r.dst == "default"), None)


# --- F3: the route-table renumbering strands pods the previous agent wired ------------------


class _Host:
    """The controller's host port over :class:`FakeNet` (as ``hostnet.EniNetworking`` over netlink)."""

    def __init__(self, net: FakeNet) -> None:
        self.net = net

    def setup_eni(self, eni: EniInfo, mtu: int, pods: Any = ()) -> None:
        hostnet.setup_eni(self.net, eni, mtu, pods)

    def teardown_eni(self, eni: EniInfo) -> None:
        hostnet.teardown_eni(self.net, eni)


# Fixed (was a strict xfail of the review): PoolController.start sets every ENI up with its pods'
# addresses, and hostnet.setup_eni moves their ``from`` rules to its table (hostnet.move_pod_rules).
def test_an_agent_upgrade_keeps_the_pods_of_a_card_1_eni_routed_through_their_own_eni() -> None:
    from node_agent.controller import PoolController
    from node_agent.records import NodeIdentity
    from tests.helpers.controller import TIMING, FakeImds
    from warmpool.limits import known
    from warmpool.pool import PoolConfig

    net, enis = _p5_host()
    # As the previous agent left it: card 1 device 1 in table 2 (d + 1), its pod's rule too;
    # card 0 device 1 set up last, so table 2 routes by ens6 (the collision the change fixed).
    hostnet.setup_eni(net, OldEniInfo(**enis["c1d1"].__dict__), 9001)
    _pod_rules_on(net, "10.0.3.20", 2)
    hostnet.setup_eni(net, enis["c0d1"], 9001)
    _pod_rules_on(net, "10.0.1.20", 2)
    assert _egress_link(net, "10.0.3.20") == 2  # the stranded pod, before the upgraded agent starts
    # The upgraded agent starts on its checkpoint: every ENI set up again, with the new numbering.
    primary = EniInfo("eni-primary", 0, "0a:00:00:00:00:00", "10.0.0.10", "subnet-a", "10.0.0.0/16")
    imds = FakeImds()
    imds.enis = {}
    imds.add(primary)
    ds = Datastore(cooldown_s=TIMING.cooldown_s)
    ds.add_eni(primary, 0.0)
    for key, ip, pod in (("c0d1", "10.0.1.20", "pod-c0d1"), ("c1d1", "10.0.3.20", "pod-c1d1")):
        imds.add(enis[key], [ip])
        ds.add_eni(enis[key], 0.0)
        ds.add_addresses(enis[key].eni_id, [ip])
        assert ds.assign(pod, "eth0", "ns", 1.0) == (ip, enis[key].eni_id)
    ident = NodeIdentity("demo", "node-1", "i-0123456789abcdef0", "p5.48xlarge", "us-east-1a")
    pool = PoolConfig(warm_ip=0, multi_card=True)
    ctl = PoolController(ident, known("p5.48xlarge"), pool, ds, TIMING, host=_Host(net), metadata=imds)
    ctl.start(2.0)
    assert _egress_link(net, "10.0.1.20") == 2  # card 0's pod: fine
    assert _egress_link(net, "10.0.3.20") == 4, "the card-1 pod leaves by card 0 device 1's link"
    assert {(r.src, r.table) for r in net.rules() if r.priority == hostnet.FROM_POD_PRIORITY} >= {
        ("10.0.1.20/32", 2),
        ("10.0.3.20/32", enis["c1d1"].route_table),
    }
    assert not any(r.src == "10.0.3.20/32" and r.table == 2 for r in net.rules())
    # Started again: nothing more to move.
    assert hostnet.setup_eni(net, enis["c1d1"], 9001, ["10.0.3.20"]) == 0


def test_moving_pod_rules_touches_only_the_named_pods_from_rules() -> None:
    """Only a ``from <ip>`` rule at the pods' priority of an address the datastore says is on the
    ENI moves; another pod's, the ``to <ip>`` rules and the ENI's own rule stay as they are."""
    net, enis = _p5_host()
    _pod_rules_on(net, "10.0.3.20", 2)
    _pod_rules_on(net, "10.0.1.20", 2)
    before = set(net.rules())
    assert hostnet.move_pod_rules(net, enis["c1d1"], ["10.0.3.20"]) == 2
    moved = set(net.rules())
    assert before - moved == {Rule(priority=hostnet.FROM_POD_PRIORITY, table=2, src="10.0.3.20/32")}
    assert moved - before == {
        Rule(priority=hostnet.FROM_POD_PRIORITY, table=enis["c1d1"].route_table, src="10.0.3.20/32")
    }
    assert hostnet.move_pod_rules(net, enis["c1d1"], ["10.0.3.20"]) == 0
    # A pod with no ``from`` rule is not wired here (its ADD or CHECK does that).
    assert hostnet.move_pod_rules(net, enis["c1d1"], ["10.0.3.99"]) == 0


# --- F2: an allocator with WARMPOOL_MULTI_CARD on, an agent that predates it -----------------


class OldEniInfo(EniInfo):
    """``EniInfo`` as an agent from before 4d7be29 numbers its tables (42ff263:node_agent/records.py,
    ``route_table``: "254 if self.device_index == 0 else self.device_index + 1"): the card ignored.
    (A unit test may not start a process, so the old line is quoted here rather than read from git.)"""

    @property
    def route_table(self) -> int:
        return 254 if self.device_index == 0 else self.device_index + 1


def test_an_agent_from_before_the_change_wipes_the_main_table_for_device_0_of_card_1() -> None:
    """What happens when the new allocator, WARMPOOL_MULTI_CARD on, attaches an ENI at device 0 of
    card 1 (new_eni_slot's first slot above card 0) to a node whose agent is still the previous
    release (a DaemonSet rolling, or rolled back): that agent's route_table is main (254) for any
    device 0, so its setup_eni makes main hold exactly that ENI's two routes: every pod's /32, the
    node's default route, gone. A checkpoint lost after that rebuilds from wired_pods, which then
    sees no pod at all, and hands every running pod's address out again."""
    info = OldEniInfo("eni-c1d0", 0, "0a:00:00:00:01:00", "10.0.2.4", "subnet-a", "10.0.0.0/16", network_card=1)
    assert info.route_table == MAIN_TABLE
    net, _ = _p5_host()
    assert set(hostnet.wired_pods(net, "eni").pods) == {"10.0.3.20", "10.0.1.20"}
    hostnet.setup_eni(net, info, 9001)  # the old agent's _setup (host.setup_eni) of that ENI
    assert hostnet.wired_pods(net, "eni").pods == {}
    assert not any(r.dst == "default" and r.oif == 1 for r in net.routes(MAIN_TABLE))
    # and its card 1 device 1 shares table 2 with card 0 device 1
    c1d1 = OldEniInfo("eni-c1d1", 1, "0a:00:00:00:01:01", "10.0.3.4", "subnet-a", "10.0.0.0/16", network_card=1)
    assert c1d1.route_table == 2


# Fixed (was a strict xfail of the review):
def test_a_card_above_0_goes_only_to_an_agent_that_says_it_wires_it() -> None:
    from warmpool.calls import CreateEni
    from warmpool.limits import known
    from warmpool.messages import EniReport, PoolReport, Targets
    from warmpool.planner import Eni, Inventory, node_max_pods, plan_node
    from warmpool.subnets import Subnet

    iid, az = "i-0123456789abcdef0", "us-east-1a"
    enis = [
        Eni(f"eni-0000000{d}", d, 0, "subnet-a", f"10.0.{d}.4", tuple(f"10.0.{d}.{10 + k}" for k in range(49)))
        for d in (0, 1)
    ]
    report = PoolReport(
        cluster="demo",
        node="n1",
        instance_id=iid,
        instance_type="p5.48xlarge",
        availability_zone=az,
        seq=7,
        sent_at=0,
        targets=Targets(warm_ip=5, warm_eni=0),
        enis=[
            EniReport(
                eni_id=e.eni_id,
                device_index=e.device_index,
                network_card=0,
                subnet_id="subnet-a",
                primary_ip=e.primary_ip,
                ips=list(e.ips),
                assigned=49,
            )
            for e in enis
        ],
        assigned_ips=98,
    )
    lim = known("p5.48xlarge")
    plan = plan_node(
        report,
        Inventory(iid, "p5.48xlarge", az, tuple(enis)),
        lim,
        [Subnet("subnet-a", az, "10.0.0.0/16", 60_000)],
        cluster="demo",
        max_pods=node_max_pods(report, lim, multi_card=True),
        multi_card=True,
    )
    assert [(c.network_card, c.device_index) for c in plan.calls if isinstance(c, CreateEni)] == []


# --- F5: a primary-of tag an allocator from before the change put on device 0 of card 1 ------


# Fixed (was a strict xfail of the review):
def test_a_primary_tag_on_device_0_of_card_1_does_not_make_it_assignable() -> None:
    from warmpool import names
    from warmpool.eni_scope import permissions

    p = permissions({names.TAG_PRIMARY_ENI_OF: "demo"}, "demo", in_cluster_vpc=True, device_index=0, network_card=1)
    assert not p.assign


# --- F6: with WARMPOOL_MULTI_CARD off, the agent still takes ENIs of cards above 0 ------------


# Fixed (was a strict xfail of the review):
def test_with_multi_card_off_the_agent_hands_out_no_address_of_a_foreign_eni_on_card_1() -> None:
    from node_agent.controller import PoolController
    from node_agent.records import NodeIdentity
    from tests.helpers.controller import TIMING, FakeImds
    from warmpool.limits import known
    from warmpool.pool import PoolConfig

    iid, az = "i-0123456789abcdef0", "us-east-1a"
    ident = NodeIdentity("demo", "node-1", iid, "p5.48xlarge", az)
    primary = EniInfo("eni-00000000", 0, "0a:00:00:00:00:00", "10.0.0.10", "subnet-a", "10.0.0.0/24")
    other = EniInfo("eni-0000fefe", 1, "0a:00:00:00:01:01", "10.0.9.4", "subnet-a", "10.0.9.0/24", network_card=1)
    imds = FakeImds()
    imds.enis = {}
    imds.add(primary)
    imds.add(other, ["10.0.9.11", "10.0.9.12"])  # another tool's ENI on card 1, not tagged no_manage
    imds.identity = lambda: ident  # type: ignore[method-assign]
    ds = Datastore(cooldown_s=TIMING.cooldown_s)
    ds.add_eni(primary, 0.0)
    ctl = PoolController(
        ident, known("p5.48xlarge"), PoolConfig(warm_ip=2, multi_card=False), ds, TIMING, metadata=imds
    )
    ctl.resync(0.0)
    got = ds.assign("c1", "eth0", "ns", 1.0)
    assert got is None or got[1] != other.eni_id


# --- the Assign cap (6a8b829): checked, sound ------------------------------------------------


def _m5(free: int, *, unknown: tuple[str, ...] = ()) -> Any:
    from warmpool.limits import known
    from warmpool.messages import EniReport, PoolReport, ReleaseOffer, Targets
    from warmpool.planner import Eni, Inventory, plan_node
    from warmpool.subnets import Subnet

    iid, az = "i-0123456789abcdef0", "us-east-1a"
    e0 = Eni("eni-00000000", 0, 0, "subnet-a", "10.0.0.4", ())
    ips = tuple(f"10.0.1.{10 + k}" for k in range(3))
    e1 = Eni("eni-00000001", 1, 0, "subnet-a", "10.0.1.4", ips + unknown, lifecycle=True, assignable=True)
    reps = [
        EniReport(eni_id=e0.eni_id, device_index=0, subnet_id="subnet-a", primary_ip=e0.primary_ip),
        EniReport(
            eni_id=e1.eni_id, device_index=1, subnet_id="subnet-a", primary_ip=e1.primary_ip, ips=list(ips), assigned=3
        ),
    ]
    release = [ReleaseOffer(eni_id=e1.eni_id, ips=list(unknown), unknown=True)] if unknown else []
    r = PoolReport(
        cluster="demo",
        node="n1",
        instance_id=iid,
        instance_type="m5.large",
        availability_zone=az,
        seq=7,
        sent_at=0,
        targets=Targets(warm_ip=2, warm_eni=0),
        enis=reps,
        assigned_ips=3,
        release=release,
    )
    inv = Inventory(iid, "m5.large", az, (e0, e1))
    return plan_node(r, inv, known("m5.large"), [Subnet("subnet-a", az, "10.0.0.0/16", free)], cluster="demo")


def test_the_assign_cap_never_plans_an_assign_of_0_and_waits_for_a_full_subnet() -> None:
    from warmpool.calls import AssignAddresses

    for free in (0, 1, 2, 50):
        plan = _m5(free)
        assigns = [c for c in plan.calls if isinstance(c, AssignAddresses)]
        assert all(c.ips > 0 for c in assigns), plan.calls
        assert sum(c.ips for c in assigns) <= free
    assert _m5(0).calls == ()  # a subnet full in the cache: no call; the next read (30 s TTL) decides


def test_the_assign_cap_counts_the_plans_own_unassigns_of_unknown_offers_first() -> None:
    from warmpool.calls import AssignAddresses, UnassignAddresses

    plan = _m5(0, unknown=("10.0.1.50", "10.0.1.51"))
    kinds = [type(c) for c in plan.calls]
    assert kinds and kinds[0] is UnassignAddresses
    assert sum(c.ips for c in plan.calls if isinstance(c, AssignAddresses)) <= 2
