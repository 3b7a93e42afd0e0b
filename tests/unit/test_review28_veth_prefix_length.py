"""Review 28 of 273023c, asked: can a holder name be shared by two attachments?

A recovered holder is keyed by the attachment's host veth name, ``host_veth_name``: the veth
prefix, then the SHA-1 digest of the attachment, cut at 15 characters (IFNAMSIZ - 1). The agent
reads any prefix ``WARMPOOL_VETH_PREFIX`` (or ``AWS_VPC_K8S_CNI_VETHPREFIX``) sets, whatever its
length: one of 15 characters or more leaves no digest at all, and every attachment of the node has
one veth name and one holder, so the DEL of any of them (273023c: every address its holder holds,
attached or not) tears down and releases every recovered pod's address. One of 13 leaves two hex
digits (256 names: 300 attachments share some); any of 8 to 14 leaves fewer digits than
``VETH_DIGEST_MIN`` (``veths_of`` and ``veth_shaped`` assume a prefix of up to 7 characters,
docs/agent.md), and a node's pods share names by chance (4 digits: about one node in ten with 110
pods)."""

from __future__ import annotations

import pytest

from node_agent.config import ConfigError, load
from node_agent.hostnet import host_veth_name


@pytest.mark.parametrize("prefix", ["warmpoolpodveth1", "warmpoolpodve"])
def test_a_veth_prefix_that_leaves_attachments_one_name_is_refused(prefix: str) -> None:
    env = {"CLUSTER_NAME": "c", "MY_NODE_NAME": "n", "WARMPOOL_VETH_PREFIX": prefix}
    try:
        cfg = load(env)
    except ConfigError:
        return
    names = {host_veth_name(f"{k:064x}", "eth0", cfg.veth_prefix) for k in range(300)}
    assert len(names) == 300, f"{prefix!r} accepted: 300 attachments have {len(names)} veth names"


@pytest.mark.parametrize("prefix", ["eni", "wpod", "azv", "warmpod"])
def test_a_veth_prefix_of_up_to_seven_characters_is_taken(prefix: str) -> None:
    """The fix (stop 49): up to 7 characters (``node_agent.config.VETH_PREFIX_MAX``); 8 is refused."""
    cfg = load({"CLUSTER_NAME": "c", "MY_NODE_NAME": "n", "AWS_VPC_K8S_CNI_VETHPREFIX": prefix})
    assert cfg.veth_prefix == prefix
    with pytest.raises(ConfigError, match="AWS_VPC_K8S_CNI_VETHPREFIX"):
        load({"CLUSTER_NAME": "c", "MY_NODE_NAME": "n", "AWS_VPC_K8S_CNI_VETHPREFIX": prefix + "x" * (8 - len(prefix))})
