"""The agent's privileges as ``k8s/daemonset.yaml`` declares them, and a
launcher that starts a process with exactly those: read from the manifest on
every run, so the tests and the manifest cannot drift apart.

What a kubelet + containerd would give the agent container, and how it is
reproduced here without a kubelet:

* ``capabilities: {drop: [ALL], add: [...]}`` with ``runAsUser: 0``: the
  bounding, permitted and effective sets are exactly ``add``; inheritable and
  ambient empty -> ``setpriv --bounding-set -all,+x,... --inh-caps -all
  --ambient-caps -all`` (a root process's permitted set after exec is its
  bounding set);
* ``allowPrivilegeEscalation: false`` -> ``--no-new-privs``;
* ``readOnlyRootFilesystem: true`` -> in a private mount namespace
  (``unshare --mount --propagation slave``), the root mount remounted
  read-only; the host's other mounts (``/proc``, ``/dev``, ``/sys``) stay as
  they are, like a container's own;
* ``volumeMounts``: each bound at its ``mountPath``; ``readOnly`` ones
  remounted read-only. ``hostPath`` sources are the host's own paths only for
  ``/var/run/netns`` (shared with the runtime: that is where CRI pins pod
  namespaces); the others are rebased under the test's directory so that two
  agents (or the machine's own files) never collide. ``emptyDir`` is a fresh
  directory. A ``mountPath`` missing on the host is created for the mount and
  removed afterwards (:func:`remove_created`).

The agent's own files: in a cluster they are in its image, which no volume
hides; here they are this checkout and its ``.venv``. When a volume is mounted
over an ancestor of the checkout (the ``tmp`` volume over ``/tmp``, for a
clone under ``/tmp``), the checkout is bound aside first and bound back over
the volume, so the agent still finds its program (:func:`command`).

Not reproduced: ``hostNetwork`` (the agent stays in the root network
namespace, where the emulated AWS endpoint listens on 127.0.0.1, and enters
the node's namespace through ``WARMPOOL_HOST_NETNS``, as in the demo) and the
pid namespace (the agent sees the host's processes; it never needs to).
"""

from __future__ import annotations

import contextlib
import os
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
DAEMONSET = ROOT / "k8s" / "daemonset.yaml"
SHARED_HOST_PATHS = ("/var/run/netns", "/run/netns")
"""hostPath volumes used as the host's own (the runtime pins pod namespaces there)."""


@dataclass(frozen=True)
class Mount:
    name: str
    path: str
    read_only: bool
    kind: str
    """``hostPath``, ``emptyDir`` or ``configMap``."""
    host_path: str = ""


@dataclass
class Privileges:
    caps: list[str]
    """Lower-case capability names without ``CAP_`` (``net_admin``)."""
    run_as_user: int
    no_new_privs: bool
    read_only_root: bool
    mounts: list[Mount]
    env: dict[str, str] = field(default_factory=dict)
    """The container's literal ``env`` values (not ``valueFrom``)."""


def load(path: Path = DAEMONSET, container: str = "agent") -> Privileges:
    doc = yaml.safe_load(path.read_text())
    spec = doc["spec"]["template"]["spec"]
    c = next(x for x in spec["containers"] if x["name"] == container)
    sc = c.get("securityContext") or {}
    caps = sc.get("capabilities") or {}
    drop = [str(x).upper() for x in caps.get("drop") or []]
    if drop != ["ALL"]:
        raise ValueError(
            f"{path}: the {container} container drops {drop}, not ALL: the launcher reproduces "
            "only drop: [ALL] (anything else would need the runtime's default set)"
        )
    volumes = {v["name"]: v for v in spec.get("volumes") or []}
    mounts = []
    for m in c.get("volumeMounts") or []:
        v = volumes[m["name"]]
        kind = next(k for k in ("hostPath", "emptyDir", "configMap") if k in v)
        mounts.append(
            Mount(
                m["name"],
                m["mountPath"],
                bool(m.get("readOnly", False)),
                kind,
                str(v["hostPath"]["path"]) if kind == "hostPath" else "",
            )
        )
    env = {str(e["name"]): str(e["value"]) for e in c.get("env") or [] if "value" in e}
    return Privileges(
        caps=sorted(str(x).lower().removeprefix("cap_") for x in caps.get("add") or []),
        run_as_user=int(sc.get("runAsUser", 0)),
        no_new_privs=sc.get("allowPrivilegeEscalation") is False,
        read_only_root=bool(sc.get("readOnlyRootFilesystem", False)),
        mounts=mounts,
        env=env,
    )


_created: list[Path] = []


def remove_created() -> None:
    """The mount points this module created on the host (only those, only when empty)."""
    for p in reversed(_created):
        with contextlib.suppress(OSError):
            p.rmdir()
    _created.clear()


def _ensure_dir(path: Path) -> None:
    """Create ``path`` (and missing parents), remembering what was created."""
    missing = []
    p = path
    while not p.exists():
        missing.append(p)
        p = p.parent
    for d in reversed(missing):
        d.mkdir()
        _created.append(d)


def host_source(priv: Privileges, m: Mount, base: Path) -> Path:
    """Where a volume comes from on this machine for an agent whose files live under ``base``."""
    if m.kind == "hostPath" and m.host_path in SHARED_HOST_PATHS:
        return Path(m.host_path)
    return base / m.kind / m.name


def host_view(priv: Privileges, container_path: str, base: Path) -> Path:
    """The host path of a file the agent sees at ``container_path`` (inside one of its volumes)."""
    best: Mount | None = None
    for m in priv.mounts:
        if (container_path == m.path or container_path.startswith(m.path.rstrip("/") + "/")) and (
            best is None or len(m.path) > len(best.path)
        ):
            best = m
    if best is None:
        raise ValueError(f"{container_path} is on the agent's read-only root, in no volume")
    return host_source(priv, best, base) / os.path.relpath(container_path, best.path)


CHECKOUT = Path(__file__).resolve().parents[2]
"""The tree the agent runs from here (its image's files in a cluster)."""
CHECKOUT_ASIDE = Path("/run/warmpool-runtime-checkout")


def _hides(mount_path: str, path: Path) -> bool:
    return str(path) == mount_path.rstrip("/") or str(path).startswith(mount_path.rstrip("/") + "/")


def command(priv: Privileges, argv: list[str], base: Path) -> list[str]:
    """``argv`` wrapped to run with exactly ``priv``; volume sources made under ``base``."""
    steps = ["set -e"]
    keep = [p for p in dict.fromkeys([CHECKOUT, Path(os.path.realpath(sys.prefix))]) if p.exists()]
    hidden = [p for p in keep if any(m.kind != "configMap" and _hides(m.path, p) for m in priv.mounts)]
    for i, p in enumerate(hidden):
        _ensure_dir(CHECKOUT_ASIDE / str(i))
        steps.append(f"mount --rbind {shlex.quote(str(p))} {shlex.quote(str(CHECKOUT_ASIDE / str(i)))}")
    # A volume over an ancestor of ``base`` (``/tmp``) goes last, or it would hide the other sources.
    for m in sorted(priv.mounts, key=lambda m: str(base).startswith(m.path.rstrip("/") + "/")):
        src = host_source(priv, m, base)
        src.mkdir(parents=True, exist_ok=True)
        _ensure_dir(Path(m.path))
        if m.kind == "configMap":
            continue  # the agent container mounts none; nothing to reproduce
        steps.append(f"mount --rbind {shlex.quote(str(src))} {shlex.quote(m.path)}")
        if m.read_only:
            steps.append(f"mount -o remount,bind,ro {shlex.quote(m.path)}")
    for i, p in enumerate(hidden):  # the program back in sight, read-only as an image's files are
        steps.append(f"mkdir -p {shlex.quote(str(p))}")
        steps.append(f"mount --rbind {shlex.quote(str(CHECKOUT_ASIDE / str(i)))} {shlex.quote(str(p))}")
        steps.append(f"mount -o remount,bind,ro {shlex.quote(str(p))}")
    if priv.read_only_root:
        steps.append("mount -o remount,bind,ro /")
    caps = ",".join(["-all", *(f"+{c}" for c in priv.caps)])
    setpriv = [
        "setpriv",
        f"--reuid={priv.run_as_user}",
        f"--regid={priv.run_as_user}",
        "--clear-groups",
        f"--bounding-set={caps}",
        "--inh-caps=-all",
        "--ambient-caps=-all",
    ]
    if priv.no_new_privs:
        setpriv.append("--no-new-privs")
    steps.append("exec " + shlex.join([*setpriv, "--", *argv]))
    return ["unshare", "--mount", "--propagation", "slave", "--", "sh", "-c", "\n".join(steps)]


def cap_mask(names: list[str]) -> int:
    """The kernel's bit mask for capability names (``/proc/PID/status`` CapEff)."""
    bits = {
        "chown": 0,
        "dac_override": 1,
        "dac_read_search": 2,
        "fowner": 3,
        "fsetid": 4,
        "kill": 5,
        "setgid": 6,
        "setuid": 7,
        "setpcap": 8,
        "linux_immutable": 9,
        "net_bind_service": 10,
        "net_broadcast": 11,
        "net_admin": 12,
        "net_raw": 13,
        "ipc_lock": 14,
        "ipc_owner": 15,
        "sys_module": 16,
        "sys_rawio": 17,
        "sys_chroot": 18,
        "sys_ptrace": 19,
        "sys_pacct": 20,
        "sys_admin": 21,
        "sys_boot": 22,
        "sys_nice": 23,
        "sys_resource": 24,
        "sys_time": 25,
        "sys_tty_config": 26,
        "mknod": 27,
        "lease": 28,
        "audit_write": 29,
        "audit_control": 30,
        "setfcap": 31,
    }
    out = 0
    for n in names:
        out |= 1 << bits[n]
    return out


def proc_status(pid: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        k, _, v = line.partition(":")
        out[k] = v.strip()
    return out
