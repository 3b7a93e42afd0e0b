"""A ThreadedRunner with one invocation stuck in its handler (the local stack's stop tests)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from emulated.esm import EsmConfig, EventSourceMapping, ThreadedRunner
from emulated.sqs import FastSqs
from warmpool.clock import RealClock


@dataclass
class StuckInvocation:
    sqs: FastSqs
    url: str
    mapping: EventSourceMapping
    runner: ThreadedRunner
    release: threading.Event
    """Set it and the handler returns (after ``after`` runs)."""


def stuck_invocation(function_name: str, *, after: Callable[[], None] = lambda: None) -> StuckInvocation:
    """A started runner whose one message's invocation waits in the handler until ``release``
    is set (at most 120 s), then calls ``after``; returned once the handler was entered."""
    sqs = FastSqs(RealClock())
    c = sqs.client()
    url = c.create_queue(QueueName="q", Attributes={"VisibilityTimeout": "30"})["QueueUrl"]
    entered, release = threading.Event(), threading.Event()

    def handler(event: dict[str, Any], ctx: Any) -> None:
        entered.set()
        release.wait(120)
        after()

    m = EventSourceMapping(c, url, handler, EsmConfig(function_name=function_name), sqs.clock)
    runner = ThreadedRunner([m], poll_wait_s=1)
    runner.start()
    c.send_message(QueueUrl=url, MessageBody="stuck")
    if not entered.wait(10):
        release.set()
        runner.stop()
        raise AssertionError("the invocation never started")
    return StuckInvocation(sqs, url, m, runner, release)
