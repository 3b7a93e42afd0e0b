"""The CloudWatch dashboard the CDK app defines, served by the local stack from its own metrics.

The definition is the one ``cdk deploy`` creates: :class:`infra.observability.Observability`
synthesized for the stack's cluster (imported queues, functions and topic, named as the
local stack names them) gives the very ``DashboardBody`` JSON CloudWatch would hold. Its
widgets are drawn from a :class:`MetricStore` the stack fills as CloudWatch would be:

* ``warmpool`` — the functions' EMF lines (``_aws.CloudWatchMetrics``, as Powertools prints
  them; the embedded metric format specification), read from the functions' stdout;
* ``AWS/Lambda`` — ``Duration``, ``Errors``, ``Throttles`` (none: the event-source mapping
  never exceeds its maximum concurrency), ``ConcurrentExecutions``, ``Invocations``, one
  point per invocation, measured around each handler call;
* ``AWS/SQS`` — the queues' depth and age of oldest message, sampled every few seconds.

The evaluator knows what the definition uses: ``SEARCH('{ns,dim,...} MetricName="X"
name="value"', 'Stat', period)`` (the exact dimension set, as CloudWatch matches a schema)
and metric arrays ``[namespace, name, dim, value, ..., {options}]``; statistics ``Sum``,
``Average``, ``Minimum``, ``Maximum``, ``SampleCount`` and ``pNN``.
"""

from __future__ import annotations

import json
import math
import os
import re
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

Key = tuple[str, str, frozenset[tuple[str, str]]]
"""(namespace, metric name, dimensions)"""

_SEARCH_RE = re.compile(r"SEARCH\(\s*'(?P<query>(?:[^'\\]|\\.)*)'\s*,\s*'(?P<stat>[^']+)'\s*,\s*(?P<period>\d+)\s*\)")
_TERM_RE = re.compile(r'(?P<key>[A-Za-z0-9_./:-]+)="(?P<value>[^"]*)"')


@dataclass(frozen=True)
class Search:
    namespace: str | None
    schema: frozenset[str] | None
    """The exact dimension names (a ``{namespace,dims}`` schema), else any."""
    metric: str | None
    filters: tuple[tuple[str, str], ...]
    stat: str
    period: int


def parse_search(expression: str) -> Search:
    m = _SEARCH_RE.fullmatch(expression.strip())
    if m is None:
        raise ValueError(f"not a SEARCH expression this evaluator knows: {expression!r}")
    query = m["query"]
    namespace: str | None = None
    schema: frozenset[str] | None = None
    brace = re.match(r"\s*\{([^}]*)\}", query)
    if brace:
        parts = [p.strip() for p in brace.group(1).split(",") if p.strip()]
        namespace, schema = parts[0], frozenset(parts[1:])
        query = query[brace.end() :]
    metric = None
    filters = []
    for t in _TERM_RE.finditer(query):
        if t["key"] == "MetricName":
            metric = t["value"]
        elif t["key"] == "Namespace":
            namespace = t["value"]
        else:
            filters.append((t["key"], t["value"]))
    return Search(namespace, schema, metric, tuple(filters), m["stat"], int(m["period"]))


def aggregate(values: list[float], stat: str) -> float:
    if stat == "Sum":
        return sum(values)
    if stat == "Average":
        return sum(values) / len(values)
    if stat == "Minimum":
        return min(values)
    if stat == "Maximum":
        return max(values)
    if stat == "SampleCount":
        return float(len(values))
    pm = re.fullmatch(r"p(\d+(?:\.\d+)?)", stat)
    if pm:
        ordered = sorted(values)
        rank = max(0, math.ceil(float(pm.group(1)) / 100 * len(ordered)) - 1)
        return ordered[rank]
    raise ValueError(f"statistic {stat!r} not supported")


class MetricStore:
    """Data points by (namespace, name, dimensions), thread-safe; what CloudWatch would hold."""

    def __init__(self, now: Callable[[], float] = time.time) -> None:
        self._now = now
        self._points: dict[Key, list[tuple[float, float]]] = {}
        self._lock = threading.Lock()

    def put(self, namespace: str, name: str, dims: dict[str, str], value: float, at: float | None = None) -> None:
        key = (namespace, name, frozenset(dims.items()))
        with self._lock:
            self._points.setdefault(key, []).append((self._now() if at is None else at, float(value)))

    def ingest_emf(self, line: str) -> int:
        """Store the metrics of one EMF line (anything else: ignored). Returns the points stored."""
        if '"_aws"' not in line:
            return 0
        try:
            blob = json.loads(line)
            aws = blob["_aws"]
            at = float(aws["Timestamp"]) / 1000.0
            stored = 0
            for directive in aws["CloudWatchMetrics"]:
                for dim_set in directive["Dimensions"]:
                    dims = {d: str(blob[d]) for d in dim_set}
                    for metric in directive["Metrics"]:
                        raw = blob[metric["Name"]]
                        for v in raw if isinstance(raw, list) else [raw]:
                            self.put(directive["Namespace"], metric["Name"], dims, float(v), at)
                            stored += 1
            return stored
        except (ValueError, KeyError, TypeError):
            return 0

    def keys(self) -> list[Key]:
        with self._lock:
            return list(self._points)

    def points(self, key: Key) -> list[tuple[float, float]]:
        with self._lock:
            return list(self._points.get(key, ()))

    def series(self, key: Key, stat: str, period: int, start: float, end: float) -> list[tuple[float, float]]:
        """``stat`` of the points in each ``period`` from ``start`` to ``end`` that has any."""
        buckets: dict[int, list[float]] = {}
        for t, v in self.points(key):
            if start <= t <= end:
                buckets.setdefault(int(t // period) * period, []).append(v)
        return [(float(b), aggregate(vs, stat)) for b, vs in sorted(buckets.items())]

    def search(self, s: Search) -> list[Key]:
        out = []
        for key in self.keys():
            namespace, name, dims = key
            names = {d for d, _ in dims}
            if s.namespace is not None and namespace != s.namespace:
                continue
            if s.metric is not None and name != s.metric:
                continue
            if s.schema is not None and names != s.schema:
                continue
            if any((k, v) not in dims for k, v in s.filters):
                continue
            out.append(key)
        return sorted(out, key=lambda k: (k[1], sorted(k[2])))


def _label(key: Key, base: str) -> str:
    dims = ", ".join(f"{v}" for d, v in sorted(key[2]) if d != "cluster")
    return f"{base} {dims}".strip() if base else f"{key[1]} {dims}".strip()


def widget_series(props: dict[str, Any], store: MetricStore, start: float, end: float) -> list[dict[str, Any]]:
    """Every series a graph widget's ``metrics`` list draws, evaluated on ``store``."""
    out: list[dict[str, Any]] = []
    default_period = int(props.get("period", 300))
    default_stat = str(props.get("stat", "Average"))
    for entry in props.get("metrics", []):
        opts = entry[-1] if entry and isinstance(entry[-1], dict) else {}
        axis = str(opts.get("yAxis", "left"))
        if "expression" in opts:
            s = parse_search(str(opts["expression"]))
            for key in store.search(s):
                pts = store.series(key, s.stat, s.period, start, end)
                out.append({"label": _label(key, str(opts.get("label", ""))), "axis": axis, "points": pts})
            continue
        fields = [str(x) for x in (entry[:-1] if opts else entry)]
        namespace, name, dim_list = fields[0], fields[1], fields[2:]
        dims = dict(zip(dim_list[::2], dim_list[1::2], strict=True))
        key = (namespace, name, frozenset(dims.items()))
        period = int(opts.get("period", default_period))
        stat = str(opts.get("stat", default_stat))
        pts = store.series(key, stat, period, start, end)
        out.append({"label": str(opts.get("label", name)), "axis": axis, "points": pts})
    return out


def render_data(body: dict[str, Any], store: MetricStore, *, start: float, end: float) -> dict[str, Any]:
    """The dashboard's widgets with their series (what the page draws)."""
    widgets = []
    for w in body.get("widgets", []):
        props = w.get("properties", {})
        item: dict[str, Any] = {k: w.get(k) for k in ("type", "x", "y", "width", "height")}
        if w.get("type") == "text":
            item["markdown"] = props.get("markdown", "")
        else:
            item["title"] = props.get("title", "")
            item["series"] = widget_series(props, store, start, end)
        widgets.append(item)
    return {"start": start, "end": end, "widgets": widgets}


# --- the definition ------------------------------------------------------------------


def _resolve(value: Any, refs: dict[str, str]) -> Any:
    """A synthesized ``DashboardBody``: a string, or the intrinsic functions the CDK writes for
    imported resources (``Fn::Join``, ``Fn::Select``, ``Fn::Split``) over strings and the pseudo
    parameters in ``refs`` (``AWS::Region``...): everything else is literal here."""
    if isinstance(value, str | int):
        return value
    if isinstance(value, list):
        return [_resolve(v, refs) for v in value]
    if isinstance(value, dict) and len(value) == 1:
        ((fn, arg),) = value.items()
        if fn == "Ref" and arg in refs:
            return refs[arg]
        if fn == "Fn::Join":
            return str(arg[0]).join(str(_resolve(p, refs)) for p in arg[1])
        if fn == "Fn::Split":
            return str(_resolve(arg[1], refs)).split(str(arg[0]))
        if fn == "Fn::Select":
            return _resolve(arg[1], refs)[int(arg[0])]
    raise ValueError(f"the dashboard body holds an unresolved token: {value!r}")


JSII_QUIET = {
    "JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION": "1",
    "JSII_SILENCE_WARNING_UNTESTED_NODE_VERSION": "1",
    # jsii's runtime compares this one with Node's major version (a comma list), not with "1"
    "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "14,16,18,20,22",
}
"""What quiets the banner jsii prints when this Node is deprecated, untested or past its end
of life (the CDK works on it; the Makefile exports the same)."""


def synthesize_body(
    *, cluster: str, region: str, account: str, reports_queue: str, dlq: str, allocate: str, reconcile: str
) -> dict[str, Any]:
    """The ``DashboardBody`` :class:`infra.observability.Observability` defines for these names
    (the CDK synthesizes it: a few seconds, Node included)."""
    for key, value in JSII_QUIET.items():  # jsii's Node banner (raw bytes on stderr)
        os.environ.setdefault(key, value)
    import aws_cdk as cdk
    from aws_cdk import aws_lambda as lambda_
    from aws_cdk import aws_sns as sns
    from aws_cdk import aws_sqs as sqs
    from aws_cdk.assertions import Template

    from infra.observability import Observability

    app = cdk.App()
    stack = cdk.Stack(app, f"warmpool-{cluster}-local", env=cdk.Environment(account=account, region=region))
    arn = f"arn:aws:sqs:{region}:{account}:"
    Observability(
        stack,
        "Observability",
        cluster=cluster,
        reports=sqs.Queue.from_queue_arn(stack, "Reports", arn + reports_queue),
        dlq=sqs.Queue.from_queue_arn(stack, "Dlq", arn + dlq),
        allocate=lambda_.Function.from_function_name(stack, "Allocate", allocate),
        reconcile=lambda_.Function.from_function_name(stack, "Reconcile", reconcile),
        topic=sns.Topic.from_topic_arn(stack, "Topic", f"arn:aws:sns:{region}:{account}:warmpool-{cluster}-alarms"),
    )
    (dashboard,) = Template.from_stack(stack).find_resources("AWS::CloudWatch::Dashboard").values()
    refs = {
        "AWS::Region": region,
        "AWS::AccountId": account,
        "AWS::Partition": "aws",
        "AWS::URLSuffix": "amazonaws.com",
    }
    body: dict[str, Any] = json.loads(str(_resolve(dashboard["Properties"]["DashboardBody"], refs)))
    return body


class Definition:
    """The body, synthesized once in the background (``get`` waits for it)."""

    def __init__(self, make: Callable[[], dict[str, Any]]) -> None:
        self._make = make
        self._done = threading.Event()
        self._body: dict[str, Any] | None = None
        self.error: str | None = None
        threading.Thread(target=self._run, name="dashboard-synth", daemon=True).start()

    def _run(self) -> None:
        try:
            self._body = self._make()
        except Exception as e:  # the CDK is optional for the stack: the page says why
            self.error = f"{type(e).__name__}: {e}"
        finally:
            self._done.set()

    def get(self, timeout: float) -> dict[str, Any] | None:
        self._done.wait(timeout)
        return self._body


# --- the page ---------------------------------------------------------------------------

PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>warmpool dashboard (local)</title>
<style>
body { font: 12px sans-serif; margin: 8px; background: #f4f4f4; }
#grid { position: relative; }
.w { position: absolute; background: #fff; border: 1px solid #ccc; box-sizing: border-box;
     padding: 4px; overflow: hidden; }
.w h3 { font-size: 12px; margin: 0 0 2px 0; }
.w h2 { font-size: 14px; margin: 0 0 2px 0; }
.legend { font-size: 10px; color: #333; }
.legend span { margin-right: 8px; white-space: nowrap; }
.nodata { color: #b00; }
</style></head>
<body><div id="status">loading the dashboard…</div><div id="grid"></div>
<script>
const COLORS = ["#1f77b4","#ff7f0e","#2ca02c","#d62728","#9467bd","#8c564b","#e377c2","#7f7f7f","#bcbd22","#17becf"];
const UNIT_W = 50, UNIT_H = 40;
function esc(s) { return String(s).replace(/[&<>]/g, c => ({"&":"&amp;","<":"&lt;",">":"&gt;"}[c])); }
function md(text) {
  return esc(text).split("\\n").map(l => l.startsWith("# ") ? "<h2>" + l.slice(2) + "</h2>" : l)
    .join("<br>").replace(/`([^`]*)`/g, "<code>$1</code>");
}
function chart(series, start, end, w, h) {
  const pts = series.flatMap(s => s.points.map(p => p[1]));
  const ymax = Math.max(1, ...pts) * 1.1;
  const x = t => 30 + (w - 40) * (t - start) / Math.max(1, end - start);
  const y = v => h - 15 - (h - 25) * v / ymax;
  let svg = `<svg width="${w}" height="${h}"><line x1="30" y1="${h-15}" x2="${w-10}" y2="${h-15}" stroke="#999"/>` +
    `<line x1="30" y1="10" x2="30" y2="${h-15}" stroke="#999"/>` +
    `<text x="0" y="14" font-size="9">${ymax.toPrecision(3)}</text><text x="0" y="${h-15}" font-size="9">0</text>`;
  series.forEach((s, i) => {
    const c = COLORS[i % COLORS.length];
    if (s.points.length === 1) {
      const [t, v] = s.points[0];
      svg += `<circle cx="${x(t)}" cy="${y(v)}" r="3" fill="${c}"/>`;
    } else if (s.points.length) {
      svg += `<polyline fill="none" stroke="${c}" stroke-width="1.5" points="` +
        s.points.map(p => x(p[0]).toFixed(1) + "," + y(p[1]).toFixed(1)).join(" ") + `"/>`;
    }
  });
  return svg + "</svg>";
}
async function draw() {
  const r = await fetch("data" + location.search);
  const data = await r.json();
  const grid = document.getElementById("grid");
  if (!r.ok) { document.getElementById("status").textContent = data.error || r.statusText; return; }
  grid.innerHTML = "";
  let bottom = 0;
  for (const w of data.widgets) {
    const div = document.createElement("div");
    div.className = "w";
    Object.assign(div.style, {left: w.x * UNIT_W + "px", top: w.y * UNIT_H + "px",
      width: w.width * UNIT_W - 4 + "px", height: w.height * UNIT_H - 4 + "px"});
    bottom = Math.max(bottom, (w.y + w.height) * UNIT_H);
    if (w.type === "text") {
      div.innerHTML = md(w.markdown);
      div.dataset.kind = "text";
    } else {
      const n = w.series.reduce((a, s) => a + s.points.length, 0);
      div.dataset.kind = "graph";
      div.dataset.title = w.title;
      div.dataset.points = n;
      const legend = w.series.map((s, i) => `<span style="color:${COLORS[i % COLORS.length]}">■ ${esc(s.label)}` +
        ` (${s.points.length})</span>`).join("");
      div.innerHTML = `<h3>${esc(w.title)}</h3>` +
        chart(w.series, data.start, data.end, w.width * UNIT_W - 12, w.height * UNIT_H - 60) +
        `<div class="legend">${legend || '<span class="nodata">no data</span>'}</div>`;
    }
    grid.appendChild(div);
  }
  grid.style.height = bottom + "px";
  const when = new Date(data.end * 1000).toISOString().slice(11, 19);
  document.getElementById("status").textContent =
    `warmpool dashboard, rendered locally from the stack's metrics (to ${when} UTC, refreshed every 10 s)`;
  document.body.dataset.rendered = String(data.widgets.length);
}
draw(); setInterval(draw, 10000);
</script></body></html>
"""


def sample_queues(store: MetricStore, queues: Iterable[tuple[str, Callable[[], tuple[int, int, float]]]]) -> None:
    """One sample of each queue's depth, in-flight count and age of oldest message (s)."""
    for name, read in queues:
        visible, in_flight, oldest_age = read()
        dims = {"QueueName": name}
        store.put("AWS/SQS", "ApproximateNumberOfMessagesVisible", dims, visible)
        store.put("AWS/SQS", "ApproximateNumberOfMessagesNotVisible", dims, in_flight)
        store.put("AWS/SQS", "ApproximateAgeOfOldestMessage", dims, oldest_age)


class Invocations:
    """Wraps a handler so each call puts what Lambda's own metrics would say about it."""

    def __init__(self, store: MetricStore, function_name: str) -> None:
        self.store = store
        self.dims = {"FunctionName": function_name}
        self._in_flight = 0
        self._lock = threading.Lock()

    def wrap(self, handler: Callable[..., Any]) -> Callable[..., Any]:
        def observed(event: Any, context: Any) -> Any:
            with self._lock:
                self._in_flight += 1
                concurrent = self._in_flight
            started = time.perf_counter()
            failed = True
            try:
                result = handler(event, context)
                failed = False
                return result
            finally:
                with self._lock:
                    self._in_flight -= 1
                put = self.store.put
                put("AWS/Lambda", "Invocations", self.dims, 1)
                put("AWS/Lambda", "Duration", self.dims, (time.perf_counter() - started) * 1000.0)
                put("AWS/Lambda", "Errors", self.dims, 1 if failed else 0)
                put("AWS/Lambda", "Throttles", self.dims, 0)
                put("AWS/Lambda", "ConcurrentExecutions", self.dims, concurrent)

        observed.__wrapped__ = handler  # type: ignore[attr-defined]  # inspect.unwrap finds the function
        return observed
