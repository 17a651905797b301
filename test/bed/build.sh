#!/usr/bin/env bash
# Builds the test bed's real components from Go modules into a cache outside the clone, keyed by versions.
# A second run with the same versions is a no-op. Prints the bin directory on its last line.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=versions.env
source "$here/versions.env"

command -v go >/dev/null || { echo "test bed: Go 1.26+ is required (https://go.dev/dl, or Debian golang-go)" >&2; exit 1; }
# Comments of versions.env are not part of the key: rewording one must not rebuild everything.
settings() { grep -v '^[[:space:]]*#' "$here/versions.env"; }
key="$( { settings; cat "$here/go/go.mod" "$here/go/go.sum"; } | sha256sum | cut -c1-12)"
cache="${KINDLING_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/kindling}/testbed-$KUBERNETES_VERSION-$key"
bin="$cache/bin"
mkdir -p "$bin" "$cache/crds"
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=mod

log() { printf '[test bed] %s\n' "$*" >&2; }
minor="${KUBERNETES_VERSION#v1.}"; minor="${minor%%.*}"
ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$KUBERNETES_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/component-base/version.gitTreeState=clean"

# build NAME PACKAGE: go build inside the wrapper module, written atomically so an interrupted build is redone.
build() {
  local name="$1" pkg="$2" start=$SECONDS
  [ -x "$bin/$name" ] && return 0
  log "building $name ($pkg)…"
  (cd "$here/go" && go build -trimpath -ldflags "$ldflags" -o "$bin/.$name.tmp" "$pkg")
  mv "$bin/.$name.tmp" "$bin/$name"
  log "built $name in $((SECONDS - start)) s"
}

build etcd go.etcd.io/etcd/server/v3
build kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver
build kube-controller-manager k8s.io/kubernetes/cmd/kube-controller-manager
build kube-scheduler k8s.io/kubernetes/cmd/kube-scheduler
build kubectl k8s.io/kubernetes/cmd/kubectl

if [ ! -x "$bin/kwok" ]; then
  log "building kwok $KWOK_VERSION…"; start=$SECONDS
  tmp="$(mktemp -d)"
  GOBIN="$tmp" GOFLAGS= go install -trimpath -ldflags "-s -w" "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"
  mv "$tmp/kwok" "$bin/kwok"; rmdir "$tmp"
  log "built kwok in $((SECONDS - start)) s"
fi

# The Cluster API core manager, from its own wrapper module (capi/), cached apart so a Kubernetes bump and a
# Cluster API bump rebuild only what changed. $bin/capi-manager links to the current build.
capikey="$( { settings; cat "$here/capi/go.mod" "$here/capi/go.sum"; } | sha256sum | cut -c1-12)"
capibin="${KINDLING_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/kindling}/capi-$CLUSTER_API_VERSION-$capikey"
if [ ! -x "$capibin/capi-manager" ]; then
  log "building Cluster API core manager $CLUSTER_API_VERSION…"; start=$SECONDS
  mkdir -p "$capibin"
  (cd "$here/capi" && go build -trimpath -ldflags "-s -w" -o "$capibin/.capi-manager.tmp" sigs.k8s.io/cluster-api/core)
  mv "$capibin/.capi-manager.tmp" "$capibin/capi-manager"
  log "built capi-manager in $((SECONDS - start)) s"
fi
ln -sfn "$capibin/capi-manager" "$bin/capi-manager"

# The real Cluster API CRDs, taken from the published module (v1.14 keeps them under core/config/crd/bases).
if [ ! -f "$cache/crds/cluster-api/.complete" ]; then
  dir="$(cd "$here/go" && GOFLAGS= go mod download -json "sigs.k8s.io/cluster-api@$CLUSTER_API_VERSION" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')"
  rm -rf "$cache/crds/cluster-api" && mkdir -p "$cache/crds/cluster-api"
  cp "$dir"/core/config/crd/bases/*.yaml "$cache/crds/cluster-api/"
  chmod -R u+w "$cache/crds/cluster-api"
  touch "$cache/crds/cluster-api/.complete"
  log "copied Cluster API $CLUSTER_API_VERSION CRDs"
fi
# Its admission webhooks, registered against the local manager by the harness (rewritten to a loopback URL).
if [ ! -f "$cache/crds/cluster-api-webhooks.yaml" ]; then
  dir="$(cd "$here/go" && GOFLAGS= go mod download -json "sigs.k8s.io/cluster-api@$CLUSTER_API_VERSION" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')"
  cp "$dir/core/config/webhook/manifests.yaml" "$cache/crds/.cluster-api-webhooks.yaml.tmp"
  chmod u+w "$cache/crds/.cluster-api-webhooks.yaml.tmp"
  mv "$cache/crds/.cluster-api-webhooks.yaml.tmp" "$cache/crds/cluster-api-webhooks.yaml"
fi
echo "$bin"
