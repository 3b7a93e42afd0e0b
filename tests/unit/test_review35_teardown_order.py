"""Review 35 of review 34's N1/N2 fix (``teardown_pod`` removes an address's rules and ``/32`` route
before the attachment's veth pair; ``CniService._unrouted_carried`` reads the attachment's veths of
earlier prefixes the start's hold reason names). What was checked and found sound, pinned here on
the in-memory kernel (``tests/helpers/fake_kernel.py``):

* a pair removal that fails after the rules and route went leaves the pair, its pod's interface
  still carrying the address (what the retried DEL reads), and the retry finishes the teardown;
* a teardown of one attachment's address touches no other pod's rules, route or pair, under this
  prefix or an earlier one;
* an earlier prefix's read names only the DEL's own attachment's pair: another attachment's veth
  of that prefix is not the attachment's (``veths_of``/``veth_prefix_of``), and the pod's interface
  is read only as the peer of a veth named after this attachment (``pod_addresses``).
"""

from __future__ import annotations

import errno

import pytest

from node_agent.hostnet import (
    FROM_POD_PRIORITY,
    TO_POD_PRIORITY,
    host_veth_name,
    pod_addresses,
    setup_pod,
    teardown_pod,
    veth_prefix_of,
    veths_of,
)
from node_agent.netlink import MAIN_TABLE
from tests.helpers.fake_kernel import FakeKernel, FakeNetlink, install

P_NS, Q_NS = "/var/run/netns/p", "/var/run/netns/q"
X, Y = "10.0.1.42", "10.0.1.43"


class LinkDelFails(FakeNetlink):
    fail = 1

    def link_del(self, index: int) -> None:
        if LinkDelFails.fail > 0:
            LinkDelFails.fail -= 1
            raise OSError(errno.ENOBUFS, "link del: No buffer space available")
        super().link_del(index)


def _wired(kernel: FakeKernel, cid: str, ns: str, ip: str, prefix: str = "eni") -> None:
    kernel.namespace(ns)
    setup_pod(kernel.open(""), ns, "eth0", cid, ip, 2, 9001, prefix)


def _traces(node: FakeNetlink, ip: str) -> tuple[list[str], list[str]]:
    cidr = f"{ip}/32"
    rules = [
        str(r)
        for r in node.rules()
        if (r.src == cidr or r.dst == cidr) and r.priority in (TO_POD_PRIORITY, FROM_POD_PRIORITY)
    ]
    return rules, [r.dst for r in node.routes(MAIN_TABLE) if r.dst == cidr]


def test_a_failed_pair_removal_leaves_the_pair_to_read_and_the_retry_finishes(monkeypatch: pytest.MonkeyPatch) -> None:
    kernel = install(monkeypatch)
    _wired(kernel, "p", P_NS, X)
    node = LinkDelFails(kernel, "")
    LinkDelFails.fail = 1
    with pytest.raises(OSError):
        teardown_pod(node, "p", "eth0", X, "eni")
    assert _traces(node, X) == ([], []), "the rules and the route go first"
    assert pod_addresses(node, P_NS, "eth0", "p", "eni") == [X], "the pair stays for the retried DEL to read"
    teardown_pod(node, "p", "eth0", X, "eni")
    assert pod_addresses(node, P_NS, "eth0", "p", "eni") is None
    assert node.link_by_name(host_veth_name("p", "eth0", "eni")) is None


@pytest.mark.parametrize("q_prefix", ["eni", "wp"])
def test_a_teardown_touches_no_other_pod(monkeypatch: pytest.MonkeyPatch, q_prefix: str) -> None:
    kernel = install(monkeypatch)
    _wired(kernel, "p", P_NS, X, "wp")
    _wired(kernel, "q", Q_NS, Y, q_prefix)
    node = kernel.open("")
    before = _traces(node, Y)
    teardown_pod(node, "p", "eth0", X, "eni")
    assert _traces(node, X) == ([], [])
    assert _traces(node, Y) == before and before[1] == [f"{Y}/32"]
    assert pod_addresses(node, Q_NS, "eth0", "q", q_prefix) == [Y]


def test_an_earlier_prefix_read_names_only_the_attachment_s_own_pair(monkeypatch: pytest.MonkeyPatch) -> None:
    kernel = install(monkeypatch)
    _wired(kernel, "p", P_NS, X, "eni")
    _wired(kernel, "q", Q_NS, Y, "wp")
    node = kernel.open("")
    q_old = host_veth_name("q", "eth0", "wp")
    assert veths_of("p", "eth0", {q_old}, "eni") == set()
    assert veth_prefix_of(q_old, "p", "eth0") is None
    # the DEL's namespace read under a prefix its pair is not named by: nothing, never q's address
    assert pod_addresses(node, P_NS, "eth0", "p", "wp") is None
    assert pod_addresses(node, Q_NS, "eth0", "p", "wp") is None, "q's interface read for p"
