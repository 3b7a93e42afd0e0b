"""Where the datastore's checkpoint lives, and what it may contain.

Kept apart from the datastore (as the VPC CNI keeps its ``Checkpointer`` in
``pkg/ipamd/datastore/checkpoint.go``): a :class:`CheckpointStore` port, an
in-memory store (tests, the simulation), and :class:`FileCheckpoint`, a JSON
file replaced atomically.

:func:`parse` checks a loaded checkpoint against :class:`CheckpointFile`
before the datastore takes anything from it: a field of the wrong type would
break the agent later, far from the cause. Anything malformed is refused
with :class:`CheckpointError` (the agent then rebuilds from IMDS and the host).
Every field added since the first version is optional, so a checkpoint
written by an older agent still loads.

Damage that still parses and validates (a digit flipped in an address, a pod's
entry dropped, a cut at a JSON boundary) is caught by the checkpoint's
``checksum``: :func:`encode` writes the SHA-256 of the canonical JSON of
everything else in it (:func:`checksum`), and :func:`parse` refuses a file
whose checksum does not match (:class:`CheckpointError`: the rebuild). A file
without one was written by an agent before it; it is read as before (its
pod entries are then checked against the host's pod wiring at start, as every
restored checkpoint is: :func:`node_agent.agent.restore_checked`). An older
agent ignores the field, so a rollback still reads a newer agent's file.
"""

from __future__ import annotations

import errno
import hashlib
import ipaddress
import json
import math
import os
import shutil
import tempfile
from collections.abc import Iterable
from typing import Annotated, Any, Protocol

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    Strict,
    TypeAdapter,
    ValidationError,
    field_validator,
)

from node_agent.records import EniRecord

CHECKPOINT_VERSION = 1
RECOVERED_CHECKPOINT_VERSION = 2
"""Written only while recovered holders exist: an older agent would silently drop
them (and hand their addresses out again), so it must refuse such a checkpoint."""
READABLE_VERSIONS = (CHECKPOINT_VERSION, RECOVERED_CHECKPOINT_VERSION)
KEEP_CORRUPT = 3
"""Damaged checkpoints kept aside (``<path>.corrupt-<unix time>``); older ones are deleted."""


CHECKSUM_KEY = "checksum"
"""``sha256:<hex>`` of the checkpoint's canonical JSON without this key (:func:`checksum`)."""


class CheckpointError(ValueError):
    """A checkpoint that cannot be read (wrong version, corrupt)."""


class CheckpointWriteError(OSError):
    """A checkpoint that could not be written (``ENOSPC``, ``EIO``, ...). The datastore's
    memory is then ahead of its disk: it stays *dirty* and is written again by the next
    change or :meth:`node_agent.datastore.Datastore.flush`; until then nothing that depends
    on it may leave the agent (an ADD's answer, a report, a result's acknowledgement)."""


class CheckpointStore(Protocol):
    """Where the datastore keeps its checkpoint."""

    def load(self) -> dict[str, Any] | None: ...
    def save(self, data: dict[str, Any]) -> None: ...


class MemoryCheckpoint:
    """In memory (tests, bench): ``data`` is the last saved snapshot."""

    def __init__(self, data: dict[str, Any] | None = None) -> None:
        self.data = data
        self.saves = 0

    def load(self) -> dict[str, Any] | None:
        return json.loads(json.dumps(self.data)) if self.data is not None else None

    def save(self, data: dict[str, Any]) -> None:
        self.data = data
        self.saves += 1


class FileCheckpoint:
    """A JSON file replaced atomically: temp file in the same directory, fsync, rename, fsync dir."""

    def __init__(self, path: str) -> None:
        self.path = path

    def load(self) -> dict[str, Any] | None:
        try:
            with open(self.path, encoding="utf-8") as f:
                data = json.load(f)
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            raise CheckpointError(f"{self.path}: {exc}") from None
        if not isinstance(data, dict):
            raise CheckpointError(f"{self.path}: not an object")
        return data

    def keep_aside(self, now: float, keep: int = KEEP_CORRUPT) -> str:
        """Keep the damaged file as ``<path>.corrupt-<unix time>`` for the operator and
        delete all but the newest ``keep`` such files; returns the new name.

        A hard link (a copy where links are not supported), so the damaged file
        stays in place until a rebuilt checkpoint replaces it atomically: a
        crash during the rebuild finds it again and rebuilds again, never an
        empty start. :class:`CheckpointError` if it cannot be kept.
        """
        base = f"{self.path}.corrupt-{int(now)}"
        aside, n = base, 0
        try:
            while True:
                try:
                    os.link(self.path, aside)
                    break
                except FileExistsError:
                    n += 1
                    aside = f"{base}-{n}"
                except OSError as exc:
                    if exc.errno not in (errno.EPERM, errno.EXDEV, errno.EOPNOTSUPP, errno.EMLINK):
                        raise
                    with open(self.path, "rb") as src, open(aside, "xb") as dst:
                        shutil.copyfileobj(src, dst)
                        dst.flush()
                        os.fsync(dst.fileno())
                    break
        except OSError as exc:
            raise CheckpointError(f"{self.path}: cannot keep the damaged file aside: {exc}") from None
        self._prune(keep)
        return aside

    def _prune(self, keep: int) -> None:
        directory = os.path.dirname(self.path) or "."
        stem = os.path.basename(self.path) + ".corrupt-"

        def age(name: str) -> tuple[int, int]:
            t, _, n = name.removeprefix(stem).partition("-")
            return (int(t) if t.isdigit() else 0, int(n) if n.isdigit() else 0)

        old = sorted((f for f in os.listdir(directory) if f.startswith(stem)), key=age)
        for name in old[: max(0, len(old) - keep)]:
            try:
                os.unlink(os.path.join(directory, name))
            except FileNotFoundError:
                pass

    def save(self, data: dict[str, Any]) -> None:
        directory = os.path.dirname(self.path) or "."
        os.makedirs(directory, mode=0o700, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".checkpoint-", dir=directory)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(data, f, separators=(",", ":"))
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass
            raise
        dfd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)


# --- writing -------------------------------------------------------------------------------


def encode(
    meta: dict[str, Any],
    enis: Iterable[EniRecord],
    recovered: dict[str, tuple[str, float]],
    recent: dict[str, Any] | None,
    parked: list[dict[str, Any]],
) -> dict[str, Any]:
    """The checkpoint for this state (what :class:`CheckpointFile` reads back). Version 2
    only while recovered holders exist (see :data:`RECOVERED_CHECKPOINT_VERSION`); the
    optional parts are left out when empty."""
    out: dict[str, Any] = {
        "version": RECOVERED_CHECKPOINT_VERSION if recovered else CHECKPOINT_VERSION,
        "meta": dict(meta),
        "enis": [_encode_eni(e) for e in enis],
    }
    if recovered:
        out["recovered"] = {ip: [h, since] for ip, (h, since) in sorted(recovered.items())}
    if recent is not None:  # agents before it lose only the protection against a lagging IMDS
        out["recent"] = recent
    if parked:
        out["parked"] = json.loads(json.dumps(parked))
    out[CHECKSUM_KEY] = checksum(out)
    return out


def checksum(data: dict[str, Any]) -> str:
    """``sha256:<hex>`` of ``data`` without its :data:`CHECKSUM_KEY`, as canonical JSON (keys
    sorted, no spaces, ASCII): the same for the dict written and the one read back."""
    body = {k: v for k, v in data.items() if k != CHECKSUM_KEY}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return "sha256:" + hashlib.sha256(text.encode("ascii")).hexdigest()


def check_checksum(data: dict[str, Any]) -> bool:
    """True if ``data`` carries a checksum and it matches; False if it carries none (written
    by an agent before checksums); :class:`CheckpointError` if it does not match."""
    if CHECKSUM_KEY not in data:
        return False
    try:
        want = checksum(data)
    except (TypeError, ValueError) as exc:  # not JSON-serialisable: not what a file reads back as
        raise CheckpointError(f"corrupt checkpoint: {exc}") from None
    if data[CHECKSUM_KEY] != want:
        raise CheckpointError(f"checkpoint checksum mismatch: {data[CHECKSUM_KEY]!r}, content is {want}")
    return True


def _encode_eni(e: EniRecord) -> dict[str, Any]:
    return {
        "info": e.info.__dict__,
        "added_at": e.added_at,
        "ready": e.ready,
        "ips": list(e.ips),
        "prefixes": list(e.prefixes),
        # Free addresses are left out (the lists above say them), and so are unset fields;
        # 0.0 is a time like any other (virtual clocks start there), except the default
        # ``assigned_at`` of a free address.
        "addrs": [
            {
                k: v
                for k, v in a.__dict__.items()
                if v is not None
                and v != ""
                and k != "recovered"
                and not (k == "assigned_at" and v == 0.0 and not a.container_id)
            }
            for a in e.addrs.values()
            if a.container_id or a.freed_at is not None or a.quarantined_at is not None
        ],
    }


# --- the format ----------------------------------------------------------------------------
# Each type below accepts exactly what the agent has always accepted, and nothing else.


def _not_negative(v: float) -> float:
    if v < 0:  # NaN passes, as it always has (only the expiry times below must be finite)
        raise ValueError(f"{v!r} is negative")
    return v


def _finite(v: float) -> float:
    if not math.isfinite(v):
        raise ValueError(f"expiry {v!r}")  # never expiring: ignored forever
    return v


def _number(v: Any) -> float:
    """``added_at`` has always been read with ``float()``: numbers, numeric strings, booleans."""
    try:
        return float(v)
    except (TypeError, ValueError, OverflowError) as exc:
        raise ValueError(f"{v!r} is not a time: {exc}") from None


def _address(v: str) -> str:
    ipaddress.IPv4Address(v)
    return v


def _network(v: str) -> str:
    """An address or a prefix (``10.0.0.5`` is the network ``10.0.0.5/32``)."""
    ipaddress.IPv4Network(v)
    return v


def _subnet(v: str) -> str:
    ipaddress.IPv4Network(v, strict=False)
    return v


def _eni_id(v: str) -> str:
    if not v.startswith("eni-"):
        raise ValueError(f"{v!r} is not an ENI id")
    return v


Text = Annotated[str, Strict()]
Count = Annotated[int, Strict(), AfterValidator(_not_negative)]
"""A whole number >= 0 (not a boolean)."""
Time = Annotated[float, Strict(), AfterValidator(_not_negative)]
"""A number >= 0 (int or float, not a boolean); read as a float."""
Address = Annotated[str, Strict(), AfterValidator(_address)]
Network = Annotated[str, Strict(), AfterValidator(_network)]


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True)


class EniInfoEntry(_Model):
    """:class:`node_agent.records.EniInfo`, field for field (no others)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    eni_id: Text
    device_index: Count
    mac: Text
    primary_ip: Text
    subnet_id: Text = ""
    subnet_cidr: Annotated[str, Strict(), AfterValidator(_subnet)]
    """Defaults to '' in :class:`EniInfo`, but '' is no subnet: required here."""
    network_card: Count = 0


class AddrEntry(_Model):
    """An address a pod holds, or that is cooling down or quarantined (free ones are not written).
    ``prefix`` (written for addresses of a prefix) is not read back: the ENI's prefixes say it."""

    ip: Any
    """Looked up among the ENI's addresses; an entry for one it does not have is ignored."""
    container_id: Text = ""
    ifname: Text = ""
    netns: Text = ""
    assigned_at: Time = 0.0
    freed_at: Time | None = None
    quarantined_at: Time | None = None
    network: Text = ""
    """The pod's CNI network name (optional: older agents neither write nor read it)."""


class EniEntry(_Model):
    info: EniInfoEntry
    added_at: Annotated[float, BeforeValidator(_number)]
    ready: Annotated[bool, BeforeValidator(bool)] = True
    ips: list[Address] = Field(default_factory=list)
    prefixes: list[Network] = Field(default_factory=list)
    addrs: list[AddrEntry] = Field(default_factory=list)


def _seq_or_none(v: int) -> int:
    if v < -1:
        raise ValueError(f"{v!r} is below -1")
    return v


ReplySeq = Annotated[int, Strict(), AfterValidator(_seq_or_none)]
"""A report seq, or -1: no report (the agent's own take-back found the address gone)."""
Expiry = tuple[Annotated[float, Strict(), AfterValidator(_not_negative), AfterValidator(_finite)], ReplySeq]
"""``[until, in_reply_to]``: until when, and the ``in_reply_to`` of the result that said so
(-1 when no result did: ``PoolController._take_back``)."""


class RecentEntry(_Model):
    """What EC2 said that IMDS may not show yet (all optional: absent before agents knew them)."""

    released: dict[Annotated[str, AfterValidator(_network)], Expiry] = Field(default_factory=dict)
    deleted: dict[Annotated[str, AfterValidator(_eni_id)], Expiry] = Field(default_factory=dict)
    granted: dict[Annotated[str, AfterValidator(_network)], Expiry] = Field(default_factory=dict)
    released_absent: list[Annotated[str, AfterValidator(_network)]] = Field(default_factory=list)
    """Released keys IMDS has been seen without since their release (absent before agents kept it)."""
    deleted_absent: list[Annotated[str, AfterValidator(_eni_id)]] = Field(default_factory=list)
    """Deleted ENIs IMDS has been seen without since their deletion (likewise)."""


def _holder(v: tuple[str, float]) -> tuple[str, float]:
    if not v[0]:
        raise ValueError("empty holder")
    return v


class CheckpointFile(_Model):
    """The checkpoint as :meth:`node_agent.datastore.Datastore.snapshot` writes it.

    Optional parts, by age: ``recent`` and ``parked`` (both absent in the first
    format), ``recovered`` (only in version 2). ``meta`` is free-form for its
    owners; only the controller's report sequence (``last_seq``) is checked.
    """

    version: int
    meta: dict[str, Any] = Field(default_factory=dict)
    enis: list[EniEntry]
    recovered: dict[Address, Annotated[tuple[Text, Time], AfterValidator(_holder)]] = Field(default_factory=dict)
    """Address -> [recovered holder (host veth name or ``?``), since]."""
    recent: RecentEntry = Field(default_factory=RecentEntry)
    parked: list[dict[str, Any]] = Field(default_factory=list)
    """Claims waiting for IMDS, as the controller wrote them (it checks them when it reads them back)."""
    checksum: Text | None = None
    """:func:`checksum` of the rest (checked by :func:`parse`); absent in files of agents before it."""

    @field_validator("meta")
    @classmethod
    def _last_seq(cls, meta: dict[str, Any]) -> dict[str, Any]:
        if "last_seq" in meta:  # the controller's report sequence
            _COUNT.validate_python(meta["last_seq"])
        return meta


_COUNT: TypeAdapter[int] = TypeAdapter(Count)


def check_version(data: dict[str, Any]) -> None:
    """:class:`CheckpointError` unless ``data`` is of a version this agent reads."""
    if data.get("version") not in READABLE_VERSIONS:
        raise CheckpointError(f"checkpoint version {data.get('version')!r}, expected {CHECKPOINT_VERSION}")


def parse(data: dict[str, Any]) -> CheckpointFile:
    """``data`` checked: :class:`CheckpointError` if its version is not one this agent reads,
    if its checksum does not match its content, or if anything in it is malformed."""
    check_version(data)
    check_checksum(data)
    try:
        return CheckpointFile.model_validate(data)
    except ValidationError as exc:
        raise CheckpointError(f"corrupt checkpoint: {exc}") from None
