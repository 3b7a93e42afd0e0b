"""containerd (CRI) and runc drive warmpool-cni, with the agent holding exactly
the DaemonSet's privileges. The kubelet's path: RunPodSandbox (ADD),
PodSandboxStatus (the pod's IP), StopPodSandbox and RemovePodSandbox (DEL).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from demo.runtime_containerd import PodSandbox
from demo.runtime_cri import CriError, PortMapping
from node_agent.hostnet import GATEWAY, host_veth_name
from tests.runtime import manifest
from tests.runtime.cluster import RuntimeCluster, conf

pytestmark = [pytest.mark.runtime, pytest.mark.netns, pytest.mark.timeout(300)]


def _wait(pred: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout_s:.0f}s: {what}")
        time.sleep(0.1)  # test harness polling


def _in_pod(pod: PodSandbox, *args: str) -> str:
    """``ip ARGS`` inside the pod's network namespace (the netns CRI pinned)."""
    r = subprocess.run(
        ["nsenter", f"--net={pod.netns}", "ip", *args], capture_output=True, text=True, check=True, timeout=10
    )
    return r.stdout


def _assert_wired(pod: PodSandbox) -> None:
    """Inside: eth0 has the /32, default route via the link-local gateway, a permanent neighbour entry."""
    addrs = json.loads(_in_pod(pod, "-j", "-4", "addr", "show", "dev", "eth0"))
    assert [(a["local"], a["prefixlen"]) for a in addrs[0]["addr_info"]] == [(pod.ip, 32)]
    routes = json.loads(_in_pod(pod, "-j", "-4", "route", "show", "default"))
    assert [(r.get("gateway"), r.get("dev")) for r in routes] == [(GATEWAY, "eth0")]
    neigh = json.loads(_in_pod(pod, "-j", "neigh", "show", "dev", "eth0", GATEWAY))
    assert neigh and "PERMANENT" in neigh[0]["state"], neigh


def _assert_gone(c: RuntimeCluster, pod: PodSandbox) -> None:
    """Nothing of the pod left: no address held, no host veth, no route, no pinned namespace."""
    assert pod.id not in c.pods()
    assert pod.ip not in c.pods().values()
    links = json.loads(c.ip("-j", "link", "show"))
    assert host_veth_name(pod.id, "eth0") not in {x["ifname"] for x in links}
    assert c.ip("-4", "route", "show", "table", "all", pod.ip).strip() == ""
    assert pod.netns == "" or not os.path.exists(pod.netns)


def _use_conf(c: RuntimeCluster, version: str = "1.0.0", *, portmap: bool = False) -> None:
    c.rt.containerd.write_conf(conf(c, version, portmap=portmap))


def _run(c: RuntimeCluster, name: str, version: str = "1.0.0", ports: tuple[PortMapping, ...] = ()) -> PodSandbox:
    """RunPodSandbox; if the runtime had not yet reloaded a configuration just written, the pod
    is removed and made again (the reload is asynchronous: an fsnotify watch)."""
    deadline = time.monotonic() + 10
    while True:
        before = len(c.traces("ADD"))
        pod: PodSandbox = c.rt.run_pod(name, f"uid-{name}", ports=ports)
        adds = c.traces("ADD")[before:]
        if adds and adds[-1][0].get("cniVersion") == version:
            return pod
        c.rt.remove_pod(pod.id)
        if time.monotonic() > deadline:
            raise AssertionError(f"the runtime never called the plugin with cniVersion {version}")
        time.sleep(0.2)  # waiting for the runtime's configuration reload


# ----------------------------------------------------------------- the agent's privileges


def test_agent_runs_with_exactly_the_manifests_privileges(cluster: RuntimeCluster) -> None:
    priv = cluster.priv
    assert "sys_admin" in priv.caps, "pod wiring enters pod namespaces (setns): docs/deploy.md"
    pid = cluster.node.proc.pid
    st = manifest.proc_status(pid)
    want = manifest.cap_mask(priv.caps)
    assert int(st["CapEff"], 16) == want and int(st["CapPrm"], 16) == want and int(st["CapBnd"], 16) == want
    assert int(st["CapInh"], 16) == 0 and int(st["CapAmb"], 16) == 0
    assert st["NoNewPrivs"] == "1"
    mounts = {}
    for line in Path(f"/proc/{pid}/mountinfo").read_text().splitlines():
        f = line.split()
        mounts[f[4]] = f[5].split(",")
    assert "ro" in mounts["/"], "readOnlyRootFilesystem"
    for m in priv.mounts:
        if m.kind != "configMap":
            assert ("ro" in mounts[os.path.realpath(m.path)]) == m.read_only, m


def test_setns_needs_exactly_sys_admin_beyond_the_old_grant(cluster: RuntimeCluster) -> None:
    """Measured: with NET_ADMIN + NET_RAW only (the manifest before this tier), entering a pod's
    pinned namespace fails with EPERM; with the manifest's set it works."""
    probe = (
        "import ctypes,os,sys;l=ctypes.CDLL(None,use_errno=True);fd=os.open(sys.argv[1],os.O_RDONLY);"
        "r=l.setns(fd,0x40000000);print('ok' if r==0 else os.strerror(ctypes.get_errno()))"
    )
    pin = "/var/run/netns/wprt-probe"
    subprocess.run(["ip", "netns", "add", "wprt-probe"], check=True)
    try:

        def under(caps: list[str]) -> str:
            bound = ",".join(["-all", *(f"+{c}" for c in caps)])
            r = subprocess.run(
                [
                    "setpriv",
                    f"--bounding-set={bound}",
                    "--inh-caps=-all",
                    "--no-new-privs",
                    "python3",
                    "-S",
                    "-c",
                    probe,
                    pin,
                ],
                capture_output=True,
                text=True,
                timeout=30,
            )
            return (r.stdout + r.stderr).strip()

        assert under(["net_admin", "net_raw"]) == "Operation not permitted"
        assert under(cluster.priv.caps) == "ok"
    finally:
        subprocess.run(["ip", "netns", "del", "wprt-probe"], check=False)


# ----------------------------------------------------------------- pods


def test_a_pod_gets_a_warm_pool_address_wired_inside_and_del_returns_it(clean_pods: RuntimeCluster) -> None:
    c = clean_pods
    pool = c.pool()
    pod = _run(c, "warm-1")
    assert pod.ip in pool, "the address came from the warm pool the agent held before the pod"
    assert c.pods()[pod.id] == pod.ip
    assert pod.netns.startswith("/var/run/netns/cni-")
    _assert_wired(pod)
    # StopPodSandbox: the runtime's DEL; the address goes to cooldown, then back to the pool.
    c.rt.cri.stop_pod_sandbox(pod.id)
    assert pod.id not in c.pods() and pod.ip not in c.pods().values()
    assert pod.ip in c.pool(), "still on the ENI: freed addresses stay on the node"
    assert c.metric("warmpool_addresses_cooldown") >= 1
    nxt = _run(c, "warm-2")
    assert nxt.ip != pod.ip, "an address in cooldown is not handed out again at once"
    _wait(lambda: c.metric("warmpool_addresses_cooldown") == 0, 15, "cooldown over")
    c.rt.remove_pod(nxt.id)
    c.rt.cri.stop_pod_sandbox(pod.id)  # the kubelet stops again before removing: a second DEL is fine
    c.rt.remove_pod(pod.id)
    dels = [t for t in c.traces("DEL") if t[2].get("CNI_CONTAINERID") == pod.id]
    # containerd 1.6 runs DEL on every StopPodSandbox and again on RemovePodSandbox: all succeed
    assert len(dels) >= 2 and all(not out for _, out, _ in dels), dels
    _assert_gone(c, pod)


@pytest.mark.parametrize("version", ["1.0.0", "0.4.0", "0.3.1"])
def test_the_runtime_accepts_results_for_each_cni_version(clean_pods: RuntimeCluster, version: str) -> None:
    c = clean_pods
    _use_conf(c, version)
    pod = _run(c, f"ver-{version.replace('.', '')}", version)
    stdin, result, env = c.traces("ADD")[-1]
    assert stdin["cniVersion"] == version and stdin["type"] == "warmpool-cni"
    assert env["CNI_CONTAINERID"] == pod.id and env["CNI_NETNS"] == pod.netns
    assert result["cniVersion"] == version
    assert result["ips"][0]["address"] == f"{pod.ip}/32"
    if version == "0.3.1":
        assert result["ips"][0]["version"] == "4"
    assert pod.ip and c.pods()[pod.id] == pod.ip
    _assert_wired(pod)
    c.rt.remove_pod(pod.id)
    _assert_gone(c, pod)


def test_chained_portmap_maps_the_port_and_removes_it_on_del(clean_pods: RuntimeCluster) -> None:
    c = clean_pods
    _use_conf(c, portmap=True)
    pod = _run(c, "portmap-1", ports=(PortMapping(container_port=8080, host_port=18080),))

    # portmap learns the pod's address only from warmpool-cni's result (its prevResult).
    def nat() -> str:
        return subprocess.run(
            ["nsenter", f"--net=/var/run/netns/{c.node.ns}", "iptables", "-t", "nat", "-S"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout

    rules = [r for r in nat().splitlines() if f"--to-destination {pod.ip}:8080" in r]
    assert rules and "--dport 18080" in rules[0], nat()
    # And it carries traffic: the node's own address, port 18080, reaches a listener in the pod.
    # Up to three tries, each with a fresh listener: once (CI, 2026-12-02, the machine's two
    # cores shared with two simulation jobs) the connection was made and closed with nothing
    # received, and the same test passed 3 of 3 alone right after. A broken mapping fails
    # every try (no rule, or nothing reaches the pod); the tries that failed are printed.
    node_ip = json.loads(c.ip("-j", "-4", "addr", "show", "dev", "eth0"))[0]["addr_info"][0]["local"]
    tries: list[tuple[int, str, str]] = []
    for _ in range(3):
        rc, out, err = _through_portmap(c, pod.netns, node_ip)
        if out == "hello through portmap\n":
            break
        tries.append((rc, out, err))
    else:
        raise AssertionError(f"nothing reached the pod through portmap in 3 tries: {tries}")
    print("portmap tries that failed before one passed:", tries)
    c.rt.remove_pod(pod.id)
    assert f"{pod.ip}:8080" not in nat() and pod.id not in nat()
    _assert_gone(c, pod)


def _through_portmap(c: RuntimeCluster, netns: str, node_ip: str) -> tuple[int, str, str]:
    """One line from the node to ``node_ip:18080``; what a listener on 8080 in the pod got."""
    server = subprocess.Popen(
        ["nsenter", f"--net={netns}", "busybox", "nc", "-l", "-p", "8080"], stdout=subprocess.PIPE, text=True
    )
    try:

        def listening() -> bool:
            tcp = subprocess.run(
                ["nsenter", f"--net={netns}", "cat", "/proc/net/tcp", "/proc/net/tcp6"],
                capture_output=True,
                text=True,
                check=True,
            ).stdout.splitlines()
            tcp = [line for line in tcp if not line.lstrip().startswith("sl")]
            return any(f.split()[1].endswith(":1F90") and f.split()[3] == "0A" for f in tcp)

        _wait(listening, 10, "the pod's listener on 8080")
        r = subprocess.run(
            ["nsenter", f"--net=/var/run/netns/{c.node.ns}", "busybox", "nc", "-w", "2", node_ip, "18080"],
            input="hello through portmap\n",
            capture_output=True,
            text=True,
            timeout=10,
        )
        out, _ = server.communicate(timeout=10)
        return r.returncode, out, r.stderr
    finally:
        if server.poll() is None:
            server.kill()


def test_a_burst_larger_than_the_warm_pool_all_get_distinct_addresses(clean_pods: RuntimeCluster) -> None:
    c = clean_pods
    warm = len(c.pool()) - len(c.pods())
    n = warm + 8
    with ThreadPoolExecutor(max_workers=n) as ex:
        futs = [ex.submit(c.rt.run_pod, f"burst-{i}", f"uid-burst-{i}") for i in range(n)]
        pods = [f.result() for f in futs]  # none fails: a CriError here fails the test
    ips = [p.ip for p in pods]
    assert len(set(ips)) == n and all(ips), ips
    held = c.pods()
    assert all(held[p.id] == p.ip for p in pods)
    for p in pods[:3] + pods[-3:]:
        _assert_wired(p)
    with ThreadPoolExecutor(max_workers=8) as ex:
        list(ex.map(c.rt.remove_pod, [p.id for p in pods]))
    for p in pods:
        _assert_gone(c, p)


def test_agent_down_names_the_agent_and_del_while_down_leaves_nothing(clean_pods: RuntimeCluster) -> None:
    c = clean_pods
    a = _run(c, "down-a")
    c.stop_agent()
    with pytest.raises(CriError) as err:
        c.rt.run_pod("down-b", "uid-down-b")
    assert "warmpool agent is not reachable" in err.value.details and c.node.socket in err.value.details
    # containerd keeps the failed sandbox (its clean-up DEL failed too) for the kubelet to remove later.
    failed = [s for s in c.rt.cri.list_pod_sandbox_ids() if s != a.id]
    assert all(not c.rt.cri.pod_sandbox_status(s).ready for s in failed)
    with pytest.raises(CriError) as err2:  # DEL while the agent is down: the runtime reports it, keeps the pod
        c.rt.cri.stop_pod_sandbox(a.id)
    assert "warmpool agent is not reachable" in err2.value.details
    c.start_agent()
    assert c.pods().get(a.id) == a.ip, "the checkpoint kept the pod's address over the restart"
    c.rt.remove_pod(a.id)  # the kubelet's retry: DEL again, now answered
    _assert_gone(c, a)
    for s in failed:  # the kubelet's garbage collection of the failed sandbox: DEL answered, nothing held
        c.rt.remove_pod(s)
        assert s not in c.pods()
        assert host_veth_name(s, "eth0") not in c.ip("link", "show")
    assert c.rt.cri.list_pod_sandbox_ids() == []


def test_kill_9_while_pods_run_keeps_their_addresses_and_check_passes(clean_pods: RuntimeCluster) -> None:
    c = clean_pods
    pods = [_run(c, f"k9-{i}") for i in range(3)]
    c.stop_agent("KILL")
    c.start_agent()
    held = c.pods()
    for p in pods:
        assert held.get(p.id) == p.ip
        _assert_wired(p)
        add_in, add_out, _ = next(t for t in reversed(c.traces("ADD")) if t[2]["CNI_CONTAINERID"] == p.id)
        rc, out = _plugin(c, "CHECK", p, {**add_in, "prevResult": add_out})
        assert rc == 0, out
    fresh = _run(c, "k9-new")
    assert fresh.ip not in {p.ip for p in pods}
    for p in [*pods, fresh]:
        c.rt.remove_pod(p.id)
        _assert_gone(c, p)


def _plugin(c: RuntimeCluster, command: str, pod: PodSandbox, stdin: dict[str, Any]) -> tuple[int, str]:
    """The plugin as a runtime runs it (libcni: CNI_* environment, config on stdin, the node's netns)."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "CNI_COMMAND": command,
        "CNI_CONTAINERID": pod.id,
        "CNI_NETNS": pod.netns,
        "CNI_IFNAME": "eth0",
        "CNI_PATH": str(c.rt.containerd.cni_bin),
    }
    r = subprocess.run(
        ["nsenter", f"--net=/var/run/netns/{c.node.ns}", str(c.rt.containerd.cni_bin / "warmpool-cni")],
        input=json.dumps(stdin),
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return r.returncode, r.stdout + r.stderr


# ----------------------------------------------------------------- ctr run --cni (not the kubelet's path)

CTR_DEFAULT_CAPS = [
    "CAP_CHOWN",
    "CAP_DAC_OVERRIDE",
    "CAP_FSETID",
    "CAP_FOWNER",
    "CAP_MKNOD",
    "CAP_NET_RAW",
    "CAP_SETGID",
    "CAP_SETUID",
    "CAP_SETFCAP",
    "CAP_SETPCAP",
    "CAP_NET_BIND_SERVICE",
    "CAP_SYS_CHROOT",
    "CAP_KILL",
    "CAP_AUDIT_WRITE",
]
"""containerd's default capability set for a container (what ``ctr run`` gives one)."""


@pytest.fixture
def ctr_cni(clean_pods: RuntimeCluster) -> Any:
    """``ctr`` 1.6 reads only ``/etc/cni/net.d`` and ``/opt/cni/bin``: our files there, and only ours
    removed afterwards (a machine that already has a ``warmpool-cni`` there is not touched)."""
    c = clean_pods
    made: list[Path] = []
    conf_path = Path("/etc/cni/net.d/00-warmpool-runtime-test.conflist")
    links = {
        Path("/opt/cni/bin/warmpool-cni"): c.rt.containerd.cni_bin / "warmpool-cni",
        Path("/opt/cni/bin/loopback"): c.rt.containerd.cni_bin / "loopback",
    }
    if any(p.exists() or p.is_symlink() for p in [conf_path, *links]):
        pytest.skip("this machine already has a CNI set-up in /etc/cni/net.d or /opt/cni/bin")
    for d in (conf_path.parent, Path("/opt/cni/bin")):
        missing = []
        p = d
        while not p.exists():
            missing.append(p)
            p = p.parent
        for m in reversed(missing):
            m.mkdir()
            made.append(m)
    try:
        conf_path.write_text(json.dumps(conf(c)))
        made.append(conf_path)
        for dst, src in links.items():
            dst.symlink_to(src.resolve())
            made.append(dst)
        yield c
    finally:
        for p in reversed(made):
            if p.is_dir() and not p.is_symlink():
                with contextlib.suppress(OSError):
                    p.rmdir()
            else:
                p.unlink(missing_ok=True)


def _ctr_run(c: RuntimeCluster, cid: str, drop: list[str]) -> subprocess.CompletedProcess[str]:
    """``ctr run --rm --cni``; runc's state and the FIFOs under the test's directory. A failed run
    leaves its container behind (ctr does not clean up after a failed network set-up): removed here."""
    base = c.rt.containerd.base
    args = [
        "run",
        "--rm",
        "--cni",
        "--env",
        "PATH=/bin",
        "--runc-root",
        str(base / "runc"),
        "--fifo-dir",
        str(base / "fifo"),
    ]
    for cap in drop:
        args += ["--cap-drop", cap]
    args += [
        c.rt.containerd.image_ref,
        cid,
        "sh",
        "-c",
        "ip -4 -o addr show dev eth0; ip -4 route show default; ip neigh show dev eth0",
    ]
    r = c.rt.containerd.ctr(*args, check=False, timeout=120)
    if r.returncode != 0:
        c.rt.containerd.ctr("task", "delete", "-f", cid, check=False)
        c.rt.containerd.ctr("containers", "delete", cid, check=False)
    return r


def test_ctr_run_cni_container_gets_a_pool_address_and_gives_it_back(ctr_cni: RuntimeCluster) -> None:
    """``ctr run --cni`` hands the plugin ``/proc/<pid>/ns/net``. The agent may open that only if the
    container holds no capability the agent lacks (the kernel's ptrace access check), so this
    container drops containerd's default set; see the next test for the default set."""
    c = ctr_cni
    cid = f"ctr-{uuid.uuid4().hex[:12]}"
    r = _ctr_run(c, cid, CTR_DEFAULT_CAPS)
    assert r.returncode == 0, r.stderr
    _, add_out, env = next(t for t in reversed(c.traces("ADD")) if t[2]["CNI_CONTAINERID"].endswith(cid))
    assert env["CNI_NETNS"].startswith("/proc/") and env["CNI_NETNS"].endswith("/ns/net")
    ip = add_out["ips"][0]["address"].split("/")[0]
    lines = r.stdout.splitlines()
    assert f"inet {ip}/32" in lines[0]
    assert lines[1].startswith(f"default via {GATEWAY} dev eth0")
    assert GATEWAY in lines[2] and "PERMANENT" in lines[2]
    # --rm: the container exited, ctr ran DEL: the address is no longer held, it is in cooldown.
    dels = [t for t in c.traces("DEL") if t[2]["CNI_CONTAINERID"] == env["CNI_CONTAINERID"]]
    assert dels and not dels[-1][1]
    assert env["CNI_CONTAINERID"] not in c.pods() and ip not in c.pods().values()
    assert ip in c.pool()


def test_ctr_run_cni_with_default_capabilities_fails_clearly_and_holds_nothing(ctr_cni: RuntimeCluster) -> None:
    """The agent (the manifest's NET_ADMIN, NET_RAW, SYS_ADMIN; no SYS_PTRACE) cannot open
    ``/proc/<pid>/ns/net`` of a container holding capabilities it lacks: the runtime shows why,
    and no address stays held. The kubelet's path pins namespaces under /var/run/netns instead."""
    c = ctr_cni
    before = c.pods()
    r = _ctr_run(c, f"ctr-{uuid.uuid4().hex[:12]}", [])
    assert r.returncode != 0
    assert "warmpool-cni" in r.stderr and "Permission denied" in r.stderr and "/ns/net" in r.stderr, r.stderr
    assert c.pods() == before
