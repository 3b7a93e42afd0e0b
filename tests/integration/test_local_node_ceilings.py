"""Issue 24's node ceilings through the local stack (emulated AWS over HTTP, the allocate function
behind the event-source mapping, agents with the stack's agent environment): ENIs on every network
card (the stack's ``multi_card``, ``local up --multi-card``: the functions' and the agents'
WARMPOOL_MULTI_CARD), and the kubelet's own max-pods, read by the agent from the node's kubelet
config and carried in its reports, lowering that node's ceiling and never raising the cluster's
(``max_pods``, ``local up --max-pods``)."""

from __future__ import annotations

import json
import time
from pathlib import Path

from emulated.local import LocalStack
from node_agent.identity import fetch_identity
from node_agent.imds import ImdsClient
from tests.helpers.local_nodes import FAST_STACK, agents_stopped_at_exit, launch, run_until
from tests.helpers.local_stack import report_for
from warmpool import names

CARD_0 = 98  # a p5.48xlarge's default card: 2 ENIs of 49 secondary addresses


def test_a_full_default_card_spills_onto_card_1_only_for_an_agent_wiring_every_card(tmp_path: Path) -> None:
    with (
        LocalStack(cluster="cards", multi_card=True, **FAST_STACK) as s,
        agents_stopped_at_exit() as nodes,
    ):
        wide = launch(s, "p5.48xlarge", tmp_path, WARM_IP_TARGET="110", WARM_ENI_TARGET="0")
        narrow = launch(
            s, "p5.48xlarge", tmp_path, WARM_IP_TARGET="110", WARM_ENI_TARGET="0", **{names.ENV_MULTI_CARD: "false"}
        )
        nodes += [wide, narrow]
        assert wide.agent.cfg.pool.multi_card  # the stack's agent environment says so
        assert run_until(nodes, lambda: wide.addresses() >= 110 and narrow.addresses() >= CARD_0, timeout=40), (
            wide.addresses(),
            narrow.addresses(),
        )
        slots = [(e.attachment.card, e.attachment.device_index) for e in wide.enis()]
        assert slots[:2] == [(0, 0), (0, 1)] and (1, 0) in slots, slots
        on_card_1 = [e for e in wide.enis() if e.attachment.card == 1]
        assert sum(len(e.secondary) for e in on_card_1) == wide.addresses() - CARD_0
        # the agent takes them into its pool: every ENI EC2 shows, card 1's with its addresses
        in_ec2 = {e.id: set(e.secondary) for e in wide.enis()}

        def pooled() -> dict[str, set[str]]:
            return {e.info.eni_id: set(e.ips) for e in wide.agent.ds.enis()}

        assert run_until(nodes, lambda: pooled() == in_ec2, timeout=20), (pooled(), in_ec2)
        assert [e.info.network_card for e in wide.agent.ds.enis()].count(1) == len(on_card_1)
        # the node whose agent does not wire cards above 0 stays on card 0, full
        time.sleep(2)
        assert {e.attachment.card for e in narrow.enis()} == {0}
        assert narrow.addresses() == CARD_0


def test_the_kubelets_max_pods_caps_its_node_alone(tmp_path: Path) -> None:
    """Two nodes of one type, one kubelet configured with maxPods 12 (a node group's own value):
    its agent reads it from the node, reports it, and ends with 12 addresses; the other, with no
    kubelet value, gets its whole warm target."""
    config = tmp_path / "kubelet" / "config.json"
    config.parent.mkdir()
    config.write_text(json.dumps({"kind": "KubeletConfiguration", "maxPods": 12}))
    with (
        LocalStack(cluster="kmp", **FAST_STACK) as s,
        agents_stopped_at_exit() as nodes,
    ):
        capped = launch(
            s, "m5.large", tmp_path, WARM_IP_TARGET="20", WARM_ENI_TARGET="0", WARMPOOL_KUBELET_CONFIG=str(config)
        )
        free = launch(s, "m5.large", tmp_path, WARM_IP_TARGET="20", WARM_ENI_TARGET="0")
        nodes += [capped, free]
        assert capped.agent.kubelet.max_pods == 12 and free.agent.kubelet.max_pods is None
        assert run_until(nodes, lambda: capped.addresses() >= 12 and free.addresses() >= 20), (
            capped.addresses(),
            free.addresses(),
        )
        time.sleep(2)  # nothing more comes
        assert capped.addresses() == 12 and free.addresses() == 20


def test_a_reported_kubelet_max_pods_lowers_the_ceiling_and_never_raises_it() -> None:
    """The allocator's side, through the stack's queue and function: a report asking for more than
    its kubelet allows is planned to the kubelet's value; one whose kubelet allows more than the
    cluster's max_pods is planned to the cluster's."""
    with LocalStack(cluster="kmp2", max_pods=16, **FAST_STACK) as s:
        out, sqs = s.outputs, s.client("sqs")
        tags = {names.cluster_tag_key("kmp2"): "owned"}
        low = s.ec2.run_instance("m5.large", s.subnet_ids[0], tags=tags)
        high = s.ec2.run_instance("m5.large", s.subnet_ids[0], tags=tags)
        for iid, kubelet in ((low, 10), (high, 110)):
            ident = fetch_identity(ImdsClient(f"{out['imds_base']}/{iid}"))
            body = report_for(
                s, iid, 1, ident, targets={"warm_ip": 25, "warm_eni": 0}, pending_demand=25, kubelet_max_pods=kubelet
            )
            sqs.send_message(QueueUrl=out["reports_queue_url"], MessageBody=body)

        def held(iid: str) -> int:
            return sum(
                len(e.secondary)
                for e in s.ec2.enis.values()
                if e.attachment is not None and e.attachment.instance_id == iid
            )

        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not (held(low) >= 10 and held(high) >= 16):
            time.sleep(0.1)
        time.sleep(1)
        assert (held(low), held(high)) == (10, 16)
