#!/usr/bin/env bash
# Builds what a real node of the management cluster needs, for the install test only (npm start never does):
# kubelet and kube-proxy from the Kubernetes module (go/, a wrapper module of its own so the main test bed's
# cache key stays), CoreDNS with only the plugins its Corefile uses (coredns/, its own wrapper module: the stock
# build's cloud SDKs took 15 minutes cold), a pause binary for pod sandboxes, and OCI image archives of
# pause, CoreDNS and the test bed's Cluster API manager to import into containerd (no registry can be pulled).
# Cached like the test bed by a key of what went in; a second run is a no-op. Prints the folder on its last line.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=../versions.env
source "$here/../versions.env"
# shellcheck source=versions.env
source "$here/versions.env"

command -v go >/dev/null || { echo "node test bed: Go 1.26+ is required" >&2; exit 1; }
testbed_bin="$(bash "$here/../build.sh" | tail -n 1)"
settings() { grep -hv '^[[:space:]]*#' "$here/../versions.env" "$here/versions.env"; }
key="$( {
  settings
  cat "$here/go/go.mod" "$here/go/go.sum" "$here/go/pause/main.go"
  cat "$here/coredns/go.mod" "$here/coredns/go.sum" "$here/coredns/main.go"
} | sha256sum | cut -c1-12)"
cache="${KINDLING_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/kindling}/node-$KUBERNETES_VERSION-$key"
bin="$cache/bin"
images="$cache/images"
mkdir -p "$bin" "$images"
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=mod

log() { printf '[node test bed] %s\n' "$*" >&2; }

# The node's runtime and network come from Debian: containerd (1.6: the 1.36 kubelet falls back from the CRI
# RuntimeConfig call it lacks), runc, the CNI plugins (bridge, host-local, loopback, portmap) and iptables for
# kube-proxy. Installed when missing, as scripts/setup.js installs the other tests' packages.
missing=()
for pkg in containerd runc containernetworking-plugins iptables; do
  dpkg-query --show --showformat='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
  [ "$(id -u)" = 0 ] || { echo "node test bed: run: sudo apt-get install -y ${missing[*]}" >&2; exit 1; }
  log "installing ${missing[*]}…"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >&2 ||
    { apt-get update -q >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >&2; }
fi
minor="${KUBERNETES_VERSION#v1.}"; minor="${minor%%.*}"
ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$KUBERNETES_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/component-base/version.gitTreeState=clean"

# build NAME MODULE PACKAGE LDFLAGS: PACKAGE of the wrapper module in folder MODULE, once per cache.
build() {
  local name="$1" module="$2" pkg="$3" flags="$4" start=$SECONDS
  [ -x "$bin/$name" ] && return 0
  log "building $name ($pkg)…"
  (cd "$here/$module" && go build -trimpath -ldflags "$flags" -o "$bin/.$name.tmp" "$pkg")
  mv "$bin/.$name.tmp" "$bin/$name"
  log "built $name in $((SECONDS - start)) s"
}

build kubelet go k8s.io/kubernetes/cmd/kubelet "$ldflags"
build kube-proxy go k8s.io/kubernetes/cmd/kube-proxy "$ldflags"
build pause go ./pause "$ldflags"
build coredns coredns . "-s -w"

# oci_image NAME BINARY ENTRYPOINT USER: a one-layer OCI archive (reproducible: fixed times and owners) holding
# BINARY at /ENTRYPOINT and an empty /tmp, named NAME for `ctr images import`.
oci_image() {
  local name="$1" binary="$2" entry="$3" user="$4" out="$images/${1//[:\/]/_}.tar"
  [ -f "$out" ] && return 0
  local work; work="$(mktemp -d)"
  mkdir -p "$work/rootfs/tmp" "$work/layout/blobs/sha256"
  chmod 1777 "$work/rootfs/tmp"
  cp "$binary" "$work/rootfs/$entry"
  tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$work/rootfs" -cf "$work/layer.tar" .
  blob() { local d; d="$(sha256sum "$1" | cut -c1-64)"; mv "$1" "$work/layout/blobs/sha256/$d"; echo "$d"; }
  size() { stat -c %s "$work/layout/blobs/sha256/$1"; }
  local layer config manifest
  layer="$(blob "$work/layer.tar")"
  printf '{"architecture":"amd64","os":"linux","config":{"Entrypoint":["/%s"],"User":"%s","WorkingDir":"/"},"rootfs":{"type":"layers","diff_ids":["sha256:%s"]}}' \
    "$entry" "$user" "$layer" >"$work/config.json"
  config="$(blob "$work/config.json")"
  printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:%s","size":%s},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar","digest":"sha256:%s","size":%s}]}' \
    "$config" "$(size "$config")" "$layer" "$(size "$layer")" >"$work/manifest.json"
  manifest="$(blob "$work/manifest.json")"
  printf '{"schemaVersion":2,"manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:%s","size":%s,"annotations":{"io.containerd.image.name":"%s","org.opencontainers.image.ref.name":"%s"}}]}' \
    "$manifest" "$(size "$manifest")" "$name" "${name##*:}" >"$work/layout/index.json"
  echo '{"imageLayoutVersion":"1.0.0"}' >"$work/layout/oci-layout"
  tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$work/layout" -cf "$out.tmp" .
  mv "$out.tmp" "$out"
  rm -rf "$work"
  log "image $name"
}

oci_image "$PAUSE_IMAGE" "$bin/pause" pause 65535
oci_image "$COREDNS_IMAGE" "$bin/coredns" coredns 0
oci_image "$CAPI_MANAGER_IMAGE" "$(readlink -f "$testbed_bin/capi-manager")" manager 65532
echo "$cache"
