#!/usr/bin/env bash
# Build the helm command from source through the Go module proxy (no release binary), into
# a cache keyed by version, like e2e/build-kubernetes.sh:
#   ~/.cache/warmpool-e2e/helm-<version>/bin/helm
# The helm.sh/helm/v3 module has no replace directives, so `go install module@version`
# builds its cmd/helm with the module's own requirements.
#
# Usage: e2e/build-helm.sh [VERSION]   (prints the path of the helm binary on stdout)
# Env:   WARMPOOL_E2E_CACHE (default ~/.cache/warmpool-e2e), WARMPOOL_E2E_HELM (version),
#        WARMPOOL_E2E_BUILD_P (go build -p, default 1: the machine is shared).
set -euo pipefail

VERSION="${1:-${WARMPOOL_E2E_HELM:-v3.22.0}}"
CACHE="${WARMPOOL_E2E_CACHE:-$HOME/.cache/warmpool-e2e}"
BIN="$CACHE/helm-$VERSION/bin"
PARALLEL="${WARMPOOL_E2E_BUILD_P:-1}"
if [ -x "$BIN/helm" ]; then echo "$BIN/helm"; exit 0; fi

command -v go >/dev/null || { echo "build-helm: go is not installed" >&2; exit 2; }
case "$VERSION" in
  v3.*) module=helm.sh/helm/v3 ;;
  v4.*) module=helm.sh/helm/v4 ;;
  *) echo "build-helm: version must be v3.x.y or v4.x.y, not $VERSION" >&2; exit 2 ;;
esac
start=$(date +%s)
mkdir -p "$BIN"
tmp="$BIN/.install"
rm -rf "$tmp"
export CGO_ENABLED=0
GOBIN="$tmp" go install -p "$PARALLEL" -trimpath \
  -ldflags "-s -w -X $module/internal/version.version=$VERSION" "$module/cmd/helm@$VERSION"
mv "$tmp/helm" "$BIN/helm"
rm -rf "$tmp"
echo "$VERSION $(( $(date +%s) - start ))s $(nproc) cores" > "$CACHE/helm-$VERSION/BUILD_INFO"
echo "build-helm: helm $VERSION built in $(( $(date +%s) - start ))s" >&2
echo "$BIN/helm"
