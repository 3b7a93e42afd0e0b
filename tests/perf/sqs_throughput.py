"""Messages per second through SQS (send + receive + delete, in batches of 10):
the in-memory ``emulated.sqs.FastSqs`` against moto's SQS (in-process, ``mock_aws``).

    .venv/bin/python tests/perf/sqs_throughput.py [--messages N] [--moto-messages N] [--runs R]

Prints one line per backend with the median of R runs, and a JSON summary line.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from typing import Any

import boto3

from emulated.clock import VirtualClock
from emulated.sqs import FastSqs


def cycle(client: Any, url: str, n: int, batch: int) -> float:
    """Send n messages, then receive and delete them all; returns messages/s."""
    t = time.perf_counter()
    for i in range(0, n, batch):
        if batch == 1:
            client.send_message(QueueUrl=url, MessageBody=f'{{"seq": {i}}}')
        else:
            client.send_message_batch(
                QueueUrl=url,
                Entries=[{"Id": str(j), "MessageBody": f'{{"seq": {i + j}}}'} for j in range(min(batch, n - i))],
            )
    got = 0
    while got < n:
        msgs = client.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", [])
        if not msgs:
            break
        got += len(msgs)
        if batch == 1:
            for m in msgs:
                client.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
        else:
            client.delete_message_batch(
                QueueUrl=url, Entries=[{"Id": str(j), "ReceiptHandle": m["ReceiptHandle"]} for j, m in enumerate(msgs)]
            )
    assert got == n, (got, n)
    return n / (time.perf_counter() - t)


def fast_runs(n: int, runs: int, batch: int) -> list[float]:
    out = []
    for _ in range(runs):
        c = FastSqs(VirtualClock(0.0)).client()
        url = c.create_queue(QueueName="bench")["QueueUrl"]
        out.append(cycle(c, url, n, batch))
    return out


def moto_runs(n: int, runs: int, batch: int) -> list[float]:
    from moto import mock_aws

    os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
    out = []
    for _ in range(runs):
        with mock_aws():
            c = boto3.client("sqs", region_name="us-east-1")
            url = c.create_queue(QueueName="bench")["QueueUrl"]
            out.append(cycle(c, url, n, batch))
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--messages", type=int, default=20_000, help="messages per run, FastSqs")
    p.add_argument(
        "--moto-messages",
        type=int,
        default=200,
        help="messages per run, moto (its receive scans the queue: slower as it grows)",
    )
    p.add_argument("--runs", type=int, default=5)
    a = p.parse_args()
    res: dict[str, Any] = {}
    for batch in (10, 1):
        f = fast_runs(a.messages, a.runs, batch)
        m = moto_runs(a.moto_messages, a.runs, batch)
        fm, mm = statistics.median(f), statistics.median(m)
        mode = "batches of 10" if batch == 10 else "single calls"
        print(f"FastSqs ({mode}): {fm:>12,.0f} msg/s  (median of {a.runs} x {a.messages} messages)")
        print(f"moto    ({mode}): {mm:>12,.0f} msg/s  (median of {a.runs} x {a.moto_messages} messages)")
        print(f"speed-up ({mode}): {fm / mm:,.0f}x")
        res[f"batch{batch}"] = {"fast_msgs_per_s": round(fm), "moto_msgs_per_s": round(mm), "speedup": round(fm / mm)}
    print(json.dumps(res, sort_keys=True))


if __name__ == "__main__":
    main()
