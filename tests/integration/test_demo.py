"""``warmpool demo``: the whole system end to end, run as a user runs it (a
subprocess), then checked from outside: the report, and that nothing it made
is left — no ``wp-demo-*`` namespace, no process carrying its run mark, no run
dir. Plus the pure report helpers and the namespace/veth layer on their own.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from demo import netns as nx
from demo import runtime_containerd as rc
from demo.host import RUN_MARK, single_run_lock
from demo.options import DemoOptions
from demo.procfs import processes
from demo.report import DemoPod, DemoReport, duplicate_ips, ec2_delta, render
from demo.run import Demo

ROOT = Path(__file__).resolve().parents[2]
DESIGN_KEYS = {"nodes", "pods_requested", "pods_ready", "time_to_ip_s", "ec2", "duplicate_ips", "leaked_enis"}
NETNS_WHY = nx.support() if nx.support_quick() else "not root or no `ip`"
CONTAINERD_WHY = rc.support()
needs_netns = pytest.mark.skipif(NETNS_WHY is not None, reason=f"network namespaces: {NETNS_WHY}")


# ----------------------------------------------------------------- pure helpers


def test_duplicate_ips_counts_addresses_held_by_two_holders() -> None:
    assert duplicate_ips([("a", "10.0.0.1"), ("b", "10.0.0.2")]) == 0
    assert duplicate_ips([("a", "10.0.0.1"), ("b", "10.0.0.1"), ("c", "10.0.0.1")]) == 1
    assert duplicate_ips([("a", "10.0.0.1"), ("a", "10.0.0.1")]) == 0  # one holder seen twice


def test_ec2_delta_keeps_only_actions_called_in_between() -> None:
    before = {"A": {"calls": 2, "throttled": 1, "errors": 0}}
    after = {"A": {"calls": 2, "throttled": 1, "errors": 0}, "B": {"calls": 3, "throttled": 1, "errors": 1}}
    assert ec2_delta(after, before) == {"B": {"calls": 3, "throttled": 1, "errors": 1}}


def test_report_has_every_design_key_and_renders() -> None:
    pods = [
        DemoPod(0, 0, "p0", "c0", first_add_at=1.0, ready_at=2.0, ip="10.0.0.5", kernel_ip="10.0.0.5"),
        DemoPod(0, 1, "p1", "c1", first_add_at=1.0, ready_at=4.0, ip="10.0.0.5"),
        DemoPod(1, 0, "p2", "c2", first_add_at=1.0),
    ]
    r = DemoReport(
        nodes=2,
        pods_requested=3,
        pods=pods,
        ec2={"AssignPrivateIpAddresses": {"calls": 2, "throttled": 1, "errors": 0}},
        leaked_enis=0,
        mode="netns",
        wall_s=9.0,
        scale_out_s=3.0,
    ).to_json()
    assert set(r) >= DESIGN_KEYS
    assert r["pods_ready"] == 2 and r["pods_ready"] <= r["pods_requested"]
    assert r["time_to_ip_s"] == {"p50": 2.0, "p99": 2.98, "max": 3.0}  # emulated.figures.percentile: interpolated
    assert r["duplicate_ips"] == 1
    assert r["kernel_verified"] == 1
    assert r["throttled_calls"] == 1 and r["mutating_calls"] == 2
    assert "pods ready          2 / 3" in render(r)


# ----------------------------------------------------------------- namespaces and veth


@pytest.fixture
def demo_lock() -> Iterator[None]:
    """The demo's own lock: these tests create and remove ``wp-demo-*`` names. Holding it,
    the names a crashed or killed run left are removed first, as a demo's start removes them
    (``demo.host.remove_leftovers``): a test starts from the state a demo starts from."""
    with single_run_lock(wait_s=240):
        nx.cleanup()
        yield
        nx.cleanup()


@needs_netns
@pytest.mark.netns
def test_hypervisor_plugs_enis_as_links_with_their_mac_and_cleanup_removes_everything(demo_lock: None) -> None:
    hv = nx.Hypervisor()
    hv.start()
    ns = nx.node_ns(90)
    hv.add_node(ns)
    primary = nx.EniLink("eni-0", "02:aa:00:00:00:01", 0, "10.0.0.10", "10.0.0.0/24")
    second = nx.EniLink("eni-1", "02:aa:00:00:00:02", 1, "10.0.0.20", "10.0.0.0/24")
    assert hv.plug(ns, primary, configure_primary=True)
    assert not hv.plug(ns, primary)  # idempotent
    assert hv.sync(ns, [primary, second]) == (1, 0)
    assert hv.links(ns) == {"02:aa:00:00:00:01": "eth0", "02:aa:00:00:00:02": "eth1"}
    addrs = json.loads(nx.ip("-j", "-n", ns, "-4", "addr", "show", "dev", "eth0"))
    assert addrs[0]["addr_info"][0]["local"] == "10.0.0.10"
    # the VPC side answers for the subnet's router
    assert (
        subprocess.run(["ip", "netns", "exec", ns, "ping", "-c1", "-W2", "10.0.0.1"], capture_output=True).returncode
        == 0
    )
    assert hv.sync(ns, [primary]) == (0, 1)  # detached: the link goes
    assert hv.links(ns) == {"02:aa:00:00:00:01": "eth0"}
    nx.add_namespace(nx.pod_ns(90, 0))
    assert set(nx.cleanup()) == {ns, nx.VPC_NS, nx.pod_ns(90, 0)}
    assert nx.list_namespaces() == []


# ----------------------------------------------------------------- the demo, end to end


def _env(tmp_path: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["WARMPOOL_DEMO_DIR"] = str(tmp_path / "run")
    env["WARMPOOL_DEMO_LOGS"] = str(tmp_path / "logs")
    env["WARMPOOL_DEMO_LOCK_WAIT_S"] = "240"  # another suite's demo on this machine: wait for it
    return env


def _marked_processes(mark: str) -> list[int]:
    """Processes whose environment carries this demo run's mark."""
    return [pid for pid, env in processes("environ") if f"{RUN_MARK}={mark}".encode() in env.split(b"\0")]


def _run_dir_processes(run_dir: Path) -> list[int]:
    """Processes naming the run dir in their command line (containerd, its shims)."""
    return [pid for pid, cmd in processes() if str(run_dir).encode() in cmd]


def _cni_pins() -> set[str]:
    """Network namespaces a container runtime pinned (CRI names them ``cni-<uuid>``)."""
    d = Path("/var/run/netns")
    return {p.name for p in d.iterdir() if p.name.startswith("cni-")} if d.is_dir() else set()


def _assert_clean(tmp_path: Path, demo_pid: int, pins_before: set[str] | None = None) -> None:
    if pins_before is not None:
        assert _cni_pins() - pins_before == set(), "pinned pod namespaces left behind"
    if nx.support_quick():
        assert nx.list_namespaces() == [], "wp-demo-* namespaces left behind"
    assert _marked_processes(str(demo_pid)) == [], "demo processes left behind"
    assert _run_dir_processes(tmp_path / "run") == [], "containerd or its shims left behind"
    assert str(tmp_path / "run") not in Path("/proc/self/mountinfo").read_text(), "mounts left behind"
    assert not (tmp_path / "run").exists(), "run dir left behind"


def _demo(*args: str) -> list[str]:
    """``warmpool demo`` without the kubelets unless ``--runtime`` says otherwise: ``auto``'s first
    choice builds a control plane (the e2e tier runs it, tests/e2e/test_demo_kubelet.py); here
    the demo's own runtimes, ``sandbox`` (containerd when it runs here, else bare namespaces)."""
    if "--runtime" not in args:
        args = ("--runtime", "sandbox", *args)
    return [sys.executable, "-m", "warmpool_cli.main", "demo", "--no-live", *args]


@pytest.mark.slow
def test_short_demo_serves_every_pod_once_leaks_nothing_and_cleans_up(tmp_path: Path) -> None:
    out = tmp_path / "demo.json"
    pins = _cni_pins()
    p = subprocess.Popen(
        _demo("--nodes", "2", "--pods-per-node", "3", "--json", str(out)),
        cwd=ROOT,
        env=_env(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    stdout, stderr = p.communicate(timeout=240)
    assert p.returncode == 0, f"stdout:\n{stdout}\nstderr:\n{stderr[-3000:]}"
    r = json.loads(out.read_text())
    assert set(r) >= DESIGN_KEYS
    assert r["nodes"] == 2 and r["pods_requested"] == 6
    assert r["pods_ready"] == r["pods_requested"]
    assert r["duplicate_ips"] == 0
    assert r["leaked_enis"] == 0
    assert r["ec2"]["AssignPrivateIpAddresses"]["calls"] >= 1
    assert all(set(v) == {"calls", "throttled", "errors"} for v in r["ec2"].values())
    assert 0 < r["time_to_ip_s"]["p50"] <= r["time_to_ip_s"]["p99"] <= r["time_to_ip_s"]["max"]
    if r["mode"] == "netns":
        assert r["kernel_verified"] == 6, "every pod's eth0 should carry the address it was given"
        # as root on Debian (`make demo` installs containerd), sandbox means containerd sandboxes
        assert r["runtime"] == ("containerd" if CONTAINERD_WHY is None else "netns")
    assert "warmpool demo — report" in stdout
    assert "pods made by" in stdout and r["runtime"].split()[0] in stdout.split("pods made by")[1]
    _assert_clean(tmp_path, p.pid, pins)


@pytest.mark.slow
def test_sigint_mid_run_tears_everything_down(tmp_path: Path) -> None:
    pins = _cni_pins()
    p = subprocess.Popen(
        _demo("--nodes", "2", "--pods-per-node", "8"),
        cwd=ROOT,
        env=_env(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert p.stderr is not None
    seen = []
    deadline = time.monotonic() + 120
    for line in p.stderr:  # wait until the scale-out has begun: agents up, pods being added
        seen.append(line)
        if line.startswith("scale-out:") or time.monotonic() > deadline:
            break
    assert any(line.startswith("scale-out:") for line in seen), "".join(seen)
    time.sleep(1.0)  # test harness: let some ADDs be in flight
    if nx.support_quick():
        assert any(n.startswith(nx.PREFIX + "node-") for n in nx.list_namespaces())
    assert _marked_processes(str(p.pid)), "agents should be running mid-run"
    p.send_signal(signal.SIGINT)
    _, rest = p.communicate(timeout=60)
    assert p.returncode == 130, "".join(seen) + rest
    assert "cleaned up" in rest
    _assert_clean(tmp_path, p.pid, pins)


@pytest.mark.slow
def test_without_namespaces_it_says_so_and_still_serves_every_pod(tmp_path: Path) -> None:
    out = tmp_path / "demo.json"
    p = subprocess.Popen(
        _demo("--no-netns", "--nodes", "1", "--pods-per-node", "2", "--json", str(out)),
        cwd=ROOT,
        env=_env(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    stdout, stderr = p.communicate(timeout=240)
    assert p.returncode == 0, stdout + stderr[-3000:]
    r = json.loads(out.read_text())
    assert r["mode"] == "plain" and r["runtime"] == "none"
    assert "network namespaces unavailable" in stderr
    assert r["pods_ready"] == r["pods_requested"] == 2
    assert r["duplicate_ips"] == 0 and r["leaked_enis"] == 0
    _assert_clean(tmp_path, p.pid)


@pytest.mark.slow
def test_a_crashed_runs_leftovers_are_removed_before_the_next_run(tmp_path: Path) -> None:
    from demo.host import cleanup_leftovers

    p = subprocess.Popen(
        _demo("--nodes", "1", "--pods-per-node", "6"),
        cwd=ROOT,
        env=_env(tmp_path),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert p.stderr is not None
    for line in p.stderr:
        if line.startswith("scale-out:"):
            break
    p.kill()  # no chance to clean up
    p.wait(timeout=10)
    p.stderr.close()
    assert _marked_processes(str(p.pid)), "the crashed run's agent should still be running"
    removed = cleanup_leftovers(tmp_path / "run")
    assert any(r.startswith("process ") for r in removed)
    if nx.support_quick():
        assert any(r.startswith("netns wp-demo-node-") for r in removed)
    _assert_clean(tmp_path, p.pid)


@needs_netns
@pytest.mark.slow
def test_runtime_netns_uses_bare_namespaces_and_the_report_says_so(tmp_path: Path) -> None:
    out = tmp_path / "demo.json"
    p = subprocess.Popen(
        _demo("--runtime", "netns", "--nodes", "1", "--pods-per-node", "2", "--json", str(out)),
        cwd=ROOT,
        env=_env(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    stdout, stderr = p.communicate(timeout=240)
    assert p.returncode == 0, stdout + stderr[-3000:]
    r = json.loads(out.read_text())
    assert r["mode"] == "netns" and r["runtime"] == "netns"
    assert r["pods_ready"] == r["kernel_verified"] == 2
    assert "bare network namespaces" in stdout
    _assert_clean(tmp_path, p.pid)


def test_auto_runtime_without_containerd_falls_back_and_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    import io

    monkeypatch.setattr(rc, "support", lambda: "not installed: containerd, runc (apt-get install ...)")
    out = io.StringIO()
    d = Demo(DemoOptions(runtime="auto", live=False), stream=out)
    d._choose_runtime()
    assert d.runtime == "netns"
    assert "containerd unavailable (not installed: containerd, runc" in out.getvalue()
    assert "falling back to bare network namespaces" in out.getvalue()
    assert any("falling back" in n for n in d.notes), "the report's notes carry it too"


def test_runtime_containerd_when_it_cannot_run_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    import io

    monkeypatch.setattr(rc, "support", lambda: "not running as root")
    d = Demo(DemoOptions(runtime="containerd", live=False), stream=io.StringIO())
    with pytest.raises(RuntimeError, match=r"--runtime containerd: containerd cannot run here \(not running as root\)"):
        d._choose_runtime()


def test_runtime_option_is_parsed_and_checked() -> None:
    from demo.cli import options_from_args

    assert options_from_args([]).runtime == "auto"
    assert options_from_args(["--runtime", "netns"]).runtime == "netns"
    with pytest.raises(SystemExit):
        options_from_args(["--runtime", "docker"])


def test_auto_runs_on_the_kubelets_when_they_can_run_and_says_why_not_otherwise(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``auto`` is the kubelets when they can run here; else the demo's own runtimes with a
    note saying why; ``--runtime kubelet`` that cannot run is an error naming the reason;
    ``sandbox`` is the demo's own auto; ``--no-netns`` never picks the kubelets."""
    from demo import on_kubelet
    from demo.cli import _on_kubelet, options_from_args

    monkeypatch.setattr(on_kubelet, "support", lambda: None)
    assert _on_kubelet(options_from_args([])) == (True, "")
    assert _on_kubelet(options_from_args(["--runtime", "kubelet"])) == (True, "")
    o = options_from_args(["--runtime", "sandbox"])
    assert _on_kubelet(o) == (False, "") and o.runtime == "auto"
    o = options_from_args(["--no-netns"])
    on, note = _on_kubelet(o)
    assert on is False and "--no-netns" in note and o.runtime == "auto"
    o = options_from_args(["--nodes", str(on_kubelet.MAX_NODES + 1)])
    on, note = _on_kubelet(o)
    assert on is False and f"at most {on_kubelet.MAX_NODES} kubelets" in note
    assert _on_kubelet(options_from_args(["--instance-type", "c5.xlarge", "--runtime", "kubelet"]))[0] == (
        "--runtime kubelet: the kubelets cannot run here"
        " (--instance-type c5.xlarge: the kubelet demo's nodes are m5.large)"
    )

    monkeypatch.setattr(on_kubelet, "support", lambda: "kubectl is not installed")
    o = options_from_args([])
    assert _on_kubelet(o) == (
        False,
        "the kubelets cannot run here (kubectl is not installed): the pods are made without Kubernetes",
    )
    assert o.runtime == "auto"
    assert _on_kubelet(options_from_args(["--runtime", "kubelet"])) == (
        "--runtime kubelet: the kubelets cannot run here (kubectl is not installed)",
        "",
    )
    assert _on_kubelet(options_from_args(["--runtime", "containerd"])) == (False, "")


def test_kubelet_support_names_what_is_missing(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from demo import on_kubelet
    from demo.kube import KUBERNETES_VERSION

    monkeypatch.setattr("os.geteuid", lambda: 1000)
    assert on_kubelet.support() == "not running as root"
    monkeypatch.setattr("os.geteuid", lambda: 0)
    monkeypatch.setattr(rc, "support", lambda: None)
    monkeypatch.setenv("WARMPOOL_E2E_CACHE", str(tmp_path))
    real_which = shutil.which
    monkeypatch.setattr("shutil.which", lambda b: None if b in ("go", "kubectl") else real_which(b))
    assert on_kubelet.support() == "kubectl is not installed"
    monkeypatch.setattr("shutil.which", lambda b: None if b == "go" else f"/usr/bin/{b}")
    assert not on_kubelet.built(KUBERNETES_VERSION)
    assert on_kubelet.support() == "the Kubernetes binaries are not built here and Go is not installed to build them"
    bin_dir = tmp_path / f"kubernetes-{KUBERNETES_VERSION}" / "bin"
    bin_dir.mkdir(parents=True)
    for c in ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet"):
        (bin_dir / c).write_text("#!/bin/sh\n")
        (bin_dir / c).chmod(0o755)
    assert on_kubelet.built(KUBERNETES_VERSION) and on_kubelet.support() is None
    monkeypatch.setattr(rc, "support", lambda: "not installed: containerd")
    assert on_kubelet.support() == "not installed: containerd"


def test_the_kubelet_demo_flags_an_address_not_on_its_own_nodes_enis() -> None:
    """A pod whose address the emulated EC2 has on another node's ENI is named in the notes
    and counted (``foreign_addresses``, which fails the demo)."""
    import io
    import threading
    from types import SimpleNamespace

    from demo.on_kubelet import KubeletDemo

    nodes = [SimpleNamespace(index=0, name="e2e-node-0"), SimpleNamespace(index=1, name="e2e-node-1")]
    on = {0: {"10.0.1.10", "10.0.1.11"}, 1: {"10.0.2.10"}}
    c = SimpleNamespace(nodes=nodes, eni_addresses_of=lambda n: on[n.index])
    recs = [DemoPod(0, 0, "", "a", ip="10.0.1.10"), DemoPod(1, 0, "", "b", ip="10.0.1.11")]
    d = KubeletDemo(DemoOptions(live=False), io.StringIO(), threading.Event())
    d._check_addresses(c, recs)
    assert recs[0].last_error == "" and recs[1].last_error == "not on its node's ENIs"
    assert d.notes == ["pod b on e2e-node-1 has 10.0.1.11, not on its node's ENIs"]


def test_a_pods_ready_latency_is_its_creation_to_its_ready_condition() -> None:
    from demo.on_kubelet import ready_latency

    pod: dict[str, Any] = {
        "metadata": {"creationTimestamp": "2026-12-03T10:00:00Z"},
        "status": {"conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-12-03T10:00:07Z"}]},
    }
    created, ready = ready_latency(pod) or (0.0, 0.0)
    assert ready - created == 7.0
    pod["status"]["conditions"][0]["status"] = "False"
    assert ready_latency(pod) is None
    assert ready_latency({"metadata": {}, "status": {}}) is None


def test_auto_runtime_falls_back_when_containerd_fails_to_start(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import io

    from demo import containerd as demo_containerd

    def broken(demo: Demo) -> None:
        raise rc.RuntimeError_("containerd exited with 1: failed to load plugin")

    monkeypatch.setattr(demo_containerd, "start", broken)
    out = io.StringIO()
    d = Demo(DemoOptions(runtime="auto", live=False), stream=out)
    d.run_dir = tmp_path  # the fallback's clean-up looks only there
    d.runtime = "containerd"
    d._start_containerd()
    assert d.runtime == "netns" and d.node_rt == {}
    assert "containerd did not start (containerd exited with 1: failed to load plugin): falling back" in out.getvalue()
    d2 = Demo(DemoOptions(runtime="containerd", live=False), stream=io.StringIO())
    d2.run_dir = tmp_path
    d2.runtime = "containerd"
    with pytest.raises(rc.RuntimeError_):
        d2._start_containerd()
