"""The runtime tier's cluster: containerd and runc drive warmpool-cni, as on a node.

One cluster for the whole tier (tests/runtime/conftest.py's ``cluster``
fixture): the local stack, one node namespace with its ENIs plugged by the
demo's hypervisor, one agent started with exactly the
DaemonSet's privileges, one containerd in the node's namespace with its CRI
plugin pointed at a ``bin_dir``/``conf_dir`` of ours. Debian packages are
installed when missing and we can (root with apt-get), as ``make system-deps``
does; otherwise the tier is skipped with the reason.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.runtime import manifest

PACKAGES = ("containerd", "runc", "busybox-static", "containernetworking-plugins", "iproute2", "iptables")


def _install_missing() -> str | None:
    """None when containerd can run pods here (installing what is missing); else why not."""
    from demo import runtime_containerd as rc

    why = rc.support()
    if why is None or not why.startswith("not installed"):
        return why
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        return why + "; not root with apt-get, so not installing"
    r = subprocess.run(
        "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq " + " ".join(PACKAGES),
        shell=True,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if r.returncode != 0:
        return f"apt-get install {' '.join(PACKAGES)} failed: {r.stderr.strip()[-500:]}"
    return rc.support()


@dataclass
class RuntimeCluster:
    demo: Any
    """:class:`demo.run.Demo` after setup (stack, node, agent, containerd)."""
    priv: manifest.Privileges
    base: Path

    @property
    def node(self) -> Any:
        return self.demo.nodes[0]

    @property
    def rt(self) -> Any:
        """:class:`demo.runtime_containerd.NodeRuntime` of the node."""
        return self.demo.node_rt[0]

    @property
    def trace(self) -> Path:
        return self.base / "trace"

    def agent_json(self, path: str) -> Any:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.node.metrics_port}{path}", timeout=5) as r:
            return json.loads(r.read())

    def metric(self, name: str) -> float:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.node.metrics_port}/metrics", timeout=5) as r:
            for line in r.read().decode().splitlines():
                if line.startswith(name + " "):
                    return float(line.split()[1])
        raise KeyError(name)

    def pods(self) -> dict[str, str]:
        """Sandbox (container) id -> address, as the agent holds them."""
        return {str(p["container_id"]): str(p["ip"]) for p in self.agent_json("/v1/pods") if not p.get("recovered")}

    def pool(self) -> set[str]:
        """Every secondary address on the node's ENIs (the warm pool plus what pods hold)."""
        return {ip for e in self.agent_json("/v1/enis") for ip in e["ips"]}

    def ip(self, *args: str) -> str:
        """``ip ARGS`` in the node's namespace."""
        from demo import netns as nx

        return nx.ip("-n", self.node.ns, *args)

    def wait_pool(self, at_least: int, timeout_s: float = 60.0) -> None:
        """Until the agent's first fill has arrived (the allocator answered its report)."""
        deadline = time.monotonic() + timeout_s
        while len(self.pool()) < at_least:
            if time.monotonic() > deadline:
                raise AssertionError(f"warm pool not filled to {at_least} within {timeout_s:.0f}s: {self.pool()}")
            time.sleep(0.2)  # test harness polling

    def stop_agent(self, sig: str = "TERM") -> None:
        p = self.node.proc
        assert p is not None and p.poll() is None
        if sig == "KILL":
            p.kill()
        else:
            p.terminate()
        p.wait(timeout=15)

    def start_agent(self) -> None:
        self.demo._start_agent(self.node)
        self.demo._wait_agents_ready()

    def plugin_seconds(self, command: str) -> list[float]:
        """How long each plugin invocation of ``command`` took, as the runtime ran it (shim included)."""
        out = []
        for inp in sorted(self.trace.glob("*.in")):
            env, end = inp.with_suffix(".env"), inp.with_suffix(".end")
            if end.exists() and f"CNI_COMMAND={command}" in env.read_text():
                out.append((int(end.read_text()) - int(inp.stem.split("-")[0])) / 1e9)
        return out

    def traces(self, command: str | None = None) -> list[tuple[dict[str, Any], dict[str, Any], dict[str, str]]]:
        """Plugin invocations the runtime made, oldest first: (stdin, stdout, environment)."""
        out = []
        for inp in sorted(self.trace.glob("*.in")):
            env = dict(line.split("=", 1) for line in inp.with_suffix(".env").read_text().splitlines() if "=" in line)
            if command is not None and env.get("CNI_COMMAND") != command:
                continue
            raw_out = inp.with_suffix(".out").read_text() if inp.with_suffix(".out").exists() else ""
            try:
                stdout = json.loads(raw_out) if raw_out.strip() else {}
            except ValueError:
                stdout = {"raw": raw_out}
            out.append((json.loads(inp.read_text()), stdout, env))
        return out


TRACE_SHIM = """#!/bin/sh
# warmpool-cni as the runtime calls it, each invocation's input, output and environment kept for the tests.
t="{trace}/$(date +%s%N)-$$"
cat > "$t.in"
env | grep -E '^(CNI_|WARMPOOL_)' > "$t.env"
{plugin} "$@" < "$t.in" > "$t.out"
rc=$?
date +%s%N > "$t.end"
cat "$t.out"
exit $rc
"""


@contextlib.contextmanager
def runtime_cluster(agent_env: dict[str, str] | None = None) -> Iterator[RuntimeCluster]:
    """The tier's cluster (also for measurement scripts): stack, one node, its agent under the
    DaemonSet's privileges, containerd in the node's namespace; everything removed on exit."""
    from demo import host as demo_host
    from demo.host import single_run_lock
    from demo.options import DemoOptions
    from demo.run import Demo

    priv = manifest.load()
    base = Path(tempfile.mkdtemp(prefix="wprt-", dir="/tmp"))  # short: unix socket paths stay < 108 bytes
    (base / "trace").mkdir()
    plugin = base / "warmpool-cni-traced"
    plugin.write_text(TRACE_SHIM.format(trace=base / "trace", plugin=demo_host.console_script("warmpool-cni")))
    plugin.chmod(0o755)

    def wrap(node: Any, argv: list[str], env: dict[str, str]) -> tuple[list[str], dict[str, str]]:
        agent_base = base / "agent" / node.name
        env = {**env, **priv.env}
        host, _, _port = priv.env.get("WARMPOOL_METRICS_ADDR", "127.0.0.1:61680").rpartition(":")
        env["WARMPOOL_METRICS_ADDR"] = f"{host}:{node.metrics_port}"  # agents share the root namespace here
        node.socket = str(manifest.host_view(priv, env["WARMPOOL_SOCKET"], agent_base))
        return manifest.command(priv, argv, agent_base), env

    opts = DemoOptions(
        nodes=1,
        pods_per_node=0,
        live=False,
        runtime="containerd",
        agent_wrap=wrap,
        agent_env={"WARMPOOL_ADD_WAIT_S": "30", **(agent_env or {})},
    )
    stdout = sys.stdout
    with single_run_lock(wait_s=300):
        d = Demo(opts, stream=sys.stderr)
        d.run_dir = base / "run"
        d.cni_plugin = str(plugin)
        # The demo's setup would pick the console script; the traced shim stands in front of it.
        orig_bin = demo_host.console_script
        demo_host.console_script = lambda name: str(plugin) if name == "warmpool-cni" else orig_bin(name)
        try:
            d.setup()
            c = RuntimeCluster(d, priv, base)
            c.wait_pool(int(d.nodes[0].env["MINIMUM_IP_TARGET"]))
            yield c
        finally:
            demo_host.console_script = orig_bin
            d.teardown()
            sys.stdout = stdout
            manifest.remove_created()
            from demo.runtime_containerd import remove_default_state, unmount_under

            unmount_under(base)
            remove_default_state()
            shutil.rmtree(base, ignore_errors=True)


def conf(cluster: RuntimeCluster, version: str = "1.0.0", *, portmap: bool = False) -> dict[str, Any]:
    from demo.runtime_containerd import conflist

    return conflist("warmpool", cluster.node.socket, version, portmap=portmap)
