"""Review (final): ``network-card`` is an optional IMDS leaf (``ImdsClient.network_tree``: a 404
is left out; ``parse_interfaces``: absent means card 0). On a multi-card type, a read that lacks
it for one interface (IMDS documents no consistency: the same torn or not-yet-whole read that
row 28 allows for ``local-ipv4s``) places that interface on card 0.

Without ``WARMPOOL_MULTI_CARD`` every interface of a card above 0 is another tool's (an EFA
with ENA, an SR-IOV network: "addresses of its own", review of the multi-card change, F6) and is
never the pool's. Read as card 0 it is: ``_usable`` takes it (managed by its tags: untagged is
managed), the datastore adds its secondary addresses free, and the next ADD gives one of them
to a pod while the other tool's holder has it. Device 0 of a card above 0 reads as the primary,
which ``SkipUnmanaged`` marks managed whatever its ``no_manage`` tag.

The simulation's ``imds-torn`` mixes moments only in the address leaves (simulation/node.py
``_torn``): ``info`` (card, device) is always whole, so this read is never drawn."""

from __future__ import annotations

from node_agent.controller import AttachedEni, PoolController
from node_agent.datastore import Datastore
from node_agent.imds import ImdsError, parse_interfaces
from tests.helpers.controller import ID, PRIMARY, TIMING, FakeImds
from warmpool.limits import known
from warmpool.pool import PoolConfig

OTHER_MAC = "0a:00:00:00:01:01"


def tree(with_card: bool) -> dict:
    leaves = {
        "local-ipv4s": "10.0.0.50\n10.0.0.51\n10.0.0.52",
        "interface-id": "eni-other-tool",
        "device-number": "1",
        "subnet-id": "subnet-a",
        "subnet-ipv4-cidr-block": "10.0.0.0/24",
    }
    if with_card:
        leaves["network-card"] = "1"
    primary = {
        "local-ipv4s": "10.0.0.10",
        "interface-id": PRIMARY.eni_id,
        "device-number": "0",
        "network-card": "0",
        "subnet-id": "subnet-a",
        "subnet-ipv4-cidr-block": "10.0.0.0/24",
    }
    return {"network": {"interfaces": {"macs": {PRIMARY.mac: primary, OTHER_MAC: leaves}}}}


class TreeImds(FakeImds):
    def __init__(self) -> None:
        super().__init__()
        self.whole = True

    def interfaces(self) -> list[AttachedEni]:
        return [a._replace(managed=True) for a in parse_interfaces(tree(self.whole))]


def test_an_interface_of_card_1_read_without_its_network_card_leaf_is_never_the_pools() -> None:
    imds = TreeImds()
    ds = Datastore(cooldown_s=TIMING.cooldown_s)
    ds.add_eni(PRIMARY, 0.0)
    ctl = PoolController(ID, known("c6in.32xlarge"), PoolConfig(warm_ip=1), ds, TIMING, metadata=imds)
    ctl.resync(1.0)
    assert [e.info.eni_id for e in ds.enis()] == [PRIMARY.eni_id]  # card 1: another tool's
    imds.whole = False  # one read without the network-card leaf (404)
    try:
        ctl.resync(2.0)
    except ImdsError:
        pass  # a read not used: fine
    taken = [a.ip for e in ds.enis() if e.info.eni_id == "eni-other-tool" for a in e.addrs.values()]
    a = ds.assign("pod-1", "eth0", "/run/netns/p", 3.0)
    assert a is None or a.eni_id != "eni-other-tool", f"a pod got {a.ip}, the other tool's address"
    assert taken == [], f"the other tool's addresses {taken} are in the pool (card read as 0)"
