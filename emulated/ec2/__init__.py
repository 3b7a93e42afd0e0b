"""Emulated EC2 with AWS's fidelity rules (limits, errors, throttling, delays).

One model (:class:`Ec2Emulator`), several ways in: :meth:`Ec2Emulator.client`
(fast, boto3-shaped), :meth:`Ec2Emulator.boto3_client` (a real boto3 client
served in-process through botocore event hooks) and :mod:`emulated.ec2.http`
(the EC2 Query protocol over HTTP). See docs/emulated-ec2.md.
"""

from .client import FastEc2Client
from .config import Ec2Config
from .emulator import UNFILTERED_SUFFIX, Ec2Emulator
from .errors import Ec2Error

__all__ = ["UNFILTERED_SUFFIX", "Ec2Config", "Ec2Emulator", "Ec2Error", "FastEc2Client"]
