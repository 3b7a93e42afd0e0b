"""The processes on this machine, read from ``/proc``: what clean-up looks for, and what
the tests check is gone."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path


def processes(what: str = "cmdline") -> Iterator[tuple[int, bytes]]:
    """(pid, bytes of ``/proc/<pid>/<what>``) of every process whose file can be read now
    (``cmdline`` and ``environ`` are NUL-separated)."""
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            data = (d / what).read_bytes()
        except OSError:
            continue
        yield int(d.name), data
