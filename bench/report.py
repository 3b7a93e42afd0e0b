"""The terminal summary table and the progress bar (stderr)."""

from __future__ import annotations

import sys
import time
from typing import TextIO

from bench.joins import describe as describe_join_limit
from bench.output import BenchResult, StrategyResult


def _f(x: float | None, nd: int = 1) -> str:
    return "-" if x is None else f"{x:.{nd}f}"


def _vs(a: float | None, b: float | None) -> str:
    if a is None or b is None or b <= 0:
        return "-"
    return f"{a / b:.2f}x"


DID_NOT_FINISH = "did not finish"
"""The makespan cell of a run that ended with pods still waiting (no ratio is shown for it)."""

COLUMNS = (
    "strategy",
    "ready",
    "mutating",
    "vs LB",
    "throttled",
    "makespan s",
    "vs LB",
    "p50 s",
    "p99 s",
    "idle end",
    "target",
    "dup",
    "leaked",
    "wall s",
)


def rows(result: BenchResult) -> list[list[str]]:
    out = []
    lb = result.lower_bound
    for name, r in result.strategies.items():
        out.append(
            [
                name,
                f"{r.pods_ready}/{r.pods_requested}",
                str(r.mutating_calls),
                _vs(r.mutating_calls, lb.mutating_calls) if r.finished else "-",
                str(r.throttled_calls),
                _f(r.makespan_s) if r.finished else DID_NOT_FINISH,
                _vs(r.makespan_s, lb.makespan_s),
                _f(r.time_to_ip_s.p50, 2),
                _f(r.time_to_ip_s.p99, 2),
                str(r.idle_ips_end),
                str(r.idle_ips_target),
                str(r.duplicate_ips),
                str(r.leaked_enis),
                _f(r.wall_s, 2),
            ]
        )
    olb = result.online_lower_bound
    if olb is not None:
        out.append(
            [
                "online bound",
                "",
                str(olb.mutating_calls),
                _vs(olb.mutating_calls, lb.mutating_calls),
                "0",
                _f(olb.makespan_s),
                _vs(olb.makespan_s, lb.makespan_s),
                "",
                "",
                "",
                "",
                "0",
                "0",
                "",
            ]
        )
    out.append(
        [
            "lower bound",
            "",
            str(lb.mutating_calls),
            "1.00x",
            "0",
            _f(lb.makespan_s),
            "1.00x",
            "",
            "",
            "",
            "",
            "0",
            "0",
            "",
        ]
    )
    return out


def table(result: BenchResult) -> str:
    """A fixed-width table, one row per strategy plus the lower bound."""
    body = rows(result)
    widths = [max(len(COLUMNS[i]), *(len(r[i]) for r in body)) for i in range(len(COLUMNS))]
    lines = [f"{result.scenario} (seed {result.seed}) — wall {result.wall_s:.1f} s"]
    lines.append(
        "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(COLUMNS, widths, strict=True)))
    )
    lines.append("  ".join("-" * w for w in widths))
    for r in body:
        lines.append("  ".join(v.rjust(w) if i else v.ljust(w) for i, (v, w) in enumerate(zip(r, widths, strict=True))))
    for name, res in result.strategies.items():
        if not res.finished:
            lines.append(
                f"{name}: did not finish: pods still waiting for an address when the run stopped at "
                f"{res.settled_at_s:g} s ({res.pods_ready}/{res.pods_requested} got one; no ratio against the bounds)"
            )
    for name, res in result.strategies.items():
        pu = res.prefix_use
        if pu is not None:
            util = "-" if pu.utilisation is None else f"{100 * pu.utilisation:.0f}%"
            lines.append(
                f"prefixes, {name}: InsufficientCidrBlocks answers {pu.insufficient_cidr_blocks}, "
                f"prefixes {pu.prefixes} ({util} used), fallback singles {pu.singles}, "
                f"EC2 calls {sum(res.ec2_calls.values())} ({res.mutating_calls} mutating accepted)"
            )
    if result.join_limit is not None:
        lines.extend(describe_join_limit(result.join_limit))
    warm = result.strategies.get("warmpool")
    if warm is not None and warm.ratios.mutating_calls_vs_online_bound is not None:
        mk = warm.ratios.makespan_vs_online_bound
        lines.append(
            f"warmpool vs online bound: mutating calls {warm.ratios.mutating_calls_vs_online_bound:.2f}x, "
            f"makespan {'-' if mk is None else f'{mk:.2f}x'}"
        )
    if warm is not None and warm.finished:
        for other in ("vpc-cni", "cilium"):
            b = result.strategies.get(other)
            if b is not None and b.finished:
                lines.append(f"warmpool vs {other}: " + versus(warm, b))
    return "\n".join(lines)


def versus(a: StrategyResult, b: StrategyResult) -> str:
    return (
        f"mutating calls {_vs(a.mutating_calls, b.mutating_calls)}, "
        f"throttles {a.throttled_calls} vs {b.throttled_calls}, "
        f"makespan {_vs(a.makespan_s, b.makespan_s)}, "
        f"p99 time to IP {_vs(a.time_to_ip_s.p99, b.time_to_ip_s.p99)}"
    )


class Progress:
    """A one-line progress bar per strategy on stderr (virtual time / duration).

    On a terminal it redraws in place at most 10 times a second; elsewhere it
    prints one line when each strategy finishes.
    """

    def __init__(self, duration_s: float, stream: TextIO | None = None, width: int = 30) -> None:
        self.duration_s = duration_s
        self.stream = stream or sys.stderr
        self.width = width
        self.tty = self.stream.isatty()
        self._current: str | None = None
        self._drawn = 0.0
        self._t0 = time.perf_counter()

    def update(self, strategy: str, virtual_s: float) -> None:
        if strategy != self._current:
            self.close()
            self._current = strategy
            self._t0 = time.perf_counter()
        if not self.tty:
            return
        now = time.perf_counter()
        if now - self._drawn < 0.1:
            return
        self._drawn = now
        self._draw(virtual_s, now)

    def _draw(self, virtual_s: float, now: float) -> None:
        frac = min(1.0, virtual_s / self.duration_s) if self.duration_s > 0 else 1.0
        done = int(frac * self.width)
        bar = "#" * done + "-" * (self.width - done)
        self.stream.write(
            f"\r{self._current:<9} [{bar}] {virtual_s:7.0f}/{self.duration_s:.0f} virtual s"
            f"  {now - self._t0:6.1f} s wall"
        )
        self.stream.flush()

    def close(self) -> None:
        if self._current is None:
            return
        wall = time.perf_counter() - self._t0
        if self.tty:
            self.stream.write("\r\033[K")
        self.stream.write(f"{self._current:<9} done in {wall:.1f} s wall\n")
        self.stream.flush()
        self._current = None
