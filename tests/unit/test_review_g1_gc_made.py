"""Review 21, G1: CNI GC prunes ``CniService._made`` from a snapshot of the datastore's pods
(``records = self.ds.pods()``) taken *before* it takes ``_made_lock``. An ADD that runs whole on
another CNI thread between the two (a new pod, or an attachment DELeted and ADDed again) has its
fresh ``_made`` entry deleted: it is in ``_made`` but not in the stale ``live`` set. From then on
``_age`` dates that attachment from the agent process's start (``_started``), so it looks old to
every later GC. The next GC whose list lacks it (the runtime's list taken before that ADD was
answered: exactly what ``gc_min_age_s`` exists for, and what the simulation's ``cni-readd`` draws)
tears a running pod down and frees its address; after the cooldown the next pod gets it: two
holders on the node.

The simulation runs each GC and each ADD as one whole step on one thread, so the interleaving
(a thread switch between ``ds.pods()`` and ``with self._made_lock``) is never drawn."""

from __future__ import annotations

from typing import Any

from emulated.clock import VirtualClock
from node_agent.cniserver import CniService
from tests.helpers.cni import CONF, ScriptedPods
from tests.helpers.cni import add_request as _add
from tests.helpers.cni import cni_datastore as _ds


def _gc(valid: list[dict[str, str]]) -> dict[str, Any]:
    return {"command": "GC", "config": {**CONF, "cniVersion": "1.1.0", "cni.dev/valid-attachments": valid}}


def test_an_add_between_a_gcs_pod_snapshot_and_its_prune_stays_young_for_the_next_gc() -> None:
    ds = _ds()
    pods = ScriptedPods([])
    clock = VirtualClock(5.0)
    svc = CniService(ds, pods, clock=clock)
    old = svc.handle(_add("c1"))
    assert old["ok"]
    clock.advance(600.0)  # the agent has run for 10 min; c1 is old and listed

    real_pods = ds.pods
    added: list[dict[str, Any]] = []

    def snapshot_then_add() -> list[Any]:
        out = real_pods()
        if not added:
            # the GC thread is switched out right after its snapshot of the pods: a new pod's
            # ADD (c2) runs whole on another CNI thread and is answered
            added.append(svc.handle(_add("c2")))
        return out

    ds.pods = snapshot_then_add  # type: ignore[method-assign]
    listed_c1 = [{"containerID": "c1", "ifname": "eth0"}]
    assert svc.handle(_gc(listed_c1))["ok"]
    ds.pods = real_pods  # type: ignore[method-assign]
    assert added and added[0]["ok"], added
    ip2 = added[0]["result"]["ips"][0]["address"].removesuffix("/32")

    clock.advance(5.0)  # c2 is 5 s old: far below gc_min_age_s (60 s)
    # the runtime's next GC, with a list taken before c2's ADD was answered (it lacks c2)
    assert svc.handle(_gc(listed_c1))["ok"]
    clock.advance(31.0)  # past the cooldown: new pods come
    later = [svc.handle(_add(f"c{i}")) for i in (3, 4)]
    got = {r["result"]["ips"][0]["address"].removesuffix("/32") for r in later if r["ok"]}
    assert ip2 not in got, f"{ip2} handed to a new pod while c2 (never DELeted) still runs with it"
    held = ds.lookup("c2", "eth0")
    assert held is not None and held.ip == ip2, "GC freed the address of a pod ADDed 5 s before"
    assert all(t[0] != "c2" for t in pods.teardowns), "GC tore down a pod ADDed 5 s before"
