"""Review 11, R3: R1 across two answers to one report. ``_no_releases`` keeps a re-plan *inside one
run* from unassigning what the run handed back, and the agent's ``_gone_later`` guards one answer.
But a run deferred with ``resend`` (an ENI created and its attach throttled:
``functions/execute.py::_create``) pushes what it did so far, a hand-back included (``assigned`` x,
then ``deferred``), leaves the report unrecorded, and re-sends the *same* report
(``Allocator._execute`` -> ``Batch.defer`` -> ``_deliver``). The next run plans that report again,
as a first plan (release rules and all), on a fresher Describe (eventually consistent, row 7): it
may find the node no longer short and unassign x, answering ``released`` x in reply to the same
seq. The agent took x back into its pool with the first answer (``_may_reclaim``: it replies to
the newest report offering it), a pod got it, and the second answer's ``released`` keeps it for
the pod (never yanked) while EC2 has unassigned it: nothing on either side ties the two answers
(the agent's ``_not_late`` needs a later offer; the release book records no hand-back; the flip
damping counts both runs as the same report's "release"). Fixed: a run deferred with ``resend`` does
not say its hand-backs (``PlanExecutor._deferred_by``); two answers to one report never hand an
address back and then release it, which the agent, taking each answer at its word, relies on."""

from __future__ import annotations

from typing import Any

from emulated.ec2 import Ec2Config
from functions.errors import Throttled
from tests.helpers.allocate_world import AllocatorWorld
from warmpool import names
from warmpool.messages import Assigned, Released

LAG_S = 60.0


def test_a_resent_report_never_unassigns_what_its_first_runs_answer_handed_back() -> None:
    w = AllocatorWorld(ec2_config=Ec2Config(describe_lag_min_s=LAG_S, describe_lag_max_s=LAG_S))
    w.add_node("n1", "m5.large")  # 9 secondaries an ENI
    w.tag_primary("n1")
    c = w.emu.client()
    primary = w.enis("n1")[0].id
    c.assign_private_ip_addresses(NetworkInterfaceId=primary, SecondaryPrivateIpAddressCount=9)
    w.clock.advance(LAG_S + 1)
    x = list(w.enis("n1")[0].secondary)[-2:]
    # an ENI an earlier answer attached (the agent has it), which the lagging Describe does not show yet
    made = c.create_network_interface(
        SubnetId=w.subnets[0],
        SecondaryPrivateIpAddressCount=9,
        TagSpecifications=[
            {
                "ResourceType": "network-interface",
                "Tags": [
                    {"Key": names.TAG_CLUSTER_NAME, "Value": w.cluster},
                    {"Key": names.TAG_INSTANCE_ID, "Value": w.nodes["n1"]},
                    {"Key": names.TAG_MANAGED, "Value": "true"},
                ],
            }
        ],
    )
    c.attach_network_interface(
        NetworkInterfaceId=made["NetworkInterface"]["NetworkInterfaceId"], InstanceId=w.nodes["n1"], DeviceIndex=1
    )
    # 7 pods, WARM_IP_TARGET=5, two free addresses offered 20 s ago
    report = w.report(
        "n1", warm_ip=5, assigned=7, release=[{"eni_id": primary, "ips": x, "quarantined_at": w.clock.now() - 20}]
    )
    port = w.alloc.executor.ec2
    real = port.attach
    throttled: list[dict[str, Any]] = []

    def attach(**kw: Any) -> Any:
        if not throttled:
            throttled.append(kw)
            raise Throttled("RequestLimitExceeded", "throttled", "AttachNetworkInterface")
        return real(**kw)

    port.attach = attach  # type: ignore[method-assign]
    w.deliver([report])
    first = w.results("n1")
    handed = {k for r in first for a in r.actions if isinstance(a, Assigned) for k in a.ips}
    assert throttled and any(a.kind == "deferred" for r in first for a in r.actions), first
    # the fix: the run handed x back (a Reclaim, its book written) and then deferred with the
    # report re-sent; its answer does not say the hand-back, so the agent keeps x offered and the
    # re-sent report's run alone decides it (before: handed == set(x), then released x below)
    assert not handed & set(x), f"the deferred, re-sent answer says the hand-back of {sorted(handed & set(x))}"
    # the re-sent report is served again, on a fresher Describe
    w.emu.set_describe_lag(0.0, 0.0)
    w.drain()
    later = w.results("n1")
    released = {k for r in later for a in r.actions if isinstance(a, Released) for k in a.ips}
    handed |= {k for r in later for a in r.actions if isinstance(a, Assigned) for k in a.ips}
    on_node = set(w.enis("n1")[0].secondary)
    assert set(x) <= handed | released, f"x neither handed back nor released: {later}"
    assert not (handed & released), (
        f"answers to seq {report.seq}: the first handed back {sorted(handed)}, a later one says EC2 "
        f"unassigned {sorted(handed & released)} (on the node now: {sorted(set(x) & on_node)}); "
        f"later answers: {later}"
    )
