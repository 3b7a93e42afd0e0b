"""The Allocator with in-memory ports (emulated EC2 fast client, fast SQS, memory stores)."""

from __future__ import annotations

from typing import Any

from emulated.ec2.config import AmbiguousOutcome
from emulated.ec2.errors import Ec2Error
from tests.helpers.allocate_world import AllocatorWorld
from warmpool.messages import Released


def test_deferred_node_is_resent_with_a_delay_and_told_when() -> None:
    w = AllocatorWorld(budget_fraction=0.02)  # Assign: 2 tokens
    for i in range(3):
        w.add_node(f"n{i}")
    out = w.deliver([w.report(f"n{i}", warm_ip=1) for i in range(3)])
    assert out.served == 2 and out.deferred == 1
    node = next(o.node for o in out.nodes.values() if o.status == "deferred")
    (res,) = w.results(node)
    assert res.actions[-1].kind == "deferred" and res.actions[-1].retry_after_s >= 1
    assert w.queued(w.reports_url) == []  # delayed, not visible yet
    msgs = w.queued(w.reports_url, wait_s=30)
    assert len(msgs) == 1 and f'"node":"{node}"' in msgs[0]["Body"]


def test_a_node_leased_by_another_invocation_is_deferred() -> None:
    w = AllocatorWorld()
    w.add_node("n1")
    w.leases.claim("demo", w.nodes["n1"], "someone-else", w.clock.now(), 60)
    out = w.deliver([w.report("n1", warm_ip=1)])
    assert out.deferred == 1 and w.addresses("n1") == 0


def test_nodes_with_nothing_to_do_cost_no_lease_no_token_no_ec2_mutation() -> None:
    w = AllocatorWorld()
    w.add_node("n1")
    w.deliver([w.report("n1", warm_ip=2)])
    calls, lease_calls = w.mutating_calls(), w.leases.calls
    out = w.deliver([w.report("n1", warm_ip=2)])
    assert out.noop == 1 and w.mutating_calls() == calls and w.leases.calls == lease_calls
    assert w.ledger.last_seq("demo", w.nodes["n1"]) == 2


def test_coalescing_keeps_the_newest_and_drops_stale() -> None:
    w = AllocatorWorld()
    w.add_node("n1")
    r1, r2 = w.report("n1", warm_ip=1), w.report("n1", warm_ip=4)
    out = w.deliver([r2, r1])
    assert out.superseded == 1 and w.addresses("n1") == 4
    out = w.deliver([r1])
    assert out.stale == 1


def test_serial_mapper_runs_are_deterministic() -> None:
    def run() -> list[str]:
        w = AllocatorWorld()
        for i in range(10):
            w.add_node(f"n{i}")
        w.deliver([w.report(f"n{i}", warm_ip=2, pending=i * 5) for i in range(10)])
        return sorted(w.all_addresses())

    assert run() == run()


def test_describe_calls_draw_from_the_shared_buckets_too() -> None:
    w = AllocatorWorld()
    for i in range(3):
        w.add_node(f"n{i}")
    # Other callers (an autoscaler, the console) emptied the Describe bucket.
    now = w.clock.now()
    cap = w.settings.bucket_spec("DescribeInstances").capacity
    assert w.buckets.take_batch([{"DescribeInstances": cap}], now) == [0.0]
    before = w.ec2_stats().get("DescribeInstances", {}).get("calls", 0)
    out = w.deliver([w.report(f"n{i}", warm_ip=1) for i in range(3)])
    assert out.deferred == 3 and out.served == 0 and out.failed_message_ids == []
    assert w.ec2_stats().get("DescribeInstances", {}).get("calls", 0) == before
    assert w.mutating_calls() == 0
    assert all(o.reason == "waiting for EC2 Describe tokens" for o in out.nodes.values())
    msgs = w.queued(w.reports_url, wait_s=30)
    assert len(msgs) == 3  # re-sent with a delay, nothing lost


def test_old_release_offers_are_ignored_never_unassigning_what_a_pod_may_hold_again() -> None:
    # The agent takes quarantined addresses back after its release timeout; a
    # report that reaches the allocator later (deferred, backlog) must not
    # have its offers acted on.
    w = AllocatorWorld()
    w.add_node("n1", "m5.large")
    w.deliver([w.report("n1", warm_ip=5)])
    eni = w.enis("n1")[0]
    offered = list(eni.secondary)[-3:]
    old = w.report("n1", warm_ip=1, release=[{"eni_id": eni.id, "ips": offered}])
    w.clock.advance(w.settings.release_offer_max_age_s + 1)
    out = w.deliver([old])
    assert [a.kind for a in out.nodes[w.nodes["n1"]].actions] == []
    assert set(offered) <= set(w.enis("n1")[0].secondary)
    assert w.tally.as_dict().get("ReleaseOffersExpired") == 3
    # A fresh offer still goes.
    fresh = w.report("n1", warm_ip=1, release=[{"eni_id": eni.id, "ips": offered}])
    w.clock.advance(w.settings.release_delay_s)  # quarantined long enough for the allocator
    out = w.deliver([fresh])
    assert [a.kind for a in out.nodes[w.nodes["n1"]].actions] == ["released"]


def test_an_unexpected_error_leaves_the_record_for_redelivery() -> None:
    w = AllocatorWorld()
    w.add_node("n1", "m5.large")

    def boom(job: object) -> None:
        raise RuntimeError("connection reset while reading a response")

    w.alloc.executor.run = boom  # type: ignore[assignment,method-assign]
    out = w.deliver([w.report("n1", warm_ip=5, pending=3)])
    assert out.batch_item_failures() == {"batchItemFailures": [{"itemIdentifier": out.failed_message_ids[0]}]}
    assert w.ledger.last_seqs("demo", [w.nodes["n1"]]) == {w.nodes["n1"]: -1}


def test_a_plan_stopped_part_way_is_recorded_answered_and_not_resent() -> None:
    # Assign on the primary succeeds, then CreateNetworkInterface is throttled
    # (someone else spent the account's bucket): what was done is recorded in
    # the ledger (so a concurrent invocation holding an older view re-reads),
    # the agent gets it plus ``deferred``, and the now stale report is not re-sent.
    w = AllocatorWorld()
    w.add_node("n1", "m5.large")
    w.emu.fail_next("CreateNetworkInterface", "RequestLimitExceeded", status=503)
    rep = w.report("n1", warm_ip=1, pending=15)
    out = w.deliver([rep])
    node = out.nodes[w.nodes["n1"]]
    assert node.status == "deferred"
    assert [a.kind for a in node.actions] == ["assigned"]
    assert w.ledger.last_seq("demo", w.nodes["n1"]) == rep.seq
    (res,) = w.results("n1")
    assert [a.kind for a in res.actions] == ["assigned", "deferred"]
    assert w.queued(w.reports_url, wait_s=900) == []
    # The agent's next report gets the rest.
    out = w.deliver([w.report("n1", warm_ip=1, pending=15)])
    assert out.nodes[w.nodes["n1"]].status == "served"
    assert w.addresses("n1") >= 16


def test_throttled_attach_after_a_create_resends_the_same_seq_so_the_token_finds_the_eni() -> None:
    # Assign on the primary, Create, then Attach is throttled: the ENI exists
    # unattached. The report must come back with the same seq (not be recorded),
    # so the re-plan's ClientToken returns that ENI instead of making another.
    w = AllocatorWorld()
    w.add_node("n1", "m5.large")
    w.emu.fail_next("AttachNetworkInterface", "RequestLimitExceeded", status=503)
    rep = w.report("n1", warm_ip=1, pending=15)
    out = w.deliver([rep])
    assert out.nodes[w.nodes["n1"]].status == "deferred" and out.nodes[w.nodes["n1"]].resend
    assert w.ledger.last_seq("demo", w.nodes["n1"]) == -1
    (again,) = w.queued(w.reports_url, wait_s=900)
    out = w.deliver([again["Body"]])
    assert out.nodes[w.nodes["n1"]].status == "served"
    assert w.detached_enis() == [] and len(w.enis("n1")) == 2
    assert w.ec2_stats()["CreateNetworkInterface"]["calls"] == 2  # the second found the first ENI


def test_an_unassign_made_and_sent_again_says_released_and_stays_booked() -> None:
    # Seed 5649 (``warmpool sim --seed 5649 --keep 0,7,8,12,13,15,19``): the Unassign took
    # effect, its connection dropped and the SDK sent it again, whose answer ("not assigned to
    # interface") was taken for EC2 refusing the call: the address was unbooked and the agent
    # told ``failed``. Nothing said ``released`` again; the agent, its IMDS 481 s behind,
    # took the address back into its pool at the release timeout and a pod got it, while EC2
    # had it free for any node.
    w = AllocatorWorld()
    w.add_node("n1", "m5.large")
    w.deliver([w.report("n1", warm_ip=5)])
    eni = w.enis("n1")[0]
    offered = list(eni.secondary)[-2:]
    w.emu.set_ambiguous("UnassignPrivateIpAddresses", AmbiguousOutcome.SDK_RETRY, 1.0)
    q = w.clock.now() - w.settings.release_delay_s
    out = w.deliver([w.report("n1", warm_ip=3, release=[{"eni_id": eni.id, "ips": offered, "quarantined_at": q}])])
    assert not set(offered) & set(w.enis("n1")[0].secondary)  # EC2 took them (the first request)
    actions = out.nodes[w.nodes["n1"]].actions
    assert [(a.kind, sorted(getattr(a, "ips", ()))) for a in actions] == [("released", sorted(offered))]
    iid = w.nodes["n1"]
    assert w.books.load("demo", [iid])[iid].keys == set(offered)  # said again to later reports


def test_an_unassign_ec2_refused_outright_still_fails_and_is_unbooked() -> None:
    # The other side of the rule: a refusal that is not "not assigned" took nothing and
    # leaves the addresses on the ENI; they are not booked, so no answer drops them.
    w = AllocatorWorld()
    w.add_node("n1", "m5.large")
    w.deliver([w.report("n1", warm_ip=5)])
    eni = w.enis("n1")[0]
    offered = list(eni.secondary)[-2:]
    w.emu.fail_next("UnassignPrivateIpAddresses", "UnauthorizedOperation")
    q = w.clock.now() - w.settings.release_delay_s
    out = w.deliver([w.report("n1", warm_ip=3, release=[{"eni_id": eni.id, "ips": offered, "quarantined_at": q}])])
    assert set(offered) <= set(w.enis("n1")[0].secondary)
    assert [a.kind for a in out.nodes[w.nodes["n1"]].actions] == ["failed"]
    iid = w.nodes["n1"]
    assert w.books.load("demo", [iid])[iid].keys == frozenset()


def test_a_partly_not_assigned_unassign_says_released_only_what_ec2_no_longer_has() -> None:
    # A hostile review's finding on the fix of seed 5649: EC2 refuses an Unassign whole when one
    # of its keys is not on the ENI, and "not assigned" was said released for every key,
    # those EC2 still had included (the agent drops them, EC2 keeps them: a leak, and a pool
    # short for good). Now each key is asked alone.
    w = AllocatorWorld()
    w.add_node("n1", "m5.large")
    w.deliver([w.report("n1", warm_ip=5)])
    iid = w.nodes["n1"]
    eni = w.enis("n1")[0]
    a, b = list(eni.secondary)[-2:]
    # Describe lags from here on (docs/safety.md: no bound).
    w.emu.set_describe_lag(600, 600)
    w.clock.advance(1)
    q = lambda: w.clock.now() - w.settings.release_delay_s  # noqa: E731
    # 1. The agent offers a; the allocator unassigns it and says released.
    out = w.deliver([w.report("n1", warm_ip=4, release=[{"eni_id": eni.id, "ips": [a], "quarantined_at": q()}])])
    assert [x.kind for x in out.nodes[iid].actions] == ["released"]
    assert a not in w.enis("n1")[0].secondary
    # 2. The agent dropped a: its next report names it nowhere, and the book settles it.
    w.clock.advance(5)
    w.deliver([w.report("n1", warm_ip=4)])
    assert a not in w.books.load("demo", [iid])[iid].keys
    # 3. The agent lost its checkpoint; its IMDS lags (no bound) and still lists a, so the
    #    rebuild holds a and b as offered and a later report offers both. Describe still
    #    shows a on the ENI; the book no longer has it: one Unassign [a, b].
    w.clock.advance(5)
    out = w.deliver([w.report("n1", warm_ip=1, release=[{"eni_id": eni.id, "ips": [a, b], "quarantined_at": q()}])])
    said = {k for x in out.nodes[iid].actions if isinstance(x, Released) for k in x.ips}
    still = set(w.enis("n1")[0].secondary)
    # Whatever is said released must be off the ENI in EC2: else the agent drops an address
    # EC2 keeps on the instance, for good.
    assert not (said & still), f"said released while EC2 still has them on {eni.id}: {sorted(said & still)}"
    assert said == {a, b} - still and b in said  # b taken now, a gone before: both released


class _Unassigns:
    """An EC2 client wrapping the emulator's: records every Unassign (its keys and the virtual
    time it was made), may throttle the n-th one, may make each take ``delay_s``."""

    def __init__(self, inner: Any, clock: Any, *, throttle_at: int = 0, delay_s: float = 0.0) -> None:
        self._inner = inner
        self._clock = clock
        self.throttle_at = throttle_at
        self.delay_s = delay_s
        self.calls: list[tuple[float, tuple[str, ...], str]] = []

    def unassign_private_ip_addresses(self, **kw: Any) -> Any:
        self._clock.advance(self.delay_s)
        keys = tuple(kw.get("PrivateIpAddresses", ())) + tuple(kw.get("Ipv4Prefixes", ()))
        n = len(self.calls) + 1
        if n == self.throttle_at:
            self.calls.append((self._clock.now(), keys, "throttled"))
            raise Ec2Error("RequestLimitExceeded", "Request limit exceeded.").client_error("UnassignPrivateIpAddresses")
        try:
            out = self._inner.unassign_private_ip_addresses(**kw)
        except Exception as exc:
            self.calls.append((self._clock.now(), keys, type(exc).__name__))
            raise
        self.calls.append((self._clock.now(), keys, "ok"))
        return out

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def _gone_and_offered(w: AllocatorWorld, n: int) -> tuple[Any, str, list[str], float]:
    """The seed-5649 set-up of test_a_partly_not_assigned_unassign_...: ``a`` unassigned and
    settled, Describe lagging (still shows ``a``), and ``n`` more addresses of the ENI free."""
    w.add_node("n1", "m5.large")
    w.deliver([w.report("n1", warm_ip=n + 4)])
    eni = w.enis("n1")[0]
    keys = list(eni.secondary)
    a, rest = keys[-1], keys[-1 - n : -1]
    w.emu.set_describe_lag(600, 600)
    w.clock.advance(1)
    q = w.clock.now() - w.settings.release_delay_s
    w.deliver([w.report("n1", warm_ip=n + 3, release=[{"eni_id": eni.id, "ips": [a], "quarantined_at": q}])])
    w.clock.advance(5)
    w.deliver([w.report("n1", warm_ip=n + 3)])
    w.clock.advance(5)
    return eni, a, rest, w.clock.now() - w.settings.release_delay_s


def test_the_key_by_key_unassigns_each_check_the_offer_age_first() -> None:
    # A second hostile review: docs/safety.md step 3, "each offer's age is checked again right
    # before its Unassign". The key-by-key calls after a several-key "not assigned" were made
    # after the one check before the several-key call (and past the run's deadline): with
    # slow EC2 answers (no documented bound) the last landed long after the allocator's 60 s,
    # past the agent's take-back at worst, when it may have handed the address to a pod.
    w = AllocatorWorld()
    eni, a, rest, q = _gone_and_offered(w, 5)
    ec2 = _Unassigns(w.ec2_client, w.clock, delay_s=15.0)
    offer = [{"eni_id": eni.id, "ips": [a, *rest], "quarantined_at": q}]
    w.deliver([w.report("n1", warm_ip=1, release=offer)], alloc=w.allocator(ec2=ec2))
    max_age = w.settings.release_offer_max_age_s
    late = [(round(t - ec2.delay_s - q), k) for t, k, how in ec2.calls if how == "ok" and t - ec2.delay_s - q > max_age]
    assert not late, f"Unassigns made with the offer older than {max_age:g} s: {late}"
