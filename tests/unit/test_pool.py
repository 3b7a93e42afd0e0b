"""Pool math: the VPC CNI target semantics (docs/design.md, "Outside facts"), table-driven."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from warmpool.limits import known
from warmpool.pool import PoolConfig, PoolState, ceiling, compute

M5L = known("m5.large")  # 3 ENIs x 9 slots -> 27 addresses, max pods 29
M54 = known("m5.4xlarge")  # 8 x 29


@pytest.mark.parametrize(
    ("case", "cfg", "state", "short", "over", "over_enis", "whole"),
    [
        ("warm-ip empty node", PoolConfig(warm_ip=1), PoolState(0, 0), 1, 0, 0, False),
        ("warm-ip satisfied", PoolConfig(warm_ip=1), PoolState(5, 4), 0, 0, 0, False),
        ("warm-ip surplus", PoolConfig(warm_ip=2), PoolState(10, 3), 0, 5, 0, False),
        ("warm-ip starved by pods", PoolConfig(warm_ip=3), PoolState(5, 5), 3, 0, 0, False),
        ("minimum only, low", PoolConfig(minimum_ip=10), PoolState(4, 0), 6, 0, 0, False),
        ("minimum only, surplus capped", PoolConfig(minimum_ip=10), PoolState(12, 0), 0, 2, 0, False),
        ("both: minimum dominates", PoolConfig(warm_ip=2, minimum_ip=10), PoolState(4, 3), 6, 0, 0, False),
        ("both: warm dominates", PoolConfig(warm_ip=5, minimum_ip=4), PoolState(6, 5), 4, 0, 0, False),
        ("both: release never below minimum", PoolConfig(warm_ip=1, minimum_ip=8), PoolState(9, 0), 0, 1, 0, False),
        ("warm-eni default empty", PoolConfig(), PoolState(0, 0), 9, 0, 0, True),
        ("warm-eni default ok", PoolConfig(), PoolState(18, 9, enis=2), 0, 0, 0, True),
        ("warm-eni low", PoolConfig(), PoolState(9, 3, enis=1), 3, 0, 0, True),
        ("warm-eni surplus whole ENI", PoolConfig(), PoolState(27, 0, enis=3), 0, 18, 2, True),
        ("warm-eni just under surplus", PoolConfig(), PoolState(27, 10, enis=3), 0, 0, 0, True),
        ("warm-eni 0 nothing free", PoolConfig(warm_eni=0), PoolState(9, 9), 1, 0, 0, True),
        ("warm-eni 0 something free", PoolConfig(warm_eni=0), PoolState(9, 8), 0, 0, 0, True),
        ("surge: pending counts", PoolConfig(warm_ip=1), PoolState(2, 2, pending=4), 5, 0, 0, False),
        ("surge blocks release", PoolConfig(warm_ip=1), PoolState(10, 0, pending=1), 0, 0, 0, False),
        ("max-pods ceiling", PoolConfig(warm_ip=5, max_pods=20), PoolState(18, 18), 2, 0, 0, False),
        ("capacity ceiling", PoolConfig(minimum_ip=100), PoolState(0, 0), 27, 0, 0, False),
        ("MAX_ENI below limit", PoolConfig(minimum_ip=100, max_eni=2), PoolState(0, 0), 18, 0, 0, False),
    ],
)
def test_secondary_ip_mode(case, cfg, state, short, over, over_enis, whole):
    d = compute(cfg, state, M5L)
    assert (d.short, d.over, d.over_enis, d.whole_enis) == (short, over, over_enis, whole), case
    assert d.short_units == d.short


@pytest.mark.parametrize(
    ("case", "cfg", "state", "short", "short_units", "over_units"),
    [
        ("warm-prefix empty", PoolConfig(prefix_mode=True, warm_prefix=1), PoolState(0, 0), 16, 1, 0),
        ("warm-prefix ok", PoolConfig(prefix_mode=True, warm_prefix=1), PoolState(32, 10, free_prefixes=1), 0, 0, 0),
        ("warm-prefix low", PoolConfig(prefix_mode=True, warm_prefix=1), PoolState(16, 10), 10, 1, 0),
        (
            "warm-prefix surplus",
            PoolConfig(prefix_mode=True, warm_prefix=1),
            PoolState(64, 3, free_prefixes=3),
            0,
            0,
            2,
        ),
        ("prefix + warm-ip", PoolConfig(prefix_mode=True, warm_ip=5), PoolState(16, 14), 3, 1, 0),
        ("prefix + warm-ip big", PoolConfig(prefix_mode=True, warm_ip=20), PoolState(0, 0), 20, 2, 0),
        (
            "prefix + warm-ip surplus",
            PoolConfig(prefix_mode=True, warm_ip=2),
            PoolState(48, 2, free_prefixes=2),
            0,
            0,
            2,
        ),
        ("prefix warm-eni default", PoolConfig(prefix_mode=True), PoolState(0, 0), 144, 9, 0),
    ],
)
def test_prefix_mode(case, cfg, state, short, short_units, over_units):
    d = compute(cfg, state, M5L)
    assert (d.short, d.short_units, d.over_units) == (short, short_units, over_units), case


def test_ceiling_uses_prefixes_and_max_eni():
    assert ceiling(PoolConfig(), M5L) == 27
    assert ceiling(PoolConfig(prefix_mode=True), M5L) == 27 * 16
    assert ceiling(PoolConfig(max_eni=1), M5L) == 9
    assert ceiling(PoolConfig(max_pods=110), M54) == 110


def test_negative_targets_rejected():
    with pytest.raises(ValueError, match="warm_ip"):
        PoolConfig(warm_ip=-1)


configs = st.builds(
    PoolConfig,
    warm_ip=st.integers(0, 40),
    minimum_ip=st.integers(0, 60),
    warm_eni=st.integers(0, 3),
    max_eni=st.integers(0, 8),
    max_pods=st.integers(0, 250),
)


@given(cfg=configs, total=st.integers(0, 232), assigned=st.integers(0, 232), pending=st.integers(0, 50))
def test_never_past_ceiling_and_never_both(cfg, total, assigned, pending):
    assigned = min(assigned, total)
    d = compute(cfg, PoolState(total, assigned, pending=pending, enis=max(1, total // 29 + 1)), M54)
    assert total + d.short <= max(total, ceiling(cfg, M54))
    assert not (d.low and d.high)


@given(cfg=configs, total=st.integers(0, 232), assigned=st.integers(0, 232))
def test_release_never_drops_below_targets(cfg, total, assigned):
    assigned = min(assigned, total)
    state = PoolState(total, assigned, enis=max(1, total // 29 + 1))
    d = compute(cfg, state, M54)
    if d.over == 0:
        return
    after = PoolState(total - d.over, assigned, enis=state.enis - d.over_enis)
    d2 = compute(cfg, after, M54)
    assert d2.short == 0
    assert total - d.over >= cfg.minimum_ip
