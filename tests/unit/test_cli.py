"""The ``warmpool`` command line."""

from __future__ import annotations

import json

from warmpool_cli.main import main


def test_help_lists_every_command(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for cmd in ("local", "bench", "demo", "plan"):
        assert cmd in out


def test_unknown_command_is_a_clear_error(capsys):
    assert main(["frobnicate"]) == 2
    assert "unknown command 'frobnicate'" in capsys.readouterr().err


def test_plan_prints_fewer_calls_than_ipamd(capsys):
    assert main(["plan", "--nodes", "30"]) == 0
    out = capsys.readouterr().out
    ours = int(next(line for line in out.splitlines() if line.startswith("total mutating")).split()[4])
    ipamd = int(next(line for line in out.splitlines() if line.startswith("per-node ipamd")).split()[4])
    assert 0 < ours < ipamd


def test_plan_json_lines(capsys):
    assert main(["plan", "--nodes", "4", "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(rows) == 4 and all(r["kind"] == "allocate" for r in rows)
