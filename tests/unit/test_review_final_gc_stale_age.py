"""Review (final): CNI GC decides an attachment is old (``_age``) *before* taking its lock, and
under the lock re-checks only that the datastore still gives it the same address. A repeated
ADD of the same attachment (the runtime retrying an ADD whose answer it lost: the runtime's
GC list, taken before that ADD was answered, lacks it) that runs whole between the two makes
``_made`` young and returns the same address, yet the GC goes on with its stale age: it tears
down the pod's wiring and frees an address the runtime was just told is the pod's. After the
cooldown the next pod gets it: two holders on the node.

The simulation runs GC and ADD as whole steps on one thread, so this interleaving (any thread
switch between the age check and the lock) is never drawn."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from emulated.clock import VirtualClock
from node_agent.cniserver import CniService
from tests.helpers.cni import CONF, ScriptedPods
from tests.helpers.cni import add_request as _add
from tests.helpers.cni import cni_datastore as _ds


def test_gc_never_frees_an_attachment_an_add_answered_after_its_age_check() -> None:
    ds = _ds()
    pods = ScriptedPods([])
    clock = VirtualClock(5.0)
    svc = CniService(ds, pods, clock=clock)
    first = svc.handle(_add())
    assert first["ok"]
    ip = first["result"]["ips"][0]["address"].removesuffix("/32")
    clock.advance(300.0)  # an old attachment now (gc_min_age_s is 60 s)

    real = svc._attachment
    readd: list[dict[str, Any]] = []

    @contextlib.contextmanager
    def interleaved(cid: str, ifname: str, wait_s: float) -> Iterator[bool]:
        if wait_s == 0.0 and not readd:
            # the GC thread is switched out right after its age check: the runtime's repeated
            # ADD of this attachment runs whole, and is answered with the same address
            readd.append(svc.handle(_add()))
        with real(cid, ifname, wait_s) as got:
            yield got

    svc._attachment = interleaved  # type: ignore[method-assign]
    # the runtime's GC list was taken before the repeated ADD was answered: it lacks c1/eth0
    reply = svc.handle({"command": "GC", "config": {**CONF, "cniVersion": "1.1.0", "cni.dev/valid-attachments": []}})
    assert reply["ok"], reply
    assert readd and readd[0]["ok"] and readd[0]["result"]["ips"][0]["address"] == f"{ip}/32"
    held = ds.lookup("c1", "eth0")
    assert held is not None and held.ip == ip, "GC freed the address an ADD answered a moment ago"
    assert pods.teardowns == [], "GC tore down a pod the runtime was just told is wired"
