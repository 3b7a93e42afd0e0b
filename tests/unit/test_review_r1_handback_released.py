"""Review 21, R1 (agent side): an answer that hands an offered address back and then says
``released`` for it (what the allocator's re-plan produces:
tests/integration/test_review21_replan_handback.py) puts the address in the pool before the
``released`` is applied. ``apply_result`` is not one datastore lock: a CNI ADD on the server's
thread between the two actions gets the address, and the ``released`` then keeps it for the pod
(never yanked) while EC2 has unassigned it. The simulation applies a result and runs an ADD as
whole steps on one thread, so this is not drawn."""

from __future__ import annotations

from tests.helpers.controller import PRIMARY, SECOND, FakeImds, attached_second, make, one, result
from warmpool.pool import PoolConfig


def test_a_pod_never_gets_an_address_the_result_it_is_handed_back_in_says_ec2_released() -> None:
    ips = [f"10.0.0.{i}" for i in range(11, 16)]
    imds = FakeImds()
    imds.add(PRIMARY, ips)
    ds, ctl = make(PoolConfig(warm_ip=2), imds=imds)
    ctl.start(0.0)
    ctl.tick(0.0)
    ctl.tick(30.0)
    r = one(ctl.tick(90.0))
    offered = r.release[0].ips
    assert len(offered) == 3
    for i in range(2):  # two pods take the two live addresses
        assert ds.assign(f"c{i}", "eth0", "ns", 91.0) is not None
    gone = offered[-1]

    real = ctl._apply_release
    got: list[object] = []

    def add_between(action, now, seq):  # type: ignore[no-untyped-def]
        # new pods' ADDs on the CNI server's thread, between the hand-back and the release
        got.extend(ds.assign(f"late{i}", "eth0", "ns", now) for i in range(3))
        return real(action, now, seq)

    ctl._apply_release = add_between  # type: ignore[method-assign]
    ctl.apply_result(
        result(
            r.seq,
            {"kind": "assigned", "eni_id": PRIMARY.eni_id, "ips": offered},
            {"kind": "assigned", "eni_id": PRIMARY.eni_id, "ips": offered[:-1]},
            {"kind": "released", "eni_id": PRIMARY.eni_id, "ips": [gone]},
        ),
        92.0,
    )
    held = {p.ip for p in ds.pods()}
    assert gone not in held, f"a pod holds {gone}, which the same answer said EC2 unassigned ({got})"


def test_an_eni_a_later_action_says_deleted_brings_no_address_to_the_pool() -> None:
    """The same guard for ``deleted``: an ``attached`` of an ENI the same answer then says EC2
    deleted puts none of its addresses in the pool, so no ADD between the two gets one."""
    ds, ctl = make(PoolConfig(warm_ip=2))
    ctl.start(0.0)
    r = one(ctl.tick(0.0))
    real = ctl._apply_addresses
    got: list[object] = []

    def add_between(action, view, now, seq):  # type: ignore[no-untyped-def]
        out = real(action, view, now, seq)
        got.extend(ds.assign(f"late{i}", "eth0", "ns", now) for i in range(2))
        return out

    ctl._apply_addresses = add_between  # type: ignore[method-assign]
    ctl.apply_result(
        result(r.seq, attached_second(["10.0.0.21", "10.0.0.22"]), {"kind": "deleted", "eni_id": SECOND.eni_id}),
        1.0,
    )
    assert got == [None, None], f"pods got addresses of an ENI the answer says EC2 deleted: {got}"
    assert ds.eni(SECOND.eni_id) is None


def test_an_address_released_then_granted_again_in_one_answer_is_taken() -> None:
    """Only a *later* ``released`` keeps an address out: one EC2 unassigned and then assigned to the
    node again (``released`` then ``assigned``, the re-grant of one answer) goes to the pool."""
    ds, ctl = make(PoolConfig(warm_ip=2), ["10.0.0.11", "10.0.0.12"])
    ctl.start(0.0)
    r = one(ctl.tick(0.0))
    ctl.apply_result(
        result(
            r.seq,
            {"kind": "released", "eni_id": PRIMARY.eni_id, "ips": ["10.0.0.12"]},
            {"kind": "assigned", "eni_id": PRIMARY.eni_id, "ips": ["10.0.0.12", "10.0.0.13"]},
        ),
        1.0,
    )
    free = {a.ip for a in (ds.assign(f"p{i}", "eth0", "ns", 2.0) for i in range(3)) if a is not None}
    assert {"10.0.0.12", "10.0.0.13"} <= free
