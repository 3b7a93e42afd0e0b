"""The CNI plugin invoked exactly as a container runtime does (environment +
config on stdin, a new process per call), against an agent-side CNI service
wiring real namespaces; and chained in a .conflist with Debian's reference
plugins, which consume our prevResult."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from node_agent.agent import install_cni
from node_agent.cniserver import CniService, CniSocketServer, NetlinkPods
from node_agent.datastore import Datastore
from node_agent.hostnet import host_veth_name, setup_eni
from node_agent.netlink import Netlink
from node_agent.records import EniInfo
from tests.helpers.fakenode import add_fake_eni, ip_json, netns, netns_available, sh
from warmpool.clock import RealClock

pytestmark = pytest.mark.netns

_why = netns_available()
if _why:
    pytest.skip(f"network namespaces unavailable: {_why}", allow_module_level=True)

REF_PLUGINS = "/usr/lib/cni"
ENI0 = EniInfo("eni-0000000000000000", 0, "0a:11:22:33:44:00", "10.0.0.10", "subnet-a", "10.0.0.0/24")
ENI1 = EniInfo("eni-0000000000000001", 1, "0a:11:22:33:44:01", "10.0.1.20", "subnet-a", "10.0.1.0/24")


@dataclass
class Node:
    ns: str
    ds: Datastore
    service: CniService
    socket: str
    plugin: Path


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    with netns("wpnode") as ns:
        add_fake_eni(ns, "eth1", ENI1.mac)
        with Netlink.open(ns) as nl:
            setup_eni(nl, ENI1, 9001)
        ds = Datastore(cooldown_s=30.0)
        ds.add_eni(ENI0, 0.0)
        ds.add_eni(ENI1, 0.0)
        ds.add_addresses(ENI1.eni_id, [f"10.0.1.{i}" for i in range(21, 25)])
        service = CniService(ds, NetlinkPods(ns), mtu=9001, add_wait_s=0.0, clock=RealClock())
        sock = str(tmp_path / "agent.sock")
        server = CniSocketServer(sock, service)
        server.serve_in_thread()
        plugin = install_cni(str(tmp_path / "bin"), sys.executable)
        try:
            yield Node(ns, ds, service, sock, plugin)
        finally:
            server.shutdown()
            server.server_close()


@pytest.fixture
def pod() -> Iterator[str]:
    with netns("wppod") as ns:
        yield ns


def invoke(
    plugin: Path,
    command: str,
    conf: dict,
    *,
    cid: str,
    netns_path: str,
    sock: str,
    ifname: str = "eth0",
    cni_path: str = "",
) -> tuple[int, dict]:
    env = {
        "CNI_COMMAND": command,
        "CNI_CONTAINERID": cid,
        "CNI_NETNS": netns_path,
        "CNI_IFNAME": ifname,
        "CNI_ARGS": "K8S_POD_NAMESPACE=default;K8S_POD_NAME=p",
        "CNI_PATH": cni_path or str(plugin.parent),
        "WARMPOOL_SOCKET": sock,
        "PATH": os.environ.get("PATH", ""),
    }
    p = subprocess.run([str(plugin)], input=json.dumps(conf), env=env, capture_output=True, text=True, timeout=30)
    return p.returncode, json.loads(p.stdout) if p.stdout.strip() else {}


CONF = {"cniVersion": "1.0.0", "name": "warmpool", "type": "warmpool-cni"}


def test_installed_plugin_is_stdlib_only_and_answers_version(node: Node) -> None:
    text = node.plugin.read_text()
    assert text.startswith(f"#!{sys.executable} -S\n")
    assert "pyroute2" not in text.split('"""', 2)[2] and "pydantic" not in text.split('"""', 2)[2]
    env = {"CNI_COMMAND": "VERSION"}
    out = subprocess.run(
        [str(node.plugin)], input='{"cniVersion":"1.0.0"}', env=env, capture_output=True, text=True, check=True
    ).stdout
    assert json.loads(out) == {
        "cniVersion": "1.0.0",
        "supportedVersions": ["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"],
    }


def test_add_check_del_through_the_plugin(node: Node, pod: str) -> None:
    path = f"/run/netns/{pod}"
    rc, res = invoke(node.plugin, "ADD", CONF, cid="c1", netns_path=path, sock=node.socket)
    assert rc == 0, res
    assert res["cniVersion"] == "1.0.0"
    assert res["ips"] == [{"address": "10.0.1.21/32", "interface": 1, "gateway": "169.254.1.1"}]
    assert res["interfaces"][1] == {"name": "eth0", "mac": res["interfaces"][1]["mac"], "sandbox": path}
    assert res["interfaces"][0]["name"] == host_veth_name("c1", "eth0")
    assert ip_json(pod, "-4", "addr", "show", "eth0")[0]["addr_info"][0]["local"] == "10.0.1.21"
    rules = ip_json(node.ns, "-4", "rule", "show")
    assert any(r["priority"] == 1536 and r.get("src") == "10.0.1.21" and r["table"] == "2" for r in rules)
    # a repeated ADD (runtime retry) returns the same address and changes nothing
    rc, again = invoke(node.plugin, "ADD", CONF, cid="c1", netns_path=path, sock=node.socket)
    assert rc == 0 and again["ips"] == res["ips"]
    rc, _ = invoke(node.plugin, "CHECK", {**CONF, "prevResult": res}, cid="c1", netns_path=path, sock=node.socket)
    assert rc == 0
    sh("ip", "-n", pod, "addr", "flush", "dev", "eth0")
    rc, err = invoke(node.plugin, "CHECK", {**CONF, "prevResult": res}, cid="c1", netns_path=path, sock=node.socket)
    assert rc == 1 and err["code"] == 100 and "10.0.1.21/32" in err["details"]
    for _ in range(2):  # DEL is idempotent
        rc, out = invoke(node.plugin, "DEL", CONF, cid="c1", netns_path=path, sock=node.socket)
        assert rc == 0 and out == {}
    assert node.ds.lookup("c1", "eth0") is None
    assert ip_json(pod, "link", "show", "eth0") == []
    assert node.ds.counts(0.0).cooldown >= 0


def test_del_succeeds_when_netns_and_pod_are_gone(node: Node) -> None:
    rc, out = invoke(node.plugin, "DEL", CONF, cid="never", netns_path="", sock=node.socket)
    assert rc == 0, out


def test_no_free_address_is_a_clear_try_again_error_and_counts_as_demand(node: Node, pod: str) -> None:
    path = f"/run/netns/{pod}"
    node.ds.remove_addresses(ENI1.eni_id, [f"10.0.1.{i}" for i in range(21, 25)])
    rc, err = invoke(node.plugin, "ADD", CONF, cid="c9", netns_path=path, sock=node.socket)
    assert rc == 1
    assert err["code"] == 11 and err["cniVersion"] == "1.0.0" and "no free pod IP" in err["msg"]
    assert node.ds.counts(0.0).pending == 1
    assert node.service.stats.failures["ADD", "no-address"] == 1


def test_agent_down_is_a_try_again_error(node: Node, pod: str, tmp_path: Path) -> None:
    rc, err = invoke(
        node.plugin, "ADD", CONF, cid="c1", netns_path=f"/run/netns/{pod}", sock=str(tmp_path / "nobody.sock")
    )
    assert rc == 1 and err["code"] == 11 and "not reachable" in err["msg"]


def test_bad_config_and_env_are_spec_errors(node: Node, pod: str) -> None:
    env = {"CNI_COMMAND": "ADD", "WARMPOOL_SOCKET": node.socket}
    p = subprocess.run([str(node.plugin)], input="{nope", env=env, capture_output=True, text=True)
    assert p.returncode == 1 and json.loads(p.stdout)["code"] == 6
    rc, err = invoke(
        node.plugin, "ADD", {**CONF, "cniVersion": "9.9.9"}, cid="c1", netns_path=f"/run/netns/{pod}", sock=node.socket
    )
    assert rc == 1 and err["code"] == 1
    p = subprocess.run(
        [str(node.plugin)], input=json.dumps(CONF), env={"CNI_COMMAND": "ADD"}, capture_output=True, text=True
    )
    assert p.returncode == 1 and json.loads(p.stdout)["code"] == 4


def test_the_node_namespace_is_refused_and_its_interfaces_left_alone(node: Node) -> None:
    # Was: given the node's own namespace and the name of one of its (non-pod) interfaces,
    # set-up deleted that interface to "start again from nothing".
    rc, err = invoke(
        node.plugin, "ADD", CONF, cid="c1", netns_path=f"/run/netns/{node.ns}", sock=node.socket, ifname="eth1"
    )
    assert rc == 1 and err["code"] == 4 and "CNI_NETNS" in err["msg"], err
    assert ip_json(node.ns, "link", "show", "eth1") != [], "the node's eth1 was deleted"
    assert node.ds.pods() == [] and node.ds.counts(0.0).cooldown == 0


def test_a_non_veth_interface_in_the_pod_namespace_is_refused_and_left_alone(node: Node, pod: str) -> None:
    sh("ip", "-n", pod, "link", "add", "eth0", "type", "bridge")
    rc, err = invoke(node.plugin, "ADD", CONF, cid="c1", netns_path=f"/run/netns/{pod}", sock=node.socket)
    assert rc == 1 and err["code"] == 4 and "not this pod's veth" in err["details"], err
    assert ip_json(pod, "-d", "link", "show", "eth0")[0]["linkinfo"]["info_kind"] == "bridge"  # type: ignore[index]
    assert node.ds.lookup("c1", "eth0") is None


def test_a_host_interface_with_the_pods_veth_name_that_is_not_a_veth_is_left_alone(node: Node, pod: str) -> None:
    name = host_veth_name("c1", "eth0")
    sh("ip", "-n", node.ns, "link", "add", name, "type", "bridge")
    rc, err = invoke(node.plugin, "ADD", CONF, cid="c1", netns_path=f"/run/netns/{pod}", sock=node.socket)
    assert rc == 1 and err["code"] == 4 and "not a veth" in err["details"], err
    assert ip_json(node.ns, "-d", "link", "show", name)[0]["linkinfo"]["info_kind"] == "bridge"  # type: ignore[index]
    rc, _ = invoke(node.plugin, "DEL", CONF, cid="c1", netns_path=f"/run/netns/{pod}", sock=node.socket)
    assert rc == 0
    assert ip_json(node.ns, "link", "show", name) != [], "DEL deleted a host interface that is not the pod's veth"


def test_gc_through_the_plugin_tears_down_and_releases_what_the_runtime_no_longer_lists(node: Node) -> None:
    with netns("wppod") as kept, netns("wppod") as leaked:
        for cid, ns in (("kept", kept), ("leaked", leaked)):
            rc, res = invoke(node.plugin, "ADD", CONF, cid=cid, netns_path=f"/run/netns/{ns}", sock=node.socket)
            assert rc == 0, res
        leaked_ip = node.ds.lookup("leaked", "eth0")
        assert leaked_ip is not None
        node.service.gc_min_age_s = 0.0
        conf = {**CONF, "cniVersion": "1.1.0", "cni.dev/valid-attachments": [{"containerID": "kept", "ifname": "eth0"}]}
        rc, out = invoke(node.plugin, "GC", conf, cid="", netns_path="", sock=node.socket)
        assert rc == 0 and out == {}, out
        assert [p.container_id for p in node.ds.pods()] == ["kept"]
        assert ip_json(node.ns, "link", "show", host_veth_name("leaked", "eth0")) == []
        assert ip_json(node.ns, "link", "show", host_veth_name("kept", "eth0")) != []
        rules = ip_json(node.ns, "-4", "rule", "show")
        assert not any(leaked_ip.ip in (r.get("src"), r.get("dst")) for r in rules)
        assert node.ds.counts(0.0).cooldown == 1


def test_socket_is_root_only(node: Node) -> None:
    assert os.stat(node.socket).st_mode & 0o777 == 0o600


# --- chained with the reference plugins ------------------------------------------------------


@pytest.mark.skipif(not os.path.exists(f"{REF_PLUGINS}/tuning"), reason="containernetworking-plugins not installed")
def test_chained_with_tuning_portmap_bandwidth(node: Node, pod: str, tmp_path: Path) -> None:
    bindir = node.plugin.parent
    for name in ("tuning", "portmap", "bandwidth"):
        os.symlink(f"{REF_PLUGINS}/{name}", bindir / name)
    conflist = {
        "cniVersion": "1.0.0",
        "name": "warmpool",
        "plugins": [
            {"type": "warmpool-cni", "socket": node.socket},
            {"type": "tuning", "sysctl": {"net.ipv4.conf.eth0.forwarding": "1"}, "mtu": 1400},
            {
                "type": "portmap",
                "capabilities": {"portMappings": True},
                "snat": True,
                "runtimeConfig": {"portMappings": [{"hostPort": 18080, "containerPort": 80, "protocol": "tcp"}]},
                "backend": "iptables",
            },
            {
                "type": "bandwidth",
                "capabilities": {"bandwidth": True},
                "runtimeConfig": {
                    "bandwidth": {
                        "ingressRate": 1000000,
                        "ingressBurst": 100000,
                        "egressRate": 1000000,
                        "egressBurst": 100000,
                    }
                },
            },
        ],
    }
    (tmp_path / "10-warmpool.conflist").write_text(json.dumps(conflist))
    cid = uuid.uuid4().hex
    env = {
        "CNI_CONTAINERID": cid,
        "CNI_NETNS": f"/run/netns/{pod}",
        "CNI_IFNAME": "eth0",
        "CNI_ARGS": "",
        "CNI_PATH": str(bindir),
        "PATH": os.environ.get("PATH", ""),
    }
    # portmap needs iptables in the node namespace; run the whole chain inside it, as a runtime on the node would
    env_ns = dict(env)
    final = run_conflist_in_ns(node.ns, conflist, "ADD", env_ns, str(bindir))
    assert final["ips"][0]["address"] == "10.0.1.21/32"
    assert [i["name"] for i in final["interfaces"]][:2] == [host_veth_name(cid, "eth0"), "eth0"]
    # tuning applied on our interface: MTU and sysctl
    assert ip_json(pod, "link", "show", "eth0")[0]["mtu"] == 1400
    assert sh("ip", "netns", "exec", pod, "sysctl", "-n", "net.ipv4.conf.eth0.forwarding").stdout.strip() == "1"
    # bandwidth shaped the host veth found through our prevResult interfaces
    if shutil.which("tc"):
        qdisc = sh("ip", "netns", "exec", node.ns, "tc", "qdisc", "show", "dev", host_veth_name(cid, "eth0")).stdout
        assert "tbf" in qdisc or "ingress" in qdisc
    env_ns["_PREV"] = json.dumps(final)
    run_conflist_in_ns(node.ns, conflist, "DEL", env_ns, str(bindir))
    run_conflist_in_ns(node.ns, conflist, "DEL", env_ns, str(bindir))
    assert node.ds.lookup(cid, "eth0") is None


def run_conflist_in_ns(ns: str, conflist: dict, command: str, env: dict[str, str], cni_path: str) -> dict:
    """Run each plugin via ``ip netns exec NODE`` (the plugin binaries run in the node's namespace)."""
    plugins = conflist["plugins"] if command != "DEL" else list(reversed(conflist["plugins"]))
    prev: dict | None = json.loads(env["_PREV"]) if command == "DEL" and env.get("_PREV") else None
    penv = {k: v for k, v in env.items() if k != "_PREV"}
    for p in plugins:
        conf = {"cniVersion": conflist["cniVersion"], "name": conflist["name"], **p}
        if prev is not None:
            conf["prevResult"] = prev
        binary = os.path.join(cni_path, p["type"])
        proc = subprocess.run(
            ["ip", "netns", "exec", ns, binary],
            input=json.dumps(conf),
            env={**penv, "CNI_COMMAND": command},
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert proc.returncode == 0, f"{p['type']} {command}: {proc.stdout} {proc.stderr}"
        if command == "ADD":
            prev = json.loads(proc.stdout)
    return prev or {}
