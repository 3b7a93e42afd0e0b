"""The DaemonSet's init container script (infra/docker/install-cni.sh), run for
real: it installs the plugin and conflist atomically and, being the one
privileged container, writes the node's kernel settings the agent only checks."""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "infra" / "docker" / "install-cni.sh"
WHY = None if os.geteuid() == 0 and shutil.which("ip") else "needs root and iproute2"

pytestmark = [pytest.mark.netns, pytest.mark.skipif(WHY is not None, reason=str(WHY))]


@pytest.fixture
def node(tmp_path: Path):  # type: ignore[no-untyped-def]
    """A node namespace whose default route leaves by ``ens5`` (its primary interface)."""
    ns = f"wpinit{uuid.uuid4().hex[:6]}"
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        sh = ["ip", "-n", ns]
        subprocess.run([*sh, "link", "add", "ens5", "type", "veth", "peer", "name", "peer0"], check=True)
        subprocess.run([*sh, "link", "set", "ens5", "up"], check=True)
        subprocess.run([*sh, "link", "set", "peer0", "up"], check=True)
        subprocess.run([*sh, "addr", "add", "10.9.0.5/24", "dev", "ens5"], check=True)
        subprocess.run([*sh, "route", "add", "default", "via", "10.9.0.1", "dev", "ens5"], check=True)
        image = tmp_path / "image"
        for part in ("python", "venv"):
            (image / part / "bin").mkdir(parents=True)
            (image / part / "bin" / "marker").write_text(part)
        conf = tmp_path / "conf"
        conf.mkdir()
        (conf / "05-warmpool.conflist").write_text('{"cniVersion": "1.0.0"}')
        dirs = {k: tmp_path / k for k in ("bin", "net", "wp")}
        for d in dirs.values():
            d.mkdir()
        env = {
            "PATH": os.environ["PATH"],
            "IMAGE_WARMPOOL_DIR": str(image),
            "CNI_CONFIG_DIR": str(conf),
            "HOST_CNI_BIN_DIR": str(dirs["bin"]),
            "HOST_CNI_NET_DIR": str(dirs["net"]),
            "HOST_WARMPOOL_DIR": str(dirs["wp"]),
        }
        yield ns, env, dirs
    finally:
        subprocess.run(["ip", "netns", "del", ns], check=False)


def _sysctl(ns: str, key: str) -> str:
    out = subprocess.run(
        ["ip", "netns", "exec", ns, "cat", f"/proc/sys/{key.replace('.', '/')}"],
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.strip()


def _run(ns: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", "netns", "exec", ns, "sh", str(SCRIPT)], env=env, capture_output=True, text=True)


def test_installs_the_plugin_and_sets_forwarding_and_loose_rp_filter_on_the_primary(node) -> None:  # type: ignore[no-untyped-def]
    ns, env, dirs = node
    subprocess.run(
        [
            "ip",
            "netns",
            "exec",
            ns,
            "sh",
            "-c",
            "echo 0 > /proc/sys/net/ipv4/ip_forward; echo 1 > /proc/sys/net/ipv4/conf/ens5/rp_filter",
        ],
        check=True,
    )
    res = _run(ns, env)
    assert res.returncode == 0, res.stderr
    assert (dirs["bin"] / "warmpool-cni").stat().st_mode & 0o111
    assert (dirs["net"] / "05-warmpool.conflist").read_text() == '{"cniVersion": "1.0.0"}'
    assert (dirs["wp"] / "venv" / "bin" / "marker").read_text() == "venv"
    assert _sysctl(ns, "net.ipv4.ip_forward") == "1"
    assert _sysctl(ns, "net.ipv4.conf.ens5.rp_filter") == "2"
    assert _sysctl(ns, "net.ipv4.conf.peer0.rp_filter") != "2" or _sysctl(ns, "net.ipv4.conf.all.rp_filter") == "2"
    assert "ens5 rp_filter loose" in res.stdout
    # Safe to repeat.
    again = _run(ns, env)
    assert again.returncode == 0, again.stderr


def test_rp_filter_left_alone_when_node_port_support_is_off(node) -> None:  # type: ignore[no-untyped-def]
    ns, env, _ = node
    subprocess.run(
        ["ip", "netns", "exec", ns, "sh", "-c", "echo 1 > /proc/sys/net/ipv4/conf/ens5/rp_filter"], check=True
    )
    res = _run(ns, {**env, "AWS_VPC_CNI_NODE_PORT_SUPPORT": "false"})
    assert res.returncode == 0, res.stderr
    assert _sysctl(ns, "net.ipv4.ip_forward") == "1"
    assert _sysctl(ns, "net.ipv4.conf.ens5.rp_filter") == "1"
