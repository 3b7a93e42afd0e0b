"""`warmpool max-pods` and `warmpool plan` run with the core alone (issue 20): an operator
bootstrapping a node has the core package and pydantic, not boto3, the functions, the
agent or the stand-ins. The command runs in a fresh interpreter in which importing any
of those fails, as it would where they are not installed."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

ABSENT = (
    "boto3",
    "botocore",
    "moto",
    "pyroute2",
    "aws_cdk",
    "aws_lambda_powertools",
    "functions",
    "node_agent",
    "infra",
    "emulated",
    "bench",
    "simulation",
    "demo",
)


def _run(*argv: str, absent: tuple[str, ...] = ABSENT) -> subprocess.CompletedProcess[str]:
    code = textwrap.dedent(
        f"""
        import importlib.abc, sys
        ABSENT = {absent!r}
        class Absent(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in ABSENT:
                    raise ModuleNotFoundError(f"No module named {{name!r}} (not installed)", name=name)
                return None
        sys.meta_path.insert(0, Absent())
        from warmpool_cli.main import main
        code = main({list(argv)!r})
        loaded = sorted({{m.split(".")[0] for m in sys.modules}} & set(ABSENT))
        print("LOADED", loaded, file=sys.stderr)
        raise SystemExit(code)
        """
    )
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)


def test_max_pods_runs_with_the_core_alone() -> None:
    p = _run("max-pods", "--instance-type", "m5.large")
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "29"
    assert "LOADED []" in p.stderr


def test_plan_runs_with_the_core_alone() -> None:
    p = _run("plan", "--nodes", "20", "--json")
    assert p.returncode == 0, p.stderr
    lines = [json.loads(x) for x in p.stdout.splitlines() if x.strip()]
    assert lines, p.stdout
    assert "LOADED []" in p.stderr


@pytest.mark.parametrize("argv", [("sim", "--seed", "1"), ("bench", "scenarios/burst-200.yaml")])
def test_the_stand_ins_commands_say_what_is_missing(argv: tuple[str, ...]) -> None:
    # The blocker works (a command that needs the stand-ins fails under it), and the
    # command says in one line what is missing and how to install it: no traceback.
    p = _run(*argv)
    assert p.returncode == 2
    assert f"warmpool {argv[0]}: needs " in p.stderr and "warmpool[sim]" in p.stderr
    assert "Traceback" not in p.stderr


THIRD_PARTY = tuple(
    m for m in ABSENT if m in ("boto3", "botocore", "moto", "pyroute2", "aws_cdk", "aws_lambda_powertools")
)


@pytest.mark.parametrize("argv", [("sim", "--seed", "1"), ("local", "up", "--help")])
def test_the_stand_ins_installed_without_their_packages_say_what_is_missing(argv: tuple[str, ...]) -> None:
    # As a core-only wheel install is: every module is there, the extras' packages are not.
    p = _run(*argv, absent=THIRD_PARTY)
    assert p.returncode == 2, p.stderr
    assert f"warmpool {argv[0]}: needs boto" in p.stderr and "warmpool[sim]" in p.stderr
    assert "Traceback" not in p.stderr
