"""``warmpool local up``: the local twin of ``cdk deploy``.

One process, one HTTP endpoint on 127.0.0.1, routed by service:

* EC2 (Query protocol) → the EC2 fidelity emulator (:mod:`emulated.ec2.http`);
* SQS and DynamoDB → moto's server apps (faithful wire protocols — JSON and
  Query for SQS, the DynamoDB JSON API with condition expressions — and speed
  is no concern for the demo; the bench uses :mod:`emulated.sqs` in-process instead);
* ``{endpoint}/imds/{instance_id}/latest/...`` → per-instance IMDSv2 (:mod:`emulated.imds`),
  identity documents signed by a test key made at start (:mod:`emulated.iid`) whose
  certificate the functions trust (``WARMPOOL_IDENTITY_CERTIFICATES``);
* ``/_warmpool/...`` → stats and fault injection (see ``docs/local-stack.md``).

A request's service is taken from the ``X-Amz-Target`` header, else the SigV4
credential scope in ``Authorization``, else the ``Action``/``Version``
parameters. The stack creates the queues and tables the CDK stack defines
(names from :mod:`warmpool.names`), a VPC with subnets in the emulator, and runs
``functions.allocate.handler`` behind the emulated SQS event-source mapping and
``functions.reconcile.handler`` on a rate schedule, with the functions'
environment set as the CDK stack sets it (plus ``AWS_ENDPOINT_URL``).
"""

from __future__ import annotations

import argparse
import importlib
import io
import json
import logging
import os
import re
import signal
import sys
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import parse_qsl

from functions.stores import create_tables
from warmpool import names
from warmpool.clock import RealClock

log = logging.getLogger(__name__)

StartResponse = Callable[..., Any]
WsgiApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]

IMDS_PREFIX = "/imds"
CONTROL_PREFIX = "/_warmpool"
DUMMY_KEY = "testing"
ACCOUNT = "123456789012"  # the account moto answers for with any dummy key

_SCOPE_RE = re.compile(r"Credential=[^/]+/\d{8}/([^/]+)/([^/]+)/aws4_request")
_QUERY_VERSIONS = {"2016-11-15": "ec2", "2012-11-05": "sqs"}


@dataclass(frozen=True)
class LocalOptions:
    """What ``local up`` builds. Defaults mirror the CDK stack's (``infra/config.py``)."""

    host: str = "127.0.0.1"
    port: int = 0
    cluster: str = "demo"
    region: str = "us-east-1"
    vpc_cidr: str = "10.0.0.0/16"
    subnets: tuple[tuple[str, str], ...] = (("us-east-1a", "10.0.0.0/18"), ("us-east-1b", "10.0.64.0/18"))
    """(availability zone, CIDR) of each subnet pod ENIs may use."""
    attach_delay_s: float = 0.0
    api_latency_s: float = 0.0
    throttling: bool = True
    budget_fraction: float = 0.8
    batch_size: int = 100
    batching_window_s: float = 1.0
    max_concurrency: int = 5
    allocate_timeout_s: int = 30
    allocate_memory_mb: int = 512
    reconcile_timeout_s: int = 120
    reconcile_every_s: float = 60.0
    gc_age_s: int = 300
    identity_mode: str = "none"
    run_functions: bool = True
    """Run the allocate/reconcile handlers (when they import)."""
    set_process_env: bool = True
    """Export the functions' environment into this process (the handlers read it at cold start)."""
    extra_env: tuple[tuple[str, str], ...] = ()
    allocate_handler: Callable[..., Any] | None = None
    """Run this instead of importing ``functions.allocate.handler`` (tests, experiments)."""
    reconcile_handler: Callable[..., Any] | None = None
    lambda_runtime: bool = False
    """Run the functions from their deployed artifact through the Lambda runtime interface
    (:mod:`emulated.lambda_rie`), each in execution environments of its own, not in this process."""

    @property
    def visibility_timeout_s(self) -> int:
        return 6 * self.allocate_timeout_s


@dataclass
class _Counter:
    calls: int = 0
    errors: int = 0


@dataclass
class _ServiceStats:
    by_action: dict[str, _Counter] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def count(self, action: str, error: bool) -> None:
        with self.lock:
            c = self.by_action.setdefault(action or "?", _Counter())
            c.calls += 1
            c.errors += int(error)

    def as_dict(self) -> dict[str, dict[str, int]]:
        with self.lock:
            return {a: {"calls": c.calls, "errors": c.errors} for a, c in sorted(self.by_action.items())}


def _service_of(environ: dict[str, Any]) -> tuple[str | None, str]:
    """(service, action) of an AWS request, reading the body only for Query-protocol POSTs."""
    target = environ.get("HTTP_X_AMZ_TARGET", "")
    if target:
        prefix, _, action = target.partition(".")
        if prefix.startswith("AmazonSQS"):
            return "sqs", action
        if prefix.startswith("DynamoDB"):
            return "dynamodb", action
    m = _SCOPE_RE.search(environ.get("HTTP_AUTHORIZATION", "") or "")
    service = m.group(2) if m else None
    form = dict(parse_qsl(environ.get("QUERY_STRING", ""), keep_blank_values=True))
    ctype = environ.get("CONTENT_TYPE", "") or ""
    if "Action" not in form and ctype.startswith("application/x-www-form-urlencoded"):
        length = int(environ.get("CONTENT_LENGTH") or 0)
        body = environ["wsgi.input"].read(length) if length else b""
        environ["wsgi.input"] = io.BytesIO(body)
        form.update(parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True))
    action = form.get("Action", "")
    if service is None:
        service = _QUERY_VERSIONS.get(form.get("Version", ""))
    return service, action


class Router:
    """The one WSGI app behind the endpoint."""

    def __init__(self, stack: LocalStack) -> None:
        self.stack = stack
        from moto.moto_server.werkzeug_app import create_backend_app

        from emulated.ec2.http import make_app as ec2_app
        from emulated.imds import make_app as imds_app

        self.ec2 = ec2_app(stack.ec2)
        self.imds = imds_app(stack.ec2, stack.identity_signer)
        self.moto: dict[str, WsgiApp] = {s: create_backend_app(s) for s in ("sqs", "dynamodb")}
        self.stats = {"sqs": _ServiceStats(), "dynamodb": _ServiceStats()}

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "") or "/"
        if path.startswith(CONTROL_PREFIX + "/") or path == CONTROL_PREFIX:
            return self.stack.control(environ, start_response)
        if path.startswith(IMDS_PREFIX + "/"):
            environ["SCRIPT_NAME"] = environ.get("SCRIPT_NAME", "") + IMDS_PREFIX
            environ["PATH_INFO"] = path[len(IMDS_PREFIX) :]
            return self.imds(environ, start_response)
        service, action = _service_of(environ)
        if service == "ec2":
            return self.ec2(environ, start_response)
        app = self.moto.get(service or "")
        if app is None:
            return _json(start_response, 400, {"error": f"cannot tell which AWS service this is for ({service!r})"})
        stats = self.stats[service or ""]

        def counting_start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
            stats.count(action, int(status.split()[0]) >= 400)
            return start_response(status, headers, exc_info) if exc_info else start_response(status, headers)

        return app(environ, counting_start_response)


def _json(start_response: StartResponse, status: int, body: Any) -> list[bytes]:
    payload = json.dumps(body, sort_keys=True).encode()
    reason = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed"}.get(status, "Error")
    start_response(f"{status} {reason}", [("Content-Type", "application/json"), ("Content-Length", str(len(payload)))])
    return [payload]


def _import_handler(dotted: str) -> Callable[..., Any] | None:
    module, _, attr = dotted.rpartition(".")
    try:
        mod = importlib.import_module(module)
        fn = getattr(mod, attr)
    except Exception as e:  # the functions are optional here: say why and keep serving
        print(f"warmpool local: {dotted} not loaded ({type(e).__name__}: {e}); serving without it", file=sys.stderr)
        return None
    # Each stack is a new deployment: its first invocation is a cold start, never a warm
    # container holding clients of an earlier stack in this process (its endpoint is gone).
    reset = getattr(mod, "cold_start", None)
    if callable(reset):
        reset()
    return fn if callable(fn) else None


class LocalStack:
    """The local stack in this process: ``start()`` returns the outputs, ``stop()`` tears down.

    Also a context manager. ``ec2`` is the emulator (for setup such as
    ``run_instance``), ``outputs`` what ``local up`` prints."""

    def __init__(self, options: LocalOptions | None = None, **overrides: Any) -> None:
        self.options = replace(options or LocalOptions(), **overrides)
        self.outputs: dict[str, Any] = {}
        self.subnet_ids: list[str] = []
        self.allocate: Any = None  # EventSourceMapping, when the handler loaded
        self.reconcile: Any = None  # Schedule, when the handler loaded
        self._runner: Any = None
        self._rie_functions: list[Any] = []
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self._saved_env: dict[str, str | None] = {}
        self._started = False
        from emulated.ec2.config import Ec2Config
        from emulated.ec2.emulator import Ec2Emulator
        from emulated.iid import IdentitySigner

        self.identity_signer = IdentitySigner()
        """Signs every emulated instance's identity document; the functions trust its certificate."""
        o = self.options
        self.ec2 = Ec2Emulator(
            RealClock(),
            Ec2Config(
                attach_delay_s=o.attach_delay_s,
                api_latency_s=o.api_latency_s,
                throttling=o.throttling,
                region=o.region,
                account_id=ACCOUNT,
            ),
        )

    # -- lifecycle -------------------------------------------------------------

    def start(self) -> dict[str, Any]:
        from werkzeug.serving import make_server

        o = self.options
        logging.getLogger("werkzeug").setLevel(logging.WARNING)
        _reset_moto()
        self.router = Router(self)
        self._server = make_server(o.host, o.port, self.router, threaded=True)
        port = self._server.server_port
        endpoint = f"http://{o.host}:{port}"
        self._thread = threading.Thread(target=self._server.serve_forever, name="local-stack", daemon=True)
        self._thread.start()
        self._started = True
        try:
            self._provision(endpoint)
            if o.run_functions:
                self._start_functions(endpoint)
        except BaseException:
            self.stop()
            raise
        return self.outputs

    def stop(self) -> None:
        if self._runner is not None:
            self._runner.stop()
            self._runner = None
        for fn in self._rie_functions:
            fn.stop()
        self._rie_functions.clear()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        for k, v in self._saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        self._saved_env.clear()
        self._started = False

    def __enter__(self) -> LocalStack:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- clients ---------------------------------------------------------------

    def client(self, service: str) -> Any:
        """A boto3 client for ``service`` pointed at the endpoint, with dummy credentials."""
        import boto3
        from botocore.config import Config

        return boto3.client(
            service,
            endpoint_url=self.outputs["endpoint"],
            region_name=self.options.region,
            aws_access_key_id=DUMMY_KEY,
            aws_secret_access_key=DUMMY_KEY,
            config=Config(retries={"mode": "standard", "max_attempts": 3}),
        )

    # -- provisioning (what the CDK stack defines) -----------------------------

    def _provision(self, endpoint: str) -> None:
        o = self.options
        self.outputs = {"endpoint": endpoint}
        vpc_id = self.ec2.add_vpc(o.vpc_cidr, tags={"Name": f"warmpool-{o.cluster}"})
        for az, cidr in o.subnets:
            self.subnet_ids.append(
                self.ec2.add_subnet(az, cidr, vpc_id, tags={names.cluster_tag_key(o.cluster): "shared"})
            )
        sqs = self.client("sqs")
        dlq_url = sqs.create_queue(
            QueueName=names.reports_dlq(o.cluster), Attributes={"MessageRetentionPeriod": str(14 * 86400)}
        )["QueueUrl"]
        dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        reports_url = sqs.create_queue(
            QueueName=names.reports_queue(o.cluster),
            Attributes={
                "VisibilityTimeout": str(o.visibility_timeout_s),
                "MessageRetentionPeriod": "3600",
                "RedrivePolicy": json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": 5}),
            },
        )["QueueUrl"]
        ddb = self.client("dynamodb")
        ledger = names.ledger_table(o.cluster)
        create_tables(ddb, ledger, names.BUCKETS_TABLE)
        ddb.update_time_to_live(
            TableName=ledger, TimeToLiveSpecification={"Enabled": True, "AttributeName": names.LEDGER_TTL}
        )
        self.outputs.update(
            {
                "region": o.region,
                "cluster": o.cluster,
                "account": ACCOUNT,
                "reports_queue_url": reports_url,
                "dlq_url": dlq_url,
                "result_queue_prefix": names.result_queue_prefix(o.cluster),
                "ledger_table": ledger,
                "buckets_table": names.BUCKETS_TABLE,
                "imds_base": endpoint + IMDS_PREFIX,
                "vpc_id": vpc_id,
                "subnet_ids": list(self.subnet_ids),
                "stats_url": endpoint + CONTROL_PREFIX + "/stats",
                "faults_url": endpoint + CONTROL_PREFIX + "/faults",
                "functions": {"allocate": False, "reconcile": False},
                "pid": os.getpid(),
            }
        )

    def function_env(self) -> dict[str, str]:
        """The functions' environment: the CDK stack's, plus the local endpoint and dummy credentials."""
        o, out = self.options, self.outputs
        env = {
            names.ENV_CLUSTER: o.cluster,
            names.ENV_REPORTS_QUEUE_URL: out["reports_queue_url"],
            names.ENV_DLQ_URL: out["dlq_url"],
            names.ENV_RESULT_QUEUE_PREFIX: out["result_queue_prefix"],
            names.ENV_LEDGER_TABLE: out["ledger_table"],
            names.ENV_BUCKETS_TABLE: out["buckets_table"],
            names.ENV_BUDGET_FRACTION: str(o.budget_fraction),
            names.ENV_ALLOWED_SUBNETS: ",".join(self.subnet_ids),
            names.ENV_SECURITY_GROUPS: "",
            names.ENV_IDENTITY_MODE: o.identity_mode,
            names.ENV_GC_AGE_S: str(o.gc_age_s),
            names.ENV_ENDPOINT_URL: out["endpoint"],
            names.ENV_IDENTITY_CERTIFICATES: self.identity_signer.certificate_pem,
            "AWS_ENDPOINT_URL": out["endpoint"],
            "AWS_ACCESS_KEY_ID": DUMMY_KEY,
            "AWS_SECRET_ACCESS_KEY": DUMMY_KEY,
            "AWS_REGION": o.region,
            "AWS_DEFAULT_REGION": o.region,
            "WARMPOOL_ACCOUNT": ACCOUNT,
            "POWERTOOLS_SERVICE_NAME": f"warmpool-{o.cluster}",
            "POWERTOOLS_METRICS_NAMESPACE": names.METRICS_NAMESPACE,
            "POWERTOOLS_DEV": "false",
        }
        env.update(dict(o.extra_env))
        return env

    def _start_functions(self, endpoint: str) -> None:
        from emulated.esm import EsmConfig, EventSourceMapping, Schedule, ThreadedRunner

        o = self.options
        if o.set_process_env:
            for k, v in self.function_env().items():
                self._saved_env.setdefault(k, os.environ.get(k))
                os.environ[k] = v
        clock = RealClock()
        if o.lambda_runtime:
            allocate, reconcile = self._rie_handlers()
        else:
            allocate = o.allocate_handler or _import_handler(names.ALLOCATE_HANDLER)
            reconcile = o.reconcile_handler or _import_handler(names.RECONCILE_HANDLER)
        if allocate is not None:
            self.allocate = EventSourceMapping(
                self.client("sqs"),
                self.outputs["reports_queue_url"],
                allocate,
                EsmConfig(
                    function_name=f"warmpool-{o.cluster}-allocate",
                    batch_size=o.batch_size,
                    batching_window_s=o.batching_window_s,
                    maximum_concurrency=o.max_concurrency,
                    report_batch_item_failures=True,
                    function_timeout_s=o.allocate_timeout_s,
                    memory_mb=o.allocate_memory_mb,
                    region=o.region,
                    account_id=ACCOUNT,
                ),
                clock,
            )
        if reconcile is not None:
            self.reconcile = Schedule(
                o.reconcile_every_s,
                reconcile,
                name=f"warmpool-{o.cluster}-reconcile",
                function_name=f"warmpool-{o.cluster}-reconcile",
                clock=clock,
                function_timeout_s=o.reconcile_timeout_s,
                region=o.region,
                account_id=ACCOUNT,
            )
        self.outputs["functions"] = {"allocate": allocate is not None, "reconcile": reconcile is not None}
        self._runner = ThreadedRunner(
            [self.allocate] if self.allocate is not None else [],
            [self.reconcile] if self.reconcile is not None else [],
            poll_wait_s=1,
        )
        self._runner.start()

    def _rie_handlers(self) -> tuple[Any, Any]:
        """allocate and reconcile from the artifact, through the runtime interface emulator."""
        from emulated.lambda_rie import RieFunction, build_artifact, ensure_rie

        o = self.options
        artifact, rie = build_artifact(), ensure_rie()
        env = self.function_env()
        functions = {}
        for key, handler, concurrency, timeout_s, memory_mb in (
            ("allocate", names.ALLOCATE_HANDLER, o.max_concurrency, o.allocate_timeout_s, o.allocate_memory_mb),
            ("reconcile", names.RECONCILE_HANDLER, 1, o.reconcile_timeout_s, 256),
        ):
            fn = RieFunction(
                f"warmpool-{o.cluster}-{key}",
                handler,
                artifact,
                env,
                concurrency=concurrency,
                timeout_s=timeout_s,
                memory_mb=memory_mb,
                rie=rie,
            )
            self._rie_functions.append(fn)
            functions[key] = fn
        self.outputs["lambda_runtime"] = {
            "artifact": artifact.describe(),
            "rie": str(rie),
            "logs": str(functions["allocate"].log_dir),
        }
        return functions["allocate"], functions["reconcile"]

    # -- control API -------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        lam: dict[str, Any] = {}
        if self.allocate is not None:
            lam["allocate"] = self.allocate.stats.as_dict()
        if self.reconcile is not None:
            lam["reconcile"] = self.reconcile.stats()
        return {
            "ec2": self.ec2.stats()["ec2"],
            "sqs": self.router.stats["sqs"].as_dict(),
            "dynamodb": self.router.stats["dynamodb"].as_dict(),
            "lambda": lam,
        }

    def apply_fault(self, spec: dict[str, Any]) -> str:
        """Apply one fault spec (see ``docs/local-stack.md``); returns what was done."""
        if spec.get("clear"):
            self.ec2.clear_faults()
            self.router.imds.set_faults()
            return "cleared"
        if "background_load" in spec:
            for action, rate in dict(spec["background_load"]).items():
                self.ec2.set_background_load(str(action), float(rate))
            return "background_load"
        if "latency" in spec:
            for action, seconds in dict(spec["latency"]).items():
                self.ec2.add_latency(str(action), float(seconds))
            return "latency"
        if "subnet_exhausted" in spec:
            for subnet, flag in dict(spec["subnet_exhausted"]).items():
                self.ec2.set_subnet_exhausted(str(subnet), bool(flag))
            return "subnet_exhausted"
        if "imds" in spec:
            i = dict(spec["imds"])
            self.router.imds.set_faults(
                delay_s=float(i.get("delay_s", 0.0)), fail_status=i.get("fail_status"), fail_next=i.get("fail_next")
            )
            return "imds"
        if "action" in spec and "code" in spec:
            if "rate" in spec:
                self.ec2.fail_rate(str(spec["action"]), str(spec["code"]), float(spec["rate"]))
                return "fail_rate"
            self.ec2.fail_next(
                str(spec["action"]),
                str(spec["code"]),
                int(spec.get("count", 1)),
                message=spec.get("message"),
                status=spec.get("status"),
            )
            return "fail_next"
        raise ValueError(f"unknown fault spec: {spec!r}")

    def control(self, environ: dict[str, Any], start_response: StartResponse) -> list[bytes]:
        path = environ.get("PATH_INFO", "")[len(CONTROL_PREFIX) :].rstrip("/")
        method = environ.get("REQUEST_METHOD", "GET")
        if path == "/stats" and method == "GET":
            return _json(start_response, 200, self.stats())
        if path == "/outputs" and method == "GET":
            return _json(start_response, 200, self.outputs)
        if path == "/health" and method == "GET":
            return _json(start_response, 200, {"ok": True})
        if path == "/faults" and method in ("POST", "PUT"):
            length = int(environ.get("CONTENT_LENGTH") or 0)
            try:
                body = json.loads(environ["wsgi.input"].read(length) or b"{}")
                specs = body if isinstance(body, list) else [body]
                applied = [self.apply_fault(dict(s)) for s in specs]
            except (ValueError, TypeError, KeyError) as e:
                return _json(start_response, 400, {"ok": False, "error": str(e)})
            except Exception as e:  # e.g. an unknown subnet in the emulator
                return _json(start_response, 400, {"ok": False, "error": f"{type(e).__name__}: {e}"})
            return _json(start_response, 200, {"ok": True, "applied": applied})
        if path == "/faults" and method == "DELETE":
            return _json(start_response, 200, {"ok": True, "applied": [self.apply_fault({"clear": True})]})
        return _json(start_response, 404, {"error": f"no {method} {CONTROL_PREFIX}{path}"})


def _reset_moto() -> None:
    """Empty moto's SQS and DynamoDB state (global to the process) so each stack starts clean."""
    from moto.dynamodb.models import dynamodb_backends
    from moto.sqs.models import sqs_backends

    for account in list(sqs_backends.values()):
        account.reset()
    for ddb_account in list(dynamodb_backends.values()):
        ddb_account.reset()


# --- command line ------------------------------------------------------------------


def _parse_subnet(text: str) -> tuple[str, str]:
    az, sep, cidr = text.partition("=")
    if not sep or "/" not in cidr:
        raise argparse.ArgumentTypeError("AZ=CIDR, e.g. us-east-1a=10.0.0.0/20")
    return az, cidr


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="warmpool local up", description="Run the local stack until SIGINT/SIGTERM.")
    d = LocalOptions()
    p.add_argument("--host", default=d.host, help="bind address (127.0.0.1 only is sensible)")
    p.add_argument("--port", type=int, default=d.port, help="port (0: pick a free one)")
    p.add_argument("--cluster", default=d.cluster)
    p.add_argument("--region", default=d.region)
    p.add_argument("--vpc-cidr", default=d.vpc_cidr)
    p.add_argument("--subnet", action="append", type=_parse_subnet, metavar="AZ=CIDR", help="a pod subnet (repeatable)")
    p.add_argument("--attach-delay", type=float, default=d.attach_delay_s, help="seconds before an attach is visible")
    p.add_argument("--api-latency", type=float, default=d.api_latency_s, help="seconds every EC2 call takes")
    p.add_argument("--no-throttling", action="store_true", help="turn EC2 token buckets off")
    p.add_argument("--budget-fraction", type=float, default=d.budget_fraction)
    p.add_argument("--batch-size", type=int, default=d.batch_size)
    p.add_argument("--batching-window", type=float, default=d.batching_window_s)
    p.add_argument("--max-concurrency", type=int, default=d.max_concurrency)
    p.add_argument("--allocate-timeout", type=int, default=d.allocate_timeout_s)
    p.add_argument("--reconcile-every", type=float, default=d.reconcile_every_s, help="seconds between reconciles")
    p.add_argument("--gc-age", type=int, default=d.gc_age_s)
    p.add_argument("--no-functions", action="store_true", help="serve AWS only; do not run the handlers")
    p.add_argument(
        "--lambda-runtime",
        action="store_true",
        help="run the functions from their deployed artifact through the Lambda runtime interface emulator",
    )
    return p


def options_from_args(argv: Sequence[str]) -> LocalOptions:
    a = build_parser().parse_args(list(argv))
    return LocalOptions(
        host=a.host,
        port=a.port,
        cluster=a.cluster,
        region=a.region,
        vpc_cidr=a.vpc_cidr,
        subnets=tuple(a.subnet) if a.subnet else LocalOptions().subnets,
        attach_delay_s=a.attach_delay,
        api_latency_s=a.api_latency,
        throttling=not a.no_throttling,
        budget_fraction=a.budget_fraction,
        batch_size=a.batch_size,
        batching_window_s=a.batching_window,
        max_concurrency=a.max_concurrency,
        allocate_timeout_s=a.allocate_timeout,
        reconcile_every_s=a.reconcile_every,
        gc_age_s=a.gc_age,
        run_functions=not a.no_functions,
        lambda_runtime=a.lambda_runtime,
    )


def local_up(argv: Sequence[str]) -> int:
    """``warmpool local up [options]``: start, print one JSON line of outputs, serve
    until SIGINT/SIGTERM, stop cleanly. Returns the exit status."""
    opts = options_from_args(argv)
    stop = threading.Event()

    def on_signal(signum: int, _frame: Any) -> None:
        stop.set()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    stack = LocalStack(opts)
    try:
        outputs = stack.start()
        print(json.dumps(outputs, sort_keys=True), flush=True)
        while not stop.wait(3600):
            pass
    finally:
        stack.stop()
        for s, h in previous.items():
            signal.signal(s, h)
    print("warmpool local: stopped", file=sys.stderr, flush=True)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry for ``warmpool local ...`` (``argv`` after ``local``) and ``python -m emulated.local``."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print("usage: warmpool local up [--port N] [--cluster NAME] ...  (warmpool local up --help)")
        return 0 if args else 2
    if args[0] != "up":
        print(f"warmpool local: unknown subcommand {args[0]!r} (only 'up')", file=sys.stderr)
        return 2
    return local_up(args[1:])


if __name__ == "__main__":
    sys.exit(main())
