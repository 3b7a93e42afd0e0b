"""Argument types every ``warmpool`` command shares: each refuses a bad value at parse time
with one line (argparse prints it with the usage and exits 2), so no command runs on a
value it cannot use, fails after minutes of work, or shows a traceback.

Pure functions of their text and, for :func:`output_path`, of the file system's answer to
"may this be written" (no file is created).
"""

from __future__ import annotations

import argparse
import difflib
import ipaddress
import math
import os
import re
from collections.abc import Callable, Iterable
from typing import Any

from warmpool import names

PORT_MAX = 65535


def _ranged(kind: str, convert: Callable[[str], float], low: float, high: float | None) -> Callable[[str], Any]:
    def parse(text: str) -> Any:
        try:
            value = convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a {kind}") from None
        if math.isnan(value) or math.isinf(value):
            raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
        if value < low or (high is not None and value > high):
            span = f"at least {low:g}" if high is None else f"from {low:g} to {high:g}"
            raise argparse.ArgumentTypeError(f"{value:g} is out of range: give a {kind} {span}")
        return value

    parse.__name__ = kind  # argparse names the type in its own messages
    return parse


def int_at_least(low: int, *, high: int | None = None) -> Callable[[str], int]:
    """An integer ``low <= n`` (and ``<= high`` when given)."""
    return _ranged("whole number", int, low, high)


def float_at_least(low: float, *, high: float | None = None) -> Callable[[str], float]:
    """A finite number ``low <= x`` (and ``<= high`` when given)."""
    return _ranged("number", float, low, high)


port = int_at_least(0, high=PORT_MAX)
"""A TCP port, 0 for "pick a free one"."""


def ipv4_network(text: str) -> str:
    """An IPv4 CIDR block (``10.0.0.0/16``); host bits must be zero. Returns it normalised."""
    try:
        return str(ipaddress.IPv4Network(text.strip(), strict=True))
    except (ValueError, ipaddress.AddressValueError, ipaddress.NetmaskValueError) as exc:
        raise argparse.ArgumentTypeError(f"{text!r} is not an IPv4 CIDR block such as 10.0.0.0/16 ({exc})") from None


def output_path(text: str) -> str:
    """A file this process may create or overwrite: its folder exists and is writable, and it
    is not a folder itself. Checked before the command does its work, not after."""
    if not text:
        raise argparse.ArgumentTypeError("an empty path")
    path = os.path.abspath(text)
    folder = os.path.dirname(path)
    if os.path.isdir(path):
        raise argparse.ArgumentTypeError(f"{text!r} is a folder, not a file")
    if not os.path.isdir(folder):
        raise argparse.ArgumentTypeError(f"cannot write {text!r}: folder {folder!r} does not exist")
    if not os.access(folder, os.W_OK | os.X_OK) or (os.path.exists(path) and not os.access(path, os.W_OK)):
        raise argparse.ArgumentTypeError(f"cannot write {text!r}: permission denied")
    return text


def closest(word: str, choices: Iterable[str], *, n: int = 5) -> list[str]:
    """The few ``choices`` nearest ``word`` (by :func:`difflib.get_close_matches`), best first."""
    pool = list(choices)
    near = difflib.get_close_matches(word, pool, n=n, cutoff=0.5)
    if not near:
        near = difflib.get_close_matches(word, pool, n=n, cutoff=0.0)
    return near


CLUSTER_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")
MAX_CLUSTER_LEN = 80 - len(names.result_queue("", "i-" + "0" * 17))
"""The longest instance id must still fit SQS's 80-character queue names in the
cluster's result queue name (:func:`warmpool.names.result_queue`): 44."""


def cluster_name(text: str) -> str:
    """A cluster name the stack's queue and table names can carry (the CDK app's rule)."""
    if not CLUSTER_RE.fullmatch(text):
        raise argparse.ArgumentTypeError(
            f"{text!r}: letters, digits, '-' and '_' only, starting with a letter or digit"
        )
    if len(text) > MAX_CLUSTER_LEN:
        raise argparse.ArgumentTypeError(f"{text!r}: at most {MAX_CLUSTER_LEN} characters (SQS names are at most 80)")
    return text
