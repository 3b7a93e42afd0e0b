"""README's quick start, run as written from a fresh clone of this commit.

The clone is made with ``git clone`` of the repository's HEAD (so: commit first), set up
by the README's ``make`` line, then the "Run one agent against the local stack" block runs
through ``bash -e`` with only the stack's port and the folder swapped for free ones (the test may run
beside another stack). ``make demo`` itself runs as root (the demo's namespaces need it);
elsewhere the set-up half of it, ``make .venv/.installed``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"

pytestmark = [pytest.mark.slow, pytest.mark.timeout(3000)]  # a fresh install and the demo: minutes


def _block(after_heading: str) -> str:
    """The first ```sh block after a heading of README."""
    text = README.read_text()
    section = text[text.index(after_heading) :]
    m = re.search(r"```sh\n(.*?)```", section, re.S)
    assert m, f"no sh block under {after_heading!r}"
    return m.group(1)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_the_readme_quick_start_runs_as_written_from_a_fresh_clone(tmp_path: Path) -> None:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs git and a git checkout")
    setup = _block("## Quick start")
    assert "make demo" in setup and "git clone" in setup
    clone = tmp_path / "warmpool"
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(clone)], check=True, timeout=120)
    target = "demo" if os.geteuid() == 0 else ".venv/.installed"
    make = subprocess.run(
        ["make", target], cwd=clone, capture_output=True, text=True, timeout=1800, env={**os.environ, "CI": "1"}
    )
    assert make.returncode == 0, make.stdout[-3000:] + make.stderr[-3000:]
    assert "make: installing the Python packages" in make.stdout  # progress, not a silent minute
    pip_log = (clone / ".venv" / "pip.log").read_text()
    assert "Successfully installed" in pip_log
    assert "BuildBackendWarning" not in make.stdout + make.stderr + pip_log  # the setuptools banner is quiet
    for command in ("warmpool", "warmpool-agent", "warmpool-cni"):
        assert (clone / ".venv" / "bin" / command).exists(), command

    stack_port, work = _free_port(), tmp_path / "wp"
    recipe = _block("### Run one agent against the local stack")
    assert "4566" in recipe and "61680" in recipe and "/tmp/wp" in recipe
    # the agent's port (61680) is the stack's choice in the env file: kept as written
    recipe = recipe.replace("4566", str(stack_port)).replace("/tmp/wp", str(work))
    run = subprocess.run(["bash", "-e", "-c", recipe], cwd=clone, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    pool = dict(line.split() for line in run.stdout.splitlines() if line.startswith("warmpool_addresses_"))
    assert int(pool["warmpool_addresses_available"]) > 0, run.stdout
    lines = (work / "outputs.json").read_text().splitlines()
    assert len(lines) == 1  # stdout carries the outputs line alone
    outputs = json.loads(lines[0])
    assert outputs["dashboard_url"].startswith(f"http://127.0.0.1:{stack_port}/")
    log = Path(outputs["log_file"]).read_text()
    assert '"_aws"' in log  # the functions' EMF metrics went to the log file it names
