"""Release offers and the release timeout (issue 11, defect 1, the agent's half).

Each offer carries when the agent quarantined its addresses (the allocator
measures the offer's age from it, not from the report's ``sent_at``), that
time survives a restart, and the agent's release timeout must exceed the
allocator's offer-age ceiling by the contract's margin."""

from __future__ import annotations

import pytest

from node_agent.checkpoint import MemoryCheckpoint
from node_agent.config import ConfigError, load
from node_agent.controller import PoolController
from node_agent.datastore import Datastore
from tests.helpers.controller import ID, PRIMARY, SECOND, TIMING, make, one
from warmpool.limits import known
from warmpool.messages import MIN_RELEASE_TIMEOUT_S, OFFER_MAX_AGE_CEILING_S, PoolReport
from warmpool.pool import PoolConfig


def test_an_offer_carries_its_quarantine_time_in_every_later_report() -> None:
    ips = [f"10.0.0.{i}" for i in range(11, 16)]
    _, ctl = make(PoolConfig(warm_ip=2), ips)
    ctl.tick(0.0)
    ctl.tick(30.0)
    r = one(ctl.tick(90.0))
    assert r.release and r.release[0].quarantined_at == 90.0
    # Not released yet: the same offer goes out again later, still dated 90.
    again = one(ctl.tick(150.0))
    assert again.sent_at == 150.0
    assert [o.quarantined_at for o in again.release] == [90.0]
    # Round-trips on the wire.
    assert PoolReport.model_validate_json(again.to_json()).release[0].quarantined_at == 90.0


def test_an_eni_offer_mixing_quarantine_times_carries_the_oldest() -> None:
    ds, ctl = make(PoolConfig(warm_ip=0), [f"10.0.0.{i}" for i in range(11, 14)])
    ds.add_eni(SECOND, 0.0)
    ds.add_addresses(SECOND.eni_id, ["10.0.0.21"])
    ds.quarantine(PRIMARY.eni_id, ["10.0.0.12"], [], 40.0)
    ds.quarantine(PRIMARY.eni_id, ["10.0.0.11"], [], 10.0)
    ds.quarantine(SECOND.eni_id, ["10.0.0.21"], [], 30.0)
    r = one(ctl.tick(50.0))
    got = {o.eni_id: (sorted(o.ips), o.quarantined_at) for o in r.release}
    assert got == {PRIMARY.eni_id: (["10.0.0.11", "10.0.0.12"], 10.0), SECOND.eni_id: (["10.0.0.21"], 30.0)}


def test_prefix_offers_carry_their_quarantine_time() -> None:
    ds = Datastore(cooldown_s=TIMING.cooldown_s)
    ds.add_eni(PRIMARY, 0.0)
    ds.add_addresses(PRIMARY.eni_id, prefixes=["10.0.0.32/28", "10.0.0.48/28"])
    ctl = PoolController(ID, known("m5.large"), PoolConfig(warm_prefix=0, prefix_mode=True), ds, TIMING)
    ds.quarantine(PRIMARY.eni_id, [], ["10.0.0.48/28"], 7.0)
    r = one(ctl.tick(8.0))
    assert [(o.prefixes, o.quarantined_at) for o in r.release] == [(["10.0.0.48/28"], 7.0)]


def test_the_quarantine_time_survives_a_restart_and_a_clock_behind_is_clamped() -> None:
    cp = MemoryCheckpoint()
    ds = Datastore(cooldown_s=TIMING.cooldown_s, checkpoint=cp)
    ds.add_eni(PRIMARY, 0.0)
    ds.add_addresses(PRIMARY.eni_id, ["10.0.0.11", "10.0.0.12"])
    ctl = PoolController(ID, known("m5.large"), PoolConfig(warm_ip=1), ds, TIMING)
    ctl.tick(0.0)
    ctl.tick(1.0)
    assert one(ctl.tick(61.0)).release[0].quarantined_at == 61.0

    ds2 = Datastore(cooldown_s=TIMING.cooldown_s, checkpoint=cp)
    assert ds2.restore()
    ctl2 = PoolController(ID, known("m5.large"), PoolConfig(warm_ip=1), ds2, TIMING)
    assert one(ctl2.tick(70.0)).release[0].quarantined_at == 61.0

    # The node's clock stepped back after the restart: the offer is dated no
    # later than the report (the contract requires it; an older date only
    # makes the allocator more careful), and the report is still sent.
    ds3 = Datastore(cooldown_s=TIMING.cooldown_s, checkpoint=cp)
    assert ds3.restore()
    ctl3 = PoolController(ID, known("m5.large"), PoolConfig(warm_ip=1), ds3, TIMING)
    r = one(ctl3.tick(50.0))
    assert r.release[0].quarantined_at == 50.0 == r.sent_at


def _env(**kw: str) -> dict[str, str]:
    return {"CLUSTER_NAME": "demo", "WARMPOOL_REPORTS_QUEUE_URL": "http://q/reports", **kw}


def test_release_timeout_must_exceed_the_offer_age_ceiling_with_the_margin() -> None:
    assert MIN_RELEASE_TIMEOUT_S > OFFER_MAX_AGE_CEILING_S
    assert load(_env()).timing.release_timeout_s == 240.0
    assert load(_env(WARMPOOL_RELEASE_TIMEOUT_S=f"{MIN_RELEASE_TIMEOUT_S:g}")).timing.release_timeout_s == 210.0
    # 90 was the floor before the IMDS lag bound joined it (hostile review, finding 3).
    for bad in ("1", "30", "90", "209.9"):
        with pytest.raises(ConfigError) as info:
            load(_env(WARMPOOL_RELEASE_TIMEOUT_S=bad))
        msg = str(info.value)
        assert "WARMPOOL_RELEASE_TIMEOUT_S" in msg and f"{float(bad):g}" in msg
        assert f"{MIN_RELEASE_TIMEOUT_S:g}" in msg and f"{OFFER_MAX_AGE_CEILING_S:g}" in msg, msg
        assert "IMDS lag bound 120" in msg, msg
