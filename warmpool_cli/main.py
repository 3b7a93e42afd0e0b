"""The ``warmpool`` command: run warmpool without an AWS account.

Subcommands import their module only when chosen, so ``warmpool --help`` is
fast and one part's missing optional dependency never breaks another.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence

DESCRIPTION = """\
warmpool keeps every Kubernetes node's pool of pod IP addresses full with one
cluster-wide allocator that never trips EC2's API throttling.

These commands run it on one machine against emulated AWS:
  local up   the serverless side (EC2 with throttling and limits, SQS, DynamoDB,
             IMDS, the allocate/reconcile functions) on a local endpoint
  bench      a scale-out scenario in virtual time: warmpool against per-node
             ipamd (vpc-cni) and the Cilium operator, with the lower bound
  demo       the whole system end to end: local stack, agents in network
             namespaces, pods created through the CNI plugin
  sim        the whole system (allocator, reconciler, agents) under seeded
             faults in virtual time, with invariants checked after every event
  plan       the core planner on a sample cluster's reports (no AWS at all)
  max-pods   the kubelet's --max-pods for an instance type (VPC CNI formulas)
  cost       the monthly AWS bill of the serverless part for a cluster size
"""


class MissingPart(Exception):
    """A command's module, or a package it needs, is not installed."""


OPTIONAL_PACKAGES = frozenset(
    {
        "boto3",
        "botocore",
        "moto",
        "yaml",
        "matplotlib",
        "cryptography",
        "grpc",
        "pyroute2",
        "aws_lambda_powertools",
        "pydantic_settings",
        "aws_cdk",
        "constructs",
        "cdk_nag",
    }
)
"""What the extras of pyproject.toml install (the core needs only pydantic)."""


def _run(module: str, func: str, extra: str | None = None) -> Callable[[list[str]], int]:
    def call(argv: list[str]) -> int:
        how = f"pip install 'warmpool[{extra}]'" if extra else "pip install warmpool"
        try:
            mod = importlib.import_module(module)
            result: int = getattr(mod, func)(argv)
        except ModuleNotFoundError as exc:
            # The command's own module is absent, or a package only an extra installs (a
            # wheel holds every module; the stand-ins import theirs lazily, on first use).
            top = (exc.name or "").split(".")[0]
            if exc.name is None or not (module.startswith(top) or top in OPTIONAL_PACKAGES):
                raise
            raise MissingPart(
                f"needs {exc.name}, which is not installed ({how}; in a checkout, `make` installs all)"
            ) from exc
        return result

    return call


COMMANDS: dict[str, tuple[str, Callable[[list[str]], int]]] = {
    "local": (
        "run the local stack: `warmpool local up [--port N] [--cluster NAME]`",
        _run("emulated.local", "main", "sim"),
    ),
    "bench": (
        "run a scenario: `warmpool bench SCENARIO.yaml [--json OUT] [--plot OUT.png]`",
        _run("bench.cli", "bench_main", "sim"),
    ),
    "demo": (
        "end-to-end demo: `warmpool demo [--nodes N] [--pods-per-node N] [--json OUT]`",
        _run("demo.cli", "main", "sim"),
    ),
    "sim": (
        "the whole system under deterministic simulation: `warmpool sim --seeds A-B [--json OUT] [--jobs 2]`",
        _run("simulation.runner", "main", "sim"),
    ),
    "plan": (
        "plan a sample cluster with the core: `warmpool plan [--nodes N] [--json]`",
        _run("warmpool_cli.sample_plan", "main"),
    ),
    "max-pods": (
        "the kubelet's --max-pods: `warmpool max-pods --instance-type T [--prefix] [--max-eni N]`",
        _run("warmpool_cli.max_pods", "main"),
    ),
    "cost": (
        "the monthly AWS bill: `warmpool cost --nodes N [--churn F] [--report-every S] [--json OUT]`",
        _run("warmpool_cli.cost", "main"),
    ),
}


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(
        prog="warmpool", description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (help_text, _) in COMMANDS.items():
        sub.add_parser(name, help=help_text, add_help=False)
    if not args or args[0] in ("-h", "--help"):
        if args:
            parser.print_help()
            return 0
        parser.print_usage(sys.stderr)
        print("warmpool: give a command (warmpool --help lists them)", file=sys.stderr)
        return 2
    name, rest = args[0], args[1:]
    if name not in COMMANDS:
        parser.print_usage(sys.stderr)
        print(f"warmpool: unknown command {name!r}; choose from {', '.join(COMMANDS)}", file=sys.stderr)
        return 2
    try:
        return COMMANDS[name][1](rest)
    except MissingPart as exc:
        print(f"warmpool {name}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("\nwarmpool: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
