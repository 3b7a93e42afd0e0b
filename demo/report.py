"""What ``warmpool demo`` measures and shows: per-pod records, the final
report (docs/design.md's ``--json`` format plus a few extras), its text rendering,
and the live status line on stderr.

Pure except :class:`LiveView`, which owns one thread writing to a stream.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TextIO

from emulated.figures import percentile
from warmpool.buckets import MUTATING_ACTIONS


@dataclass
class DemoPod:
    """One pod of the demo, from its first CNI ADD to its DEL."""

    node: int
    index: int
    netns: str
    container_id: str
    first_add_at: float | None = None
    ready_at: float | None = None
    attempts: int = 0
    ip: str | None = None
    kernel_ip: str | None = None
    """The address the pod's ``eth0`` actually has (read back from its namespace)."""
    last_error: str = ""
    deleted: bool = False

    @property
    def time_to_ip_s(self) -> float | None:
        if self.first_add_at is None or self.ready_at is None:
            return None
        return self.ready_at - self.first_add_at


def duplicate_ips(holders: Iterable[tuple[str, str]]) -> int:
    """Addresses held by more than one holder: ``holders`` is (holder, address) pairs."""
    seen: dict[str, set[str]] = {}
    for holder, addr in holders:
        seen.setdefault(addr, set()).add(holder)
    return sum(1 for hs in seen.values() if len(hs) > 1)


def ec2_table(stats: Mapping[str, Any]) -> dict[str, dict[str, int]]:
    """``{Action: {calls, throttled, errors}}`` from ``GET /_warmpool/stats``."""
    ec2 = stats.get("ec2", {}) if isinstance(stats, Mapping) else {}
    return {
        str(a): {k: int(v.get(k, 0)) for k in ("calls", "throttled", "errors")}
        for a, v in sorted(ec2.items())
        if isinstance(v, Mapping)
    }


def ec2_delta(
    after: Mapping[str, Mapping[str, int]], before: Mapping[str, Mapping[str, int]]
) -> dict[str, dict[str, int]]:
    """Per-action counters spent between two snapshots (actions with no calls left out)."""
    out: dict[str, dict[str, int]] = {}
    for a, v in after.items():
        b = before.get(a, {})
        d = {k: int(v.get(k, 0)) - int(b.get(k, 0)) for k in ("calls", "throttled", "errors")}
        if d["calls"] > 0:
            out[a] = d
    return out


def totals(ec2: Mapping[str, Mapping[str, int]]) -> tuple[int, int, int]:
    """(all calls, mutating calls, throttled calls)."""
    calls = sum(v.get("calls", 0) for v in ec2.values())
    mutating = sum(v.get("calls", 0) for a, v in ec2.items() if a in MUTATING_ACTIONS)
    throttled = sum(v.get("throttled", 0) for v in ec2.values())
    return calls, mutating, throttled


@dataclass
class DemoReport:
    nodes: int
    pods_requested: int
    pods: list[DemoPod]
    ec2: dict[str, dict[str, int]]
    leaked_enis: int
    mode: str
    """``netns`` or ``plain`` (no namespaces could be made)."""
    wall_s: float
    scale_out_s: float
    runtime: str = "netns"
    """Who made the pods: ``containerd`` (CRI sandboxes), ``netns`` (bare namespaces), ``none`` (plain)."""
    scale_down: dict[str, Any] = field(default_factory=dict)
    node_pools: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    dataplane: dict[str, Any] = field(default_factory=dict)
    """The data-plane checks (demo/dataplane.py): pod_to_pod_ok, egress_ok, egress_source, ..."""

    def ready(self) -> list[DemoPod]:
        return [p for p in self.pods if p.ready_at is not None and p.ip]

    def to_json(self) -> dict[str, Any]:
        """docs/design.md's demo format (every key), then extras."""
        times = [t for p in self.ready() if (t := p.time_to_ip_s) is not None]
        holders = [(f"pod/{p.node}/{p.index}", p.ip) for p in self.ready() if p.ip]
        calls, mutating, throttled = totals(self.ec2)
        return {
            "nodes": self.nodes,
            "pods_requested": self.pods_requested,
            "pods_ready": len(self.ready()),
            "time_to_ip_s": {
                "p50": round(percentile(times, 50) or 0.0, 3),
                "p99": round(percentile(times, 99) or 0.0, 3),
                "max": round(max(times, default=0.0), 3),
            },
            "ec2": self.ec2,
            "duplicate_ips": duplicate_ips(holders),
            "leaked_enis": self.leaked_enis,
            # extras
            "mode": self.mode,
            "runtime": self.runtime,
            "addresses_handed_out": len({ip for _, ip in holders}),
            "kernel_verified": sum(1 for p in self.ready() if p.kernel_ip and p.kernel_ip == p.ip),
            "ec2_calls": calls,
            "mutating_calls": mutating,
            "throttled_calls": throttled,
            "scale_out_s": round(self.scale_out_s, 3),
            "scale_down": self.scale_down,
            "node_pools": self.node_pools,
            "wall_s": round(self.wall_s, 3),
            "notes": self.notes,
            **self.dataplane,
        }


_RUNTIME_TEXT = {
    "kubelet": "kubelets (a Deployment; the DaemonSet's agent and warmpool-cni gave the addresses)",
    "containerd": "containerd (CRI sandboxes; the runtime called warmpool-cni)",
    "netns": "the demo (bare network namespaces; warmpool-cni called directly)",
    "none": "nobody (plain mode: CNI ADDs without a namespace)",
}


def render(report: Mapping[str, Any]) -> str:
    """The end-of-run report as text."""
    t = report["time_to_ip_s"]
    lines = [
        "",
        "warmpool demo — report",
        f"  mode                {report.get('mode', '?')}",
        f"  pods made by        {_RUNTIME_TEXT.get(str(report.get('runtime')), report.get('runtime', '?'))}",
        f"  nodes               {report['nodes']}",
        f"  pods ready          {report['pods_ready']} / {report['pods_requested']}"
        f"  (addresses handed out: {report.get('addresses_handed_out', '?')},"
        f" seen on the pod's eth0: {report.get('kernel_verified', '?')})",
        f"  time to address     p50 {t['p50']:.2f} s   p99 {t['p99']:.2f} s   max {t['max']:.2f} s"
        f"   (scale-out done in {report.get('scale_out_s', 0):.1f} s)",
        f"  EC2 calls           {report.get('ec2_calls', 0)} total, {report.get('mutating_calls', 0)} mutating,"
        f" {report.get('throttled_calls', 0)} throttled",
    ]
    ec2 = report.get("ec2", {})
    if ec2:
        width = max(len(a) for a in ec2)
        lines.append(f"    {'action'.ljust(width)}  calls  throttled  errors")
        for a, v in ec2.items():
            lines.append(f"    {a.ljust(width)}  {v['calls']:5d}  {v['throttled']:9d}  {v['errors']:6d}")
    sd = report.get("scale_down") or {}
    if sd:
        lines.append(
            f"  scale-down          {sd.get('deleted', 0)} pods deleted, {sd.get('kept', 0)} kept;"
            f" addresses on nodes {sd.get('addresses_before', '?')} -> {sd.get('addresses_after', '?')}"
            f" in {sd.get('settle_s', 0):.1f} s"
        )
    for n in report.get("node_pools", []):
        links = n.get("links")
        lines.append(
            f"    {n.get('node', '?')}: {n.get('enis', '?')} ENIs, {n.get('addresses', '?')} addresses"
            + (f", {links} ENI links in its namespace" if links is not None else "")
        )
    from demo.dataplane import render_lines

    lines += render_lines(report)
    lines += [
        f"  duplicate IPs       {report['duplicate_ips']}",
        f"  leaked ENIs         {report['leaked_enis']}",
        f"  wall time           {report.get('wall_s', 0):.1f} s",
    ]
    for note in report.get("notes", []):
        lines.append(f"  note: {note}")
    return "\n".join(lines)


def dump(report: Mapping[str, Any], path: str) -> None:
    with open(path, "w", encoding="utf-8") as f:
        json.dump(report, f, indent=2, sort_keys=False)
        f.write("\n")


@dataclass(frozen=True)
class Status:
    phase: str
    ready: int
    requested: int
    enis: int
    calls: int
    mutating: int
    throttled: int
    elapsed_s: float


def status_line(s: Status) -> str:
    return (
        f"[{s.elapsed_s:6.1f}s] {s.phase:<11} pods {s.ready:>3}/{s.requested:<3} "
        f"ENI links {s.enis:>3}  EC2 calls {s.calls:>4} ({s.mutating} mutating)  throttled {s.throttled}"
    )


class LiveView:
    """A refreshing status line on ``stream``: rewritten in place on a terminal,
    a new line every ``plain_every_s`` otherwise (logs, CI)."""

    def __init__(
        self, snapshot: Callable[[], Status], stream: TextIO, interval_s: float = 0.5, plain_every_s: float = 5.0
    ) -> None:
        self._snapshot = snapshot
        self._stream = stream
        self._tty = bool(getattr(stream, "isatty", lambda: False)())
        self._interval = interval_s if self._tty else plain_every_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="demo-live-view", daemon=True)
        self._last = ""
        self._lock = threading.Lock()

    def start(self) -> None:
        self._thread.start()

    def _write(self, line: str) -> None:
        with self._lock:
            self._write_locked(line)

    def _write_locked(self, line: str) -> None:
        if self._tty:
            pad = max(0, len(self._last) - len(line))
            self._stream.write("\r" + line + " " * pad)
        else:
            self._stream.write(line + "\n")
        self._stream.flush()
        self._last = line

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._write(status_line(self._snapshot()))
            except Exception as e:  # the view must never take the demo down
                self._write(f"(status unavailable: {e})")
            self._stop.wait(self._interval)

    def note(self, text: str) -> None:
        """A line that stays (phase changes), printed above the status line."""
        with self._lock:
            if self._tty and self._last:
                self._stream.write("\r" + " " * len(self._last) + "\r")
            self._stream.write(text + "\n")
            self._stream.flush()
            self._last = ""

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=2)
        try:
            self._write(status_line(self._snapshot()))
        except Exception:
            pass
        if self._tty:
            self._stream.write("\n")
            self._stream.flush()
