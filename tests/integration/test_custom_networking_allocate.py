"""Custom networking through the allocator on emulated EC2 (issue 24): a node reporting
``custom_networking`` gets its pod ENIs in its zone's mapped subnet with the mapped security
groups, nothing on its primary ENI, and a node without it never gets the mapped subnet."""

from __future__ import annotations

from tests.helpers.allocate_world import AllocatorWorld
from warmpool import names


def _custom_world() -> tuple[AllocatorWorld, str]:
    # the pods' subnet is made first so its id can go in the map the allocator is built with
    from emulated.clock import VirtualClock
    from emulated.ec2 import Ec2Config, Ec2Emulator
    from tests.helpers.allocate_world import T0

    clock = VirtualClock(T0)
    emu = Ec2Emulator(clock, Ec2Config())
    vpc = emu.add_vpc("10.0.0.0/16")
    own = emu.add_subnet(
        az="us-east-1a", cidr="10.0.0.0/20", vpc_id=vpc, tags={names.cluster_tag_key("demo"): "shared"}
    )
    pods = emu.add_subnet(az="us-east-1a", cidr="10.0.64.0/18", vpc_id=vpc)
    w = AllocatorWorld(
        emu=emu,
        clock=clock,
        custom_network={"us-east-1a": {"subnets": [pods], "security_groups": ["sg-0123456789abcdef0"]}},
    )
    w.subnets = [own, pods]  # nodes launch in their own subnet
    return w, pods


def test_a_custom_node_gets_its_pod_eni_in_the_mapped_subnet_with_the_mapped_groups() -> None:
    w, pods = _custom_world()
    w.add_node("n1", "m5.large")
    w.tag_primary("n1")
    before = list(w.enis("n1")[0].secondary)
    out = w.deliver([w.report("n1", warm_ip=5, warm_eni=0, extra={"custom_networking": True})])
    assert out.served == 1
    enis = w.enis("n1")
    assert list(enis[0].secondary) == before  # nothing on the primary ENI
    assert [e.subnet_id for e in enis[1:]] == [pods]
    assert enis[1].groups == ["sg-0123456789abcdef0"] and len(enis[1].secondary) >= 5


def test_a_node_without_custom_networking_stays_out_of_the_mapped_subnet() -> None:
    w, pods = _custom_world()
    w.add_node("n1", "m5.large")
    w.tag_primary("n1")
    out = w.deliver([w.report("n1", warm_ip=15, warm_eni=0)])
    assert out.served == 1
    enis = w.enis("n1")
    assert len(enis[0].secondary) > 0  # its primary takes addresses, as without the map
    assert all(e.subnet_id != pods for e in enis)


def test_a_custom_nodes_ceiling_leaves_the_primary_out() -> None:
    w, pods = _custom_world()
    w.add_node("n1", "m5.large")  # 3 ENIs x 10: 20 pods with custom networking
    w.tag_primary("n1")
    w.deliver([w.report("n1", warm_ip=50, warm_eni=0, extra={"custom_networking": True})])
    enis = w.enis("n1")
    assert len(enis) == 3 and all(e.subnet_id == pods for e in enis[1:])
    assert sum(len(e.secondary) for e in enis[1:]) == 18  # 2 ENIs x 9 secondaries: the node's most
