"""``warmpool demo``: the whole system end to end on one machine, for real.

1. The local stack in this process (:class:`emulated.local.LocalStack`): emulated
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

import contextlib
import logging
import os
import shutil
import subprocess
import sys
import threading
import time
import urllib.request
import warnings
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TextIO

from demo import cni as demo_cni
from demo import containerd as demo_containerd
from demo import dataplane, host
from demo import netns as nx
from demo.options import DemoOptions, Interrupted
from demo.report import DemoPod, DemoReport, LiveView, Status, ec2_delta, ec2_table, totals
from emulated.figures import leaked_enis
from node_agent.imds import parse_interfaces
from warmpool import names

log = logging.getLogger("warmpool.demo")

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


class PodRuntime(Protocol):
    """Who makes a pod: :mod:`demo.containerd` (CRI sandboxes) or :mod:`demo.cni`."""

    def prepare(self, demo: Demo, pod: DemoPod) -> None: ...

    def try_add(self, demo: Demo, node: Node, pod: DemoPod) -> bool: ...

    def del_pod(self, demo: Demo, node: Node, pod: DemoPod) -> None: ...


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
        """Node index -> :class:`demo.runtime_containerd.NodeRuntime` when containerd makes the pods."""
        self.notes: list[str] = []
        self.nodes: list[Node] = []
        self.pods: list[DemoPod] = []
        self.stack: Any = None
        self.hv: nx.Hypervisor = dataplane.RoutedVpc()
        self.run_dir = host.RUN_DIR
        self._procs: set[subprocess.Popen[bytes]] = set()
        self._procs_lock = threading.Lock()
        self._sync_thread: threading.Thread | None = None
        self.live: LiveView | None = None
        self._torn_down = False
        self._last_stats: dict[str, dict[str, int]] = {}
        self.cni_plugin = ""
        """The ``warmpool-cni`` executable the runtime calls."""
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
            self._last_stats = ec2_table(host.http_json(self.stack.outputs["stats_url"], timeout=2.0))
        except Exception:
            pass
        calls, mutating, throttled = totals(self._last_stats)
        ready = sum(1 for p in self.pods if p.ready_at is not None and not p.deleted)
        wanted = sum(1 for p in self.pods if not p.deleted)
        return Status(self.phase, ready, wanted, self.hv.plugged_now(), calls, mutating, throttled, self.elapsed())

    def check_stop(self) -> None:
        if self.stop.is_set():
            raise Interrupted()

    # ---- setup

    def setup(self) -> None:
        left = host.remove_leftovers(self.run_dir)  # main() holds the single-run lock
        if left:
            self.say(f"removed leftovers of an earlier run: {', '.join(left)}")
        self.run_dir.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(host.LOG_DIR, ignore_errors=True)
        host.LOG_DIR.mkdir(parents=True, exist_ok=True)
        why = None if self.o.netns is not False else "disabled with --no-netns"
        if why is None:
            why = nx.support()
        if why is not None:
            self.mode = "plain"
            msg = (
                f"network namespaces unavailable ({why}): the agents run without touching the host "
                "network (WARMPOOL_MANAGE_HOST_NETWORK=false, pod wiring recorded, not applied: "
                "WARMPOOL_POD_NETWORK=recorded) and pods are CNI ADDs without a namespace of their own"
            )
            self.notes.append(msg)
            self.say("warmpool demo: " + msg)
            self.runtime = "none"
        else:
            self._choose_runtime()
        self.cni_plugin = host.console_script("warmpool-cni")
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
        from demo import runtime_containerd as rc

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
        msg = (
            f"containerd unavailable ({why}): falling back to bare network namespaces made by the demo, "
            "with warmpool-cni invoked directly"
        )
        self.notes.append(msg)
        self.say("warmpool demo: " + msg)

    def _start_containerd(self) -> None:
        """One containerd per node; under ``auto`` a failure to start falls back to bare namespaces."""
        try:
            demo_containerd.start(self)
        except Exception as e:
            if self.o.runtime == "containerd":
                raise
            demo_containerd.teardown(self)
            self.runtime = "netns"
            first = str(e).strip().splitlines()[0][:300] if str(e).strip() else type(e).__name__
            msg = (
                f"containerd did not start ({first}): falling back to bare network namespaces made by "
                "the demo, with warmpool-cni invoked directly"
            )
            self.notes.append(msg)
            self.say("warmpool demo: " + msg)

    def _start_stack(self) -> None:
        from emulated.local import LocalOptions, LocalStack

        # The functions run in this process and log to stdout, as in Lambda; their
        # output goes to a file here (CloudWatch Logs' stand-in), the report to the terminal.
        self._functions_log = open(host.LOG_DIR / "functions.log", "a", buffering=1)  # noqa: SIM115
        sys.stdout = self._functions_log
        warnings.filterwarnings("ignore", category=UserWarning, module="aws_lambda_powertools.*")

        self.stack = LocalStack(
            LocalOptions(
                cluster=self.o.cluster,
                attach_delay_s=self.o.attach_delay_s,
                api_latency_s=self.o.api_latency_s,
                reconcile_every_s=30.0,
                gc_age_s=1,
                # Shortened, like the agents' timings above, so the scale-down settles within
                # the demo: the allocator deletes no ENI younger than this (default 60 s).
                extra_env=(("WARMPOOL_MIN_ENI_AGE_S", "10"),),
            )
        )
        out = self.stack.start()
        fns = out.get("functions", {})
        self.say(
            f"local stack up at {out['endpoint']} (functions: "
            + ", ".join(f"{k}={'yes' if v else 'NO'}" for k, v in fns.items())
            + f"); its dashboard while the demo runs: {out['dashboard_url']}"
        )
        if not fns.get("allocate"):
            raise RuntimeError("the allocate function did not load; see the message above")

    def _add_node(self, k: int) -> None:
        emu = self.stack.ec2
        name = f"node-{k}"
        subnet = self.stack.subnet_ids[k % len(self.stack.subnet_ids)]
        iid = emu.run_instance(
            self.o.instance_type,
            subnet,
            tags={names.cluster_tag_key(self.o.cluster): "owned", "Name": f"wp-demo-{name}"},
        )
        ns = nx.node_ns(k)
        d = self.run_dir / name
        (d / "state").mkdir(parents=True, exist_ok=True)
        node = Node(k, name, iid, ns, d, str(d / "agent.sock"), host.free_port(), {})
        self.nodes.append(node)
        self._ns_by_instance[iid] = ns
        if self.mode == "netns":
            self.hv.add_node(ns)
            for link in self._attached(iid):  # the primary ENI, configured as the instance's DHCP would
                self.hv.plug(ns, link, configure_primary=link.device_index == 0)

    def _agent_env(self, node: Node) -> dict[str, str]:
        out = self.stack.outputs
        base = {
            k: v
            for k, v in os.environ.items()
            if k in ("PATH", "HOME", "LANG", "LC_ALL", "PYTHONPATH", "TMPDIR", "VIRTUAL_ENV")
        }
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
            host.RUN_MARK: str(os.getpid()),
        }
        env.update(self.o.agent_env)
        return env

    def _start_agent(self, node: Node) -> None:
        node.env = self._agent_env(node)
        node.log_path = host.LOG_DIR / f"agent-{node.name}.log"
        logf = open(node.log_path, "wb")  # noqa: SIM115 (closed by the child's exit; we keep no handle)
        try:
            argv = [host.console_script("warmpool-agent")]
            if self.o.agent_wrap is not None:
                argv, node.env = self.o.agent_wrap(node, argv, node.env)
            node.proc = subprocess.Popen(
                argv,
                env=node.env,
                stdout=logf,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        finally:
            logf.close()
        host.record_pid(self.run_dir, node.proc.pid)

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
                    raise RuntimeError(
                        f"agent of {node.name} exited with {node.proc.returncode}:\n" + self.agent_tail(node)
                    )
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{node.metrics_port}/readyz", timeout=1) as r:
                        if r.status == 200:
                            waiting.remove(node)
                except OSError:
                    pass
            if waiting and time.monotonic() > deadline:
                raise RuntimeError(
                    f"agents not ready after {timeout_s:.0f}s: "
                    + ", ".join(n.name for n in waiting)
                    + "\n"
                    + self.agent_tail(waiting[0])
                )
            if waiting:
                self.stop.wait(0.2)
        self.say(f"{len(self.nodes)} agents ready ({self.elapsed():.1f}s)")

    # ---- the hypervisor

    def _attached(self, instance_id: str) -> list[nx.EniLink]:
        """ENIs whose attach is visible on the instance now (the emulator's IMDS view; no API call)."""
        return [
            nx.EniLink(a.info.eni_id, a.info.mac, a.info.device_index, a.info.primary_ip, a.info.subnet_cidr)
            for a in parse_interfaces(self.stack.ec2.instance_metadata(instance_id))
        ]

    def _on_attach(self, instance_id: str, eni: dict[str, Any]) -> None:
        """Called by the emulator (under its lock) when an attach becomes visible."""
        ns = self._ns_by_instance.get(instance_id)
        if ns is None:
            return
        subnet = self.stack.ec2.subnets.get(eni.get("SubnetId", ""))
        try:
            self.hv.plug(
                ns,
                nx.EniLink(
                    eni["NetworkInterfaceId"],
                    eni["MacAddress"],
                    int(eni["Attachment"]["DeviceIndex"]),
                    eni["PrivateIpAddress"],
                    subnet.cidr if subnet is not None else "10.0.0.0/16",
                ),
            )
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

    @contextlib.contextmanager
    def tracked(self, p: subprocess.Popen[bytes]) -> Iterator[None]:
        """While the block runs, ``p`` is one of the processes :meth:`teardown` kills."""
        with self._procs_lock:
            self._procs.add(p)
        try:
            yield
        finally:
            with self._procs_lock:
                self._procs.discard(p)

    def _pod_runtime(self) -> PodRuntime:
        """Who makes a pod: :mod:`demo.containerd` (CRI sandboxes) or :mod:`demo.cni`."""
        if self.runtime == "containerd":
            return demo_containerd
        return demo_cni

    def add_pod(self, node: Node, pod: DemoPod, deadline: float) -> None:
        """ADD until it succeeds, retried like a kubelet (a failed sandbox is retried with backoff)."""
        rt = self._pod_runtime()
        rt.prepare(self, pod)
        backoff = 0.2
        while not self.stop.is_set():
            if pod.first_add_at is None:
                pod.first_add_at = time.monotonic()
            pod.attempts += 1
            if rt.try_add(self, node, pod):
                return
            if time.monotonic() > deadline:
                return
            self.stop.wait(backoff)
            backoff = min(backoff * 2, 2.0)

    def del_pod(self, node: Node, pod: DemoPod) -> None:
        self._pod_runtime().del_pod(self, node, pod)

    def scale_out(self) -> float:
        self.phase = "scale-out"
        n = self.o.nodes * self.o.pods_per_node
        self.say(f"scale-out: {n} pods ({self.o.pods_per_node} per node), CNI ADD through warmpool-cni")
        for node in self.nodes:
            for j in range(self.o.pods_per_node):
                self.pods.append(DemoPod(node.k, j, nx.pod_ns(node.k, j), f"wpdemo{node.k:03d}{j:04d}" + "0" * 52))
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
            out.append(
                {
                    "node": node.name,
                    "instance_id": node.instance_id,
                    "enis": len(macs),
                    "addresses": sum(len(d["local-ipv4s"].split("\n")) - 1 for d in macs.values()),
                    "links": links,
                }
            )
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
        kept = {
            n.k: sum(1 for p in self.pods if p.node == n.k and p.ready_at is not None and not p.deleted)
            for n in self.nodes
        }
        settled = False
        while time.monotonic() - start < self.o.settle_timeout_s:
            self.check_stop()
            if all(self._settled(n, kept[n.k]) for n in self.nodes):
                settled = True
                break
            self.stop.wait(0.5)
        after = sum(self.pool_addresses(n) for n in self.nodes)
        took = time.monotonic() - start
        self.say(
            f"scale-down: addresses on the nodes {before} -> {after}"
            + (f", settled in {took:.1f}s" if settled else f", not settled after {took:.0f}s")
        )
        if not settled:
            self.notes.append(
                f"pools had not settled to their targets {self.o.settle_timeout_s:.0f}s after the scale-down"
            )
        return {
            "deleted": len(victims),
            "kept": sum(kept.values()),
            "addresses_before": before,
            "addresses_after": after,
            "settled": settled,
            "settle_s": round(took, 3),
        }

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
        stats = ec2_table(host.http_json(self.stack.outputs["stats_url"]))  # before the demo's own check below
        leaked = leaked_enis(self.stack.ec2)  # as the bench counts them (emulated/figures.py)
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
        """Packets through the pods just created (demo/dataplane.py): pod to pod, egress, NodePort."""
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
