"""Network namespaces and veth links for ``warmpool demo``: the kernel side of
the demo, through the ``ip`` command (iproute2), each call shown with its command.

The demo plays three roles here that a real cluster gets from elsewhere:

* the **instance**: one namespace per node (``wp-demo-node-K``), where the
  node's agent sets up its ENIs and the CNI plugin wires pods;
* the **hypervisor**: when EC2 attaches an ENI to an instance, a link with
  that ENI's MAC appears on the instance. A real kernel cannot get an AWS ENI,
  so the demo makes a veth pair: one end (named ``eth<device index>``, MAC
  set to the ENI's) in the node's namespace, the other end in a ``wp-demo-vpc``
  namespace, on a bridge that holds the subnet gateway's address — the VPC;
* the **container runtime**: one namespace per pod (``wp-demo-pod-K-J``).

Everything it creates is named ``wp-demo-*`` (namespaces) or lives inside such
a namespace (links), so :func:`cleanup` can remove a previous crashed run's
leftovers by name alone, and deleting the namespaces removes every link.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import os
import shutil
import subprocess
import threading
from collections.abc import Sequence
from dataclasses import dataclass

log = logging.getLogger("warmpool.demo.netns")

PREFIX = "wp-demo-"
VPC_NS = "wp-demo-vpc"
VPC_BRIDGE = "vpc0"
PROBE_NS = "wp-demo-probe"


def node_ns(k: int) -> str:
    return f"{PREFIX}node-{k}"


def pod_ns(k: int, j: int) -> str:
    return f"{PREFIX}pod-{k}-{j}"


def netns_path(name: str) -> str:
    """Where ``ip netns add`` pins a namespace (what a runtime passes as ``CNI_NETNS``)."""
    return f"/var/run/netns/{name}"


class IpError(RuntimeError):
    """An ``ip`` command failed; the message has the command and its stderr."""


def ip(*args: str, check: bool = True, timeout: float = 10.0) -> str:
    """Run ``ip ARGS`` and return its stdout."""
    cmd = ["ip", *args]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    if check and r.returncode != 0:
        raise IpError(f"{' '.join(cmd)}: {r.stderr.strip() or 'exit ' + str(r.returncode)}")
    return r.stdout


def address_of(ns: str, dev: str = "eth0") -> str | None:
    """The first IPv4 address of ``dev`` in namespace ``ns`` as the kernel has it (None: none)."""
    try:
        rows = json.loads(ip("-j", "-n", ns, "-4", "addr", "show", "dev", dev, check=False) or "[]")
    except ValueError:
        return None
    for r in rows:
        for a in r.get("addr_info", []):
            return str(a.get("local"))
    return None


def list_namespaces(prefix: str = PREFIX) -> list[str]:
    """``ip -j netns list``, names starting with ``prefix``."""
    out = ip("-j", "netns", "list", check=False).strip()
    if not out:
        return []
    try:
        rows = json.loads(out)
    except json.JSONDecodeError:
        return []
    return sorted(str(r["name"]) for r in rows if str(r.get("name", "")).startswith(prefix))


def namespace_pids(name: str) -> list[int]:
    """``ip netns pids NAME``: processes living in the namespace."""
    out = ip("netns", "pids", name, check=False)
    return [int(x) for x in out.split() if x.isdigit()]


def add_namespace(name: str) -> None:
    """``ip netns add NAME`` then ``ip -n NAME link set lo up``."""
    ip("netns", "add", name)
    ip("-n", name, "link", "set", "lo", "up")


def delete_namespace(name: str) -> None:
    """``ip netns del NAME`` (links inside go with it); a missing one is fine."""
    ip("netns", "del", name, check=False)


def support_quick() -> bool:
    """Root with ``ip``: enough to list and delete namespaces (no probe)."""
    return hasattr(os, "geteuid") and os.geteuid() == 0 and shutil.which("ip") is not None


def support() -> str | None:
    """None when the demo can make namespaces and veth pairs here; else why not."""
    if os.name != "posix" or not hasattr(os, "geteuid"):
        return "not a POSIX system"
    if os.geteuid() != 0:
        return "not running as root (network namespaces need CAP_SYS_ADMIN and CAP_NET_ADMIN)"
    if shutil.which("ip") is None:
        return "the `ip` command (iproute2) is not installed"
    try:
        delete_namespace(PROBE_NS)
        add_namespace(PROBE_NS)
        ip("-n", PROBE_NS, "link", "add", "p0", "type", "veth", "peer", "name", "p1")
    except (IpError, OSError, subprocess.TimeoutExpired) as e:
        return f"cannot create a network namespace with a veth pair: {e}"
    finally:
        delete_namespace(PROBE_NS)
    return None


def cleanup(*, kill_pids: bool = True) -> list[str]:
    """Remove every ``wp-demo-*`` namespace (and so every link in them),
    first ending processes still inside them. Returns the names removed."""
    names = list_namespaces()
    for name in names:
        if kill_pids:
            for pid in namespace_pids(name):
                if pid == os.getpid():
                    continue
                try:
                    os.kill(pid, 9)
                except ProcessLookupError:
                    pass
        delete_namespace(name)
    return names


@dataclass(frozen=True)
class EniLink:
    """An ENI as the hypervisor plugs it into an instance."""

    eni_id: str
    mac: str
    device_index: int
    primary_ip: str
    subnet_cidr: str


class Hypervisor:
    """Plugs ENIs into node namespaces as veth links carrying their MAC.

    ``plug`` is idempotent (a MAC already plugged on the node is left alone),
    ``unplug`` removes a link whose ENI went away. Thread-safe.
    """

    def __init__(self, vpc_ns: str = VPC_NS) -> None:
        self.vpc_ns = vpc_ns
        self._lock = threading.Lock()
        self._plugged: dict[str, dict[str, tuple[str, EniLink]]] = {}  # node ns -> mac -> (peer, eni)
        self._gateways: set[str] = set()
        self._n = 0
        self.plugged_total = 0

    def start(self) -> None:
        """The VPC namespace with its bridge."""
        add_namespace(self.vpc_ns)
        ip("-n", self.vpc_ns, "link", "add", VPC_BRIDGE, "type", "bridge")
        ip("-n", self.vpc_ns, "link", "set", VPC_BRIDGE, "up")

    def add_node(self, ns: str) -> None:
        with self._lock:
            self._plugged.setdefault(ns, {})
        add_namespace(ns)

    def macs(self, ns: str) -> set[str]:
        with self._lock:
            return set(self._plugged.get(ns, {}))

    def plugged_now(self) -> int:
        """ENI links present across all nodes now."""
        with self._lock:
            return sum(len(m) for m in self._plugged.values())

    def links(self, ns: str) -> dict[str, str]:
        """ENI links (``eth*``) in the node's namespace as the kernel sees them: MAC -> name."""
        out = ip("-j", "-n", ns, "link", "show", check=False).strip()
        rows = json.loads(out) if out else []
        return {
            str(r.get("address", "")).lower(): str(r["ifname"])
            for r in rows
            if r.get("link_type") == "ether" and str(r.get("ifname", "")).startswith("eth")
        }

    def _gateway(self, cidr: str) -> None:
        """The subnet's router (base + 1) on the VPC bridge, once per subnet."""
        if cidr in self._gateways:
            return
        net = ipaddress.IPv4Network(cidr)
        ip(
            "-n",
            self.vpc_ns,
            "addr",
            "add",
            f"{net.network_address + 1}/{net.prefixlen}",
            "dev",
            VPC_BRIDGE,
            check=False,
        )
        self._gateways.add(cidr)

    def plug(self, ns: str, eni: EniLink, *, configure_primary: bool = False) -> bool:
        """``ip link add vN netns <VPC> type veth peer name eth<d> address <mac> netns <node>``,
        the VPC end wired by :meth:`_wire_vpc_side`. ``configure_primary`` gives the link its
        primary address and a default route (what the instance's own DHCP does for device 0).
        Returns False when the MAC was already plugged."""
        mac = eni.mac.lower()
        with self._lock:
            node = self._plugged.setdefault(ns, {})
            if mac in node:
                return False
            self._n += 1
            peer = f"v{self._n}"
            name = f"eth{eni.device_index}"
            if any(e.device_index == eni.device_index for _, e in node.values()):
                name = f"eth{eni.device_index}x{self._n}"[:15]
            ip(
                "link",
                "add",
                peer,
                "netns",
                self.vpc_ns,
                "type",
                "veth",
                "peer",
                "name",
                name,
                "address",
                mac,
                "netns",
                ns,
            )
            self._wire_vpc_side(peer, eni)
            if configure_primary:
                net = ipaddress.IPv4Network(eni.subnet_cidr)
                ip("-n", ns, "addr", "add", f"{eni.primary_ip}/{net.prefixlen}", "dev", name)
                ip("-n", ns, "link", "set", name, "up")
                ip(
                    "-n",
                    ns,
                    "route",
                    "replace",
                    "default",
                    "via",
                    str(net.network_address + 1),
                    "dev",
                    name,
                    check=False,
                )
            node[mac] = (peer, eni)
            self.plugged_total += 1
            log.info("plugged %s (%s) into %s as %s (VPC side %s)", eni.eni_id, mac, ns, name, peer)
            return True

    def _wire_vpc_side(self, peer: str, eni: EniLink) -> None:
        """The VPC end of a new link (called under the lock): on the bridge, the subnet's router there."""
        ip("-n", self.vpc_ns, "link", "set", peer, "master", VPC_BRIDGE, "up")
        self._gateway(eni.subnet_cidr)

    def unplug(self, ns: str, mac: str) -> bool:
        """``ip -n <VPC> link del <peer>`` (the node's end goes with it)."""
        mac = mac.lower()
        with self._lock:
            entry = self._plugged.get(ns, {}).pop(mac, None)
            if entry is None:
                return False
            ip("-n", self.vpc_ns, "link", "del", entry[0], check=False)
            log.info("unplugged %s (%s) from %s", entry[1].eni_id, mac, ns)
            return True

    def sync(self, ns: str, attached: Sequence[EniLink]) -> tuple[int, int]:
        """Make the node's links match what EC2 shows attached: (plugged, unplugged)."""
        want = {e.mac.lower(): e for e in attached}
        added = sum(1 for e in want.values() if self.plug(ns, e))
        removed = sum(1 for mac in self.macs(ns) - set(want) if self.unplug(ns, mac))
        return added, removed
