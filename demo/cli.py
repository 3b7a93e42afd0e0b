"""``warmpool demo`` on the command line: options, signals (SIGINT/SIGTERM stop the run
and clean up, exit 130), the single-run lock, the report on stdout and the exit status
(0 only when every pod got an address, none twice, no ENI leaked and the data plane passed).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from demo import dataplane, host
from demo import netns as nx
from demo import run as demo_module
from demo.options import DemoOptions, Interrupted
from demo.report import dump, render
from demo.run import Demo
from warmpool.argtypes import float_at_least, int_at_least, output_path
from warmpool.limits import known, pod_ceiling


def _instance_type(text: str) -> str:
    """A type of the built-in table, checked before anything starts."""
    try:
        return known(text.strip()).instance_type
    except KeyError as exc:
        raise argparse.ArgumentTypeError(str(exc.args[0])) from None


def build_parser() -> argparse.ArgumentParser:
    d = DemoOptions()
    doc = demo_module.__doc__
    p = argparse.ArgumentParser(prog="warmpool demo", description=doc.split("\n\n")[0] if doc else None)
    p.add_argument("--nodes", type=int_at_least(1), default=d.nodes, help=f"nodes (default {d.nodes})")
    p.add_argument(
        "--pods-per-node",
        type=int_at_least(1),
        default=d.pods_per_node,
        help=f"pods per node in the scale-out (default {d.pods_per_node})",
    )
    p.add_argument("--json", dest="json_out", metavar="OUT", type=output_path, help="write the report as JSON to OUT")
    p.add_argument("--instance-type", type=_instance_type, default=d.instance_type, help=f"default {d.instance_type}")
    p.add_argument(
        "--keep-per-node",
        type=int_at_least(0),
        default=None,
        help=f"pods kept after the scale-down, at most --pods-per-node (default {d.keep_per_node}, "
        "or --pods-per-node when fewer)",
    )
    p.add_argument(
        "--attach-delay", type=float_at_least(0), default=d.attach_delay_s, help="emulated EC2 attach delay (s)"
    )
    p.add_argument(
        "--api-latency", type=float_at_least(0), default=d.api_latency_s, help="emulated EC2 latency per call (s)"
    )
    p.add_argument("--parallel", type=int_at_least(1), default=d.cni_parallel, help="CNI invocations in flight at once")
    p.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="agent environment override, e.g. WARM_IP_TARGET=1 (repeatable)",
    )
    p.add_argument("--no-netns", action="store_true", help="run without network namespaces")
    p.add_argument(
        "--runtime",
        choices=("auto", "kubelet", "sandbox", "containerd", "netns"),
        default=d.runtime,
        help="who makes the pods: kubelets of a control plane built here (the DaemonSet from the agent "
        "image), containerd sandboxes through CRI, or bare namespaces; sandbox: containerd when it runs "
        "here, else namespaces (default auto: the kubelets when they can run here, else as sandbox)",
    )
    p.add_argument("--no-live", action="store_true", help="no live status line")
    return p


def options_from_args(argv: list[str]) -> DemoOptions:
    p = build_parser()
    a = p.parse_args(argv)
    if a.keep_per_node is None:
        a.keep_per_node = min(DemoOptions().keep_per_node, a.pods_per_node)
    elif a.keep_per_node > a.pods_per_node:
        p.error(f"--keep-per-node {a.keep_per_node} is more than --pods-per-node {a.pods_per_node}")
    env: dict[str, str] = {}
    for item in a.env:
        k, sep, v = item.partition("=")
        if not sep or not k:
            p.error(f"--env {item!r}: expected KEY=VALUE")
        env[k] = v
    prefix = env.get("ENABLE_PREFIX_DELEGATION", "").strip().lower() == "true"
    ceiling = pod_ceiling(known(a.instance_type), prefix=prefix)
    if ceiling and a.pods_per_node > ceiling:
        p.error(
            f"--pods-per-node {a.pods_per_node}: a {a.instance_type} node runs at most {ceiling} pods "
            "(warmpool max-pods); pick fewer pods or a larger type"
        )
    return DemoOptions(
        nodes=a.nodes,
        pods_per_node=a.pods_per_node,
        json_out=a.json_out,
        instance_type=a.instance_type,
        keep_per_node=a.keep_per_node,
        attach_delay_s=a.attach_delay,
        api_latency_s=a.api_latency,
        cni_parallel=a.parallel,
        netns=False if a.no_netns else None,
        agent_env=env,
        live=not a.no_live,
        runtime=a.runtime,
    )


@contextlib.contextmanager
def signals_to(handler: Callable[[int], None]) -> Iterator[None]:
    """SIGINT/SIGTERM call ``handler``; the previous handlers come back on exit."""
    prev: Mapping[int, Any] = {}
    if threading.current_thread() is threading.main_thread():
        prev = {s: signal.signal(s, lambda signum, _f: handler(signum)) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, h in prev.items():
            signal.signal(s, h)


def _on_kubelet(opts: DemoOptions) -> tuple[bool | str, str]:
    """Whether this run is on the kubelets (True) or on sandboxes (False; under ``auto``, with
    the note that says why), or the error when it cannot run as asked."""
    from demo import on_kubelet

    if opts.runtime not in ("auto", "kubelet"):
        if opts.runtime == "sandbox":
            opts.runtime = "auto"  # the Demo's own auto: containerd, else bare namespaces
        return False, ""
    why = "--no-netns" if opts.netns is False else (on_kubelet.support() or on_kubelet.check_options(opts))
    if why is None:
        return True, ""
    if opts.runtime == "kubelet":
        return f"--runtime kubelet: the kubelets cannot run here ({why})", ""
    opts.runtime = "auto"
    return False, f"the kubelets cannot run here ({why}): the pods are made without Kubernetes"


def main(argv: list[str]) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    opts = options_from_args(argv)
    kubelet, note = _on_kubelet(opts)
    demo = Demo(opts)
    if note:
        demo.notes.append(note)
        demo.say(f"warmpool demo: {note}")
    status = 0
    out = sys.stdout  # the functions' output is redirected while they run; the report comes here

    def on_signal(signum: int) -> None:
        if not demo.stop.is_set():
            sys.stderr.write(f"\nwarmpool demo: {signal.Signals(signum).name}, stopping and cleaning up\n")
        demo.stop.set()

    if isinstance(kubelet, str):
        sys.stderr.write(f"warmpool demo: {kubelet}\n")
        return 1
    if kubelet:
        from demo.on_kubelet import KubeletDemo

        run: Callable[[], dict[str, Any]] = KubeletDemo(opts, sys.stderr, demo.stop).run
    else:
        run = demo.run
    try:
        lock_wait = float(os.environ.get("WARMPOOL_DEMO_LOCK_WAIT_S", "0") or 0)
        with host.single_run_lock(lock_wait), signals_to(on_signal):
            try:
                report = run()
            except Interrupted:
                status = 130
            except Exception as e:
                demo.say(f"warmpool demo: failed: {type(e).__name__}: {e}")
                status = 1
            else:
                print(render(report), file=out, flush=True)
                written = True
                if opts.json_out:
                    try:
                        dump(report, opts.json_out)
                    except OSError as e:  # checked at start; the folder went away meanwhile, a full disk
                        demo.say(f"warmpool demo: cannot write {opts.json_out}: {e.strerror or e}")
                        written = False
                    else:
                        print(f"  JSON written to {opts.json_out}", file=out, flush=True)
                ok = (
                    report["pods_ready"] == report["pods_requested"]
                    and report["duplicate_ips"] == 0
                    and report["leaked_enis"] == 0
                    and not report.get("foreign_addresses")  # on the kubelets: each on its node's ENIs
                    and dataplane.passed(report)
                )
                status = (0 if ok else 1) if written else 2
            finally:
                demo.teardown()
                leftovers = nx.list_namespaces() if demo.mode == "netns" else []
                sys.stderr.write(
                    "warmpool demo: cleaned up"
                    + (f" (still present: {', '.join(leftovers)})" if leftovers else "")
                    + "\n"
                )
    except RuntimeError as e:
        sys.stderr.write(f"warmpool demo: {e}\n")
        return 1
    return status
