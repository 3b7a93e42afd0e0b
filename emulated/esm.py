"""An SQS event-source mapping and EventBridge rate schedules, run the way
Lambda runs them.

One core, :class:`EventSourceMapping`, decides what Lambda's pollers decide:
which received messages form a batch (batch size, batching window, 6 MB
payload), what the handler's answer means (``ReportBatchItemFailures``; a raise
or a timeout fails the whole batch) and which messages are deleted. The queue
does the rest, as in AWS: failed messages come back after the visibility
timeout and move to the DLQ after ``maxReceiveCount`` (the queue's
``RedrivePolicy``). It talks to SQS only through :class:`warmpool.ports.SqsApi`,
so it drives :class:`emulated.sqs.FastSqs` or a boto3 client alike.

Two drivers over that core:

* virtual time: :meth:`EventSourceMapping.tick` (and :meth:`Schedule.tick`),
  called by the bench's event loop. Up to ``maximum_concurrency`` invocations
  are in flight; each runs its handler at once (its effects happen at start)
  and completes — deletes its messages, frees its slot — after a duration the
  caller supplies (``duration(batch) -> seconds``) or, by default, the wall time
  the handler took. :meth:`~EventSourceMapping.next_wakeup` tells the loop when
  to call again.
* real time: :class:`ThreadedRunner`, one poller thread per mapping, a worker
  pool of ``maximum_concurrency`` threads, one thread per schedule. Used by
  ``warmpool local up``. Waits are on events and condition variables; nothing sleeps.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from emulated.lambda_runtime import DEFAULT_ACCOUNT, make_context, scheduled_event, sqs_record
from warmpool.clock import Clock, RealClock
from warmpool.ports import SqsApi

log = logging.getLogger(__name__)

Handler = Callable[[dict[str, Any], Any], Any]
"""A Lambda handler: ``handler(event, context) -> response``."""

MAX_PAYLOAD_BYTES = 6 * 1024 * 1024  # synchronous invocation payload limit


@dataclass(frozen=True)
class EsmConfig:
    """The event-source mapping's settings (names as in ``CreateEventSourceMapping``)."""

    function_name: str
    batch_size: int = 10
    batching_window_s: float = 0.0  # MaximumBatchingWindowInSeconds
    maximum_concurrency: int = 1000  # ScalingConfig.MaximumConcurrency (2..1000)
    report_batch_item_failures: bool = True  # FunctionResponseTypes=["ReportBatchItemFailures"]
    function_timeout_s: float = 30.0
    memory_mb: int = 512
    region: str = "us-east-1"
    account_id: str = DEFAULT_ACCOUNT

    def __post_init__(self) -> None:
        if not 1 <= self.batch_size <= 10_000:
            raise ValueError("BatchSize must be between 1 and 10000")
        if not 0 <= self.batching_window_s <= 300:
            raise ValueError("MaximumBatchingWindowInSeconds must be between 0 and 300")
        if self.batch_size > 10 and self.batching_window_s < 1:
            raise ValueError("BatchSize above 10 needs MaximumBatchingWindowInSeconds of at least 1")
        if not 2 <= self.maximum_concurrency <= 1000:
            raise ValueError("MaximumConcurrency must be between 2 and 1000")
        if not 0 < self.function_timeout_s <= 900:
            raise ValueError("function timeout must be in (0, 900] seconds")


@dataclass
class Outcome:
    """What one invocation did to its batch."""

    request_id: str
    message_ids: list[str]
    failed_ids: list[str]  # to be retried (left in the queue)
    error: str | None = None  # the handler raised / timed out / answered badly
    response: Any = None
    wall_s: float = 0.0


@dataclass
class _InFlight:
    done_at: float
    seq: int
    batch: list[dict[str, Any]] = field(compare=False)
    outcome: Outcome = field(compare=False)

    def __lt__(self, other: _InFlight) -> bool:
        return (self.done_at, self.seq) < (other.done_at, other.seq)


@dataclass
class EsmStats:
    invocations: int = 0
    messages: int = 0
    deleted: int = 0
    failed_items: int = 0
    errors: int = 0  # raised, timed out, or answered with an invalid failure list
    timeouts: int = 0
    max_in_flight: int = 0
    concurrency_waits: int = 0  # a batch was ready but every slot was busy
    delete_errors: int = 0

    def as_dict(self) -> dict[str, int]:
        return dict(self.__dict__)


class EventSourceMapping:
    """Lambda's SQS poller for one function and one queue."""

    def __init__(
        self,
        sqs: SqsApi,
        queue_url: str,
        handler: Handler,
        config: EsmConfig,
        clock: Clock,
        *,
        duration: Callable[[list[dict[str, Any]], Outcome], float] | None = None,
        receive_wait_s: int = 0,
    ) -> None:
        self.sqs = sqs
        self.queue_url = queue_url
        self.handler = handler
        self.config = config
        self.clock = clock
        self.duration = duration
        self.receive_wait_s = receive_wait_s
        attrs = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn", "VisibilityTimeout"])[
            "Attributes"
        ]
        self.queue_arn = str(attrs["QueueArn"])
        self.visibility_timeout_s = int(attrs["VisibilityTimeout"])
        if self.visibility_timeout_s < config.function_timeout_s:
            # CreateEventSourceMapping refuses this (InvalidParameterValueException).
            raise ValueError(
                f"Queue visibility timeout: {self.visibility_timeout_s} seconds is less than "
                f"Function timeout: {config.function_timeout_s} seconds"
            )
        self.stats = EsmStats()
        self._buffer: list[dict[str, Any]] = []
        self._buffer_bytes = 0
        self._buffer_since: float | None = None
        self._queue_empty = False
        self._in_flight: list[_InFlight] = []
        self._seq = itertools.count()
        self._lock = threading.Lock()  # stats and in-flight count (real-time driver)
        self._running = 0

    # -- batching ------------------------------------------------------------

    def _fill(self, wait_s: int) -> None:
        """Receive into the buffer until a batch's worth is there or the queue is empty."""
        self._queue_empty = False
        while len(self._buffer) < self.config.batch_size:
            n = min(10, self.config.batch_size - len(self._buffer))
            r = self.sqs.receive_message(
                QueueUrl=self.queue_url,
                MaxNumberOfMessages=n,
                MessageSystemAttributeNames=["All"],
                MessageAttributeNames=["All"],
                WaitTimeSeconds=wait_s if not self._buffer else 0,
            )
            msgs = r.get("Messages", [])
            if not msgs:
                self._queue_empty = True
                return
            if self._buffer_since is None:
                self._buffer_since = self.clock.now()
            for m in msgs:
                self._buffer.append(m)
                self._buffer_bytes += len(str(m["Body"]).encode())
            if self._buffer_bytes >= MAX_PAYLOAD_BYTES:
                return

    def next_batch(self, now: float | None = None, wait_s: int | None = None) -> list[dict[str, Any]] | None:
        """Poll, and cut a batch if one is due: a full batch, a full payload, an
        expired batching window, or (window 0) whatever one round of polling got."""
        now = self.clock.now() if now is None else now
        self._fill(self.receive_wait_s if wait_s is None else wait_s)
        if not self._buffer:
            return None
        full = len(self._buffer) >= self.config.batch_size or self._buffer_bytes >= MAX_PAYLOAD_BYTES
        since = self._buffer_since if self._buffer_since is not None else now
        window_over = now >= since + self.config.batching_window_s  # same sum as window_ends_at()
        if not (full or window_over):
            return None
        batch: list[dict[str, Any]] = []
        size = 0
        while self._buffer and len(batch) < self.config.batch_size:
            b = len(str(self._buffer[0]["Body"]).encode())
            if batch and size + b > MAX_PAYLOAD_BYTES:
                break
            batch.append(self._buffer.pop(0))
            size += b
        self._buffer_bytes -= size
        self._buffer_since = now if self._buffer else None
        return batch

    def window_ends_at(self) -> float | None:
        if not self._buffer or self._buffer_since is None:
            return None
        return self._buffer_since + self.config.batching_window_s

    # -- one invocation --------------------------------------------------------

    def invoke(self, batch: list[dict[str, Any]]) -> Outcome:
        """Run the handler on a batch and judge its answer (deletes nothing)."""
        cfg = self.config
        ctx = make_context(
            cfg.function_name,
            self.clock,
            cfg.function_timeout_s,
            memory_mb=cfg.memory_mb,
            region=cfg.region,
            account_id=cfg.account_id,
        )
        event = {"Records": [sqs_record(m, self.queue_arn, cfg.region) for m in batch]}
        ids = [m["MessageId"] for m in batch]
        out = Outcome(request_id=ctx.aws_request_id, message_ids=ids, failed_ids=[])
        started = time.perf_counter()
        try:
            out.response = self.handler(event, ctx)
        except Exception as e:
            out.error = f"{type(e).__name__}: {e}"
            out.failed_ids = list(ids)
            log.warning("%s %s failed: %s", cfg.function_name, ctx.aws_request_id, out.error)
        out.wall_s = time.perf_counter() - started
        if out.error is None and cfg.report_batch_item_failures:
            self._judge_partial(out, set(ids))
        return out

    @staticmethod
    def _judge_partial(out: Outcome, ids: set[str]) -> None:
        """Lambda's rules for ``batchItemFailures``: none or an empty list means
        success; an identifier that is empty or not in the batch fails the whole batch."""
        resp = out.response
        if not isinstance(resp, Mapping):
            return
        items = resp.get("batchItemFailures")
        if not items:
            return
        failed: list[str] = []
        for it in items:
            ident = it.get("itemIdentifier") if isinstance(it, Mapping) else None
            if not ident or ident not in ids:
                out.error = f"invalid batchItemFailures entry: {it!r}"
                out.failed_ids = sorted(ids)
                return
            failed.append(str(ident))
        out.failed_ids = sorted(set(failed))

    def settle(self, batch: list[dict[str, Any]], outcome: Outcome) -> None:
        """Complete an invocation: delete what succeeded, count what did not."""
        failed = set(outcome.failed_ids)
        done = [m for m in batch if m["MessageId"] not in failed]
        for i in range(0, len(done), 10):
            chunk = done[i : i + 10]
            try:
                r = self.sqs.delete_message_batch(
                    QueueUrl=self.queue_url,
                    Entries=[{"Id": str(j), "ReceiptHandle": m["ReceiptHandle"]} for j, m in enumerate(chunk)],
                )
                bad = len(r.get("Failed", []))
            except (ClientError, BotoCoreError) as e:
                log.warning("delete after %s failed: %s", outcome.request_id, e)
                bad = len(chunk)
            with self._lock:
                self.stats.deleted += len(chunk) - bad
                self.stats.delete_errors += bad
        with self._lock:
            self.stats.invocations += 1
            self.stats.messages += len(batch)
            self.stats.failed_items += len(failed)
            if outcome.error is not None:
                self.stats.errors += 1

    # -- virtual-time driver ---------------------------------------------------

    def tick(self, now: float | None = None, *, max_invocations: int = 10_000) -> int:
        """Complete invocations due by ``now``, then start new ones while slots
        and batches allow. Returns the number started."""
        now = self.clock.now() if now is None else now
        started = 0
        self._complete_due(now)
        while started < max_invocations:
            if len(self._in_flight) >= self.config.maximum_concurrency:
                if self._buffer or not self._queue_empty:
                    self.stats.concurrency_waits += 1
                break
            batch = self.next_batch(now, wait_s=0)
            if batch is None:
                break
            outcome = self.invoke(batch)
            d = self.duration(batch, outcome) if self.duration is not None else outcome.wall_s
            if d > self.config.function_timeout_s:
                outcome.error = "Task timed out"
                outcome.failed_ids = list(outcome.message_ids)
                self.stats.timeouts += 1
                d = self.config.function_timeout_s
            heapq.heappush(self._in_flight, _InFlight(now + max(d, 0.0), next(self._seq), batch, outcome))
            self.stats.max_in_flight = max(self.stats.max_in_flight, len(self._in_flight))
            started += 1
            self._complete_due(now)
        return started

    def _complete_due(self, now: float) -> None:
        while self._in_flight and self._in_flight[0].done_at <= now:
            f = heapq.heappop(self._in_flight)
            self.settle(f.batch, f.outcome)

    @property
    def in_flight(self) -> int:
        return len(self._in_flight) + self._running

    def next_wakeup(self, now: float | None = None) -> float | None:
        """The earliest time a tick could do something new: an invocation ends,
        the batching window closes, or (with :class:`emulated.sqs.FastSqs`) a message
        becomes visible. None when nothing is pending."""
        now = self.clock.now() if now is None else now
        times: list[float] = []
        if self._in_flight:
            times.append(self._in_flight[0].done_at)
        w = self.window_ends_at()
        if w is not None:
            times.append(w)
        nva = getattr(getattr(self.sqs, "backend", None), "next_visible_at", None)
        if callable(nva) and len(self._in_flight) < self.config.maximum_concurrency:
            t = nva(self.queue_url)
            if t is not None:
                times.append(max(float(t), now))
        return min(times) if times else None


class Schedule:
    """An EventBridge rate rule targeting a function: ``rate(rate_s seconds)``.

    The first invocation comes one period after ``start`` (as with a new rule),
    or at ``start`` with ``fire_at_start=True``. A handler that raises is counted
    and logged (EventBridge's async retries are not modelled)."""

    def __init__(
        self,
        rate_s: float,
        handler: Handler,
        *,
        name: str = "schedule",
        function_name: str = "function",
        clock: Clock | None = None,
        start: float | None = None,
        fire_at_start: bool = False,
        function_timeout_s: float = 60.0,
        region: str = "us-east-1",
        account_id: str = DEFAULT_ACCOUNT,
    ) -> None:
        if rate_s <= 0:
            raise ValueError("rate must be > 0")
        self.rate_s = rate_s
        self.handler = handler
        self.name = name
        self.function_name = function_name
        self.clock: Clock = clock or RealClock()
        self.function_timeout_s = function_timeout_s
        self.region = region
        self.account_id = account_id
        t0 = self.clock.now() if start is None else start
        self.next_at = t0 if fire_at_start else t0 + rate_s
        self.invocations = 0
        self.errors = 0
        self.rule_arn = f"arn:aws:events:{region}:{account_id}:rule/{name}"

    def invoke(self, now: float) -> Any:
        ctx = make_context(
            self.function_name, self.clock, self.function_timeout_s, region=self.region, account_id=self.account_id
        )
        self.invocations += 1
        try:
            return self.handler(scheduled_event(self.rule_arn, now, self.region, self.account_id), ctx)
        except Exception as e:
            self.errors += 1
            log.warning("scheduled %s failed: %s: %s", self.function_name, type(e).__name__, e)
            return None

    def tick(self, now: float | None = None) -> int:
        """Invoke once per period that has come due (missed periods are not
        replayed: a late tick fires once, like a rule that never queues). Returns
        the number of invocations (0 or 1)."""
        now = self.clock.now() if now is None else now
        if now < self.next_at:
            return 0
        self.invoke(now)
        while self.next_at <= now:
            self.next_at += self.rate_s
        return 1

    def stats(self) -> dict[str, int]:
        return {"invocations": self.invocations, "errors": self.errors}


class ThreadedRunner:
    """The real-time driver: pollers, workers and schedules in threads.

    ``poll_wait_s`` bounds each long poll so ``stop()`` returns promptly."""

    def __init__(
        self,
        mappings: list[EventSourceMapping],
        schedules: list[Schedule] | None = None,
        *,
        poll_wait_s: int = 1,
    ) -> None:
        self.mappings = mappings
        self.schedules = schedules or []
        self.poll_wait_s = poll_wait_s
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._running: set[threading.Thread] = set()
        """Invocations in flight: a daemon thread each (at most the mapping's concurrency), so
        one that never returns cannot hold the process at exit (a ThreadPoolExecutor's workers
        are joined at interpreter exit, however long they take)."""
        self._running_lock = threading.Lock()
        self._numbers = itertools.count(1)
        self._generation = 0
        """Counts starts and stops: an invocation still running when a stop's drain ends does not settle."""

    def start(self) -> None:
        self._stop.clear()  # a runner stopped may start again
        self._generation += 1
        for i, m in enumerate(self.mappings):
            t = threading.Thread(target=self._poll_loop, args=(m,), name=f"esm-{i}", daemon=True)
            self._threads.append(t)
        for s in self.schedules:
            self._threads.append(
                threading.Thread(target=self._schedule_loop, args=(s,), name=f"sched-{s.name}", daemon=True)
            )
        for t in self._threads:
            t.start()

    def stop(self, timeout: float = 10.0, *, drain_s: float = 30.0) -> None:
        """Stop polling (each loop within ``timeout``) and wait up to ``drain_s`` for the
        invocations in flight to settle. One still running then is left to finish on its own,
        logged, and is never settled: its batch is not deleted, and comes back after the
        visibility timeout, as when Lambda stops an environment mid-invocation (its handler's
        own writes, as there, may still land)."""
        self._stop.set()
        for t in self._threads:
            t.join(timeout)
        self._threads.clear()
        deadline = time.monotonic() + drain_s
        with self._running_lock:
            running = list(self._running)
        for t in running:
            t.join(max(0.0, deadline - time.monotonic()))
        self._generation += 1  # what is still running now is left behind: never settled
        left = [t.name for t in running if t.is_alive()]
        if left:
            log.warning("stopped with %d invocations still running after %g s: %s", len(left), drain_s, left)

    def __enter__(self) -> ThreadedRunner:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _poll_loop(self, m: EventSourceMapping) -> None:
        slots = threading.BoundedSemaphore(m.config.maximum_concurrency)
        while not self._stop.is_set():
            if not slots.acquire(timeout=0.5):
                m.stats.concurrency_waits += 1
                continue
            try:
                batch = m.next_batch(wait_s=self.poll_wait_s)
            except (ClientError, BotoCoreError) as e:
                log.warning("poll of %s failed: %s", m.queue_url, e)
                batch = None
                self._stop.wait(1.0)
            except Exception:  # keep polling whatever a transient failure was
                log.exception("poll of %s failed", m.queue_url)
                batch = None
                self._stop.wait(1.0)
            if batch is None:
                slots.release()
                w = m.window_ends_at()
                if w is not None:
                    self._stop.wait(min(max(w - m.clock.now(), 0.0), self.poll_wait_s))
                continue
            with m._lock:
                m._running += 1
                m.stats.max_in_flight = max(m.stats.max_in_flight, m._running)
            t = threading.Thread(
                target=self._run,
                args=(m, batch, slots, self._generation),
                name=f"lambda-{m.config.function_name}-{next(self._numbers)}",
                daemon=True,
            )
            with self._running_lock:
                self._running.add(t)
            t.start()

    def _run(
        self, m: EventSourceMapping, batch: list[dict[str, Any]], slots: threading.BoundedSemaphore, generation: int
    ) -> None:
        try:
            outcome = m.invoke(batch)
            if generation != self._generation:
                # The runner stopped while it ran, its drain passed: its batch is left in
                # flight, to come back after the visibility timeout, as from an environment
                # Lambda stopped mid-invocation (hostile review 3, F4: it settled, deleting it).
                log.warning("invocation of %s ended after the runner stopped: not settled", m.config.function_name)
                return
            if outcome.wall_s > m.config.function_timeout_s:
                outcome.error = "Task timed out"
                outcome.failed_ids = list(outcome.message_ids)
                with m._lock:
                    m.stats.timeouts += 1
            m.settle(batch, outcome)
        except Exception:
            log.exception("invocation of %s failed outside the handler", m.config.function_name)
        finally:
            with m._lock:
                m._running -= 1
            slots.release()
            with self._running_lock:
                self._running.discard(threading.current_thread())

    def _schedule_loop(self, s: Schedule) -> None:
        while not self._stop.is_set():
            now = s.clock.now()
            if now >= s.next_at:
                s.tick(now)
                continue
            self._stop.wait(min(s.next_at - now, 1.0))
