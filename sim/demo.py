"""``warmpool demo``: the main job on one machine.

Until the end-to-end demo (local stack + agents in network namespaces) lands,
this runs the most complete thing that exists: the core planning a sample
cluster's scale-out and comparing its EC2 calls with per-node ipamd's.
"""

from __future__ import annotations

from sim import sample_plan


def main(argv: list[str]) -> int:
    return sample_plan.main(argv)
