"""The run's figure: per strategy, side by side, pods created and pods with an address
over time against the lower and online bounds (top), and EC2 calls per second, the
mutating ones accepted, the throttled ones and the failed ones (bottom). A strategy
that did not finish says so in its title, with no ratio against a bound."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.output import BenchResult, StrategyResult
from bench.runner import Series


def _curve(times: list[float], end: float) -> tuple[list[float], list[int]]:
    xs, ys = [0.0], [0]
    for k, t in enumerate(times, 1):
        xs.append(t)
        ys.append(k)
    xs.append(end)
    ys.append(len(times))
    return xs, ys


def failed_per_second(s: Series) -> dict[int, int]:
    """Calls EC2 answered with an error other than throttling, per second."""
    out: dict[int, int] = {}
    for t, _action, status in s.call_log:
        if status not in ("ok", "throttled"):
            out[int(t)] = out.get(int(t), 0) + 1
    return out


def title(name: str, r: StrategyResult, result: BenchResult) -> str:
    lb = result.lower_bound
    if not r.finished:
        return (
            f"{name}: DID NOT FINISH ({r.pods_ready}/{r.pods_requested} pods by {r.settled_at_s:.0f} s), "
            f"{r.mutating_calls} mutating calls, {r.throttled_calls} throttled"
        )
    return (
        f"{name}: {r.mutating_calls} mutating calls ({r.mutating_calls / max(1, lb.mutating_calls):.2f}x LB), "
        f"{r.throttled_calls} throttled"
    )


def _top(ax: Any, s: Series, r: StrategyResult, result: BenchResult, end: float, requested: int) -> None:
    xs, ys = _curve(s.created_times, end)
    ax.step(xs, ys, where="post", color="tab:grey", lw=1.0, label="pods created (arrivals)")
    xs, ys = _curve(s.ready_times, end)
    ax.step(xs, ys, where="post", color="tab:green", label="pods with an address")
    ax.axhline(requested, color="grey", lw=0.8, ls=":", label=f"requested ({requested})")
    lb = result.lower_bound
    ax.axvline(lb.makespan_s, color="tab:purple", lw=0.8, ls="--", label=f"lower bound {lb.makespan_s:.0f} s")
    olb = result.online_lower_bound
    if olb is not None:
        ax.axvline(olb.makespan_s, color="tab:orange", lw=0.8, ls="-.", label=f"online bound {olb.makespan_s:.0f} s")
    if r.makespan_s is not None:
        ax.axvline(r.makespan_s, color="tab:green", lw=0.8, ls="--", label=f"makespan {r.makespan_s:.0f} s")
    ax.set_title(title(r.strategy, r, result), fontsize=9, color="black" if r.finished else "tab:red")
    ax.set_ylabel("pods")
    ax.legend(fontsize=7, loc="lower right")


def plot(result: BenchResult, series: dict[str, Series], out: str | Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(series)
    n = max(1, len(names))
    fig, axes = plt.subplots(2, n, figsize=(5.2 * n, 7), sharex=True, squeeze=False)
    end = max((s.end_s for s in series.values()), default=1.0)
    ymax_calls = 1
    for s in series.values():
        for v in s.per_second.values():
            ymax_calls = max(ymax_calls, v[0])
    requested = max((r.pods_requested for r in result.strategies.values()), default=0)
    for i, name in enumerate(names):
        s = series[name]
        top, bottom = axes[0][i], axes[1][i]
        _top(top, s, result.strategies[name], result, end, requested)
        secs = sorted(s.per_second)
        failed = failed_per_second(s)
        bottom.bar(
            secs, [s.per_second[k][0] for k in secs], width=1.0, color="tab:blue", alpha=0.5, label="EC2 calls/s"
        )
        bottom.bar(
            secs,
            [s.per_second[k][2] for k in secs],
            width=1.0,
            color="tab:blue",
            alpha=0.9,
            label="mutating accepted/s",
        )
        bottom.bar(secs, [s.per_second[k][1] for k in secs], width=1.0, color="tab:red", alpha=0.9, label="throttled/s")
        fsecs = sorted(failed)
        bottom.bar(
            fsecs, [failed[k] for k in fsecs], width=1.0, color="black", alpha=0.9, label="failed (not throttled)/s"
        )
        bottom.set_ylim(0, ymax_calls * 1.05)
        bottom.set_xlim(0, end)
        bottom.set_xlabel("virtual time (s)")
        bottom.set_ylabel("calls per second")
        bottom.legend(fontsize=7, loc="upper right")
    fig.suptitle(f"warmpool bench: {result.scenario} (seed {result.seed})")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
