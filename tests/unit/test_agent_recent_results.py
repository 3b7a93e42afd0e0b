"""The agent's memory of released addresses (``node_agent/recent_results.py``): kept until a
grant names the address again, never expired by time, bounded in size."""

from __future__ import annotations

from node_agent.recent_results import MAX_RELEASED, RecentResults


def test_a_released_key_seen_absent_is_not_forgotten_by_time() -> None:
    r = RecentResults()
    r.mark_gone(10.0, 1, ["10.0.0.5"], [])
    r.note_absent(set())
    assert not r.expire(1e9)
    assert "10.0.0.5" in r.released and "10.0.0.5" in r.absent


def test_only_a_grant_unmarks_a_released_key() -> None:
    r = RecentResults()
    r.mark_gone(10.0, 1, ["10.0.0.5", "10.0.0.6"], [])
    r.note_absent({"10.0.0.6"})
    assert r.unmark_released(["10.0.0.5"])
    assert set(r.released) == {"10.0.0.6"} and r.absent == set()


def test_beyond_the_bound_the_keys_seen_absent_go_first_oldest_first() -> None:
    r = RecentResults()
    keys = [f"10.1.{i // 250}.{i % 250}" for i in range(MAX_RELEASED + 10)]
    still_listed = keys[:5]  # the oldest five: IMDS still lists them
    r.mark_gone(0.0, 0, still_listed, [])
    for i, k in enumerate(keys[5:MAX_RELEASED]):
        r.mark_gone(1.0 + i, 1, [k], [])
    r.note_absent(set(still_listed))
    r.mark_gone(1e6, 2, keys[MAX_RELEASED:], [])  # ten more: ten must go
    assert len(r.released) == MAX_RELEASED
    assert all(k in r.released for k in still_listed)  # never seen gone: kept, though oldest
    assert all(k not in r.released for k in keys[5:15])  # the oldest of those seen gone: forgotten
    assert all(k in r.released for k in keys[MAX_RELEASED:])
    assert r.absent <= set(r.released)


def test_a_checkpoint_over_the_bound_loads_within_it() -> None:
    from node_agent.checkpoint import RecentEntry

    keys = [f"10.2.{i // 250}.{i % 250}" for i in range(MAX_RELEASED + 3)]
    entry = RecentEntry.model_validate(
        {"released": {k: [float(i), i] for i, k in enumerate(keys)}, "deleted": {}, "released_absent": keys}
    )
    r = RecentResults()
    r.load(entry)
    assert len(r.released) == MAX_RELEASED and keys[0] not in r.released and keys[-1] in r.released
