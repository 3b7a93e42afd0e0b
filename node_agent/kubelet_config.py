"""The kubelet's own ``maxPods``, read from the node's files (issue 24).

The agent has no Kubernetes API access, so it reads what the node's bootstrap wrote
(docs/agent.md, "The kubelet's max pods"):

* a ``KubeletConfiguration`` file, the first of ``WARMPOOL_KUBELET_CONFIG`` that exists:
  ``/etc/kubernetes/kubelet/config.json`` (AL2023, nodeadm), ``kubelet-config.json`` (AL2,
  ``bootstrap.sh``), ``config`` (Bottlerocket, YAML); JSON, or YAML read for its top-level
  ``maxPods`` line;
* its drop-in directory, ``<file>.d/*.conf`` in lexical order, each one's ``maxPods`` over the
  file's (the kubelet's ``--config-dir``, which nodeadm points at ``config.json.d``);
* the kubelet's command-line flags where the node keeps them (``WARMPOOL_KUBELET_FLAGS``, by default
  ``/etc/systemd/system/kubelet.service.d/*.conf``: AL2's ``KUBELET_EXTRA_ARGS``): a
  ``--max-pods`` there wins over every file, as the kubelet's flags win over its config; the last one wins.

Pure parsing (:func:`parse_config`, :func:`parse_flags`, :func:`resolve`) apart from
:func:`read`, which never raises: a file that is missing, unreadable or not understood gives no
value, and a value the agent does not understand is never guessed (too low a value would keep
addresses from pods the kubelet admits; no value leaves the cluster's ceiling as it was).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from warmpool.messages import MAX_KUBELET_MAX_PODS

DEFAULT_CONFIG_FILES = (
    "/etc/kubernetes/kubelet/config.json",
    "/etc/kubernetes/kubelet/kubelet-config.json",
    "/etc/kubernetes/kubelet/config",
)
DEFAULT_FLAG_FILES = ("/etc/systemd/system/kubelet.service.d",)
MAX_FILE_BYTES = 1 << 20
"""A kubelet config or flags file larger than this is not read (they are a few KiB)."""
MAX_DROP_INS = 64

_YAML_LINE = re.compile(r"^maxPods[ \t]*:[ \t]*(?P<v>[^#\s][^#]*?)?[ \t]*(?:#.*)?$")
_FLAG = re.compile(r"(?:^|[\s'\"=])--max-pods(?:=|[ \t]+)['\"]?(?P<v>[^\s'\"\\]+)")


class KubeletConfigError(ValueError):
    """A file that names ``maxPods`` in a way the agent does not take; the message says why."""


@dataclass(frozen=True)
class Found:
    """What :func:`read` found: ``max_pods`` (None: not known, not sent) and how."""

    max_pods: int | None
    source: str
    """The file or flag the value came from, or why there is none."""


def _checked(raw: object, where: str) -> int:
    if isinstance(raw, bool) or not isinstance(raw, int):
        raise KubeletConfigError(f"{where}: maxPods {raw!r} is not a whole number")
    if not 1 <= raw <= MAX_KUBELET_MAX_PODS:
        raise KubeletConfigError(f"{where}: maxPods {raw} is outside 1..{MAX_KUBELET_MAX_PODS}")
    return raw


def parse_config(text: str, where: str = "config") -> int | None:
    """``maxPods`` of one KubeletConfiguration (a file or a drop-in); None when it sets none.

    JSON when it parses as JSON (an object); otherwise YAML, read only for a top-level
    ``maxPods: N`` line (the agent carries no YAML library; nested keys are indented, so a
    line at column 0 is the document's own key). 0 is the kubelet's "unset" (its defaulting
    fills 110 in), so it counts as none. :class:`KubeletConfigError` for anything else."""
    stripped = text.lstrip()
    if stripped.startswith("{"):
        try:
            obj = json.loads(text)
        except ValueError as exc:
            raise KubeletConfigError(f"{where}: not JSON ({str(exc)[:80]})") from None
        if not isinstance(obj, dict):
            raise KubeletConfigError(f"{where}: not a JSON object")
        if "maxPods" not in obj or obj["maxPods"] is None or obj["maxPods"] == 0:
            return None
        return _checked(obj["maxPods"], where)
    values = [m.group("v") for line in text.splitlines() if (m := _YAML_LINE.match(line.rstrip("\r")))]
    if len(values) > 1:
        raise KubeletConfigError(f"{where}: maxPods set {len(values)} times")
    if not values or values[0] in (None, "0", "null", "~"):
        return None
    v = values[0]
    if not re.fullmatch(r"[0-9]{1,9}", v):
        raise KubeletConfigError(f"{where}: maxPods {v!r} is not a whole number")
    return _checked(int(v), where)


def parse_flags(text: str, where: str = "flags") -> int | None:
    """The last ``--max-pods=N`` (or ``--max-pods N``) in a systemd drop-in or environment file;
    None when there is none. :class:`KubeletConfigError` when the last one is not a whole number in range."""
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
    values = [m.group("v") for line in lines for m in _FLAG.finditer(line)]
    if not values:
        return None
    v = values[-1]
    if not re.fullmatch(r"[0-9]{1,9}", v):
        raise KubeletConfigError(f"{where}: --max-pods {v!r} is not a whole number")
    return _checked(int(v), where)


def resolve(config: int | None, drop_ins: Sequence[int | None], flags: Sequence[int | None]) -> int | None:
    """The kubelet's max pods from its layers: the file, each drop-in over it in order, then the
    flags over both (the last one set wins in each)."""
    value = config
    for v in (*drop_ins, *flags):
        if v is not None:
            value = v
    return value


def _text(path: Path) -> str:
    with path.open("rb") as f:
        data = f.read(MAX_FILE_BYTES + 1)
    if len(data) > MAX_FILE_BYTES:
        raise KubeletConfigError(f"{path}: larger than {MAX_FILE_BYTES} bytes")
    return data.decode("utf-8", errors="replace")


def _listing(path: Path, suffix: str) -> list[Path]:
    """Files ending in ``suffix`` in directory ``path``, in lexical order (none when it is not a directory)."""
    if not path.is_dir():
        return []
    files = sorted(p for p in path.iterdir() if p.name.endswith(suffix) and p.is_file())
    if len(files) > MAX_DROP_INS:
        raise KubeletConfigError(f"{path}: more than {MAX_DROP_INS} files")
    return files


def read(config_files: Sequence[str], flag_files: Sequence[str]) -> Found:
    """The kubelet's max pods from this node's files; never raises (module docstring)."""
    try:
        return _read(config_files, flag_files)
    except (OSError, KubeletConfigError) as exc:
        return Found(None, f"not sent: {exc}")


def _read(config_files: Sequence[str], flag_files: Sequence[str]) -> Found:
    config_path = next((Path(p) for p in config_files if p and os.path.isfile(p)), None)
    config: int | None = None
    drop_ins: list[tuple[str, int | None]] = []
    if config_path is not None:
        config = parse_config(_text(config_path), str(config_path))
        for p in _listing(config_path.with_name(config_path.name + ".d"), ".conf"):
            drop_ins.append((str(p), parse_config(_text(p), str(p))))
    flags: list[tuple[str, int | None]] = []
    for name in flag_files:
        if not name:
            continue
        path = Path(name)
        for p in _listing(path, ".conf") if path.is_dir() else ([path] if path.is_file() else []):
            flags.append((str(p), parse_flags(_text(p), str(p))))
    value = resolve(config, [v for _, v in drop_ins], [v for _, v in flags])
    if value is None:
        looked = ", ".join(p for p in config_files if p) or "no config file"
        why = f"{config_path} sets no maxPods" if config_path is not None else f"none of {looked} exists"
        return Found(None, f"not sent: {why}, and no --max-pods flag")
    source = next(
        (p for p, v in reversed([(str(config_path), config), *drop_ins, *flags]) if v is not None), str(config_path)
    )
    return Found(value, source)
