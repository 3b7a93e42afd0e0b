"""The ``settled-short:pods-wait-at-capacity`` excuse (``simulation.checks.holds_all_it_can``) on a
node whose checkpoint was rebuilt (seed 1007923): addresses held for recovered holders, each
named after a pod's host veth, with no container id. Such an address is a pod's only where the
harness's runtime says so: the veth's pod runs with that very address, or is being deleted. A
hold the runtime does not back (no pod of that veth, its pod running with another address, its
pod only being ADDed, a holder naming no pod) leaves the waiting pods judged."""

from __future__ import annotations

from types import SimpleNamespace

from emulated.clock import VirtualClock
from emulated.ec2 import Ec2Config, Ec2Emulator
from node_agent.datastore import Datastore
from node_agent.hostnet import host_veth_name
from node_agent.records import UNROUTED_HOLDER, EniInfo
from simulation.checks import holds_all_it_can
from simulation.node import Runtime
from warmpool.limits import KNOWN_TYPES
from warmpool.pool import PoolConfig

T3_MEDIUM = KNOWN_TYPES["t3.medium"]  # 3 ENIs of 5 slots
POOL = PoolConfig(warm_ip=1, minimum_ip=0, prefix_mode=True, max_pods=110)
IPS = ["10.0.0.11", "10.0.0.12"]


def _full_node() -> tuple[Ec2Emulator, str]:
    """A t3.medium whose three ENIs' fifteen slots hold singles: no /28 fits."""
    clock = VirtualClock(1_700_000_000.0)
    emu = Ec2Emulator(clock, Ec2Config(attach_delay_s=2.0, detach_delay_s=30.0), seed=7923)
    subnet = emu.add_subnet(cidr="10.0.0.0/23")
    iid = emu.run_instance("t3.medium", subnet_id=subnet, secondary_count=5)
    ec2 = emu.client()
    for device in (1, 2):
        eni = ec2.create_network_interface(SubnetId=subnet)["NetworkInterface"]["NetworkInterfaceId"]
        ec2.attach_network_interface(NetworkInterfaceId=eni, InstanceId=iid, DeviceIndex=device)
        clock.advance(5.0)
        emu.settle()
        ec2.assign_private_ip_addresses(NetworkInterfaceId=eni, SecondaryPrivateIpAddressCount=5)
    emu.settle()
    return emu, iid


def _judged(holders: dict[str, str], rt: Runtime) -> bool:
    """:func:`holds_all_it_can` on the full node, its datastore (rebuilt) holding each address of
    ``holders`` for its recovered holder, and the runtime ``rt``."""
    emu, iid = _full_node()
    ds = Datastore()
    ds.add_eni(EniInfo("eni-a", 0, "0e:00:00:00:00:01", "10.0.0.10", "subnet-1", "10.0.0.0/24"), 0.0)
    ds.add_addresses("eni-a", IPS)
    ds.recover(holders, 0.0)
    assert {h.ip for h in ds.recovered_holders()} == set(holders)
    agent = SimpleNamespace(
        name="n0",
        iid=iid,
        ds=ds,
        rt=rt,
        pods=SimpleNamespace(veth_of={}, routes={}, moved=set()),
        veth_prefix="eni",
        ctl=SimpleNamespace(limits=T3_MEDIUM, pool=POOL),
    )
    w = SimpleNamespace(plan=SimpleNamespace(prefix_mode=True), emu=emu, nets=SimpleNamespace(singles_beside_28=set()))
    return holds_all_it_can(w, agent)  # type: ignore[arg-type]


def _veths(*cids: str) -> dict[str, str]:
    return {ip: host_veth_name(cid, "eth0") for ip, cid in zip(IPS, cids, strict=True)}


def test_addresses_recovered_for_the_veths_of_pods_running_with_them_are_pods_holds() -> None:
    """Seed 1007923's n0: the pods on the rebuilt /28 run on; another pod waits."""
    rt = Runtime(up={"p1": IPS[0], "p2": IPS[1]}, adding={"p3": None})
    assert _judged(_veths("p1", "p2"), rt)


def test_a_recovered_veth_whose_pod_is_being_deleted_is_its_pod_s() -> None:
    rt = Runtime(up={"p1": IPS[0]}, adding={"p3": None}, deleting={"p2": None})
    assert _judged(_veths("p1", "p2"), rt)


def test_a_recovered_veth_no_pod_of_the_runtime_has_is_a_leak() -> None:
    # "gone" was DELeted and forgotten by the runtime; the rebuilt hold stayed
    rt = Runtime(up={"p1": IPS[0]}, adding={"p3": None})
    assert not _judged(_veths("p1", "gone"), rt)


def test_a_recovered_veth_whose_pod_runs_with_another_address_is_not_that_pod_s() -> None:
    # p1 runs with the first address: the second, recovered for its veth too, is a leak
    rt = Runtime(up={"p1": IPS[0], "p2": "10.0.0.99"}, adding={"p3": None})
    assert not _judged({IPS[0]: host_veth_name("p1", "eth0"), IPS[1]: host_veth_name("p1", "eth0")}, rt)
    assert not _judged(_veths("p1", "p2"), Runtime(up={"p1": IPS[0], "p2": "10.0.0.99"}, adding={"p3": None}))


def test_a_recovered_veth_of_a_pod_only_being_added_is_not_excused() -> None:
    """P3: the waiting pod's own veth holds an address; it waits for its ADD, not another's DEL."""
    rt = Runtime(up={"p1": IPS[0]}, adding={"p2": None})
    assert not _judged(_veths("p1", "p2"), rt)


def test_a_holder_naming_no_pod_is_not_a_pod_s() -> None:
    rt = Runtime(up={"p1": IPS[0]}, adding={"p3": None})
    assert not _judged({IPS[0]: host_veth_name("p1", "eth0"), IPS[1]: UNROUTED_HOLDER}, rt)
