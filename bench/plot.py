"""The run's figure: per strategy, side by side, pods with an address over
time (top) and EC2 calls per second with throttles (bottom)."""

from __future__ import annotations

from pathlib import Path

from bench.output import BenchResult
from bench.runner import Series


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
    lb = result.lower_bound
    for i, name in enumerate(names):
        s = series[name]
        r = result.strategies[name]
        top, bottom = axes[0][i], axes[1][i]
        xs = [0.0]
        ys = [0]
        for k, t in enumerate(s.ready_times, 1):
            xs.append(t)
            ys.append(k)
        xs.append(end)
        ys.append(len(s.ready_times))
        top.step(xs, ys, where="post", color="tab:green", label="pods with an address")
        top.axhline(requested, color="grey", lw=0.8, ls=":", label=f"requested ({requested})")
        top.axvline(lb.makespan_s, color="tab:purple", lw=0.8, ls="--", label=f"lower bound {lb.makespan_s:.0f} s")
        if r.makespan_s is not None:
            top.axvline(r.makespan_s, color="tab:green", lw=0.8, ls="--", label=f"makespan {r.makespan_s:.0f} s")
        top.set_title(
            f"{name}: {r.mutating_calls} mutating calls ({r.mutating_calls / max(1, lb.mutating_calls):.2f}x LB), "
            f"{r.throttled_calls} throttled",
            fontsize=9,
        )
        top.set_ylabel("pods")
        top.legend(fontsize=7, loc="lower right")
        secs = sorted(s.per_second)
        calls = [s.per_second[k][0] for k in secs]
        thr = [s.per_second[k][1] for k in secs]
        mut = [s.per_second[k][2] for k in secs]
        bottom.bar(secs, calls, width=1.0, color="tab:blue", alpha=0.5, label="EC2 calls/s")
        bottom.bar(secs, mut, width=1.0, color="tab:blue", alpha=0.9, label="mutating accepted/s")
        bottom.bar(secs, thr, width=1.0, color="tab:red", alpha=0.9, label="throttled/s")
        bottom.set_ylim(0, ymax_calls * 1.05)
        bottom.set_xlim(0, end)
        bottom.set_xlabel("virtual time (s)")
        bottom.set_ylabel("calls per second")
        bottom.legend(fontsize=7, loc="upper right")
    fig.suptitle(f"warmpool bench: {result.scenario} (seed {result.seed})")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
