#!/usr/bin/env bash
# Builds (once) the real binaries the test substrate runs: kube-apiserver and etcd, from the published
# Go modules, plus helm for the chart tests and promtool + prometheus for the monitoring tests
# (tests/operating.rs). Results are cached under
#   ${FLEETNET_CACHE:-$HOME/.cache/fleetnet-hub}/bin/<version>/
# and a second run only checks they are there. Prints the directory holding kube-apiserver and etcd
# on its last line (stdout); progress goes to stderr.
#
# KUBEBUILDER_ASSETS (the controller-runtime envtest convention): if it names a directory holding
# kube-apiserver and etcd, nothing is built and that directory is printed.
#
# Usage: install.sh [apiserver|helm|prometheus|promtool|prometheus-operator-crds|all]
#   (default: apiserver = kube-apiserver + etcd)
#   helm, prometheus and promtool print the directory holding that binary (prometheus and promtool
#   share one directory and one build); prometheus-operator-crds the directory holding the
#   ServiceMonitor and PrometheusRule CRDs.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=versions.env
source "$here/versions.env"
what="${1:-apiserver}"
cache="${FLEETNET_CACHE:-$HOME/.cache/fleetnet-hub}"
log() { echo "[testenv/install] $*" >&2; }
# Go's caches live under ours (not ~/.cache/go-build and ~/go), and stay bounded: once every
# binary they built is cached, `all` empties them (about 8 GB after a kube-apiserver build).
export GOCACHE="$cache/go/build" GOMODCACHE="$cache/go/mod"
drop_go_caches() {
  [ -d "$cache/go" ] || return 0
  chmod -R u+w "$cache/go" 2>/dev/null || true
  rm -rf "$cache/go"
}

# Test binaries run at once and each may ask for a build: one install at a time, the others
# wait and then find the cache filled (two builds in one work directory clobbered each other).
mkdir -p "$cache"
if command -v flock >/dev/null 2>&1; then
  exec 9>"$cache/.install.lock"
  flock 9
fi

need_go() {
  if ! command -v go >/dev/null 2>&1; then
    log "ERROR: Go is not installed or not on PATH. The test substrate builds kube-apiserver and etcd"
    log "from the published Go modules; install Go 1.26.x (https://go.dev/doc/install) or point"
    log "KUBEBUILDER_ASSETS at a directory holding kube-apiserver and etcd (envtest binaries)."
    exit 1
  fi
}

# A fresh module per build, in the cache, so nothing lands in the repository.
workdir() {
  local d="$cache/build/$1"
  rm -rf "$d"
  mkdir -p "$d"
  echo "$d"
}

build_kube_apiserver() {
  local out="$1"
  [ -x "$out/kube-apiserver" ] && return 0
  need_go
  local d; d="$(workdir "kube-apiserver-$KUBERNETES_VERSION")"
  local staging="v0.${KUBERNETES_VERSION#v1.}"
  log "building kube-apiserver $KUBERNETES_VERSION (first time only: about 6-8 minutes on 2 cores)"
  local gomod
  gomod="$(cd "$d" && GOFLAGS=-mod=mod go mod download -json "k8s.io/kubernetes@$KUBERNETES_VERSION" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')"
  [ -f "$gomod" ] || { log "ERROR: could not download k8s.io/kubernetes@$KUBERNETES_VERSION go.mod"; exit 1; }
  {
    echo "module fleetnet-testenv/kube-apiserver"
    echo
    echo "go $(go env GOVERSION | sed -E 's/^go([0-9]+\.[0-9]+).*/\1/')"
    echo
    echo "require k8s.io/kubernetes $KUBERNETES_VERSION"
    echo
    # k8s.io/kubernetes replaces each staging module with ./staging/...; map each to its published tag.
    grep -E '^[[:space:]]*k8s\.io/[a-z0-9-]+ => \./staging/' "$gomod" | awk -v v="$staging" '{print "replace " $1 " => " $1 " " v}'
  } > "$d/go.mod"
  cat > "$d/tools.go" <<'GO'
//go:build tools

package tools

import _ "k8s.io/kubernetes/cmd/kube-apiserver"
GO
  (cd "$d" && go mod tidy -e >&2 2>"$d/tidy.log" || true)
  local major="${KUBERNETES_VERSION#v}"; major="${major%%.*}"
  local minor="${KUBERNETES_VERSION#v*.}"; minor="${minor%%.*}"
  (cd "$d" && go get "k8s.io/kubernetes/cmd/kube-apiserver@$KUBERNETES_VERSION" >&2 2>>"$d/tidy.log" || true)
  local ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$KUBERNETES_VERSION -X k8s.io/component-base/version.gitMajor=$major -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/client-go/pkg/version.gitVersion=$KUBERNETES_VERSION"
  mkdir -p "$out"
  # The field manager recorded in managedFields is the binary name: it must be exactly kube-apiserver.
  (cd "$d" && CGO_ENABLED=0 GOEXPERIMENT="$GO_EXPERIMENT_FOR_APISERVER" go build -trimpath -ldflags "$ldflags" \
      -o "$out/kube-apiserver.tmp" k8s.io/kubernetes/cmd/kube-apiserver) || {
    log "ERROR: building kube-apiserver failed; module setup log: $d/tidy.log"; exit 1; }
  mv "$out/kube-apiserver.tmp" "$out/kube-apiserver"
  log "kube-apiserver built: $out/kube-apiserver"
}

build_etcd() {
  local out="$1"
  [ -x "$out/etcd" ] && return 0
  need_go
  local d; d="$(workdir "etcd-$ETCD_VERSION")"
  log "building etcd $ETCD_VERSION (first time only: under a minute)"
  cat > "$d/go.mod" <<GOMOD
module fleetnet-testenv/etcd

go $(go env GOVERSION | sed -E 's/^go([0-9]+\.[0-9]+).*/\1/')

require go.etcd.io/etcd/server/v3 $ETCD_VERSION
GOMOD
  cat > "$d/main.go" <<'GO'
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
GO
  (cd "$d" && go mod tidy >&2) || { log "ERROR: resolving etcd $ETCD_VERSION modules failed"; exit 1; }
  mkdir -p "$out"
  (cd "$d" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$out/etcd.tmp" .) || {
    log "ERROR: building etcd failed"; exit 1; }
  mv "$out/etcd.tmp" "$out/etcd"
  log "etcd built: $out/etcd"
}

build_helm() {
  local out="$cache/bin/helm-$HELM_VERSION"
  if [ ! -x "$out/helm" ]; then
    need_go
    local d; d="$(workdir "helm-$HELM_VERSION")"
    log "building helm $HELM_VERSION (first time only: a few minutes)"
    local modpath="helm.sh/helm/${HELM_VERSION%%.*}"
    cat > "$d/go.mod" <<GOMOD
module fleetnet-testenv/helm

go $(go env GOVERSION | sed -E 's/^go([0-9]+\.[0-9]+).*/\1/')

require $modpath $HELM_VERSION
GOMOD
    cat > "$d/tools.go" <<GO
//go:build tools

package tools

import _ "$modpath/cmd/helm"
GO
    (cd "$d" && go mod tidy >&2) || { log "ERROR: resolving helm modules failed"; exit 1; }
    mkdir -p "$out"
    (cd "$d" && CGO_ENABLED=0 go build -trimpath \
        -ldflags "-s -w -X $modpath/internal/version.version=$HELM_VERSION" \
        -o "$out/helm.tmp" "$modpath/cmd/helm") || { log "ERROR: building helm failed"; exit 1; }
    mv "$out/helm.tmp" "$out/helm"
    log "helm built: $out/helm"
  fi
  echo "$out"
}

# promtool and prometheus from one module and one `go build` (they share most packages). Without the
# builtinassets tag the server serves its web UI from disk (absent here: the UI pages 404) but the
# HTTP API (/api/v1/query, /api/v1/targets, ...) works, which is all the tests use; remove_all_sd
# drops the cloud service discoveries (AWS, Azure, GCE, ...), only static_configs are used.
# Cold: 6.5 minutes on 2 cores (module downloads included; measured with other builds running).
build_prometheus() {
  local out="$cache/bin/prometheus-$PROMETHEUS_VERSION"
  if [ ! -x "$out/prometheus" ] || [ ! -x "$out/promtool" ]; then
    need_go
    local d; d="$(workdir "prometheus-$PROMETHEUS_VERSION")"
    log "building prometheus + promtool $PROMETHEUS_VERSION (first time only: several minutes)"
    local modpath=github.com/prometheus/prometheus
    cat > "$d/go.mod" <<GOMOD
module fleetnet-testenv/prometheus

go $(go env GOVERSION | sed -E 's/^go([0-9]+\.[0-9]+).*/\1/')

require $modpath $PROMETHEUS_VERSION
GOMOD
    cat > "$d/tools.go" <<GO
//go:build tools

package tools

import (
	_ "$modpath/cmd/prometheus"
	_ "$modpath/cmd/promtool"
)
GO
    (cd "$d" && go mod tidy >&2) || { log "ERROR: resolving prometheus modules failed"; exit 1; }
    local release
    release="$(cat "$(cd "$d" && go list -m -f '{{.Dir}}' "$modpath")/VERSION" 2>/dev/null || echo "$PROMETHEUS_VERSION")"
    mkdir -p "$out.tmp"
    (cd "$d" && CGO_ENABLED=0 go build -trimpath -tags remove_all_sd \
        -ldflags "-s -w -X github.com/prometheus/common/version.Version=$release" \
        -o "$out.tmp/" "$modpath/cmd/prometheus" "$modpath/cmd/promtool") || {
      log "ERROR: building prometheus/promtool failed"; exit 1; }
    mkdir -p "$out"
    mv "$out.tmp/prometheus" "$out.tmp/promtool" "$out/"
    rmdir "$out.tmp"
    log "prometheus + promtool built: $out"
  fi
  echo "$out"
}

# The Prometheus Operator's ServiceMonitor and PrometheusRule CRDs, for the chart test: copied out of
# the Go module (example/prometheus-operator-crd/), which `go mod download` fetches into the module
# cache (a few seconds; nothing is built).
fetch_prometheus_operator_crds() {
  local out="$cache/bin/prometheus-operator-crds-$PROMETHEUS_OPERATOR_VERSION"
  if [ ! -f "$out/monitoring.coreos.com_servicemonitors.yaml" ] || [ ! -f "$out/monitoring.coreos.com_prometheusrules.yaml" ]; then
    need_go
    local d; d="$(workdir "prometheus-operator-$PROMETHEUS_OPERATOR_VERSION")"
    log "fetching the Prometheus Operator CRDs $PROMETHEUS_OPERATOR_VERSION (first time only)"
    local dir
    dir="$(cd "$d" && GOFLAGS=-mod=mod go mod download -json "github.com/prometheus-operator/prometheus-operator@$PROMETHEUS_OPERATOR_VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
    [ -d "$dir/example/prometheus-operator-crd" ] || {
      log "ERROR: could not download github.com/prometheus-operator/prometheus-operator@$PROMETHEUS_OPERATOR_VERSION"; exit 1; }
    mkdir -p "$out"
    for crd in servicemonitors prometheusrules; do
      cp "$dir/example/prometheus-operator-crd/monitoring.coreos.com_$crd.yaml" "$out/"
    done
    chmod 644 "$out"/*.yaml
  fi
  echo "$out"
}

apiserver_dir() {
  if [ -n "${KUBEBUILDER_ASSETS:-}" ]; then
    if [ -x "$KUBEBUILDER_ASSETS/kube-apiserver" ] && [ -x "$KUBEBUILDER_ASSETS/etcd" ]; then
      log "using KUBEBUILDER_ASSETS=$KUBEBUILDER_ASSETS"
      echo "$KUBEBUILDER_ASSETS"
      return 0
    fi
    log "KUBEBUILDER_ASSETS=$KUBEBUILDER_ASSETS lacks kube-apiserver or etcd; building our own"
  fi
  local out="$cache/bin/$KUBERNETES_VERSION-etcd-$ETCD_VERSION"
  local start=$SECONDS
  build_etcd "$out"
  build_kube_apiserver "$out"
  log "binaries ready in $out ($((SECONDS - start)) s)"
  echo "$out"
}

case "$what" in
  apiserver) apiserver_dir ;;
  helm) build_helm ;;
  prometheus|promtool) build_prometheus ;;
  prometheus-operator-crds) fetch_prometheus_operator_crds ;;
  all) build_helm >/dev/null; build_prometheus >/dev/null; fetch_prometheus_operator_crds >/dev/null; apiserver_dir; drop_go_caches ;;
  *) log "usage: install.sh [apiserver|helm|prometheus|promtool|prometheus-operator-crds|all]"; exit 2 ;;
esac
