"""The e2e tier's Kubernetes: a control plane and one kubelet a node, built from source.

Each node, as on EC2: the node is a network namespace (the instance) whose ENIs
the demo's hypervisor plugs as the local stack's emulated EC2 attaches them;
containerd (Debian's) and the kubelet run inside it, so the DaemonSet's
``hostNetwork`` pods (the agent and its init container) live in the node's
network, as on a real node. The control plane (etcd, kube-apiserver,
kube-controller-manager, kube-scheduler) and the local stack run on this host,
reached from the node over a veth link of link-local addresses (the node's
stand-in for the VPC path to the EKS endpoint and to the AWS APIs).

Host paths the DaemonSet mounts (``/opt/cni/bin``, ``/etc/cni/net.d``,
``/opt/warmpool``, ``/var/lib/warmpool``, ``/run/warmpool``, and read-only the
kubelet's config directories) are this machine's for the first node, removed on
teardown when this run made them. Every further node's containerd and kubelet
run in a mount namespace of their own where directories of the run stand over
those paths, so each node has its own CNI directories, checkpoint and socket, as
separate machines have. Each node reaches IMDS at ``169.254.169.254``, which its
network translates to one server answering each node for its own instance (by
the request's source address), so the one DaemonSet configuration serves all.

The binaries come from ``e2e/build-kubernetes.sh`` (cached by version), the agent
image from ``e2e/build-images.sh`` (the repository's Dockerfile, via Buildah), the
pause and workload image is the runtime tier's local busybox image.
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
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
KUBERNETES_VERSION = os.environ.get("WARMPOOL_E2E_KUBERNETES", "v1.35.4")
# The node's link to this host: a /30 on a veth pair this harness makes, inside the emulated
# VPC's CIDR (10.0.0.0/16) and outside its subnets, as the EKS endpoint's and the VPC
# endpoints' addresses are: the agent SNATs what leaves the node for outside the VPC (as the
# VPC CNI does), which would rewrite the node's own traffic to the control plane. The kubelet
# refuses a link-local node address. The host routes the VPC's CIDR to the node, so nothing
# this cluster sends for the VPC leaves this machine.
VPC_CIDR = "10.0.0.0/16"
HOST_ADDR = "10.0.255.253"
NODE_ADDR = "10.0.255.254"
HOST_LINK, NODE_LINK = "wpe2e-h0", "wpe2e-n0"
NODE_NAME = "e2e-node-0"
IMDS_ADDR = "169.254.169.254"
CLUSTER = "e2e"
INSTANCE_TYPE = "m5.large"
TOKEN = "warmpool-e2e-admin-token"
HOST_PATHS = (
    "/opt/cni/bin",
    "/etc/cni/net.d",
    "/opt/warmpool",
    "/var/lib/warmpool",
    "/run/warmpool",
    # read-only in the agent (the kubelet's maxPods); made here so the run removes what it made
    "/etc/kubernetes/kubelet",
    "/etc/systemd/system/kubelet.service.d",
)
AGENT_IMAGE_TAG = "e2e"
INSTALLED_FILES = ("/etc/cni/net.d/05-warmpool.conflist", "/opt/cni/bin/warmpool-cni")
# The cold-start test's names: the node resolves the local stack's endpoint by name through
# its resolver (the stand-in for the VPC's), as an agent on EC2 resolves the AWS endpoints;
# the kubelet points ClusterFirst pods at the cluster DNS address, as EKS nodes do.
ENDPOINT_NAME = "aws.e2e.internal"
CLUSTER_DNS_IP = "10.96.0.10"
PACKAGES = ("buildah", "debootstrap", "containerd", "runc", "busybox-static", "containernetworking-plugins", "iproute2")


class E2eError(RuntimeError):
    """The cluster could not be set up; the message says which step and shows its log."""


def _run(
    cmd: Sequence[str], *, timeout: float = 120, check: bool = True, **kw: Any
) -> subprocess.CompletedProcess[str]:
    r = subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout, check=False, **kw)
    if check and r.returncode != 0:
        raise E2eError(f"{' '.join(cmd)}: {(r.stderr or r.stdout).strip()[-3000:]}")
    return r


def install_missing() -> None:
    missing = [p for p, b in (("buildah", "buildah"), ("debootstrap", "debootstrap")) if shutil.which(b) is None]
    if missing:
        _run(
            [
                "sh",
                "-c",
                "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq " + " ".join(PACKAGES),
            ],
            timeout=900,
        )


def kubernetes_binaries() -> Path:
    """The control plane's and the kubelet's binaries (built from source on first use, then cached)."""
    r = _run(["bash", str(ROOT / "e2e/build-kubernetes.sh"), KUBERNETES_VERSION], timeout=4 * 3600)
    return Path(r.stdout.strip().splitlines()[-1])


def agent_image(out_dir: Path, tag: str = AGENT_IMAGE_TAG) -> Path:
    """The agent image from infra/docker/agent.Dockerfile, as an OCI archive."""
    r = _run(["bash", str(ROOT / "e2e/build-images.sh"), str(out_dir), tag], timeout=3600)
    return Path(r.stdout.strip().splitlines()[-1])


def agent_variant(out_dir: Path, tag: str, revision: str) -> str:
    """The agent image with label ``warmpool.io/e2e-revision`` and env ``WARMPOOL_E2E_REVISION``
    set to ``revision``, tagged ``tag``: another image (its own ID) of the same code, for a
    rolling update. Written as an OCI archive ``agent-<tag>.oci.tar`` in ``out_dir``."""
    base, ref = f"docker.io/warmpool/agent:{AGENT_IMAGE_TAG}", f"docker.io/warmpool/agent:{tag}"
    env = {**os.environ, "BUILDAH_ISOLATION": "chroot"}
    ctr = _run(["buildah", "from", base], env=env).stdout.strip()
    try:
        _run(
            [
                "buildah",
                "config",
                "--label",
                f"warmpool.io/e2e-revision={revision}",
                "--env",
                f"WARMPOOL_E2E_REVISION={revision}",
                ctr,
            ],
            env=env,
        )
        _run(["buildah", "commit", "--quiet", ctr, ref], env=env)
    finally:
        _run(["buildah", "rm", ctr], check=False, env=env)
    archive = out_dir / f"agent-{tag}.oci.tar"
    archive.unlink(missing_ok=True)
    _run(["buildah", "push", "--quiet", ref, f"oci-archive:{archive}:{ref}"], env=env, timeout=600)
    return ref


@dataclass
class Proc:
    name: str
    argv: list[str]
    log: Path
    env: Mapping[str, str] | None = None
    popen: subprocess.Popen[bytes] | None = None

    def start(self) -> Proc:
        with open(self.log, "ab") as f:
            self.popen = subprocess.Popen(
                self.argv,
                stdout=f,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=dict(self.env) if self.env is not None else None,
                start_new_session=True,
            )
        return self

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self, timeout: float = 15) -> None:
        if self.popen is None or self.popen.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.popen.pid, 15)
        try:
            self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, 9)
            self.popen.wait(timeout=5)


def _free_port() -> int:
    from demo.host import free_port

    return free_port()


def _wait(what: str, ok: Any, timeout_s: float, procs: Sequence[Proc] = (), interval: float = 0.5) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        for p in procs:
            if not p.alive():
                raise E2eError(f"{p.name} exited while waiting for {what}:\n{p.tail()}")
        try:
            got = ok()
        except Exception:
            got = None
        if got:
            return got
        if time.monotonic() > deadline:
            raise E2eError(
                f"{what}: not after {timeout_s:.0f}s" + "".join(f"\n--- {p.name}:\n{p.tail(15)}" for p in procs)
            )
        time.sleep(interval)  # the harness polling daemons, not warmpool logic


@dataclass
class KubeNode:
    """One node: its instance, network namespace, link to this host, containerd and kubelet.
    Node 0 uses this machine's host paths; every other node its own (the module's docstring)."""

    index: int
    instance_id: str
    ns: str
    kdir: Path
    mount_ns: str = ""
    """'' for node 0; else the file holding the node's mount namespace."""
    containerd: Any = None

    @property
    def name(self) -> str:
        return f"e2e-node-{self.index}"

    @property
    def host_addr(self) -> str:
        """This host's end of the node's /30 (node 0: HOST_ADDR, the address everything listens on)."""
        return f"10.0.255.{253 - 4 * self.index}"

    @property
    def node_addr(self) -> str:
        return f"10.0.255.{254 - 4 * self.index}"

    @property
    def links(self) -> tuple[str, str]:
        return f"wpe2e-h{self.index}", f"wpe2e-n{self.index}"

    @property
    def kubelet(self) -> str:
        """Its kubelet's name in KubeCluster.procs (node 0's is "kubelet", as the tests have it)."""
        return "kubelet" if self.index == 0 else f"kubelet-{self.index}"

    def enter(self) -> list[str]:
        """The prefix that runs a program on the node (its network, and its mount namespace)."""
        mount = [f"--mount={self.mount_ns}"] if self.mount_ns else []
        return ["nsenter", *mount, f"--net=/var/run/netns/{self.ns}"]

    def host_path(self, path: str) -> str:
        """A path of the node's mount namespace as this process opens it (a sandbox's netns pin)."""
        if not self.mount_ns or self.containerd is None or self.containerd.proc is None:
            return path
        return f"/proc/{self.containerd.proc.pid}/root{path}"


@dataclass
class KubeCluster:
    base: Path
    bin_dir: Path
    agent_archive: Path
    node_count: int = 1
    nodes: list[KubeNode] = field(default_factory=list)
    imds_server: Any = None
    procs: dict[str, Proc] = field(default_factory=dict)
    demo: Any = None
    stack: Any = None
    containerd: Any = None
    made_paths: list[str] = field(default_factory=list)
    kubeconfig: Path = field(init=False)
    timings: dict[str, float] = field(default_factory=dict)
    # The cold-start set-up: the kubelet's clusterDNS set, the node's resolver answering
    # ENDPOINT_NAME, the agent's endpoint given by that name.
    cluster_dns: bool = False
    resolver: Any = None

    def __post_init__(self) -> None:
        self.kubeconfig = self.base / "admin.kubeconfig"

    # ---- kubectl

    def kubectl(self, *args: str, input: str | None = None, check: bool = True, timeout: float = 60) -> str:
        cmd = [kubectl_binary(), f"--kubeconfig={self.kubeconfig}", *args]
        r = subprocess.run(cmd, input=input, capture_output=True, text=True, timeout=timeout, check=False)
        if check and r.returncode != 0:
            raise E2eError(f"kubectl {' '.join(args)}: {(r.stderr or r.stdout).strip()[-2000:]}")
        return r.stdout

    def get(self, *args: str) -> Any:
        return json.loads(self.kubectl("get", "-o", "json", *args))

    def apply(self, documents: Sequence[Mapping[str, Any]]) -> str:
        return self.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(list(documents)))

    # ---- the node

    @property
    def node_ns(self) -> str:
        return str(self.demo.nodes[0].ns)

    @property
    def instance_id(self) -> str:
        return str(self.demo.nodes[0].instance_id)

    def in_node(self, *argv: str) -> list[str]:
        return [*self.nodes[0].enter(), *argv]

    def node_ready(self) -> bool:
        node = self.get("node", NODE_NAME)
        return any(c["type"] == "Ready" and c["status"] == "True" for c in node["status"]["conditions"])

    def agent_json(self, path: str) -> Any:
        """GET the agent's local API (127.0.0.1:61680 in the node's network, as the kubelet's probes)."""
        script = (
            "import sys, urllib.request; "
            "sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())"
        )
        r = _run(self.in_node(sys.executable, "-c", script, f"http://127.0.0.1:61680{path}"), timeout=30)
        return json.loads(r.stdout)

    def eni_addresses(self) -> set[str]:
        """Secondary addresses on the (first) node's ENIs, as the emulated EC2 holds them."""
        return self.eni_addresses_of(self.nodes[0])

    # ---- set-up

    def start(self) -> None:
        t0 = time.monotonic()
        self._network_and_stack()
        self._control_plane()
        self.timings["control_plane_s"] = time.monotonic() - t0
        t1 = time.monotonic()
        self._host_paths()
        for node in self.nodes:
            self._containerd(node)
            self._kubelet(node)
        self.timings["node_s"] = time.monotonic() - t1

    def _network_and_stack(self) -> None:
        from demo import netns as nx
        from demo.options import DemoOptions
        from demo.run import Demo
        from emulated.local import LocalOptions, LocalStack
        from warmpool import names

        d = Demo(
            DemoOptions(
                nodes=self.node_count,
                pods_per_node=0,
                live=False,
                runtime="containerd",
                instance_type=INSTANCE_TYPE,
                cluster=CLUSTER,
            )
        )
        d.run_dir = self.base / "run"
        d.run_dir.mkdir(parents=True, exist_ok=True)
        self.demo = d
        # The host's end of each node's link to the control plane and the AWS endpoint (node 0's
        # holds HOST_ADDR, where the local stack listens).
        for k in range(self.node_count):
            h, n = KubeNode(k, "", "", self.base).links
            _run(["ip", "link", "del", h], check=False)
            _run(["ip", "link", "add", h, "type", "veth", "peer", "name", n])
            _run(["ip", "addr", "add", f"{KubeNode(k, '', '', self.base).host_addr}/30", "dev", h])
            _run(["ip", "link", "set", h, "up"])
        if self.cluster_dns:
            from demo.dnsstub import DnsStub

            self.resolver = DnsStub(HOST_ADDR, 53, {ENDPOINT_NAME: HOST_ADDR}).start()
        self.stack = LocalStack(
            LocalOptions(
                host=HOST_ADDR,
                cluster=CLUSTER,
                vpc_cidr=VPC_CIDR,
                # the functions from their deployed artifact, through the Lambda runtime interface
                lambda_runtime=True,
                max_concurrency=2,
                attach_delay_s=1.0,
                api_latency_s=0.02,
                reconcile_every_s=30.0,
                gc_age_s=60,
                extra_env=(("WARMPOOL_MIN_ENI_AGE_S", "10"),),
            )
        )
        self.stack.start()
        d.stack = self.stack
        d.hv.start()
        self.stack.ec2.on_attach(d._on_attach)
        self.stack.ec2.on_detach(d._on_detach)
        from emulated.ec2.http import Server
        from emulated.imds import ImdsBySource

        by_source: dict[str, str] = {}
        self.imds_server = Server(ImdsBySource(self.stack.router.imds, by_source.get), HOST_ADDR, 0)
        for k in range(self.node_count):
            d._add_node(k)
            made = d.nodes[k]
            node = KubeNode(k, str(made.instance_id), str(made.ns), self.base / f"kubelet-{k}")
            self.nodes.append(node)
            self._link(node)
            by_source[node.node_addr] = node.instance_id
        _run(["ip", "route", "replace", VPC_CIDR, "via", NODE_ADDR, "dev", HOST_LINK])
        import threading

        d._sync_thread = threading.Thread(target=d._sync_loop, name="e2e-hypervisor", daemon=True)
        d._sync_thread.start()
        assert names.cluster_tag_key(CLUSTER) and nx.node_ns(0) == self.nodes[0].ns

    def _link(self, node: KubeNode) -> None:
        """The node's link to this host (the control plane, the AWS endpoint) and its IMDS."""
        n = node.links[1]
        _run(["ip", "link", "set", n, "netns", node.ns])
        _run(["ip", "-n", node.ns, "addr", "add", f"{node.node_addr}/30", "dev", n])
        _run(["ip", "-n", node.ns, "link", "set", n, "up"])
        _run(["ip", "-n", node.ns, "link", "set", "lo", "up"])
        if node.host_addr != HOST_ADDR:
            _run(["ip", "-n", node.ns, "route", "replace", f"{HOST_ADDR}/32", "via", node.host_addr, "dev", n])
        # IMDS where it is on EC2: translated to the server that answers by source address. The
        # source is set to the node's end of its link (routing chose it for 169.254.169.254, the
        # primary ENI's, whose replies the host would send to the VPC).
        imds = f"{HOST_ADDR}:{self.imds_server.port}"
        for rule in (
            ["OUTPUT", "-d", f"{IMDS_ADDR}/32", "-p", "tcp", "--dport", "80", "-j", "DNAT", "--to-destination", imds],
            [
                "POSTROUTING",
                "-d",
                f"{HOST_ADDR}/32",
                "-p",
                "tcp",
                "--dport",
                str(self.imds_server.port),
                "-j",
                "SNAT",
                "--to-source",
                node.node_addr,
            ],
        ):
            _run([*node.enter(), "iptables", "-t", "nat", "-A", *rule])

    def _certs(self) -> dict[str, Path]:
        pki = self.base / "pki"
        pki.mkdir(parents=True, exist_ok=True)
        ca_key, ca_crt = pki / "ca.key", pki / "ca.crt"
        _run(
            [
                "openssl",
                "req",
                "-x509",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-keyout",
                str(ca_key),
                "-out",
                str(ca_crt),
                "-days",
                "2",
                "-subj",
                "/CN=warmpool-e2e-ca",
            ]
        )
        key, csr, crt = pki / "apiserver.key", pki / "apiserver.csr", pki / "apiserver.crt"
        ext = pki / "ext.cnf"
        ext.write_text(
            f"subjectAltName=IP:{HOST_ADDR},IP:127.0.0.1,IP:10.96.0.1,DNS:kubernetes,DNS:kubernetes.default,"
            "DNS:kubernetes.default.svc,DNS:localhost\n"
        )
        _run(
            [
                "openssl",
                "req",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-keyout",
                str(key),
                "-out",
                str(csr),
                "-subj",
                "/CN=kube-apiserver",
            ]
        )
        _run(
            [
                "openssl",
                "x509",
                "-req",
                "-in",
                str(csr),
                "-CA",
                str(ca_crt),
                "-CAkey",
                str(ca_key),
                "-CAcreateserial",
                "-out",
                str(crt),
                "-days",
                "2",
                "-extfile",
                str(ext),
            ]
        )
        sa_key, sa_pub = pki / "sa.key", pki / "sa.pub"
        _run(["openssl", "genrsa", "-out", str(sa_key), "2048"])
        _run(["openssl", "rsa", "-in", str(sa_key), "-pubout", "-out", str(sa_pub)])
        tokens = pki / "tokens.csv"
        tokens.write_text(f'{TOKEN},admin,admin,"system:masters"\n')
        return {"ca": ca_crt, "key": key, "crt": crt, "sa_key": sa_key, "sa_pub": sa_pub, "tokens": tokens}

    def _write_kubeconfig(self, path: Path, server: str, ca: Path) -> None:
        path.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [{"name": "e2e", "cluster": {"server": server, "certificate-authority": str(ca)}}],
                    "users": [{"name": "admin", "user": {"token": TOKEN}}],
                    "contexts": [{"name": "e2e", "context": {"cluster": "e2e", "user": "admin"}}],
                    "current-context": "e2e",
                }
            )
        )

    def _control_plane(self) -> None:
        b, logs = self.bin_dir, self.base / "logs"
        logs.mkdir(exist_ok=True)
        certs = self._certs()
        etcd_port, etcd_peer, api_port = _free_port(), _free_port(), _free_port()
        etcd_url = f"http://127.0.0.1:{etcd_port}"
        self.procs["etcd"] = Proc(
            "etcd",
            [
                str(b / "etcd"),
                "--data-dir",
                str(self.base / "etcd"),
                "--listen-client-urls",
                etcd_url,
                "--advertise-client-urls",
                etcd_url,
                "--listen-peer-urls",
                f"http://127.0.0.1:{etcd_peer}",
                "--initial-advertise-peer-urls",
                f"http://127.0.0.1:{etcd_peer}",
                "--initial-cluster",
                f"default=http://127.0.0.1:{etcd_peer}",
                "--quota-backend-bytes",
                str(512 << 20),
            ],
            logs / "etcd.log",
        ).start()
        server = f"https://{HOST_ADDR}:{api_port}"
        self.procs["kube-apiserver"] = Proc(
            "kube-apiserver",
            [
                str(b / "kube-apiserver"),
                "--etcd-servers",
                etcd_url,
                "--bind-address",
                HOST_ADDR,
                "--advertise-address",
                HOST_ADDR,
                "--secure-port",
                str(api_port),
                "--tls-cert-file",
                str(certs["crt"]),
                "--tls-private-key-file",
                str(certs["key"]),
                "--client-ca-file",
                str(certs["ca"]),
                "--token-auth-file",
                str(certs["tokens"]),
                "--authorization-mode",
                "RBAC",
                "--allow-privileged=true",
                "--service-cluster-ip-range",
                "10.96.0.0/16",
                "--service-account-issuer",
                "https://kubernetes.default.svc",
                "--service-account-key-file",
                str(certs["sa_pub"]),
                "--service-account-signing-key-file",
                str(certs["sa_key"]),
                "--api-audiences",
                "https://kubernetes.default.svc",
                "--enable-priority-and-fairness=false",
                "--kubelet-preferred-address-types",
                "InternalIP",
            ],
            logs / "kube-apiserver.log",
        ).start()
        self._write_kubeconfig(self.kubeconfig, server, certs["ca"])
        _wait(
            "the API server",
            lambda: self.kubectl("get", "--raw", "/readyz", check=False, timeout=10) == "ok",
            180,
            [self.procs["etcd"], self.procs["kube-apiserver"]],
            interval=1.0,
        )
        self.procs["kube-controller-manager"] = Proc(
            "kube-controller-manager",
            [
                str(b / "kube-controller-manager"),
                "--kubeconfig",
                str(self.kubeconfig),
                "--leader-elect=false",
                "--service-account-private-key-file",
                str(certs["sa_key"]),
                "--root-ca-file",
                str(certs["ca"]),
                "--bind-address",
                "127.0.0.1",
                "--secure-port",
                str(_free_port()),
                "--controllers",
                "*,-nodeipam",
                "--node-monitor-grace-period",
                "20s",
            ],
            logs / "kube-controller-manager.log",
        ).start()
        self.procs["kube-scheduler"] = Proc(
            "kube-scheduler",
            [
                str(b / "kube-scheduler"),
                "--kubeconfig",
                str(self.kubeconfig),
                "--leader-elect=false",
                "--bind-address",
                "127.0.0.1",
                "--secure-port",
                str(_free_port()),
            ],
            logs / "kube-scheduler.log",
        ).start()

    def _host_paths(self) -> None:
        """The DaemonSet's host paths: this machine's for node 0 (made if missing, removed after),
        directories of the run over them in a mount namespace of its own for every other node."""
        from demo.runtime_containerd import cni_plugin

        for p in HOST_PATHS:
            top = Path(p)
            while not top.parent.exists():
                top = top.parent
            if not top.exists():
                os.makedirs(p)
                self.made_paths.append(str(top))
        # What a node's AMI has in the CNI directory: the reference loopback plugin.
        lo = cni_plugin("loopback")
        if lo is not None and not os.path.exists("/opt/cni/bin/loopback"):
            shutil.copy(lo, "/opt/cni/bin/loopback")
            self.made_paths.append("/opt/cni/bin/loopback")
        others = [n for n in self.nodes if n.index > 0]
        if not others:
            return
        # A mount namespace is kept by bind-mounting its file, on a mount that is not shared.
        holder = self.base / "mntns"
        holder.mkdir(exist_ok=True)
        _run(["mount", "--bind", str(holder), str(holder)])
        _run(["mount", "--make-private", str(holder)])
        for node in others:
            root = self.base / f"host-{node.index}"
            binds = []
            for p in HOST_PATHS:
                (root / p.lstrip("/")).mkdir(parents=True, exist_ok=True)
                binds.append(f"mount --bind {root / p.lstrip('/')} {p}")
            if lo is not None:
                shutil.copy(lo, root / "opt/cni/bin/loopback")
            ns_file = holder / f"node-{node.index}"
            ns_file.touch()
            # Shared inside the namespace (the kubelet's HostToContainer mounts), private to it.
            script = " && ".join(["mount --make-rshared /", *binds])
            _run(["unshare", f"--mount={ns_file}", "--propagation", "unchanged", "sh", "-c", script])
            node.mount_ns = str(ns_file)

    def _containerd(self, node: KubeNode) -> None:
        from demo.runtime_image import build_image

        c = NodeContainerd(self.base / f"containerd-{node.index}", node.ns)
        c.mount_ns = node.mount_ns
        c.start()
        node.containerd = c
        if node.index == 0:
            self.containerd = c
        busybox = build_image(self.base / "busybox-oci.tar")
        c.import_image(busybox)
        c.import_image(self.agent_archive)

    def _kubelet(self, node: KubeNode) -> None:
        from demo.host import console_script

        max_pods = _run([console_script("warmpool"), "max-pods", "--instance-type", INSTANCE_TYPE]).stdout.strip()
        kdir = node.kdir
        kdir.mkdir(exist_ok=True)
        config = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "address": node.node_addr,
            "port": _free_port(),
            "readOnlyPort": 0,
            "healthzPort": 0,
            "authentication": {"anonymous": {"enabled": True}, "webhook": {"enabled": False}},
            "authorization": {"mode": "AlwaysAllow"},
            "cgroupDriver": "cgroupfs",
            "cgroupsPerQOS": False,
            "enforceNodeAllocatable": [],
            "failCgroupV1": False,
            "failSwapOn": False,
            "containerRuntimeEndpoint": f"unix://{node.containerd.socket}",
            "maxPods": int(max_pods),
            "evictionHard": {"memory.available": "1Mi", "nodefs.available": "1%", "imagefs.available": "1%"},
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "syncFrequency": "5s",
            "fileCheckFrequency": "5s",
            "nodeStatusUpdateFrequency": "5s",
            "registerNode": True,
            "resolvConf": self._resolv_conf(kdir),
            "serializeImagePulls": False,
            "localStorageCapacityIsolation": False,
            "podLogsDir": str(kdir / "pod-logs"),
        }
        if self.cluster_dns:
            config.update({"clusterDNS": [CLUSTER_DNS_IP], "clusterDomain": "cluster.local"})
        (kdir / "config.yaml").write_text(yaml.safe_dump(config))
        if node.index == 0:
            self.kubelet_config = config
        node_kubeconfig = kdir / "kubeconfig"
        server = yaml.safe_load(self.kubeconfig.read_text())["clusters"][0]["cluster"]["server"]
        self._write_kubeconfig(node_kubeconfig, server, self.base / "pki/ca.crt")
        iid = node.instance_id
        self.procs[node.kubelet] = Proc(
            node.kubelet,
            [
                *node.enter(),
                str(self.bin_dir / "kubelet"),
                "--config",
                str(kdir / "config.yaml"),
                "--kubeconfig",
                str(node_kubeconfig),
                "--root-dir",
                str(kdir / "root"),
                "--hostname-override",
                node.name,
                "--node-ip",
                node.node_addr,
                "--node-labels",
                "warmpool.io/enabled=true",
                # What an EKS node's spec.providerID is (scripts/move-node.sh reads the instance from it)
                "--provider-id",
                f"aws:///{self.stack.ec2.instances[iid].az}/{iid}",
                "--v",
                "2",
            ],
            self.base / f"logs/{node.kubelet}.log",
        ).start()
        _wait(
            "the node to register", lambda: self.get("node", node.name), 120, [self.procs[node.kubelet]], interval=1.0
        )

    def _resolv_conf(self, kdir: Path) -> str:
        """The node's resolver: this machine's, or (cold start) the stub standing in for the VPC's."""
        if not self.cluster_dns:
            return "/etc/resolv.conf"
        path = kdir / "node-resolv.conf"
        path.write_text(f"nameserver {HOST_ADDR}\n")
        return str(path)

    # ---- warmpool

    def manifests(self, image: str, agent_env: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
        """The project's manifests, rendered from the local stack's outputs as a user renders
        them from `cdk deploy`'s, plus what a real node gets from Pod Identity (credentials) and
        what the local stack needs (its endpoint), in the config map. IMDS is where it is on EC2
        (each node's network translates it to the emulated one)."""
        from demo.run import DEFAULT_AGENT_ENV
        from infra.render_manifests import render
        from warmpool import names

        out = self.stack.outputs
        docs = render({k: str(v) for k, v in out.items() if isinstance(v, (str, int))}, image=image)
        for d in docs:
            if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "warmpool-config":
                d["data"].update({k: v for k, v in DEFAULT_AGENT_ENV.items()})
                d["data"].update(
                    {
                        "AWS_ACCESS_KEY_ID": "testing",
                        "AWS_SECRET_ACCESS_KEY": "testing",
                        "AWS_DEFAULT_REGION": out["region"],
                        names.ENV_ENDPOINT_URL: self.endpoint_url(),
                        "WARMPOOL_LOG_LEVEL": "INFO",
                        **(agent_env or {}),
                    }
                )
            if d["kind"] == "DaemonSet":
                for c in d["spec"]["template"]["spec"]["initContainers"] + d["spec"]["template"]["spec"]["containers"]:
                    c["imagePullPolicy"] = "Never"
                broken = [b for b in os.environ.get("WARMPOOL_E2E_BREAK", "").split(",") if b]
                break_daemonset(d, broken)
        return docs

    def configmap_env(self, agent_env: Mapping[str, str] | None = None) -> dict[str, str]:
        """The agent's environment from the ConfigMap :meth:`manifests` renders."""
        for d in self.manifests(f"docker.io/warmpool/agent:{AGENT_IMAGE_TAG}", agent_env):
            if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "warmpool-config":
                return {str(k): str(v) for k, v in d["data"].items()}
        raise E2eError("the rendered manifests have no warmpool-config ConfigMap")

    def eni_addresses_of(self, node: KubeNode) -> set[str]:
        """Secondary addresses on ``node``'s ENIs, as the emulated EC2 holds them."""
        return {
            a
            for e in self.stack.ec2.enis.values()
            if e.attachment and e.attachment.instance_id == node.instance_id
            for a in e.secondary
        }

    def endpoint_url(self) -> str:
        """The local stack's endpoint as the agent is given it (by name in the cold-start set-up)."""
        url = str(self.stack.outputs["endpoint"])
        return url.replace(f"//{HOST_ADDR}:", f"//{ENDPOINT_NAME}:") if self.cluster_dns else url

    def agent_pods(self) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = self.get(
            "pods", "-n", "kube-system", "-l", "app.kubernetes.io/name=warmpool-agent"
        )["items"]
        return items

    def import_agent_variant(self, tag: str, revision: str) -> str:
        """A second agent image: the built one with a label and an env var changed
        (Buildah), imported into the node's containerd; returns its reference."""
        ref = agent_variant(self.base, tag, revision)
        for node in self.nodes:
            node.containerd.import_image(self.base / f"agent-{tag}.oci.tar")
        return ref

    # ---- teardown

    def stop(self) -> None:
        """The kubelet first (it would restart what goes away), then every sandbox through CRI
        while the agent's container still answers the plugin's DELs (workload pods before the
        agent's), then containerd, the control plane, the node and what this run made."""
        for node in self.nodes:
            if node.kubelet in self.procs:
                self.procs[node.kubelet].stop()
        for node in reversed(self.nodes):  # node 0's last: what a test left of it on this machine
            self._stop_node(node)
        for name in ("kube-scheduler", "kube-controller-manager", "kube-apiserver", "etcd"):
            if name in self.procs:
                self.procs[name].stop()
        if self.imds_server is not None:
            self.imds_server.close()
        if self.demo is not None:
            self.demo.teardown()
        if self.resolver is not None:
            self.resolver.close()
        for node in self.nodes:
            _run(["ip", "link", "del", node.links[0]], check=False)
        for node in self.nodes:
            if node.mount_ns:
                _run(["umount", node.mount_ns], check=False)
        if any(n.mount_ns for n in self.nodes):
            _run(["umount", str(self.base / "mntns")], check=False)
        self._remove_made()
        from demo.runtime_containerd import remove_default_state, unmount_under

        unmount_under(self.base)
        remove_default_state()

    def _remove_made(self) -> None:
        """What this run made on this machine (node 0's host paths), and what the agent left."""
        for p in reversed(self.made_paths):
            if os.path.isdir(p):
                shutil.rmtree(p, ignore_errors=True)
            else:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(p)
        for f in INSTALLED_FILES:  # what the init container wrote where the directories were already here
            with contextlib.suppress(FileNotFoundError):
                os.unlink(f)
        _clear_node_state()

    def _stop_node(self, node: KubeNode) -> None:
        pins: list[str] = []
        if node.containerd is not None:
            from demo.runtime_containerd import remove_pin
            from demo.runtime_cri import CriClient

            with contextlib.suppress(Exception):
                cri = CriClient(node.containerd.socket, timeout_s=30)
                ids = cri.list_pod_sandbox_ids()
                status = {}
                for sb in ids:
                    with contextlib.suppress(Exception):
                        status[sb] = cri.pod_sandbox_status(sb)
                pins = [st.netns for st in status.values() if st.netns]
                # pods with a namespace of their own (CNI DEL through the agent) before the agent's
                for sb in sorted(ids, key=lambda i: not (status.get(i) and status[i].netns)):
                    with contextlib.suppress(Exception):
                        cri.stop_pod_sandbox(sb)
                        cri.remove_pod_sandbox(sb)
                cri.close()
            node.containerd.stop()
            for pin in pins:  # what a sandbox removal could not take with it (where this process sees it)
                remove_pin(pin)


def _clear_node_state() -> None:
    """This node's checkpoint and socket: not the next run's (one node per machine)."""
    for d in ("/var/lib/warmpool", "/run/warmpool"):
        if not os.path.isdir(d):
            continue
        for entry in Path(d).iterdir():
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink(missing_ok=True)


class NodeContainerd:
    """The node's containerd: Debian's, with its CRI plugin reading the node's own CNI
    directories (where the DaemonSet's init container installs the plugin and its conflist)."""

    def __new__(cls, base: Path, netns: str) -> Any:
        from demo.runtime_containerd import Containerd

        class _C(Containerd):
            @property
            def cni_bin(self) -> Path:
                return Path("/opt/cni/bin")

            @property
            def cni_conf(self) -> Path:
                return Path("/etc/cni/net.d")

        return _C(base, netns)


def deployment(name: str, namespace: str, labels: dict[str, str], replicas: int, pod: dict[str, Any]) -> dict[str, Any]:
    """A Deployment of ``replicas`` pods of spec ``pod``, selected by ``labels``."""
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": pod},
        },
    }


BREAKS = {
    "no-conflist": "the init container installs nothing (no plugin, no conflist)",
    "agent-no-sys-admin": "the agent container without CAP_SYS_ADMIN (it cannot enter a pod's namespace)",
    "agent-exits": "the agent's command exits at once, every time (an agent gone for good)",
}
"""``WARMPOOL_E2E_BREAK`` (comma-separated): the DaemonSet broken on purpose, to check that the
e2e tests fail when what they name is broken (docs/deploy.md, "What the e2e tier proves")."""


def break_daemonset(ds: dict[str, Any], broken: Sequence[str]) -> None:
    """Break the rendered DaemonSet ``ds`` as each name of :data:`BREAKS` in ``broken`` says."""
    unknown = sorted(set(broken) - set(BREAKS))
    if unknown:
        raise E2eError(f"WARMPOOL_E2E_BREAK: unknown {', '.join(unknown)} (known: {', '.join(BREAKS)})")
    spec = ds["spec"]["template"]["spec"]
    init = next(c for c in spec["initContainers"] if c["name"] == "install-cni")
    agent = next(c for c in spec["containers"] if c["name"] == "agent")
    if "no-conflist" in broken:
        init["command"] = ["/bin/sh", "-c", "true"]
    if "agent-no-sys-admin" in broken:
        caps = agent["securityContext"]["capabilities"]
        caps["add"] = [c for c in caps["add"] if c != "SYS_ADMIN"]
    if "agent-exits" in broken:
        agent["command"] = ["/bin/sh", "-c", "exit 3"]


def kubectl_binary() -> str:
    found = shutil.which("kubectl")
    if found is None:
        raise E2eError("kubectl is not installed")
    return found


@contextlib.contextmanager
def kube_cluster(
    *,
    cluster_dns: bool = False,
    nodes: int = 1,
    lock: bool = True,
    progress: Callable[[str], None] | None = None,
) -> Iterator[KubeCluster]:
    """Build (or take from the cache) everything, start the cluster, tear it all down after.
    ``lock``: take the one-demo-at-a-time lock (``warmpool demo`` holds it already);
    ``progress``: told of each long step as it starts."""
    from demo import netns as nx
    from demo.host import single_run_lock

    say = progress or (lambda _text: None)
    install_missing()
    t0 = time.monotonic()
    say(f"Kubernetes {KUBERNETES_VERSION}: the cached binaries, or a build from source (e2e/build-kubernetes.sh)")
    bin_dir = kubernetes_binaries()
    t_bins = time.monotonic() - t0
    base = Path(tempfile.mkdtemp(prefix="wpe2e-", dir="/tmp"))
    t1 = time.monotonic()
    say("the agent image from infra/docker/agent.Dockerfile (e2e/build-images.sh, Buildah)")
    archive = agent_image(base)
    t_image = time.monotonic() - t1
    say(f"the local stack, the control plane and {nodes} kubelet(s)")
    with single_run_lock(wait_s=600) if lock else contextlib.nullcontext():
        # Under the one-demo lock no other run owns a ``wp-demo-*`` namespace: any there is
        # what a killed run left (its clean-up never ran), and would stop this one's set-up.
        left = nx.cleanup()
        if left:
            say(f"removed namespaces an earlier run left: {', '.join(left)}")
        c = KubeCluster(base, bin_dir, archive, node_count=nodes, cluster_dns=cluster_dns)
        c.timings.update({"binaries_s": t_bins, "agent_image_s": t_image})
        try:
            c.start()
            yield c
        finally:
            c.stop()
            if os.environ.get("WARMPOOL_E2E_KEEP") != "1":
                shutil.rmtree(base, ignore_errors=True)
            else:
                print(f"e2e: kept {base}", file=sys.stderr)


def http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return int(r.status) == 200
    except OSError:
        return False
