#!/usr/bin/env bash
# Builds fleet-networking's reference member agents (member-net-controller-manager,
# mcs-controller-manager and, when it builds, hub-net-controller-manager) for
# `fleetnet-bench --agents` (issue #44's side-by-side benchmark) ONLY.
#
# CI has no checkout of fleet-networking or fleet: this script is run by hand on a machine
# that has git directories of both repositories. Their code is never committed here; it is
# exported with `git archive` into a temporary directory that is removed afterwards.
#
# The Go module proxy refuses go.goms.io/fleet, so the fleet tree (tag v0.14.0, the version
# fleet-networking's go.mod requires) is put in with `go mod edit -replace`.
#
# Usage: build.sh FLEET_NETWORKING_GIT_DIR FLEET_GIT_DIR [OUT_DIR]
#   OUT_DIR defaults to $HOME/.cache/fleetnet-hub/reference-agents
# Optional env: FLEET_NETWORKING_REV (default HEAD), FLEET_REV (default v0.14.0).
set -euo pipefail

if [ $# -lt 2 ]; then
  echo "usage: $0 FLEET_NETWORKING_GIT_DIR FLEET_GIT_DIR [OUT_DIR]" >&2
  exit 2
fi
NET_GIT=$1
FLEET_GIT=$2
OUT=${3:-$HOME/.cache/fleetnet-hub/reference-agents}
NET_REV=${FLEET_NETWORKING_REV:-HEAD}
FLEET_REV=${FLEET_REV:-v0.14.0}
PATH=$PATH:/usr/local/go/bin

export GOCACHE=$HOME/.cache/fleetnet-hub/go/build
export GOMODCACHE=$HOME/.cache/fleetnet-hub/go/mod
export GOFLAGS="-mod=mod -buildvcs=false"
export GOTOOLCHAIN=local
export CGO_ENABLED=0
mkdir -p "$OUT" "$GOCACHE" "$GOMODCACHE"

WORK=$(mktemp -d)
trap 'chmod -R u+w "$WORK" 2>/dev/null; rm -rf "$WORK"' EXIT
mkdir -p "$WORK/fleet-networking" "$WORK/fleet"
git --git-dir="$NET_GIT" archive "$NET_REV" | tar -x -C "$WORK/fleet-networking"
git --git-dir="$FLEET_GIT" archive "$FLEET_REV" | tar -x -C "$WORK/fleet"
echo "fleet-networking $(git --git-dir="$NET_GIT" rev-parse "$NET_REV"), fleet $(git --git-dir="$FLEET_GIT" rev-parse "$FLEET_REV^{commit}")"

cd "$WORK/fleet-networking"
go mod edit -replace "go.goms.io/fleet=$WORK/fleet"

status=0
for cmd in member-net-controller-manager mcs-controller-manager hub-net-controller-manager; do
  echo "building $cmd"
  if go build -trimpath -o "$OUT/$cmd" "./cmd/$cmd"; then
    echo "built $OUT/$cmd"
  elif [ "$cmd" = hub-net-controller-manager ]; then
    echo "warning: $cmd did not build (optional)" >&2
  else
    echo "error: $cmd did not build" >&2
    status=1
  fi
done
exit $status
