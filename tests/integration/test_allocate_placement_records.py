"""Named placement's shared records (review1 P2, P3; ``warmpool.ports.PlacementRecords``, kept
beside the release books): every release is recorded in its subnet before the call that makes
it, nothing released within the hold is named, each Create's parameters are recorded by
ClientToken before it is sent; and a store that does not answer makes no call whose safety
rests on it. The real allocator and agent logic in a closed loop on the emulated EC2."""

from __future__ import annotations

from typing import Any

import pytest

from functions.errors import AwsError
from tests.helpers.reliability_cluster import ReliabilityCluster
from warmpool.pool import PoolConfig

WATCHED = ("unassign_private_ip_addresses", "detach_network_interface", "create_network_interface")


class Log:
    """The executor's records store and EC2 client, writing one shared log of their calls;
    ``fail`` names store methods that raise (DynamoDB not answering)."""

    def __init__(self, records: Any, ec2: Any, fail: tuple[str, ...] = ()) -> None:
        self.records, self.ec2, self.fail = records, ec2, fail
        self.events: list[tuple[str, Any]] = []

    def store(self) -> Any:
        log = self

        class Store:
            def __getattr__(self, name: str) -> Any:
                fn = getattr(log.records, name)

                def call(*a: Any, **kw: Any) -> Any:
                    log.events.append((name, a[2] if name == "hold" else None))
                    if name in log.fail:
                        raise AwsError("InternalServerError", "boom", "Query")
                    return fn(*a, **kw)

                return call

        return Store()

    def client(self) -> Any:
        log = self

        class Client:
            def __getattr__(self, name: str) -> Any:
                fn = getattr(log.ec2, name)

                def call(**kw: Any) -> Any:
                    if name in WATCHED:
                        log.events.append((name, kw.get("PrivateIpAddresses")))
                    return fn(**kw)

                return call

        return Client()


def _cluster(fail: tuple[str, ...] = ()) -> tuple[ReliabilityCluster, Log]:
    c = ReliabilityCluster(1, pool=PoolConfig(warm_ip=1), named_placement=True)
    ex = c.w.alloc.executor
    log = Log(ex.records, c.w.ec2_client, fail)
    ex.records = log.store()
    c.w.alloc.ec2.api = log.client()  # type: ignore[attr-defined]
    ex.ec2 = c.w.alloc.ec2
    return c, log


def test_every_release_is_held_in_its_subnet_before_its_call() -> None:
    c, log = _cluster()
    c.scale("n0", 16)  # past the primary ENI: a second ENI
    c.settle()
    eni = next(e for e in c.w.emu.enis.values() if e.attachment is not None and e.attachment.device_index == 1)
    second = {eni.primary_ip, *eni.secondary}
    log.events.clear()
    c.scale("n0", 0)  # the primary ENI's surplus unassigned, the second ENI deleted
    c.run(200)
    c.settle()
    c.check()
    calls = [e for e in log.events if e[0] in ("hold", "unassign_private_ip_addresses", "detach_network_interface")]
    unassigns = [i for i, e in enumerate(calls) if e[0] == "unassign_private_ip_addresses"]
    detaches = [i for i, e in enumerate(calls) if e[0] == "detach_network_interface"]
    assert unassigns and detaches
    for i in unassigns:  # held right before, every key of the call
        assert calls[i - 1][0] == "hold" and set(calls[i][1]) <= set(calls[i - 1][1])
    for i in detaches:  # the deleted ENI's every address, its primary too
        assert calls[i - 1][0] == "hold" and second <= set(calls[i - 1][1])
    assert second <= log.records.held(c.w.alloc.cluster, c.w.subnets[0], 0.0)  # in the shared store


def test_a_release_whose_hold_cannot_be_written_is_not_made() -> None:
    c, log = _cluster()
    c.scale("n0", 8)
    c.settle()
    log.fail = ("hold",)
    log.events.clear()
    c.scale("n0", 0)
    # Eight pods within the burst window make a burst: the surplus is released once the burst
    # has been over for the release delay (``Timing.burst_window_s``, node_agent/config.py), up
    # to 30 s + 60 s after the last ADD, so the hold is first tried within 150 s.
    c.run(150)
    assert any(e[0] == "hold" for e in log.events)
    assert not [e for e in log.events if e[0] == "unassign_private_ip_addresses"]
    assert c.w.alloc.tally.get("ReleaseBooksUnread") >= 1
    log.fail = ()
    c.run(200)
    c.settle()
    c.check()
    assert [e for e in log.events if e[0] == "unassign_private_ip_addresses"], "made once the store answers"


@pytest.mark.parametrize(
    ("fail", "creates", "named"),
    [
        ((), 1, True),  # recorded, then sent by name
        (("held",), 1, False),  # what others released is unknown: nothing named, by count
        (("get_create",), 0, False),  # the token's record unread (none in this container): no Create
        (("put_create",), 0, False),  # not recorded: no Create
    ],
)
def test_a_create_is_sent_only_as_recorded(fail: tuple[str, ...], creates: int, named: bool) -> None:
    c, log = _cluster(fail)
    c.scale("n0", 14)  # past the primary ENI's addresses: a CreateNetworkInterface
    c.run(30)
    sent = [e for e in log.events if e[0] == "create_network_interface"]
    assert len(sent) == creates
    assert all(bool(e[1]) is named for e in sent)
    if creates:
        assert [e[0] for e in log.events if e[0] in ("put_create", "create_network_interface")][:2] == [
            "put_create",
            "create_network_interface",
        ]
    log.fail = ()
    c.settle()
    c.check()
