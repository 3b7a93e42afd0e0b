"""A pod an older checkpoint copy lacks, on an address that copy says EC2 released (the
simulation's seed 1780).

The address was offered and unassigned, then granted back and given to a pod; the process died
and the disk held a copy from between the two (its released filter names the address, the grant
that lifted it is in the lost writes), and the agent came back under another veth prefix (the
copy then passes the wiring check). The start holds the address for the pod the host routes it
to (``hold_wired``: a recovered holder, not attached yet), and IMDS lists it. Before, resync left
every released key a recovered holder names out of its read, so the holder never joined its
ENI's record: EC2 had the address on the node and the agent did not know it, for as long as the
checkpoint lasted (``address-leaked``). Now it joins the record, held by its holder; and since the
agent has EC2's ``released`` for it and no grant since, it never becomes free: when its holder
goes it is offered back as of unknown origin (the allocator unassigns and replaces it)."""

from __future__ import annotations

import shutil
from pathlib import Path

from node_agent.controller import AttachedEni
from tests.helpers.agent_world import cni, cni_add, give
from tests.helpers.controller import PRIMARY
from tests.helpers.first_start import Node, add_until, grant, grant_more
from tests.helpers.kernel_pods import KernelPods, answered_start, offers_and_adds
from warmpool.messages import AllocationResult, Released

X = "10.0.0.50"


def _released_then_regranted(n: Node, backup: Path) -> None:
    """``X`` granted, offered and unassigned (IMDS stops listing it), the node's state copied to
    ``backup`` (its released filter names ``X``), then ``X`` granted again and given to pod1."""
    agent = n.start()
    grant(n, agent, [X])
    agent.ds.quarantine(PRIMARY.eni_id, [X], [], n.clock.now())
    r = n.sqs.reports()[-1]
    give(
        agent,
        AllocationResult(
            cluster=r.cluster,
            node=r.node,
            instance_id=r.instance_id,
            in_reply_to=agent.controller.last_seq,
            actions=[Released(eni_id=PRIMARY.eni_id, ips=[X])],
        ),
    )
    cur = n.imds.enis[PRIMARY.eni_id]
    n.imds.enis[PRIMARY.eni_id] = AttachedEni(cur.info, [ip for ip in cur.ips if ip != X], list(cur.prefixes))
    n.step(60)  # a read without X: seen gone
    assert X in agent.ds.recently_gone(n.clock.now())[0], "setup: the released filter names X"
    shutil.copytree(n.state, backup)  # the older copy
    grant_more(n, agent, [X])  # EC2 gives X back: the grant lifts the filter (lost with the copy)
    assert add_until(n, agent, "pod1") == X
    n.step(30)


def test_a_recovered_holder_of_an_address_the_copy_says_released_joins_its_eni(tmp_path: Path) -> None:
    n = Node(tmp_path, adopt_launch_pool=False)
    host = n.pods = KernelPods()
    backup = tmp_path / "backup"
    try:
        _released_then_regranted(n, backup)
        host.reader = host.made_with = "wp"  # the veth prefix changed across the restart
        agent = answered_start(n, False, backup, WARMPOOL_VETH_PREFIX="wp")
        holder = agent.ds.recovered_holder(X)
        assert holder is not None and holder.startswith("eni"), f"setup: held for pod1's veth ({holder})"
        assert X in agent.ds.recently_gone(n.clock.now())[0], "setup: the copy's released filter names X"
        offered, others = offers_and_adds(n, agent, 4)  # two minutes: past two resyncs
        known = {ip for e in agent.ds.enis() for ip in e.ips}
        assert X in known, f"{X}: IMDS lists it, pod1 carries it, and the agent does not know it (leaked)"
        assert [h.eni_id for h in agent.ds.recovered_holders() if h.ip == X] == [PRIMARY.eni_id]
        assert X not in offered and X not in others, f"{X}: pod1 carries it"
        assert agent.controller.stats.held_not_in_imds == 0, "IMDS lists X: no alarm that it does not"
        assert cni(agent, "DEL", "pod1")["ok"]  # under "wp": ends the holder named after its "eni" veth
        assert agent.ds.recovered_holder(X) is None
        assert host.holders(X) == []
        unknown: set[str] = set()
        for k in range(6):
            r = n.step(30)
            if r is not None:
                unknown |= {ip for o in r.release if o.unknown for ip in o.ips}
            assert cni_add(agent, f"later{k}") != X, f"{X}: given to a new pod after pod1's DEL"
        assert X in unknown, f"{X}: released by EC2 in the copy and no grant since: offered as of unknown origin"
        assert host.holders(X) == []
    finally:
        n.stop()
