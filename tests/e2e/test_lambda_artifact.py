"""The functions from their deployed artifact (issue 22, the serverless half).

The asset the CDK app stages, the Powertools layer's package set, a clean
interpreter, the runtime interface client from PyPI and the runtime interface
emulator built from source: ``warmpool local up --lambda-runtime``
(:mod:`emulated.lambda_rie`). The first run builds the emulator with Go and
downloads the layer's wheels (cached under ~/.cache/warmpool-e2e).
"""

from __future__ import annotations

import inspect
import json
import os
import pkgutil
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import functions
import warmpool
from emulated.lambda_rie import Artifact, FunctionError, RieFunction, build_artifact, ensure_rie, import_check
from emulated.local import LocalStack
from tests.helpers.local_stack import report_for
from warmpool import names

ROOT = Path(__file__).resolve().parents[2]
# A fresh machine builds the emulator and downloads the layer's and the runtime's wheels in
# the first test's fixture: measured over 5 min here under load (pyproject's default timeout).
pytestmark = pytest.mark.timeout(1800)
MODULES = [f"functions.{m.name}" for m in pkgutil.iter_modules(functions.__path__)] + [
    f"warmpool.{m.name}" for m in pkgutil.iter_modules(warmpool.__path__)
]


@pytest.fixture(scope="module")
def artifact() -> Artifact:
    return build_artifact()


def test_every_function_module_imports_from_the_artifact_alone(artifact: Artifact) -> None:
    """Each module of functions/ and warmpool/ imports in the clean interpreter with
    only the asset, the layer and the runtime's packages on its path: a package the
    code needs that neither the asset nor the layer ships fails here."""
    assert len(MODULES) > 20
    assert import_check(artifact, MODULES) == {}
    # and nothing of this virtualenv leaks in: the layer's pydantic, not ours
    assert not artifact.layer.is_relative_to(Path(sys.prefix))
    assert (artifact.layer / "aws_lambda_powertools").is_dir()
    assert not (artifact.layer / "boto3").exists()  # the layer build removes it; the runtime brings it


def _without(src: Path, dest: Path, package: str) -> Path:
    shutil.copytree(src, dest)
    for p in list(dest.iterdir()):
        if p.name == package or (p.name.startswith(package.replace("_", "-")) or p.name.startswith(package)):
            shutil.rmtree(p) if p.is_dir() else p.unlink()
    return dest


def test_a_package_missing_from_the_asset_and_the_layer_fails_the_artifact(artifact: Artifact, tmp_path: Path) -> None:
    """The check above has teeth: with pydantic-settings taken out of both the asset and
    the layer, the settings module (and so both handlers) no longer import, and the
    function's first invocation through the runtime interface fails."""
    broken = Artifact(
        task=_without(artifact.task, tmp_path / "task", "pydantic_settings"),
        layer=_without(artifact.layer, tmp_path / "layer", "pydantic_settings"),
        runtime=artifact.runtime,
        python=artifact.python,
    )
    bad = import_check(broken, MODULES)
    assert "functions.settings" in bad and "pydantic_settings" in bad["functions.settings"]
    assert "functions.allocate" in bad and "functions.reconcile" in bad
    fn = RieFunction(
        "broken-allocate",
        names.ALLOCATE_HANDLER,
        broken,
        {"AWS_REGION": "us-east-1"},
        concurrency=1,
        timeout_s=30,
        memory_mb=256,
        log_dir=tmp_path,
    )
    try:
        with pytest.raises(FunctionError) as e:
            fn({"Records": []}, None)
        assert e.value.error_type == "Runtime.ImportModuleError"
    finally:
        fn.stop()


@pytest.fixture(scope="module")
def stack() -> Iterator[LocalStack]:
    with LocalStack(
        cluster="lrt",
        lambda_runtime=True,
        batch_size=10,
        batching_window_s=0,
        reconcile_every_s=3600,
        max_concurrency=2,
    ) as s:
        yield s


def test_reports_are_served_by_the_artifact_through_the_runtime_interface(stack: LocalStack) -> None:
    """A node's report through the local stack's event-source mapping reaches allocate in
    its execution environment; the addresses land on the node's ENIs and a result on
    its queue. Reconcile runs from the same artifact."""
    from node_agent.identity import fetch_identity
    from node_agent.imds import ImdsClient

    out = stack.outputs
    assert out["lambda_runtime"]["rie"].endswith("aws-lambda-rie")
    sid = out["subnet_ids"][0]
    iid = stack.ec2.run_instance("m5.large", subnet_id=sid, tags={names.cluster_tag_key("lrt"): "owned"})
    identity = fetch_identity(ImdsClient(f"{out['imds_base']}/{iid}"))
    sqs = stack.client("sqs")
    sqs.send_message(
        QueueUrl=out["reports_queue_url"],
        MessageBody=report_for(stack, iid, 1, identity, targets={"warm_ip": 5}, pending_demand=5),
    )
    deadline = time.monotonic() + 90  # a cold start of the clean interpreter included
    held = 0
    while time.monotonic() < deadline and held < 5:
        time.sleep(0.2)
        held = sum(
            len(e.secondary) for e in stack.ec2.enis.values() if e.attachment and e.attachment.instance_id == iid
        )
    # The local stack wraps each handler to feed its dashboard (emulated/dashboard.py): the
    # function it calls is the artifact's, through the runtime interface.
    allocate, reconcile = inspect.unwrap(stack.allocate.handler), inspect.unwrap(stack.reconcile.handler)
    assert isinstance(allocate, RieFunction) and isinstance(reconcile, RieFunction)
    assert held >= 5, allocate.logs()[-4000:]
    assert allocate.invocations >= 1 and allocate.errors == 0
    assert "START RequestId" in allocate.logs()
    result_url = sqs.get_queue_url(QueueName=names.result_queue("lrt", iid))["QueueUrl"]
    msgs = sqs.receive_message(QueueUrl=result_url, WaitTimeSeconds=5, MaxNumberOfMessages=10).get("Messages", [])
    results = [json.loads(m["Body"]) for m in msgs]
    assert any(r["instance_id"] == iid and r["in_reply_to"] == 1 and r["actions"] for r in results), results
    stack.reconcile.invoke(time.time())
    assert reconcile.invocations == 1 and reconcile.errors == 0, reconcile.logs()[-4000:]
    assert stack.reconcile.errors == 0


def test_local_up_lambda_runtime_command(tmp_path: Path) -> None:
    """`warmpool local up --lambda-runtime`: the outputs line names the artifact, and an
    invalid report is refused to the DLQ by allocate running in the emulator."""
    import boto3

    ensure_rie()  # built once (cached); the command itself must not wait on a Go build here
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    p = subprocess.Popen(
        [
            str(ROOT / ".venv/bin/warmpool"),
            "local",
            "up",
            "--lambda-runtime",
            "--cluster",
            "lrc",
            "--batching-window",
            "0",
            "--batch-size",
            "10",
            "--reconcile-every",
            "3600",
        ],
        stdout=subprocess.PIPE,
        stderr=open(tmp_path / "stderr", "wb"),  # noqa: SIM115
        env=env,
        cwd=ROOT,
    )
    try:
        assert p.stdout is not None
        out = json.loads(p.stdout.readline())
        assert set(out["lambda_runtime"]["artifact"]) == {"task", "layer", "runtime", "python"}
        sqs = boto3.client(
            "sqs",
            endpoint_url=out["endpoint"],
            region_name="us-east-1",
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )
        sqs.send_message(QueueUrl=out["reports_queue_url"], MessageBody="not a report")
        reasons: list[str] = []
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and not reasons:
            msgs = sqs.receive_message(QueueUrl=out["dlq_url"], MessageAttributeNames=["All"], WaitTimeSeconds=1)
            reasons += [m["MessageAttributes"]["reason"]["StringValue"] for m in msgs.get("Messages", [])]
        assert reasons == ["not-json"], (tmp_path / "stderr").read_text()[-3000:]
    finally:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    assert p.returncode == 0
