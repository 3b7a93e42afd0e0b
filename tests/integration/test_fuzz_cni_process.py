"""Hostile input for the CNI plugin as the runtime runs it: a handful of real
``python -S warmpool-cni`` processes, each answering a CNI error JSON with the
spec code, never a traceback (the in-process fuzzing is
tests/unit/test_fuzz_cni.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from node_agent import cni


@pytest.mark.parametrize(
    "env,raw,code",
    [
        ({}, "", 4),
        ({"CNI_COMMAND": "ADD"}, "{not json", 6),
        ({"CNI_COMMAND": "ADD"}, "[" * 100_000, 6),
        (
            {"CNI_COMMAND": "ADD", "CNI_CONTAINERID": "c", "CNI_IFNAME": "eth0", "CNI_NETNS": "/x"},
            '{"cniVersion":"0.1.0"}',
            1,
        ),
        ({"CNI_COMMAND": "ADD", "CNI_CONTAINERID": "c", "CNI_IFNAME": "eth0"}, '{"cniVersion":"1.0.0"}', 4),
        (
            {
                "CNI_COMMAND": "ADD",
                "CNI_CONTAINERID": "c",
                "CNI_IFNAME": "eth0",
                "CNI_NETNS": "/x",
                "WARMPOOL_CNI_TIMEOUT_S": "nan",
            },
            '{"cniVersion":"1.0.0"}',
            4,
        ),
        (
            {"CNI_COMMAND": "DEL", "CNI_CONTAINERID": "c", "CNI_IFNAME": "eth0"},
            '{"cniVersion":"1.0.0","socket":"/nonexistent/agent.sock"}',
            11,
        ),
        (
            {"CNI_COMMAND": "ADD", "CNI_CONTAINERID": "c", "CNI_IFNAME": "eth0", "CNI_NETNS": "/x"},
            '{"cniVersion":"1.0.0","pad":"' + "x" * (2 << 20) + '"}',
            7,
        ),
        ({"CNI_COMMAND": "ADD", "CNI_CONTAINERID": "c", "CNI_IFNAME": "eth0", "CNI_NETNS": "/x"}, "[" * (1 << 21), 7),
        ({"CNI_COMMAND": "GC"}, '{"cniVersion":"1.0.0","cni.dev/valid-attachments":[]}', 1),
        ({"CNI_COMMAND": "STATUS"}, '{"cniVersion":"1.1.0"}', 50),
    ],
)
def test_real_plugin_process(tmp_path: Path, env: dict[str, str], raw: str, code: int) -> None:
    plugin = Path(cni.__file__)
    p = subprocess.run(
        [sys.executable, "-S", str(plugin)],
        input=raw,
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "WARMPOOL_SOCKET": str(tmp_path / "none.sock"), **env},
        timeout=30,
    )
    assert p.returncode == 1 and "Traceback" not in p.stderr, p.stderr
    err = json.loads(p.stdout)
    assert err["code"] == code, err
