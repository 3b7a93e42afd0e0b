"""A declined release offer costs no EC2 call: the executor answers it with an
``assigned`` action for the same addresses."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from functions.execute import PlanExecutor
from warmpool.calls import Reclaim
from warmpool.messages import Assigned


class NoEc2:
    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"EC2 touched: {name}")


def test_reclaim_is_an_assigned_action_without_ec2() -> None:
    ex = PlanExecutor(NoEc2(), NoEc2(), NoEc2(), NoEc2(), NoEc2())  # type: ignore[arg-type]
    call = Reclaim("eni-00000001", ("10.0.0.7", "10.0.0.8"), ())
    # planned without a release book, for a report offering nothing of unknown origin
    job = SimpleNamespace(book=None, book_checked=False, report=SimpleNamespace(release=[]), handed=set())
    assert ex._do(call, job, None) == [  # type: ignore[arg-type]
        Assigned(eni_id="eni-00000001", ips=["10.0.0.7", "10.0.0.8"], prefixes=[])
    ]
