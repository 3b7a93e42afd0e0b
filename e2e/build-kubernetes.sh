#!/usr/bin/env bash
# Build etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kubelet from
# source through the Go module proxy (no release binaries), into a cache keyed by version:
#   ~/.cache/warmpool-e2e/kubernetes-<version>/bin/
# A small wrapper module requires k8s.io/kubernetes and replaces each staging module
# (k8s.io/api, k8s.io/apimachinery, ...) by its published v0.<minor>.<patch>, since the
# kubernetes module's own replace directives point into its tree and apply only to itself.
#
# Usage: e2e/build-kubernetes.sh [VERSION]   (prints the bin directory on stdout)
# Env:   WARMPOOL_E2E_CACHE (default ~/.cache/warmpool-e2e), GOMAXPROCS/GOFLAGS as usual;
#        WARMPOOL_E2E_BUILD_P (go build -p; default 2 when CI is set, the machine is the
#        build's, else 1: the machine is shared).
#        Go's module and build caches live under the cache too (GOMODCACHE, GOCACHE, unless
#        set), so one directory kept between CI runs holds everything; the binaries are
#        stripped (-ldflags "-s -w") and built with -trimpath.
set -euo pipefail

VERSION="${1:-${WARMPOOL_E2E_KUBERNETES:-v1.35.4}}"
CACHE="${WARMPOOL_E2E_CACHE:-$HOME/.cache/warmpool-e2e}"
DEST="$CACHE/kubernetes-$VERSION"
BIN="$DEST/bin"
PARALLEL="${WARMPOOL_E2E_BUILD_P:-$([ -n "${CI:-}" ] && echo 2 || echo 1)}"
export GOMODCACHE="${GOMODCACHE:-$CACHE/go/mod}" GOCACHE="${GOCACHE:-$CACHE/go/build}"
COMMANDS=(kube-apiserver kube-controller-manager kube-scheduler kubelet)

have_all() {
  for c in etcd "${COMMANDS[@]}"; do [ -x "$BIN/$c" ] || return 1; done
}
if have_all; then echo "$BIN"; exit 0; fi

command -v go >/dev/null || { echo "build-kubernetes: go is not installed" >&2; exit 2; }
minor_patch="${VERSION#v1.}"            # 35.4
staging_version="v0.$minor_patch"       # v0.35.4
start=$(date +%s)
mkdir -p "$BIN"
work="$DEST/module"
rm -rf "$work" && mkdir -p "$work"
log() { echo "build-kubernetes: $*" >&2; }

log "fetching k8s.io/kubernetes@$VERSION"
kmod_dir=$(cd "$work" && GOFLAGS=-mod=mod go mod download -json "k8s.io/kubernetes@$VERSION" \
  | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
[ -f "$kmod_dir/go.mod" ] || { log "no go.mod for k8s.io/kubernetes@$VERSION"; exit 2; }
go_line=$(grep -m1 '^go ' "$kmod_dir/go.mod")

# The wrapper: the kubernetes module's requirements (so the build uses the versions that
# release was tested with), the kubernetes module itself, and its staging modules by
# their published versions.
{
  echo "module warmpool.local/kubernetes-e2e"
  echo
  echo "$go_line"
  echo
  echo "require k8s.io/kubernetes $VERSION"
  echo
  sed -n '/^require (/,/^)/p' "$kmod_dir/go.mod"
  echo
  echo "replace ("
  sed -n 's#^[[:space:]]*\(k8s.io/[a-z0-9-]*\) => ./staging/src/.*#\t\1 => \1 '"$staging_version"'#p' "$kmod_dir/go.mod"
  echo ")"
} > "$work/go.mod"
# etcd's server main package, at the version kubernetes itself tests against.
etcd_version=$(sed -n 's#^[[:space:]]*go.etcd.io/etcd/server/v3 \(v[^ ]*\).*#\1#p' "$kmod_dir/go.mod")
cat > "$work/tools.go" <<GO
//go:build tools

package tools
GO

cd "$work"
log "resolving modules (etcd $etcd_version, staging $staging_version)"
GOFLAGS=-mod=mod go get "k8s.io/kubernetes@$VERSION" "go.etcd.io/etcd/server/v3@$etcd_version" >&2
# The exact set of packages built, their go.sum lines.
pkgs=()
for c in "${COMMANDS[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$c"); done
GOFLAGS=-mod=mod go list -deps "${pkgs[@]}" go.etcd.io/etcd/server/v3 >/dev/null

ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$VERSION -X k8s.io/component-base/version.gitMajor=1 \
-X k8s.io/component-base/version.gitMinor=${minor_patch%%.*} -X k8s.io/component-base/version.gitTreeState=clean \
-X k8s.io/client-go/pkg/version.gitVersion=$VERSION"
export CGO_ENABLED=0
for c in "${COMMANDS[@]}"; do
  t0=$(date +%s)
  GOFLAGS=-mod=mod go build -p "$PARALLEL" -trimpath -ldflags "$ldflags" -o "$BIN/$c.tmp" "k8s.io/kubernetes/cmd/$c"
  mv "$BIN/$c.tmp" "$BIN/$c"
  log "$c built in $(( $(date +%s) - t0 ))s"
done
t0=$(date +%s)
GOFLAGS=-mod=mod go build -p "$PARALLEL" -trimpath -ldflags "-s -w" -o "$BIN/etcd.tmp" go.etcd.io/etcd/server/v3
mv "$BIN/etcd.tmp" "$BIN/etcd"
log "etcd built in $(( $(date +%s) - t0 ))s"
echo "$VERSION $(( $(date +%s) - start ))s $(nproc) cores" > "$DEST/BUILD_INFO"
log "all built in $(( $(date +%s) - start ))s (go build -p $PARALLEL)"
echo "$BIN"
