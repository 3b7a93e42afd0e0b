"""Node-level host networking, as desired state reconciled like :mod:`node_agent.hostnet`:
egress SNAT, the NodePort return path, the kernel settings and the primary ENI's MTU.

What the VPC CNI's ``aws-node`` does here (``pkg/networkutils/network.go`` in
aws/amazon-vpc-cni-k8s: ``SetupHostNetwork``, ``buildIptablesSNATRules``,
``buildIptablesConnmarkRules``) and how warmpool does the same:

* **Mark** (``AWS_VPC_K8S_CNI_CONNMARK``, default 0x80) on the *connection*:
  - new connections from pods (in through a host veth, ``<veth prefix>*``) to a
    destination outside the VPC's CIDRs and ``AWS_VPC_K8S_CNI_EXCLUDE_SNAT_CIDRS``
    (only while SNAT is on: they must leave by the primary ENI, whose address
    they get);
  - connections arriving on the primary ENI for a local address (NodePorts;
    only with ``AWS_VPC_CNI_NODE_PORT_SUPPORT``);
  and copied to the *packet* mark for every packet coming from a pod, so replies
  of a NodePort connection carry it too.
* **Rule** ``fwmark <mark>/<mark> lookup main`` at priority 1024, ahead of the
  per-pod ``from <pod> lookup <ENI table>`` rules (1536): marked packets leave
  by the main table's default route, the primary ENI.
* **SNAT** (unless ``AWS_VPC_K8S_CNI_EXTERNALSNAT``): packets to destinations
  outside those CIDRs, not to a local address and not out of a ``vlan*`` link,
  get the primary ENI's primary address as source, with fully random ports
  (``prng``), hashed random ports (``hashrandom``) or neither (``none``).
* **Kernel**: ``net.ipv4.ip_forward=1``; ``rp_filter=2`` (loose) on the primary
  ENI with NodePort support (a DNATed NodePort packet's reverse path is the
  pod's ENI); the primary ENI's MTU is ``AWS_VPC_ENI_MTU``.

The packet-filter rules live in one nftables table of their own, ``ip warmpool``
(``nft``, the standard tool; docs/agent.md says why nftables). Reconciling it
is one atomic ``nft -f`` transaction that replaces the whole table, and only
when what is there differs from what should be; uninstalling is ``delete table``.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import logging
import shutil
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from node_agent.config import AgentConfig, HostNetSettings
from node_agent.netlink import (
    MAIN_TABLE,
    Netlink,
    NetlinkNotFound,
    Rule,
    netns_path,
    sysctl_get,
    sysctl_set,
)

log = logging.getLogger("warmpool.agent.nodenet")

TABLE = "warmpool"
FAMILY = "ip"
MARK_RULE_PRIORITY = 1024
"""The VPC CNI's ``hostRulePriority``: after ``to <pod> lookup main`` (512), before ``from <pod>`` (1536)."""
COMMENT_PREFIX = "warmpool:"
RP_FILTER_LOOSE = "2"


class NftError(RuntimeError):
    """``nft`` failed or is missing; the message has the command's stderr."""


@dataclass(frozen=True)
class NodeSpec:
    """Everything the node-level set-up depends on (IMDS + settings)."""

    primary_mac: str
    primary_ip: str
    vpc_cidrs: tuple[str, ...]
    settings: HostNetSettings = field(default_factory=HostNetSettings)
    veth_prefix: str = "eni"

    @property
    def snat_on(self) -> bool:
        return not self.settings.external_snat

    @property
    def mark_rule_wanted(self) -> bool:
        return self.settings.node_port_support or self.snat_on

    def exempt_cidrs(self) -> list[str]:
        """Destinations never SNATed (and never marked as off-VPC): the VPC's CIDRs, then the exclusions."""
        out: list[str] = []
        for c in (*self.vpc_cidrs, *self.settings.exclude_snat_cidrs):
            norm = str(ipaddress.IPv4Network(c, strict=False))
            if norm not in out:
                out.append(norm)
        return out


def _sysctl_set(netns: str, key: str, value: str) -> bool:
    """Write a kernel setting the node needs; where /proc/sys is read-only (an
    unprivileged container: the DaemonSet's init container writes them), say so
    and go on: ``problems()`` then reports the difference on /readyz."""
    try:
        return sysctl_set(netns, key, value)
    except OSError as exc:
        log.warning(
            "cannot set %s=%s (%s); the init container sets it (install-cni.sh), /readyz reports it",
            key,
            value,
            exc.strerror or exc,
        )
        return False


def mark_rule(mark: int) -> Rule:
    return Rule(priority=MARK_RULE_PRIORITY, table=MAIN_TABLE, fwmark=mark, fwmask=mark)


# --- the nftables table ----------------------------------------------------------------------


def _set(cidrs: Sequence[str]) -> str:
    return "{ " + ", ".join(cidrs) + " }"


def desired_rules(spec: NodeSpec, primary_ifname: str) -> dict[str, list[str]]:
    """Chain name -> rule bodies (nft syntax), in order. Empty chains are left out."""
    s = spec.settings
    mark = f"0x{s.connmark:08x}"
    veth = f'"{spec.veth_prefix}*"'
    exempt = spec.exempt_cidrs()
    pre: list[str] = []
    if spec.snat_on and exempt:
        pre.append(f"iifname {veth} ct state new ip daddr != {_set(exempt)} ct mark set ct mark | {mark}")
    elif spec.snat_on:
        pre.append(f"iifname {veth} ct state new ct mark set ct mark | {mark}")
    if s.node_port_support:
        pre.append(f'iifname "{primary_ifname}" fib daddr type local ct mark set ct mark | {mark}')
    if pre:
        pre.append(f"iifname {veth} meta mark set ct mark & {mark}")
        pre.append(f'iifname "vlan*" meta mark set ct mark & {mark}')
    post: list[str] = []
    if spec.snat_on:
        ports = {"prng": " fully-random", "hashrandom": " random", "none": ""}[s.randomize_snat]
        dst = f"ip daddr != {_set(exempt)} " if exempt else ""
        post.append(f'oifname != "vlan*" {dst}fib daddr type != local snat to {spec.primary_ip}{ports}')
    out: dict[str, list[str]] = {}
    if pre:
        out["prerouting"] = pre
    if post:
        out["postrouting"] = post
    return out


CHAIN_HEADS = {
    "prerouting": ("filter", "prerouting", "mangle", -150),
    "postrouting": ("nat", "postrouting", "srcnat", 100),
}


def render(rules: dict[str, list[str]]) -> tuple[str, str]:
    """(nft script creating the table, its digest). Every rule carries ``comment "warmpool:<digest>:<n>"``
    so a later run recognises its own rules (also after a restart) without parsing expressions."""
    body = json.dumps(rules, sort_keys=True)
    digest = hashlib.sha256(body.encode()).hexdigest()[:12]
    lines = [f"table {FAMILY} {TABLE} {{"]
    for chain, items in rules.items():
        typ, hook, prio, _ = CHAIN_HEADS[chain]
        lines.append(f"  chain {chain} {{")
        lines.append(f"    type {typ} hook {hook} priority {prio}; policy accept;")
        for i, r in enumerate(items):
            lines.append(f'    {r} comment "{COMMENT_PREFIX}{digest}:{i}"')
        lines.append("  }")
    lines.append("}")
    return "\n".join(lines) + "\n", digest


class Nft:
    """``nft`` in one namespace (``nsenter --net=PATH nft …`` for another one)."""

    def __init__(self, netns: str = "", binary: str = "nft") -> None:
        self.netns = netns
        self.binary = binary

    def _argv(self, *args: str) -> list[str]:
        base = [self.binary, *args]
        if self.netns:
            return ["nsenter", f"--net={netns_path(self.netns)}", *base]
        return base

    def run(self, *args: str, stdin: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
        if shutil.which(self.binary) is None:
            raise NftError(f"{self.binary} not found: install the Debian package nftables")
        r = subprocess.run(self._argv(*args), input=stdin, capture_output=True, text=True, timeout=30, check=False)
        if check and r.returncode != 0:
            raise NftError(f"nft {' '.join(args)}: {r.stderr.strip() or 'exit ' + str(r.returncode)}")
        return r

    def table_json(self) -> list[dict[str, object]] | None:
        """``nft -j list table ip warmpool``: its objects, or None if there is no such table."""
        r = self.run("-j", "list", "table", FAMILY, TABLE, check=False)
        if r.returncode != 0:
            if "No such file" in r.stderr or "does not exist" in r.stderr:
                return None
            raise NftError(f"nft list table {FAMILY} {TABLE}: {r.stderr.strip()}")
        items = json.loads(r.stdout).get("nftables", [])
        return [i for i in items if isinstance(i, dict) and "metainfo" not in i]

    def apply(self, script: str) -> None:
        """Replace the table in one transaction (``add`` first so ``delete`` never fails)."""
        self.run("-f", "-", stdin=f"table {FAMILY} {TABLE}\ndelete table {FAMILY} {TABLE}\n{script}")

    def delete_table(self) -> bool:
        if self.table_json() is None:
            return False
        self.run("delete", "table", FAMILY, TABLE)
        return True


def _summary(items: list[dict[str, object]] | None) -> tuple[object, ...] | None:
    """What identifies the table's content: chains (type, hook, priority, policy) and each rule's
    comment in order. Handles are left out; a rule edited in place keeps its comment, so the
    expressions are compared too (without handles) against the last applied copy."""
    if items is None:
        return None
    chains = []
    rules = []
    for it in items:
        if "chain" in it:
            c = it["chain"]
            assert isinstance(c, dict)
            chains.append((c.get("name"), c.get("type"), c.get("hook"), c.get("prio"), c.get("policy")))
        elif "rule" in it:
            r = it["rule"]
            assert isinstance(r, dict)
            rules.append((r.get("chain"), r.get("comment"), json.dumps(r.get("expr"), sort_keys=True)))
    return tuple(sorted(chains, key=str)), tuple(rules)


def _expected_summary(rules: dict[str, list[str]], digest: str) -> tuple[object, ...]:
    chains = [(name, *CHAIN_HEADS[name][:2], CHAIN_HEADS[name][3], "accept") for name in rules]
    comments = [(chain, f"{COMMENT_PREFIX}{digest}:{i}") for chain, items in rules.items() for i in range(len(items))]
    return tuple(sorted(chains, key=str)), tuple(comments)


def _matches(have: tuple[object, ...] | None, want: tuple[object, ...]) -> bool:
    if have is None:
        return False
    chains, rules = have
    assert isinstance(rules, tuple)
    return chains == want[0] and tuple((c, m) for c, m, _ in rules) == want[1]


# --- the reconciler --------------------------------------------------------------------------


@dataclass
class NodeNetState:
    """What :meth:`NodeNetworking.kernel_state` reports (``/v1/config``)."""

    ip_forward: str
    rp_filter: str
    primary_ifname: str
    primary_mtu: int
    nft_table: bool
    mark_rule: bool


class NodeNetworking:
    """The node-level set-up for one namespace. ``setup`` is idempotent and returns the
    number of changes; ``problems`` lists what is not as it should be (``/readyz``)."""

    def __init__(
        self, spec: NodeSpec, netns: str = "", nft: Nft | None = None, refresh: Callable[[], NodeSpec] | None = None
    ) -> None:
        self.spec = spec
        self.netns = netns
        self.nft = nft or Nft(netns)
        self.refresh = refresh
        """Re-reads the spec before each :meth:`setup` (IMDS: a CIDR added to the VPC later)."""
        self._applied: tuple[object, ...] | None = None

    def _primary(self, nl: Netlink) -> tuple[int, str, int]:
        link = nl.link_by_mac(self.spec.primary_mac)
        if link is None:
            raise NetlinkNotFound(2, f"no link with the primary ENI's MAC {self.spec.primary_mac}")
        return link.index, link.name, link.mtu

    def desired(self, ifname: str) -> tuple[dict[str, list[str]], str, str]:
        rules = desired_rules(self.spec, ifname)
        script, digest = render(rules)
        return rules, script, digest

    def setup(self) -> int:
        if self.refresh is not None:
            try:
                self.spec = self.refresh()
            except Exception as exc:  # keep the last known spec; IMDS may be briefly unreachable
                log.warning("could not re-read the node's addresses and VPC CIDRs: %s", exc)
        s = self.spec.settings
        changes = 0
        with Netlink.open(self.netns) as nl:
            index, ifname, mtu = self._primary(nl)
            if mtu != s.eni_mtu:
                nl.link_set(index, mtu=s.eni_mtu)
                changes += 1
            changes += _sysctl_set(self.netns, "net.ipv4.ip_forward", "1")
            if s.node_port_support and s.configure_rp_filter:
                changes += _sysctl_set(self.netns, f"net.ipv4.conf.{ifname}.rp_filter", RP_FILTER_LOOSE)
            rule = mark_rule(s.connmark)
            for have in nl.rules():
                if have.priority == MARK_RULE_PRIORITY and have.fwmark and have != rule:
                    changes += nl.rule_absent(have)
            if self.spec.mark_rule_wanted:
                changes += nl.ensure_rule(rule)
            else:
                changes += nl.rule_absent(rule)
        changes += self._reconcile_table(ifname)
        return changes

    def _reconcile_table(self, ifname: str) -> int:
        rules, script, digest = self.desired(ifname)
        if not rules and shutil.which(self.nft.binary) is None:
            return 0  # nothing wanted and no nft: nothing can be there to remove
        have = _summary(self.nft.table_json())
        if not rules:
            self._applied = None
            return int(self.nft.delete_table())
        want = _expected_summary(rules, digest)
        if _matches(have, want) and (self._applied is None or have == self._applied):
            self._applied = have
            return 0
        self.nft.apply(script)
        self._applied = _summary(self.nft.table_json())
        return 1

    def teardown(self) -> int:
        """Uninstall: the nftables table and the mark rule. ``ip_forward`` and ``rp_filter`` stay
        as they are (kube-proxy and the pods already on the node need forwarding)."""
        changes = int(self.nft.delete_table())
        self._applied = None
        with Netlink.open(self.netns) as nl:
            for have in nl.rules():
                if have.priority == MARK_RULE_PRIORITY and have.fwmark == self.spec.settings.connmark:
                    changes += nl.rule_absent(have)
        return changes

    def kernel_state(self) -> NodeNetState:
        with Netlink.open(self.netns) as nl:
            _, ifname, mtu = self._primary(nl)
            rule_there = mark_rule(self.spec.settings.connmark) in nl.rules()
        return NodeNetState(
            ip_forward=sysctl_get(self.netns, "net.ipv4.ip_forward"),
            rp_filter=sysctl_get(self.netns, f"net.ipv4.conf.{ifname}.rp_filter"),
            primary_ifname=ifname,
            primary_mtu=mtu,
            nft_table=self.nft.table_json() is not None,
            mark_rule=rule_there,
        )

    def problems(self) -> list[str]:
        """Empty when the node is set up as wanted; else one line per difference."""
        s = self.spec.settings
        out: list[str] = []
        try:
            st = self.kernel_state()
        except (OSError, NftError) as exc:
            return [f"cannot read the node's network state: {exc}"]
        if st.ip_forward != "1":
            out.append(f"net.ipv4.ip_forward is {st.ip_forward}, not 1")
        if s.node_port_support and s.configure_rp_filter and st.rp_filter != RP_FILTER_LOOSE:
            out.append(f"net.ipv4.conf.{st.primary_ifname}.rp_filter is {st.rp_filter}, not 2 (loose)")
        if st.primary_mtu != s.eni_mtu:
            out.append(f"{st.primary_ifname} MTU is {st.primary_mtu}, not {s.eni_mtu}")
        if self.spec.mark_rule_wanted and not st.mark_rule:
            out.append(f"ip rule fwmark {s.connmark:#x}/{s.connmark:#x} lookup main (priority 1024) missing")
        rules, _, digest = self.desired(st.primary_ifname)
        if rules and not _matches(_summary(self.nft.table_json()), _expected_summary(rules, digest)):
            out.append(f"nftables table {FAMILY} {TABLE} missing or not as wanted")
        return out

    def public(self) -> dict[str, object]:
        """``/v1/config``'s ``kernel`` section."""
        try:
            st = self.kernel_state()
        except (OSError, NftError) as exc:
            return {"error": str(exc)}
        return {
            "net.ipv4.ip_forward": st.ip_forward,
            f"net.ipv4.conf.{st.primary_ifname}.rp_filter": st.rp_filter,
            "primary_interface": st.primary_ifname,
            "primary_mtu": st.primary_mtu,
            "vpc_cidrs": list(self.spec.vpc_cidrs),
            "snat": {
                "on": self.spec.snat_on,
                "to": self.spec.primary_ip if self.spec.snat_on else None,
                "exempt": self.spec.exempt_cidrs(),
                "ports": self.spec.settings.randomize_snat,
            },
            "nft_table": f"{FAMILY} {TABLE}" if st.nft_table else None,
            "mark_rule": st.mark_rule,
        }


class MetadataReader(Protocol):
    def get(self, path: str, *, missing_ok: bool = False) -> str | None: ...


def spec_from_imds(imds: MetadataReader, primary_mac: str, cfg: AgentConfig) -> NodeSpec:
    """The primary ENI's address and every CIDR of the VPC, as the VPC CNI reads them
    (``vpc-ipv4-cidr-blocks`` of the primary ENI's MAC: all of the VPC's CIDRs, not only the first)."""
    base = f"network/interfaces/macs/{primary_mac}/"
    local = (imds.get(base + "local-ipv4s") or "").split()
    blocks = imds.get(base + "vpc-ipv4-cidr-blocks", missing_ok=True) or imds.get(base + "vpc-ipv4-cidr-block") or ""
    cidrs = tuple(c.strip() for c in blocks.split() if c.strip())
    if not local or not cidrs:
        raise NetlinkNotFound(2, f"IMDS has no primary address or VPC CIDR for {primary_mac}")
    return NodeSpec(
        primary_mac=primary_mac, primary_ip=local[0], vpc_cidrs=cidrs, settings=cfg.hostnet, veth_prefix=cfg.veth_prefix
    )


def uninstall(settings: HostNetSettings, netns: str = "") -> int:
    """What ``warmpool-agent uninstall`` removes without IMDS: the table and the mark rule."""
    spec = NodeSpec(primary_mac="", primary_ip="", vpc_cidrs=(), settings=settings)
    return NodeNetworking(spec, netns).teardown()
