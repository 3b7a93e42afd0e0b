"""DynamoDB implementations of the store ports (token buckets, ledger, leases).

Key schemas come from ``warmpool.names``. Every write that can race is
conditional; a lost race is retried (buckets) or reported (ledger, leases).

Layout
------
buckets table (one per account and region, shared by every cluster):
    ``pk = bucket#<account>#<region>#<action>``; ``tokens, updated_at,
    rate_factor, version``.
ledger table (one per cluster), one partition per node:
    ``pk = node#<cluster>#<node>``, ``sk = ledger``: ``last_seq, outcome
    (JSON), instance_id, updated_at, expires_at`` (TTL);
    ``sk = lease``: ``owner, until, expires_at``; ``sk = flips``: the flip history;
    ``sk = releases``: the allocator's release book (``taken, version, expires_at``);
    and, for named placement, one partition per subnet, ``pk = released#<cluster>#<subnet>``,
    ``sk = <time released>#<address or prefix>``: ``expires_at``, and one per
    CreateNetworkInterface, ``pk = create#<cluster>#<ClientToken>``, ``sk = create``:
    ``call`` (JSON), ``expires_at``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import replace
from decimal import Decimal
from typing import Any, Protocol

from botocore.exceptions import ClientError

from functions.errors import AwsError, ConditionFailed, classify
from warmpool import names
from warmpool.buckets import BucketSpec, BucketState, allot, full, on_throttled, time_until
from warmpool.buckets import try_take as take_tokens
from warmpool.calls import CreateEni
from warmpool.ports import FlipState, LedgerUnread
from warmpool.release_book import ReleaseBook

MAX_CONFLICT_RETRIES = 8


class DynamoApi(Protocol):
    """The DynamoDB calls the stores make (boto3 ``dynamodb`` client subset)."""

    def get_item(self, **kwargs: Any) -> dict[str, Any]: ...
    def put_item(self, **kwargs: Any) -> dict[str, Any]: ...
    def update_item(self, **kwargs: Any) -> dict[str, Any]: ...
    def delete_item(self, **kwargs: Any) -> dict[str, Any]: ...
    def batch_get_item(self, **kwargs: Any) -> dict[str, Any]: ...
    def transact_write_items(self, **kwargs: Any) -> dict[str, Any]: ...
    def scan(self, **kwargs: Any) -> dict[str, Any]: ...
    def query(self, **kwargs: Any) -> dict[str, Any]: ...
    def batch_write_item(self, **kwargs: Any) -> dict[str, Any]: ...


def _n(x: float | int) -> dict[str, str]:
    return {"N": repr(float(x)) if isinstance(x, float) else str(x)}


def _f(item: Mapping[str, Any], key: str, default: float = 0.0) -> float:
    v = item.get(key)
    return float(Decimal(v["N"])) if v else default


def _s(item: Mapping[str, Any], key: str, default: str = "") -> str:
    v = item.get(key)
    return str(v["S"]) if v else default


def _conditional(fn: Callable[[], Any], action: str) -> bool:
    """Run a conditional write; False if the condition failed."""
    try:
        fn()
        return True
    except ClientError as exc:
        err = classify(exc, action)
        if isinstance(err, ConditionFailed):
            return False
        raise err from None


BATCH_GET_ATTEMPTS = 10


class UnreadKeys(AwsError):
    """BatchGetItem left keys in ``UnprocessedKeys`` after bounded retries.
    ``items`` are the rows read; ``keys`` those that were not (never "no row")."""

    def __init__(self, items: list[dict[str, Any]], keys: list[dict[str, Any]]) -> None:
        super().__init__("UnprocessedKeys", f"{len(keys)} keys not read", "BatchGetItem")
        self.items = items
        self.keys = keys


def _batch_get(db: DynamoApi, table: str, keys: list[dict[str, Any]], attrs: str | None) -> list[dict[str, Any]]:
    """BatchGetItem in chunks of 100, following UnprocessedKeys a bounded
    number of times; keys still unprocessed then raise :class:`UnreadKeys`
    (a row not read is unknown, never absent)."""
    out: list[dict[str, Any]] = []
    unread: list[dict[str, Any]] = []
    for i in range(0, len(keys), 100):
        req: dict[str, Any] = {"Keys": keys[i : i + 100], "ConsistentRead": True}
        if attrs:
            req["ProjectionExpression"] = attrs
        pending: dict[str, Any] = {table: req}
        for _ in range(BATCH_GET_ATTEMPTS):
            try:
                resp = db.batch_get_item(RequestItems=pending)
            except ClientError as exc:
                raise classify(exc, "BatchGetItem") from None
            out.extend(resp.get("Responses", {}).get(table, []))
            pending = resp.get("UnprocessedKeys") or {}
            if not pending:
                break
        if pending:
            unread.extend(pending.get(table, {}).get("Keys", []))
    if unread:
        raise UnreadKeys(out, unread)
    return out


def _scan(db: DynamoApi, **kwargs: Any) -> Iterator[dict[str, Any]]:
    start: dict[str, Any] | None = None
    while True:
        req = dict(kwargs)
        if start:
            req["ExclusiveStartKey"] = start
        try:
            resp = db.scan(**req)
        except ClientError as exc:
            raise classify(exc, "Scan") from None
        yield from resp.get("Items", [])
        start = resp.get("LastEvaluatedKey")
        if not start:
            return


# --- token buckets ------------------------------------------------------------


class DynamoBuckets:
    """Shared token buckets, one item per EC2 action (optimistic concurrency on ``version``)."""

    def __init__(
        self,
        db: DynamoApi,
        table: str,
        spec_of: Callable[[str], BucketSpec],
        account: str,
        region: str,
    ) -> None:
        self._db = db
        self._table = table
        self._spec_of = spec_of
        self._scope = f"bucket#{account}#{region}#"

    def _key(self, action: str) -> dict[str, Any]:
        return {names.BUCKETS_PK: {"S": self._scope + action}}

    def _read(self, actions: Sequence[str]) -> dict[str, tuple[BucketState, int] | None]:
        items = _batch_get(self._db, self._table, [self._key(a) for a in actions], None)
        found: dict[str, tuple[BucketState, int] | None] = dict.fromkeys(actions)
        for it in items:
            action = _s(it, names.BUCKETS_PK)[len(self._scope) :]
            found[action] = (
                BucketState(
                    tokens=_f(it, "tokens"),
                    updated_at=_f(it, "updated_at"),
                    rate_factor=_f(it, "rate_factor", 1.0),
                ),
                int(_f(it, "version")),
            )
        return found

    def _put(self, action: str, st: BucketState, version: int | None) -> dict[str, Any]:
        put: dict[str, Any] = {
            "TableName": self._table,
            "Item": {
                **self._key(action),
                "tokens": _n(st.tokens),
                "updated_at": _n(st.updated_at),
                "rate_factor": _n(st.rate_factor),
                "version": _n((version or 0) + 1),
            },
        }
        if version is None:
            put["ConditionExpression"] = "attribute_not_exists(#pk)"
            put["ExpressionAttributeNames"] = {"#pk": names.BUCKETS_PK}
        else:
            put["ConditionExpression"] = "#v = :v"
            put["ExpressionAttributeNames"] = {"#v": "version"}
            put["ExpressionAttributeValues"] = {":v": _n(version)}
        return put

    def _write(self, updates: Mapping[str, tuple[BucketState, int | None]]) -> bool:
        if not updates:
            return True
        if len(updates) == 1:
            ((action, (st, version)),) = updates.items()
            return _conditional(lambda: self._db.put_item(**self._put(action, st, version)), "PutItem")
        items = [{"Put": self._put(a, st, v)} for a, (st, v) in updates.items()]
        return _conditional(lambda: self._db.transact_write_items(TransactItems=items), "TransactWriteItems")

    def load(self, action: str, now: float) -> BucketState:
        got = self._read([action])[action]
        return got[0] if got else full(self._spec_of(action), now)

    def try_take(self, action: str, n: float, now: float) -> tuple[bool, float]:
        spec = self._spec_of(action)
        for _ in range(MAX_CONFLICT_RETRIES):
            try:
                got = self._read([action])[action]
            except UnreadKeys:
                continue
            st, version = got if got else (full(spec, now), None)
            ok, new = take_tokens(st, spec, n, now)
            if not ok:
                return False, time_until(st, spec, n, now)
            if self._write({action: (new, version)}):
                return True, 0.0
        return False, 1.0

    def take_batch(self, requests: Sequence[Mapping[str, float]], now: float) -> list[float]:
        """Grant, in order, the requests the buckets can pay for now; one wait per request.

        One read and one (transactional, conditional) write per attempt.
        """
        actions = sorted({a for r in requests for a, n in r.items() if n > 0})
        if not actions:
            return [0.0] * len(requests)
        for _ in range(MAX_CONFLICT_RETRIES):
            try:
                got = self._read(actions)
            except UnreadKeys:
                continue  # unknown state: like a lost race, read again (never as "full")
            states = {a: (g[0] if g else None) for a, g in got.items()}
            changed, waits = allot(states, self._spec_of, requests, now)
            versions = {a: (g[1] if g else None) for a, g in got.items()}
            updates = {a: (st, versions.get(a)) for a, st in changed.items()}
            if self._write(updates):
                return waits
        return [1.0] * len(requests)

    def throttled(self, action: str, now: float) -> None:
        spec = self._spec_of(action)
        for _ in range(MAX_CONFLICT_RETRIES):
            try:
                got = self._read([action])[action]
            except UnreadKeys:
                continue
            st, version = got if got else (full(spec, now), None)
            if self._write({action: (on_throttled(st, spec, now), version)}):
                return


# --- ledger -------------------------------------------------------------------


def _node_pk(cluster: str, node: str) -> str:
    return f"node#{cluster}#{node}"


class DynamoLedger:
    """What the allocator did per node; ``record`` only moves ``last_seq`` forward."""

    def __init__(self, db: DynamoApi, table: str, ttl_s: float = 7 * 86400.0) -> None:
        self._db = db
        self._table = table
        self._ttl_s = ttl_s

    def _key(self, cluster: str, node: str) -> dict[str, Any]:
        return {names.LEDGER_PK: {"S": _node_pk(cluster, node)}, names.LEDGER_SK: {"S": "ledger"}}

    def last_seq(self, cluster: str, node: str) -> int:
        return self.last_seqs(cluster, [node])[node]

    def last_seqs(self, cluster: str, nodes: list[str]) -> dict[str, int]:
        uniq = sorted(set(nodes))
        out = dict.fromkeys(uniq, -1)
        if not uniq:
            return out
        prefix = f"node#{cluster}#"
        try:
            items = _batch_get(
                self._db, self._table, [self._key(cluster, n) for n in uniq], f"{names.LEDGER_PK}, last_seq"
            )
        except UnreadKeys as err:
            unread = frozenset(_s(k, names.LEDGER_PK)[len(prefix) :] for k in err.keys)
            for it in err.items:
                out[_s(it, names.LEDGER_PK)[len(prefix) :]] = int(_f(it, "last_seq", -1))
            raise LedgerUnread(unread, {n: v for n, v in out.items() if n not in unread}) from None
        for it in items:
            out[_s(it, names.LEDGER_PK)[len(prefix) :]] = int(_f(it, "last_seq", -1))
        return out

    def record(self, cluster: str, node: str, seq: int, outcome: dict[str, Any], now: float) -> bool:
        body = json.dumps(outcome, separators=(",", ":"), default=str)[:300_000]
        return _conditional(
            lambda: self._db.update_item(
                TableName=self._table,
                Key=self._key(cluster, node),
                UpdateExpression="SET last_seq = :seq, outcome = :o, instance_id = :i, updated_at = :now, #ttl = :ttl",
                ConditionExpression="attribute_not_exists(last_seq) OR last_seq < :seq",
                ExpressionAttributeNames={"#ttl": names.LEDGER_TTL},
                ExpressionAttributeValues={
                    ":seq": _n(seq),
                    ":o": {"S": body},
                    ":i": {"S": str(outcome.get("instance_id", ""))},
                    ":now": _n(now),
                    ":ttl": _n(math.ceil(now + self._ttl_s)),
                },
            ),
            "UpdateItem",
        )

    def forget(self, cluster: str, node: str, *, instance_id: str, last_seq: int) -> bool:
        """Delete the entry only if it is still (instance_id, last_seq): a name
        reused by a new instance, or a node served since, keeps its entry."""
        return _conditional(
            lambda: self._db.delete_item(
                TableName=self._table,
                Key=self._key(cluster, node),
                ConditionExpression="instance_id = :i AND last_seq = :s",
                ExpressionAttributeValues={":i": {"S": instance_id}, ":s": _n(last_seq)},
            ),
            "DeleteItem",
        )

    def nodes(self, cluster: str) -> dict[str, int]:
        return {n: int(e["last_seq"]) for n, e in self.entries(cluster).items()}

    def entries(self, cluster: str) -> dict[str, dict[str, Any]]:
        """Every node's entry: ``last_seq, outcome, instance_id, updated_at``."""
        prefix = f"node#{cluster}#"
        out: dict[str, dict[str, Any]] = {}
        for it in _scan(
            self._db,
            TableName=self._table,
            FilterExpression="begins_with(#pk, :p) AND #sk = :sk",
            ExpressionAttributeNames={"#pk": names.LEDGER_PK, "#sk": names.LEDGER_SK},
            ExpressionAttributeValues={":p": {"S": prefix}, ":sk": {"S": "ledger"}},
        ):
            raw = _s(it, "outcome", "{}")
            try:
                outcome = json.loads(raw)
            except ValueError:
                outcome = {}
            out[_s(it, names.LEDGER_PK)[len(prefix) :]] = {
                "last_seq": int(_f(it, "last_seq", -1)),
                "outcome": outcome,
                "instance_id": _s(it, "instance_id"),
                "updated_at": _f(it, "updated_at"),
            }
        return out


class DynamoFlips:
    """Flip histories in the ledger table, beside each instance's ledger row (same
    partition key, sort key ``flips``; ``entries`` and ``forget`` see only ``ledger``
    rows), expiring through the table's TTL."""

    SK = "flips"

    def __init__(self, db: DynamoApi, table: str) -> None:
        self._db = db
        self._table = table

    def _key(self, cluster: str, iid: str) -> dict[str, Any]:
        return {names.LEDGER_PK: {"S": _node_pk(cluster, iid)}, names.LEDGER_SK: {"S": self.SK}}

    def load(self, cluster: str, instance_ids: Sequence[str]) -> dict[str, FlipState]:
        uniq = sorted(set(instance_ids))
        if not uniq:
            return {}
        # Rows left unread (UnprocessedKeys after the bounded retries) raise UnreadKeys: the
        # caller then neither trusts nor overwrites any of them this batch.
        items = _batch_get(self._db, self._table, [self._key(cluster, i) for i in uniq], None)
        prefix = f"node#{cluster}#"
        out: dict[str, FlipState] = {}
        for it in items:
            try:
                flips = tuple(float(x) for x in json.loads(_s(it, "flips", "[]")))
            except (ValueError, TypeError):
                flips = ()
            out[_s(it, names.LEDGER_PK)[len(prefix) :]] = FlipState(_s(it, "last_kind"), flips, _f(it, "damped_until"))
        return out

    def save(self, cluster: str, instance_id: str, state: FlipState, expires_at: float) -> None:
        self._db.put_item(
            TableName=self._table,
            Item={
                **self._key(cluster, instance_id),
                "last_kind": {"S": state.last_kind},
                "flips": {"S": json.dumps(list(state.flips))},
                "damped_until": _n(state.damped_until),
                names.LEDGER_TTL: _n(math.ceil(expires_at)),
            },
        )


class DynamoReleaseBooks:
    """The allocator's release books (``warmpool/release_book.py``) in the ledger table, beside
    each instance's ledger row (same partition key, sort key ``releases``; ``entries`` and
    ``forget`` see only ``ledger`` rows), read with ``ConsistentRead``, written conditionally on
    their ``version``, expiring through the table's TTL."""

    SK = "releases"

    def __init__(self, db: DynamoApi, table: str) -> None:
        self._db = db
        self._table = table

    def _key(self, cluster: str, iid: str) -> dict[str, Any]:
        return {names.LEDGER_PK: {"S": _node_pk(cluster, iid)}, names.LEDGER_SK: {"S": self.SK}}

    def load(self, cluster: str, instance_ids: Sequence[str]) -> dict[str, ReleaseBook]:
        uniq = sorted(set(instance_ids))
        out = {i: ReleaseBook() for i in uniq}
        if not uniq:
            return out
        # UnreadKeys (an AwsError) if rows stay unprocessed; ValueError if one cannot be parsed.
        items = _batch_get(self._db, self._table, [self._key(cluster, i) for i in uniq], None)
        prefix = f"node#{cluster}#"
        for it in items:
            iid = _s(it, names.LEDGER_PK)[len(prefix) :]
            out[iid] = ReleaseBook.loads(_s(it, "taken", "[]"), int(_f(it, "version")))
        return out

    def save(self, cluster: str, instance_id: str, book: ReleaseBook, expires_at: float) -> ReleaseBook | None:
        stored = replace(book, version=book.version + 1)
        cond: dict[str, Any] = (
            {"ConditionExpression": "attribute_not_exists(version)"}
            if book.version == 0
            else {"ConditionExpression": "version = :v", "ExpressionAttributeValues": {":v": _n(book.version)}}
        )
        ok = _conditional(
            lambda: self._db.put_item(
                TableName=self._table,
                Item={
                    **self._key(cluster, instance_id),
                    "taken": {"S": stored.dumps()},
                    "version": _n(stored.version),
                    names.LEDGER_TTL: _n(math.ceil(expires_at)),
                },
                **cond,
            ),
            "PutItem",
        )
        return stored if ok else None

    # --- named placement's records (``warmpool.ports.PlacementRecords``) ----------------

    def hold(self, cluster: str, subnet_id: str, keys: Sequence[str], at: float, expires_at: float) -> None:
        pk = {"S": f"released#{cluster}#{subnet_id}"}
        puts = [
            {
                "PutRequest": {
                    "Item": {
                        names.LEDGER_PK: pk,
                        names.LEDGER_SK: {"S": f"{_held_at(at)}#{k}"},
                        names.LEDGER_TTL: _n(math.ceil(expires_at)),
                    }
                }
            }
            for k in sorted(set(keys))
        ]
        for i in range(0, len(puts), 25):
            pending: dict[str, Any] = {self._table: puts[i : i + 25]}
            for _ in range(BATCH_GET_ATTEMPTS):
                try:
                    resp = self._db.batch_write_item(RequestItems=pending)
                except ClientError as exc:
                    raise classify(exc, "BatchWriteItem") from None
                pending = resp.get("UnprocessedItems") or {}
                if not pending:
                    break
            if pending:
                raise AwsError("UnprocessedItems", f"{len(pending[self._table])} holds not written", "BatchWriteItem")

    def held(self, cluster: str, subnet_id: str, since: float) -> frozenset[str]:
        out: set[str] = set()
        start: dict[str, Any] | None = None
        while True:
            # The sort key starts with the time: the read takes only the hold's items, whatever
            # the table's TTL has not deleted yet (it may lag by days).
            req: dict[str, Any] = {
                "TableName": self._table,
                "KeyConditionExpression": "#pk = :pk AND #sk >= :since",
                "ExpressionAttributeNames": {"#pk": names.LEDGER_PK, "#sk": names.LEDGER_SK},
                "ExpressionAttributeValues": {
                    ":pk": {"S": f"released#{cluster}#{subnet_id}"},
                    ":since": {"S": _held_at(max(since, 0.0))},
                },
                "ConsistentRead": True,
            }
            if start:
                req["ExclusiveStartKey"] = start
            try:
                resp = self._db.query(**req)
            except ClientError as exc:
                raise classify(exc, "Query") from None
            out.update(_s(it, names.LEDGER_SK).split("#", 1)[-1] for it in resp.get("Items", []))
            start = resp.get("LastEvaluatedKey")
            if not start:
                return frozenset(out)

    def _create_key(self, cluster: str, token: str) -> dict[str, Any]:
        return {names.LEDGER_PK: {"S": f"create#{cluster}#{token}"}, names.LEDGER_SK: {"S": "create"}}

    def put_create(self, cluster: str, call: CreateEni, expires_at: float) -> None:
        try:
            self._db.put_item(
                TableName=self._table,
                Item={
                    **self._create_key(cluster, call.client_token),
                    "call": {"S": dumps_create(call)},
                    names.LEDGER_TTL: _n(math.ceil(expires_at)),
                },
            )
        except ClientError as exc:
            raise classify(exc, "PutItem") from None

    def get_create(self, cluster: str, client_token: str) -> CreateEni | None:
        try:
            resp = self._db.get_item(
                TableName=self._table, Key=self._create_key(cluster, client_token), ConsistentRead=True
            )
        except ClientError as exc:
            raise classify(exc, "GetItem") from None
        item = resp.get("Item")
        return loads_create(_s(item, "call")) if item else None


def _held_at(at: float) -> str:
    """A release's time as its sort key starts: fixed width, so keys sort by time (epoch seconds
    below 10^10)."""
    return f"{at:014.3f}"


def dumps_create(call: CreateEni) -> str:
    """A CreateEni as stored (JSON of its fields)."""
    return json.dumps(
        {
            "subnet_id": call.subnet_id,
            "device_index": call.device_index,
            "network_card": call.network_card,
            "ips": call.ips,
            "prefixes": call.prefixes,
            "client_token": call.client_token,
            "at_ips": list(call.at_ips),
            "at_prefixes": list(call.at_prefixes),
        },
        separators=(",", ":"),
    )


def loads_create(raw: str) -> CreateEni:
    """The stored form back; ``ValueError`` on anything else."""
    try:
        d = json.loads(raw)
        return CreateEni(
            subnet_id=str(d["subnet_id"]),
            device_index=int(d["device_index"]),
            network_card=int(d["network_card"]),
            ips=int(d["ips"]),
            prefixes=int(d["prefixes"]),
            client_token=str(d["client_token"]),
            at_ips=tuple(str(x) for x in d["at_ips"]),
            at_prefixes=tuple(str(x) for x in d["at_prefixes"]),
        )
    except (KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"bad stored create {raw[:80]!r}") from exc


# --- leases -------------------------------------------------------------------


class DynamoLeases:
    """A lease per node (same table as the ledger, ``sk = lease``), claimed with a conditional put."""

    def __init__(self, db: DynamoApi, table: str) -> None:
        self._db = db
        self._table = table

    def _key(self, cluster: str, node: str) -> dict[str, Any]:
        return {names.LEDGER_PK: {"S": _node_pk(cluster, node)}, names.LEDGER_SK: {"S": "lease"}}

    def claim(self, cluster: str, node: str, owner: str, now: float, ttl_s: float) -> bool:
        return _conditional(
            lambda: self._db.put_item(
                TableName=self._table,
                Item={
                    **self._key(cluster, node),
                    "owner": {"S": owner},
                    "until": _n(now + ttl_s),
                    names.LEDGER_TTL: _n(math.ceil(now + ttl_s + 3600)),
                },
                ConditionExpression="attribute_not_exists(#pk) OR #until <= :now OR #owner = :owner",
                ExpressionAttributeNames={"#pk": names.LEDGER_PK, "#until": "until", "#owner": "owner"},
                ExpressionAttributeValues={":now": _n(now), ":owner": {"S": owner}},
            ),
            "PutItem",
        )

    def release(self, cluster: str, node: str, owner: str) -> None:
        _conditional(
            lambda: self._db.delete_item(
                TableName=self._table,
                Key=self._key(cluster, node),
                ConditionExpression="#owner = :owner",
                ExpressionAttributeNames={"#owner": "owner"},
                ExpressionAttributeValues={":owner": {"S": owner}},
            ),
            "DeleteItem",
        )

    def sweep(self, cluster: str, now: float) -> int:
        """Delete leases that expired (a crashed invocation's); returns how many."""
        gone = 0
        for it in _scan(
            self._db,
            TableName=self._table,
            FilterExpression="begins_with(#pk, :p) AND #sk = :sk AND #until <= :now",
            ExpressionAttributeNames={"#pk": names.LEDGER_PK, "#sk": names.LEDGER_SK, "#until": "until"},
            ExpressionAttributeValues={":p": {"S": f"node#{cluster}#"}, ":sk": {"S": "lease"}, ":now": _n(now)},
        ):
            key = {names.LEDGER_PK: it[names.LEDGER_PK], names.LEDGER_SK: it[names.LEDGER_SK]}
            gone += _conditional(
                lambda key=key, it=it: self._db.delete_item(  # type: ignore[misc]
                    TableName=self._table,
                    Key=key,
                    ConditionExpression="#until = :u",
                    ExpressionAttributeNames={"#until": "until"},
                    ExpressionAttributeValues={":u": it["until"]},
                ),
                "DeleteItem",
            )
        return gone


def create_tables(db: Any, ledger_table: str, buckets_table: str) -> None:
    """Create both tables (tests and the local stack; the CDK stack owns production)."""
    db.create_table(
        TableName=ledger_table,
        KeySchema=[
            {"AttributeName": names.LEDGER_PK, "KeyType": "HASH"},
            {"AttributeName": names.LEDGER_SK, "KeyType": "RANGE"},
        ],
        AttributeDefinitions=[
            {"AttributeName": names.LEDGER_PK, "AttributeType": "S"},
            {"AttributeName": names.LEDGER_SK, "AttributeType": "S"},
        ],
        BillingMode="PAY_PER_REQUEST",
    )
    db.create_table(
        TableName=buckets_table,
        KeySchema=[{"AttributeName": names.BUCKETS_PK, "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": names.BUCKETS_PK, "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
