"""containerd as a node's container runtime, for the demo and the runtime tests.

What it holds:

* :func:`support`: whether containerd, runc, ``ctr`` and a static busybox are
  here (and we are root), else why not;
* :class:`Containerd`: one ``containerd`` per node, with its own root, state,
  socket and config under a directory of ours, started inside the node's
  network namespace with ``nsenter --net=`` (``ip netns exec`` remounts /sys,
  which breaks runc's cgroup lookup), CRI plugin configured with its own CNI
  ``bin_dir`` and ``conf_dir``;
* :class:`NodeRuntime`: containerd and CRI for one node, as the kubelet uses
  them (a pod is a sandbox), and :func:`cleanup_run` for a crashed run.

Its parts elsewhere: the image it imports (:mod:`demo.runtime_image`, a local
busybox, no registry) and the CRI client (:mod:`demo.runtime_cri`).

Settings measured on this machine (docs/agent.md, "Running under containerd"):
``restrict_oom_score_adj = true`` (the VM lacks CAP_SYS_RESOURCE; without it
runc fails with a misleading pipe error), the overlayfs snapshotter, and a
fully named image (CRI prefixes a bare name with ``docker.io/`` and pulls).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from demo.procfs import processes
from demo.runtime_cri import CriClient, CriError, PortMapping
from demo.runtime_image import IMAGE_REF, static_busybox

CNI_PLUGIN_DIRS = ("/usr/lib/cni", "/opt/cni/bin")
K8S_NAMESPACE = "k8s.io"
"""containerd namespace the CRI plugin keeps its images and sandboxes in."""


# ----------------------------------------------------------------- what is here


def cni_plugin(name: str) -> str | None:
    """A reference CNI plugin (``portmap``, ``loopback``) as Debian or upstream installs it."""
    for d in CNI_PLUGIN_DIRS:
        p = os.path.join(d, name)
        if os.access(p, os.X_OK):
            return p
    return None


def support() -> str | None:
    """None when containerd can run pods here; else why not (what is missing)."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return "not running as root"
    missing = [b for b in ("containerd", "runc", "ctr", "nsenter") if shutil.which(b) is None]
    if static_busybox() is None:
        missing.append("busybox-static (a static /bin/busybox)")
    if cni_plugin("loopback") is None:
        missing.append("containernetworking-plugins (loopback)")
    if missing:
        return (
            "not installed: " + ", ".join(missing) + " (apt-get install containerd runc busybox-static "
            "containernetworking-plugins)"
        )
    return None


# ----------------------------------------------------------------- containerd


class RuntimeError_(RuntimeError):
    """containerd or one of its tools failed; the message has the command and its output."""


def conflist(
    name: str, socket: str, cni_version: str = "1.0.0", *, portmap: bool = False, extra: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The network configuration a runtime hands warmpool-cni (and, chained, ``portmap``)."""
    plugins: list[dict[str, Any]] = [{"type": "warmpool-cni", "socket": socket, **(extra or {})}]
    if portmap:
        plugins.append({"type": "portmap", "capabilities": {"portMappings": True}, "snat": True})
    return {"cniVersion": cni_version, "name": name, "plugins": plugins}


@dataclass
class Containerd:
    """One containerd for one node: everything under ``base``, network namespace ``netns``.

    ``cni_bin`` and ``cni_conf`` are the CRI plugin's ``bin_dir`` and ``conf_dir``
    (made under ``base``); :meth:`install_cni` fills them."""

    base: Path
    netns: str
    """A name under /var/run/netns (``ip netns``)."""
    image_ref: str = IMAGE_REF
    mount_ns: str = ""
    """A mount namespace (a path ``nsenter --mount`` takes) to run in, '' for this process's:
    a node whose host paths are its own on a machine with several (the e2e tier's second kubelet)."""
    proc: subprocess.Popen[bytes] | None = None
    log_path: Path = field(init=False)

    def __post_init__(self) -> None:
        self.base = Path(self.base)
        self.log_path = self.base / "containerd.log"

    @property
    def socket(self) -> str:
        return str(self.base / "c.sock")

    def enter(self) -> list[str]:
        """The command prefix that runs a program where this containerd runs (its namespaces)."""
        mount = [f"--mount={self.mount_ns}"] if self.mount_ns else []
        return ["nsenter", *mount, f"--net=/var/run/netns/{self.netns}"]

    @property
    def cni_bin(self) -> Path:
        return self.base / "cni-bin"

    @property
    def cni_conf(self) -> Path:
        return self.base / "cni-conf"

    def config_toml(self) -> str:
        b = self.base
        return f"""version = 2
root = "{b / "root"}"
state = "{b / "state"}"
[grpc]
  address = "{self.socket}"
[ttrpc]
  address = "{self.socket}.ttrpc"
[debug]
  address = "{b / "debug.sock"}"
[plugins."io.containerd.grpc.v1.cri"]
  # This VM lacks CAP_SYS_RESOURCE: without this runc fails with a misleading pipe error.
  restrict_oom_score_adj = true
  sandbox_image = "{self.image_ref}"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        # runc's state under ours, not /run/containerd/runc
        Root = "{b / "runc"}"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{self.cni_bin}"
    conf_dir = "{self.cni_conf}"
    max_conf_num = 1
"""

    def install_cni(self, plugin: str, conf: Mapping[str, Any], env: Mapping[str, str] | None = None) -> None:
        """``bin_dir``: a ``warmpool-cni`` shim exec'ing ``plugin`` (with ``env`` set), and
        ``loopback``/``portmap`` linked from the reference plugins; ``conf_dir``: ``conf``."""
        self.cni_bin.mkdir(parents=True, exist_ok=True)
        self.cni_conf.mkdir(parents=True, exist_ok=True)
        exports = "".join(f"export {k}='{v}'\n" for k, v in (env or {}).items())
        shim = self.cni_bin / "warmpool-cni"
        tmp = shim.with_suffix(".tmp")
        tmp.write_text(f'#!/bin/sh\n{exports}exec {plugin} "$@"\n')
        tmp.chmod(0o755)
        tmp.replace(shim)
        for ref in ("loopback", "portmap"):
            src = cni_plugin(ref)
            if src is not None and not (self.cni_bin / ref).exists():
                (self.cni_bin / ref).symlink_to(src)
        self.write_conf(conf)

    def write_conf(self, conf: Mapping[str, Any]) -> None:
        """Replace the network configuration (the CRI plugin reloads it on change)."""
        for old in self.cni_conf.glob("*.conflist"):
            old.unlink()
        tmp = self.cni_conf / ".10-warmpool.tmp"
        tmp.write_text(json.dumps(conf, indent=1))
        tmp.replace(self.cni_conf / "10-warmpool.conflist")

    def start(self, timeout_s: float = 30.0) -> None:
        """containerd in the node's network namespace; returns when its socket answers."""
        note_default_state()
        for d in ("root", "state"):
            (self.base / d).mkdir(parents=True, exist_ok=True)
        (self.base / "config.toml").write_text(self.config_toml())
        logf = open(self.log_path, "ab")  # noqa: SIM115 (the child holds it)
        try:
            self.proc = subprocess.Popen(
                [
                    *self.enter(),
                    "containerd",
                    "--config",
                    str(self.base / "config.toml"),
                ],
                stdout=logf,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        finally:
            logf.close()
        deadline = time.monotonic() + timeout_s
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError_(f"containerd exited with {self.proc.returncode}: {self.log_tail()}")
            r = self.ctr("version", check=False, timeout=5)
            if r.returncode == 0 and "Server:" in r.stdout:
                break
            if time.monotonic() > deadline:
                raise RuntimeError_(f"containerd not answering after {timeout_s:.0f}s: {self.log_tail()}")
            time.sleep(0.1)  # the harness waiting for a daemon, not warmpool logic
        # CRI's own readiness: its config must have been loaded before sandboxes are asked for.

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def ctr(
        self,
        *args: str,
        check: bool = True,
        namespace: str = K8S_NAMESPACE,
        timeout: float = 60.0,
        env: Mapping[str, str] | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """``ctr -a SOCKET -n NAMESPACE ARGS``, run in the node's namespace like containerd."""
        cmd = [*self.enter(), "ctr", "-a", self.socket, "-n", namespace, *args]
        r = subprocess.run(
            cmd, capture_output=True, text=True, timeout=timeout, check=False, env={**os.environ, **(env or {})}
        )
        if check and r.returncode != 0:
            raise RuntimeError_(f"{' '.join(cmd[len(self.enter()) :])}: {(r.stderr or r.stdout).strip()}")
        return r

    def import_image(self, tarball: Path, namespace: str = K8S_NAMESPACE) -> None:
        self.ctr("images", "import", str(tarball), namespace=namespace)

    def shim_pids(self) -> list[int]:
        """containerd-shim processes serving this containerd (they outlive it)."""
        needle = self.socket.encode()
        return [pid for pid, cmd in processes() if b"containerd-shim" in cmd and needle in cmd]

    def stop(self) -> None:
        """containerd, its shims and whatever they still run; mounts under ``base`` undone.
        Idempotent."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
        for pid in self.shim_pids():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(os.getpgid(pid), signal.SIGKILL)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        unmount_under(self.base)


DEFAULT_STATE = Path("/run/containerd")
"""containerd 1.6 keeps shim sockets in ``/run/containerd/s`` whatever its ``state`` (and ``ctr``
its FIFOs in ``/run/containerd/fifo``): the one place outside our directory it writes to."""
_default_state_existed: bool | None = None


def note_default_state() -> None:
    """Remember, before the first containerd of this process, whether ``/run/containerd`` existed."""
    global _default_state_existed
    if _default_state_existed is None:
        _default_state_existed = DEFAULT_STATE.exists()


def remove_default_state() -> None:
    """Remove ``/run/containerd`` again if this process made it: only empty directories and the
    sockets of shims no longer running (a running containerd elsewhere keeps its own)."""
    if _default_state_existed is not False or not DEFAULT_STATE.exists():
        return
    for d, _dirs, files in os.walk(DEFAULT_STATE, topdown=False):
        for f in files:
            path = Path(d) / f
            if path.is_socket() and not _socket_listening(path):
                path.unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            os.rmdir(d)


def _socket_listening(path: Path) -> bool:
    import socket as _socket

    s = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    s.settimeout(0.5)
    try:
        s.connect(str(path))
        return True
    except OSError:
        return False
    finally:
        s.close()


def unmount_under(base: Path) -> list[str]:
    """Lazily unmount every mount below ``base`` (deepest first); returns the mount points."""
    prefix = str(base).rstrip("/") + "/"
    points = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            mp = line.split()[4].replace("\\040", " ")
            if mp.startswith(prefix):
                points.append(mp)
    for mp in sorted(points, key=len, reverse=True):
        subprocess.run(["umount", "-l", mp], capture_output=True, check=False)
    return points


# ----------------------------------------------------------------- one node's pods through CRI


PINS_FILE = "netns-pins"
"""In the run dir: the network namespaces CRI pinned for our sandboxes (for a crashed run's cleanup)."""


@dataclass
class PodSandbox:
    id: str
    ip: str
    netns: str


class NodeRuntime:
    """containerd + CRI for one node, as the kubelet uses them: sandboxes are pods.

    ``plugin`` is the ``warmpool-cni`` executable the shim in ``bin_dir`` execs;
    ``agent_socket`` goes into the network configuration."""

    def __init__(
        self,
        base: Path,
        netns: str,
        plugin: str,
        agent_socket: str,
        image: Path,
        run_dir: Path,
        cni_version: str = "1.0.0",
        *,
        portmap: bool = False,
    ) -> None:
        self.containerd = Containerd(base, netns)
        self.plugin = plugin
        self.agent_socket = agent_socket
        self.image = image
        self.run_dir = run_dir
        self.cni_version = cni_version
        self.portmap = portmap
        self.cri: CriClient | None = None
        self.sandboxes: dict[str, PodSandbox] = {}

    def start(self) -> None:
        c = self.containerd
        c.install_cni(self.plugin, conflist("warmpool", self.agent_socket, self.cni_version, portmap=self.portmap))
        c.start()
        c.import_image(self.image)
        self.cri = CriClient(c.socket)
        self.cri.wait_ready()

    def run_pod(self, name: str, uid: str, namespace: str = "default", ports: Sequence[PortMapping] = ()) -> PodSandbox:
        """RunPodSandbox then PodSandboxStatus (the pod's IP and netns path). CriError on failure."""
        assert self.cri is not None
        sid = self.cri.run_pod_sandbox(name, uid, namespace, ports)
        st = self.cri.pod_sandbox_status(sid)
        pod = PodSandbox(sid, st.ip, st.netns)
        self.sandboxes[sid] = pod
        if st.netns:
            with open(self.run_dir / PINS_FILE, "a") as f:
                f.write(st.netns + "\n")
        return pod

    def remove_pod(self, sandbox_id: str) -> None:
        """StopPodSandbox (CNI DEL) then RemovePodSandbox (DEL again if needed), as the kubelet does."""
        assert self.cri is not None
        self.cri.stop_pod_sandbox(sandbox_id)
        self.cri.remove_pod_sandbox(sandbox_id)
        self.sandboxes.pop(sandbox_id, None)

    def remove_all(self) -> list[str]:
        """Every sandbox containerd holds, also those whose RunPodSandbox failed (containerd keeps a
        sandbox whose clean-up DEL failed, for the kubelet's garbage collection). Returns the ids
        that could not be removed."""
        assert self.cri is not None
        ids = list(dict.fromkeys([*self.sandboxes, *self.cri.list_pod_sandbox_ids()]))
        left = []
        for sid in ids:
            if sid not in self.sandboxes:
                with contextlib.suppress(CriError):
                    st = self.cri.pod_sandbox_status(sid)
                    self.sandboxes[sid] = PodSandbox(sid, st.ip, st.netns)
            try:
                self.remove_pod(sid)
            except CriError:
                left.append(sid)
        return left

    def stop(self, *, remove_pods: bool = True) -> None:
        """Remove what is left (DEL through the agent, if it still runs), then containerd."""
        if self.cri is not None and remove_pods:
            self.remove_all()
        if self.cri is not None:
            self.cri.close()
            self.cri = None
        self.containerd.stop()
        for pod in self.sandboxes.values():
            remove_pin(pod.netns)


def remove_pin(path: str) -> bool:
    """Unmount and remove a pinned network namespace (``/var/run/netns/cni-*``) if still there."""
    if not path.startswith(("/var/run/netns/", "/run/netns/")) or not os.path.exists(path):
        return False
    subprocess.run(["umount", "-l", path], capture_output=True, check=False)
    with contextlib.suppress(OSError):
        os.unlink(path)
    return True


def cleanup_run(run_dir: Path) -> list[str]:
    """A crashed run's containerds, shims, pinned namespaces and mounts under ``run_dir``."""
    out: list[str] = []
    needle = str(run_dir).encode()
    for pid, cmd in processes():
        if pid == os.getpid():
            continue
        if (b"containerd" in cmd.split(b"\0")[0] or b"containerd-shim" in cmd) and needle in cmd:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
                out.append(f"process {pid} (containerd)")
    pins = run_dir / PINS_FILE
    if pins.exists():
        for line in pins.read_text().split():
            if remove_pin(line):
                out.append(f"netns pin {line}")
    out += [f"mount {m}" for m in unmount_under(run_dir)]
    return out
