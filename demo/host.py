"""What a ``warmpool demo`` run leaves on the machine, and how it is found again: its
directories, the processes it recorded, the single-run lock, and the clean-up of a
crashed run's leftovers (processes, ``wp-demo-*`` namespaces, containerd, the run dir).
Also the small host helpers the run needs (a free port, a console script, a JSON GET).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import signal
import socket
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from demo import netns as nx

RUN_DIR = Path(os.environ.get("WARMPOOL_DEMO_DIR", "/tmp/wp-demo"))
"""Sockets and agent state of the run (removed at the end)."""
LOG_DIR = Path(os.environ.get("WARMPOOL_DEMO_LOGS", "/tmp/wp-demo-logs"))
"""Agents' logs and the functions' output (what CloudWatch Logs would hold); kept for reading, replaced per run."""
LOCK_FILE = Path("/tmp/wp-demo.lock")
PIDS_FILE = "pids"
RUN_MARK = "WARMPOOL_DEMO_RUN"
"""In every agent's environment (the demo's pid), so a test can find stray processes."""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def http_json(url: str, timeout: float = 5.0) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return json.loads(r.read())


def console_script(name: str) -> str:
    """A console script of this install (next to the interpreter), else from PATH."""
    here = Path(sys.executable).parent / name
    if here.exists():
        return str(here)
    found = shutil.which(name)
    if found is None:
        raise FileNotFoundError(f"{name} is not installed (pip install -e '.[all]')")
    return found


def record_pid(run_dir: Path, pid: int) -> None:
    """Remember a process of this run, for a later run's clean-up if this one crashes."""
    with open(run_dir / PIDS_FILE, "a") as f:
        f.write(f"{pid}\n")


def kill_recorded(run_dir: Path) -> list[int]:
    """End the processes a previous run recorded (only those still running a warmpool program)."""
    killed: list[int] = []
    path = run_dir / PIDS_FILE
    if not path.exists():
        return killed
    for line in path.read_text().split():
        if not line.isdigit():
            continue
        pid = int(line)
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if "warmpool" not in cmdline:
            continue
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
    return killed


def cleanup_leftovers(run_dir: Path = RUN_DIR) -> list[str]:
    """What a crashed run left behind: its processes, ``wp-demo-*`` namespaces, its run dir.
    Refuses (RuntimeError) while another demo holds the lock: its namespaces are not leftovers."""
    with single_run_lock():
        return remove_leftovers(run_dir)


def remove_leftovers(run_dir: Path) -> list[str]:
    """:func:`cleanup_leftovers`, for a caller already holding the lock."""
    out: list[str] = [f"process {p}" for p in kill_recorded(run_dir)]
    if run_dir.exists() and nx.support_quick():
        from demo.runtime_containerd import cleanup_run

        out += cleanup_run(run_dir)
    if nx.support_quick():
        out += [f"netns {n}" for n in nx.cleanup()]
    if run_dir.exists():
        shutil.rmtree(run_dir, ignore_errors=True)
    return out


@contextlib.contextmanager
def single_run_lock(wait_s: float = 0.0) -> Iterator[None]:
    """One demo at a time on a machine (leftover cleanup removes ``wp-demo-*`` by name).
    Waits up to ``wait_s`` for a running one to finish, then gives up with RuntimeError."""
    fd = os.open(LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise RuntimeError(f"another warmpool demo is running (lock {LOCK_FILE})") from None
                time.sleep(0.5)  # the harness waiting its turn, not warmpool logic
        yield
    finally:
        os.close(fd)
