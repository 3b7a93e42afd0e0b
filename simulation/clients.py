"""The allocator's and the reconciler's side of a seed's world: their clients to the
emulated AWS wrapped with the schedule's faults (crashes between calls, slow calls,
termination mid-allocation, delayed and duplicated results, failed queue deletes, a
reconcile racing an invocation) and with the checks made at the moment of a call
(the lease held, nothing released that a pod holds); the ledger (batched reads
through the real :class:`functions.stores.DynamoLedger`) and the leases, tracked.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from botocore.exceptions import ClientError

from emulated.clock import VirtualClock
from emulated.iam import PolicyPrincipal
from emulated.lambda_runtime import LambdaCrash
from emulated.memstores import MemLeases, MemLedger
from functions.stores import DynamoLedger
from simulation import subnets
from simulation.base import CLUSTER
from simulation.view import WorldView
from warmpool import names


def refused(w: WorldView, who: str, name: str, err: ClientError) -> None:
    """``iam-denied``: the stack's own role refused one of its function's EC2 calls (the call
    fails in a real stack as it fails here: UnauthorizedOperation, nothing changed)."""
    if err.response.get("Error", {}).get("Code") == "UnauthorizedOperation":
        msg = err.response["Error"].get("Message", "")
        w.violation("iam-denied", f"{who}: {name} refused: {msg}"[:400])


class InvClock:
    """The allocator's clock: virtual time plus the time the running invocation has taken,
    plus the ``offset`` of the container it runs in (``lambda-clock-skew``; 0 otherwise)."""

    def __init__(self, base: VirtualClock) -> None:
        self.base = base
        self.elapsed = 0.0
        self.offset = 0.0

    def now(self) -> float:
        return self.base.now() + self.elapsed + self.offset

    def true_now(self) -> float:
        """The world's time at the running invocation's point (no container's offset)."""
        return self.base.now() + self.elapsed


@dataclass
class Invocation:
    owner: str
    crash: tuple[str, int] | None
    slow_s: float
    mutating: int = 0
    timeout_at: float = 0.0
    bodies: list[str] = field(default_factory=list)
    stalled: bool = False
    offset: float = 0.0
    """Its container's clock minus the world's (``lambda-clock-skew``)."""


class ClientsWorld(subnets.SubnetsWorld, Protocol):
    """What the allocator's and the reconciler's clients reach of the seed's world
    (:class:`simulation.world.SimWorld` satisfies it)."""

    @property
    def active(self) -> dict[str, Any]:
        """The schedule's fault windows now open: kind -> its value."""
        ...

    @property
    def invocations(self) -> list[Invocation]:
        """The allocator's invocations now running, innermost last."""
        ...

    @property
    def clock_inv(self) -> InvClock: ...

    @property
    def calls_by_iid(self) -> dict[str, list[tuple[float, str]]]: ...

    @property
    def recorded(self) -> dict[str, tuple[str, int]]: ...

    @property
    def forged(self) -> set[tuple[str, int]]: ...

    def crafted_only(self, iid: str, seq: int) -> bool: ...

    def iid_of_call(self, kw: dict[str, Any]) -> str | None: ...

    def node_of_iid(self, iid: str | None) -> str | None: ...

    def check_lease(self, inv: Invocation, node: str, call: str, iid: str) -> None: ...

    def check_release(self, node: str, kw: dict[str, Any]) -> None: ...

    def maybe_terminate_now(self, node: str) -> None: ...

    def maybe_overlap(self, inv: Invocation) -> None: ...

    def deliver(self, client: Any, kw: dict[str, Any]) -> dict[str, Any]: ...

    def on_message(self, url: str, body: str) -> None: ...

    def esm_tick(self) -> None: ...

    @property
    def roles(self) -> dict[str, PolicyPrincipal]:
        """The stack's roles (``allocate``, ``reconcile``, ``agent``) as emulated EC2's principals."""
        ...


class AllocEc2:
    """The allocator's EC2 client: crashes, slow calls, termination mid-allocation, lease checks."""

    def __init__(self, w: ClientsWorld) -> None:
        self.w = w
        self.inner = w.emu.client(principal=w.roles["allocate"])

    def __getattr__(self, name: str) -> Callable[..., dict[str, Any]]:
        fn = getattr(self.inner, name)
        mutating = not name.startswith(("describe_", "get_", "list_"))
        w = self.w

        def call(**kw: Any) -> dict[str, Any]:
            inv = w.invocations[-1] if w.invocations else None
            if inv is not None:
                if inv.slow_s and mutating and not inv.stalled:
                    # one call hangs (connect timeouts, SDK retries) and then goes through
                    inv.stalled = True
                    w.clock_inv.elapsed += inv.slow_s
                    if w.clock_inv.now() >= inv.timeout_at:
                        raise LambdaCrash("timed out")
                    w.maybe_overlap(inv)
                if mutating and inv.crash is not None and inv.crash[0] == "ec2" and inv.mutating >= inv.crash[1]:
                    raise LambdaCrash("crashed between EC2 calls")
            # the instance a call acts for, read before anything changes (a termination
            # armed for this call detaches the ENI the call names)
            iid = w.iid_of_call(kw) if mutating else None
            node = w.node_of_iid(iid)
            if iid is not None and mutating:
                w.calls_by_iid.setdefault(iid, []).append((w.now(), name))
            if iid is not None and inv is not None:
                w.check_lease(inv, node or iid, name, iid)
            if mutating:
                subnets.check_call(w, node, name, kw, w.clock_inv.true_now())
            if node is not None:
                w.maybe_terminate_now(node)
                if name == "unassign_private_ip_addresses":
                    w.check_release(node, kw)
            try:
                out: dict[str, Any] = fn(**kw)
            except ClientError as err:
                refused(w, "the allocator", name, err)
                subnets.note_outcome(w, name, err.response.get("Error", {}).get("Code"))
                raise
            if inv is not None and mutating:
                inv.mutating += 1
            return out

        return call


class FakeDynamo:
    """Just enough DynamoDB for :meth:`DynamoLedger.last_seqs`: BatchGetItem over a
    :class:`MemLedger`, with UnprocessedKeys on demand (every retry, as in a hot partition)."""

    def __init__(self, w: ClientsWorld, ledger: MemLedger) -> None:
        self.w, self.ledger = w, ledger

    def batch_get_item(self, RequestItems: dict[str, Any]) -> dict[str, Any]:
        ((table, req),) = RequestItems.items()
        got, left = [], []
        rate = self.w.active.get("ddb-unprocessed", 0.0)
        for key in req["Keys"]:
            if rate and self.w.rng("ddb").random() < rate:
                left.append(key)
                continue
            node = key[names.LEDGER_PK]["S"].split("#", 2)[2]
            item = self.ledger._items.get((CLUSTER, node))
            if item is not None:
                got.append({names.LEDGER_PK: key[names.LEDGER_PK], "last_seq": {"N": str(item["last_seq"])}})
        if left:
            self.w.fault("ddb-unprocessed")
        out: dict[str, Any] = {"Responses": {table: got}}
        if left:
            out["UnprocessedKeys"] = {table: {**req, "Keys": left}}
        return out


class SimLedger(MemLedger):
    """The ledger: MemLedger, but batched reads through the real DynamoLedger code;
    crash points before and after a write; every write noted for the checks."""

    def __init__(self, w: ClientsWorld) -> None:
        super().__init__()
        self.w = w
        self.dynamo = DynamoLedger(FakeDynamo(w, self), "ledger")  # type: ignore[arg-type]

    def last_seqs(self, cluster: str, nodes: list[str]) -> dict[str, int]:
        return self.dynamo.last_seqs(cluster, nodes)

    def record(self, cluster: str, node: str, seq: int, outcome: dict[str, Any], now: float) -> bool:
        inv = self.w.invocations[-1] if self.w.invocations else None
        if inv is not None and inv.crash == ("ledger-before", 0):
            raise LambdaCrash("crashed before the ledger write")
        ok = super().record(cluster, node, seq, outcome, now)
        if ok:
            self.w.recorded[node] = (str(outcome.get("instance_id", "")), seq)
            if self.w.crafted_only(node, seq):
                self.w.violation(
                    "forged-served",
                    f"the ledger of {node} moved to {seq}, the seq of a crafted "
                    f"report (status {outcome.get('status')}, actions {outcome.get('actions')})"[:400],
                )
        if inv is not None and inv.crash == ("ledger-after", 0):
            raise LambdaCrash("crashed after the ledger write")
        return ok


class TrackedLeases(MemLeases):
    def __init__(self) -> None:
        super().__init__()
        self.held: dict[str, tuple[str, float]] = {}

    def claim(self, cluster: str, node: str, owner: str, now: float, ttl_s: float) -> bool:
        ok = super().claim(cluster, node, owner, now, ttl_s)
        if ok:
            self.held[node] = (owner, now + ttl_s)
        return ok

    def release(self, cluster: str, node: str, owner: str) -> None:
        super().release(cluster, node, owner)
        if self.held.get(node, ("", 0))[0] == owner:
            del self.held[node]


class AllocSqs:
    """The allocator's SQS client: results (checked, delayed, duplicated) and deferrals."""

    def __init__(self, w: ClientsWorld) -> None:
        self.w = w
        self.inner = w.sqs.client()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def send_message(self, **kw: Any) -> dict[str, Any]:
        inv = self.w.invocations[-1] if self.w.invocations else None
        if inv is not None and inv.crash == ("push", 0):
            raise LambdaCrash("crashed before pushing a result")
        self.w.on_message(kw["QueueUrl"], kw["MessageBody"])
        return self.w.deliver(self.inner, kw)

    def send_message_batch(self, **kw: Any) -> dict[str, Any]:
        out: dict[str, Any] = {"Successful": [], "Failed": []}
        for e in kw["Entries"]:
            one = {k: v for k, v in e.items() if k != "Id"}
            self.send_message(QueueUrl=kw["QueueUrl"], **one)
            out["Successful"].append({"Id": e["Id"], "MessageId": "x", "MD5OfMessageBody": ""})
        return out


class ReconcilerEc2:
    """The reconciler's EC2 client; under ``reconcile-race`` an invocation runs while it reads."""

    def __init__(self, w: ClientsWorld) -> None:
        self.w = w
        self.inner = w.emu.client(principal=w.roles["reconcile"])
        self.once: Callable[[], None] | None = None

    def __getattr__(self, name: str) -> Any:
        fn = getattr(self.inner, name)

        def call(**kw: Any) -> dict[str, Any]:
            try:
                out: dict[str, Any] = fn(**kw)
            except ClientError as err:
                refused(self.w, "the reconciler", name, err)
                raise
            if name != "describe_instances":
                return out
            if self.once is not None:
                once, self.once = self.once, None
                once()
            if "reconcile-race" in self.w.active:
                self.w.fault("reconcile-race")
                self.w.esm_tick()
            return out

        return call


class ReconcilerSqs:
    def __init__(self, w: ClientsWorld) -> None:
        self.w = w
        self.inner = w.sqs.client()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def delete_queue(self, **kw: Any) -> dict[str, Any]:
        if "queue-delete-failure" in self.w.active:
            self.w.fault("queue-delete-failure")
            raise ClientError({"Error": {"Code": "InternalError", "Message": "injected"}}, "DeleteQueue")
        out: dict[str, Any] = self.inner.delete_queue(**kw)
        return out
