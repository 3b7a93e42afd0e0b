"""The EC2 port is typed: the adapter satisfies it, and a misspelt parameter
in a call through it is a mypy error (it used to be a keyword argument
forwarded to boto3, found only at run time)."""

from __future__ import annotations

from pathlib import Path

from mypy import api

SNIPPET = """
from functions.ec2 import Ec2
from warmpool.ports import Ec2Port


def conforms(e: Ec2) -> Ec2Port:
    return e


def misspelt(ec2: Ec2Port) -> None:
    ec2.attach(instance_id="i-1", eni_id="eni-1", device_index=1, network_cards=0)
"""


def test_a_misspelt_ec2_parameter_is_a_type_error(tmp_path: Path) -> None:
    src = tmp_path / "snippet.py"
    src.write_text(SNIPPET)
    out, err, status = api.run(["--strict", "--no-incremental", "--follow-imports=silent", str(src)])
    assert status == 1, out + err
    errors = [line for line in out.splitlines() if ": error:" in line]
    assert len(errors) == 1, out  # only the misspelling: Ec2 satisfies Ec2Port
    assert 'Unexpected keyword argument "network_cards" for "attach"' in errors[0]
