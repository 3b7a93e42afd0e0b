"""What an operator sees of a local run: ``warmpool local up``'s stdout (the outputs line
alone), its console (a refused report said, with the tag it lacks), and the CloudWatch
dashboard the CDK app defines, drawn from the stack's metrics and opened in headless
Chromium with every widget holding data.

The run is demo-like and meant to light every widget: three nodes' agents (two tagged for
the cluster, one not: its reports are refused ``foreign-instance``), other callers draining
EC2's AssignPrivateIpAddresses bucket (throttles), and one injected EC2 error (on the
allocator's first-contact CreateTags).
``WARMPOOL_SCREENSHOT_DIR`` set: the screenshot is also written there (docs/ keeps the one
its pages show).
"""

from __future__ import annotations

import html.parser
import json
import os
import shutil
import signal
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from demo.host import console_script, free_port
from warmpool import names

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]  # a guard on a loaded machine, not a speed check
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def _get(url: str, data: Any = None, timeout: float = 200) -> Any:
    req = urllib.request.Request(url, data=None if data is None else json.dumps(data).encode(), method=None)
    with urllib.request.urlopen(req, timeout=timeout) as r:
        body = r.read().decode()
    return json.loads(body) if body.lstrip().startswith(("{", "[")) else body


class Stack:
    def __init__(self, work: Path) -> None:
        self.work = work
        self.err_path = work / "stack.err"
        self.out_path = work / "stack.out"
        self.proc = subprocess.Popen(
            [
                console_script("warmpool"),
                "local",
                "up",
                "--port",
                "0",
                "--reconcile-every",
                "5",
                "--gc-age",
                "0",
                "--instance",
                "m5.large",
                "--instance",
                "m5.large",
                "--agent-env-dir",
                str(work),
            ],
            stdout=open(self.out_path, "w"),  # noqa: SIM115 (the child holds it)
            stderr=open(self.err_path, "w"),  # noqa: SIM115
            start_new_session=True,
        )
        deadline = time.monotonic() + 120
        while not self.out_path.read_text().strip():
            assert self.proc.poll() is None, self.err_path.read_text()
            assert time.monotonic() < deadline, "no outputs line in 120 s"
            time.sleep(0.5)
        self.outputs: dict[str, Any] = json.loads(self.out_path.read_text().splitlines()[0])
        self.agents: list[subprocess.Popen[bytes]] = []

    def agent(self, env_file: Path) -> None:
        env = dict(line.split("=", 1) for line in env_file.read_text().splitlines() if "=" in line)
        env.update({k: os.environ[k] for k in ("PATH", "HOME", "LANG") if k in os.environ})
        log = open(env_file.with_suffix(".log"), "wb")  # noqa: SIM115 (the child holds it)
        self.agents.append(
            subprocess.Popen([console_script("warmpool-agent")], env=env, stdout=log, stderr=subprocess.STDOUT)
        )

    def stop(self) -> None:
        for a in self.agents:
            a.terminate()
        for a in self.agents:
            a.wait(timeout=30)
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=90)  # the stack's own watchdog prints its threads at 45 s
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            tail = self.err_path.read_text()[-6000:]
            raise AssertionError(f"warmpool local up did not stop in 90 s of SIGTERM; stderr ends:\n{tail}") from None


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    work = tmp_path_factory.mktemp("operator")
    stack = Stack(work)
    try:
        ep = stack.outputs["endpoint"]
        # an instance without the cluster tag, and its agent: refused foreign-instance
        ec2 = _ec2(stack)
        foreign = ec2.run_instances(
            ImageId="ami-00000000000000000",
            InstanceType="m5.large",
            MinCount=1,
            MaxCount=1,
            SubnetId=stack.outputs["subnet_ids"][0],
        )["Instances"][0]["InstanceId"]
        env_text = _get(f"{ep}/_warmpool/agent-env/{foreign}")
        foreign_env = work / f"{foreign}.env"
        foreign_env.write_text(
            env_text.replace(names.DEFAULT_METRICS_ADDR, f"127.0.0.1:{free_port()}").replace(
                f"MY_NODE_NAME={foreign}", "MY_NODE_NAME=untagged"
            )
        )
        _get(
            f"{ep}/_warmpool/faults",
            [
                {"background_load": {"AssignPrivateIpAddresses": 50.0}},
                {"action": "CreateTags", "code": "InternalError", "count": 1},  # the first-contact tag
            ],
        )
        # The other callers drain the bucket (capacity 100 at 50 calls/s against a refill of 5/s:
        # about 2.2 s) before any agent reports: started at once, an agent's first Assign could
        # come first and take the whole pool it needs unthrottled, leaving the throttles widget
        # empty (stop 46: the first report answered 1.3 s after the agents started).
        time.sleep(5)
        for env_file in sorted(work.glob("i-*.env")):
            stack.agent(env_file)
        yield stack
    finally:
        stack.stop()


def _ec2(stack: Stack) -> Any:
    import boto3

    return boto3.client(
        "ec2",
        endpoint_url=stack.outputs["endpoint"],
        region_name=stack.outputs["region"],
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )


def _graphs(data: dict[str, Any]) -> dict[str, int]:
    return {w["title"]: sum(len(s["points"]) for s in w["series"]) for w in data["widgets"] if w["type"] != "text"}


def test_stdout_is_the_outputs_line_alone_and_names_the_dashboard_and_log(run: Stack) -> None:
    out = run.outputs
    assert run.out_path.read_text().count("\n") == 1
    assert out["dashboard_url"] == out["endpoint"] + "/_warmpool/dashboard/"
    assert Path(out["log_file"]).exists() and len(out["instances"]) == 2
    assert set(out["agent_env_files"]) == set(out["instances"])


def test_a_refused_report_is_said_on_the_console_with_the_tag_it_lacks(run: Stack) -> None:
    deadline = time.monotonic() + 180
    while "refused: foreign-instance" not in run.err_path.read_text():
        assert time.monotonic() < deadline, run.err_path.read_text()
        time.sleep(1)
    line = next(x for x in run.err_path.read_text().splitlines() if "refused: foreign-instance" in x)
    assert "(untagged)" in line and names.cluster_tag_key("demo") + "=owned" in line


def test_the_dashboard_is_the_cdk_apps_and_every_widget_has_data_in_chromium(run: Stack, tmp_path: Path) -> None:
    if CHROMIUM is None:
        pytest.skip("chromium is not installed (make system-deps installs Debian's)")
    url = run.outputs["dashboard_url"]
    body = _get(url + "body")
    assert body["widgets"] and body["widgets"][0]["type"] == "text"  # the definition, synthesized
    deadline = time.monotonic() + 300
    while True:
        data = _get(url + "data")
        graphs = _graphs(data)
        empty = sorted(t for t, n in graphs.items() if n == 0)
        if not empty:
            break
        assert time.monotonic() < deadline, f"widgets with no data: {empty}"
        time.sleep(5)
    assert len(data["widgets"]) == len(body["widgets"])
    assert [w.get("title") for w in data["widgets"]] == [w["properties"].get("title") for w in body["widgets"]]

    dom = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=15000", "--dump-dom", url],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert dom.returncode == 0, dom.stderr[-2000:]
    drawn = _DrawnWidgets.read(dom.stdout)
    assert drawn.rendered == len(body["widgets"]), dom.stdout[:2000]
    assert set(drawn.points) == set(graphs)
    assert all(n > 0 for n in drawn.points.values()), drawn.points

    shot = tmp_path / "dashboard-local.png"
    subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--window-size=1250,1300",
            "--virtual-time-budget=15000",
            f"--screenshot={shot}",
            url,
        ],
        capture_output=True,
        timeout=180,
        check=True,
    )
    assert shot.stat().st_size > 10_000
    if os.environ.get("WARMPOOL_SCREENSHOT_DIR"):
        shutil.copy(shot, Path(os.environ["WARMPOOL_SCREENSHOT_DIR"]) / shot.name)


class _DrawnWidgets(html.parser.HTMLParser):
    """The widgets the page drew: each graph's title and points, and the count it reports."""

    def __init__(self) -> None:
        super().__init__()
        self.points: dict[str, int] = {}
        self.rendered = -1

    @classmethod
    def read(cls, text: str) -> _DrawnWidgets:
        p = cls()
        p.feed(text)
        return p

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "body" and a.get("data-rendered"):
            self.rendered = int(a["data-rendered"] or 0)
        if a.get("data-kind") == "graph":
            self.points[a.get("data-title") or ""] = int(a.get("data-points") or 0)


def test_agent_env_folders_are_the_stacks_own() -> None:
    """Instance ids repeat from stack to stack (the emulator's are deterministic): an agent
    started from a later stack's env file must not restore an earlier one's checkpoint."""
    from emulated.local import LocalStack

    dirs = []
    for _ in range(2):
        with LocalStack(run_functions=False, set_process_env=False) as stack:
            dirs.append(stack.agent_env("i-0123456789abcdef0")[names.AGENT_ENV_STATE_DIR])
    assert dirs[0] != dirs[1]
