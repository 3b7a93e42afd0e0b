"""Every command's bad inputs, one table: each is refused with exit status 2 and one clear
line on stderr, before any work starts, never with a traceback or a silent wrong result.

Each command's work (the local stack, the demo, the bench run, the simulation) is replaced
by a tripwire, so an input wrongly accepted fails here at once instead of starting it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from warmpool_cli.main import main as warmpool

MISSING_DIR = "/nonexistent-warmpool-folder"
SCENARIO = """\
name: tiny
duration_s: 600
cluster: {{name: demo, env: {{WARM_IP_TARGET: 1}}}}
subnets: [{{id: subnet-a, az: us-east-1a, cidr: 10.0.0.0/16}}]
node_groups: [{{name: ng1, instance_type: {itype}, count: 2}}]
workload:
  - {{at_s: 10, node_group: ng1, add_pods_per_node: {pods}}}
"""


class Accepted(AssertionError):
    """The command went on to do its work: the input under test was not refused."""


def _tripwire(*_a: Any, **_k: Any) -> Any:
    raise Accepted("the command accepted the input and started its work")


@pytest.fixture(autouse=True)
def _no_work(monkeypatch: pytest.MonkeyPatch) -> None:
    import bench.cli
    import demo.cli
    import emulated.local
    import simulation.runner

    monkeypatch.setattr(emulated.local, "LocalStack", _tripwire)
    monkeypatch.setattr(demo.cli, "Demo", _tripwire)
    monkeypatch.setattr(bench.cli, "run_bench", _tripwire)
    for name in ("run_many", "run_seed", "fairness"):
        monkeypatch.setattr(simulation.runner, name, _tripwire)


@dataclass(frozen=True)
class Case:
    argv: tuple[str, ...]
    says: str
    """A fragment the error line must hold (case-insensitive)."""


def _scenario(tmp: Path, itype: str = "m5.large", pods: int = 5) -> str:
    path = tmp / f"{itype}-{pods}.yaml"
    path.write_text(SCENARIO.format(itype=itype, pods=pods))
    return str(path)


OK, A_DIR, MISSING = "@scenario", "@folder", "@missing-scenario"
UNKNOWN_TYPE, OVER_MAX_PODS = "@scenario-m9.huge", "@scenario-40-pods-on-m5.large"


def _resolve(token: str, tmp: Path) -> str:
    """The case tables name their files by token; each test makes them in its own folder."""
    return {
        OK: lambda: _scenario(tmp),
        A_DIR: lambda: str(tmp),
        MISSING: lambda: str(tmp / "none.yaml"),
        UNKNOWN_TYPE: lambda: _scenario(tmp, "m9.huge"),
        OVER_MAX_PODS: lambda: _scenario(tmp, "m5.large", 40),
    }.get(token, lambda: token)()


def cases() -> dict[str, Case]:
    ok, a_dir = OK, A_DIR
    return {
        # the dispatcher
        "no command": Case((), "usage"),
        "unknown command": Case(("nope",), "unknown command 'nope'"),
        # local up
        "local alone": Case(("local",), "usage: warmpool local up"),
        "local down": Case(("local", "down"), "unknown subcommand 'down'"),
        "local port too big": Case(("local", "up", "--port", "99999"), "out of range"),
        "local port negative": Case(("local", "up", "--port", "-1"), "out of range"),
        "local port text": Case(("local", "up", "--port", "http"), "not a whole number"),
        "local vpc /33": Case(("local", "up", "--vpc-cidr", "10.0.0.0/33"), "not an ipv4 cidr"),
        "local vpc host bits": Case(("local", "up", "--vpc-cidr", "10.0.0.1/16"), "not an ipv4 cidr"),
        "local subnet shape": Case(("local", "up", "--subnet", "10.0.0.0/20"), "az=cidr"),
        "local subnet outside": Case(("local", "up", "--subnet", "us-east-1a=10.9.0.0/20"), "not inside --vpc-cidr"),
        "local subnets overlap": Case(
            ("local", "up", "--subnet", "us-east-1a=10.0.0.0/18", "--subnet", "us-east-1b=10.0.0.0/20"), "overlaps"
        ),
        "local cluster name": Case(("local", "up", "--cluster", "my cluster"), "letters, digits"),
        "local cluster long": Case(("local", "up", "--cluster", "c" * 60), "at most"),
        "local region": Case(("local", "up", "--region", "mars"), "not an aws region"),
        "local attach delay": Case(("local", "up", "--attach-delay", "-1"), "out of range"),
        "local api latency": Case(("local", "up", "--api-latency", "nan"), "not a finite number"),
        "local budget 0": Case(("local", "up", "--budget-fraction", "0"), "out of range"),
        "local budget 2": Case(("local", "up", "--budget-fraction", "2"), "out of range"),
        "local batch size": Case(("local", "up", "--batch-size", "0"), "out of range"),
        "local batching window": Case(("local", "up", "--batching-window", "-1"), "out of range"),
        "local concurrency": Case(("local", "up", "--max-concurrency", "1"), "out of range"),
        "local timeout": Case(("local", "up", "--allocate-timeout", "0"), "out of range"),
        "local reconcile every": Case(("local", "up", "--reconcile-every", "0"), "out of range"),
        "local gc age": Case(("local", "up", "--gc-age", "-5"), "out of range"),
        "local instance type": Case(("local", "up", "--instance", "m9.huge"), "closest known"),
        "local env dir missing": Case(
            ("local", "up", "--instance", "m5.large", "--agent-env-dir", MISSING_DIR), "not a folder"
        ),
        "local env dir alone": Case(("local", "up", "--agent-env-dir", a_dir), "needs --instance"),
        "local log file": Case(("local", "up", "--log-file", f"{MISSING_DIR}/x.log"), "does not exist"),
        "local unknown flag": Case(("local", "up", "--bogus"), "unrecognized arguments"),
        # bench
        "bench no scenario": Case(("bench",), "give a scenario file, or --random"),
        "bench random zero": Case(("bench", "--random", "0"), "must be >= 1"),
        "bench random abc": Case(("bench", "--random", "abc"), "invalid int value"),
        "bench random jobs zero": Case(("bench", "--random", "2", "--jobs", "0"), "must be >= 1"),
        # cost
        "cost no nodes": Case(("cost",), "required"),
        "cost nodes zero": Case(("cost", "--nodes", "0"), "must be > 0"),
        "cost nodes abc": Case(("cost", "--nodes", "abc"), "not a number"),
        "cost churn negative": Case(("cost", "--nodes", "10", "--churn", "-1"), "must be >= 0"),
        "cost report every zero": Case(("cost", "--nodes", "10", "--report-every", "0"), "must be > 0"),
        "cost json folder gone": Case(("cost", "--nodes", "10", "--json", f"{MISSING_DIR}/c.json"), "cannot write"),
        "bench missing file": Case(("bench", MISSING), "cannot read"),
        "bench json folder gone": Case(("bench", ok, "--json", f"{MISSING_DIR}/r.json"), "does not exist"),
        "bench json is a folder": Case(("bench", ok, "--json", a_dir), "is a folder"),
        "bench plot folder gone": Case(("bench", ok, "--plot", f"{MISSING_DIR}/r.png"), "does not exist"),
        "bench strategy": Case(("bench", ok, "--strategy", "ipamd"), "invalid choice"),
        "bench instance type": Case(("bench", UNKNOWN_TYPE), "closest known"),
        "bench over max pods": Case(("bench", OVER_MAX_PODS), "max-pods is 29"),
        # demo
        "demo nodes 0": Case(("demo", "--nodes", "0"), "out of range"),
        "demo pods 0": Case(("demo", "--pods-per-node", "0"), "out of range"),
        "demo parallel 0": Case(("demo", "--parallel", "0"), "out of range"),
        "demo attach delay": Case(("demo", "--attach-delay", "-1"), "out of range"),
        "demo api latency": Case(("demo", "--api-latency", "-0.5"), "out of range"),
        "demo keep 50": Case(("demo", "--keep-per-node", "50"), "more than --pods-per-node"),
        "demo keep negative": Case(("demo", "--keep-per-node", "-1"), "out of range"),
        "demo instance type": Case(("demo", "--instance-type", "m9.huge"), "closest known"),
        "demo over max pods": Case(("demo", "--pods-per-node", "30"), "at most 29 pods"),
        "demo json folder gone": Case(("demo", "--json", f"{MISSING_DIR}/d.json"), "does not exist"),
        "demo env shape": Case(("demo", "--env", "WARM_IP_TARGET"), "expected key=value"),
        "demo runtime": Case(("demo", "--runtime", "docker"), "invalid choice"),
        # sim
        "sim nothing": Case(("sim",), "give --seeds"),
        "sim empty range": Case(("sim", "--seeds", "4-0"), "range is empty"),
        "sim negative seeds": Case(("sim", "--seeds", "-1"), "whole numbers >= 0"),
        "sim text seeds": Case(("sim", "--seeds", "abc"), "not a seed"),
        "sim seed repeated": Case(("sim", "--seeds", "3,3"), "repeated"),
        "sim negative seed": Case(("sim", "--seed", "-1"), "out of range"),
        "sim jobs 0": Case(("sim", "--seeds", "0-1", "--jobs", "0"), "out of range"),
        "sim json folder gone": Case(("sim", "--seeds", "0-1", "--json", f"{MISSING_DIR}/s.json"), "does not exist"),
        "sim without": Case(("sim", "--seeds", "0-1", "--without", "meteor"), "unknown event kinds"),
        "sim keep alone": Case(("sim", "--seeds", "0-1", "--keep", "1"), "--keep needs --seed"),
        "sim keep shape": Case(("sim", "--seed", "1", "--keep", "a,b"), "event indices"),
        "sim both": Case(("sim", "--seeds", "0-1", "--seed", "3"), "not both"),
        "sim fairness alone": Case(("sim", "--seed", "3", "--fairness"), "--fairness needs --seeds"),
        # plan
        "plan nodes 0": Case(("plan", "--nodes", "0"), "out of range"),
        "plan nodes text": Case(("plan", "--nodes", "many"), "not a whole number"),
        "plan warm ip": Case(("plan", "--warm-ip", "-1"), "out of range"),
        "plan seed": Case(("plan", "--seed", "x"), "invalid int"),
        # max-pods
        "max-pods no type": Case(("max-pods",), "required"),
        "max-pods unknown type": Case(("max-pods", "--instance-type", "m9.huge"), "closest known"),
        "max-pods max eni": Case(("max-pods", "--instance-type", "m5.large", "--max-eni", "0"), "out of range"),
        "max-pods source": Case(("max-pods", "--instance-type", "m5.large", "--source", "guess"), "invalid choice"),
    }


CASE_NAMES = sorted(cases())


def _run(fn: Callable[[list[str]], int], argv: list[str]) -> int:
    try:
        return fn(argv)
    except SystemExit as exc:  # argparse's way: exit 2 after printing the error
        return exc.code if isinstance(exc.code, int) else 1


@pytest.mark.parametrize("name", CASE_NAMES)
def test_every_bad_input_is_refused_with_status_2_and_a_clear_line(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    case = cases()[name]
    status = _run(warmpool, [_resolve(a, tmp_path) for a in case.argv])
    err = capsys.readouterr().err
    assert status == 2, f"{case.argv}: exit {status}; stderr: {err}"
    assert "Traceback" not in err
    assert case.says.lower() in err.lower(), f"{case.argv}: {err!r}"
    assert len(err) < 1500, f"{case.argv}: the message is {len(err)} characters"


def test_the_table_covers_every_command() -> None:
    from warmpool_cli.main import COMMANDS

    covered = {c.argv[0] for c in cases().values() if c.argv}
    assert set(COMMANDS) <= covered


def test_an_unknown_instance_type_names_a_few_close_ones_not_all() -> None:
    from warmpool.limits import KNOWN_TYPES, known

    with pytest.raises(KeyError) as exc:
        known("m5.hugee")
    text = str(exc.value.args[0])
    assert "closest known: " in text
    near = text.split("closest known: ")[1].split(" (")[0].split(", ")
    assert 1 <= len(near) <= 5
    assert all(t.startswith("m5.") for t in near), near
    assert len(KNOWN_TYPES) > 500 and len(text) < 300


# render_manifests is run as ``python -m infra.render_manifests``; its bad inputs too.


def _render(argv: list[str]) -> int:
    from infra.render_manifests import main

    return _run(main, argv)


@pytest.mark.parametrize(
    ("outputs", "image", "says"),
    [
        (None, "repo/agent:1", "no such file"),
        ("{not json", "repo/agent:1", "expecting"),
        ({"warmpool-demo": {"ClusterName": "demo"}}, "repo/agent:1", "outputs lack"),
        ({"a": {"ReportsQueueUrl": "u"}, "b": {"ReportsQueueUrl": "v"}}, "repo/agent:1", "pick a stack"),
        ({"cluster": "demo", "region": "us-east-1"}, "repo/agent:1", "outputs lack reports_queue_url"),
        (
            {"cluster": "d", "region": "r", "reports_queue_url": "u", "result_queue_prefix": "p"},
            "agent",
            "with a tag or digest",
        ),
    ],
    ids=["missing file", "not json", "one stack missing keys", "two stacks", "flat missing keys", "untagged image"],
)
def test_render_manifests_bad_inputs(
    outputs: Any, image: str, says: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "outputs.json"
    if outputs is not None:
        path.write_text(outputs if isinstance(outputs, str) else json.dumps(outputs))
    status = _render(["--outputs", str(path), "--image", image, "--out-dir", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert status == 2 and "Traceback" not in err
    assert says.lower() in err.lower(), err


def test_the_demos_default_keep_follows_fewer_pods_and_good_values_pass() -> None:
    from demo.cli import options_from_args

    assert options_from_args(["--pods-per-node", "1"]).keep_per_node == 1  # the default (2) fits itself
    assert options_from_args([]).keep_per_node == 2
    o = options_from_args(["--pods-per-node", "29", "--keep-per-node", "29", "--parallel", "1", "--attach-delay", "0"])
    assert (o.pods_per_node, o.keep_per_node, o.cni_parallel) == (29, 29, 1)


def test_good_values_still_pass() -> None:
    from emulated.local import options_from_args
    from simulation.runner import _parse_seeds

    o = options_from_args(
        ["--port", "65535", "--vpc-cidr", "10.1.0.0/16", "--subnet", "us-east-1a=10.1.0.0/20", "--budget-fraction", "1"]
    )
    assert (o.port, o.vpc_cidr, o.subnets, o.budget_fraction) == (
        65535,
        "10.1.0.0/16",
        (("us-east-1a", "10.1.0.0/20"),),
        1,
    )
    assert options_from_args([]).subnets == (("us-east-1a", "10.0.0.0/18"), ("us-east-1b", "10.0.64.0/18"))
    assert _parse_seeds("0-3") == [0, 1, 2, 3] and _parse_seeds("7") == [7] and _parse_seeds("1, 5") == [1, 5]
