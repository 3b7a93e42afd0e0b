"""``warmpool max-pods``: what the kubelet's ``--max-pods`` should be on a node.

Prints the number alone on stdout (for ``--max-pods=$(warmpool max-pods ...)``);
errors go to stderr with exit status 2. The formulas are the VPC CNI's
(:func:`warmpool.limits.max_pods`), the limits those of the built-in table
(:mod:`warmpool.limits_data`). ``--source`` picks whose figure a secondary-address
node gets: the VPC CNI's published table (default) or the EKS AMI's calculator, which
caps it at 110 (250 above 30 vCPUs).
"""

from __future__ import annotations

import argparse
import sys

from warmpool.argtypes import int_at_least
from warmpool.limits import MaxPodsSource, known, max_pods


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
    p.add_argument("--max-eni", type=int_at_least(1), default=None, metavar="N", help="MAX_ENI: use at most N ENIs")
    p.add_argument(
        "--custom-networking",
        action="store_true",
        help="pods in other subnets than the node's (AWS_VPC_K8S_CNI_CUSTOM_NETWORK_CFG): the primary ENI "
        "serves no pod, one ENI fewer (the EKS AMI calculator's --cni-custom-networking-enabled)",
    )
    p.add_argument(
        "--multi-card",
        action="store_true",
        help="ENIs on every network card of a multi-card type (WARMPOOL_MULTI_CARD, warmpool's own: "
        "the VPC CNI's formulas count the default card alone; p5.48xlarge: 32 cards of 2 ENIs)",
    )
    p.add_argument(
        "--source",
        choices=[s.value for s in MaxPodsSource],
        default=MaxPodsSource.TABLE.value,
        help="secondary-address figures from the VPC CNI's published table misc/eni-max-pods.txt "
        "(table, the default: m5.4xlarge 234) or from the EKS AMI's max-pods-calculator.sh, which caps "
        "every mode at 110, or 250 above 30 vCPUs (calculator: m5.4xlarge 110)",
    )
    return p


def main(argv: list[str]) -> int:
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:  # argparse has printed the error (status 2) or the help (0)
        return exc.code if isinstance(exc.code, int) else 2
    try:
        limits = known(args.instance_type.strip())
        value = max_pods(
            limits,
            prefix=args.prefix,
            max_eni=args.max_eni,
            source=MaxPodsSource(args.source),
            custom_networking=args.custom_networking,
            multi_card=args.multi_card,
        )
    except (KeyError, ValueError) as exc:
        print(f"warmpool max-pods: {exc.args[0] if exc.args else exc}", file=sys.stderr)
        return 2
    print(value)
    return 0
