#!/usr/bin/env bash
# End-to-end test of the container image and the Helm chart on kind: one hub and two member
# clusters, fleetnet-hub installed in the hub by charts/fleetnet-hub, then the SAME e2e test binary
# CI runs (cargo test --test e2e -- e2e_kind::), pointed at these clusters.
#
# FOR MACHINES WITH DOCKER ONLY. It has NOT been run on the project's own development and CI
# machines: they have no Docker daemon and cannot pull container images (kindest/node, the rust and
# distroless base images), so CI runs the e2e tests against its own local apiservers instead.
# Needs: docker (running), kind, kubectl, cargo; helm from PATH, else built by
# tests/testenv/install.sh helm (needs Go).
#
# Steps:
#   1. kind clusters  <prefix>-hub, <prefix>-member-1, <prefix>-member-2 (admin kubeconfigs in a
#      temp dir; ~/.kube/config is not touched);
#   2. docker build of the image, `kind load` into the hub;
#   3. CRDs: ServiceExport into each member, InternalServiceExport into the hub (the chart's crds/);
#   4. member RBAC: charts/fleetnet-hub-member.yaml in each member; a token-based kubeconfig per
#      member whose server is the member's kind control-plane container IP on the kind docker network
#      (reachable from the hub's pods) and whose CA is the member's;
#   5. the hub Secret fleetnet-member-kubeconfigs (one key <member>.yaml per member), then
#      `helm install` with members: [member-1, member-2] and createMemberNamespaces: true, and a wait
#      for the rollout and the leader Lease;
#   6. FLEETNET_E2E_HUB_KUBECONFIG=<hub admin kubeconfig> FLEETNET_E2E_MEMBER_KUBECONFIG_DIR=<dir of
#      <member>.yaml admin kubeconfigs> FLEETNET_E2E_EXTERNAL_CONTROLLER=1 (the controller already runs
#      in the hub: the tests must not start one) cargo test --test e2e -- e2e_kind:: --test-threads=1
#   7. on exit the clusters are deleted (FLEETNET_KIND_KEEP=1 keeps them and prints how to reach them).
#
# Environment:
#   FLEETNET_KIND_PREFIX  cluster name prefix (default fleetnet-e2e)
#   FLEETNET_KIND_KEEP    1 = keep the clusters and the temp dir on exit
#   FLEETNET_E2E_IMAGE    image name:tag (default fleetnet-hub:kind-e2e)
#   FLEETNET_E2E_SKIP_BUILD  1 = use an existing local image of that name
#   KIND_NODE_IMAGE       kindest/node image for all clusters (default: kind's own)
#   KIND_EXPERIMENTAL_DOCKER_NETWORK  the docker network kind uses (default kind)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
prefix="${FLEETNET_KIND_PREFIX:-fleetnet-e2e}"
keep="${FLEETNET_KIND_KEEP:-0}"
image="${FLEETNET_E2E_IMAGE:-fleetnet-hub:kind-e2e}"
network="${KIND_EXPERIMENTAL_DOCKER_NETWORK:-kind}"
members=(member-1 member-2)
hub_cluster="$prefix-hub"
release=fleetnet-hub
ns=fleetnet-system
kubeconfig_secret=fleetnet-member-kubeconfigs
member_sa=fleetnet-hub

log() { echo "[kind-e2e] $*" >&2; }
die() { log "ERROR: $*"; exit 1; }

for tool in docker kind kubectl cargo; do
  command -v "$tool" >/dev/null 2>&1 || die "$tool is not on PATH (this script needs docker, kind, kubectl and cargo)"
done
docker info >/dev/null 2>&1 || die "the Docker daemon is not reachable (docker info failed)"
if command -v helm >/dev/null 2>&1; then
  HELM="$(command -v helm)"
else
  HELM="$(bash "$root/tests/testenv/install.sh" helm | tail -n 1)/helm"
fi

work="$(mktemp -d)"
mkdir -p "$work/admin" "$work/members" "$work/hub-kubeconfigs"
chmod 700 "$work"
hub_kc="$work/admin/hub.yaml"
created=()

member_cluster() { echo "$prefix-$1"; }

diagnostics() {
  [ -f "$hub_kc" ] || return 0
  log "diagnostics from the hub:"
  kubectl --kubeconfig "$hub_kc" -n "$ns" get deploy,pods,lease,secret -o wide >&2 || true
  kubectl --kubeconfig "$hub_kc" -n "$ns" describe pods -l app.kubernetes.io/name=fleetnet-hub >&2 || true
  kubectl --kubeconfig "$hub_kc" -n "$ns" logs -l app.kubernetes.io/name=fleetnet-hub --all-containers --prefix --tail=200 >&2 || true
  kubectl --kubeconfig "$hub_kc" get internalserviceexports.networking.fleet.azure.com -A >&2 || true
}

cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  if [ "$rc" -ne 0 ]; then
    diagnostics
  fi
  if [ "$keep" = 1 ]; then
    log "keeping clusters ${created[*]:-} and $work (FLEETNET_KIND_KEEP=1):"
    log "  hub:     kubectl --kubeconfig $hub_kc ..."
    log "  members: $work/members/<member>.yaml"
  else
    local c
    for c in ${created[@]+"${created[@]}"}; do
      kind delete cluster --name "$c" >/dev/null 2>&1 || log "could not delete kind cluster $c"
    done
    rm -rf "$work"
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- 1. clusters -----------------------------------------------------------------------------------
create_cluster() {  # create_cluster NAME KUBECONFIG
  local name="$1" kc="$2"
  if kind get clusters 2>/dev/null | grep -qx "$name"; then
    die "kind cluster $name already exists; delete it (kind delete cluster --name $name) or set FLEETNET_KIND_PREFIX"
  fi
  log "creating kind cluster $name"
  created+=("$name")
  kind create cluster --name "$name" --kubeconfig "$kc" --wait 180s ${KIND_NODE_IMAGE:+--image "$KIND_NODE_IMAGE"} >&2
}
create_cluster "$hub_cluster" "$hub_kc"
for m in "${members[@]}"; do
  create_cluster "$(member_cluster "$m")" "$work/members/$m.yaml"
done

# --- 2. image --------------------------------------------------------------------------------------
if [ "${FLEETNET_E2E_SKIP_BUILD:-0}" != 1 ]; then
  log "building $image"
  DOCKER_BUILDKIT=1 docker build -t "$image" "$root" >&2
fi
log "loading $image into $hub_cluster"
kind load docker-image "$image" --name "$hub_cluster" >&2

# --- 3. CRDs ---------------------------------------------------------------------------------------
crds="$root/charts/fleetnet-hub/crds"
kubectl --kubeconfig "$hub_kc" apply --server-side -f "$crds/networking.fleet.azure.com_internalserviceexports.yaml" >&2
kubectl --kubeconfig "$hub_kc" apply --server-side -f "$crds/networking.fleet.azure.com_endpointsliceexports.yaml" >&2
for m in "${members[@]}"; do
  kubectl --kubeconfig "$work/members/$m.yaml" apply --server-side -f "$crds/networking.fleet.azure.com_serviceexports.yaml" >&2
done
kubectl --kubeconfig "$hub_kc" wait --for condition=Established --timeout 60s crd/internalserviceexports.networking.fleet.azure.com crd/endpointsliceexports.networking.fleet.azure.com >&2
for m in "${members[@]}"; do
  kubectl --kubeconfig "$work/members/$m.yaml" wait --for condition=Established --timeout 60s crd/serviceexports.networking.fleet.azure.com >&2
done

# --- 4. member RBAC and token kubeconfigs ----------------------------------------------------------
# write_kubeconfig MEMBER SERVER CA TOKEN FILE: a token kubeconfig, readable only by its owner.
write_kubeconfig() {
  (
    umask 077
    cat >"$5" <<KUBECONFIG
apiVersion: v1
kind: Config
clusters:
  - name: $1
    cluster:
      server: $2
      certificate-authority-data: $3
users:
  - name: $member_sa
    user:
      token: $4
contexts:
  - name: $1
    context:
      cluster: $1
      user: $member_sa
current-context: $1
KUBECONFIG
  )
}
for m in "${members[@]}"; do
  mkc="$work/members/$m.yaml"
  cluster="$(member_cluster "$m")"
  log "member $m: RBAC (charts/fleetnet-hub-member.yaml) and token kubeconfig"
  kubectl --kubeconfig "$mkc" apply -f "$root/charts/fleetnet-hub-member.yaml" >&2
  # A bound, expiring token (the manifest creates no legacy token Secret), as its README says.
  token="$(kubectl --kubeconfig "$mkc" -n "$ns" create token "$member_sa" --duration=2h)"
  [ -n "$token" ] || die "member $m: kubectl create token $member_sa returned nothing"
  ca="$(kubectl --kubeconfig "$mkc" config view --raw --minify -o jsonpath='{.clusters[0].cluster.certificate-authority-data}')"
  ip="$(docker inspect -f "{{with index .NetworkSettings.Networks \"$network\"}}{{.IPAddress}}{{end}}" "$cluster-control-plane")"
  [ -n "$ip" ] || die "member $m: no IP of $cluster-control-plane on docker network $network"
  # kind's apiserver certificate carries the node IP, so TLS verifies against this address.
  write_kubeconfig "$m" "https://$ip:6443" "$ca" "$token" "$work/hub-kubeconfigs/$m.yaml"
  # Check the granted RBAC with the same token through the host-side address of the apiserver.
  host_server="$(kubectl --kubeconfig "$mkc" config view --minify -o jsonpath='{.clusters[0].cluster.server}')"
  write_kubeconfig "$m" "$host_server" "$ca" "$token" "$work/token-$m.yaml"
  for check in "watch serviceexports.networking.fleet.azure.com" "patch serviceexports.networking.fleet.azure.com" \
               "patch serviceexports.networking.fleet.azure.com --subresource=status" "list services" \
               "create events.events.k8s.io" "patch events.events.k8s.io"; do
    # shellcheck disable=SC2086 # "verb resource" on purpose
    [ "$(kubectl --kubeconfig "$work/token-$m.yaml" auth can-i $check --all-namespaces 2>/dev/null)" = yes ] \
      || die "member $m: the token cannot $check"
  done
  for check in "create services" "delete serviceexports.networking.fleet.azure.com" "get secrets" \
               "update serviceexports.networking.fleet.azure.com" "create events"; do
    # shellcheck disable=SC2086
    [ "$(kubectl --kubeconfig "$work/token-$m.yaml" auth can-i $check --all-namespaces 2>/dev/null || true)" = no ] \
      || die "member $m: the token can $check (more than the member ClusterRole grants)"
  done
done

# --- 5. hub: Secret, chart -------------------------------------------------------------------------
kubectl --kubeconfig "$hub_kc" create namespace "$ns" >&2
secret_args=()
for m in "${members[@]}"; do
  secret_args+=("--from-file=$m.yaml=$work/hub-kubeconfigs/$m.yaml")
done
kubectl --kubeconfig "$hub_kc" -n "$ns" create secret generic "$kubeconfig_secret" "${secret_args[@]}" >&2

member_list="$(IFS=,; echo "${members[*]}")"
cat >"$work/values.yaml" <<VALUES
image:
  repository: ${image%:*}
  tag: ${image##*:}
  pullPolicy: Never
members: [$member_list]
createMemberNamespaces: true
memberKubeconfigSecrets:
  - name: $kubeconfig_secret
logging:
  format: text
  level: info,fleetnet_hub=debug
VALUES
log "helm install $release into $hub_cluster"
"$HELM" install "$release" "$root/charts/fleetnet-hub" --kubeconfig "$hub_kc" --namespace "$ns" \
  -f "$work/values.yaml" --wait --timeout 5m >&2
kubectl --kubeconfig "$hub_kc" -n "$ns" rollout status "deploy/$release" --timeout 180s >&2
for _ in $(seq 1 90); do
  holder="$(kubectl --kubeconfig "$hub_kc" -n "$ns" get lease "$release" -o jsonpath='{.spec.holderIdentity}' 2>/dev/null || true)"
  [ -n "$holder" ] && break
  sleep 1
done
[ -n "${holder:-}" ] || die "no leader: Lease $ns/$release has no holder after 90 s"
log "leader: $holder"

# --- 6. the e2e tests, against the running controller ----------------------------------------------
log "cargo test --test e2e -- e2e_kind:: (FLEETNET_E2E_EXTERNAL_CONTROLLER=1)"
(
  cd "$root"
  FLEETNET_E2E_HUB_KUBECONFIG="$hub_kc" \
  FLEETNET_E2E_MEMBER_KUBECONFIG_DIR="$work/members" \
  FLEETNET_E2E_EXTERNAL_CONTROLLER=1 \
    cargo test --test e2e -- e2e_kind:: --test-threads=1
)
log "passed"
