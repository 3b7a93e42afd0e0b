"""The demo's data-plane checks: the report keys (pure), and a short demo whose packets
go pod to pod, out to the internet host, and through a NodePort (real namespaces)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from demo import dataplane as dp
from demo import netns as nx
from demo.report import DemoReport, render

ROOT = Path(__file__).resolve().parents[2]
KEYS = {"pod_to_pod_ok", "pod_to_pod_checked", "egress_ok", "egress_checked", "egress_source"}


def _report(dataplane: dict[str, object]) -> dict[str, object]:
    return DemoReport(
        nodes=1,
        pods_requested=0,
        pods=[],
        ec2={},
        leaked_enis=0,
        mode="netns",
        wall_s=1.0,
        scale_out_s=1.0,
        dataplane=dataplane,
    ).to_json()


def test_report_carries_the_keys_and_renders_them() -> None:
    ok = dp.Results(True, 4, True, 4, "node", True, 1).to_json()
    r = _report(ok)
    assert set(r) >= KEYS and dp.passed(r)
    text = render(r)
    assert "pod to pod          ok: 4 pods" in text and "seen as the node address" in text
    bad = _report({**ok, "egress_ok": False, "dataplane_failures": ["egress 10.0.0.5 seen as 10.0.0.5"]})
    assert not dp.passed(bad) and "egress              FAILED" in render(bad) and "seen as 10.0.0.5" in render(bad)
    skipped = _report(dp.not_checked("no network namespaces"))
    assert set(skipped) >= KEYS and skipped["pod_to_pod_checked"] == 0 and dp.passed(skipped)
    assert "not checked (no network namespaces)" in render(skipped)


def test_one_node_leaves_pod_to_pod_unchecked_not_failed() -> None:
    # One node: no pod on another node to reach. The check did not run; the demo
    # must say so instead of failing, while a failed egress still fails it.
    one = _report(dp.Results(False, 0, True, 2, "node", False, 0).to_json())
    assert dp.passed(one) and "pod to pod          not checked (one node" in render(one)
    assert not dp.passed({**one, "egress_ok": False})
    ran_and_failed = _report(dp.Results(False, 2, True, 2, "node", False, 0).to_json())
    assert not dp.passed(ran_and_failed) and "pod to pod          FAILED: 2 pods" in render(ran_and_failed)


NETNS_WHY = nx.support() if nx.support_quick() else "not root or no `ip`"


def _run_demo(cmd: list[str], env: dict[str, str], timeout_s: float) -> tuple[int, str, str]:
    """Runs the demo; past ``timeout_s`` it is sent SIGTERM (the demo's own clean-up runs, so
    no ``wp-demo-*`` namespace is left for the next test) and its output so far is returned."""
    p = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = p.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        p.send_signal(signal.SIGTERM)
        try:
            out, err = p.communicate(timeout=90)
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
        err += f"\n(the test stopped the demo after {timeout_s:.0f} s)"
        return -1, out, err
    return p.returncode, out, err


@pytest.mark.slow
@pytest.mark.netns
@pytest.mark.timeout(480)
@pytest.mark.skipif(NETNS_WHY is not None, reason=f"network namespaces: {NETNS_WHY}")
def test_short_demo_proves_the_data_plane_with_packets(tmp_path: Path) -> None:
    # The pods made here without Kubernetes (containerd sandboxes where containerd runs, else
    # bare namespaces): the kubelets' run of the same demo is the e2e tier's
    # (tests/e2e/test_demo_kubelet.py), and needs Kubernetes built first.
    out = tmp_path / "demo.json"
    env = {
        **os.environ,
        "WARMPOOL_DEMO_DIR": str(tmp_path / "run"),
        "WARMPOOL_DEMO_LOGS": str(tmp_path / "logs"),
        "WARMPOOL_DEMO_LOCK_WAIT_S": "60",
    }
    cmd = [sys.executable, "-m", "warmpool_cli.main", "demo", "--no-live", "--runtime", "sandbox"]
    cmd += ["--nodes", "2", "--pods-per-node", "10", "--keep-per-node", "1", "--json", str(out)]
    rc, stdout, stderr = _run_demo(cmd, env, timeout_s=360)
    assert rc == 0, f"stdout:\n{stdout}\nstderr:\n{stderr[-3000:]}"
    assert not nx.list_namespaces(), "the demo removed its namespaces"
    r = json.loads(out.read_text())
    assert r["runtime"] != "kubelet"
    assert (r["pod_to_pod_ok"], r["pod_to_pod_checked"]) == (True, 20)
    assert (r["egress_ok"], r["egress_checked"], r["egress_source"]) == (True, 20, "node")
    assert (r["nodeport_ok"], r["nodeport_checked"]) == (True, 1)  # 10 pods on an m5.large: a second ENI
    assert "egress              ok: 20 pods" in stdout
