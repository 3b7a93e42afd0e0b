"""Networking limits of every EC2 instance type: published facts, as data.

One line per type: ``instance_type max_enis ipv4_per_eni network_cards hypervisor
bare_metal vcpus`` (``-`` = not known). ``max_enis`` is what the default network
card takes (``NetworkInfo.MaximumNetworkInterfaces`` / the card's own maximum),
``ipv4_per_eni`` counts the primary address.

Where the figures come from:

* ENIs, IPv4 addresses per ENI, network cards, hypervisor and bare metal: the
  VPC CNI's generated table, ``pkg/vpc/vpc_ip_resource_limit.go`` in
  aws/amazon-vpc-cni-k8s (generated there from ``DescribeInstanceTypes`` in 17
  regions; the version read had 1022 types), transcribed line for line.
* vCPUs (only used for the max-pods ceiling: 110, or 250 above 30 vCPUs): that
  table has none. Here they follow EC2's size naming (``medium`` 1, ``large`` 2,
  ``xlarge`` 4, ``Nxlarge`` 4N, ``metal-Nxl`` 4N, ``metal`` as the family's largest
  size), with the published exceptions written out by hand in the generator
  (burstable ``t2``/``t3``/``t3a``/``t4g`` small sizes, SMT-off ``hpc*`` types,
  Mac and ``u-*`` bare metal, a few older types). Exact everywhere once
  regenerated from an account.

The rows are package data, ``warmpool/limits_table.txt``, read once when this module
is first imported (no other I/O: the core plans from them without a network call).
Regenerate from an AWS account (``DescribeInstanceTypes``, all current types of
a region, vCPUs included) with ``python scripts/gen_instance_limits.py --region
us-east-1 > warmpool/limits_table.txt``. At run time the allocator still prefers
what ``DescribeInstanceTypes`` says for the node's type.
"""

from __future__ import annotations

from importlib import resources

SOURCE = "aws/amazon-vpc-cni-k8s pkg/vpc/vpc_ip_resource_limit.go (vCPUs derived, see above)"
DATA_FILE = "limits_table.txt"


def read_table() -> str:
    """The rows, as shipped in the package (one line per type, the columns above)."""
    return resources.files("warmpool").joinpath(DATA_FILE).read_text(encoding="utf-8")


TABLE = read_table()
"""Every row of :data:`DATA_FILE`, read once."""
