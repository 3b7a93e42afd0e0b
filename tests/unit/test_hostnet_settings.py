"""Node-level host networking without a kernel: the settings (VPC CNI names), the nftables
rules they lead to, and ENIs tagged node.k8s.amazonaws.com/no_manage=true left alone."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from emulated.clock import VirtualClock
from node_agent.config import ConfigError, HostNetSettings, load, load_hostnet
from node_agent.controller import AttachedEni, PoolController
from node_agent.datastore import Datastore
from node_agent.nodenet import NodeSpec, desired_rules, render
from node_agent.records import EniInfo, NodeIdentity
from node_agent.unmanaged import BACKOFF_MAX_S, BACKOFF_S, NO_MANAGE_TAG, SkipUnmanaged
from tests.helpers.controller import TIMING, RecordingHost
from warmpool.limits import known
from warmpool.pool import PoolConfig

# --- settings --------------------------------------------------------------------------------


def test_defaults_are_the_vpc_cnis() -> None:
    s = load_hostnet({})
    assert (s.external_snat, s.randomize_snat, s.node_port_support, s.connmark, s.configure_rp_filter) == (
        False,
        "prng",
        True,
        0x80,
        True,
    )
    assert s.exclude_snat_cidrs == () and s.pod_mtu == 9001 == s.eni_mtu


def test_pod_mtu_defaults_to_the_eni_mtu_and_can_differ() -> None:
    assert load_hostnet({"AWS_VPC_ENI_MTU": "1500"}).pod_mtu == 1500
    assert load_hostnet({"AWS_VPC_ENI_MTU": "9001", "POD_MTU": "1400"}).pod_mtu == 1400


def test_settings_parse_and_show_in_config() -> None:
    env = {
        "CLUSTER_NAME": "c",
        "AWS_VPC_K8S_CNI_EXTERNALSNAT": "true",
        "AWS_VPC_K8S_CNI_EXCLUDE_SNAT_CIDRS": "172.16.0.0/12, 192.168.1.7",
        "AWS_VPC_K8S_CNI_RANDOMIZESNAT": "hashrandom",
        "AWS_VPC_K8S_CNI_CONNMARK": "0x100",
        "AWS_VPC_CNI_NODE_PORT_SUPPORT": "false",
    }
    cfg = load(env)
    s = cfg.hostnet
    assert s.external_snat and s.randomize_snat == "hashrandom" and s.connmark == 0x100
    assert s.exclude_snat_cidrs == ("172.16.0.0/12", "192.168.1.7/32") and not s.node_port_support
    pub = cfg.public()
    assert pub["AWS_VPC_K8S_CNI_EXTERNALSNAT"] is True and pub["AWS_VPC_K8S_CNI_CONNMARK"] == "0x100"


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("AWS_VPC_K8S_CNI_EXTERNALSNAT", "maybe"),
        ("AWS_VPC_K8S_CNI_EXCLUDE_SNAT_CIDRS", "10.0.0.0/8,not-a-cidr"),
        ("AWS_VPC_K8S_CNI_RANDOMIZESNAT", "always"),
        ("AWS_VPC_K8S_CNI_CONNMARK", "0"),
        ("POD_MTU", "100"),
    ],
)
def test_bad_values_name_the_variable(name: str, value: str) -> None:
    with pytest.raises(ConfigError, match=name):
        load_hostnet({name: value})


def test_veth_prefix_honours_the_vpc_cni_name() -> None:
    assert load({"CLUSTER_NAME": "c", "AWS_VPC_K8S_CNI_VETHPREFIX": "cali"}).veth_prefix == "cali"
    assert (
        load({"CLUSTER_NAME": "c", "AWS_VPC_K8S_CNI_VETHPREFIX": "cali", "WARMPOOL_VETH_PREFIX": "wp"}).veth_prefix
        == "wp"
    )


# --- the rules -------------------------------------------------------------------------------


def spec(**kw: Any) -> NodeSpec:
    return NodeSpec("0a:00:00:00:00:01", "10.0.0.10", ("10.0.0.0/16", "100.64.0.0/16"), HostNetSettings(**kw))


@pytest.mark.parametrize(("mode", "flag"), [("prng", " fully-random"), ("hashrandom", " random"), ("none", "")])
def test_randomize_snat_chooses_the_port_flag(mode: str, flag: str) -> None:
    post = desired_rules(spec(randomize_snat=mode), "eth0")["postrouting"]
    assert post == [
        f'oifname != "vlan*" ip daddr != {{ 10.0.0.0/16, 100.64.0.0/16 }} '
        f"fib daddr type != local snat to 10.0.0.10{flag}"
    ]


def test_every_vpc_cidr_and_exclusion_is_exempt_and_marks_are_restored_for_pods() -> None:
    rules = desired_rules(spec(exclude_snat_cidrs=("172.16.0.0/12",)), "ens5")
    pre = rules["prerouting"]
    exempt = "{ 10.0.0.0/16, 100.64.0.0/16, 172.16.0.0/12 }"
    assert pre[0] == f'iifname "eni*" ct state new ip daddr != {exempt} ct mark set ct mark | 0x00000080'
    assert pre[1] == 'iifname "ens5" fib daddr type local ct mark set ct mark | 0x00000080'
    assert 'iifname "eni*" meta mark set ct mark & 0x00000080' in pre
    assert exempt in rules["postrouting"][0]


def test_external_snat_without_nodeport_support_needs_no_table() -> None:
    assert desired_rules(spec(external_snat=True, node_port_support=False), "eth0") == {}
    nodeport_only = desired_rules(spec(external_snat=True), "eth0")
    assert "postrouting" not in nodeport_only and len(nodeport_only["prerouting"]) == 3


def test_render_tags_every_rule_with_the_digest_of_the_whole_set() -> None:
    script, digest = render(desired_rules(spec(), "eth0"))
    assert script.count(f'comment "warmpool:{digest}:') == 5
    _, other = render(desired_rules(spec(randomize_snat="none"), "eth0"))
    assert other != digest


# --- ENIs tagged no_manage ---------------------------------------------------------------------

ID = NodeIdentity("demo", "node-1", "i-0123456789abcdef0", "m5.large", "us-east-1a")
PRIMARY = EniInfo("eni-00000000", 0, "0a:00:00:00:00:00", "10.0.0.10", "subnet-a", "10.0.0.0/24")
MANAGED = EniInfo("eni-00000001", 1, "0a:00:00:00:00:01", "10.0.0.20", "subnet-a", "10.0.0.0/24")
TAGGED = EniInfo("eni-00000002", 2, "0a:00:00:00:00:02", "10.0.0.30", "subnet-a", "10.0.0.0/24")


class Imds:
    def __init__(self, *enis: AttachedEni) -> None:
        self.enis = list(enis)

    def identity(self) -> Any:
        return ID

    def interfaces(self) -> list[AttachedEni]:
        return list(self.enis)


class Ec2:
    """DescribeNetworkInterfaces filtered by attachment.instance-id, one page per ENI (pagination)."""

    def __init__(self, tags: dict[str, dict[str, str]], fail: int = 0) -> None:
        self.tags = tags
        self.calls: list[dict[str, Any]] = []
        self.fail = fail

    def describe_network_interfaces(self, **kw: Any) -> dict[str, Any]:
        self.calls.append(kw)
        if self.fail:
            self.fail -= 1
            raise RuntimeError("RequestLimitExceeded")
        assert kw["Filters"] == [{"Name": "attachment.instance-id", "Values": [ID.instance_id]}]
        ids = sorted(self.tags)
        i = int(kw.get("NextToken", "0"))
        page: dict[str, Any] = {
            "NetworkInterfaces": [
                {"NetworkInterfaceId": ids[i], "TagSet": [{"Key": k, "Value": v} for k, v in self.tags[ids[i]].items()]}
            ]
        }
        if i + 1 < len(ids):
            page["NextToken"] = str(i + 1)
        return page


def world(fail: int = 0, clock: VirtualClock | None = None) -> tuple[Imds, Ec2, SkipUnmanaged]:
    imds = Imds(
        AttachedEni(PRIMARY, ["10.0.0.11"], []),
        AttachedEni(MANAGED, ["10.0.0.21"], []),
        AttachedEni(TAGGED, ["10.0.0.31"], []),
    )
    ec2 = Ec2(
        {
            PRIMARY.eni_id: {NO_MANAGE_TAG: "true"},  # ignored on the primary ENI (as ipamd does)
            MANAGED.eni_id: {NO_MANAGE_TAG: "false", "Name": "x"},
            TAGGED.eni_id: {NO_MANAGE_TAG: "true"},
        },
        fail=fail,
    )
    return imds, ec2, SkipUnmanaged(imds, ec2, clock=clock or VirtualClock())


def managed(md: SkipUnmanaged) -> dict[str, bool | None]:
    return {e.info.eni_id: e.managed for e in md.interfaces()}


def test_tagged_eni_is_never_set_up_used_or_reported() -> None:
    _imds, ec2, md = world()
    ds = Datastore(cooldown_s=0)
    host = RecordingHost()
    ctl = PoolController(ID, known("m5.large"), PoolConfig(warm_ip=1), ds, TIMING, host=host, metadata=md)
    ctl.start(0.0)
    assert {e.info.eni_id for e in ds.enis()} == {PRIMARY.eni_id, MANAGED.eni_id}
    assert ("setup", TAGGED.eni_id) not in host.calls and ("setup", MANAGED.eni_id) in host.calls
    report = ctl.tick(0.0)[0]
    assert TAGGED.eni_id not in {e.eni_id for e in report.enis}
    assigned = {ds.assign(f"c{i}", "eth0", "/ns", 1.0) for i in range(3)}
    assert all(a is None or a.eni_id != TAGGED.eni_id for a in assigned)
    assert md.unmanaged == [TAGGED.eni_id]
    # looked up once: later reads of IMDS cost no EC2 call
    ctl.resync(100.0)
    md.interfaces()
    assert len(ec2.calls) == 3  # one describe, three pages


def test_untagged_new_eni_is_described_once_when_it_appears() -> None:
    imds, ec2, md = world()
    md.interfaces()
    calls = len(ec2.calls)
    md.interfaces()
    assert len(ec2.calls) == calls
    late = EniInfo("eni-00000003", 3, "0a:00:00:00:00:03", "10.0.0.40", "subnet-a", "10.0.0.0/24")
    imds.enis.append(AttachedEni(late, [], []))
    ec2.tags[late.eni_id] = {}
    assert late.eni_id in {e.info.eni_id for e in md.interfaces()}
    assert len(ec2.calls) > calls


def test_eni_whose_tags_cannot_be_read_is_held_back_until_they_can() -> None:
    clock = VirtualClock()
    _, ec2, md = world(fail=1, clock=clock)
    # primary always managed; the others unknown (None), which the controller does not take up
    assert managed(md) == {PRIMARY.eni_id: True, MANAGED.eni_id: None, TAGGED.eni_id: None}
    assert md.describe_errors == 1
    calls = len(ec2.calls)
    assert managed(md)[MANAGED.eni_id] is None and len(ec2.calls) == calls  # backing off: no call
    clock.advance(BACKOFF_S)
    assert managed(md) == {PRIMARY.eni_id: True, MANAGED.eni_id: True, TAGGED.eni_id: False}
    ds = Datastore(cooldown_s=0)
    _, _, md2 = world(fail=1)
    ctl = PoolController(ID, known("m5.large"), PoolConfig(warm_ip=1), ds, TIMING, metadata=md2)
    ctl.start(0.0)
    assert {e.info.eni_id for e in ds.enis()} == {PRIMARY.eni_id}  # unknown ENIs not taken up


def test_failed_lookups_back_off_exponentially_with_jitter_up_to_a_cap() -> None:
    clock = VirtualClock()
    _, ec2, md = world(fail=100, clock=clock)
    at: list[float] = []
    while len(at) < 12:  # the controller reads IMDS every tick (here every 0.25 s)
        n = len(ec2.calls)
        md.interfaces()
        if len(ec2.calls) > n:
            at.append(clock.now())
        clock.advance(0.25)
    waits = [b - a for a, b in itertools.pairwise(at)]
    assert BACKOFF_S / 2 <= waits[0] <= BACKOFF_S + 0.25
    assert waits[4] >= BACKOFF_S * 2**4 / 2
    assert max(waits) <= BACKOFF_MAX_S + 0.25 and waits[-1] >= BACKOFF_MAX_S / 2


def test_a_no_manage_tag_added_later_is_seen_at_the_next_refresh() -> None:
    clock = VirtualClock()
    _, ec2, md = world(clock=clock)
    assert managed(md)[MANAGED.eni_id] is True
    ec2.tags[MANAGED.eni_id] = {NO_MANAGE_TAG: "true"}
    clock.advance(md.refresh_s - 1)
    assert managed(md)[MANAGED.eni_id] is True  # not read again before the refresh
    clock.advance(1)
    assert managed(md)[MANAGED.eni_id] is False
    # a failed refresh keeps what the last look-up found (never "unknown", never "gone")
    ec2.fail = 1
    clock.advance(md.refresh_s)
    assert managed(md) == {PRIMARY.eni_id: True, MANAGED.eni_id: False, TAGGED.eni_id: False}
    assert md.describe_errors == 1


def test_an_eni_the_describe_does_not_list_is_unknown_not_managed() -> None:
    """Describe is eventually consistent: an ENI it does not list yet may carry ``no_manage``,
    so its class is unknown (None), retried, not managed (ipamd's tag map reads it as managed;
    issue 21's review, finding 4; docs/safety.md row 13)."""
    _, ec2, md = world()
    del ec2.tags[MANAGED.eni_id]
    ec2.tags.pop(TAGGED.eni_id)
    assert managed(md) == {PRIMARY.eni_id: True, MANAGED.eni_id: None, TAGGED.eni_id: None}


def test_a_read_only_proc_sys_is_reported_not_fatal(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # In an unprivileged container /proc/sys is read-only (EROFS): the agent must
    # start anyway (the init container sets the values) and say what it could not set.
    import errno

    from node_agent import nodenet

    def refuse(netns: str, key: str, value: str) -> bool:
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(nodenet, "sysctl_set", refuse)
    with caplog.at_level("WARNING", logger="warmpool.agent.nodenet"):
        assert nodenet._sysctl_set("", "net.ipv4.ip_forward", "1") is False
    assert "net.ipv4.ip_forward=1" in caplog.text and "Read-only file system" in caplog.text
    monkeypatch.setattr(nodenet, "sysctl_set", lambda netns, key, value: True)
    assert nodenet._sysctl_set("", "net.ipv4.ip_forward", "1") is True
