#!/usr/bin/env bash
# Build the images the e2e tier runs, with nothing pulled from a registry:
#   1. a Debian bookworm base image from a root filesystem debootstrap makes from
#      Debian's packages (stands in for debian:bookworm-slim);
#   2. a "uv" image holding the uv binary of uv's PyPI wheel (stands in for
#      ghcr.io/astral-sh/uv);
#   3. the agent image, from the repository's infra/docker/agent.Dockerfile, with those
#      two as its bases and the base's Python (PYTHON_SOURCE=debian): uv's standalone
#      CPython downloads are not reachable here;
# and writes the agent image as an OCI archive ctr can import.
# Usage: e2e/build-images.sh OUT_DIR [TAG]   (prints the archive's path)
# Needs root, buildah and debootstrap (apt-get install buildah debootstrap).
set -euo pipefail
OUT="${1:?usage: build-images.sh OUT_DIR [TAG]}"
TAG="${2:-e2e}"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BASE=localhost/warmpool-e2e/debian:bookworm
UV=localhost/warmpool-e2e/uv:pypi
AGENT="docker.io/warmpool/agent:${TAG}"
MIRROR="${WARMPOOL_E2E_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
# This machine's CA bundle, for the build's downloads from PyPI (a TLS-inspecting proxy's CA may be in it).
CA_BUNDLE="${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}"
log() { echo "build-images: $*" >&2; }
mkdir -p "$OUT"
export BUILDAH_ISOLATION=chroot

if ! buildah inspect --type image "$BASE" >/dev/null 2>&1; then
  t0=$(date +%s)
  rootfs=$(mktemp -d /tmp/warmpool-e2e-rootfs.XXXXXX)
  debootstrap --variant=minbase bookworm "$rootfs" "$MIRROR" >&2
  rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
  c=$(buildah from scratch)
  tar -C "$rootfs" -c . | tar -C "$(buildah mount "$c")" -x
  buildah umount "$c" >/dev/null
  buildah config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin --cmd /bin/bash "$c"
  buildah commit --quiet "$c" "$BASE" >/dev/null
  buildah rm "$c" >/dev/null
  rm -rf "$rootfs"
  log "base image $BASE in $(( $(date +%s) - t0 ))s"
fi

if ! buildah inspect --type image "$UV" >/dev/null 2>&1; then
  wheels=$(mktemp -d)
  python3 -m pip download --quiet --no-deps --only-binary=:all: -d "$wheels" "uv>=0.9,<0.10"
  python3 -m zipfile -e "$wheels"/uv-*.whl "$wheels/x"
  uvbin=$(find "$wheels/x" -path '*/scripts/uv' -type f | head -1)
  c=$(buildah from scratch)
  buildah copy --chmod 0755 "$c" "$uvbin" /uv >/dev/null
  buildah commit --quiet "$c" "$UV" >/dev/null
  buildah rm "$c" >/dev/null
  rm -rf "$wheels"
  log "uv image $UV"
fi

t0=$(date +%s)
buildah bud --quiet --layers -f "$ROOT/infra/docker/agent.Dockerfile" \
  --build-arg BASE_IMAGE="$BASE" --build-arg UV_IMAGE="$UV" --build-arg PYTHON_SOURCE=debian \
  --volume "${CA_BUNDLE}:/etc/ssl/builder-ca.crt:ro" --build-arg SSL_CERT_FILE=/etc/ssl/builder-ca.crt \
  -t "$AGENT" "$ROOT" >&2
log "agent image $AGENT in $(( $(date +%s) - t0 ))s"
archive="$OUT/agent-${TAG}.oci.tar"
rm -f "$archive"
buildah push --quiet "$AGENT" "oci-archive:$archive:$AGENT" >&2
echo "$archive"
