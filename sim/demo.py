"""``warmpool demo``: the whole system end to end on one machine, for real.

1. The local stack in this process (:class:`sim.local.LocalStack`): emulated
   EC2 over HTTP with its throttling, attach delay and per-instance IMDS,
   SQS and DynamoDB, and the real ``allocate``/``reconcile`` functions behind
   the emulated event-source mapping and schedule.
2. N instances registered in the emulated EC2 (tagged for the cluster), each
   with a network namespace ``wp-demo-node-K`` holding its primary ENI as
   ``eth0``. The demo plays the hypervisor: when EC2 makes an attach visible
   (the emulator's ``on_attach`` hook), a veth link with that ENI's MAC appears
   in the node's namespace; when an ENI goes away, so does its link.
3. N real agents (``warmpool-agent``), separate processes, each with its own
   IMDS (``AWS_EC2_METADATA_SERVICE_ENDPOINT``), socket, state dir and metrics
   port. Each works in its node's namespace (``WARMPOOL_HOST_NETNS``) while
   the process itself stays in the root namespace, where the emulated AWS
   endpoint is (127.0.0.1): a process inside the node namespace could not
   reach it without exposing the endpoint on a non-loopback address.
4. Pods as namespaces ``wp-demo-pod-K-J``, wired by ``warmpool-cni`` invoked as
   a container runtime does (``CNI_*`` environment, config on stdin, run in
   the node's namespace with ``ip netns exec``), retried like a kubelet while
   the pool fills. Then a scale-down (DEL of most pods) and a wait for the
   pools to settle, a reconcile, and the report.

Without network namespaces (not root, no ``ip``) it says so and runs the
agents with ``WARMPOOL_MANAGE_HOST_NETWORK=false`` and the plugin without a
namespace. Every namespace, link and process it made is removed at the end,
also on Ctrl-C/SIGTERM; leftovers of a crashed run are removed at start.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
import warnings
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from node_agent.imds import parse_interfaces
from sim import dataplane
from sim import demo_netns as nx
from sim.demo_report import (
    DemoReport,
    LiveView,
    PodRecord,
    Status,
    dump,
    ec2_delta,
    ec2_table,
    render,
    totals,
)
from warmpool import names

log = logging.getLogger("warmpool.demo")

RUN_DIR = Path(os.environ.get("WARMPOOL_DEMO_DIR", "/tmp/wp-demo"))
"""Sockets and agent state of the run (removed at the end)."""
LOG_DIR = Path(os.environ.get("WARMPOOL_DEMO_LOGS", "/tmp/wp-demo-logs"))
"""Agents' logs and the functions' output (what CloudWatch Logs would hold); kept for reading, replaced per run."""
LOCK_FILE = Path("/tmp/wp-demo.lock")
PIDS_FILE = "pids"
CNI_CONF_NAME = "warmpool"
RUN_MARK = "WARMPOOL_DEMO_RUN"
"""In every agent's environment (the demo's pid), so a test can find stray processes."""

DEFAULT_AGENT_ENV: dict[str, str] = {
    # The VPC CNI's variables, chosen so a burst needs the allocator (and a second ENI).
    "WARM_IP_TARGET": "2",
    "MINIMUM_IP_TARGET": "4",
    "IP_COOLDOWN_PERIOD": "3",
    # warmpool's own, shortened so a scale-down is seen within the demo.
    "WARMPOOL_RELEASE_DELAY_S": "3",
    "WARMPOOL_RELEASE_TIMEOUT_S": "210",  # the least allowed: offer-age ceiling 60 + margin 30 + IMDS lag 120
    "WARMPOOL_REPORT_HEARTBEAT_S": "15",
    "WARMPOOL_REPORT_RETRY_S": "2",
    "WARMPOOL_RESYNC_S": "15",
    "WARMPOOL_ADD_WAIT_S": "20",
    "AWS_VPC_ENI_MTU": "9001",
}


AgentWrap = Callable[["Node", list[str], dict[str, str]], tuple[list[str], dict[str, str]]]
"""(node, argv, env) -> (argv, env) of the agent process; may change ``node.socket``."""


class Interrupted(Exception):
    """SIGINT/SIGTERM arrived: stop, tear down, exit 130."""


@dataclass
class DemoOptions:
    nodes: int = 3
    pods_per_node: int = 10
    json_out: str | None = None
    instance_type: str = "m5.large"
    keep_per_node: int = 2
    """Pods left on each node after the scale-down."""
    attach_delay_s: float = 1.0
    api_latency_s: float = 0.05
    cni_parallel: int = 6
    """CNI invocations in flight at once (each is a process start)."""
    scale_out_timeout_s: float = 120.0
    settle_timeout_s: float = 45.0
    netns: bool | None = None
    """None: use namespaces when possible; False: never."""
    agent_env: dict[str, str] = field(default_factory=dict)
    cluster: str = "demo"
    live: bool = True
    runtime: str = "auto"
    """Who makes the pods in netns mode: ``containerd`` (CRI sandboxes), ``netns`` (bare
    namespaces), or ``auto`` (containerd when it is installed and works here)."""
    agent_wrap: AgentWrap | None = None
    """Starts each agent differently (the runtime tests: under the DaemonSet's privileges)."""


# ----------------------------------------------------------------- helpers


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _http_json(url: str, timeout: float = 5.0) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return json.loads(r.read())


def _bin(name: str) -> str:
    """A console script of this install (next to the interpreter), else from PATH."""
    here = Path(sys.executable).parent / name
    if here.exists():
        return str(here)
    found = shutil.which(name)
    if found is None:
        raise FileNotFoundError(f"{name} is not installed (pip install -e '.[all]')")
    return found


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def kill_recorded(run_dir: Path) -> list[int]:
    """End the processes a previous run recorded (only those still running a warmpool program)."""
    killed: list[int] = []
    path = run_dir / PIDS_FILE
    if not path.exists():
        return killed
    for line in path.read_text().split():
        if not line.isdigit():
            continue
        pid = int(line)
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if "warmpool" not in cmdline:
            continue
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
    return killed


def cleanup_leftovers(run_dir: Path = RUN_DIR) -> list[str]:
    """What a crashed run left behind: its processes, ``wp-demo-*`` namespaces, its run dir.
    Refuses (RuntimeError) while another demo holds the lock: its namespaces are not leftovers."""
    with single_run_lock():
        return _cleanup_leftovers(run_dir)


def _cleanup_leftovers(run_dir: Path) -> list[str]:
    """:func:`cleanup_leftovers`, for a caller already holding the lock."""
    out: list[str] = [f"process {p}" for p in kill_recorded(run_dir)]
    if run_dir.exists() and nx.support_quick():
        from sim.runtime_containerd import cleanup_run

        out += cleanup_run(run_dir)
    if nx.support_quick():
        out += [f"netns {n}" for n in nx.cleanup()]
    if run_dir.exists():
        shutil.rmtree(run_dir, ignore_errors=True)
    return out


@contextlib.contextmanager
def single_run_lock(wait_s: float = 0.0) -> Iterator[None]:
    """One demo at a time on a machine (leftover cleanup removes ``wp-demo-*`` by name).
    Waits up to ``wait_s`` for a running one to finish, then gives up with RuntimeError."""
    fd = os.open(LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise RuntimeError(f"another warmpool demo is running (lock {LOCK_FILE})") from None
                time.sleep(0.5)  # the harness waiting its turn, not warmpool logic
        yield
    finally:
        os.close(fd)


# ----------------------------------------------------------------- the demo


@dataclass
class Node:
    k: int
    name: str
    instance_id: str
    ns: str
    dir: Path
    socket: str
    metrics_port: int
    env: dict[str, str]
    proc: subprocess.Popen[bytes] | None = None
    log_path: Path | None = None


class Demo:
    """One run. :meth:`run` returns the report; :meth:`teardown` is idempotent and always runs."""

    def __init__(self, options: DemoOptions, stream: TextIO = sys.stderr) -> None:
        self.o = options
        self.stream = stream
        self.stop = threading.Event()
        self.t0 = time.monotonic()
        self.phase = "starting"
        self.mode = "netns"
        self.runtime = "netns"
        """Who made the pods: ``containerd``, ``netns`` (bare namespaces) or ``none`` (plain mode)."""
        self.node_rt: dict[int, Any] = {}
        """Node index -> :class:`sim.runtime_containerd.NodeRuntime` when containerd makes the pods."""
        self.notes: list[str] = []
        self.nodes: list[Node] = []
        self.pods: list[PodRecord] = []
        self.stack: Any = None
        self.hv: nx.Hypervisor = dataplane.RoutedVpc()
        self.run_dir = RUN_DIR
        self._procs: set[subprocess.Popen[bytes]] = set()
        self._procs_lock = threading.Lock()
        self._sync_thread: threading.Thread | None = None
        self.live: LiveView | None = None
        self._torn_down = False
        self._last_stats: dict[str, dict[str, int]] = {}
        self._cni = ""
        self._ns_by_instance: dict[str, str] = {}
        self._functions_log: TextIO | None = None

    # ---- output

    def say(self, text: str) -> None:
        if self.live is not None:
            self.live.note(text)
        else:
            self.stream.write(text + "\n")
            self.stream.flush()

    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def status(self) -> Status:
        try:
            self._last_stats = ec2_table(_http_json(self.stack.outputs["stats_url"], timeout=2.0))
        except Exception:
            pass
        calls, mutating, throttled = totals(self._last_stats)
        ready = sum(1 for p in self.pods if p.ready_at is not None and not p.deleted)
        wanted = sum(1 for p in self.pods if not p.deleted)
        return Status(self.phase, ready, wanted, self.hv.plugged_now(), calls, mutating, throttled,
                      self.elapsed())

    def check_stop(self) -> None:
        if self.stop.is_set():
            raise Interrupted()

    # ---- setup

    def setup(self) -> None:
        left = _cleanup_leftovers(self.run_dir)  # main() holds the single-run lock
        if left:
            self.say(f"removed leftovers of an earlier run: {', '.join(left)}")
        self.run_dir.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(LOG_DIR, ignore_errors=True)
        LOG_DIR.mkdir(parents=True, exist_ok=True)
        why = None if self.o.netns is not False else "disabled with --no-netns"
        if why is None:
            why = nx.support()
        if why is not None:
            self.mode = "plain"
            msg = (f"network namespaces unavailable ({why}): the agents run without touching the host "
                   "network (WARMPOOL_MANAGE_HOST_NETWORK=false, pod wiring recorded, not applied: "
                   "WARMPOOL_POD_NETWORK=recorded) and pods are CNI ADDs without a namespace of their own")
            self.notes.append(msg)
            self.say("warmpool demo: " + msg)
            self.runtime = "none"
        else:
            self._choose_runtime()
        self._cni = _bin("warmpool-cni")
        self.phase = "local stack"
        self._start_stack()
        if self.mode == "netns":
            self.hv.start()
            self.stack.ec2.on_attach(self._on_attach)
            self.stack.ec2.on_detach(self._on_detach)
        self.phase = "nodes"
        for k in range(self.o.nodes):
            self.check_stop()
            self._add_node(k)
        self.phase = "agents"
        for node in self.nodes:
            self._start_agent(node)
        if self.mode == "netns":
            self._sync_thread = threading.Thread(target=self._sync_loop, name="demo-hypervisor", daemon=True)
            self._sync_thread.start()
        self._wait_agents_ready()
        if self.runtime == "containerd":
            self._start_containerd()

    def _choose_runtime(self) -> None:
        """containerd when asked for or available; else bare namespaces, said plainly."""
        from sim import runtime_containerd as rc

        if self.o.runtime == "netns":
            self.runtime = "netns"
            return
        why = rc.support()
        if why is None:
            self.runtime = "containerd"
            self.say("warmpool demo: pods are containerd sandboxes (CRI RunPodSandbox), one containerd per node")
            return
        if self.o.runtime == "containerd":
            raise RuntimeError(f"--runtime containerd: containerd cannot run here ({why})")
        self.runtime = "netns"
        msg = (f"containerd unavailable ({why}): falling back to bare network namespaces made by the demo, "
               "with warmpool-cni invoked directly")
        self.notes.append(msg)
        self.say("warmpool demo: " + msg)

    def _start_containerd(self) -> None:
        """One containerd per node; under ``auto`` a failure to start falls back to bare namespaces."""
        from sim import demo_containerd

        try:
            demo_containerd.start(self)
        except Exception as e:
            if self.o.runtime == "containerd":
                raise
            demo_containerd.teardown(self)
            self.runtime = "netns"
            first = str(e).strip().splitlines()[0][:300] if str(e).strip() else type(e).__name__
            msg = (f"containerd did not start ({first}): falling back to bare network namespaces made by "
                   "the demo, with warmpool-cni invoked directly")
            self.notes.append(msg)
            self.say("warmpool demo: " + msg)

    def _start_stack(self) -> None:
        from sim.local import LocalOptions, LocalStack

        # The functions run in this process and log to stdout, as in Lambda; their
        # output goes to a file here (CloudWatch Logs' stand-in), the report to the terminal.
        self._functions_log = open(LOG_DIR / "functions.log", "a", buffering=1)  # noqa: SIM115
        sys.stdout = self._functions_log
        warnings.filterwarnings("ignore", category=UserWarning, module="aws_lambda_powertools.*")

        self.stack = LocalStack(LocalOptions(
            cluster=self.o.cluster,
            attach_delay_s=self.o.attach_delay_s,
            api_latency_s=self.o.api_latency_s,
            reconcile_every_s=30.0,
            gc_age_s=1,
            # Shortened, like the agents' timings above, so the scale-down settles within
            # the demo: the allocator deletes no ENI younger than this (default 60 s).
            extra_env=(("WARMPOOL_MIN_ENI_AGE_S", "10"),),
        ))
        out = self.stack.start()
        fns = out.get("functions", {})
        self.say(f"local stack up at {out['endpoint']} (functions: "
                 + ", ".join(f"{k}={'yes' if v else 'NO'}" for k, v in fns.items()) + ")")
        if not fns.get("allocate"):
            raise RuntimeError("the allocate function did not load; see the message above")

    def _add_node(self, k: int) -> None:
        emu = self.stack.ec2
        name = f"node-{k}"
        subnet = self.stack.subnet_ids[k % len(self.stack.subnet_ids)]
        iid = emu.run_instance(self.o.instance_type, subnet,
                               tags={names.cluster_tag_key(self.o.cluster): "owned", "Name": f"wp-demo-{name}"})
        ns = nx.node_ns(k)
        d = self.run_dir / name
        (d / "state").mkdir(parents=True, exist_ok=True)
        node = Node(k, name, iid, ns, d, str(d / "agent.sock"), _free_port(), {})
        self.nodes.append(node)
        self._ns_by_instance[iid] = ns
        if self.mode == "netns":
            self.hv.add_node(ns)
            for link in self._attached(iid):  # the primary ENI, configured as the instance's DHCP would
                self.hv.plug(ns, link, configure_primary=link.device_index == 0)

    def _agent_env(self, node: Node) -> dict[str, str]:
        out = self.stack.outputs
        base = {k: v for k, v in os.environ.items()
                if k in ("PATH", "HOME", "LANG", "LC_ALL", "PYTHONPATH", "TMPDIR", "VIRTUAL_ENV")}
        src = str(Path(__file__).resolve().parents[1])  # the agents run the code this demo runs
        base["PYTHONPATH"] = os.pathsep.join(p for p in (src, base.get("PYTHONPATH", "")) if p)
        env = {
            **base,
            **DEFAULT_AGENT_ENV,
            "CLUSTER_NAME": self.o.cluster,
            "MY_NODE_NAME": node.name,
            "AWS_EC2_METADATA_SERVICE_ENDPOINT": f"{out['imds_base']}/{node.instance_id}",
            "AWS_REGION": out["region"],
            "AWS_DEFAULT_REGION": out["region"],
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            names.ENV_ENDPOINT_URL: out["endpoint"],
            names.AGENT_ENV_REPORTS_QUEUE_URL: out["reports_queue_url"],
            names.AGENT_ENV_RESULT_QUEUE_PREFIX: out["result_queue_prefix"],
            names.AGENT_ENV_SOCKET: node.socket,
            names.AGENT_ENV_STATE_DIR: str(node.dir / "state"),
            names.AGENT_ENV_METRICS_ADDR: f"127.0.0.1:{node.metrics_port}",
            "WARMPOOL_HOST_NETNS": node.ns if self.mode == "netns" else "",
            "WARMPOOL_MANAGE_HOST_NETWORK": "true" if self.mode == "netns" else "false",
            "WARMPOOL_POD_NETWORK": "netlink" if self.mode == "netns" else "recorded",
            "WARMPOOL_LOG_LEVEL": "INFO",
            RUN_MARK: str(os.getpid()),
        }
        env.update(self.o.agent_env)
        return env

    def _start_agent(self, node: Node) -> None:
        node.env = self._agent_env(node)
        node.log_path = LOG_DIR / f"agent-{node.name}.log"
        logf = open(node.log_path, "wb")  # noqa: SIM115 (closed by the child's exit; we keep no handle)
        try:
            argv = [_bin("warmpool-agent")]
            if self.o.agent_wrap is not None:
                argv, node.env = self.o.agent_wrap(node, argv, node.env)
            node.proc = subprocess.Popen(argv, env=node.env, stdout=logf,
                                         stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         start_new_session=True)
        finally:
            logf.close()
        with open(self.run_dir / PIDS_FILE, "a") as f:
            f.write(f"{node.proc.pid}\n")

    def agent_tail(self, node: Node, lines: int = 15) -> str:
        if node.log_path is None or not node.log_path.exists():
            return ""
        return "\n".join(node.log_path.read_text(errors="replace").splitlines()[-lines:])

    def _wait_agents_ready(self, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        waiting = list(self.nodes)
        while waiting:
            self.check_stop()
            for node in list(waiting):
                assert node.proc is not None
                if node.proc.poll() is not None:
                    raise RuntimeError(f"agent of {node.name} exited with {node.proc.returncode}:\n"
                                       + self.agent_tail(node))
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{node.metrics_port}/readyz", timeout=1) as r:
                        if r.status == 200:
                            waiting.remove(node)
                except OSError:
                    pass
            if waiting and time.monotonic() > deadline:
                raise RuntimeError(f"agents not ready after {timeout_s:.0f}s: "
                                   + ", ".join(n.name for n in waiting) + "\n" + self.agent_tail(waiting[0]))
            if waiting:
                self.stop.wait(0.2)
        self.say(f"{len(self.nodes)} agents ready ({self.elapsed():.1f}s)")

    # ---- the hypervisor

    def _attached(self, instance_id: str) -> list[nx.EniLink]:
        """ENIs whose attach is visible on the instance now (the emulator's IMDS view; no API call)."""
        return [nx.EniLink(a.info.eni_id, a.info.mac, a.info.device_index, a.info.primary_ip, a.info.subnet_cidr)
                for a in parse_interfaces(self.stack.ec2.instance_metadata(instance_id))]

    def _on_attach(self, instance_id: str, eni: dict[str, Any]) -> None:
        """Called by the emulator (under its lock) when an attach becomes visible."""
        ns = self._ns_by_instance.get(instance_id)
        if ns is None:
            return
        subnet = self.stack.ec2.subnets.get(eni.get("SubnetId", ""))
        try:
            self.hv.plug(ns, nx.EniLink(eni["NetworkInterfaceId"], eni["MacAddress"],
                                        int(eni["Attachment"]["DeviceIndex"]), eni["PrivateIpAddress"],
                                        subnet.cidr if subnet is not None else "10.0.0.0/16"))
        except Exception as e:  # never fail the EC2 call that made the attach visible
            log.warning("could not plug %s into %s: %s", eni.get("NetworkInterfaceId"), ns, e)

    def _on_detach(self, instance_id: str, eni: dict[str, Any]) -> None:
        """Called by the emulator (under its lock) when a detach completes."""
        ns = self._ns_by_instance.get(instance_id)
        if ns is None:
            return
        try:
            self.hv.unplug(ns, eni["MacAddress"])
        except Exception as e:  # never fail the EC2 call that detached it
            log.warning("could not unplug %s from %s: %s", eni.get("NetworkInterfaceId"), ns, e)

    def _sync_loop(self) -> None:
        """A slow safety net under the hooks: reconcile every node's links with
        what the emulator shows attached, in case a hook's link change failed."""
        while not self.stop.wait(5.0):
            for node in self.nodes:
                try:
                    self.hv.sync(node.ns, self._attached(node.instance_id))
                except Exception as e:
                    log.debug("sync %s: %s", node.ns, e)

    # ---- pods

    def _cni_env(self, node: Node, pod: PodRecord, command: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k in ("PATH", "LANG", "LC_ALL")}
        env.update({
            "CNI_COMMAND": command,
            "CNI_CONTAINERID": pod.container_id,
            "CNI_NETNS": nx.netns_path(pod.netns) if self.mode == "netns" else "",
            "CNI_IFNAME": "eth0",
            "CNI_PATH": str(Path(self._cni).parent),
            RUN_MARK: str(os.getpid()),
            "CNI_ARGS": f"K8S_POD_NAMESPACE=default;K8S_POD_NAME={pod.netns};K8S_POD_INFRA_CONTAINER_ID={pod.container_id}",
            names.AGENT_ENV_SOCKET: node.socket,
        })
        if self.mode == "plain" and command == "ADD":
            env["CNI_NETNS"] = f"/var/run/netns/{pod.netns}"
        return env

    def cni(self, node: Node, pod: PodRecord, command: str, timeout_s: float = 90.0) -> tuple[int, dict[str, Any]]:
        """One plugin invocation as a runtime makes it; (exit code, parsed stdout)."""
        conf = {"cniVersion": "1.0.0", "name": CNI_CONF_NAME, "type": "warmpool-cni", "socket": node.socket}
        argv = [self._cni]
        if self.mode == "netns":
            argv = ["ip", "netns", "exec", node.ns, *argv]
        p = subprocess.Popen(argv, env=self._cni_env(node, pod, command), stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
        with self._procs_lock:
            self._procs.add(p)
        try:
            out, err = p.communicate(json.dumps(conf).encode(), timeout=timeout_s)
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
        finally:
            with self._procs_lock:
                self._procs.discard(p)
        try:
            body = json.loads(out) if out.strip() else {}
        except ValueError:
            body = {"msg": out.decode(errors="replace")[:200]}
        if p.returncode != 0 and not body:
            body = {"msg": err.decode(errors="replace")[-300:]}
        return p.returncode, body if isinstance(body, dict) else {}

    def _pod_ip(self, pod: PodRecord) -> str | None:
        if self.mode != "netns":
            return None
        try:
            rows = json.loads(nx.ip("-j", "-n", pod.netns, "-4", "addr", "show", "dev", "eth0", check=False) or "[]")
        except ValueError:
            return None
        for r in rows:
            for a in r.get("addr_info", []):
                return str(a.get("local"))
        return None

    def add_pod(self, node: Node, pod: PodRecord, deadline: float) -> None:
        """ADD until it succeeds, retried like a kubelet (a failed sandbox is retried with backoff)."""
        if self.runtime == "containerd":
            from sim import demo_containerd

            demo_containerd.add_pod(self, node, pod, deadline)
            return
        if self.mode == "netns":
            nx.add_namespace(pod.netns)
        backoff = 0.2
        while not self.stop.is_set():
            if pod.first_add_at is None:
                pod.first_add_at = time.monotonic()
            pod.attempts += 1
            code, body = self.cni(node, pod, "ADD")
            if code == 0:
                pod.ready_at = time.monotonic()
                ips = body.get("ips") or []
                pod.ip = str(ips[0]["address"]).split("/")[0] if ips else None
                pod.kernel_ip = self._pod_ip(pod)
                return
            pod.last_error = f"{body.get('code', '?')}: {body.get('msg', '')}"
            if time.monotonic() > deadline:
                return
            self.stop.wait(backoff)
            backoff = min(backoff * 2, 2.0)

    def del_pod(self, node: Node, pod: PodRecord) -> None:
        if self.runtime == "containerd":
            from sim import demo_containerd

            demo_containerd.del_pod(self, node, pod)
            return
        code, body = self.cni(node, pod, "DEL", timeout_s=30.0)
        if code != 0:
            pod.last_error = f"DEL {body.get('code', '?')}: {body.get('msg', '')}"
        pod.deleted = True
        if self.mode == "netns":
            nx.delete_namespace(pod.netns)

    def scale_out(self) -> float:
        self.phase = "scale-out"
        n = self.o.nodes * self.o.pods_per_node
        self.say(f"scale-out: {n} pods ({self.o.pods_per_node} per node), CNI ADD through warmpool-cni")
        for node in self.nodes:
            for j in range(self.o.pods_per_node):
                self.pods.append(PodRecord(node.k, j, nx.pod_ns(node.k, j), f"wpdemo{node.k:03d}{j:04d}" + "0" * 52))
        start = time.monotonic()
        deadline = start + self.o.scale_out_timeout_s
        # Pods arrive node-interleaved, as a Deployment's replicas would spread.
        order = sorted(self.pods, key=lambda p: (p.index, p.node))
        with ThreadPoolExecutor(max_workers=max(1, self.o.cni_parallel), thread_name_prefix="cni") as pool:
            futs = [pool.submit(self.add_pod, self.nodes[p.node], p, deadline) for p in order]
            while not all(f.done() for f in futs):
                self.check_stop()
                wait(futs, timeout=0.2)
            for f in futs:
                f.result()
        took = time.monotonic() - start
        ready = sum(1 for p in self.pods if p.ready_at is not None)
        self.say(f"scale-out: {ready}/{n} pods have an address after {took:.1f}s")
        for p in self.pods:
            if p.ready_at is None and not self.stop.is_set():
                self.say(f"  {p.netns}: no address after {p.attempts} ADDs ({p.last_error})")
        return took

    # ---- pools

    def pool_addresses(self, node: Node) -> int:
        """Secondary addresses attached to the node's ENIs now (IMDS view)."""
        md = self.stack.ec2.instance_metadata(node.instance_id)
        return sum(len(d["local-ipv4s"].split("\n")) - 1 for d in md["network"]["interfaces"]["macs"].values())

    def node_pools(self) -> list[dict[str, Any]]:
        out = []
        for node in self.nodes:
            if self.mode == "netns":
                self.hv.sync(node.ns, self._attached(node.instance_id))
            md = self.stack.ec2.instance_metadata(node.instance_id)
            macs = md["network"]["interfaces"]["macs"]
            links = len(self.hv.links(node.ns)) if self.mode == "netns" else None
            out.append({"node": node.name, "instance_id": node.instance_id, "enis": len(macs),
                        "addresses": sum(len(d["local-ipv4s"].split("\n")) - 1 for d in macs.values()),
                        "links": links})
        return out

    def _settled(self, node: Node, assigned: int) -> bool:
        from node_agent.config import load
        from warmpool.limits import known
        from warmpool.pool import PoolState, compute

        cfg = load(node.env).pool
        md = self.stack.ec2.instance_metadata(node.instance_id)
        macs = md["network"]["interfaces"]["macs"]
        total = sum(len(d["local-ipv4s"].split("\n")) - 1 for d in macs.values())
        delta = compute(cfg, PoolState(total=total, assigned=assigned, enis=len(macs)), known(self.o.instance_type))
        return not delta.high and not delta.low

    def scale_down(self) -> dict[str, Any]:
        self.phase = "scale-down"
        before = sum(self.pool_addresses(n) for n in self.nodes)
        victims = [p for p in self.pods if p.index >= self.o.keep_per_node and p.ready_at is not None]
        self.say(f"scale-down: CNI DEL of {len(victims)} pods, {self.o.keep_per_node} kept per node")
        with ThreadPoolExecutor(max_workers=max(1, self.o.cni_parallel), thread_name_prefix="cni-del") as pool:
            futs = [pool.submit(self.del_pod, self.nodes[p.node], p) for p in victims]
            while not all(f.done() for f in futs):
                self.check_stop()
                wait(futs, timeout=0.2)
            for f in futs:
                f.result()
        self.phase = "settling"
        start = time.monotonic()
        kept = {n.k: sum(1 for p in self.pods if p.node == n.k and p.ready_at is not None and not p.deleted)
                for n in self.nodes}
        settled = False
        while time.monotonic() - start < self.o.settle_timeout_s:
            self.check_stop()
            if all(self._settled(n, kept[n.k]) for n in self.nodes):
                settled = True
                break
            self.stop.wait(0.5)
        after = sum(self.pool_addresses(n) for n in self.nodes)
        took = time.monotonic() - start
        self.say(f"scale-down: addresses on the nodes {before} -> {after}"
                 + (f", settled in {took:.1f}s" if settled else f", not settled after {took:.0f}s"))
        if not settled:
            self.notes.append(f"pools had not settled to their targets {self.o.settle_timeout_s:.0f}s after the scale-down")
        return {"deleted": len(victims), "kept": sum(kept.values()), "addresses_before": before,
                "addresses_after": after, "settled": settled, "settle_s": round(took, 3)}

    # ---- end

    def reconcile(self) -> None:
        """The reconcile function, twice (its GC marks detached ENIs, then deletes them past the age)."""
        rec = getattr(self.stack, "reconcile", None)
        if rec is None:
            self.notes.append("the reconcile function did not load: leaked ENIs counted without a reconcile")
            return
        for _ in range(2):
            rec.invoke(time.time())
            self.stop.wait(1.2)
            self.check_stop()

    def leaked_enis(self) -> int:
        """Detached ENIs tagged for the cluster (one filtered Describe, as an operator would check)."""
        ec2 = self.stack.client("ec2")
        resp = ec2.describe_network_interfaces(Filters=[
            {"Name": "status", "Values": ["available"]},
            {"Name": f"tag:{names.TAG_CLUSTER_NAME}", "Values": [self.o.cluster]},
        ])
        return len(resp.get("NetworkInterfaces", []))

    def run(self) -> dict[str, Any]:
        self.setup()
        if self.o.live:
            self.live = LiveView(self.status, self.stream)
            self.live.start()
        scale_out_s = self.scale_out()
        packets = self.check_dataplane()
        down = self.scale_down()
        pools = self.node_pools()
        self.phase = "reconcile"
        self.reconcile()
        stats = ec2_table(_http_json(self.stack.outputs["stats_url"]))  # before the demo's own check below
        leaked = self.leaked_enis()
        self.phase = "done"
        if self.live is not None:
            self.live.stop()
            self.live = None
        report = DemoReport(
            nodes=self.o.nodes,
            pods_requested=len(self.pods),
            pods=self.pods,
            ec2=ec2_delta(stats, {}),  # the whole run: agents' first fills included
            leaked_enis=leaked,
            mode=self.mode,
            runtime=self.runtime,
            wall_s=self.elapsed(),
            scale_out_s=scale_out_s,
            scale_down=down,
            node_pools=pools,
            notes=self.notes,
            dataplane=packets,
        )
        return report.to_json()

    def check_dataplane(self) -> dict[str, Any]:
        """Packets through the pods just created (sim/dataplane.py): pod to pod, egress, NodePort."""
        if self.mode != "netns" or not isinstance(self.hv, dataplane.RoutedVpc):
            return dataplane.not_checked("no network namespaces")
        self.phase = "data plane"
        result = dataplane.check_demo(self)
        for line in dataplane.render_lines(result):
            self.say(line.strip())
        return result

    def teardown(self) -> None:
        """Every process, namespace and link this run made; safe to call twice."""
        if self._torn_down:
            return
        self._torn_down = True
        self.stop.set()
        if self.live is not None:
            self.live.stop()
            self.live = None
        if self.node_rt:  # sandboxes go first, while their agents can still take the DELs
            from sim import demo_containerd

            demo_containerd.teardown(self)
        with self._procs_lock:
            procs = list(self._procs)
        for p in procs:
            with contextlib.suppress(ProcessLookupError):
                p.kill()
        for node in self.nodes:
            if node.proc is not None and node.proc.poll() is None:
                node.proc.terminate()
        for node in self.nodes:
            if node.proc is not None:
                try:
                    node.proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    node.proc.kill()
                    node.proc.wait(timeout=5)
        if self._sync_thread is not None:
            self._sync_thread.join(timeout=3)
        if self.stack is not None:
            try:
                self.stack.stop()
            except Exception as e:
                log.warning("stopping the local stack: %s", e)
        if self.mode == "netns":
            nx.cleanup()
        shutil.rmtree(self.run_dir, ignore_errors=True)
        if self._functions_log is not None:
            sys.stdout = sys.__stdout__
            self._functions_log.close()
            self._functions_log = None


# ----------------------------------------------------------------- command line


def build_parser() -> argparse.ArgumentParser:
    d = DemoOptions()
    p = argparse.ArgumentParser(prog="warmpool demo", description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--nodes", type=int, default=d.nodes, help=f"nodes (default {d.nodes})")
    p.add_argument("--pods-per-node", type=int, default=d.pods_per_node,
                   help=f"pods per node in the scale-out (default {d.pods_per_node})")
    p.add_argument("--json", dest="json_out", metavar="OUT", help="write the report as JSON to OUT")
    p.add_argument("--instance-type", default=d.instance_type)
    p.add_argument("--keep-per-node", type=int, default=d.keep_per_node, help="pods kept after the scale-down")
    p.add_argument("--attach-delay", type=float, default=d.attach_delay_s, help="emulated EC2 attach delay (s)")
    p.add_argument("--api-latency", type=float, default=d.api_latency_s, help="emulated EC2 latency per call (s)")
    p.add_argument("--parallel", type=int, default=d.cni_parallel, help="CNI invocations in flight at once")
    p.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                   help="agent environment override, e.g. WARM_IP_TARGET=1 (repeatable)")
    p.add_argument("--no-netns", action="store_true", help="run without network namespaces")
    p.add_argument("--runtime", choices=("auto", "containerd", "netns"), default=d.runtime,
                   help="who makes the pods: containerd sandboxes through CRI, or bare namespaces "
                        "(default auto: containerd when installed)")
    p.add_argument("--no-live", action="store_true", help="no live status line")
    return p


def options_from_args(argv: list[str]) -> DemoOptions:
    a = build_parser().parse_args(argv)
    if a.nodes < 1 or a.pods_per_node < 1:
        raise SystemExit("warmpool demo: --nodes and --pods-per-node must be at least 1")
    env: dict[str, str] = {}
    for item in a.env:
        k, sep, v = item.partition("=")
        if not sep or not k:
            raise SystemExit(f"warmpool demo: --env {item!r}: expected KEY=VALUE")
        env[k] = v
    return DemoOptions(nodes=a.nodes, pods_per_node=a.pods_per_node, json_out=a.json_out,
                       instance_type=a.instance_type, keep_per_node=max(0, min(a.keep_per_node, a.pods_per_node)),
                       attach_delay_s=a.attach_delay, api_latency_s=a.api_latency, cni_parallel=a.parallel,
                       netns=False if a.no_netns else None, agent_env=env, live=not a.no_live,
                       runtime=a.runtime)


@contextlib.contextmanager
def signals_to(handler: Callable[[int], None]) -> Iterator[None]:
    """SIGINT/SIGTERM call ``handler``; the previous handlers come back on exit."""
    prev: Mapping[int, Any] = {}
    if threading.current_thread() is threading.main_thread():
        prev = {s: signal.signal(s, lambda signum, _f: handler(signum)) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, h in prev.items():
            signal.signal(s, h)


def main(argv: list[str]) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    opts = options_from_args(argv)
    demo = Demo(opts)
    status = 0
    out = sys.stdout  # the functions' output is redirected while they run; the report comes here

    def on_signal(signum: int) -> None:
        if not demo.stop.is_set():
            sys.stderr.write(f"\nwarmpool demo: {signal.Signals(signum).name}, stopping and cleaning up\n")
        demo.stop.set()

    try:
        lock_wait = float(os.environ.get("WARMPOOL_DEMO_LOCK_WAIT_S", "0") or 0)
        with single_run_lock(lock_wait), signals_to(on_signal):
            try:
                report = demo.run()
            except Interrupted:
                status = 130
            except Exception as e:
                demo.say(f"warmpool demo: failed: {type(e).__name__}: {e}")
                status = 1
            else:
                print(render(report), file=out, flush=True)
                if opts.json_out:
                    dump(report, opts.json_out)
                    print(f"  JSON written to {opts.json_out}", file=out, flush=True)
                ok = (report["pods_ready"] == report["pods_requested"] and report["duplicate_ips"] == 0
                      and report["leaked_enis"] == 0 and dataplane.passed(report))
                status = 0 if ok else 1
            finally:
                demo.teardown()
                leftovers = nx.list_namespaces() if demo.mode == "netns" else []
                sys.stderr.write("warmpool demo: cleaned up"
                                 + (f" (still present: {', '.join(leftovers)})" if leftovers else "") + "\n")
    except RuntimeError as e:
        sys.stderr.write(f"warmpool demo: {e}\n")
        return 1
    return status
