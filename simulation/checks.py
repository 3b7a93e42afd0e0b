"""The invariants of the whole-system simulation, checked after every event
of the loop (:func:`after_event`) and once the schedule has gone quiet
(:func:`at_end`). Each broken one names itself (the ``invariant`` of a
violation):

* ``two-holders`` — an address held by two pods, on one node or across nodes
  (what the container runtime believes each running pod holds, and since stop 49 what each pod
  namespace carries: ``SimWorld.note_carried``), or by a pod and another tool (an address of
  another tool's ENI, :data:`simulation.base.ANOTHER_TOOL`);
* ``ec2-double`` — an address or /28 prefix on two ENIs, or an address inside
  another ENI's prefix (:func:`ec2_problems`);
* ``pod-address-not-on-node`` — a running pod's address, or one a pod namespace carries, not assigned by EC2
  to an ENI attached to the pod's own instance (addresses reach the agent
  only from EC2, through IMDS, so the bound on the lag is zero: an address is
  on the node before any pod can get it);
* ``agent-double`` — one address in two datastores (:func:`agent_problems`);
* ``foreign-taken`` — another tool's ENI (:data:`simulation.base.ANOTHER_TOOL`, on a
  network card above 0) in an agent's datastore: never the pool's without
  ``WARMPOOL_MULTI_CARD`` (docs/safety.md rows 26 and 29), one step from a pod holding
  one of that tool's addresses;
* ``eni-leaked`` — an ENI tagged for the cluster left detached past the GC
  age plus two reconcile intervals (and the throttling slack);
* ``ledger-row-lost`` — a running node's ledger row forgotten or moved back;
* ``result-contradicts`` — one answer gives the node an address or /28 (``assigned``,
  ``attached``: a grant or a hand-back) and a later action of it says EC2 took it
  (``released``, or ``deleted`` of its ENI): the agent's ADDs run between a result's actions
  (:func:`simulation.node.result_problems`);
* ``stale-report-served``, ``lease``, ``allocator-raised`` (see
  :mod:`simulation.world`), ``agent-raised`` and ``report-invalid`` (:mod:`simulation.node`),
  ``cni-*`` (CNI edge cases: :mod:`simulation.node`, :mod:`simulation.events`);
* at the end: ``report-unserved`` (each live node's reports served, once its instance
  has been in DescribeInstances for the same bound),
  ``report-dead-lettered`` (a valid report in the DLQ without injected
  crashes to explain it), ``not-settled`` (pods waiting or the pool short of
  its targets though capacity allows), ``address-leaked`` (an address EC2
  assigned to a node that its agent does not know), ``queue-orphaned`` (the
  result queue of a terminated node left behind).
"""

from __future__ import annotations

import ipaddress
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from typing import Any, Protocol

from emulated.memstores import MemLedger
from functions.intake import SEQ_AHEAD_LIMIT
from functions.settings import Settings
from node_agent.agent import HOLD_REASON_META, ROUTED_HOLDER
from node_agent.controller import HELD_ALL_META
from node_agent.hostnet import veth_shaped, veths_of
from node_agent.records import UNKNOWN_HOLDER, UNROUTED_HOLDER
from simulation import subnets
from simulation.base import AGENT_EVERY_S, ANOTHER_TOOL
from simulation.hostile import Churner
from simulation.node import SimAgent
from warmpool import names
from warmpool.limits import InstanceLimits
from warmpool.pool import PoolConfig, ceiling

DETACHED_BOUND_S = 420.0
"""GC age (120 s) + two reconcile intervals + slack for throttled reconciles."""
SERVE_BOUND_S = 150.0
"""At the end, every report sent this long before must have been served."""


class ChecksWorld(subnets.SubnetsWorld, Protocol):
    """What the invariants read of the seed's world (:class:`simulation.world.SimWorld`
    satisfies it)."""

    @property
    def settings(self) -> Settings: ...

    @property
    def ledger(self) -> MemLedger: ...

    @property
    def dlq_url(self) -> str: ...

    @property
    def agents(self) -> dict[str, SimAgent]: ...

    @property
    def by_iid(self) -> dict[str, SimAgent]: ...

    @property
    def faults(self) -> Counter[str]: ...

    @property
    def terminated(self) -> dict[str, float]:
        """Instance -> when it was terminated."""
        ...

    @property
    def detached_since(self) -> dict[str, float]: ...

    @property
    def recorded(self) -> dict[str, tuple[str, int]]: ...

    @property
    def calls_by_iid(self) -> dict[str, list[tuple[float, str]]]: ...

    @property
    def churners(self) -> Sequence[Churner]: ...

    @property
    def crafted_bodies(self) -> set[str]: ...

    @property
    def version(self) -> int: ...

    checked: tuple[Any, ...]
    """What the last full check saw (it is skipped while nothing changed)."""

    def ledger_row(self, a: SimAgent) -> dict[str, Any] | None: ...


def _in_prefix(ip: str, prefixes: Iterable[str]) -> bool:
    a = ipaddress.IPv4Address(ip)
    return any(a in ipaddress.IPv4Network(p) for p in prefixes)


def ec2_problems(emu: Any) -> list[str]:
    """No address or prefix on two ENIs; no address inside another ENI's prefix."""
    problems = []
    seen: Counter[str] = Counter()
    prefixes: dict[str, str] = {}
    for e in emu.enis.values():
        seen.update(e.secondary)
        seen.update([e.primary_ip] if e.primary_ip else [])  # an EFA-only interface has none
        seen.update(e.prefixes)
        for p in e.prefixes:
            prefixes[p] = e.id
    problems += [f"address {a} on {n} ENIs" for a, n in seen.items() if n > 1]
    if prefixes:
        for e in emu.enis.values():
            for ip in [e.primary_ip, *e.secondary] if e.primary_ip else e.secondary:
                for p, owner in prefixes.items():
                    if owner != e.id and _in_prefix(ip, [p]):
                        problems.append(f"{ip} of {e.id} lies in prefix {p} of {owner}")
    return problems


def agent_problems(emu: Any, agents: dict[str, tuple[str, Any]]) -> list[str]:
    """No address in two datastores; every pod's address attached, in EC2, to its own instance.
    ``agents``: node -> (instance id, Datastore)."""
    problems = []
    holders: dict[str, str] = {}
    for node, (iid, ds) in agents.items():
        mine_ips: set[str] = set()
        mine_pfx: list[str] = []
        for e in emu.enis.values():
            if e.attachment is not None and e.attachment.instance_id == iid:
                mine_ips.update(e.secondary)
                mine_pfx.extend(e.prefixes)
        for pod in ds.pods():
            key = f"{node}/{pod.container_id}"
            if pod.ip in holders:
                problems.append(f"{pod.ip} held by {holders[pod.ip]} and {key}")
            holders[pod.ip] = key
            if pod.ip not in mine_ips and not _in_prefix(pod.ip, mine_pfx):
                problems.append(f"{key} holds {pod.ip}, which EC2 has not attached to {iid}")
    return problems


def _live(w: ChecksWorld) -> list[SimAgent]:
    return [a for a in w.agents.values() if not a.gone]


def pod_up(w: ChecksWorld, agent: SimAgent, cid: str, ip: str) -> None:
    for a in _live(w):
        for other, held in a.rt.up.items():
            if held == ip and (a is not agent or other != cid):
                w.violation("two-holders", f"{ip} given to {agent.name}/{cid} while {a.name}/{other} holds it")


def _owners(w: ChecksWorld) -> tuple[dict[str, str], list[tuple[str, str]]]:
    """address -> instance it is attached to (secondaries), and (prefix, instance)."""
    ips: dict[str, str] = {}
    pfx: list[tuple[str, str]] = []
    for e in w.emu.enis.values():
        if e.attachment is None:
            continue
        iid = e.attachment.instance_id
        for ip in e.secondary:
            ips[ip] = iid
        for p in e.prefixes:
            pfx.append((p, iid))
    return ips, pfx


def after_event(w: ChecksWorld) -> None:
    live = _live(w)
    w.emu.settle()
    key = (w.version, len(w.emu.enis), tuple(a.imds.history[-1][1] if a.imds.history else () for a in live))
    if key != w.checked:
        w.checked = key
        _state(w, live)
    _books(w)
    withheld_releases(w, live)


def withheld_releases(w: ChecksWorld, live: list[SimAgent]) -> None:
    """An address EC2 took while the node's agent withheld its pool (a restored checkpoint
    awaiting the allocator's word, ``SimWorld.check_release``) must not be free in it once a
    running agent no longer withholds: the verdict after such an Unassign is "not current" (its
    release-book entry answers a report past the copy) and the copy's free addresses are offered
    as of unknown origin (docs/agent.md, "A restored checkpoint waits for the allocator's word")."""
    for a in live:
        if not a.released_withheld or not a.alive or a.ds.withheld:
            continue
        taken, a.released_withheld = a.released_withheld, set()
        for e in a.ds.enis():
            for ip, addr in e.addrs.items():
                if ip in taken and not addr.in_use and addr.quarantined_at is None:
                    w.violation(
                        "released-not-offered",
                        f"EC2 took {addr.prefix or ip} from {a.name} while its agent withheld its pool "
                        "(a restored checkpoint awaiting the allocator's word), and the wait ended "
                        "with it free (taken back into the pool)",
                    )


def _carried_only(a: SimAgent) -> list[tuple[str, str]]:
    """(container, address) each pod namespace of the node carries that the runtime does not
    count as that pod's (a failed ADD's interface, a sandbox the runtime forgot)."""
    return [(cid, ip) for (cid, _), ip in sorted(a.pods.wired.items()) if a.rt.up.get(cid) != ip]


def _state(w: ChecksWorld, live: list[SimAgent]) -> None:
    # another tool's ENIs hold their addresses for that tool (instance-type's ``foreign``)
    foreign = {e.id: e for e in w.emu.enis.values() if e.description == ANOTHER_TOOL}
    holder = {ip: f"another tool's {e.id}" for e in foreign.values() for ip in e.secondary}
    for a in live:
        for cid, ip in a.rt.up.items():
            if ip in holder:
                w.violation("two-holders", f"{ip} held by {holder[ip]} and {a.name}/{cid}")
            holder[ip] = f"{a.name}/{cid}"
    for a in live:  # what namespaces carry beside (review 28, H2): two namespaces are note_carried's
        for cid, ip in _carried_only(a):
            if ip in holder and holder[ip].startswith("another tool"):
                w.violation("two-holders", f"{ip} held by {holder[ip]} and carried by the namespace of {a.name}/{cid}")
    probs = ec2_problems(w.emu)
    if probs:
        w.violation("ec2-double", "; ".join(probs[:3]))
    ips, pfx = _owners(w)
    for a in live:
        for cid, ip in [*a.rt.up.items(), *_carried_only(a)]:
            owner = ips.get(ip)
            if owner is None:
                owner = next((i for p, i in pfx if _in_prefix(ip, [p])), None)
            if owner != a.iid:
                where = "unassigned in EC2" if owner is None else f"on instance {owner}"
                w.violation("pod-address-not-on-node", f"{a.name}/{cid} holds {ip}, which is {where}")
    subnets.check_pods(w, live)
    probs = agent_problems(w.emu, {a.name: (a.iid, a.ds) for a in live})
    dup = [p for p in probs if " held by " in p]
    if dup:
        w.violation("agent-double", "; ".join(dup[:3]))
    for a in live:
        for mine in a.ds.enis():
            if mine.info.eni_id in foreign:
                w.violation(
                    "foreign-taken",
                    f"{a.name}'s datastore has another tool's {mine.info.eni_id} (read as card "
                    f"{mine.info.network_card}, device {mine.info.device_index}) with {sorted(mine.ips)[:4]}",
                )


def _books(w: ChecksWorld) -> None:
    now = w.now()
    tag = names.TAG_CLUSTER_NAME
    for e in w.emu.enis.values():
        if e.attachment is None and e.tags.get(tag) == "dst":
            since = w.detached_since.setdefault(e.id, now)
            if now - since > DETACHED_BOUND_S:
                w.violation("eni-leaked", f"{e.id} detached for {now - since:.0f}s (GC age {w.settings.gc_age_s:.0f}s)")
        else:
            w.detached_since.pop(e.id, None)
    _rows(w, now)
    if w.churners:
        _churn(w)
    for key, (iid, seq) in w.recorded.items():  # key: the ledger's key, the instance id
        a = w.by_iid.get(key)
        if a is None or a.gone or a.iid != iid:
            continue
        got = w.ledger_row(a)
        if got is None or int(got["last_seq"]) < seq:
            w.violation(
                "ledger-row-lost",
                f"{a.name} ({iid}, running): ledger row for report {seq} "
                f"{'forgotten' if got is None else 'moved back to ' + str(got['last_seq'])}",
            )


def _rows(w: ChecksWorld, now: float) -> None:
    """Ledger rows are keyed by instance id: one per instance of the cluster, never one per
    name a node sends (``ledger-rows``); no row's seq is further ahead of now than the allocator's
    bound lets a report be (``seq-poisoned``: it would eat the room the instance's later reports
    number into after a ``seq-floor``; a row ahead within it is an honest clock ahead, or costs
    its node one round trip: docs/safety.md, L1)."""
    rows = w.ledger._items
    tag = names.cluster_tag_key("dst")
    for (_, key), row in rows.items():
        inst = w.emu.instances.get(key)
        if inst is None or inst.tags.get(tag) not in ("owned", "shared"):
            w.violation(
                "ledger-rows",
                f"{len(rows)} ledger rows for {len(w.by_iid)} instances: row {key!r} "
                f"(node {row.get('node') or row.get('outcome', {}).get('node')}) is no instance of the cluster",
            )
        if int(row["last_seq"]) > int(now * 1000) + SEQ_AHEAD_LIMIT:
            w.violation(
                "seq-poisoned",
                f"ledger row {key} at seq {row['last_seq']}, more than "
                f"{SEQ_AHEAD_LIMIT} ahead of now ({int(now * 1000)})",
            )


def churn_episodes(w: ChecksWorld) -> int:
    """Release episodes (Unassign/Detach after the allocator last filled it) a churning
    instance may get: the allocator damps an instance once it flips ``flip_limit`` times within
    ``flip_window_s`` (an honest agent flips about once per release delay), so a churner gets
    at most the release half of the flips before that (churns here last less than ``damp_s``)."""
    return (w.settings.flip_limit + 1) // 2


def _churn(w: ChecksWorld) -> None:
    """``churn-undamped``: a rogue instance flipping every few seconds keeps getting its
    addresses taken away and given back (issue 12's churner: most of the account's buckets)."""
    for c in w.churners:
        episodes, last = 0, ""
        for _, name in w.calls_by_iid.get(c.iid, ()):
            # Delete is left out: it follows a Detach, or cleans up after a failed Attach
            kind = "release" if name.startswith(("unassign_", "detach_")) else "fill"
            if kind == "release" and last != "release":
                episodes += 1
            last = kind
        if episodes > churn_episodes(w):
            w.violation(
                "churn-undamped",
                f"churning instance {c.iid}: {episodes} release episodes "
                f"({c.sent} flipping reports), more than {churn_episodes(w)}",
            )


def _runs(a: SimAgent, *, adding: bool = True) -> Callable[[str], bool]:
    """Whether a link name is the veth (under any prefix) of an attachment the node's runtime
    runs, adds (unless ``adding`` is false) or deletes."""
    rt = a.rt
    cids = [*rt.up, *(rt.adding if adding else ()), *rt.deleting]
    return lambda name: any(veths_of(cid, "eth0", {name}, a.veth_prefix) for cid in cids)


def _routed(a: SimAgent) -> Callable[[str], bool]:
    """Whether the host routes an address through a link now. A link a start found with no route
    gets one only from a set-up of its attachment since (an ADD: ``setup_pod`` also makes the
    addresses of the pod's namespace exactly the one it recorded), so its pod carries no address
    the agent does not know any more (``add-cut``: the retried ADD of the attachment whose veth a
    killed ADD left with no route). Not one whose set-up moved the pod's interface off another
    address (``SimPods.moved``: the running pod had that one; review 22, R1)."""
    links = set(a.pods.routes.values()) - a.pods.moved
    return lambda name: name in links


def _founded(a: SimAgent) -> Callable[[str], bool]:
    """Whether a hold named for a link may still stand: its pod is one the runtime runs (its veth
    gone or not: seed 732), or its veth is on the host (an attachment whose ADD answer the runtime
    lost, ``cni-interrupted``: no DEL comes, and without a CNI GC its namespace carries the address
    for good, as its record would hold it)."""
    running = _runs(a)
    veths = set(a.pods.veth_of.values())
    return lambda name: running(name) or name in veths


def _reason_founded(a: SimAgent) -> Callable[[str], bool]:
    """Whether a link of a start's hold reason (``node_agent.datastore.HOLD_REASON``) still stands
    for a pod with no route: one :func:`_founded` names, which the host routes nothing through
    (:func:`_routed`), and that is not the veth of an attachment the runtime is only ADDing
    (``add-cut``: its retried ADD reads what the pod's interface carries and ends the hold's part
    for it, ``CniService._known_again``; one still waiting at the end never will)."""
    running = _runs(a, adding=False)
    routed = _routed(a)
    veths = set(a.pods.veth_of.values())
    adding = {v for (cid, _), v in a.pods.veth_of.items() if cid in a.rt.adding and cid not in a.rt.deleting}
    return lambda name: not routed(name) and (running(name) or (name in veths and name not in adding))


def unfounded_holds(a: SimAgent) -> list[str]:
    """Addresses the agent still holds, after the quiet period, for pods its runtime no longer
    runs and whose veths are gone (a leak: held for as long as the checkpoint lasts): a recovered
    holder named after such a veth (under any prefix); and ``?`` or ``unrouted`` holders with no
    other veth left in their hold's reason
    (``node_agent.datastore.HOLD_REASON``; each DEL takes its veth out, and the agent's loop then
    lets them go: ``node_agent.agent.lift_unfounded_holds``), or whose reason's links the host
    all routes now (:func:`_routed`: set up since, by ADDs of their attachments)."""
    running = _founded(a)
    stands = _reason_founded(a)
    reason = a.ds.meta.get(HOLD_REASON_META)
    reason_runs = isinstance(reason, list) and any(stands(link) for link in reason)
    out = []
    for h in a.ds.recovered_holders():
        if not h.eni_id:
            continue  # an address no ENI of the node has (another CNI's range): nothing held
        if h.holder in (UNKNOWN_HOLDER, UNROUTED_HOLDER):
            if not reason_runs:
                out.append(f"{h.ip} ({h.holder})")
        elif h.holder != ROUTED_HOLDER and veth_shaped(h.holder) and not running(h.holder):
            out.append(f"{h.ip} ({h.holder})")
    return out


def held_for_routeless_pods(a: SimAgent) -> bool:
    """The agent holds every address for pods with no route at its start (links of
    ``node_agent.datastore.HOLD_REASON``) that its runtime still runs, and that still have no
    route: they may carry any address. Not a pod whose veth a set-up has routed since
    (:func:`_routed`), nor one the runtime is still ADDing (``add-cut``: an ADD killed after the
    pod's veth; no DEL comes while the runtime retries the ADD, and the pod runs only once an ADD
    is answered, whose set-up gives its namespace its recorded address alone)."""
    if a.ds.meta.get(HELD_ALL_META) is None:
        return False  # an ``unrouted`` holder alone holds one address, not the pool (review 18, E1)
    reason = a.ds.meta.get(HOLD_REASON_META)
    running = _runs(a, adding=False)
    routed = _routed(a)
    return isinstance(reason, list) and any(running(link) and not routed(link) for link in reason)


def no_slot_for_a_28(emu: Any, iid: str, limits: InstanceLimits, pool: PoolConfig) -> bool:
    """In prefix mode: the node can take no /28 more, however many are whole in its subnets. It has
    as many ENIs on the default card as it may (``MAX_ENI`` too), none detaching, every slot of
    every ENI holds a single address or a /28, and at least one holds a single. The allocator
    plans by used slots (``warmpool.planner``: "instance at its ENI limit") and puts a /28 in no
    slot a single holds; the agent offers a free single back only as surplus above its targets
    (``warmpool.pool.compute``'s ``over_singles``), never to make room for a /28. So a node whose
    slots filled with singles while no /28 was whole keeps them, and a warm target above what they
    hold cannot be met (seed 7816). With custom networking the primary ENI holds no pod address
    and is left out of the slots (seed 4088). Never with ``multi_card`` (not judged here: left to
    the check as it was)."""
    if pool.multi_card:
        return False
    mine = [
        e
        for e in emu.enis.values()
        if e.attachment is not None
        and e.attachment.instance_id == iid
        and e.attachment.card == 0
        and e.description != ANOTHER_TOOL
    ]
    if any(e.attachment.status == "detaching" for e in mine):
        return False  # its device slot comes free: a new ENI may take a /28 there
    if len(mine) < limits.enis(pool.max_eni):
        return False
    if pool.custom_networking:
        mine = [e for e in mine if e.attachment.device_index != 0]
    if any(len(e.secondary) + len(e.prefixes) < limits.slots_per_eni for e in mine):
        return False
    return any(e.secondary for e in mine)


def holds_all_it_can(w: ChecksWorld, a: SimAgent) -> bool:
    """In prefix mode, a node that can hold no address more (:func:`no_slot_for_a_28`) and whose
    every address a pod holds: a pod waiting there waits for another's DEL, not for the allocator
    (seed 4088: custom networking, its two pod ENIs' ten slots filled with singles while no /28
    was whole in its subnet, ten pods running, eight more started). One free, quarantined or
    cooling address, or a slot free, and the waiting pods are judged. So are they (review 26) on a
    node the allocator gave singles while a /28 was whole in the call's subnet (P1: an allocator
    that fills slots with singles ends in this very state), where a record names no pod the runtime
    runs or deletes (P2: the agent's word alone), and where a waiting pod already holds an address
    (P3: it waits for its own ADD, not for another pod's DEL).

    An address a rebuilt checkpoint holds for a recovered holder (``container_id`` empty, the
    holder the pod's host veth, read from the host's wiring after the checkpoint was lost) is a
    pod's when the runtime says so: that veth is the veth of a pod it runs with that very address
    (``rt.up``), or of one it deletes (seed 1007923: sixteen pods ran on n0's /28 so held, every
    other address a pod's single). Never a veth of a pod only being ADDed (P3), one no pod of the
    runtime has or whose pod runs with another address (a leak: P2), nor a ``?``, ``unrouted``
    or ``routed`` holder (no pod named)."""
    if not w.plan.prefix_mode or not no_slot_for_a_28(w.emu, a.iid, a.ctl.limits, a.ctl.pool):
        return False
    if a.name in w.nets.singles_beside_28:
        return False
    if any(a.ds.lookup(cid, "eth0") is not None for cid in a.rt.adding):
        return False
    runs = set(a.rt.up) | set(a.rt.deleting)
    held = [(ip, x.container_id) for e in a.ds.enis() for ip, x in e.addrs.items()]
    recovered = _pods_recovered(a) if any(not cid for _, cid in held) else set()
    return all(cid in runs or (not cid and ip in recovered) for ip, cid in held)


def _pods_recovered(a: SimAgent) -> set[str]:
    """The addresses recovered holders hold for pods the runtime runs with them, or deletes
    (:func:`holds_all_it_can`)."""
    running: dict[str, list[str]] = {}
    for cid, ip in a.rt.up.items():
        running.setdefault(ip, []).append(cid)
    deleting = list(a.rt.deleting)
    out: set[str] = set()
    for h in a.ds.recovered_holders():
        if h.holder in (UNKNOWN_HOLDER, UNROUTED_HOLDER, ROUTED_HOLDER) or not veth_shaped(h.holder):
            continue
        if any(veths_of(cid, "eth0", {h.holder}, a.veth_prefix) for cid in running.get(h.ip, []) + deleting):
            out.add(h.ip)
    return out


def _dlq(w: ChecksWorld) -> list[dict[str, Any]]:
    """Every message in the DLQ (all pages)."""
    out: list[dict[str, Any]] = []
    client = w.sqs.client()
    while True:
        got = client.receive_message(QueueUrl=w.dlq_url, MaxNumberOfMessages=10).get("Messages", [])
        if not got:
            return out
        out += got


def at_end(w: ChecksWorld) -> None:
    now = w.now()
    crashes = sum(n for k, n in w.faults.items() if k.startswith("lambda-crash:") or k == "slow-invocation")
    # a terminated node's report is rightly refused; so is every crafted report
    dlq = [
        m for m in _dlq(w) if m["Body"] not in w.crafted_bodies and not any(iid in m["Body"] for iid in w.terminated)
    ]
    if dlq and not crashes:
        w.violation("report-dead-lettered", f"{len(dlq)} valid reports in the DLQ, e.g. {dlq[0]['Body'][:160]}")
    for a in _live(w):
        if not a.alive:
            # Every fault ends within the schedule, and the quiet period is longer than any
            # agent's restart: one still down now cannot start (review of the multi-card change,
            # F4: a start whose IMDS read fails on an EFA-only interface, every time).
            w.violation(
                "agent-down", f"{a.name}: not running after the quiet period (last crash: {a.last_crash or 'none'})"
            )
            continue
        # A report is due once it and the instance's listing in DescribeInstances are both
        # older than the bound: an instance EC2 does not show yet cannot be served (its
        # reports wait: ``instance-unlisted``), and it may stay unlisted past the run's end.
        listed_at = w.emu.unlisted.get(a.iid, float("-inf"))
        due = [seq for t, seq in a.sent if max(t, listed_at) <= now - SERVE_BOUND_S]
        last = w.ledger_row(a)
        if due and (last is None or int(last["last_seq"]) < max(due)):
            w.violation(
                "report-unserved",
                f"{a.name}: report {max(due)} sent {now - a.sent[-1][0]:.0f}s+ ago, "
                f"ledger at {last['last_seq'] if last else 'no row'}",
            )
        # every address EC2 put on the node is known to its agent (no leaked address or prefix),
        # but for a grant pushed since the agent last read its result queue: in flight, it could
        # not be known yet (seed 10039: a lean hold lapsed at 945.4 s, the grant pushed at
        # 945.5 s, the check at 946.6 s, the agent's next read at 947.4 s)
        known: set[str] = set()
        for mine in a.ds.enis():
            known.update(mine.ips)
            known.update(mine.prefixes)
        unpolled = a.grants_unpolled() if now - a.polled_at <= AGENT_EVERY_S else set()  # polling: no stall
        in_flight: set[str] = set()
        for e in w.emu.enis.values():
            if e.attachment is None or e.attachment.instance_id != a.iid:
                continue
            if e.attachment.status == "detaching":
                continue  # its addresses leave the node with it (``eni-leaked`` watches the rest)
            if e.description == ANOTHER_TOOL:
                continue  # another tool's addresses: never the agent's
            lost = [x for x in [*e.secondary, *e.prefixes] if x not in known]
            if lost and all(x in unpolled for x in lost):
                w.fault("address-leaked:grant-unpolled")
                in_flight.update(lost)
            elif lost:
                w.violation("address-leaked", f"{a.name}: EC2 has {lost[:4]} on {e.id}; the agent does not know them")
        # nothing held for pods the host no longer shows (a leak: held for as long as the checkpoint lasts)
        unfounded = unfounded_holds(a)
        if unfounded and a.cp.older_copy and all(u.endswith(("(?)", "(unrouted)")) for u in unfounded):
            # an older copy's hold reason naming pods DELeted since: a leak the agent accepts rather
            # than take a veth's absence for its pod's end (docs/safety.md, review 19's C1)
            w.fault("hold-unfounded:older-copy")
        elif unfounded:
            w.violation(
                "hold-unfounded",
                f"{a.name}: {unfounded[:4]} still held; the runtime runs no pod of theirs (none with no route)",
            )
        # settled to the targets, where capacity and the subnet allow (and EC2 has listed
        # the instance long enough for the allocator to serve it)
        if listed_at > now - SERVE_BOUND_S:
            continue
        lim = a.ctl.limits
        cap = ceiling(a.ctl.pool, lim)  # capacity, capped by max pods (the allocator's cap too)
        if w.plan.prefix_mode and subnets.whole_blocks(w, a.name) == 0:
            # no free /28 in its candidate subnets (a subnet world): it holds single addresses
            cap = min(cap, ceiling(replace(a.ctl.pool, prefix_mode=False), lim))
        wanted = len(a.rt.up) + len(a.rt.adding)
        if wanted + max(w.plan.warm_ip, w.plan.minimum_ip) + 16 >= cap or w.faults.get("fragmentation"):
            continue
        # Issue 24's subnet worlds: the node's candidate subnets may be full (pods then wait for
        # room: a new ENI takes one address besides its pods'), and while they hold fewer free
        # addresses than WARMPOOL_SCARCE_FREE the zone is scarce and no warm address is granted:
        # a node whose lean hold lapsed between two answers is short of warm targets the
        # allocator rightly leaves unmet (docs/allocator.md, "Scarce addresses shared fairly")
        free = subnets.room(w, a.name)
        if free is not None and free < len(a.rt.adding) + 2:
            w.fault("subnet-world:settled-unchecked:no-room")
            continue
        if held_for_routeless_pods(a):
            # Pods with no route at the start run on (a ``host-wiring`` flush broke them): the
            # agent cannot tell which addresses they carry, so it holds every address while they
            # run (docs/safety.md, "The host's wiring drawn"); a node at its ENI limit serves no
            # more pods meanwhile. Safe, not live: counted, not a violation.
            w.fault("host-wiring:held-for-routeless-pods")
            continue
        if a.rt.adding and holds_all_it_can(w, a):
            w.fault("settled-short:pods-wait-at-capacity")
        elif a.rt.adding:
            w.violation("not-settled", f"{a.name}: {len(a.rt.adding)} pods still wait for an address")
        d = a.ctl.delta(now)
        if free is not None and free < w.settings.scarce_free and not a.ctl.lean(now):
            w.fault("subnet-world:settled-unchecked:scarce")
            continue
        if (
            d.low
            and w.plan.prefix_mode
            and not a.ds.quarantined()
            and no_slot_for_a_28(w.emu, a.iid, a.ctl.limits, a.ctl.pool)
        ):
            # Its slots hold single addresses (filled while no /28 was whole) and it is at its ENI
            # limit: a /28 whole since (another node's given back) has no slot here, and the
            # allocator answers "instance at its ENI limit" (seed 7816). Pods that wait are still
            # judged above, and a node withholding a free address (quarantined) is not excused:
            # this excuses only the warm target above every address the node can hold.
            w.fault("settled-short:no-slot-for-a-28")
        elif d.low and d.short_units <= len(in_flight):
            # short by no more than a grant EC2 made and the agent could not have read yet (above)
            w.fault("settled-short:grant-unpolled")
        elif d.low:
            w.violation("not-settled", f"{a.name}: pool short of its targets after the quiet period ({d})")
        if d.over_units > 0 and not w.plan.prefix_mode and not a.ds.quarantined():
            # A zone at the scarce threshold makes nodes lean at any time, the quiet period too
            # (a lean hold lapses, a warm grant takes the zone below it again: seed 3684); the
            # surplus lean makes is offered only after the agent's release delay, as any
            # surplus: one lean for less than that (and a tick) is not due yet.
            if a.ctl.lean(a.now()) and now - a.lean_since < a.ctl.timing.release_delay_s + AGENT_EVERY_S:
                w.fault("subnet-world:settled-unchecked:lean-new")
                continue
            w.violation(
                "not-settled",
                f"{a.name}: {d.over_units} idle addresses above the targets, none offered, after the quiet period",
            )
    # one ledger row per live instance: the rows of terminated instances are removed
    for _, key in list(w.ledger._items):
        when = w.terminated.get(key)
        if when is not None and now - when >= w.settings.gc_age_s + 180:
            w.violation(
                "ledger-rows", f"ledger row of {key} still there {now - when:.0f}s after the instance terminated"
            )
    for iid, when in w.terminated.items():
        a = w.by_iid[iid]
        if w.agents.get(a.name) is not a or now - when < w.settings.gc_age_s + 180:
            continue  # replaced under the same name: its old queue is not tracked by name
        try:
            w.sqs.client().get_queue_url(QueueName=names.result_queue("dst", iid))
        except Exception:
            continue
        w.violation(
            "queue-orphaned",
            f"result queue of {a.name} ({iid}) still there {now - when:.0f}s after the instance terminated",
        )
