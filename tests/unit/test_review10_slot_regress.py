"""Review 10, finding D1 (argument plus a directed test of the agent's half): ``Datastore.reconcile``
(and ``PoolController._drop_replaced``) read "another ENI in this ENI's device slot" as proof the
ENI is detached, and remove it with ``force=True``: its pods' records go. A read that answers from
an older state (docs/safety.md row 6, drawn as ``imds-regress``) shows exactly that after a slot
was reused: an ENI deleted earlier (OLD) in the slot of the ENI pods use now (SECOND). The next
read lists SECOND again, its addresses come back with no holder, and a new pod gets a running
pod's address. The agent's filter of deleted ENIs (``recently_gone``) does not stop it when the
agent never got OLD's ``deleted`` (every answer lost until the take-back dropped OLD's addresses
as released: ``_take_back`` marks addresses, not the ENI) or after a checkpoint loss; the
production tag look-up (``SkipUnmanaged``) leaves OLD unknown, hence unused, unless Describe (row 7,
eventually consistent) still shows OLD attached. So in production this needs a stale Describe on
top; the test gives the controller a read whose ENIs are classified managed, as ``FakeImds`` does.
"""

from __future__ import annotations

from node_agent.checkpoint import MemoryCheckpoint
from node_agent.controller import AttachedEni, PoolController
from node_agent.datastore import Datastore
from node_agent.records import EniInfo
from tests.helpers.agent_findings import POOL, holders
from tests.helpers.controller import ID, PRIMARY, SECOND, TIMING, FakeImds
from warmpool.limits import known

OLD = EniInfo("eni-0000000f", 1, "0a:00:00:00:00:0f", "10.0.0.40", "subnet-a", "10.0.0.0/24")


def _full_node() -> tuple[FakeImds, Datastore, PoolController, float]:
    """A node with PRIMARY and SECOND, every address to a pod (SECOND's included)."""
    imds = FakeImds()
    imds.add(PRIMARY, ["10.0.0.11"])
    imds.add(SECOND, ["10.0.0.21", "10.0.0.22"])
    t = 10_000.0
    ds = Datastore(cooldown_s=0.0, pending_ttl_s=TIMING.pending_ttl_s, checkpoint=MemoryCheckpoint())
    ctl = PoolController(ID, known("m5.large"), POOL, ds, TIMING, metadata=imds)
    ctl.start(t)
    # fill the node: every address to a pod, the SECOND ones included
    for i in range(3):
        assert ds.assign(f"p{i}", "eth0", "ns", t + 1) is not None
    return imds, ds, ctl, t


def test_a_regressed_read_showing_a_deleted_eni_in_a_pod_enis_slot_never_frees_the_pods_address() -> None:
    imds, ds, ctl, t = _full_node()
    mine = {ip for ip, cids in holders(ds).items() if ip.startswith("10.0.0.2")}
    assert mine, "setup: no pod on SECOND"
    # a read from an older state: OLD in device 1, SECOND not attached yet
    now = dict(imds.enis)
    imds.enis = {PRIMARY.eni_id: now[PRIMARY.eni_id], OLD.eni_id: AttachedEni(OLD, ["10.0.0.41"], [])}
    ctl.resync(t + 60)
    # and the next read is current again
    imds.enis = now
    ctl.resync(t + 120)
    for k in range(3):
        ctl.tick(t + 120 + 10 * k)
        ds.assign(f"q{k}", "eth0", "ns", t + 130 + 10 * k)
    twice = {ip: c for ip, c in holders(ds).items() if ip in mine and any(x.startswith("q") for x in c)}
    lost = mine - set(holders(ds))
    assert not twice and not lost, (
        f"the pods on SECOND lost their records to a regressed read (no holder now: {sorted(lost)}; "
        f"given to a new pod: {twice})"
    )


def test_a_claim_for_an_eni_shown_in_a_pod_enis_slot_waits_and_drops_nothing() -> None:
    """The claim path (``PoolController._apply_addresses`` -> ``_drop_replaced``): an ``attached``
    naming an ENI a read shows in the slot of the ENI pods use, which that read lacks, is parked;
    the pods' ENI and their records stay (before: force-removed as "replaced")."""
    from tests.helpers.controller import one, result

    imds, ds, ctl, t = _full_node()
    before = holders(ds)
    r = one(ctl.tick(t + 2) or ctl.tick(t + 70))
    now = dict(imds.enis)
    imds.enis = {PRIMARY.eni_id: now[PRIMARY.eni_id], OLD.eni_id: AttachedEni(OLD, ["10.0.0.41"], [])}
    attached = {
        "kind": "attached",
        "eni_id": OLD.eni_id,
        "device_index": 1,
        "mac": OLD.mac,
        "subnet_id": "subnet-a",
        "subnet_cidr": "10.0.0.0/24",
        "primary_ip": OLD.primary_ip,
        "ips": ["10.0.0.41"],
    }
    notes = ctl.apply_result(result(r.seq, attached), t + 80)
    assert ds.eni(SECOND.eni_id) is not None, notes
    assert holders(ds) == before, notes
    assert ds.eni(OLD.eni_id) is None, notes
