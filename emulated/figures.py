"""The figures the bench, the demo and the simulation all report, each defined once.

* :func:`percentile`: linear interpolation between the closest ranks (numpy's
  default), the method of the bench's ``time_to_ip_s`` and so of the README's
  figures;
* :func:`leaked_enis`: ENIs EC2 holds detached (status ``available``) at the end,
  ENIs nobody uses and, once the run is over, nobody will delete.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from emulated.ec2 import Ec2Emulator


def percentile(values: Iterable[float], q: float) -> float | None:
    """The ``q``-th percentile (``q`` from 0 to 100) of ``values``, by linear interpolation
    between the closest ranks; None when there are no values."""
    if not 0 <= q <= 100:
        raise ValueError(f"percentile: q must be in [0, 100], got {q}")
    xs = sorted(values)
    if not xs:
        return None
    pos = (len(xs) - 1) * (q / 100)
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def leaked_enis(emu: Ec2Emulator) -> int:
    """ENIs the emulated EC2 holds detached (status ``available``), once the attaches and
    detaches due by now have landed."""
    emu.settle()
    return sum(1 for e in list(emu.enis.values()) if e.status == "available")
