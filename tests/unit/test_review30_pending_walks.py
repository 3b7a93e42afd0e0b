"""Review 30 of the pending count per pod and interface (46e1919, 540b490): what was checked and
found sound, over random walks of ADDs (named, unnamed, two interfaces, sandboxes of one pod,
one attachment named then not), DELs, addresses granted and time.

* An address given to a pod's interface drops other attachments' waiting ADDs: no holder's
  address is ever moved or freed by it (every holder stays as its own ADD and DEL left it).
* Nothing is left counted for ever: once every attachment is DELeted, the count falls to 0 within
  ``PENDING_LINGER_S`` (and ``pending_ttl_s``), and ``pending_expires_at`` says when it falls."""

from __future__ import annotations

import random

import pytest

from node_agent.datastore import PENDING_LINGER_S, Datastore
from tests.helpers.controller import PRIMARY

PODS = ["", "default/a", "default/b", "other/a"]
IFNAMES = ["eth0", "net1"]
TTL_S = 120.0


@pytest.mark.parametrize("seed", range(40))
def test_dropping_waiting_adds_never_touches_a_holder_and_nothing_counts_for_ever(seed: int) -> None:
    rng = random.Random(seed)
    ds = Datastore(cooldown_s=5.0, pending_ttl_s=TTL_S)
    ds.add_eni(PRIMARY, 0.0)
    held: dict[tuple[str, str], str] = {}  # what the ADDs and DELs left each attachment holding
    named: dict[str, str] = {}  # a sandbox's pod, as its runtime names it (one per sandbox)
    now, granted = 1.0, 0
    for _ in range(300):
        now += rng.choice([0.0, 0.5, 3.0, 12.0, 31.0])
        cid = f"s{rng.randrange(8)}"
        ifname = rng.choice(IFNAMES)
        op = rng.random()
        if op < 0.5:
            pod = named.setdefault(cid, rng.choice(PODS))
            if rng.random() < 0.1:
                pod = ""  # a retried ADD of the attachment that names no pod
            got = ds.assign(cid, ifname, "ns", now, pod=pod)
            if got is not None:
                assert held.setdefault((cid, ifname), got.ip) == got.ip
        elif op < 0.8:
            ds.release(cid, ifname, now)
            held.pop((cid, ifname), None)
        else:
            granted += 1
            ds.add_addresses(PRIMARY.eni_id, [f"10.0.{granted // 200}.{granted % 200 + 20}"])
        assert {(p.container_id, p.ifname): p.ip for p in ds.pods()} == held
        assert ds.pending(now) >= 0
    for cid, ifname in [(f"s{i}", f) for i in range(8) for f in IFNAMES]:
        ds.release(cid, ifname, now)
    assert not ds.pods()
    ends = ds.pending_expires_at()
    assert ends is None or ends <= now + max(TTL_S, PENDING_LINGER_S)
    assert ds.pending(now + PENDING_LINGER_S) == 0, "every waiting ADD was DELeted: only lingers, 30 s"
    assert ds.pending_expires_at() is None
