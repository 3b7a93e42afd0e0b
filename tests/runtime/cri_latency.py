"""Time to a pod's address through the kubelet's path, with the agent under the DaemonSet's
privileges: RunPodSandbox (containerd creates the sandbox and calls warmpool-cni ADD) and
StopPodSandbox + RemovePodSandbox (DEL), warm addresses, one pod at a time.

    sudo .venv/bin/python -m tests.runtime.cri_latency --runs 50

Prints the figures; asserts nothing (docs/agent.md, "Running under containerd").
"""

from __future__ import annotations

import argparse
import sys
import time

from emulated.figures import percentile
from tests.runtime.cluster import runtime_cluster


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=50)
    a = ap.parse_args()
    out = sys.stdout  # the local stack sends the functions' output to its log file while it runs
    # a pool big enough that no ADD waits for the allocator
    with runtime_cluster({"WARM_IP_TARGET": "8", "MINIMUM_IP_TARGET": "8"}) as c:
        c.wait_pool(8)
        add: list[float] = []
        rm: list[float] = []
        for i in range(a.runs):
            t0 = time.perf_counter()
            pod = c.rt.run_pod(f"lat-{i}", f"uid-lat-{i}")
            t1 = time.perf_counter()
            c.rt.remove_pod(pod.id)
            t2 = time.perf_counter()
            add.append(t1 - t0)
            rm.append(t2 - t1)
        for name, xs in (
            ("RunPodSandbox (sandbox + ADD)", add),
            ("Stop+RemovePodSandbox (DEL)", rm),
            ("warmpool-cni ADD as run", c.plugin_seconds("ADD")),
            ("warmpool-cni DEL as run", c.plugin_seconds("DEL")),
        ):
            p50, p99 = percentile(xs, 50) or 0.0, percentile(xs, 99) or 0.0
            print(
                f"{name:32s} n={len(xs)}  p50 {p50 * 1000:6.0f} ms  "
                f"p99 {p99 * 1000:6.0f} ms  max {max(xs) * 1000:6.0f} ms",
                file=out,
            )


if __name__ == "__main__":
    main()
