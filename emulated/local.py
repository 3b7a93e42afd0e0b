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
import faulthandler
import importlib
import io
import json
import logging
import os
import re
import signal
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import parse_qsl

from functions.stores import create_tables
from warmpool import names
from warmpool.argtypes import cluster_name, float_at_least, int_at_least, ipv4_network, output_path, port
from warmpool.clock import RealClock

log = logging.getLogger(__name__)

StartResponse = Callable[..., Any]
WsgiApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]

IMDS_PREFIX = "/imds"
CONTROL_PREFIX = "/_warmpool"
DUMMY_KEY = "testing"
ACCOUNT = "123456789012"  # the account moto answers for with any dummy key
STOP_SLOW_S = 45.0
"""A stop of ``warmpool local up`` taking longer than this prints every thread's stack to stderr."""

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
    named_placement: bool = False
    """The stack's ``named_placement``: addresses and /28 prefixes named in each EC2 call."""
    multi_card: bool = False
    """The stack's ``multi_card``: the functions' ``WARMPOOL_MULTI_CARD`` and the agents'
    (:meth:`LocalStack.agent_env`)."""
    scarce_free: int = names.SCARCE_FREE_DEFAULT
    max_pods: int = 0
    """The stack's ``max_pods``: the kubelets' custom ``--max-pods`` (``WARMPOOL_MAX_PODS``); 0: the
    VPC CNI formula per instance type."""
    """The stack's ``scarce_free``: fair sharing's threshold, ``WARMPOOL_SCARCE_FREE`` (0: off)."""
    custom_network: tuple[tuple[str, str], ...] = ()
    """(availability zone, CIDR) of each pod subnet of custom networking: the stack makes it in its
    VPC, untagged, and maps it with a security group of its zone (``outputs["custom_network"]``, the
    stack's ``custom_network`` context); agents of instances in a mapped zone run with
    ``AWS_VPC_K8S_CNI_CUSTOM_NETWORK_CFG=true``."""
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
    instances: tuple[str, ...] = ()
    """Instance types to launch at start, tagged for the cluster (their ids: ``outputs["instances"]``)."""
    agent_env_dir: str | None = None
    """Write ``{dir}/{instance_id}.env`` (the agent's environment) for each launched instance."""
    log_file: str | None = None
    """``local up``: where the functions' logs and metrics go (``outputs["log_file"]``)."""

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

    def count(self, action: str, *, error: bool) -> None:
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
            stats.count(action, error=int(status.split()[0]) >= 400)
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
        self.custom_network: dict[str, dict[str, list[str]]] = {}
        """Zone -> subnets and security groups of custom networking (``WARMPOOL_CUSTOM_NETWORK``)."""
        self.allocate: Any = None  # EventSourceMapping, when the handler loaded
        self.reconcile: Any = None  # Schedule, when the handler loaded
        self._runner: Any = None
        self._rie_functions: list[Any] = []
        from emulated.dashboard import MetricStore

        self.metrics = MetricStore()
        """What CloudWatch would hold: the functions' EMF metrics, Lambda's and SQS's (the dashboard's data)."""
        self._definition: Any = None  # emulated.dashboard.Definition, made at the first page request
        self._stdout: Any = None  # sys.stdout before the functions' EMF tee
        self._sampling = threading.Event()
        self._sampler: threading.Thread | None = None
        self.started_at = time.time()
        self._agents_root: str | None = None
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
        self.started_at = time.time()
        self._agents_root = None  # a new stack, new agent folders
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
        self._sampling.set()
        if self._sampler is not None:
            self._sampler.join(timeout=5)
            self._sampler = None
        if self._stdout is not None:
            sys.stdout = self._stdout
            self._stdout = None
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

    def pause_functions(self) -> None:
        """Stop invoking the functions (the event-source mapping and the schedule): reports
        wait in the queue, as when the allocator is away. ``resume_functions`` starts them again."""
        if self._runner is not None:
            self._runner.stop()

    def resume_functions(self) -> None:
        if self._runner is not None:
            self._runner.start()

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
        for az, cidr in o.custom_network:
            zone = self.custom_network.setdefault(az, {"subnets": [], "security_groups": [_group_id(o.cluster, az)]})
            zone["subnets"].append(self.ec2.add_subnet(az, cidr, vpc_id, tags={"Name": f"warmpool-{o.cluster}-pods"}))
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
                "custom_network": self.custom_network,
                "stats_url": endpoint + CONTROL_PREFIX + "/stats",
                "faults_url": endpoint + CONTROL_PREFIX + "/faults",
                "dashboard_url": endpoint + CONTROL_PREFIX + "/dashboard/",
                "functions": {"allocate": False, "reconcile": False},
                "pid": os.getpid(),
            }
        )
        launched = []
        for k, instance_type in enumerate(o.instances):
            subnet = self.subnet_ids[k % len(self.subnet_ids)]
            tags = {names.cluster_tag_key(o.cluster): "owned", "Name": f"warmpool-{o.cluster}-node-{k}"}
            launched.append(self.ec2.run_instance(instance_type, subnet, tags=tags))
        self.outputs["instances"] = launched
        if o.log_file:
            self.outputs["log_file"] = o.log_file
        if o.agent_env_dir:
            files = {}
            for k, iid in enumerate(launched):
                path = os.path.join(o.agent_env_dir, f"{iid}.env")
                with open(path, "w", encoding="utf-8") as fh:
                    port = int(names.DEFAULT_METRICS_ADDR.rpartition(":")[2]) + k
                    fh.write(_env_file(self.agent_env(iid, node_name=f"node-{k}", metrics_port=port)))
                files[iid] = path
            self.outputs["agent_env_files"] = files

    def _agents_dir(self) -> str:
        if self._agents_root is None:
            self._agents_root = tempfile.mkdtemp(prefix=f"warmpool-local-{self.options.cluster}-agents-")
        return self._agents_root

    def agent_env(
        self, instance_id: str, *, node_name: str = "", work_dir: str = "", metrics_port: int = 0
    ) -> dict[str, str]:
        """What ``warmpool-agent`` needs to run as ``instance_id`` against this stack, outside a
        network namespace (pods recorded, not wired): endpoint, queues, IMDS, dummy keys, and a
        socket and state folder under ``work_dir`` (default: a folder of this stack's own under the
        temp folder, so no agent restores a checkpoint of an earlier stack's instance of that id),
        and its metrics and views on 127.0.0.1:``metrics_port`` (default the agent's own, 61680)."""
        out = self.outputs
        work = work_dir or os.path.join(self._agents_dir(), instance_id)
        os.makedirs(work, exist_ok=True)  # the agent makes its state folder, not the socket's
        return {
            "CLUSTER_NAME": self.options.cluster,
            "MY_NODE_NAME": node_name or instance_id,
            "AWS_EC2_METADATA_SERVICE_ENDPOINT": f"{out['imds_base']}/{instance_id}",
            "AWS_REGION": out["region"],
            "AWS_DEFAULT_REGION": out["region"],
            "AWS_ACCESS_KEY_ID": DUMMY_KEY,
            "AWS_SECRET_ACCESS_KEY": DUMMY_KEY,
            names.ENV_ENDPOINT_URL: out["endpoint"],
            names.AGENT_ENV_REPORTS_QUEUE_URL: out["reports_queue_url"],
            names.AGENT_ENV_RESULT_QUEUE_PREFIX: out["result_queue_prefix"],
            names.AGENT_ENV_SOCKET: os.path.join(work, "agent.sock"),
            names.AGENT_ENV_STATE_DIR: os.path.join(work, "state"),
            names.AGENT_ENV_METRICS_ADDR: (f"127.0.0.1:{metrics_port}" if metrics_port else names.DEFAULT_METRICS_ADDR),
            "WARMPOOL_MANAGE_HOST_NETWORK": "false",
            "WARMPOOL_POD_NETWORK": "recorded",
            # as the stack's install sets them: multi_card for every agent, custom networking on
            # the nodes of a zone the map has (the VPC CNI's ENIConfig per zone)
            names.ENV_MULTI_CARD: "true" if self.options.multi_card else "false",
            names.AGENT_ENV_CUSTOM_NETWORKING: "true" if self._zone_of(instance_id) in self.custom_network else "false",
        }

    def _zone_of(self, instance_id: str) -> str | None:
        inst = self.ec2.instances.get(instance_id)
        return inst.az if inst is not None else None

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
            # As the CDK stack with subnet_discovery=true: no list, the subnets found by their tags,
            # so a subnet made later in the VPC and tagged is used without a restart.
            names.ENV_ALLOWED_SUBNETS: "",
            names.ENV_SUBNET_DISCOVERY: "true",
            names.ENV_SECURITY_GROUPS: "",
            names.ENV_CUSTOM_NETWORK: json.dumps(self.custom_network, sort_keys=True, separators=(",", ":")),
            names.ENV_NAMED_PLACEMENT: "true" if o.named_placement else "false",
            names.ENV_MULTI_CARD: "true" if o.multi_card else "false",
            names.ENV_SCARCE_FREE: str(o.scarce_free),
            names.ENV_MAX_PODS: str(o.max_pods),
            names.ENV_IDENTITY_MODE: o.identity_mode,
            names.ENV_GC_AGE_S: str(o.gc_age_s),
            # The lease TTL is derived from it: the functions must know the timeout they run with.
            names.ENV_ALLOCATE_TIMEOUT_S: str(o.allocate_timeout_s),
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
            # The handlers print their logs and EMF metrics to stdout, as in Lambda: the
            # metrics go to the dashboard's store too (Powertools' Logger keeps this stream).
            self._stdout = sys.stdout
            sys.stdout = LineTee(sys.stdout, self.metrics.ingest_emf)
            allocate = o.allocate_handler or _import_handler(names.ALLOCATE_HANDLER)
            reconcile = o.reconcile_handler or _import_handler(names.RECONCILE_HANDLER)
        from emulated.dashboard import Invocations

        if allocate is not None:
            allocate = Invocations(self.metrics, f"warmpool-{o.cluster}-allocate").wrap(allocate)
        if reconcile is not None:
            reconcile = Invocations(self.metrics, f"warmpool-{o.cluster}-reconcile").wrap(reconcile)
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
        self._sampler = threading.Thread(target=self._sample_queues, name="local-stack-sqs-metrics", daemon=True)
        self._sampler.start()

    QUEUE_SAMPLE_S = 5.0

    def _sample_queues(self) -> None:
        """SQS's queue metrics for the dashboard, every few seconds (CloudWatch: every minute)."""
        from emulated.dashboard import sample_queues

        o = self.options
        queues = [(n, self._queue_reader(n)) for n in (names.reports_queue(o.cluster), names.reports_dlq(o.cluster))]
        while not self._sampling.is_set():
            try:
                sample_queues(self.metrics, queues)
            except Exception as e:  # a queue gone during stop; never stop the stack for a graph
                log.debug("queue metrics not sampled: %s", e)
            self._sampling.wait(self.QUEUE_SAMPLE_S)

    def _queue_reader(self, name: str) -> Callable[[], tuple[int, int, float]]:
        """(visible, in flight, age of the oldest message in s) of one of moto's queues, read from
        its model (moto.sqs.models.Queue: ``messages``, ``_messages``, ``sent_timestamp``), since
        moto's GetQueueAttributes has no ApproximateAgeOfOldestMessage (a CloudWatch metric)."""
        from moto.sqs.models import sqs_backends

        def read() -> tuple[int, int, float]:
            queue = sqs_backends[ACCOUNT][self.options.region].queues[name]
            held = list(queue._messages)
            visible = len(queue.messages)
            sent = [float(t) for t in (getattr(m, "sent_timestamp", None) for m in held) if t]
            oldest = (time.time() * 1000 - min(sent)) / 1000 if sent else 0.0
            return visible, len(held) - visible, max(0.0, oldest)

        return read

    def dashboard_body(self, timeout: float = 180.0) -> dict[str, Any] | None:
        """The CDK app's dashboard definition for this stack (synthesized once, in the background)."""
        from emulated.dashboard import Definition, synthesize_body

        if self._definition is None:
            o = self.options
            self._definition = Definition(
                lambda: synthesize_body(
                    cluster=o.cluster,
                    region=o.region,
                    account=ACCOUNT,
                    reports_queue=names.reports_queue(o.cluster),
                    dlq=names.reports_dlq(o.cluster),
                    allocate=f"warmpool-{o.cluster}-allocate",
                    reconcile=f"warmpool-{o.cluster}-reconcile",
                )
            )
        body: dict[str, Any] | None = self._definition.get(timeout)
        return body

    def _dashboard(self, environ: dict[str, Any], start_response: StartResponse, sub: str) -> list[bytes]:
        from emulated.dashboard import PAGE, render_data

        if sub == "":  # the page fetches "data" relative to itself
            start_response(
                "301 Moved Permanently", [("Location", CONTROL_PREFIX + "/dashboard/"), ("Content-Length", "0")]
            )
            return [b""]
        if sub == "/":
            page = PAGE.encode()
            start_response("200 OK", [("Content-Type", "text/html; charset=utf-8"), ("Content-Length", str(len(page)))])
            return [page]
        if sub == "/data":
            form = dict(parse_qsl(environ.get("QUERY_STRING", "")))
            try:
                minutes = float(form.get("minutes", "60"))
            except ValueError:
                return _json(start_response, 400, {"error": "minutes: a number"})
            body = self.dashboard_body()
            if body is None:
                why = self._definition.error if self._definition is not None else None
                return _json(
                    start_response, 503, {"error": f"the dashboard definition is not ready ({why or 'synth'})"}
                )
            end = time.time()
            start = max(end - 60 * minutes, self.started_at - 30)  # the stack's life, at most `minutes`
            return _json(start_response, 200, render_data(body, self.metrics, start=start, end=end))
        if sub == "/body":
            return _json(start_response, 200, self.dashboard_body() or {})
        return _json(start_response, 404, {"error": f"no {CONTROL_PREFIX}/dashboard{sub}"})

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
                self.ec2.set_subnet_exhausted(str(subnet), exhausted=bool(flag))
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
        if (path == "/dashboard" or path.startswith("/dashboard/")) and method == "GET":
            return self._dashboard(environ, start_response, environ.get("PATH_INFO", "")[len(CONTROL_PREFIX) + 10 :])
        if path.startswith("/agent-env/") and method == "GET":
            iid = path[len("/agent-env/") :]
            if not re.fullmatch(r"i-[0-9a-f]{8,17}", iid):
                return _json(start_response, 400, {"error": f"{iid!r} is not an instance id"})
            body = _env_file(self.agent_env(iid)).encode()
            start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
            return [body]
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


def _group_id(cluster: str, zone: str) -> str:
    """The security group id the stack names for custom networking in ``zone`` (the emulator does
    not model groups: an ENI carries the ids it was created with)."""
    import hashlib

    return "sg-" + hashlib.sha256(f"{cluster}/{zone}".encode()).hexdigest()[:17]


def _env_file(env: dict[str, str]) -> str:
    """``KEY=VALUE`` lines (``set -a; . FILE`` or ``env $(cat FILE)`` read them)."""
    return "".join(f"{k}={v}\n" for k, v in env.items())


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
    if not sep or not az:
        raise argparse.ArgumentTypeError(f"{text!r}: AZ=CIDR, e.g. us-east-1a=10.0.0.0/20")
    return az, ipv4_network(cidr)


LOCAL_UP_EPILOG = f"""\
Launching an instance the allocator serves: an agent's reports are accepted only from an
instance tagged {names.cluster_tag_key("CLUSTER")}=owned (or =shared) for --cluster CLUSTER,
and launched into one of the stack's subnets (subnet_ids). An untagged instance's reports
are refused (foreign-instance): the stack says so on stderr, and the reconciler later
deletes that instance's result queue as an orphan. Through the endpoint:

  aws ec2 run-instances --instance-type m5.large --subnet-id SUBNET --image-id ami-00000000000000000 \\
    --tag-specifications 'ResourceType=instance,Tags=[{{Key={names.cluster_tag_key("demo")},Value=owned}}]'

or let the stack launch them: --instance m5.large (repeatable; their ids are in the outputs
line). The environment an agent needs for an instance: GET ENDPOINT{CONTROL_PREFIX}/agent-env/INSTANCE_ID
(KEY=VALUE lines), or --agent-env-dir DIR writes DIR/INSTANCE_ID.env for each --instance.

The aws CLI against the stack needs: AWS_ENDPOINT_URL=ENDPOINT AWS_REGION=us-east-1
AWS_ACCESS_KEY_ID=testing AWS_SECRET_ACCESS_KEY=testing (any non-empty keys).

stdout carries only the outputs line (JSON). The functions' logs and EMF metrics go to the
log file named in it (log_file; --log-file to choose), refusals and errors also to stderr.
"""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="warmpool local up",
        description="Run the local stack until SIGINT/SIGTERM.",
        epilog=LOCAL_UP_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    d = LocalOptions()
    p.add_argument("--host", default=d.host, help="bind address (127.0.0.1 only is sensible)")
    p.add_argument("--port", type=port, default=d.port, help="port, 0 to 65535 (0: pick a free one)")
    p.add_argument("--cluster", type=cluster_name, default=d.cluster, help=f"cluster name (default {d.cluster})")
    p.add_argument("--region", type=_region, default=d.region)
    p.add_argument("--vpc-cidr", type=ipv4_network, default=d.vpc_cidr, help=f"default {d.vpc_cidr}")
    p.add_argument("--subnet", action="append", type=_parse_subnet, metavar="AZ=CIDR", help="a pod subnet (repeatable)")
    p.add_argument(
        "--custom-network",
        action="append",
        type=_parse_subnet,
        default=[],
        metavar="AZ=CIDR",
        help="custom networking: a pod subnet of its own for the zone's nodes (repeatable; the stack's custom_network)",
    )
    p.add_argument(
        "--named-placement", action="store_true", help="name addresses and /28s in each EC2 call (named_placement)"
    )
    p.add_argument(
        "--multi-card", action="store_true", help="ENIs on every network card of multi-card types (multi_card)"
    )
    p.add_argument(
        "--scarce-free",
        type=int_at_least(0, high=names.SCARCE_FREE_MAX),
        default=d.scarce_free,
        help=f"fair sharing's threshold in free addresses per zone, 0 (off) to {names.SCARCE_FREE_MAX} (scarce_free)",
    )
    p.add_argument(
        "--max-pods",
        type=int_at_least(0, high=names.MAX_PODS_OVERRIDE),
        default=d.max_pods,
        help=f"the kubelets' custom --max-pods, 0 (the VPC CNI formula) to {names.MAX_PODS_OVERRIDE} (max_pods)",
    )
    p.add_argument(
        "--attach-delay", type=float_at_least(0), default=d.attach_delay_s, help="seconds before an attach is visible"
    )
    p.add_argument(
        "--api-latency", type=float_at_least(0), default=d.api_latency_s, help="seconds every EC2 call takes"
    )
    p.add_argument("--no-throttling", action="store_true", help="turn EC2 token buckets off")
    p.add_argument(
        "--budget-fraction", type=float_at_least(0.01, high=1.0), default=d.budget_fraction, help="0.01 to 1"
    )
    p.add_argument(
        "--batch-size", type=int_at_least(1, high=10_000), default=d.batch_size, help="1 to 10000 (SQS mapping)"
    )
    p.add_argument("--batching-window", type=float_at_least(0, high=300), default=d.batching_window_s, help="0-300 s")
    p.add_argument(
        "--max-concurrency", type=int_at_least(2, high=1000), default=d.max_concurrency, help="2 to 1000 (SQS mapping)"
    )
    p.add_argument("--allocate-timeout", type=int_at_least(1, high=900), default=d.allocate_timeout_s, help="1-900 s")
    p.add_argument(
        "--reconcile-every",
        type=float_at_least(0.1),
        default=d.reconcile_every_s,
        help="seconds between reconciles (at least 0.1)",
    )
    p.add_argument("--gc-age", type=int_at_least(0), default=d.gc_age_s)
    p.add_argument("--no-functions", action="store_true", help="serve AWS only; do not run the handlers")
    p.add_argument(
        "--lambda-runtime",
        action="store_true",
        help="run the functions from their deployed artifact through the Lambda runtime interface emulator",
    )
    p.add_argument(
        "--instance",
        action="append",
        type=_instance_type,
        default=[],
        metavar="TYPE",
        help="launch an instance of TYPE tagged for the cluster (repeatable); ids in the outputs line",
    )
    p.add_argument(
        "--agent-env-dir", type=_writable_dir, metavar="DIR", help="write DIR/INSTANCE_ID.env for each --instance"
    )
    p.add_argument(
        "--log-file",
        type=output_path,
        metavar="PATH",
        help="the functions' logs and metrics (default: a new file under the temp folder, named in the outputs)",
    )
    return p


def _region(text: str) -> str:
    if not re.fullmatch(r"[a-z]{2}(-[a-z]+)+-\d", text):
        raise argparse.ArgumentTypeError(f"{text!r} is not an AWS region name such as us-east-1")
    return text


def _instance_type(text: str) -> str:
    from warmpool.limits import known

    try:
        return known(text.strip()).instance_type
    except KeyError as exc:
        raise argparse.ArgumentTypeError(str(exc.args[0])) from None


def _writable_dir(text: str) -> str:
    if not os.path.isdir(text) or not os.access(text, os.W_OK | os.X_OK):
        raise argparse.ArgumentTypeError(f"{text!r} is not a folder this process can write")
    return text


def options_from_args(argv: Sequence[str]) -> LocalOptions:
    p = build_parser()
    a = p.parse_args(list(argv))
    subnets = tuple(a.subnet) if a.subnet else LocalOptions().subnets
    try:
        _check_subnets(a.vpc_cidr, [*subnets, *a.custom_network])
    except ValueError as exc:
        p.error(str(exc))
    if a.agent_env_dir and not a.instance:
        p.error("--agent-env-dir needs --instance TYPE")
    return LocalOptions(
        host=a.host,
        port=a.port,
        cluster=a.cluster,
        region=a.region,
        vpc_cidr=a.vpc_cidr,
        subnets=subnets,
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
        named_placement=a.named_placement,
        multi_card=a.multi_card,
        scarce_free=a.scarce_free,
        max_pods=a.max_pods,
        custom_network=tuple(a.custom_network),
        run_functions=not a.no_functions,
        lambda_runtime=a.lambda_runtime,
        instances=tuple(a.instance),
        agent_env_dir=a.agent_env_dir,
        log_file=a.log_file,
    )


def _check_subnets(vpc_cidr: str, subnets: Sequence[tuple[str, str]]) -> None:
    """Every subnet inside the VPC, none overlapping another (as EC2's CreateSubnet requires)."""
    import ipaddress

    vpc = ipaddress.IPv4Network(vpc_cidr)
    nets = [(az, ipaddress.IPv4Network(c)) for az, c in subnets]
    for az, net in nets:
        if not net.subnet_of(vpc):
            raise ValueError(f"--subnet {az}={net} is not inside --vpc-cidr {vpc}")
    for i, (az, net) in enumerate(nets):
        for az2, other in nets[i + 1 :]:
            if net.overlaps(other):
                raise ValueError(f"--subnet {az}={net} overlaps {az2}={other}")


class LineTee(io.TextIOBase):
    """A text stream that writes through to ``target`` and hands each complete line to
    ``on_line``. Lines are assembled per thread: handlers run concurrently and ``print``
    writes a line's text and its newline in two calls."""

    def __init__(self, target: Any, on_line: Callable[[str], object]) -> None:
        self.target = target
        self._on_line = on_line
        self._partial = threading.local()
        self._lock = threading.Lock()

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        with self._lock:
            self.target.write(text)
        lines = (getattr(self._partial, "text", "") + text).split("\n")
        self._partial.text = lines.pop()
        for line in lines:
            self._on_line(line)
        return len(text)

    def flush(self) -> None:
        self.target.flush()


class FunctionsLog(LineTee):
    """The functions' stdout (CloudWatch Logs' stand-in) while ``local up`` serves: every line
    goes to the log file; the lines an operator must see also to ``console``, in one line each:
    a report refused (``foreign-instance``: the instance lacks the cluster tag) and result
    queues deleted as orphaned."""

    def __init__(self, path: str, console: Any) -> None:
        self.path = path
        self._console = console
        super().__init__(open(path, "a", encoding="utf-8", buffering=1), self._note)  # noqa: SIM115 (close())

    def _note(self, line: str) -> None:
        note = console_note(line)
        if note:
            print(f"warmpool local: {note}", file=self._console, flush=True)

    def close(self) -> None:
        super().close()  # flushes the file first
        self.target.close()


def console_note(line: str) -> str | None:
    """The console's one-line account of a functions' log line worth an operator's eye, else None."""
    if not line.startswith("{") or ("report rejected" not in line and "orphaned result queues" not in line):
        return None
    try:
        rec = json.loads(line)
    except ValueError:
        return None
    if not isinstance(rec, dict):
        return None
    if rec.get("message") == "report rejected":
        reason = rec.get("reason", "?")
        hint = (
            f": tag the instance {names.cluster_tag_key(str(rec.get('cluster', 'CLUSTER')))}=owned"
            " (warmpool local up --help)"
            if reason == "foreign-instance"
            else ""
        )
        return f"report of {rec.get('instance_id', '?')} ({rec.get('node', '?')}) refused: {reason}{hint}"
    if rec.get("message") == "orphaned result queues deleted":
        return f"result queues of instances gone or not in the cluster deleted: {rec.get('instances')}"
    return None


def local_up(argv: Sequence[str]) -> int:
    """``warmpool local up [options]``: start, print one JSON line of outputs, serve
    until SIGINT/SIGTERM, stop cleanly. Returns the exit status. stdout carries the outputs
    line alone; the functions' logs and metrics go to the log file it names."""
    opts = options_from_args(argv)
    log_path = opts.log_file or tempfile.mkstemp(prefix=f"warmpool-local-{opts.cluster}-", suffix=".log")[1]
    opts = replace(opts, log_file=log_path)
    stop = threading.Event()

    def on_signal(signum: int, _frame: Any) -> None:
        stop.set()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    out, functions_log = sys.stdout, FunctionsLog(log_path, sys.stderr)
    # Powertools warns (UserWarning) when an invocation has no metric to flush: routine here
    warnings.filterwarnings("ignore", category=UserWarning, module="aws_lambda_powertools.*")
    sys.stdout = functions_log  # the functions print their logs and EMF metrics, as in Lambda
    stack = LocalStack(opts)
    try:
        try:
            outputs = stack.start()
        except OSError as exc:  # e.g. the port is taken
            print(f"warmpool local: cannot serve on {opts.host}:{opts.port}: {exc.strerror or exc}", file=sys.stderr)
            return 2
        print(json.dumps(outputs, sort_keys=True), file=out, flush=True)
        while not stop.wait(3600):
            pass
    finally:
        # A stop takes seconds (the invocations in flight settle for up to 30 s); one that takes
        # longer prints every thread's stack to stderr, so the log says what it waits on.
        faulthandler.dump_traceback_later(STOP_SLOW_S, file=sys.__stderr__ or sys.stderr)
        stack.stop()
        sys.stdout = out
        functions_log.close()
        for s, h in previous.items():
            signal.signal(s, h)
        faulthandler.cancel_dump_traceback_later()
    print("warmpool local: stopped", file=sys.stderr, flush=True)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry for ``warmpool local ...`` (``argv`` after ``local``) and ``python -m emulated.local``."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(
            "usage: warmpool local up [--port N] [--cluster NAME] ...  (warmpool local up --help)",
            file=sys.stdout if args else sys.stderr,
        )
        return 0 if args else 2
    if args[0] != "up":
        print(f"warmpool local: unknown subcommand {args[0]!r} (only 'up')", file=sys.stderr)
        return 2
    return local_up(args[1:])


if __name__ == "__main__":
    sys.exit(main())
