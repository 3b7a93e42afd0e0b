"""The one parser of IMDS's ENI tree (node_agent.imds.parse_interfaces), used by the agent's
IMDS client, the bench, the demo and the reliability cluster."""

from __future__ import annotations

import pytest

from node_agent.imds import ImdsError, parse_interfaces


def _tree(macs: dict[str, dict[str, str]]) -> dict[str, object]:
    return {"instance-id": "i-1", "network": {"interfaces": {"macs": macs}}}


PRIMARY = {
    "device-number": "0",
    "network-card": "0",
    "interface-id": "eni-a",
    "local-ipv4s": "10.0.0.5\n10.0.0.6\n10.0.0.7",
    "subnet-id": "subnet-1",
    "subnet-ipv4-cidr-block": "10.0.0.0/24",
}


def test_records_sorted_by_card_and_device_with_primary_split_off() -> None:
    second = {
        **PRIMARY,
        "device-number": "1",
        "interface-id": "eni-b",
        "local-ipv4s": "10.0.0.9\n",
        "ipv4-prefix": "10.0.1.0/28\n10.0.1.16/28",
    }
    out = parse_interfaces(_tree({"0a:00:00:00:00:02": second, "0a:00:00:00:00:01": PRIMARY}))
    assert [a.info.eni_id for a in out] == ["eni-a", "eni-b"]
    a, b = out
    assert (a.info.primary_ip, a.ips, a.prefixes) == ("10.0.0.5", ["10.0.0.6", "10.0.0.7"], [])
    assert (b.info.primary_ip, b.ips, b.prefixes) == ("10.0.0.9", [], ["10.0.1.0/28", "10.0.1.16/28"])
    assert (b.info.device_index, b.info.network_card, b.info.mac) == (1, 0, "0a:00:00:00:00:02")
    assert (b.info.subnet_id, b.info.subnet_cidr) == ("subnet-1", "10.0.0.0/24")


def test_as_served_over_http_whitespace_trailing_slash_upper_case_mac_and_no_network_card() -> None:
    leaves = {k: v + "\n" for k, v in PRIMARY.items() if k != "network-card"}
    (a,) = parse_interfaces(_tree({"0A:00:00:00:00:01/": leaves}))
    assert a.info.mac == "0a:00:00:00:00:01"
    assert a.info.network_card == 0
    assert a.info.eni_id == "eni-a" and a.ips == ["10.0.0.6", "10.0.0.7"]


def test_missing_required_leaf_is_an_imds_error_naming_it() -> None:
    leaves = {k: v for k, v in PRIMARY.items() if k != "subnet-id"}
    with pytest.raises(ImdsError, match="0a:00:00:00:00:01/subnet-id"):
        parse_interfaces(_tree({"0a:00:00:00:00:01": leaves}))


def test_no_interfaces_directory_is_no_enis() -> None:
    assert parse_interfaces({"instance-id": "i-1"}) == []


def test_an_interface_without_local_ipv4s_is_marked_no_ipv4_with_nothing_on_it() -> None:
    """An EFA-only interface: IMDS answers 404 for its ``local-ipv4s`` (review of the multi-card
    change, F4). Returned marked, never an error; its subnet leaves are optional."""
    efa = {"device-number": "0", "network-card": "1", "interface-id": "eni-efa"}
    out = parse_interfaces(_tree({"0a:00:00:00:00:01": PRIMARY, "0a:00:00:00:01:00": efa}))
    assert [(a.info.eni_id, a.no_ipv4) for a in out] == [("eni-a", False), ("eni-efa", True)]
    bare = out[1]
    assert (bare.info.primary_ip, bare.ips, bare.prefixes, bare.info.network_card) == ("", [], [], 1)
    (empty,) = parse_interfaces(_tree({"0a:00:00:00:01:00": {**efa, "local-ipv4s": "\n"}}))
    assert empty.no_ipv4


def test_prefixes_without_local_ipv4s_are_a_torn_tree_not_an_efa_only_interface() -> None:
    torn = {k: v for k, v in PRIMARY.items() if k != "local-ipv4s"} | {"ipv4-prefix": "10.0.1.0/28"}
    with pytest.raises(ImdsError, match="no local-ipv4s"):
        parse_interfaces(_tree({"0a:00:00:00:00:01": torn}))
