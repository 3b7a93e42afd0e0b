"""Issue 24's subnets through the local stack (``warmpool local up``'s process layout: emulated
AWS over HTTP, the allocate function behind the stack's event-source mapping, agents with the
stack's agent environment talking SQS and IMDS over HTTP): subnets found by the VPC CNI's tags,
a subnet made later and tagged taken without a restart, clusters kept apart by the cluster-scoped
tag, and custom networking (``--custom-network``: the zone's pod subnet and security group, the
primary ENI left out)."""

from __future__ import annotations

import ipaddress
import time
from pathlib import Path

import pytest

from emulated.local import LocalStack, options_from_args
from tests.helpers.local_nodes import FAST_STACK, Node, agents_stopped_at_exit, launch, run_until
from warmpool import names

CNI_CLUSTER_TAG = "cni.networking.k8s.aws/cluster/"


def _in(address: str, cidr: str) -> bool:
    return ipaddress.IPv4Address(address) in ipaddress.IPv4Network(cidr)


def _serve(nodes: list[Node], pods: dict[str, int], timeout: float = 40.0) -> bool:
    """ADD pods on each node (``pods``: node's instance id -> how many) until all are answered."""

    def done() -> bool:
        for n in nodes:
            for j in range(pods.get(n.instance_id, 0)):
                name = f"{n.instance_id}-pod-{j}"
                if name not in n.pods:
                    n.add(name)
        return all(len(n.pods) >= pods.get(n.instance_id, 0) for n in nodes)

    return run_until(nodes, done, timeout=timeout)


def test_subnets_found_by_tag_a_later_one_taken_without_a_restart_and_clusters_kept_apart(tmp_path: Path) -> None:
    """Agents drive it: before any subnet is tagged for pods, new ENIs go in the cluster's own
    subnet; then, in the running stack's VPC and zone, a subnet scoped to another cluster, an
    untagged one and one tagged for pods (made after start; the smallest, so free addresses alone
    would not pick it), and the node's own subnet tagged 0: the next new ENIs land in the tagged one
    alone, served by the same warm allocator (no restart)."""
    from functions import allocate

    with (
        LocalStack(cluster="disc2", extra_env=(("WARMPOOL_SUBNET_CACHE_TTL_S", "1"),), **FAST_STACK) as s,
        agents_stopped_at_exit() as nodes,
    ):
        own = s.subnet_ids[0]
        zone = s.ec2.subnets[own].az
        ec2 = s.client("ec2")
        node = launch(s, "m5.large", tmp_path, WARM_IP_TARGET="1", WARM_ENI_TARGET="0")
        nodes.append(node)
        # 12 pods: more than the primary ENI's 9 secondary addresses, so one new ENI
        assert _serve(nodes, {node.instance_id: 12}), node.pods
        assert [e.subnet_id for e in node.enis()] == [own, own]
        warm = allocate._allocator
        assert warm is not None

        def subnet(cidr: str, tags: dict[str, str]) -> str:
            spec = [{"ResourceType": "subnet", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}]
            return str(
                ec2.create_subnet(
                    VpcId=s.outputs["vpc_id"], CidrBlock=cidr, AvailabilityZone=zone, TagSpecifications=spec
                )["Subnet"]["SubnetId"]
            )

        # Larger than the tagged one, so free addresses alone would pick it: only its scope keeps it out.
        theirs = subnet("10.0.128.0/18", {names.TAG_SUBNET_ROLE: "1", CNI_CLUSTER_TAG + "other": "1"})
        untagged = subnet("10.0.224.0/19", {})  # no role tag: not used while a tagged one exists
        ours = subnet("10.0.192.0/20", {names.TAG_SUBNET_ROLE: "1", CNI_CLUSTER_TAG + "disc2": "1"})
        ec2.create_tags(Resources=[own], Tags=[{"Key": names.TAG_SUBNET_ROLE, "Value": "0"}])
        time.sleep(1.2)  # the allocator's subnet cache (1 s here) expires
        # 10 more pods: the second ENI's 9 free slots are used up, then a third ENI
        assert _serve(nodes, {node.instance_id: 22}), len(node.pods)
        subnets = [e.subnet_id for e in node.enis()]
        assert subnets == [own, own, ours], subnets
        assert theirs not in subnets and untagged not in subnets
        cidr = s.ec2.subnets[ours].cidr
        assert sum(_in(ip, cidr) for ip in node.pods.values()) >= 1
        assert allocate._allocator is warm  # the same container: no restart, no redeploy


def test_custom_networking_puts_pods_in_the_zones_subnet_and_never_on_the_primary_eni(tmp_path: Path) -> None:
    """``LocalStack(custom_network=...)`` (``local up --custom-network AZ=CIDR``) as the stack's
    ``custom_network`` context: the zone's pod subnet and security group get every new ENI of a
    node whose agent runs with AWS_VPC_K8S_CNI_CUSTOM_NETWORK_CFG (the stack sets it for nodes of a
    mapped zone), whose primary ENI takes no pod; a node of the zone with it off keeps out of the
    pod subnet."""
    with (
        LocalStack(cluster="cnet", custom_network=(("us-east-1a", "10.0.128.0/20"),), **FAST_STACK) as s,
        agents_stopped_at_exit() as nodes,
    ):
        mapped = s.outputs["custom_network"]
        assert list(mapped) == ["us-east-1a"]
        (pod_subnet,) = mapped["us-east-1a"]["subnets"]
        (group,) = mapped["us-east-1a"]["security_groups"]
        own = s.subnet_ids[0]
        assert s.ec2.subnets[own].az == "us-east-1a" and s.ec2.subnets[pod_subnet].cidr == "10.0.128.0/20"
        custom = launch(s, "m5.large", tmp_path, subnet=own, WARM_IP_TARGET="1", WARM_ENI_TARGET="0")
        plain = launch(
            s,
            "m5.large",
            tmp_path,
            subnet=own,
            WARM_IP_TARGET="1",
            WARM_ENI_TARGET="0",
            **{names.AGENT_ENV_CUSTOM_NETWORKING: "false"},
        )
        nodes += [custom, plain]
        assert custom.agent.cfg.pool.custom_networking and not plain.agent.cfg.pool.custom_networking
        # 12 pods each: a custom node needs two pod ENIs (its primary takes none), a plain node one
        assert _serve(nodes, {custom.instance_id: 12, plain.instance_id: 12}), (custom.pods, plain.pods)
        primary, *pod_enis = custom.enis()
        assert primary.secondary == [] and primary.prefixes == []
        assert len(pod_enis) == 2
        assert all(e.subnet_id == pod_subnet and e.groups == [group] for e in pod_enis), pod_enis
        pod_cidr = s.ec2.subnets[pod_subnet].cidr
        assert all(_in(ip, pod_cidr) for ip in custom.pods.values()), custom.pods
        assert all(e.subnet_id == own for e in plain.enis())
        assert not any(_in(ip, pod_cidr) for ip in plain.pods.values())


def test_local_up_takes_the_stacks_issue_24_settings() -> None:
    o = options_from_args(
        [
            "--custom-network",
            "us-east-1a=10.0.128.0/20",
            "--named-placement",
            "--multi-card",
            "--scarce-free",
            "16",
        ]
    )
    assert o.custom_network == (("us-east-1a", "10.0.128.0/20"),)
    assert (o.named_placement, o.multi_card, o.scarce_free) == (True, True, 16)
    with LocalStack(o, cluster="opts", run_functions=False, set_process_env=False) as s:
        env = s.function_env()
        assert env[names.ENV_NAMED_PLACEMENT] == "true" and env[names.ENV_MULTI_CARD] == "true"
        assert env[names.ENV_SCARCE_FREE] == "16"
        from functions.settings import Settings

        settings = Settings.model_validate(env)
        assert settings.custom_network == s.outputs["custom_network"]
        assert settings.scarce_free == 16 and settings.multi_card and settings.named_placement
        iid = s.ec2.run_instance("p5.48xlarge", s.subnet_ids[0])
        agent = s.agent_env(iid)
        assert agent[names.ENV_MULTI_CARD] == "true" and agent[names.AGENT_ENV_CUSTOM_NETWORKING] == "true"
        other_zone = s.agent_env(s.ec2.run_instance("m5.large", s.subnet_ids[1]))
        assert other_zone[names.AGENT_ENV_CUSTOM_NETWORKING] == "false"


@pytest.mark.parametrize(
    "argv",
    [
        ["--custom-network", "us-east-1a=10.1.0.0/20"],  # outside the VPC
        ["--custom-network", "us-east-1a=10.0.0.0/20"],  # overlaps the first pod subnet
        ["--custom-network", "10.0.128.0/20"],
        ["--scarce-free", "-1"],
        ["--scarce-free", "1000001"],
    ],
)
def test_bad_issue_24_flags_are_refused_before_anything_starts(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as e:
        options_from_args(argv)
    assert e.value.code == 2
