"""warmpool max-pods and the instance-limits data table."""

from __future__ import annotations

import hashlib
import tomllib
from pathlib import Path

import pytest

from warmpool.limits import KNOWN_TYPES, MaxPodsSource, known, max_pods, parse_table
from warmpool.limits_data import DATA_FILE, TABLE
from warmpool_cli import max_pods as cli


@pytest.mark.parametrize(
    ("itype", "expected"),
    [
        # the VPC CNI's misc/eni-max-pods.txt values: ENIs × (IPv4 per ENI − 1) + 2
        ("t2.medium", 17),
        ("m4.4xlarge", 234),
        ("t3.medium", 17),
        ("m5.large", 29),
        ("c5.18xlarge", 737),
        ("t3.nano", 4),
        ("m4.large", 20),
    ],
)
def test_secondary_ip_mode_is_the_eni_formula(itype: str, expected: int) -> None:
    assert max_pods(known(itype)) == expected


@pytest.mark.parametrize(
    ("itype", "expected"),
    [
        ("m5.large", 110),  # 3 × 9 × 16 + 2 = 434, 2 vCPUs: ceiling 110
        ("m5.8xlarge", 250),  # 8 × 29 × 16 + 2, 32 vCPUs (> 30): ceiling 250
        ("m5.4xlarge", 110),  # 16 vCPUs
        ("t3.nano", 34),  # 2 × 1 × 16 + 2 = 34: under the ceiling
        ("m4.4xlarge", 234),  # Xen: no prefixes, the secondary-address formula (as the calculator does)
        ("t2.medium", 17),
    ],
)
def test_prefix_mode_multiplies_by_16_and_caps_by_vcpus(itype: str, expected: int) -> None:
    assert max_pods(known(itype), prefix=True) == expected


def test_max_eni_caps_the_enis() -> None:
    assert max_pods(known("m5.large"), max_eni=1) == 1 * 9 + 2
    assert max_pods(known("m5.large"), max_eni=99) == 29


def test_every_row_parses_and_is_plausible() -> None:
    rows = [line for line in TABLE.splitlines() if line.strip()]
    assert len(KNOWN_TYPES) == len(rows) > 1000
    for lim in KNOWN_TYPES.values():
        assert lim.max_enis >= 1 and lim.ipv4_per_eni >= 2  # the primary and at least one more
        assert lim.network_cards >= 1
    assert known("m4.4xlarge").prefix_capable is False
    assert known("a1.metal").prefix_capable is True  # bare metal counts as Nitro (IsNitroInstance)
    assert known("p5.48xlarge").network_cards == 32


def test_parse_table_reads_the_columns() -> None:
    got = parse_table("x9.large 3 10 2 xen false -\n")["x9.large"]
    assert (got.max_enis, got.ipv4_per_eni, got.network_cards, got.prefix_capable, got.vcpus) == (3, 10, 2, False, None)


def test_cli_prints_the_number_alone(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--instance-type", "m4.4xlarge"]) == 0
    assert capsys.readouterr().out == "234\n"
    assert cli.main(["--instance-type", "m5.large", "--prefix", "--max-eni", "2"]) == 0
    assert capsys.readouterr().out == "110\n"


def test_cli_rejects_unknown_types_and_bad_max_eni(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--instance-type", "m5.huge"]) == 2
    err = capsys.readouterr()
    assert err.out == "" and "m5.huge" in err.err and "m5.large" in err.err
    assert cli.main(["--instance-type", "m5.large", "--max-eni", "0"]) == 2


def test_from_describe_counts_the_default_cards_enis_like_the_table() -> None:
    from warmpool.limits import InstanceLimits

    item = {
        "InstanceType": "c6in.32xlarge",
        "Hypervisor": "nitro",
        "VCpuInfo": {"DefaultVCpus": 128},
        "NetworkInfo": {
            "MaximumNetworkInterfaces": 16,
            "Ipv4AddressesPerInterface": 50,
            "MaximumNetworkCards": 2,
            "DefaultNetworkCardIndex": 0,
            "NetworkCards": [
                {"NetworkCardIndex": 0, "MaximumNetworkInterfaces": 8},
                {"NetworkCardIndex": 1, "MaximumNetworkInterfaces": 8},
            ],
        },
    }
    assert InstanceLimits.from_describe(item) == known("c6in.32xlarge")


def test_the_table_is_the_one_the_module_held_before_it_became_package_data() -> None:
    """warmpool/limits_table.txt holds, byte for byte, the table warmpool/limits_data.py
    carried inline (1,022 types); regenerating it changes this digest on purpose."""
    assert len(TABLE.splitlines()) == 1022
    assert hashlib.sha256(TABLE.encode()).hexdigest() == (
        "e7ba520ec542f3f904f016e1fedd62d59c200e2fa3094736bd72e9f80ef30b58"
    )


def test_the_table_ships_as_package_data() -> None:
    """A wheel (the agent image installs one) carries the file only if pyproject says so."""
    cfg = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())
    assert DATA_FILE in cfg["tool"]["setuptools"]["package-data"]["warmpool"]


@pytest.mark.parametrize(
    ("itype", "table", "calculator"),
    [("m5.4xlarge", 234, 110), ("m5.large", 29, 29), ("c5.9xlarge", 234, 234), ("m5.24xlarge", 737, 250)],
)
def test_both_sources_the_published_table_by_default(
    itype: str, table: int, calculator: int, capsys: pytest.CaptureFixture[str]
) -> None:
    from warmpool.limits import MaxPodsSource, known, max_pods

    assert max_pods(known(itype)) == table
    assert max_pods(known(itype), source=MaxPodsSource.CALCULATOR) == calculator
    assert cli.main(["--instance-type", itype]) == 0
    assert cli.main(["--instance-type", itype, "--source", "table"]) == 0
    assert cli.main(["--instance-type", itype, "--source", "calculator"]) == 0
    assert capsys.readouterr().out.split() == [str(table), str(table), str(calculator)]


@pytest.mark.parametrize(
    ("itype", "kw", "expected"),
    [
        # issue 24: pods in other subnets than the node's leave the primary ENI out, one ENI
        # fewer (awslabs/amazon-eks-ami max-pods-calculator.sh --cni-custom-networking-enabled)
        ("m5.large", {}, 2 * 9 + 2),
        ("m4.4xlarge", {}, 7 * 29 + 2),  # the table's formula, no ceiling
        ("m4.4xlarge", {"source": MaxPodsSource.CALCULATOR}, 110),
        ("m5.large", {"prefix": True}, 110),  # 2 × 9 × 16 + 2 = 290, 2 vCPUs: ceiling 110
        ("t3.nano", {"prefix": True}, 1 * 1 * 16 + 2),
        ("m5.large", {"max_eni": 2}, 1 * 9 + 2),  # the cap first, then the primary left out
        ("m5.large", {"max_eni": 1}, 2),  # no ENI for pods: host-network pods only, as the calculator says
    ],
)
def test_custom_networking_leaves_the_primary_eni_out(itype: str, kw: dict[str, object], expected: int) -> None:
    assert max_pods(known(itype), custom_networking=True, **kw) == expected  # type: ignore[arg-type]
    assert max_pods(known(itype), **kw) >= expected  # type: ignore[arg-type]


def test_cli_knows_custom_networking(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--instance-type", "m5.large", "--custom-networking"]) == 0
    assert capsys.readouterr().out == "20\n"
    assert cli.main(["--instance-type", "m5.large"]) == 0
    assert capsys.readouterr().out == "29\n"
