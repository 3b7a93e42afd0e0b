"""Review 30 of 46e1919 and 540b490 (pending demand per pod and interface).

F1, liveness (over-count of a served pod; R2 back through the ADD's own loop). When a pod's
interface gets its address, 540b490 drops every other waiting ADD of that pod's interface from
``Datastore._pending``. But a dropped ADD may still be running: ``CniService._add`` calls
``Datastore.assign`` again every 0.5 s or less until ``add_wait_s`` ends, and each call that finds
nothing writes the attachment back into ``_pending`` with its pod. The served pod's interface is
counted again (a rise of the count: ``PoolController._report_due`` reports at once, and the
allocator reads one address more wanted), until the ADD gives up and then for ``pending_ttl_s``
(120 s) if its DEL never comes (containerd drops a failed teardown of a sandbox with no CNI
result), or, if the DEL comes, for ``PENDING_LINGER_S`` more: the late DEL's linger R2 fixed. The
address granted for it is taken by that same loop, so the served pod ends with a second address
on a sandbox the runtime has given up.

Two ADDs of one pod's interface in two sandboxes are in flight at once only when the runtime
gives up an ADD the agent still runs and kubelet makes the next sandbox before the agent's loop
ends: with ``WARMPOOL_ADD_WAIT_S`` above kubelet's 10-15 s back-off (the setting allows 600 s;
docs/demo.md runs 20 s) and the runtime leaving the first ADD early (the plugin's
``WARMPOOL_CNI_TIMEOUT_S``, 60 s; containerd restarted mid-ADD). With the defaults (10 s wait,
DEL serialised behind the ADD for up to 30 s) the earlier loop ends before the next sandbox's ADD.
The simulation never runs the loop (its agents' ``add_wait_s`` is 0, docs/reliability.md).

kubelet makes a pod's sandboxes one after another, so of two sandboxes of one pod the one whose
ADD came later is the current one: an ADD of a sandbox older than the one served does not want an
address for the pod.

Fixed: the served pod's interface marks the earlier sandboxes' waiting ADDs superseded
(``Datastore._superseded``): a superseded ADD neither counts nor takes an address, until its DEL."""

from __future__ import annotations

import threading
import time
from typing import Any

from emulated.clock import VirtualClock
from node_agent.cniserver import CniService
from node_agent.datastore import PENDING_LINGER_S, Datastore
from tests.helpers.cni import CONF, ENI, ScriptedPods
from tests.helpers.controller import PRIMARY

POD = "default/web-0"
COOLDOWN_S = 30.0


def full() -> Datastore:
    """A node whose one address is held by another pod."""
    ds = Datastore(cooldown_s=COOLDOWN_S, pending_ttl_s=120.0)
    ds.add_eni(PRIMARY, 0.0)
    ds.add_addresses(PRIMARY.eni_id, ["10.0.0.11"])
    assert ds.assign("running", "eth0", "ns", 0.0) is not None
    return ds


def _served_while_earlier_add_loops(ds: Datastore) -> float:
    """web-0's first sandbox's ADD waits (its loop keeps calling assign); the runtime gave it up,
    kubelet made the next sandbox, whose ADD gets the address freed meanwhile. Returns when."""
    assert ds.assign("web-0~0", "eth0", "ns", 1.0, pod=POD) is None  # the first ADD, looping
    ds.release("running", "eth0", 2.0)
    served = 2.0 + COOLDOWN_S
    assert ds.assign("web-0~0", "eth0", "ns", served - 0.5, pod=POD) is None, "setup: still cooling"
    assert ds.assign("web-0~1", "eth0", "ns", served, pod=POD) is not None, "setup: the next sandbox served"
    assert ds.pending(served) == 0, "setup: 540b490 drops the earlier sandbox's waiting ADD"
    return served


def test_a_served_pods_earlier_sandbox_add_still_looping_does_not_count_it_again() -> None:
    ds = full()
    served = _served_while_earlier_add_loops(ds)
    # the earlier ADD's loop wakes (<= 0.5 s) and finds nothing: web-0's eth0 has its address
    assert ds.assign("web-0~0", "eth0", "ns", served + 0.5, pod=POD) is None
    assert ds.pending(served + 0.5) == 0, "web-0 holds its eth0 address: no address is wanted"


def test_a_served_pods_earlier_sandbox_late_delete_after_its_loop_starts_no_linger() -> None:
    ds = full()
    served = _served_while_earlier_add_loops(ds)
    ds.assign("web-0~0", "eth0", "ns", served + 0.5, pod=POD)  # the loop, until add_wait_s ends
    ds.release("web-0~0", "eth0", served + 5.0)  # the earlier sandbox's DEL, after its ADD ended
    assert ds.pending(served + 5.0 + PENDING_LINGER_S / 2) == 0, "web-0 holds its eth0 address"


def test_a_served_pods_interface_draws_no_second_address() -> None:
    ds = full()
    served = _served_while_earlier_add_loops(ds)
    ds.assign("web-0~0", "eth0", "ns", served + 0.5, pod=POD)
    # what the allocator grants for what the report says is wanted; the earlier loop takes it
    wanted = ds.pending(served + 0.5)
    ds.add_addresses(PRIMARY.eni_id, [f"10.0.0.{20 + i}" for i in range(wanted)])
    ds.assign("web-0~0", "eth0", "ns", served + 1.0, pod=POD)
    held = [p for p in ds.pods() if p.container_id.startswith("web-0~") and p.ifname == "eth0"]
    assert len(held) == 1, f"web-0's eth0 holds {len(held)} addresses: {held}"


def test_the_cni_services_own_loop_recounts_a_served_pod() -> None:
    """The same through ``CniService``: the earlier sandbox's ADD loops in a thread; holding the
    service's condition keeps it from its next ``assign`` while the next sandbox's ADD is served,
    so the order is fixed; the loop's next call finds nothing and the ADD fails at ``add_wait_s``."""
    ds = Datastore(cooldown_s=0.0, pending_ttl_s=120.0)
    ds.add_eni(ENI, 0.0)
    ds.add_addresses(ENI.eni_id, ["10.0.0.11"])
    assert ds.assign("running", "eth0", "ns", 0.0) is not None
    clock = VirtualClock(1.0)
    svc = CniService(ds, ScriptedPods([]), add_wait_s=1.5, clock=clock)
    replies: list[dict[str, Any]] = []
    first = threading.Thread(target=lambda: replies.append(svc.handle(_request("web-0~0"))))
    first.start()
    try:
        end = time.monotonic() + 10
        while ds.pending(clock.now()) == 0 and time.monotonic() < end:
            time.sleep(0.01)
        assert ds.pending(clock.now()) == 1, "setup: the first sandbox's ADD waits"
        with svc._cond:  # the loop cannot come back from its wait until this is done
            ds.release("running", "eth0", clock.now())
            got = svc.handle(_request("web-0~1"))
            assert got["ok"], f"setup: the next sandbox served: {got}"
            assert ds.pending(clock.now()) == 0, "setup: 540b490 drops the first sandbox's ADD"
    finally:
        first.join(timeout=30)
    assert replies and not replies[0]["ok"], f"setup: the first sandbox's ADD found nothing: {replies}"
    assert ds.pending(clock.now()) == 0, "web-0 holds its eth0 address: no address is wanted"


def _request(cid: str) -> dict[str, Any]:
    return {
        "command": "ADD",
        "container_id": cid,
        "ifname": "eth0",
        "netns": f"/run/netns/{cid}",
        "config": CONF,
        "args": "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web-0;K8S_POD_UID=u1",
    }
