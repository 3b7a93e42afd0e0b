"""Bench determinism across processes: the same seed gives the same JSON
whatever the interpreter's hash seed (set iteration must not steer a run)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.helpers.bench import small, without_wall


def _run(scenario: Path, out: Path, hash_seed: str) -> dict[str, Any]:
    env = {**os.environ, "PYTHONHASHSEED": hash_seed}
    subprocess.run(
        [sys.executable, "-m", "bench.cli", str(scenario), "--json", str(out), "--quiet"],
        check=True,
        env=env,
        capture_output=True,
        timeout=300,
    )
    data: dict[str, Any] = without_wall(json.loads(out.read_text()))
    return data


def test_same_seed_same_json_in_other_processes(tmp_path: Path) -> None:
    sc = small(
        ["warmpool", "vpc-cni", "cilium"],
        nodes=4,
        pods=15,
        faults=[
            {"at_s": 20, "duration_s": 60, "kind": "lambda-crash", "rate": 0.3},
            {"at_s": 0, "duration_s": 900, "kind": "duplicate-delivery", "rate": 0.2},
            {"at_s": 30, "duration_s": 60, "kind": "attach-failure", "rate": 0.2},
        ],
    )
    path = tmp_path / "s.yaml"
    path.write_text(json.dumps(sc.model_dump(exclude_none=True)))
    a = _run(path, tmp_path / "a.json", "1")
    b = _run(path, tmp_path / "b.json", "2")
    assert a == b
    assert a["strategies"]["warmpool"]["pods_ready"] == 60
