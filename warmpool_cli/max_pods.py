"""``warmpool max-pods``: what the kubelet's ``--max-pods`` should be on a node.

Prints the number alone on stdout (for ``--max-pods=$(warmpool max-pods ...)``);
errors go to stderr with exit status 2. The formulas are the VPC CNI's
(:func:`warmpool.limits.max_pods`), the limits those of the built-in table
(:mod:`warmpool.limits_data`).
"""

from __future__ import annotations

import argparse
import sys

from warmpool.limits import known, max_pods


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="warmpool max-pods",
        description="Print the kubelet's --max-pods for an instance type, by the VPC CNI's formulas.",
    )
    p.add_argument("--instance-type", required=True, metavar="T", help="e.g. m5.large")
    p.add_argument(
        "--prefix",
        action="store_true",
        help="prefix delegation (ENABLE_PREFIX_DELEGATION=true): /28 per slot, capped at 110 "
        "(250 above 30 vCPUs); a non-Nitro type falls back to secondary addresses",
    )
    p.add_argument("--max-eni", type=int, default=None, metavar="N", help="MAX_ENI: use at most N ENIs")
    return p


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    if args.max_eni is not None and args.max_eni < 1:
        print("warmpool max-pods: --max-eni must be at least 1", file=sys.stderr)
        return 2
    try:
        limits = known(args.instance_type.strip())
        value = max_pods(limits, prefix=args.prefix, max_eni=args.max_eni)
    except (KeyError, ValueError) as exc:
        print(f"warmpool max-pods: {exc.args[0] if exc.args else exc}", file=sys.stderr)
        return 2
    print(value)
    return 0
