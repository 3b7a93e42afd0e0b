"""The e2e harness's deliberate breaks (``WARMPOOL_E2E_BREAK``, demo/kube.py): each changes the
rendered DaemonSet as it says and nothing else; an unknown name is refused."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from demo.kube import BREAKS, E2eError, break_daemonset

ROOT = Path(__file__).resolve().parents[2]


def _daemonset() -> dict[str, Any]:
    text = (ROOT / "k8s/daemonset.yaml").read_text().replace("${IMAGE_PULL_POLICY}", "Never")
    ds: dict[str, Any] = yaml.safe_load(text.replace("${IMAGE}", "docker.io/warmpool/agent:e2e"))
    return ds


def _agent(ds: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in ds["spec"]["template"]["spec"]["containers"] if c["name"] == "agent")


def test_no_break_changes_nothing() -> None:
    ds = _daemonset()
    before = copy.deepcopy(ds)
    break_daemonset(ds, [])
    assert ds == before


@pytest.mark.parametrize("name", sorted(BREAKS))
def test_each_break_changes_what_it_names_only(name: str) -> None:
    ds, before = _daemonset(), _daemonset()
    break_daemonset(ds, [name])
    assert ds != before
    init = ds["spec"]["template"]["spec"]["initContainers"][0]
    agent = _agent(ds)
    if name == "no-conflist":
        assert init["command"] == ["/bin/sh", "-c", "true"] and _agent(before) == agent
    elif name == "agent-no-sys-admin":
        assert "SYS_ADMIN" not in agent["securityContext"]["capabilities"]["add"]
        assert "NET_ADMIN" in agent["securityContext"]["capabilities"]["add"]
        assert agent["command"] == _agent(before)["command"]
    else:
        assert agent["command"] == ["/bin/sh", "-c", "exit 3"]
        assert init == before["spec"]["template"]["spec"]["initContainers"][0]


def test_an_unknown_break_is_refused() -> None:
    with pytest.raises(E2eError, match="unknown no-such"):
        break_daemonset(_daemonset(), ["no-such"])
