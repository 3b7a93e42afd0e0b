"""A tiny OCI image for containerd, made here: an OCI layout tarball holding a static
busybox and its applets (``ctr images import`` reads it), so no registry is ever
asked for anything. Its command sleeps forever, so it also serves as the CRI's
sandbox (``pause``) image.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import platform
import subprocess
import tarfile
from pathlib import Path

IMAGE_REF = "docker.io/warmpool/busybox:local"
"""Fully named: CRI would prefix a bare name with ``docker.io/`` and try to pull it."""
BUSYBOX_CANDIDATES = ("/bin/busybox", "/usr/bin/busybox")
SLEEP_FOREVER = ["/bin/sleep", "2147483647"]


def static_busybox() -> str | None:
    """A static busybox of this machine (the image's only binary), or None."""
    for p in BUSYBOX_CANDIDATES:
        if os.path.exists(p) and _is_static(p):
            return p
    return None


def _is_static(path: str) -> bool:
    """An ELF file without a PT_INTERP program header (no dynamic loader needed)."""
    try:
        with open(path, "rb") as f:
            head = f.read(64)
            if head[:4] != b"\x7fELF" or head[4] != 2:  # 64-bit only
                return False
            phoff = int.from_bytes(head[32:40], "little")
            phentsize = int.from_bytes(head[54:56], "little")
            phnum = int.from_bytes(head[56:58], "little")
            f.seek(phoff)
            table = f.read(phentsize * phnum)
    except OSError:
        return False
    return all(int.from_bytes(table[i * phentsize : i * phentsize + 4], "little") != 3 for i in range(phnum))


def _oci_arch() -> str:
    m = platform.machine()
    return {"x86_64": "amd64", "aarch64": "arm64"}.get(m, m)


def _layer(busybox: str) -> bytes:
    """An uncompressed layer: /bin/busybox and a symlink per applet."""
    applets = subprocess.run([busybox, "--list"], capture_output=True, text=True, check=True).stdout.split()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for d in ("bin", "etc", "proc", "sys", "dev", "tmp", "run"):
            ti = tarfile.TarInfo(d)
            ti.type, ti.mode = tarfile.DIRTYPE, 0o1777 if d == "tmp" else 0o755
            tar.addfile(ti)
        data = Path(busybox).read_bytes()
        ti = tarfile.TarInfo("bin/busybox")
        ti.size, ti.mode = len(data), 0o755
        tar.addfile(ti, io.BytesIO(data))
        for a in sorted(set(applets) - {"busybox"}):
            ti = tarfile.TarInfo(f"bin/{a}")
            ti.type, ti.linkname = tarfile.SYMTYPE, "busybox"
            tar.addfile(ti)
        for name, text in (("etc/passwd", "root:x:0:0:root:/:/bin/sh\n"), ("etc/group", "root:x:0:\n")):
            raw = text.encode()
            ti = tarfile.TarInfo(name)
            ti.size, ti.mode = len(raw), 0o644
            tar.addfile(ti, io.BytesIO(raw))
    return buf.getvalue()


def _blob(tar: tarfile.TarFile, data: bytes) -> str:
    digest = hashlib.sha256(data).hexdigest()
    ti = tarfile.TarInfo(f"blobs/sha256/{digest}")
    ti.size = len(data)
    tar.addfile(ti, io.BytesIO(data))
    return f"sha256:{digest}"


def build_image(dest: Path, ref: str = IMAGE_REF, busybox: str | None = None) -> Path:
    """An OCI layout tarball of a busybox image at ``dest`` (``ctr images import`` reads it).

    The image's command sleeps forever, so it also serves as the CRI's sandbox
    (``pause``) image."""
    bb = busybox or static_busybox()
    if bb is None:
        raise FileNotFoundError("no static busybox (apt-get install busybox-static)")
    layer = _layer(bb)
    gz = gzip.compress(layer, mtime=0)
    diff_id = "sha256:" + hashlib.sha256(layer).hexdigest()
    config = json.dumps(
        {
            "architecture": _oci_arch(),
            "os": "linux",
            "config": {"Env": ["PATH=/bin"], "Cmd": SLEEP_FOREVER, "WorkingDir": "/"},
            "rootfs": {"type": "layers", "diff_ids": [diff_id]},
        }
    ).encode()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        cfg_digest = _blob(tar, config)
        layer_digest = _blob(tar, gz)
        manifest = json.dumps(
            {
                "schemaVersion": 2,
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "config": {
                    "mediaType": "application/vnd.oci.image.config.v1+json",
                    "digest": cfg_digest,
                    "size": len(config),
                },
                "layers": [
                    {
                        "mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                        "digest": layer_digest,
                        "size": len(gz),
                    }
                ],
            }
        ).encode()
        man_digest = _blob(tar, manifest)
        index = json.dumps(
            {
                "schemaVersion": 2,
                "mediaType": "application/vnd.oci.image.index.v1+json",
                "manifests": [
                    {
                        "mediaType": "application/vnd.oci.image.manifest.v1+json",
                        "digest": man_digest,
                        "size": len(manifest),
                        "platform": {"architecture": _oci_arch(), "os": "linux"},
                        "annotations": {
                            "io.containerd.image.name": ref,
                            "org.opencontainers.image.ref.name": ref.rsplit(":", 1)[-1],
                        },
                    }
                ],
            }
        ).encode()
        for name, data in (("oci-layout", b'{"imageLayoutVersion":"1.0.0"}'), ("index.json", index)):
            ti = tarfile.TarInfo(name)
            ti.size = len(data)
            tar.addfile(ti, io.BytesIO(data))
    dest.write_bytes(buf.getvalue())
    return dest
