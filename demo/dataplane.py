"""A data plane for the demo and the namespace tests: packets between pods, nodes and
an "internet" host, through an emulated VPC that forwards the way AWS's does.

* **The VPC** (``RoutedVpc``) is a namespace that *routes* (it is not a bridge): every
  ENI is a veth whose far end lives in the VPC namespace, and the VPC knows which
  ENI holds which address (``ip route <addr>/32 via <ENI primary> dev <veth>``), as
  the VPC's mapping service does. It answers ARP for everything it routes (proxy
  ARP; gateways ``subnet base + 1`` are its own addresses) and drops a packet whose
  source address does not belong to the ENI it came from (strict ``rp_filter`` on
  every ENI's veth): EC2's source/destination check. A NodePort reply that leaves
  by the wrong ENI is dropped here, as it is in AWS.
* **The internet** is a namespace beyond a gateway stand-in (``igw0`` in the VPC,
  ``wan0`` there) holding one host, :data:`INTERNET_HOST`, with a TCP echo server
  that answers with the source address it saw: the node's primary address when the
  node SNATs, the pod's own with ``AWS_VPC_K8S_CNI_EXTERNALSNAT=true``.
* **Probes** (``ping``, ``tcp_echo``) run inside any namespace (by path or name) and
  the TCP echo servers live in this process: each listening socket is created in
  its namespace by a thread that entered it (``setns``) and served from one thread.

:func:`check_demo` runs the demo's checks; :func:`run_checks` is the same on plain
data for tests and other callers (a containerd runtime's sandboxes are namespaces
too: pass their paths).
"""

from __future__ import annotations

import ipaddress
import json
import logging
import selectors
import socket
import subprocess
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

from demo import netns as nx

log = logging.getLogger("warmpool.demo.dataplane")
T = TypeVar("T")

INET_NS = f"{nx.PREFIX}inet"
INTERNET_HOST = "203.0.113.10"
"""TEST-NET-3: never a real host."""
IGW_VPC_SIDE = "100.64.0.1"
IGW_INET_SIDE = "100.64.0.2"
ECHO_PORT = 7007
NODEPORT = 30080
KUBE_PROXY_TABLE = "wpdemo_kubeproxy"
"""The NodePort DNAT (kube-proxy's job, not warmpool's) lives in a table of its own."""


def run_in_netns(path: str, fn: Callable[[], T]) -> T:
    """:func:`node_agent.netlink.run_in_netns` (imported when first needed: the report's
    text rendering imports this module and needs no netlink)."""
    from node_agent.netlink import run_in_netns as enter

    return enter(path, fn)


def ns_path(ns: str) -> str:
    return ns if "/" in ns else nx.netns_path(ns)


def _sysctl(ns: str, key: str, value: str) -> None:
    path = "/proc/sys/" + key.replace(".", "/")

    def write() -> None:
        with open(path, "w") as f:
            f.write(value)

    run_in_netns(ns_path(ns), write)


# --------------------------------------------------------------------------- the VPC


class RoutedVpc(nx.Hypervisor):
    """The demo's hypervisor with a routing VPC and an internet beyond it (module docstring)."""

    def __init__(
        self, vpc_ns: str = nx.VPC_NS, inet_ns: str = INET_NS, vpc_cidrs: Sequence[str] = ("10.0.0.0/16",)
    ) -> None:
        super().__init__(vpc_ns)
        self.inet_ns = inet_ns
        self.vpc_cidrs = list(vpc_cidrs)
        self._peer_of: dict[str, tuple[str, str]] = {}  # mac -> (VPC-side veth, ENI primary address)

    def start(self) -> None:
        nx.add_namespace(self.vpc_ns)
        _sysctl(self.vpc_ns, "net.ipv4.ip_forward", "1")
        _sysctl(self.vpc_ns, "net.ipv4.conf.all.rp_filter", "0")
        nx.add_namespace(self.inet_ns)
        nx.ip(
            "link", "add", "igw0", "netns", self.vpc_ns, "type", "veth", "peer", "name", "wan0", "netns", self.inet_ns
        )
        nx.ip("-n", self.vpc_ns, "addr", "add", f"{IGW_VPC_SIDE}/30", "dev", "igw0")
        nx.ip("-n", self.vpc_ns, "link", "set", "igw0", "up")
        nx.ip("-n", self.vpc_ns, "route", "replace", "default", "via", IGW_INET_SIDE)
        nx.ip("-n", self.inet_ns, "addr", "add", f"{IGW_INET_SIDE}/30", "dev", "wan0")
        nx.ip("-n", self.inet_ns, "link", "set", "wan0", "up")
        nx.ip("-n", self.inet_ns, "addr", "add", f"{INTERNET_HOST}/32", "dev", "lo")
        for cidr in self.vpc_cidrs:
            nx.ip("-n", self.inet_ns, "route", "replace", cidr, "via", IGW_VPC_SIDE)

    def _gateway(self, cidr: str) -> None:
        """The subnet's router (base + 1): an address of the VPC namespace."""
        if cidr in self._gateways:
            return
        net = ipaddress.IPv4Network(cidr)
        nx.ip("-n", self.vpc_ns, "addr", "add", f"{net.network_address + 1}/32", "dev", "lo", check=False)
        self._gateways.add(cidr)

    def _wire_vpc_side(self, peer: str, eni: nx.EniLink) -> None:
        """The VPC end proxies ARP, checks sources strictly and routes the ENI's primary address to it."""
        for key, value in (
            (f"net.ipv4.conf.{peer}.proxy_arp", "1"),
            (f"net.ipv4.neigh.{peer}.proxy_delay", "0"),
            (f"net.ipv4.conf.{peer}.rp_filter", "1"),
        ):
            _sysctl(self.vpc_ns, key, value)
        nx.ip("-n", self.vpc_ns, "link", "set", peer, "up")
        self._gateway(eni.subnet_cidr)
        nx.ip("-n", self.vpc_ns, "route", "replace", f"{eni.primary_ip}/32", "dev", peer, "scope", "link")
        self._peer_of[eni.mac.lower()] = (peer, eni.primary_ip)

    def unplug(self, ns: str, mac: str) -> bool:
        with self._lock:
            self._peer_of.pop(mac.lower(), None)
        return super().unplug(ns, mac)

    def set_addresses(self, mac: str, cidrs: Iterable[str]) -> int:
        """Make the VPC deliver exactly ``cidrs`` (secondary addresses as ``/32``, prefixes) to
        the ENI with ``mac``. Returns routes changed; an unplugged MAC changes nothing."""
        with self._lock:
            entry = self._peer_of.get(mac.lower())
        if entry is None:
            return 0
        peer, primary = entry
        want = {str(ipaddress.IPv4Network(c if "/" in c else f"{c}/32", strict=False)) for c in cidrs}
        want.discard(f"{primary}/32")
        out = nx.ip("-j", "-n", self.vpc_ns, "-4", "route", "show", "dev", peer, check=False).strip()
        have = set()
        for r in json.loads(out) if out else []:
            dst = str(r.get("dst", ""))
            if r.get("gateway") == primary:
                have.add(dst if "/" in dst else f"{dst}/32")
        changes = 0
        for dst in sorted(have - want):
            nx.ip("-n", self.vpc_ns, "route", "del", dst, "dev", peer, check=False)
            changes += 1
        for dst in sorted(want - have):
            nx.ip("-n", self.vpc_ns, "route", "replace", dst, "via", primary, "dev", peer, "onlink")
            changes += 1
        return changes

    def refresh(self, metadata: Callable[[str], Mapping[str, Any]], instances: Iterable[str]) -> int:
        """Routes for every address EC2 shows on each instance's ENIs (the emulator's IMDS tree)."""
        changes = 0
        for iid in instances:
            macs = metadata(iid)["network"]["interfaces"]["macs"]
            for mac, d in macs.items():
                ips = [x for x in str(d.get("local-ipv4s", "")).split("\n") if x][1:]
                prefixes = [x for x in str(d.get("ipv4-prefix", "")).split("\n") if x]
                changes += self.set_addresses(mac, [*ips, *prefixes])
        return changes


# --------------------------------------------------------------------------- probes


class EchoServers:
    """TCP echo servers inside namespaces, served by one thread of this process.
    A connection gets back ``"<source address it came from> <what it sent>"``."""

    def __init__(self) -> None:
        self._sel = selectors.DefaultSelector()
        self._socks: list[socket.socket] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="dataplane-echo", daemon=True)
        self._lock = threading.Lock()
        self.served = 0

    def __enter__(self) -> EchoServers:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def listen(self, ns: str, addr: str = "0.0.0.0", port: int = ECHO_PORT) -> None:
        def make() -> socket.socket:
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((addr, port))
            s.listen(64)
            s.setblocking(False)
            return s

        s = run_in_netns(ns_path(ns), make)
        with self._lock:
            self._socks.append(s)
            self._sel.register(s, selectors.EVENT_READ)

    def _serve(self) -> None:
        while not self._stop.is_set():
            with self._lock:
                ready = self._sel.select(timeout=0.1) if self._socks else []
            if not ready:
                self._stop.wait(0.05)
                continue
            for key, _ in ready:
                srv = key.fileobj
                assert isinstance(srv, socket.socket)
                try:
                    conn, peer = srv.accept()
                except (BlockingIOError, OSError):
                    continue
                threading.Thread(target=self._answer, args=(conn, peer[0]), daemon=True).start()

    def _answer(self, conn: socket.socket, peer: str) -> None:
        with conn:
            conn.settimeout(3.0)
            try:
                data = conn.recv(1024)
                conn.sendall(f"{peer} ".encode() + data)
                self.served += 1
            except OSError:
                pass

    def close(self) -> None:
        """Stop serving and close every socket (a socket keeps its namespace alive)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=2)
        with self._lock:
            for s in self._socks:
                try:
                    self._sel.unregister(s)
                except (KeyError, ValueError):
                    pass
                s.close()
            self._socks.clear()


@dataclass(frozen=True)
class Probe:
    ok: bool
    seen_source: str | None = None
    """The source address the echo server saw (None if no answer)."""
    error: str = ""


def tcp_echo(ns: str, dst: str, port: int = ECHO_PORT, payload: str = "warmpool", timeout_s: float = 3.0) -> Probe:
    """Connect from namespace ``ns`` to ``dst:port``, send ``payload``; ok when it comes back."""

    def go() -> Probe:
        with socket.create_connection((dst, port), timeout=timeout_s) as s:
            s.sendall(payload.encode())
            s.settimeout(timeout_s)
            data = b""
            while not data.endswith(payload.encode()):
                chunk = s.recv(1024)
                if not chunk:
                    break
                data += chunk
        seen, _, echoed = data.decode(errors="replace").partition(" ")
        if echoed != payload:
            return Probe(False, seen or None, f"echo {data!r}")
        return Probe(True, seen)

    try:
        return run_in_netns(ns_path(ns), go)
    except OSError as exc:
        return Probe(False, None, f"{type(exc).__name__}: {exc}")


def ping(ns: str, dst: str, timeout_s: int = 2) -> bool:
    """``nsenter --net=NS ping -c1 -W2 DST``"""
    r = subprocess.run(
        ["nsenter", f"--net={ns_path(ns)}", "ping", "-n", "-q", "-c1", f"-W{timeout_s}", dst],
        capture_output=True,
        text=True,
        timeout=timeout_s + 5,
        check=False,
    )
    return r.returncode == 0


def nodeport_dnat(
    node_ns: str,
    primary_if: str,
    pod_ip: str,
    port: int = NODEPORT,
    target_port: int = ECHO_PORT,
    *,
    remove: bool = False,
) -> None:
    """What kube-proxy does for a NodePort (``externalTrafficPolicy: Local``, no masquerade): DNAT
    ``<node>:port`` arriving on the primary ENI to the pod, in a table of its own."""
    base = ["nsenter", f"--net={ns_path(node_ns)}", "nft"]
    if remove:
        subprocess.run([*base, "delete", "table", "ip", KUBE_PROXY_TABLE], capture_output=True, check=False)
        return
    script = (
        f"table ip {KUBE_PROXY_TABLE} {{\n chain pre {{\n  type nat hook prerouting priority dstnat; "
        f'policy accept;\n  iifname "{primary_if}" tcp dport {port} dnat to {pod_ip}:{target_port}\n }}\n}}\n'
    )
    r = subprocess.run([*base, "-f", "-"], input=script, capture_output=True, text=True, check=False)
    if r.returncode != 0:
        raise RuntimeError(f"nft (kube-proxy stand-in): {r.stderr.strip()}")


# --------------------------------------------------------------------------- the checks


@dataclass(frozen=True)
class PodEnd:
    """A pod as the checks see it."""

    ns: str
    ip: str
    node: int
    on_secondary_eni: bool = False


@dataclass(frozen=True)
class NodeEnd:
    ns: str
    primary_ip: str
    primary_if: str = "eth0"


@dataclass
class Results:
    pod_to_pod_ok: bool = False
    pod_to_pod_checked: int = 0
    egress_ok: bool = False
    egress_checked: int = 0
    egress_source: str | None = None
    """``node``: every pod was seen as its node's primary address; ``pod``: as itself."""
    nodeport_ok: bool = False
    nodeport_checked: int = 0
    failures: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "pod_to_pod_ok": self.pod_to_pod_ok,
            "pod_to_pod_checked": self.pod_to_pod_checked,
            "egress_ok": self.egress_ok,
            "egress_checked": self.egress_checked,
            "egress_source": self.egress_source,
            "nodeport_ok": self.nodeport_ok,
            "nodeport_checked": self.nodeport_checked,
            "dataplane_failures": self.failures[:10],
        }


def run_checks(
    pods: Sequence[PodEnd],
    nodes: Sequence[NodeEnd],
    *,
    snat: bool,
    parallel: int = 6,
    echo: EchoServers | None = None,
    internet_ns: str = INET_NS,
) -> Results:
    """Every pod pings and TCP-echoes a pod on the next node; every pod reaches the internet
    host, which must see the node's primary address (``snat``) or the pod's; a NodePort DNAT to a
    pod on a secondary ENI answers a client on another node. Pods need echo servers (started here
    and the internet host in ``internet_ns``, started here unless ``echo`` already serves them)."""
    res = Results()
    by_node: dict[int, list[PodEnd]] = {}
    for p in pods:
        by_node.setdefault(p.node, []).append(p)
    own = echo is None
    servers = echo or EchoServers().__enter__()
    try:
        if own:
            servers.listen(internet_ns, INTERNET_HOST)
            for p in pods:
                servers.listen(p.ns)
        # pod to pod, across nodes
        pairs: list[tuple[PodEnd, PodEnd]] = []
        node_ids = sorted(by_node)
        if len(node_ids) > 1:
            for p in pods:
                others = by_node[node_ids[(node_ids.index(p.node) + 1) % len(node_ids)]]
                pairs.append((p, others[pods.index(p) % len(others)]))

        def p2p(pair: tuple[PodEnd, PodEnd]) -> str | None:
            src, dst = pair
            if not ping(src.ns, dst.ip):
                return f"ICMP {src.ip} (node {src.node}) -> {dst.ip} (node {dst.node}) got no reply"
            probe = tcp_echo(src.ns, dst.ip)
            if not probe.ok:
                return f"TCP {src.ip} -> {dst.ip}:{ECHO_PORT}: {probe.error}"
            if probe.seen_source != src.ip:
                return (
                    f"TCP {src.ip} -> {dst.ip}: seen as {probe.seen_source} (pod traffic inside the VPC is not SNATed)"
                )
            return None

        def egress(p: PodEnd) -> tuple[str | None, str | None]:
            probe = tcp_echo(p.ns, INTERNET_HOST)
            if not probe.ok:
                return None, f"egress {p.ip} -> {INTERNET_HOST}: {probe.error}"
            return probe.seen_source, None

        with ThreadPoolExecutor(max_workers=max(1, parallel), thread_name_prefix="dataplane") as pool:
            p2p_errs = [e for e in pool.map(p2p, pairs) if e]
            seen = list(pool.map(egress, pods))
        res.pod_to_pod_checked = len(pairs)
        res.pod_to_pod_ok = bool(pairs) and not p2p_errs
        res.failures += p2p_errs
        sources = set()
        for p, (src, err) in zip(pods, seen, strict=True):
            if err:
                res.failures.append(err)
                continue
            node_ip = nodes[p.node].primary_ip
            sources.add("node" if src == node_ip else "pod" if src == p.ip else f"other:{src}")
            want = node_ip if snat else p.ip
            if src != want:
                res.failures.append(
                    f"egress {p.ip} seen as {src}, expected {want} ({'SNAT' if snat else 'external SNAT'})"
                )
        res.egress_checked = len(pods)
        res.egress_source = sources.pop() if len(sources) == 1 else ("mixed" if sources else None)
        res.egress_ok = bool(pods) and len(res.failures) == len(p2p_errs)
        # NodePort to a pod on a secondary ENI, from another node
        target = next((p for p in pods if p.on_secondary_eni), None)
        if target is not None and len(nodes) > 1:
            node = nodes[target.node]
            client = nodes[(target.node + 1) % len(nodes)]
            nodeport_dnat(node.ns, node.primary_if, target.ip)
            try:
                probe = tcp_echo(client.ns, node.primary_ip, NODEPORT)
            finally:
                nodeport_dnat(node.ns, node.primary_if, target.ip, remove=True)
            res.nodeport_checked = 1
            res.nodeport_ok = probe.ok and probe.seen_source == client.primary_ip
            if not res.nodeport_ok:
                res.failures.append(
                    f"NodePort {node.primary_ip}:{NODEPORT} -> pod {target.ip} (secondary ENI) "
                    f"from {client.primary_ip}: {probe.error or 'seen as ' + str(probe.seen_source)}"
                )
    finally:
        if own:
            servers.close()
    return res


def check_demo(demo: Any) -> dict[str, Any]:
    """The demo's hook: route every address the emulated EC2 shows, then :func:`run_checks` on
    the ready pods (SNAT expected unless the agents run with external SNAT)."""
    from node_agent.config import load_hostnet

    emu = demo.stack.ec2
    instances = [n.instance_id for n in demo.nodes]
    if isinstance(demo.hv, RoutedVpc):
        demo.hv.refresh(emu.instance_metadata, instances)
    nodes: list[NodeEnd] = []
    secondary: set[str] = set()
    for n in demo.nodes:
        md = emu.instance_metadata(n.instance_id)
        for d in md["network"]["interfaces"]["macs"].values():
            if int(d["device-number"]) > 0:
                secondary.update(x for x in str(d["local-ipv4s"]).split("\n")[1:] if x)
        nodes.append(NodeEnd(n.ns, str(md["local-ipv4"])))
    pods = [
        PodEnd(p.netns, p.ip, p.node, p.ip in secondary)
        for p in demo.pods
        if p.ready_at is not None and p.ip and not p.deleted
    ]
    snat = not load_hostnet(demo.nodes[0].env).external_snat if demo.nodes else True
    inet = demo.hv.inet_ns if isinstance(demo.hv, RoutedVpc) else INET_NS
    return run_checks(pods, nodes, snat=snat, internet_ns=inet).to_json()


# --------------------------------------------------------------------------- the demo's report

KEYS = (
    "pod_to_pod_ok",
    "pod_to_pod_checked",
    "egress_ok",
    "egress_checked",
    "egress_source",
    "nodeport_ok",
    "nodeport_checked",
)


def not_checked(why: str) -> dict[str, Any]:
    """The keys when no packet could be sent (no namespaces): nothing checked, nothing ok."""
    return {**Results().to_json(), "dataplane_failures": [], "dataplane_skipped": why}


def passed(report: Mapping[str, Any]) -> bool:
    """The demo's verdict on its data plane: every check that ran passed (none ran: True)."""
    if report.get("dataplane_skipped"):
        return True
    # Pod to pod needs two nodes: with one, it is not checked (and says so), not failed.
    p2p = not report.get("pod_to_pod_checked") or bool(report.get("pod_to_pod_ok"))
    return (
        p2p
        and bool(report.get("egress_ok"))
        and (not report.get("nodeport_checked") or bool(report.get("nodeport_ok")))
    )


def render_lines(report: Mapping[str, Any]) -> list[str]:
    """The report's data-plane lines (text form)."""
    if "pod_to_pod_checked" not in report:
        return []
    if report.get("dataplane_skipped"):
        return [f"  data plane          not checked ({report['dataplane_skipped']})"]

    def mark(ok: Any) -> str:
        return "ok" if ok else "FAILED"

    lines = [
        f"  pod to pod          {mark(report.get('pod_to_pod_ok'))}: {report.get('pod_to_pod_checked', 0)} pods "
        "pinged and TCP-echoed a pod on another node"
        if report.get("pod_to_pod_checked")
        else "  pod to pod          not checked (one node: no pod on another node to reach)",
        f"  egress              {mark(report.get('egress_ok'))}: {report.get('egress_checked', 0)} pods reached "
        f"{INTERNET_HOST}, seen as the {report.get('egress_source') or '?'} address",
        f"  NodePort            {mark(report.get('nodeport_ok'))}: DNAT to a pod on a secondary ENI answered "
        "through the primary ENI"
        if report.get("nodeport_checked")
        else "  NodePort            not checked (no pod on a secondary ENI or one node)",
    ]
    lines += [f"    {f}" for f in report.get("dataplane_failures", [])[:5]]
    return lines
