"""The functions from their deployed artifact, through the Lambda runtime interface.

``warmpool local up --lambda-runtime`` runs allocate and reconcile the way Lambda
runs them, instead of importing the handlers into this process:

* the **function code** is the asset ``cdk deploy`` uploads: the directory
  :func:`infra.asset.stage_lambda_code` stages (the stack's ``Code.from_asset``);
* the **layer** holds what the stack's public Powertools v3 layer holds: the
  layer is ``pip install aws-lambda-powertools[all]==V`` with boto3 and its
  dependencies removed (the runtime has them). Its package set is resolved for
  the Lambda runtime's Python version and platform (Python 3.13, arm64 by
  default, as in ``infra/config.py``); the same name==version set is then
  installed for the interpreter here, the only one that can run it;
* the **runtime** directory holds what the Lambda Python runtime brings:
  the runtime interface client (``awslambdaric``) and the AWS SDK (boto3);
* each execution environment is the **runtime interface emulator**
  (``aws-lambda-rie``, a Go program built from source through the Go module
  proxy) running ``python -m awslambdaric HANDLER`` in a clean interpreter:
  the system Python with ``-S -s`` (no site-packages, no user site), its
  ``sys.path`` only the code, the layer and the runtime, in Lambda's order
  (``/var/task``, ``/opt/python``, the runtime), and only the function's
  environment variables.

Lambda runs one invocation at a time in an execution environment, so a function
with a concurrency of N is N emulators (:class:`RieFunction`), and the local
stack's event-source mapping calls it as it calls an in-process handler.

What differs from Lambda, and is said wherever this runs: the interpreter is
this machine's (Python 3.11 on x86_64 here), not the runtime's 3.13 on arm64;
native wheels are the same versions built for it.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

CACHE = Path(os.environ.get("WARMPOOL_E2E_CACHE", Path.home() / ".cache" / "warmpool-e2e"))

# The runtime interface emulator has no tagged releases in the module proxy: a pinned
# pseudo-version (its go.mod asks for Go 1.26).
RIE_MODULE = "github.com/aws/aws-lambda-runtime-interface-emulator"
RIE_VERSION = "v0.0.0-20261030222936-bef5c4ba774d"
AWSLAMBDARIC_VERSION = "4.2.2"
# The AWS SDK the Lambda Python runtime brings (the layer removes its own copy).
RUNTIME_BOTO3_VERSION = "1.44.8"
# Powertools release behind each public layer version this project pins
# (``powertools_layer_version`` in infra/config.py).
POWERTOOLS_FOR_LAYER = {27: "3.24.0"}
# What the Powertools layer build deletes after installing (the runtime provides them).
LAYER_REMOVES = ("boto", "s3transfer", "dateutil", "python_dateutil", "urllib3", "six", "jmespath")
LAMBDA_PLATFORMS = {"arm64": "manylinux2014_aarch64", "x86_64": "manylinux2014_x86_64"}


class LambdaRuntimeError(RuntimeError):
    """The Lambda runtime pieces cannot be built or started here; the message says which."""


class FunctionError(RuntimeError):
    """The function answered with an error (what ``X-Amz-Function-Error`` marks in Lambda)."""

    def __init__(self, error_type: str, message: str) -> None:
        super().__init__(f"{error_type}: {message}")
        self.error_type = error_type


# --- building the pieces -------------------------------------------------------------


def _run(cmd: Sequence[str], **kwargs: Any) -> str:
    p = subprocess.run(list(cmd), capture_output=True, text=True, check=False, **kwargs)
    if p.returncode != 0:
        raise LambdaRuntimeError(f"{' '.join(cmd[:6])} ... failed ({p.returncode}):\n{p.stderr[-3000:]}")
    return str(p.stdout)


def ensure_rie(cache: Path = CACHE) -> Path:
    """The emulator's binary, built from source once per version (``go install``)."""
    dest = cache / f"rie-{RIE_VERSION}"
    binary = dest / "aws-lambda-rie"
    if binary.is_file():
        return binary
    go = shutil.which("go")
    if go is None:
        raise LambdaRuntimeError("the Lambda runtime interface emulator is built with Go, which is not installed")
    dest.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, CGO_ENABLED="0", GOBIN=str(dest), GOFLAGS="-buildvcs=false")
    _run([go, "install", "-ldflags", "-s -w", f"{RIE_MODULE}/cmd/aws-lambda-rie@{RIE_VERSION}"], env=env)
    return binary


def _pip(python: str, *args: str) -> str:
    return _run([python, "-m", "pip", "--disable-pip-version-check", *args])


@dataclass(frozen=True)
class LayerSpec:
    """Which public layer the stack uses: ``python_version`` and the layer version (infra/config.py)."""

    python_version: str = "3.13"
    layer_version: int = 27
    architecture: str = "arm64"

    @property
    def powertools_version(self) -> str:
        try:
            return POWERTOOLS_FOR_LAYER[self.layer_version]
        except KeyError:
            raise LambdaRuntimeError(
                f"Powertools layer version {self.layer_version}: its Powertools release is not known here "
                f"(known: {sorted(POWERTOOLS_FOR_LAYER)}); add it to POWERTOOLS_FOR_LAYER"
            ) from None

    @property
    def key(self) -> str:
        return f"py{self.python_version}-{self.architecture}-layer{self.layer_version}-pt{self.powertools_version}"


def resolve_layer(spec: LayerSpec, cache: Path = CACHE) -> list[str]:
    """The layer's distributions (``name==version``), resolved for the Lambda runtime's
    Python and platform, less those the layer build removes. Cached per spec."""
    pins_file = cache / "lambda" / f"layer-{spec.key}.txt"
    if pins_file.is_file():
        return pins_file.read_text().split()
    wheels = Path(tempfile.mkdtemp(prefix="warmpool-layer-wheels-"))
    try:
        _pip(
            sys.executable,
            "download",
            "--quiet",
            "--only-binary=:all:",
            "--platform",
            LAMBDA_PLATFORMS[spec.architecture],
            "--python-version",
            spec.python_version,
            "--implementation",
            "cp",
            "-d",
            str(wheels),
            f"aws-lambda-powertools[all]=={spec.powertools_version}",
        )
        pins = sorted(_wheel_pin(w.name) for w in wheels.glob("*.whl"))
    finally:
        shutil.rmtree(wheels, ignore_errors=True)
    pins = [p for p in pins if not _removed_by_layer_build(p.split("==")[0])]
    pins_file.parent.mkdir(parents=True, exist_ok=True)
    pins_file.write_text("\n".join(pins) + "\n")
    return pins


def _wheel_pin(filename: str) -> str:
    name, version = filename.split("-")[:2]
    return f"{name.replace('_', '-').lower()}=={version}"


def _removed_by_layer_build(name: str) -> bool:
    n = name.replace("-", "_").lower()
    return any(n == r or n.startswith(r) for r in LAYER_REMOVES)


def _install_target(python: str, target: Path, requirements: Sequence[str]) -> None:
    tmp = target.with_name(target.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    _pip(
        python,
        "install",
        "--quiet",
        "--no-compile",
        "--no-deps",
        "--only-binary=:all:",
        "--target",
        str(tmp),
        *requirements,
    )
    shutil.rmtree(target, ignore_errors=True)
    tmp.rename(target)


def build_layer(spec: LayerSpec, python: str, cache: Path = CACHE) -> Path:
    """``/opt/python`` of the layer, installed for ``python`` (cached)."""
    py_tag = _run([python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"]).strip()
    dest = cache / "lambda" / f"layer-{spec.key}-for-py{py_tag}" / "python"
    if (dest / "aws_lambda_powertools").is_dir():
        return dest
    _install_target(python, dest, resolve_layer(spec, cache))
    return dest


def build_runtime(python: str, cache: Path = CACHE) -> Path:
    """What the Lambda Python runtime brings: the runtime interface client and boto3 (cached)."""
    py_tag = _run([python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"]).strip()
    dest = cache / "lambda" / f"runtime-ric{AWSLAMBDARIC_VERSION}-boto3{RUNTIME_BOTO3_VERSION}-py{py_tag}"
    if (dest / "awslambdaric").is_dir() and (dest / "boto3").is_dir():
        return dest
    tmp = Path(tempfile.mkdtemp(prefix="warmpool-runtime-"))
    try:
        # Resolved with dependencies for this interpreter, then installed as one set.
        _pip(
            python,
            "download",
            "--quiet",
            "--only-binary=:all:",
            "-d",
            str(tmp),
            f"awslambdaric=={AWSLAMBDARIC_VERSION}",
            f"boto3=={RUNTIME_BOTO3_VERSION}",
        )
        pins = sorted({_wheel_pin(w.name) for w in tmp.glob("*.whl")})
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    _install_target(python, dest, pins)
    return dest


def clean_python() -> str:
    """The interpreter the functions run in: the system's, never this virtualenv's."""
    for candidate in ("/usr/bin/python3", shutil.which("python3") or ""):
        if candidate and Path(candidate).is_file() and not Path(candidate).resolve().is_relative_to(Path(sys.prefix)):
            return candidate
    return sys.base_prefix + "/bin/python3"


@dataclass(frozen=True)
class Artifact:
    """The three directories of a function's execution environment, and its interpreter."""

    task: Path  # /var/task: the CDK asset
    layer: Path  # /opt/python: the Powertools layer
    runtime: Path  # the runtime's own packages (awslambdaric, boto3)
    python: str

    @property
    def python_path(self) -> str:
        return os.pathsep.join(str(p) for p in (self.task, self.layer, self.runtime))

    def describe(self) -> dict[str, str]:
        return {"task": str(self.task), "layer": str(self.layer), "runtime": str(self.runtime), "python": self.python}


def build_artifact(
    spec: LayerSpec | None = None, *, task: Path | None = None, python: str | None = None, cache: Path = CACHE
) -> Artifact:
    """The asset as the CDK app stages it (or ``task``), the layer and the runtime."""
    from infra.asset import stage_lambda_code

    spec = spec or LayerSpec()
    python = python or clean_python()
    if task is None:
        task = stage_lambda_code()
    return Artifact(
        task=task, layer=build_layer(spec, python, cache), runtime=build_runtime(python, cache), python=python
    )


def import_check(artifact: Artifact, modules: Sequence[str]) -> dict[str, str]:
    """Import each module in the functions' clean interpreter; ``{module: error}`` of those that fail."""
    script = (
        "import importlib, json, sys\n"
        "bad = {}\n"
        "for m in sys.argv[1:]:\n"
        "    try:\n"
        "        importlib.import_module(m)\n"
        "    except Exception as e:\n"
        "        bad[m] = f'{type(e).__name__}: {e}'\n"
        "print(json.dumps(bad))\n"
    )
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": artifact.python_path, "PYTHONNOUSERSITE": "1", "LANG": "C.UTF-8"}
    out = _run([artifact.python, "-S", "-s", "-c", script, *modules], env=env, cwd=artifact.task)
    result: dict[str, str] = json.loads(out.strip().splitlines()[-1])
    return result


# --- execution environments ------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ExecutionEnvironment:
    """One emulator process: one invocation at a time, started cold, kept warm."""

    def __init__(self, rie: Path, artifact: Artifact, handler: str, env: Mapping[str, str], log_path: Path) -> None:
        self.port = _free_port()
        api_port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}/2015-03-31/functions/function/invocations"
        self.log_path = log_path
        self._log = open(log_path, "ab")  # noqa: SIM115 - closed in stop()
        cmd = [
            str(rie),
            "--runtime-interface-emulator-address",
            f"127.0.0.1:{self.port}",
            "--runtime-api-address",
            f"127.0.0.1:{api_port}",
            artifact.python,
            "-S",
            "-s",
            "-m",
            "awslambdaric",
            handler,
        ]
        self.proc = subprocess.Popen(
            cmd, cwd=artifact.task, env=dict(env), stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True
        )

    def wait_ready(self, timeout_s: float = 20.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise LambdaRuntimeError(f"aws-lambda-rie exited ({self.proc.returncode}); see {self.log_path}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return
            except OSError:
                time.sleep(0.05)
        raise LambdaRuntimeError(f"aws-lambda-rie did not listen on {self.port}; see {self.log_path}")

    def invoke(self, payload: bytes, request_id: str, timeout_s: float) -> Any:
        req = urllib.request.Request(self.url, data=payload, method="POST", headers={"X-Amzn-RequestId": request_id})
        try:
            with urllib.request.urlopen(req, timeout=timeout_s + 10) as r:
                status, body = r.status, r.read()
        except urllib.error.HTTPError as e:
            status, body = e.code, e.read()
        text = body.decode("utf-8", "replace")
        if text.startswith("Task timed out"):
            raise FunctionError("Sandbox.Timedout", text)
        try:
            answer = json.loads(text) if text.strip() else None
        except json.JSONDecodeError:
            raise FunctionError("Runtime.InvalidResponse", f"HTTP {status}: {text[:500]}") from None
        if status != 200 or (isinstance(answer, dict) and {"errorType", "errorMessage"} <= answer.keys()):
            if isinstance(answer, dict):
                raise FunctionError(str(answer.get("errorType")), str(answer.get("errorMessage")))
            raise FunctionError("Runtime.Error", f"HTTP {status}: {text[:500]}")
        return answer

    def stop(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, 15)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, 9)
                self.proc.wait()
        self._log.close()


class RieFunction:
    """A Lambda function of ``concurrency`` execution environments, callable as a handler
    (``fn(event, context)``): each call takes a free environment, as Lambda routes an
    invocation to an idle one. ``context`` supplies the request id; the runtime
    interface client builds the function's own context."""

    def __init__(
        self,
        name: str,
        handler: str,
        artifact: Artifact,
        env: Mapping[str, str],
        *,
        concurrency: int,
        timeout_s: int,
        memory_mb: int,
        rie: Path | None = None,
        log_dir: Path | None = None,
    ) -> None:
        self.name = name
        self.handler = handler
        self.timeout_s = timeout_s
        self.log_dir = log_dir or Path(tempfile.mkdtemp(prefix=f"warmpool-{name}-"))
        rie = rie or ensure_rie()
        fn_env = {
            # what Lambda sets in every Python execution environment
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "LANG": "en_US.UTF-8",
            "TZ": ":UTC",
            "PYTHONPATH": artifact.python_path,
            "PYTHONNOUSERSITE": "1",
            "LAMBDA_TASK_ROOT": str(artifact.task),
            "_HANDLER": handler,
            "AWS_EXECUTION_ENV": "AWS_Lambda_python3.13",
            "AWS_LAMBDA_FUNCTION_NAME": name,
            "AWS_LAMBDA_FUNCTION_TIMEOUT": str(timeout_s),
            "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": str(memory_mb),
            "AWS_LAMBDA_LOG_GROUP_NAME": f"/aws/lambda/{name}",
            **env,
        }
        self.invocations = 0
        self.errors = 0
        self._lock = threading.Lock()
        self._idle: queue.Queue[ExecutionEnvironment] = queue.Queue()
        self.environments = [
            ExecutionEnvironment(rie, artifact, handler, fn_env, self.log_dir / f"{name}-{i}.log")
            for i in range(concurrency)
        ]
        for e in self.environments:
            e.wait_ready()
            self._idle.put(e)

    def __call__(self, event: dict[str, Any], context: Any) -> Any:
        request_id = str(getattr(context, "aws_request_id", "") or "")
        env = self._idle.get()
        try:
            with self._lock:
                self.invocations += 1
            return env.invoke(json.dumps(event).encode(), request_id, self.timeout_s)
        except FunctionError:
            with self._lock:
                self.errors += 1
            raise
        finally:
            self._idle.put(env)

    def logs(self) -> str:
        return "".join(p.read_text(errors="replace") for p in sorted(self.log_dir.glob(f"{self.name}-*.log")))

    def stop(self) -> None:
        for e in self.environments:
            e.stop()


__all__ = [
    "Artifact",
    "FunctionError",
    "LambdaRuntimeError",
    "LayerSpec",
    "RieFunction",
    "build_artifact",
    "ensure_rie",
    "import_check",
]
