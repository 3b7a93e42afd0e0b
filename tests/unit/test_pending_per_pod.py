"""Pending demand per pod across its sandboxes (review 28, P3): a waiting ADD counts the pod the
runtime named in ``CNI_ARGS`` once, and a DEL of its sandbox leaves the pod counted for
``PENDING_LINGER_S`` (kubelet's back-off to the pod's next sandbox); an ADD that names no pod
counts as before, forgotten by its DEL."""

from __future__ import annotations

import pytest

from node_agent.cniserver import POD_KEY_MAX, pod_of
from node_agent.datastore import PENDING_LINGER_S, Datastore
from node_agent.records import EniInfo

PRIMARY = EniInfo("eni-00000000", 0, "0a:00:00:00:00:00", "10.0.0.10", "subnet-a", "10.0.0.0/24")


def full() -> Datastore:
    ds = Datastore(cooldown_s=30.0, pending_ttl_s=120.0)
    ds.add_eni(PRIMARY, 0.0)
    ds.add_addresses(PRIMARY.eni_id, ["10.0.0.11"])
    assert ds.assign("running", "eth0", "ns", 0.0) is not None
    return ds


def test_a_deleted_sandbox_of_a_waiting_pod_keeps_it_counted_through_the_back_off() -> None:
    ds = full()
    assert ds.assign("p~0", "eth0", "ns", 1.0, pod="default/p") is None
    assert ds.pending(1.0) == 1
    ds.release("p~0", "eth0", 11.0)  # containerd's DEL of the failed sandbox
    assert ds.pending(11.0) == 1 and ds.pending(11.0 + PENDING_LINGER_S - 0.1) == 1
    assert ds.pending_expires_at() == 11.0 + PENDING_LINGER_S
    assert ds.pending(11.0 + PENDING_LINGER_S) == 0, "a pod deleted meanwhile is not counted for ever"
    assert ds.pending_expires_at() is None


def test_two_sandboxes_of_one_pod_count_once_and_its_address_ends_the_wait() -> None:
    ds = full()
    assert ds.assign("p~0", "eth0", "ns", 1.0, pod="default/p") is None
    ds.release("p~0", "eth0", 11.0)
    assert ds.assign("p~1", "eth0", "ns", 23.0, pod="default/p") is None
    assert ds.pending(23.0) == 1, "the lingering pod and its next sandbox's ADD are one pod"
    assert ds.assign("q~0", "eth0", "ns", 24.0, pod="default/q") is None
    assert ds.assign("r", "eth0", "ns", 24.0) is None  # names no pod: counted by its attachment
    assert ds.pending(24.0) == 3
    ds.release("running", "eth0", 25.0)
    assert ds.assign("p~1", "eth0", "ns", 60.0, pod="default/p") is not None  # after the cooldown
    assert ds.pending(60.0) == 2, "p got its address: neither its ADD nor its old sandbox counts"


def test_a_delete_of_an_add_that_named_no_pod_forgets_it_at_once() -> None:
    ds = full()
    assert ds.assign("c", "eth0", "ns", 1.0) is None
    ds.release("c", "eth0", 2.0)
    assert ds.pending(2.0) == 0 and ds.pending_expires_at() is None


def test_a_delete_of_a_served_pod_or_after_the_ttl_adds_no_linger() -> None:
    ds = full()
    ds.release("running", "eth0", 1.0)  # held an address, never waited
    assert ds.pending(1.0) == 0
    assert ds.assign("p~0", "eth0", "ns", 2.0, pod="default/p") is None
    assert ds.pending(122.0) == 0  # stale: the runtime gave up on it
    ds.release("p~0", "eth0", 123.0)
    assert ds.pending(123.0) == 0


def test_forget_drops_what_waits() -> None:
    ds = full()
    assert ds.assign("p~0", "eth0", "ns", 1.0, pod="default/p") is None
    ds.release("p~0", "eth0", 2.0)
    assert ds.assign("q~0", "eth0", "ns", 3.0, pod="default/q") is None
    ds.forget()
    assert ds.pending(3.0) == 0 and ds.pending_expires_at() is None


@pytest.mark.parametrize(
    ("args", "pod"),
    [
        ("IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web-1;K8S_POD_INFRA_CONTAINER_ID=a", "default/web-1"),
        ("K8S_POD_NAME=web-1;K8S_POD_NAMESPACE=kube-system", "kube-system/web-1"),
        ("", ""),
        ("K8S_POD_NAME=web-1", ""),  # no namespace: not a pod's name
        ("K8S_POD_NAMESPACE=a/b;K8S_POD_NAME=c", ""),  # a slash would make two pods one
        ("K8S_POD_NAMESPACE=default;K8S_POD_NAME=" + "x" * POD_KEY_MAX, ""),
        ("K8S_POD_NAMESPACE=default;K8S_POD_NAME=a\nb", ""),
        ("garbage;;==;", ""),
        (None, ""),
        (["K8S_POD_NAME=x"], ""),
    ],
)
def test_pod_of_reads_the_runtimes_args(args: object, pod: str) -> None:
    assert pod_of(args) == pod
